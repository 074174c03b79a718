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

/* Receive op j other than `except` whose buffer send op k overlaps, or -1. */
static int send_overlaps_recv(const struct weft_host_task *task, int k, int except) {
  for (int j = 0; j < task->nbufs; j++)
    if (j != except && !task->p2p[j].is_send &&
        overlaps(task->bufs[k], task->p2p[k].bytes, task->bufs[j], task->p2p[j].bytes))
      return j;
  return -1;
}

/* partner[k] of each send op k: the receive its step pairs it with (the
 * plan's k-th send to a peer and k-th receive from it; to self, the LOCAL
 * copy's destination), or -1; local[k]: that step is a LOCAL copy. */
static void pair_sends(const struct weft_host_task *task, int *partner, unsigned char *local) {
  for (int k = 0; k < task->nbufs; k++) partner[k] = -1;
  for (int i = 0; i < task->plan.nlanes; i++) {
    const struct weft_lane *lane = &task->plan.lanes[i];
    for (size_t s = 0; s < lane->nsteps; s++) {
      const struct weft_step *st = &lane->steps[s];
      if ((st->flags & WEFT_STEP_LOCAL) && st->local_off == 0 && st->dst_off == 0) {
        partner[st->local_buf] = st->dst_buf;
        local[st->local_buf] = 1;
      } else if ((st->flags & WEFT_STEP_SEND) && (st->flags & WEFT_STEP_RECV) &&
                 st->send_off == 0 && st->dst_off == 0) {
        partner[st->send_buf] = st->dst_buf;
      }
    }
  }
}

static ncclResult_t stage_send(struct ncclComm *comm, struct weft_host_task *task, int k) {
  struct send_copy *grown = realloc(copies, (ncopies + 1) * sizeof(*grown));
  void *copy = grown ? malloc(task->p2p[k].bytes) : NULL;
  if (grown) copies = grown;
  if (copy == NULL) {
    WARN("rank %d: out of memory staging a %zu-byte in-place send", comm->rank, task->p2p[k].bytes);
    return ncclSystemError;
  }
  memcpy(copy, task->bufs[k], task->p2p[k].bytes);
  copies[ncopies++] = (struct send_copy){comm, copy};
  task->bufs[k] = copy;
  return ncclSuccess;
}

/* A send that reads a buffer a receive of the same group writes would read
 * data already overwritten. Where the send and that receive are one
 * step's pair and start at one address (in-place AlltoAll, SendRecv on one
 * buffer), and the send overlaps no other receive: to self, the LOCAL copy
 * has nothing to move; to a peer, the receive is guarded
 * (task->rx_guard): it lands through a bounce buffer, a piece at a time,
 * each piece once the send has read past it (exec/host_run.c). Either way
 * nothing is copied up front. Any other such send goes from a copy taken
 * now. */
static ncclResult_t protect_overlapping_sends(struct ncclComm *comm, struct weft_host_task *task) {
  int *partner = NULL;
  unsigned char *local = NULL;
  ncclResult_t res = ncclSuccess;
  for (int k = 0; k < task->nbufs && res == ncclSuccess; k++) {
    if (!task->p2p[k].is_send || send_overlaps_recv(task, k, -1) < 0) continue;
    if (partner == NULL) {
      partner = malloc((size_t)task->nbufs * sizeof(*partner));
      local = calloc((size_t)task->nbufs, 1);
      task->rx_guard = calloc((size_t)task->nbufs, 1);
      if (partner == NULL || local == NULL || task->rx_guard == NULL) {
        WARN("rank %d: out of memory planning %d in-place sends/receives", comm->rank, task->nbufs);
        res = ncclSystemError;
        break;
      }
      pair_sends(task, partner, local);
    }
    int j = partner[k];
    if (j < 0 || task->bufs[j] != task->bufs[k] || send_overlaps_recv(task, k, j) >= 0)
      res = stage_send(comm, task, k);
    else if (!local[k])
      task->rx_guard[j] = 1;
  }
  free(partner);
  free(local);
  return res;
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
  ncclResult_t res = protect_overlapping_sends(comm, &task);
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
