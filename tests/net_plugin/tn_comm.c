/* TestNet's comms and requests (tn.h): posting, the control stream the
 * caller's thread moves inside isend/irecv/test without blocking, the
 * chunks handed to the helper threads, and test. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tests/net_plugin/tn.h"

ncclResult_t tn_comm_create(int is_send, int *fds, int nsocks, void **out) {
  struct tn_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    for (int i = 0; i <= nsocks; i++) close(fds[i]);
    return ncclSystemError;
  }
  int one = 1;
  for (int i = 0; i <= nsocks; i++) {
    setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    fcntl(fds[i], F_SETFL, fcntl(fds[i], F_GETFL) | O_NONBLOCK);
  }
  c->is_send = is_send;
  c->ctrl_fd = fds[0];
  c->nsocks = nsocks;
  for (int i = 0; i < TN_MAX_SOCKS; i++) c->socks[i].fd = c->socks[i].wake_fd = -1;
  for (int i = 0; i < nsocks; i++) c->socks[i].fd = fds[i + 1];
  ncclResult_t res = tn_threads_start(c);
  if (res != ncclSuccess) {
    tn_close(c);
    return res;
  }
  *out = c;
  return ncclSuccess;
}

/* Hands a message larger than TN_INLINE_MAX to the helper threads: at
 * most one chunk per data socket, none under TN_INLINE_MAX bytes. */
static void tn_chunks_post(struct tn_comm *c, struct tn_req *r) {
  size_t size = (size_t)r->header;
  size_t n = (size + TN_INLINE_MAX - 1) / TN_INLINE_MAX;
  if (n > (size_t)c->nsocks) n = (size_t)c->nsocks;
  size_t chunk = (size + n - 1) / n;
  atomic_store_explicit(&r->pending, (int)n, memory_order_relaxed);
  for (size_t off = 0; off < size; off += chunk) {
    struct tn_sock *sk = &c->socks[c->next_sock];
    c->next_sock = (c->next_sock + 1) % c->nsocks;
    tn_sock_push(sk, r, r->data + off, size - off < chunk ? size - off : chunk);
  }
}

static int tn_inline(const struct tn_comm *c, uint64_t size) {
  return c->nsocks == 0 || size <= TN_INLINE_MAX;
}

/* What a control-socket call returned: 1 moved (the caller goes on), 0
 * when it would block, -1 on an error or a closed peer, 2 on EINTR. */
static int tn_ctrl_rc(ssize_t n) {
  if (n > 0) return 1;
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (n < 0 && errno == EINTR) return 2;
  return -1;
}

/* A send's control part, its size and its inline bytes, in one sendmsg
 * (header_done counts both): 1 when all went, else tn_ctrl_rc's. */
static int tn_ctrl_send(struct tn_comm *c, struct tn_req *r) {
  const size_t hdr = sizeof(r->header), body = tn_inline(c, r->header) ? (size_t)r->header : 0;
  while (r->header_done < hdr + body) {
    struct iovec iov[2];
    size_t off = r->header_done, n = 0;
    if (off < hdr) iov[n++] = (struct iovec){(char *)&r->header + off, hdr - off}, off = hdr;
    if (body > 0) iov[n++] = (struct iovec){r->data + (off - hdr), body - (off - hdr)};
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = n};
    ssize_t k = sendmsg(c->ctrl_fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
    int rc = tn_ctrl_rc(k);
    if (rc == 1) r->header_done += (size_t)k;
    if (rc == 0 || rc < 0) return rc;
  }
  return 1;
}

/* Receives bytes [*done, want) of dst from the control socket: what the
 * read-ahead buffer holds first, then straight into dst when at least a
 * buffer's worth is still wanted, else through the buffer (one recv then
 * brings several sizes and small messages). */
static int tn_ctrl_read(struct tn_comm *c, char *dst, size_t want, size_t *done) {
  while (*done < want) {
    if (c->roff < c->rlen) {
      size_t n = c->rlen - c->roff < want - *done ? c->rlen - c->roff : want - *done;
      memcpy(dst + *done, c->rbuf + c->roff, n);
      c->roff += n;
      *done += n;
      continue;
    }
    int direct = want - *done >= sizeof(c->rbuf);
    ssize_t k = recv(c->ctrl_fd, direct ? dst + *done : c->rbuf,
                     direct ? want - *done : sizeof(c->rbuf), MSG_DONTWAIT);
    int rc = tn_ctrl_rc(k);
    if (rc == 1 && direct) *done += (size_t)k;
    if (rc == 1 && !direct) c->roff = 0, c->rlen = (size_t)k;
    if (rc == 0 || rc < 0) return rc;
  }
  return 1;
}

/* One request's part of the control stream: its size, then its bytes
 * when inline. A receiver that learns the size of a larger message hands
 * out its chunks (once: the request's control part is then done). */
static int tn_ctrl_req(struct tn_comm *c, struct tn_req *r) {
  if (c->is_send) return tn_ctrl_send(c, r);
  int rc = tn_ctrl_read(c, (char *)&r->header, sizeof(r->header), &r->header_done);
  if (rc != 1) return rc;
  if (r->header > r->size) {
    TN_WARN("TestNet v%d: a %llu-byte message for a %zu-byte receive", tn_version,
            (unsigned long long)r->header, r->size);
    atomic_store(&c->err, ncclRemoteError); /* said; the caller adds nothing */
    return -1;
  }
  if (tn_inline(c, r->header)) return tn_ctrl_read(c, r->data, (size_t)r->header, &r->inline_done);
  tn_chunks_post(c, r);
  return 1;
}

/* Moves the control stream, requests in posting order, as far as the
 * control socket takes it now. */
static ncclResult_t tn_ctrl_progress(struct tn_comm *c) {
  for (int i = 0; i < c->count; i++) {
    struct tn_req *r = &c->reqs[(c->head + i) % TN_NREQ];
    if (!r->used || r->ctrl_done) continue;
    int rc = tn_ctrl_req(c, r);
    if (rc < 0) {
      int expected = ncclSuccess;
      if (atomic_compare_exchange_strong(&c->err, &expected, ncclRemoteError))
        TN_WARN("TestNet v%d: the control socket of a %s comm failed or was closed by the peer",
                tn_version, c->is_send ? "send" : "recv");
      return ncclRemoteError;
    }
    if (rc == 0) return ncclSuccess;
    r->ctrl_done = 1;
    c->ctrl_left--;
  }
  return ncclSuccess;
}

ncclResult_t tn_post(struct tn_comm *c, void *data, size_t size, void **request) {
  *request = NULL;
  if (atomic_load(&c->err) != ncclSuccess) return ncclRemoteError;
  struct tn_req *r = &c->reqs[(c->head + c->count) % TN_NREQ];
  if (c->count == TN_NREQ || r->used) return tn_ctrl_progress(c);
  r->comm = c;
  r->used = 1;
  r->ctrl_done = 0;
  r->data = data;
  r->size = size;
  r->header = c->is_send ? size : 0;
  r->header_done = r->inline_done = 0;
  r->dev_dst = NULL;
  r->cuda = NULL;
  r->flush = 0;
  atomic_store_explicit(&r->pending, 0, memory_order_relaxed);
  c->count++;
  c->ctrl_left++;
  /* A sender's chunks start moving at once, before its size is sent: the
   * data sockets are streams of their own. */
  if (c->is_send && !tn_inline(c, size)) tn_chunks_post(c, r);
  *request = r;
  return tn_ctrl_progress(c);
}

ncclResult_t tn_test(void *request, int *done, int *sizes) {
  struct tn_req *r = request;
  struct tn_comm *c = r->comm;
  *done = 0;
  if (r->flush) { /* the copy to the device finished before its receive said done */
    *done = 1;
    if (sizes != NULL) sizes[0] = 0;
    return ncclSuccess;
  }
  /* Whichever request is tested, the control stream moves: a receiver
   * that waits on one message's chunks reads the next one's size and
   * hands its chunks out meanwhile, so the helper threads never wait for
   * the caller between messages. */
  if (c->ctrl_left > 0) {
    ncclResult_t res = tn_ctrl_progress(c);
    if (res != ncclSuccess) return res;
  }
  if (atomic_load(&c->err) != ncclSuccess) return ncclRemoteError;
  if (!r->ctrl_done || atomic_load_explicit(&r->pending, memory_order_acquire) != 0)
    return ncclSuccess;
  if (r->dev_dst != NULL) {
    ncclResult_t res = tn_cuda_copy(r->cuda, r->dev_dst, r->data, (size_t)r->header);
    if (res != ncclSuccess) {
      atomic_store(&c->err, res);
      return res;
    }
  }
  *done = 1;
  if (sizes != NULL) sizes[0] = (int)r->header;
  c->bytes += r->header;
  c->messages++;
  r->used = 0;
  while (c->count > 0 && !c->reqs[c->head].used) {
    c->head = (c->head + 1) % TN_NREQ;
    c->count--;
  }
  return ncclSuccess;
}

ncclResult_t tn_close(void *comm) {
  struct tn_comm *c = comm;
  tn_threads_stop(c);
  if (c->is_send && tn_log != NULL) {
    char socks[160] = "";
    size_t len = 0;
    for (int i = 0; i < c->nsocks && len < sizeof(socks); i++)
      len += (size_t)snprintf(socks + len, sizeof(socks) - len, "%s%llu", i ? ", " : "",
                              c->socks[i].bytes);
    tn_log(NCCL_LOG_INFO, 16 /* NET */, __FILE__, __LINE__,
           "TestNet v%d: send comm closed after %llu bytes in %llu messages (data sockets: %d, "
           "bytes on each: %s)",
           tn_version, c->bytes, c->messages, c->nsocks, c->nsocks ? socks : "-");
  }
  if (!c->is_send && tn_log != NULL)
    tn_log(NCCL_LOG_INFO, 16 /* NET */, __FILE__, __LINE__,
           "TestNet v%d: recv comm closed after %llu bytes in %llu messages, %llu flushes of "
           "device memory",
           tn_version, c->bytes, c->messages, c->flushes);
  close(c->ctrl_fd);
  for (int i = 0; i < c->nsocks; i++) close(c->socks[i].fd);
  free(c);
  return ncclSuccess;
}
