/* The end of a suite's main: Check runs the suite, and main returns 0 when
 * every test passed. */
#ifndef WEFT_TESTS_SUITE_RUN_H
#define WEFT_TESTS_SUITE_RUN_H

#include <check.h>

/* Check's own fork status: each test in a child unless CK_FORK=no. */
#define SUITE_FORK_DEFAULT (-1)

/* Runs s with fork status fork (CK_FORK, CK_NOFORK or SUITE_FORK_DEFAULT),
 * printing at verbosity. */
static inline int suite_run_with(Suite *s, int fork, enum print_output verbosity) {
  SRunner *sr = srunner_create(s);
  if (fork != SUITE_FORK_DEFAULT) srunner_set_fork_status(sr, (enum fork_status)fork);
  srunner_run_all(sr, verbosity);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}

/* A host suite: Check's fork status, the normal output. */
static inline int suite_run(Suite *s) {
  return suite_run_with(s, SUITE_FORK_DEFAULT, CK_NORMAL);
}

/* A GPU suite: in this process (CK_NOFORK: CUDA is initialized before
 * Check would fork, and a forked child cannot use it), verbosely. */
static inline int suite_run_nofork(Suite *s) {
  return suite_run_with(s, CK_NOFORK, CK_VERBOSE);
}

#endif
