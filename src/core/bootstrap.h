/* Bootstrap: the unique id, the root that introduces ranks, and the
 * out-of-band messages ranks exchange while setting up a communicator. */
#ifndef WEFT_CORE_BOOTSTRAP_H
#define WEFT_CORE_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/socket.h"

#define WEFT_ID_MAGIC 0x7765667449443031ULL /* "weftID01" */
/* An id made from NCCL_COMM_ID: rank 0's weft_bootstrap_create starts the
 * root on the id's address, since no process ran one in ncclGetUniqueId. */
#define WEFT_ID_MAGIC_COMM_ID 0x7765667449443043ULL /* "weftID0C" */

/* What the 128 bytes of ncclUniqueId hold. */
struct weft_unique_id {
  uint64_t magic;
  uint64_t secret; /* presented first on every bootstrap connection */
  union weft_sockaddr root;
};

struct weft_bootstrap;

/* ncclGetUniqueId: fills id with a fresh random secret and starts the root
 * listener of this process (a thread that serves the ranks that register
 * with that secret, then exits). With NCCL_COMM_ID=host:port, as in NCCL, it
 * starts nothing: the id holds that address and a secret made from
 * WEFT_COMM_SECRET, so every process builds the same id, and rank 0's
 * weft_bootstrap_create hosts the root. */
ncclResult_t weft_bootstrap_get_unique_id(ncclUniqueId *id_out);
/* A fresh id with its own root, whatever NCCL_COMM_ID says: for the
 * communicators weft makes itself (split, shrink, ncclCommInitAll), which
 * must not all meet on the one NCCL_COMM_ID port. */
ncclResult_t weft_bootstrap_new_id(ncclUniqueId *id_out);

/* Registers rank with the root named in its id and connects the ring of
 * bootstrap peers. nids ids (1..nranks, every rank passing the same ones:
 * ncclCommInitRankScalable) spread the ranks over that many roots in
 * blocks, as NCCL does; ids[0]'s secret is the communicator's. Every wait
 * ends by WEFT_TIMEOUT; a timeout names the ranks that did not arrive. */
ncclResult_t weft_bootstrap_create(const ncclUniqueId *ids, int nids, int rank, int nranks,
                                   struct weft_bootstrap **out);

/* In-place all-gather: all holds nranks blocks of size bytes; block `rank`
 * is this rank's contribution. */
ncclResult_t weft_bootstrap_allgather(struct weft_bootstrap *b, void *all, size_t size);
ncclResult_t weft_bootstrap_barrier(struct weft_bootstrap *b);
/* Point-to-point messages matched by (peer, tag); a message that arrives
 * before its recv is kept until asked for. */
ncclResult_t weft_bootstrap_send(struct weft_bootstrap *b, int peer, int tag, const void *data,
                                 size_t size);
ncclResult_t weft_bootstrap_recv(struct weft_bootstrap *b, int peer, int tag, void *data,
                                 size_t size);
/* Whether this thread's last weft_bootstrap_send, _recv or _allgather
 * (barrier too) failed because its WEFT_TIMEOUT deadline passed (it
 * returned ncclSystemError after a WARN saying what it waited for), not for
 * another reason. */
int weft_bootstrap_timed_out(void);

/* Makes every wait of b return ncclInternalError at once (abort). */
void weft_bootstrap_abort(struct weft_bootstrap *b);
/* Undoes weft_bootstrap_abort, for ncclCommShrink, which talks over a
 * failed communicator's bootstrap (core/failure.c aborts it so that no rank
 * waits there on a failed one). */
void weft_bootstrap_resume(struct weft_bootstrap *b);
/* Closes sockets and frees b; NULL is fine. */
void weft_bootstrap_destroy(struct weft_bootstrap *b);

/* 64-bit random from getrandom(2). */
ncclResult_t weft_random_u64(uint64_t *out);

#endif
