/* TestNet's insides, shared by its files (test_net.c: the ABI tables;
 * tn_conn.c: listen, connect, accept; tn_comm.c: requests and the control
 * stream; tn_thread.c: the helper threads). Written against the plugin
 * ABI alone: nothing of weft but net_plugin_abi.h and nccl.h.
 *
 * A comm is one control socket and TESTNET_NSOCKS data sockets (2 by
 * default), each data socket moved by a helper thread of its own, as
 * NCCL's socket network does. Every message's 8-byte size goes on the
 * control socket in posting order, the message itself too when it is at
 * most TN_INLINE_MAX bytes (or there are no data sockets). A larger one is
 * cut into at most one chunk per data socket, the sockets taken round
 * robin from where the previous message stopped; both sides walk the same
 * sequence, the receiver once it has read the size. The caller's thread
 * moves the control socket inside isend/irecv/test, never blocking; the
 * helper threads move the chunks and sleep in poll() when they have none.
 *
 * With TESTNET_CUDA_PTRS=1 (and a build with CUDA) TestNet also takes
 * device memory (NCCL_PTR_CUDA), staged through pinned host copies
 * (tn_cuda.c), and its iflush is a request of its own, counted per recv
 * comm and logged when the comm closes. */
#ifndef TESTNET_TN_H
#define TESTNET_TN_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "transport/net/plugin/net_plugin_abi.h"

/* The ABI version of the module (test_net.c's TESTNET_VERSION); the
 * tn_*.c files are compiled once for every version, so they read it. */
extern const int tn_version;

#define TN_MAGIC 0x54657374u
#define TN_MAX_SOCKS 8
#define TN_DEFAULT_SOCKS 2
/* Messages up to this size go whole on the control socket; larger ones
 * are cut into chunks of at least this size. */
#define TN_INLINE_MAX (64 * 1024)
#define TN_NREQ NET_PLUGIN_MAX_REQUESTS

/* What listen writes and connect reads. */
struct tn_handle {
  uint32_t magic;
  struct sockaddr_in addr;
};

/* The first bytes on every socket of a comm: which comm (nonce) and
 * which of its sockets (0: control). */
struct tn_hello {
  uint32_t magic, nonce, index, nsocks;
};

struct tn_comm;
struct tn_req {
  struct tn_comm *comm;
  int used;
  char *data;
  size_t size;        /* posted (recv: capacity) */
  uint64_t header;    /* the message's size on the wire */
  size_t header_done; /* send: the size and the inline bytes */
  size_t inline_done;
  int ctrl_done;      /* size (and inline bytes) moved on the control socket */
  atomic_int pending; /* chunks the helper threads still move */
  /* A receive staged for device memory: test copies the bytes from data
   * (the host copy) to dev_dst before it says done. */
  char *dev_dst;
  void *cuda;
  int flush; /* an iflush's request: done at its first test */
};

/* One chunk queued on a data socket. */
struct tn_task {
  struct tn_req *req;
  char *data;
  size_t size, done;
};

/* A data socket and its helper thread. The caller's thread appends tasks
 * (tail), the helper thread retires them (head). */
struct tn_sock {
  struct tn_comm *comm;
  int fd, wake_fd, started;
  pthread_t tid;
  struct tn_task tasks[TN_NREQ];
  atomic_uint head, tail;
  atomic_int sleeping; /* the thread waits on wake_fd alone */
  unsigned long long bytes;
};

struct tn_comm {
  int is_send, ctrl_fd, nsocks, next_sock;
  atomic_int err, stop;
  struct tn_req reqs[TN_NREQ];
  int head, count;
  int ctrl_left;   /* requests whose control part is not done */
  char rbuf[4096]; /* recv: control bytes read ahead, [roff, rlen) */
  size_t roff, rlen;
  struct tn_sock socks[TN_MAX_SOCKS];
  unsigned long long bytes, messages;
  unsigned long long flushes; /* recv: iflush calls on device memory */
  struct tn_req flush_req;    /* recv: what iflush returns */
};

extern ncclDebugLogger_t tn_log;
extern int tn_nsocks;    /* data sockets of the comms this process connects */
extern int tn_cuda_ptrs; /* TESTNET_CUDA_PTRS=1 in a build with CUDA */

#define TN_WARN(...) \
  (tn_log != NULL ? tn_log(NCCL_LOG_WARN, ~0ul, __FILE__, __LINE__, __VA_ARGS__) : (void)0)

/* tn_conn.c */
ncclResult_t tn_listen(void *handle, void **listen_comm);
ncclResult_t tn_connect(const void *handle, void **send_comm);
ncclResult_t tn_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v8_t **dev_comm);
ncclResult_t tn_close_listen(void *listen_comm);

/* tn_comm.c */
ncclResult_t tn_comm_create(int is_send, int *fds, int nsocks, void **out);
ncclResult_t tn_post(struct tn_comm *c, void *data, size_t size, void **request);
ncclResult_t tn_test(void *request, int *done, int *sizes);
ncclResult_t tn_close(void *comm);

/* tn_cuda.c: device regions staged through pinned host copies. */
int tn_cuda_built(void);
ncclResult_t tn_cuda_open(const void *dev_ptr, size_t size, char **stage_out, void **cuda_out);
ncclResult_t tn_cuda_copy(void *cuda, void *dst, const void *src, size_t size);
void tn_cuda_close(void *cuda, char *stage);

/* tn_thread.c */
ncclResult_t tn_threads_start(struct tn_comm *c);
void tn_threads_stop(struct tn_comm *c);
void tn_sock_push(struct tn_sock *sk, struct tn_req *r, char *data, size_t size);

#endif
