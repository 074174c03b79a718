/* The plan-kernel GPU suite's engine cases (test_gpu_plan.c runs them in
 * its "engine_ops" case): fp8, PreMulSum, Direct, a fused launch of five
 * collectives, and grouped send/recv plans, each checked byte for byte
 * against the host engine's element operations. */
#include <check.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_plan_common.h"

/* ---- fp8, PreMulSum, Direct (issue 5) -------------------------------------------- */

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
 * which must reset between launches; Simple and LL. LL128 has no fused
 * kernel: its launch is refused, nothing runs. */
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
  for (int rep = 0; rep < 2 && proto != WEFT_PROTO_LL128; rep++)
    for (int r = 0; r < n; r++) {
      struct weft_dev_fused_coll fc[NFUSED];
      for (int k = 0; k < NFUSED; k++)
        fc[k] = (struct weft_dev_fused_coll){&plans[k][r], din[k][r], dout[k][r], jobs[k].dt,
                                             jobs[k].op};
      ck_assert_int_eq(weft_dev_fused_launch(fc, NFUSED, &rs->conns[r], barrier[r], rs->streams[r]),
                       ncclSuccess);
    }
  if (proto == WEFT_PROTO_LL128) {
    struct weft_dev_fused_coll fc[NFUSED];
    for (int k = 0; k < NFUSED; k++)
      fc[k] =
          (struct weft_dev_fused_coll){&plans[k][0], din[k][0], dout[k][0], jobs[k].dt, jobs[k].op};
    ck_assert_int_eq(weft_dev_fused_launch(fc, NFUSED, &rs->conns[0], barrier[0], rs->streams[0]),
                     ncclInternalError);
  }
  char name[64];
  snprintf(name, sizeof(name), "%s fused launch of %d collectives", weft_proto_name(proto), NFUSED);
  wait_all_named(rs, name);
  for (int k = 0; k < NFUSED; k++) {
    const struct job *j = &jobs[k];
    size_t cin, cout, es = dt_size(j->dt);
    sizes(j, n, &cin, &cout);
    void *hout = malloc(cout * es + 1);
    char what[128];
    snprintf(what, sizeof(what), "%s, collective %d (%s%s), %d ranks", name, k,
             j->tree ? "tree " : "", weft_func_name(j->func), n);
    if (proto != WEFT_PROTO_LL128)
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
  fused_run(&rs, WEFT_PROTO_LL128, barrier);
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

/* ---- One rank's copies (weft_dev_copy) --------------------------------------------- */

/* Each size and alignment around the copy's choices (the 16-byte kernel up
 * to 64 KiB, bytes up to 2 KiB, cudaMemcpyAsync past them) copies exactly
 * its bytes: the destination holds the source's, and the guard bytes on
 * both sides of it keep their poison. */
START_TEST(copy) {
  static const size_t sizes[] = {
      1,         7,          16,    2047,       2048,      2049,
      4096 + 16, 65536 - 16, 65536, 65536 + 16, 65536 + 4, (8u << 20) + 16,
  };
  static const size_t offsets[] = {0, 4, 1}; /* dst and src offset alike; 4 and 1 unaligned */
  const size_t guard = 64, most = (8u << 20) + 16;
  const size_t room = most + 2 * guard + 16;
  unsigned char *src = NULL, *dst = NULL;
  unsigned char *want = malloc(room), *got = malloc(room);
  ck_assert_ptr_nonnull(want);
  ck_assert_ptr_nonnull(got);
  for (size_t i = 0; i < room; i++) want[i] = (unsigned char)(mix(i, 0, 7) | 1); /* never 0 */
  CUDA_OK(cudaMalloc((void **)&src, room));
  CUDA_OK(cudaMalloc((void **)&dst, room));
  CUDA_OK(cudaMemcpy(src, want, room, cudaMemcpyHostToDevice));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreate(&st));
  for (size_t oi = 0; oi < sizeof(offsets) / sizeof(offsets[0]); oi++) {
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
      size_t at = guard + offsets[oi], n = sizes[si];
      CUDA_OK(cudaMemset(dst, 0, room));
      CUDA_OK(weft_dev_copy(dst + at, src + at, n, st));
      CUDA_OK(cudaStreamSynchronize(st));
      CUDA_OK(cudaMemcpy(got, dst, room, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < at + n + guard; i++) {
        unsigned char expect = i >= at && i < at + n ? want[i] : 0;
        if (got[i] == expect) continue;
        ck_abort_msg(
            "weft_dev_copy of %zu bytes at offset %zu: byte %zu (%s) is 0x%02x, expected 0x%02x", n,
            offsets[oi], i,
            i < at       ? "guard before"
            : i < at + n ? "copied"
                         : "guard after",
            got[i], expect);
      }
    }
  }
  CUDA_OK(cudaStreamDestroy(st));
  cudaFree(src);
  cudaFree(dst);
  free(want);
  free(got);
}
END_TEST

void gpu_plan_ops_add(TCase *tc) {
  tcase_add_test(tc, copy);
  tcase_add_loop_test(tc, fp8_ring, 0, nrank_counts);
  tcase_add_loop_test(tc, premul, 0, nrank_counts);
  tcase_add_loop_test(tc, direct, 0, nrank_counts);
  tcase_add_loop_test(tc, fused, 0, nrank_counts);
  tcase_add_loop_test(tc, p2p_ring, 0, nrank_counts);
  tcase_add_loop_test(tc, p2p_alltoall, 0, 2);
  tcase_add_loop_test(tc, p2p_size_mismatch, 0, 2);
}
