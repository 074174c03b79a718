/* The communicator's data connections: today one ring, send to ring_next
 * and receive from ring_prev, over the socket transport. */
#ifndef WEFT_CORE_CONNECT_H
#define WEFT_CORE_CONNECT_H

#include "nccl.h"

struct ncclComm;

/* Bootstrap tag of the ring connection handles (plus the channel). */
#define WEFT_TAG_RING_CONN 0x52494e00 /* "RIN\0" */

/* Connects comm->ring_send and comm->ring_recv (none for one rank). Every
 * rank calls it at the same point of init; waits end at WEFT_TIMEOUT or on
 * abort. On failure nothing is left connected. */
ncclResult_t weft_comm_connect_ring(struct ncclComm *comm);
/* Closes and frees the ring connections; safe on a partly connected comm. */
void weft_comm_disconnect(struct ncclComm *comm);

#endif
