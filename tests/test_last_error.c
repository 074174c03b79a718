/* ncclGetLastError's message (base/debug.c): the last WARN, except that a
 * communicator's failure, pinned as its call returns it, is not replaced
 * by a helper thread's WARN (a socket thread finding the dead peer's
 * connection closed), only by another thread's WARN or a new record. The
 * helper here is a real thread marked as socket helpers mark theirs. */
#include <check.h>
#include <pthread.h>
#include <string.h>

#include "base/debug.h"
#include "suite_run.h"

static void *helper_warns(void *arg) {
  weft_log_set_helper();
  WARN("%s", (const char *)arg);
  return NULL;
}

static void warn_from_helper(const char *msg) {
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, helper_warns, (void *)msg), 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0);
}

START_TEST(test_pinned_survives_helpers) {
  weft_pin_last_error("rank %d: communicator %s failed: rank %d died", 0, "abc", 3);
  warn_from_helper("net/socket: connection with 127.0.0.1 closed by the peer while sending");
  ck_assert_str_eq(weft_last_error(), "rank 0: communicator abc failed: rank 3 died");
}
END_TEST

START_TEST(test_caller_warn_replaces_pinned) {
  weft_pin_last_error("the failure");
  WARN("a new call's error");
  ck_assert_str_eq(weft_last_error(), "a new call's error");
  /* No longer pinned: a helper's WARN is the last error again. */
  warn_from_helper("a helper's error");
  ck_assert_str_eq(weft_last_error(), "a helper's error");
}
END_TEST

START_TEST(test_record_unpins) {
  weft_pin_last_error("the failure");
  weft_set_last_error("ncclFoo is not supported");
  warn_from_helper("a helper's error");
  ck_assert_str_eq(weft_last_error(), "a helper's error");
}
END_TEST

START_TEST(test_helper_warn_unpinned) {
  weft_set_last_error("an old error");
  warn_from_helper("net/ib: port 1 went down");
  ck_assert_str_eq(weft_last_error(), "net/ib: port 1 went down");
}
END_TEST

int main(void) {
  Suite *s = suite_create("last error");
  TCase *tc = tcase_create("pinning");
  tcase_add_test(tc, test_pinned_survives_helpers);
  tcase_add_test(tc, test_caller_warn_replaces_pinned);
  tcase_add_test(tc, test_record_unpins);
  tcase_add_test(tc, test_helper_warn_unpinned);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
