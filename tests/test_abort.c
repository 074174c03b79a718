/* ncclCommAbort where programs really call it (PyTorch's watchdog, error
 * handlers), on host ranks: from another thread while a collective waits
 * on a peer that never joins it; inside a group with the communicator's
 * operations queued; and on a communicator whose peer died while a
 * non-blocking collective was in flight. Each must return promptly (long
 * before WEFT_TIMEOUT, set high here), free the communicator, and make the
 * waiting call return an error instead of hanging. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

/* Far beyond what any case here may take: a test that reaches it failed. */
#define LONG_TIMEOUT "60"
#define PROMPT_S 5.0

struct aborter {
  ncclComm_t comm;
  int delay_ms;
  ncclResult_t res;
  double took;
};

static void *abort_main(void *arg) {
  struct aborter *a = arg;
  harness_sleep_ms(a->delay_ms);
  double t0 = harness_now();
  a->res = ncclCommAbort(a->comm);
  a->took = harness_now() - t0;
  return NULL;
}

/* Rank 0's second all-reduce waits for rank 1, which never calls it; a
 * thread of rank 0 aborts the communicator under it. */
static int thread_abort_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  size_t count = *(size_t *)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank != 0) {
    harness_sleep_ms(2000); /* alive, silent: only the abort can end rank 0's wait */
    HNCCL(ncclCommAbort(comm));
    return 0;
  }
  float *buf = calloc(count, sizeof(float));
  HCHECK(buf != NULL, "out of memory");
  struct aborter a = {.comm = comm, .delay_ms = 300};
  pthread_t t;
  HCHECK(pthread_create(&t, NULL, abort_main, &a) == 0, "pthread_create failed");
  double t0 = harness_now();
  ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
  double took = harness_now() - t0;
  pthread_join(t, NULL);
  free(buf);
  HCHECK(res != ncclSuccess && res != ncclInProgress,
         "the all-reduce under an abort returned %d (%s)", (int)res, ncclGetErrorString(res));
  HCHECK(took < PROMPT_S, "the all-reduce returned %.1f s after it started", took);
  HCHECK(a.res == ncclSuccess, "ncclCommAbort from the other thread -> %d: %s", (int)a.res,
         ncclGetLastError(NULL));
  HCHECK(a.took < PROMPT_S, "ncclCommAbort took %.1f s", a.took);
  return 0;
}

START_TEST(test_abort_from_thread) {
  setenv("WEFT_TIMEOUT", LONG_TIMEOUT, 1);
  /* Small (one message) and large (pipelined, several channels). */
  size_t counts[] = {1, 1 << 20};
  for (int i = 0; i < 2; i++) {
    char why[8192];
    int rc = harness_procs(2, 40, thread_abort_rank, &counts[i], why, sizeof why);
    ck_assert_msg(rc == 0, "count %zu: %s", counts[i], why);
  }
}
END_TEST

/* Inside a group: operations on the aborted communicator are dropped, the
 * other communicator's run at ncclGroupEnd as usual. */
static int group_abort_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, other = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  HNCCL(ncclCommSplit(comm, 0, rank, &other, NULL));
  float x = 1.0f, y = 2.0f;
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclAllReduce(&y, &y, 1, ncclFloat32, ncclSum, other, NULL));
  HNCCL(ncclSend(&x, 1, ncclFloat32, (rank + 1) % nranks, comm, NULL));
  HNCCL(ncclCommAbort(comm));
  HNCCL(ncclGroupEnd());
  HCHECK(x == 1.0f, "the aborted communicator's all-reduce ran (x = %g)", x);
  HCHECK(y == 2.0f * nranks, "the other communicator's all-reduce gave %g", y);
  /* A whole group on one communicator, aborted inside it. */
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(&y, &y, 1, ncclFloat32, ncclSum, other, NULL));
  HNCCL(ncclCommAbort(other));
  HNCCL(ncclGroupEnd());
  return 0;
}

START_TEST(test_abort_in_group) {
  setenv("WEFT_TIMEOUT", LONG_TIMEOUT, 1);
  char why[8192];
  int rc = harness_procs(3, 40, group_abort_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "processes: %s", why);
  rc = harness_threads(2, 40, group_abort_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "threads: %s", why);
}
END_TEST

/* Non-blocking communicator: rank 1 dies; rank 0's collective either fails
 * or reports through ncclCommGetAsyncError, and abort returns promptly. */
static int nonblocking_dead_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  ncclResult_t res = harness_init_nonblocking(&comm, nranks, id, rank);
  HCHECK(res == ncclSuccess || res == ncclInProgress, "init -> %d", (int)res);
  ncclResult_t st = ncclInProgress;
  HNCCL(harness_poll_async(comm, 20, &st));
  HCHECK(st == ncclSuccess, "init ended with %d", (int)st);
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank == 1) {
    /* Gone as a crash leaves it (its links closed), but with the init
     * thread joined, so the thread sanitizer sees no leak. */
    (void)ncclCommAbort(comm);
    _exit(0);
  }
  float buf[64] = {0};
  double t0 = harness_now();
  res = ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, NULL);
  st = res;
  if (res == ncclSuccess || res == ncclInProgress) {
    HNCCL(harness_poll_async(comm, 20 - (harness_now() - t0), &st));
  }
  HCHECK(st != ncclSuccess && st != ncclInProgress, "all-reduce with rank 1 dead: %d, async %d",
         (int)res, (int)st);
  HCHECK(harness_now() - t0 < PROMPT_S, "the failure took %.1f s", harness_now() - t0);
  t0 = harness_now();
  HNCCL(ncclCommAbort(comm));
  HCHECK(harness_now() - t0 < PROMPT_S, "ncclCommAbort took %.1f s", harness_now() - t0);
  return 0;
}

START_TEST(test_abort_nonblocking_dead_peer) {
  setenv("WEFT_TIMEOUT", LONG_TIMEOUT, 1);
  char why[8192];
  int rc = harness_procs(2, 40, nonblocking_dead_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("abort");
  TCase *tc = tcase_create("abort");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_abort_from_thread);
  tcase_add_test(tc, test_abort_in_group);
  tcase_add_test(tc, test_abort_nonblocking_dead_peer);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
