/* The host engine's copy pool (see host_copy.h). One lock guards the list
 * of copies with pieces left and every claim: a claim is a few
 * instructions against a 128 KiB memcpy, so the lock is never what the
 * threads wait for. A copy's done count is written under the lock and read
 * without it (release / acquire), so a poster that sees a copy finished
 * also sees its bytes. */
#include "exec/host_copy.h"

#include <stdlib.h>
#include <string.h>

#include "base/copy.h"
#include "base/debug.h"
#include "base/param.h"

int weft_host_copy_threads(int cpus, int local_ranks) {
  int64_t forced = weft_param_int(WEFT_PARAM_HOST_COPY_THREADS);
  if (forced >= 0) return (int)forced;
  int per = cpus / (local_ranks > 0 ? local_ranks : 1);
  if (per < 4) return 0;
  return per / 2 < WEFT_HOST_COPY_MAX_AUTO ? per / 2 : WEFT_HOST_COPY_MAX_AUTO;
}

void weft_host_copy_pool_init(struct weft_host_copy_pool *p, int nthreads, int rank) {
  memset(p, 0, sizeof(*p));
  p->nthreads = nthreads;
  p->rank = rank;
  if (nthreads <= 0) return;
  p->inited = 1;
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work_cv, NULL);
  pthread_cond_init(&p->done_cv, NULL);
}

int weft_host_copy_wants(const struct weft_host_copy_pool *p, size_t bytes) {
  return p->nthreads > 0 && bytes > WEFT_HOST_COPY_PIECE;
}

/* Under lock: takes the next piece of the first copy on the list (taking
 * the copy off the list with its last piece); NULL when none is left. */
static struct weft_host_copy *pool_claim(struct weft_host_copy_pool *p, size_t *off, size_t *n) {
  struct weft_host_copy *c = p->head;
  if (c == NULL) return NULL;
  *off = c->claimed;
  *n = c->bytes - c->claimed < WEFT_HOST_COPY_PIECE ? c->bytes - c->claimed : WEFT_HOST_COPY_PIECE;
  c->claimed += *n;
  if (c->claimed == c->bytes) {
    p->head = c->next;
    if (p->head == NULL) p->tail = NULL;
    c->linked = 0;
  }
  p->inflight++;
  return c;
}

/* Copies a claimed piece without the lock, and takes the lock back to
 * count it; c is not touched after that (its poster may reuse it). */
static void pool_copy(struct weft_host_copy_pool *p, struct weft_host_copy *c, size_t off, size_t n,
                      int by_pool) {
  pthread_mutex_unlock(&p->lock);
  weft_copy(c->dst + off, c->src + off, n, c->stream);
  pthread_mutex_lock(&p->lock);
  if (by_pool) c->pool_bytes += n;
  atomic_store_explicit(&c->done, atomic_load_explicit(&c->done, memory_order_relaxed) + n,
                        memory_order_release);
  p->inflight--;
  p->pieces++;
  if (p->waiters > 0) pthread_cond_broadcast(&p->done_cv);
}

static void *pool_main(void *arg) {
  struct weft_host_copy_pool *p = arg;
  weft_log_set_rank(p->rank);
  weft_log_set_helper();
  pthread_mutex_lock(&p->lock);
  while (!p->stop) {
    size_t off, n;
    struct weft_host_copy *c = pool_claim(p, &off, &n);
    if (c == NULL) {
      p->sleeping++;
      pthread_cond_wait(&p->work_cv, &p->lock);
      p->sleeping--;
      continue;
    }
    pool_copy(p, c, off, n, 1);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Under lock. A thread that cannot start is a WARN; the ones started run,
 * and with none the pool takes no more posts. */
static void pool_start(struct weft_host_copy_pool *p) {
  p->threads = calloc((size_t)p->nthreads, sizeof(*p->threads));
  if (p->threads == NULL) {
    WARN("rank %d: out of memory for %d copy threads; copying on one thread", p->rank, p->nthreads);
    p->nthreads = 0;
    return;
  }
  for (; p->started < p->nthreads; p->started++) {
    int err = pthread_create(&p->threads[p->started], NULL, pool_main, p);
    if (err != 0) {
      WARN("rank %d: cannot start copy thread %d of %d: %s; going on with %d", p->rank,
           p->started + 1, p->nthreads, strerror(err), p->started);
      p->nthreads = p->started;
      return;
    }
    /* Named for top -H, gdb and the tests; here, so the name is there as
     * soon as post returns. */
    pthread_setname_np(p->threads[p->started], "weft-copy");
  }
  INFO(WEFT_INIT, "rank %d: %d copy threads for the host engine's local copies", p->rank,
       p->started);
}

void weft_host_copy_post(struct weft_host_copy_pool *p, struct weft_host_copy *c, char *dst,
                         const char *src, size_t bytes, int stream) {
  c->dst = dst;
  c->src = src;
  c->bytes = bytes;
  c->stream = stream;
  c->claimed = 0;
  c->pool_bytes = 0;
  c->next = NULL;
  atomic_store_explicit(&c->done, 0, memory_order_relaxed);
  pthread_mutex_lock(&p->lock);
  if (p->threads == NULL && p->nthreads > 0) pool_start(p);
  c->linked = 1;
  if (p->tail != NULL)
    p->tail->next = c;
  else
    p->head = c;
  p->tail = c;
  if (p->sleeping > 0) pthread_cond_broadcast(&p->work_cv);
  pthread_mutex_unlock(&p->lock);
}

int weft_host_copy_help(struct weft_host_copy_pool *p) {
  size_t off, n;
  pthread_mutex_lock(&p->lock);
  struct weft_host_copy *c = pool_claim(p, &off, &n);
  if (c != NULL) pool_copy(p, c, off, n, 0);
  pthread_mutex_unlock(&p->lock);
  return c != NULL;
}

void weft_host_copy_wait(struct weft_host_copy_pool *p) {
  pthread_mutex_lock(&p->lock);
  unsigned long seen = p->pieces;
  p->waiters++;
  /* Pieces nobody took yet count as on their way while a thread runs. */
  while ((p->inflight > 0 || (p->head != NULL && p->started > 0)) && p->pieces == seen)
    pthread_cond_wait(&p->done_cv, &p->lock);
  p->waiters--;
  pthread_mutex_unlock(&p->lock);
}

/* Under lock: c off the list (it is there only while pieces are left). */
static void pool_unlink(struct weft_host_copy_pool *p, struct weft_host_copy *c) {
  struct weft_host_copy **pp = &p->head, *prev = NULL;
  while (*pp != NULL && *pp != c) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  if (*pp == NULL) return;
  *pp = c->next;
  if (p->tail == c) p->tail = prev;
  c->linked = 0;
}

void weft_host_copy_cancel(struct weft_host_copy_pool *p, struct weft_host_copy *c) {
  if (!p->inited || c->bytes == 0) return;
  pthread_mutex_lock(&p->lock);
  if (c->linked) pool_unlink(p, c);
  p->waiters++;
  while (atomic_load_explicit(&c->done, memory_order_relaxed) < c->claimed)
    pthread_cond_wait(&p->done_cv, &p->lock);
  p->waiters--;
  c->bytes = 0; /* nothing more is coming: the copy counts as finished */
  atomic_store_explicit(&c->done, 0, memory_order_relaxed);
  pthread_mutex_unlock(&p->lock);
}

void weft_host_copy_pool_stop(struct weft_host_copy_pool *p) {
  if (!p->inited) return;
  if (p->threads != NULL) {
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
  }
  pthread_cond_destroy(&p->done_cv);
  pthread_cond_destroy(&p->work_cv);
  pthread_mutex_destroy(&p->lock);
  memset(p, 0, sizeof(*p));
}
