/* The end of a GPU suite's main: Check runs the suite in this process
 * (CK_NOFORK: CUDA is initialized before Check would fork, and a forked
 * child cannot use it), verbosely, and main returns 0 when every test
 * passed. */
#ifndef WEFT_TESTS_SUITE_RUN_H
#define WEFT_TESTS_SUITE_RUN_H

#include <check.h>

static inline int suite_run_nofork(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_VERBOSE);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}

#endif
