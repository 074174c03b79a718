/* One benchmarking thread: it drives its ranks (-g of them) through every
 * type, operator and size, as nccl-tests' TimeTest and BenchTime do:
 * warm up at the largest and smallest size, then per size and per
 * placement (out-of-place, in-place) a barrier, the timed iterations, the
 * time reduced across ranks, and one checked run. The thread holding rank
 * 0 prints, and on GPU ranks first measures its device's copy bandwidth.
 *
 * Each rank has its own stream: ranks of one thread exchange data inside
 * one group, so their kernels must be able to run at the same time. */
#include <stdlib.h>
#include <string.h>

#include "bench_weft.h"

/* Size of the device-to-device copies that measure the memory roofline. */
#define COPY_BW_BYTES ((size_t)1 << 30)

/* ---- Across ranks ---------------------------------------------------------- */

/* vals[i] of each rank i of this thread, reduced over all ranks with op;
 * the result lands in *out (every rank gets the same). */
static int reduce_double(struct bench_thread *t, const double *vals, ncclRedOp_t op, double *out) {
  for (int i = 0; i < t->nlocal; i++) {
    t->bufs[i] = t->ranks[i].scratch;
    if (t->mem->upload(t->bufs[i], &vals[i], sizeof(double), t->ranks[i].stream) != 0)
      return BENCH_EXIT_ERROR;
  }
  if (bench_nccl_allreduce(t, t->bufs, 1, ncclFloat64, op) != 0 ||
      t->mem->download(out, t->bufs[0], sizeof(double), t->ranks[0].stream) != 0)
    return BENCH_EXIT_ERROR;
  return 0;
}

/* The same v from every rank of this thread. */
static int reduce_same(struct bench_thread *t, double v, ncclRedOp_t op, double *out) {
  for (int i = 0; i < t->nlocal; i++) t->vals[i] = v;
  return reduce_double(t, t->vals, op, out);
}

static int barrier(struct bench_thread *t) {
  double ignored;
  return reduce_same(t, 1.0, ncclSum, &ignored);
}

/* The per-rank time as -a asks: rank 0's own, mean, min or max. */
static int reduce_time(struct bench_thread *t, double *sec) {
  static const ncclRedOp_t ops[4] = {ncclSum, ncclSum, ncclMin, ncclMax};

  if (t->args->average == 0) return 0;
  if (reduce_same(t, *sec, ops[t->args->average], sec) != 0) return BENCH_EXIT_ERROR;
  if (t->args->average == 1) *sec /= t->nranks;
  return 0;
}

/* ---- Checking -------------------------------------------------------------- */

/* Poisons r's output and writes its input where this placement reads it. */
static int check_prepare(struct bench_thread *t, struct bench_rank *r, const struct bench_case *c,
                         int in_place) {
  const size_t ts = bench_types[c->type].size;
  const size_t bytes = bench_case_bytes(c);

  bench_check_poison(c->type, r->host, bytes / ts);
  if (in_place) bench_check_fill(c, r->rank, r->host, c->send_off * (size_t)r->rank);
  if (t->mem->upload(r->recv, r->host, bytes, r->stream) != 0) return BENCH_EXIT_ERROR;
  if (in_place) return 0;
  bench_check_fill(c, r->rank, r->host, 0);
  return t->mem->upload(r->send, r->host, c->send_count * ts, r->stream) ? BENCH_EXIT_ERROR : 0;
}

/* One checked run on fresh data; *wrong_out: wrong elements on all ranks. */
static int check_run(struct bench_thread *t, const struct bench_case *c, int in_place,
                     double *wrong_out) {
  const size_t ts = bench_types[c->type].size;

  for (int i = 0; i < t->nlocal; i++)
    if (check_prepare(t, &t->ranks[i], c, in_place) != 0) return BENCH_EXIT_ERROR;
  if (bench_nccl_iteration(t, c, in_place, 1) != 0 || bench_nccl_wait(t) != 0)
    return BENCH_EXIT_ERROR;
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    size_t off = in_place ? c->recv_off * (size_t)r->rank * ts : 0;
    if (t->mem->download(r->host, (char *)r->recv + off, c->recv_count * ts, r->stream) != 0)
      return BENCH_EXIT_ERROR;
    t->vals[i] = (double)bench_check_count(c, r->rank, r->host);
  }
  if (reduce_double(t, t->vals, ncclSum, wrong_out) != 0) return BENCH_EXIT_ERROR;
  t->wrong += *wrong_out;
  return 0;
}

/* ---- Timing ---------------------------------------------------------------- */

static int bench_time(struct bench_thread *t, const struct bench_case *c, int in_place,
                      struct bench_result *res) {
  const struct bench_args *a = t->args;
  double sec, start;

  if (barrier(t) != 0) return BENCH_EXIT_ERROR;
  start = bench_now();
  for (int it = 0; it < a->iters; it++) {
    if (bench_nccl_iteration(t, c, in_place, a->agg_iters) != 0) return BENCH_EXIT_ERROR;
    /* -z, as nccl-tests: complete each call, then a barrier. */
    if (a->blocking && (bench_nccl_wait(t) != 0 || barrier(t) != 0)) return BENCH_EXIT_ERROR;
  }
  if (bench_nccl_wait(t) != 0) return BENCH_EXIT_ERROR;
  sec = (bench_now() - start) / ((double)a->iters * a->agg_iters);
  if (reduce_time(t, &sec) != 0) return BENCH_EXIT_ERROR;
  res->time_us = sec * 1e6;
  bench_case_bw(c, sec, &res->algbw, &res->busbw);
  res->wrong = -1;
  if (a->check && check_run(t, c, in_place, &res->wrong) != 0) return BENCH_EXIT_ERROR;
  return 0;
}

static int warmup(struct bench_thread *t, struct bench_case *c, size_t bytes) {
  bench_case_size(c, bytes);
  for (int it = 0; it < t->args->warmup; it++)
    if (bench_nccl_iteration(t, c, 0, 1) != 0) return BENCH_EXIT_ERROR;
  return bench_nccl_wait(t) != 0 ? BENCH_EXIT_ERROR : 0;
}

/* Every size for one type and operator. */
static int sweep(struct bench_thread *t, ncclDataType_t type, ncclRedOp_t op) {
  const struct bench_args *a = t->args;
  struct bench_case c = {
      .coll = a->coll, .type = type, .op = op, .root = a->root, .nranks = t->nranks};

  if (warmup(t, &c, a->max_bytes) != 0 || warmup(t, &c, a->min_bytes) != 0) return BENCH_EXIT_ERROR;
  for (size_t bytes = a->min_bytes; bytes <= a->max_bytes; bytes = bench_args_next_size(a, bytes)) {
    struct bench_result res[2];
    bench_case_size(&c, bytes);
    for (int ip = 0; ip < 2; ip++)
      if (bench_time(t, &c, ip, &res[ip]) != 0) return BENCH_EXIT_ERROR;
    if (t->printer) bench_report_row(&t->report, &c, res);
  }
  return 0;
}

/* ---- Setup ------------------------------------------------------------------ */

static int alloc_buffers(struct bench_thread *t) {
  const size_t info_bytes = (size_t)t->nranks * sizeof(struct bench_rank_info);
  const size_t host_bytes = t->buf_bytes > info_bytes ? t->buf_bytes : info_bytes;

  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    if (t->mem->bind(r->local_index) != 0 || t->mem->alloc(&r->send, t->buf_bytes) != 0 ||
        t->mem->alloc(&r->recv, t->buf_bytes) != 0 || t->mem->alloc(&r->scratch, info_bytes) != 0)
      return BENCH_EXIT_ERROR;
    r->host = malloc(host_bytes);
    if (!r->host) {
      fprintf(stderr, "weft-bench: out of host memory\n");
      return BENCH_EXIT_ERROR;
    }
  }
  return 0;
}

static void free_buffers(struct bench_thread *t) {
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    if (r->send) t->mem->release(r->send);
    if (r->recv) t->mem->release(r->recv);
    if (r->scratch) t->mem->release(r->scratch);
    free(r->host);
  }
}

/* Every rank writes its line into its own slot of a zeroed table; a sum
 * over bytes then hands every rank the whole table, with only AllReduce. */
static int gather_info(struct bench_thread *t) {
  const size_t sz = sizeof(struct bench_rank_info);
  const size_t bytes = (size_t)t->nranks * sz;

  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    struct bench_rank_info *table = (struct bench_rank_info *)(void *)r->host;
    memset(table, 0, bytes);
    bench_rank_info_host(&table[r->rank]);
    t->mem->describe(r->local_index, &table[r->rank]);
    t->bufs[i] = r->scratch;
    if (t->mem->upload(r->scratch, table, bytes, r->stream) != 0) return BENCH_EXIT_ERROR;
  }
  if (bench_nccl_allreduce(t, t->bufs, bytes, ncclUint8, ncclSum) != 0 ||
      t->mem->download(t->ranks[0].host, t->bufs[0], bytes, t->ranks[0].stream) != 0)
    return BENCH_EXIT_ERROR;
  if (t->printer)
    bench_report_ranks(&t->report, (const struct bench_rank_info *)(void *)t->ranks[0].host);
  return 0;
}

/* ---- The thread --------------------------------------------------------------- */

static int run_all(struct bench_thread *t) {
  const struct bench_args *a = t->args;
  const int has_op = bench_colls[a->coll].has_op;
  const int t0 = a->dtype < 0 ? 0 : a->dtype;
  const int t1 = a->dtype < 0 ? ncclNumTypes : a->dtype + 1;
  const int o0 = !has_op ? ncclSum : a->op < 0 ? 0 : a->op;
  const int o1 = !has_op ? ncclSum + 1 : a->op < 0 ? ncclNumOps : a->op + 1;

  for (int type = t0; type < t1; type++)
    for (int op = o0; op < o1; op++)
      if (sweep(t, (ncclDataType_t)type, (ncclRedOp_t)op) != 0) return BENCH_EXIT_ERROR;
  return 0;
}

/* A stream per rank, each made on its rank's device. */
static int create_streams(struct bench_thread *t) {
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    if (t->mem->bind(r->local_index) != 0 || t->mem->stream_create(&r->stream) != 0)
      return BENCH_EXIT_ERROR;
  }
  return 0;
}

static void destroy_streams(struct bench_thread *t) {
  for (int i = 0; i < t->nlocal; i++)
    if (t->ranks[i].stream) t->mem->stream_destroy(t->ranks[i].stream);
}

/* The printer's device copy bandwidth, before any communicator exists: no
 * other rank's kernel is on the GPU yet to share its memory bandwidth. The
 * roofline is context, not the measurement asked for: without it the run
 * goes on, and the header just lacks its line. */
static void measure_roofline(struct bench_thread *t) {
  if (!t->printer || !t->mem->copy_bw) return;
  if (t->mem->copy_bw(t->ranks[0].local_index, COPY_BW_BYTES, &t->report.copy) != 0) {
    fprintf(stderr, "weft-bench: the device copy bandwidth could not be measured; going on\n");
    memset(&t->report.copy, 0, sizeof(t->report.copy));
  }
}

int bench_thread_run(struct bench_thread *t) {
  t->rc = BENCH_EXIT_ERROR;
  if (t->printer) t->report.buffers = t->mem->header;
  measure_roofline(t);
  if (create_streams(t) == 0 && bench_nccl_init(t) == 0 && alloc_buffers(t) == 0) {
    if (t->printer) bench_report_header(&t->report);
    if (gather_info(t) == 0) {
      if (t->printer) bench_report_columns(&t->report);
      t->rc = run_all(t);
    }
  }
  if (t->printer && t->rc == 0) bench_report_close(&t->report);
  /* A plot that cannot be drawn fails the run, after the table is out. */
  if (t->printer && t->rc == 0 && t->args->plot_path &&
      bench_plot_write(&t->report, t->args->plot_path) != 0)
    t->rc = BENCH_EXIT_ERROR;
  if (t->rc == 0 && t->wrong > 0) t->rc = BENCH_EXIT_WRONG;
  free_buffers(t);
  bench_nccl_fini(t);
  destroy_streams(t);
  return t->rc;
}
