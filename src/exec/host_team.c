/* The host engine's lane team (see host_team.h). One lock guards the job:
 * a job is posted under it (its number, function and how many threads
 * take part) and each thread counts itself out under it, the last waking
 * the caller. The job's own work runs without the lock. */
#include "exec/host_team.h"

#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/debug.h"

/* Polls of the job's end before the caller sleeps on it: the members of
 * one plan usually finish within microseconds of each other. */
#define TEAM_DONE_SPIN 256

/* The default: on the 16-core machine, 2 ranks over 8 sockets, two
 * threads moved AllReduce, ReduceScatter and Reduce from 8 MiB 3-182%
 * faster than one, while AllGather lost 2-24%, the broadcast gained
 * nothing, and 4 or 8 threads were slower than 2 (docs/PERFORMANCE.md,
 * "The lane team"). The team comes with the 16 channels of 8 cores per
 * local rank (core/comm_topo.c), where it was measured, not with the 8 of
 * 4 cores. */
int weft_host_team_members(int host_channels, int64_t forced, int *all_colls) {
  *all_colls = forced >= 1;
  if (forced >= 1) return (int)forced;
  return host_channels >= 16 ? WEFT_HOST_TEAM_AUTO : 1;
}

void weft_host_team_init(struct weft_host_team *t, int members, int all_colls, int rank) {
  memset(t, 0, sizeof(*t));
  t->nthreads = members > 1 ? members - 1 : 0;
  t->all_colls = all_colls;
  t->rank = rank;
  if (t->nthreads == 0) return;
  t->inited = 1;
  pthread_mutex_init(&t->lock, NULL);
  pthread_cond_init(&t->work_cv, NULL);
  pthread_cond_init(&t->done_cv, NULL);
}

struct team_thread {
  struct weft_host_team *t;
  int index;     /* 0-based: member index - 1 */
  uint64_t seen; /* jobs posted before the thread was started */
};

static void *team_main(void *arg) {
  struct weft_host_team *t = ((struct team_thread *)arg)->t;
  int index = ((struct team_thread *)arg)->index;
  uint64_t seen = ((struct team_thread *)arg)->seen;
  free(arg);
  weft_log_set_rank(t->rank);
  weft_log_set_helper();
  pthread_mutex_lock(&t->lock);
  for (;;) {
    while (!t->stop && t->job == seen) pthread_cond_wait(&t->work_cv, &t->lock);
    if (t->stop) break;
    seen = t->job;
    if (index >= t->job_threads) continue; /* not in this job */
    weft_host_team_fn fn = t->fn;
    void *ctx = t->ctx;
    pthread_mutex_unlock(&t->lock);
    fn(ctx, index + 1);
    pthread_mutex_lock(&t->lock);
    if (--t->left == 0) pthread_cond_signal(&t->done_cv);
  }
  pthread_mutex_unlock(&t->lock);
  return NULL;
}

/* Under lock. */
static void team_start(struct weft_host_team *t) {
  t->threads = calloc((size_t)t->nthreads, sizeof(*t->threads));
  if (t->threads == NULL) {
    WARN("rank %d: out of memory for %d lane threads; running lanes on one thread", t->rank,
         t->nthreads);
    t->nthreads = 0;
    return;
  }
  for (; t->started < t->nthreads; t->started++) {
    struct team_thread *arg = malloc(sizeof(*arg));
    int err = arg == NULL ? ENOMEM : 0;
    if (arg != NULL) {
      *arg = (struct team_thread){t, t->started, t->job};
      err = pthread_create(&t->threads[t->started], NULL, team_main, arg);
      if (err != 0) free(arg);
    }
    if (err != 0) {
      WARN("rank %d: cannot start lane thread %d of %d: %s; going on with %d", t->rank,
           t->started + 1, t->nthreads, strerror(err), t->started);
      t->nthreads = t->started;
      return;
    }
    pthread_setname_np(t->threads[t->started], "weft-lanes");
  }
  INFO(WEFT_INIT, "rank %d: %d lane threads beside the host engine's own", t->rank, t->started);
}

int weft_host_team_size(struct weft_host_team *t) {
  if (t->nthreads == 0) return 1;
  pthread_mutex_lock(&t->lock);
  if (t->threads == NULL && t->nthreads > 0) team_start(t);
  int n = 1 + t->started;
  pthread_mutex_unlock(&t->lock);
  return n;
}

void weft_host_team_run(struct weft_host_team *t, int members, weft_host_team_fn fn, void *ctx) {
  if (members <= 1 || t->nthreads == 0) {
    fn(ctx, 0);
    return;
  }
  pthread_mutex_lock(&t->lock);
  if (members > 1 + t->started) members = 1 + t->started;
  t->fn = fn;
  t->ctx = ctx;
  t->job_threads = members - 1;
  t->left = members - 1;
  t->job++;
  pthread_cond_broadcast(&t->work_cv);
  pthread_mutex_unlock(&t->lock);
  fn(ctx, 0);
  pthread_mutex_lock(&t->lock);
  for (int i = 0; i < TEAM_DONE_SPIN && t->left > 0; i++) {
    pthread_mutex_unlock(&t->lock);
    sched_yield();
    pthread_mutex_lock(&t->lock);
  }
  while (t->left > 0) pthread_cond_wait(&t->done_cv, &t->lock);
  pthread_mutex_unlock(&t->lock);
}

void weft_host_team_stop(struct weft_host_team *t) {
  if (!t->inited) return;
  if (t->threads != NULL) {
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_broadcast(&t->work_cv);
    pthread_mutex_unlock(&t->lock);
    for (int i = 0; i < t->started; i++) pthread_join(t->threads[i], NULL);
    free(t->threads);
  }
  pthread_cond_destroy(&t->done_cv);
  pthread_cond_destroy(&t->work_cv);
  pthread_mutex_destroy(&t->lock);
  memset(t, 0, sizeof(*t));
}
