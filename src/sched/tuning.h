/* Tuning: which algorithm, protocol, channel count and chunk size a
 * collective gets, from a cost model (latency + bytes / bandwidth per
 * algorithm), overridden by NCCL_ALGO / NCCL_PROTO in NCCL's syntax. */
#ifndef WEFT_SCHED_TUNING_H
#define WEFT_SCHED_TUNING_H

#include <stddef.h>

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

struct weft_tuning {
  enum weft_algo algo;
  enum weft_proto proto;
  int nchannels;
  size_t chunk_bytes;
  float estimated_us; /* the model's time for this call */
};

/* Most channels a collective uses: NCCL_MAX_NCHANNELS when set, else a
 * default for the engine (the CUDA engine sizes its FIFOs by it). */
int weft_tune_max_channels(int cuda_engine);
/* The same with `def` as the default (NCCL_MIN_NCHANNELS above it wins). */
int weft_tune_max_channels_or(int def);
struct weft_peer_info;
/* The host engine's default most channels for a communicator of these
 * ranks (comm->host_channels): the same answer on every rank. */
int weft_tune_host_channels(const struct weft_peer_info *peers, int nranks, int shm_disable);
/* Helper threads per socket link of the host engine for that default (one
 * data socket each), or 0: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD. */
int weft_tune_host_link_threads(int host_channels);

/* Picks for func moving `bytes` (the caller's buffer size: count * elem) on
 * comm; logs the choice at INFO/TUNING. kernels: the plan runs as CUDA
 * kernels (the CUDA engine), else on the host engine's worker; each engine
 * says which when it tunes (exec/engine_*.c). */
ncclResult_t weft_tune(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                       size_t elem_size, struct weft_tuning *out);

#endif
