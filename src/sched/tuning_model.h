/* The tuning model's terms, shared by the library (sched/tuning.c) and the
 * program that fits them (bench/weft-fit.c): one fitted row of latency
 * and bandwidth per path type (base/path_type.h), and how a collective's time is made of a
 * link's per-step latency and bandwidth. Header only, so that weft-fit
 * needs nothing of the library but these few lines. */
#ifndef WEFT_SCHED_TUNING_MODEL_H
#define WEFT_SCHED_TUNING_MODEL_H

#include <math.h>

#include "base/path_type.h"
#include "sched/schedule.h"

/* One row of the table (sched/tuning_fit.c): a link's latency per step
 * (alpha, microseconds) and bandwidth (beta, bytes per microsecond) for
 * an algorithm and protocol on a path, fitted from a run of `func` on
 * `nranks` ranks. measured 0: a placeholder, a hand-set figure that no fit
 * has replaced yet. source: the machine, date and command of the fit (or
 * why the placeholder is what it is). */
struct weft_tune_fit {
  enum weft_tune_path path;
  enum weft_func func;
  enum weft_algo algo;
  enum weft_proto proto;
  int nranks;
  double alpha_us;
  double beta;
  int measured;
  const char *source;
};

/* A collective on n ranks takes coef_alpha * alpha + coef_bytes * bytes /
 * beta, with bytes the caller's buffer (for AllGather and ReduceScatter
 * one rank's share): the steps each schedule (sched/ring.c, tree.c) puts
 * one after the other, and the bytes that cross the busiest link. A
 * fitted time (alpha' + bytes / beta') gives the row alpha' / coef_alpha
 * and beta' * coef_bytes, so rows fitted on one collective and rank count
 * serve the others. */
static inline void weft_tune_coef(enum weft_func func, enum weft_algo algo, int n,
                                  double *coef_alpha, double *coef_bytes) {
  double steps = n - 1;
  *coef_alpha = 1.0;
  *coef_bytes = 1.0;
  if (n <= 1) return; /* a local copy */
  /* Direct: one exchange, in which the busiest rank sends or receives
   * n-1 blocks (AllReduce's inputs, AllGather's, ReduceScatter's shares, a
   * Broadcast root's copies, a Reduce root's arrivals). */
  if (algo == WEFT_ALGO_DIRECT && func != WEFT_FUNC_SEND && func != WEFT_FUNC_RECV) {
    *coef_bytes = steps;
    return;
  }
  switch (func) {
    case WEFT_FUNC_ALLREDUCE:
      if (algo == WEFT_ALGO_TREE) {
        *coef_alpha = 2.0 * ceil(log2(n));
        *coef_bytes = 2.0;
      } else {
        *coef_alpha = 2.0 * steps;
        *coef_bytes = 2.0 * steps / n;
      }
      return;
    case WEFT_FUNC_ALLGATHER:
    case WEFT_FUNC_REDUCESCATTER:
      *coef_alpha = steps;
      *coef_bytes = steps;
      return;
    case WEFT_FUNC_BROADCAST:
    case WEFT_FUNC_REDUCE: /* a pipelined chain */ *coef_alpha = steps; return;
    default: return; /* send/recv */
  }
}

/* The model's time in microseconds for `bytes` with a row's figures. */
static inline double weft_tune_model_us(const struct weft_tune_fit *row, enum weft_func func,
                                        enum weft_algo algo, int n, double bytes) {
  double ca, cb;
  weft_tune_coef(func, algo, n, &ca, &cb);
  return ca * row->alpha_us + cb * bytes / row->beta;
}

#endif
