/* How rank-threads of one process leave a communicator in step
 * (src/exec/cuda_leave.c), without a GPU: real threads stand for the
 * ranks, each telling how many collectives, and sends and receives with
 * each other rank, it has launched. A leaving rank waits until every other
 * has launched as many, and its side of every send and receive, or is
 * leaving too; one thread that launched for every rank never waits; a
 * rank still behind at the timeout is named in the WARN; abort does not
 * wait. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "base/debug.h"
#include "exec/cuda_leave.h"
#include "suite_run.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void nap_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Rank index leaves after ncolls launches; the wait must not hold it (at
 * most 5 s, against a 10 s timeout). */
static void leave_at_once(struct weft_cuda_leave *l, int index, uint64_t ncolls, int abort,
                          const char *what) {
  double t0 = now_s();
  weft_cuda_leave_wait(l, index, ncolls, abort, 10.0);
  ck_assert_msg(now_s() - t0 < 5.0, "%s: waited %.1f s", what, now_s() - t0);
}

struct late {
  struct weft_cuda_leave *l;
  atomic_int launched_last; /* set just before the late rank's last launch is told */
};

static void *late_rank(void *arg) {
  struct late *lt = arg;
  weft_cuda_leave_issued(lt->l, 1, 4);
  nap_ms(200);
  atomic_store(&lt->launched_last, 1);
  weft_cuda_leave_issued(lt->l, 1, 5);
  weft_cuda_leave_wait(lt->l, 1, 5, 0, 10.0);
  weft_cuda_leave_release(lt->l, 1);
  return NULL;
}

START_TEST(test_waits_for_late_launch) {
  const int ranks[3] = {0, 1, 2};
  struct late lt = {weft_cuda_leave_new(3, ranks), 0};
  ck_assert_ptr_nonnull(lt.l);
  weft_cuda_leave_issued(lt.l, 2, 5); /* rank 2 is on time */
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, late_rank, &lt), 0);
  weft_cuda_leave_issued(lt.l, 0, 5);
  weft_cuda_leave_wait(lt.l, 0, 5, 0, 10.0);
  int waited = atomic_load(&lt.launched_last);
  weft_cuda_leave_release(lt.l, 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0); /* before any assertion can end the test */
  weft_cuda_leave_release(lt.l, 2); /* the last reference: freed (ASan sees a leak if not) */
  ck_assert_msg(waited == 1, "rank 0 left before rank 1 had launched its last collective");
}
END_TEST

static void *late_receiver(void *arg) {
  struct late *lt = arg;
  nap_ms(200);
  atomic_store(&lt->launched_last, 1);
  weft_cuda_leave_p2p(lt->l, 1, 0); /* its receive from rank 0 */
  weft_cuda_leave_wait(lt->l, 1, 0, 0, 10.0);
  weft_cuda_leave_release(lt->l, 1);
  return NULL;
}

START_TEST(test_waits_for_late_receive) {
  /* No collective at all: rank 0's send to rank 1 (and one to itself,
   * which counts for nobody) ended; rank 1 is late to receive it. */
  const int ranks[2] = {0, 1};
  struct late lt = {weft_cuda_leave_new(2, ranks), 0};
  ck_assert_ptr_nonnull(lt.l);
  weft_cuda_leave_p2p(lt.l, 0, 0);
  weft_cuda_leave_p2p(lt.l, 0, 1);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, late_receiver, &lt), 0);
  weft_cuda_leave_wait(lt.l, 0, 0, 0, 10.0);
  int waited = atomic_load(&lt.launched_last);
  weft_cuda_leave_release(lt.l, 0);
  ck_assert_int_eq(pthread_join(t, NULL), 0); /* before any assertion can end the test */
  ck_assert_msg(waited == 1, "rank 0 left before rank 1 had launched the receive of its send");
}
END_TEST

START_TEST(test_one_thread_never_waits) {
  /* ncclCommInitAll's pattern: one thread launched every rank's calls,
   * then destroys them one after the other. */
  const int ranks[4] = {0, 1, 2, 3};
  struct weft_cuda_leave *l = weft_cuda_leave_new(4, ranks);
  ck_assert_ptr_nonnull(l);
  for (int i = 0; i < 4; i++) {
    weft_cuda_leave_issued(l, i, 7);
    /* An all-to-all: a send to and a receive from every other rank. */
    for (int j = 0; j < 4; j++)
      if (j != i) weft_cuda_leave_p2p(l, i, j), weft_cuda_leave_p2p(l, i, j);
  }
  for (int i = 0; i < 4; i++) {
    leave_at_once(l, i, 7, 0, "destroying 4 ranks from one thread");
    weft_cuda_leave_release(l, i);
  }
}
END_TEST

START_TEST(test_leaving_peer_counts) {
  /* A peer behind in count but leaving (its last launch ended: a failed
   * call launched nothing) does not hold the others. */
  const int ranks[2] = {4, 6};
  struct weft_cuda_leave *l = weft_cuda_leave_new(2, ranks);
  ck_assert_ptr_nonnull(l);
  weft_cuda_leave_issued(l, 0, 3);
  weft_cuda_leave_issued(l, 1, 2);
  weft_cuda_leave_wait(l, 1, 2, 0, 10.0);
  leave_at_once(l, 0, 3, 0, "a rank that was leaving");
  weft_cuda_leave_release(l, 1);
  weft_cuda_leave_release(l, 0);
}
END_TEST

START_TEST(test_timeout_names_the_late) {
  const int ranks[3] = {0, 3, 5};
  struct weft_cuda_leave *l = weft_cuda_leave_new(3, ranks);
  ck_assert_ptr_nonnull(l);
  weft_cuda_leave_issued(l, 0, 9);
  weft_cuda_leave_issued(l, 1, 9);
  weft_cuda_leave_issued(l, 2, 8); /* rank 5 never launches its last */
  weft_cuda_leave_wait(l, 0, 9, 0, 0.3);
  const char *why = weft_last_error();
  ck_assert_msg(strstr(why, "rank(s) 5 ") != NULL && strstr(why, "WEFT_TIMEOUT") != NULL,
                "the timeout's WARN does not name rank 5: %s", why);
  weft_cuda_leave_release(l, 0);
  weft_cuda_leave_release(l, 1);
  weft_cuda_leave_release(l, 2);
}
END_TEST

START_TEST(test_abort_does_not_wait) {
  const int ranks[2] = {0, 1};
  struct weft_cuda_leave *l = weft_cuda_leave_new(2, ranks);
  ck_assert_ptr_nonnull(l);
  weft_cuda_leave_issued(l, 0, 1);
  leave_at_once(l, 0, 1, 1, "an abort");
  weft_cuda_leave_release(l, 0);
  weft_cuda_leave_release(l, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("cuda leave");
  TCase *tc = tcase_create("leave");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_waits_for_late_launch);
  tcase_add_test(tc, test_waits_for_late_receive);
  tcase_add_test(tc, test_one_thread_never_waits);
  tcase_add_test(tc, test_leaving_peer_counts);
  tcase_add_test(tc, test_timeout_names_the_late);
  tcase_add_test(tc, test_abort_does_not_wait);
  suite_add_tcase(s, tc);
  return suite_run_nofork(s);
}
