/* See gpu_plan_common.h. */
#include "gpu_plan_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const int rank_counts[4] = {2, 3, 4, 8};
size_t counts[4] = {0, 1, 7, 1000003};
int nrank_counts = 4;
int small_run;
int links_cross;
int links_no_ll128;

/* ---- Host values ------------------------------------------------------------ */

size_t dt_size(ncclDataType_t dt) {
  switch (dt) {
    case ncclInt8: return 1;
    case ncclFloat16: return 2;
    case ncclFloat32:
    case ncclInt32: return 4;
    default: return 8;
  }
}

/* Exact for the small integers used here (normal numbers, no rounding). */
uint16_t half_from_int(int v) {
  if (v == 0) return 0;
  uint32_t sign = v < 0 ? 0x8000u : 0, m = (uint32_t)(v < 0 ? -v : v);
  int e = 0;
  while ((m >> e) > 1) e++;
  return (uint16_t)(sign | (uint32_t)(e + 15) << 10 | ((m << (10 - e)) & 0x3ffu));
}

double half_to_double(uint16_t h) {
  int e = (h >> 10) & 31;
  double m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Input element i of rank r: small integers (exact sums) except double. */
void put(ncclDataType_t dt, void *buf, size_t i, int r) {
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

double get(ncclDataType_t dt, const void *buf, size_t i) {
  switch (dt) {
    case ncclInt8: return ((const int8_t *)buf)[i];
    case ncclFloat16: return half_to_double(((const uint16_t *)buf)[i]);
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclInt32: return ((const int32_t *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

/* ---- One collective on n ranks ------------------------------------------------ */

/* Every rank's inbox on GPU 0, and its link tables through the others'. */
void ranks_open(struct ranks *rs, int n, int nchannels) {
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
    ck_assert_int_eq(weft_dev_inbox_create(n, 2 * nchannels, 0, !links_no_ll128, &rs->inbox[r]),
                     ncclSuccess);
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

void ranks_close(struct ranks *rs) {
  for (int r = 0; r < rs->n; r++) {
    cudaStreamDestroy(rs->streams[r]);
    weft_dev_conns_destroy(&rs->conns[r]);
    weft_dev_inbox_destroy(&rs->inbox[r]);
    cudaFreeHost(rs->diag[r]);
  }
}

void sizes(const struct job *j, int n, size_t *in_out, size_t *out_out) {
  size_t in = j->count, out = j->count;
  if (j->func == WEFT_FUNC_ALLGATHER) out = j->count * (size_t)n;
  if (j->func == WEFT_FUNC_REDUCESCATTER) in = j->count * (size_t)n;
  *in_out = in;
  *out_out = out;
}

/* Builds, uploads and launches every rank's plan; waits for all. */
/* Rank r's plan of j (ring order 0..n-1, proto set), uploaded on stream. */
void upload_plan(const struct job *j, int n, int r, int proto, cudaStream_t stream,
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

void launch_all(struct ranks *rs, const struct job *j, void *const *in, void *const *out,
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
void wait_all_named(struct ranks *rs, const char *name) {
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

void wait_all(struct ranks *rs, const struct job *j) {
  char name[96];
  snprintf(name, sizeof(name), "%s of count %zu", weft_func_name(j->func), j->count);
  wait_all_named(rs, name);
}

double reference(const struct job *j, int n, void *const *hin, size_t k, int r) {
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
void check_output(const struct job *j, int n, void *const *hin, const void *dout, int r, void *hout,
                  const char *what) {
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

void run_job(struct ranks *rs, const struct job *j) {
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
  snprintf(what, sizeof(what), "%s%s%s%s dt %d op %d, %d ranks, count %zu, chunk %zu, %s",
           j->proto != WEFT_PROTO_SIMPLE ? weft_proto_name(j->proto) : "",
           j->proto != WEFT_PROTO_SIMPLE ? " " : "", j->tree ? "tree " : "",
           weft_func_name(j->func), (int)j->dt, (int)j->op, n, j->count, j->chunk_bytes,
           j->inplace ? "in place" : "out of place");
  for (int r = 0; r < n; r++) check_output(j, n, hin, dout[r], r, hout, what);
  for (int r = 0; r < n; r++) {
    weft_dev_plan_free(&plans[r]);
    cudaFree(dmem[r]);
    free(hin[r]);
  }
  free(hout);
}

void run_grid(int n, struct job base, const ncclDataType_t *dts, const ncclRedOp_t *ops, int ndt) {
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
