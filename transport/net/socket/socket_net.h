/* The socket network's private state, shared by its files: setup.c
 * (listen, connect, accept), comm.c (isend, irecv, test: the control
 * stream), helper.c (the helper threads that move large messages over the
 * data sockets) and ops.c (the table).
 *
 * A comm pair is one control socket and nsocks data sockets. Every message
 * starts with a header on the control socket, in posting order. A message
 * of at most inline_max bytes follows its header there, moved by the
 * caller's thread (no thread hop: latency). A larger one is cut into
 * chunks (WEFT_NS_MIN_CHUNK..WEFT_NS_MAX_CHUNK bytes) that the sender's
 * helper threads take one at a time, oldest message first, whenever one
 * of their data sockets is free: a fast socket moves more chunks than a
 * slow one. Each chunk travels behind its own header (the message's
 * sequence number, offset and size), so the receiver's helper threads
 * place it wherever it lands. */
#ifndef WEFT_TRANSPORT_NET_SOCKET_SOCKET_NET_H
#define WEFT_TRANSPORT_NET_SOCKET_SOCKET_NET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/net/net.h"
#include "transport/socket.h"

#define WEFT_NS_MAGIC 0x776566744e455453ULL /* "weftNETS" */
#define WEFT_NS_MSG_MAGIC 0x4d534757u       /* "WGSM" */
/* Requests in flight per comm (NCCL's NCCL_NET_MAX_REQUESTS). */
#define WEFT_NS_MAX_REQUESTS 32
/* NCCL's bounds: threads 1..16, threads x sockets per thread <= 64. */
#define WEFT_NS_MAX_THREADS 16
#define WEFT_NS_MAX_SOCKS 64
/* NCCL's smallest chunk: below it a socket's per-call cost dominates. */
#define WEFT_NS_MIN_CHUNK (64 * 1024)

/* What listen writes and connect reads. */
struct weft_ns_handle {
  uint64_t magic;
  uint64_t nonce;
  union weft_sockaddr addr;
};

/* What the connector presents first on each of its sockets. */
struct weft_ns_hello {
  uint64_t magic;
  uint64_t nonce;   /* the listener's, from the handle */
  uint64_t conn_id; /* the connector's: groups one comm's sockets */
  uint32_t index;   /* 0: control; 1..nsocks: data */
  uint32_t nsocks;
  uint32_t nthreads;
  uint32_t pad;
};

/* Every message's header on the control socket. */
struct weft_ns_msg {
  uint64_t size;
  uint32_t flags; /* WEFT_NS_MSG_INLINE */
  uint32_t magic;
};
#define WEFT_NS_MSG_INLINE 0x1u

/* Every chunk's header on its data socket. */
struct weft_ns_chunk {
  uint64_t seq;    /* the message's: requests posted on the comm before it */
  uint64_t offset; /* of the chunk in the message */
  uint32_t size;
  uint32_t magic;
};
#define WEFT_NS_CHUNK_MAGIC 0x4b4e4843u /* "CHNK" */
/* Chunks are at most this large, so that a large message is dealt in
 * enough pieces for the sockets to even out. */
#ifndef WEFT_NS_MAX_CHUNK
#define WEFT_NS_MAX_CHUNK (512 * 1024)
#endif

struct weft_ns_request;

/* A data socket and the chunk it moves now: its helper thread's alone. */
struct weft_ns_sock {
  int fd;
  int is_send;
  /* The chunk under way: req NULL when none. A sender's header goes out
   * ahead of its data (done counts both); a receiver's header is read
   * first (hdr, hdr_done), then the data into data (done), with the next
   * chunk's header read behind it into hdr where it is there already. */
  struct weft_ns_request *req;
  char *data;
  size_t len, done;
  struct weft_ns_chunk hdr;
  size_t hdr_done;
  int eof; /* a receiver's: the peer closed it between chunks */
};

struct weft_ns_comm;

struct weft_ns_thread {
  struct weft_ns_comm *comm;
  int index;
  int wake_fd; /* eventfd: new chunks, or stop */
  /* The thread is about to sleep, or sleeps, in poll(): only then does a
   * poster write wake_fd (helper.c, "Wake-ups"). */
  _Atomic int sleeping;
  /* A receiver's sockets holding a header whose message is not open yet:
   * opening one wakes the thread if it sleeps. */
  _Atomic int parked;
  int started;
  pthread_t tid;
  /* Where the thread's time went (said at INFO NET when the comm closes):
   * asleep with no chunk queued (waiting for the caller to post), asleep
   * with a chunk waiting on its socket (the network), and bytes moved. */
  int64_t idle_ns, sock_ns;
  uint64_t bytes;
};

enum weft_ns_stage {
  WEFT_NS_CTRL,   /* header (and inline data) not through the control socket yet */
  WEFT_NS_CHUNKS, /* control part done; chunks may still be moving */
};

struct weft_ns_request {
  struct weft_ns_comm *comm;
  int used;
  int is_send;
  enum weft_ns_stage stage;
  char *data;
  size_t posted; /* the buffer's size (a send's size) */
  /* A receive's second buffer, for a message larger than posted
   * (weft_net_socket_irecv_spare); in_spare once the header chose it. */
  char *spare;
  size_t spare_size;
  int in_spare;
  /* A send's mirror (weft_net_socket_isend_mirror): each chunk is copied
   * here just before it is sent; NULL: none. */
  char *mirror;
  size_t size;   /* the bytes that move: known to a receiver once the header is in */
  uint64_t seq;  /* requests posted on the comm before this one */
  struct weft_ns_msg msg;
  size_t ctrl_done; /* bytes of header + inline data moved */
  /* What is still moving: a send's chunks, a receive's bytes. */
  _Atomic size_t pending;
  /* A send's chunk size and the bytes dealt to sockets so far (under the
   * comm's deal_lock). */
  size_t chunk, dealt;
  /* A receive's seq + 1 once its helper threads may write into it (the
   * header is in and chose the buffer); 0 before. */
  _Atomic uint64_t open;
};

struct weft_ns_comm {
  int is_send;
  int ctrl_fd;
  char peer[64]; /* the peer's address, for messages */
  int nsocks, nthreads;
  size_t inline_max;
  struct weft_ns_sock socks[WEFT_NS_MAX_SOCKS];
  struct weft_ns_thread threads[WEFT_NS_MAX_THREADS];
  _Atomic int stop;
  /* A sender's messages with chunks not yet dealt, oldest first: the
   * caller's thread adds at deal_tail, the helpers take under deal_lock. */
  struct weft_ns_request *deal[WEFT_NS_MAX_REQUESTS];
  _Atomic uint64_t deal_head, deal_tail;
  pthread_mutex_t deal_lock;
  int deal_lock_made;
  /* A receiver's data sockets the peer closed between chunks: once all
   * are, a message still waiting for bytes fails (weft__ns_test). */
  _Atomic int data_eof;
  struct weft_ns_request reqs[WEFT_NS_MAX_REQUESTS];
  /* Control bytes read ahead: one recv takes a header and a small
   * message's data together (latency). */
  char rbuf[4096];
  size_t rlen, roff;
  uint64_t posted;        /* requests posted so far */
  uint64_t ctrl_seq;      /* the oldest request whose control part is not done */
  _Atomic int err;        /* the first error (ncclResult_t); the comm is dead after it */
  int done_fd;            /* eventfd: a request's last chunk finished */
  _Atomic int done_dirty; /* done_fd was written since the waiter drained it */
  /* A waiter may sleep on wait_fd: set by weft_net_socket_wait_fd, cleared
   * by weft__ns_test; a finished request writes done_fd only while set. */
  _Atomic int waiter;
  int wait_fd;            /* epoll: done_fd, and the control socket while armed */
  int ctrl_armed;         /* the control socket's events in wait_fd now */
  /* When the comm was made (its helper threads' accounting). */
  int64_t born_ns;
};

/* NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, bounded as NCCL does. */
void weft__ns_sock_counts(int *nthreads_out, int *nsocks_out);

/* A comm over connected sockets: fds[0] control, fds[1..nsocks] data
 * (taken over: closed on failure too). Starts the helper threads. */
ncclResult_t weft__ns_comm_create(int is_send, int *fds, int nsocks, int nthreads,
                                  struct weft_ns_comm **out);
/* Stops the threads, closes every socket, frees; after errors too. */
void weft__ns_comm_destroy(struct weft_ns_comm *comm);
/* Records res as the comm's error if it has none yet (the caller has
 * said why); returns whether it did. */
int weft__ns_comm_set_error(struct weft_ns_comm *comm, ncclResult_t res);
/* Records the comm's first error and WARNs once, naming the peer: res is
 * ncclRemoteError (peer closed or reset; err 0 for an orderly close) or
 * ncclSystemError (err: the errno). Returns the comm's error. */
ncclResult_t weft__ns_comm_fail(struct weft_ns_comm *comm, ncclResult_t res, int err,
                                const char *doing);

/* Wakes a waiter on the comm's wait descriptor (done_fd, then done_dirty). */
void weft__ns_signal_done(struct weft_ns_comm *comm);
/* weft__ns_signal_done if a waiter may be asleep (comm->waiter); the
 * caller's change is visible to a waiter that then looks. */
void weft__ns_signal_if_waiting(struct weft_ns_comm *comm);

/* helper.c */
ncclResult_t weft__ns_threads_start(struct weft_ns_comm *comm);
void weft__ns_threads_stop(struct weft_ns_comm *comm);
/* A send: offers req's chunks to the helper threads. */
void weft__ns_post_chunks(struct weft_ns_comm *comm, struct weft_ns_request *req);
/* A receive whose header is in: lets the helper threads write into it. */
void weft__ns_open_recv(struct weft_ns_comm *comm, struct weft_ns_request *req);

/* setup.c */
ncclResult_t weft__ns_listen(int dev, void *handle, void **listen_comm);
ncclResult_t weft__ns_connect(int dev, const void *handle, void **send_comm);
ncclResult_t weft__ns_accept(void *listen_comm, void **recv_comm);
ncclResult_t weft__ns_close_listen(void *listen_comm);

/* comm.c */
ncclResult_t weft__ns_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request);
ncclResult_t weft__ns_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                            void **mhandles, void **request);
ncclResult_t weft__ns_test(void *request, int *done, size_t *sizes);

/* For the host engine's conn transport (transport/net/net_conn.c): a
 * descriptor (the comm's epoll set) that polls readable when req can move
 * on: its control part can move (the control socket is readable, or
 * writable for a send), or a chunk finished. Never blocks. */
int weft_net_socket_wait_fd(void *request);
/* connect, with no data sockets and no helper threads: every message goes
 * on the control socket, moved by the caller's thread (one TCP stream,
 * one socket per comm). The host engine's links take it when the host has
 * no cores to spare for helper threads. */
ncclResult_t weft_net_socket_connect_single(int dev, const void *handle, void **send_comm);
/* connect with `nthreads` helper threads owning one data socket each
 * (NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD left aside): the host
 * engine's links, which get their parallelism from several channels. */
ncclResult_t weft_net_socket_connect_threads(int dev, const void *handle, int nthreads,
                                             void **send_comm);
/* Whether receive request's size is known yet (its header is in): then
 * *size_out is the bytes that arrive. */
int weft_net_socket_recv_size(void *request, size_t *size_out);
/* irecv into data (size bytes) of a message that fits there, else into
 * spare (spare_size bytes): the header decides, before any data byte
 * moves, so the caller need not know how the sender cut its stream. A
 * message larger than both is refused as irecv refuses one. */
ncclResult_t weft_net_socket_irecv_spare(void *recv_comm, void *data, size_t size, void *spare,
                                         size_t spare_size, void **request);
/* isend that also writes the message's size bytes to mirror (which does
 * not overlap data) before the request finishes: the helper thread that
 * takes a chunk copies it there with stores that bypass the cache
 * (base/copy.h), then sends the chunk from data, which the copy just
 * brought into its cache; an inline message is copied by the caller. A
 * broadcast root's copy of its input to its output, made by the sending
 * threads. */
ncclResult_t weft_net_socket_isend_mirror(void *send_comm, void *data, size_t size, void *mirror,
                                          void **request);
/* Whether a receive posted with a spare landed there: known once its
 * size is (weft_net_socket_recv_size), still readable right after the
 * test that finished it (the slot is reused only by a later post). */
int weft_net_socket_recv_in_spare(const void *request);
/* Sends of at most bytes go whole on send_comm's control socket, moved by
 * the caller's thread; larger ones go in chunks through the helper
 * threads. Default: WEFT_NS_MIN_CHUNK (no data sockets: everything). */
void weft_net_socket_set_inline(void *send_comm, size_t bytes);

#endif
