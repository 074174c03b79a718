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
#include <time.h>

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

/* n values, the same from every rank of this thread, reduced in place
 * across all ranks with op (the scratch buffers hold them). */
static int reduce_array(struct bench_thread *t, double *v, size_t n, ncclRedOp_t op) {
  for (int i = 0; i < t->nlocal; i++) {
    t->bufs[i] = t->ranks[i].scratch;
    if (t->mem->upload(t->bufs[i], v, n * sizeof(double), t->ranks[i].stream) != 0)
      return BENCH_EXIT_ERROR;
  }
  if (bench_nccl_allreduce(t, t->bufs, n, ncclFloat64, op) != 0 ||
      t->mem->download(v, t->bufs[0], n * sizeof(double), t->ranks[0].stream) != 0)
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

/* The -n iterations one by one, as -z and -I ask; *sec_out: the time they
 * took to complete, *cpu_out: to be issued (-C); -z 3 counts only the time
 * to completion of each iteration, not its barrier. */
static int time_plain(struct bench_thread *t, const struct bench_case *c, int in_place,
                      double *sec_out, double *cpu_out) {
  const struct bench_args *a = t->args;
  const int wait_each = a->blocking || a->per_iter;
  /* The clock is read around each iteration only where its time is kept
   * (-z 3, -I): a read costs as much as a small host call's setup. */
  const int clock_each = a->blocking == 3 || a->per_iter;
  double start = bench_now(), timed = 0;

  for (int it = 0; it < a->iters; it++) {
    double t0 = clock_each ? bench_now() : 0, t1;
    if (bench_nccl_iteration(t, c, in_place, a->agg_iters) != 0) return BENCH_EXIT_ERROR;
    if (wait_each && bench_nccl_wait(t) != 0) return BENCH_EXIT_ERROR;
    t1 = clock_each ? bench_now() : 0;
    timed += t1 - t0;
    if (a->per_iter) t->iter_sec[it] = (t1 - t0) / a->agg_iters;
    if ((a->blocking == 1 || a->blocking == 3) && barrier(t) != 0) return BENCH_EXIT_ERROR;
  }
  *cpu_out = a->blocking == 3 ? timed : bench_now() - start;
  if (bench_nccl_wait(t) != 0) return BENCH_EXIT_ERROR;
  *sec_out = a->blocking == 3 ? timed : bench_now() - start;
  return 0;
}

int bench_local_wait(struct bench_thread *t) {
  struct bench_local_sync *s = t->local;
  struct timespec until;
  int rc = 0;

  if (s == NULL || s->nthreads < 2) return 0;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += 60;
  pthread_mutex_lock(&s->mu);
  unsigned gen = s->gen;
  if (++s->arrived == s->nthreads) {
    s->arrived = 0;
    s->gen++;
    pthread_cond_broadcast(&s->cv);
  }
  while (s->gen == gen && rc == 0) rc = pthread_cond_timedwait(&s->cv, &s->mu, &until);
  if (s->gen == gen) s->arrived--; /* gave up: not counted any more */
  pthread_mutex_unlock(&s->mu);
  if (s->gen != gen) return 0;
  fprintf(stderr,
          "weft-bench: rank %d: the process's other threads did not reach -G's launch "
          "within 60 s (one failed?)\n",
          t->ranks[0].rank);
  return BENCH_EXIT_ERROR;
}

/* -G on GPU ranks, as nccl-tests: the -n iterations captured once into a
 * CUDA graph per rank, the graphs launched -G times; times are per launch. */
static int time_graph(struct bench_thread *t, const struct bench_case *c, int in_place,
                      double *sec_out, double *cpu_out) {
  const struct bench_args *a = t->args;
  int rc = 0, captured = 0;
  double start;

  for (; captured < t->nlocal; captured++)
    if (t->mem->graph_begin(t->ranks[captured].stream) != 0) break;
  for (int it = 0; it < a->iters && captured == t->nlocal && rc == 0; it++)
    rc = bench_nccl_iteration(t, c, in_place, a->agg_iters);
  for (int i = 0; i < captured; i++)
    if (t->mem->graph_end(t->ranks[i].stream, &t->ranks[i].graph) != 0) rc = BENCH_EXIT_ERROR;
  /* Instantiating can wait for the device, where a peer thread's barrier
   * kernel (below) would spin for this thread: every thread of the
   * process instantiates before any launches. */
  if (bench_local_wait(t) != 0) rc = BENCH_EXIT_ERROR;
  if (captured < t->nlocal || rc != 0 || barrier(t) != 0) rc = BENCH_EXIT_ERROR;
  start = bench_now();
  for (int l = 0; l < a->cudagraph && rc == 0; l++)
    for (int i = 0; i < t->nlocal && rc == 0; i++)
      rc = t->mem->graph_launch(t->ranks[i].graph, t->ranks[i].stream);
  *cpu_out = (bench_now() - start) / a->cudagraph;
  if (rc == 0 && bench_nccl_wait(t) != 0) rc = BENCH_EXIT_ERROR;
  *sec_out = (bench_now() - start) / a->cudagraph;
  for (int i = 0; i < t->nlocal; i++) {
    if (t->ranks[i].graph) t->mem->graph_free(t->ranks[i].graph);
    t->ranks[i].graph = NULL;
  }
  return rc;
}

/* -I: each iteration's slowest rank, then min, max, p99 and cv%. */
static int per_iter_stats(struct bench_thread *t, struct bench_iter_stats *out) {
  const struct bench_args *a = t->args;

  if (reduce_array(t, t->iter_sec, (size_t)a->iters, ncclMax) != 0) return BENCH_EXIT_ERROR;
  bench_iter_stats(t->iter_sec, a->iters, a->per_iter_skip, out);
  return 0;
}

static int bench_time(struct bench_thread *t, const struct bench_case *c, int in_place,
                      struct bench_result *res) {
  const struct bench_args *a = t->args;
  const int graph = a->cudagraph > 0 && t->mem->graph_begin;
  double sec, cpu;

  if (barrier(t) != 0) return BENCH_EXIT_ERROR;
  if ((graph ? time_graph : time_plain)(t, c, in_place, &sec, &cpu) != 0) return BENCH_EXIT_ERROR;
  sec /= (double)a->iters * a->agg_iters;
  cpu /= (double)a->iters * a->agg_iters;
  if (reduce_time(t, &sec) != 0 || reduce_time(t, &cpu) != 0) return BENCH_EXIT_ERROR;
  res->time_us = (a->report_cputime ? cpu : sec) * 1e6;
  bench_case_bw(c, sec, &res->algbw, &res->busbw);
  if (a->per_iter && per_iter_stats(t, &res->iter) != 0) return BENCH_EXIT_ERROR;
  res->wrong = a->check ? 0 : -1;
  /* -c N: N checked runs on fresh data, stopping at the first wrong one. */
  for (int k = 0; k < a->check && res->wrong == 0; k++)
    if (check_run(t, c, in_place, &res->wrong) != 0) return BENCH_EXIT_ERROR;
  return 0;
}

/* Every size from -b to -e, doubling, as nccl-tests warms up. */
static int warmup(struct bench_thread *t, struct bench_case *c) {
  const struct bench_args *a = t->args;

  for (size_t bytes = a->min_bytes; bytes <= a->max_bytes; bytes = bytes ? 2 * bytes : 1) {
    bench_case_size(c, bytes);
    for (int it = 0; it < a->warmup; it++)
      if (bench_nccl_iteration(t, c, 0, 1) != 0) return BENCH_EXIT_ERROR;
    if (bench_nccl_wait(t) != 0) return BENCH_EXIT_ERROR;
    if (bytes > a->max_bytes / 2) break;
  }
  return 0;
}

/* -u: moves every rank's buffers unalign elements of type on (or back). */
static void shift_buffers(struct bench_thread *t, ncclDataType_t type, int on) {
  const size_t shift = on ? (size_t)t->args->unalign * bench_types[type].size : 0;

  for (int i = 0; i < t->nlocal; i++) {
    t->ranks[i].send = (char *)t->ranks[i].base[0] + shift;
    t->ranks[i].recv = (char *)t->ranks[i].base[1] + shift;
  }
}

/* Every size for one type, operator and root, -N times (0: until
 * stopped), or --passes times and then the passes' medians. */
static int sweep(struct bench_thread *t, ncclDataType_t type, ncclRedOp_t op, int root) {
  const struct bench_args *a = t->args;
  struct bench_case c = {
      .coll = a->coll, .type = type, .op = op, .root = root, .nranks = t->nranks};
  long cycles = a->passes > 1 ? a->passes : a->run_cycles;
  int rc = 0, pass = 0;

  shift_buffers(t, type, 1);
  if ((int)op == BENCH_OP_MULSUM && bench_nccl_mulsum_create(t, type) != 0) rc = BENCH_EXIT_ERROR;
  if (rc == 0 && warmup(t, &c) != 0) rc = BENCH_EXIT_ERROR;
  do {
    t->report.pass = pass++;
    for (size_t bytes = a->min_bytes; bytes <= a->max_bytes && rc == 0;
         bytes = bench_args_next_size(a, bytes)) {
      struct bench_result res[2];
      bench_case_size(&c, bytes);
      for (int ip = 0; ip < 2 && rc == 0; ip++) rc = bench_time(t, &c, ip, &res[ip]);
      if (rc == 0 && t->printer) bench_report_row(&t->report, &c, res);
    }
  } while (rc == 0 && --cycles != 0);
  if (rc == 0 && t->printer && a->passes > 1) bench_passes_print(&t->report, &c);
  if ((int)op == BENCH_OP_MULSUM) bench_nccl_mulsum_destroy(t);
  shift_buffers(t, type, 0);
  return rc;
}

/* ---- Setup ------------------------------------------------------------------ */

static int alloc_buffers(struct bench_thread *t) {
  const size_t info_bytes = (size_t)t->nranks * sizeof(struct bench_rank_info);
  const size_t iter_bytes = (size_t)t->args->iters * sizeof(double);
  const size_t scratch = info_bytes > iter_bytes ? info_bytes : iter_bytes;
  const size_t host_bytes = t->buf_bytes > scratch ? t->buf_bytes : scratch;

  t->iter_sec = calloc((size_t)t->args->iters, sizeof(double));
  if (!t->iter_sec) return BENCH_EXIT_ERROR;
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    if (t->mem->bind(r->local_index) != 0 || t->mem->alloc(&r->base[0], t->buf_bytes) != 0 ||
        t->mem->alloc(&r->base[1], t->buf_bytes) != 0 || t->mem->alloc(&r->scratch, scratch) != 0)
      return BENCH_EXIT_ERROR;
    r->send = r->base[0];
    r->recv = r->base[1];
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
    if (r->base[0]) t->mem->release(r->base[0]);
    if (r->base[1]) t->mem->release(r->base[1]);
    if (r->scratch) t->mem->release(r->scratch);
    free(r->host);
  }
  free(t->iter_sec);
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
  const int o1 = !has_op ? ncclSum + 1 : a->op < 0 ? BENCH_NOPS : a->op + 1;
  /* -r -1: every rank is the root in turn, as nccl-tests. */
  const int every_root = bench_colls[a->coll].has_root && a->root < 0;
  const int r0 = every_root ? 0 : a->root;
  const int r1 = every_root ? t->nranks : r0 + 1;

  for (int type = t0; type < t1; type++)
    for (int op = o0; op < o1; op++)
      for (int root = r0; root < r1; root++)
        if (sweep(t, (ncclDataType_t)type, (ncclRedOp_t)op, root) != 0) return BENCH_EXIT_ERROR;
  return 0;
}

/* A stream per rank, each made on its rank's device. */
static int create_streams(struct bench_thread *t) {
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    /* -y 1: the default stream, as nccl-tests' stream_null. */
    if (t->args->stream_null) continue;
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
void bench_measure_roofline(struct bench_thread *t) {
  if (!t->printer || !t->mem->copy_bw) return;
  if (t->mem->copy_bw(t->ranks[0].local_index, COPY_BW_BYTES, &t->report.copy) != 0) {
    fprintf(stderr, "weft-bench: the device copy bandwidth could not be measured; going on\n");
    memset(&t->report.copy, 0, sizeof(t->report.copy));
  }
}

/* -M: bytes in use on the printer's device (host ranks: this process's
 * resident memory) at step 0 (after init), 1 (after buffers), 2 (end). */
static void memory_mark(struct bench_thread *t, int step) {
  double bytes = 0;

  if (!t->printer || !t->args->memory_report || !t->mem->mem_used) return;
  if (t->mem->mem_used(t->ranks[0].local_index, &bytes) == 0) t->report.mem_used[step] = bytes;
}

/* Creates what the ranks need, runs every row, then the footers. */
static int run_thread(struct bench_thread *t) {
  /* -p 0 with several threads: proc_run made the communicators already. */
  if (create_streams(t) != 0 || (!t->ranks[0].comm && bench_nccl_init(t) != 0)) return t->rc;
  memory_mark(t, 0);
  if (alloc_buffers(t) != 0 || bench_nccl_register(t) != 0) return t->rc;
  memory_mark(t, 1);
  if (t->printer) bench_report_header(&t->report);
  if (gather_info(t) != 0) return t->rc;
  if (t->printer) bench_report_columns(&t->report);
  t->rc = run_all(t);
  memory_mark(t, 2);
  return t->rc;
}

int bench_thread_run(struct bench_thread *t) {
  t->rc = BENCH_EXIT_ERROR;
  if (t->printer) t->report.buffers = t->mem->header;
  bench_watchdog_start(t->args);
  run_thread(t);
  bench_watchdog_stop(t->args);
  if (t->printer && t->rc == 0) bench_report_close(&t->report);
  /* A plot that cannot be drawn fails the run, after the table is out. */
  if (t->printer && t->rc == 0 && t->args->plot_path &&
      bench_plot_write(&t->report, t->args->plot_path) != 0)
    t->rc = BENCH_EXIT_ERROR;
  if (t->rc == 0 && t->wrong > 0) t->rc = BENCH_EXIT_WRONG;
  bench_nccl_deregister(t);
  /* The communicators before the buffers: a cudaFree waits for every
   * kernel on the GPU, so with ranks as threads sharing one it must not
   * come before the others have launched their last call, which weft's
   * ncclCommDestroy waits for (docs/CUDA.md). */
  bench_nccl_fini(t);
  free_buffers(t);
  destroy_streams(t);
  return t->rc;
}
