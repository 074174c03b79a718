/* The rank side of the bootstrap (the id is bootstrap_id.c): registration
 * with the root, the ring of bootstrap connections (all-gather, barrier) and
 * point-to-point messages matched by (peer, tag). Each rank listens on its
 * own socket behind a gate (bootstrap_gate.c) that admits only connections
 * presenting the id's secret. Every wait ends by WEFT_TIMEOUT or abort. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/bootstrap_internal.h"
#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"

_Static_assert(sizeof(struct weft_unique_id) <= NCCL_UNIQUE_ID_BYTES,
               "weft_unique_id must fit in ncclUniqueId");
_Static_assert(sizeof(struct weft_boot_reg) <= WEFT_GATE_FIRST_MAX, "registration too big");

/* Between registrations whose connection the root closed unanswered. */
#define BS_REGISTER_RETRY_MS 50

/* A message that arrived before the recv that asks for it. */
struct stash {
  struct stash *next;
  int peer;
  int tag;
  size_t size;
  void *data;
};

struct weft_bootstrap {
  int rank;
  int nranks;
  uint64_t secret;
  int timeout_s;
  _Atomic int abort_flag;
  struct weft_gate gate;      /* our listener */
  union weft_sockaddr *addrs; /* every rank's listener */
  int ring_send_fd;           /* to rank + 1 */
  int ring_recv_fd;           /* from rank - 1 */
  int *send_fd;               /* per peer: our connection to it */
  int *recv_fd;               /* per peer: its connection to us */
  struct stash *stash_head;
  struct stash **stash_tail;
  /* Serialises messages and collectives: the host engine's worker connects
   * links over the bootstrap while the user's thread may split. */
  pthread_mutex_t lock;
};

ncclResult_t weft_random_u64(uint64_t *out) {
  uint64_t v;
  ssize_t n;
  do {
    n = getrandom(&v, sizeof(v), 0);
  } while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(v)) {
    WARN("getrandom failed: %s", n < 0 ? strerror(errno) : "short read");
    return ncclSystemError;
  }
  *out = v;
  return ncclSuccess;
}

/* ---- Waits ---------------------------------------------------------------- */

/* Whether this thread's last send, recv or all-gather ended at its
 * deadline (weft_bootstrap_timed_out). */
static _Thread_local int bs_timed_out;

int weft_bootstrap_timed_out(void) {
  return bs_timed_out;
}

static ncclResult_t timed_out(const struct weft_bootstrap *b, const char *waiting_for) {
  WARN("bootstrap rank %d: timed out after %d s waiting for %s", b->rank, b->timeout_s,
       waiting_for);
  bs_timed_out = 1;
  return ncclSystemError;
}

/* Moves size bytes over fd, serving our listener while it waits. */
static ncclResult_t bs_xfer(struct weft_bootstrap *b, int fd, int is_send, void *buf, size_t size,
                            int64_t deadline, const char *what) {
  size_t done = 0;
  char waiting_for[160];
  for (;;) {
    if (is_send)
      WEFT_CHECK(weft_socket_send_some(fd, buf, size, &done, what));
    else
      WEFT_CHECK(weft_socket_recv_some(fd, buf, size, &done, what));
    if (done == size) return ncclSuccess;
    if (weft_time_ms() >= deadline) {
      snprintf(waiting_for, sizeof(waiting_for), "%s %s", is_send ? "sending to" : "data from",
               what);
      return timed_out(b, waiting_for);
    }
    struct pollfd p = {.fd = fd, .events = is_send ? POLLOUT : POLLIN};
    WEFT_CHECK(weft_gate_poll(&b->gate, &p, 1, deadline));
  }
}

/* One ring step: sends to next and receives from prev at once, so that no
 * rank blocks on a full socket while its neighbour does the same. */
static ncclResult_t bs_ring_step(struct weft_bootstrap *b, const void *sbuf, void *rbuf,
                                 size_t size, int64_t deadline) {
  size_t sent = 0, got = 0;
  char next[48], prev[48];
  snprintf(next, sizeof(next), "rank %d (ring next)", (b->rank + 1) % b->nranks);
  snprintf(prev, sizeof(prev), "rank %d (ring previous)", (b->rank + b->nranks - 1) % b->nranks);
  for (;;) {
    WEFT_CHECK(weft_socket_send_some(b->ring_send_fd, sbuf, size, &sent, next));
    WEFT_CHECK(weft_socket_recv_some(b->ring_recv_fd, rbuf, size, &got, prev));
    if (sent == size && got == size) return ncclSuccess;
    if (weft_time_ms() >= deadline) return timed_out(b, got < size ? prev : next);
    struct pollfd p[2] = {{.fd = sent < size ? b->ring_send_fd : -1, .events = POLLOUT},
                          {.fd = got < size ? b->ring_recv_fd : -1, .events = POLLIN}};
    WEFT_CHECK(weft_gate_poll(&b->gate, p, 2, deadline));
  }
}

/* ---- Admitting connections from other ranks -------------------------------- */

static const char *bs_admit(void *ctx, int fd, const void *first) {
  struct weft_bootstrap *b = ctx;
  struct weft_boot_hello h;
  memcpy(&h, first, sizeof(h));
  if (h.rank < 0 || h.rank >= b->nranks || h.rank == b->rank) return "bad rank in hello";
  if (h.kind == WEFT_BOOT_RING) {
    if (h.rank != (b->rank + b->nranks - 1) % b->nranks) return "ring hello from a non-neighbour";
    if (b->ring_recv_fd >= 0) return "second ring connection";
    b->ring_recv_fd = fd;
    return NULL;
  }
  if (h.kind == WEFT_BOOT_P2P) {
    if (b->recv_fd[h.rank] >= 0) return "second message connection from the same rank";
    b->recv_fd[h.rank] = fd;
    return NULL;
  }
  return "unknown connection kind in hello";
}

/* Connects to peer's listener and says who we are. */
static ncclResult_t bs_connect(struct weft_bootstrap *b, const union weft_sockaddr *addr, int peer,
                               int kind, int64_t deadline, int *fd_out) {
  char what[48];
  snprintf(what, sizeof(what), "rank %d", peer);
  int fd;
  WEFT_CHECK(weft_socket_connect(addr, deadline, &fd));
  struct weft_boot_hello h = {.secret = b->secret, .rank = b->rank, .kind = kind};
  ncclResult_t res = bs_xfer(b, fd, 1, &h, sizeof(h), deadline, what);
  if (res != ncclSuccess) {
    weft_socket_close(&fd);
    return res;
  }
  *fd_out = fd;
  return ncclSuccess;
}

/* ---- Create --------------------------------------------------------------- */

static ncclResult_t bs_alloc(int rank, int nranks, uint64_t secret, struct weft_bootstrap **out) {
  struct weft_bootstrap *b = calloc(1, sizeof(*b));
  union weft_sockaddr *addrs = calloc((size_t)nranks, sizeof(*addrs));
  int *send_fd = malloc((size_t)nranks * sizeof(int));
  int *recv_fd = malloc((size_t)nranks * sizeof(int));
  if (b == NULL || addrs == NULL || send_fd == NULL || recv_fd == NULL) {
    WARN("bootstrap rank %d: out of memory for %d ranks", rank, nranks);
    free(b);
    free(addrs);
    free(send_fd);
    free(recv_fd);
    return ncclSystemError;
  }
  for (int i = 0; i < nranks; i++) send_fd[i] = recv_fd[i] = -1;
  b->rank = rank;
  b->nranks = nranks;
  b->secret = secret;
  b->timeout_s = (int)weft_param_int(WEFT_PARAM_TIMEOUT);
  b->ring_send_fd = b->ring_recv_fd = -1;
  b->stash_tail = &b->stash_head;
  pthread_mutex_init(&b->lock, NULL);
  b->gate.listen_fd = -1;
  b->addrs = addrs;
  b->send_fd = send_fd;
  b->recv_fd = recv_fd;
  *out = b;
  return ncclSuccess;
}

static ncclResult_t bs_listen(struct weft_bootstrap *b) {
  union weft_sockaddr addr;
  int fd;
  char who[32];
  WEFT_CHECK(weft_socket_local_addr(&addr));
  WEFT_CHECK(weft_socket_listen(&addr, &fd));
  b->addrs[b->rank] = addr;
  snprintf(who, sizeof(who), "bootstrap rank %d", b->rank);
  weft_gate_init(&b->gate, who, fd, b->secret, sizeof(struct weft_boot_hello), bs_admit, b,
                 &b->abort_flag);
  return ncclSuccess;
}

/* "the bootstrap root at 1.2.3.4:5", and in NCCL_COMM_ID mode which
 * variable set it and who hosts it, so that errors name the variable. */
static void root_what(const struct weft_unique_id *id, char *buf, size_t size) {
  char text[INET6_ADDRSTRLEN + 16];
  snprintf(buf, size, "the bootstrap root at %s%s",
           weft_sockaddr_str(&id->root, text, sizeof(text)),
           id->magic == WEFT_ID_MAGIC_COMM_ID ? " (NCCL_COMM_ID; rank 0 hosts it)" : "");
}

/* Reads the root's verdict text after a reply with status != 0 and WARNs it. */
static ncclResult_t bs_root_verdict(struct weft_bootstrap *b, const struct weft_unique_id *id,
                                    int fd, const struct weft_boot_reply *reply, int64_t deadline,
                                    const char *what) {
  char msg[WEFT_BOOT_ERROR_MAX + 1];
  size_t len = reply->len > 0 && reply->len <= WEFT_BOOT_ERROR_MAX ? (size_t)reply->len : 0;
  ncclResult_t res = bs_xfer(b, fd, 0, msg, len, deadline, what);
  msg[res == ncclSuccess ? len : 0] = '\0';
  if (reply->status == WEFT_BOOT_REPLY_REFUSED && id->magic == WEFT_ID_MAGIC_COMM_ID)
    WARN(
        "bootstrap rank %d: %s refused this rank: %s. With NCCL_COMM_ID every rank must set the "
        "same WEFT_COMM_SECRET (this rank has it %s)",
        b->rank, what, msg, weft_param_str(WEFT_PARAM_COMM_SECRET) ? "set" : "unset");
  else if (reply->status == WEFT_BOOT_REPLY_REFUSED)
    WARN(
        "bootstrap rank %d: %s refused this rank: %s (this rank's ncclUniqueId is not the one "
        "that root was made for)",
        b->rank, what, msg);
  else
    WARN("bootstrap rank %d: the bootstrap root reports: %s", b->rank, msg);
  return ncclRemoteError;
}

/* ---- Registration ------------------------------------------------------------ */

/* ncclCommInitRankScalable spreads the ranks over nroots roots in blocks,
 * as NCCL does: the first nranks % nroots blocks have one rank more. */
static int block_first(int k, int nranks, int nroots) {
  int rem = nranks % nroots;
  return k * (nranks / nroots) + (k < rem ? k : rem);
}
static int block_count(int k, int nranks, int nroots) {
  return nranks / nroots + (k < nranks % nroots);
}
static int block_of(int rank, int nranks, int nroots) {
  int per = nranks / nroots, rem = nranks % nroots, big = rem * (per + 1);
  return rank < big ? rank / (per + 1) : (rank - big) / per + rem;
}

/* One registration with one root: the block it serves, and the open
 * connection while its reply is awaited. */
struct bs_reg {
  const struct weft_unique_id *id;
  int first, count;
  int fd;
  char what[INET6_ADDRSTRLEN + 64];
};

static void bs_reg_init(struct bs_reg *g, const struct weft_unique_id *id, int k, int nranks,
                        int nroots) {
  g->id = id;
  g->first = block_first(k, nranks, nroots);
  g->count = block_count(k, nranks, nroots);
  g->fd = -1;
  root_what(id, g->what, sizeof(g->what));
}

/* Connects and sends the registration; the reply is read by bs_reg_reply,
 * so a rank can register with two roots before it waits on either. */
static ncclResult_t bs_reg_send(struct weft_bootstrap *b, struct bs_reg *g, int64_t deadline) {
  struct weft_boot_reg reg = {.secret = g->id->secret,
                              .magic = WEFT_BOOT_REG_MAGIC,
                              .rank = b->rank,
                              .nranks = b->nranks,
                              .addr = b->addrs[b->rank],
                              .first = g->first,
                              .count = g->count};
  if (weft_socket_connect(&g->id->root, deadline, &g->fd) != ncclSuccess) {
    WARN(
        "bootstrap rank %d: cannot reach %s within %d s: the process that made the id must be "
        "alive, and an id serves one communicator (its root ends once that one is made; get a "
        "new id for the next)",
        b->rank, g->what, b->timeout_s);
    return ncclSystemError;
  }
  ncclResult_t res = bs_xfer(b, g->fd, 1, &reg, sizeof(reg), deadline, g->what);
  if (res != ncclSuccess) weft_socket_close(&g->fd);
  return res;
}

/* Reads the root's answer. *closed_out says the root closed the connection
 * before answering: a listener under a flood may have evicted it. */
static ncclResult_t bs_reg_reply(struct weft_bootstrap *b, struct bs_reg *g,
                                 union weft_sockaddr *next_out, int *closed_out) {
  struct weft_boot_reply reply;
  *closed_out = 0;
  /* The root waits WEFT_TIMEOUT from the first registration, no later than
   * ours; we wait a little longer to hear its verdict. */
  int64_t reply_deadline = weft_deadline_default() + WEFT_BOOT_REPLY_GRACE_MS;
  ncclResult_t res = bs_xfer(b, g->fd, 0, &reply, sizeof(reply), reply_deadline, g->what);
  if (res == ncclRemoteError) *closed_out = 1;
  if (res == ncclSuccess && reply.status != WEFT_BOOT_REPLY_OK)
    res = bs_root_verdict(b, g->id, g->fd, &reply, reply_deadline, g->what);
  weft_socket_close(&g->fd);
  if (res == ncclSuccess && next_out != NULL) *next_out = reply.next;
  return res;
}

/* Registers with each of the n roots in regs (all sent before any answer is
 * awaited: two roots may each wait for the other's rank); next_out gets the
 * ring-next rank's address from the first. A connection closed before its
 * root answered is tried again until the deadline: a root never closes a
 * rank it registered before replying. */
static ncclResult_t bs_register(struct weft_bootstrap *b, struct bs_reg *regs, int n,
                                union weft_sockaddr *next_out) {
  int64_t deadline = weft_deadline_default();
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < n && res == ncclSuccess; i++) res = bs_reg_send(b, &regs[i], deadline);
  for (int i = 0; i < n && res == ncclSuccess; i++) {
    struct bs_reg *g = &regs[i];
    for (int attempt = 1;; attempt++) {
      int closed;
      res = bs_reg_reply(b, g, i == 0 ? next_out : NULL, &closed);
      if (!closed) break;
      if (weft_time_ms() + BS_REGISTER_RETRY_MS >= deadline) {
        WARN("bootstrap rank %d: %s closed the connection before answering, %d times in %d s%s",
             b->rank, g->what, attempt, b->timeout_s,
             g->id->magic == WEFT_ID_MAGIC_COMM_ID
                 ? "; is another process using the NCCL_COMM_ID port, or is it flooded?"
                 : "; is it flooded?");
        break;
      }
      INFO(WEFT_BOOTSTRAP,
           "bootstrap rank %d: %s closed the connection before answering; "
           "registering again",
           b->rank, g->what);
      struct timespec ts = {.tv_sec = 0, .tv_nsec = BS_REGISTER_RETRY_MS * 1000000L};
      nanosleep(&ts, NULL);
      res = bs_reg_send(b, g, deadline);
      if (res != ncclSuccess) break;
    }
  }
  for (int i = 0; i < n; i++) weft_socket_close(&regs[i].fd);
  return res;
}

/* Connects to ring next and waits for ring prev to connect to us. */
static ncclResult_t bs_ring_connect(struct weft_bootstrap *b, const union weft_sockaddr *next) {
  int next_rank = (b->rank + 1) % b->nranks;
  int prev_rank = (b->rank + b->nranks - 1) % b->nranks;
  int64_t deadline = weft_deadline_default();
  WEFT_CHECK(bs_connect(b, next, next_rank, WEFT_BOOT_RING, deadline, &b->ring_send_fd));
  while (b->ring_recv_fd < 0) {
    if (weft_time_ms() >= deadline) {
      char waiting_for[64];
      snprintf(waiting_for, sizeof(waiting_for), "rank %d (ring previous) to connect", prev_rank);
      return timed_out(b, waiting_for);
    }
    WEFT_CHECK(weft_gate_poll(&b->gate, NULL, 0, deadline));
  }
  return ncclSuccess;
}

/* Reads and checks the ids; several byte-identical ids are one root. */
static ncclResult_t ids_read(const ncclUniqueId *ids_in, int nids, int rank,
                             struct weft_unique_id *ids, int *nroots_out) {
  int same = 1;
  for (int k = 0; k < nids; k++) {
    memcpy(&ids[k], ids_in[k].internal, sizeof(ids[k]));
    if (ids[k].magic != WEFT_ID_MAGIC && ids[k].magic != WEFT_ID_MAGIC_COMM_ID) {
      WARN("bootstrap rank %d: commIds[%d] was not made by ncclGetUniqueId", rank, k);
      return ncclInvalidArgument;
    }
    same = same && memcmp(&ids_in[k], &ids_in[0], sizeof(ids_in[0])) == 0;
  }
  *nroots_out = same ? 1 : nids;
  for (int k = 0; k<*nroots_out && * nroots_out> 1; k++)
    if (ids[k].magic == WEFT_ID_MAGIC_COMM_ID) {
      WARN(
          "bootstrap rank %d: commIds[%d] comes from NCCL_COMM_ID, which names one root; several "
          "roots need ids from ncclGetUniqueId without NCCL_COMM_ID",
          rank, k);
      return ncclInvalidArgument;
    }
  return ncclSuccess;
}

ncclResult_t weft_bootstrap_create(const ncclUniqueId *ids_in, int nids, int rank, int nranks,
                                   struct weft_bootstrap **out) {
  if (nranks < 1 || nranks > WEFT_BOOT_MAX_RANKS || rank < 0 || rank >= nranks) {
    WARN("bootstrap: rank %d of %d is out of range", rank, nranks);
    return ncclInvalidArgument;
  }
  if (nids < 1 || nids > nranks) {
    WARN("bootstrap rank %d: %d roots for %d ranks (expected 1..%d)", rank, nids, nranks, nranks);
    return ncclInvalidArgument;
  }
  struct weft_unique_id *ids = malloc((size_t)nids * sizeof(*ids));
  if (ids == NULL) {
    WARN("bootstrap rank %d: out of memory for %d ids", rank, nids);
    return ncclSystemError;
  }
  struct weft_bootstrap *b = NULL;
  struct bs_reg regs[2];
  union weft_sockaddr next, root;
  int nroots = 1;
  ncclResult_t res = ids_read(ids_in, nids, rank, ids, &nroots);
  if (res != ncclSuccess) goto fail;
  /* The first id's secret is the communicator's: ranks present it to each
   * other; each root is presented its own. */
  WEFT_CHECK_GOTO(bs_alloc(rank, nranks, ids[0].secret, &b), res, fail);
  WEFT_CHECK_GOTO(bs_listen(b), res, fail);
  if (ids[0].magic == WEFT_ID_MAGIC_COMM_ID && rank == 0) {
    res = weft_bootstrap_root_start(&ids[0].root, ids[0].secret, &root);
    if (res != ncclSuccess) {
      char text[INET6_ADDRSTRLEN + 16];
      WARN(
          "bootstrap rank 0: cannot host the bootstrap root on %s (NCCL_COMM_ID): is another "
          "job or communicator using that port?",
          weft_sockaddr_str(&ids[0].root, text, sizeof(text)));
      goto fail;
    }
  }
  /* This rank's block's root; the first rank of a block is also the
   * previous block's neighbour. */
  int k = block_of(rank, nranks, nroots), nregs = 1;
  bs_reg_init(&regs[0], &ids[k], k, nranks, nroots);
  if (nroots > 1 && rank == regs[0].first) {
    int prev = (k + nroots - 1) % nroots;
    bs_reg_init(&regs[nregs++], &ids[prev], prev, nranks, nroots);
  }
  WEFT_CHECK_GOTO(bs_register(b, regs, nregs, &next), res, fail);
  if (nranks > 1) {
    WEFT_CHECK_GOTO(bs_ring_connect(b, &next), res, fail);
    WEFT_CHECK_GOTO(weft_bootstrap_allgather(b, b->addrs, sizeof(*b->addrs)), res, fail);
  }
  if (nroots > 1)
    INFO(WEFT_BOOTSTRAP, "bootstrap rank %d of %d: connected (root %d of %d, ranks %d..%d)", rank,
         nranks, k, nroots, regs[0].first, regs[0].first + regs[0].count - 1);
  else
    INFO(WEFT_BOOTSTRAP, "bootstrap rank %d of %d: connected", rank, nranks);
  free(ids);
  *out = b;
  return ncclSuccess;
fail:
  free(ids);
  weft_bootstrap_destroy(b);
  return res;
}

/* ---- Collectives ----------------------------------------------------------- */

static ncclResult_t bs_allgather(struct weft_bootstrap *b, void *all, size_t size) {
  char *base = all;
  int n = b->nranks;
  int64_t deadline = weft_deadline_default();
  for (int s = 0; s < n - 1; s++) {
    int send_block = (b->rank - s + n) % n;
    int recv_block = (b->rank - s - 1 + n) % n;
    WEFT_CHECK(bs_ring_step(b, base + (size_t)send_block * size, base + (size_t)recv_block * size,
                            size, deadline));
  }
  return ncclSuccess;
}

ncclResult_t weft_bootstrap_allgather(struct weft_bootstrap *b, void *all, size_t size) {
  bs_timed_out = 0;
  pthread_mutex_lock(&b->lock);
  ncclResult_t res = bs_allgather(b, all, size);
  pthread_mutex_unlock(&b->lock);
  return res;
}

ncclResult_t weft_bootstrap_barrier(struct weft_bootstrap *b) {
  char *bytes = calloc((size_t)b->nranks, 1);
  if (bytes == NULL) {
    WARN("bootstrap rank %d: out of memory for a barrier", b->rank);
    return ncclSystemError;
  }
  ncclResult_t res = weft_bootstrap_allgather(b, bytes, 1);
  free(bytes);
  return res;
}

/* ---- Point-to-point ------------------------------------------------------- */

static ncclResult_t check_peer(const struct weft_bootstrap *b, int peer, const char *op) {
  if (peer >= 0 && peer < b->nranks) return ncclSuccess;
  WARN("bootstrap rank %d: %s peer %d is out of range (nranks %d)", b->rank, op, peer, b->nranks);
  return ncclInvalidArgument;
}

static ncclResult_t stash_put(struct weft_bootstrap *b, int peer, int tag, void *data,
                              size_t size) {
  struct stash *m = malloc(sizeof(*m));
  if (m == NULL) {
    WARN("bootstrap rank %d: out of memory keeping a message from rank %d", b->rank, peer);
    return ncclSystemError;
  }
  *m = (struct stash){.peer = peer, .tag = tag, .size = size, .data = data};
  *b->stash_tail = m;
  b->stash_tail = &m->next;
  return ncclSuccess;
}

static ncclResult_t size_mismatch(const struct weft_bootstrap *b, int peer, int tag, size_t got,
                                  size_t want) {
  WARN("bootstrap rank %d: message from rank %d (tag %d) has %zu bytes, recv expects %zu", b->rank,
       peer, tag, got, want);
  return ncclInternalError;
}

/* Takes the oldest kept message for (peer, tag); *found says if there was one. */
static ncclResult_t stash_take(struct weft_bootstrap *b, int peer, int tag, void *data, size_t size,
                               int *found) {
  *found = 0;
  for (struct stash **pp = &b->stash_head; *pp; pp = &(*pp)->next) {
    struct stash *m = *pp;
    if (m->peer != peer || m->tag != tag) continue;
    *pp = m->next;
    if (b->stash_tail == &m->next) b->stash_tail = pp;
    *found = 1;
    ncclResult_t res = m->size == size ? ncclSuccess : size_mismatch(b, peer, tag, m->size, size);
    if (res == ncclSuccess && size > 0) memcpy(data, m->data, size);
    free(m->data);
    free(m);
    return res;
  }
  return ncclSuccess;
}

static ncclResult_t copy_to_stash(struct weft_bootstrap *b, int tag, const void *data,
                                  size_t size) {
  void *copy = malloc(size ? size : 1);
  if (copy == NULL) {
    WARN("bootstrap rank %d: out of memory for a %zu-byte message to itself", b->rank, size);
    return ncclSystemError;
  }
  if (size > 0) memcpy(copy, data, size);
  ncclResult_t res = stash_put(b, b->rank, tag, copy, size);
  if (res != ncclSuccess) free(copy);
  return res;
}

static ncclResult_t bs_send(struct weft_bootstrap *b, int peer, int tag, const void *data,
                            size_t size) {
  WEFT_CHECK(check_peer(b, peer, "send to"));
  if (peer == b->rank) return copy_to_stash(b, tag, data, size);
  char what[64];
  snprintf(what, sizeof(what), "rank %d (message tag %d)", peer, tag);
  int64_t deadline = weft_deadline_default();
  if (b->send_fd[peer] < 0)
    WEFT_CHECK(bs_connect(b, &b->addrs[peer], peer, WEFT_BOOT_P2P, deadline, &b->send_fd[peer]));
  struct weft_boot_msg_hdr hdr = {.tag = tag, .size = size};
  ncclResult_t res = bs_xfer(b, b->send_fd[peer], 1, &hdr, sizeof(hdr), deadline, what);
  if (res == ncclSuccess && size > 0)
    res = bs_xfer(b, b->send_fd[peer], 1, (void *)data, size, deadline, what);
  /* Half a message would desynchronise the stream: start afresh next time. */
  if (res != ncclSuccess) weft_socket_close(&b->send_fd[peer]);
  return res;
}

ncclResult_t weft_bootstrap_send(struct weft_bootstrap *b, int peer, int tag, const void *data,
                                 size_t size) {
  bs_timed_out = 0;
  pthread_mutex_lock(&b->lock);
  ncclResult_t res = bs_send(b, peer, tag, data, size);
  pthread_mutex_unlock(&b->lock);
  return res;
}

/* Waits until peer has connected to us for messages. */
static ncclResult_t wait_peer_conn(struct weft_bootstrap *b, int peer, int tag, int64_t deadline) {
  while (b->recv_fd[peer] < 0) {
    if (weft_time_ms() >= deadline) {
      char waiting_for[80];
      snprintf(waiting_for, sizeof(waiting_for), "a message from rank %d (tag %d)", peer, tag);
      return timed_out(b, waiting_for);
    }
    WEFT_CHECK(weft_gate_poll(&b->gate, NULL, 0, deadline));
  }
  return ncclSuccess;
}

/* Reads the next message from peer: into data if it is (peer, tag), else
 * into the stash. *done says which. */
static ncclResult_t read_one(struct weft_bootstrap *b, int peer, int tag, void *data, size_t size,
                             int64_t deadline, int *done) {
  char what[64];
  snprintf(what, sizeof(what), "rank %d (message tag %d)", peer, tag);
  int fd = b->recv_fd[peer];
  struct weft_boot_msg_hdr hdr;
  WEFT_CHECK(bs_xfer(b, fd, 0, &hdr, sizeof(hdr), deadline, what));
  *done = hdr.tag == tag;
  if (*done) {
    if (hdr.size != size) return size_mismatch(b, peer, tag, hdr.size, size);
    return bs_xfer(b, fd, 0, data, size, deadline, what);
  }
  snprintf(what, sizeof(what), "rank %d (message tag %d)", peer, hdr.tag);
  void *copy = malloc(hdr.size ? hdr.size : 1);
  if (copy == NULL) {
    WARN("bootstrap rank %d: out of memory for a %zu-byte message from rank %d", b->rank,
         (size_t)hdr.size, peer);
    return ncclSystemError;
  }
  ncclResult_t res = bs_xfer(b, fd, 0, copy, hdr.size, deadline, what);
  if (res == ncclSuccess) res = stash_put(b, peer, hdr.tag, copy, hdr.size);
  if (res != ncclSuccess) free(copy);
  return res;
}

static ncclResult_t bs_recv(struct weft_bootstrap *b, int peer, int tag, void *data, size_t size) {
  int found;
  WEFT_CHECK(check_peer(b, peer, "recv from"));
  WEFT_CHECK(stash_take(b, peer, tag, data, size, &found));
  if (found) return ncclSuccess;
  if (peer == b->rank) {
    WARN("bootstrap rank %d: recv from itself (tag %d) with no matching send", b->rank, tag);
    return ncclInvalidUsage;
  }
  int64_t deadline = weft_deadline_default();
  WEFT_CHECK(wait_peer_conn(b, peer, tag, deadline));
  for (int done = 0; !done;) WEFT_CHECK(read_one(b, peer, tag, data, size, deadline, &done));
  return ncclSuccess;
}

ncclResult_t weft_bootstrap_recv(struct weft_bootstrap *b, int peer, int tag, void *data,
                                 size_t size) {
  bs_timed_out = 0;
  pthread_mutex_lock(&b->lock);
  ncclResult_t res = bs_recv(b, peer, tag, data, size);
  pthread_mutex_unlock(&b->lock);
  return res;
}

/* ---- Teardown ------------------------------------------------------------- */

void weft_bootstrap_abort(struct weft_bootstrap *b) {
  if (b != NULL) atomic_store(&b->abort_flag, 1);
}

void weft_bootstrap_resume(struct weft_bootstrap *b) {
  if (b != NULL) atomic_store(&b->abort_flag, 0);
}

void weft_bootstrap_destroy(struct weft_bootstrap *b) {
  if (b == NULL) return;
  weft_gate_close(&b->gate);
  weft_socket_close(&b->ring_send_fd);
  weft_socket_close(&b->ring_recv_fd);
  for (int i = 0; i < b->nranks; i++) {
    weft_socket_close(&b->send_fd[i]);
    weft_socket_close(&b->recv_fd[i]);
  }
  while (b->stash_head) {
    struct stash *m = b->stash_head;
    b->stash_head = m->next;
    free(m->data);
    free(m);
  }
  free(b->send_fd);
  free(b->recv_fd);
  free(b->addrs);
  pthread_mutex_destroy(&b->lock);
  free(b);
}
