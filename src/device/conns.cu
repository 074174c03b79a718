/* Connections and plans in device memory, host side: a rank's inbox (the
 * FIFOs its peers write into), the link tables its kernels read, and plans
 * copied to the device. */
#include <stdint.h>

#include <stdio.h>
#include <string.h>

#include "device/dev_check.cuh"
#include "device/device.h"

static size_t inbox_ctrl_bytes(const weft_dev_inbox &b) {
  size_t n = (size_t)b.nranks * b.nchannels * WEFT_DEV_CTRL_WORDS + 1; /* + the error word */
  return (n * sizeof(uint64_t) + 255) & ~(size_t)255;
}

/* The LL and LL128 slots (a link's LL slots, then its LL128 slots), right
 * after the counters: zeroed with them at creation. Each protocol's flags
 * live where only it writes: a line of the other's could hold data that
 * reads as this one's flag (an int32 array of the flag's value). */
static size_t inbox_ll_bytes(const weft_dev_inbox &b) {
  return (size_t)b.nranks * b.nchannels * (b.ll128 ? 2 : 1) * b.nslots * b.ll_slot_bytes;
}

extern "C" ncclResult_t weft_dev_pool_no_hidden_waits(int dev) {
  cudaMemPool_t pool;
  int off = 0;
  DEV_CUDA(cudaDeviceGetDefaultMemPool(&pool, dev), "cudaDeviceGetDefaultMemPool");
  DEV_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowInternalDependencies, &off),
           "turning off the pool's cross-stream reuse");
  DEV_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolReuseAllowOpportunistic, &off),
           "turning off the pool's opportunistic reuse");
  return ncclSuccess;
}

extern "C" ncclResult_t weft_dev_inbox_create(int nranks, int nchannels, size_t slot_bytes,
                                              int ll128, struct weft_dev_inbox *out) {
  weft_dev_inbox b = {};
  b.ll128 = ll128 != 0;
  b.nranks = nranks;
  b.nchannels = nchannels;
  b.nslots = WEFT_DEV_NSLOTS;
  b.slot_bytes = slot_bytes ? slot_bytes : WEFT_DEV_SLOT_BYTES;
  b.ll_slot_bytes = WEFT_DEV_LL_SLOT_BYTES;
  if (b.slot_bytes % 16 != 0 || b.slot_bytes < b.ll_slot_bytes / 2) {
    WARN("device engine: Simple slots of %zu bytes: expected a multiple of 16, at least %zu",
         b.slot_bytes, b.ll_slot_bytes / 2);
    return ncclInvalidArgument;
  }
  b.bytes = inbox_ctrl_bytes(b) + inbox_ll_bytes(b) +
            (size_t)nranks * nchannels * b.nslots * b.slot_bytes;
  /* cudaMalloc, not the stream-ordered pool: an IPC handle needs it. */
  cudaError_t e = cudaMalloc(&b.base, b.bytes);
  if (e == cudaSuccess) e = cudaMemset(b.base, 0, inbox_ctrl_bytes(b) + inbox_ll_bytes(b));
  if (e != cudaSuccess) {
    WARN("device engine: an inbox for %d ranks x %d channels (%zu bytes): %s", nranks, nchannels,
         b.bytes, cudaGetErrorString(e));
    if (b.base != NULL) cudaFree(b.base);
    return ncclUnhandledCudaError;
  }
  *out = b;
  return ncclSuccess;
}

extern "C" void weft_dev_inbox_destroy(struct weft_dev_inbox *inbox) {
  if (inbox->base != NULL) cudaFree(inbox->base);
  *inbox = weft_dev_inbox{};
}

extern "C" struct weft_dev_link weft_dev_inbox_link(const struct weft_dev_inbox *layout, void *base,
                                                    int src, int channel) {
  size_t i = (size_t)src * layout->nchannels + channel;
  uint64_t *ctrl = (uint64_t *)base + i * WEFT_DEV_CTRL_WORDS;
  const size_t ll_area = layout->nslots * layout->ll_slot_bytes;
  char *ll = (char *)base + inbox_ctrl_bytes(*layout) + i * (layout->ll128 ? 2 : 1) * ll_area;
  char *slots = (char *)base + inbox_ctrl_bytes(*layout) + inbox_ll_bytes(*layout) +
                i * layout->nslots * layout->slot_bytes;
  return weft_dev_link{slots, ctrl, ctrl + 16, ll, layout->ll128 ? ll + ll_area : NULL, NULL, 0};
}

static uint64_t *inbox_error_word(const weft_dev_inbox &b) {
  return (uint64_t *)b.base + (size_t)b.nranks * b.nchannels * WEFT_DEV_CTRL_WORDS;
}

extern "C" ncclResult_t weft_dev_conns_upload(const struct weft_dev_conns *shape,
                                              const struct weft_dev_link *send,
                                              const struct weft_dev_link *recv,
                                              struct weft_dev_conns *out) {
  weft_dev_conns c = *shape;
  c.send = c.recv = NULL;
  size_t n = (size_t)c.nranks * c.nchannels;
  cudaError_t e = cudaMalloc((void **)&c.send, 2 * n * sizeof(weft_dev_link));
  if (e == cudaSuccess)
    e = cudaMemcpy(c.send, send, n * sizeof(weft_dev_link), cudaMemcpyHostToDevice);
  if (e == cudaSuccess)
    e = cudaMemcpy(c.send + n, recv, n * sizeof(weft_dev_link), cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    WARN("device engine: rank %d: the link tables (%zu links): %s", c.rank, 2 * n,
         cudaGetErrorString(e));
    if (c.send != NULL) cudaFree(c.send);
    return ncclUnhandledCudaError;
  }
  c.recv = c.send + n;
  *out = c;
  return ncclSuccess;
}

extern "C" ncclResult_t weft_dev_conns_build(const struct weft_dev_inbox *mine,
                                             void *const *peer_bases, const unsigned char *cross,
                                             int rank, struct weft_dev_conns *out) {
  weft_dev_conns c = {};
  c.rank = rank;
  c.nranks = mine->nranks;
  c.nchannels = mine->nchannels;
  c.nslots = mine->nslots;
  c.slot_bytes = mine->slot_bytes;
  c.ll_slot_bytes = mine->ll_slot_bytes;
  c.ll128 = mine->ll128;
  c.error = inbox_error_word(*mine);
  size_t n = (size_t)c.nranks * c.nchannels;
  weft_dev_link *tables = new weft_dev_link[2 * n];
  for (int p = 0; p < c.nranks; p++) {
    void *peer = p == rank ? mine->base : peer_bases[p];
    for (int ch = 0; ch < c.nchannels; ch++) {
      weft_dev_link *send = &tables[(size_t)p * c.nchannels + ch], *recv = send + n;
      *send = weft_dev_inbox_link(mine, peer, rank, ch);
      *recv = weft_dev_inbox_link(mine, mine->base, p, ch);
      send->sys = recv->sys = cross != NULL && p != rank && cross[p];
    }
  }
  ncclResult_t res = weft_dev_conns_upload(&c, tables, tables + n, out);
  delete[] tables;
  return res;
}

extern "C" void weft_dev_conns_destroy(struct weft_dev_conns *conns) {
  if (conns->send != NULL) cudaFree(conns->send);
  *conns = weft_dev_conns{};
}

extern "C" ncclResult_t weft_dev_conns_error(const struct weft_dev_conns *conns,
                                             cudaStream_t stream, int *failed_out, int *rank_out) {
  uint64_t v = 0;
  DEV_CUDA(cudaMemcpyAsync(&v, conns->error, sizeof(v), cudaMemcpyDeviceToHost, stream),
           "reading the error word");
  DEV_CUDA(cudaStreamSynchronize(stream), "reading the error word");
  *failed_out = v != 0;
  *rank_out = WEFT_DEV_ERROR_RANK(v); /* the high bits say why (device.h) */
  return ncclSuccess;
}

extern "C" void weft_dev_wait_describe(const struct weft_dev_wait_diag *d, int nslots, char *buf,
                                       size_t len) {
  /* Host-mapped and written by the device: read once, as it stands. */
  weft_dev_wait_diag v;
  memcpy(&v, (const void *)d, sizeof(v));
  const char *proto = weft_proto_name((int)v.proto);
  if (!v.claimed || nslots <= 0)
    snprintf(buf, len, "no wait recorded its state");
  else if (v.dir == WEFT_DEV_WAIT_PEER_READY)
    snprintf(buf, len,
             "a direct collective (call %llu of the communicator, CTA %u) waited for rank %d to "
             "reach it; rank %d had reached call %llu (it did not make the call, or its kernel "
             "cannot start)",
             (unsigned long long)v.pos, v.lane, v.peer, v.peer, (unsigned long long)v.seen);
  else if (v.dir == WEFT_DEV_WAIT_PEER_DONE)
    snprintf(buf, len,
             "a direct collective (call %llu of the communicator, CTA %u) waited for rank %d to "
             "finish its part; rank %d had finished call %llu",
             (unsigned long long)v.pos, v.lane, v.peer, v.peer, (unsigned long long)v.seen);
  else if (v.dir == WEFT_DEV_WAIT_GROUP)
    snprintf(buf, len,
             "CTA %u of a group's fused launch waited for the other CTAs between two "
             "collectives (one of them did not finish its part)",
             v.lane);
  else if (v.dir == WEFT_DEV_WAIT_FREE)
    snprintf(buf, len,
             "a send to rank %d (channel %d, CTA %u, %s) waited for slot position %llu to be "
             "free; rank %d had consumed %llu slots of that link",
             v.peer, v.channel, v.lane, proto, (unsigned long long)v.pos, v.peer,
             (unsigned long long)v.seen);
  else if (v.proto == WEFT_PROTO_LL || v.proto == WEFT_PROTO_LL128)
    snprintf(buf, len,
             "a receive from rank %d (channel %d, CTA %u, %s) waited for slot position %llu: a "
             "line had flag %llu, not %llu",
             v.peer, v.channel, v.lane, proto, (unsigned long long)v.pos, (unsigned long long)v.seen,
             (unsigned long long)(v.pos / (uint64_t)nslots + 1));
  else
    snprintf(buf, len,
             "a receive from rank %d (channel %d, CTA %u, Simple) waited for slot position %llu; "
             "rank %d had filled %llu slots of that link",
             v.peer, v.channel, v.lane, (unsigned long long)v.pos, v.peer,
             (unsigned long long)v.seen);
}

extern "C" ncclResult_t weft_dev_plan_upload(const struct weft_plan *plan, cudaStream_t stream,
                                             struct weft_dev_plan *out) {
  struct weft_dev_plan p = {};
  size_t nsteps = 0, scratch = 0;
  for (int i = 0; i < plan->nlanes; i++) nsteps += plan->lanes[i].nsteps;
  size_t lanes_bytes = ((size_t)plan->nlanes * sizeof(weft_dev_lane) + 255) & ~(size_t)255;
  size_t steps_bytes = (nsteps * sizeof(weft_step) + 255) & ~(size_t)255;
  weft_dev_lane *lanes = new weft_dev_lane[plan->nlanes > 0 ? plan->nlanes : 1];
  size_t first = 0;
  for (int i = 0; i < plan->nlanes; i++) {
    const weft_lane *l = &plan->lanes[i];
    lanes[i] = weft_dev_lane{first, l->nsteps, scratch, l->channel, 0};
    first += l->nsteps;
    scratch += (l->scratch_bytes + 255) & ~(size_t)255;
  }
  size_t total = lanes_bytes + steps_bytes + scratch;
  /* Stream-ordered, so neither this nor the free after the launch waits
   * for kernels that are running (they may be spinning on a peer). */
  cudaError_t e = cudaMallocAsync(&p.mem, total > 0 ? total : 1, stream);
  p.nlanes = plan->nlanes;
  p.nsteps = nsteps;
  p.lanes = (weft_dev_lane *)p.mem;
  p.steps = (weft_step *)((char *)p.mem + lanes_bytes);
  p.scratch = (char *)p.mem + lanes_bytes + steps_bytes;
  /* Pageable sources: cudaMemcpyAsync returns once it has staged them, so
   * the host plan and the lane table may go right after. */
  if (e == cudaSuccess && plan->nlanes > 0)
    e = cudaMemcpyAsync(p.lanes, lanes, plan->nlanes * sizeof(weft_dev_lane),
                        cudaMemcpyHostToDevice, stream);
  first = 0;
  for (int i = 0; e == cudaSuccess && i < plan->nlanes; i++) {
    const weft_lane *l = &plan->lanes[i];
    if (l->nsteps > 0)
      e = cudaMemcpyAsync(p.steps + first, l->steps, l->nsteps * sizeof(weft_step),
                          cudaMemcpyHostToDevice, stream);
    first += l->nsteps;
  }
  delete[] lanes;
  if (e != cudaSuccess) {
    WARN("device engine: copying a plan of %d lanes, %zu steps to the device: %s", plan->nlanes,
         nsteps, cudaGetErrorString(e));
    if (p.mem != NULL) cudaFreeAsync(p.mem, stream);
    return ncclUnhandledCudaError;
  }
  *out = p;
  return ncclSuccess;
}

extern "C" void weft_dev_plan_free(struct weft_dev_plan *plan) {
  cudaFree(plan->mem);
  *plan = weft_dev_plan{};
}

extern "C" void weft_dev_plan_free_async(struct weft_dev_plan *plan, cudaStream_t stream) {
  cudaFreeAsync(plan->mem, stream);
  *plan = weft_dev_plan{};
}
