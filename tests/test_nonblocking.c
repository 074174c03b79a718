/* Non-blocking communicators (config.blocking = 0), as PyTorch drives them
 * with TORCH_NCCL_USE_COMM_NONBLOCKING=1: every call may return
 * ncclInProgress, and the program then polls ncclCommGetAsyncError until
 * the state leaves ncclInProgress. Init, collectives, groups, split (with
 * and without a color), shrink and finalize, on host ranks; and a
 * communicator still initializing refuses collectives with a message. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

/* Accepts what a non-blocking call may return, then polls to completion. */
#define NB(comm, call)                                                                      \
  do {                                                                                      \
    ncclResult_t nb_res_ = (call);                                                          \
    HCHECK(nb_res_ == ncclSuccess || nb_res_ == ncclInProgress, "%s -> %d (%s): %s", #call, \
           (int)nb_res_, ncclGetErrorString(nb_res_), ncclGetLastError(NULL));              \
    if ((comm) != NULL) HNCCL(harness_wait_ready(comm));                                    \
  } while (0)

static int sum_check(ncclComm_t comm, int rank, int nranks) {
  int32_t v[4] = {rank, 1, rank, 1};
  NB(comm, ncclAllReduce(v, v, 4, ncclInt32, ncclSum, comm, NULL));
  int32_t want = nranks * (nranks - 1) / 2;
  HCHECK(v[0] == want && v[1] == nranks && v[2] == want && v[3] == nranks,
         "all-reduce gave %d %d %d %d", (int)v[0], (int)v[1], (int)v[2], (int)v[3]);
  return 0;
}

static int nb_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  ncclResult_t res = harness_init_nonblocking(&comm, nranks, id, rank);
  HCHECK(res == ncclSuccess || res == ncclInProgress, "init -> %d", (int)res);
  HCHECK(comm != NULL, "no handle while init is in progress");
  HNCCL(harness_wait_ready(comm));
  if (sum_check(comm, rank, nranks)) return 1;

  /* Grouped collectives and send/recv. */
  int32_t a = rank, b = -1;
  int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(&a, &a, 1, ncclInt32, ncclMax, comm, NULL));
  HNCCL(ncclSend(&rank, 1, ncclInt32, next, comm, NULL));
  HNCCL(ncclRecv(&b, 1, ncclInt32, prev, comm, NULL));
  NB(comm, ncclGroupEnd());
  HCHECK(a == nranks - 1 && b == prev, "group gave max %d, recv %d", (int)a, (int)b);

  /* Split by parity, the last rank out; the child inherits non-blocking. */
  ncclComm_t child = NULL;
  int out = rank == nranks - 1;
  res = ncclCommSplit(comm, out ? NCCL_SPLIT_NOCOLOR : rank % 2, rank, &child, NULL);
  HCHECK(res == ncclSuccess || res == ncclInProgress, "split -> %d: %s", (int)res,
         ncclGetLastError(NULL));
  if (out) {
    HCHECK(child == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    HCHECK(child != NULL, "split gave no communicator");
    HNCCL(harness_wait_ready(child));
    int n = 0;
    for (int r = 0; r < nranks - 1; r++) n += r % 2 == rank % 2;
    if (sum_check(child, rank / 2, n)) return 1;
    NB(child, ncclCommFinalize(child));
    HNCCL(ncclCommDestroy(child));
  }

  /* Shrink away the last rank (which does not call it). */
  if (!out) {
    int exclude[] = {nranks - 1};
    ncclComm_t small = NULL;
    res = ncclCommShrink(comm, exclude, 1, &small, NULL, NCCL_SHRINK_DEFAULT);
    HCHECK(res == ncclSuccess || res == ncclInProgress, "shrink -> %d: %s", (int)res,
           ncclGetLastError(NULL));
    HCHECK(small != NULL, "shrink gave no communicator");
    HNCCL(harness_wait_ready(small));
    if (sum_check(small, rank, nranks - 1)) return 1;
    NB(small, ncclCommFinalize(small));
    HNCCL(ncclCommDestroy(small));
  }

  if (sum_check(comm, rank, nranks)) return 1;
  NB(comm, ncclCommFinalize(comm));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_nonblocking_procs) {
  char why[8192];
  int rc = harness_procs(4, 60, nb_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

START_TEST(test_nonblocking_threads) {
  char why[8192];
  int rc = harness_threads(3, 60, nb_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Non-blocking inits inside a group, as PyTorch does for several
 * communicators at once: ncclGroupEnd returns without waiting for them. */
static int nb_group_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = NULL;
  HNCCL(ncclGroupStart());
  ncclResult_t res = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  HCHECK(res == ncclSuccess || res == ncclInProgress, "grouped init -> %d", (int)res);
  NB(comm, ncclGroupEnd());
  if (sum_check(comm, rank, nranks)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_nonblocking_group_init) {
  char why[8192];
  int rc = harness_procs(3, 60, nb_group_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Rank 1 never arrives: rank 0's communicator stays initializing, and a
 * collective on it is refused with a message instead of run or hung. */
static int nb_early_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  ncclResult_t res = harness_init_nonblocking(&comm, nranks, id, rank);
  HCHECK(res == ncclInProgress, "init without its peer -> %d", (int)res);
  ncclResult_t st = ncclSuccess;
  HNCCL(ncclCommGetAsyncError(comm, &st));
  HCHECK(st == ncclInProgress, "state %d while the peer is missing", (int)st);
  int32_t x = 1;
  res = ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL);
  HCHECK(res == ncclInvalidUsage, "collective during init -> %d", (int)res);
  /* Its WARN is checked in the log by the test: the init thread may WARN at
   * any time, so reading ncclGetLastError here would race with it. */
  HNCCL(ncclCommAbort(comm));
  return 0;
}

START_TEST(test_nonblocking_still_initializing) {
  setenv("WEFT_TIMEOUT", "3", 1);
  char dir[64];
  harness_log_to_dir(dir, sizeof dir, "INIT");
  struct harness_opts o = {HARNESS_PROCS, 2, 1, 40, 0};
  char why[4096];
  int rc = harness_run(&o, nb_early_rank, NULL, why, sizeof why);
  char *logs = harness_logs_take(dir);
  rmdir(dir);
  ck_assert_msg(rc == 0, "%s", why);
  ck_assert_msg(strstr(logs, "ncclAllReduce") != NULL && strstr(logs, "still initializing"),
                "no WARN about the communicator still initializing in the log:\n%s", logs);
  free(logs);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("nonblocking");
  TCase *tc = tcase_create("nonblocking");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_nonblocking_procs);
  tcase_add_test(tc, test_nonblocking_threads);
  tcase_add_test(tc, test_nonblocking_group_init);
  tcase_add_test(tc, test_nonblocking_still_initializing);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
