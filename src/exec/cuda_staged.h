/* The staged path: collectives on device buffers of a communicator whose
 * ranks cannot run kernels against each other (exec/cuda_path.c says why),
 * run by the host engine over pinned host copies, with NCCL's stream
 * semantics: a call queues its work on the caller's stream and returns.
 *
 * On the stream, per task: the input is copied to pinned host memory and a
 * host-mapped word says it landed; the host engine's worker, which polls
 * that word, runs the task and then writes the communicator's done word;
 * the stream waits for that word (cuStreamWaitValue32, no kernel spins),
 * copies the result back and marks the staging memory free again. */
#ifndef WEFT_EXEC_CUDA_STAGED_H
#define WEFT_EXEC_CUDA_STAGED_H

#include "exec/host.h"
#include "nccl.h"

struct ncclComm;

/* Makes comm's staged state (comm->staged_state): the driver entry points
 * and the done word, checked once on a private stream. Not collective. */
ncclResult_t weft_cuda_staged_create(struct ncclComm *comm);
/* After the host engine is gone (every task finished or dropped): releases
 * any stream still waiting, lets the streams finish their copies (bounded;
 * shorter after an abort) and frees the staging memory. */
void weft_cuda_staged_destroy(struct ncclComm *comm, int abort);
/* ncclCommAbort's first step: releases every stream wait of comm now, so
 * nothing the teardown waits on (a caller still inside, an allocation
 * that synchronizes the device) can sit behind a task that will never
 * run. Tasks that end later cannot hold a stream back again. */
void weft_cuda_staged_abort(struct ncclComm *comm);
/* Queues a collective on stream: task is built as for host buffers (plan,
 * bufs naming the caller's device buffers, PreMulSum scalar); it is
 * rewritten to run on staging memory. scalar_on_device: premul_scalar is
 * device memory (ncclScalarDevice), copied on the stream with the input;
 * otherwise it is copied now. Takes ownership of the task, also on
 * failure. Returns without waiting. */
ncclResult_t weft_cuda_staged_coll(struct ncclComm *comm, struct weft_host_task *task,
                                   int scalar_on_device, void *stream);
/* Queues a group's sends and receives on comm as one task: streams[k] is
 * the stream of op k (bufs[k], p2p[k]). The group's streams are joined as
 * NCCL joins them. Takes ownership of the task, also on failure. */
ncclResult_t weft_cuda_staged_p2p(struct ncclComm *comm, struct weft_host_task *task,
                                  void *const *streams);

#endif
