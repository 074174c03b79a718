/* The tuning model's table: per path type, algorithm and protocol, a
 * link's latency per step (alpha, us) and bandwidth (beta, bytes/us)
 * (sched/tuning_model.h says how a collective's time is made of them).
 *
 * Measured rows come from bench/tune-sweep.sh, which runs weft-bench once
 * per forced NCCL_ALGO x NCCL_PROTO and once by default and hands the JSON
 * files to bench/weft-fit; weft-fit prints the rows below in this format,
 * each with the machine, date and command that produced it. Paste them
 * into `fits` above the placeholders (docs/PERFORMANCE.md, "Tuning
 * model"). The lookup prefers a measured row of the path over any
 * placeholder, then the same collective, then the nearest rank count.
 *
 * Placeholders are the hand-set figures the model had before it was
 * fitted, kept so that nothing changes until a path is measured:
 * - host ranks: shm 3 us and 5 GB/s, sockets 15 us and 1 GB/s (weft-bench
 *   on a small machine); the host engine runs Simple whatever is asked,
 *   so its LL rows repeat Simple's;
 * - GPU paths of one host (same GPU, NVLink, PCIe, staged): shm's figures,
 *   which chose their algorithm; LL's latency 1.05x and bandwidth 0.18x of
 *   Simple's, the kernels' ratio (4.2 against 4.0 us, 18 against 100 GB/s,
 *   one H200, tests/test_gpu_plan.c's ll_speed, 2026-11-29), so LL is never
 *   picked unless NCCL_PROTO forces it;
 * - Direct on the ranks' own buffers (one GPU): 6 us and 1 TB/s, a first
 *   estimate for reports; chosen by rule while it is a placeholder;
 * - GPU net links: the sockets' figures (Simple only runs there). */
#include "sched/tuning.h"

#include <math.h>
#include <stddef.h>

#define PH "placeholder: hand-set before the model was fitted (sched/tuning_fit.c's header)"

/* Placeholder rows of a path: Ring, Tree and Direct alike, Simple and LL. */
#define PH_ROW(path, algo, proto, a, b) \
  { path, WEFT_FUNC_ALLREDUCE, algo, proto, 0, a, b, 0, PH }
/* clang-format off */
#define PLACEHOLDERS(path, a_simple, b_simple, a_ll, b_ll)             \
  PH_ROW(path, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, a_simple, b_simple),   \
  PH_ROW(path, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, a_simple, b_simple),   \
  PH_ROW(path, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, a_simple, b_simple), \
  PH_ROW(path, WEFT_ALGO_RING, WEFT_PROTO_LL, a_ll, b_ll),               \
  PH_ROW(path, WEFT_ALGO_TREE, WEFT_PROTO_LL, a_ll, b_ll),               \
  PH_ROW(path, WEFT_ALGO_DIRECT, WEFT_PROTO_LL, a_ll, b_ll)
/* clang-format on */

static const struct weft_tune_fit fits[] = {
    /* Measured rows (weft-fit's output) go here. None yet: the GPU sweep
     * (docs/PERFORMANCE.md) has not been run on this branch. */

    /* Placeholders (the first row of a kind wins a tie). */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 0, 6.0,
     1000000.0, 0, "placeholder: Direct on the ranks' own buffers, a first estimate for reports"},
    PLACEHOLDERS(WEFT_TUNE_LOCAL, 0.0, 10000.0, 0.0, 10000.0), /* one rank: a memory copy */
    PLACEHOLDERS(WEFT_TUNE_SHM, 3.0, 5000.0, 3.0, 5000.0),
    PLACEHOLDERS(WEFT_TUNE_SOCKET, 15.0, 1000.0, 15.0, 1000.0),
    PLACEHOLDERS(WEFT_TUNE_NVLINK, 3.0, 5000.0, 3.15, 900.0),
    PLACEHOLDERS(WEFT_TUNE_PCIE, 3.0, 5000.0, 3.15, 900.0),
    PLACEHOLDERS(WEFT_TUNE_STAGED, 3.0, 5000.0, 3.15, 900.0),
    PLACEHOLDERS(WEFT_TUNE_SAME_GPU, 3.0, 5000.0, 3.15, 900.0),
    PLACEHOLDERS(WEFT_TUNE_NET, 15.0, 1000.0, 15.0, 1000.0),
};

/* Rows in use: the table above, or a test's (weft_tune_fits_use). */
static const struct weft_tune_fit *rows = fits;
static int nrows = (int)(sizeof(fits) / sizeof(fits[0]));

void weft_tune_fits_use(const struct weft_tune_fit *table, int n) {
  rows = table != NULL ? table : fits;
  nrows = table != NULL ? n : (int)(sizeof(fits) / sizeof(fits[0]));
}

/* Lower is closer: measured before placeholder, the same collective
 * before another, then the rank count nearest by ratio. */
static double row_distance(const struct weft_tune_fit *r, enum weft_func func, int n) {
  double d = r->measured ? 0 : 1000;
  if (r->func != func) d += 100;
  d += r->nranks > 0 && n > 0 ? fabs(log2((double)n / r->nranks)) : 50;
  return d;
}

const struct weft_tune_fit *weft_tune_fit_find(enum weft_tune_path path, enum weft_func func,
                                               enum weft_algo algo, enum weft_proto proto, int n) {
  const struct weft_tune_fit *best = NULL;
  double best_d = 0;
  for (int i = 0; i < nrows; i++) {
    const struct weft_tune_fit *r = &rows[i];
    if (r->path != path || r->algo != algo || r->proto != proto) continue;
    double d = row_distance(r, func, n);
    if (best == NULL || d < best_d) best = r, best_d = d;
  }
  return best;
}
