/* The net transport's GPU side: see transport/net/net_gpu.h. */
#include "transport/net/net_gpu.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "base/param.h"
#include "transport/gpu_transport.h"
#include "transport/net/net_gdr.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

struct net_gpu {
  int rank, nranks, nchannels, nslots;
  size_t slot_bytes, fifo_bytes;
  const struct weft_net_ops *net;
  int dev;                     /* the network's device every link uses */
  struct weft_net_fifo *fifos; /* [fifo_index]; used for net peers only */
  unsigned char *net_peer;
  char *mem; /* pinned: every net link's FIFO, one after another */
  /* Per way (0 receive, 1 send): slots in device memory (net_gdr.h), the
   * pinned bytes of one FIFO (all of it, or its counters alone), and the
   * device memory holding every link's slots of that way. */
  int dev_slots[2];
  size_t host_bytes[2];
  char *dmem[2];
};

/* One entry per (peer, channel, way), as the proxy's link table. */
static size_t fifo_index(const struct net_gpu *n, int peer, int channel, int is_send) {
  return ((size_t)peer * (size_t)n->nchannels + (size_t)channel) * 2u + (is_send ? 1u : 0u);
}

struct weft_net_fifo *weft_net_gpu_fifo(void *state, int peer, int channel, int is_send) {
  struct net_gpu *n = state;
  if (n == NULL || !n->net_peer[peer]) return NULL;
  return &n->fifos[fifo_index(n, peer, channel, is_send)];
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Opens both directions of every channel to every net peer; the receive
 * sides' handles go to mine[(p * nchannels + ch) * HANDLE]. */
static ncclResult_t fifos_open(struct net_gpu *n, char *mine) {
  char *mem = n->mem, *dmem[2] = {n->dmem[0], n->dmem[1]};
  for (int p = 0; p < n->nranks; p++) {
    if (!n->net_peer[p]) continue;
    for (int ch = 0; ch < n->nchannels; ch++) {
      for (int s = 0; s < 2; s++) {
        char *handle = mine + ((size_t)p * n->nchannels + ch) * WEFT_NET_HANDLE_BYTES;
        struct weft_net_fifo *f = &n->fifos[fifo_index(n, p, ch, s)];
        WEFT_CHECK(weft_net_fifo_open(n->net, n->dev, s, p, ch, n->nslots, n->slot_bytes, mem,
                                      s ? NULL : handle, f));
        mem += n->host_bytes[s];
        if (!n->dev_slots[s]) continue;
        weft_net_fifo_use_device_slots(f, dmem[s]);
        dmem[s] += (size_t)n->nslots * n->slot_bytes;
      }
    }
  }
  return ncclSuccess;
}

/* Connects every FIFO, sends and accepts in one loop so that no pair of
 * ranks waits on each other; all holds every rank's handles. */
static ncclResult_t fifos_connect(struct net_gpu *n, const char *all, int64_t timeout_s) {
  size_t block = (size_t)n->nranks * n->nchannels * WEFT_NET_HANDLE_BYTES;
  double deadline = now_s() + (double)timeout_s;
  for (;;) {
    int left = 0;
    for (int p = 0; p < n->nranks; p++) {
      if (!n->net_peer[p]) continue;
      for (int ch = 0; ch < n->nchannels; ch++) {
        for (int s = 0; s < 2; s++) {
          struct weft_net_fifo *f = &n->fifos[fifo_index(n, p, ch, s)];
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
           (long long)timeout_s);
      return ncclRemoteError;
    }
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
}

/* The kernels' view of the FIFOs (device addresses of the same pinned
 * memory), one link per channel and way of every net peer; logs each. */
static ncclResult_t fifos_links(struct net_gpu *n, struct weft_dev_link *send,
                                struct weft_dev_link *recv) {
  char *dmem = NULL;
  cudaError_t err = cudaHostGetDevicePointer((void **)&dmem, n->mem, 0);
  if (err != cudaSuccess) {
    WARN("rank %d: the device address of the net links' FIFOs: %s", n->rank,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  for (int p = 0; p < n->nranks; p++) {
    if (!n->net_peer[p]) continue;
    INFO(WEFT_GRAPH, "rank %d -> rank %d: NET/%s/proxy", n->rank, p, n->net->name);
    for (int ch = 0; ch < n->nchannels; ch++) {
      for (int s = 0; s < 2; s++) {
        struct weft_net_fifo *f = &n->fifos[fifo_index(n, p, ch, s)];
#define DEV(ptr) ((void *)(dmem + ((char *)(ptr)-n->mem)))
        /* Device slots are device addresses already. */
        struct weft_dev_link l = {
            .slots = f->slot_type == WEFT_NET_PTR_HOST ? DEV(f->slots) : (void *)f->slots,
            .head = DEV(f->head),
            .tail = DEV(f->tail),
            .ll = NULL,
            .ll128 = NULL,
            .sizes = s ? DEV(f->sizes) : NULL,
            .sys = 1};
#undef DEV
        (s ? send : recv)[(size_t)p * n->nchannels + ch] = l;
        if (s)
          INFO(WEFT_INIT | WEFT_NET, "rank %d -> rank %d channel %d via NET/%s/proxy", n->rank, p,
               ch, n->net->name);
      }
    }
  }
  return ncclSuccess;
}

static void net_gpu_free(void *state, int abort) {
  struct net_gpu *n = state;
  (void)abort; /* the engine drained (or aborted) the proxy before */
  if (n == NULL) return;
  size_t nlinks = (size_t)n->nranks * n->nchannels * 2;
  for (size_t i = 0; n->fifos != NULL && i < nlinks; i++)
    if (n->fifos[i].net != NULL) weft_net_fifo_close(&n->fifos[i]);
  if (n->mem != NULL) cudaFreeHost(n->mem);
  for (int s = 0; s < 2; s++)
    if (n->dmem[s] != NULL) cudaFree(n->dmem[s]);
  free(n->fifos);
  free(n->net_peer);
  free(n);
}

/* The device the links use: the one named like the NIC nearest the GPU
 * (the topology's choice, setup.net_nic; *placed_out 1), else device 0,
 * which the topology cannot place (0). */
static int net_dev_of(const struct weft_net_ops *net, const struct weft_gpu_setup *s,
                      int *placed_out) {
  *placed_out = 0;
  if (s->net_nic == NULL || s->net_nic[0] == '\0') return 0;
  int dev = weft_net_dev_by_name(net, s->net_nic, s->net_nic_port);
  *placed_out = dev >= 0;
  if (dev >= 0)
    INFO(WEFT_INIT | WEFT_NET, "rank %d: net links on NET/%s device %d (%s, the GPU's nearest NIC)",
         s->rank, net->name, dev, s->net_nic);
  else
    INFO(WEFT_INIT | WEFT_NET,
         "rank %d: net links on NET/%s device 0: the GPU's nearest NIC, %s, is not one of its "
         "devices",
         s->rank, net->name, s->net_nic);
  return dev >= 0 ? dev : 0;
}

/* Where each way's slots go (net_gdr.h): the device's memory types and
 * the topology's verdict for it (placed: it is the GPU's nearest NIC),
 * logged per way. */
static ncclResult_t slots_place(struct net_gpu *n, const struct weft_gpu_setup *s, int placed) {
  struct weft_net_props props;
  memset(&props, 0, sizeof(props));
  ncclResult_t res = n->net->get_properties(n->dev, &props);
  if (res != ncclSuccess) {
    WARN("rank %d: the properties of NET/%s device %d: error %d", n->rank, n->net->name, n->dev,
         (int)res);
    return res;
  }
  struct weft_net_gdr_in in = {
      .net = n->net->name,
      .ptr_support = props.ptr_support,
      .topo_gdr = placed ? s->net_nic_gdr : s->net_unplaced_gdr,
      .topo_why = placed ? s->net_nic_gdr_why : s->net_unplaced_gdr_why,
      .gdr_read = (int)weft_param_int(WEFT_PARAM_NET_GDR_READ),
  };
  for (int way = 0; way < 2; way++) {
    char why[256];
    n->dev_slots[way] = weft_net_gdr_device_slots(&in, way, why, sizeof(why));
    n->host_bytes[way] = n->dev_slots[way] ? weft_net_fifo_ctrl_bytes(n->nslots) : n->fifo_bytes;
    INFO(WEFT_INIT | WEFT_NET, "rank %d: net links' %s slots in %s memory: %s", n->rank,
         way ? "send" : "receive", n->dev_slots[way] ? "device" : "host", why);
  }
  return ncclSuccess;
}

/* The device memory of every link's slots of the ways that have them. */
static ncclResult_t slots_alloc_device(struct net_gpu *n, size_t nfifos) {
  for (int way = 0; way < 2; way++) {
    if (!n->dev_slots[way]) continue;
    size_t bytes = nfifos * (size_t)n->nslots * n->slot_bytes;
    cudaError_t err = cudaMalloc((void **)&n->dmem[way], bytes);
    if (err != cudaSuccess) {
      WARN("rank %d: %zu bytes of device memory for the net links' %s slots: %s", n->rank, bytes,
           way ? "send" : "receive", cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

/* The state, the network and the pinned memory for nnet peers. */
static ncclResult_t net_gpu_alloc(const struct weft_gpu_setup *s, const unsigned char *peers,
                                  size_t nnet, struct net_gpu **out) {
  struct net_gpu *n = calloc(1, sizeof(*n));
  if (n != NULL) {
    n->rank = s->rank;
    n->nranks = s->nranks;
    n->nchannels = s->nchannels;
    n->nslots = s->nslots;
    n->slot_bytes = s->slot_bytes;
    n->fifo_bytes = weft_net_fifo_bytes(n->nslots, n->slot_bytes);
    n->fifos = calloc((size_t)n->nranks * n->nchannels * 2, sizeof(*n->fifos));
    n->net_peer = malloc((size_t)n->nranks);
  }
  if (n == NULL || n->fifos == NULL || n->net_peer == NULL) {
    WARN("rank %d: out of memory for the net links", s->rank);
    net_gpu_free(n, 1);
    return ncclSystemError;
  }
  memcpy(n->net_peer, peers, (size_t)n->nranks);
  *out = n;
  ncclResult_t res = weft_net_get(&n->net);
  if (res != ncclSuccess) return res;
  int placed = 0;
  n->dev = net_dev_of(n->net, s, &placed);
  WEFT_CHECK(slots_place(n, s, placed));
  size_t nfifos = nnet * (size_t)n->nchannels; /* per way */
  size_t host = nfifos * (n->host_bytes[0] + n->host_bytes[1]);
  cudaError_t err = cudaHostAlloc((void **)&n->mem, host, cudaHostAllocMapped);
  if (err != cudaSuccess) {
    WARN("rank %d: %zu bytes of pinned host memory for %zu net links: %s", n->rank, host,
         nfifos * 2, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  return slots_alloc_device(n, nfifos);
}

static ncclResult_t net_gpu_connect(const struct weft_gpu_setup *s, const unsigned char *peers,
                                    struct weft_dev_link *send, struct weft_dev_link *recv,
                                    void **state) {
  size_t nnet = 0;
  *state = NULL;
  for (int p = 0; p < s->nranks; p++) nnet += peers[p] != 0;
  /* No net peer on this rank means none on any (ranks on other hosts see
   * each other), so no rank joins the exchange below. */
  if (nnet == 0) return ncclSuccess;
  struct net_gpu *n = NULL;
  ncclResult_t res = net_gpu_alloc(s, peers, nnet, &n);
  if (n == NULL) return res;
  size_t block = (size_t)n->nranks * n->nchannels * WEFT_NET_HANDLE_BYTES;
  char *handles = res == ncclSuccess ? calloc((size_t)n->nranks, block) : NULL;
  if (res == ncclSuccess && handles == NULL) {
    WARN("rank %d: out of memory for the net links", n->rank);
    res = ncclSystemError;
  }
  if (res == ncclSuccess) res = fifos_open(n, handles + (size_t)n->rank * block);
  if (res == ncclSuccess) res = s->allgather(s->allgather_ctx, handles, block);
  if (res == ncclSuccess) res = fifos_connect(n, handles, s->timeout_s);
  free(handles);
  if (res == ncclSuccess) res = fifos_links(n, send, recv);
  if (res != ncclSuccess) {
    net_gpu_free(n, 1);
    return res;
  }
  *state = n;
  return ncclSuccess;
}

#else /* no CUDA in this build */

struct weft_net_fifo *weft_net_gpu_fifo(void *state, int peer, int channel, int is_send) {
  (void)state;
  (void)peer;
  (void)channel;
  (void)is_send;
  return NULL;
}

static ncclResult_t net_gpu_connect(const struct weft_gpu_setup *s, const unsigned char *peers,
                                    struct weft_dev_link *send, struct weft_dev_link *recv,
                                    void **state) {
  int nnet = 0;
  (void)send;
  (void)recv;
  *state = NULL;
  for (int p = 0; p < s->nranks; p++) nnet += peers[p] != 0;
  if (nnet == 0) return ncclSuccess; /* nothing to link, as with CUDA */
  WARN("rank %d: the net transport's GPU side needs CUDA, which is not in this build", s->rank);
  return ncclInvalidUsage;
}

static void net_gpu_free(void *state, int abort) {
  (void)state;
  (void)abort;
}

#endif

const struct weft_gpu_transport_ops weft_net_gpu_ops = {
    .name = "net",
    .connect = net_gpu_connect,
    .free = net_gpu_free,
};
