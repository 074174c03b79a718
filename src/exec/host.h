/* The host engine: each host-rank communicator has a worker thread that runs
 * schedules on host buffers through the communicator's connections. */
#ifndef WEFT_EXEC_HOST_H
#define WEFT_EXEC_HOST_H

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* Starts comm's worker; comm->host is set on success. */
ncclResult_t weft_host_engine_create(struct ncclComm *comm);
/* Queues one collective (arguments already checked); returns at once. */
ncclResult_t weft_host_engine_enqueue(struct ncclComm *comm, const struct weft_coll *coll);
/* Waits until everything queued has finished; returns the first error. */
ncclResult_t weft_host_engine_wait(struct ncclComm *comm);
/* Stops the worker (after abort: without waiting for peers) and frees it. */
void weft_host_engine_destroy(struct ncclComm *comm);

#endif
