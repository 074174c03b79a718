/* The host engine's planning (exec/host_plan.h): tuning for the host
 * worker, then the schedules of src/sched/ written as host tasks. */
#include "exec/host_plan.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "exec/reduce.h"
#include "sched/tuning.h"

/* The plan of a tuned collective: Direct, tree or ring. */
static ncclResult_t plan_tuned(struct ncclComm *comm, const struct weft_coll *coll,
                               const struct weft_tuning *tune, struct weft_host_task *task) {
  struct weft_sched_args args = {
      .func = coll->func,
      .rank = comm->rank,
      .nranks = comm->nranks,
      .root = coll->root,
      .count = coll->count,
      .elem_size = weft_dtype_size(coll->datatype),
      .nchannels = tune->nchannels,
      .chunk_bytes = tune->chunk_bytes,
      .ring = comm->ring_order, /* set at init from the topology */
  };
  if (tune->algo == WEFT_ALGO_DIRECT && comm->nranks > 1) {
    task->algo = WEFT_ALGO_DIRECT;
    return weft_direct_coll_plan(coll->func, comm->rank, comm->nranks, coll->root,
                                 weft_engine_op_bytes(coll), &task->plan);
  }
  if (tune->algo == WEFT_ALGO_TREE) return weft_tree_plan(&args, &task->plan);
  return weft_ring_plan(&args, &task->plan);
}

ncclResult_t weft_host_plan_coll(struct ncclComm *comm, const struct weft_engine_op *op,
                                 struct weft_host_task *task_out) {
  const struct weft_coll *coll = &op->coll;
  size_t elem = weft_dtype_size(coll->datatype);
  struct weft_tuning tune;
  WEFT_CHECK(weft_tune(comm, 0, coll->func, weft_engine_op_bytes(coll), elem, &tune));
  struct weft_host_task task;
  memset(&task, 0, sizeof(task));
  task.coll = *coll;
  task.nbufs = 2;
  task.bufs = malloc(2 * sizeof(*task.bufs));
  if (task.bufs == NULL) {
    WARN("rank %d: out of memory queuing %s", comm->rank, weft_func_name(coll->func));
    return ncclSystemError;
  }
  task.bufs[WEFT_BUF_IN] = (void *)(uintptr_t)coll->sendbuff;
  task.bufs[WEFT_BUF_OUT] = coll->recvbuff;
  ncclResult_t res = plan_tuned(comm, coll, &tune, &task);
  if (res != ncclSuccess) {
    free(task.bufs);
    WEFT_CHECK(res);
  }
  /* The wide link: the ring's one lane, on the channel whose link deals
   * a whole call between many sockets (core/comm.h). */
  task.wide = tune.wide;
  for (int i = 0; tune.wide && i < task.plan.nlanes; i++)
    task.plan.lanes[i].channel = WEFT_WIDE_CHANNEL;
  if (op->redop.premul_sum) {
    /* The engine scales the input by the scalar, then sums. */
    task.coll.op = ncclSum;
    task.premul_sum = 1;
    task.premul_scalar = op->redop.scalar_ptr ? op->redop.scalar_ptr : op->redop.value;
  }
  *task_out = task;
  return ncclSuccess;
}

ncclResult_t weft_host_plan_p2p(struct ncclComm *comm, const struct weft_engine_op *ops, size_t n,
                                size_t np2p, struct weft_host_task *task_out) {
  struct weft_host_task task;
  memset(&task, 0, sizeof(task));
  task.is_p2p = 1;
  task.coll.func = WEFT_FUNC_SEND;
  task.nbufs = (int)np2p;
  task.bufs = malloc(np2p * sizeof(*task.bufs));
  task.p2p = malloc(np2p * sizeof(*task.p2p));
  if (task.bufs == NULL || task.p2p == NULL || np2p > INT32_MAX) {
    WARN("rank %d: cannot queue %zu grouped sends/receives (out of memory)", comm->rank, np2p);
    free(task.bufs);
    free(task.p2p);
    return ncclSystemError;
  }
  size_t k = 0;
  for (size_t i = 0; i < n && k < np2p; i++) {
    const struct weft_coll *c = &ops[i].coll;
    if (!weft_engine_op_is_p2p(&ops[i])) continue;
    int send = c->func == WEFT_FUNC_SEND;
    task.bufs[k] = send ? (void *)(uintptr_t)c->sendbuff : c->recvbuff;
    task.p2p[k++] = (struct weft_p2p){c->root, send, weft_engine_op_bytes(c)};
  }
  ncclResult_t res = weft_p2p_plan(comm->rank, task.p2p, (int)np2p, &task.plan);
  if (res != ncclSuccess) {
    free(task.bufs);
    free(task.p2p);
    WEFT_CHECK(res);
  }
  *task_out = task;
  return ncclSuccess;
}

ncclResult_t weft_host_plan_group(struct ncclComm *comm, const struct weft_engine_op *ops, size_t n,
                                  const struct weft_host_sink *sink) {
  size_t np2p = 0;
  for (size_t i = 0; i < n; i++) {
    if (weft_engine_op_is_p2p(&ops[i])) {
      np2p++;
      continue;
    }
    struct weft_host_task task;
    WEFT_CHECK(weft_host_plan_coll(comm, &ops[i], &task));
    comm->op_seq++;
    WEFT_CHECK(sink->coll(comm, &task, &ops[i]));
  }
  if (np2p > 0) WEFT_CHECK(sink->p2p(comm, ops, n, np2p));
  return ncclSuccess;
}
