/* Tuning: which algorithm, protocol, channel count and chunk size a
 * collective gets, from a cost model (latency + bytes / bandwidth per path
 * type, algorithm and protocol, fitted from weft-bench runs: the table of
 * sched/tuning_fit.c), overridden by NCCL_ALGO / NCCL_PROTO in NCCL's
 * syntax. */
#ifndef WEFT_SCHED_TUNING_H
#define WEFT_SCHED_TUNING_H

#include <stddef.h>

#include "nccl.h"
#include "sched/schedule.h"
#include "sched/tuning_model.h"

struct ncclComm;

struct weft_tuning {
  enum weft_algo algo;
  enum weft_proto proto;
  int nchannels;
  size_t chunk_bytes;
  float estimated_us;       /* the model's time for this call */
  enum weft_tune_path path; /* whose rows the model read */
  int fitted;               /* the chosen row was measured, not a placeholder */
  /* One lane on the wide link (WEFT_WIDE_CHANNEL) moving the whole call in
   * one step (nchannels 1, chunk_bytes 0): a 2-rank Broadcast over sockets
   * of at least WEFT_SOCKET_WIDE_MIN_BYTES (weft_tune_wide). */
  int wide;
};

/* The table's row for a path, algorithm and protocol nearest to func on n
 * ranks (sched/tuning_fit.c); NULL when it has none. */
const struct weft_tune_fit *weft_tune_fit_find(enum weft_tune_path path, enum weft_func func,
                                               enum weft_algo algo, enum weft_proto proto, int n);
/* Tests: tune from these n rows instead of the compiled table (NULL: the
 * compiled one again). Not for use while other threads tune. */
void weft_tune_fits_use(const struct weft_tune_fit *rows, int n);
/* Which table is in use: changes with every weft_tune_fits_use. */
unsigned weft_tune_fits_gen(void);

/* Whether comm's links keep a 128-byte line whole, so that LL128 may run
 * (every pair of ranks on two GPUs joined by NVLink): the inboxes have
 * LL128 slots only then. The same on every rank. */
int weft_tune_ll128_links(const struct ncclComm *comm);

/* Most channels a collective uses: NCCL_MAX_NCHANNELS when set, else a
 * default for the engine (the CUDA engine sizes its FIFOs by it). */
int weft_tune_max_channels(int cuda_engine);
/* The same with `def` as the default (NCCL_MIN_NCHANNELS above it wins). */
int weft_tune_max_channels_or(int def);

/* Whether a host collective (kernels 0) of `bytes` moves whole on the
 * wide link: a Ring Broadcast on 2 ranks whose link is a socket, from
 * WEFT_SOCKET_WIDE_MIN_BYTES (by default 32 MiB where the link is 8 or
 * 16 socket channels with a helper thread each, comm->host_channels),
 * unless NCCL_MIN_NCHANNELS, NCCL_MAX_NCHANNELS or WEFT_CHUNK_SIZE ask
 * for channels or steps. */
int weft_tune_wide(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                   enum weft_algo algo);

/* Picks for func moving `bytes` (the caller's buffer size: count * elem) on
 * comm; logs the choice at INFO/TUNING. kernels: the plan runs as CUDA
 * kernels (the CUDA engine), else on the host engine's worker; each engine
 * says which when it tunes (exec/engine_*.c). */
ncclResult_t weft_tune(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                       size_t elem_size, struct weft_tuning *out);
/* The same for a call whose buffers every peer has mapped (mapped: they
 * lie in windows registered with ncclCommWindowRegister, where the CUDA
 * engine maps them across processes), so Direct on the ranks' own buffers
 * may run at any size (comm->cuda_direct 3). */
ncclResult_t weft_tune_mapped(const struct ncclComm *comm, int kernels, enum weft_func func,
                              size_t bytes, size_t elem_size, int mapped, struct weft_tuning *out);

#endif
