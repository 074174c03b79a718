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

/* Picks for func moving `bytes` (the caller's buffer size: count * elem) on
 * comm; logs the choice at INFO/TUNING. kernels: the plan runs as CUDA
 * kernels (the CUDA engine), else on the host engine's worker; each engine
 * says which when it tunes (exec/engine_*.c). */
ncclResult_t weft_tune(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                       size_t elem_size, struct weft_tuning *out);

#endif
