/* A window of collectives in flight together (issue 15 §5). Run one at a
 * time, a call ends with its slowest channel, and the channels that
 * finished first idle until it does; over sockets, where a channel's speed
 * is its helper threads' share of the cores, that idle time is what keeps a
 * broadcast below free-running TCP streams (docs/PERFORMANCE.md, "Eighth
 * pass"). In a window, channel c of the next queued collective starts as
 * soon as every earlier task of the window is done with channel c. Each
 * channel runs its tasks in queue order, so the bytes on every link keep
 * the order both ends expect, whatever the other rank's window holds; a
 * task still ends only when all its channels have, and tasks end in queue
 * order.
 *
 * Who may join: a collective (not send/recv, not Direct, no PreMulSum, no
 * hooks, so no staged task) on two channels or more, run by this thread
 * alone (no lane team), whose links and the call check's are connected
 * already (connecting waits for the peer, which may still be busy with an
 * earlier task's channels), and whose buffers no earlier task of the
 * window writes, nor reads where this one writes; or the same call again
 * (function, buffers, count, type, op, root and plan), whose lanes touch
 * the parts the earlier call's lanes of the same channel touched (the lanes
 * of different channels touch disjoint parts, as the lane team relies on).
 * The call check (host_check.c) is a task's first phase, on channel 0, one
 * task at a time (the records live in the worker); its data moves only
 * once the ranks agree. A failure fails every task in the window.
 * WEFT_HOST_WINDOW tasks at most (1: one at a time). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/dtype.h"
#include "base/param.h"
#include "core/comm.h"
#include "core/connect.h"
#include "exec/host_internal.h"

enum win_phase { WIN_CHECK, WIN_DATA, WIN_DONE };

struct win_entry {
  struct weft_host_task task;
  struct weft_host_run r;
  uint64_t seq;
  enum win_phase phase;
  ncclResult_t usage;
};

struct win {
  struct weft_host_engine *h;
  struct win_entry e[WEFT_HOST_WINDOW_MAX]; /* circular: n entries from head, oldest first */
  int head, n, max;
  int checking; /* an entry is in its call check */
  int blocked;  /* the queue's head was refused: ask again once the window changes */
};

struct win_range {
  uintptr_t lo, hi;
};

/* ---- Who may join ------------------------------------------------------------ */

static int func_windowed(enum weft_func f) {
  return f == WEFT_FUNC_ALLREDUCE || f == WEFT_FUNC_ALLGATHER || f == WEFT_FUNC_REDUCESCATTER ||
         f == WEFT_FUNC_BROADCAST || f == WEFT_FUNC_REDUCE;
}

/* Bytes of a task's input and output on this rank. */
static void task_ranges(int nranks, const struct weft_host_task *t, struct win_range *in,
                        struct win_range *out) {
  size_t bytes = t->coll.count * weft_dtype_size(t->coll.datatype), n = (size_t)nranks;
  size_t in_bytes = t->coll.func == WEFT_FUNC_REDUCESCATTER ? n * bytes : bytes;
  size_t out_bytes = t->coll.func == WEFT_FUNC_ALLGATHER ? n * bytes : bytes;
  uintptr_t i = (uintptr_t)t->bufs[WEFT_BUF_IN], o = (uintptr_t)t->bufs[WEFT_BUF_OUT];
  *in = (struct win_range){i, i == 0 ? 0 : i + in_bytes};
  *out = (struct win_range){o, o == 0 ? 0 : o + out_bytes};
}

static int overlaps(struct win_range a, struct win_range b) {
  return a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi;
}

static int same_plan(const struct weft_plan *a, const struct weft_plan *b) {
  if (a->nlanes != b->nlanes) return 0;
  for (int i = 0; i < a->nlanes; i++)
    if (a->lanes[i].channel != b->lanes[i].channel || a->lanes[i].nsteps != b->lanes[i].nsteps)
      return 0;
  return 1;
}

static int same_call(const struct weft_host_task *a, const struct weft_host_task *b) {
  const struct weft_coll *x = &a->coll, *y = &b->coll;
  return x->func == y->func && x->count == y->count && x->datatype == y->datatype &&
         x->op == y->op && x->root == y->root && a->bufs[WEFT_BUF_IN] == b->bufs[WEFT_BUF_IN] &&
         a->bufs[WEFT_BUF_OUT] == b->bufs[WEFT_BUF_OUT] && a->algo == b->algo &&
         same_plan(&a->plan, &b->plan);
}

int weft__host_window_clear(int nranks, const struct weft_host_task *t,
                            const struct weft_host_task *e) {
  if (same_call(t, e)) return 1;
  struct win_range tin, tout, ein, eout;
  task_ranges(nranks, t, &tin, &tout);
  task_ranges(nranks, e, &ein, &eout);
  return !overlaps(tout, ein) && !overlaps(tout, eout) && !overlaps(tin, eout);
}

/* Whether every link of the plan is connected. */
static int plan_connected(const struct ncclComm *comm, const struct weft_plan *plan) {
  for (int i = 0; i < plan->nlanes; i++) {
    const struct weft_lane *lane = &plan->lanes[i];
    for (size_t s = 0; s < lane->nsteps; s++) {
      const struct weft_step *st = &lane->steps[s];
      if ((st->flags & WEFT_STEP_SEND) &&
          weft_comm_conn(comm, lane->channel, st->send_peer, WEFT_CONN_SEND) == NULL)
        return 0;
      if ((st->flags & WEFT_STEP_RECV) &&
          weft_comm_conn(comm, lane->channel, st->recv_peer, WEFT_CONN_RECV) == NULL)
        return 0;
    }
  }
  return 1;
}

/* Whether the task may run in a window at all (alone in it). */
static int windowable(const struct weft_host_engine *h, const struct weft_host_task *t) {
  const struct ncclComm *comm = h->comm;
  if (t->is_p2p || t->premul_sum || t->hooks.start != NULL || t->hooks.done != NULL ||
      comm->nranks < 2 || t->algo == WEFT_ALGO_DIRECT || !func_windowed(t->coll.func) ||
      t->nbufs < 2)
    return 0;
  uint32_t channels = 0;
  for (int i = 0; i < t->plan.nlanes; i++) {
    int c = t->plan.lanes[i].channel;
    if (c < 0 || c >= WEFT_MAX_CHANNELS) return 0;
    channels |= UINT32_C(1) << c;
  }
  if ((channels & (channels - 1)) == 0) return 0; /* one channel: nothing to overlap */
  struct weft_host_run r = {.slot = NULL};
  weft__host_coll_run_init((struct weft_host_engine *)h, t, 0, t->coll.op, &r);
  if (weft__host_run_members(&r) > 1) return 0;
  if (!plan_connected(comm, &t->plan)) return 0;
  if (weft_param_int(WEFT_PARAM_CHECK_MISMATCH) != 0)
    return h->w.descs != NULL && plan_connected(comm, &h->w.desc_plan);
  return 1;
}

int weft__host_window_wants(const struct weft_host_engine *h, const struct weft_host_task *t) {
  return weft_param_int(WEFT_PARAM_HOST_WINDOW) > 1 && windowable(h, t);
}

static struct win_entry *entry(struct win *w, int k) {
  return &w->e[(w->head + k) % WEFT_HOST_WINDOW_MAX];
}

/* Under the engine's lock (weft__host_take_if): may the queue's head join? */
static int may_join(void *ctx, const struct weft_host_task *t) {
  struct win *w = ctx;
  if (!windowable(w->h, t)) return 0;
  for (int k = 0; k < w->n; k++)
    if (!weft__host_window_clear(w->h->comm->nranks, t, &entry(w, k)->task)) return 0;
  return 1;
}

/* ---- Phases ---------------------------------------------------------------- */

static ncclResult_t entry_data(struct weft_host_engine *h, struct win_entry *x) {
  x->phase = WIN_DATA;
  weft__host_coll_run_init(h, &x->task, x->seq, x->task.coll.op, &x->r);
  return weft__host_run_prepare(&x->r);
}

/* A task joins: its call check first (when on and none is running), else
 * its data. */
static ncclResult_t entry_start(struct win *w, struct win_entry *x) {
  struct weft_host_engine *h = w->h;
  x->r = (struct weft_host_run){.slot = &h->w.slots[x - w->e]};
  x->seq = ++h->w.coll_seq;
  x->usage = ncclSuccess;
  if (weft_param_int(WEFT_PARAM_CHECK_MISMATCH) == 0) return entry_data(h, x);
  x->phase = WIN_CHECK;
  w->checking = 1;
  WEFT_CHECK(weft__host_check_begin(h, &x->task, x->seq, &x->r));
  return weft__host_run_prepare(&x->r);
}

/* Every lane of x's run has finished: the next phase. */
static ncclResult_t entry_next(struct win *w, struct win_entry *x) {
  if (x->phase == WIN_DATA) {
    x->phase = WIN_DONE;
    return ncclSuccess;
  }
  w->checking = 0;
  w->blocked = 0;
  int agree = 0;
  WEFT_CHECK(weft__host_check_verdict(w->h, x->seq, &agree));
  if (agree) return entry_data(w->h, x);
  x->usage = ncclInvalidUsage; /* no data moved; the links stay in step */
  x->phase = WIN_DONE;
  return ncclSuccess;
}

/* ---- The loop -------------------------------------------------------------- */

/* Room to list every lane's two transfers. */
static ncclResult_t win_room(struct win *w) {
  struct weft_host_worker *wk = &w->h->w;
  size_t need = 0;
  for (int k = 0; k < w->n; k++) need += 2 * (size_t)entry(w, k)->r.plan->nlanes;
  if (need <= wk->win_pending_cap) return ncclSuccess;
  struct weft_xfer **grown = realloc(wk->win_pending, need * sizeof(*grown));
  if (grown == NULL) {
    WARN("rank %d: out of memory for a window of %d collectives", w->h->comm->rank, w->n);
    return ncclSystemError;
  }
  wk->win_pending = grown;
  wk->win_pending_cap = need;
  return ncclSuccess;
}

/* One pass over the window, oldest first: each entry's lanes move on the
 * channels no earlier entry still uses. Lists the stalled transfers. */
static ncclResult_t win_pass(struct win *w, int *moved, int *np, int *pooled) {
  struct weft_xfer **pending = w->h->w.win_pending;
  uint32_t busy = 0;
  for (int k = 0; k < w->n; k++) {
    struct win_entry *x = entry(w, k);
    if (x->phase == WIN_DONE) continue;
    uint32_t mine = 0;
    int active = 0;
    for (int i = 0; i < x->r.plan->nlanes; i++) {
      struct weft_host_lane *l = &x->r.lanes[i];
      if (l->step >= l->lane->nsteps) continue;
      uint32_t bit = UINT32_C(1) << l->lane->channel;
      active = 1;
      mine |= bit;
      if (busy & bit) continue;
      int done = 0;
      WEFT_CHECK(weft__host_lane_progress(&x->r, l, moved, &done));
      if (done) continue;
      if (weft_xfer_pending(&l->tx)) pending[(*np)++] = &l->tx;
      if (weft_xfer_pending(&l->rx)) pending[(*np)++] = &l->rx;
      *pooled |= l->cp_pooled;
    }
    busy |= mine;
    if (active) continue; /* (its lanes that finish in this pass count next time) */
    WEFT_CHECK(entry_next(w, x));
    *moved = 1;
  }
  return ncclSuccess;
}

/* Ends the finished entries at the front, in order. */
static void win_retire(struct win *w) {
  while (w->n > 0 && entry(w, 0)->phase == WIN_DONE) {
    struct win_entry *x = entry(w, 0);
    weft__host_retire(w->h, ncclSuccess, ncclSuccess, x->usage);
    weft_host_task_free(&x->task);
    w->head = (w->head + 1) % WEFT_HOST_WINDOW_MAX;
    w->n--;
    w->blocked = 0;
  }
}

/* Takes the queue's head into the window when it may join. */
static ncclResult_t win_fill(struct win *w, int *moved) {
  while (w->n < w->max && !w->blocked && !w->checking) {
    struct win_entry *x = entry(w, w->n);
    int took = weft__host_take_if(w->h, may_join, w, &x->task);
    if (took <= 0) {
      w->blocked = took < 0; /* else nothing is queued yet: ask on the next pass */
      return ncclSuccess;
    }
    w->n++;
    *moved = 1;
    WEFT_CHECK(entry_start(w, x));
    INFO(WEFT_COLL,
         "rank %d: %s #%llu joins a window of %d calls in flight: each channel starts "
         "once the calls before it are done with that channel",
         w->h->comm->rank, weft_func_name(x->task.coll.func), (unsigned long long)x->seq, w->n);
  }
  return ncclSuccess;
}

/* A failure: every task of the window ends with it, the first reporting
 * it to the peers; no copy-pool thread writes for them afterwards. */
static void win_fail(struct win *w, ncclResult_t res) {
  for (int k = 0; k < w->n; k++) weft__host_run_copy_cancel(&entry(w, k)->r);
  for (int k = 0; k < w->n; k++) {
    struct win_entry *x = entry(w, k);
    weft__host_coll_failed(w->h, &x->task, x->seq, res);
    weft__host_retire(w->h, res, k == 0 ? ncclSuccess : res, ncclSuccess);
    weft_host_task_free(&x->task);
  }
  w->n = 0;
}

void weft__host_window_run(struct weft_host_engine *h, struct weft_host_task *first) {
  struct win w = {.h = h, .max = (int)weft_param_int(WEFT_PARAM_HOST_WINDOW)};
  if (w.max > WEFT_HOST_WINDOW_MAX) w.max = WEFT_HOST_WINDOW_MAX;
  w.e[0].task = *first;
  w.n = 1;
  ncclResult_t res = entry_start(&w, &w.e[0]);
  struct weft_progress_wait wait;
  weft_progress_wait_init(&wait, 0, h->spin_pure);
  while (res == ncclSuccess && w.n > 0) {
    int moved = 0, np = 0, pooled = 0;
    if ((res = win_room(&w)) != ncclSuccess) break;
    res = win_pass(&w, &moved, &np, &pooled);
    if (res != ncclSuccess) break;
    win_retire(&w);
    if (w.n == 0) break;
    if ((res = win_fill(&w, &moved)) != ncclSuccess) break;
    if (moved) {
      weft_progress_wait_moved(&wait);
      continue;
    }
    if (pooled) {
      if (!weft_host_copy_help(&h->copy)) weft_host_copy_wait(&h->copy);
      weft_progress_wait_moved(&wait);
      continue;
    }
    res = weft_conn_progress_wait(&wait, h->w.win_pending, np, &h->comm->abort_flag,
                                  weft__host_run_describe, &entry(&w, 0)->r);
  }
  if (res != ncclSuccess) win_fail(&w, res);
}
