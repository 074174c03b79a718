/* Moving data over connections, whatever their transport: transfers
 * progressed together until all are done, with waits that always end
 * (deadline or abort). A wait polls SPIN_PURE times flat out, then keeps
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

#include "base/check.h"
#include "base/cpus.h"
#include "base/debug.h"
#include "base/fail_note.h"
#include "base/param.h"
#include "transport/socket.h"
#include "transport/transport.h"

/* Polls before a wait starts yielding. */
#define SPIN_PURE 16
/* ... and when every rank has a core: a few microseconds, past a round
 * trip between cores, short enough that a rank whose peer lost its core
 * to another process soon hands its own over. */
#define SPIN_PURE_ALONE 256
/* Longest single sleep: how late an abort or a deadline may be noticed. */
#define WAIT_MAX_SLEEP_MS 100
/* Descriptors one sleep watches; past this it naps instead. */
#define WAIT_MAX_FDS 64

/* What the transport can move of x now; a send with a mirror goes through
 * send_mirror. */
static ncclResult_t xfer_move(struct weft_xfer *x, char *mirror, int *moved) {
  size_t before = x->done;
  if (!weft_xfer_pending(x)) return ncclSuccess;
  if (mirror != NULL)
    WEFT_CHECK(x->conn->ops->send_mirror(x->conn, x->buf, x->bytes, mirror, &x->done));
  else if (x->conn->dir == WEFT_CONN_SEND)
    WEFT_CHECK(x->conn->ops->send(x->conn, x->buf, x->bytes, &x->done));
  else
    WEFT_CHECK(x->conn->ops->recv(x->conn, x->buf, x->bytes, &x->done));
  if (x->done != before) *moved = 1;
  return ncclSuccess;
}

ncclResult_t weft_xfer_progress(struct weft_xfer *x, int *moved) {
  return xfer_move(x, NULL, moved);
}

ncclResult_t weft_xfer_send_mirror(struct weft_xfer *x, char *mirror, int *moved) {
  return xfer_move(x, mirror, moved);
}

int64_t weft_spin_pure(int local_ranks) {
  return local_ranks <= weft_cpus_usable() ? SPIN_PURE_ALONE : SPIN_PURE;
}

void weft_progress_wait_init(struct weft_progress_wait *w, int64_t window_ms, int64_t pure) {
  if (window_ms <= 0) window_ms = weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
  w->window_ms = window_ms;
  w->spin = weft_param_int(WEFT_PARAM_SPIN);
  w->pure = pure;
  weft_progress_wait_moved(w);
}

/* Lists the pending transfers: "recv from rank 1 on channel 0 (0 of 64
 * bytes); send to ...", as much as fits. */
static void describe_pending(struct weft_xfer *const *x, int n, char *buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && len + 1 < size; i++) {
    const struct weft_conn *c = x[i]->conn;
    int k = snprintf(buf + len, size - len, "%s%s rank %d on channel %d via %s (%zu of %zu bytes)",
                     i ? "; " : "", c->dir == WEFT_CONN_SEND ? "send to" : "recv from", c->peer,
                     c->channel, c->ops->name, x[i]->done, x[i]->bytes);
    if (k < 0) break;
    len += (size_t)k;
  }
}

/* Without a pollable descriptor: yield first, then nap 50 us doubling to
 * 1 ms while nothing moves. */
static void wait_nap(struct weft_progress_wait *w) {
  if (w->naps++ < 16) {
    sched_yield();
    return;
  }
  int shift = w->naps - 16 < 5 ? w->naps - 16 : 5;
  long us = 50L << shift;
  if (us > 1000) us = 1000;
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* Sleeps until a pending transfer can move, or for at most max_ms. */
static ncclResult_t wait_sleep(struct weft_progress_wait *w, struct weft_xfer *const *x, int n,
                               int max_ms) {
  struct pollfd p[WAIT_MAX_FDS];
  int np = 0;
  for (int i = 0; i < n; i++) {
    const struct weft_conn *c = x[i]->conn;
    int fd = c->ops->wait_fd ? c->ops->wait_fd(c) : -1;
    if (fd < 0 || np == WAIT_MAX_FDS) {
      wait_nap(w);
      return ncclSuccess;
    }
    p[np++] = (struct pollfd){.fd = fd, .events = POLLIN};
  }
  if (poll(p, (nfds_t)np, max_ms) < 0 && errno != EINTR) {
    WARN("rank %d: poll on connections failed: %s", x[0]->conn->rank, strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* The window bounds the time without progress: the clock restarts
 * whenever bytes move (weft_progress_wait_moved), so a long transfer that
 * keeps moving is never cut short while a stalled peer is still caught.
 * Abort returns ncclInternalError (logged at INFO, as the user asked for
 * it), like an aborted bootstrap wait. */
ncclResult_t weft_conn_progress_wait(struct weft_progress_wait *w, struct weft_xfer *const *pending,
                                     int n, const _Atomic int *abort_flag,
                                     weft_wait_describe_fn describe, void *ctx) {
  char what[160], stalled[512];
  if (++w->idle <= w->spin && (w->idle & 63) != 0) {
    if (w->idle > w->pure) sched_yield();
    return ncclSuccess;
  }
  int rank = n > 0 ? pending[0]->conn->rank : -1;
  int flag = abort_flag != NULL ? atomic_load_explicit(abort_flag, memory_order_acquire) : 0;
  if (flag != 0 && flag != WEFT_ABORT_SOFT) {
    describe_pending(pending, n, stalled, sizeof(stalled));
    INFO(WEFT_NET, "rank %d: communicator aborted (%s)", rank, stalled);
    return ncclInternalError;
  }
  if (w->idle <= w->spin) return ncclSuccess;
  int64_t now = weft_time_ms();
  if (w->stalled_since < 0) w->stalled_since = now;
  /* A peer aborted: what it sent still arrives, then the wait ends. */
  if (flag == WEFT_ABORT_SOFT && now - w->stalled_since >= WEFT_FAIL_SOFT_MS) {
    describe_pending(pending, n, stalled, sizeof(stalled));
    INFO(WEFT_NET, "rank %d: a peer aborted the communicator (%s)", rank, stalled);
    return ncclInternalError;
  }
  if (now - w->stalled_since >= w->window_ms) {
    what[0] = '\0';
    if (describe != NULL) describe(ctx, what, sizeof(what));
    describe_pending(pending, n, stalled, sizeof(stalled));
    WARN("rank %d: %s%sno progress for %lld s; stalled: %s", rank, what, what[0] ? ": " : "",
         (long long)((now - w->stalled_since) / 1000), stalled);
    if (n > 0)
      weft_failure_note(pending[0]->conn->peer, WEFT_FAIL_STALLED, "nothing moved for %lld s: %s",
                        (long long)((now - w->stalled_since) / 1000), stalled);
    return ncclSystemError;
  }
  if (n == 0) {
    wait_nap(w);
    return ncclSuccess;
  }
  int64_t left = w->stalled_since + w->window_ms - now;
  return wait_sleep(w, pending, n, left < WAIT_MAX_SLEEP_MS ? (int)left : WAIT_MAX_SLEEP_MS);
}

ncclResult_t weft_conn_sendrecv(struct weft_conn *send, const void *sbuf, size_t sbytes,
                                struct weft_conn *recv, void *rbuf, size_t rbytes,
                                int64_t deadline_ms) {
  struct weft_xfer s = {send, (char *)sbuf, send ? sbytes : 0, 0};
  struct weft_xfer r = {recv, rbuf, recv ? rbytes : 0, 0};
  struct weft_progress_wait w;
  int64_t window = deadline_ms - weft_time_ms();
  weft_progress_wait_init(&w, window > 0 ? window : 1, SPIN_PURE);
  const _Atomic int *abort_flag = send ? send->abort_flag : recv ? recv->abort_flag : NULL;
  while (weft_xfer_pending(&s) || weft_xfer_pending(&r)) {
    int moved = 0;
    WEFT_CHECK(weft_xfer_progress(&s, &moved));
    WEFT_CHECK(weft_xfer_progress(&r, &moved));
    if (moved) {
      weft_progress_wait_moved(&w);
      continue;
    }
    struct weft_xfer *pending[2];
    int n = 0;
    if (weft_xfer_pending(&r)) pending[n++] = &r;
    if (weft_xfer_pending(&s)) pending[n++] = &s;
    WEFT_CHECK(weft_conn_progress_wait(&w, pending, n, abort_flag, NULL, NULL));
  }
  return ncclSuccess;
}
