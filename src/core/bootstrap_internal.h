/* Private to the bootstrap (bootstrap.c, bootstrap_gate.c, bootstrap_root.c):
 * what travels on the wire, the gate that admits connections presenting the
 * secret, and the root server. */
#ifndef WEFT_CORE_BOOTSTRAP_INTERNAL_H
#define WEFT_CORE_BOOTSTRAP_INTERNAL_H

#include <poll.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core/bootstrap.h"

#define WEFT_BOOT_REG_MAGIC 0x7765667452656731ULL /* "weftReg1" */

/* A connection must present its first message this soon after it is
 * accepted. A rank sends it right after connecting, so it is there at once;
 * a stranger that stays silent loses its place quickly. */
#define WEFT_BOOT_FIRST_MSG_MS 1000
/* Ranks wait for the root's answer this much longer than the root waits for
 * the last rank, so they hear the root's verdict rather than time out. */
#define WEFT_BOOT_REPLY_GRACE_MS 3000
#define WEFT_BOOT_ERROR_MAX 512
#define WEFT_BOOT_MAX_RANKS (1 << 20)

/* Every message starts with the secret; these are laid out so it is the
 * first 8 bytes. Peers run the same library, so native layout is fine. */
struct weft_boot_reg { /* rank -> root */
  uint64_t secret;
  uint64_t magic;
  int32_t rank;
  int32_t nranks;
  union weft_sockaddr addr; /* the rank's own bootstrap listener */
  /* The ranks this root serves, first .. first + count - 1 (all of them
   * unless ncclCommInitRankScalable spread them over several roots). With
   * several roots, the rank after the block (its ring next) registers too,
   * as the block's neighbour, so the root can tell the block's last rank
   * where to connect. */
  int32_t first;
  int32_t count;
};

/* weft_boot_reply.status: after one that is not OK, len bytes of text follow. */
#define WEFT_BOOT_REPLY_OK 0
#define WEFT_BOOT_REPLY_ERROR 1   /* the root's verdict: ranks missing */
#define WEFT_BOOT_REPLY_REFUSED 2 /* a wrong secret (the gate's refusal) */

struct weft_boot_reply { /* root -> rank */
  int32_t status;        /* WEFT_BOOT_REPLY_*: OK, then next is valid */
  int32_t len;
  union weft_sockaddr next; /* the ring-next rank's listener */
};

enum weft_boot_kind { WEFT_BOOT_RING = 1, WEFT_BOOT_P2P = 2 };

struct weft_boot_hello { /* first message between ranks */
  uint64_t secret;
  int32_t rank;
  int32_t kind;
};

struct weft_boot_msg_hdr { /* before each point-to-point message */
  int32_t tag;
  int32_t pad;
  uint64_t size;
};

/* ---- The gate: a listener plus connections not yet admitted ------------- */

#define WEFT_GATE_FIRST_MAX 64
/* At most this many connections wait to present the secret (fewer when the
 * process may open few files, and fewer in all the gates of a process
 * together: see bootstrap_gate.c). When full, the oldest makes room for
 * the new one, so strangers can never lock ranks out, and their fds cannot
 * exhaust the process's. */
#define WEFT_GATE_MAX_PENDING 64
/* Sources whose dropped connections a gate counts apart; more share a row. */
#define WEFT_GATE_FLOOD_SOURCES 8
/* A source's drops are WARNed at once the first time, then at most this often. */
#define WEFT_GATE_FLOOD_LOG_MS 10000

struct weft_gate_pending {
  int fd;
  int64_t deadline;
  size_t got;
  union weft_sockaddr from;
  unsigned char buf[WEFT_GATE_FIRST_MAX];
};

/* Connections dropped before presenting the secret (silent, evicted, reset
 * or a wrong secret), per source address, so that a flood is logged once
 * with its source and a count instead of once per connection. */
enum weft_gate_drop {
  WEFT_GATE_DROP_WRONG_SECRET,
  WEFT_GATE_DROP_CLOSED, /* closed or reset before presenting it */
  WEFT_GATE_DROP_SILENT, /* no complete first message in time */
  WEFT_GATE_DROP_EVICTED,
  WEFT_GATE_DROP_KINDS
};

struct weft_gate_source {
  union weft_sockaddr addr; /* port 0; family 0 for the shared last row */
  int64_t by_kind[WEFT_GATE_DROP_KINDS];
  int64_t dropped;
  int64_t unlogged;
  int64_t last_log_ms;
};

struct weft_gate_flood {
  int64_t dropped;
  int nsrc;
  struct weft_gate_source src[WEFT_GATE_FLOOD_SOURCES];
};

/* Counts a dropped connection from `from`; WARNs the first of each kind
 * from a source at once (with reason) and later ones as a count at most
 * every WEFT_GATE_FLOOD_LOG_MS. */
void weft_gate_flood_note(struct weft_gate_flood *f, const char *who,
                          const union weft_sockaddr *from, enum weft_gate_drop kind,
                          const char *reason);
/* WARNs the counts not yet logged (the gate is closing). */
void weft_gate_flood_flush(struct weft_gate_flood *f, const char *who);
/* "" or "; meanwhile it dropped N connections that did not present the
 * secret (M from 1.2.3.4)", for a verdict that must not blame ranks alone. */
void weft_gate_flood_text(const struct weft_gate_flood *f, char *buf, size_t size);

/* Called with a connection whose first message carried the secret. Returns
 * NULL when it keeps fd, or the reason it is refused (the gate WARNs it and
 * closes fd). */
typedef const char *(*weft_gate_admit_fn)(void *ctx, int fd, const void *first);

/* What to send a connection whose first message (got bytes of it) carried
 * a wrong secret, or NULL for nothing; *len_out gets its length. */
typedef const void *(*weft_gate_refusal_fn)(void *ctx, const void *first, size_t got,
                                            size_t *len_out);

struct weft_gate {
  char who[48]; /* "bootstrap root" or "bootstrap rank 3": starts each WARN */
  int listen_fd;
  uint64_t secret;
  size_t first_size;
  int64_t first_ms;
  weft_gate_admit_fn admit;
  void *ctx;
  const _Atomic int *abort_flag; /* NULL: cannot be aborted */
  int64_t accept_pause_until;    /* after a failed accept, the listener rests */
  int accept_failed_logged;
  weft_gate_refusal_fn refusal; /* NULL: wrong secrets hear nothing */
  struct weft_gate_flood flood;
  struct weft_gate_pending *pend;
  int npend;
  int pend_max; /* see WEFT_GATE_MAX_PENDING */
  int pend_cap;
  struct pollfd *pfd;
  int pfd_cap;
};

/* Takes ownership of listen_fd. */
void weft_gate_init(struct weft_gate *g, const char *who, int listen_fd, uint64_t secret,
                    size_t first_size, weft_gate_admit_fn admit, void *ctx,
                    const _Atomic int *abort_flag);
/* One round: waits until something happens on the listener, a pending
 * connection or one of extra (whose revents it fills), or until deadline (in
 * short slices when the gate can be aborted), then serves the listener and
 * the pending connections. Returns ncclInternalError once aborted. */
ncclResult_t weft_gate_poll(struct weft_gate *g, struct pollfd *extra, int nextra,
                            int64_t deadline);
/* Closes the listener and every pending connection. */
void weft_gate_close(struct weft_gate *g);
/* Lets the gate tell a connection that presented a wrong secret why it is
 * closed (sent without waiting), so that a misconfigured rank hears it. */
void weft_gate_set_refusal(struct weft_gate *g, weft_gate_refusal_fn refusal);

/* Starts the root thread listening on addr (port 0: any); bound_out gets
 * the address it listens on. */
ncclResult_t weft_bootstrap_root_start(const union weft_sockaddr *addr, uint64_t secret,
                                       union weft_sockaddr *bound_out);

#endif
