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

/* An id made from NCCL_COMM_ID: rank 0's weft_bootstrap_create starts the
 * root on the id's address, since no process ran one in ncclGetUniqueId. */
#define WEFT_ID_MAGIC_COMM_ID 0x7765667449443043ULL /* "weftID0C" */
#define WEFT_BOOT_REG_MAGIC 0x7765667452656731ULL   /* "weftReg1" */

/* A connection must present its first message this soon after connecting,
 * so one silent client cannot hold a listener's attention. */
#define WEFT_BOOT_FIRST_MSG_MS 5000
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
};

struct weft_boot_reply { /* root -> rank */
  int32_t status;        /* 0: next is valid; 1: len bytes of error text follow */
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
#define WEFT_GATE_MAX_PENDING 1024

struct weft_gate_pending {
  int fd;
  int64_t deadline;
  size_t got;
  union weft_sockaddr from;
  unsigned char buf[WEFT_GATE_FIRST_MAX];
};

/* Called with a connection whose first message carried the secret. Returns
 * NULL when it keeps fd, or the reason it is refused (the gate WARNs it and
 * closes fd). */
typedef const char *(*weft_gate_admit_fn)(void *ctx, int fd, const void *first);

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
  struct weft_gate_pending *pend;
  int npend;
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

/* Starts the root thread listening on addr (port 0: any); bound_out gets
 * the address it listens on. */
ncclResult_t weft_bootstrap_root_start(const union weft_sockaddr *addr, uint64_t secret,
                                       union weft_sockaddr *bound_out);

#endif
