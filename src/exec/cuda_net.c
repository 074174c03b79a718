/* The CUDA engine's net links: see exec/cuda_net.h. */
#include "exec/cuda_net.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "core/comm.h"
#include "base/param.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include <cuda_runtime_api.h>

#include "core/bootstrap.h"
#include "device/device.h"
#include "proxy/proxy.h"
#include "transport/net/net_fifo.h"

struct weft_cuda_net {
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes, fifo_bytes;
  const struct weft_net_ops *net;
  struct weft_net_fifo *fifos; /* [weft_proxy_link_index]; used for net peers only */
  unsigned char *net_peer;
  char *mem; /* pinned: every net link's FIFO, one after another */
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

int weft_cuda_net_max_channels(void) {
  return (int)weft_param_int(WEFT_PARAM_NET_GPU_NCHANNELS);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Opens both directions of every channel to every net peer; the receive
 * sides' handles go to mine[(p * nchannels + ch) * HANDLE]. */
static ncclResult_t fifos_open(struct weft_cuda_net *n, char *mine) {
  char *mem = n->mem;
  for (int p = 0; p < n->nranks; p++) {
    if (!n->net_peer[p]) continue;
    for (int ch = 0; ch < n->nchannels; ch++) {
      for (int s = 0; s < 2; s++) {
        uint32_t i = weft_proxy_link_index(n->nchannels, p, ch, s);
        char *handle = mine + ((size_t)p * n->nchannels + ch) * WEFT_NET_HANDLE_BYTES;
        WEFT_CHECK(weft_net_fifo_open(n->net, s, p, ch, n->nslots, n->slot_bytes, mem,
                                      s ? NULL : handle, &n->fifos[i]));
        mem += n->fifo_bytes;
      }
    }
  }
  return ncclSuccess;
}

/* Connects every FIFO, sends and accepts in one loop so that no pair of
 * ranks waits on each other; all holds every rank's handles. */
static ncclResult_t fifos_connect(struct weft_cuda_net *n, const char *all) {
  size_t block = (size_t)n->nranks * n->nchannels * WEFT_NET_HANDLE_BYTES;
  double deadline = now_s() + (double)weft_param_int(WEFT_PARAM_TIMEOUT);
  for (;;) {
    int left = 0;
    for (int p = 0; p < n->nranks; p++) {
      if (!n->net_peer[p]) continue;
      for (int ch = 0; ch < n->nchannels; ch++) {
        for (int s = 0; s < 2; s++) {
          struct weft_net_fifo *f = &n->fifos[weft_proxy_link_index(n->nchannels, p, ch, s)];
          if (f->mh != NULL) continue;
          const char *h = all + (size_t)p * block +
                          ((size_t)n->rank * n->nchannels + ch) * WEFT_NET_HANDLE_BYTES;
          int done = 0;
          WEFT_CHECK(weft_net_fifo_connect(f, h, &done));
          left += !done;
        }
      }
    }
    if (left == 0) return ncclSuccess;
    if (now_s() > deadline) {
      WARN("rank %d: %d net links still unconnected after %lld s (WEFT_TIMEOUT)", n->rank, left,
           (long long)weft_param_int(WEFT_PARAM_TIMEOUT));
      return ncclRemoteError;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* Points the kernels' tables at the FIFOs (device addresses of the same
 * pinned memory), logs each link, and hands the FIFOs to the proxy. */
static ncclResult_t fifos_publish(struct weft_cuda_net *n, const struct weft_dev_conns *conns) {
  char *dmem = NULL;
  cudaError_t err = cudaHostGetDevicePointer((void **)&dmem, n->mem, 0);
  if (err != cudaSuccess) {
    WARN("rank %d: the device address of the net links' FIFOs: %s", n->rank,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  for (int p = 0; p < n->nranks; p++) {
    if (!n->net_peer[p]) continue;
    for (int ch = 0; ch < n->nchannels; ch++) {
      for (int s = 0; s < 2; s++) {
        uint32_t i = weft_proxy_link_index(n->nchannels, p, ch, s);
        struct weft_net_fifo *f = &n->fifos[i];
#define DEV(ptr) ((void *)(dmem + ((char *)(ptr)-n->mem)))
        struct weft_dev_link l = {.slots = DEV(f->slots),
                                  .head = DEV(f->head),
                                  .tail = DEV(f->tail),
                                  .ll = NULL,
                                  .sizes = s ? DEV(f->sizes) : NULL,
                                  .sys = 1};
#undef DEV
        WEFT_CHECK(weft_dev_conns_set_link(conns, p, ch, s, &l));
        weft_proxy_comm_set_link(n->proxy, i, f, WEFT_DEV_ERROR_WORD(WEFT_DEV_ERR_NET, n->rank, p));
        if (s)
          INFO(WEFT_INIT | WEFT_NET, "rank %d -> rank %d channel %d via NET/%s/proxy", n->rank, p,
               ch, n->net->name);
      }
    }
  }
  return weft_proxy_comm_start(n->proxy);
}

ncclResult_t weft_cuda_net_create(struct ncclComm *comm, const unsigned char *net_peer,
                                  const struct weft_dev_conns *conns, uint64_t *error,
                                  const volatile uint32_t *abort, struct weft_cuda_net **out) {
  ncclResult_t res = ncclSuccess;
  struct weft_cuda_net *n = calloc(1, sizeof(*n));
  if (n == NULL) goto oom;
  n->rank = comm->rank;
  n->nranks = comm->nranks;
  n->nchannels = conns->nchannels;
  n->nslots = conns->nslots;
  n->slot_bytes = conns->slot_bytes;
  n->fifo_bytes = weft_net_fifo_bytes(n->nslots, n->slot_bytes);
  size_t nlinks = (size_t)n->nranks * n->nchannels * 2, nnet = 0;
  for (int p = 0; p < n->nranks; p++) nnet += net_peer[p] != 0;
  n->fifos = calloc(nlinks, sizeof(*n->fifos));
  n->net_peer = malloc((size_t)n->nranks);
  size_t block = (size_t)n->nranks * n->nchannels * WEFT_NET_HANDLE_BYTES;
  char *handles = calloc((size_t)n->nranks, block);
  if (n->fifos == NULL || n->net_peer == NULL || handles == NULL) {
    free(handles);
    goto oom;
  }
  memcpy(n->net_peer, net_peer, (size_t)n->nranks);
  res = weft_net_get(&n->net);
  if (res == ncclSuccess) {
    cudaError_t err = cudaHostAlloc((void **)&n->mem, nnet * n->nchannels * 2 * n->fifo_bytes,
                                    cudaHostAllocMapped);
    if (err != cudaSuccess) {
      WARN("rank %d: pinned host memory for %zu net links (%zu bytes each): %s", n->rank,
           nnet * n->nchannels * 2, n->fifo_bytes, cudaGetErrorString(err));
      res = ncclUnhandledCudaError;
    }
  }
  if (res == ncclSuccess)
    res = weft_proxy_comm_create(comm->cuda_dev, n->rank, (int)nlinks, error, abort, &n->proxy);
  if (res == ncclSuccess) res = fifos_open(n, handles + (size_t)n->rank * block);
  if (res == ncclSuccess) res = weft_bootstrap_allgather(comm->bootstrap, handles, block);
  if (res == ncclSuccess) res = fifos_connect(n, handles);
  free(handles);
  if (res == ncclSuccess) res = fifos_publish(n, conns);
  if (res != ncclSuccess) {
    weft_cuda_net_destroy(n);
    return res;
  }
  *out = n;
  return ncclSuccess;
oom:
  WARN("rank %d: out of memory for the net links", comm->rank);
  weft_cuda_net_destroy(n);
  return ncclSystemError;
}

void weft_cuda_net_drain(struct weft_cuda_net *n) {
  if (n != NULL) (void)weft_proxy_comm_drain(n->proxy, (double)weft_param_int(WEFT_PARAM_TIMEOUT));
}

void weft_cuda_net_destroy(struct weft_cuda_net *n) {
  if (n == NULL) return;
  /* The proxy lets go of the FIFOs before they close. */
  weft_proxy_comm_destroy(n->proxy);
  size_t nlinks = (size_t)n->nranks * n->nchannels * 2;
  for (size_t i = 0; n->fifos != NULL && i < nlinks; i++)
    if (n->fifos[i].net != NULL) weft_net_fifo_close(&n->fifos[i]);
  if (n->mem != NULL) cudaFreeHost(n->mem);
  free(n->fifos);
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
