/* What the communicator takes from the topology (topo/): the process's
 * graph, made once; each peer's transport; the ring order. */
#ifndef WEFT_CORE_COMM_TOPO_H
#define WEFT_CORE_COMM_TOPO_H

#include "core/comm.h"

/* Before the peer exchange: this rank's bus id and topology hash in *me. */
ncclResult_t weft_comm_topo_describe(struct ncclComm *comm, struct weft_peer_info *me);
/* After it: comm->peer_transport, comm->ring_order and the ring
 * neighbours, logged at INFO/GRAPH; NCCL_TOPO_DUMP_FILE written by rank 0
 * of the process's first communicator. Every rank computes the same ring. */
ncclResult_t weft_comm_topo_decide(struct ncclComm *comm);

#endif
