/* The host engine's planning: a group's operations, as api/ checked them,
 * tuned for the host worker and written as host tasks. The host and the
 * staged engine (which runs its tasks on the host engine) both plan here. */
#ifndef WEFT_EXEC_HOST_PLAN_H
#define WEFT_EXEC_HOST_PLAN_H

#include <stddef.h>

#include "exec/engine.h"
#include "exec/host.h"
#include "nccl.h"

struct ncclComm;

/* Tunes and plans one collective into *task_out (PreMulSum: the task
 * scales the input, then sums). */
ncclResult_t weft_host_plan_coll(struct ncclComm *comm, const struct weft_engine_op *op,
                                 struct weft_host_task *task_out);
/* Every send and receive among ops[0..n) (np2p of them, np2p > 0) as one
 * task whose lanes progress together, whatever order the ranks issued
 * them in. */
ncclResult_t weft_host_plan_p2p(struct ncclComm *comm, const struct weft_engine_op *ops, size_t n,
                                size_t np2p, struct weft_host_task *task_out);

/* Where a group's planned work goes: one collective's task (op is its
 * call), or every send and receive (np2p of ops[0..n)). */
struct weft_host_sink {
  ncclResult_t (*coll)(struct ncclComm *comm, struct weft_host_task *task,
                       const struct weft_engine_op *op);
  ncclResult_t (*p2p)(struct ncclComm *comm, const struct weft_engine_op *ops, size_t n,
                      size_t np2p);
};
/* The host and staged engines' enqueue: each collective of ops[0..n) in
 * call order planned as one task and handed to sink->coll, then the sends
 * and receives together to sink->p2p, so they progress together. */
ncclResult_t weft_host_plan_group(struct ncclComm *comm, const struct weft_engine_op *ops, size_t n,
                                  const struct weft_host_sink *sink);

/* Slots of the host engine's table the staged engine shares
 * (exec/engine_host.c): waiting for the worker, and the host model's
 * estimate. */
ncclResult_t weft__engine_host_wait(struct ncclComm *comm);
ncclResult_t weft__engine_host_estimate(struct ncclComm *comm, const struct weft_engine_op *op,
                                        float *us_out);

#endif
