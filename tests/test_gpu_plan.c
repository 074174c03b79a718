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
 * between them on the same FIFOs, and a wait that times out; LL128 the
 * same grid, and taking turns with LL. Also prints the speed of a 256 MiB
 * float AllReduce with 2 and 4 ranks, and of small ones with Simple, LL
 * and LL128 (printed only, never asserted). fp8,
 * PreMulSum, Direct, fused launches and grouped send/recv are in
 * test_gpu_plan_ops.c, the shared helpers in gpu_plan_common.c. Exits 77
 * without a GPU. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_plan_common.h"
#include "suite_run.h"

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
static void run_protos_grid(int n, const int *protos, int nprotos, struct job base,
                            const ncclDataType_t *dts, const ncclRedOp_t *ops, int ndt) {
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
        for (int p = 0; p < nprotos; p++) {
          j.proto = protos[p];
          run_job(&rs, &j);
        }
        if (ll_counts[c] == 1009) {
          j.proto = WEFT_PROTO_SIMPLE;
          run_job(&rs, &j);
        }
      }
  ranks_close(&rs);
}

static void run_proto_grid(int n, int proto, struct job base, const ncclDataType_t *dts,
                           const ncclRedOp_t *ops, int ndt) {
  run_protos_grid(n, &proto, 1, base, dts, ops, ndt);
}

static void ring_allreduce_grid(int n, int proto) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt8};
  const ncclRedOp_t ops[] = {ncclAvg, ncclSum, ncclMax};
  run_proto_grid(n, proto, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 3);
}

static void tree_allreduce_grid(int n, int proto) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt8};
  const ncclRedOp_t ops[] = {ncclSum, ncclSum, ncclSum};
  run_proto_grid(n, proto, (struct job){.func = WEFT_FUNC_ALLREDUCE, .tree = 1}, dts, ops, 3);
}

static void ring_others_grid(int n, int proto) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16, ncclInt8};
  const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclSum};
  run_proto_grid(n, proto, (struct job){.func = WEFT_FUNC_BROADCAST, .root = n - 1}, dts, ops, 3);
  run_proto_grid(n, proto, (struct job){.func = WEFT_FUNC_ALLGATHER}, dts, ops, 3);
  run_proto_grid(n, proto, (struct job){.func = WEFT_FUNC_REDUCESCATTER}, dts, ops, 3);
}

/* The LL and LL128 grids: _i runs rank_counts[_i % nrank_counts] ranks,
 * LL for the first nrank_counts values of _i and LL128 for the next. */
static int grid_proto(int i) {
  return i < nrank_counts ? WEFT_PROTO_LL : WEFT_PROTO_LL128;
}

START_TEST(ll_ring_allreduce) {
  ring_allreduce_grid(rank_counts[_i % nrank_counts], grid_proto(_i));
}
END_TEST

START_TEST(ll_tree_allreduce) {
  tree_allreduce_grid(rank_counts[_i % nrank_counts], grid_proto(_i));
}
END_TEST

START_TEST(ll_ring_others) {
  ring_others_grid(rank_counts[_i % nrank_counts], grid_proto(_i));
}
END_TEST

/* On demand only (WEFT_GPU_PLAN_STRESS=N): a protocol's 8-rank AllReduce
 * grid N times over, LL (_i 0) or LL128 (_i 1), the first wrong element
 * failing it; for a protocol whose correctness rests on the hardware
 * (proto_ll128.cuh), where a rare torn line shows only in many runs. */
START_TEST(proto_stress) {
  const ncclDataType_t dts[] = {ncclFloat16, ncclFloat32, ncclInt32};
  const ncclRedOp_t ops[] = {ncclSum, ncclSum, ncclSum};
  const int proto = _i == 0 ? WEFT_PROTO_LL : WEFT_PROTO_LL128;
  const char *env = getenv("WEFT_GPU_PLAN_STRESS");
  int reps = env != NULL ? atoi(env) : 0;
  for (int k = 0; k < reps; k++)
    run_proto_grid(8, proto, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 3);
  printf("proto_stress: %s, %d grids of 8 ranks passed\n", weft_proto_name(proto), reps);
  fflush(stdout);
}
END_TEST

/* LL128 and LL taking turns on the same FIFOs, job by job: each meets the
 * counters the other moved. */
START_TEST(ll128_after_ll) {
  const ncclDataType_t dts[] = {ncclFloat32, ncclFloat16};
  const ncclRedOp_t ops[] = {ncclSum, ncclSum};
  const int protos[] = {WEFT_PROTO_LL128, WEFT_PROTO_LL, WEFT_PROTO_LL128, WEFT_PROTO_LL};
  run_protos_grid(rank_counts[_i], protos, 4, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops,
                  2);
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
  run_proto_grid(n, WEFT_PROTO_LL, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 1);
  run_proto_grid(n, WEFT_PROTO_LL128, (struct job){.func = WEFT_FUNC_ALLREDUCE}, dts, ops, 1);
  links_cross = 0;
}
END_TEST

/* An LL (_i 0) or LL128 (_i 1) receive whose sender never runs: the wait
 * gives up after the timeout, the error word names the rank that waited,
 * the wait's report names the link and the protocol, the kernel ends. */
/* Two ranks' plans of a 4096-float AllReduce on one lane in proto, on
 * zeroed buffers, built and uploaded but not launched. */
static struct job two_rank_plans(struct ranks *rs, int proto, void **in, void **out,
                                 struct weft_dev_plan *plans) {
  struct job j = {.func = WEFT_FUNC_ALLREDUCE,
                  .dt = ncclFloat32,
                  .op = ncclSum,
                  .count = 4096,
                  .chunk_bytes = 1u << 20,
                  .nchannels = 1,
                  .proto = proto};
  for (int r = 0; r < 2; r++) {
    CUDA_OK(cudaMalloc(&in[r], j.count * 4));
    CUDA_OK(cudaMalloc(&out[r], j.count * 4));
    CUDA_OK(cudaMemset(in[r], 0, j.count * 4));
  }
  launch_all(rs, &j, in, out, plans, 0);
  return j;
}

START_TEST(ll_timeout) {
  const int proto = _i == 0 ? WEFT_PROTO_LL : WEFT_PROTO_LL128;
  struct ranks rs;
  ranks_open(&rs, 2, 1);
  for (int r = 0; r < 2; r++) rs.conns[r].timeout_ns = 200u * 1000000u;
  void *in[2], *out[2];
  struct weft_dev_plan plans[2];
  struct job j = two_rank_plans(&rs, proto, in, out, plans);
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
                    d->proto == (unsigned)proto,
                "LL wait without a sender: diag claimed %u dir %u peer %d channel %d proto %u",
                d->claimed, d->dir, d->peer, d->channel, d->proto);
  char what[256];
  weft_dev_wait_describe(d, rs.conns[0].nslots, what, sizeof(what));
  ck_assert_msg(strstr(what, "a receive from rank 1") != NULL &&
                    strstr(what, proto == WEFT_PROTO_LL ? ", LL)" : ", LL128)") != NULL &&
                    strstr(what, "flag 0, not 1") != NULL,
                "description: %s", what);
  for (int r = 0; r < 2; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  ranks_close(&rs);
}
END_TEST

/* Inboxes without LL128 slots (the engine's, where LL128 cannot run): an
 * LL128 launch is refused before anything runs, and Simple still runs. */
START_TEST(ll128_needs_slots) {
  links_no_ll128 = 1;
  struct ranks rs;
  ranks_open(&rs, 2, 1);
  void *in[2], *out[2];
  struct weft_dev_plan plans[2];
  struct job j = two_rank_plans(&rs, WEFT_PROTO_LL128, in, out, plans);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(
        weft_dev_plan_launch(&plans[r], &rs.conns[r], in[r], out[r], j.dt, j.op, rs.streams[r]),
        ncclInternalError);
    weft_dev_plan_free(&plans[r]);
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  j.proto = WEFT_PROTO_SIMPLE;
  j.count = 1009;
  run_job(&rs, &j);
  ranks_close(&rs);
  links_no_ll128 = 0;
}
END_TEST

/* Small float AllReduce, Simple against LL and LL128, 2 and 4 ranks on
 * one GPU, one lane: microseconds per call, printed for tuning (never
 * asserted). */
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
    double us[WEFT_PROTO_COUNT];
    for (int proto = 0; proto < WEFT_PROTO_COUNT; proto++) {
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
        "LL %.1f us, LL128 %.1f us\n",
        sizes[k], n, us[0], us[1], us[2]);
    fflush(stdout);
  }
  for (int r = 0; r < n; r++) {
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
  tcase_add_loop_test(tc, ll_ring_allreduce, 0, 2 * nrank_counts);
  tcase_add_loop_test(tc, ll_tree_allreduce, 0, 2 * nrank_counts);
  tcase_add_loop_test(tc, ll_ring_others, 0, 2 * nrank_counts);
  tcase_add_loop_test(tc, ll128_after_ll, 0, nrank_counts);
  tcase_add_loop_test(tc, sys_scope, 0, nrank_counts);
  if (getenv("WEFT_GPU_PLAN_STRESS") != NULL) tcase_add_loop_test(tc, proto_stress, 0, 2);
  tcase_add_loop_test(tc, ll_timeout, 0, 2);
  tcase_add_test(tc, ll128_needs_slots);
  tcase_add_loop_test(tc, ll_speed, 0, small || getenv("WEFT_GPU_PLAN_NO_SPEED") ? 0 : 2);
  suite_add_tcase(s, tc);
  /* fp8, PreMulSum, Direct and grouped send/recv: CK_RUN_CASE=engine_ops
   * runs these alone. */
  TCase *ops_tc = tcase_create("engine_ops");
  tcase_set_timeout(ops_tc, 300);
  gpu_plan_ops_add(ops_tc);
  suite_add_tcase(s, ops_tc);
  return suite_run_nofork(s);
}
