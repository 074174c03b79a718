/* Proxy ops from a plan (proxy.h): how many slots each net link of a
 * launch carries, counted as the kernels cut messages (src/device/
 * prims.cuh exec_send/exec_recv, p2p_exec.cu p2p_send/p2p_recv). */
#include <stdlib.h>

#include "base/debug.h"
#include "proxy/proxy.h"

/* The send/recv kernel's header ahead of each message (p2p_exec.cu). */
#define P2P_HDR_BYTES 16

static uint64_t slots_of(size_t bytes, size_t slot_bytes, int p2p) {
  if (p2p) bytes += P2P_HDR_BYTES;
  return (bytes + slot_bytes - 1) / slot_bytes;
}

ncclResult_t weft_proxy_ops_count(const struct weft_plan *plan, int p2p, size_t slot_bytes,
                                  int nranks, int nchannels, const unsigned char *net_peer,
                                  struct weft_proxy_op **ops_out, int *n_out) {
  size_t nlinks = (size_t)nranks * (size_t)nchannels * 2;
  *ops_out = NULL;
  *n_out = 0;
  uint64_t *count = calloc(nlinks, sizeof(*count));
  if (count == NULL) {
    WARN("out of memory counting the proxy ops of a plan (%zu links)", nlinks);
    return ncclSystemError;
  }
  for (int i = 0; i < plan->nlanes; i++) {
    const struct weft_lane *l = &plan->lanes[i];
    for (size_t k = 0; k < l->nsteps; k++) {
      const struct weft_step *s = &l->steps[k];
      if ((s->flags & WEFT_STEP_SEND) && net_peer[s->send_peer])
        count[weft_proxy_link_index(nchannels, s->send_peer, l->channel, 1)] +=
            slots_of(s->send_bytes, slot_bytes, p2p);
      if ((s->flags & WEFT_STEP_RECV) && net_peer[s->recv_peer])
        count[weft_proxy_link_index(nchannels, s->recv_peer, l->channel, 0)] +=
            slots_of(s->recv_bytes, slot_bytes, p2p);
    }
  }
  int n = 0;
  for (size_t i = 0; i < nlinks; i++) n += count[i] > 0;
  struct weft_proxy_op *ops = n > 0 ? malloc((size_t)n * sizeof(*ops)) : NULL;
  if (n > 0 && ops == NULL) {
    free(count);
    WARN("out of memory for %d proxy ops", n);
    return ncclSystemError;
  }
  n = 0;
  for (size_t i = 0; i < nlinks; i++) {
    if (count[i] == 0) continue;
    if (count[i] > UINT32_MAX) {
      WARN("a plan moves %llu slots on one net link: more than one launch can carry",
           (unsigned long long)count[i]);
      free(count);
      free(ops);
      return ncclInvalidArgument;
    }
    ops[n++] = (struct weft_proxy_op){(uint32_t)i, (uint32_t)count[i]};
  }
  free(count);
  *ops_out = ops;
  *n_out = n;
  return ncclSuccess;
}
