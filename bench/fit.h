/* weft-fit's parts: reading weft-bench JSON (fit_json.c), fitting time =
 * alpha + bytes / beta and checking the default's choice against the best
 * forced one (fit.c). weft-fit.c is the program around them. */
#ifndef WEFT_BENCH_FIT_H
#define WEFT_BENCH_FIT_H

#include <stddef.h>

#include "sched/tuning_model.h"

#define FIT_MAX_SIZES 128

/* One weft-bench JSON file: its collective, ranks and, per message size
 * (the table's "size" column, bytes), the least time over every row of
 * that size (weft-bench --passes writes a row per pass). */
struct fit_series {
  char collective[32];
  int nranks;
  int n;
  double bytes[FIT_MAX_SIZES];
  double time_us[FIT_MAX_SIZES];
};

/* Reads a weft-bench JSON document: out-of-place times, or in-place ones
 * when in_place. Keys it does not know are skipped, wherever they are.
 * 0, or -1 with the reason in err. */
int fit_json_parse(const char *text, int in_place, struct fit_series *out, char *err,
                   size_t errlen);
/* The same from a file. */
int fit_json_read(const char *path, int in_place, struct fit_series *out, char *err, size_t errlen);

/* time_us = alpha_us + bytes / beta (beta in bytes per microsecond; 0 when
 * the times did not grow with the size), over `points` sizes. */
struct fit_line {
  double alpha_us;
  double beta;
  double rms_rel; /* root mean square of (model - time) / time */
  int points;
};

/* Least squares weighted by 1 / time^2, i.e. on the relative error, so
 * that 8 B and 4 GiB count alike, over the points with min_x <= x <=
 * max_x and x, t > 0. A negative intercept is refitted at 0, a negative
 * slope as none. 0, or -1 with fewer than 2 points. */
int fit_line_solve(const double *x, const double *t, int n, double min_x, double max_x,
                   struct fit_line *out);
/* The line's time at x. */
double fit_line_at(const struct fit_line *l, double x);

/* One forced configuration (or the default run) and its fit. */
struct fit_config {
  char name[24]; /* "Ring/Simple", ..., "default" */
  int is_default;
  enum weft_algo algo;
  enum weft_proto proto;
  struct fit_series s;
  struct fit_line line;
  int fitted;
};

/* "Ring/Simple" (names as NCCL_ALGO / NCCL_PROTO spell them, any case) or
 * "default" into c's name, algo, proto. 0, or -1. */
int fit_config_name(const char *name, struct fit_config *c);

/* One size of the verification table. best: the forced configuration
 * with the least time; model: the one whose fitted line is least there. */
struct fit_verdict {
  double bytes;
  double default_us; /* negative: no default run, or it lacks the size */
  int best;
  double best_us;
  double ratio; /* default / best */
  int ok;       /* ratio <= 1 + tolerance */
  int model;
  double model_us;
  double model_ratio;
  int model_ok;
};

/* The verdicts at every size some forced configuration measured, in
 * size order; returns how many (at most max). xscale: the model's bytes
 * per size-column byte (1 / nranks for AllGather and ReduceScatter). */
int fit_verify(const struct fit_config *cfg, int ncfg, double tolerance, double xscale,
               struct fit_verdict *out, int max);

#endif
