/* The net transport's GPU side (weft_net_gpu_ops, transport/gpu_transport.h;
 * docs/CUDA.md, "GPU ranks on other hosts"): for every peer it links, a
 * FIFO per channel and direction (net_fifo.h) in pinned, mapped host
 * memory that the kernels use like any link (Simple only, system-scope
 * counters); a direction's slots go in device memory instead where
 * GPUDirect RDMA is allowed (net_gdr.h: the network takes CUDA pointers
 * and the topology's verdict says yes). connect allocates them, exchanges the receive sides'
 * handles over the bootstrap and connects every FIFO (bounded by the setup's timeout). The proxy
 * side, which carries the slots over the network, is the engine's to start: it takes each FIFO from
 * weft_net_gpu_fifo. */
#ifndef WEFT_TRANSPORT_NET_NET_GPU_H
#define WEFT_TRANSPORT_NET_NET_GPU_H

#include "transport/net/net_fifo.h"

/* The FIFO of one link of a state weft_net_gpu_ops.connect made: NULL when
 * that peer is not a net peer (or state is NULL). */
struct weft_net_fifo *weft_net_gpu_fifo(void *state, int peer, int channel, int is_send);

#endif
