/* weft-bench's own pieces, the ones that call the NCCL API: where buffers
 * live, how ranks are started, and what one benchmarking thread holds. */
#ifndef WEFT_BENCH_WEFT_H
#define WEFT_BENCH_WEFT_H

#include <pthread.h>

#include "bench.h"

/* 1 when Meson found CUDA: the GPU-rank table is built (bench_mem_cuda.c). */
#ifndef WEFT_BENCH_CUDA
#define WEFT_BENCH_CUDA 0
#endif

/* Exit codes of weft-bench (and of each of its rank processes). */
enum bench_exit {
  BENCH_EXIT_OK = 0,
  BENCH_EXIT_WRONG = 1, /* ran, but some results were wrong */
  BENCH_EXIT_ERROR = 2  /* a call failed, or bad flags */
};

/* ---- Buffers ---------------------------------------------------------------
 *
 * Where a rank's buffers live: one table of these functions per kind. Host
 * ranks (bench_mem.c) use plain host memory and ignore the stream; GPU
 * ranks (bench_mem_cuda.c) use cudaMalloc'd memory and one stream each.
 * A rank's functions take its local index (its place among this host's
 * ranks), which picks its device. Functions return 0 on success and print
 * their own error otherwise. */
struct bench_mem_ops {
  const char *name;
  /* A header line saying where buffers live; NULL for host ranks, whose
   * table stays exactly as it was before GPU ranks existed. */
  const char *header;
  /* Makes local_index's device the calling thread's current one: before
   * the communicator's init and before anything allocated on the device. */
  int (*bind)(int local_index);
  int (*stream_create)(cudaStream_t *stream_out);
  void (*stream_destroy)(cudaStream_t stream);
  int (*alloc)(void **ptr_out, size_t bytes);
  void (*release)(void *ptr);
  /* Copies between a buffer of alloc and host memory, ordered on stream;
   * the copy is complete when the call returns. */
  int (*upload)(void *dst, const void *host_src, size_t bytes, cudaStream_t stream);
  int (*download)(void *host_dst, const void *src, size_t bytes, cudaStream_t stream);
  /* Returns once all work queued on stream has finished. */
  int (*sync)(cudaStream_t stream);
  /* Fills the device fields of a rank's line in the table. */
  void (*describe)(int local_index, struct bench_rank_info *info);
  /* Measures local_index's device-to-device copy bandwidth with copies of
   * up to max_bytes; NULL where there is no device. */
  int (*copy_bw)(int local_index, size_t max_bytes, struct bench_copy_bw *out);
  /* -M: bytes in use on local_index's device (host: resident memory). */
  int (*mem_used)(int local_index, double *bytes_out);
  /* -G: capture what is issued on stream into a graph, then launch it;
   * NULL where there are no CUDA graphs (host ranks). */
  int (*graph_begin)(cudaStream_t stream);
  int (*graph_end)(cudaStream_t stream, void **graph_out);
  int (*graph_launch)(void *graph, cudaStream_t stream);
  void (*graph_free)(void *graph);
};

extern const struct bench_mem_ops bench_mem_host;
#if WEFT_BENCH_CUDA
extern const struct bench_mem_ops bench_mem_cuda;
/* CUDA devices this process would see, probed in a child process so this
 * one never initializes CUDA before it forks its ranks; 0 with the reason
 * in why when there are none. */
int bench_mem_cuda_probe(char *why, size_t len);
#endif

/* Decides a->use_gpu from --cpu, --gpu, WEFT_DEVICE and the devices found,
 * and sets WEFT_DEVICE=cpu when the ranks are host ranks, so the library
 * agrees with the bench. Prints why and returns -1 when --gpu cannot be
 * honoured. Call before any rank starts (any fork, any NCCL call). */
int bench_mem_choose(struct bench_args *a);
/* The table a->use_gpu names. */
const struct bench_mem_ops *bench_mem_get(const struct bench_args *a);

/* ---- Ranks of this thread ------------------------------------------------- */

struct bench_rank {
  int rank;
  int local_index; /* among this host's ranks: picks the device */
  ncclComm_t comm;
  cudaStream_t stream; /* its own, so ranks of one thread run concurrently */
  void *send;          /* buffers of the mem ops, buf_bytes each */
  void *recv;
  void *scratch;       /* one double, for timings and error counts */
  unsigned char *host; /* host image for filling and checking */
  void *reg[2];        /* -R 1: send and recv registrations */
  ncclWindow_t win[2]; /* -R 2: their windows */
  void *base[2];       /* send and recv before -u shifted them */
  void *graph;         /* -G: the captured iterations */
  ncclRedOp_t mulsum;  /* -o mulsum: this rank's PreMulSum for the sweep's type */
};

/* The threads of one process meet here (-G: every rank's graph is
 * instantiated before any rank launches a kernel that waits for peers). */
struct bench_local_sync {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int nthreads, arrived;
  unsigned gen;
};

struct bench_thread {
  const struct bench_args *args;
  struct bench_local_sync *local; /* shared by the process's threads */
  const struct bench_mem_ops *mem;
  ncclUniqueId id;
  int nranks;
  int nlocal;  /* ranks this thread drives (-g) */
  int printer; /* holds rank 0: prints the report */
  size_t buf_bytes;
  struct bench_rank *ranks;
  void **bufs;      /* nlocal pointers, for gathering across ranks */
  double *vals;     /* nlocal values, likewise */
  double *iter_sec; /* -I: each iteration's time (-n of them) */
  double wrong;     /* wrong elements seen, summed over all ranks */
  struct bench_report report;
  const char *library;
  int rc; /* enum bench_exit */
};

/* Waits until every thread of the process has arrived (60 s at most: a
 * thread that failed never comes; then an error, printed). */
int bench_local_wait(struct bench_thread *t);

/* Runs one thread's whole benchmark; sets and returns t->rc. */
int bench_thread_run(struct bench_thread *t);
/* The printer's device copy bandwidth, into its report. Called before any
 * rank of the process starts: the copy's cudaFree waits for every stream
 * of the device, and a peer rank's collective already spinning there would
 * wait for this thread, so measuring while ranks run can deadlock. */
void bench_measure_roofline(struct bench_thread *t);

/* ---- NCCL calls (bench_nccl.c) -------------------------------------------- */

/* Prints which rank's which call failed and why; returns BENCH_EXIT_ERROR. */
int bench_nccl_fail(const struct bench_rank *r, const char *call, ncclResult_t res);
int bench_nccl_init(struct bench_thread *t);
/* -p 0: the communicators of all n threads of this process, from one. */
int bench_nccl_init_all(struct bench_thread *threads, int n);
/* -R: registers (deregisters) every rank's send and recv buffers. */
int bench_nccl_register(struct bench_thread *t);
void bench_nccl_deregister(struct bench_thread *t);
void bench_nccl_fini(struct bench_thread *t);
/* -o mulsum: makes (frees) each rank's PreMulSum for type, with the
 * rank's scalar (bench_mulsum_scalar). */
int bench_nccl_mulsum_create(struct bench_thread *t, ncclDataType_t type);
void bench_nccl_mulsum_destroy(struct bench_thread *t);
/* One iteration: c on every rank of t, agg_iters times, in one group. */
int bench_nccl_iteration(struct bench_thread *t, const struct bench_case *c, int in_place,
                         int agg_iters);
/* AllReduces count elements in place in each rank's bufs[i] (mem buffers),
 * then waits for them. */
int bench_nccl_allreduce(struct bench_thread *t, void *const *bufs, size_t count,
                         ncclDataType_t type, ncclRedOp_t op);
/* -T: from here on, a call or wait that keeps this process waiting longer
 * than -T seconds ends it with a message (bench_nccl.c re-arms it after
 * each). Nothing without -T. */
void bench_watchdog_start(const struct bench_args *a);
void bench_watchdog_kick(const struct bench_args *a);
/* Disarms it: the run is over (drawing the plot may take its time). */
void bench_watchdog_stop(const struct bench_args *a);

/* Waits for every rank's stream, then asks each communicator for an
 * asynchronous error (a GPU rank's kernel that timed out ends, and says so
 * only there). */
int bench_nccl_wait(struct bench_thread *t);

/* ---- Processes (bench_ranks.c) -------------------------------------------- */

/* Runs this process's share of the ranks: process proc of nprocs, the
 * local_index-th on its host. Returns an enum bench_exit. */
typedef int (*bench_proc_fn)(const struct bench_args *a, const ncclUniqueId *id, int proc,
                             int nprocs, int local_index);

/* Starts the processes (forked, or as launched by mpirun), hands each the
 * unique id and runs fn in each; returns the worst exit code. */
int bench_ranks_launch(const struct bench_args *a, bench_proc_fn fn);
/* Whether this binary can join an MPI job. */
int bench_ranks_have_mpi(void);

#endif
