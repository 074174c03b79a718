/* The CUDA engine's plan cache (exec/cuda_plans.h). Past PLAN_CACHE_MAX
 * plans the least recently used one is freed in stream order; plans a CUDA
 * graph recorded stay until the communicator is destroyed. */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include "exec/cuda_plans.h"

#define PLAN_CACHE_MAX 128

ncclResult_t weft_cuda_plans_init(struct ncclComm *comm, struct weft_cuda_plans *c) {
  memset(c, 0, sizeof(*c));
  c->entries = calloc(PLAN_CACHE_MAX, sizeof(*c->entries));
  if (c->entries == NULL) {
    WARN("rank %d: CUDA engine: out of memory for the plan cache", comm->rank);
    return ncclSystemError;
  }
  return ncclSuccess;
}

void weft_cuda_plans_free(struct weft_cuda_plans *c) {
  for (int i = 0; i < c->n; i++) {
    weft_dev_plan_free(&c->entries[i].plan);
    free(c->entries[i].ops);
    weft_cuda_net_ops_free(c->entries[i].net_ops);
  }
  free(c->entries);
  c->entries = NULL;
  c->n = 0;
}

/* The cached entry for key (and, for send/recv, its op list), or NULL. */
static struct weft_cuda_plan *plan_find(struct weft_cuda_plans *c,
                                        const struct weft_cuda_plan_key *key,
                                        const struct weft_p2p *ops) {
  for (int i = 0; i < c->n; i++) {
    struct weft_cuda_plan *p = &c->entries[i];
    if (memcmp(&p->key, key, sizeof(*key)) != 0) continue;
    if (ops == NULL || memcmp(p->ops, ops, key->count * sizeof(*ops)) == 0) return p;
  }
  return NULL;
}

/* Uploads a host plan and keeps it under key (ops: a copy is kept with it),
 * evicting the least recently used plan that no CUDA graph holds when the
 * cache is full. The upload runs on the side stream and is waited for
 * there: outside any graph, so a capturing caller records only launches. */
static ncclResult_t plan_insert(struct ncclComm *comm, struct weft_cuda_plans *c,
                                const struct weft_cuda_plan_key *key, const struct weft_p2p *ops,
                                const struct weft_plan *plan, cudaStream_t stream,
                                struct weft_cuda_plan **out) {
  struct weft_p2p *ops_copy = NULL;
  if (ops != NULL) {
    ops_copy = malloc(key->count > 0 ? key->count * sizeof(*ops) : 1);
    if (ops_copy == NULL) {
      WARN("rank %d: CUDA engine: out of memory caching a plan of %zu sends/receives", comm->rank,
           key->count);
      return ncclSystemError;
    }
    memcpy(ops_copy, ops, key->count * sizeof(*ops));
  }
  /* What a launch of the plan posts to the proxy, kept with it. */
  struct weft_cuda_net_ops *net_ops = NULL;
  if (c->net != NULL) {
    ncclResult_t r = weft_cuda_net_plan_ops(c->net, plan, ops != NULL, &net_ops);
    if (r != ncclSuccess) {
      free(ops_copy);
      return r;
    }
  }
  /* A capturing caller's mode would forbid the upload's synchronization;
   * it happens on the side stream, outside the graph, so relax it. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  struct weft_dev_plan dp;
  ncclResult_t res = weft_dev_plan_upload(plan, c->side, &dp);
  cudaError_t err = res == ncclSuccess ? cudaStreamSynchronize(c->side) : cudaSuccess;
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (res != ncclSuccess || err != cudaSuccess) {
    if (err != cudaSuccess) {
      WARN("rank %d: CUDA engine: uploading a plan: %s", comm->rank, cudaGetErrorString(err));
      weft_dev_plan_free_async(&dp, c->side);
      res = ncclUnhandledCudaError;
    }
    free(ops_copy);
    weft_cuda_net_ops_free(net_ops);
    return res;
  }
  struct weft_cuda_plan *slot = NULL;
  if (c->n < PLAN_CACHE_MAX) {
    slot = &c->entries[c->n++];
  } else {
    for (int i = 0; i < c->n; i++)
      if (!c->entries[i].in_graph && (slot == NULL || c->entries[i].used < slot->used))
        slot = &c->entries[i];
    if (slot == NULL) {
      WARN("rank %d: CUDA engine: %d plans are held by CUDA graphs; no room for another",
           comm->rank, PLAN_CACHE_MAX);
      weft_dev_plan_free_async(&dp, c->side);
      free(ops_copy);
      weft_cuda_net_ops_free(net_ops);
      return ncclInternalError;
    }
    /* After the work already queued on this stream, which may use it. */
    weft_dev_plan_free_async(&slot->plan, stream);
    free(slot->ops);
    weft_cuda_net_ops_free(slot->net_ops); /* posted at launch already: not read again */
  }
  memset(slot, 0, sizeof(*slot));
  slot->key = *key;
  slot->ops = ops_copy;
  slot->plan = dp;
  slot->net_ops = net_ops;
  *out = slot;
  return ncclSuccess;
}

void weft_cuda_plans_use(struct weft_cuda_plans *c, struct weft_cuda_plan *p, int captured) {
  p->used = ++c->launches;
  if (captured) p->in_graph = 1;
}

ncclResult_t weft_cuda_plans_coll(struct ncclComm *comm, struct weft_cuda_plans *c,
                                  const struct weft_cuda_plan_key *key,
                                  const struct weft_sched_args *args, cudaStream_t s,
                                  struct weft_cuda_plan **out) {
  struct weft_cuda_plan *hit = plan_find(c, key, NULL);
  if (hit != NULL) {
    *out = hit;
    return ncclSuccess;
  }
  struct weft_plan plan;
  if (key->algo == WEFT_ALGO_DIRECT)
    WEFT_CHECK(weft_direct_plan(comm->rank, comm->nranks, args->count * args->elem_size, &plan));
  else if (key->algo == WEFT_ALGO_TREE)
    WEFT_CHECK(weft_tree_plan(args, &plan));
  else
    WEFT_CHECK(weft_ring_plan(args, &plan));
  ncclResult_t res = plan_insert(comm, c, key, NULL, &plan, s, out);
  weft_plan_free(&plan);
  return res;
}

/* FNV-1a over the op list: the cache compares whole lists only on a match. */
static uint64_t ops_hash(const struct weft_p2p *ops, int nops) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char *b = (const unsigned char *)ops;
  for (size_t i = 0; i < (size_t)nops * sizeof(*ops); i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

ncclResult_t weft_cuda_plans_p2p(struct ncclComm *comm, struct weft_cuda_plans *c,
                                 const struct weft_p2p *ops, int nops, int parts, cudaStream_t s,
                                 struct weft_cuda_plan **out) {
  struct weft_cuda_plan_key key;
  memset(&key, 0, sizeof(key));
  key.func = WEFT_FUNC_SEND;
  key.count = (size_t)nops;
  key.ops_hash = ops_hash(ops, nops);
  struct weft_cuda_plan *hit = plan_find(c, &key, ops);
  if (hit != NULL) {
    *out = hit;
    return ncclSuccess;
  }
  struct weft_plan plan;
  WEFT_CHECK(weft_p2p_plan_parts(comm->rank, ops, nops, parts, &plan));
  ncclResult_t res = plan_insert(comm, c, &key, ops, &plan, s, out);
  weft_plan_free(&plan);
  return res;
}

#endif
