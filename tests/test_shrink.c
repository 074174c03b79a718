/* ncclCommShrink through the public API, on host ranks: only the kept ranks
 * call it, the excluded ones take no part (dead, or alive and busy
 * elsewhere), and the new communicator numbers the kept ranks in parent
 * order and runs collectives. Also: a failed parent shrunk with
 * NCCL_SHRINK_ABORT, two shrinks in a row, a non-blocking shrink, kept
 * ranks that disagree on the list, and every argument error. And
 * ncclCommRevoke: on an idle communicator, and from another thread while
 * a call waits for a rank that never comes, followed by a shrink. */
#include <check.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define MAXR 8

/* comm has nranks ranks, this one is `rank`, and rank r of comm is parent
 * rank parents[r]: every rank writes its parent rank + 1 at its own slot. */
static int check_shape(ncclComm_t comm, int nranks, int rank, const int *parents) {
  int n = -1, me = -1;
  HNCCL(ncclCommCount(comm, &n));
  HNCCL(ncclCommUserRank(comm, &me));
  HCHECK(n == nranks && me == rank, "new comm: count %d rank %d, expected %d and %d", n, me, nranks,
         rank);
  int32_t slots[MAXR] = {0};
  slots[rank] = parents[rank] + 1;
  ncclResult_t res = ncclAllReduce(slots, slots, (size_t)nranks, ncclInt32, ncclSum, comm, NULL);
  HCHECK(res == ncclSuccess || res == ncclInProgress, "all-reduce on the new comm -> %d: %s",
         (int)res, ncclGetLastError(comm));
  HNCCL(harness_wait_ready(comm));
  for (int r = 0; r < nranks; r++)
    HCHECK(slots[r] == parents[r] + 1, "rank %d of the new comm is parent rank %d, expected %d", r,
           (int)slots[r] - 1, parents[r]);
  return 0;
}

/* The kept ranks, in parent order, of nranks minus exclude. */
static int kept_of(int nranks, const int *exclude, int nexclude, int *kept, int parent_rank,
                   int *me) {
  int n = 0;
  for (int r = 0; r < nranks; r++) {
    int gone = 0;
    for (int i = 0; i < nexclude; i++) gone |= exclude[i] == r;
    if (gone) continue;
    if (r == parent_rank) *me = n;
    kept[n++] = r;
  }
  return n;
}

/* Rank 2 dies after one good all-reduce; the others' next all-reduce on the
 * parent fails; they shrink it with NCCL_SHRINK_ABORT and go on. */
static int dead_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank == 2) _exit(0);
  float buf[256] = {0};
  ncclResult_t res = ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, NULL);
  HCHECK(res != ncclSuccess, "all-reduce with rank 2 dead succeeded");
  int exclude[] = {2}, kept[MAXR], me = -1;
  int n = kept_of(nranks, exclude, 1, kept, rank, &me);
  ncclComm_t small = NULL;
  double t0 = harness_now();
  HNCCL(ncclCommShrink(comm, exclude, 1, &small, NULL, NCCL_SHRINK_ABORT));
  HCHECK(small != NULL, "ncclCommShrink gave no communicator");
  HCHECK(harness_now() - t0 < 5, "ncclCommShrink took %.1f s", harness_now() - t0);
  if (check_shape(small, n, me, kept)) return 1;
  HNCCL(ncclCommAbort(comm));
  if (check_shape(small, n, me, kept)) return 1;
  HNCCL(ncclCommDestroy(small));
  return 0;
}

START_TEST(test_shrink_dead_rank) {
  char why[8192];
  int rc = harness_procs(4, 60, dead_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Ranks 0 and 3 stay alive but never call Shrink (they destroy the parent
 * later); ranks 1 and 2 shrink the healthy parent by default, then the
 * parent keeps working for everyone. */
static int alive_excluded_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int exclude[] = {3, 0};
  if (rank == 0 || rank == 3) {
    harness_sleep_ms(200);
  } else {
    int kept[MAXR], me = -1;
    int n = kept_of(nranks, exclude, 2, kept, rank, &me);
    ncclComm_t pair = NULL;
    HNCCL(ncclCommShrink(comm, exclude, 2, &pair, NULL, NCCL_SHRINK_DEFAULT));
    if (check_shape(pair, n, me, kept)) return 1;
    HNCCL(ncclCommDestroy(pair));
  }
  if (harness_allreduce_ok(comm, nranks)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_shrink_excluded_alive) {
  char why[8192];
  int rc = harness_procs(4, 60, alive_excluded_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* 5 ranks -> 4 (without parent rank 4) -> 2 (without new ranks 0 and 2),
 * the second non-blocking; as threads of one process. */
static int twice_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (rank == 4) {
    HNCCL(ncclCommDestroy(comm));
    return 0;
  }
  int ex1[] = {4}, kept1[MAXR], me1 = -1;
  int n1 = kept_of(nranks, ex1, 1, kept1, rank, &me1);
  ncclComm_t c1 = NULL;
  HNCCL(ncclCommShrink(comm, ex1, 1, &c1, NULL, NCCL_SHRINK_DEFAULT));
  if (check_shape(c1, n1, me1, kept1)) return 1;
  int ex2[] = {2, 0};
  if (me1 != 0 && me1 != 2) {
    int kept2[MAXR], me2 = -1;
    int n2 = kept_of(n1, ex2, 2, kept2, me1, &me2);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t c2 = NULL;
    ncclResult_t res = ncclCommShrink(c1, ex2, 2, &c2, &config, NCCL_SHRINK_DEFAULT);
    HCHECK(res == ncclSuccess || res == ncclInProgress, "non-blocking shrink -> %d: %s", (int)res,
           ncclGetLastError(NULL));
    HCHECK(c2 != NULL, "non-blocking shrink set no communicator");
    HNCCL(harness_wait_ready(c2));
    if (check_shape(c2, n2, me2, kept2)) return 1;
    res = ncclCommFinalize(c2);
    HCHECK(res == ncclSuccess || res == ncclInProgress, "finalize -> %d", (int)res);
    HNCCL(harness_wait_ready(c2));
    HNCCL(ncclCommDestroy(c2));
  }
  HNCCL(ncclCommDestroy(c1));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_shrink_twice) {
  char why[8192];
  int rc = harness_threads(5, 60, twice_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Inside a group, a blocking shrink finishes at ncclGroupEnd. */
static int grouped_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int exclude[] = {0}, kept[MAXR], me = -1;
  int n = kept_of(nranks, exclude, 1, kept, rank, &me);
  if (rank != 0) {
    ncclComm_t c = NULL;
    HNCCL(ncclGroupStart());
    HNCCL(ncclCommShrink(comm, exclude, 1, &c, NULL, NCCL_SHRINK_DEFAULT));
    HNCCL(ncclGroupEnd());
    if (check_shape(c, n, me, kept)) return 1;
    HNCCL(ncclCommDestroy(c));
  }
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_shrink_in_group) {
  char why[8192];
  int rc = harness_procs(3, 60, grouped_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Rank 1 excludes rank 2, rank 0 excludes nobody: both fail at once with
 * ncclInvalidUsage naming the disagreement; rank 2 never calls. */
static int disagree_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (rank == 2) {
    harness_sleep_ms(500);
  } else {
    int exclude[] = {2};
    ncclComm_t c = NULL;
    double t0 = harness_now();
    ncclResult_t res = ncclCommShrink(comm, exclude, rank == 1 ? 1 : 0, &c, NULL, 0);
    HCHECK(res == ncclInvalidUsage, "shrink with different lists -> %d (%s)", (int)res,
           ncclGetErrorString(res));
    HCHECK(c == NULL, "a failed shrink set a communicator");
    const char *msg = ncclGetLastError(NULL);
    HCHECK(strstr(msg, "excludeRanksList") != NULL, "last error: \"%s\"", msg);
    HCHECK(harness_now() - t0 < 5, "the failure took %.1f s", harness_now() - t0);
  }
  HNCCL(ncclCommAbort(comm));
  return 0;
}

/* Rank 0 excludes rank 1 and goes on alone; rank 1 excludes nobody and
 * waits for rank 0's answer, which never comes: after WEFT_TIMEOUT (3 s
 * here) it returns ncclRemoteError asking whether rank 0 passed the same
 * list. Rank 0 stays up meanwhile, so the wait times out rather than
 * seeing it leave. */
static int excluded_caller_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, c = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int exclude[] = {1};
  double t0 = harness_now();
  ncclResult_t res = ncclCommShrink(comm, exclude, rank == 0 ? 1 : 0, &c, NULL, 0);
  if (rank == 0) {
    HCHECK(res == ncclSuccess && c != NULL, "rank 0's shrink to itself -> %d", (int)res);
    HNCCL(ncclCommDestroy(c));
    harness_sleep_ms(5000);
  } else {
    HCHECK(res == ncclRemoteError, "rank 1's shrink -> %d (%s)", (int)res, ncclGetErrorString(res));
    const char *msg = ncclGetLastError(NULL);
    HCHECK(strstr(msg, "rank 0") != NULL && strstr(msg, "same excludeRanksList") != NULL,
           "last error: \"%s\"", msg);
    HCHECK(harness_now() - t0 < 5, "the failure took %.1f s", harness_now() - t0);
  }
  HNCCL(ncclCommAbort(comm));
  return 0;
}

START_TEST(test_shrink_excluded_caller) {
  setenv("WEFT_TIMEOUT", "3", 1);
  char why[8192];
  int rc = harness_procs(2, 60, excluded_caller_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

START_TEST(test_shrink_disagree) {
  char why[8192];
  int rc = harness_procs(3, 60, disagree_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

static int expect_invalid(ncclResult_t res, const char *what, const char *phrase) {
  HCHECK(res == ncclInvalidArgument, "%s -> %d, expected ncclInvalidArgument", what, (int)res);
  const char *msg = ncclGetLastError(NULL);
  HCHECK(strstr(msg, phrase) != NULL, "%s: last error \"%s\" lacks \"%s\"", what, msg, phrase);
  return 0;
}

/* Every bad argument is refused before anything is sent; then an empty
 * list (all ranks call) gives a copy of the parent. */
static int args_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, c = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int other = (rank + 1) % nranks;
  int self[] = {rank}, out[] = {nranks}, neg[] = {-1}, dup[] = {other, other};
  int all[MAXR];
  for (int r = 0; r < nranks; r++) all[r] = r;
  if (expect_invalid(ncclCommShrink(NULL, out, 1, &c, NULL, 0), "NULL comm", "comm is NULL") ||
      expect_invalid(ncclCommShrink(comm, out, 1, NULL, NULL, 0), "NULL newcomm", "newcomm") ||
      expect_invalid(ncclCommShrink(comm, NULL, 0, &c, NULL, 4), "flags 4", "shrinkFlags") ||
      expect_invalid(ncclCommShrink(comm, NULL, -1, &c, NULL, 0), "count -1",
                     "excludeRanksCount") ||
      expect_invalid(ncclCommShrink(comm, NULL, 1, &c, NULL, 0), "NULL list", "excludeRanksList") ||
      expect_invalid(ncclCommShrink(comm, out, 1, &c, NULL, 0), "rank nranks", "expected a rank") ||
      expect_invalid(ncclCommShrink(comm, neg, 1, &c, NULL, 0), "rank -1", "expected a rank") ||
      expect_invalid(ncclCommShrink(comm, dup, 2, &c, NULL, 0), "duplicate", "already holds") ||
      expect_invalid(ncclCommShrink(comm, self, 1, &c, NULL, 0), "own rank", "must not call") ||
      expect_invalid(ncclCommShrink(comm, all, nranks, &c, NULL, 0), "all ranks", "leaves no rank"))
    return 1;
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  if (expect_invalid(ncclCommShrink(comm, NULL, 0, &c, &bad, 0), "bad config", "magic")) return 1;
  HCHECK(c == NULL, "a refused shrink set a communicator");
  HNCCL(ncclCommShrink(comm, NULL, 0, &c, NULL, NCCL_SHRINK_DEFAULT));
  if (check_shape(c, nranks, rank, all)) return 1;
  HNCCL(ncclCommDestroy(c));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_shrink_args) {
  char why[8192];
  /* Processes: the last error is one per process, as in NCCL. */
  int rc = harness_procs(3, 60, args_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- ncclCommRevoke ----------------------------------------------------------- */

/* On an idle communicator: a bad flag is refused and changes nothing;
 * then revoke returns at once, the state reads ncclSuccess, new work and
 * finalize are refused naming the revoke, a second revoke is harmless, and
 * a split of the revoked communicator by every rank works. */
static int revoke_idle_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, half = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (expect_invalid(ncclCommRevoke(NULL, NCCL_REVOKE_DEFAULT), "revoke of NULL", "comm is NULL") ||
      expect_invalid(ncclCommRevoke(comm, 1), "revokeFlags 1", "revokeFlags") ||
      harness_allreduce_ok(comm, nranks))
    return 1;
  double t0 = harness_now();
  HNCCL(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  HCHECK(harness_now() - t0 < 2, "revoking an idle communicator took %.1f s", harness_now() - t0);
  ncclResult_t err = ncclInternalError;
  HNCCL(ncclCommGetAsyncError(comm, &err));
  HCHECK(err == ncclSuccess, "the state after revoke is %d, expected ncclSuccess", (int)err);
  float buf[4] = {0};
  ncclResult_t res = ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, comm, NULL);
  const char *msg = ncclGetLastError(NULL);
  HCHECK(res == ncclInvalidUsage && strstr(msg, "ncclAllReduce") && strstr(msg, "revoked"),
         "all-reduce on a revoked communicator -> %d, last error \"%s\"", (int)res, msg);
  res = ncclSend(buf, 4, ncclFloat32, (rank + 1) % nranks, comm, NULL);
  HCHECK(res == ncclInvalidUsage, "send on a revoked communicator -> %d", (int)res);
  res = ncclCommFinalize(comm);
  msg = ncclGetLastError(NULL);
  HCHECK(res == ncclInvalidUsage && strstr(msg, "revoked"),
         "finalize of a revoked communicator -> %d, last error \"%s\"", (int)res, msg);
  HNCCL(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  /* Colors 0 (even ranks) and 1 (odd ranks), in parent order. */
  int parents[MAXR], n = 0, me = -1;
  for (int r = rank % 2; r < nranks; r += 2) {
    if (r == rank) me = n;
    parents[n++] = r;
  }
  HNCCL(ncclCommSplit(comm, rank % 2, rank, &half, NULL));
  HCHECK(half != NULL, "split of a revoked communicator gave none");
  if (check_shape(half, n, me, parents)) return 1;
  HNCCL(ncclCommDestroy(half));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_revoke_idle) {
  char why[8192];
  /* Processes: the last error is one per process, as in NCCL. */
  int rc = harness_procs(3, 60, revoke_idle_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

struct revoker {
  ncclComm_t comm;
  ncclResult_t res;
  double took;
};

static void *revoke_later(void *arg) {
  struct revoker *v = arg;
  harness_sleep_ms(300);
  double t0 = harness_now();
  v->res = ncclCommRevoke(v->comm, NCCL_REVOKE_DEFAULT);
  v->took = harness_now() - t0;
  return NULL;
}

/* Rank 2 is alive but never joins the second all-reduce. On ranks 0 and 1
 * another thread revokes the communicator 0.3 s into it: the all-reduce
 * returns an error long before WEFT_TIMEOUT (10 s here), the revoke
 * returns once it has, and the two shrink the revoked communicator by
 * default and go on. */
static int revoke_in_flight_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, pair = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank == 2) {
    harness_sleep_ms(3000);
    HNCCL(ncclCommAbort(comm));
    return 0;
  }
  struct revoker v = {comm, ncclInternalError, 0};
  pthread_t t;
  HCHECK(pthread_create(&t, NULL, revoke_later, &v) == 0, "pthread_create failed");
  float buf[256] = {0};
  double t0 = harness_now();
  ncclResult_t res = ncclAllReduce(buf, buf, 256, ncclFloat32, ncclSum, comm, NULL);
  double took = harness_now() - t0;
  pthread_join(t, NULL);
  HCHECK(res != ncclSuccess, "the all-reduce without rank 2 succeeded");
  HCHECK(took < 5, "the revoked all-reduce returned after %.1f s", took);
  HCHECK(v.res == ncclSuccess, "ncclCommRevoke -> %d: %s", (int)v.res, ncclGetLastError(NULL));
  HCHECK(v.took < 5, "ncclCommRevoke took %.1f s", v.took);
  int exclude[] = {2}, kept[MAXR], me = -1;
  int n = kept_of(nranks, exclude, 1, kept, rank, &me);
  HNCCL(ncclCommShrink(comm, exclude, 1, &pair, NULL, NCCL_SHRINK_DEFAULT));
  if (check_shape(pair, n, me, kept)) return 1;
  HNCCL(ncclCommDestroy(pair));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_revoke_in_flight) {
  char why[8192];
  int rc = harness_procs(3, 60, revoke_in_flight_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("shrink");
  TCase *tc = tcase_create("shrink");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_shrink_dead_rank);
  tcase_add_test(tc, test_shrink_excluded_alive);
  tcase_add_test(tc, test_shrink_twice);
  tcase_add_test(tc, test_shrink_in_group);
  tcase_add_test(tc, test_shrink_disagree);
  tcase_add_test(tc, test_shrink_excluded_caller);
  tcase_add_test(tc, test_shrink_args);
  tcase_add_test(tc, test_revoke_idle);
  tcase_add_test(tc, test_revoke_in_flight);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
