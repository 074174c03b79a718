/* One ops table, several transports. A connection is a one-way FIFO between
 * two ranks on one channel; where its bytes live is the transport's business.
 * Setting one up: the receiver's `setup` writes a handle, the bootstrap
 * carries it to the sender (src/core/connect.c), both sides `connect`. */
#ifndef WEFT_TRANSPORT_TRANSPORT_H
#define WEFT_TRANSPORT_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#define WEFT_CONN_HANDLE_BYTES 128

enum weft_conn_dir { WEFT_CONN_SEND = 0, WEFT_CONN_RECV = 1 };

struct weft_transport_ops;

struct weft_conn {
  const struct weft_transport_ops *ops;
  enum weft_conn_dir dir;
  int rank;    /* this rank */
  int peer;    /* the rank at the other end */
  int channel;
  uint64_t comm_hash;
  const _Atomic int *abort_flag; /* the communicator's; waits give up when set */
  void *priv;                    /* the transport's state */
};

/* Where the peers are, as far as the transport needs to know. */
struct weft_transport_peer {
  int rank;
  int cuda_dev;
  int pid;
  uint64_t host_hash;
};

struct weft_transport_ops {
  size_t size;
  const char *name;
  /* Can this transport link self to peer? */
  ncclResult_t (*can_connect)(const struct weft_transport_peer *self,
                              const struct weft_transport_peer *peer, int *out);
  /* Creates the local end; the receiver writes a handle for the sender. */
  ncclResult_t (*setup)(struct weft_conn *conn, void *handle_out);
  /* Completes the link: the sender gets the receiver's handle. */
  ncclResult_t (*connect)(struct weft_conn *conn, const void *peer_handle, int64_t deadline_ms);
  /* Non-blocking: moves what can move now and adds it to *done. */
  ncclResult_t (*send)(struct weft_conn *conn, const void *buf, size_t bytes, size_t *done);
  ncclResult_t (*recv)(struct weft_conn *conn, void *buf, size_t bytes, size_t *done);
  /* A file descriptor that polls readable/writable when the conn can move,
   * or -1 when the transport has none (the caller then yields and sleeps). */
  int (*wait_fd)(const struct weft_conn *conn);
  ncclResult_t (*close)(struct weft_conn *conn);
};

extern const struct weft_transport_ops weft_net_socket_ops;
extern const struct weft_transport_ops weft_shm_ops;

/* Sends and receives at once until both are done (either may be NULL), so two
 * ranks that send to each other never deadlock. Spins briefly, then polls or
 * sleeps; gives up at the deadline (WARN naming the peer) or on abort. */
ncclResult_t weft_conn_sendrecv(struct weft_conn *send, const void *sbuf, size_t sbytes,
                                struct weft_conn *recv, void *rbuf, size_t rbytes,
                                int64_t deadline_ms);

#endif
