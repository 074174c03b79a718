/* The CUDA engine: collectives on device buffers, run by the plan kernel of
 * src/device/ on the caller's stream. Each rank owns an inbox of device
 * FIFOs; its peers reach it by pointer (same process), peer access (another
 * GPU of the process) or CUDA IPC (another process). Kernels spin on each
 * other, so this path is chosen only where every pair of ranks runs
 * concurrently; elsewhere device buffers are staged through host memory
 * (src/exec/cuda_staged.c). Without the kernels in the build every function
 * here says so. */
#ifndef WEFT_EXEC_CUDA_H
#define WEFT_EXEC_CUDA_H

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* How a communicator runs, decided at init by all its ranks together. */
enum weft_cuda_path {
  WEFT_CUDA_PATH_HOST,   /* host buffers, host engine: a host rank in the communicator */
  WEFT_CUDA_PATH_KERNEL, /* device buffers, kernels over device FIFOs */
  WEFT_CUDA_PATH_STAGED, /* device buffers copied to host memory and run by the host engine */
};

/* The CUDA driver's function name (version 11.7's), through the runtime,
 * into *pfn_out (size bytes: a function pointer); a driver without it is
 * a WARN naming who asked. */
ncclResult_t weft_cuda_driver_fn(const struct ncclComm *comm, const char *who, const char *name,
                                 void *pfn_out, size_t size);

/* WARNs once where rank-threads of this process sharing a GPU may wait on
 * each other's kernels through shared hardware queues (cuda_path.c). */
void weft_cuda_queues_check(const struct ncclComm *comm);

/* Collective over comm's bootstrap: every rank returns the same path, and
 * one INFO line says which and why. */
ncclResult_t weft_cuda_engine_choose(struct ncclComm *comm, enum weft_cuda_path *path_out);
/* Collective: links every peer through a GPU transport (p2p's inboxes, net
 * links: transport/gpu_transport.h) and uploads the link tables; sets
 * comm->cuda. */
ncclResult_t weft_cuda_engine_create(struct ncclComm *comm);
/* Waits for comm's last launch (unless aborting), then frees its memory. */
void weft_cuda_engine_destroy(struct ncclComm *comm, int abort);
/* Makes every kernel wait of comm give up (ncclCommAbort). */
void weft_cuda_engine_abort(struct ncclComm *comm);
/* The engine table's window slots (core/engine.h): ranks in several
 * processes on one GPU map each other's windows for the direct
 * collectives (exec/cuda_direct.h); elsewhere nothing is kept. */
ncclResult_t weft_cuda_engine_window_register(struct ncclComm *comm, void *buff, size_t size,
                                              void **out);
void weft_cuda_engine_window_release(struct ncclComm *comm, void *window);
/* Whether coll's buffers lie in windows every rank mapped (the same
 * answer on every rank where every rank passes window buffers, as
 * ncclCommWindowRegister's users must). */
int weft_cuda_engine_mapped(const struct ncclComm *comm, const struct weft_coll *coll);
/* After comm's collectives up to comm->op_seq are launched: tells the
 * rank-threads of this process sharing comm (exec/cuda_leave.c). */
void weft_cuda_engine_issued(const struct ncclComm *comm);
/* After a group's sends and receives (ops[0..n)) are launched: the same. */
void weft_cuda_engine_issued_p2p(const struct ncclComm *comm, const struct weft_p2p *ops, int n);
/* Channels a plan on comm may use (the FIFOs hold twice that for trees). */
int weft_cuda_engine_max_channels(const struct ncclComm *comm);
/* PreMulSum's scalar as the engine takes it: ncclScalarDevice's pointer,
 * read by a kernel when it runs (never on the host), or the value
 * ncclScalarHostImmediate captured when the operator was made. */
struct weft_cuda_premul {
  const void *dev_ptr;    /* NULL: value */
  unsigned char value[8]; /* one element of the collective's datatype */
};

/* Launches a collective planned with args/algo on stream with protocol
 * proto (enum weft_proto: the same on every rank); returns without
 * waiting. Device plans are cached per communicator by shape, so a repeated
 * call is one kernel launch (and CUDA graph capture records only that).
 * Direct (AllReduce) adds a second small kernel that reduces the arrivals
 * in rank order. premul (NULL: coll->op is built in) scales a stream-ordered
 * copy of the input by its scalar first and sums that, as the host engine
 * does. */
ncclResult_t weft_cuda_engine_launch(struct ncclComm *comm, const struct weft_coll *coll,
                                     const struct weft_sched_args *args, int algo, int proto,
                                     const struct weft_cuda_premul *premul, void *stream);

/* Collectives one fused launch carries (the device's WEFT_DEV_FUSE_MAX). */
#define WEFT_CUDA_FUSE_MAX 32

/* One collective of a group, for a launch shared with others of its
 * communicator: tuned and planned as weft_cuda_engine_launch's are. */
struct weft_cuda_call {
  const struct weft_coll *coll;
  struct weft_sched_args args;
  int algo;
  int proto;
  void *stream;
};
/* Launches n (2..WEFT_CUDA_FUSE_MAX) collectives of comm as one kernel on
 * calls[0]'s stream: none a PreMulSum or a Direct AllReduce (they need
 * kernels of their own), all of one protocol. They run in call order, one
 * after another inside the kernel. With several streams, the first waits
 * for the others' earlier work and they then wait for the kernel. Every
 * rank must group the same calls; returns without waiting. */
ncclResult_t weft_cuda_engine_launch_fused(struct ncclComm *comm,
                                           const struct weft_cuda_call *calls, int n);

/* Adds stream to streams[0..n) unless it is there; returns the new count.
 * A group's calls name their streams in call order, first seen first. */
static inline int weft_cuda_stream_add(void **streams, int n, void *stream) {
  for (int j = 0; j < n; j++)
    if (streams[j] == stream) return n;
  streams[n] = stream;
  return n + 1;
}

/* Every send and receive of one communicator in one group. */
struct weft_cuda_p2p {
  const struct weft_p2p *ops; /* nops: peer, direction, bytes, in call order */
  void *const *bufs;          /* nops: each op's buffer */
  const unsigned char *stage; /* nops: 1 for a send that overlaps a receive of the group */
  int nops;
  void *const *streams; /* nstreams distinct streams the calls named, first seen first */
  int nstreams;
};
/* Launches them as one kernel on streams[0] (weft_p2p_plan_parts: a few
 * lanes per peer, plans cached by the list of peers, directions and
 * sizes); returns
 * without waiting. Sends marked in stage go from a stream-ordered copy
 * taken first, so a receive of the group cannot overwrite them. With
 * several streams, streams[0] first waits for the others' earlier work and
 * they then wait for the kernel, as NCCL orders the streams of a group. */
ncclResult_t weft_cuda_engine_launch_p2p(struct ncclComm *comm, const struct weft_cuda_p2p *p2p);
/* ncclRemoteError when a kernel failed (a wait timed out, or a receive's
 * size disagreed with its send; the WARN names the ranks), else
 * ncclSuccess; reads the error word without waiting for running kernels. */
ncclResult_t weft_cuda_engine_check(struct ncclComm *comm);

#endif
