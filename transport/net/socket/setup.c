/* The socket network's connection setup: listen, connect and accept, none
 * of which blocks. The handle holds a magic, a random nonce and the
 * listener's address. The connector opens 1 + nsocks sockets and presents
 * on each a hello with the nonce and its own random comm id; the listener
 * groups accepted sockets by comm id and drops every stranger (bad magic or
 * nonce, no hello in time) while it keeps listening, so a stray client
 * cannot take a link. connect's state lives in a process-wide list keyed
 * by the handle, since the caller calls again with the same handle. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/socket/socket_net.h"

/* How long an accepted client may take to present its hello. */
#define HELLO_TIMEOUT_MS 10000
/* Accepted sockets waiting for their hello or for their comm's others. */
#define MAX_PENDING 256
#define RETRY_MAX_MS 100
/* A connect not called again for this long was abandoned. */
#define ABANDONED_MS 60000

struct pending {
  int fd;
  struct weft_ns_hello hello;
  size_t got;
  int64_t since_ms;
};

struct weft_ns_listen {
  int fd;
  uint64_t nonce;
  union weft_sockaddr addr;
  struct pending pend[MAX_PENDING];
  int npend;
};

struct connecting {
  struct connecting *next;
  struct weft_ns_handle h;
  struct weft_ns_hello hello;
  int nsocks, nthreads;
  int64_t deadline_ms;
  int64_t touched_ms; /* the last connect call for it */
  int fds[WEFT_NS_MAX_SOCKS + 1];
  int connected[WEFT_NS_MAX_SOCKS + 1];
  size_t sent[WEFT_NS_MAX_SOCKS + 1];
  int64_t retry_at[WEFT_NS_MAX_SOCKS + 1];
  int backoff_ms[WEFT_NS_MAX_SOCKS + 1];
};

static pthread_mutex_t connecting_lock = PTHREAD_MUTEX_INITIALIZER;
static struct connecting *connecting_list;

static ncclResult_t random64(uint64_t *out) {
  ssize_t n;
  do {
    n = getrandom(out, sizeof(*out), 0);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(*out)) {
    WARN("net/socket: getrandom failed: %s", n < 0 ? strerror(errno) : "short read");
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t weft__ns_listen(int dev, void *handle, void **listen_comm) {
  if (dev != 0) {
    WARN("net/socket: listen on device %d; this network has device 0 only", dev);
    return ncclInvalidArgument;
  }
  struct weft_ns_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    WARN("net/socket: out of memory for a listener");
    return ncclSystemError;
  }
  l->fd = -1;
  ncclResult_t res;
  WEFT_CHECK_GOTO(weft_socket_local_addr(&l->addr), res, fail);
  WEFT_CHECK_GOTO(weft_socket_listen(&l->addr, &l->fd), res, fail);
  WEFT_CHECK_GOTO(random64(&l->nonce), res, fail);
  struct weft_ns_handle h = {.magic = WEFT_NS_MAGIC, .nonce = l->nonce, .addr = l->addr};
  memset(handle, 0, WEFT_NET_HANDLE_BYTES);
  memcpy(handle, &h, sizeof(h));
  *listen_comm = l;
  return ncclSuccess;
fail:
  weft_socket_close(&l->fd);
  free(l);
  return res;
}

ncclResult_t weft__ns_close_listen(void *listen_comm) {
  struct weft_ns_listen *l = listen_comm;
  if (l == NULL) return ncclSuccess;
  for (int i = 0; i < l->npend; i++) weft_socket_close(&l->pend[i].fd);
  weft_socket_close(&l->fd);
  free(l);
  return ncclSuccess;
}

/* ---- Accept --------------------------------------------------------------- */

static void pending_drop(struct weft_ns_listen *l, int i, const char *why) {
  if (why != NULL) {
    char text[INET6_ADDRSTRLEN + 16];
    union weft_sockaddr a;
    socklen_t len = sizeof(a);
    memset(&a, 0, sizeof(a));
    if (getpeername(l->pend[i].fd, &a.sa, &len) != 0) a.sa.sa_family = AF_UNSPEC;
    WARN(
        "net/socket: dropped a connection from %s on the listener at port %u: %s; still "
        "listening",
        weft_sockaddr_str(&a, text, sizeof(text)),
        (unsigned)ntohs(l->addr.sa.sa_family == AF_INET6 ? l->addr.sin6.sin6_port
                                                         : l->addr.sin.sin_port),
        why);
  }
  weft_socket_close(&l->pend[i].fd);
  l->pend[i] = l->pend[--l->npend];
}

/* Says why hello does not belong here, or NULL. */
static const char *hello_mismatch(const struct weft_ns_listen *l, const struct weft_ns_hello *h) {
  if (h->magic != WEFT_NS_MAGIC) return "not a weft socket network client";
  if (h->nonce != l->nonce) return "wrong nonce (a stale or stray client)";
  /* 0 x 0: everything on the control socket (weft_net_socket_connect_single). */
  int single = h->nsocks == 0 && h->nthreads == 0;
  if (!single && (h->nsocks < 1 || h->nsocks > WEFT_NS_MAX_SOCKS || h->nthreads < 1 ||
                  h->nthreads > WEFT_NS_MAX_THREADS || h->nthreads > h->nsocks))
    return "bad socket counts in its hello";
  if (h->index > h->nsocks) return "bad socket counts in its hello";
  return NULL;
}

/* Reads hellos that are coming in; drops strangers and the slow. */
static void pending_read(struct weft_ns_listen *l) {
  int64_t now = weft_time_ms();
  for (int i = l->npend - 1; i >= 0; i--) {
    struct pending *p = &l->pend[i];
    if (p->got < sizeof(p->hello)) {
      struct iovec iov[2] = {{&p->hello, sizeof(p->hello)}, {NULL, 0}};
      int err = 0;
      if (weft_socket_move(p->fd, 0, iov, &p->got, &err) != ncclSuccess) {
        pending_drop(l, i, "it closed before its hello");
        continue;
      }
      if (p->got == sizeof(p->hello)) {
        const char *why = hello_mismatch(l, &p->hello);
        if (why != NULL) pending_drop(l, i, why);
      } else if (now - p->since_ms > HELLO_TIMEOUT_MS) {
        pending_drop(l, i, "no hello in time");
      }
    }
  }
}

/* The pending index of comm conn_id's socket `index`, or -1. */
static int pending_find(const struct weft_ns_listen *l, uint64_t conn_id, uint32_t index) {
  for (int i = 0; i < l->npend; i++) {
    const struct pending *p = &l->pend[i];
    if (p->got == sizeof(p->hello) && p->hello.conn_id == conn_id && p->hello.index == index)
      return i;
  }
  return -1;
}

/* A comm whose sockets are all in, or NULL. */
static ncclResult_t pending_complete(struct weft_ns_listen *l, struct weft_ns_comm **out) {
  for (int i = 0; i < l->npend; i++) {
    const struct pending *p = &l->pend[i];
    if (p->got != sizeof(p->hello) || p->hello.index != 0) continue;
    uint64_t id = p->hello.conn_id;
    int nsocks = (int)p->hello.nsocks, nthreads = (int)p->hello.nthreads;
    int fds[WEFT_NS_MAX_SOCKS + 1], k;
    for (k = 0; k <= nsocks; k++) {
      int j = pending_find(l, id, (uint32_t)k);
      if (j < 0) break;
      fds[k] = l->pend[j].fd;
    }
    if (k <= nsocks) continue;
    for (k = 0; k <= nsocks; k++) {
      int j = pending_find(l, id, (uint32_t)k);
      l->pend[j].fd = -1;
      pending_drop(l, j, NULL);
    }
    return weft__ns_comm_create(0, fds, nsocks, nthreads, out);
  }
  return ncclSuccess;
}

ncclResult_t weft__ns_accept(void *listen_comm, void **recv_comm) {
  struct weft_ns_listen *l = listen_comm;
  *recv_comm = NULL;
  while (l->npend < MAX_PENDING) {
    int fd = -1;
    int err = weft_socket_try_accept(l->fd, &fd);
    if (err == EAGAIN) break;
    if (err != 0) {
      char text[INET6_ADDRSTRLEN + 16];
      WARN("net/socket: accept on the listener at %s failed: %s",
           weft_sockaddr_str(&l->addr, text, sizeof(text)), strerror(err));
      return ncclSystemError;
    }
    l->pend[l->npend++] = (struct pending){.fd = fd, .since_ms = weft_time_ms()};
  }
  pending_read(l);
  struct weft_ns_comm *c = NULL;
  WEFT_CHECK(pending_complete(l, &c));
  *recv_comm = c;
  return ncclSuccess;
}

/* ---- Connect -------------------------------------------------------------- */

static void connecting_free(struct connecting *k) {
  for (int i = 0; i <= k->nsocks; i++) weft_socket_close(&k->fds[i]);
  free(k);
}

/* Frees the entries nobody has called connect for in a while: their
 * caller gave up (an abort) and will not come back for them. */
static void connecting_sweep(int64_t now) {
  for (struct connecting **pp = &connecting_list; *pp != NULL;) {
    struct connecting *k = *pp;
    if (now - k->touched_ms > ABANDONED_MS) {
      *pp = k->next;
      connecting_free(k);
    } else {
      pp = &k->next;
    }
  }
}

/* The entry for handle h, made on the first call. */
static ncclResult_t connecting_get(const struct weft_ns_handle *h, int nthreads,
                                   struct connecting **out) {
  for (struct connecting *k = connecting_list; k != NULL; k = k->next)
    if (memcmp(&k->h, h, sizeof(*h)) == 0) {
      *out = k;
      return ncclSuccess;
    }
  struct connecting *k = calloc(1, sizeof(*k));
  if (k == NULL) {
    WARN("net/socket: out of memory for a connect");
    return ncclSystemError;
  }
  k->h = *h;
  if (nthreads < 0)
    weft__ns_sock_counts(&k->nthreads, &k->nsocks);
  else
    k->nthreads = k->nsocks = nthreads; /* 0: single */
  k->deadline_ms = weft_deadline_default();
  for (int i = 0; i <= k->nsocks; i++) k->fds[i] = -1, k->backoff_ms[i] = 1;
  k->hello = (struct weft_ns_hello){.magic = WEFT_NS_MAGIC,
                                    .nonce = h->nonce,
                                    .nsocks = (uint32_t)k->nsocks,
                                    .nthreads = (uint32_t)k->nthreads};
  ncclResult_t res = random64(&k->hello.conn_id);
  if (res != ncclSuccess) {
    free(k);
    return res;
  }
  k->next = connecting_list;
  connecting_list = k;
  *out = k;
  return ncclSuccess;
}

static void connecting_unlink(struct connecting *k) {
  for (struct connecting **pp = &connecting_list; *pp != NULL; pp = &(*pp)->next)
    if (*pp == k) {
      *pp = k->next;
      return;
    }
}

/* Moves socket i's connect and hello on; *ready when its hello is out. */
static ncclResult_t connecting_step(struct connecting *k, int i, int *ready) {
  char text[INET6_ADDRSTRLEN + 16];
  int64_t now = weft_time_ms();
  int err = 0;
  *ready = 0;
  if (k->fds[i] < 0) {
    if (now < k->retry_at[i]) return ncclSuccess;
    err = weft_socket_connect_start(&k->h.addr, &k->fds[i]);
  } else if (!k->connected[i]) {
    err = weft_socket_connect_poll(k->fds[i]);
    if (err == EINPROGRESS) return ncclSuccess;
    k->connected[i] = err == 0;
  }
  if (err != 0) {
    weft_socket_close(&k->fds[i]);
    if (!weft_socket_connect_retryable(err) || now > k->deadline_ms) {
      WARN("net/socket: connect to %s failed: %s%s",
           weft_sockaddr_str(&k->h.addr, text, sizeof(text)), strerror(err),
           now > k->deadline_ms ? " (retried until WEFT_TIMEOUT)" : "");
      return ncclSystemError;
    }
    /* Refused: the listener may not be up yet; back off. */
    k->retry_at[i] = now + k->backoff_ms[i];
    if (k->backoff_ms[i] < RETRY_MAX_MS) k->backoff_ms[i] *= 2;
    return ncclSuccess;
  }
  if (!k->connected[i]) return ncclSuccess;
  struct weft_ns_hello hello = k->hello;
  hello.index = (uint32_t)i;
  struct iovec iov[2] = {{&hello, sizeof(hello)}, {NULL, 0}};
  ncclResult_t res = weft_socket_move(k->fds[i], 1, iov, &k->sent[i], &err);
  if (res != ncclSuccess) {
    WARN("net/socket: sending the hello to %s failed: %s",
         weft_sockaddr_str(&k->h.addr, text, sizeof(text)), err ? strerror(err) : "closed");
    return res;
  }
  *ready = k->sent[i] == sizeof(hello);
  return ncclSuccess;
}

/* nthreads: -1 the parameters' counts, 0 the control socket only, else
 * that many helper threads of one data socket each. */
static ncclResult_t ns_connect(int dev, const void *handle, int nthreads, void **send_comm) {
  struct weft_ns_handle h;
  memcpy(&h, handle, sizeof(h));
  *send_comm = NULL;
  if (dev != 0 || h.magic != WEFT_NS_MAGIC) {
    WARN("net/socket: connect: %s", dev != 0 ? "device must be 0 (this network has one)"
                                             : "the handle is not a socket network handle");
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&connecting_lock);
  struct connecting *k = NULL;
  connecting_sweep(weft_time_ms());
  ncclResult_t res = connecting_get(&h, nthreads, &k);
  if (k != NULL) k->touched_ms = weft_time_ms();
  int ready = 0;
  for (int i = 0; res == ncclSuccess && i <= k->nsocks; i++) {
    int one = 0;
    res = connecting_step(k, i, &one);
    ready += one;
  }
  if (k != NULL && (res != ncclSuccess || ready == k->nsocks + 1)) connecting_unlink(k);
  pthread_mutex_unlock(&connecting_lock);
  if (res != ncclSuccess) {
    if (k != NULL) connecting_free(k);
    return res;
  }
  if (ready != k->nsocks + 1) return ncclSuccess;
  struct weft_ns_comm *c = NULL;
  res = weft__ns_comm_create(1, k->fds, k->nsocks, k->nthreads, &c);
  free(k); /* the comm owns the fds now, or closed them */
  WEFT_CHECK(res);
  *send_comm = c;
  return ncclSuccess;
}

ncclResult_t weft__ns_connect(int dev, const void *handle, void **send_comm) {
  return ns_connect(dev, handle, -1, send_comm);
}

ncclResult_t weft_net_socket_connect_single(int dev, const void *handle, void **send_comm) {
  return ns_connect(dev, handle, 0, send_comm);
}

ncclResult_t weft_net_socket_connect_threads(int dev, const void *handle, int nthreads,
                                             void **send_comm) {
  if (nthreads < 1 || nthreads > WEFT_NS_MAX_SOCKS) {
    WARN("net/socket: connect with %d helper threads: expected 1 to %d", nthreads,
         WEFT_NS_MAX_SOCKS);
    return ncclInternalError;
  }
  return ns_connect(dev, handle, nthreads, send_comm);
}
