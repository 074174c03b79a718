/* weft-fit's arithmetic: the weighted least-squares line through a
 * configuration's times, and the verification of the criterion
 * (at every size, the default within 10% of the best forced one). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fit.h"

double fit_line_at(const struct fit_line *l, double x) {
  return l->alpha_us + (l->beta > 0 ? x / l->beta : 0);
}

static void rms(const double *x, const double *t, int n, double min_x, double max_x,
                struct fit_line *l) {
  double sum = 0;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!(x[i] > 0 && t[i] > 0 && x[i] >= min_x && x[i] <= max_x)) continue;
    double e = (fit_line_at(l, x[i]) - t[i]) / t[i];
    sum += e * e;
    k++;
  }
  l->rms_rel = k > 0 ? sqrt(sum / k) : 0;
  l->points = k;
}

int fit_line_solve(const double *x, const double *t, int n, double min_x, double max_x,
                   struct fit_line *out) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  int k = 0;
  for (int i = 0; i < n; i++) {
    if (!(x[i] > 0 && t[i] > 0 && x[i] >= min_x && x[i] <= max_x)) continue;
    double w = 1.0 / (t[i] * t[i]);
    sw += w, sx += w * x[i], sy += w * t[i];
    sxx += w * x[i] * x[i], sxy += w * x[i] * t[i];
    k++;
  }
  if (k < 2) return -1;
  double det = sw * sxx - sx * sx;
  double a = det != 0 ? (sxx * sy - sx * sxy) / det : sy / sw;
  double s = det != 0 ? (sw * sxy - sx * sy) / det : 0;
  if (a < 0) { /* no negative latency: the best line through the origin */
    a = 0;
    s = sxy / sxx;
  }
  if (s <= 0) { /* no growth with size: latency alone */
    s = 0;
    a = sy / sw;
  }
  out->alpha_us = a;
  out->beta = s > 0 ? 1.0 / s : 0;
  rms(x, t, n, min_x, max_x, out);
  return 0;
}

int fit_config_name(const char *name, struct fit_config *c) {
  static const char *const algos[WEFT_ALGO_COUNT] = {"Ring", "Tree", "Direct"};
  memset(c, 0, sizeof(*c));
  if (strcasecmp(name, "default") == 0) {
    c->is_default = 1;
    snprintf(c->name, sizeof(c->name), "default");
    return 0;
  }
  const char *slash = strchr(name, '/');
  if (slash == NULL) return -1;
  int a = -1, p = -1;
  for (int i = 0; i < WEFT_ALGO_COUNT; i++)
    if (strlen(algos[i]) == (size_t)(slash - name) &&
        strncasecmp(name, algos[i], (size_t)(slash - name)) == 0)
      a = i;
  for (int i = 0; i < WEFT_PROTO_COUNT; i++)
    if (strcasecmp(slash + 1, weft_proto_name(i)) == 0) p = i;
  if (a < 0 || p < 0) return -1;
  c->algo = (enum weft_algo)a;
  c->proto = (enum weft_proto)p;
  snprintf(c->name, sizeof(c->name), "%s/%s", algos[a], weft_proto_name(p));
  return 0;
}

/* The series' time at `bytes`, or -1. */
static double time_at(const struct fit_series *s, double bytes) {
  for (int i = 0; i < s->n; i++)
    if (s->bytes[i] == bytes) return s->time_us[i];
  return -1;
}

/* Every size a forced configuration measured, ascending, into sizes. */
static int all_sizes(const struct fit_config *cfg, int ncfg, double *sizes, int max) {
  int n = 0;
  for (int c = 0; c < ncfg; c++) {
    if (cfg[c].is_default) continue;
    for (int i = 0; i < cfg[c].s.n; i++) {
      double b = cfg[c].s.bytes[i];
      int k = 0;
      while (k < n && sizes[k] != b) k++;
      if (k == n && n < max) sizes[n++] = b;
    }
  }
  for (int i = 1; i < n; i++)
    for (int k = i; k > 0 && sizes[k - 1] > sizes[k]; k--) {
      double b = sizes[k];
      sizes[k] = sizes[k - 1], sizes[k - 1] = b;
    }
  return n;
}

static void verdict_at(const struct fit_config *cfg, int ncfg, double tolerance, double xscale,
                       double bytes, struct fit_verdict *v) {
  memset(v, 0, sizeof(*v));
  v->bytes = bytes;
  v->default_us = -1;
  v->best = v->model = -1;
  double model_best = 0;
  for (int c = 0; c < ncfg; c++) {
    double t = time_at(&cfg[c].s, bytes);
    if (cfg[c].is_default) {
      if (t > 0) v->default_us = t;
      continue;
    }
    if (t <= 0) continue;
    if (v->best < 0 || t < v->best_us) v->best = c, v->best_us = t;
    if (!cfg[c].fitted) continue;
    double m = fit_line_at(&cfg[c].line, bytes * xscale);
    if (v->model < 0 || m < model_best) v->model = c, model_best = m, v->model_us = t;
  }
  if (v->best >= 0 && v->default_us > 0) {
    v->ratio = v->default_us / v->best_us;
    v->ok = v->ratio <= 1.0 + tolerance + 1e-9; /* 1.10 is within 10% */
  }
  if (v->best >= 0 && v->model >= 0) {
    v->model_ratio = v->model_us / v->best_us;
    v->model_ok = v->model_ratio <= 1.0 + tolerance + 1e-9;
  }
}

int fit_verify(const struct fit_config *cfg, int ncfg, double tolerance, double xscale,
               struct fit_verdict *out, int max) {
  double sizes[FIT_MAX_SIZES];
  int n = all_sizes(cfg, ncfg, sizes, max < FIT_MAX_SIZES ? max : FIT_MAX_SIZES);
  for (int i = 0; i < n; i++) verdict_at(cfg, ncfg, tolerance, xscale, sizes[i], &out[i]);
  return n;
}
