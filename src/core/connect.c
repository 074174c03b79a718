/* Connecting the communicator's ring: each rank sets up the receiving end
 * of the link from ring_prev, sends its handle to ring_prev over the
 * bootstrap, receives ring_next's handle, connects its sending end to it,
 * then completes its receiving end. Connecting before accepting lets every
 * rank make progress at once (the listener's backlog holds the connection
 * until it is accepted), so the ring closes without ordering ranks. */
#include "core/connect.h"

#include <stdlib.h>
#include <string.h>

#include "core/bootstrap.h"
#include "core/check.h"
#include "core/comm.h"
#include "transport/socket.h"
#include "transport/transport.h"

static ncclResult_t conn_alloc(struct ncclComm *comm, enum weft_conn_dir dir, int peer,
                               struct weft_conn **out) {
  struct weft_conn *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    WARN("rank %d: out of memory for the ring connection with rank %d", comm->rank, peer);
    return ncclSystemError;
  }
  *c = (struct weft_conn){.ops = &weft_net_socket_ops,
                          .dir = dir,
                          .rank = comm->rank,
                          .peer = peer,
                          .channel = 0,
                          .comm_hash = comm->comm_hash,
                          .abort_flag = &comm->abort_flag};
  *out = c;
  return ncclSuccess;
}

static void conn_free(struct weft_conn **c) {
  if (*c == NULL) return;
  if ((*c)->ops && (*c)->ops->close) (void)(*c)->ops->close(*c);
  free(*c);
  *c = NULL;
}

ncclResult_t weft_comm_connect_ring(struct ncclComm *comm) {
  if (comm->nranks == 1) return ncclSuccess;
  ncclResult_t res;
  struct weft_conn *send = NULL, *recv = NULL;
  char handle[WEFT_CONN_HANDLE_BYTES] = {0}, peer_handle[WEFT_CONN_HANDLE_BYTES] = {0};
  int tag = WEFT_TAG_RING_CONN;
  WEFT_CHECK_GOTO(conn_alloc(comm, WEFT_CONN_RECV, comm->ring_prev, &recv), res, err);
  WEFT_CHECK_GOTO(conn_alloc(comm, WEFT_CONN_SEND, comm->ring_next, &send), res, err);
  WEFT_CHECK_GOTO(recv->ops->setup(recv, handle), res, err);
  WEFT_CHECK_GOTO(send->ops->setup(send, peer_handle), res, err);
  WEFT_CHECK_GOTO(
      weft_bootstrap_send(comm->bootstrap, comm->ring_prev, tag, handle, sizeof(handle)), res, err);
  WEFT_CHECK_GOTO(
      weft_bootstrap_recv(comm->bootstrap, comm->ring_next, tag, peer_handle, sizeof(peer_handle)),
      res, err);
  int64_t deadline = weft_deadline_default();
  WEFT_CHECK_GOTO(send->ops->connect(send, peer_handle, deadline), res, err);
  WEFT_CHECK_GOTO(recv->ops->connect(recv, NULL, deadline), res, err);
  comm->ring_send = send;
  comm->ring_recv = recv;
  INFO(WEFT_INIT | WEFT_NET, "rank %d: ring connected, %d -> %d -> %d over %s", comm->rank,
       comm->ring_prev, comm->rank, comm->ring_next, send->ops->name);
  return ncclSuccess;
err:
  conn_free(&send);
  conn_free(&recv);
  return res;
}

void weft_comm_disconnect(struct ncclComm *comm) {
  conn_free(&comm->ring_send);
  conn_free(&comm->ring_recv);
}
