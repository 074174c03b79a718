/* The host engine's network transport: a connection is one send/recv comm
 * pair of the network (net.h: sockets, or an external plugin), so host ranks on
 * different hosts get its several sockets and helper threads. The
 * receiver listens and hands the sender the network's handle (magic,
 * random nonce, address: the network drops every stranger); the sender
 * connects.
 *
 * The host engine sees a byte stream (transport.h: send and recv add to
 * *done), the network moves messages. The sender cuts the stream into
 * messages of at most MSG_MAX bytes, several in flight. The receiver
 * receives straight into the caller's buffer: where at least MSG_MAX
 * bytes are still wanted any message fits; where fewer are, the socket
 * network puts a message that does not fit into a bounce buffer instead
 * (its header decides: weft_net_socket_irecv_spare), whose bytes later
 * calls take first. So the stream's boundaries need not match the
 * receiver's calls (an 8-byte header then a piece at a time), and a
 * message that matches a short call (a step's last bytes, a small step)
 * is copied once. Another network receives into the bounce buffer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/cpus.h"
#include "base/debug.h"
#include "base/fail_note.h"
#include "base/param.h"
#include "transport/net/net.h"
#include "transport/net/socket/socket_net.h"
#include "transport/socket.h"
#include "transport/transport.h"

/* The largest message: 1 MiB moves a 2-rank 64 MiB broadcast 10-35%
 * faster than 256 KiB on the 16-core machine, the rank's one thread
 * handling a quarter of the messages (docs/NETWORK.md). The engine lowers
 * it per call (conn->send_msg_max: a reducing collective's peer receives
 * 256 KiB pieces). Settable at build time for measuring. */
#ifndef WEFT_NET_MSG_MAX
#define WEFT_NET_MSG_MAX (1024 * 1024)
#endif
#define MSG_MAX WEFT_NET_MSG_MAX
/* Messages in flight per send conn, and receives per recv conn (a
 * receive is posted once the previous one's size is known, so the next
 * header is read while the chunks before it still move). Settable at
 * build time for measuring: on the 16-core machine 16 moved the default
 * links (a socket a channel) no faster, nor did 8 or 16 move 4 links of 4
 * sockets each (docs/PERFORMANCE.md, "Sixteenth pass"). */
#ifndef WEFT_NET_INFLIGHT
#define WEFT_NET_INFLIGHT 4
#endif
/* A wide link's (weft_conn.wide): its messages, up to 16 MiB, are cut
 * into chunks for many sockets, and 8 in flight moved a whole-call 2-rank
 * Broadcast of 256 MiB-1 GiB more steadily than 4 (docs/PERFORMANCE.md,
 * "Twenty-second pass"). */
#define WIDE_INFLIGHT 8
#define INFLIGHT_MAX (WEFT_NET_INFLIGHT > WIDE_INFLIGHT ? WEFT_NET_INFLIGHT : WIDE_INFLIGHT)
/* Longest nap while a connection is being set up. */
#define SETUP_NAP_MAX_US 2000

_Static_assert(MSG_MAX % 16 == 0, "a message must be a whole number of elements of any type");
_Static_assert(WEFT_NET_HANDLE_BYTES <= WEFT_CONN_HANDLE_BYTES,
               "the network's handle must fit the connection handle");

struct net_conn {
  const struct weft_net_ops *net;
  int dev; /* the network's device: the one named like conn->net_nic, else 0 */
  void *listen;
  void *comm;
  void *mh;
  int depth; /* messages (receives) in flight at most: WEFT_NET_INFLIGHT, a wide link's more */
  /* send: messages in flight, oldest first, from the stream's sent offset */
  void *sreq[INFLIGHT_MAX];
  size_t slen[INFLIGHT_MAX];
  int shead, scount;
  const char *sbuf;
  /* recv: receives in flight, oldest first, each at roff in the caller's
   * buffer or (the newest only) in the bounce buffer */
  void *rreq[INFLIGHT_MAX];
  size_t roff[INFLIGHT_MAX]; /* where in the caller's buffer each lands */
  int rhead, rcount;
  char *bounce;
  size_t bounce_len, bounce_off;
  /* send: depth x MSG_MAX bytes registered with the network, for
   * networks that only move registered memory (external plugins) */
  char *stage;
  char what[32];
};

static ncclResult_t net_conn_can_connect(const struct weft_transport_peer *self,
                                         const struct weft_transport_peer *peer, int *out) {
  (void)self, (void)peer;
  *out = 1; /* TCP reaches every rank the bootstrap reached */
  return ncclSuccess;
}

/* The network device of the NIC the topology chose for this rank
 * (core/comm_topo.c: for a host rank the one nearest its CPU), else 0;
 * said once per rank (channel 0 of its first send link to each peer). */
static int net_conn_dev(const struct weft_conn *conn, const struct weft_net_ops *net) {
  int dev = -1;
  if (conn->net_nic != NULL && conn->net_nic[0] != '\0')
    dev = weft_net_dev_by_name(net, conn->net_nic, conn->net_nic_port);
  if (conn->dir == WEFT_CONN_SEND && conn->channel == 0 && conn->net_nic != NULL &&
      conn->net_nic[0] != '\0')
    INFO(WEFT_NET, "rank %d: links to rank %d on NET/%s device %d (%s)", conn->rank, conn->peer,
         net->name, dev >= 0 ? dev : 0,
         dev >= 0 ? conn->net_nic : "the topology's NIC is not one of its devices");
  return dev >= 0 ? dev : 0;
}

static ncclResult_t net_conn_priv(struct weft_conn *conn, struct net_conn **out) {
  if (conn->priv == NULL) {
    struct net_conn *q = calloc(1, sizeof(*q));
    if (q == NULL) {
      WARN("rank %d: out of memory for a socket connection with rank %d", conn->rank, conn->peer);
      return ncclSystemError;
    }
    snprintf(q->what, sizeof(q->what), "rank %d", conn->peer);
    q->depth = conn->wide ? WIDE_INFLIGHT : WEFT_NET_INFLIGHT;
    conn->priv = q;
  }
  struct net_conn *p = conn->priv;
  if (p->net == NULL) {
    WEFT_CHECK(weft_net_get(&p->net));
    p->dev = net_conn_dev(conn, p->net);
  }
  *out = p;
  return ncclSuccess;
}

/* The receiver listens; the sender has nothing to set up. */
static ncclResult_t net_conn_setup(struct weft_conn *conn, void *handle_out) {
  struct net_conn *p;
  WEFT_CHECK(net_conn_priv(conn, &p));
  if (conn->dir == WEFT_CONN_SEND) return ncclSuccess;
  memset(handle_out, 0, WEFT_CONN_HANDLE_BYTES);
  return p->net->listen(p->dev, handle_out, &p->listen);
}

/* Between connect/accept attempts: short naps first (the peer is usually
 * a moment away), the abort flag and the deadline checked. */
static ncclResult_t net_conn_setup_wait(struct weft_conn *conn, int64_t deadline_ms, long *nap_us) {
  if (conn->abort_flag && atomic_load(conn->abort_flag)) {
    INFO(WEFT_NET, "rank %d: aborted while connecting with rank %d", conn->rank, conn->peer);
    return ncclInternalError;
  }
  if (weft_time_ms() > deadline_ms) {
    WARN("rank %d: rank %d did not %s its link on channel %d in time", conn->rank, conn->peer,
         conn->dir == WEFT_CONN_SEND ? "accept" : "connect", conn->channel);
    return ncclSystemError;
  }
  struct timespec ts = {0, *nap_us * 1000};
  nanosleep(&ts, NULL);
  if (*nap_us < SETUP_NAP_MAX_US) *nap_us *= 2;
  return ncclSuccess;
}

/* Helper threads of a link when the communicator sizes them (one data
 * socket each; its channels give the parallelism), or 0 for the socket
 * network's own counts: NCCL_SOCKET_NTHREADS or NCCL_NSOCKS_PERTHREAD,
 * when set, win. */
static int net_conn_link_threads(const struct weft_conn *conn) {
  if (weft_param_is_set(WEFT_PARAM_SOCKET_NTHREADS) || weft_param_is_set(WEFT_PARAM_NSOCKS_PERTHREAD))
    return 0;
  return conn->link_threads;
}

/* Whether this rank's helper threads would have cores to run on: one for
 * each local rank's caller and each of its helper threads. Without them
 * (a 2-core VM: the thread hops cut a 2-rank broadcast from 3.5 to 1.4
 * GB/s) the caller moves every message itself on the control socket, one
 * stream per link. WEFT_SOCKET_HOST_THREADS overrides. */
static int net_conn_threads_pay(const struct weft_conn *conn) {
  int64_t forced = weft_param_int(WEFT_PARAM_SOCKET_HOST_THREADS);
  if (forced >= 0) return (int)forced;
  int cpus = weft_cpus_usable();
  int nthreads = net_conn_link_threads(conn), nsocks;
  if (nthreads == 0) weft__ns_sock_counts(&nthreads, &nsocks);
  /* A wide link runs alone, in place of the channels' links of one
   * helper each: it is paid for like one of them. */
  if (conn->wide && nthreads > 1) nthreads = 1;
  int local = conn->local_ranks > 0 ? conn->local_ranks : 1;
  return cpus >= local * (1 + nthreads);
}

/* The socket network moves any host memory (its reg_mr records nothing).
 * Another network (an external plugin: verbs, EFA) may move registered
 * memory only, and the engine's buffers change every call, so messages go
 * through buffers registered once here: the sender copies each message
 * into one of its depth of stage buffers, the receiver receives every
 * message into the bounce buffer. */
static ncclResult_t net_conn_register(struct weft_conn *conn, struct net_conn *p) {
  if (p->net == &weft_net_socket)
    return p->net->reg_mr(p->comm, NULL, 0, WEFT_NET_PTR_HOST, &p->mh);
  size_t bytes = conn->dir == WEFT_CONN_SEND ? (size_t)p->depth * MSG_MAX : MSG_MAX;
  char *buf = malloc(bytes);
  if (buf == NULL) {
    WARN("rank %d: out of memory for the %s network's buffers to rank %d", conn->rank, p->net->name,
         conn->peer);
    return ncclSystemError;
  }
  *(conn->dir == WEFT_CONN_SEND ? &p->stage : &p->bounce) = buf;
  return p->net->reg_mr(p->comm, buf, bytes, WEFT_NET_PTR_HOST, &p->mh);
}

static ncclResult_t net_conn_connect(struct weft_conn *conn, const void *peer_handle,
                                     int64_t deadline_ms) {
  struct net_conn *p;
  WEFT_CHECK(net_conn_priv(conn, &p));
  long nap_us = 20;
  int socket_send = conn->dir == WEFT_CONN_SEND && p->net == &weft_net_socket;
  int single = socket_send && !net_conn_threads_pay(conn);
  int threads = socket_send ? net_conn_link_threads(conn) : 0;
  while (p->comm == NULL) {
    if (single)
      WEFT_CHECK(weft_net_socket_connect_single(p->dev, peer_handle, &p->comm));
    else if (threads > 0)
      WEFT_CHECK(weft_net_socket_connect_threads(p->dev, peer_handle, threads, &p->comm));
    else if (conn->dir == WEFT_CONN_SEND)
      WEFT_CHECK(p->net->connect(p->dev, peer_handle, &p->comm));
    else
      WEFT_CHECK(p->net->accept(p->listen, &p->comm));
    if (p->comm == NULL) WEFT_CHECK(net_conn_setup_wait(conn, deadline_ms, &nap_us));
  }
  if (p->listen != NULL) {
    WEFT_CHECK(p->net->close_listen(p->listen));
    p->listen = NULL;
  }
  /* A wide link's helpers copy a chunk while their sockets drain; on a
   * channel's link of one socket, whose 512 KiB steps are one chunk each,
   * the copy lengthens every step: a 64 MiB Broadcast out of place moved
   * 17-21% less (docs/PERFORMANCE.md, "Twenty-second pass"). */
  conn->can_mirror = socket_send && !single && conn->wide;
  if (conn->dir == WEFT_CONN_SEND && p->net != &weft_net_socket)
    INFO(WEFT_NET, "rank %d: link to rank %d on channel %d: over the %s network", conn->rank,
         conn->peer, conn->channel, p->net->name);
  else if (conn->dir == WEFT_CONN_SEND)
    INFO(WEFT_NET, "rank %d: %slink to rank %d on channel %d: %s", conn->rank,
         conn->wide ? "wide " : "", conn->peer, conn->channel,
         single ? "every message on one socket (no cores to spare for helper threads)"
         : conn->wide
             ? "whole calls dealt between the socket network's helper threads and data sockets"
             : "large messages through the socket network's helper threads");
  return net_conn_register(conn, p);
}

/* A link closed mid-call: the peer's process exited (a peer that aborts
 * or fails says so first, over core/failure.c's notices). */
static ncclResult_t net_conn_closed(const struct weft_conn *conn, ncclResult_t res) {
  if (res == ncclRemoteError)
    weft_failure_note(conn->peer, WEFT_FAIL_DIED,
                      "its socket closed mid-call: its process exited (channel %d)", conn->channel);
  return res;
}

static ncclResult_t net_conn_send_step(struct net_conn *p, const void *buf, size_t bytes,
                                       char *mirror, size_t msg_max, size_t *done) {
  if (p->scount > 0 && p->sbuf != buf) {
    WARN("net_socket: a send to %s changed buffers with %d messages in flight", p->what, p->scount);
    return ncclInternalError;
  }
  while (p->scount > 0) {
    int fin = 0;
    WEFT_CHECK(p->net->test(p->sreq[p->shead], &fin, NULL));
    if (!fin) break;
    *done += p->slen[p->shead];
    p->shead = (p->shead + 1) % p->depth;
    p->scount--;
  }
  size_t off = *done;
  for (int i = 0; i < p->scount; i++) off += p->slen[(p->shead + i) % p->depth];
  while (p->scount < p->depth && off < bytes) {
    size_t len = bytes - off < msg_max ? bytes - off : msg_max;
    void *req = NULL;
    int slot = (p->shead + p->scount) % p->depth;
    char *data = (char *)buf + off;
    if (mirror != NULL && p->net == &weft_net_socket) {
      WEFT_CHECK(weft_net_socket_isend_mirror(p->comm, data, len, mirror + off, &req));
    } else {
      if (mirror != NULL) memcpy(mirror + off, data, len);
      if (p->stage != NULL) data = memcpy(p->stage + (size_t)slot * MSG_MAX, data, len);
      WEFT_CHECK(p->net->isend(p->comm, data, len, 0, p->mh, &req));
    }
    if (req == NULL) break;
    p->scount++;
    p->sreq[slot] = req;
    p->slen[slot] = len;
    p->sbuf = buf;
    off += len;
  }
  return ncclSuccess;
}

static ncclResult_t net_conn_send_mirror(struct weft_conn *conn, const void *buf, size_t bytes,
                                         char *mirror, size_t *done) {
  struct net_conn *p = conn->priv;
  size_t before = *done;
  /* The engine's cap: lower for pieces; higher only on the socket
   * network (another one moves messages through MSG_MAX stage buffers). */
  size_t cap = p->net == &weft_net_socket ? WEFT_CONN_WIDE_MSG : MSG_MAX;
  size_t msg_max = conn->send_msg_max == 0    ? MSG_MAX
                   : conn->send_msg_max < cap ? conn->send_msg_max
                                              : cap;
  ncclResult_t res = net_conn_send_step(p, buf, bytes, mirror, msg_max, done);
  /* A message that finished inside isend is seen at once. */
  if (res == ncclSuccess && *done == before && p->scount > 0)
    res = net_conn_send_step(p, buf, bytes, mirror, msg_max, done);
  return net_conn_closed(conn, res);
}

static ncclResult_t net_conn_send(struct weft_conn *conn, const void *buf, size_t bytes,
                                  size_t *done) {
  return net_conn_send_mirror(conn, buf, bytes, NULL, done);
}

/* Whether a finished (or sized) receive landed in the bounce buffer. */
static int net_conn_in_bounce(const struct net_conn *p, const void *req) {
  return p->net != &weft_net_socket || weft_net_socket_recv_in_spare(req);
}

/* Posts a receive at buf + off: with the bounce buffer as its spare when
 * fewer than MSG_MAX bytes are wanted (a message might not fit); another
 * network's into the bounce buffer. */
static ncclResult_t net_conn_recv_post(struct net_conn *p, char *buf, size_t bytes, size_t off) {
  int socket = p->net == &weft_net_socket, fits = socket && bytes - off >= MSG_MAX;
  if (!fits && p->bounce == NULL && (p->bounce = malloc(MSG_MAX)) == NULL) {
    WARN("net_socket: out of memory for the receive buffer from %s", p->what);
    return ncclSystemError;
  }
  void *req = NULL;
  if (socket) {
    WEFT_CHECK(weft_net_socket_irecv_spare(p->comm, buf + off, bytes - off, fits ? NULL : p->bounce,
                                           MSG_MAX, &req));
  } else {
    void *data = p->bounce;
    size_t size = MSG_MAX;
    int tag = 0;
    WEFT_CHECK(p->net->irecv(p->comm, 1, &data, &size, &tag, &p->mh, &req));
  }
  if (req == NULL) return ncclSuccess;
  int slot = (p->rhead + p->rcount++) % p->depth;
  p->rreq[slot] = req;
  p->roff[slot] = off;
  return ncclSuccess;
}

/* Posts what can be posted now: a first receive, or one more once the
 * newest one's size is known and it landed in the buffer. Every receive
 * posted lands inside this call's buffer or in the (empty) bounce
 * buffer, which only the newest one may use. */
static ncclResult_t net_conn_recv_more(struct net_conn *p, char *buf, size_t bytes, size_t done) {
  if (p->rcount == 0) return net_conn_recv_post(p, buf, bytes, done);
  if (p->rcount == p->depth || p->net != &weft_net_socket) return ncclSuccess;
  int newest = (p->rhead + p->rcount - 1) % p->depth;
  size_t size;
  if (!weft_net_socket_recv_size(p->rreq[newest], &size) ||
      weft_net_socket_recv_in_spare(p->rreq[newest]))
    return ncclSuccess;
  size_t next = p->roff[newest] + size;
  if (next >= bytes) return ncclSuccess;
  return net_conn_recv_post(p, buf, bytes, next);
}

static ncclResult_t net_conn_recv_step(struct net_conn *p, char *buf, size_t bytes, size_t *done) {
  while (*done < bytes) {
    if (p->bounce_off < p->bounce_len) {
      size_t n = p->bounce_len - p->bounce_off;
      if (n > bytes - *done) n = bytes - *done;
      memcpy(buf + *done, p->bounce + p->bounce_off, n);
      p->bounce_off += n;
      *done += n;
      continue;
    }
    WEFT_CHECK(net_conn_recv_more(p, buf, bytes, *done));
    if (p->rcount == 0) return ncclSuccess;
    int fin = 0;
    size_t got = 0;
    void *req = p->rreq[p->rhead];
    WEFT_CHECK(p->net->test(req, &fin, &got));
    if (!fin) return net_conn_recv_more(p, buf, bytes, *done);
    p->rhead = (p->rhead + 1) % p->depth;
    p->rcount--;
    if (net_conn_in_bounce(p, req))
      p->bounce_len = got, p->bounce_off = 0;
    else
      *done += got;
  }
  return ncclSuccess;
}

static ncclResult_t net_conn_recv(struct weft_conn *conn, void *buf, size_t bytes, size_t *done) {
  return net_conn_closed(conn, net_conn_recv_step(conn->priv, buf, bytes, done));
}

static int net_conn_wait_fd(const struct weft_conn *conn) {
  const struct net_conn *p = conn->priv;
  if (p == NULL || p->net != &weft_net_socket) return -1;
  void *req = conn->dir == WEFT_CONN_SEND ? (p->scount ? p->sreq[p->shead] : NULL)
                                          : (p->rcount ? p->rreq[p->rhead] : NULL);
  return req ? weft_net_socket_wait_fd(req) : -1;
}

static ncclResult_t net_conn_close(struct weft_conn *conn) {
  struct net_conn *p = conn->priv;
  if (p == NULL) return ncclSuccess;
  if (p->comm != NULL) {
    if (p->mh != NULL) (void)p->net->dereg_mr(p->comm, p->mh);
    (void)(conn->dir == WEFT_CONN_SEND ? p->net->close_send(p->comm) : p->net->close_recv(p->comm));
  }
  if (p->listen != NULL) (void)p->net->close_listen(p->listen);
  free(p->bounce);
  free(p->stage);
  free(p);
  conn->priv = NULL;
  return ncclSuccess;
}

const struct weft_transport_ops weft_net_socket_ops = {
    .size = sizeof(struct weft_transport_ops),
    .name = "net_socket",
    .can_connect = net_conn_can_connect,
    .setup = net_conn_setup,
    .connect = net_conn_connect,
    .send = net_conn_send,
    .recv = net_conn_recv,
    .wait_fd = net_conn_wait_fd,
    .close = net_conn_close,
    .send_mirror = net_conn_send_mirror,
};
