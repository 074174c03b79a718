/* The CUDA engine's cache of device plans (exec/cuda_plans.c), used by
 * exec/cuda.c: a plan goes to the device once per shape and stays, so a
 * launch is one kernel on the caller's stream. */
#ifndef WEFT_EXEC_CUDA_PLANS_H
#define WEFT_EXEC_CUDA_PLANS_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "device/device.h"
#include "exec/cuda_net.h"
#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* A collective's shape; for grouped send/recv func is WEFT_FUNC_SEND,
 * count the number of ops and ops_hash a hash of their list (the entry
 * keeps the list itself, compared on a hash match). */
struct weft_cuda_plan_key {
  int func, algo, proto, nchannels, root;
  size_t count, elem_size, chunk_bytes;
  uint64_t ops_hash;
};

struct weft_cuda_plan {
  struct weft_cuda_plan_key key;
  struct weft_p2p *ops; /* send/recv plans: key.count ops (owned); else NULL */
  struct weft_dev_plan plan;
  uint64_t used;                     /* launch number of its last use */
  int in_graph;                      /* launched during a stream capture: kept until destroy */
  struct weft_cuda_net_ops *net_ops; /* slots it moves on net links; NULL: none */
};

/* One communicator's plans. net (NULL: no net links) and side (the
 * engine's non-blocking stream, where plans are uploaded) are the
 * engine's, set once they exist. */
struct weft_cuda_plans {
  struct weft_cuda_plan *entries;
  int n;
  uint64_t launches;
  struct weft_cuda_net *net;
  cudaStream_t side;
};

ncclResult_t weft_cuda_plans_init(struct ncclComm *comm, struct weft_cuda_plans *c);
/* Frees every plan; the kernels that read them have ended. */
void weft_cuda_plans_free(struct weft_cuda_plans *c);

/* The cached device plan of a collective of shape key, built from args and
 * uploaded on a miss; a plan evicted for it is freed in stream s's order. */
ncclResult_t weft_cuda_plans_coll(struct ncclComm *comm, struct weft_cuda_plans *c,
                                  const struct weft_cuda_plan_key *key,
                                  const struct weft_sched_args *args, cudaStream_t s,
                                  struct weft_cuda_plan **out);
/* The same for a send/recv op list, each peer's ops on `parts` lanes. */
ncclResult_t weft_cuda_plans_p2p(struct ncclComm *comm, struct weft_cuda_plans *c,
                                 const struct weft_p2p *ops, int nops, int parts, cudaStream_t s,
                                 struct weft_cuda_plan **out);
/* Marks a plan used by a launch: recency for the cache, and pinned for
 * good once a CUDA graph has recorded it (captured: the launch is). */
void weft_cuda_plans_use(struct weft_cuda_plans *c, struct weft_cuda_plan *p, int captured);

#endif
