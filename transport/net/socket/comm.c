/* The socket network's comms and requests: isend, irecv and test, and the
 * control stream that carries every message's header (and small messages
 * whole) in posting order. The caller's thread moves the control stream
 * inside isend/irecv/test, never blocking; large messages' chunks are the
 * helper threads' (helper.c). */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/check.h"
#include "base/clock.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/socket/socket_net.h"

void weft__ns_sock_counts(int *nthreads_out, int *nsocks_out) {
  int64_t t = weft_param_int(WEFT_PARAM_SOCKET_NTHREADS);
  int64_t s = weft_param_int(WEFT_PARAM_NSOCKS_PERTHREAD);
  if (t * s > WEFT_NS_MAX_SOCKS) {
    /* NCCL's rule: the product is capped by lowering sockets per thread. */
    static atomic_int warned;
    int64_t cap = WEFT_NS_MAX_SOCKS / t;
    if (atomic_fetch_add(&warned, 1) == 0)
      WARN(
          "NCCL_SOCKET_NTHREADS=%lld x NCCL_NSOCKS_PERTHREAD=%lld is over %d sockets per "
          "connection; using %lld sockets per thread",
          (long long)t, (long long)s, WEFT_NS_MAX_SOCKS, (long long)cap);
    s = cap;
  }
  *nthreads_out = (int)t;
  *nsocks_out = (int)(t * s);
}

int weft__ns_comm_set_error(struct weft_ns_comm *comm, ncclResult_t res) {
  int expected = ncclSuccess;
  return atomic_compare_exchange_strong(&comm->err, &expected, (int)res);
}

ncclResult_t weft__ns_comm_fail(struct weft_ns_comm *comm, ncclResult_t res, int err,
                                const char *doing) {
  if (weft__ns_comm_set_error(comm, res)) {
    if (res == ncclRemoteError)
      WARN("net/socket: connection with %s closed by the peer while %s%s%s", comm->peer, doing,
           err ? ": " : "", err ? strerror(err) : "");
    else
      WARN("net/socket: %s with %s failed: %s", doing, comm->peer, strerror(err));
  }
  return (ncclResult_t)atomic_load(&comm->err);
}

static void peer_name(int fd, char *buf, size_t size) {
  union weft_sockaddr a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, &a.sa, &len) != 0) a.sa.sa_family = AF_UNSPEC;
  weft_sockaddr_str(&a, buf, size);
}

ncclResult_t weft__ns_comm_create(int is_send, int *fds, int nsocks, int nthreads,
                                  struct weft_ns_comm **out) {
  ncclResult_t res = ncclSystemError;
  struct weft_ns_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    WARN("net/socket: out of memory for a comm (%zu bytes)", sizeof(*c));
    for (int i = 0; i <= nsocks; i++) weft_socket_close(&fds[i]);
    return ncclSystemError;
  }
  c->is_send = is_send;
  c->nsocks = nsocks;
  c->nthreads = nthreads;
  /* Without data sockets every message goes on the control socket. */
  c->inline_max = nsocks > 0 ? WEFT_NS_MIN_CHUNK : SIZE_MAX;
  c->ctrl_fd = fds[0];
  c->done_fd = c->wait_fd = -1;
  c->born_ns = weft_time_ns();
  for (int i = 0; i < nsocks; i++) {
    c->socks[i].fd = fds[i + 1];
    c->socks[i].is_send = is_send;
  }
  for (int i = 0; i < nthreads; i++) c->threads[i].wake_fd = -1;
  peer_name(c->ctrl_fd, c->peer, sizeof(c->peer));
  if (pthread_mutex_init(&c->deal_lock, NULL) != 0) {
    WARN("net/socket: a mutex for a comm with %s: out of resources", c->peer);
    goto fail;
  }
  c->deal_lock_made = 1;
  for (int i = 0; i <= nsocks; i++) WEFT_CHECK_GOTO(weft_socket_set_data_opts(fds[i]), res, fail);
  c->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  c->wait_fd = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event done = {.events = EPOLLIN, .data.fd = c->done_fd};
  struct epoll_event ctrl = {.events = 0, .data.fd = c->ctrl_fd};
  if (c->done_fd < 0 || c->wait_fd < 0 ||
      epoll_ctl(c->wait_fd, EPOLL_CTL_ADD, c->done_fd, &done) != 0 ||
      epoll_ctl(c->wait_fd, EPOLL_CTL_ADD, c->ctrl_fd, &ctrl) != 0) {
    WARN("net/socket: eventfd/epoll for a comm with %s failed: %s", c->peer, strerror(errno));
    goto fail;
  }
  WEFT_CHECK_GOTO(weft__ns_threads_start(c), res, fail);
  INFO(WEFT_NET | WEFT_INIT, "net/socket: %s comm with %s: %d data sockets, %d helper threads",
       is_send ? "send" : "recv", c->peer, nsocks, nthreads);
  *out = c;
  return ncclSuccess;
fail:
  weft__ns_comm_destroy(c);
  return res;
}

void weft__ns_comm_destroy(struct weft_ns_comm *comm) {
  if (comm == NULL) return;
  weft__ns_threads_stop(comm);
  weft_socket_close(&comm->ctrl_fd);
  for (int i = 0; i < comm->nsocks; i++) weft_socket_close(&comm->socks[i].fd);
  weft_socket_close(&comm->done_fd);
  weft_socket_close(&comm->wait_fd);
  if (comm->deal_lock_made) pthread_mutex_destroy(&comm->deal_lock);
  free(comm);
}

/* ---- The control stream -------------------------------------------------- */

/* Header and inline data out; *finished when all of it left. */
static ncclResult_t ctrl_send(struct weft_ns_comm *c, struct weft_ns_request *r, int *finished) {
  size_t data = (r->msg.flags & WEFT_NS_MSG_INLINE) ? r->size : 0;
  struct iovec iov[2] = {{&r->msg, sizeof(r->msg)}, {r->data, data}};
  int err = 0;
  ncclResult_t res = weft_socket_move(c->ctrl_fd, 1, iov, &r->ctrl_done, &err);
  if (res != ncclSuccess) return weft__ns_comm_fail(c, res, err, "sending");
  *finished = r->ctrl_done == sizeof(r->msg) + data;
  return ncclSuccess;
}

/* A header arrived: check it against the posted receive. */
static ncclResult_t ctrl_header(struct weft_ns_comm *c, struct weft_ns_request *r) {
  if (r->msg.magic != WEFT_NS_MSG_MAGIC) {
    WARN(
        "net/socket: %s sent a message header with a bad magic (0x%x): the stream is out of "
        "step",
        c->peer, r->msg.magic);
    weft__ns_comm_set_error(c, ncclSystemError);
    return ncclSystemError;
  }
  if (r->msg.size > r->posted && r->spare != NULL && r->msg.size <= r->spare_size) {
    r->data = r->spare;
    r->posted = r->spare_size;
    r->in_spare = 1;
  }
  if (r->msg.size > r->posted) {
    WARN(
        "net/socket: %s sent a message of %llu bytes but the receive posted takes %zu; "
        "nothing was written past the buffer",
        c->peer, (unsigned long long)r->msg.size, r->posted);
    weft__ns_comm_set_error(c, ncclInvalidUsage);
    return ncclInvalidUsage;
  }
  r->size = (size_t)r->msg.size;
  if (!(r->msg.flags & WEFT_NS_MSG_INLINE) && r->size > 0) weft__ns_open_recv(c, r);
  return ncclSuccess;
}

/* Reads ahead what the control socket holds (one syscall) when nothing
 * is buffered. */
static ncclResult_t ctrl_fill(struct weft_ns_comm *c) {
  if (c->roff < c->rlen) return ncclSuccess;
  c->roff = c->rlen = 0;
  struct iovec iov[2] = {{c->rbuf, sizeof(c->rbuf)}, {NULL, 0}};
  int err = 0;
  ncclResult_t res = weft_socket_move(c->ctrl_fd, 0, iov, &c->rlen, &err);
  if (res != ncclSuccess) return weft__ns_comm_fail(c, res, err, "receiving");
  return ncclSuccess;
}

/* Takes up to n read-ahead bytes into dst; returns how many. */
static size_t ctrl_take(struct weft_ns_comm *c, void *dst, size_t n) {
  size_t have = c->rlen - c->roff;
  if (n > have) n = have;
  memcpy(dst, c->rbuf + c->roff, n);
  c->roff += n;
  return n;
}

/* Header, then inline data in; *finished when the control part is in.
 * Data past what was read ahead comes straight into the buffer: exactly
 * the message's bytes, never the next header. */
static ncclResult_t ctrl_recv(struct weft_ns_comm *c, struct weft_ns_request *r, int *finished) {
  *finished = 0;
  if (r->ctrl_done < sizeof(r->msg)) {
    WEFT_CHECK(ctrl_fill(c));
    r->ctrl_done += ctrl_take(c, (char *)&r->msg + r->ctrl_done, sizeof(r->msg) - r->ctrl_done);
    if (r->ctrl_done < sizeof(r->msg)) return ncclSuccess;
    WEFT_CHECK(ctrl_header(c, r));
  }
  size_t data = (r->msg.flags & WEFT_NS_MSG_INLINE) ? r->size : 0;
  size_t got = r->ctrl_done - sizeof(r->msg);
  if (got < data) got += ctrl_take(c, r->data + got, data - got);
  if (got < data) {
    /* Nothing read ahead is left: the rest of this message straight into
     * the buffer and what follows it (the next header) into the read-ahead
     * buffer, in one syscall. */
    struct iovec iov[2] = {{r->data + got, data - got}, {c->rbuf, sizeof(c->rbuf)}};
    size_t more = 0;
    int err = 0;
    ncclResult_t res = weft_socket_move(c->ctrl_fd, 0, iov, &more, &err);
    c->roff = 0;
    c->rlen = more > data - got ? more - (data - got) : 0;
    got += more - c->rlen;
    if (res != ncclSuccess) {
      r->ctrl_done = sizeof(r->msg) + got;
      return weft__ns_comm_fail(c, res, err, "receiving");
    }
  }
  r->ctrl_done = sizeof(r->msg) + got;
  *finished = got == data;
  return ncclSuccess;
}

/* Moves the control stream as far as it goes now, oldest request first. */
static ncclResult_t ctrl_progress(struct weft_ns_comm *c) {
  while (c->ctrl_seq != c->posted) {
    struct weft_ns_request *r = &c->reqs[c->ctrl_seq % WEFT_NS_MAX_REQUESTS];
    int finished = 0;
    WEFT_CHECK(r->is_send ? ctrl_send(c, r, &finished) : ctrl_recv(c, r, &finished));
    if (!finished) break;
    r->stage = WEFT_NS_CHUNKS;
    c->ctrl_seq++;
  }
  return ncclSuccess;
}

/* ---- Requests ------------------------------------------------------------- */

/* The next request slot, or NULL when the oldest one there is still out. */
static struct weft_ns_request *req_take(struct weft_ns_comm *c, int is_send, void *data,
                                        size_t size) {
  struct weft_ns_request *r = &c->reqs[c->posted % WEFT_NS_MAX_REQUESTS];
  if (r->used) return NULL;
  r->comm = c;
  r->used = 1;
  r->is_send = is_send;
  r->stage = WEFT_NS_CTRL;
  r->data = data;
  r->posted = size;
  r->spare = NULL;
  r->spare_size = 0;
  r->in_spare = 0;
  r->mirror = NULL;
  r->size = is_send ? size : 0;
  r->ctrl_done = 0;
  r->seq = c->posted;
  atomic_store(&r->pending, 0);
  atomic_store(&r->open, 0);
  r->msg = (struct weft_ns_msg){.size = size, .magic = WEFT_NS_MSG_MAGIC};
  return r;
}

static ncclResult_t isend_post(struct weft_ns_comm *c, void *data, size_t size, char *mirror,
                               void **request) {
  *request = NULL;
  ncclResult_t err = (ncclResult_t)atomic_load(&c->err);
  if (err != ncclSuccess) return err;
  struct weft_ns_request *r = req_take(c, 1, data, size);
  if (r == NULL) return ncclSuccess;
  if (size <= c->inline_max) {
    r->msg.flags |= WEFT_NS_MSG_INLINE;
    if (mirror != NULL && size > 0) memcpy(mirror, data, size);
  } else if (size > 0) {
    r->mirror = mirror;
    weft__ns_post_chunks(c, r);
  }
  c->posted++;
  WEFT_CHECK(ctrl_progress(c));
  *request = r;
  return ncclSuccess;
}

ncclResult_t weft__ns_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request) {
  (void)tag, (void)mhandle;
  return isend_post(send_comm, data, size, NULL, request);
}

ncclResult_t weft_net_socket_isend_mirror(void *send_comm, void *data, size_t size, void *mirror,
                                          void **request) {
  return isend_post(send_comm, data, size, mirror, request);
}

ncclResult_t weft_net_socket_irecv_spare(void *recv_comm, void *data, size_t size, void *spare,
                                         size_t spare_size, void **request) {
  struct weft_ns_comm *c = recv_comm;
  *request = NULL;
  ncclResult_t err = (ncclResult_t)atomic_load(&c->err);
  if (err != ncclSuccess) return err;
  struct weft_ns_request *r = req_take(c, 0, data, size);
  if (r == NULL) return ncclSuccess;
  r->spare = spare;
  r->spare_size = spare != NULL ? spare_size : 0;
  c->posted++;
  WEFT_CHECK(ctrl_progress(c));
  *request = r;
  return ncclSuccess;
}

int weft_net_socket_recv_in_spare(const void *request) {
  return ((const struct weft_ns_request *)request)->in_spare;
}

ncclResult_t weft__ns_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                            void **mhandles, void **request) {
  (void)tags, (void)mhandles;
  *request = NULL;
  if (n != 1) {
    WARN("net/socket: irecv of %d buffers at once; this network takes 1 (max_recvs)", n);
    return ncclInvalidArgument;
  }
  return weft_net_socket_irecv_spare(recv_comm, data[0], sizes[0], NULL, 0, request);
}

ncclResult_t weft__ns_test(void *request, int *done, size_t *sizes) {
  struct weft_ns_request *r = request;
  struct weft_ns_comm *c = r->comm;
  *done = 0;
  atomic_store_explicit(&c->waiter, 0, memory_order_relaxed); /* awake: it looks */
  WEFT_CHECK(ctrl_progress(c));
  ncclResult_t err = (ncclResult_t)atomic_load(&c->err);
  if (err != ncclSuccess) return err;
  if (r->stage != WEFT_NS_CHUNKS) return ncclSuccess;
  if (atomic_load_explicit(&r->pending, memory_order_acquire) != 0) {
    /* The peer closed every data socket: the bytes still missing never come. */
    if (!r->is_send && atomic_load(&c->data_eof) == c->nsocks)
      return weft__ns_comm_fail(c, ncclRemoteError, 0, "receiving a message's chunks");
    return ncclSuccess;
  }
  /* A helper thread may have failed on this request's last chunk. */
  err = (ncclResult_t)atomic_load(&c->err);
  if (err != ncclSuccess) return err;
  *done = 1;
  if (sizes != NULL) sizes[0] = r->size;
  r->used = 0;
  return ncclSuccess;
}

int weft_net_socket_recv_size(void *request, size_t *size_out) {
  const struct weft_ns_request *r = request;
  if (r->stage != WEFT_NS_CHUNKS) return 0;
  *size_out = r->size;
  return 1;
}

void weft_net_socket_set_inline(void *send_comm, size_t bytes) {
  struct weft_ns_comm *c = send_comm;
  c->inline_max = bytes;
}

int weft_net_socket_wait_fd(void *request) {
  struct weft_ns_request *r = request;
  struct weft_ns_comm *c = r->comm;
  /* The control socket wakes the waiter only while this request's control
   * part is what waits: else it is writable (or holds the next header)
   * all the time. */
  int want = r->stage != WEFT_NS_CTRL ? 0 : r->is_send ? EPOLLOUT : EPOLLIN;
  if (want != c->ctrl_armed) {
    struct epoll_event ev = {.events = (uint32_t)want, .data.fd = c->ctrl_fd};
    if (epoll_ctl(c->wait_fd, EPOLL_CTL_MOD, c->ctrl_fd, &ev) != 0) return -1;
    c->ctrl_armed = want;
  }
  /* done_fd is drained only when something signalled it (done_dirty,
   * set after each write): an idle wait costs no syscall for it. */
  if (atomic_exchange(&c->done_dirty, 0)) {
    uint64_t v;
    while (read(c->done_fd, &v, sizeof(v)) > 0) {
    }
  }
  /* Then say a waiter may sleep and look: what finishes after the look
   * sees the flag and signals; what finished before it is seen here, and
   * wakes the waiter at once (helper.c, "Wake-ups"). */
  atomic_store_explicit(&c->waiter, 1, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst);
  int ready = r->stage == WEFT_NS_CTRL
                  ? !r->is_send && c->roff < c->rlen /* read ahead */
                  : atomic_load(&r->pending) == 0 || atomic_load(&c->data_eof) == c->nsocks;
  if (ready || atomic_load(&c->err) != ncclSuccess) weft__ns_signal_done(c);
  return c->wait_fd;
}
