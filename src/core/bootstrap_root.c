/* The bootstrap root: a detached thread that introduces the ranks of one
 * communicator. Each rank registers (rank, nranks, its listen address); once
 * all have, each learns its ring-next's address and the thread exits. A
 * communicator made by ncclCommInitRankScalable spreads its ranks over
 * several roots in blocks (NCCL's rule: bootstrap.c); a root then serves
 * its block and hears from one more rank, the first of the next block,
 * whose address its block's last rank needs. If
 * WEFT_TIMEOUT passes first, every registered rank is told which ranks are
 * missing. The thread owns all it allocates and frees it before it ends. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/bootstrap_internal.h"
#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"

/* How long the root gives each reply; a rank that does not read it has
 * failed on its own and is not worth waiting for. */
#define ROOT_REPLY_MS 5000
/* Listeners a forked child closes (see root_atfork_child). */
#define ROOT_TRACK_MAX 64

struct root {
  struct weft_gate gate;
  char name[INET6_ADDRSTRLEN + 32]; /* "bootstrap root 1.2.3.4:5" */
  int nranks;                       /* 0 until the first registration */
  int first, count;                 /* the block of ranks served */
  int neighbour;                    /* first rank after the block, or -1 */
  int expect;                       /* registrations: count + 1 with a neighbour */
  int nreg;
  int *fds;
  union weft_sockaddr *addrs;
  int64_t deadline;
  int timeout_s;
  char reason[160];
  char rejected[160]; /* the last registration refused for what it said */
  unsigned char refusal[sizeof(struct weft_boot_reply) + 64];
  size_t refusal_len;
};

/* ---- Listeners inherited across fork --------------------------------------- */

/* A child forked while a root is live must not keep a copy of its listener:
 * the socket would stay open after the parent's root ends, and clients
 * would queue on it instead of being refused. The root thread does not
 * exist in the child, so closing its listener there is all it takes. */
static pthread_mutex_t track_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t track_once = PTHREAD_ONCE_INIT;
static int track_fds[ROOT_TRACK_MAX];
static int track_n;

static void root_atfork_prepare(void) {
  pthread_mutex_lock(&track_lock);
}
static void root_atfork_parent(void) {
  pthread_mutex_unlock(&track_lock);
}
static void root_atfork_child(void) {
  for (int i = 0; i < track_n; i++) close(track_fds[i]);
  track_n = 0;
  pthread_mutex_unlock(&track_lock);
}
static void root_track_init(void) {
  pthread_atfork(root_atfork_prepare, root_atfork_parent, root_atfork_child);
}

static void root_track(int fd) {
  pthread_once(&track_once, root_track_init);
  pthread_mutex_lock(&track_lock);
  if (track_n < ROOT_TRACK_MAX) track_fds[track_n++] = fd;
  pthread_mutex_unlock(&track_lock);
}

/* Closes fd under the lock, so a fork never sees a number already reused. */
static void root_untrack_close(int *fd) {
  pthread_mutex_lock(&track_lock);
  for (int i = 0; i < track_n; i++)
    if (track_fds[i] == *fd) track_fds[i] = track_fds[--track_n];
  weft_socket_close(fd);
  pthread_mutex_unlock(&track_lock);
}

/* ---- Registration ---------------------------------------------------------- */

static const char *root_first_registration(struct root *r, const struct weft_boot_reg *reg) {
  const int nranks = reg->nranks;
  r->fds = malloc((size_t)nranks * sizeof(*r->fds));
  r->addrs = calloc((size_t)nranks, sizeof(*r->addrs));
  if (r->fds == NULL || r->addrs == NULL) {
    free(r->fds);
    free(r->addrs);
    r->fds = NULL;
    r->addrs = NULL;
    return "out of memory for the rank table";
  }
  for (int i = 0; i < nranks; i++) r->fds[i] = -1;
  r->nranks = nranks;
  r->first = reg->first;
  r->count = reg->count;
  r->neighbour = reg->count < nranks ? (reg->first + reg->count) % nranks : -1;
  r->expect = reg->count + (r->neighbour >= 0);
  /* The clock starts with the first rank: before that, nobody is late. */
  r->deadline = weft_time_ms() + (int64_t)r->timeout_s * 1000;
  return NULL;
}

/* Whether rank i registers here: one of the block, or its neighbour. */
static int root_expects(const struct root *r, int i) {
  return (i >= r->first && i < r->first + r->count) || i == r->neighbour;
}

/* A registration that presented the secret, so a rank of this job, but
 * that cannot be admitted (r->reason says why): its rank hears why at once
 * and fails, instead of trying again until its deadline as after a closed
 * connection; the verdict the others get names it too (root_finish). The
 * gate closes the connection after; the registration was read whole, so
 * the close does not reset what is sent here. */
static const char *root_reject(struct root *r, int fd) {
  _Static_assert(sizeof(r->reason) <= WEFT_BOOT_ERROR_MAX, "reason longer than a verdict");
  struct weft_boot_reply reply = {.status = WEFT_BOOT_REPLY_ERROR,
                                  .len = (int32_t)strlen(r->reason)};
  unsigned char msg[sizeof(reply) + sizeof(r->reason)];
  memcpy(msg, &reply, sizeof(reply));
  memcpy(msg + sizeof(reply), r->reason, (size_t)reply.len);
  (void)send(fd, msg, sizeof(reply) + (size_t)reply.len, MSG_DONTWAIT | MSG_NOSIGNAL);
  snprintf(r->rejected, sizeof(r->rejected), "%s", r->reason);
  return r->reason;
}

static const char *root_admit(void *ctx, int fd, const void *first) {
  struct root *r = ctx;
  struct weft_boot_reg reg;
  memcpy(&reg, first, sizeof(reg));
  if (reg.magic != WEFT_BOOT_REG_MAGIC) return "not a rank registration (bad magic)";
  if (reg.nranks < 1 || reg.nranks > WEFT_BOOT_MAX_RANKS) {
    snprintf(r->reason, sizeof(r->reason), "registration claims %d ranks", (int)reg.nranks);
    return root_reject(r, fd);
  }
  if (reg.rank < 0 || reg.rank >= reg.nranks) {
    snprintf(r->reason, sizeof(r->reason), "registration for rank %d of %d", (int)reg.rank,
             (int)reg.nranks);
    return root_reject(r, fd);
  }
  if (reg.first < 0 || reg.count < 1 || reg.count > reg.nranks - reg.first) {
    snprintf(r->reason, sizeof(r->reason), "registration for a block of %d ranks from %d, of %d",
             (int)reg.count, (int)reg.first, (int)reg.nranks);
    return root_reject(r, fd);
  }
  if (r->nranks == 0) {
    const char *why = root_first_registration(r, &reg);
    if (why != NULL) return why;
  } else if (reg.nranks != r->nranks) {
    snprintf(
        r->reason, sizeof(r->reason),
        "rank %d registered for %d ranks, others for %d (every rank must pass the same nranks)",
        (int)reg.rank, (int)reg.nranks, r->nranks);
    return root_reject(r, fd);
  } else if (reg.first != r->first || reg.count != r->count) {
    snprintf(r->reason, sizeof(r->reason),
             "rank %d registered for ranks %d..%d at this root, others for %d..%d", (int)reg.rank,
             (int)reg.first, (int)(reg.first + reg.count - 1), r->first, r->first + r->count - 1);
    return root_reject(r, fd);
  }
  if (!root_expects(r, reg.rank)) {
    snprintf(r->reason, sizeof(r->reason),
             "rank %d registered at the root of ranks %d..%d (and %d after them)", (int)reg.rank,
             r->first, r->first + r->count - 1, r->neighbour);
    return root_reject(r, fd);
  }
  if (r->fds[reg.rank] >= 0) {
    snprintf(r->reason, sizeof(r->reason),
             "rank %d registered twice (two processes passed the same rank)", (int)reg.rank);
    return root_reject(r, fd);
  }
  r->fds[reg.rank] = fd;
  r->addrs[reg.rank] = reg.addr;
  r->nreg++;
  TRACE(WEFT_BOOTSTRAP, "%s: rank %d of %d registered", r->name, (int)reg.rank, r->nranks);
  return NULL;
}

/* A registration (the magic says so) with a wrong secret comes from a rank
 * of another job or one set up differently: it is told, rather than left to
 * time out. Anything else that fails the secret hears nothing. */
static const void *root_refusal(void *ctx, const void *first, size_t got, size_t *len_out) {
  struct root *r = ctx;
  struct weft_boot_reg reg;
  if (got < sizeof(reg)) return NULL;
  memcpy(&reg, first, sizeof(reg));
  if (reg.magic != WEFT_BOOT_REG_MAGIC) return NULL;
  *len_out = r->refusal_len;
  return r->refusal;
}

static void root_refusal_init(struct root *r) {
  static const char text[] = "its registration presented a wrong secret";
  struct weft_boot_reply reply = {.status = WEFT_BOOT_REPLY_REFUSED,
                                  .len = (int32_t)(sizeof(text) - 1)};
  _Static_assert(sizeof(reply) + sizeof(text) <= sizeof(r->refusal), "refusal too long");
  memcpy(r->refusal, &reply, sizeof(reply));
  memcpy(r->refusal + sizeof(reply), text, sizeof(text) - 1);
  r->refusal_len = sizeof(reply) + sizeof(text) - 1;
}

/* ---- Replies ------------------------------------------------------------- */

static void root_reply(struct root *r, int rank, const struct weft_boot_reply *reply,
                       const char *text) {
  char what[sizeof(r->name) + 32];
  snprintf(what, sizeof(what), "rank %d (from %s)", rank, r->name);
  int64_t deadline = weft_time_ms() + ROOT_REPLY_MS;
  /* A failure is WARNed by the socket layer; the other ranks still get theirs. */
  if (weft_socket_send_all(r->fds[rank], reply, sizeof(*reply), deadline, what) == ncclSuccess &&
      text != NULL)
    (void)weft_socket_send_all(r->fds[rank], text, (size_t)reply->len, deadline, what);
}

/* Each rank of the block learns its ring next; the neighbour hears only
 * that the block is complete. */
static void root_send_ring(struct root *r) {
  for (int i = r->first; i < r->first + r->count; i++) {
    struct weft_boot_reply reply = {.status = WEFT_BOOT_REPLY_OK, .len = 0};
    reply.next = r->addrs[(i + 1) % r->nranks];
    root_reply(r, i, &reply, NULL);
  }
  if (r->neighbour >= 0) {
    struct weft_boot_reply reply = {.status = WEFT_BOOT_REPLY_OK, .len = 0};
    reply.next = r->addrs[r->neighbour];
    root_reply(r, r->neighbour, &reply, NULL);
    INFO(WEFT_BOOTSTRAP, "%s: ranks %d..%d of %d registered, and rank %d after them", r->name,
         r->first, r->first + r->count - 1, r->nranks, r->neighbour);
  } else {
    INFO(WEFT_BOOTSTRAP, "%s: all %d ranks registered", r->name, r->nranks);
  }
}

/* "rank 2 of 3" or "ranks 3, 5 of 8", the list cut short if it is long. */
static void root_missing_text(const struct root *r, const char *verdict, char *out, size_t size) {
  int missing = r->expect - r->nreg;
  size_t n = (size_t)snprintf(out, size, "%s ", missing == 1 ? "rank" : "ranks");
  int listed = 0;
  for (int i = 0; i < r->nranks && n < size; i++) {
    if (r->fds[i] >= 0 || !root_expects(r, i)) continue;
    if (n + 48 > size) {
      n += (size_t)snprintf(out + n, size - n, "... (%d more)", missing - listed);
      break;
    }
    n += (size_t)snprintf(out + n, size - n, "%s%d", listed ? ", " : "", i);
    listed++;
  }
  if (n < size) snprintf(out + n, size - n, " of %d %s", r->nranks, verdict);
}

static void root_send_error(struct root *r, const char *text) {
  struct weft_boot_reply reply = {.status = WEFT_BOOT_REPLY_ERROR, .len = (int32_t)strlen(text)};
  for (int i = 0; i < r->nranks; i++)
    if (r->fds[i] >= 0) root_reply(r, i, &reply, text);
}

/* ---- The thread -------------------------------------------------------------- */

static void root_free(struct root *r) {
  for (int i = 0; i < r->nranks; i++) weft_socket_close(&r->fds[i]);
  root_untrack_close(&r->gate.listen_fd);
  weft_gate_close(&r->gate);
  free(r->fds);
  free(r->addrs);
  free(r);
}

static void root_finish(struct root *r, ncclResult_t res) {
  char text[WEFT_BOOT_ERROR_MAX], verdict[sizeof(r->name) + 64], flood[200];
  if (r->nranks > 0 && r->nreg == r->expect) {
    root_send_ring(r);
  } else if (r->nreg > 0) {
    if (res == ncclSuccess)
      snprintf(verdict, sizeof(verdict), "did not reach the bootstrap root within %d s",
               r->timeout_s);
    else
      snprintf(verdict, sizeof(verdict), "were still missing when %s failed", r->name);
    root_missing_text(r, verdict, text, sizeof(text));
    /* Ranks that a flood kept out would have been let in (bootstrap_gate.c);
     * still, the verdict says what else knocked, so no one blames ranks alone. */
    weft_gate_flood_text(&r->gate.flood, flood, sizeof(flood));
    size_t used = strlen(text);
    snprintf(text + used, sizeof(text) - used, "%s", flood);
    used = strlen(text);
    if (r->rejected[0] != '\0')
      snprintf(text + used, sizeof(text) - used, "; a registration was refused: %s", r->rejected);
    WARN("%s: %s", r->name, text);
    root_send_error(r, text);
  } else {
    INFO(WEFT_BOOTSTRAP, "%s: no rank registered within %d s; closing", r->name, r->timeout_s);
  }
}

static void *root_main(void *arg) {
  struct root *r = arg;
  ncclResult_t res = ncclSuccess;
  while (r->nranks == 0 || r->nreg < r->expect) {
    if (weft_time_ms() >= r->deadline) break;
    res = weft_gate_poll(&r->gate, NULL, 0, r->deadline);
    if (res != ncclSuccess) break;
  }
  root_finish(r, res);
  root_free(r);
  return NULL;
}

/* The thread blocks every signal so the application's handlers run on its
 * own threads, never on this helper. */
static ncclResult_t root_spawn(struct root *r) {
  pthread_attr_t attr;
  pthread_t thread;
  sigset_t all, old;
  WEFT_PTHREAD_CHECK(pthread_attr_init(&attr), "pthread_attr_init for the bootstrap root");
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(&thread, &attr, root_main, r);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    WARN("%s: cannot start its thread: %s", r->name, strerror(err));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t weft_bootstrap_root_start(const union weft_sockaddr *addr, uint64_t secret,
                                       union weft_sockaddr *bound_out) {
  union weft_sockaddr bound = *addr;
  int fd;
  WEFT_CHECK(weft_socket_listen(&bound, &fd));
  struct root *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    WARN("bootstrap root: out of memory");
    close(fd);
    return ncclSystemError;
  }
  char text[INET6_ADDRSTRLEN + 16];
  snprintf(r->name, sizeof(r->name), "bootstrap root %s",
           weft_sockaddr_str(&bound, text, sizeof(text)));
  weft_gate_init(&r->gate, "bootstrap root", fd, secret, sizeof(struct weft_boot_reg), root_admit,
                 r, NULL);
  root_refusal_init(r);
  weft_gate_set_refusal(&r->gate, root_refusal);
  r->timeout_s = (int)weft_param_int(WEFT_PARAM_TIMEOUT);
  r->deadline = weft_time_ms() + (int64_t)r->timeout_s * 1000;
  root_track(fd);
  /* Logged before the thread starts: from then on r belongs to it. */
  INFO(WEFT_BOOTSTRAP, "%s: listening", r->name);
  ncclResult_t res = root_spawn(r);
  if (res != ncclSuccess) {
    root_free(r);
    return res;
  }
  *bound_out = bound;
  return ncclSuccess;
}
