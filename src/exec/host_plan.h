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

/* Slots of the host engine's table the staged engine shares
 * (exec/engine_host.c): waiting for the worker, and the host model's
 * estimate. */
ncclResult_t weft__engine_host_wait(struct ncclComm *comm);
ncclResult_t weft__engine_host_estimate(struct ncclComm *comm, const struct weft_engine_op *op,
                                        float *us_out);

#endif
