/* The host engine: each host-rank communicator has a worker thread that runs
 * plans on host buffers through the communicator's connections. */
#ifndef WEFT_EXEC_HOST_H
#define WEFT_EXEC_HOST_H

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* What a staged task (exec/cuda_staged.c) adds around its run. `start`
 * runs on the thread that takes the task, before the plan (it waits for the
 * input to reach host memory); its failure is the task's. `done` runs once
 * the task has finished, failed or been dropped, with its result and any
 * misuse, and is the last use of ctx. Nobody waits on such a task, so
 * enqueue wakes the worker at once. */
struct weft_host_hooks {
  ncclResult_t (*start)(void *ctx);
  void (*done)(void *ctx, ncclResult_t res, ncclResult_t usage);
  void *ctx;
};

/* One unit of work: a collective, or a group's send/recv on one comm. */
struct weft_host_task {
  int is_p2p;
  struct weft_coll coll; /* the collective as called (for p2p: unused) */
  struct weft_plan plan; /* the engine owns it after enqueue */
  enum weft_algo algo;   /* Direct plans end in the engine's rank-order reduction */
  int wide;              /* its one lane is on the wide link, the whole call in one step */
  int nbufs;
  void **bufs;           /* bufs[i] is buffer index i of the plan; engine-owned */
  struct weft_p2p *p2p;  /* the p2p ops (nbufs of them), for count checks; engine-owned */
  /* p2p: rx_guard[j] set: receive op j shares its start with the send its
   * step pairs it with, and lands behind that send (exec/host_run.c);
   * NULL: none does. Engine-owned. */
  unsigned char *rx_guard;
  int premul_sum;            /* coll.op is a PreMulSum: scale the input, then sum */
  const void *premul_scalar; /* host pointer to a scalar of the datatype, read when the task starts */
  struct weft_host_hooks hooks; /* all NULL: a plain task */
};

/* Starts comm's worker; comm->host is set on success. */
ncclResult_t weft_host_engine_create(struct ncclComm *comm);
/* Queues one task (arguments already checked) and takes ownership of its
 * plan, bufs, p2p and rx_guard arrays, also on failure; returns at once. */
ncclResult_t weft_host_engine_enqueue(struct ncclComm *comm, struct weft_host_task *task);
/* Frees what a task owns (plan, bufs, p2p, rx_guard), for a task never enqueued. */
void weft_host_task_free(struct weft_host_task *task);
/* Waits until everything queued has finished; returns the first error: a
 * failure that broke the communicator (sticky), else the first misuse
 * (ranks that disagreed on a call, mismatched send/recv sizes) since the
 * last wait, which leaves the communicator usable. */
ncclResult_t weft_host_engine_wait(struct ncclComm *comm);
/* Whether work queued on comm's host engine has not finished (0 without
 * a host engine). */
int weft_host_engine_busy(struct ncclComm *comm);
/* Stops the worker (after abort: without waiting for peers) and frees it. */
void weft_host_engine_destroy(struct ncclComm *comm);

#endif
