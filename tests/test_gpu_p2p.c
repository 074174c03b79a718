/* GPU suite: grouped send/recv where every rank is a thread of one process
 * on one GPU (ncclCommInitAll), which the CUDA engine runs directly (one
 * copy from the sender's buffer into the receiver's, src/device/direct_p2p.cu)
 * for a send or receive that is the only one of its direction with its
 * peer in the group, and on the FIFO plan otherwise:
 *  - mixed: every rank sends a different size to every rank (itself and
 *    an empty send included), rank 0 sends rank 1 two more messages (those
 *    take the plan); captured into one graph per rank, whose kernel count
 *    shows which path ran, and replayed on new inputs (the pairs' counts
 *    live on the device);
 *  - big: an all-to-all of 1 Mi floats per pair, many CTAs per rank;
 *  - inplace: two ranks send from the buffers they receive into, two from
 *    separate ones (every pairing: exchanged, waiting, plain);
 *  - mismatch: rank 1 receives one element more than rank 0 sends: both
 *    communicators report the error, the receive buffer is untouched, and
 *    nothing hangs;
 *  - self (a case of its own): each rank sends 256 MiB to itself, one
 *    rank after the other.
 * Exits 77 (skip) when there is no GPU. */
#include <check.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_initall.h"
#include "suite_run.h"

/* Element i of what rank `from` sends rank `to` in replay `rep`. */
static float val(int from, int to, size_t i, int rep) {
  return (float)(from * 1000 + to * 100 + rep * 7) + (float)(i % 97);
}

/* Elements rank r sends rank q (0 from rank 1 to rank 0). */
static size_t pair_count(int r, int q) {
  return r == 1 && q == 0 ? 0 : 1000 + 37 * (size_t)r + 11 * (size_t)q;
}

static void fill(float *d, int from, int to, size_t count, int rep) {
  float *h = malloc((count ? count : 1) * sizeof(float));
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < count; i++) h[i] = val(from, to, i, rep);
  ck_assert_int_eq(cudaMemcpy(d, h, count * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  free(h);
}

static void expect(const float *d, int from, int to, size_t count, int rep, const char *what) {
  float *h = malloc((count ? count : 1) * sizeof(float));
  ck_assert_ptr_nonnull(h);
  ck_assert_int_eq(cudaMemcpy(h, d, count * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  /* A plain loop, asserting only at the first difference: a Check
   * assertion per element of 64 Mi would take minutes. */
  size_t i = 0;
  while (i < count && h[i] == val(from, to, i, rep)) i++;
  float got = i < count ? h[i] : 0;
  free(h);
  ck_assert_msg(i == count, "%s: rank %d got %g from rank %d at %zu, not %g", what, to, (double)got,
                from, i, (double)val(from, to, i, rep));
}

#define EXTRA 2 /* rank 0's extra sends to rank 1 */
static const size_t extra_count[EXTRA] = {513, 4096};

START_TEST(mixed) {
  const int n = _i == 0 ? 2 : 4;
  struct ranks rs;
  ranks_open(&rs, n);
  float *sb[MAXR][MAXR], *rb[MAXR][MAXR], *xs[EXTRA], *xr[EXTRA];
  for (int r = 0; r < n; r++)
    for (int q = 0; q < n; q++) {
      sb[r][q] = dev_alloc(pair_count(r, q));
      rb[q][r] = dev_alloc(pair_count(r, q)); /* what q receives from r */
    }
  for (int k = 0; k < EXTRA; k++)
    xs[k] = dev_alloc(extra_count[k]), xr[k] = dev_alloc(extra_count[k]);
  cudaGraph_t graphs[MAXR];
  cudaGraphExec_t execs[MAXR];
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(cudaStreamBeginCapture(rs.streams[r], cudaStreamCaptureModeThreadLocal),
                     cudaSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    for (int k = 1; k <= n; k++) {
      int q = (r + k) % n;
      ck_assert_int_eq(
          ncclSend(sb[r][q], pair_count(r, q), ncclFloat, q, rs.comms[r], rs.streams[r]),
          ncclSuccess);
      ck_assert_int_eq(
          ncclRecv(rb[r][q], pair_count(q, r), ncclFloat, q, rs.comms[r], rs.streams[r]),
          ncclSuccess);
    }
    for (int k = 0; k < EXTRA && r < 2; k++) {
      if (r == 0)
        ck_assert_int_eq(ncclSend(xs[k], extra_count[k], ncclFloat, 1, rs.comms[0], rs.streams[0]),
                         ncclSuccess);
      else
        ck_assert_int_eq(ncclRecv(xr[k], extra_count[k], ncclFloat, 0, rs.comms[1], rs.streams[1]),
                         ncclSuccess);
    }
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(cudaStreamEndCapture(rs.streams[r], &graphs[r]), cudaSuccess);
  for (int r = 0; r < n; r++) {
    /* Ranks 0 and 1: the direct kernel and the plan's (the extra pair);
     * the others: the direct kernel alone. */
    size_t want = r < 2 ? 2 : 1;
    ck_assert_msg(kernel_nodes(graphs[r]) == want,
                  "%d ranks: rank %d's group captured %zu kernels, expected %zu", n, r,
                  kernel_nodes(graphs[r]), want);
    ck_assert_int_eq(cudaGraphInstantiate(&execs[r], graphs[r], 0), cudaSuccess);
  }
  for (int rep = 0; rep < 3; rep++) {
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) fill(sb[r][q], r, q, pair_count(r, q), rep);
    for (int k = 0; k < EXTRA; k++) fill(xs[k], 0, 1, extra_count[k], rep + 10 * k);
    for (int r = 0; r < n; r++)
      ck_assert_int_eq(cudaGraphLaunch(execs[r], rs.streams[r]), cudaSuccess);
    ranks_sync(&rs);
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) expect(rb[r][q], q, r, pair_count(q, r), rep, "direct");
    for (int k = 0; k < EXTRA; k++) expect(xr[k], 0, 1, extra_count[k], rep + 10 * k, "plan");
  }
  for (int r = 0; r < n; r++) {
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
    for (int q = 0; q < n; q++) cudaFree(sb[r][q]), cudaFree(rb[r][q]);
  }
  for (int k = 0; k < EXTRA; k++) cudaFree(xs[k]), cudaFree(xr[k]);
  ranks_close(&rs, 0);
}
END_TEST

/* An all-to-all of one Mi floats per pair, in place of nothing (separate
 * buffers), twice on the same communicators. */
START_TEST(big) {
  const int n = 4;
  const size_t c = 1 << 20;
  struct ranks rs;
  ranks_open(&rs, n);
  float *sb[MAXR], *rb[MAXR];
  for (int r = 0; r < n; r++) sb[r] = dev_alloc(c * n), rb[r] = dev_alloc(c * n);
  for (int rep = 0; rep < 2; rep++) {
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) fill(sb[r] + (size_t)q * c, r, q, c, rep);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) {
        ck_assert_int_eq(
            ncclSend(sb[r] + (size_t)q * c, c, ncclFloat, q, rs.comms[r], rs.streams[r]),
            ncclSuccess);
        ck_assert_int_eq(
            ncclRecv(rb[r] + (size_t)q * c, c, ncclFloat, q, rs.comms[r], rs.streams[r]),
            ncclSuccess);
      }
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ranks_sync(&rs);
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) expect(rb[r] + (size_t)q * c, q, r, c, rep, "all-to-all");
  }
  for (int r = 0; r < n; r++) cudaFree(sb[r]), cudaFree(rb[r]);
  ranks_close(&rs, 0);
}
END_TEST

/* In place against out of place: ranks 0 and 2 send each block from the
 * buffer they receive it into (a pair of two such ranks is exchanged by
 * one of them; to themselves nothing moves), ranks 1 and 3 from separate
 * buffers (they wait for an in-place peer's send before they write into
 * its buffer). Twice, on new data. */
START_TEST(inplace) {
  const int n = 4;
  const size_t c = 100003;
  struct ranks rs;
  ranks_open(&rs, n);
  float *buf[MAXR], *src[MAXR];
  for (int r = 0; r < n; r++) {
    buf[r] = dev_alloc(c * n);
    src[r] = r % 2 ? dev_alloc(c * n) : buf[r];
  }
  for (int rep = 0; rep < 2; rep++) {
    for (int r = 0; r < n; r++) {
      if (r % 2) ck_assert_int_eq(cudaMemset(buf[r], 0xff, c * n * sizeof(float)), cudaSuccess);
      for (int q = 0; q < n; q++) fill(src[r] + (size_t)q * c, r, q, c, rep);
    }
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) {
        ck_assert_int_eq(
            ncclSend(src[r] + (size_t)q * c, c, ncclFloat, q, rs.comms[r], rs.streams[r]),
            ncclSuccess);
        ck_assert_int_eq(
            ncclRecv(buf[r] + (size_t)q * c, c, ncclFloat, q, rs.comms[r], rs.streams[r]),
            ncclSuccess);
      }
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ranks_sync(&rs);
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++) expect(buf[r] + (size_t)q * c, q, r, c, rep, "in place");
  }
  for (int r = 0; r < n; r++) {
    cudaFree(buf[r]);
    if (r % 2) cudaFree(src[r]);
  }
  ranks_close(&rs, 0);
}
END_TEST

/* Each rank sends 64 Mi floats to itself only: a direct kernel that waits
 * for no peer (so a profiler that runs kernels one at a time can measure
 * its copy loop: docs/CUDA.md, "Kernel quality"). */
START_TEST(self) {
  const int n = 2;
  const size_t c = (size_t)64 << 20;
  struct ranks rs;
  ranks_open(&rs, n);
  float *sb[MAXR], *rb[MAXR];
  for (int r = 0; r < n; r++) sb[r] = dev_alloc(c), rb[r] = dev_alloc(c), fill(sb[r], r, r, c, 0);
  for (int rep = 0; rep < 3; rep++) {
    for (int r = 0; r < n; r++) {
      ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
      ck_assert_int_eq(ncclSend(sb[r], c, ncclFloat, r, rs.comms[r], rs.streams[r]), ncclSuccess);
      ck_assert_int_eq(ncclRecv(rb[r], c, ncclFloat, r, rs.comms[r], rs.streams[r]), ncclSuccess);
      ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
      ck_assert_int_eq(cudaStreamSynchronize(rs.streams[r]), cudaSuccess);
    }
    ranks_sync(&rs);
  }
  for (int r = 0; r < n; r++) expect(rb[r], r, r, c, 0, "self");
  for (int r = 0; r < n; r++) cudaFree(sb[r]), cudaFree(rb[r]);
  ranks_close(&rs, 0);
}
END_TEST

START_TEST(mismatch) {
  struct ranks rs;
  ranks_open(&rs, 2);
  float *s = dev_alloc(100), *d = dev_alloc(101);
  fill(s, 0, 1, 100, 0);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclSend(s, 100, ncclFloat, 1, rs.comms[0], rs.streams[0]), ncclSuccess);
  ck_assert_int_eq(ncclRecv(d, 101, ncclFloat, 0, rs.comms[1], rs.streams[1]), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(cudaStreamSynchronize(rs.streams[r]), cudaSuccess);
    ncclResult_t err = ncclSuccess;
    ck_assert_int_eq(ncclCommGetAsyncError(rs.comms[r], &err), ncclSuccess);
    ck_assert_msg(err != ncclSuccess,
                  "rank %d: a send of 100 floats into a receive of 101: no error", r);
    const char *msg = ncclGetLastError(rs.comms[r]);
    ck_assert_msg(strstr(msg, "size") || strstr(msg, "bytes") || strstr(msg, "count"),
                  "rank %d: the error does not name the sizes: %s", r, msg);
  }
  unsigned int h[101];
  ck_assert_int_eq(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost), cudaSuccess);
  for (int i = 0; i < 101; i++)
    ck_assert_msg(h[i] == 0xffffffffu, "the mismatched receive was written at %d", i);
  cudaFree(s);
  cudaFree(d);
  ranks_close(&rs, 1);
}
END_TEST

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  Suite *s = suite_create("gpu_p2p");
  /* A case each: CK_RUN_CASE=NAME runs one alone (self: under a
   * profiler). */
  struct {
    const char *name;
    const TTest *test;
    int loops;
  } cases[] = {{"mixed", mixed, 2},
               {"big", big, 1},
               {"inplace", inplace, 1},
               {"mismatch", mismatch, 1},
               {"self", self, 1}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    TCase *tc = tcase_create(cases[i].name);
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, cases[i].test, 0, cases[i].loops);
    suite_add_tcase(s, tc);
  }
  return suite_run_nofork(s);
}
