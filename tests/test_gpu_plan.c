/* GPU suite for the first slice of the CUDA engine (src/device): in one
 * process, N "ranks" on GPU 0, one stream each, run the plans of
 * src/sched with the plan kernel over device-memory FIFOs, and every
 * result is compared with a double-precision reference on the host.
 * Covered: ring AllReduce (float sum, half sum, int32 max, double avg), tree
 * AllReduce, Broadcast, AllGather and ReduceScatter (float); counts 0, 1, 7,
 * 1000003; in-place and out-of-place; N = 2, 3, 4, 8. Outputs are poisoned
 * (NaN / -1) first. The LL protocol runs ring and tree AllReduce (float
 * avg, half sum, int8 max / sums), Broadcast, AllGather and ReduceScatter
 * (float, half, int8) on counts 0, 1, 7, 1009, 100003, with Simple jobs
 * between them on the same FIFOs, and a wait that times out. Also prints
 * the speed of a 256 MiB float AllReduce with 2 and 4 ranks, and of small
 * ones with Simple and with LL (printed only, never asserted). Exits 77
 * without a GPU. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
#include "exec/reduce.h"
#include "sched/schedule.h"

#define MAXR 8
#define NCHANNELS 2

static const int rank_counts[] = {2, 3, 4, 8};
static size_t counts[] = {0, 1, 7, 1000003};
static int nrank_counts = 4;

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

/* ---- Host values ------------------------------------------------------------ */

static size_t dt_size(ncclDataType_t dt) {
  switch (dt) {
    case ncclInt8: return 1;
    case ncclFloat16: return 2;
    case ncclFloat32:
    case ncclInt32: return 4;
    default: return 8;
  }
}

/* Exact for the small integers used here (normal numbers, no rounding). */
static uint16_t half_from_int(int v) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 0x8000u : 0, m = (uint32_t)(v < 0 ? -v : v);
  int e = 0;
  while ((m >> e) > 1) e++;
  return (uint16_t)(sign | (uint32_t)(e + 15) << 10 | ((m << (10 - e)) & 0x3ffu));
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31;
  double m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Input element i of rank r: small integers (exact sums) except double. */
static void put(ncclDataType_t dt, void *buf, size_t i, int r) {
  int v = (int)((i * 7 + (size_t)r * 13) % 17) - 8;
  switch (dt) {
    /* Not negative, so no sum of 8 ranks wraps and poison (-1) never fits. */
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)((i * 7 + (size_t)r * 13) % 16); break;
    case ncclFloat16: ((uint16_t *)buf)[i] = half_from_int(v); break;
    case ncclFloat32: ((float *)buf)[i] = (float)v; break;
    case ncclInt32:
      ((int32_t *)buf)[i] = (int32_t)((i * 2654435761u + (size_t)r * 40503u) % 1000003u);
      break;
    default: ((double *)buf)[i] = v + 1.0 / (3 + r + (double)(i % 5)); break;
  }
}

static double get(ncclDataType_t dt, const void *buf, size_t i) {
  switch (dt) {
    case ncclInt8: return ((const int8_t *)buf)[i];
    case ncclFloat16: return half_to_double(((const uint16_t *)buf)[i]);
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclInt32: return ((const int32_t *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

/* ---- One collective on n ranks ------------------------------------------------ */

struct job {
  enum weft_func func;
  int tree;
  ncclDataType_t dt;
  ncclRedOp_t op;
  size_t count; /* per-rank count for AllGather / ReduceScatter */
  int inplace;
  int root;
  size_t chunk_bytes;
  int nchannels;
  int proto; /* enum weft_proto, on every rank */
};

struct ranks {
  int n;
  struct weft_dev_inbox inbox[MAXR];
  struct weft_dev_conns conns[MAXR];
  cudaStream_t streams[MAXR];
  struct weft_dev_wait_diag *diag[MAXR]; /* host-mapped, as the engine's */
};

/* Set by the sys_scope case: every link is built as one between two GPUs
 * (system-scope counters), so that ordering runs on one GPU too. */
static int links_cross;

/* Every rank's inbox on GPU 0, and its link tables through the others'. */
static void ranks_open(struct ranks *rs, int n, int nchannels) {
  void *bases[MAXR];
  unsigned char cross[MAXR];
  memset(cross, links_cross, sizeof cross);
  rs->n = n;
  /* As the engine does: no hidden cross-stream waits in the pool, or one
   * rank's PreMulSum copy could wait for another rank's kernel. */
  ck_assert_int_eq(weft_dev_pool_no_hidden_waits(0), ncclSuccess);
  /* As the engine does: no lazy kernel load waiting for a spinning kernel. */
  ck_assert_int_eq(weft_dev_load_kernels(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    /* The tree uses two channels per lane pair. */
    ck_assert_int_eq(weft_dev_inbox_create(n, 2 * nchannels, 0, &rs->inbox[r]), ncclSuccess);
    bases[r] = rs->inbox[r].base;
  }
  for (int r = 0; r < n; r++) {
    ck_assert_int_eq(weft_dev_conns_build(&rs->inbox[r], bases, cross, r, &rs->conns[r]),
                     ncclSuccess);
    CUDA_OK(cudaHostAlloc((void **)&rs->diag[r], sizeof(*rs->diag[r]), cudaHostAllocMapped));
    memset(rs->diag[r], 0, sizeof(*rs->diag[r]));
    CUDA_OK(cudaHostGetDevicePointer((void **)&rs->conns[r].diag, rs->diag[r], 0));
    if (getenv("WEFT_GPU_PLAN_TIMEOUT_MS"))
      rs->conns[r].timeout_ns = strtoull(getenv("WEFT_GPU_PLAN_TIMEOUT_MS"), NULL, 10) * 1000000ull;
    CUDA_OK(cudaStreamCreateWithFlags(&rs->streams[r], cudaStreamNonBlocking));
  }
}

static void ranks_close(struct ranks *rs) {
  for (int r = 0; r < rs->n; r++) {
    cudaStreamDestroy(rs->streams[r]);
    weft_dev_conns_destroy(&rs->conns[r]);
    weft_dev_inbox_destroy(&rs->inbox[r]);
    cudaFreeHost(rs->diag[r]);
  }
}

static void sizes(const struct job *j, int n, size_t *in_out, size_t *out_out) {
  size_t in = j->count, out = j->count;
  if (j->func == WEFT_FUNC_ALLGATHER) out = j->count * (size_t)n;
  if (j->func == WEFT_FUNC_REDUCESCATTER) in = j->count * (size_t)n;
  *in_out = in;
  *out_out = out;
}

/* Builds, uploads and launches every rank's plan; waits for all. */
/* Rank r's plan of j (ring order 0..n-1, proto set), uploaded on stream. */
static void upload_plan(const struct job *j, int n, int r, int proto, cudaStream_t stream,
                        struct weft_dev_plan *out) {
  int ring[MAXR];
  for (int q = 0; q < n; q++) ring[q] = q;
  struct weft_sched_args a = {.func = j->func,
                              .rank = r,
                              .nranks = n,
                              .root = j->root,
                              .count = j->count,
                              .elem_size = dt_size(j->dt),
                              .nchannels = j->nchannels,
                              .chunk_bytes = j->chunk_bytes,
                              .ring = ring};
  struct weft_plan p;
  ck_assert_int_eq(j->tree ? weft_tree_plan(&a, &p) : weft_ring_plan(&a, &p), ncclSuccess);
  ck_assert_int_eq(weft_dev_plan_upload(&p, stream, out), ncclSuccess);
  out->proto = proto;
  weft_plan_free(&p);
}

static void launch_all(struct ranks *rs, const struct job *j, void *const *in, void *const *out,
                       struct weft_dev_plan *plans, int iters) {
  for (int r = 0; r < rs->n; r++) upload_plan(j, rs->n, r, j->proto, rs->streams[r], &plans[r]);
  CUDA_OK(cudaDeviceSynchronize());
  for (int it = 0; it < iters; it++)
    for (int r = 0; r < rs->n; r++)
      ck_assert_int_eq(weft_dev_plan_launch(&plans[r], &rs->conns[r], in[r], out[r], j->dt, j->op,
                                            rs->streams[r]),
                       ncclSuccess);
}

/* name: the job, for the message of a timeout. */
static void wait_all_named(struct ranks *rs, const char *name) {
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < rs->n; r++) {
    int failed = 0, who = -1;
    ck_assert_int_eq(weft_dev_conns_error(&rs->conns[r], rs->streams[r], &failed, &who),
                     ncclSuccess);
    char what[256];
    if (failed) weft_dev_wait_describe(rs->diag[r], rs->conns[r].nslots, what, sizeof(what));
    ck_assert_msg(!failed, "%s on %d ranks: rank %d timed out: %s", name, rs->n, who, what);
  }
}

static void wait_all(struct ranks *rs, const struct job *j) {
  char name[96];
  snprintf(name, sizeof(name), "%s of count %zu", weft_func_name(j->func), j->count);
  wait_all_named(rs, name);
}

static double reference(const struct job *j, int n, void *const *hin, size_t k, int r) {
  switch (j->func) {
    case WEFT_FUNC_BROADCAST: return get(j->dt, hin[j->root], k);
    case WEFT_FUNC_ALLGATHER: return get(j->dt, hin[k / j->count], k % j->count);
    default: break;
  }
  size_t src = j->func == WEFT_FUNC_REDUCESCATTER ? (size_t)r * j->count + k : k;
  double acc = get(j->dt, hin[0], src);
  for (int q = 1; q < n; q++) {
    double v = get(j->dt, hin[q], src);
    acc = j->op == ncclMax ? fmax(acc, v) : j->op == ncclMin ? fmin(acc, v) : acc + v;
  }
  return j->op == ncclAvg ? acc / n : acc;
}

/* Rank r's output of j (on the device at dout; hout holds it on the host)
 * against the reference from every rank's input. One assertion per rank:
 * Check records every assertion it passes. what names the job. */
static void check_output(const struct job *j, int n, void *const *hin, const void *dout, int r,
                         void *hout, const char *what) {
  size_t cin, cout;
  sizes(j, n, &cin, &cout);
  CUDA_OK(cudaMemcpy(hout, dout, cout * dt_size(j->dt), cudaMemcpyDeviceToHost));
  const double tol = j->dt == ncclFloat64 ? 1e-12 : 1e-6;
  size_t bad = cout;
  double want = 0, got = 0;
  for (size_t k = 0; k < cout && bad == cout; k++) {
    want = reference(j, n, hin, k, r);
    got = get(j->dt, hout, k);
    if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want)))) bad = k;
  }
  ck_assert_msg(bad == cout, "%s: rank %d element %zu is %g, expected %g", what, r, bad, got, want);
}

static void run_job(struct ranks *rs, const struct job *j) {
  const int n = rs->n;
  const size_t es = dt_size(j->dt);
  size_t cin, cout;
  sizes(j, n, &cin, &cout);
  void *hin[MAXR], *hout = malloc(cout * es + 1), *din[MAXR], *dout[MAXR], *dmem[MAXR];
  struct weft_dev_plan plans[MAXR];
  for (int r = 0; r < n; r++) {
    hin[r] = malloc(cin * es + 1);
    for (size_t i = 0; i < cin; i++) put(j->dt, hin[r], i, r);
    /* In-place: NCCL's layouts (the input is the rank's block of the output
     * for AllGather, the output the rank's block of the input for
     * ReduceScatter). */
    size_t bytes = (cin > cout ? cin : cout) * es;
    CUDA_OK(cudaMalloc(&dmem[r], j->inplace ? bytes + 1 : cin * es + cout * es + 2));
    if (j->inplace) {
      dout[r] = din[r] = dmem[r];
      if (j->func == WEFT_FUNC_ALLGATHER) din[r] = (char *)dmem[r] + (size_t)r * j->count * es;
      if (j->func == WEFT_FUNC_REDUCESCATTER) dout[r] = (char *)dmem[r] + (size_t)r * j->count * es;
      CUDA_OK(cudaMemset(dmem[r], 0xff, bytes));
    } else {
      din[r] = dmem[r];
      dout[r] = (char *)dmem[r] + cin * es;
      CUDA_OK(cudaMemset(dout[r], 0xff, cout * es));
    }
    CUDA_OK(cudaMemcpy(din[r], hin[r], cin * es, cudaMemcpyHostToDevice));
  }
  launch_all(rs, j, din, dout, plans, 1);
  wait_all(rs, j);
  char what[160];
  snprintf(what, sizeof(what), "%s%s%s dt %d op %d, %d ranks, count %zu, chunk %zu, %s",
           j->proto == WEFT_PROTO_LL ? "LL " : "", j->tree ? "tree " : "", weft_func_name(j->func),
           (int)j->dt, (int)j->op, n, j->count, j->chunk_bytes,
           j->inplace ? "in place" : "out of place");
  for (int r = 0; r < n; r++) check_output(j, n, hin, dout[r], r, hout, what);
  for (int r = 0; r < n; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(dmem[r]);
    free(hin[r]);
  }
  free(hout);
}

static void run_grid(int n, struct job base, const ncclDataType_t *dts, const ncclRedOp_t *ops,
                     int ndt) {
  struct ranks rs;
  ranks_open(&rs, n, NCHANNELS);
  for (int d = 0; d < ndt; d++)
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
      for (int ip = 0; ip < 2; ip++) {
        struct job j = base;
        j.dt = dts[d];
        j.op = ops[d];
        j.count = counts[c];
        j.inplace = ip;
        j.nchannels = NCHANNELS;
        j.chunk_bytes = 1u << 20;
        run_job(&rs, &j);
      }
  ranks_close(&rs);
}

START_TEST(ring_allreduce) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt32, ncclFloat64};
  const ncclRedOp_t ops[] = {ncclSum, ncclSum, ncclMax, ncclAvg};
  run_grid(rank_counts[_i], (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 4);
}
END_TEST

START_TEST(tree_allreduce) {
  const ncclDataType_t dts[] = {ncclFloat32};
  const ncclRedOp_t ops[] = {ncclSum};
  run_grid(rank_counts[_i], (struct job){.func = WEFT_FUNC_ALLREDUCE, .tree = 1}, dts, ops, 1);
}
END_TEST

START_TEST(ring_others) {
  const ncclDataType_t dts[] = {ncclFloat32};
  const ncclRedOp_t ops[] = {ncclSum};
  int n = rank_counts[_i];
  run_grid(n, (struct job){.func = WEFT_FUNC_BROADCAST, .root = n - 1}, dts, ops, 1);
  run_grid(n, (struct job){.func = WEFT_FUNC_ALLGATHER}, dts, ops, 1);
  run_grid(n, (struct job){.func = WEFT_FUNC_REDUCESCATTER}, dts, ops, 1);
}
END_TEST

/* 256 MiB float AllReduce: printed, never asserted. */
START_TEST(speed) {
  int n = _i == 0 ? 2 : 4;
  const size_t count = (256u << 20) / 4;
  const int warm = 2, iters = 5;
  struct ranks rs;
  ranks_open(&rs, n, 8);
  struct job j = {.func = WEFT_FUNC_ALLREDUCE,
                  .dt = ncclFloat32,
                  .op = ncclSum,
                  .count = count,
                  .chunk_bytes = 4u << 20,
                  .nchannels = 8};
  void *in[MAXR], *out[MAXR];
  struct weft_dev_plan plans[MAXR];
  for (int r = 0; r < n; r++) {
    CUDA_OK(cudaMalloc(&in[r], count * 4));
    CUDA_OK(cudaMalloc(&out[r], count * 4));
    CUDA_OK(cudaMemset(in[r], 0, count * 4));
  }
  launch_all(&rs, &j, in, out, plans, warm);
  wait_all(&rs, &j);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int it = 0; it < iters; it++)
    for (int r = 0; r < n; r++)
      ck_assert_int_eq(
          weft_dev_plan_launch(&plans[r], &rs.conns[r], in[r], out[r], j.dt, j.op, rs.streams[r]),
          ncclSuccess);
  wait_all(&rs, &j);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9) / iters;
  double algbw = (double)count * 4 / s / 1e9;
  printf(
      "speed: float AllReduce 256 MiB, %d ranks on one GPU, 8 lanes: %.3f ms, algbw %.1f GB/s, "
      "busbw %.1f GB/s\n",
      n, s * 1e3, algbw, algbw * 2 * (n - 1) / n);
  fflush(stdout);
  for (int r = 0; r < n; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  ranks_close(&rs);
}
END_TEST

/* ---- LL ----------------------------------------------------------------------- */

/* Odd byte counts (int8, half) and a count past one LL slot per step. */
static size_t ll_counts[] = {0, 1, 7, 1009, 100003};

/* The grid with the LL protocol: every count in and out of place, chunks
 * of 1 MiB (out of place: a step moves a whole piece) and 8 KiB (in place:
 * many steps, chains forward one piece while the next arrives). Count 1009
 * also runs with Simple right after, so the LL jobs that follow meet
 * counters that Simple moved and Simple's data in the slots where LL
 * stages its reductions. */
static void run_ll_grid(int n, struct job base, const ncclDataType_t *dts, const ncclRedOp_t *ops,
                        int ndt) {
  struct ranks rs;
  ranks_open(&rs, n, NCHANNELS);
  for (int d = 0; d < ndt; d++)
    for (size_t c = 0; c < sizeof(ll_counts) / sizeof(ll_counts[0]); c++)
      for (int ip = 0; ip < 2; ip++) {
        struct job j = base;
        j.dt = dts[d];
        j.op = ops[d];
        j.count = ll_counts[c];
        j.inplace = ip;
        j.nchannels = NCHANNELS;
        j.chunk_bytes = ip ? 8u << 10 : 1u << 20;
        j.proto = WEFT_PROTO_LL;
        run_job(&rs, &j);
        if (ll_counts[c] == 1009) {
          j.proto = WEFT_PROTO_SIMPLE;
          run_job(&rs, &j);
        }
      }
  ranks_close(&rs);
}

START_TEST(ll_ring_allreduce) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt8};
  const ncclRedOp_t ops[] = {ncclAvg, ncclSum, ncclMax};
  run_ll_grid(rank_counts[_i], (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 3);
}
END_TEST

START_TEST(ll_tree_allreduce) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt8};
  const ncclRedOp_t ops[] = {ncclSum, ncclSum, ncclSum};
  run_ll_grid(rank_counts[_i], (struct job){.func = WEFT_FUNC_ALLREDUCE, .tree = 1}, dts, ops, 3);
}
END_TEST

START_TEST(ll_ring_others) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt8};
  const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclSum};
  int n = rank_counts[_i];
  run_ll_grid(n, (struct job){.func = WEFT_FUNC_BROADCAST, .root = n - 1}, dts, ops, 3);
  run_ll_grid(n, (struct job){.func = WEFT_FUNC_ALLGATHER}, dts, ops, 3);
  run_ll_grid(n, (struct job){.func = WEFT_FUNC_REDUCESCATTER}, dts, ops, 3);
}
END_TEST

/* The links of ranks on different GPUs (release and acquire at system
 * scope), here all on one GPU: Simple and LL, ring and tree. */
START_TEST(sys_scope) {
  const ncclDataType_t dts[] = {ncclFloat32};
  const ncclRedOp_t ops[] = {ncclSum};
  int n = rank_counts[_i];
  links_cross = 1;
  run_grid(n, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 1);
  run_grid(n, (struct job){.func = WEFT_FUNC_ALLREDUCE, .tree = 1}, dts, ops, 1);
  run_ll_grid(n, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 1);
  links_cross = 0;
}
END_TEST

/* An LL receive whose sender never runs: the wait gives up after the
 * timeout, the error word names the rank that waited, the wait's report
 * names the link, the kernel ends. */
START_TEST(ll_timeout) {
  struct ranks rs;
  ranks_open(&rs, 2, 1);
  for (int r = 0; r < 2; r++) rs.conns[r].timeout_ns = 200u * 1000000u;
  struct job j = {.func = WEFT_FUNC_ALLREDUCE,
                  .dt = ncclFloat32,
                  .op = ncclSum,
                  .count = 4096,
                  .chunk_bytes = 1u << 20,
                  .nchannels = 1,
                  .proto = WEFT_PROTO_LL};
  void *in[2], *out[2];
  struct weft_dev_plan plans[2];
  for (int r = 0; r < 2; r++) {
    CUDA_OK(cudaMalloc(&in[r], j.count * 4));
    CUDA_OK(cudaMalloc(&out[r], j.count * 4));
    CUDA_OK(cudaMemset(in[r], 0, j.count * 4));
  }
  launch_all(&rs, &j, in, out, plans, 0); /* builds and uploads only */
  ck_assert_int_eq(
      weft_dev_plan_launch(&plans[0], &rs.conns[0], in[0], out[0], j.dt, j.op, rs.streams[0]),
      ncclSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  int failed = 0, who = -1;
  ck_assert_int_eq(weft_dev_conns_error(&rs.conns[0], rs.streams[0], &failed, &who), ncclSuccess);
  ck_assert_msg(failed && who == 0, "LL wait without a sender: failed %d, rank %d", failed, who);
  /* The report names the link: rank 0's LL receive from rank 1. */
  const struct weft_dev_wait_diag *d = rs.diag[0];
  ck_assert_msg(d->claimed && d->dir == WEFT_DEV_WAIT_DATA && d->peer == 1 && d->channel == 0 &&
                    d->proto == WEFT_PROTO_LL,
                "LL wait without a sender: diag claimed %u dir %u peer %d channel %d proto %u",
                d->claimed, d->dir, d->peer, d->channel, d->proto);
  char what[256];
  weft_dev_wait_describe(d, rs.conns[0].nslots, what, sizeof(what));
  ck_assert_msg(strstr(what, "a receive from rank 1") != NULL, "description: %s", what);
  for (int r = 0; r < 2; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  ranks_close(&rs);
}
END_TEST

/* Small float AllReduce, Simple against LL, 2 and 4 ranks on one GPU, one
 * lane: microseconds per call, printed for tuning (never asserted). */
START_TEST(ll_speed) {
  const int n = _i == 0 ? 2 : 4, iters = 200;
  const size_t sizes[] = {256, 4u << 10, 32u << 10, 128u << 10, 512u << 10, 2u << 20};
  struct ranks rs;
  ranks_open(&rs, n, 1);
  void *in[MAXR], *out[MAXR];
  const size_t maxb = sizes[sizeof(sizes) / sizeof(sizes[0]) - 1];
  for (int r = 0; r < n; r++) {
    CUDA_OK(cudaMalloc(&in[r], maxb));
    CUDA_OK(cudaMalloc(&out[r], maxb));
    CUDA_OK(cudaMemset(in[r], 0, maxb));
  }
  for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
    double us[2];
    for (int proto = 0; proto < 2; proto++) {
      struct job j = {.func = WEFT_FUNC_ALLREDUCE,
                      .dt = ncclFloat32,
                      .op = ncclSum,
                      .count = sizes[k] / 4,
                      .chunk_bytes = 1u << 20,
                      .nchannels = 1,
                      .proto = proto};
      struct weft_dev_plan plans[MAXR];
      launch_all(&rs, &j, in, out, plans, 5);
      wait_all(&rs, &j);
      struct timespec t0, t1;
      clock_gettime(CLOCK_MONOTONIC, &t0);
      for (int it = 0; it < iters; it++)
        for (int r = 0; r < n; r++)
          ck_assert_int_eq(weft_dev_plan_launch(&plans[r], &rs.conns[r], in[r], out[r], j.dt, j.op,
                                                rs.streams[r]),
                           ncclSuccess);
      wait_all(&rs, &j);
      clock_gettime(CLOCK_MONOTONIC, &t1);
      us[proto] =
          ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) / iters;
      for (int r = 0; r < n; r++) weft_dev_plan_free(&plans[r]);
    }
    printf(
        "ll_speed: float AllReduce %zu bytes, %d ranks on one GPU, 1 lane: Simple %.1f us, "
        "LL %.1f us\n",
        sizes[k], n, us[0], us[1]);
    fflush(stdout);
  }
  for (int r = 0; r < n; r++) {
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  ranks_close(&rs);
}
END_TEST

/* ---- fp8, PreMulSum, Direct (issue 5) -------------------------------------------- */

static int small_run; /* WEFT_GPU_PLAN_SMALL */

/* The references below are the host engine's own element operations
 * (src/exec/reduce.c), applied in rank order, and results are compared
 * byte for byte: a pass means the CUDA engine and the host engine agree on
 * every bit. Inputs are small integers where the plan's order of
 * operations differs from rank order (ring), so any order gives the same
 * bits; Direct, whose order is rank order on every rank, gets arbitrary
 * finite values. */

static uint32_t mix(size_t i, int r, int salt) {
  uint32_t h = (uint32_t)i * 2654435761u ^ (uint32_t)(r + 1) * 40503u ^ (uint32_t)salt * 97u;
  h ^= h >> 15;
  h *= 2246822519u;
  return h ^ (h >> 13);
}

/* Small integers as codes of the narrow formats. */
static uint8_t e4m3_of(int v) {
  static const uint8_t mag[] = {0x00, 0x38, 0x40}; /* 0, 1, 2 */
  return (uint8_t)((v < 0 ? 0x80 : 0) | mag[v < 0 ? -v : v]);
}
static uint8_t e5m2_of(int v) {
  return (uint8_t)(v == 0 ? 0 : (v < 0 ? 0x80 : 0) | 0x3c); /* 0, +-1 */
}
static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16); /* exact for the small integers used */
}

/* Element i of rank r in dt. exact: small integers (fp8 zeros of odd ranks
 * are -0, and every sat-th element is a value whose sum saturates); else
 * pseudo-random finite values small enough that a sum of 8 neither
 * overflows nor makes a NaN. */
static void put_x(ncclDataType_t dt, void *buf, size_t i, int r, int exact, int sat) {
  uint32_t h = mix(i, r, (int)dt);
  int v = (int)(h % 5) - 2;
  int big = sat && i % 11 == 5;
  switch (dt) {
    case ncclInt8:
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)(exact ? v : (int)h); break;
    case ncclInt32:
    case ncclUint32: ((uint32_t *)buf)[i] = exact ? (uint32_t)v : h; break;
    case ncclInt64:
    case ncclUint64:
      ((uint64_t *)buf)[i] = exact ? (uint64_t)(int64_t)v : (uint64_t)h << 32 | mix(i, r, 99);
      break;
    case ncclFloat32:
      ((float *)buf)[i] = exact ? (float)v : ((float)(h % 2000001u) - 1e6f) / 1024.0f;
      break;
    case ncclFloat64:
      ((double *)buf)[i] = exact ? (double)v : ((double)(h % 2000001u) - 1e6) / 3.0;
      break;
    case ncclFloat16:
      ((uint16_t *)buf)[i] =
          exact ? half_from_int(v)
                : (uint16_t)((h & 0x8000u) | (1u + (h >> 16) % 20u) << 10 | (h & 0x3ffu));
      break;
    case ncclBfloat16:
      ((uint16_t *)buf)[i] =
          exact ? bf16_of((float)v)
                : (uint16_t)((h & 0x8000u) | (100u + (h >> 16) % 40u) << 7 | (h & 0x7fu));
      break;
    case ncclFloat8e4m3: {
      uint8_t c = exact ? e4m3_of(v) : (uint8_t)(h & 0xf7u); /* no NaN (0x7f) */
      if (exact && v == 0 && r % 2) c = 0x80;
      ((uint8_t *)buf)[i] = big ? 0x77 : c; /* 240: two of them pass 448 */
      break;
    }
    case ncclFloat8e5m2: {
      int w = (int)(h % 3) - 1;
      uint8_t c = exact ? e5m2_of(w) : (uint8_t)(h & 0xbbu); /* exponent <= 14 */
      if (exact && w == 0 && r % 2) c = 0x80;
      ((uint8_t *)buf)[i] = big ? 0x7a : c; /* 49152: two pass 57344 */
      break;
    }
    default: break;
  }
}

/* PreMulSum scalars: exact products of the small integers. */
static void scalar_of(ncclDataType_t dt, unsigned char out[8]) {
  memset(out, 0, 8);
  switch (dt) {
    case ncclInt8:
    case ncclUint8: out[0] = 3; break;
    case ncclInt32:
    case ncclUint32: {
      uint32_t v = 3;
      memcpy(out, &v, 4);
      break;
    }
    case ncclInt64:
    case ncclUint64: {
      uint64_t v = 3;
      memcpy(out, &v, 8);
      break;
    }
    case ncclFloat32: {
      float v = 0.5f;
      memcpy(out, &v, 4);
      break;
    }
    case ncclFloat64: {
      double v = 0.25;
      memcpy(out, &v, 8);
      break;
    }
    case ncclFloat16: out[1] = 0x40; break;    /* 2.0 */
    case ncclBfloat16: out[1] = 0x3f; break;   /* 0.5 */
    case ncclFloat8e4m3: out[0] = 0x30; break; /* 0.5 */
    case ncclFloat8e5m2: out[0] = 0x40; break; /* 2.0 */
    default: break;
  }
}

/* The host engine's result for count elements at element offset off:
 * (optionally scaled) inputs reduced in rank order, then avg's divide. */
static void host_result(ncclDataType_t dt, ncclRedOp_t op, void *const *in, int n, size_t off,
                        size_t count, const unsigned char *scalar, void *out) {
  size_t es = weft_dtype_size(dt);
  void *tmp = malloc(count * es + 1);
  for (int k = 0; k < n; k++) {
    const char *src = (const char *)in[k] + off * es;
    if (scalar != NULL) {
      weft_scale_host(tmp, src, count, dt, scalar);
      src = tmp;
    }
    if (k == 0)
      memcpy(out, src, count * es);
    else
      weft_reduce_host(out, out, src, count, dt, op);
  }
  if (op == ncclAvg) weft_postop_avg_host(out, count, dt, n);
  free(tmp);
}

struct xjob {
  enum weft_func func; /* AllReduce or ReduceScatter */
  int direct;
  ncclDataType_t dt;
  ncclRedOp_t op;
  size_t count; /* per rank for ReduceScatter */
  int inplace;
  int exact;  /* small-integer inputs */
  int premul; /* 0: none; 1: host scalar; 2: device scalar */
};

static void xjob_name(const struct xjob *j, int n, char *buf, size_t size) {
  snprintf(buf, size, "%s%s %s op %d%s, %d ranks, count %zu, %s", j->direct ? "direct " : "",
           weft_func_name(j->func), weft_dtype_name(j->dt), (int)j->op,
           j->premul == 1   ? " premul(host)"
           : j->premul == 2 ? " premul(device)"
                            : "",
           n, j->count, j->inplace ? "in place" : "out of place");
}

/* What cuda.c does for one rank: PreMulSum scales a stream-ordered copy of
 * the input first (a device scalar set on the stream just before, so it is
 * read when the kernel runs); Direct adds the rank-ordered reduction. */
static void xjob_launch(struct ranks *rs, int r, const struct xjob *j,
                        const struct weft_dev_plan *plan, const void *in, void *out,
                        size_t in_count, void *dev_scalar) {
  cudaStream_t s = rs->streams[r];
  ncclRedOp_t op = j->op;
  void *scaled = NULL;
  if (j->premul) {
    struct weft_dev_scalar sc = {NULL, {0}};
    scalar_of(j->dt, sc.value);
    if (j->premul == 2) {
      CUDA_OK(
          cudaMemcpyAsync(dev_scalar, sc.value, weft_dtype_size(j->dt), cudaMemcpyHostToDevice, s));
      sc.ptr = dev_scalar;
      memset(sc.value, 0xee, sizeof(sc.value)); /* must not be used */
    }
    if (in_count > 0) {
      CUDA_OK(cudaMallocAsync(&scaled, in_count * weft_dtype_size(j->dt), s));
      ck_assert_int_eq(weft_dev_scale(scaled, in, in_count, j->dt, &sc, s), ncclSuccess);
      in = scaled;
    }
    op = ncclSum;
  }
  ck_assert_int_eq(weft_dev_plan_launch(plan, &rs->conns[r], in, out, j->dt, op, s), ncclSuccess);
  if (j->direct)
    ck_assert_int_eq(weft_dev_direct_reduce(plan, r, rs->n, in, out, j->count, j->dt, op, s),
                     ncclSuccess);
  if (scaled != NULL) CUDA_OK(cudaFreeAsync(scaled, s));
}

static void run_xjob(struct ranks *rs, const struct xjob *j) {
  const int n = rs->n;
  const size_t es = weft_dtype_size(j->dt);
  const size_t cin = j->func == WEFT_FUNC_REDUCESCATTER ? j->count * (size_t)n : j->count;
  const size_t cout = j->count;
  void *hin[MAXR], *din[MAXR], *dout[MAXR], *dmem[MAXR], *dscalar[MAXR];
  struct weft_dev_plan plans[MAXR];
  int ring[MAXR];
  for (int r = 0; r < n; r++) ring[r] = r;
  for (int r = 0; r < n; r++) {
    struct weft_plan p;
    struct weft_sched_args a = {.func = j->func,
                                .rank = r,
                                .nranks = n,
                                .count = j->count,
                                .elem_size = es,
                                .nchannels = NCHANNELS,
                                .chunk_bytes = 1u << 20,
                                .ring = ring};
    ck_assert_int_eq(j->direct ? weft_direct_plan(r, n, j->count * es, &p) : weft_ring_plan(&a, &p),
                     ncclSuccess);
    ck_assert_int_eq(weft_dev_plan_upload(&p, rs->streams[r], &plans[r]), ncclSuccess);
    weft_plan_free(&p);
    hin[r] = malloc(cin * es + 1);
    for (size_t i = 0; i < cin; i++) put_x(j->dt, hin[r], i, r, j->exact, j->exact && !j->premul);
    CUDA_OK(cudaMalloc(&dmem[r], cin * es + cout * es + 16));
    din[r] = dmem[r];
    dout[r] = j->inplace ? (char *)dmem[r] +
                               (j->func == WEFT_FUNC_REDUCESCATTER ? (size_t)r * j->count * es : 0)
                         : (char *)dmem[r] + cin * es;
    if (!j->inplace) CUDA_OK(cudaMemset(dout[r], 0xa5, cout * es));
    CUDA_OK(cudaMemcpy(din[r], hin[r], cin * es, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMalloc(&dscalar[r], 8));
    CUDA_OK(cudaMemset(dscalar[r], 0x7e, 8)); /* a wrong scalar until the stream sets it */
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < n; r++) xjob_launch(rs, r, j, &plans[r], din[r], dout[r], cin, dscalar[r]);
  char name[160];
  xjob_name(j, n, name, sizeof(name));
  wait_all_named(rs, name);
  unsigned char sc[8];
  scalar_of(j->dt, sc);
  char *want = malloc(cout * es + 1), *got = malloc(cout * es + 1), *first = malloc(cout * es + 1);
  const int rs_blocks = j->func == WEFT_FUNC_REDUCESCATTER;
  for (int r = 0; r < n; r++) {
    /* AllReduce: one reference serves every rank. */
    if (r == 0 || rs_blocks)
      host_result(j->dt, j->op, hin, n, rs_blocks ? (size_t)r * j->count : 0, cout,
                  j->premul ? sc : NULL, want);
    CUDA_OK(cudaMemcpy(got, dout[r], cout * es, cudaMemcpyDeviceToHost));
    size_t bad = cout;
    for (size_t k = 0; k < cout && bad == cout; k++)
      if (memcmp(got + k * es, want + k * es, es) != 0) bad = k;
    unsigned long long gv = 0, wv = 0;
    if (bad < cout) {
      memcpy(&gv, got + bad * es, es);
      memcpy(&wv, want + bad * es, es);
    }
    ck_assert_msg(bad == cout, "%s: rank %d element %zu is 0x%llx, the host engine gives 0x%llx",
                  name, r, bad, gv, wv);
    /* Direct: every rank holds the very same bits. */
    if (j->direct && r == 0) memcpy(first, got, cout * es);
    if (j->direct && r > 0)
      ck_assert_msg(memcmp(first, got, cout * es) == 0, "%s: rank %d differs from rank 0", name, r);
  }
  for (int r = 0; r < n; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(dmem[r]);
    cudaFree(dscalar[r]);
    free(hin[r]);
  }
  free(want);
  free(got);
  free(first);
}

static void run_xgrid(int n, struct xjob base, const ncclDataType_t *dts, const ncclRedOp_t *ops,
                      int ndt, const size_t *xcounts, int ncounts) {
  struct ranks rs;
  ranks_open(&rs, n, NCHANNELS);
  for (int d = 0; d < ndt; d++)
    for (int c = 0; c < ncounts; c++)
      for (int ip = 0; ip < 2; ip++) {
        struct xjob j = base;
        j.dt = dts[d];
        j.op = ops[d];
        j.count = xcounts[c];
        j.inplace = ip;
        run_xjob(&rs, &j);
      }
  ranks_close(&rs);
}

/* A group's collectives fused into one launch per rank, as the engine
 * launches consecutive collectives of a group: different functions,
 * datatypes, ops, channel counts and algorithms (so different CTA counts)
 * run in order in one kernel; launched twice with the same barrier words,
 * which must reset between launches; Simple and LL. */
#define NFUSED 5
static void fused_run(struct ranks *rs, int proto, unsigned *const *barrier) {
  const int n = rs->n;
  const struct job jobs[NFUSED] = {
      {.func = WEFT_FUNC_ALLREDUCE,
       .dt = ncclFloat32,
       .op = ncclSum,
       .count = 100003,
       .nchannels = 4,
       .chunk_bytes = 1u << 20},
      {.func = WEFT_FUNC_ALLGATHER,
       .dt = ncclInt32,
       .op = ncclSum,
       .count = 777,
       .nchannels = 2,
       .chunk_bytes = 1u << 20},
      {.func = WEFT_FUNC_REDUCESCATTER,
       .dt = ncclFloat32,
       .op = ncclMax,
       .count = 5000,
       .nchannels = 1,
       .chunk_bytes = 1u << 20},
      {.func = WEFT_FUNC_ALLREDUCE,
       .tree = 1,
       .dt = ncclFloat64,
       .op = ncclAvg,
       .count = 3001,
       .nchannels = 2,
       .chunk_bytes = 1u << 20},
      {.func = WEFT_FUNC_BROADCAST,
       .dt = ncclFloat16,
       .op = ncclSum,
       .root = n - 1,
       .count = 999,
       .nchannels = 3,
       .chunk_bytes = 1u << 20},
  };
  void *hin[NFUSED][MAXR], *din[NFUSED][MAXR], *dout[NFUSED][MAXR];
  struct weft_dev_plan plans[NFUSED][MAXR];
  for (int k = 0; k < NFUSED; k++) {
    const struct job *j = &jobs[k];
    size_t cin, cout, es = dt_size(j->dt);
    sizes(j, n, &cin, &cout);
    for (int r = 0; r < n; r++) {
      upload_plan(j, n, r, proto, rs->streams[r], &plans[k][r]);
      hin[k][r] = malloc(cin * es + 1);
      for (size_t i = 0; i < cin; i++) put(j->dt, hin[k][r], i, r);
      CUDA_OK(cudaMalloc(&din[k][r], cin * es + 1));
      CUDA_OK(cudaMalloc(&dout[k][r], cout * es + 1));
      CUDA_OK(cudaMemcpy(din[k][r], hin[k][r], cin * es, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemset(dout[k][r], 0xff, cout * es));
    }
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int rep = 0; rep < 2; rep++)
    for (int r = 0; r < n; r++) {
      struct weft_dev_fused_coll fc[NFUSED];
      for (int k = 0; k < NFUSED; k++)
        fc[k] = (struct weft_dev_fused_coll){&plans[k][r], din[k][r], dout[k][r], jobs[k].dt,
                                             jobs[k].op};
      ck_assert_int_eq(weft_dev_fused_launch(fc, NFUSED, &rs->conns[r], barrier[r], rs->streams[r]),
                       ncclSuccess);
    }
  char name[64];
  snprintf(name, sizeof(name), "%s fused launch of %d collectives",
           proto == WEFT_PROTO_LL ? "LL" : "Simple", NFUSED);
  wait_all_named(rs, name);
  for (int k = 0; k < NFUSED; k++) {
    const struct job *j = &jobs[k];
    size_t cin, cout, es = dt_size(j->dt);
    sizes(j, n, &cin, &cout);
    void *hout = malloc(cout * es + 1);
    char what[128];
    snprintf(what, sizeof(what), "%s, collective %d (%s%s), %d ranks", name, k,
             j->tree ? "tree " : "", weft_func_name(j->func), n);
    for (int r = 0; r < n; r++) check_output(j, n, hin[k], dout[k][r], r, hout, what);
    free(hout);
    for (int r = 0; r < n; r++) {
      weft_dev_plan_free(&plans[k][r]);
      cudaFree(din[k][r]);
      cudaFree(dout[k][r]);
      free(hin[k][r]);
    }
  }
}

START_TEST(fused) {
  struct ranks rs;
  unsigned *barrier[MAXR];
  ranks_open(&rs, rank_counts[_i], 4);
  for (int r = 0; r < rs.n; r++)
    ck_assert_int_eq(weft_dev_barrier_create(&barrier[r]), ncclSuccess);
  fused_run(&rs, WEFT_PROTO_SIMPLE, barrier);
  fused_run(&rs, WEFT_PROTO_LL, barrier);
  for (int r = 0; r < rs.n; r++) weft_dev_barrier_destroy(barrier[r]);
  ranks_close(&rs);
}
END_TEST

/* fp8 on the ring: exact sums, -0 and +0, and saturation past the largest
 * finite value (e5m2 never makes an inf). */
START_TEST(fp8_ring) {
  const ncclDataType_t dts[] = {ncclFloat8e4m3, ncclFloat8e4m3, ncclFloat8e4m3,
                                ncclFloat8e5m2, ncclFloat8e5m2, ncclFloat8e5m2};
  const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclAvg, ncclSum, ncclMin, ncclProd};
  run_xgrid(rank_counts[_i], (struct xjob){.func = WEFT_FUNC_ALLREDUCE, .exact = 1}, dts, ops, 6,
            counts, 4);
}
END_TEST

/* PreMulSum with a host and a device scalar, on every float type and an
 * integer, AllReduce and ReduceScatter; and on Direct with arbitrary
 * values (bit for bit against the host engine's scale-then-sum). */
START_TEST(premul) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclBfloat16,   ncclFloat64,
                                ncclInt32,   ncclUint8,   ncclFloat8e4m3, ncclFloat8e5m2};
  const ncclRedOp_t ops[] = {ncclSum, ncclSum, ncclSum, ncclSum,
                             ncclSum, ncclSum, ncclSum, ncclSum};
  const size_t few[] = {0, 1, 7, 1003};
  int n = rank_counts[_i];
  for (int pm = 1; pm <= 2; pm++) {
    run_xgrid(n, (struct xjob){.func = WEFT_FUNC_ALLREDUCE, .exact = 1, .premul = pm}, dts, ops, 8,
              counts, 4);
    run_xgrid(n, (struct xjob){.func = WEFT_FUNC_REDUCESCATTER, .exact = 1, .premul = pm}, dts, ops,
              2, few, 4);
    run_xgrid(n, (struct xjob){.func = WEFT_FUNC_ALLREDUCE, .direct = 1, .premul = pm}, dts, ops, 8,
              few, 4);
  }
}
END_TEST

/* Direct: arbitrary values, reduced in rank order on every rank. */
START_TEST(direct) {
  const ncclDataType_t dts[] = {ncclFloat32,    ncclFloat64,    ncclFloat16, ncclBfloat16,
                                ncclFloat8e4m3, ncclFloat8e5m2, ncclInt32,   ncclInt8,
                                ncclFloat32,    ncclUint64};
  const ncclRedOp_t ops[] = {ncclSum, ncclAvg, ncclSum, ncclProd, ncclSum,
                             ncclMin, ncclMax, ncclAvg, ncclMax,  ncclSum};
  /* 4096 floats are the 16 KiB where tuning stops choosing Direct; past
   * it (NCCL_ALGO=Direct) the lanes carry several slots. */
  const size_t dcounts[] = {0, 1, 7, 4096, 300007};
  run_xgrid(rank_counts[_i], (struct xjob){.func = WEFT_FUNC_ALLREDUCE, .direct = 1}, dts, ops, 10,
            dcounts, small_run ? 4 : 5);
}
END_TEST

/* ---- Grouped send/recv (issue 5) ----------------------------------------------- */

#define MAXOPS 256

/* One rank's grouped sends and receives: op i moves bytes[i] to or from
 * peer ops[i].peer; msg[i] numbers it among the (src, dst) pair's
 * messages, so the k-th send pairs with the k-th receive. */
struct p2p_rank {
  int nops;
  struct weft_p2p ops[MAXOPS];
  int msg[MAXOPS];
  size_t off[MAXOPS]; /* into the rank's arena */
};

static uint8_t p2p_byte(int src, int dst, int k, size_t i) {
  return (uint8_t)(i * 31u + (unsigned)src * 7u + (unsigned)dst * 13u + (unsigned)k * 101u + 1u);
}

static void p2p_push(struct p2p_rank *pr, int peer, int is_send, size_t bytes, int k) {
  ck_assert_int_lt(pr->nops, MAXOPS);
  pr->ops[pr->nops] = (struct weft_p2p){peer, is_send, bytes};
  pr->msg[pr->nops++] = k;
}

/* Runs every rank's ops as one launch each and checks every received byte,
 * and that nothing around the buffers was written. Buffers sit at odd
 * offsets (0..2 past 16) in one arena per rank, with canaries between. */
static void run_p2p(struct ranks *rs, struct p2p_rank *pr, const char *what) {
  const int n = rs->n;
  const size_t gap = 64;
  char *arena[MAXR], *host[MAXR];
  size_t size[MAXR];
  struct weft_dev_plan plans[MAXR];
  for (int r = 0; r < n; r++) {
    size_t at = gap;
    for (int i = 0; i < pr[r].nops; i++) {
      at = (at + 15) / 16 * 16 + (size_t)(i % 3);
      pr[r].off[i] = at;
      at += pr[r].ops[i].bytes + gap;
    }
    size[r] = at;
    host[r] = malloc(size[r]);
    memset(host[r], 0xcd, size[r]);
    for (int i = 0; i < pr[r].nops; i++) {
      const struct weft_p2p *o = &pr[r].ops[i];
      for (size_t b = 0; b < o->bytes; b++)
        host[r][pr[r].off[i] + b] =
            o->is_send ? (char)p2p_byte(r, o->peer, pr[r].msg[i], b) : (char)0xab;
    }
    CUDA_OK(cudaMalloc((void **)&arena[r], size[r]));
    CUDA_OK(cudaMemcpy(arena[r], host[r], size[r], cudaMemcpyHostToDevice));
    struct weft_plan p;
    ck_assert_int_eq(weft_p2p_plan(r, pr[r].ops, pr[r].nops, &p), ncclSuccess);
    ck_assert_int_eq(weft_dev_plan_upload(&p, rs->streams[r], &plans[r]), ncclSuccess);
    weft_plan_free(&p);
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < n; r++) {
    void *bufs[MAXOPS];
    for (int i = 0; i < pr[r].nops; i++) bufs[i] = arena[r] + pr[r].off[i];
    ck_assert_int_eq(
        weft_dev_p2p_launch(&plans[r], &rs->conns[r], bufs, pr[r].nops, rs->streams[r]),
        ncclSuccess);
  }
  wait_all(rs, &(struct job){.func = WEFT_FUNC_SEND});
  char *got = NULL;
  for (int r = 0; r < n; r++) {
    got = realloc(got, size[r]);
    CUDA_OK(cudaMemcpy(got, arena[r], size[r], cudaMemcpyDeviceToHost));
    /* What the arena should hold: the sends as they were, the receives
     * filled with their senders' bytes, the canaries untouched. */
    for (int i = 0; i < pr[r].nops; i++) {
      const struct weft_p2p *o = &pr[r].ops[i];
      if (o->is_send) continue;
      for (size_t b = 0; b < o->bytes; b++)
        host[r][pr[r].off[i] + b] = (char)p2p_byte(o->peer, r, pr[r].msg[i], b);
    }
    size_t bad = size[r];
    for (size_t b = 0; b < size[r] && bad == size[r]; b++)
      if (got[b] != host[r][b]) bad = b;
    size_t at = bad < size[r] ? bad : 0; /* Check evaluates the message either way */
    ck_assert_msg(bad == size[r],
                  "%s, %d ranks: rank %d byte %zu of its arena is 0x%02x, expected "
                  "0x%02x",
                  what, n, r, bad, (unsigned char)got[at], (unsigned char)host[r][at]);
  }
  free(got);
  for (int r = 0; r < n; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(arena[r]);
    free(host[r]);
  }
}

/* A size per message: empty, odd, one byte short of filling the first
 * slot with the header, and several slots. */
static size_t p2p_size(int src, int dst, int k) {
  static const size_t sizes[] = {0, 1, 7, 4099, (128u << 10) - 16, 300001};
  size_t s = sizes[(size_t)(src * 7 + dst * 3 + k) % 6];
  return small_run && s > 4099 ? 4099 + (size_t)k : s;
}

/* Each rank receives from its left neighbour first, then sends right. */
START_TEST(p2p_ring) {
  int n = rank_counts[_i];
  struct ranks rs;
  struct p2p_rank *pr = calloc(MAXR, sizeof(*pr));
  ranks_open(&rs, n, 1);
  for (int round = 0; round < 3; round++) {
    memset(pr, 0, MAXR * sizeof(*pr));
    for (int r = 0; r < n; r++) {
      int left = (r + n - 1) % n, right = (r + 1) % n;
      p2p_push(&pr[r], left, 0, p2p_size(left, r, round), 0);
      p2p_push(&pr[r], right, 1, p2p_size(r, right, round), 0);
    }
    run_p2p(&rs, pr, "ring exchange");
  }
  ranks_close(&rs);
  free(pr);
}
END_TEST

/* All-to-all among 4 ranks, self included (a LOCAL copy): k messages per
 * pair, in a different peer order on every rank. k = 12 makes 96 ops per
 * rank, past WEFT_DEV_P2P_INLINE, so the buffer table goes to the device. */
START_TEST(p2p_alltoall) {
  const int n = 4, k = _i == 0 ? 1 : 12;
  struct ranks rs;
  struct p2p_rank *pr = calloc(MAXR, sizeof(*pr));
  ranks_open(&rs, n, 1);
  for (int r = 0; r < n; r++)
    for (int m = 0; m < k; m++)
      for (int j = 0; j < n; j++) {
        int p = (r + (m % 2 ? n - j : j)) % n;
        p2p_push(&pr[r], p, 1, p2p_size(r, p, m), m);
        p2p_push(&pr[r], p, 0, p2p_size(p, r, m), m);
      }
  run_p2p(&rs, pr, k == 1 ? "all-to-all" : "all-to-all, 12 messages per pair");
  ranks_close(&rs);
  free(pr);
}
END_TEST

/* A receive whose count is not the send's copies nothing, and its rank's
 * error word names the reason and the sender; the sender finishes. */
START_TEST(p2p_size_mismatch) {
  const size_t sent = _i == 0 ? 100 : 64, posted = _i == 0 ? 64 : 100;
  struct ranks rs;
  ranks_open(&rs, 2, 1);
  struct weft_p2p s_op = {1, 1, sent}, r_op = {0, 0, posted};
  struct weft_plan p;
  struct weft_dev_plan plans[2];
  char *buf[2];
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(weft_p2p_plan(r, r == 0 ? &s_op : &r_op, 1, &p), ncclSuccess);
    ck_assert_int_eq(weft_dev_plan_upload(&p, rs.streams[r], &plans[r]), ncclSuccess);
    weft_plan_free(&p);
    CUDA_OK(cudaMalloc((void **)&buf[r], 256));
    CUDA_OK(cudaMemset(buf[r], r == 0 ? 0x11 : 0xab, 256));
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int r = 0; r < 2; r++) {
    void *b = buf[r];
    ck_assert_int_eq(weft_dev_p2p_launch(&plans[r], &rs.conns[r], &b, 1, rs.streams[r]),
                     ncclSuccess);
  }
  CUDA_OK(cudaDeviceSynchronize());
  uint64_t word[2];
  for (int r = 0; r < 2; r++)
    CUDA_OK(cudaMemcpy(&word[r], rs.conns[r].error, sizeof(word[r]), cudaMemcpyDeviceToHost));
  ck_assert_msg(word[0] == 0, "the sender's error word is 0x%llx", (unsigned long long)word[0]);
  ck_assert_int_eq(WEFT_DEV_ERROR_REASON(word[1]), WEFT_DEV_ERR_P2P_SIZE);
  ck_assert_int_eq(WEFT_DEV_ERROR_RANK(word[1]), 1);
  ck_assert_int_eq(WEFT_DEV_ERROR_PEER(word[1]), 0);
  unsigned char got[256];
  CUDA_OK(cudaMemcpy(got, buf[1], sizeof(got), cudaMemcpyDeviceToHost));
  for (size_t b = 0; b < sizeof(got); b++)
    ck_assert_msg(got[b] == 0xab, "byte %zu of the receive buffer was written", b);
  for (int r = 0; r < 2; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(buf[r]);
  }
  ranks_close(&rs);
}
END_TEST

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  /* WEFT_GPU_PLAN_SMALL: 2 and 3 ranks, counts up to 1003 (LL: 9001), no
   * speed (for compute-sanitizer). */
  int small = getenv("WEFT_GPU_PLAN_SMALL") != NULL;
  small_run = small;
  if (small) {
    counts[3] = 1003;
    ll_counts[4] = 9001; /* a float Broadcast step still spans two LL slots */
    nrank_counts = 2;
  }
  Suite *s = suite_create("gpu_plan");
  TCase *tc = tcase_create("plans");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, ring_allreduce, 0, nrank_counts);
  tcase_add_loop_test(tc, tree_allreduce, 0, nrank_counts);
  tcase_add_loop_test(tc, ring_others, 0, nrank_counts);
  tcase_add_loop_test(tc, speed, 0, small || getenv("WEFT_GPU_PLAN_NO_SPEED") ? 0 : 2);
  tcase_add_loop_test(tc, ll_ring_allreduce, 0, nrank_counts);
  tcase_add_loop_test(tc, ll_tree_allreduce, 0, nrank_counts);
  tcase_add_loop_test(tc, ll_ring_others, 0, nrank_counts);
  tcase_add_loop_test(tc, sys_scope, 0, nrank_counts);
  tcase_add_test(tc, ll_timeout);
  tcase_add_loop_test(tc, ll_speed, 0, small || getenv("WEFT_GPU_PLAN_NO_SPEED") ? 0 : 2);
  suite_add_tcase(s, tc);
  /* fp8, PreMulSum, Direct and grouped send/recv: CK_RUN_CASE=engine_ops
   * runs these alone. */
  TCase *ops_tc = tcase_create("engine_ops");
  tcase_set_timeout(ops_tc, 300);
  tcase_add_loop_test(ops_tc, fp8_ring, 0, nrank_counts);
  tcase_add_loop_test(ops_tc, premul, 0, nrank_counts);
  tcase_add_loop_test(ops_tc, direct, 0, nrank_counts);
  tcase_add_loop_test(ops_tc, fused, 0, nrank_counts);
  tcase_add_loop_test(ops_tc, p2p_ring, 0, nrank_counts);
  tcase_add_loop_test(ops_tc, p2p_alltoall, 0, 2);
  tcase_add_loop_test(ops_tc, p2p_size_mismatch, 0, 2);
  suite_add_tcase(s, ops_tc);
  SRunner *sr = srunner_create(s);
  /* CUDA is initialized before Check would fork. */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_VERBOSE);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
