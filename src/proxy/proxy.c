/* The proxy thread and its op queue (proxy.h). One mutex per proxy guards
 * its communicators, their targets and their FIFOs' progress: the thread
 * holds it for one sweep over the links (every network call in a sweep is
 * non-blocking) and lets go between sweeps, where posts get in. */
#include "proxy/proxy.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/debug.h"
#include "transport/net/net_fifo.h"

/* Sweeps that moved nothing before the thread yields its core, then
 * yields before it naps between sweeps (NAP_NS each). */
#define SPIN_SWEEPS 256
#define YIELD_SWEEPS 4096
#define NAP_NS 20000
/* How long the thread stays awake (yielding) once nothing is pending
 * before it sleeps on the condition variable: collectives called back to
 * back (a training step's, a benchmark's) then find it awake, rather than
 * paying a thread wake-up (tens of microseconds on a VM) on each. */
#define LINGER_NS 200000

struct weft_proxy_comm {
  struct weft_proxy *proxy;
  struct weft_proxy_comm *next;
  int dev, rank, nlinks;
  struct weft_net_fifo **links;
  uint64_t *fail_words;
  uint64_t *target; /* slots posted per link */
  uint64_t *error;
  const volatile uint32_t *abort;
  int failed; /* ops dropped from now on */
};

struct weft_proxy {
  struct weft_proxy *next;
  int dev;
  int users;
  int stop;
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct weft_proxy_comm *comms;
};

static pthread_mutex_t proxies_mu = PTHREAD_MUTEX_INITIALIZER;
static struct weft_proxy *proxies;

ncclResult_t weft_proxy_comm_create(int dev, int rank, int nlinks, uint64_t *error,
                                    const volatile uint32_t *abort, struct weft_proxy_comm **out) {
  struct weft_proxy_comm *pc = calloc(1, sizeof(*pc));
  if (pc != NULL) {
    pc->links = calloc((size_t)nlinks, sizeof(*pc->links));
    pc->fail_words = calloc((size_t)nlinks, sizeof(*pc->fail_words));
    pc->target = calloc((size_t)nlinks, sizeof(*pc->target));
  }
  if (pc == NULL || pc->links == NULL || pc->fail_words == NULL || pc->target == NULL) {
    WARN("rank %d: out of memory for the proxy's state of %d links", rank, nlinks);
    if (pc != NULL) weft_proxy_comm_destroy(pc);
    return ncclSystemError;
  }
  pc->dev = dev;
  pc->rank = rank;
  pc->nlinks = nlinks;
  pc->error = error;
  pc->abort = abort;
  *out = pc;
  return ncclSuccess;
}

void weft_proxy_comm_set_link(struct weft_proxy_comm *pc, uint32_t index,
                              struct weft_net_fifo *fifo, uint64_t fail_word) {
  pc->links[index] = fifo;
  pc->fail_words[index] = fail_word;
}

/* Drops the communicator's ops: the kernels stopped (abort, error word)
 * or a link failed. Requests in flight stay with their FIFOs for close. */
static void comm_fail(struct weft_proxy_comm *pc) {
  pc->failed = 1;
  INFO(WEFT_NET, "rank %d: proxy: the communicator failed or was aborted; its ops are dropped",
       pc->rank);
}

/* One pass over a communicator's links; *pending set while any has slots
 * to move, *moved when anything moved. */
static void comm_sweep(struct weft_proxy_comm *pc, int *pending, int *moved) {
  if (pc->failed) return;
  if (*pc->abort != 0 || __atomic_load_n(pc->error, __ATOMIC_ACQUIRE) != 0) {
    comm_fail(pc);
    return;
  }
  for (int i = 0; i < pc->nlinks; i++) {
    struct weft_net_fifo *f = pc->links[i];
    if (f == NULL || f->done >= pc->target[i]) continue;
    int m = 0;
    if (weft_net_fifo_progress(f, pc->target[i], &m) != ncclSuccess) {
      uint64_t zero = 0;
      __atomic_compare_exchange_n(pc->error, &zero, pc->fail_words[i], 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE);
      WARN("rank %d: proxy: the net link %s rank %d failed: the communicator has failed", pc->rank,
           f->is_send ? "to" : "from", f->peer);
      comm_fail(pc);
      return;
    }
    *moved |= m;
    *pending |= f->done < pc->target[i];
  }
}

static void nap(unsigned idle) {
  if (idle < SPIN_SWEEPS) return;
  if (idle < SPIN_SWEEPS + YIELD_SWEEPS) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, NAP_NS};
  nanosleep(&ts, NULL);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void *proxy_main(void *arg) {
  struct weft_proxy *p = arg;
  unsigned idle = 0;
  uint64_t last_busy = 0;
  pthread_mutex_lock(&p->mu);
  while (!p->stop) {
    int pending = 0, moved = 0;
    for (struct weft_proxy_comm *pc = p->comms; pc != NULL; pc = pc->next)
      comm_sweep(pc, &pending, &moved);
    if (!pending) {
      idle = 0;
      if (now_ns() - last_busy < LINGER_NS) {
        pthread_mutex_unlock(&p->mu);
        sched_yield();
        pthread_mutex_lock(&p->mu);
      } else {
        pthread_cond_wait(&p->cv, &p->mu);
      }
      continue;
    }
    last_busy = now_ns();
    idle = moved ? 0 : idle + 1;
    pthread_mutex_unlock(&p->mu);
    nap(idle);
    pthread_mutex_lock(&p->mu);
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

/* The proxy of dev, started when new (proxies_mu held). */
static ncclResult_t proxy_get(int dev, int rank, struct weft_proxy **out) {
  for (struct weft_proxy *p = proxies; p != NULL; p = p->next)
    if (p->dev == dev) {
      *out = p;
      return ncclSuccess;
    }
  struct weft_proxy *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    WARN("rank %d: out of memory for a proxy thread", rank);
    return ncclSystemError;
  }
  p->dev = dev;
  pthread_mutex_init(&p->mu, NULL);
  pthread_cond_init(&p->cv, NULL);
  int err = pthread_create(&p->thread, NULL, proxy_main, p);
  if (err != 0) {
    WARN("rank %d: starting the proxy thread of device %d: %s", rank, dev, strerror(err));
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
    return ncclSystemError;
  }
  pthread_setname_np(p->thread, "weft-proxy");
  INFO(WEFT_INIT | WEFT_NET, "rank %d: started the proxy thread of device %d", rank, dev);
  p->next = proxies;
  proxies = p;
  *out = p;
  return ncclSuccess;
}

ncclResult_t weft_proxy_comm_start(struct weft_proxy_comm *pc) {
  pthread_mutex_lock(&proxies_mu);
  struct weft_proxy *p = NULL;
  ncclResult_t res = proxy_get(pc->dev, pc->rank, &p);
  if (res == ncclSuccess) {
    p->users++;
    pthread_mutex_lock(&p->mu);
    pc->proxy = p;
    pc->next = p->comms;
    p->comms = pc;
    pthread_mutex_unlock(&p->mu);
  }
  pthread_mutex_unlock(&proxies_mu);
  return res;
}

void weft_proxy_post(struct weft_proxy_comm *pc, const struct weft_proxy_op *ops, int n) {
  struct weft_proxy *p = pc->proxy;
  if (p == NULL || n == 0) return;
  pthread_mutex_lock(&p->mu);
  if (!pc->failed) {
    for (int i = 0; i < n; i++) pc->target[ops[i].link] += ops[i].slots;
    pthread_cond_signal(&p->cv);
  }
  pthread_mutex_unlock(&p->mu);
}

/* Whether pc has nothing left to move (p->mu held). */
static int comm_drained(const struct weft_proxy_comm *pc) {
  if (pc->failed) return 1;
  for (int i = 0; i < pc->nlinks; i++)
    if (pc->links[i] != NULL && pc->links[i]->done < pc->target[i]) return 0;
  return 1;
}

ncclResult_t weft_proxy_comm_drain(struct weft_proxy_comm *pc, double timeout_s) {
  struct weft_proxy *p = pc->proxy;
  if (p == NULL) return ncclSuccess;
  uint64_t deadline = now_ns() + (uint64_t)(timeout_s * 1e9);
  for (;;) {
    pthread_mutex_lock(&p->mu);
    int drained = comm_drained(pc);
    pthread_mutex_unlock(&p->mu);
    if (drained) return ncclSuccess;
    if (now_ns() > deadline) {
      WARN(
          "rank %d: proxy: net links still had slots to move %.0f s after the last kernel "
          "ended (WEFT_TIMEOUT); closing them",
          pc->rank, timeout_s);
      return ncclRemoteError;
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
}

uint64_t weft_proxy_link_done(struct weft_proxy_comm *pc, uint32_t index) {
  struct weft_proxy *p = pc->proxy;
  if (p != NULL) pthread_mutex_lock(&p->mu);
  uint64_t done = pc->links[index] != NULL ? pc->links[index]->done : 0;
  if (p != NULL) pthread_mutex_unlock(&p->mu);
  return done;
}

/* Takes pc off its proxy; stops and frees the proxy with its last user. */
static void comm_stop(struct weft_proxy_comm *pc) {
  struct weft_proxy *p = pc->proxy;
  pthread_mutex_lock(&proxies_mu);
  pthread_mutex_lock(&p->mu);
  for (struct weft_proxy_comm **at = &p->comms; *at != NULL; at = &(*at)->next)
    if (*at == pc) {
      *at = pc->next;
      break;
    }
  int last = --p->users == 0;
  if (last) {
    p->stop = 1;
    pthread_cond_signal(&p->cv);
    for (struct weft_proxy **at = &proxies; *at != NULL; at = &(*at)->next)
      if (*at == p) {
        *at = p->next;
        break;
      }
  }
  pthread_mutex_unlock(&p->mu);
  pthread_mutex_unlock(&proxies_mu);
  if (!last) return;
  pthread_join(p->thread, NULL);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}

void weft_proxy_comm_destroy(struct weft_proxy_comm *pc) {
  if (pc == NULL) return;
  if (pc->proxy != NULL) comm_stop(pc);
  free(pc->links);
  free(pc->fail_words);
  free(pc->target);
  free(pc);
}
