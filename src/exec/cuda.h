/* The CUDA engine (opt-in, WEFT_CUDA_ENGINE=1): collectives on device
 * buffers, run by the plan kernel of src/device/ on the caller's stream.
 * This slice serves communicators whose ranks all live in one process on
 * one GPU; their device FIFOs are shared through a process-local registry.
 * Without the kernels in the build every function here says so. */
#ifndef WEFT_EXEC_CUDA_H
#define WEFT_EXEC_CUDA_H

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* Non-zero when WEFT_CUDA_ENGINE=1 and comm (after the peer exchange)
 * qualifies: every rank in this process, all on one CUDA device. */
int weft_cuda_engine_wanted(const struct ncclComm *comm);
/* Attaches comm to its communicator's device FIFOs (the first rank of the
 * process creates them); sets comm->cuda. */
ncclResult_t weft_cuda_engine_create(struct ncclComm *comm);
/* Detaches comm; the last rank frees the FIFOs. */
void weft_cuda_engine_destroy(struct ncclComm *comm);
/* Channels a plan on comm may use (the FIFOs hold twice that for trees). */
int weft_cuda_engine_max_channels(const struct ncclComm *comm);
/* Uploads plan and launches it on stream; returns without waiting. The
 * host plan stays the caller's. */
ncclResult_t weft_cuda_engine_launch(struct ncclComm *comm, const struct weft_coll *coll,
                                     const struct weft_plan *plan, void *stream);
/* ncclRemoteError when a kernel's wait timed out (it names the rank), else
 * ncclSuccess; reads the error word without waiting for running kernels. */
ncclResult_t weft_cuda_engine_check(struct ncclComm *comm);

#endif
