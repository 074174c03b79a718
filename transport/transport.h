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
  int local_ranks; /* the communicator's ranks on this host: transports with
                      helper threads size them by the cores left */
  int link_threads; /* socket links: helper threads of one data socket each
                       (0: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD) */
  /* A wide link: one that carries a whole call alone (a 2-rank Broadcast
   * over sockets, sched/tuning.c), its link_threads sockets standing in
   * for the channels' one each. Its helpers are paid for like one
   * channel's (the channels' links idle meanwhile), it keeps more
   * messages in flight, and its sender may send messages of up to
   * WEFT_CONN_WIDE_MSG bytes. */
  int wide;
  /* Net links: the topology's NIC for this rank (its name, "" or NULL:
   * none) and port (0: any); the network device of that name is used,
   * else device 0. */
  const char *net_nic;
  int net_nic_port;
  /* The host engine's: which lane of which plan run uses the conn, so two
   * lanes never interleave their bytes on one FIFO. Transports ignore it. */
  uint64_t user_run;
  int user_lane;
  /* Set by the sender's engine for each call: the largest message a
   * transport that moves messages may cut its sends into, because the
   * peer's engine receives the call's bytes in pieces of that size (0:
   * the transport's own). Above the transport's own (at most
   * WEFT_CONN_WIDE_MSG): the peer receives each of the call's steps
   * whole, so any message up to that size fits where it lands. */
  size_t send_msg_max;
  /* Set by the transport at connect: its send_mirror makes the copy on
   * threads of its own (a wide link's socket helpers), so a step's copy
   * of what it sends is better made there than by the engine. */
  int can_mirror;
};

/* The largest message a sender may ask for (send_msg_max) where the peer
 * receives whole steps: a wide link's. */
#define WEFT_CONN_WIDE_MSG ((size_t)16 * 1024 * 1024)

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
  /* A file descriptor that polls readable (for sends too: an eventfd) when
   * the conn can move, or -1 when the transport has none now (the caller
   * then yields and naps). */
  int (*wait_fd)(const struct weft_conn *conn);
  ncclResult_t (*close)(struct weft_conn *conn);
  /* Optional (NULL: none), on a receive conn: the peer's memory, reached
   * directly where the transport can (shm, where the peer's memory can be
   * read and written: process_vm_readv/writev). peer_mem_min is the
   * smallest transfer worth it, 0 where it cannot; peer_mem copies n
   * bytes between local and the peer's address remote: from there, or
   * there when `write` is set. */
  size_t (*peer_mem_min)(const struct weft_conn *conn);
  ncclResult_t (*peer_mem)(struct weft_conn *conn, void *local, uint64_t remote, size_t n,
                           int write);
  /* Optional (NULL: none), on a send conn: send that also writes the
   * bytes it sends to mirror (the same offsets; mirror and buf do not
   * overlap), each before its send is counted in *done. The socket
   * network's helper threads copy each chunk there as they take it and
   * send it from the copy, still in their cache: a broadcast root's copy
   * of its input to its output, made beside its send (net_conn.c). */
  ncclResult_t (*send_mirror)(struct weft_conn *conn, const void *buf, size_t bytes, char *mirror,
                              size_t *done);
};

extern const struct weft_transport_ops weft_net_socket_ops;
extern const struct weft_transport_ops weft_shm_ops;

/* One direction's progress on a connection: bytes of buf, done so far. */
struct weft_xfer {
  struct weft_conn *conn;
  char *buf;
  size_t bytes;
  size_t done;
};

static inline int weft_xfer_pending(const struct weft_xfer *x) {
  return x->done < x->bytes;
}

/* Non-blocking: moves what the transport can take or give now; sets *moved
 * when bytes moved. */
ncclResult_t weft_xfer_progress(struct weft_xfer *x, int *moved);
/* The same for a send whose bytes also land at mirror (the same offsets
 * from mirror as from x->buf): through the transport's send_mirror, which
 * the caller checked it has. */
ncclResult_t weft_xfer_send_mirror(struct weft_xfer *x, char *mirror, int *moved);

/* The state of one wait over many transfers (a collective's lanes, a
 * send/recv pair). The caller polls its transfers; after a pass in which
 * nothing moved it calls weft_conn_progress_wait, and after one in which
 * something moved, weft_progress_wait_moved. */
struct weft_progress_wait {
  int64_t window_ms;     /* no progress this long is a timeout */
  int64_t spin;          /* idle polls before sleeping (WEFT_SPIN) */
  int64_t pure;          /* idle polls before yielding between polls */
  int64_t idle;          /* idle polls in a row */
  int64_t stalled_since; /* ms when sleeping started; -1: not stalled */
  int naps;
};

/* Describes what is waiting, for the timeout message ("AllReduce #3 ..."). */
typedef void (*weft_wait_describe_fn)(void *ctx, char *buf, size_t size);

/* window_ms <= 0: WEFT_TIMEOUT seconds. pure: polls before the wait starts
 * yielding the CPU; weft_spin_pure() unless the caller knows better. */
void weft_progress_wait_init(struct weft_progress_wait *w, int64_t window_ms, int64_t pure);

/* How long a wait should poll before it yields: all of WEFT_SPIN when this
 * host has a core for each of `local_ranks` busy ranks, else a few polls
 * (a rank that spins then holds the core its peer needs). */
int64_t weft_spin_pure(int local_ranks);

static inline void weft_progress_wait_moved(struct weft_progress_wait *w) {
  w->idle = 0, w->naps = 0, w->stalled_since = -1;
}

/* Waits a little for one of the n pending transfers to be able to move:
 * spins, then yields, then sleeps in poll() (or naps for transports without
 * a descriptor). Returns ncclSuccess to poll again; on abort (abort_flag)
 * ncclInternalError, logged at INFO; when nothing moved for the window,
 * ncclSystemError with a WARN naming every stalled transfer's peer and
 * channel and what `describe` says. */
ncclResult_t weft_conn_progress_wait(struct weft_progress_wait *w, struct weft_xfer *const *pending,
                                     int n, const _Atomic int *abort_flag,
                                     weft_wait_describe_fn describe, void *ctx);

/* Sends and receives at once until both are done (either may be NULL), so two
 * ranks that send to each other never deadlock. Spins briefly, then polls or
 * sleeps; gives up at the deadline (WARN naming the peer) or on abort. */
ncclResult_t weft_conn_sendrecv(struct weft_conn *send, const void *sbuf, size_t sbytes,
                                struct weft_conn *recv, void *rbuf, size_t rbytes,
                                int64_t deadline_ms);

#endif
