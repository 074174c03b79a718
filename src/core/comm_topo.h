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
/* The host engine's default most channels for ranks with these peer
 * records (comm->host_channels): 16 or 8 where sockets carry a link and the
 * hosts have the cores, 0 for the tuning's default; the same on every
 * rank. */
int weft_comm_host_channels(const struct weft_peer_info *peers, int nranks, int shm_disable);
/* Helper threads per socket link of the host engine for that default: 1
 * (one data socket each) with 8 or more channels, which bring the parallelism;
 * else 0, the socket network's NCCL_SOCKET_NTHREADS x NSOCKS_PERTHREAD. The
 * wide link (WEFT_WIDE_CHANNEL) has as many as the channels it stands in
 * for. */
int weft_comm_host_link_threads(int host_channels, int wide);

struct weft_topo;
/* comm->gpu_path for GPU ranks whose GPUs are gpus[] in t (-1: not in
 * it): the slowest pair's path type (net above staged above PCIe above
 * NVLink above the same GPU); 0 when some rank has no GPU, or one t does
 * not know. Ranks on several hosts are net. */
int weft_comm_gpu_path(const struct ncclComm *comm, const struct weft_topo *t, const int *gpus);

#endif
