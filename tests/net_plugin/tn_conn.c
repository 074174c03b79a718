/* TestNet's connection setup (tn.h): the receiver listens on loopback;
 * the sender opens the control socket and its data sockets to it, each
 * starting with a hello (the comm's nonce, the socket's index, how many
 * data sockets); accept collects the sockets of one nonce, reading the
 * hellos without blocking over as many calls as they take, and drops
 * strangers. Helper threads start once a comm is complete: after any
 * fork the tests do. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "tests/net_plugin/tn.h"

#define TN_PENDING (4 * (TN_MAX_SOCKS + 1))

/* An accepted socket whose comm is not complete yet. */
struct tn_pend {
  int fd;
  size_t got;
  struct tn_hello hello;
};

struct tn_listen {
  int fd, npend;
  struct tn_pend pend[TN_PENDING];
};

ncclResult_t tn_listen(void *handle, void **listen_comm) {
  struct tn_handle *h = handle;
  socklen_t len = sizeof(h->addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  memset(h, 0, sizeof(*h));
  h->magic = TN_MAGIC;
  h->addr.sin_family = AF_INET;
  h->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&h->addr, sizeof(h->addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&h->addr, &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  struct tn_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  l->fd = fd;
  *listen_comm = l;
  return ncclSuccess;
}

static uint32_t tn_nonce(void) {
  static atomic_uint counter;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ((uint32_t)getpid() << 16) ^ (uint32_t)ts.tv_nsec ^ (atomic_fetch_add(&counter, 1) << 24);
}

/* A loopback connect to a listening socket completes at once (the
 * kernel's backlog takes it) and the hello fits its buffer; the
 * listener's accept may come later. */
static int tn_open(const struct tn_handle *h, const struct tn_hello *hello) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, (const struct sockaddr *)&h->addr, sizeof(h->addr)) != 0 ||
      send(fd, hello, sizeof(*hello), MSG_NOSIGNAL) != (ssize_t)sizeof(*hello)) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

ncclResult_t tn_connect(const void *handle, void **send_comm) {
  const struct tn_handle *h = handle;
  *send_comm = NULL;
  if (h->magic != TN_MAGIC) return ncclInvalidUsage;
  int fds[TN_MAX_SOCKS + 1];
  struct tn_hello hello = {.magic = TN_MAGIC, .nonce = tn_nonce(), .nsocks = (uint32_t)tn_nsocks};
  for (int i = 0; i <= tn_nsocks; i++) {
    hello.index = (uint32_t)i;
    fds[i] = tn_open(h, &hello);
    if (fds[i] >= 0) continue;
    int e = errno;
    while (i > 0) close(fds[--i]);
    /* Not listening yet: the caller tries again. */
    if (hello.index == 0 && (e == ECONNREFUSED || e == EAGAIN)) return ncclSuccess;
    TN_WARN("TestNet v%d: opening socket %u of %d to the listener failed: %s", tn_version,
            hello.index, tn_nsocks + 1, strerror(e));
    return ncclSystemError;
  }
  return tn_comm_create(1, fds, tn_nsocks, send_comm);
}

/* Reads what has come of each pending socket's hello; drops a socket
 * that closed, failed or is not TestNet's. */
static void tn_pend_read(struct tn_listen *l) {
  for (int i = 0; i < l->npend; i++) {
    struct tn_pend *p = &l->pend[i];
    while (p->got < sizeof(p->hello)) {
      ssize_t n = recv(p->fd, (char *)&p->hello + p->got, sizeof(p->hello) - p->got, MSG_DONTWAIT);
      if (n > 0) p->got += (size_t)n;
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      p->got = SIZE_MAX;
    }
    const struct tn_hello *hl = &p->hello;
    int bad = p->got == SIZE_MAX ||
              (p->got == sizeof(*hl) &&
               (hl->magic != TN_MAGIC || hl->nsocks > TN_MAX_SOCKS || hl->index > hl->nsocks));
    if (bad) {
      close(p->fd);
      l->pend[i--] = l->pend[--l->npend];
    }
  }
}

/* The comm of the first nonce whose every socket is here, or NULL. */
static ncclResult_t tn_pend_take(struct tn_listen *l, void **recv_comm) {
  for (int i = 0; i < l->npend; i++) {
    const struct tn_hello *first = &l->pend[i].hello;
    if (l->pend[i].got != sizeof(*first)) continue;
    int fds[TN_MAX_SOCKS + 1], have = 0, nsocks = (int)first->nsocks;
    uint32_t nonce = first->nonce;
    for (int k = 0; k <= nsocks; k++) fds[k] = -1;
    for (int j = 0; j < l->npend; j++) {
      const struct tn_pend *p = &l->pend[j];
      if (p->got == sizeof(p->hello) && p->hello.nonce == nonce && fds[p->hello.index] < 0)
        fds[p->hello.index] = p->fd, have++;
    }
    if (have != nsocks + 1) continue;
    for (int j = 0; j < l->npend; j++)
      if (l->pend[j].got == sizeof(l->pend[j].hello) && l->pend[j].hello.nonce == nonce &&
          fds[l->pend[j].hello.index] == l->pend[j].fd)
        l->pend[j--] = l->pend[--l->npend];
    return tn_comm_create(0, fds, nsocks, recv_comm);
  }
  return ncclSuccess;
}

ncclResult_t tn_accept(void *listen_comm, void **recv_comm, ncclNetDeviceHandle_v8_t **dev_comm) {
  struct tn_listen *l = listen_comm;
  (void)dev_comm;
  *recv_comm = NULL;
  while (l->npend < TN_PENDING) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0) return ncclSystemError;
    l->pend[l->npend++] = (struct tn_pend){.fd = fd, .got = 0};
  }
  tn_pend_read(l);
  return tn_pend_take(l, recv_comm);
}

ncclResult_t tn_close_listen(void *listen_comm) {
  struct tn_listen *l = listen_comm;
  for (int i = 0; i < l->npend; i++) close(l->pend[i].fd);
  close(l->fd);
  free(l);
  return ncclSuccess;
}
