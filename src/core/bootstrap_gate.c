/* The gate in front of every bootstrap listener (the root's and each
 * rank's): accepts connections, reads their first message concurrently and
 * without blocking, and admits only those that present the id's secret. A
 * wrong secret, garbage or silence is dropped with a WARN and the listener
 * keeps serving. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap_internal.h"
#include "core/check.h"
#include "core/debug.h"
#include "core/param.h"

/* Abortable waits poll in slices this long, so an abort is seen promptly. */
#define GATE_ABORT_SLICE_MS 100
/* A readable listener whose accept finds nothing waits this long at most. */
#define GATE_ACCEPT_WAIT_MS 100
#define GATE_ACCEPT_PAUSE_MS 100

void weft_gate_init(struct weft_gate *g, const char *who, int listen_fd, uint64_t secret,
                    size_t first_size, weft_gate_admit_fn admit, void *ctx,
                    const _Atomic int *abort_flag) {
  memset(g, 0, sizeof(*g));
  snprintf(g->who, sizeof(g->who), "%s", who);
  g->listen_fd = listen_fd;
  g->secret = secret;
  g->first_size = first_size;
  int64_t timeout_ms = weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
  g->first_ms = timeout_ms < WEFT_BOOT_FIRST_MSG_MS ? timeout_ms : WEFT_BOOT_FIRST_MSG_MS;
  g->admit = admit;
  g->ctx = ctx;
  g->abort_flag = abort_flag;
}

static int gate_aborted(const struct weft_gate *g) {
  return g->abort_flag != NULL && atomic_load(g->abort_flag) != 0;
}

static void gate_drop(struct weft_gate_pending *p, const char *who, const char *reason) {
  char from[INET6_ADDRSTRLEN + 16];
  if (reason != NULL)
    WARN("%s: dropped connection from %s: %s", who, weft_sockaddr_str(&p->from, from, sizeof(from)),
         reason);
  weft_socket_close(&p->fd);
}

static ncclResult_t gate_grow(struct weft_gate *g, int nextra) {
  if (g->npend == g->pend_cap) {
    int cap = g->pend_cap ? 2 * g->pend_cap : 8;
    void *p = realloc(g->pend, (size_t)cap * sizeof(*g->pend));
    if (p == NULL) goto oom;
    g->pend = p;
    g->pend_cap = cap;
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

/* Accepts one connection into the pending list. A failed accept (a client
 * that reset at once, or no fds left) is WARNed by the socket layer but must
 * not stop the listener: it rests a moment, so a lasting failure cannot
 * make it spin, and serves on. */
static void gate_accept(struct weft_gate *g) {
  int fd;
  int64_t deadline = weft_time_ms() + GATE_ACCEPT_WAIT_MS;
  if (weft_socket_accept(g->listen_fd, deadline, &fd) != ncclSuccess) {
    g->accept_pause_until = weft_time_ms() + GATE_ACCEPT_PAUSE_MS;
    return;
  }
  struct weft_gate_pending p = {.fd = fd, .deadline = weft_time_ms() + g->first_ms};
  socklen_t len = sizeof(p.from);
  if (getpeername(fd, &p.from.sa, &len) != 0) memset(&p.from, 0, sizeof(p.from));
  if (g->npend >= WEFT_GATE_MAX_PENDING) {
    gate_drop(&p, g->who, "too many connections waiting to present the secret");
    return;
  }
  g->pend[g->npend++] = p;
}

/* Reads what a pending connection sent; admits or drops it once it is
 * decided. Leaves p->fd at -1 when the connection left the pending list. */
static void gate_serve_pending(struct weft_gate *g, struct weft_gate_pending *p) {
  char what[INET6_ADDRSTRLEN + 64], from[INET6_ADDRSTRLEN + 16];
  snprintf(what, sizeof(what), "%s (before presenting the secret to %s)",
           weft_sockaddr_str(&p->from, from, sizeof(from)), g->who);
  if (weft_socket_recv_some(p->fd, p->buf, g->first_size, &p->got, what) != ncclSuccess) {
    gate_drop(p, g->who, NULL); /* recv_some has WARNed */
    return;
  }
  if (p->got >= sizeof(uint64_t) && memcmp(p->buf, &g->secret, sizeof(uint64_t)) != 0) {
    gate_drop(p, g->who, "wrong secret");
    return;
  }
  if (p->got < g->first_size) return;
  const char *reason = g->admit(g->ctx, p->fd, p->buf);
  if (reason != NULL)
    gate_drop(p, g->who, reason);
  else
    p->fd = -1; /* now owned by the admit callback */
}

/* Serves the pending connections polled in pfd, drops expired ones and
 * compacts the list. */
static void gate_serve_all(struct weft_gate *g, const struct pollfd *pfd) {
  int64_t now = weft_time_ms();
  char reason[64];
  for (int i = 0; i < g->npend; i++) {
    struct weft_gate_pending *p = &g->pend[i];
    if (pfd[i].revents) gate_serve_pending(g, p);
    if (p->fd >= 0 && now >= p->deadline) {
      snprintf(reason, sizeof(reason), "no complete first message within %d ms", (int)g->first_ms);
      gate_drop(p, g->who, reason);
    }
  }
  int keep = 0;
  for (int i = 0; i < g->npend; i++)
    if (g->pend[i].fd >= 0) g->pend[keep++] = g->pend[i];
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
  gate_serve_all(g, g->pfd + listen_at + 1);
  if (g->pfd[listen_at].revents & POLLIN) gate_accept(g);
  return ncclSuccess;
aborted:
  INFO(WEFT_BOOTSTRAP, "%s: wait aborted", g->who);
  return ncclInternalError;
}

void weft_gate_close(struct weft_gate *g) {
  for (int i = 0; i < g->npend; i++) weft_socket_close(&g->pend[i].fd);
  weft_socket_close(&g->listen_fd);
  free(g->pend);
  free(g->pfd);
  g->pend = NULL;
  g->pfd = NULL;
  g->npend = g->pend_cap = g->pfd_cap = 0;
}
