/* The p2p transport: see transport/p2p/p2p.h. */
#include "transport/p2p/p2p.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "transport/gpu_transport.h"
#include "weft_config.h"

/* Simple slots of ranks on different GPUs: a link's 8 slots then hold
 * 4 MiB, NCCL's default buffer per connection. On 2 H200s over NVLink
 * (nccl-tests all_reduce_perf through weft, 16 channels, 4 MiB chunks,
 * 1 GiB, 2026-11-29) busbw was 212 GB/s with 128 KiB slots and 256-259
 * with 512 KiB (docs/PERFORMANCE.md). Ranks that all share one GPU keep
 * the device default (128 KiB): their inboxes add up in that GPU's
 * memory. */
#define CROSS_GPU_SLOT_BYTES (512u << 10)

size_t weft_p2p_slot_bytes(int rank, int nranks, const unsigned char *cross) {
  if (!weft_param_is_set(WEFT_PARAM_BUFFSIZE)) {
    for (int p = 0; p < nranks; p++)
      if (cross[p]) return CROSS_GPU_SLOT_BYTES;
    return WEFT_DEV_SLOT_BYTES;
  }
  int64_t b = weft_param_int(WEFT_PARAM_BUFFSIZE) / WEFT_DEV_NSLOTS;
  b -= b % 16;
  const int64_t lo = WEFT_DEV_LL_SLOT_BYTES / 2;
  if (b < lo) {
    INFO(WEFT_INIT, "rank %d: NCCL_BUFFSIZE=%lld is below %lld bytes a link: using that", rank,
         (long long)weft_param_int(WEFT_PARAM_BUFFSIZE), (long long)lo * WEFT_DEV_NSLOTS);
    b = lo;
  }
  return (size_t)b;
}

#if WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

#define CUDA_GOTO(rank, call, what, label)                                          \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      WARN("rank %d: CUDA engine: %s: %s", (rank), (what), cudaGetErrorString(e_)); \
      res = ncclUnhandledCudaError;                                                 \
      goto label;                                                                   \
    }                                                                               \
  } while (0)

cudaError_t weft_p2p_ipc_export(void *base, cudaIpcMemHandle_t *out) {
  return cudaIpcGetMemHandle(out, base);
}

cudaError_t weft_p2p_ipc_open(cudaIpcMemHandle_t handle, void **out) {
  return cudaIpcOpenMemHandle(out, handle, cudaIpcMemLazyEnablePeerAccess);
}

void weft_p2p_ipc_close(void *mapped) {
  cudaIpcCloseMemHandle(mapped);
}

/* What a rank tells its peers about its inbox. */
struct inbox_card {
  int pid;
  int dev;
  void *base;
  size_t slot_bytes; /* a sender lays out its slots as the receiver's */
  cudaIpcMemHandle_t handle;
};

struct p2p_state {
  int nranks;
  const struct weft_gpu_inbox_fns *fns;
  struct weft_dev_inbox inbox;
  void **peer_bases;     /* nranks: this process's address of each peer's inbox */
  unsigned char *opened; /* nranks: peer_bases[p] is a CUDA IPC mapping */
};

static void p2p_free(void *state, int abort) {
  struct p2p_state *st = state;
  (void)abort; /* the engine waited for (or aborted) the kernels: nothing in flight */
  if (st == NULL) return;
  for (int p = 0; p < st->nranks && st->opened != NULL; p++)
    if (st->opened[p]) cudaIpcCloseMemHandle(st->peer_bases[p]);
  if (st->inbox.base != NULL) st->fns->destroy(&st->inbox);
  free(st->peer_bases);
  free(st->opened);
  free(st);
}

/* Maps the inbox of every peer in peers[] into this process; the cards of
 * all ranks are exchanged (collective) and their slot sizes checked. */
static ncclResult_t map_peers(const struct weft_gpu_setup *s, const unsigned char *peers,
                              struct p2p_state *st) {
  ncclResult_t res = ncclSuccess;
  struct inbox_card *cards = calloc((size_t)s->nranks, sizeof(*cards));
  if (cards == NULL) {
    WARN("rank %d: out of memory exchanging CUDA inboxes", s->rank);
    return ncclSystemError;
  }
  struct inbox_card *me = &cards[s->rank];
  me->pid = (int)getpid();
  me->dev = s->cuda_dev;
  me->base = st->inbox.base;
  me->slot_bytes = st->inbox.slot_bytes;
  CUDA_GOTO(s->rank, cudaIpcGetMemHandle(&me->handle, st->inbox.base), "cudaIpcGetMemHandle", out);
  res = s->allgather(s->allgather_ctx, cards, sizeof(*cards));
  if (res != ncclSuccess) goto out;
  for (int p = 0; p < s->nranks; p++) {
    if (p == s->rank) continue;
    const struct inbox_card *c = &cards[p];
    if (c->slot_bytes != me->slot_bytes) {
      WARN(
          "rank %d: CUDA engine: rank %d has slots of %zu bytes and this rank %zu: every rank "
          "must see the same NCCL_BUFFSIZE",
          s->rank, p, c->slot_bytes, me->slot_bytes);
      res = ncclInvalidUsage;
      goto out;
    }
    if (!peers[p]) continue; /* another transport links it, not its inbox */
    if (c->pid == me->pid) {
      if (c->dev != s->cuda_dev) {
        cudaError_t err = cudaDeviceEnablePeerAccess(c->dev, 0);
        if (err == cudaErrorPeerAccessAlreadyEnabled)
          (void)cudaGetLastError();
        else
          CUDA_GOTO(s->rank, err, "cudaDeviceEnablePeerAccess", out);
      }
      st->peer_bases[p] = c->base;
      INFO(WEFT_GRAPH, "rank %d -> rank %d: p2p/same process (%s)", s->rank, p,
           c->dev != s->cuda_dev ? "peer access" : "same GPU");
      continue;
    }
    CUDA_GOTO(s->rank,
              cudaIpcOpenMemHandle(&st->peer_bases[p], c->handle, cudaIpcMemLazyEnablePeerAccess),
              "cudaIpcOpenMemHandle of a peer's inbox", out);
    st->opened[p] = 1;
    INFO(WEFT_GRAPH, "rank %d -> rank %d: p2p/IPC", s->rank, p);
  }
out:
  free(cards);
  return res;
}

/* Send links into each peer's inbox, receive links from mine; the self
 * link (p == rank) is mine both ways. */
static void fill_links(const struct weft_gpu_setup *s, const unsigned char *peers,
                       const struct p2p_state *st, struct weft_dev_link *send,
                       struct weft_dev_link *recv) {
  const struct weft_dev_inbox *mine = &st->inbox;
  for (int p = 0; p < s->nranks; p++) {
    if (!peers[p]) continue;
    void *peer = p == s->rank ? mine->base : st->peer_bases[p];
    for (int ch = 0; ch < s->nchannels; ch++) {
      size_t i = (size_t)p * s->nchannels + ch;
      send[i] = st->fns->link(mine, peer, s->rank, ch);
      recv[i] = st->fns->link(mine, mine->base, p, ch);
      send[i].sys = recv[i].sys = p != s->rank && s->cross[p];
    }
  }
}

static ncclResult_t p2p_connect(const struct weft_gpu_setup *s, const unsigned char *peers,
                                struct weft_dev_link *send, struct weft_dev_link *recv,
                                void **state) {
  ncclResult_t res = ncclSuccess;
  *state = NULL;
  struct p2p_state *st = calloc(1, sizeof(*st));
  if (st != NULL) {
    st->nranks = s->nranks;
    st->fns = s->inbox;
    st->peer_bases = calloc((size_t)s->nranks, sizeof(*st->peer_bases));
    st->opened = calloc((size_t)s->nranks, 1);
  }
  if (st == NULL || st->peer_bases == NULL || st->opened == NULL) {
    WARN("rank %d: out of memory for the CUDA engine", s->rank);
    p2p_free(st, 1);
    return ncclSystemError;
  }
  /* Every rank makes an inbox of nranks senders, whichever transport links
   * them, so every rank's inbox has the same layout and a card. */
  WEFT_CHECK_GOTO(s->inbox->create(s->nranks, s->nchannels, s->slot_bytes, s->ll128, &st->inbox),
                  res, err);
  WEFT_CHECK_GOTO(map_peers(s, peers, st), res, err);
  fill_links(s, peers, st, send, recv);
  *state = st;
  return ncclSuccess;
err:
  p2p_free(st, 1);
  return res;
}

#else /* no CUDA in this build */

static ncclResult_t p2p_connect(const struct weft_gpu_setup *s, const unsigned char *peers,
                                struct weft_dev_link *send, struct weft_dev_link *recv,
                                void **state) {
  (void)peers;
  (void)send;
  (void)recv;
  *state = NULL;
  WARN("rank %d: the p2p transport's GPU side needs CUDA, which is not in this build", s->rank);
  return ncclInvalidUsage;
}

static void p2p_free(void *state, int abort) {
  (void)state;
  (void)abort;
}

#endif

const struct weft_gpu_transport_ops weft_p2p_gpu_ops = {
    .name = "p2p",
    .connect = p2p_connect,
    .free = p2p_free,
};
