/* Moving data over connections, whatever their transport: one send and one
 * receive progressed together until both are done, with waits that always
 * end (deadline or abort). A wait polls SPIN_PURE times flat out, then keeps
 * polling but yields the CPU after each poll, up to WEFT_SPIN polls, then
 * sleeps in poll(). The yield is what keeps oversubscribed hosts (8 ranks
 * on 2 cores) fast: a spinning rank hands its core to the peer it waits
 * for instead of burning a whole time slice; with the cores free it costs
 * a syscall. */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/debug.h"
#include "core/param.h"
#include "transport/socket.h"
#include "transport/transport.h"

/* Polls before a wait starts yielding. */
#define SPIN_PURE 16
/* Longest single sleep: how late an abort or a deadline may be noticed. */
#define SENDRECV_MAX_SLEEP_MS 100

/* One direction's progress. */
struct xfer {
  struct weft_conn *conn;
  char *buf;
  size_t bytes;
  size_t done;
};

static int xfer_pending(const struct xfer *x) {
  return x->done < x->bytes;
}

static ncclResult_t xfer_progress(struct xfer *x, int *moved) {
  size_t before = x->done;
  if (!xfer_pending(x)) return ncclSuccess;
  if (x->conn->dir == WEFT_CONN_SEND)
    WEFT_CHECK(x->conn->ops->send(x->conn, x->buf, x->bytes, &x->done));
  else
    WEFT_CHECK(x->conn->ops->recv(x->conn, x->buf, x->bytes, &x->done));
  if (x->done != before) *moved = 1;
  return ncclSuccess;
}

static int conn_aborted(const struct weft_conn *c) {
  return c->abort_flag != NULL && atomic_load_explicit(c->abort_flag, memory_order_acquire);
}

/* Says what is still pending, for the timeout and abort messages. */
static void describe_pending(const struct xfer *s, const struct xfer *r, char *buf, size_t size) {
  int n = 0;
  buf[0] = '\0';
  if (xfer_pending(r))
    n = snprintf(buf, size, "recv of %zu bytes from rank %d, %zu done", r->bytes, r->conn->peer,
                 r->done);
  if (xfer_pending(s) && n >= 0 && (size_t)n < size)
    snprintf(buf + n, size - (size_t)n, "%ssend of %zu bytes to rank %d, %zu done",
             n > 0 ? "; " : "", s->bytes, s->conn->peer, s->done);
}

/* Sleeps until a pending direction can move, or for at most max_ms. Without
 * a pollable descriptor it yields, then naps for a growing while. */
static ncclResult_t sendrecv_sleep(const struct xfer *s, const struct xfer *r, int max_ms,
                                   int *naps) {
  struct pollfd p[2];
  int np = 0, no_fd = 0;
  const struct xfer *x[2] = {s, r};
  for (int i = 0; i < 2; i++) {
    if (!xfer_pending(x[i])) continue;
    int fd = x[i]->conn->ops->wait_fd ? x[i]->conn->ops->wait_fd(x[i]->conn) : -1;
    if (fd < 0) {
      no_fd = 1;
      continue;
    }
    p[np++] = (struct pollfd){.fd = fd, .events = i == 0 ? POLLOUT : POLLIN};
  }
  if (no_fd) {
    /* Yield first; nap 50 us doubling to 1 ms while nothing moves. */
    if ((*naps)++ < 16) {
      sched_yield();
      return ncclSuccess;
    }
    long us = 50L << (*naps - 16 < 5 ? *naps - 16 : 5);
    if (us > 1000) us = 1000;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
    return ncclSuccess;
  }
  if (poll(p, (nfds_t)np, max_ms) < 0 && errno != EINTR) {
    WARN("rank %d: poll on connections failed: %s", (s->conn ? s->conn : r->conn)->rank,
         strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* The deadline bounds the time without progress: its distance from now is
 * the window, and the clock restarts whenever bytes move, so a long
 * transfer that keeps moving is never cut short while a stalled peer is
 * still caught. Abort returns ncclInternalError (logged at INFO, as the
 * user asked for it), like an aborted bootstrap wait. */
ncclResult_t weft_conn_sendrecv(struct weft_conn *send, const void *sbuf, size_t sbytes,
                                struct weft_conn *recv, void *rbuf, size_t rbytes,
                                int64_t deadline_ms) {
  struct xfer s = {send, (char *)sbuf, send ? sbytes : 0, 0};
  struct xfer r = {recv, rbuf, recv ? rbytes : 0, 0};
  int64_t window = deadline_ms - weft_time_ms();
  int64_t stalled_since = -1;
  int64_t spin = weft_param_int(WEFT_PARAM_SPIN);
  int64_t idle = 0;
  int naps = 0;
  while (xfer_pending(&s) || xfer_pending(&r)) {
    int moved = 0;
    WEFT_CHECK(xfer_progress(&s, &moved));
    WEFT_CHECK(xfer_progress(&r, &moved));
    if (moved) {
      idle = 0, naps = 0, stalled_since = -1;
      continue;
    }
    const struct weft_conn *c = xfer_pending(&r) ? recv : send;
    char what[192];
    if (++idle <= spin && (idle & 63) != 0) {
      if (idle > SPIN_PURE) sched_yield();
      continue;
    }
    if (conn_aborted(c)) {
      describe_pending(&s, &r, what, sizeof(what));
      INFO(WEFT_NET, "rank %d: communicator aborted (%s)", c->rank, what);
      return ncclInternalError;
    }
    if (idle <= spin) continue;
    int64_t now = weft_time_ms();
    if (stalled_since < 0) stalled_since = now;
    if (now - stalled_since >= window) {
      describe_pending(&s, &r, what, sizeof(what));
      WARN("rank %d: no progress with rank %d for %lld s (%s)", c->rank, c->peer,
           (long long)((now - stalled_since) / 1000), what);
      return ncclSystemError;
    }
    int64_t left = stalled_since + window - now;
    int max_ms = left < SENDRECV_MAX_SLEEP_MS ? (int)left : SENDRECV_MAX_SLEEP_MS;
    WEFT_CHECK(sendrecv_sleep(&s, &r, max_ms, &naps));
  }
  return ncclSuccess;
}
