/* The gate in front of every bootstrap listener (the root's and each
 * rank's): accepts connections, reads their first message concurrently and
 * without blocking, and admits only those that present the id's secret. A
 * wrong secret, garbage or silence is dropped (and logged per source, see
 * bootstrap_flood.c) and the listener keeps serving. Strangers cannot crowd
 * ranks out: few connections may wait, silent ones wait briefly, and a new
 * connection evicts the oldest one rather than being refused. */
#include <errno.h>
#include <limits.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/bootstrap_internal.h"
#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"

/* Abortable waits poll in slices this long, so an abort is seen promptly. */
#define GATE_ABORT_SLICE_MS 100
/* After an accept fails for lack of fds or memory, the listener rests. */
#define GATE_ACCEPT_PAUSE_MS 100
/* Connections taken from the backlog per round, so ranks queued behind a
 * flood get in quickly, while those already waiting are read every round. */
#define GATE_ACCEPT_BATCH 16
#define GATE_DEFER_ACCEPT_S 1
/* One gate's pending connections may use at most 1/GATE_FD_SHARE of the fd
 * limit, and all the gates of the process (one per rank it hosts, and its
 * roots) together 1/GATE_FD_SHARE_ALL, beyond one each. */
#define GATE_FD_SHARE 16
#define GATE_FD_SHARE_ALL 8
#define GATE_MIN_PENDING 8
#define GATE_MAX_PENDING_ALL 512

static _Atomic int gate_pending_all; /* pending connections of every gate */
static _Atomic int gate_pending_all_max;

/* A forked child has none of its parent's gates to serve: its count
 * starts afresh. */
static void gate_atfork_child(void) {
  atomic_store(&gate_pending_all, 0);
}
static void gate_atfork_init(void) {
  pthread_atfork(NULL, NULL, gate_atfork_child);
}
static pthread_once_t gate_atfork_once = PTHREAD_ONCE_INIT;

static int gate_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > INT_MAX)
    return INT_MAX;
  return (int)rl.rlim_cur;
}

static int gate_clamp(int v, int lo, int hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* The kernel hands the listener a connection only once its first bytes
 * have arrived (or GATE_DEFER_ACCEPT_S has passed): a rank sends its first
 * message right after connecting, so it is accepted with the message there
 * and decided at once, never left waiting where a flood could evict it;
 * silent strangers wait in the kernel, holding no fd of ours. */
static void gate_defer_accept(struct weft_gate *g) {
  int secs = GATE_DEFER_ACCEPT_S;
  if (setsockopt(g->listen_fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof(secs)) != 0)
    INFO(WEFT_BOOTSTRAP, "%s: TCP_DEFER_ACCEPT: %s (silent connections are accepted at once)",
         g->who, strerror(errno));
}

void weft_gate_init(struct weft_gate *g, const char *who, int listen_fd, uint64_t secret,
                    size_t first_size, weft_gate_admit_fn admit, void *ctx,
                    const _Atomic int *abort_flag) {
  pthread_once(&gate_atfork_once, gate_atfork_init);
  memset(g, 0, sizeof(*g));
  snprintf(g->who, sizeof(g->who), "%s", who);
  g->listen_fd = listen_fd;
  gate_defer_accept(g);
  g->secret = secret;
  g->first_size = first_size;
  int64_t timeout_ms = weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
  g->first_ms = timeout_ms < WEFT_BOOT_FIRST_MSG_MS ? timeout_ms : WEFT_BOOT_FIRST_MSG_MS;
  int nofile = gate_nofile();
  g->pend_max = gate_clamp(nofile / GATE_FD_SHARE, GATE_MIN_PENDING, WEFT_GATE_MAX_PENDING);
  atomic_store(&gate_pending_all_max,
               gate_clamp(nofile / GATE_FD_SHARE_ALL, GATE_MIN_PENDING, GATE_MAX_PENDING_ALL));
  g->admit = admit;
  g->ctx = ctx;
  g->abort_flag = abort_flag;
}

void weft_gate_set_refusal(struct weft_gate *g, weft_gate_refusal_fn refusal) {
  g->refusal = refusal;
}

static int gate_aborted(const struct weft_gate *g) {
  return g->abort_flag != NULL && atomic_load(g->abort_flag) != 0;
}

/* Drops a connection that has not presented the secret: counted per
 * source, not WARNed one by one (bootstrap_flood.c). */
static void gate_drop_stranger(struct weft_gate *g, struct weft_gate_pending *p,
                               enum weft_gate_drop kind, const char *reason) {
  weft_gate_flood_note(&g->flood, g->who, &p->from, kind, reason);
  weft_socket_close(&p->fd);
}

/* A wrong secret may be a rank of a misconfigured job: it hears why before
 * the connection closes. What it sent is read first, so that close does not
 * reset the connection before the refusal is read. Nothing here waits. */
static void gate_refuse(struct weft_gate *g, struct weft_gate_pending *p) {
  if (g->refusal != NULL) {
    ssize_t n = 1;
    while (p->got < g->first_size && n > 0) {
      n = recv(p->fd, p->buf + p->got, g->first_size - p->got, MSG_DONTWAIT);
      if (n > 0) p->got += (size_t)n;
    }
    size_t len = 0;
    const void *msg = g->refusal(g->ctx, p->buf, p->got, &len);
    if (msg != NULL) (void)send(p->fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL);
  }
  gate_drop_stranger(g, p, WEFT_GATE_DROP_WRONG_SECRET, "wrong secret");
}

static ncclResult_t gate_grow(struct weft_gate *g, int nextra) {
  if (g->pend_cap < g->pend_max) {
    void *p = realloc(g->pend, (size_t)g->pend_max * sizeof(*g->pend));
    if (p == NULL) goto oom;
    g->pend = p;
    g->pend_cap = g->pend_max;
  }
  int need = nextra + 1 + g->pend_cap;
  if (need > g->pfd_cap) {
    void *p = realloc(g->pfd, (size_t)need * sizeof(*g->pfd));
    if (p == NULL) goto oom;
    g->pfd = p;
    g->pfd_cap = need;
  }
  return ncclSuccess;
oom:
  WARN("%s: out of memory for pending connections", g->who);
  return ncclSystemError;
}

/* Makes room for one more pending connection by evicting the oldest (the
 * list is in accept order). Not the oldest silent one: a stranger sending a
 * byte or two could then make a rank's just-accepted connection the first
 * to go; as it is, a rank is evicted only after pend_max newer arrivals. */
static void gate_evict_oldest(struct weft_gate *g) {
  int victim = 0;
  char reason[128];
  snprintf(reason, sizeof(reason),
           "evicted, the oldest of %d connections waiting to present the secret", g->npend);
  gate_drop_stranger(g, &g->pend[victim], WEFT_GATE_DROP_EVICTED, reason);
  memmove(&g->pend[victim], &g->pend[victim + 1],
          (size_t)(g->npend - victim - 1) * sizeof(*g->pend));
  g->npend--;
  atomic_fetch_sub(&gate_pending_all, 1);
}

/* Reads what a pending connection sent; admits or drops it once it is
 * decided. Leaves p->fd at -1 when the connection left the pending list. */
static void gate_serve_pending(struct weft_gate *g, struct weft_gate_pending *p) {
  char reason[96];
  while (p->got < g->first_size) {
    ssize_t n = recv(p->fd, p->buf + p->got, g->first_size - p->got, MSG_DONTWAIT);
    if (n > 0) {
      p->got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    snprintf(reason, sizeof(reason), "connection closed by it before presenting the secret (%s)",
             n == 0 ? "EOF" : strerror(errno));
    gate_drop_stranger(g, p, WEFT_GATE_DROP_CLOSED, reason);
    return;
  }
  if (p->got >= sizeof(uint64_t) && memcmp(p->buf, &g->secret, sizeof(uint64_t)) != 0) {
    gate_refuse(g, p);
    return;
  }
  if (p->got < g->first_size) return;
  const char *why = g->admit(g->ctx, p->fd, p->buf);
  if (why != NULL) {
    /* It held the secret: a rank of this job with a bad request, worth a WARN each. */
    char from[INET6_ADDRSTRLEN + 16];
    WARN("%s: dropped connection from %s: %s", g->who,
         weft_sockaddr_str(&p->from, from, sizeof(from)), why);
    weft_socket_close(&p->fd);
  } else {
    p->fd = -1; /* now owned by the admit callback */
  }
}

/* An accept that fails for lack of fds or memory must not stop the
 * listener: it rests a moment, so a lasting failure cannot make it spin,
 * and serves on. Said once per gate. */
static void gate_accept_failed(struct weft_gate *g, int err) {
  g->accept_pause_until = weft_time_ms() + GATE_ACCEPT_PAUSE_MS;
  if (g->accept_failed_logged) return;
  g->accept_failed_logged = 1;
  WARN(
      "%s: accept failed: %s (%d connections waiting to present the secret); retrying every "
      "%d ms",
      g->who, strerror(err), g->npend, GATE_ACCEPT_PAUSE_MS);
}

/* Accepts what the backlog holds, up to a batch, into the pending list; each
 * new connection is read at once, since a rank's first message is usually
 * there already. */
static void gate_accept(struct weft_gate *g) {
  for (int i = 0; i < GATE_ACCEPT_BATCH; i++) {
    struct weft_gate_pending p = {.fd = -1};
    socklen_t len = sizeof(p.from);
    p.fd = accept4(g->listen_fd, &p.from.sa, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (p.fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) gate_accept_failed(g, errno);
      return;
    }
    int one = 1;
    (void)setsockopt(p.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    p.deadline = weft_time_ms() + g->first_ms;
    gate_serve_pending(g, &p);
    if (p.fd < 0) continue;
    /* Full, or the process's share is spent: make room here. A gate
     * always keeps room for one, so each rank can still be reached. */
    if (g->npend >= g->pend_max ||
        (g->npend > 0 && atomic_load(&gate_pending_all) >= atomic_load(&gate_pending_all_max)))
      gate_evict_oldest(g);
    g->pend[g->npend++] = p;
    atomic_fetch_add(&gate_pending_all, 1);
  }
}

/* Serves the pending connections polled in pfd, drops expired ones and
 * compacts the list. */
static void gate_serve_all(struct weft_gate *g, const struct pollfd *pfd, int npolled) {
  int64_t now = weft_time_ms();
  char reason[64];
  for (int i = 0; i < npolled; i++) {
    struct weft_gate_pending *p = &g->pend[i];
    if (pfd[i].revents) gate_serve_pending(g, p);
    if (p->fd >= 0 && now >= p->deadline) {
      snprintf(reason, sizeof(reason), "no complete first message within %d ms", (int)g->first_ms);
      gate_drop_stranger(g, p, WEFT_GATE_DROP_SILENT, reason);
    }
  }
  int keep = 0;
  for (int i = 0; i < g->npend; i++)
    if (g->pend[i].fd >= 0) g->pend[keep++] = g->pend[i];
  atomic_fetch_sub(&gate_pending_all, g->npend - keep);
  g->npend = keep;
}

static int gate_timeout_ms(const struct weft_gate *g, int64_t deadline) {
  int64_t until = deadline;
  if (g->accept_pause_until > weft_time_ms() && g->accept_pause_until < until)
    until = g->accept_pause_until;
  for (int i = 0; i < g->npend; i++)
    if (g->pend[i].deadline < until) until = g->pend[i].deadline;
  int64_t left = until - weft_time_ms();
  if (g->abort_flag != NULL && left > GATE_ABORT_SLICE_MS) left = GATE_ABORT_SLICE_MS;
  return left < 0 ? 0 : (int)left;
}

ncclResult_t weft_gate_poll(struct weft_gate *g, struct pollfd *extra, int nextra,
                            int64_t deadline) {
  if (gate_aborted(g)) goto aborted;
  WEFT_CHECK(gate_grow(g, nextra));
  int n = 0;
  for (int i = 0; i < nextra; i++) g->pfd[n++] = extra[i];
  int listen_at = n;
  /* poll() ignores a negative fd: that is how the listener rests. */
  int resting = g->accept_pause_until > weft_time_ms();
  g->pfd[n++] = (struct pollfd){.fd = resting ? -1 : g->listen_fd, .events = POLLIN};
  int npolled = g->npend;
  for (int i = 0; i < npolled; i++)
    g->pfd[n++] = (struct pollfd){.fd = g->pend[i].fd, .events = POLLIN};
  if (poll(g->pfd, (nfds_t)n, gate_timeout_ms(g, deadline)) < 0 && errno != EINTR) {
    WARN("%s: poll failed: %s", g->who, strerror(errno));
    return ncclSystemError;
  }
  for (int i = 0; i < nextra; i++) extra[i].revents = g->pfd[i].revents;
  if (gate_aborted(g)) goto aborted;
  /* Pending first, while pfd still lines up with the list; then the new one. */
  gate_serve_all(g, g->pfd + listen_at + 1, npolled);
  if (g->pfd[listen_at].revents & POLLIN) gate_accept(g);
  return ncclSuccess;
aborted:
  INFO(WEFT_BOOTSTRAP, "%s: wait aborted", g->who);
  return ncclInternalError;
}

void weft_gate_close(struct weft_gate *g) {
  weft_gate_flood_flush(&g->flood, g->who);
  for (int i = 0; i < g->npend; i++) weft_socket_close(&g->pend[i].fd);
  atomic_fetch_sub(&gate_pending_all, g->npend);
  weft_socket_close(&g->listen_fd);
  free(g->pend);
  free(g->pfd);
  g->pend = NULL;
  g->pfd = NULL;
  g->npend = g->pend_cap = g->pfd_cap = 0;
}
