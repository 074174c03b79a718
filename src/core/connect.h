/* The communicator's data connections: a table of one-way links per
 * (channel, peer, direction), filled when a task first needs a link. Shared
 * memory between ranks of one host, sockets otherwise. */
#ifndef WEFT_CORE_CONNECT_H
#define WEFT_CORE_CONNECT_H

#include "nccl.h"
#include "transport/transport.h"

struct ncclComm;

/* Bootstrap tag of a connection handle: the receiver of a link sends it to
 * the sender, tagged with the link's channel. */
#define WEFT_TAG_CONN 0x434f0000 /* "CO\0\0" + channel */

/* One channel's links: send[p] goes to peer p, recv[p] comes from it. */
struct weft_channel_conns {
  struct weft_conn **send;
  struct weft_conn **recv;
};

/* A link a task needs. */
struct weft_conn_need {
  int channel;
  int peer;
  enum weft_conn_dir dir;
};

/* The connected link, or NULL when there is none yet. */
static inline struct weft_conn *weft_comm_conn(const struct ncclComm *comm, int channel, int peer,
                                               enum weft_conn_dir dir);

/* Connects every listed link that is not connected yet (duplicates are
 * fine). Ranks connect in matching pairs: peer p must list (ch, me, SEND)
 * exactly when this rank lists (ch, p, RECV), in any order. Waits end at
 * WEFT_TIMEOUT or on abort; on failure the links of this call are closed. */
ncclResult_t weft_comm_connect(struct ncclComm *comm, const struct weft_conn_need *needs, int n);

/* Closes and frees every link (shm segments are gone afterwards); safe on a
 * partly connected communicator. */
void weft_comm_disconnect(struct ncclComm *comm);

/* ---- inline ---- */
#include "core/comm.h"

static inline struct weft_conn *weft_comm_conn(const struct ncclComm *comm, int channel, int peer,
                                               enum weft_conn_dir dir) {
  const struct weft_channel_conns *ch = comm->channels[channel];
  if (ch == NULL) return NULL;
  return dir == WEFT_CONN_SEND ? ch->send[peer] : ch->recv[peer];
}

#endif
