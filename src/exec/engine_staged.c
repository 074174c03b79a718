/* The staged engine's table: device buffers of a communicator whose ranks
 * cannot run kernels against each other, copied through pinned host memory
 * on the callers' streams and run by the host engine
 * (exec/cuda_staged.h). Calls return once queued on their streams. */
#include <stdlib.h>

#include "base/check.h"
#include "core/comm.h"
#include "exec/cuda_staged.h"
#include "exec/engine.h"
#include "exec/host.h"
#include "exec/host_plan.h"

static ncclResult_t staged_create(struct ncclComm *comm) {
  WEFT_CHECK(weft_host_engine_create(comm));
  return weft_cuda_staged_create(comm);
}

/* The group's sends and receives as one task, with each op's stream (in
 * op order): the copies through host memory run on them. Staged ops each
 * get their own staging copy, so an overlapping send needs none. */
static ncclResult_t staged_enqueue_p2p(struct ncclComm *comm, const struct weft_engine_op *ops,
                                       size_t n, size_t np2p) {
  void **streams = malloc(np2p * sizeof(*streams));
  if (streams == NULL) {
    WARN("rank %d: out of memory queuing %zu grouped sends/receives", comm->rank, np2p);
    return ncclSystemError;
  }
  struct weft_host_task task;
  ncclResult_t res = weft_host_plan_p2p(comm, ops, n, np2p, &task);
  if (res == ncclSuccess) {
    size_t k = 0;
    for (size_t i = 0; i < n && k < np2p; i++)
      if (weft_engine_op_is_p2p(&ops[i])) streams[k++] = ops[i].stream;
    res = weft_cuda_staged_p2p(comm, &task, streams);
  }
  free(streams);
  return res;
}

static ncclResult_t staged_enqueue_coll(struct ncclComm *comm, struct weft_host_task *task,
                                        const struct weft_engine_op *op) {
  return weft_cuda_staged_coll(comm, task, op->redop.scalar_ptr != NULL, op->stream);
}

static ncclResult_t staged_enqueue(struct ncclComm *comm, const struct weft_engine_op *ops,
                                   size_t n) {
  static const struct weft_host_sink sink = {staged_enqueue_coll, staged_enqueue_p2p};
  return weft_host_plan_group(comm, ops, n, &sink);
}

static void staged_destroy(struct ncclComm *comm, int abort) {
  weft_host_engine_destroy(comm);
  weft_cuda_staged_destroy(comm, abort); /* after the host engine: its tasks are over */
}

const struct weft_engine_ops weft_engine_staged_ops = {
    .size = sizeof(struct weft_engine_ops),
    .name = "staged",
    .device_buffers = 1,
    .create = staged_create,
    .enqueue = staged_enqueue,
    .group_wait = weft__engine_no_wait, /* stream semantics: the streams wait */
    .wait = weft__engine_host_wait,
    .estimate = weft__engine_host_estimate,
    .busy = weft_host_engine_busy,
    .check = weft__engine_no_wait,
    .fail = weft__engine_no_stop, /* the host engine reads comm->abort_flag */
    .abort = weft_cuda_staged_abort,
    .destroy = staged_destroy,
    .window_register = weft__engine_no_window,
    .window_release = weft__engine_no_window_release,
};
