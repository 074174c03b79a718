/* The CUDA engine's net links: see exec/cuda_net.h. */
#include "exec/cuda_net.h"

#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "base/param.h"
#include "weft_config.h"

/* Net links' channels by default: 4; with one net peer, the host
 * engine's socket channels when more (comm->host_channels: 16 where every
 * host has 8 cores a local rank, 8 with 4). On the 16-core machine (GPU
 * ranks on simulated hosts, AllReduce, 2026-12-04) 2 ranks moved 128 MiB
 * at 7.3-7.7 GB/s busbw with 4 channels, 9.0-10.0 with 8 and 11.1-12.1
 * with 16, against host ranks' 10.7-11.8 over the same sockets; but 4
 * ranks (3 net peers) with 5 channels each moved 16-64 MiB at 1.0-1.2
 * against 4.3-4.7 with 4: parts started off 16-byte boundaries, and the
 * kernels moved them element by element (fixed in sched/plan.c's
 * weft_split; "Seventh pass"). 5 and 8 now run like 4 (8 up to 20%
 * faster), so more peers keep 4, for half the pinned memory
 * (docs/PERFORMANCE.md, "Fifth pass", "Seventh pass"). */
#define NET_GPU_MIN_CHANNELS 4

int weft_cuda_net_max_channels(const struct ncclComm *comm, int nnet) {
  if (weft_param_is_set(WEFT_PARAM_NET_GPU_NCHANNELS))
    return (int)weft_param_int(WEFT_PARAM_NET_GPU_NCHANNELS);
  int ch = nnet == 1 ? comm->host_channels : 0;
  return ch > NET_GPU_MIN_CHANNELS ? ch : NET_GPU_MIN_CHANNELS;
}

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include <cuda_runtime_api.h>

#include "device/device.h"
#include "proxy/proxy.h"
#include "transport/net/net_gpu.h"

struct weft_cuda_net {
  int rank, nranks, nchannels;
  size_t slot_bytes;
  unsigned char *net_peer;
  struct weft_proxy_comm *proxy;
};

struct weft_cuda_net_ops {
  struct weft_proxy_comm *proxy;
  int n;
  struct weft_proxy_op ops[];
};

int weft_cuda_net_peers(const struct ncclComm *comm, unsigned char *net_peer) {
  int n = 0;
  const struct weft_peer_info *me = &comm->peers[comm->rank];
  for (int p = 0; p < comm->nranks; p++) {
    net_peer[p] =
        weft_param_int(WEFT_PARAM_NET_GPU) != 0 && comm->peers[p].host_hash != me->host_hash;
    n += net_peer[p];
  }
  return n;
}

/* Hands every FIFO of the net transport's links to the proxy, each with
 * the error word that names its peer, and starts it. */
static ncclResult_t links_publish(struct weft_cuda_net *n, void *links) {
  for (int p = 0; p < n->nranks; p++) {
    if (!n->net_peer[p]) continue;
    for (int ch = 0; ch < n->nchannels; ch++) {
      for (int s = 0; s < 2; s++) {
        uint32_t i = weft_proxy_link_index(n->nchannels, p, ch, s);
        weft_proxy_comm_set_link(n->proxy, i, weft_net_gpu_fifo(links, p, ch, s),
                                 WEFT_DEV_ERROR_WORD(WEFT_DEV_ERR_NET, n->rank, p));
      }
    }
  }
  return weft_proxy_comm_start(n->proxy);
}

ncclResult_t weft_cuda_net_create(struct ncclComm *comm, const unsigned char *net_peer,
                                  const struct weft_dev_conns *conns, void *links, uint64_t *error,
                                  const volatile uint32_t *abort, struct weft_cuda_net **out) {
  ncclResult_t res = ncclSuccess;
  struct weft_cuda_net *n = calloc(1, sizeof(*n));
  if (n == NULL || (n->net_peer = malloc((size_t)comm->nranks)) == NULL) {
    WARN("rank %d: out of memory for the net links", comm->rank);
    weft_cuda_net_destroy(n);
    return ncclSystemError;
  }
  n->rank = comm->rank;
  n->nranks = comm->nranks;
  n->nchannels = conns->nchannels;
  n->slot_bytes = conns->slot_bytes;
  memcpy(n->net_peer, net_peer, (size_t)n->nranks);
  int nlinks = n->nranks * n->nchannels * 2;
  res = weft_proxy_comm_create(comm->cuda_dev, n->rank, nlinks, error, abort, &n->proxy);
  if (res == ncclSuccess) res = links_publish(n, links);
  if (res != ncclSuccess) {
    weft_cuda_net_destroy(n);
    return res;
  }
  *out = n;
  return ncclSuccess;
}

void weft_cuda_net_drain(struct weft_cuda_net *n) {
  if (n != NULL) (void)weft_proxy_comm_drain(n->proxy, (double)weft_param_int(WEFT_PARAM_TIMEOUT));
}

void weft_cuda_net_destroy(struct weft_cuda_net *n) {
  if (n == NULL) return;
  /* The proxy lets go of the FIFOs before the transport closes them. */
  weft_proxy_comm_destroy(n->proxy);
  free(n->net_peer);
  free(n);
}

ncclResult_t weft_cuda_net_plan_ops(struct weft_cuda_net *n, const struct weft_plan *plan, int p2p,
                                    struct weft_cuda_net_ops **out) {
  struct weft_proxy_op *ops = NULL;
  int nops = 0;
  *out = NULL;
  WEFT_CHECK(weft_proxy_ops_count(plan, p2p, n->slot_bytes, n->nranks, n->nchannels, n->net_peer,
                                  &ops, &nops));
  if (nops == 0) return ncclSuccess;
  struct weft_cuda_net_ops *o = malloc(sizeof(*o) + (size_t)nops * sizeof(o->ops[0]));
  if (o == NULL) {
    free(ops);
    WARN("rank %d: out of memory for %d proxy ops", n->rank, nops);
    return ncclSystemError;
  }
  o->proxy = n->proxy;
  o->n = nops;
  memcpy(o->ops, ops, (size_t)nops * sizeof(*ops));
  free(ops);
  *out = o;
  return ncclSuccess;
}

void weft_cuda_net_ops_free(struct weft_cuda_net_ops *ops) {
  free(ops);
}

/* A CUDA host function: runs where the stream reaches it, on every replay
 * of a graph that captured it; makes no CUDA call. */
static void CUDART_CB post_on_stream(void *arg) {
  struct weft_cuda_net_ops *o = arg;
  weft_proxy_post(o->proxy, o->ops, o->n);
}

ncclResult_t weft_cuda_net_post(struct ncclComm *comm, struct weft_cuda_net_ops *ops,
                                void *stream) {
  if (ops == NULL) return ncclSuccess;
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing((cudaStream_t)stream, &st);
  if (err == cudaSuccess && st == cudaStreamCaptureStatusNone) {
    weft_proxy_post(ops->proxy, ops->ops, ops->n);
    return ncclSuccess;
  }
  if (err == cudaSuccess) err = cudaLaunchHostFunc((cudaStream_t)stream, post_on_stream, ops);
  if (err != cudaSuccess) {
    WARN("rank %d: posting the net links' proxy ops on a captured stream: %s", comm->rank,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

#endif
