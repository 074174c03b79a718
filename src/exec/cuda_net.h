/* The CUDA engine's net links (docs/CUDA.md, "GPU ranks on other hosts"),
 * the engine's part: which peers get them (another host, WEFT_NET_GPU) and
 * the proxy side. The links themselves (a FIFO per channel and direction
 * in pinned, mapped host memory, connected over the network) are the net
 * transport's GPU side (transport/net/net_gpu.h); here they are handed to
 * the proxy thread (src/proxy/), and each launch posts the slots its plan
 * moves on them, from the launch call, or from a CUDA host function on the
 * stream while it is captured (so every replay of a graph posts). */
#ifndef WEFT_EXEC_CUDA_NET_H
#define WEFT_EXEC_CUDA_NET_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;
struct weft_dev_conns;
struct weft_cuda_net;
struct weft_cuda_net_ops;

/* Marks net_peer[p] (nranks entries) for the peers on another host, when
 * WEFT_NET_GPU allows kernels across hosts; returns how many. */
int weft_cuda_net_peers(const struct ncclComm *comm, unsigned char *net_peer);
/* Channels (of plans: conns hold twice as many) a communicator with nnet
 * net peers gets at most: WEFT_NET_GPU_NCHANNELS when set, else 4, or the
 * host engine's socket channels where there is one net peer and they are
 * more. */
int weft_cuda_net_max_channels(const struct ncclComm *comm, int nnet);

/* Hands the net transport's links (links: the state weft_net_gpu_ops's
 * connect made for the peers in net_peer, on every channel of conns) to
 * the proxy and starts it. error and abort are the engine's host-mapped
 * words (host addresses). Destroy this before the transport frees links. */
ncclResult_t weft_cuda_net_create(struct ncclComm *comm, const unsigned char *net_peer,
                                  const struct weft_dev_conns *conns, void *links, uint64_t *error,
                                  const volatile uint32_t *abort, struct weft_cuda_net **out);
/* Before a destroy that is not an abort, once the kernels ended: waits
 * (WEFT_TIMEOUT at most) until the proxy sent the last slots they
 * published. NULL net: nothing. */
void weft_cuda_net_drain(struct weft_cuda_net *net);
void weft_cuda_net_destroy(struct weft_cuda_net *net);

/* The ops a launch of plan posts (p2p: a send/recv plan), kept with the
 * cached plan; *out is NULL when the plan moves nothing over the net. */
ncclResult_t weft_cuda_net_plan_ops(struct weft_cuda_net *net, const struct weft_plan *plan,
                                    int p2p, struct weft_cuda_net_ops **out);
void weft_cuda_net_ops_free(struct weft_cuda_net_ops *ops);
/* Posts ops for a launch about to be queued on stream (a cudaStream_t);
 * NULL ops: nothing. */
ncclResult_t weft_cuda_net_post(struct ncclComm *comm, struct weft_cuda_net_ops *ops, void *stream);

#endif
