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
 * - LL128: Simple's latency 1.05x and bandwidth 0.9x, so it is not picked
 *   on a path until rows measured there say where it pays;
 * - Direct on the ranks' own buffers (one GPU): 6 us and 1 TB/s, a first
 *   estimate for reports; chosen by rule while it is a placeholder;
 * - GPU net links: the sockets' figures (Simple only runs there). */
#include "sched/tuning.h"

#include <math.h>
#include <stddef.h>

#define PH "placeholder: hand-set before the model was fitted (sched/tuning_fit.c's header)"

/* Placeholder rows of a path: Ring, Tree and Direct alike, Simple, LL and
 * LL128. LL128's are Simple's a little slower every way (latency 1.05x,
 * bandwidth 0.9x): never picked before it is measured on a path. */
#define LL128_A(a) ((a)*1.05)
#define LL128_B(b) ((b)*0.9)
#define PH_ROW(path, algo, proto, a, b) \
  { path, WEFT_FUNC_ALLREDUCE, algo, proto, 0, a, b, 0, PH }
/* clang-format off */
#define PLACEHOLDERS(path, a_simple, b_simple, a_ll, b_ll)             \
  PH_ROW(path, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, a_simple, b_simple),   \
  PH_ROW(path, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, a_simple, b_simple),   \
  PH_ROW(path, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, a_simple, b_simple), \
  PH_ROW(path, WEFT_ALGO_RING, WEFT_PROTO_LL, a_ll, b_ll),               \
  PH_ROW(path, WEFT_ALGO_TREE, WEFT_PROTO_LL, a_ll, b_ll),               \
  PH_ROW(path, WEFT_ALGO_DIRECT, WEFT_PROTO_LL, a_ll, b_ll),               \
  PH_ROW(path, WEFT_ALGO_RING, WEFT_PROTO_LL128, LL128_A(a_simple), LL128_B(b_simple)),   \
  PH_ROW(path, WEFT_ALGO_TREE, WEFT_PROTO_LL128, LL128_A(a_simple), LL128_B(b_simple)),   \
  PH_ROW(path, WEFT_ALGO_DIRECT, WEFT_PROTO_LL128, LL128_A(a_simple), LL128_B(b_simple))
/* clang-format on */

static const struct weft_tune_fit fits[] = {
    /* Measured rows (weft-fit's output). Same GPU, AllReduce, 2 and 8
     * rank-threads on one H200 (docs/PERFORMANCE.md, "Tuning model").
     * Direct's LL row is left out: Direct on the ranks' own buffers has no
     * protocol to choose (its small calls run in LL lines by size,
     * WEFT_DIRECT_LL_MAX), and forced LL only cut its sweep at 16 MiB. */
    /* clang-format off */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 4.97364, 249976, 1,
     "one H200 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 9.947 us + B / 250 GB/s, 15 sizes, rms 2.9% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 5.7852, 79200.2, 1,
     "one H200 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 11.57 us + B / 79.2 GB/s, 11 sizes, rms 6.6% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 2, 5.14117, 631824, 1,
     "one H200 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 10.28 us + B / 315.9 GB/s, 15 sizes, rms 6.6% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_LL, 2, 5.55926, 176759, 1,
     "one H200 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 11.12 us + B / 88.38 GB/s, 11 sizes, rms 6.2% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 8.80255, 953943, 1,
     "one H200 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 2 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 8.803 us + B / 953.9 GB/s, 15 sizes, rms 14.7% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 4, 4.22537, 207192, 1,
     "one H200 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 4 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 25.35 us + B / 138.1 GB/s, 15 sizes, rms 4.8% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 4, 4.94599, 76936.8, 1,
     "one H200 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 4 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 29.68 us + B / 51.29 GB/s, 11 sizes, rms 3.9% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 4, 5.63022, 165877, 1,
     "one H200 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 4 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 22.52 us + B / 82.94 GB/s, 15 sizes, rms 13.4% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_LL, 4, 6.21302, 28227.7, 1,
     "one H200 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 4 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 24.85 us + B / 14.11 GB/s, 11 sizes, rms 15.0% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 4, 11.6665, 1.39739e+06, 1,
     "one H200 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 4 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 11.67 us + B / 465.8 GB/s, 15 sizes, rms 19.9% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 8, 3.79509, 122246, 1,
     "one H200 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 53.13 us + B / 69.85 GB/s, 15 sizes, rms 12.6% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 8, 4.31969, 59526, 1,
     "one H200 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 60.48 us + B / 34.01 GB/s, 11 sizes, rms 9.4% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 8, 6.45471, 73440.7, 1,
     "one H200 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 38.73 us + B / 36.72 GB/s, 15 sizes, rms 23.0% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_LL, 8, 6.84798, 7615.48, 1,
     "one H200 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 41.09 us + B / 3.808 GB/s, 11 sizes, rms 15.3% */
    {WEFT_TUNE_SAME_GPU, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 8, 18.5917, 1.61328e+06, 1,
     "one H200 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 8 -b 8 -e 4G -f 4 -n 30 -w 5 -c 0 -T 60 --passes 3 (LL runs: -e 16M)"}, /* 18.59 us + B / 230.5 GB/s, 15 sizes, rms 16.7% */
    /* Host ranks over shared memory and sockets (2 and 4 processes), GPU
     * ranks on simulated hosts over net links (2 processes under MPS),
     * AllReduce, on the H200 machine's 16 cores (docs/PERFORMANCE.md,
     * "Tenth pass"). Host ranks and net links run Simple only. */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 0.900232, 9989.29, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --cpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 1.8 us + B / 9.989 GB/s, 13 sizes, rms 15.4% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 2, 0.95223, 19810.3, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --cpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 1.904 us + B / 9.905 GB/s, 13 sizes, rms 16.8% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 1.08756, 7936.76, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --cpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 1.088 us + B / 7.937 GB/s, 13 sizes, rms 19.8% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 4, 0.594289, 8445.96, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --cpu -np 4 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 3.566 us + B / 5.631 GB/s, 13 sizes, rms 16.7% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 4, 0.778377, 8736.41, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --cpu -np 4 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 3.114 us + B / 4.368 GB/s, 13 sizes, rms 22.7% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 4, 1.52613, 6153.24, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --cpu -np 4 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 1.526 us + B / 2.051 GB/s, 13 sizes, rms 16.0% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 8, 0.750733, 4485.59, 1,
     "the H100 machine (16 cores) 2026-12-05: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --cpu -np 8 -b 8 -e 16M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 10.51 us + B / 2.563 GB/s, 11 sizes, rms 17.9% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 8, 1.32755, 3091.29, 1,
     "the H100 machine (16 cores) 2026-12-05: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --cpu -np 8 -b 8 -e 16M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 7.965 us + B / 1.546 GB/s, 11 sizes, rms 22.4% */
    {WEFT_TUNE_SHM, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 8, 4.96604, 3208.7, 1,
     "the H100 machine (16 cores) 2026-12-05: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --cpu -np 8 -b 8 -e 16M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 4.966 us + B / 0.4584 GB/s, 11 sizes, rms 10.5% */
    {WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 7.09711, 19885.6, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_SHM_DISABLE=1 NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --cpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 14.19 us + B / 19.89 GB/s, 13 sizes, rms 29.9% */
    {WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 2, 7.67226, 27966.5, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_SHM_DISABLE=1 NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --cpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 15.34 us + B / 13.98 GB/s, 13 sizes, rms 31.3% */
    {WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 7.2716, 4862.16, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_SHM_DISABLE=1 NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --cpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 7.272 us + B / 4.862 GB/s, 13 sizes, rms 24.7% */
    {WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 4, 6.77717, 10059.2, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_SHM_DISABLE=1 NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --cpu -np 4 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 40.66 us + B / 6.706 GB/s, 13 sizes, rms 25.2% */
    {WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 4, 9.36073, 12122.6, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_SHM_DISABLE=1 NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --cpu -np 4 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 37.44 us + B / 6.061 GB/s, 13 sizes, rms 32.8% */
    {WEFT_TUNE_SOCKET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 4, 21.8937, 5283.45, 1,
     "the H200 machine (16 cores) 2026-12-04: NCCL_SHM_DISABLE=1 NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --cpu -np 4 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 21.89 us + B / 1.761 GB/s, 13 sizes, rms 17.2% */
    {WEFT_TUNE_NET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 23.0388, 13151.2, 1,
     "the H200 machine (16 cores) 2026-12-04: WEFT_BENCH_HOSTS=1 (MPS) NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 46.08 us + B / 13.15 GB/s, 13 sizes, rms 28.2% */
    {WEFT_TUNE_NET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 2, 24.1815, 27327.6, 1,
     "the H200 machine (16 cores) 2026-12-04: WEFT_BENCH_HOSTS=1 (MPS) NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 48.36 us + B / 13.66 GB/s, 13 sizes, rms 26.0% */
    {WEFT_TUNE_NET, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 31.2175, 6487.82, 1,
     "the H200 machine (16 cores) 2026-12-04: WEFT_BENCH_HOSTS=1 (MPS) NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 2 -b 8 -e 256M -f 4 -n 10 -w 2 -c 0 -T 60 --passes 3"}, /* 31.22 us + B / 6.488 GB/s, 13 sizes, rms 28.0% */
    /* NVLink, 2 GPUs of one process (one thread drives both), one row set
     * per collective (docs/PERFORMANCE.md, "Two H200s over NVLink, again").
     * The sweep ran before topo/detect_nvml.c placed NVLinks whose far end
     * a VM hides, so its TUNING lines named the path "staged"; the links
     * were the p2p transport's over NVLink all the same (peer access), and
     * weft-fit was rerun on its JSON files with --path nvlink. Its LL128
     * runs are left out (LL128 ran as Simple on a path not known to be
     * NVLink), as are Direct's LL and LL128 (Direct on the ranks' own
     * buffers has no protocol). */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 8.49359, 246403, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 16.99 us + B / 246.4 GB/s, 27 sizes, rms 3.6% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 8.54081, 63385, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 17.08 us + B / 63.38 GB/s, 22 sizes, rms 4.3% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 14.855, 333401, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 14.86 us + B / 333.4 GB/s, 27 sizes, rms 10.4% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_SIMPLE, 2, 8.91506, 551656, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=Simple weft-bench allreduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 17.83 us + B / 275.8 GB/s, 27 sizes, rms 7.5% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLREDUCE, WEFT_ALGO_TREE, WEFT_PROTO_LL, 2, 8.5333, 135249, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Tree NCCL_PROTO=LL weft-bench allreduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 17.07 us + B / 67.62 GB/s, 22 sizes, rms 4.7% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLGATHER, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 11.2759, 204109, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench allgather --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 11.28 us + B / 204.1 GB/s, 27 sizes, rms 5.0% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLGATHER, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 12.7552, 68103.4, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench allgather --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 12.76 us + B / 68.1 GB/s, 22 sizes, rms 5.4% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_ALLGATHER, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 14.1696, 353324, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench allgather --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 14.17 us + B / 353.3 GB/s, 27 sizes, rms 10.7% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCESCATTER, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 11.0269, 218796, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench reducescatter --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 11.03 us + B / 218.8 GB/s, 27 sizes, rms 6.2% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCESCATTER, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 13.0275, 61849, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench reducescatter --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 13.03 us + B / 61.85 GB/s, 22 sizes, rms 8.7% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCESCATTER, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 14.2998, 327526, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench reducescatter --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 14.3 us + B / 327.5 GB/s, 27 sizes, rms 10.5% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_BROADCAST, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 9.6768, 253161, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench broadcast --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 9.677 us + B / 253.2 GB/s, 27 sizes, rms 7.4% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_BROADCAST, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 8.77615, 111997, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench broadcast --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 8.776 us + B / 112 GB/s, 22 sizes, rms 4.6% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_BROADCAST, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 13.4091, 347693, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench broadcast --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 13.41 us + B / 347.7 GB/s, 27 sizes, rms 8.3% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCE, WEFT_ALGO_RING, WEFT_PROTO_SIMPLE, 2, 10.0267, 336436, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=Simple weft-bench reduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 10.03 us + B / 336.4 GB/s, 27 sizes, rms 7.1% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCE, WEFT_ALGO_RING, WEFT_PROTO_LL, 2, 9.3672, 88750.2, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Ring NCCL_PROTO=LL weft-bench reduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 9.367 us + B / 88.75 GB/s, 22 sizes, rms 8.2% */
    {WEFT_TUNE_NVLINK, WEFT_FUNC_REDUCE, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, 2, 14.1231, 346144, 1,
     "2x H200 (NV18), 32 cores 2026-12-04: NCCL_ALGO=Direct NCCL_PROTO=Simple weft-bench reduce --gpu -np 1 -t 1 -g 2 -b 8 -e 512M -f 2 -n 10 -w 2 -c 0 (LL runs: -e 16M)"}, /* 14.12 us + B / 346.1 GB/s, 27 sizes, rms 7.8% */
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

unsigned weft_tune_fits_gen(void) {
  return table_gen;
}

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
