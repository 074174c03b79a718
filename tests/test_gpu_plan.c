/* GPU suite for the first slice of the CUDA engine (src/device): in one
 * process, N "ranks" on GPU 0, one stream each, run the plans of
 * src/sched with the plan kernel over device-memory FIFOs, and every
 * result is compared with a double-precision reference on the host.
 * Covered: ring AllReduce (float sum, half sum, int32 max, double avg), tree
 * AllReduce, Broadcast, AllGather and ReduceScatter (float); counts 0, 1, 7,
 * 1000003; in-place and out-of-place; N = 2, 3, 4, 8. Outputs are poisoned
 * (NaN / -1) first. Also prints the speed of a 256 MiB float AllReduce with
 * 2 and 4 ranks (printed only, never asserted). Exits 77 without a GPU. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device/device.h"
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
};

struct ranks {
  int n;
  struct weft_dev_conns conns;
  cudaStream_t streams[MAXR];
};

static void ranks_open(struct ranks *rs, int n, int nchannels) {
  rs->n = n;
  /* The tree uses two channels per lane pair. */
  ck_assert_int_eq(weft_dev_conns_create(n, 2 * nchannels, &rs->conns), ncclSuccess);
  if (getenv("WEFT_GPU_PLAN_TIMEOUT_MS"))
    rs->conns.timeout_ns = strtoull(getenv("WEFT_GPU_PLAN_TIMEOUT_MS"), NULL, 10) * 1000000ull;
  for (int r = 0; r < n; r++)
    CUDA_OK(cudaStreamCreateWithFlags(&rs->streams[r], cudaStreamNonBlocking));
}

static void ranks_close(struct ranks *rs) {
  for (int r = 0; r < rs->n; r++) cudaStreamDestroy(rs->streams[r]);
  weft_dev_conns_destroy(&rs->conns);
}

static void sizes(const struct job *j, int n, size_t *in_out, size_t *out_out) {
  size_t in = j->count, out = j->count;
  if (j->func == WEFT_FUNC_ALLGATHER) out = j->count * (size_t)n;
  if (j->func == WEFT_FUNC_REDUCESCATTER) in = j->count * (size_t)n;
  *in_out = in;
  *out_out = out;
}

/* Builds, uploads and launches every rank's plan; waits for all. */
static void launch_all(struct ranks *rs, const struct job *j, void *const *in, void *const *out,
                       struct weft_dev_plan *plans, int iters) {
  int ring[MAXR];
  for (int r = 0; r < rs->n; r++) ring[r] = r;
  for (int r = 0; r < rs->n; r++) {
    struct weft_sched_args a = {.func = j->func,
                                .rank = r,
                                .nranks = rs->n,
                                .root = j->root,
                                .count = j->count,
                                .elem_size = dt_size(j->dt),
                                .nchannels = j->nchannels,
                                .chunk_bytes = j->chunk_bytes,
                                .ring = ring};
    struct weft_plan p;
    ck_assert_int_eq(j->tree ? weft_tree_plan(&a, &p) : weft_ring_plan(&a, &p), ncclSuccess);
    ck_assert_int_eq(weft_dev_plan_upload(&p, rs->streams[r], &plans[r]), ncclSuccess);
    weft_plan_free(&p);
  }
  CUDA_OK(cudaDeviceSynchronize());
  for (int it = 0; it < iters; it++)
    for (int r = 0; r < rs->n; r++)
      ck_assert_int_eq(weft_dev_plan_launch(&plans[r], &rs->conns, r, in[r], out[r], j->dt, j->op,
                                            rs->streams[r]),
                       ncclSuccess);
}

static void wait_all(struct ranks *rs, const struct job *j) {
  CUDA_OK(cudaDeviceSynchronize());
  int failed = 0, who = -1;
  ck_assert_int_eq(weft_dev_conns_error(&rs->conns, &failed, &who), ncclSuccess);
  ck_assert_msg(!failed, "%s on %d ranks, count %zu: rank %d timed out waiting",
                weft_func_name(j->func), rs->n, j->count, who);
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
  /* One assertion per rank: Check records every assertion it passes. */
  const double tol = j->dt == ncclFloat64 ? 1e-12 : 1e-6;
  for (int r = 0; r < n; r++) {
    CUDA_OK(cudaMemcpy(hout, dout[r], cout * es, cudaMemcpyDeviceToHost));
    size_t bad = cout;
    double want = 0, got = 0;
    for (size_t k = 0; k < cout && bad == cout; k++) {
      want = reference(j, n, hin, k, r);
      got = get(j->dt, hout, k);
      if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want)))) bad = k;
    }
    ck_assert_msg(bad == cout,
                  "%s%s dt %d op %d, %d ranks, count %zu, %s: rank %d element %zu is %g, "
                  "expected %g",
                  j->tree ? "tree " : "", weft_func_name(j->func), (int)j->dt, (int)j->op, n,
                  j->count, j->inplace ? "in place" : "out of place", r, bad, got, want);
  }
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
          weft_dev_plan_launch(&plans[r], &rs.conns, r, in[r], out[r], j.dt, j.op, rs.streams[r]),
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

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  /* WEFT_GPU_PLAN_SMALL: 2 and 3 ranks, counts up to 1003, no speed
   * (for compute-sanitizer). */
  int small = getenv("WEFT_GPU_PLAN_SMALL") != NULL;
  if (small) {
    counts[3] = 1003;
    nrank_counts = 2;
  }
  Suite *s = suite_create("gpu_plan");
  TCase *tc = tcase_create("plans");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, ring_allreduce, 0, nrank_counts);
  tcase_add_loop_test(tc, tree_allreduce, 0, nrank_counts);
  tcase_add_loop_test(tc, ring_others, 0, nrank_counts);
  tcase_add_loop_test(tc, speed, 0, small || getenv("WEFT_GPU_PLAN_NO_SPEED") ? 0 : 2);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  /* CUDA is initialized before Check would fork. */
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_VERBOSE);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
