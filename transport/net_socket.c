/* The socket transport: a connection is one TCP stream. The receiver
 * listens on a fresh port and hands the sender its address and a random
 * nonce (the handle); the sender connects and introduces itself with the
 * nonce, the communicator's hash and its rank, and the receiver drops any
 * connection that does not match, so a stray or stale client cannot take
 * the link. After that, send/recv are non-blocking progress calls. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/fail_note.h"
#include "transport/socket.h"
#include "transport/transport.h"

#define NET_SOCKET_MAGIC 0x77656674534f434bULL /* "weftSOCK" */
/* How long an accepted client may take to introduce itself. */
#define HELLO_TIMEOUT_MS 10000
/* How often a wait for the peer looks at the abort flag. */
#define ABORT_POLL_MS 100

struct net_socket_handle {
  uint64_t magic;
  uint64_t nonce;
  union weft_sockaddr addr;
};

_Static_assert(sizeof(struct net_socket_handle) <= WEFT_CONN_HANDLE_BYTES,
               "socket handle must fit the connection handle");

/* What the sender presents first on the new stream. */
struct net_socket_hello {
  uint64_t magic;
  uint64_t nonce;
  uint64_t comm_hash;
  int32_t rank; /* the sender */
  int32_t peer; /* the receiver it means to reach */
  int32_t channel;
  int32_t pad;
};

struct net_socket_conn {
  int fd;
  int listen_fd;
  uint64_t nonce;
  char what[32]; /* "rank 3", for messages */
};

static ncclResult_t net_socket_can_connect(const struct weft_transport_peer *self,
                                           const struct weft_transport_peer *peer, int *out) {
  (void)self, (void)peer;
  *out = 1; /* TCP reaches every rank the bootstrap reached */
  return ncclSuccess;
}

static ncclResult_t net_socket_priv(struct weft_conn *conn, struct net_socket_conn **out) {
  if (conn->priv == NULL) {
    struct net_socket_conn *p = calloc(1, sizeof(*p));
    if (p == NULL) {
      WARN("rank %d: out of memory for a socket connection with rank %d", conn->rank, conn->peer);
      return ncclSystemError;
    }
    p->fd = p->listen_fd = -1;
    snprintf(p->what, sizeof(p->what), "rank %d", conn->peer);
    conn->priv = p;
  }
  *out = conn->priv;
  return ncclSuccess;
}

/* A nonce from the kernel's random pool (transports use only core's log,
 * error and param headers, so not the bootstrap's helper). */
static ncclResult_t net_socket_nonce(const struct weft_conn *conn, uint64_t *out) {
  ssize_t n;
  do {
    n = getrandom(out, sizeof(*out), 0);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(*out)) {
    WARN("rank %d: getrandom for the link from rank %d failed: %s", conn->rank, conn->peer,
         n < 0 ? strerror(errno) : "short read");
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* The receiver listens; the sender has nothing to set up. */
static ncclResult_t net_socket_setup(struct weft_conn *conn, void *handle_out) {
  struct net_socket_conn *p;
  WEFT_CHECK(net_socket_priv(conn, &p));
  if (conn->dir == WEFT_CONN_SEND) return ncclSuccess;
  struct net_socket_handle h = {.magic = NET_SOCKET_MAGIC};
  WEFT_CHECK(weft_socket_local_addr(&h.addr));
  WEFT_CHECK(weft_socket_listen(&h.addr, &p->listen_fd));
  WEFT_CHECK(net_socket_nonce(conn, &h.nonce));
  p->nonce = h.nonce;
  memset(handle_out, 0, WEFT_CONN_HANDLE_BYTES);
  memcpy(handle_out, &h, sizeof(h));
  return ncclSuccess;
}

static ncclResult_t net_socket_connect_send(struct weft_conn *conn, struct net_socket_conn *p,
                                            const void *peer_handle, int64_t deadline_ms) {
  struct net_socket_handle h;
  memcpy(&h, peer_handle, sizeof(h));
  if (h.magic != NET_SOCKET_MAGIC) {
    WARN("rank %d: the connection handle from rank %d is not a socket handle", conn->rank,
         conn->peer);
    return ncclInternalError;
  }
  struct net_socket_hello hello = {.magic = NET_SOCKET_MAGIC,
                                   .nonce = h.nonce,
                                   .comm_hash = conn->comm_hash,
                                   .rank = conn->rank,
                                   .peer = conn->peer,
                                   .channel = conn->channel};
  WEFT_CHECK(weft_socket_connect(&h.addr, deadline_ms, &p->fd));
  WEFT_CHECK(weft_socket_send_all(p->fd, &hello, sizeof(hello), deadline_ms, p->what));
  return weft_socket_set_data_opts(p->fd);
}

/* Says why a hello does not belong on this link, or NULL if it does. */
static const char *net_socket_hello_mismatch(const struct weft_conn *conn,
                                             const struct net_socket_conn *p,
                                             const struct net_socket_hello *m) {
  if (m->magic != NET_SOCKET_MAGIC) return "not a weft socket client";
  if (m->nonce != p->nonce) return "wrong nonce";
  if (m->comm_hash != conn->comm_hash) return "another communicator";
  if (m->rank != conn->peer || m->peer != conn->rank) return "another rank";
  if (m->channel != conn->channel) return "another channel";
  return NULL;
}

/* Waits for a client on the listening socket, looking at the abort flag. */
static ncclResult_t net_socket_wait_client(struct weft_conn *conn, struct net_socket_conn *p,
                                           int64_t deadline_ms) {
  for (;;) {
    if (conn->abort_flag && atomic_load(conn->abort_flag)) {
      INFO(WEFT_NET, "rank %d: aborted while waiting for rank %d to connect", conn->rank,
           conn->peer);
      return ncclInternalError;
    }
    int64_t left = deadline_ms - weft_time_ms();
    if (left <= 0) {
      WARN("rank %d: rank %d did not connect its ring link in time", conn->rank, conn->peer);
      return ncclSystemError;
    }
    struct pollfd pf = {.fd = p->listen_fd, .events = POLLIN};
    int n = poll(&pf, 1, left < ABORT_POLL_MS ? (int)left : ABORT_POLL_MS);
    if (n > 0) return ncclSuccess;
    if (n < 0 && errno != EINTR) {
      WARN("rank %d: poll waiting for rank %d failed: %s", conn->rank, conn->peer, strerror(errno));
      return ncclSystemError;
    }
  }
}

static ncclResult_t net_socket_connect_recv(struct weft_conn *conn, struct net_socket_conn *p,
                                            int64_t deadline_ms) {
  for (;;) {
    WEFT_CHECK(net_socket_wait_client(conn, p, deadline_ms));
    int fd = -1;
    WEFT_CHECK(weft_socket_accept(p->listen_fd, deadline_ms, &fd));
    struct net_socket_hello m;
    int64_t hello_deadline = weft_time_ms() + HELLO_TIMEOUT_MS;
    if (hello_deadline > deadline_ms) hello_deadline = deadline_ms;
    const char *why = "no introduction";
    if (weft_socket_recv_all(fd, &m, sizeof(m), hello_deadline, "a connecting client") ==
        ncclSuccess)
      why = net_socket_hello_mismatch(conn, p, &m);
    if (why == NULL) {
      p->fd = fd;
      weft_socket_close(&p->listen_fd);
      return weft_socket_set_data_opts(p->fd);
    }
    /* Not our peer: drop it and keep listening until the deadline. */
    WARN("rank %d: dropped a connection on the link from rank %d: %s", conn->rank, conn->peer, why);
    weft_socket_close(&fd);
  }
}

static ncclResult_t net_socket_connect(struct weft_conn *conn, const void *peer_handle,
                                       int64_t deadline_ms) {
  struct net_socket_conn *p;
  WEFT_CHECK(net_socket_priv(conn, &p));
  if (conn->dir == WEFT_CONN_SEND)
    return net_socket_connect_send(conn, p, peer_handle, deadline_ms);
  return net_socket_connect_recv(conn, p, deadline_ms);
}

/* A link closed mid-call: the peer's process exited (a peer that aborts
 * or fails says so first, over core/failure.c's notices). */
static ncclResult_t net_socket_closed(const struct weft_conn *conn, ncclResult_t res) {
  if (res == ncclRemoteError)
    weft_failure_note(conn->peer, WEFT_FAIL_DIED,
                      "its socket closed mid-call: its process exited (channel %d)", conn->channel);
  return res;
}

static ncclResult_t net_socket_send(struct weft_conn *conn, const void *buf, size_t bytes,
                                    size_t *done) {
  struct net_socket_conn *p = conn->priv;
  return net_socket_closed(conn, weft_socket_send_some(p->fd, buf, bytes, done, p->what));
}

static ncclResult_t net_socket_recv(struct weft_conn *conn, void *buf, size_t bytes, size_t *done) {
  struct net_socket_conn *p = conn->priv;
  return net_socket_closed(conn, weft_socket_recv_some(p->fd, buf, bytes, done, p->what));
}

static int net_socket_wait_fd(const struct weft_conn *conn) {
  const struct net_socket_conn *p = conn->priv;
  return p ? p->fd : -1;
}

static ncclResult_t net_socket_close(struct weft_conn *conn) {
  struct net_socket_conn *p = conn->priv;
  if (p == NULL) return ncclSuccess;
  weft_socket_close(&p->fd);
  weft_socket_close(&p->listen_fd);
  free(p);
  conn->priv = NULL;
  return ncclSuccess;
}

const struct weft_transport_ops weft_net_socket_ops = {
    .size = sizeof(struct weft_transport_ops),
    .name = "net_socket",
    .can_connect = net_socket_can_connect,
    .setup = net_socket_setup,
    .connect = net_socket_connect,
    .send = net_socket_send,
    .recv = net_socket_recv,
    .wait_fd = net_socket_wait_fd,
    .close = net_socket_close,
};
