/* --passes N: the sweep of sizes runs N times (each pass's rows printed as
 * usual, and in --json each with its pass number), then per size a '#'
 * line with the median time and busbw over the passes and [min-max]
 * beside each. Loopback and shared machines are noisy from one sweep to
 * the next; the median of several whole sweeps, with its spread, is what
 * a figure in docs/PERFORMANCE.md should quote. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

void bench_passes_keep(struct bench_report *r, const struct bench_case *c,
                       const struct bench_result res[2]) {
  if (r->npass_rows == r->pass_rows_cap) {
    size_t cap = r->pass_rows_cap ? 2 * r->pass_rows_cap : 64;
    struct bench_pass_row *p = realloc(r->pass_rows, cap * sizeof(*p));
    if (!p) return; /* the summary then lacks the row; the table has it */
    r->pass_rows = p;
    r->pass_rows_cap = cap;
  }
  struct bench_pass_row *row = &r->pass_rows[r->npass_rows++];
  row->bytes = bench_case_bytes(c);
  row->count = c->param_count;
  for (int ip = 0; ip < 2; ip++) {
    row->time_us[ip] = res[ip].time_us;
    row->busbw[ip] = res[ip].busbw;
  }
}

static int cmp_double(const void *x, const void *y) {
  const double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

double bench_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* "25067 [24100-26000]": median, then the range, of n values; times with
 * the table's precision (fewer decimals as they grow), bandwidths with 2. */
static void print_stat(FILE *f, double *v, size_t n, int is_time) {
  char med[32], lo[32], hi[32], cell[112];
  double m = bench_median(v, n);
  const char *fmt = !is_time ? "%.2f" : m >= 10000.0 ? "%.0f" : m >= 100.0 ? "%.1f" : "%.2f";
  snprintf(med, sizeof(med), fmt, m);
  snprintf(lo, sizeof(lo), fmt, v[0]);
  snprintf(hi, sizeof(hi), fmt, v[n - 1]);
  snprintf(cell, sizeof(cell), "%s [%s-%s]", med, lo, hi);
  fprintf(f, "  %22s", cell);
}

void bench_passes_print(struct bench_report *r, const struct bench_case *c) {
  const int has_root = bench_colls[c->coll].has_root;
  size_t n = r->npass_rows;
  double *v = malloc((n ? n : 1) * sizeof(double));
  char *done = calloc(n ? n : 1, 1);

  if (v && done) {
    fprintf(r->out,
            "#\n# Passes: %d (--passes), %s %s root %d: per size the median over the passes, "
            "[min-max] beside it\n",
            r->args->passes, bench_types[c->type].name,
            bench_colls[c->coll].has_op ? bench_op_names[c->op] : "none", has_root ? c->root : -1);
    fprintf(r->out, "# %10s  %12s  %22s  %22s  %22s  %22s\n", "size (B)", "count",
            "out-of-place time (us)", "busbw (GB/s)", "in-place time (us)", "busbw (GB/s)");
    for (size_t i = 0; i < n; i++) {
      if (done[i]) continue;
      fprintf(r->out, "# %10zu  %12zu", r->pass_rows[i].bytes, r->pass_rows[i].count);
      for (int ip = 0; ip < 2; ip++)
        for (int what = 0; what < 2; what++) {
          size_t k = 0;
          for (size_t j = i; j < n; j++) {
            if (r->pass_rows[j].bytes != r->pass_rows[i].bytes) continue;
            v[k++] = what ? r->pass_rows[j].busbw[ip] : r->pass_rows[j].time_us[ip];
          }
          print_stat(r->out, v, k, !what);
        }
      for (size_t j = i; j < n; j++) done[j] |= r->pass_rows[j].bytes == r->pass_rows[i].bytes;
      fprintf(r->out, "\n");
    }
    fflush(r->out);
  }
  free(v);
  free(done);
  r->npass_rows = 0;
}
