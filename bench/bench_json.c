/* --json FILE: the same results as the table, for scripts and plots. One
 * object: the run's parameters, one entry per row, and the two footers. */
#include <math.h>

#include "bench.h"

/* Strings written here are names from the bench's own tables and host or
 * library names; escaping quotes and backslashes is all they need. */
static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

/* JSON has no NaN or Inf; an unmeasured number is null. */
static void json_number(FILE *f, double v) {
  if (isfinite(v))
    fprintf(f, "%.6g", v);
  else
    fputs("null", f);
}

int bench_json_open(struct bench_report *r, const char *path) {
  const struct bench_args *a = r->args;

  r->json = fopen(path, "w");
  if (!r->json) {
    perror(path);
    return -1;
  }
  fputs("{\n  \"program\": ", r->json);
  json_string(r->json, r->program);
  fputs(",\n  \"library\": ", r->json);
  json_string(r->json, r->library);
  fputs(",\n  \"collective\": ", r->json);
  json_string(r->json, bench_colls[a->coll].name);
  fprintf(r->json,
          ",\n  \"nranks\": %d, \"nprocs\": %d, \"nthreads\": %d, "
          "\"ngpus\": %d,\n  \"minbytes\": %zu, \"maxbytes\": %zu, "
          "\"stepfactor\": %ld, \"stepbytes\": %zu,\n  \"iters\": %d, "
          "\"warmup_iters\": %d, \"agg_iters\": %d, \"check\": %d, "
          "\"average\": %d,",
          r->nranks, a->nprocs, a->nthreads, a->ngpus, a->min_bytes, a->max_bytes, a->step_factor,
          a->step_bytes, a->iters, a->warmup, a->agg_iters, a->check, a->average);
  /* --passes: every pass's rows, each with "pass" (from 1). */
  if (a->passes > 1) fprintf(r->json, "\n  \"passes\": %d,", a->passes);
  fputs("\n  \"rows\": [", r->json);
  return 0;
}

static void json_result(FILE *f, const char *name, const struct bench_result *res) {
  fprintf(f, "\"%s\": {\"time_us\": ", name);
  json_number(f, res->time_us);
  fputs(", \"algbw\": ", f);
  json_number(f, res->algbw);
  fputs(", \"busbw\": ", f);
  json_number(f, res->busbw);
  fputs(", \"wrong\": ", f);
  json_number(f, res->wrong < 0 ? NAN : res->wrong);
  fputs("}", f);
}

void bench_json_row(struct bench_report *r, const struct bench_case *c,
                    const struct bench_result res[2]) {
  FILE *f = r->json;

  fprintf(f,
          "%s\n    {\"size\": %zu, \"count\": %zu, \"type\": \"%s\", "
          "\"redop\": \"%s\", \"root\": %d,\n     ",
          r->json_rows++ ? "," : "", bench_case_bytes(c), c->param_count, bench_types[c->type].name,
          bench_colls[c->coll].has_op ? bench_op_names[c->op] : "none",
          bench_colls[c->coll].has_root ? c->root : -1);
  if (r->args->passes > 1) fprintf(f, "\"pass\": %d, ", r->pass + 1);
  json_result(f, "out_of_place", &res[0]);
  fputs(",\n     ", f);
  json_result(f, "in_place", &res[1]);
  fputs("}", f);
}

/* GPU runs only (host runs keep their keys): where buffers were, and the
 * device's copy bandwidth, counted as the table's header line counts it. */
static void json_device(struct bench_report *r) {
  FILE *f = r->json;

  if (r->buffers) fputs(",\n  \"buffers\": \"device\"", f);
  if (!r->copy.bytes) return;
  fprintf(f, ",\n  \"device_copy\": {\"device\": %d, \"name\": ", r->copy.device);
  json_string(f, r->copy.devname);
  fprintf(f, ", \"bytes\": %zu, \"gbps\": ", r->copy.bytes);
  json_number(f, r->copy.gbps);
  fputs(
      ", \"method\": \"cudaMemcpyAsync device to device; bytes read + bytes written per "
      "second, 1e9 bytes per GB\"}",
      f);
}

void bench_json_close(struct bench_report *r, double avg_busbw) {
  fprintf(r->json, "\n  ],\n  \"out_of_bounds\": %.0f,\n  \"avg_busbw\": ", r->wrong_total);
  json_number(r->json, avg_busbw);
  json_device(r);
  fputs("\n}\n", r->json);
  if (fclose(r->json) != 0) perror("weft-bench: --json");
  r->json = NULL;
}
