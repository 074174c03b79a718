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
    /* Measured rows (weft-fit's output). Same GPU, AllReduce, 2 and 8
     * rank-threads on one H200 (docs/PERFORMANCE.md, "Tuning model").
     * Direct's LL row is left out: Direct on the ranks' own buffers has no
     * protocol to choose (its small calls run in LL lines by size,
     * WEFT_DIRECT_LL_MAX), and forced LL only cut its sweep at 16 MiB. */
    /* clang-format off */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 7.78563, 154921, 1,
     "one H200 2026-12-02: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 10 -w 3 -c 0 -T 50 (LL runs: -e 16M)"}, /* 15.57 us + B / 154.9 GB/s, 15 sizes, rms 23.4% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 7.94676, 18162.7, 1,
     "one H200 2026-12-02: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 10 -w 3 -c 0 -T 50 (LL runs: -e 16M)"}, /* 15.89 us + B / 18.16 GB/s, 11 sizes, rms 26.6% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 2, 7.54379, 245233, 1,
     "one H200 2026-12-02: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 10 -w 3 -c 0 -T 50 (LL runs: -e 16M)"}, /* 15.09 us + B / 122.6 GB/s, 15 sizes, rms 20.3% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_LL, 2, 7.44638, 30410.3, 1,
     "one H200 2026-12-02: NCCL_ALGO=Tree NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 10 -w 3 -c 0 -T 50 (LL runs: -e 16M)"}, /* 14.89 us + B / 15.21 GB/s, 11 sizes, rms 20.0% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 12.6901, 745623, 1,
     "one H200 2026-12-02: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 10 -w 3 -c 0 -T 50 (LL runs: -e 16M)"}, /* 12.69 us + B / 745.6 GB/s, 15 sizes, rms 31.6% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 8, 6.44103, 89813.6, 1,
     "one H200 2026-12-02: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 5 -w 1 -c 0 -T 120 (LL runs: -e 16M)"}, /* 90.17 us + B / 51.32 GB/s, 15 sizes, rms 18.7% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 8, 6.49591, 31211.8, 1,
     "one H200 2026-12-02: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 5 -w 1 -c 0 -T 120 (LL runs: -e 16M)"}, /* 90.94 us + B / 17.84 GB/s, 11 sizes, rms 24.3% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 8, 9.43722, 56011.5, 1,
     "one H200 2026-12-02: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 5 -w 1 -c 0 -T 120 (LL runs: -e 16M)"}, /* 56.62 us + B / 28.01 GB/s, 15 sizes, rms 27.7% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_LL, 8, 9.98637, 3275.63, 1,
     "one H200 2026-12-02: NCCL_ALGO=Tree NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 5 -w 1 -c 0 -T 120 (LL runs: -e 16M)"}, /* 59.92 us + B / 1.638 GB/s, 11 sizes, rms 16.1% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 8, 27.7766, 1.5125e+06, 1,
     "one H200 2026-12-02: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 5 -w 1 -c 0 -T 120 (LL runs: -e 16M)"}, /* 27.78 us + B / 216.1 GB/s, 15 sizes, rms 25.7% */
    /* clang-format on */

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

/* Bumped by every weft_tune_fits_use: a memo of another table is stale,
 * even one at the same address. */
static unsigned table_gen = 1;

void weft_tune_fits_use(const struct weft_tune_fit *table, int n) {
  table_gen++;
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

/* The thread's last answer per algorithm and protocol: a communicator's
 * calls ask the same questions call after call, and the scan over every
 * row was a third of an in-place one-rank call's time (0.4 of 1.1 us). */
struct fit_memo {
  const struct weft_tune_fit *row;
  unsigned gen; /* table_gen of the answer; 0: none yet */
  int path, func, n;
};
static _Thread_local struct fit_memo last[WEFT_ALGO_COUNT][WEFT_PROTO_COUNT];

const struct weft_tune_fit *weft_tune_fit_find(enum weft_tune_path path, enum weft_func func,
                                               enum weft_algo algo, enum weft_proto proto, int n) {
  int memo =
      (int)algo >= 0 && algo < WEFT_ALGO_COUNT && (int)proto >= 0 && proto < WEFT_PROTO_COUNT;
  if (memo) {
    const struct fit_memo *m = &last[algo][proto];
    if (m->gen == table_gen && m->path == (int)path && m->func == (int)func && m->n == n)
      return m->row;
  }
  const struct weft_tune_fit *best = NULL;
  double best_d = 0;
  for (int i = 0; i < nrows; i++) {
    const struct weft_tune_fit *r = &rows[i];
    if (r->path != path || r->algo != algo || r->proto != proto) continue;
    double d = row_distance(r, func, n);
    if (best == NULL || d < best_d) best = r, best_d = d;
  }
  if (memo) last[algo][proto] = (struct fit_memo){best, table_gen, (int)path, (int)func, n};
  return best;
}
