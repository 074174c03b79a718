/* Connecting the communicator's links, when a task first needs them. For
 * a batch of missing links every rank (a) sets up the receiving end of
 * each link it receives on, with the transport decided at init from the
 * topology (shm to ranks of this host, sockets otherwise), and sends the
 * handle, tagged with the channel, to the sender over the bootstrap; (b)
 * receives the handle for each link it sends on, creates the sending end
 * of the transport the handle names, and connects it; (c) completes its
 * receiving ends. Sends connect before any receive waits (shm's receiving
 * connect waits for its sender to map the segment; a socket's waits for the
 * sender's connect, which the listener's backlog holds), so pairs of ranks
 * whose batches match never wait on each other in a cycle. */
#include "core/connect.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "base/fail_note.h"
#include "core/comm.h"
#include "core/comm_topo.h"
#include "base/param.h"
#include "topo/topo.h"
#include "transport/socket.h"

/* Transport ids as they travel in the first byte of a handle message. */
enum { CONN_NET_SOCKET = 0, CONN_SHM = 1, CONN_NTRANSPORTS };
static const struct weft_transport_ops *const conn_transports[CONN_NTRANSPORTS] = {
    &weft_net_socket_ops, &weft_shm_ops};

/* What the receiver of a link sends its sender. */
struct conn_handle_msg {
  uint8_t transport;
  uint8_t pad[7];
  char handle[WEFT_CONN_HANDLE_BYTES];
};

/* One link being connected by this call. */
struct conn_link {
  struct weft_conn *conn;
  struct conn_handle_msg msg;
};

static ncclResult_t conn_alloc(struct ncclComm *comm, const struct weft_conn_need *need,
                               struct weft_conn **out) {
  struct weft_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    WARN("rank %d: out of memory for a connection with rank %d (channel %d)", comm->rank,
         need->peer, need->channel);
    return ncclSystemError;
  }
  int local = 0;
  for (int r = 0; r < comm->nranks; r++)
    local += comm->peers[r].host_hash == comm->peers[comm->rank].host_hash;
  int wide = need->channel == WEFT_WIDE_CHANNEL;
  *c = (struct weft_conn){.dir = need->dir,
                          .rank = comm->rank,
                          .peer = need->peer,
                          .channel = need->channel,
                          .comm_hash = comm->comm_hash,
                          .abort_flag = &comm->abort_flag,
                          .local_ranks = local,
                          .link_threads = weft_comm_host_link_threads(comm->host_channels, wide),
                          .wide = wide,
                          .net_nic = comm->net_nic,
                          .net_nic_port = comm->net_nic_port};
  *out = c;
  return ncclSuccess;
}

static void conn_free(struct weft_conn **c) {
  if (*c == NULL) return;
  if ((*c)->ops && (*c)->ops->close) (void)(*c)->ops->close(*c);
  free(*c);
  *c = NULL;
}

static ncclResult_t conn_channel(struct ncclComm *comm, int channel,
                                 struct weft_channel_conns **out) {
  struct weft_channel_conns *ch = comm->channels[channel];
  if (ch == NULL) {
    ch = calloc(1, sizeof(*ch));
    if (ch != NULL) {
      ch->send = calloc((size_t)comm->nranks, sizeof(*ch->send));
      ch->recv = calloc((size_t)comm->nranks, sizeof(*ch->recv));
    }
    if (ch == NULL || ch->send == NULL || ch->recv == NULL) {
      WARN("rank %d: out of memory for the connections of channel %d", comm->rank, channel);
      if (ch != NULL) free(ch->send), free(ch->recv);
      free(ch);
      return ncclSystemError;
    }
    comm->channels[channel] = ch;
  }
  *out = ch;
  return ncclSuccess;
}

static ncclResult_t conn_check_need(const struct ncclComm *comm, const struct weft_conn_need *n) {
  if (n->channel >= 0 && n->channel < WEFT_MAX_CHANNELS && n->peer >= 0 &&
      n->peer < comm->nranks && n->peer != comm->rank)
    return ncclSuccess;
  WARN("rank %d: a plan needs a link with rank %d on channel %d (nranks %d, channels < %d)",
       comm->rank, n->peer, n->channel, comm->nranks, WEFT_MAX_CHANNELS);
  return ncclInternalError;
}

/* The distinct links of needs that are not connected yet. */
static ncclResult_t conn_collect(struct ncclComm *comm, const struct weft_conn_need *needs, int n,
                                 struct conn_link *links, int *nlinks_out) {
  int nlinks = 0;
  for (int i = 0; i < n; i++) {
    const struct weft_conn_need *need = &needs[i];
    WEFT_CHECK(conn_check_need(comm, need));
    if (weft_comm_conn(comm, need->channel, need->peer, need->dir) != NULL) continue;
    int dup = 0;
    for (int j = 0; j < nlinks && !dup; j++) {
      const struct weft_conn *c = links[j].conn;
      dup = c->channel == need->channel && c->peer == need->peer && c->dir == need->dir;
    }
    if (dup) continue;
    struct weft_channel_conns *ch;
    WEFT_CHECK(conn_channel(comm, need->channel, &ch));
    WEFT_CHECK(conn_alloc(comm, need, &links[nlinks].conn));
    nlinks++;
    *nlinks_out = nlinks;
  }
  return ncclSuccess;
}

/* The transport decided at init (core/comm_topo.c): net -> sockets; shm ->
 * shm where it can connect, else sockets. P2P (GPU buffers) is not
 * implemented here yet: shm carries it. */
static ncclResult_t conn_pick(const struct ncclComm *comm, int peer, int *out) {
  const struct weft_peer_info *a = &comm->peers[comm->rank], *b = &comm->peers[peer];
  struct weft_transport_peer self = {a->rank, a->cuda_dev, a->pid, a->host_hash};
  struct weft_transport_peer other = {b->rank, b->cuda_dev, b->pid, b->host_hash};
  int ok = 0;
  *out = CONN_NET_SOCKET;
  enum weft_topo_transport t = (enum weft_topo_transport)comm->peer_transport[peer];
  if (t == WEFT_TRANSPORT_NET) return ncclSuccess;
  if (t == WEFT_TRANSPORT_P2P)
    INFO(WEFT_INIT | WEFT_SHM, "rank %d -> rank %d: P2P is not implemented for host buffers; %s",
         comm->rank, peer, "using SHM");
  WEFT_CHECK(weft_shm_ops.can_connect(&self, &other, &ok));
  if (ok) *out = CONN_SHM;
  return ncclSuccess;
}

/* (a) for one link: the receiving end and its handle, sent to the sender.
 * shm without room in /dev/shm falls back to sockets. */
static ncclResult_t conn_setup_recv(struct ncclComm *comm, struct conn_link *l) {
  struct weft_conn *c = l->conn;
  int id;
  WEFT_CHECK(conn_pick(comm, c->peer, &id));
  c->ops = conn_transports[id];
  ncclResult_t res = c->ops->setup(c, l->msg.handle);
  if (res == ncclSystemError && id == CONN_SHM && errno == ENOSPC) {
    if (!comm->shm_fallback_warned)
      WARN("rank %d: no room in %s for shared memory with rank %d (channel %d); using sockets "
           "for links that do not fit (reported once)",
           comm->rank, "/dev/shm", c->peer, c->channel);
    comm->shm_fallback_warned = 1;
    id = CONN_NET_SOCKET;
    c->ops = conn_transports[id];
    res = c->ops->setup(c, l->msg.handle);
  }
  WEFT_CHECK(res);
  l->msg.transport = (uint8_t)id;
  return weft_bootstrap_send(comm->bootstrap, c->peer, WEFT_TAG_CONN + c->channel, &l->msg,
                             sizeof(l->msg));
}

/* (b) for one link: the receiver's handle, then the sending end. */
static ncclResult_t conn_connect_send(struct ncclComm *comm, struct conn_link *l,
                                      int64_t deadline) {
  struct weft_conn *c = l->conn;
  char unused[WEFT_CONN_HANDLE_BYTES];
  ncclResult_t res = weft_bootstrap_recv(comm->bootstrap, c->peer, WEFT_TAG_CONN + c->channel,
                                         &l->msg, sizeof(l->msg));
  /* A timeout (a peer that died or aborted leaves its own note first): the
   * peer is alive but did not connect, so it is running other calls; the
   * failure record names it as a stall does (core/failure.h). */
  if (res == ncclSystemError && weft_bootstrap_timed_out())
    weft_failure_note(c->peer, WEFT_FAIL_STALLED,
                      "no link set up to rank %d (channel %d) in %lld s: another call there, "
                      "send/recv against a collective?",
                      comm->rank, c->channel, (long long)weft_param_int(WEFT_PARAM_TIMEOUT));
  WEFT_CHECK(res);
  if (l->msg.transport >= CONN_NTRANSPORTS) {
    WARN("rank %d: rank %d named transport %d for channel %d, which this build lacks", comm->rank,
         c->peer, l->msg.transport, c->channel);
    return ncclInternalError;
  }
  c->ops = conn_transports[l->msg.transport];
  WEFT_CHECK(c->ops->setup(c, unused));
  return c->ops->connect(c, l->msg.handle, deadline);
}

static void conn_install(struct ncclComm *comm, struct weft_conn *c) {
  struct weft_channel_conns *ch = comm->channels[c->channel];
  if (c->dir == WEFT_CONN_SEND)
    ch->send[c->peer] = c;
  else
    ch->recv[c->peer] = c;
  INFO(WEFT_INIT | (c->ops == &weft_shm_ops ? WEFT_SHM : WEFT_NET),
       "rank %d -> rank %d channel %d via %s (%s side)",
       c->dir == WEFT_CONN_SEND ? c->rank : c->peer, c->dir == WEFT_CONN_SEND ? c->peer : c->rank,
       c->channel, c->ops->name, c->dir == WEFT_CONN_SEND ? "send" : "recv");
}

ncclResult_t weft_comm_connect(struct ncclComm *comm, const struct weft_conn_need *needs, int n) {
  ncclResult_t res = ncclSuccess;
  int nlinks = 0;
  if (n <= 0) return ncclSuccess;
  struct conn_link *links = calloc((size_t)n, sizeof(*links));
  if (links == NULL) {
    WARN("rank %d: out of memory connecting %d links", comm->rank, n);
    return ncclSystemError;
  }
  WEFT_CHECK_GOTO(conn_collect(comm, needs, n, links, &nlinks), res, out);
  int64_t deadline = weft_deadline_default();
  for (int i = 0; i < nlinks; i++)
    if (links[i].conn->dir == WEFT_CONN_RECV)
      WEFT_CHECK_GOTO(conn_setup_recv(comm, &links[i]), res, out);
  for (int i = 0; i < nlinks; i++)
    if (links[i].conn->dir == WEFT_CONN_SEND)
      WEFT_CHECK_GOTO(conn_connect_send(comm, &links[i], deadline), res, out);
  for (int i = 0; i < nlinks; i++)
    if (links[i].conn->dir == WEFT_CONN_RECV)
      WEFT_CHECK_GOTO(links[i].conn->ops->connect(links[i].conn, NULL, deadline), res, out);
  for (int i = 0; i < nlinks; i++) {
    conn_install(comm, links[i].conn);
    links[i].conn = NULL;
  }
out:
  for (int i = 0; i < nlinks; i++) conn_free(&links[i].conn);
  free(links);
  return res;
}

void weft_comm_disconnect(struct ncclComm *comm) {
  for (int c = 0; c < WEFT_MAX_CHANNELS; c++) {
    struct weft_channel_conns *ch = comm->channels[c];
    if (ch == NULL) continue;
    for (int p = 0; p < comm->nranks; p++) {
      conn_free(&ch->send[p]);
      conn_free(&ch->recv[p]);
    }
    free(ch->send);
    free(ch->recv);
    free(ch);
    comm->channels[c] = NULL;
  }
}
