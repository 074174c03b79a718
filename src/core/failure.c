/* The communicator's failure record and the notices that spread it. Each
 * rank has a UDP socket whose address every rank learns at init; a watcher
 * thread reads it, so a notice ends this rank's waits even while its own
 * threads are blocked. A notice is a datagram (small, never blocks the
 * sender, no connection to keep), carrying the communicator's random key
 * so strays and strangers are dropped. The record is idempotent: the
 * first failure a rank hears of or sees wins, and every later call on the
 * communicator returns it.
 *
 * A stall is the one failure a rank cannot see directly: the peer it waits
 * on may itself be waiting. So before it blames anyone, the rank pings
 * every rank's watcher: a rank whose process is stopped (or whose host is
 * gone) does not answer, and that is the rank named. */
#include "core/failure.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "base/debug.h"
#include "core/engine.h"
#include "transport/socket.h"

#define FAIL_MAGIC 0x4c494657u /* "WFIL" */
#define FAIL_DETAIL 200
/* How long a rank that saw a stall waits for every watcher's answer. */
#define FAIL_PING_MS 300
/* A call that finishes this long after the last one reads the socket. */
#define FAIL_POLL_GAP_MS 20

enum fail_kind { FAIL_NOTICE = 1, FAIL_PING = 2, FAIL_PONG = 3 };

struct fail_msg { /* one datagram */
  uint32_t magic;
  uint32_t kind;
  uint64_t key;
  uint64_t comm_hash;
  int32_t failed; /* NOTICE: the rank that failed */
  int32_t how;
  int32_t by; /* the sender */
  int32_t code;
  int32_t soft; /* NOTICE: raised between calls: work in flight may finish */
  int32_t pad;
  uint64_t nonce; /* PING/PONG */
  char detail[FAIL_DETAIL];
};

struct fail_addr {
  union weft_sockaddr addr;
  uint64_t key;
};

struct fail_rec {
  int failed, how, by, code, soft;
  char detail[FAIL_DETAIL];
};

struct weft_failure_state {
  struct ncclComm *comm;
  int fd;
  int wake_fd;
  uint64_t key;
  struct fail_addr *addrs;
  pthread_t thread;
  int thread_live;
  pthread_mutex_t lock;
  pthread_mutex_t drain_lock;
  pthread_cond_t cv;
  _Atomic int recorded;
  _Atomic int hard;           /* a failure found in flight (not raised between calls) is known */
  _Atomic int keep_bootstrap; /* ncclCommShrink uses it: notices no longer abort it */
  _Atomic int warned;         /* a call has WARNed the failure */
  _Atomic int64_t polled_ms;  /* when a call last read the socket (weft_failure_poll) */
  struct fail_rec rec;
  uint64_t nonce;
  unsigned char *pong;
};

/* ---- Messages ------------------------------------------------------------ */

static int fail_code(const struct weft_failure_state *st, const struct fail_rec *r) {
  int self = st->comm->rank;
  return r->failed == self && r->by == self ? r->code : (int)ncclRemoteError;
}

static void fail_rec_describe(const struct fail_rec *r, char *buf, size_t size) {
  switch (r->how) {
    case WEFT_FAIL_DIED:
      snprintf(buf, size, "rank %d died (seen by rank %d: %s)", r->failed, r->by, r->detail);
      break;
    case WEFT_FAIL_STALLED:
      snprintf(buf, size, "rank %d stopped answering (seen by rank %d: %s)", r->failed, r->by,
               r->detail);
      break;
    case WEFT_FAIL_ABORTED:
      snprintf(buf, size, "rank %d aborted the communicator (%s)", r->failed, r->detail);
      break;
    default: snprintf(buf, size, "rank %d failed: %s", r->failed, r->detail); break;
  }
}

static void fail_send(struct weft_failure_state *st, int to, const struct fail_msg *m) {
  const union weft_sockaddr *a = &st->addrs[to].addr;
  socklen_t len = a->sa.sa_family == AF_INET6 ? sizeof(a->sin6) : sizeof(a->sin);
  ssize_t n;
  do {
    n = sendto(st->fd, m, sizeof(*m), MSG_DONTWAIT, &a->sa, len);
  } while (n < 0 && errno == EINTR);
  if (n < 0)
    INFO(WEFT_INIT, "rank %d: failure notice to rank %d not sent: %s", st->comm->rank, to,
         strerror(errno));
}

static void fail_msg_init(const struct weft_failure_state *st, struct fail_msg *m, int kind) {
  memset(m, 0, sizeof(*m));
  m->magic = FAIL_MAGIC;
  m->kind = (uint32_t)kind;
  m->key = st->key;
  m->comm_hash = st->comm->comm_hash;
  m->by = st->comm->rank;
}

/* ---- The record ------------------------------------------------------------ */

/* Makes every wait on comm end: at once for a failure, once idle for a
 * peer's abort (what it sent first still arrives). A flag of 1 (this
 * process aborts) stays. */
static void fail_stop_waits(struct weft_failure_state *st, int hard) {
  struct ncclComm *comm = st->comm;
  int want = hard ? WEFT_ABORT_FAILED : WEFT_ABORT_SOFT;
  int cur = atomic_load(&comm->abort_flag);
  while ((cur == 0 || (cur == WEFT_ABORT_SOFT && hard)) &&
         !atomic_compare_exchange_weak(&comm->abort_flag, &cur, want)) {
  }
  if (comm->bootstrap != NULL && !atomic_load(&st->keep_bootstrap))
    weft_bootstrap_abort(comm->bootstrap);
  /* GPU ranks: the kernels' own abort word (they do not read abort_flag). */
  const struct weft_engine_ops *engine = comm->engine; /* NULL: init has not chosen it */
  if (hard && engine != NULL) engine->fail(comm);
}

/* Keeps r unless a failure is recorded already; returns 1 if it was kept. */
static int fail_record(struct weft_failure_state *st, const struct fail_rec *r) {
  int hard = !r->soft || r->failed == st->comm->rank;
  pthread_mutex_lock(&st->lock);
  int first = !atomic_load(&st->recorded);
  if (first) {
    st->rec = *r;
    atomic_store(&st->recorded, 1);
  }
  int harder = hard && !atomic_load(&st->hard);
  if (harder) atomic_store(&st->hard, 1);
  pthread_cond_broadcast(&st->cv);
  pthread_mutex_unlock(&st->lock);
  /* A peer that failed between calls fails our next call that needs it,
   * not the communicator at once: calls that do not wait on it still work
   * until then (and ncclCommAbort in a group on every rank stays quiet). */
  if (harder) weft_comm_set_error(st->comm, (ncclResult_t)fail_code(st, &st->rec));
  if (first || harder) fail_stop_waits(st, hard);
  return first;
}

static void fail_handle(struct weft_failure_state *st, const struct fail_msg *m, size_t n,
                        const union weft_sockaddr *from, socklen_t from_len) {
  int nranks = st->comm->nranks;
  if (n != sizeof(*m) || m->magic != FAIL_MAGIC || m->key != st->key ||
      m->comm_hash != st->comm->comm_hash || m->by < 0 || m->by >= nranks) {
    INFO(WEFT_INIT, "rank %d: dropped a stray datagram on the failure socket", st->comm->rank);
    return;
  }
  if (m->kind == FAIL_PING) {
    struct fail_msg pong = *m;
    pong.kind = FAIL_PONG;
    pong.by = st->comm->rank;
    (void)sendto(st->fd, &pong, sizeof(pong), MSG_DONTWAIT, &from->sa, from_len);
  } else if (m->kind == FAIL_PONG) {
    pthread_mutex_lock(&st->lock);
    if (m->nonce == st->nonce) st->pong[m->by] = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->lock);
  } else if (m->kind == FAIL_NOTICE && m->failed >= 0 && m->failed < nranks) {
    struct fail_rec r = {
        .failed = m->failed, .how = m->how, .by = m->by, .code = m->code, .soft = m->soft};
    memcpy(r.detail, m->detail, sizeof(r.detail));
    r.detail[sizeof(r.detail) - 1] = '\0';
    /* INFO: a WARN would overwrite the last error under a thread reading
     * it; the call this failure ends WARNs it (weft_failure_result). */
    if (fail_record(st, &r)) {
      char what[FAIL_DETAIL + 96];
      fail_rec_describe(&r, what, sizeof(what));
      INFO(WEFT_INIT, "rank %d: communicator %llx: notice from rank %d: %s", st->comm->rank,
           (unsigned long long)st->comm->comm_hash, m->by, what);
    }
  }
}

/* One thread at a time, so that a call that drains after the watcher took a
 * notice out of the socket finds it recorded, not half handled. */
static void fail_drain(struct weft_failure_state *st) {
  pthread_mutex_lock(&st->drain_lock);
  for (;;) {
    struct fail_msg m;
    union weft_sockaddr from;
    socklen_t len = sizeof(from);
    ssize_t n = recvfrom(st->fd, &m, sizeof(m), MSG_DONTWAIT, &from.sa, &len);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    fail_handle(st, &m, (size_t)n, &from, len);
  }
  pthread_mutex_unlock(&st->drain_lock);
}

/* Records r as this rank's finding and tells every other rank. */
static void fail_publish(struct weft_failure_state *st, const struct fail_rec *r) {
  if (!fail_record(st, r)) return;
  char what[FAIL_DETAIL + 96];
  fail_rec_describe(r, what, sizeof(what));
  WARN("rank %d: communicator %llx failed: %s; telling every rank", st->comm->rank,
       (unsigned long long)st->comm->comm_hash, what);
  struct fail_msg m;
  fail_msg_init(st, &m, FAIL_NOTICE);
  m.failed = r->failed, m.how = r->how, m.code = r->code, m.soft = r->soft;
  memcpy(m.detail, r->detail, sizeof(m.detail));
  for (int to = 0; to < st->comm->nranks; to++)
    if (to != st->comm->rank) fail_send(st, to, &m);
}

/* ---- Stalls ---------------------------------------------------------------- */

/* Pings every watcher and waits FAIL_PING_MS for the answers (the watcher
 * thread takes them in); *silent_out gets the first rank that did not
 * answer (the waited-on peer first), or -1. */
static void fail_ping_all(struct weft_failure_state *st, int peer, int *silent_out) {
  struct ncclComm *comm = st->comm;
  struct fail_msg m;
  fail_msg_init(st, &m, FAIL_PING);
  pthread_mutex_lock(&st->lock);
  m.nonce = ++st->nonce;
  memset(st->pong, 0, (size_t)comm->nranks);
  st->pong[comm->rank] = 1;
  pthread_mutex_unlock(&st->lock);
  for (int to = 0; to < comm->nranks; to++)
    if (to != comm->rank) fail_send(st, to, &m);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_nsec += FAIL_PING_MS * 1000000L;
  until.tv_sec += until.tv_nsec / 1000000000L;
  until.tv_nsec %= 1000000000L;
  pthread_mutex_lock(&st->lock);
  for (;;) {
    int all = 1;
    for (int r = 0; r < comm->nranks && all; r++) all = st->pong[r];
    if (all || atomic_load(&st->recorded)) break;
    if (pthread_cond_timedwait(&st->cv, &st->lock, &until) == ETIMEDOUT) break;
  }
  *silent_out = -1;
  if (peer >= 0 && peer < comm->nranks && !st->pong[peer]) *silent_out = peer;
  for (int r = 0; r < comm->nranks && *silent_out < 0; r++)
    if (!st->pong[r]) *silent_out = r;
  pthread_mutex_unlock(&st->lock);
}

/* A wait on `peer` saw no progress: names the rank that really stopped. */
static void fail_stall_blame(struct weft_failure_state *st, struct fail_rec *r) {
  int peer = r->failed, silent;
  fail_ping_all(st, peer, &silent);
  if (silent >= 0) {
    if (silent != peer)
      snprintf(r->detail, sizeof(r->detail),
               "no answer to a ping; rank %d answers but made no progress either", peer);
    else
      snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail),
               ", no answer to a ping");
    r->failed = silent;
  } else {
    snprintf(r->detail + strlen(r->detail), sizeof(r->detail) - strlen(r->detail),
             "; it is alive (answered a ping) but sent nothing: did it make the same call?");
  }
}

/* ---- Entry points ---------------------------------------------------------- */

ncclResult_t weft_failure_report(struct ncclComm *comm, ncclResult_t res) {
  struct weft_failure_state *st = comm->failure;
  struct fail_rec r = {.by = comm->rank, .code = (int)res};
  enum weft_fail_how how = weft_failure_note_take(&r.failed, r.detail, sizeof(r.detail));
  if (st == NULL || res == ncclSuccess) return res;
  fail_drain(st);
  if (!atomic_load(&st->recorded) && atomic_load(&comm->abort_flag) == 1) return res;
  if (!atomic_load(&st->recorded)) {
    r.how = (int)how;
    if (how == WEFT_FAIL_NONE) {
      r.how = WEFT_FAIL_ERROR;
      r.failed = comm->rank;
      snprintf(r.detail, sizeof(r.detail), "%s", weft_last_error());
    } else if (how == WEFT_FAIL_STALLED) {
      fail_stall_blame(st, &r);
    }
    fail_publish(st, &r);
  }
  return (ncclResult_t)fail_code(st, &st->rec);
}

ncclResult_t weft_failure_raise(struct ncclComm *comm, enum weft_fail_how how, ncclResult_t code,
                                const char *fmt, ...) {
  struct weft_failure_state *st = comm->failure;
  if (st == NULL) return code;
  const struct weft_engine_ops *engine = comm->engine;
  struct fail_rec r = {.failed = comm->rank,
                       .how = (int)how,
                       .by = comm->rank,
                       .code = (int)code,
                       .soft = engine == NULL || !engine->busy(comm)};
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(r.detail, sizeof(r.detail), fmt, ap);
  va_end(ap);
  fail_drain(st);
  fail_publish(st, &r);
  return (ncclResult_t)fail_code(st, &st->rec);
}

/* The watcher takes notices as they come; a call only reads the socket
 * itself after a gap (FAIL_POLL_GAP_MS since it last did), which is what a
 * process stopped and resumed sees: its watcher may not have run yet, and
 * the notices that its peers sent while it was stopped must fail the call
 * it finishes now. Back-to-back calls cost a coarse clock read. */
ncclResult_t weft_failure_poll(struct ncclComm *comm) {
  struct weft_failure_state *st = comm->failure;
  if (st == NULL) return ncclSuccess;
  int64_t now = weft_time_ms_coarse();
  if (!atomic_load(&st->hard) && now - atomic_load(&st->polled_ms) >= FAIL_POLL_GAP_MS) {
    fail_drain(st);
    atomic_store(&st->polled_ms, now);
  }
  if (!atomic_load(&st->hard)) return ncclSuccess;
  return (ncclResult_t)fail_code(st, &st->rec);
}

int weft_failure_describe(const struct ncclComm *comm, char *buf, size_t size) {
  struct weft_failure_state *st = comm->failure;
  if (st == NULL || !atomic_load(&st->recorded)) return 0;
  pthread_mutex_lock(&st->lock);
  fail_rec_describe(&st->rec, buf, size);
  pthread_mutex_unlock(&st->lock);
  return 1;
}

ncclResult_t weft_failure_result(const struct ncclComm *comm, ncclResult_t res) {
  char what[FAIL_DETAIL + 96];
  if (res == ncclSuccess || res == ncclInProgress || comm == NULL || comm->failure == NULL)
    return res;
  if (!weft_failure_describe(comm, what, sizeof(what))) return res;
  if (!atomic_exchange(&comm->failure->warned, 1))
    WARN("rank %d: communicator %llx failed: %s", comm->rank, (unsigned long long)comm->comm_hash,
         what);
  /* What the call returns with stays the last error while helper threads
   * WARN of what follows from it (debug.h). */
  weft_pin_last_error("rank %d: communicator %llx failed: %s", comm->rank,
                      (unsigned long long)comm->comm_hash, what);
  return (ncclResult_t)fail_code(comm->failure, &comm->failure->rec);
}

void weft_failure_keep_bootstrap(struct ncclComm *comm) {
  if (comm->failure != NULL) atomic_store(&comm->failure->keep_bootstrap, 1);
  weft_bootstrap_resume(comm->bootstrap);
}

/* ---- The watcher ------------------------------------------------------------ */

static void *fail_watch_main(void *arg) {
  struct weft_failure_state *st = arg;
  weft_log_set_rank(st->comm->rank);
  weft_log_set_helper();
  for (;;) {
    struct pollfd p[2] = {{.fd = st->fd, .events = POLLIN}, {.fd = st->wake_fd, .events = POLLIN}};
    if (poll(p, 2, -1) < 0 && errno != EINTR) {
      WARN("rank %d: poll on the failure socket failed: %s", st->comm->rank, strerror(errno));
      return NULL;
    }
    if (p[1].revents) return NULL;
    if (p[0].revents) fail_drain(st);
  }
}

static ncclResult_t fail_open(struct weft_failure_state *st, union weft_sockaddr *addr) {
  int rank = st->comm->rank;
  WEFT_CHECK(weft_socket_local_addr(addr));
  socklen_t len = addr->sa.sa_family == AF_INET6 ? sizeof(addr->sin6) : sizeof(addr->sin);
  st->fd = socket(addr->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (st->fd < 0 || bind(st->fd, &addr->sa, len) != 0 ||
      getsockname(st->fd, &addr->sa, &len) != 0) {
    WARN("rank %d: cannot open the failure-notice socket: %s", rank, strerror(errno));
    return ncclSystemError;
  }
  st->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (st->wake_fd < 0) {
    WARN("rank %d: eventfd for the failure watcher failed: %s", rank, strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t weft_failure_start(struct ncclComm *comm) {
  if (comm->nranks < 2) return ncclSuccess;
  struct weft_failure_state *st = calloc(1, sizeof(*st));
  if (st != NULL) {
    st->addrs = calloc((size_t)comm->nranks, sizeof(*st->addrs));
    st->pong = calloc((size_t)comm->nranks, 1);
  }
  if (st == NULL || st->addrs == NULL || st->pong == NULL) {
    WARN("rank %d: out of memory for failure notices (%d ranks)", comm->rank, comm->nranks);
    if (st != NULL) free(st->addrs);
    free(st);
    return ncclSystemError;
  }
  st->comm = comm;
  st->fd = st->wake_fd = -1;
  pthread_mutex_init(&st->lock, NULL);
  pthread_mutex_init(&st->drain_lock, NULL);
  pthread_cond_init(&st->cv, NULL);
  comm->failure = st;
  struct fail_addr *me = &st->addrs[comm->rank];
  WEFT_CHECK(fail_open(st, &me->addr));
  WEFT_CHECK(weft_random_u64(&me->key));
  WEFT_CHECK(weft_bootstrap_allgather(comm->bootstrap, st->addrs, sizeof(*st->addrs)));
  st->key = st->addrs[0].key; /* rank 0's: one key for the communicator */
  WEFT_PTHREAD_CHECK(pthread_create(&st->thread, NULL, fail_watch_main, st),
                     "starting the failure watcher");
  st->thread_live = 1;
  pthread_setname_np(st->thread, "weft-watch");
  return ncclSuccess;
}

void weft_failure_quiet(struct ncclComm *comm) {
  struct weft_failure_state *st = comm->failure;
  if (st == NULL || !st->thread_live) return;
  uint64_t one = 1;
  ssize_t n = write(st->wake_fd, &one, sizeof(one));
  (void)n;
  pthread_join(st->thread, NULL);
  st->thread_live = 0;
}

void weft_failure_stop(struct ncclComm *comm) {
  struct weft_failure_state *st = comm->failure;
  if (st == NULL) return;
  weft_failure_quiet(comm);
  if (st->fd >= 0) close(st->fd);
  if (st->wake_fd >= 0) close(st->wake_fd);
  pthread_cond_destroy(&st->cv);
  pthread_mutex_destroy(&st->drain_lock);
  pthread_mutex_destroy(&st->lock);
  free(st->addrs);
  free(st->pong);
  free(st);
  comm->failure = NULL;
}
