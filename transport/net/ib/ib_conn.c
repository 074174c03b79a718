/* net/ib's connection setup: listen, connect and accept, none of which
 * blocks. The QPs' numbers, LID, GID, MTU and PSN (and the sender's FIFO
 * address and key) go over one TCP socket of the socket layer
 * (transport/socket.h), as in NCCL: the handle holds a magic, a random
 * nonce and the listener's address; the connector sends its wire first
 * (with the nonce), the acceptor answers with its own once its QPs are
 * ready to receive, the connector takes its QPs to RTS and sends a ready
 * word, and only then does accept return the comm, so the receiver's
 * first CTS write never reaches a QP that cannot take it. A stranger
 * (bad magic or nonce) is dropped with a WARN while the listener keeps
 * listening. connect's state lives in a process-wide list keyed by the
 * handle, since the caller calls again with the same handle. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/ib/ib_net.h"
#include "transport/socket.h"

#define MAX_PENDING 64
#define HELLO_TIMEOUT_MS 10000
/* A connect not called again for this long was abandoned (an abort). */
#define ABANDONED_MS 60000

struct ib_handle {
  uint64_t magic, nonce;
  union weft_sockaddr addr;
};

/* One handshake in progress, either side: stage 0 sends (connector) or
 * reads (acceptor) the first wire, and so on. */
struct shake {
  int fd;
  int stage;
  struct weft_ib_wire out, in;
  uint64_t ready;
  size_t done;
  struct weft_ib_comm *c;
  int64_t since_ms;
};

struct ib_listen {
  int fd, dev;
  uint64_t nonce;
  union weft_sockaddr addr;
  struct shake pend[MAX_PENDING];
  int npend;
};

struct connecting {
  struct connecting *next;
  struct ib_handle h;
  int dev, connected;
  struct shake k;
  int64_t deadline_ms, retry_at;
  int64_t touched_ms; /* the last connect call for it */
  int backoff_ms;
};

static pthread_mutex_t connecting_lock = PTHREAD_MUTEX_INITIALIZER;
static struct connecting *connecting_list;

/* Moves part of buf (size bytes) on fd: 1 when all of it is through, 0
 * not yet, -1 on failure (why set). */
static int move(struct shake *k, int is_send, void *buf, size_t size, const char **why) {
  struct iovec iov[2] = {{buf, size}, {NULL, 0}};
  int err = 0;
  if (weft_socket_move(k->fd, is_send, iov, &k->done, &err) != ncclSuccess) {
    *why = err ? strerror(err) : "the peer closed the socket";
    return -1;
  }
  if (k->done < size) return 0;
  k->done = 0;
  return 1;
}

static void peer_of(int fd, char *buf, size_t size) {
  union weft_sockaddr a;
  socklen_t len = sizeof(a);
  memset(&a, 0, sizeof(a));
  if (getpeername(fd, &a.sa, &len) != 0) a.sa.sa_family = AF_UNSPEC;
  weft_sockaddr_str(&a, buf, size);
}

ncclResult_t weft__ib_listen(int dev, void *handle, void **listen_comm) {
  struct weft_ib_port *p;
  WEFT_CHECK(weft__ib_port_open(dev, &p));
  struct ib_listen *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    WARN("NET/IB: out of memory for a listener");
    return ncclSystemError;
  }
  l->fd = -1;
  l->dev = dev;
  ncclResult_t res;
  WEFT_CHECK_GOTO(weft_socket_local_addr(&l->addr), res, fail);
  WEFT_CHECK_GOTO(weft_socket_listen(&l->addr, &l->fd), res, fail);
  if (getrandom(&l->nonce, sizeof(l->nonce), 0) != (ssize_t)sizeof(l->nonce)) {
    WARN("NET/IB: getrandom failed: %s", strerror(errno));
    res = ncclSystemError;
    goto fail;
  }
  struct ib_handle h = {.magic = WEFT_IB_MAGIC, .nonce = l->nonce, .addr = l->addr};
  memset(handle, 0, WEFT_NET_HANDLE_BYTES);
  memcpy(handle, &h, sizeof(h));
  *listen_comm = l;
  return ncclSuccess;
fail:
  weft_socket_close(&l->fd);
  free(l);
  return res;
}

static void pending_drop(struct ib_listen *l, int i, const char *why) {
  struct shake *k = &l->pend[i];
  if (why != NULL) {
    char peer[64];
    peer_of(k->fd, peer, sizeof(peer));
    WARN("NET/IB: dropped a connection from %s on %s:%d's listener: %s; still listening", peer,
         weft__ib_ports[l->dev].d.name, weft__ib_ports[l->dev].d.port, why);
  }
  weft_socket_close(&k->fd);
  weft__ib_comm_destroy(k->c);
  l->pend[i] = l->pend[--l->npend];
}

ncclResult_t weft__ib_close_listen(void *listen_comm) {
  struct ib_listen *l = listen_comm;
  if (l == NULL) return ncclSuccess;
  while (l->npend > 0) pending_drop(l, 0, NULL);
  weft_socket_close(&l->fd);
  free(l);
  return ncclSuccess;
}

/* The acceptor's steps: read the connector's wire, build and connect the
 * comm, send ours, read the ready word. 1: the comm is ready. */
static int accept_step(struct ib_listen *l, struct shake *k, const char **why) {
  int r = 1;
  char peer[64];
  if (k->stage == 0 && (r = move(k, 0, &k->in, sizeof(k->in), why)) == 1) {
    if (k->in.magic != WEFT_IB_MAGIC || k->in.nonce != l->nonce) {
      *why = k->in.magic != WEFT_IB_MAGIC ? "not a weft IB client" : "wrong nonce (stale or stray)";
      return -1;
    }
    if (k->in.nqps < 1 || k->in.nqps > WEFT_IB_MAX_QPS) {
      *why = "bad QP count in its handshake";
      return -1;
    }
    peer_of(k->fd, peer, sizeof(peer));
    if (weft__ib_comm_create(&weft__ib_ports[l->dev], 0, (int)k->in.nqps, peer, &k->c) !=
            ncclSuccess ||
        weft__ib_comm_connect(k->c, &k->in) != ncclSuccess) {
      *why = "its queue pairs could not be set up (see the WARN above)";
      return -1;
    }
    weft__ib_comm_wire(k->c, l->nonce, &k->out);
    k->stage = 1;
  }
  if (k->stage == 1 && r == 1 && (r = move(k, 1, &k->out, sizeof(k->out), why)) == 1) k->stage = 2;
  if (k->stage == 2 && r == 1 && (r = move(k, 0, &k->ready, sizeof(k->ready), why)) == 1) {
    if (k->ready != WEFT_IB_MAGIC) {
      *why = "a bad ready word";
      return -1;
    }
    return 1;
  }
  if (r == 0 && k->stage == 0 && weft_time_ms() - k->since_ms > HELLO_TIMEOUT_MS) {
    *why = "no handshake in time";
    return -1;
  }
  return r < 0 ? -1 : 0;
}

ncclResult_t weft__ib_accept(void *listen_comm, void **recv_comm) {
  struct ib_listen *l = listen_comm;
  *recv_comm = NULL;
  while (l->npend < MAX_PENDING) {
    int fd = -1, err = weft_socket_try_accept(l->fd, &fd);
    if (err == EAGAIN) break;
    if (err != 0) {
      WARN("NET/IB: accept on %s:%d's listener failed: %s", weft__ib_ports[l->dev].d.name,
           weft__ib_ports[l->dev].d.port, strerror(err));
      return ncclSystemError;
    }
    l->pend[l->npend++] = (struct shake){.fd = fd, .since_ms = weft_time_ms()};
  }
  for (int i = l->npend - 1; i >= 0; i--) {
    const char *why = NULL;
    int r = accept_step(l, &l->pend[i], &why);
    if (r < 0) pending_drop(l, i, why);
    if (r <= 0) continue;
    *recv_comm = l->pend[i].c;
    l->pend[i].c = NULL;
    pending_drop(l, i, NULL);
    return ncclSuccess;
  }
  return ncclSuccess;
}

/* ---- Connect -------------------------------------------------------------------- */

static void connecting_free(struct connecting *k) {
  weft_socket_close(&k->k.fd);
  weft__ib_comm_destroy(k->k.c);
  free(k);
}

/* Frees the entries nobody has called connect for in a while: their
 * caller gave up and will not come back for them (their QPs with them). */
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

static ncclResult_t connecting_get(int dev, const struct ib_handle *h, struct connecting **out) {
  for (struct connecting *k = connecting_list; k != NULL; k = k->next)
    if (memcmp(&k->h, h, sizeof(*h)) == 0 && k->dev == dev) return *out = k, ncclSuccess;
  struct weft_ib_port *p;
  WEFT_CHECK(weft__ib_port_open(dev, &p));
  struct connecting *k = calloc(1, sizeof(*k));
  if (k == NULL) {
    WARN("NET/IB: out of memory for a connect");
    return ncclSystemError;
  }
  char peer[64];
  weft_sockaddr_str(&h->addr, peer, sizeof(peer));
  int nqps = (int)weft_param_int(WEFT_PARAM_IB_QPS_PER_CONNECTION);
  ncclResult_t res = weft__ib_comm_create(p, 1, nqps, peer, &k->k.c);
  if (res != ncclSuccess) {
    free(k);
    return res;
  }
  k->h = *h;
  k->dev = dev;
  k->k.fd = -1;
  k->backoff_ms = 1;
  k->deadline_ms = weft_deadline_default();
  weft__ib_comm_wire(k->k.c, h->nonce, &k->k.out);
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

/* The TCP connect, retried (with backoff) while the listener is not up. */
static int connect_socket(struct connecting *k, const char **why) {
  int64_t now = weft_time_ms();
  int err = 0;
  if (k->k.fd < 0) {
    if (now < k->retry_at) return 0;
    err = weft_socket_connect_start(&k->h.addr, &k->k.fd);
  } else {
    err = weft_socket_connect_poll(k->k.fd);
    if (err == EINPROGRESS) return 0;
  }
  if (err == 0) return k->connected = 1;
  weft_socket_close(&k->k.fd);
  if (!weft_socket_connect_retryable(err) || now > k->deadline_ms) {
    *why = now > k->deadline_ms ? "no answer before WEFT_TIMEOUT" : strerror(err);
    return -1;
  }
  k->retry_at = now + k->backoff_ms;
  if (k->backoff_ms < 100) k->backoff_ms *= 2;
  return 0;
}

/* The connector's steps; 1 when the comm is ready. */
static int connect_step(struct connecting *k, const char **why) {
  struct shake *s = &k->k;
  int r = k->connected ? 1 : connect_socket(k, why);
  if (r == 1 && s->stage == 0 && (r = move(s, 1, &s->out, sizeof(s->out), why)) == 1) s->stage = 1;
  if (r == 1 && s->stage == 1 && (r = move(s, 0, &s->in, sizeof(s->in), why)) == 1) {
    if (s->in.magic != WEFT_IB_MAGIC || s->in.nonce != k->h.nonce) {
      *why = "the listener answered with a bad handshake";
      return -1;
    }
    if (weft__ib_comm_connect(s->c, &s->in) != ncclSuccess) {
      *why = "the queue pairs could not be connected (see the WARN above)";
      return -1;
    }
    s->ready = WEFT_IB_MAGIC;
    s->stage = 2;
  }
  if (r == 1 && s->stage == 2) r = move(s, 1, &s->ready, sizeof(s->ready), why);
  return r;
}

ncclResult_t weft__ib_connect(int dev, const void *handle, void **send_comm) {
  struct ib_handle h;
  memcpy(&h, handle, sizeof(h));
  *send_comm = NULL;
  if (h.magic != WEFT_IB_MAGIC) {
    WARN("NET/IB: connect: the handle is not an IB network handle (from another network?)");
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&connecting_lock);
  struct connecting *k = NULL;
  connecting_sweep(weft_time_ms());
  ncclResult_t res = connecting_get(dev, &h, &k);
  if (k != NULL) k->touched_ms = weft_time_ms();
  const char *why = NULL;
  int r = res == ncclSuccess ? connect_step(k, &why) : -1;
  if (k != NULL && r != 0) connecting_unlink(k);
  pthread_mutex_unlock(&connecting_lock);
  if (res != ncclSuccess) return res;
  if (r < 0) {
    char peer[64];
    WARN("NET/IB: connect from %s:%d to %s failed: %s", weft__ib_ports[dev].d.name,
         weft__ib_ports[dev].d.port, weft_sockaddr_str(&h.addr, peer, sizeof(peer)), why);
    connecting_free(k);
    return ncclSystemError;
  }
  if (r == 0) return ncclSuccess;
  weft_socket_close(&k->k.fd);
  *send_comm = k->k.c;
  free(k);
  return ncclSuccess;
}
