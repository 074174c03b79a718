/* weft-bench's own pieces, the ones that call the NCCL API: where buffers
 * live, how ranks are started, and what one benchmarking thread holds. */
#ifndef WEFT_BENCH_WEFT_H
#define WEFT_BENCH_WEFT_H

#include "bench.h"

/* Exit codes of weft-bench (and of each of its rank processes). */
enum bench_exit {
  BENCH_EXIT_OK = 0,
  BENCH_EXIT_WRONG = 1, /* ran, but some results were wrong */
  BENCH_EXIT_ERROR = 2  /* a call failed, or bad flags */
};

/* ---- Buffers ---------------------------------------------------------------
 *
 * Where a rank's buffers live. Host ranks use plain host memory and ignore
 * the stream; a device-buffer path is one more table of these functions
 * (see bench_mem.c), chosen by bench_mem_select. Functions return 0 on
 * success and print their own error otherwise. */
struct bench_mem_ops {
  const char *name;
  /* Makes local_index this thread's current device (before comm init). */
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
};

const struct bench_mem_ops *bench_mem_select(void);

/* ---- Ranks of this thread ------------------------------------------------- */

struct bench_rank {
  int rank;
  ncclComm_t comm;
  void *send; /* buffers of the mem ops, buf_bytes each */
  void *recv;
  void *scratch;       /* one double, for timings and error counts */
  unsigned char *host; /* host image for filling and checking */
};

struct bench_thread {
  const struct bench_args *args;
  const struct bench_mem_ops *mem;
  ncclUniqueId id;
  int nranks;
  int nlocal;     /* ranks this thread drives (-g) */
  int local_base; /* device index of its first rank on this host */
  int printer;    /* holds rank 0: prints the report */
  cudaStream_t stream;
  size_t buf_bytes;
  struct bench_rank *ranks;
  void **bufs;  /* nlocal pointers, for gathering across ranks */
  double *vals; /* nlocal values, likewise */
  double wrong; /* wrong elements seen, summed over all ranks */
  struct bench_report report;
  const char *library;
  int rc; /* enum bench_exit */
};

/* Runs one thread's whole benchmark; sets and returns t->rc. */
int bench_thread_run(struct bench_thread *t);

/* ---- NCCL calls (bench_nccl.c) -------------------------------------------- */

/* Prints which rank's which call failed and why; returns BENCH_EXIT_ERROR. */
int bench_nccl_fail(const struct bench_rank *r, const char *call, ncclResult_t res);
int bench_nccl_init(struct bench_thread *t);
void bench_nccl_fini(struct bench_thread *t);
/* One iteration: c on every rank of t, agg_iters times, in one group. */
int bench_nccl_iteration(struct bench_thread *t, const struct bench_case *c, int in_place,
                         int agg_iters);
/* AllReduces count elements in place in each rank's bufs[i] (mem buffers),
 * then waits for them. */
int bench_nccl_allreduce(struct bench_thread *t, void *const *bufs, size_t count,
                         ncclDataType_t type, ncclRedOp_t op);

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
