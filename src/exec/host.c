/* The host engine: the tasks queued on a communicator run in order, one at
 * a time, over host buffers (host_task.c runs one). enqueue puts a task on
 * a growable queue and returns; wait returns when every task queued before
 * it has finished. The first failure poisons the engine and the
 * communicator: what is queued after it is dropped, later enqueues fail at
 * once, and every wait returns it. Misuse the ranks detect together (a call
 * the ranks disagree on, a send/recv size mismatch) is not a failure: the
 * next wait returns ncclInvalidUsage and the communicator stays usable.
 *
 * Who runs a task: whichever thread takes the queue first, the
 * communicator's worker thread or a thread that waits on it (a waiter has
 * nothing better to do, and running the task itself saves two thread
 * wake-ups per call, most of a small call's time). The worker is what runs
 * tasks nobody waits on yet, as when one thread drives several
 * communicators in a group: enqueue wakes a sleeping worker lazily, when
 * the thread turns to another communicator or waits on another one, so a
 * single communicator's call makes no system call at all. Spinning waits
 * yield the CPU between polls so an oversubscribed host keeps moving.
 * Staged tasks (device buffers copied through host memory, see
 * exec/cuda_staged.c) have nobody waiting on them: enqueue wakes the worker
 * at once, and their hooks run around the plan on whichever thread runs it. */
#include "exec/host.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/cpus.h"
#include "core/comm.h"
#include "core/connect.h"
#include "base/debug.h"
#include "core/failure.h"
#include "base/param.h"
#include "exec/host_internal.h"
#include "transport/transport.h"

/* The engine this thread last queued to without waking its worker. */
static _Thread_local struct weft_host_engine *host_deferred;

void weft_host_task_free(struct weft_host_task *task) {
  weft_plan_free(&task->plan);
  free(task->bufs);
  free(task->p2p);
  free(task->rx_guard);
  task->bufs = NULL;
  task->p2p = NULL;
  task->rx_guard = NULL;
}

/* Runs a taken task (not under lock): its start hook, then its plan,
 * unless an earlier failure poisoned the engine (the peers have given up
 * on this sequence too, so it is dropped); then its done hook. */
static ncclResult_t host_task_take(struct weft_host_engine *h, struct weft_host_task *task,
                                   ncclResult_t poisoned, ncclResult_t *usage_out) {
  ncclResult_t res = poisoned;
  if (res == ncclSuccess && task->hooks.start != NULL) res = task->hooks.start(task->hooks.ctx);
  if (res == ncclSuccess) res = weft__host_task_run(h, task, usage_out);
  if (task->hooks.done != NULL) task->hooks.done(task->hooks.ctx, res, *usage_out);
  weft_host_task_free(task);
  return res;
}

/* Polls cond(h) up to WEFT_SPIN times; says whether it became true. */
static int host_spin(struct weft_host_engine *h, int (*cond)(struct weft_host_engine *, uint64_t),
                     uint64_t arg) {
  int64_t spin = weft_param_int(WEFT_PARAM_SPIN);
  for (int64_t i = 0; i < spin; i++) {
    if (cond(h, arg)) return 1;
    if (i >= h->spin_pure) sched_yield();
  }
  return cond(h, arg);
}

static int host_has_work(struct weft_host_engine *h, uint64_t unused) {
  (void)unused;
  return atomic_load_explicit(&h->queued, memory_order_acquire) !=
             atomic_load_explicit(&h->finished, memory_order_relaxed) &&
         !atomic_load_explicit(&h->running, memory_order_relaxed);
}

static int host_reached(struct weft_host_engine *h, uint64_t target) {
  return atomic_load_explicit(&h->finished, memory_order_acquire) >= target;
}

void weft__host_retire(struct weft_host_engine *h, ncclResult_t res, ncclResult_t poisoned,
                       ncclResult_t usage) {
  /* A failure is told to every rank; one they told us fails even a task
   * that finished here (the others have failed it: core/failure.h). */
  if (res != ncclSuccess && poisoned == ncclSuccess)
    res = weft_failure_report(h->comm, res);
  else if (res == ncclSuccess)
    res = weft_failure_poll(h->comm);
  pthread_mutex_lock(&h->lock);
  if (res != ncclSuccess && h->error == ncclSuccess) {
    h->error = res;
    weft_comm_set_error(h->comm, res);
  }
  if (usage != ncclSuccess && h->usage == ncclSuccess) h->usage = usage;
  atomic_store_explicit(&h->finished, atomic_load(&h->finished) + 1, memory_order_release);
  if (h->waiters > 0) pthread_cond_broadcast(&h->idle_cv);
  pthread_mutex_unlock(&h->lock);
}

/* Under lock: the queue's head, taken. */
static struct weft_host_task host_pop(struct weft_host_engine *h) {
  struct weft_host_task task = h->queue[h->head];
  h->head = (h->head + 1) % h->cap;
  h->count--;
  h->taken++;
  return task;
}

int weft__host_take_if(struct weft_host_engine *h,
                       int (*ok)(void *ctx, const struct weft_host_task *task), void *ctx,
                       struct weft_host_task *out) {
  if (atomic_load_explicit(&h->queued, memory_order_acquire) == h->taken) return 0;
  int took = 0;
  pthread_mutex_lock(&h->lock);
  if (h->count > 0 && h->error == ncclSuccess) took = ok(ctx, &h->queue[h->head]) ? 1 : -1;
  if (took > 0) *out = host_pop(h);
  pthread_mutex_unlock(&h->lock);
  return took;
}

/* Under lock, with `running` set by the caller: runs what is queued, a
 * task at a time or, where tasks may overlap, in a window (host_window.c). */
static void host_drain(struct weft_host_engine *h) {
  while (h->count > 0) {
    struct weft_host_task task = host_pop(h);
    ncclResult_t poisoned = h->error;
    pthread_mutex_unlock(&h->lock);
    weft_failure_note_clear();
    if (poisoned == ncclSuccess && weft__host_window_wants(h, &task)) {
      weft__host_window_run(h, &task);
    } else {
      ncclResult_t usage = ncclSuccess;
      ncclResult_t res = host_task_take(h, &task, poisoned, &usage);
      weft__host_retire(h, res, poisoned, usage);
    }
    pthread_mutex_lock(&h->lock);
  }
}

/* Under lock: waits until there is a task nobody runs, or stop. */
static void host_worker_idle(struct weft_host_engine *h) {
  while ((h->count == 0 || atomic_load(&h->running)) && !h->stop) {
    pthread_mutex_unlock(&h->lock);
    host_spin(h, host_has_work, 0);
    pthread_mutex_lock(&h->lock);
    if ((h->count != 0 && !atomic_load(&h->running)) || h->stop) break;
    h->worker_sleeping = 1;
    pthread_cond_wait(&h->work_cv, &h->lock);
    h->worker_sleeping = 0;
  }
}

static void *host_worker_main(void *arg) {
  struct weft_host_engine *h = arg;
  weft_log_set_rank(h->comm->rank);
  pthread_mutex_lock(&h->lock);
  for (;;) {
    host_worker_idle(h);
    if (atomic_load(&h->running)) {
      /* Only stop brought us here, while a waiter runs the queue (a call
       * the communicator is aborted under): sleep until it has finished its
       * task, which needs the lock this loop would otherwise keep. */
      h->waiters++;
      pthread_cond_wait(&h->idle_cv, &h->lock);
      h->waiters--;
      continue;
    }
    if (h->count == 0) break;               /* stop, and nothing left */
    atomic_store(&h->running, 1);
    host_drain(h);
    atomic_store(&h->running, 0);
  }
  pthread_cond_broadcast(&h->idle_cv);
  pthread_mutex_unlock(&h->lock);
  return NULL;
}

/* Wakes h's worker if it sleeps while a task waits for a runner. */
static void host_wake(struct weft_host_engine *h) {
  pthread_mutex_lock(&h->lock);
  if (h->worker_sleeping && h->count > 0) pthread_cond_signal(&h->work_cv);
  pthread_mutex_unlock(&h->lock);
}

/* A thread that moves on from the engine it queued to last makes sure a
 * runner will come for those tasks. */
static void host_flush_deferred(struct weft_host_engine *next) {
  struct weft_host_engine *d = host_deferred;
  host_deferred = NULL;
  if (d != NULL && d != next) host_wake(d);
}

/* Makes room for one more task, keeping the queue's order. Under lock. */
static ncclResult_t host_queue_grow(struct weft_host_engine *h) {
  size_t cap = h->cap ? h->cap * 2 : 16;
  struct weft_host_task *q = malloc(cap * sizeof(*q));
  if (q == NULL) {
    WARN("rank %d: out of memory queueing %zu host tasks", h->comm->rank, h->count + 1);
    return ncclSystemError;
  }
  for (size_t i = 0; i < h->count; i++) q[i] = h->queue[(h->head + i) % h->cap];
  free(h->queue);
  h->queue = q, h->cap = cap, h->head = 0;
  return ncclSuccess;
}

static ncclResult_t host_engine_of(struct ncclComm *comm, struct weft_host_engine **out) {
  if (comm->host == NULL) {
    WARN("rank %d: the communicator has no host engine (init did not finish)", comm->rank);
    return ncclInvalidUsage;
  }
  *out = comm->host;
  return ncclSuccess;
}

ncclResult_t weft_host_engine_enqueue(struct ncclComm *comm, struct weft_host_task *task) {
  struct weft_host_engine *h;
  ncclResult_t res = host_engine_of(comm, &h);
  if (res != ncclSuccess) {
    weft_host_task_free(task);
    return res;
  }
  int wake_now = task->hooks.done != NULL;
  host_flush_deferred(h);
  pthread_mutex_lock(&h->lock);
  res = h->error;
  if (res != ncclSuccess) {
    INFO(WEFT_COLL, "rank %d: communicator failed earlier (error %d); call not run", comm->rank,
         (int)res);
  } else if (h->stop) {
    WARN("rank %d: operation issued while the communicator is being destroyed", comm->rank);
    res = ncclInvalidUsage;
  } else if (h->count == h->cap && (res = host_queue_grow(h)) != ncclSuccess) {
    /* res holds the failure */
  } else {
    h->queue[(h->head + h->count) % h->cap] = *task;
    h->count++;
    atomic_store_explicit(&h->queued, atomic_load(&h->queued) + 1, memory_order_release);
    if (h->worker_sleeping && wake_now)
      pthread_cond_signal(&h->work_cv);
    else if (h->worker_sleeping)
      host_deferred = h;
    task = NULL;
  }
  pthread_mutex_unlock(&h->lock);
  if (task != NULL) weft_host_task_free(task);
  return res;
}

/* Bounded because every task is: it gives up at WEFT_TIMEOUT without
 * progress, or at once on abort. */
ncclResult_t weft_host_engine_wait(struct ncclComm *comm) {
  struct weft_host_engine *h;
  WEFT_CHECK(host_engine_of(comm, &h));
  host_flush_deferred(h);
  uint64_t target = atomic_load_explicit(&h->queued, memory_order_acquire);
  pthread_mutex_lock(&h->lock);
  h->inside++;
  while (!host_reached(h, target) && !h->stop) {
    if (!atomic_load(&h->running) && h->count > 0) {
      atomic_store(&h->running, 1);
      weft_log_set_rank(comm->rank);
      host_drain(h);
      atomic_store(&h->running, 0);
      if (h->worker_sleeping && h->count > 0) pthread_cond_signal(&h->work_cv);
      continue;
    }
    pthread_mutex_unlock(&h->lock);
    host_spin(h, host_reached, target);
    pthread_mutex_lock(&h->lock);
    if (host_reached(h, target) || h->stop || (!atomic_load(&h->running) && h->count > 0))
      continue;
    h->waiters++;
    pthread_cond_wait(&h->idle_cv, &h->lock);
    h->waiters--;
  }
  ncclResult_t res = h->error != ncclSuccess ? h->error : h->usage;
  if (res == ncclSuccess && !host_reached(h, target)) {
    WARN("rank %d: the communicator was destroyed while a call waited on it", comm->rank);
    res = ncclInvalidUsage;
  }
  h->usage = ncclSuccess;
  /* Before leaving: an abort from another thread frees comm once we are out. */
  res = weft_failure_result(comm, res);
  if (--h->inside == 0 && h->stop) pthread_cond_broadcast(&h->idle_cv);
  pthread_mutex_unlock(&h->lock);
  return res;
}

int weft_host_engine_busy(struct ncclComm *comm) {
  struct weft_host_engine *h = comm->host;
  return h != NULL && atomic_load_explicit(&h->queued, memory_order_acquire) !=
                          atomic_load_explicit(&h->finished, memory_order_acquire);
}

ncclResult_t weft_host_engine_create(struct ncclComm *comm) {
  struct weft_host_engine *h = calloc(1, sizeof(*h));
  if (h == NULL) {
    WARN("rank %d: out of memory for the host engine", comm->rank);
    return ncclSystemError;
  }
  h->comm = comm;
  int local = 0;
  for (int r = 0; r < comm->nranks; r++)
    local += comm->peers[r].host_hash == comm->peers[comm->rank].host_hash;
  h->spin_pure = weft_spin_pure(local);
  weft_host_copy_pool_init(&h->copy, weft_host_copy_threads(weft_cpus_usable(), local),
                           comm->rank);
  int all_colls;
  int members = weft_host_team_members(
      comm->host_channels, weft_param_int(WEFT_PARAM_HOST_LANE_THREADS), &all_colls);
  weft_host_team_init(&h->team, members, all_colls, comm->rank);
  atomic_init(&h->queued, 0);
  atomic_init(&h->finished, 0);
  atomic_init(&h->running, 0);
  pthread_mutex_init(&h->lock, NULL);
  pthread_cond_init(&h->work_cv, NULL);
  pthread_cond_init(&h->idle_cv, NULL);
  int err = pthread_create(&h->thread, NULL, host_worker_main, h);
  if (err != 0) {
    WARN("rank %d: cannot start the host engine thread: %s", comm->rank, strerror(err));
    pthread_cond_destroy(&h->idle_cv);
    pthread_cond_destroy(&h->work_cv);
    pthread_mutex_destroy(&h->lock);
    weft_host_copy_pool_stop(&h->copy);
    weft_host_team_stop(&h->team);
    free(h);
    return ncclSystemError;
  }
  pthread_setname_np(h->thread, "weft-host");
  comm->host = h;
  return ncclSuccess;
}

/* The worker finishes what is queued (each task ends by its deadline, or at
 * once when the communicator is aborted), then exits; a thread still inside
 * wait (running a task, or asleep) is let out before h is freed. */
void weft_host_engine_destroy(struct ncclComm *comm) {
  struct weft_host_engine *h = comm->host;
  if (h == NULL) return;
  if (host_deferred == h) host_deferred = NULL;
  pthread_mutex_lock(&h->lock);
  h->stop = 1;
  pthread_cond_signal(&h->work_cv);
  pthread_mutex_unlock(&h->lock);
  pthread_join(h->thread, NULL);
  pthread_mutex_lock(&h->lock);
  pthread_cond_broadcast(&h->idle_cv);
  while (h->inside > 0) pthread_cond_wait(&h->idle_cv, &h->lock);
  pthread_mutex_unlock(&h->lock);
  /* The worker drains the queue before it exits; anything left is dropped,
   * and its done hook still runs (a staged task then releases its stream). */
  for (size_t i = 0; i < h->count; i++) {
    struct weft_host_task *task = &h->queue[(h->head + i) % h->cap];
    ncclResult_t usage = ncclSuccess;
    host_task_take(h, task, h->error != ncclSuccess ? h->error : ncclInternalError, &usage);
  }
  /* A call that failed can leave a receive posted into the worker's pieces
   * (or a staged buffer, freed after this) that a link's helper thread is
   * still landing: the links close, and their threads stop, before those
   * buffers are freed. */
  weft_comm_disconnect(comm);
  weft__host_worker_free(&h->w);
  weft_host_copy_pool_stop(&h->copy); /* every run has ended: no copy is posted */
  weft_host_team_stop(&h->team);
  pthread_cond_destroy(&h->idle_cv);
  pthread_cond_destroy(&h->work_cv);
  pthread_mutex_destroy(&h->lock);
  free(h->queue);
  free(h);
  comm->host = NULL;
}
