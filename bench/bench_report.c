/* The table rank 0 prints, in nccl-tests' layout: '#' header lines, one
 * row per size with out-of-place and in-place columns, and the two footers
 * scripts grep for. Keeping the layout byte-for-byte lets tools written
 * for nccl-tests output read weft-bench and weft-mpi-ref output too. */
#include <stdlib.h>
#include <string.h>

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

void bench_report_header(struct bench_report *r) {
  const struct bench_args *a = r->args;
  const int factor = a->step_factor > 1;

  fprintf(r->out, "# %s: %s (%s), %d ranks; %s\n", r->program, bench_colls[a->coll].name, r->call,
          r->nranks, r->library);
  fprintf(r->out,
          "# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) "
          "warmup iters: %d iters: %d agg iters: %d validation: %d "
          "graph: 0\n",
          a->nthreads, a->ngpus, a->min_bytes, a->max_bytes,
          factor ? (size_t)a->step_factor : a->step_bytes, factor ? "factor" : "bytes", a->warmup,
          a->iters, a->agg_iters, a->check ? 1 : 0);
  if (a->blocking)
    fprintf(r->out,
            "# Blocking Enabled: wait for completion and barrier "
            "after each collective \n");
  if (a->cudagraph && !r->buffers)
    fprintf(r->out,
            "# Note: -G %d ignored: host ranks have no CUDA graphs "
            "to capture\n",
            a->cudagraph);
  else if (a->cudagraph)
    fprintf(r->out, "# Note: -G %d ignored: weft-bench does not capture CUDA graphs yet\n",
            a->cudagraph);
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
  fprintf(r->out, "#\n");
  fprintf(r->out,
          "# %10s  %12s  %8s  %6s  %6s           out-of-place       "
          "                in-place          \n",
          "", "", "", "", "");
  fprintf(r->out,
          "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s "
          "%6s\n",
          "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time",
          "algbw", "busbw", "#wrong");
  fprintf(r->out,
          "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  "
          "%5s\n",
          "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
          "(GB/s)", "");
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
    r->bw_sum += res[ip].busbw;
    r->bw_count++;
    if (res[ip].wrong > 0) r->wrong_total += res[ip].wrong;
  }
  fprintf(r->out, "\n");
  fflush(r->out);
  if (r->json) bench_json_row(r, c, res);
  if (r->args->plot_path) keep_point(r, c, res);
}

double bench_report_close(struct bench_report *r) {
  double avg = r->bw_count ? r->bw_sum / (double)r->bw_count : 0.0;

  fprintf(r->out, "# Out of bounds values : %.0f %s\n", r->wrong_total,
          r->wrong_total > 0 ? "FAILED" : "OK");
  fprintf(r->out, "# Avg bus bandwidth    : %g \n", avg);
  fprintf(r->out, "#\n# Collective test concluded: %s\n#\n", bench_colls[r->args->coll].name);
  fflush(r->out);
  if (r->json) bench_json_close(r, avg);
  return r->wrong_total;
}
