/* The host engine's table: a host-rank communicator's operations run on
 * its worker thread (exec/host.c) over the communicator's connections; a
 * call returns when its result is in the buffer (grouped calls: at the
 * end of the group). */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "exec/engine.h"
#include "exec/host.h"
#include "exec/host_plan.h"
#include "exec/reduce.h"
#include "sched/tuning.h"

/* Copies of send buffers that overlap a receive buffer of the group,
 * freed when the group's wait on their communicator has returned. */
struct send_copy {
  const struct ncclComm *comm;
  void *copy;
};
static _Thread_local struct send_copy *copies;
static _Thread_local size_t ncopies;

static int overlaps(const void *a, size_t alen, const void *b, size_t blen) {
  const char *x = a, *y = b;
  return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

/* Whether op k, a send, reads memory that a receive of the group writes. */
static int send_overlaps_recv(const struct weft_host_task *task, int k) {
  for (int j = 0; j < task->nbufs; j++)
    if (!task->p2p[j].is_send &&
        overlaps(task->bufs[k], task->p2p[k].bytes, task->bufs[j], task->p2p[j].bytes))
      return 1;
  return 0;
}

/* A send that reads a buffer a receive of the same group writes (in-place
 * AlltoAll, a send/recv pair on one buffer) would read data already
 * overwritten: such sends go from a copy taken now. */
static ncclResult_t copy_overlapping_sends(struct ncclComm *comm, struct weft_host_task *task) {
  for (int k = 0; k < task->nbufs; k++) {
    if (!task->p2p[k].is_send || !send_overlaps_recv(task, k)) continue;
    struct send_copy *grown = realloc(copies, (ncopies + 1) * sizeof(*grown));
    void *copy = grown ? malloc(task->p2p[k].bytes) : NULL;
    if (grown) copies = grown;
    if (copy == NULL) {
      WARN("rank %d: out of memory staging a %zu-byte in-place send", comm->rank,
           task->p2p[k].bytes);
      return ncclSystemError;
    }
    memcpy(copy, task->bufs[k], task->p2p[k].bytes);
    copies[ncopies++] = (struct send_copy){comm, copy};
    task->bufs[k] = copy;
  }
  return ncclSuccess;
}

static void free_copies(const struct ncclComm *comm) {
  size_t kept = 0;
  for (size_t i = 0; i < ncopies; i++) {
    if (copies[i].comm == comm)
      free(copies[i].copy);
    else
      copies[kept++] = copies[i];
  }
  ncopies = kept;
  if (ncopies == 0) {
    free(copies);
    copies = NULL;
  }
}

static ncclResult_t host_enqueue_p2p(struct ncclComm *comm, const struct weft_engine_op *ops,
                                     size_t n, size_t np2p) {
  struct weft_host_task task;
  WEFT_CHECK(weft_host_plan_p2p(comm, ops, n, np2p, &task));
  ncclResult_t res = copy_overlapping_sends(comm, &task);
  if (res != ncclSuccess) {
    weft_host_task_free(&task);
    return res;
  }
  return weft_host_engine_enqueue(comm, &task);
}

static ncclResult_t host_enqueue_coll(struct ncclComm *comm, struct weft_host_task *task,
                                      const struct weft_engine_op *op) {
  (void)op;
  return weft_host_engine_enqueue(comm, task);
}

static ncclResult_t host_enqueue(struct ncclComm *comm, const struct weft_engine_op *ops,
                                 size_t n) {
  static const struct weft_host_sink sink = {host_enqueue_coll, host_enqueue_p2p};
  return weft_host_plan_group(comm, ops, n, &sink);
}

static ncclResult_t host_group_wait(struct ncclComm *comm) {
  ncclResult_t res = weft_host_engine_wait(comm);
  free_copies(comm);
  return res;
}

ncclResult_t weft__engine_host_wait(struct ncclComm *comm) {
  if (comm->host == NULL) return ncclSuccess;
  return weft_host_engine_wait(comm);
}

ncclResult_t weft__engine_host_estimate(struct ncclComm *comm, const struct weft_engine_op *op,
                                        float *us_out) {
  const struct weft_coll *c = &op->coll;
  struct weft_tuning tune;
  WEFT_CHECK(
      weft_tune(comm, 0, c->func, weft_engine_op_bytes(c), weft_dtype_size(c->datatype), &tune));
  *us_out = tune.estimated_us;
  return ncclSuccess;
}

static void host_destroy(struct ncclComm *comm, int abort) {
  (void)abort; /* the worker's waits read comm->abort_flag */
  weft_host_engine_destroy(comm);
}

const struct weft_engine_ops weft_engine_host_ops = {
    .size = sizeof(struct weft_engine_ops),
    .name = "host",
    .device_buffers = 0,
    .create = weft_host_engine_create,
    .enqueue = host_enqueue,
    .group_wait = host_group_wait,
    .wait = weft__engine_host_wait,
    .estimate = weft__engine_host_estimate,
    .busy = weft_host_engine_busy,
    .check = weft__engine_no_wait,
    .fail = weft__engine_no_stop,
    .abort = weft__engine_no_stop,
    .destroy = host_destroy,
    .window_register = weft__engine_no_window,
    .window_release = weft__engine_no_window_release,
};
