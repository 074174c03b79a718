/* Host collectives in flight together (src/exec/host_window.c): a group of
 * collectives on 4 channels, over shared memory and over sockets, 2 and 3
 * ranks, whose calls read what the calls before them wrote (each must wait
 * for those), repeat the same call (which may overlap, channel by
 * channel), and touch unrelated buffers (which overlap). Every result is
 * checked exactly; the INFO log must show calls joining a window, and none
 * with WEFT_HOST_WINDOW=1. Then a call the ranks disagree on in the middle
 * of a group (the others still correct, the communicator usable after),
 * and a peer that leaves while a window is in flight (an error, no hang). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define N ((size_t)3 * 32768) /* floats; divisible by 2 and 3 ranks */
#define NINDEP 3
#define ROUNDS 3
#define RUN_TIMEOUT_S 120

/* One rank's buffers. */
struct bufs {
  float *a, *b, *c, *d, *e;     /* the dependent chain */
  float *x, *y, *z;             /* the same Broadcast twice, then an AllReduce of it */
  float *w;                     /* the same in-place AllReduce twice */
  float *p[NINDEP], *q[NINDEP]; /* unrelated AllReduces */
};

static float *fresh(size_t count, float v) {
  float *p = malloc(count * sizeof(float));
  if (p != NULL)
    for (size_t i = 0; i < count; i++) p[i] = v;
  return p;
}

static int bufs_alloc(struct bufs *b, int rank) {
  memset(b, 0, sizeof(*b));
  b->a = fresh(N, 0), b->b = fresh(N, -1), b->c = fresh(N, -1), b->d = fresh(N, -1);
  b->e = fresh(N, -1), b->x = fresh(N, -1), b->y = fresh(N, -1), b->z = fresh(N, -1);
  b->w = fresh(N, 0);
  int ok = b->a && b->b && b->c && b->d && b->e && b->x && b->y && b->z && b->w;
  for (int k = 0; k < NINDEP; k++) {
    b->p[k] = fresh(N, (float)(rank + k + 1));
    b->q[k] = fresh(N, -1);
    ok = ok && b->p[k] && b->q[k];
  }
  HCHECK(ok, "out of memory");
  for (size_t i = 0; i < N; i++) {
    b->a[i] = (float)(i % 7 + (size_t)rank);
    b->w[i] = (float)(i % 5 + 1);
    if (rank == 0) b->x[i] = (float)(i % 11 + 1);
  }
  return 0;
}

static void bufs_free(struct bufs *b) {
  float *all[] = {b->a, b->b, b->c, b->d, b->e, b->x, b->y, b->z, b->w};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) free(all[i]);
  for (int k = 0; k < NINDEP; k++) free(b->p[k]), free(b->q[k]);
}

/* One group: every call of the chain needs the one before it. */
static int issue(struct bufs *b, int n, ncclComm_t comm) {
  size_t m = N / (size_t)n;
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(b->a, b->b, N, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclBroadcast(b->b, b->c, N, ncclFloat32, n - 1, comm, NULL));
  HNCCL(ncclAllGather(b->c, b->d, m, ncclFloat32, comm, NULL));
  HNCCL(ncclReduceScatter(b->d, b->e, m, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclAllReduce(b->e, b->e, m, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclBroadcast(b->x, b->y, N, ncclFloat32, 0, comm, NULL));
  HNCCL(ncclBroadcast(b->x, b->y, N, ncclFloat32, 0, comm, NULL));
  HNCCL(ncclAllReduce(b->y, b->z, N, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclAllReduce(b->w, b->w, N, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclAllReduce(b->w, b->w, N, ncclFloat32, ncclSum, comm, NULL));
  for (int k = 0; k < NINDEP; k++)
    HNCCL(ncclAllReduce(b->p[k], b->q[k], N, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclGroupEnd());
  return 0;
}

#define EXPECT(what, buf, i, want)                                                     \
  HCHECK((buf)[i] == (float)(want), "%s[%zu] = %g, expected %g (rank %d of %d)", what, \
         (size_t)(i), (double)(buf)[i], (double)(want), rank, n)

static int verify(const struct bufs *b, int rank, int n) {
  size_t m = N / (size_t)n;
  double tri = (double)n * (n - 1) / 2;
  for (size_t i = 0; i < N; i++) {
    double sum = (double)n * (double)(i % 7) + tri;
    EXPECT("AllReduce", b->b, i, sum);
    EXPECT("Broadcast of the AllReduce", b->c, i, sum);
    double gathered = (double)n * (double)((i % m) % 7) + tri;
    EXPECT("AllGather of the Broadcast", b->d, i, gathered);
    EXPECT("the same Broadcast twice", b->y, i, i % 11 + 1);
    EXPECT("AllReduce of the Broadcasts", b->z, i, (double)n * (double)(i % 11 + 1));
    EXPECT("the same in-place AllReduce twice", b->w, i, (double)n * n * (double)(i % 5 + 1));
    for (int k = 0; k < NINDEP; k++) {
      double want = tri + (double)n * (k + 1);
      HCHECK(b->q[k][i] == (float)want, "unrelated AllReduce %d [%zu] = %g, expected %g", k, i,
             (double)b->q[k][i], want);
    }
  }
  for (size_t i = 0; i < m; i++) {
    double scattered = (double)n * ((double)n * (double)((i % m) % 7) + tri);
    EXPECT("in-place AllReduce of the ReduceScatter", b->e, i, (double)n * scattered);
  }
  return 0;
}

static int chain_rank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, n, id, rank));
  for (int round = 0; round < ROUNDS; round++) {
    struct bufs b;
    if (bufs_alloc(&b, rank) || issue(&b, n, comm) || verify(&b, rank, n)) return 1;
    bufs_free(&b);
  }
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

static int count_of(const char *logs, const char *needle) {
  int k = 0;
  for (const char *p = logs; (p = strstr(p, needle)) != NULL; p++) k++;
  return k;
}

/* Loop index i: ranks 2 or 3, shared memory or sockets, window 2 or 1. */
START_TEST(test_chain) {
  int n = 2 + (_i & 1), sockets = (_i >> 1) & 1, window = (_i >> 2) & 1 ? 1 : 2;
  setenv("NCCL_MIN_NCHANNELS", "4", 1);
  setenv("NCCL_MAX_NCHANNELS", "4", 1);
  setenv("WEFT_HOST_WINDOW", window == 1 ? "1" : "2", 1);
  if (sockets) setenv("NCCL_SHM_DISABLE", "1", 1);
  char why[8192], *logs = NULL;
  int rc =
      harness_procs_logged(n, RUN_TIMEOUT_S, "COLL", chain_rank, NULL, &logs, why, sizeof(why));
  int joins = count_of(logs, "joins a window");
  free(logs);
  ck_assert_msg(rc == 0, "%d ranks over %s, WEFT_HOST_WINDOW=%d: %s", n,
                sockets ? "sockets" : "shared memory", window, why);
  if (window > 1)
    ck_assert_msg(joins > 0, "%d ranks over %s: no call joined a window (INFO COLL)", n,
                  sockets ? "sockets" : "shared memory");
  else
    ck_assert_msg(joins == 0, "WEFT_HOST_WINDOW=1, yet %d calls joined a window", joins);
}
END_TEST

/* The middle call of a group disagrees (rank 1 asks for one more
 * element): the group ends in ncclInvalidUsage on every rank, the calls
 * around it are correct, and the communicator works after. */
static int mismatch_rank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, n, id, rank));
  float *in = fresh(N + 1, (float)(rank + 1)), *out[3];
  for (int k = 0; k < 3; k++) out[k] = fresh(N + 1, -1);
  HCHECK(in && out[0] && out[1] && out[2], "out of memory");
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(in, out[0], N, ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclAllReduce(in, out[1], N + (rank == 1), ncclFloat32, ncclSum, comm, NULL));
  HNCCL(ncclAllReduce(in, out[2], N, ncclFloat32, ncclSum, comm, NULL));
  ncclResult_t res = ncclGroupEnd();
  HCHECK(res == ncclInvalidUsage, "a group with a mismatched call returned %d, expected %d",
         (int)res, (int)ncclInvalidUsage);
  float want = (float)n * (n + 1) / 2;
  for (size_t i = 0; i < N; i++) {
    HCHECK(out[0][i] == want, "the call before the mismatch: [%zu] = %g", i, (double)out[0][i]);
    HCHECK(out[1][i] == -1, "the mismatched call wrote its output: [%zu] = %g", i,
           (double)out[1][i]);
    HCHECK(out[2][i] == want, "the call after the mismatch: [%zu] = %g", i, (double)out[2][i]);
  }
  for (size_t i = 0; i < N; i++) out[1][i] = -1;
  HNCCL(ncclAllReduce(in, out[1], N, ncclFloat32, ncclSum, comm, NULL));
  for (size_t i = 0; i < N; i++)
    HCHECK(out[1][i] == want, "the call after the group: [%zu] = %g", i, (double)out[1][i]);
  HNCCL(ncclCommDestroy(comm));
  free(in);
  for (int k = 0; k < 3; k++) free(out[k]);
  return 0;
}

/* fn as n rank processes on 4 channels, over sockets or shared memory. */
static void run4(int n, int sockets, harness_rank_fn fn) {
  setenv("NCCL_MIN_NCHANNELS", "4", 1);
  setenv("NCCL_MAX_NCHANNELS", "4", 1);
  if (sockets) setenv("NCCL_SHM_DISABLE", "1", 1);
  char why[8192];
  int rc = harness_procs(n, RUN_TIMEOUT_S, fn, NULL, why, sizeof(why));
  ck_assert_msg(rc == 0, "%s: %s", sockets ? "sockets" : "shared memory", why);
}

START_TEST(test_mismatch) {
  run4(3, _i, mismatch_rank);
}
END_TEST

/* Rank 1, the root, makes one call of rank 0's group of four broadcasts,
 * then leaves without a word: rank 0's group must fail within the
 * timeout (WEFT_TIMEOUT=10). */
static int leave_rank(int rank, int n, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, n, id, rank));
  float *buf = fresh(N, (float)rank);
  HCHECK(buf != NULL, "out of memory");
  HNCCL(ncclBroadcast(buf, buf, N, ncclFloat32, 1, comm, NULL)); /* the links are up */
  if (rank == 1) {
    HNCCL(ncclBroadcast(buf, buf, N, ncclFloat32, 1, comm, NULL));
    return 0; /* the process exits: its links close */
  }
  double t0 = harness_now();
  HNCCL(ncclGroupStart());
  for (int k = 0; k < 4; k++) HNCCL(ncclBroadcast(buf, buf, N, ncclFloat32, 1, comm, NULL));
  ncclResult_t res = ncclGroupEnd();
  double took = harness_now() - t0;
  HCHECK(res != ncclSuccess && res != ncclInProgress,
         "rank 0's group returned %d although rank 1 left after its first call", (int)res);
  HCHECK(took < 40, "rank 0's group took %.1f s to fail", took);
  ncclCommAbort(comm);
  free(buf);
  return 0;
}

START_TEST(test_peer_leaves) {
  run4(2, _i, leave_rank);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("window");
  TCase *tc = tcase_create("window");
  tcase_set_timeout(tc, RUN_TIMEOUT_S + 30);
  tcase_add_loop_test(tc, test_chain, 0, 8);
  tcase_add_loop_test(tc, test_mismatch, 0, 2);
  tcase_add_loop_test(tc, test_peer_leaves, 0, 2);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
