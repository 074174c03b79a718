/* The CUDA engine as host C sees it: plain structs and extern "C" launch
 * functions (the kernels live in plan_exec.cu). This first slice runs one
 * rank's plan (src/sched/schedule.h) on device buffers, with device-memory
 * FIFO connections between ranks that share one GPU in one process. The
 * library drives it from src/exec/cuda.c (opt-in: WEFT_CUDA_ENGINE=1). */
#ifndef WEFT_DEVICE_DEVICE_H
#define WEFT_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "nccl.h"
#include "sched/schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Simple protocol defaults: slots per connection and bytes per slot. */
#define WEFT_DEV_NSLOTS 8
#define WEFT_DEV_SLOT_BYTES (128u << 10)

/* Every connection among nranks ranks on nchannels channels, in device
 * memory: the (src, dst, channel) FIFO has nslots slots of slot_bytes and
 * two 64-bit counters, head (slots consumed, written by the receiver) and
 * tail (slots filled, written by the sender), each on its own 128 bytes.
 * error is nonzero once a wait timed out (it names the waiting rank). */
struct weft_dev_conns {
  int nranks;
  int nchannels;
  int nslots;
  size_t slot_bytes;
  char *slots;         /* device: [src][dst][channel][slot][slot_bytes] */
  uint64_t *ctrl;      /* device: [src][dst][channel][32]: head at 0, tail at 16 */
  uint64_t *error;     /* device: one word */
  uint64_t timeout_ns; /* bound on every wait (0: 10 s) */
};

/* One lane of a device plan: its steps are steps[first .. first+nsteps). */
struct weft_dev_lane {
  uint64_t first;
  uint64_t nsteps;
  uint64_t scratch_off; /* into the plan's scratch */
  int32_t channel;
  int32_t pad;
};

/* A plan copied to the device: lanes and steps in one flat allocation. */
struct weft_dev_plan {
  int nlanes;
  size_t nsteps;
  void *mem; /* device: lanes, then steps, then scratch */
  struct weft_dev_lane *lanes;
  struct weft_step *steps;
  char *scratch;
};

ncclResult_t weft_dev_conns_create(int nranks, int nchannels, struct weft_dev_conns *out);
void weft_dev_conns_destroy(struct weft_dev_conns *conns);
/* Nonzero when a wait timed out since creation; *rank_out: the rank. */
ncclResult_t weft_dev_conns_error(const struct weft_dev_conns *conns, int *failed_out,
                                  int *rank_out);

/* Copies a host plan to the device (ordered on stream; the host plan may
 * be freed when this returns). */
ncclResult_t weft_dev_plan_upload(const struct weft_plan *plan, cudaStream_t stream,
                                  struct weft_dev_plan *out);
void weft_dev_plan_free(struct weft_dev_plan *plan);
/* Frees a plan in stream order (after work already queued on stream). */
void weft_dev_plan_free_async(struct weft_dev_plan *plan, cudaStream_t stream);

/* Launches rank's plan on stream: one CTA per lane. bufs[0] is the send
 * buffer (WEFT_BUF_IN), bufs[1] the receive buffer (WEFT_BUF_OUT). Ranks
 * that exchange data must run concurrently (their kernels spin on each
 * other's counters). */
ncclResult_t weft_dev_plan_launch(const struct weft_dev_plan *plan,
                                  const struct weft_dev_conns *conns, int rank,
                                  const void *sendbuff, void *recvbuff, ncclDataType_t datatype,
                                  ncclRedOp_t op, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
