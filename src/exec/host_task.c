/* One task on the worker, around its plan: the call check (host_check.c),
 * PreMulSum's scaling of the input, connecting the links the plan names
 * (made on first use, then kept), then the run (host_run.c). */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "core/connect.h"
#include "base/debug.h"
#include "base/param.h"
#include "exec/host_internal.h"
#include "exec/reduce.h"

/* ---- Links ------------------------------------------------------------------ */

static ncclResult_t need_add(struct weft_host_worker *w, int *n, int channel, int peer,
                             enum weft_conn_dir dir) {
  for (int i = 0; i < *n; i++)
    if (w->needs[i].channel == channel && w->needs[i].peer == peer && w->needs[i].dir == dir)
      return ncclSuccess;
  if (*n == w->needs_cap) {
    int cap = w->needs_cap ? w->needs_cap * 2 : 16;
    struct weft_conn_need *grown = realloc(w->needs, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      WARN("out of memory listing %d links to connect", cap);
      return ncclSystemError;
    }
    w->needs = grown;
    w->needs_cap = cap;
  }
  w->needs[(*n)++] = (struct weft_conn_need){channel, peer, dir};
  return ncclSuccess;
}

/* One end of a step: connected (and used by this lane only), or listed. */
static ncclResult_t link_visit(struct weft_host_run *r, int lane, int channel, int peer,
                               enum weft_conn_dir dir, int *nneeds) {
  struct ncclComm *comm = r->h->comm;
  if (peer < 0 || peer >= comm->nranks || peer == comm->rank) {
    WARN("rank %d: %s #%llu: a step %s rank %d (nranks %d)", comm->rank, r->what,
         (unsigned long long)r->seq, dir == WEFT_CONN_SEND ? "sends to" : "receives from", peer,
         comm->nranks);
    return ncclInternalError;
  }
  struct weft_conn *c = weft_comm_conn(comm, channel, peer, dir);
  if (c == NULL) return need_add(&r->h->w, nneeds, channel, peer, dir);
  if (c->user_run == r->h->w.run_seq && c->user_lane != lane) {
    WARN("rank %d: %s #%llu: lanes %d and %d both %s rank %d on channel %d", comm->rank, r->what,
         (unsigned long long)r->seq, c->user_lane, lane,
         dir == WEFT_CONN_SEND ? "send to" : "receive from", peer, channel);
    return ncclInternalError;
  }
  c->user_run = r->h->w.run_seq;
  c->user_lane = lane;
  return ncclSuccess;
}

static int buf_ok(const struct weft_host_run *r, unsigned idx) {
  return idx == WEFT_BUF_SCRATCH || idx < (unsigned)r->nbufs;
}

static ncclResult_t step_visit(struct weft_host_run *r, int lane, const struct weft_step *st,
                               int *nneeds) {
  int channel = r->plan->lanes[lane].channel;
  int bad_buf = ((st->flags & WEFT_STEP_SEND) && !buf_ok(r, st->send_buf)) ||
                ((st->flags & (WEFT_STEP_RECV | WEFT_STEP_LOCAL)) && !buf_ok(r, st->dst_buf)) ||
                ((st->flags & (WEFT_STEP_REDUCE | WEFT_STEP_LOCAL)) && !buf_ok(r, st->local_buf));
  if (bad_buf || channel < 0 || channel >= WEFT_MAX_CHANNELS) {
    WARN("rank %d: %s #%llu: lane %d (channel %d) names a buffer or channel it does not have",
         r->h->comm->rank, r->what, (unsigned long long)r->seq, lane, channel);
    return ncclInternalError;
  }
  if (st->flags & WEFT_STEP_SEND)
    WEFT_CHECK(link_visit(r, lane, channel, st->send_peer, WEFT_CONN_SEND, nneeds));
  if (st->flags & WEFT_STEP_RECV)
    WEFT_CHECK(link_visit(r, lane, channel, st->recv_peer, WEFT_CONN_RECV, nneeds));
  return ncclSuccess;
}

/* Checks every step and connects what is missing. Both ends of a link
 * appear in the two ranks' plans of the same task, so the ranks' lists of
 * missing links match. */
ncclResult_t weft__host_plan_connect(struct weft_host_run *r) {
  struct weft_host_worker *w = &r->h->w;
  for (int pass = 0; pass < 2; pass++) {
    int nneeds = 0;
    w->run_seq++;
    for (int i = 0; i < r->plan->nlanes; i++) {
      const struct weft_lane *lane = &r->plan->lanes[i];
      for (size_t s = 0; s < lane->nsteps; s++)
        WEFT_CHECK(step_visit(r, i, &lane->steps[s], &nneeds));
    }
    if (nneeds == 0) return ncclSuccess;
    WEFT_CHECK(weft_comm_connect(r->h->comm, w->needs, nneeds));
  }
  return ncclSuccess;
}

/* ---- PreMulSum --------------------------------------------------------------- */

/* Scales a private copy of the input, which the plan then reads. */
static ncclResult_t task_premul(struct weft_host_engine *h, struct weft_host_task *task) {
  struct weft_host_worker *w = &h->w;
  const struct weft_coll *c = &task->coll;
  size_t elems = c->count;
  if (c->func == WEFT_FUNC_REDUCESCATTER) elems *= (size_t)h->comm->nranks;
  size_t bytes = elems * weft_dtype_size(c->datatype);
  if (bytes == 0 || task->nbufs <= WEFT_BUF_IN || task->bufs[WEFT_BUF_IN] == NULL)
    return ncclSuccess;
  if (bytes > w->premul_cap) {
    void *p;
    if (posix_memalign(&p, 64, bytes) != 0) {
      WARN("rank %d: out of memory for a %zu-byte PreMulSum input", h->comm->rank, bytes);
      return ncclSystemError;
    }
    free(w->premul);
    w->premul = p;
    w->premul_cap = bytes;
  }
  weft_scale_host(w->premul, task->bufs[WEFT_BUF_IN], elems, c->datatype, task->premul_scalar);
  task->bufs[WEFT_BUF_IN] = w->premul;
  return ncclSuccess;
}

/* ---- A task ------------------------------------------------------------------ */

static ncclResult_t task_run_p2p(struct weft_host_engine *h, struct weft_host_task *task,
                                 ncclResult_t *usage_out) {
  struct weft_host_run r = {.h = h,
                            .plan = &task->plan,
                            .bufs = (char *const *)task->bufs,
                            .nbufs = task->nbufs,
                            .is_p2p = 1,
                            .p2p = task->p2p,
                            .rx_guard = task->rx_guard,
                            .datatype = ncclUint8,
                            .op = ncclSum,
                            .esize = 1,
                            .what = "send/recv",
                            .seq = ++h->w.p2p_seq};
  WEFT_CHECK(weft__host_plan_connect(&r));
  WEFT_CHECK(weft__host_plan_run(&r));
  *usage_out = r.usage;
  return ncclSuccess;
}

/* Whether a collective's receives reduce (in WEFT_HOST_PIECE_BYTES
 * pieces) on some rank. */
static int coll_reduces(int func) {
  return func == WEFT_FUNC_ALLREDUCE || func == WEFT_FUNC_REDUCE || func == WEFT_FUNC_REDUCESCATTER;
}

void weft__host_coll_run_init(struct weft_host_engine *h, const struct weft_host_task *task,
                              uint64_t seq, ncclRedOp_t op, struct weft_host_run *r) {
  *r = (struct weft_host_run){.h = h,
                              .plan = &task->plan,
                              .slot = r->slot,
                              .bufs = (char *const *)task->bufs,
                              .nbufs = task->nbufs,
                              .datatype = task->coll.datatype,
                              .op = op,
                              .esize = weft_dtype_size(task->coll.datatype),
                              .what = weft_func_name(task->coll.func),
                              .seq = seq,
                              .msg_max = coll_reduces(task->coll.func) ? WEFT_HOST_PIECE_BYTES
                                         : task->wide                  ? WEFT_CONN_WIDE_MSG
                                                                       : 0,
                              .reduces = coll_reduces(task->coll.func)};
  if (r->esize == 0) r->esize = 1;
  r->stream_copies =
      !r->reduces && task->coll.count * r->esize >= (uint64_t)WEFT_HOST_COPY_STREAM_MIN;
}

static ncclResult_t task_run_coll(struct weft_host_engine *h, struct weft_host_task *task,
                                  uint64_t seq, ncclResult_t *usage_out) {
  struct ncclComm *comm = h->comm;
  int direct = task->algo == WEFT_ALGO_DIRECT && comm->nranks > 1;
  if (!direct && comm->nranks > 1 && weft_param_int(WEFT_PARAM_CHECK_MISMATCH) != 0) {
    int agree = 0;
    WEFT_CHECK(weft__host_check_call(h, task, seq, &agree));
    if (!agree) {
      *usage_out = ncclInvalidUsage; /* no data moved; the links stay in step */
      return ncclSuccess;
    }
  }
  ncclRedOp_t op = task->coll.op;
  if (task->premul_sum) {
    WEFT_CHECK(task_premul(h, task));
    op = ncclSum;
  }
  struct weft_host_run r = {.slot = NULL};
  weft__host_coll_run_init(h, task, seq, op, &r);
  if (direct) return weft__host_direct_run(h, task, &r, usage_out);
  WEFT_CHECK(weft__host_plan_connect(&r));
  return weft__host_plan_run(&r);
}

ncclResult_t weft__host_task_run(struct weft_host_engine *h, struct weft_host_task *task,
                                 ncclResult_t *usage_out) {
  if (task->is_p2p) return task_run_p2p(h, task, usage_out);
  uint64_t seq = ++h->w.coll_seq;
  ncclResult_t res = task_run_coll(h, task, seq, usage_out);
  if (res != ncclSuccess) weft__host_coll_failed(h, task, seq, res);
  return res;
}

void weft__host_coll_failed(const struct weft_host_engine *h, const struct weft_host_task *task,
                            uint64_t seq, ncclResult_t res) {
  INFO(WEFT_COLL, "rank %d: %s #%llu (%zu x %s, %s) failed with error %d", h->comm->rank,
       weft_func_name(task->coll.func), (unsigned long long)seq, task->coll.count,
       weft_dtype_name(task->coll.datatype), weft_op_name(task->coll.op), (int)res);
}

void weft__host_worker_free(struct weft_host_worker *w) {
  for (int k = 0; k < WEFT_HOST_WINDOW_MAX; k++) {
    struct weft_host_slot *slot = &w->slots[k];
    for (int i = 0; i < slot->cap; i++) {
      free(slot->lanes[i].piece);
      free(slot->lanes[i].guard);
      free(slot->lanes[i].scratch);
    }
    free(slot->lanes);
    free(slot->pending);
  }
  free(w->win_pending);
  free(w->needs);
  free(w->premul);
  free(w->descs);
  weft_plan_free(&w->desc_plan);
  free(w->direct_src);
  free(w->direct_self);
  memset(w, 0, sizeof(*w));
}
