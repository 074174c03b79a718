/* The table rank 0 prints, in nccl-tests' layout: '#' header lines, one
 * row per size with out-of-place and in-place columns, and the two footers
 * scripts grep for. Keeping the layout byte-for-byte lets tools written
 * for nccl-tests output read weft-bench and weft-mpi-ref output too. */
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "bench.h"

static const char *const average_names[4] = {"rank 0's time", "the mean across ranks",
                                             "the minimum across ranks",
                                             "the maximum across ranks"};

int bench_report_open(struct bench_report *r, const struct bench_args *a, const char *program,
                      const char *library, const char *call, int nranks) {
  memset(r, 0, sizeof(*r));
  r->out = stdout;
  r->program = program;
  r->library = library;
  r->call = call;
  r->args = a;
  r->nranks = nranks;
  if (a->json_path && bench_json_open(r, a->json_path) != 0) return -1;
  return 0;
}

/* One '#' line per flag that changes how the run goes, or that cannot
 * apply here and says why (host ranks: r->buffers is NULL). */
static void bench_report_notes(struct bench_report *r) {
  static const char *const blocking[4] = {
      "", "wait for completion and barrier after each iteration",
      "wait for completion after each iteration (no barrier)",
      "wait for completion after each iteration, then an untimed barrier"};
  const struct bench_args *a = r->args;
  const int host = r->buffers == NULL;

  if (a->blocking)
    fprintf(r->out, "# Blocking Enabled (-z %d): %s\n", a->blocking, blocking[a->blocking]);
  if (a->cudagraph && host)
    fprintf(r->out,
            "# Note: -G %d does not apply: host ranks have no CUDA graphs to capture; the "
            "iterations run as plain calls\n",
            a->cudagraph);
  else if (a->cudagraph)
    fprintf(r->out, "# CUDA graphs: the %d iterations captured once, launched %d times\n", a->iters,
            a->cudagraph);
  if (a->stream_null && host)
    fprintf(r->out, "# Note: -y 1 does not apply: host ranks use no streams\n");
  else if (a->stream_null)
    fprintf(r->out, "# Streams: the default (NULL) stream (-y 1)\n");
  if (a->nthreads > 1)
    fprintf(r->out, "# Communicators: created by %s (-p %d)\n",
            a->parallel_init ? "each thread for its ranks" : "each process's first thread",
            a->parallel_init ? 1 : 0);
  if (a->timeout) fprintf(r->out, "# Timeout: %d s per call or wait (-T)\n", a->timeout);
  if (a->local_register)
    fprintf(r->out, "# Buffers registered with %s (-R %d)\n",
            a->local_register == 1 ? "ncclCommRegister" : "ncclCommWindowRegister, symmetric",
            a->local_register);
  if (a->cta_policy >= 0) fprintf(r->out, "# CTA policy: %d (-x)\n", a->cta_policy);
  if (a->unalign) fprintf(r->out, "# Buffers shifted by %d elements (-u)\n", a->unalign);
  if (a->report_cputime)
    fprintf(r->out, "# Time: cputime, to issue the calls, not to complete them (-C 1)\n");
  if (a->per_iter)
    fprintf(r->out,
            "# Per-iteration times (-I 1): each iteration waited for and timed on the host, the "
            "slowest rank's; %d first left out (-K)\n",
            a->per_iter_skip);
  if (a->run_cycles != 1) fprintf(r->out, "# Cycles: %d (-N; 0: until stopped)\n", a->run_cycles);
  if (a->passes > 1)
    fprintf(r->out,
            "# Passes: %d (--passes): the sweep runs %d times, each printed; then per size the "
            "median and [min-max] of the passes\n",
            a->passes, a->passes);
}

void bench_report_header(struct bench_report *r) {
  const struct bench_args *a = r->args;
  const int factor = a->step_factor > 1;

  fprintf(r->out, "# %s: %s (%s), %d ranks; %s\n", r->program, bench_colls[a->coll].name, r->call,
          r->nranks, r->library);
  fprintf(r->out,
          "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) "
          "warmup iters: %d iters: %d agg iters: %d validation: %d "
          "graph: %d\n",
          a->nthreads, a->ngpus, a->min_bytes, a->max_bytes,
          factor ? (size_t)a->step_factor : a->step_bytes, factor ? "factor" : "bytes", a->warmup,
          a->iters, a->agg_iters, a->check, r->buffers ? a->cudagraph : 0);
  bench_report_notes(r);
  fprintf(r->out,
          "# Time: the mean of %d iterations on each rank, then %s "
          "(-a %d)\n",
          a->iters, average_names[a->average], a->average);
  /* GPU runs only: host runs print exactly the lines they always did. */
  if (r->buffers) fputs(r->buffers, r->out);
  if (r->copy.bytes)
    fprintf(r->out,
            "# Device copy bandwidth: %.1f GB/s on device %d (%s): cudaMemcpyAsync device to "
            "device of %zu B, bytes read + bytes written per second (the memory roofline for "
            "busbw)\n",
            r->copy.gbps, r->copy.device, r->copy.devname, r->copy.bytes);
  fprintf(r->out, "#\n# Using devices\n");
}

void bench_report_ranks(struct bench_report *r, const struct bench_rank_info *info) {
  for (int i = 0; i < r->nranks; i++)
    fprintf(r->out, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s] %s\n", i, 0,
            (int)info[i].pid, info[i].host, (int)info[i].device, info[i].label, info[i].devname);
  fflush(r->out);
}

void bench_report_columns(struct bench_report *r) {
  const struct bench_args *a = r->args;
  const char *time = a->report_cputime ? "cputime" : "time";
  const char *ts = a->report_timestamps ? "timestamp" : "";
  const char *tsfmt = a->report_timestamps ? "%Y-%m-%d %H:%M:%S" : "";
  const int tspad = a->report_timestamps ? 19 : 0;

  fprintf(r->out, "#\n");
  if (a->per_iter) {
    fprintf(r->out,
            "# %10s  %12s  %8s  %6s  %6s              out-of-place (+ per-iteration)        "
            "                        in-place (+ per-iteration)\n",
            "", "", "", "", "");
    fprintf(r->out, "# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
    for (int ip = 0; ip < 2; ip++)
      fprintf(r->out, "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s", time, "algbw", "busbw", "#wrong",
              "i_min", "i_max", "i_p99", "i_cv%");
    fprintf(r->out, " %*s\n# %10s  %12s  %8s  %6s  %6s", tspad, ts, "(B)", "(elements)", "", "",
            "");
    for (int ip = 0; ip < 2; ip++)
      fprintf(r->out, "  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s", "(us)", "(GB/s)", "(GB/s)", "",
              "(us)", "(us)", "(us)", "(%)");
    fprintf(r->out, " %*s\n", tspad, tsfmt);
  } else {
    fprintf(r->out,
            "# %10s  %12s  %8s  %6s  %6s           out-of-place       "
            "                in-place          \n",
            "", "", "", "", "");
    fprintf(r->out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n",
            "size", "count", "type", "redop", "root", time, "algbw", "busbw", "#wrong", time,
            "algbw", "busbw", "#wrong", tspad, ts);
    fprintf(r->out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n",
            "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
            "(GB/s)", "", tspad, tsfmt);
  }
  fflush(r->out);
}

/* Keeps a row for --plot; a point that finds no memory is left out of the
 * picture, never out of the table. */
static void keep_point(struct bench_report *r, const struct bench_case *c,
                       const struct bench_result res[2]) {
  if (r->npoints == r->points_cap) {
    size_t cap = r->points_cap ? 2 * r->points_cap : 64;
    struct bench_plot_point *p = realloc(r->points, cap * sizeof(*p));
    if (!p) return;
    r->points = p;
    r->points_cap = cap;
  }
  r->points[r->npoints++] = (struct bench_plot_point){
      .coll = c->coll,
      .type = c->type,
      .op = bench_colls[c->coll].has_op ? (int)c->op : -1,
      .bytes = bench_case_bytes(c),
      .busbw = {res[0].busbw, res[1].busbw},
  };
}

/* nccl-tests' precision: fewer decimals as times grow. */
static void format_time(char *buf, size_t len, double us) {
  const char *fmt = us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f";
  snprintf(buf, len, fmt, us);
}

void bench_report_row(struct bench_report *r, const struct bench_case *c,
                      const struct bench_result res[2]) {
  const int has_root = bench_colls[c->coll].has_root;
  char root[16];

  snprintf(root, sizeof(root), "%6d", has_root ? c->root : -1);
  fprintf(r->out, "%12zu  %12zu  %8s  %6s  %6s", bench_case_bytes(c), c->param_count,
          bench_types[c->type].name, bench_colls[c->coll].has_op ? bench_op_names[c->op] : "none",
          root);
  for (int ip = 0; ip < 2; ip++) {
    char t[32];
    format_time(t, sizeof(t), res[ip].time_us);
    if (res[ip].wrong < 0)
      fprintf(r->out, "  %7s  %6.2f  %6.2f  %5s", t, res[ip].algbw, res[ip].busbw, "N/A");
    else
      fprintf(r->out, "  %7s  %6.2f  %6.2f  %5g", t, res[ip].algbw, res[ip].busbw, res[ip].wrong);
    if (r->args->per_iter) {
      const struct bench_iter_stats *st = &res[ip].iter;
      fprintf(r->out, "  %7.2f  %7.2f  %7.2f  %7.2f", st->min, st->max, st->p99, st->cv_pct);
    }
    r->bw_sum += res[ip].busbw;
    r->bw_count++;
    if (res[ip].wrong > 0) r->wrong_total += res[ip].wrong;
  }
  if (r->args->report_timestamps) {
    char now[32];
    time_t secs = time(NULL);
    struct tm tm;
    strftime(now, sizeof(now), "%Y-%m-%d %H:%M:%S", localtime_r(&secs, &tm));
    fprintf(r->out, "%21s", now);
  }
  fprintf(r->out, "\n");
  fflush(r->out);
  if (r->json) bench_json_row(r, c, res);
  if (r->args->plot_path) keep_point(r, c, res);
  if (r->args->passes > 1) bench_passes_keep(r, c, res);
}

double bench_report_close(struct bench_report *r) {
  double avg = r->bw_count ? r->bw_sum / (double)r->bw_count : 0.0;

  fprintf(r->out, "# Out of bounds values : %.0f %s\n", r->wrong_total,
          r->wrong_total > 0 ? "FAILED" : "OK");
  fprintf(r->out, "# Avg bus bandwidth    : %g \n", avg);
  if (r->args->memory_report)
    fprintf(r->out,
            "# Memory (rank 0, %s): Initialization %.1f MiB | User-Allocated %.1f MiB | "
            "Collective %.1f MiB\n",
            r->buffers ? "its device" : "the process's resident memory", r->mem_used[0] / 1048576.0,
            (r->mem_used[1] - r->mem_used[0]) / 1048576.0,
            (r->mem_used[2] - r->mem_used[1]) / 1048576.0);
  fprintf(r->out, "#\n# Collective test concluded: %s\n#\n", bench_colls[r->args->coll].name);
  fflush(r->out);
  if (r->json) bench_json_close(r, avg);
  free(r->pass_rows);
  r->pass_rows = NULL;
  r->npass_rows = r->pass_rows_cap = 0;
  return r->wrong_total;
}

static int cmp_double(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* nccl-tests' statistics: p99 by nearest rank, cv = stdev / mean. */
void bench_iter_stats(const double *sec, int n, int skip, struct bench_iter_stats *out) {
  const int m = n - skip;
  double *sorted = m > 0 ? malloc((size_t)m * sizeof(double)) : NULL;
  double sum = 0, var = 0, mean;
  int p99;

  memset(out, 0, sizeof(*out));
  if (!sorted) return;
  memcpy(sorted, sec + skip, (size_t)m * sizeof(double));
  qsort(sorted, (size_t)m, sizeof(double), cmp_double);
  for (int i = 0; i < m; i++) sum += sorted[i];
  mean = sum / m;
  for (int i = 0; i < m; i++) var += (sorted[i] - mean) * (sorted[i] - mean);
  p99 = (m * 99 + 99) / 100 - 1;
  out->min = sorted[0] * 1e6;
  out->max = sorted[m - 1] * 1e6;
  out->p99 = sorted[p99 < m - 1 ? p99 : m - 1] * 1e6;
  out->cv_pct = mean > 0 ? sqrt(var / m) / mean * 100.0 : 0.0;
  free(sorted);
}
