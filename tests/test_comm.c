/* Communicator queries and ncclCommSplit through the public API, plus the
 * library-wide calls: ncclGetVersion and ncclGetErrorString. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

static int check_identity(ncclComm_t comm, int nranks, int rank) {
  int n = -1, me = -1, dev = -2;
  HNCCL(ncclCommCount(comm, &n));
  HNCCL(ncclCommUserRank(comm, &me));
  HNCCL(ncclCommCuDevice(comm, &dev));
  HCHECK(n == nranks, "ncclCommCount gave %d, expected %d", n, nranks);
  HCHECK(me == rank, "ncclCommUserRank gave %d, expected %d", me, rank);
  HCHECK(dev >= -1, "ncclCommCuDevice gave %d", dev);
  return 0;
}

/* Every rank puts its tag at its own slot; the sum shows each rank of comm
 * which tag sits at which rank, and that all ranks agree. */
static int check_members(ncclComm_t comm, int nranks, int rank, int tag, const int *want_tags) {
  int32_t slots[8] = {0};
  HCHECK(nranks <= 8, "too many ranks");
  slots[rank] = tag;
  HNCCL(ncclAllReduce(slots, slots, (size_t)nranks, ncclInt32, ncclSum, comm, NULL));
  for (int r = 0; r < nranks; r++)
    HCHECK(slots[r] == want_tags[r],
           "rank %d of the communicator has tag %d, "
           "expected %d",
           r, (int)slots[r], want_tags[r]);
  return 0;
}

static int split_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (check_identity(comm, nranks, rank)) return 1;

  /* Colors by parity, keys reversed: the new ranks count down. */
  int color = rank % 2;
  ncclComm_t half = NULL;
  HNCCL(ncclCommSplit(comm, color, nranks - rank, &half, NULL));
  HCHECK(half != NULL, "ncclCommSplit with color %d gave NULL", color);
  int members[8], nmembers = 0;
  for (int r = nranks - 1; r >= 0; r--)
    if (r % 2 == color) members[nmembers++] = r + 1; /* tags: parent rank + 1 */
  int new_rank = 0;
  while (members[new_rank] != rank + 1) new_rank++;
  if (check_identity(half, nmembers, new_rank) ||
      check_members(half, nmembers, new_rank, rank + 1, members))
    return 1;

  /* The last rank opts out; the rest keep their order (equal keys). */
  ncclComm_t most = NULL;
  int out = rank == nranks - 1;
  HNCCL(ncclCommSplit(comm, out ? NCCL_SPLIT_NOCOLOR : 7, 0, &most, NULL));
  if (out) {
    HCHECK(most == NULL, "NCCL_SPLIT_NOCOLOR gave a communicator");
  } else {
    HCHECK(most != NULL, "ncclCommSplit with color 7 gave NULL");
    int tags[8];
    for (int r = 0; r < nranks - 1; r++) tags[r] = r + 1;
    if (check_identity(most, nranks - 1, rank) ||
        check_members(most, nranks - 1, rank, rank + 1, tags))
      return 1;
  }

  /* With a config, everyone in: the parent again. */
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.commName = "weft-test-split";
  ncclComm_t all = NULL;
  HNCCL(ncclCommSplit(comm, 0, rank, &all, &config));
  HCHECK(all != NULL, "ncclCommSplit with color 0 gave NULL");
  int tags[8];
  for (int r = 0; r < nranks; r++) tags[r] = r + 1;
  if (check_identity(all, nranks, rank) || check_members(all, nranks, rank, rank + 1, tags))
    return 1;

  /* Parent and children all still work, interleaved. */
  if (check_members(comm, nranks, rank, rank + 1, tags) ||
      check_members(half, nmembers, new_rank, rank + 1, members))
    return 1;

  HNCCL(ncclCommDestroy(half));
  if (most != NULL) HNCCL(ncclCommDestroy(most));
  HNCCL(ncclCommDestroy(all));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_split_procs) {
  char why[8192];
  int rc = harness_procs(4, 60, split_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

START_TEST(test_split_threads) {
  char why[8192];
  int rc = harness_threads(4, 60, split_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

static int identity_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (check_identity(comm, nranks, rank)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_count_rank_procs) {
  char why[8192];
  int nranks = _i;
  int rc = harness_procs(nranks, 60, identity_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%d ranks: %s", nranks, why);
}
END_TEST

START_TEST(test_count_rank_init_all) {
  for (int n = 1; n <= 4; n++) {
    ncclComm_t comms[4] = {NULL, NULL, NULL, NULL};
    ck_assert_int_eq(ncclCommInitAll(comms, n, NULL), ncclSuccess);
    for (int i = 0; i < n; i++) {
      int count = -1, rank = -1, dev = -2;
      ck_assert_ptr_nonnull(comms[i]);
      ck_assert_int_eq(ncclCommCount(comms[i], &count), ncclSuccess);
      ck_assert_int_eq(ncclCommUserRank(comms[i], &rank), ncclSuccess);
      ck_assert_int_eq(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
      ck_assert_int_eq(count, n);
      ck_assert_int_eq(rank, i);
    }
    for (int i = 0; i < n; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  }
}
END_TEST

/* ncclCommInitRankScalable as a launcher uses it: the first rank of each of
 * NCCL's blocks (nranks / nId ranks, the first nranks % nId blocks one
 * more) makes an id, the ranks share them (here over a first
 * communicator; a launcher uses its store), and every rank joins with all
 * of them. same: nId copies of one id, which is one root. */
struct scalable_case {
  int nranks, nid, same;
};

static int block_first(int k, int nranks, int nid) {
  int rem = nranks % nid;
  return k * (nranks / nid) + (k < rem ? k : rem);
}

static int scalable_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  const struct scalable_case *c = arg;
  ncclComm_t world = NULL;
  HNCCL(ncclCommInitRank(&world, nranks, id, rank));
  ncclUniqueId mine, all[8], ids[8];
  memset(&mine, 0, sizeof mine);
  int makes = c->same ? rank == 0 : 0;
  for (int k = 0; k < c->nid && !c->same; k++) makes |= rank == block_first(k, nranks, c->nid);
  if (makes) HNCCL(ncclGetUniqueId(&mine));
  HNCCL(ncclAllGather(&mine, all, sizeof mine, ncclUint8, world, NULL));
  for (int k = 0; k < c->nid; k++) ids[k] = all[c->same ? 0 : block_first(k, nranks, c->nid)];

  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRankScalable(&comm, nranks, rank, c->nid, ids, NULL));
  int tags[8];
  for (int r = 0; r < nranks; r++) tags[r] = 10 * r + 3;
  if (check_identity(comm, nranks, rank) || check_members(comm, nranks, rank, 10 * rank + 3, tags))
    return 1;
  /* A split of it bootstraps on one root again. */
  ncclComm_t half = NULL;
  HNCCL(ncclCommSplit(comm, rank % 2, rank, &half, NULL));
  if (check_identity(half, (nranks + 1 - rank % 2) / 2, rank / 2)) return 1;
  HNCCL(ncclCommDestroy(half));
  HNCCL(ncclCommDestroy(comm));
  HNCCL(ncclCommDestroy(world));
  return 0;
}

/* How many roots the logs say served a block with a neighbour. */
static int roots_with_blocks(const char *logs) {
  int n = 0;
  for (const char *p = logs; (p = strstr(p, "registered, and rank ")) != NULL; p++) n++;
  return n;
}

static const struct scalable_case scalable_cases[] = {
    {5, 1, 0}, {5, 2, 0}, {5, 3, 0}, {5, 5, 0}, {2, 2, 0}, {6, 4, 0}, {5, 3, 1},
};

START_TEST(test_scalable_procs) {
  const struct scalable_case *c = &scalable_cases[_i];
  char why[8192];
  char *logs = NULL;
  int rc = harness_procs_logged(c->nranks, 60, "BOOTSTRAP", scalable_rank, (void *)c, &logs, why,
                                sizeof why);
  ck_assert_msg(rc == 0, "%d ranks, %d ids%s: %s", c->nranks, c->nid, c->same ? " (one id)" : "",
                why);
  /* Several distinct ids: that many roots, each with its block and the
   * next block's first rank; one id however often passed: no blocks. */
  int want = c->same || c->nid == 1 ? 0 : c->nid;
  int got = roots_with_blocks(logs != NULL ? logs : "");
  ck_assert_msg(got == want, "%d ranks, %d ids%s: %d roots served a block, expected %d:\n%s",
                c->nranks, c->nid, c->same ? " (one id)" : "", got, want, logs ? logs : "");
  free(logs);
}
END_TEST

START_TEST(test_scalable_threads) {
  const struct scalable_case c = {4, 2, 0};
  char why[8192];
  int rc = harness_threads(c.nranks, 60, scalable_rank, (void *)&c, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* A rank of the second block never joins: its root tells the block which
 * rank is missing, and no rank of either block hangs. */
static int scalable_missing_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t world = NULL;
  HNCCL(ncclCommInitRank(&world, nranks, id, rank));
  ncclUniqueId mine, all[4], ids[2];
  memset(&mine, 0, sizeof mine);
  if (rank == 0 || rank == 2) HNCCL(ncclGetUniqueId(&mine));
  HNCCL(ncclAllGather(&mine, all, sizeof mine, ncclUint8, world, NULL));
  ids[0] = all[0];
  ids[1] = all[2];
  HNCCL(ncclCommDestroy(world));
  if (rank == 3) return 0; /* the missing one */
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRankScalable(&comm, nranks, rank, 2, ids, NULL);
  HCHECK(res != ncclSuccess, "rank %d joined a communicator whose rank 3 never came", rank);
  const char *msg = ncclGetLastError(NULL);
  if (rank == 2)
    HCHECK(strstr(msg, "rank 3 of 4") != NULL, "rank 2's error does not name rank 3: %s", msg);
  return 0;
}

START_TEST(test_scalable_missing) {
  char why[8192];
  /* The roots' hosts (ranks 0 and 2) must outlive their roots' verdicts. */
  int rc = harness_procs(4, 60, scalable_missing_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Rank 1 never calls ncclCommSplit (it stays up, doing nothing): after
 * WEFT_TIMEOUT (3 s here) rank 0's split returns ncclRemoteError saying
 * every rank must call it. */
static int split_missing_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, child = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (rank == 1) {
    harness_sleep_ms(5000);
  } else {
    double t0 = harness_now();
    ncclResult_t res = ncclCommSplit(comm, 0, 0, &child, NULL);
    HCHECK(res == ncclRemoteError, "a split rank 1 never joined -> %d", (int)res);
    HCHECK(child == NULL, "a failed split set a communicator");
    const char *msg = ncclGetLastError(NULL);
    HCHECK(strstr(msg, "every rank must call ncclCommSplit") != NULL, "last error: \"%s\"", msg);
    HCHECK(harness_now() - t0 < 5, "the failure took %.1f s", harness_now() - t0);
  }
  HNCCL(ncclCommAbort(comm));
  return 0;
}

START_TEST(test_split_missing) {
  setenv("WEFT_TIMEOUT", "3", 1);
  char why[8192];
  int rc = harness_procs(2, 60, split_missing_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

START_TEST(test_version) {
  int version = -1;
  ck_assert_int_eq(ncclGetVersion(&version), ncclSuccess);
  ck_assert_int_eq(version, NCCL_VERSION_CODE);
  ck_assert_int_eq(NCCL_VERSION_CODE, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
  ck_assert_int_eq(version / 10000, NCCL_MAJOR);
  ck_assert_int_eq(version / 100 % 100, NCCL_MINOR);
}
END_TEST

START_TEST(test_error_strings) {
  const char *s[ncclNumResults];
  for (int r = 0; r < ncclNumResults; r++) {
    s[r] = ncclGetErrorString((ncclResult_t)r);
    ck_assert_msg(s[r] != NULL && s[r][0] != '\0', "result %d has no text", r);
    for (int q = 0; q < r; q++)
      ck_assert_msg(strcmp(s[q], s[r]) != 0, "results %d and %d share the text \"%s\"", q, r, s[r]);
  }
  /* Out-of-range codes still get text, never NULL. */
  ck_assert_ptr_nonnull(ncclGetErrorString(ncclNumResults));
  ck_assert_ptr_nonnull(ncclGetErrorString((ncclResult_t)99));
  ck_assert_ptr_nonnull(ncclGetErrorString((ncclResult_t)-1));
  /* Before any error the last error is empty, not NULL. */
  ck_assert_ptr_nonnull(ncclGetLastError(NULL));
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("comm");

  TCase *tc = tcase_create("split");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_split_procs);
  tcase_add_test(tc, test_split_threads);
  suite_add_tcase(s, tc);

  tc = tcase_create("scalable");
  tcase_set_timeout(tc, 90);
  tcase_add_loop_test(tc, test_scalable_procs, 0,
                      (int)(sizeof scalable_cases / sizeof scalable_cases[0]));
  tcase_add_test(tc, test_scalable_threads);
  tcase_add_test(tc, test_scalable_missing);
  tcase_add_test(tc, test_split_missing);
  suite_add_tcase(s, tc);

  tc = tcase_create("queries");
  tcase_set_timeout(tc, 90);
  tcase_add_loop_test(tc, test_count_rank_procs, 1, 6);
  tcase_add_test(tc, test_count_rank_init_all);
  tcase_add_test(tc, test_version);
  tcase_add_test(tc, test_error_strings);
  suite_add_tcase(s, tc);

  return suite_run(s);
}
