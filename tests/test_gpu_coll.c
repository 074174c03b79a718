/* GPU suite: every collective of the NCCL API on device buffers, N = 1..8
 * ranks (rank r on GPU r % ndev, so all on GPU 0 with one GPU), against
 * double-precision references (gpu_ref.c), in three modes:
 *   threads  one thread per rank, ncclCommInitRank on a shared unique id;
 *   procs    one forked process per rank (forked before the process touches
 *            CUDA; each child then picks its device and inits its rank);
 *   initall  ncclCommInitAll on a repeated device list, every call made by
 *            one thread inside ncclGroupStart/End over all ranks.
 * Calls are enqueued on each rank's own non-blocking stream (NCCL's stream
 * semantics); a rank then synchronizes its stream, asks
 * ncclCommGetAsyncError and copies the buffers back to check them. Outputs
 * are poisoned first (NaN bytes for floating types, 0x7b for integers),
 * 16 poisoned elements after every output must stay so, and out-of-place
 * inputs must come back untouched.
 *
 * The full cross product would take hours, so the matrix is cut in parts
 * that each cover one axis fully (a job is one part, one mode, some rank
 * counts, one NCCL_ALGO/NCCL_PROTO):
 *   dtypes   every datatype (fp8 included) x every operator (sum, prod, max,
 *            min, avg, PreMulSum with a host and a device scalar) for
 *            AllReduce, ReduceScatter and Reduce, and every datatype for the
 *            data movers (AllGather, Broadcast, a send/recv ring exchange,
 *            AlltoAll, Gather, Scatter); count 1031, in and out of place;
 *            2 and 3 ranks as threads and as processes, 3 under initall.
 *   colls    every collective, send/recv patterns included (ring, unequal
 *            sizes per pair, send to self, lone calls outside a group) x
 *            uint8, int32, half, bf16, float, double x counts 0, 1, 7, 1031
 *            x sum and a rotating second operator x in and out of place x
 *            rotating roots, plus 1000003 elements (float sum, int32 max);
 *            N = 1..8 in each of the three modes.
 *   algos    float and half: AllReduce (sum, avg, max, PreMulSum) and the
 *            other collectives, counts 0..1000003, under NCCL_ALGO = Ring,
 *            Tree, Direct x NCCL_PROTO = Simple, LL, and Ring, Tree x
 *            LL128 (NVLink only: Simple where ranks share a GPU);
 *            threads (2, 3, 4, 8 ranks) and processes (2, 4 ranks).
 *   big      one 256 MiB float-sum AllReduce on 4 ranks, out of place and
 *            in place.
 *   windows  every rank's buffers registered by ncclCommWindowRegister,
 *            then the collectives the direct algorithms run (AllReduce,
 *            ReduceScatter, Reduce, AllGather, Broadcast) above the LL
 *            size (float sum, int32 max, a PreMulSum, which keeps the
 *            ring), in and out of place; 2 and 4 ranks as threads and as
 *            processes (under MPS the processes' direct kernels work on
 *            the peers' windows mapped by CUDA IPC).
 *
 * weft reads NCCL_ALGO and NCCL_PROTO once per process, and CUDA does not
 * survive fork, so every job runs in a worker: this binary run again
 * (gpu_worker) with the job's environment. The Check process only counts
 * devices and starts workers.
 *
 * One case (layout, poisoned upload, call, check) is gpu_case.c's. A
 * failure names the mode, rank, collective, datatype, operator, count,
 * root, placement, the first bad element with what it held and what was
 * expected, and how many were bad. A rank goes on after a wrong result or a
 * refused call (so one missing feature does not hide the rest), and stops
 * when its communicator or CUDA context has failed.
 *
 * Usage: test_gpu_coll [--case dtypes|colls|algos|big] [--mode threads|
 * procs|initall] [--proto Simple|LL|LL128] [--require-mps] (no arguments:
 * every job; --proto keeps the jobs that set NCCL_PROTO to it). --require-mps
 * skips (77) unless MPS serves GPU 0. Exits 77 without a GPU.
 * test_gpu_coll --worker N runs job N (its number is in every report) in
 * this process and environment, for a debugger or NCCL_DEBUG; set
 * NCCL_ALGO and NCCL_PROTO as the job says. */
#include <check.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_case.h"
#include "gpu_harness.h"
#include "gpu_ref.h"
#include "nccl.h"
#include "suite_run.h"

/* A prime count that is not the period: block r of a buffer then starts at
 * a different period position for every r, so a block moved by whole
 * counts (the wrong rank's block) does not match by accident. */
#define PRIME_COUNT ((size_t)1031)
#define LARGE_COUNT ((size_t)1000003)
#define BIG_COUNT (((size_t)256 << 20) / sizeof(float))
#define RUN_TIMEOUT_S 180 /* one rank count of one job */
#define MAX_JOB_NS 8

/* ---- Jobs ------------------------------------------------------------------ */

enum mode { M_THREADS, M_PROCS, M_INITALL };
static const char *const mode_names[] = {"threads", "procs", "initall"};

enum { P_DTYPES = 1, P_COLLS = 2, P_ALGOS = 4, P_BIG = 8, P_WINDOWS = 16 };

struct job {
  const char *tcase; /* the matrix part's name: --case and the Check test case */
  enum mode mode;
  int ns[MAX_JOB_NS + 1]; /* rank counts, run one after another; 0 ends */
  unsigned parts;
  const char *algo, *proto; /* NCCL_ALGO, NCCL_PROTO; NULL: unset */
};

/* clang-format off */
#define EACH_N(tc, mode, parts)                                                          \
  {tc, mode, {1}, parts, NULL, NULL}, {tc, mode, {2}, parts, NULL, NULL},                \
  {tc, mode, {3}, parts, NULL, NULL}, {tc, mode, {4}, parts, NULL, NULL},                \
  {tc, mode, {5}, parts, NULL, NULL}, {tc, mode, {6}, parts, NULL, NULL},                \
  {tc, mode, {7}, parts, NULL, NULL}, {tc, mode, {8}, parts, NULL, NULL}
#define ALGO(a, p)                                                                       \
  {"algos", M_THREADS, {2, 3, 4, 8}, P_ALGOS, a, p},                                     \
  {"algos", M_PROCS, {2, 4}, P_ALGOS, a, p}
/* clang-format on */

static const struct job jobs[] = {
    {"dtypes", M_THREADS, {2, 3}, P_DTYPES, NULL, NULL},
    {"dtypes", M_PROCS, {2, 3}, P_DTYPES, NULL, NULL},
    {"dtypes", M_INITALL, {3}, P_DTYPES, NULL, NULL},
    EACH_N("colls", M_THREADS, P_COLLS),
    EACH_N("colls", M_PROCS, P_COLLS),
    EACH_N("colls", M_INITALL, P_COLLS),
    ALGO("Ring", "Simple"),
    ALGO("Ring", "LL"),
    ALGO("Tree", "Simple"),
    ALGO("Tree", "LL"),
    ALGO("Ring", "LL128"),
    ALGO("Tree", "LL128"),
    ALGO("Direct", "Simple"),
    ALGO("Direct", "LL"),
    {"big", M_THREADS, {4}, P_BIG, NULL, NULL},
    {"windows", M_THREADS, {2, 4}, P_WINDOWS, NULL, NULL},
    {"windows", M_PROCS, {2, 4}, P_WINDOWS, NULL, NULL},
};
#define NJOBS (int)(sizeof jobs / sizeof jobs[0])

/* Bytes of each rank buffer: the largest case of the matrix. */
static size_t cap_bytes(void) {
  size_t large = (LARGE_COUNT + 2 * REF_MAX_RANKS + GCASE_GUARD) * 4;
  size_t small = (PRIME_COUNT * REF_MAX_RANKS + GCASE_GUARD) * 8;
  return large > small ? large : small;
}

/* ---- Matrix parts -------------------------------------------------------------- */

static const enum coll reducing[] = {C_ALLREDUCE, C_REDUCESCATTER, C_REDUCE};
static const enum coll moving[] = {C_ALLGATHER, C_ALLTOALL, C_BROADCAST,
                                   C_RING,      C_GATHER,   C_SCATTER};
#define NREDUCING (int)(sizeof reducing / sizeof reducing[0])
#define NMOVING (int)(sizeof moving / sizeof moving[0])

/* A count of about `count` elements in all, for calls whose buffers hold
 * count elements per rank. */
static size_t per_rank(const struct run *ru, enum coll k, size_t count) {
  int blocks = k == C_ALLGATHER || k == C_REDUCESCATTER || k == C_ALLTOALL || k == C_GATHER ||
               k == C_SCATTER;
  return blocks && count >= (size_t)ru->nranks ? (count / (size_t)ru->nranks) | 1 : count;
}

/* Every datatype x operator for the reducing calls, every datatype for the
 * others, count 1031, both placements. */
static void part_dtypes(struct run *ru) {
  int n = ru->nranks, root = 0;
  for (int di = 0; di < ndtypes; di++) {
    const struct dtype_info *d = &dtypes[di];
    for (int op = 0; op < REF_NOPS; op++) {
      ref_build(ru->t, d, op, n, ru->salt++);
      for (int ki = 0; ki < NREDUCING; ki++)
        for (int inplace = 0; inplace <= 1; inplace++, root = (root + 1) % n)
          gcase_run(ru, reducing[ki], op, PRIME_COUNT, root, inplace);
    }
    ref_build(ru->t, d, ncclSum, n, ru->salt++);
    for (int ki = 0; ki < NMOVING; ki++)
      for (int inplace = 0; inplace <= 1; inplace++, root = (root + 1) % n)
        gcase_run(ru, moving[ki], ncclSum, PRIME_COUNT, root, inplace);
  }
}

static const ncclDataType_t colls_types[] = {ncclUint8,    ncclInt32,   ncclFloat16,
                                             ncclBfloat16, ncclFloat32, ncclFloat64};
static const size_t small_counts[] = {0, 1, 7, PRIME_COUNT};
#define NCOLLS_TYPES (int)(sizeof colls_types / sizeof colls_types[0])
#define NSMALL (int)(sizeof small_counts / sizeof small_counts[0])

static void colls_small(struct run *ru, const struct dtype_info *d, int ti, int *root) {
  int n = ru->nranks;
  for (int ci = 0; ci < NSMALL; ci++) {
    size_t count = small_counts[ci];
    int ops[2] = {ncclSum, 1 + (ti + ci) % (REF_NOPS - 1)}; /* prod .. premul-dev in turn */
    for (int oi = 0; oi < 2; oi++) {
      ref_build(ru->t, d, ops[oi], n, ru->salt++);
      for (int ki = 0; ki < NREDUCING; ki++)
        for (int inplace = 0; inplace <= 1; inplace++, *root = (*root + 1) % n)
          gcase_run(ru, reducing[ki], ops[oi], count, *root, inplace);
    }
    ref_build(ru->t, d, ncclSum, n, ru->salt++);
    for (int ki = 0; ki < NMOVING; ki++)
      for (int inplace = 0; inplace <= 1; inplace++, *root = (*root + 1) % n)
        gcase_run(ru, moving[ki], ncclSum, count, *root, inplace);
    gcase_run(ru, C_SELF, ncclSum, count, 0, 0);
  }
  gcase_run(ru, C_UNEQUAL, ncclSum, 0, 0, 0);
  /* Lone calls need each rank to issue its own (one thread cannot launch
   * the two sides of a blocking pair outside a group). */
  if (!ru->group && n >= 2) gcase_run(ru, C_LONE, ncclSum, PRIME_COUNT, 0, 0);
}

/* About a million elements: every collective once (float sum, out of
 * place), the reducing ones in place with int32 max, a ring in place. */
static void colls_large(struct run *ru) {
  int n = ru->nranks;
  ref_build(ru->t, dtype_find(ncclFloat32), ncclSum, n, ru->salt++);
  for (int ki = 0; ki < NREDUCING; ki++)
    gcase_run(ru, reducing[ki], ncclSum, per_rank(ru, reducing[ki], LARGE_COUNT), n - 1, 0);
  for (int ki = 0; ki < NMOVING; ki++)
    gcase_run(ru, moving[ki], ncclSum, per_rank(ru, moving[ki], LARGE_COUNT), n - 1, 0);
  gcase_run(ru, C_RING, ncclSum, LARGE_COUNT, 0, 1);
  ref_build(ru->t, dtype_find(ncclInt32), ncclMax, n, ru->salt++);
  for (int ki = 0; ki < NREDUCING; ki++)
    gcase_run(ru, reducing[ki], ncclMax, per_rank(ru, reducing[ki], LARGE_COUNT), 0, 1);
}

static void part_colls(struct run *ru) {
  int root = 0;
  for (int ti = 0; ti < NCOLLS_TYPES; ti++) colls_small(ru, dtype_find(colls_types[ti]), ti, &root);
  colls_large(ru);
}

/* What NCCL_ALGO / NCCL_PROTO change: float and half through every
 * collective, AllReduce with four operators, counts up to a million. */
static void part_algos(struct run *ru) {
  static const ncclDataType_t types[] = {ncclFloat32, ncclFloat16};
  static const size_t counts[] = {0, 1, 7, PRIME_COUNT, LARGE_COUNT};
  static const int ar_ops[] = {ncclSum, ncclAvg, ncclMax, OP_PREMUL_DEV};
  static const enum coll others[] = {C_REDUCESCATTER, C_REDUCE, C_ALLGATHER, C_BROADCAST};
  int n = ru->nranks, root = 0;
  for (int ti = 0; ti < 2; ti++) {
    const struct dtype_info *d = dtype_find(types[ti]);
    for (int ci = 0; ci < 5; ci++) {
      for (int oi = 0; oi < 4; oi++) {
        ref_build(ru->t, d, ar_ops[oi], n, ru->salt++);
        for (int inplace = 0; inplace <= 1; inplace++)
          gcase_run(ru, C_ALLREDUCE, ar_ops[oi], counts[ci], 0, inplace);
      }
      ref_build(ru->t, d, ncclSum, n, ru->salt++);
      for (int ki = 0; ki < 4; ki++)
        for (int inplace = 0; inplace <= 1; inplace++, root = (root + 1) % n)
          gcase_run(ru, others[ki], ncclSum, per_rank(ru, others[ki], counts[ci]), root, inplace);
    }
  }
}

/* One 256 MiB float-sum AllReduce, out of place then in place, in buffers of
 * its own. */
static int part_big(struct run *ru) {
  size_t count = BIG_COUNT, bytes = (count + GCASE_GUARD) * sizeof(float);
  const struct dtype_info *d = dtype_find(ncclFloat32);
  struct gcase c = {C_ALLREDUCE, ncclSum, count, 0, 0};
  unsigned char *dsend[REF_MAX_RANKS] = {0}, *drecv[REF_MAX_RANKS] = {0};
  unsigned char *hin[REF_MAX_RANKS] = {0}, *hout[REF_MAX_RANKS] = {0};
  ref_build(ru->t, d, ncclSum, ru->nranks, ru->salt++);
  for (int i = 0; i < ru->nlocal; i++) {
    struct lrank *l = &ru->l[i];
    HCUDA(cudaSetDevice(l->dev));
    HCUDA(cudaMalloc((void **)&dsend[i], bytes));
    HCUDA(cudaMalloc((void **)&drecv[i], bytes));
    hin[i] = malloc(bytes);
    hout[i] = malloc(bytes);
    HCHECK(hin[i] && hout[i], "out of memory for 256 MiB buffers");
    ref_fill(ru->t, l->rank, hin[i], 0, count);
  }
  for (int inplace = 0; inplace <= 1 && !ru->fatal; inplace++) {
    c.inplace = inplace;
    ru->ncases++;
    for (int i = 0; i < ru->nlocal; i++) {
      struct lrank *l = &ru->l[i];
      HCUDA(cudaSetDevice(l->dev));
      HCUDA(cudaMemsetAsync(drecv[i], 0xff, bytes, l->stream)); /* NaN */
      HCUDA(cudaMemcpyAsync(inplace ? drecv[i] : dsend[i], hin[i], count * sizeof(float),
                            cudaMemcpyHostToDevice, l->stream));
    }
    if (ru->group) ncclGroupStart();
    ncclResult_t res[REF_MAX_RANKS];
    for (int i = 0; i < ru->nlocal; i++) {
      struct lrank *l = &ru->l[i];
      res[i] = ncclAllReduce(inplace ? drecv[i] : dsend[i], drecv[i], count, ncclFloat32, ncclSum,
                             l->comm, l->stream);
    }
    if (ru->group) ncclGroupEnd();
    for (int i = 0; i < ru->nlocal; i++) {
      struct lrank *l = &ru->l[i];
      if (res[i] != ncclSuccess) {
        gcase_fail(ru, l, &c, "ncclAllReduce -> %d (%s): %s", (int)res[i],
                   ncclGetErrorString(res[i]), ncclGetLastError(l->comm));
        ru->fatal = 1;
        continue;
      }
      HCUDA(cudaSetDevice(l->dev));
      HCUDA(cudaStreamSynchronize(l->stream));
      HCUDA(cudaMemcpy(hout[i], drecv[i], bytes, cudaMemcpyDeviceToHost));
      struct ref_bad bad;
      size_t nbad = ref_check(ru->t, hout[i], 0, count, -1, 0, &bad);
      gcase_report_bad(ru, l, &c, "recvbuff", nbad, count, &bad);
      nbad = ref_check_poison(ru->t, hout[i], count, GCASE_GUARD, &bad);
      gcase_report_bad(ru, l, &c, "guard after the output", nbad, GCASE_GUARD, &bad);
    }
  }
  for (int i = 0; i < ru->nlocal; i++) {
    cudaSetDevice(ru->l[i].dev);
    cudaFree(dsend[i]);
    cudaFree(drecv[i]);
    free(hin[i]);
    free(hout[i]);
  }
  return 0;
}

/* The direct collectives on windows: every local rank registers its two
 * buffers (a collective call, one rank a thread or process: ru->nlocal
 * is 1), runs the cases, then deregisters. Counts above the LL size (32
 * KiB a rank) and one below. */
static int part_windows(struct run *ru) {
  static const enum coll direct[] = {C_ALLREDUCE, C_REDUCESCATTER, C_REDUCE, C_ALLGATHER,
                                     C_BROADCAST};
  static const size_t counts[] = {PRIME_COUNT, 65537, LARGE_COUNT};
  struct lrank *l = &ru->l[0];
  HCHECK(ru->nlocal == 1, "windows: one rank a thread or process");
  ncclWindow_t ws = NULL, wr = NULL;
  HNCCL(ncclCommWindowRegister(l->comm, l->d_send, l->cap, &ws, NCCL_WIN_COLL_SYMMETRIC));
  HNCCL(ncclCommWindowRegister(l->comm, l->d_recv, l->cap, &wr, NCCL_WIN_COLL_SYMMETRIC));
  int n = ru->nranks, root = 0;
  for (int ci = 0; ci < 3; ci++) {
    for (int ki = 0; ki < 5; ki++) {
      size_t count = per_rank(ru, direct[ki], counts[ci]);
      int reduces =
          direct[ki] == C_ALLREDUCE || direct[ki] == C_REDUCESCATTER || direct[ki] == C_REDUCE;
      ref_build(ru->t, dtype_find(ncclFloat32), ncclSum, n, ru->salt++);
      for (int inplace = 0; inplace <= 1; inplace++, root = (root + 1) % n)
        gcase_run(ru, direct[ki], ncclSum, count, root, inplace);
      if (!reduces) continue;
      ref_build(ru->t, dtype_find(ncclInt32), ncclMax, n, ru->salt++);
      gcase_run(ru, direct[ki], ncclMax, count, root, 1);
      ref_build(ru->t, dtype_find(ncclFloat32), OP_PREMUL_DEV, n, ru->salt++);
      gcase_run(ru, direct[ki], OP_PREMUL_DEV, count, root, 0);
    }
  }
  HNCCL(ncclCommWindowDeregister(l->comm, wr));
  HNCCL(ncclCommWindowDeregister(l->comm, ws));
  return 0;
}

/* Runs the job's parts on the local ranks; returns 0 when nothing failed. */
static int run_parts(struct run *ru, unsigned parts) {
  double t0 = harness_now();
  ru->t = malloc(sizeof *ru->t);
  HCHECK(ru->t != NULL, "out of memory");
  ru->salt = 1;
  if (parts & P_DTYPES) part_dtypes(ru);
  if (parts & P_COLLS) part_colls(ru);
  if (parts & P_ALGOS) part_algos(ru);
  if ((parts & P_BIG) && !ru->fatal && part_big(ru) != 0) ru->fatal = 1;
  if ((parts & P_WINDOWS) && !ru->fatal && part_windows(ru) != 0) ru->fatal = 1;
  free(ru->t);
  int nfail = 0;
  const char *first = NULL;
  for (int i = 0; i < ru->nlocal; i++) {
    nfail += ru->l[i].nfail;
    if (first == NULL && ru->l[i].nfail > 0) first = ru->l[i].first_fail;
  }
  char who[32];
  if (ru->nlocal > 1)
    snprintf(who, sizeof who, "ranks 0..%d", ru->nlocal - 1);
  else
    snprintf(who, sizeof who, "rank %d", ru->l[0].rank);
  fprintf(stderr, "%s, %d ranks, %s: %d cases, %d failures, %.1f s%s\n", ru->mode, ru->nranks, who,
          ru->ncases, nfail, harness_now() - t0, ru->fatal ? " (stopped early)" : "");
  if (nfail == 0 && !ru->fatal) return 0;
  return harness_fail(__FILE__, __LINE__, "%s: %d failures in %d cases%s; first: %s", who, nfail,
                      ru->ncases, ru->fatal ? " (stopped early)" : "",
                      first ? first : "(none recorded)");
}

/* ---- Ranks -------------------------------------------------------------------- */

struct job_run {
  const struct job *job;
  int n; /* ranks in this run */
  int require_mps;
};

static void close_comm(ncclComm_t comm, int fatal) {
  if (comm == NULL) return;
  if (fatal)
    ncclCommAbort(comm);
  else
    ncclCommDestroy(comm);
}

/* A rank of its own (thread or process): picks its GPU, then joins. */
static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg) {
  const struct job_run *jr = arg;
  int ndev = 0;
  HCUDA(cudaGetDeviceCount(&ndev));
  HCHECK(ndev > 0, "no CUDA device in rank %d", rank);
  struct lrank l;
  memset(&l, 0, sizeof l);
  l.rank = rank;
  l.dev = rank % ndev;
  HCUDA(cudaSetDevice(l.dev));
  if (jr->job->mode == M_PROCS && rank == 0) {
    int mps = gpu_mps_enabled(l.dev);
    fprintf(stderr, "procs: MPS on GPU %d: %s\n", l.dev, mps ? "yes" : "no");
    HCHECK(mps || !jr->require_mps, "MPS was required (--require-mps) but does not serve GPU %d",
           l.dev);
  }
  HNCCL(ncclCommInitRank(&l.comm, nranks, id, rank));
  struct run ru = {mode_names[jr->job->mode], nranks, 1, 0, &l, NULL, 1, 0, 0};
  int rc = gcase_rank_open(&l, cap_bytes());
  if (rc == 0) rc = run_parts(&ru, jr->job->parts);
  /* The communicator first: a rank-thread's cudaFree waits for every kernel
   * on the GPU, so it must not run before the other rank-threads have
   * launched their last call, which ncclCommDestroy waits for. */
  close_comm(l.comm, ru.fatal || rc != 0);
  gcase_rank_close(&l);
  return rc;
}

/* Every rank in this thread: ncclCommInitAll on GPUs r % ndev. */
static int initall_main(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)rank;
  (void)nranks;
  (void)id;
  const struct job_run *jr = arg;
  int n = jr->n, ndev = 0;
  HCUDA(cudaGetDeviceCount(&ndev));
  HCHECK(ndev > 0, "no CUDA device");
  int devs[REF_MAX_RANKS];
  ncclComm_t comms[REF_MAX_RANKS];
  struct lrank ls[REF_MAX_RANKS];
  memset(ls, 0, sizeof ls);
  for (int r = 0; r < n; r++) devs[r] = r % ndev;
  HNCCL(ncclCommInitAll(comms, n, devs));
  int rc = 0;
  for (int r = 0; r < n && rc == 0; r++) {
    ls[r].rank = r;
    ls[r].dev = devs[r];
    ls[r].comm = comms[r];
    rc = gcase_rank_open(&ls[r], cap_bytes());
  }
  struct run ru = {mode_names[M_INITALL], n, n, 1, ls, NULL, 1, 0, 0};
  if (rc == 0) rc = run_parts(&ru, jr->job->parts);
  for (int r = 0; r < n; r++) gcase_rank_close(&ls[r]);
  for (int r = 0; r < n; r++) close_comm(comms[r], ru.fatal || rc != 0);
  return rc;
}

/* ---- Workers ------------------------------------------------------------------- */

static int worker_main(int idx, int require_mps) {
  if (idx < 0 || idx >= NJOBS) return 2;
  const struct job *job = &jobs[idx];
  /* No CUDA call here: process ranks are forked from this process. */
  fprintf(stderr, "job %d: %s, %s, NCCL_ALGO=%s NCCL_PROTO=%s\n", idx, job->tcase,
          mode_names[job->mode], job->algo ? job->algo : "(unset)",
          job->proto ? job->proto : "(unset)");
  int failed = 0;
  for (int i = 0; job->ns[i] != 0; i++) {
    struct job_run jr = {job, job->ns[i], require_mps};
    char why[8192];
    double t0 = harness_now();
    int rc;
    if (job->mode == M_INITALL) {
      rc = harness_solo(RUN_TIMEOUT_S, initall_main, &jr, why, sizeof why);
    } else {
      struct harness_opts o = {job->mode == M_PROCS ? HARNESS_PROCS : HARNESS_THREADS, job->ns[i],
                               0, RUN_TIMEOUT_S, 0};
      rc = harness_run(&o, rank_main, &jr, why, sizeof why);
    }
    fprintf(stderr, "job %d, %d ranks: %s in %.1f s\n", idx, job->ns[i], rc ? "FAILED" : "passed",
            harness_now() - t0);
    if (rc != 0) fprintf(stderr, "FAIL job %d, %d ranks: %s\n", idx, job->ns[i], why);
    failed |= rc;
  }
  return failed ? 1 : 0;
}

/* ---- The Check driver ---------------------------------------------------------- */

static int require_mps_flag;

START_TEST(test_job) {
  const struct job *job = &jobs[_i];
  char idx[16];
  snprintf(idx, sizeof idx, "%d", _i);
  char *argv[] = {"test_gpu_coll", "--worker", idx, require_mps_flag ? "--require-mps" : NULL,
                  NULL};
  char algo[64], proto[64];
  snprintf(algo, sizeof algo, "NCCL_ALGO=%s", job->algo ? job->algo : "");
  snprintf(proto, sizeof proto, "NCCL_PROTO=%s", job->proto ? job->proto : "");
  const char *env[] = {job->algo ? algo : "NCCL_ALGO", job->proto ? proto : "NCCL_PROTO",
                       "WEFT_DEVICE", "WEFT_CUDA_ENGINE=1", NULL};
  int runs = 0;
  while (job->ns[runs] != 0) runs++;
  char why[3000]; /* Check refuses messages past 4 KiB */
  int rc = gpu_worker(argv, env, RUN_TIMEOUT_S * runs + 30, why, sizeof why);
  ck_assert_msg(rc == 0, "job %d (%s, %s, NCCL_ALGO=%s NCCL_PROTO=%s) failed: %s", _i, job->tcase,
                mode_names[job->mode], job->algo ? job->algo : "(unset)",
                job->proto ? job->proto : "(unset)", why);
}
END_TEST

int main(int argc, char **argv) {
  const char *only_case = NULL, *only_mode = NULL, *only_proto = NULL;
  int worker = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--worker") == 0 && i + 1 < argc)
      worker = atoi(argv[++i]);
    else if (strcmp(argv[i], "--case") == 0 && i + 1 < argc)
      only_case = argv[++i];
    else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc)
      only_mode = argv[++i];
    else if (strcmp(argv[i], "--proto") == 0 && i + 1 < argc)
      only_proto = argv[++i];
    else if (strcmp(argv[i], "--require-mps") == 0)
      require_mps_flag = 1;
    else {
      fprintf(stderr,
              "usage: %s [--case NAME] [--mode threads|procs|initall] [--proto NAME] "
              "[--require-mps]\n",
              argv[0]);
      return 2;
    }
  }
  setenv("WEFT_CUDA_ENGINE", "1", 1);
  setenv("WEFT_TIMEOUT", "30", 0);
  if (worker >= 0) return worker_main(worker, require_mps_flag);

  /* The driver may touch CUDA: it only starts workers, by fork and exec. */
  gpu_require_device("gpu_coll");
  if (require_mps_flag && !gpu_mps_enabled(0)) {
    printf("gpu_coll: MPS does not serve GPU 0 (start nvidia-cuda-mps-control -d): skipped\n");
    return 77;
  }
  Suite *s = suite_create("gpu_coll");
  TCase *tc = tcase_create("jobs");
  int nadded = 0;
  for (int i = 0; i < NJOBS; i++) {
    if (only_case != NULL && strcmp(only_case, jobs[i].tcase) != 0) continue;
    if (only_mode != NULL && strcmp(only_mode, mode_names[jobs[i].mode]) != 0) continue;
    if (only_proto != NULL && (jobs[i].proto == NULL || strcmp(only_proto, jobs[i].proto) != 0))
      continue;
    tcase_add_loop_test(tc, test_job, i, i + 1);
    nadded++;
  }
  if (nadded == 0) {
    fprintf(stderr, "gpu_coll: no job matches --case %s --mode %s --proto %s\n",
            only_case ? only_case : "(any)", only_mode ? only_mode : "(any)",
            only_proto ? only_proto : "(any)");
    return 2;
  }
  suite_add_tcase(s, tc);
  /* The driver has initialized CUDA (the device count); workers are exec'd,
   * never forked copies of it. */
  return suite_run_nofork(s);
}
