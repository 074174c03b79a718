/* Decisions taken from the paths: the transport between two ranks' GPUs,
 * and ring and tree orders that keep traffic on the fastest links (the NIC
 * each GPU uses is nic.c's). Pure functions of the graph and its policy. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/param.h"
#include "topo/graph.h"

const char *weft_topo_transport_name(enum weft_topo_transport t) {
  switch (t) {
  case WEFT_TRANSPORT_P2P: return "P2P";
  case WEFT_TRANSPORT_SHM: return "SHM";
  case WEFT_TRANSPORT_NET: return "NET";
  }
  return "?";
}

ncclResult_t weft_topo_policy_from_env(const struct weft_topo *topo,
                                       struct weft_topo_policy *policy_out) {
  struct weft_topo_policy p = {WEFT_PATH_PXB, 0, 0, WEFT_PATH_PXB};
  /* NCCL's default: P2P up to PXB, but through the CPU too on AMD, whose
   * root complexes forward peer traffic at full speed. */
  for (int i = 0; i < topo->nnodes; i++)
    if (topo->nodes[i].kind == WEFT_TOPO_CPU &&
        strcmp(topo->nodes[i].cpu_vendor, "AuthenticAMD") == 0)
      p.p2p_level = WEFT_PATH_SYS;
  const char *level = weft_param_str(WEFT_PARAM_P2P_LEVEL);
  if (level != NULL) WEFT_CHECK(weft_topo_path_parse(level, &p.p2p_level));
  /* NCCL's default GDR level, PXB: a NIC and GPU under PCIe switches
   * exchange peer traffic without the root complex, whose forwarding of
   * it is slow or refused on many CPUs. */
  const char *gdr = weft_param_str(WEFT_PARAM_NET_GDR_LEVEL);
  if (gdr != NULL) WEFT_CHECK(weft_topo_level_parse("NCCL_NET_GDR_LEVEL", gdr, &p.gdr_level));
  p.p2p_disable = weft_param_int(WEFT_PARAM_P2P_DISABLE) != 0;
  p.shm_disable = weft_param_int(WEFT_PARAM_SHM_DISABLE) != 0;
  *policy_out = p;
  return ncclSuccess;
}

ncclResult_t weft_topo_choose_transport(const struct weft_topo *topo, int gpu_a, int gpu_b,
                                        int same_host, enum weft_topo_transport *transport_out) {
  const struct weft_topo_policy *p = &topo->policy;
  enum weft_topo_transport t = p->shm_disable ? WEFT_TRANSPORT_NET : WEFT_TRANSPORT_SHM;
  if (!same_host) {
    *transport_out = WEFT_TRANSPORT_NET;
    return ncclSuccess;
  }
  if (gpu_a >= 0 && gpu_b >= 0) {
    const struct weft_topo_path_info *path = weft_topo_gpu_path(topo, gpu_a, gpu_b);
    if (path == NULL) {
      WARN("topology: GPU %d or %d is not one of the %d GPUs found", gpu_a, gpu_b, topo->ngpus);
      return ncclInvalidArgument;
    }
    /* NCCL_P2P_DISABLE leaves p2p only between ranks of one GPU (LOC). */
    enum weft_topo_path level = p->p2p_disable ? WEFT_PATH_LOC : p->p2p_level;
    int access = gpu_a == gpu_b ? 1 : topo->peer_access[gpu_a * topo->ngpus + gpu_b];
    if (path->type <= level && access != 0) t = WEFT_TRANSPORT_P2P;
  }
  *transport_out = t;
  return ncclSuccess;
}

/* Ring cost: one weight per path type, each 128 times the one before, so
 * one SYS edge outweighs any number of PHB edges in rings up to 127 GPUs. */
static int64_t edge_cost(const struct weft_topo *topo, int a, int b) {
  int64_t w = 1;
  for (int i = 0; i < (int)weft_topo_gpu_path(topo, a, b)->type; i++) w *= 128;
  return w;
}

struct ring_search {
  const struct weft_topo *topo;
  const int *gpus;
  int n;
  int *cur, *best;
  char *used;
  int64_t best_cost;
  double best_bw;
};

/* Depth-first over the orders with gpus[0] first; the first ring found
 * among equals wins, so the identity is kept when nothing beats it. */
static void ring_dfs(struct ring_search *s, int depth, int64_t cost, double bw) {
  if (cost > s->best_cost) return;
  if (depth == s->n) {
    const struct weft_topo_path_info *back = weft_topo_gpu_path(s->topo, s->cur[depth - 1], s->cur[0]);
    cost += edge_cost(s->topo, s->cur[depth - 1], s->cur[0]);
    if (s->n > 1 && back->bw < bw) bw = back->bw;
    if (cost < s->best_cost || (cost == s->best_cost && bw > s->best_bw * (1 + 1e-9))) {
      memcpy(s->best, s->cur, (size_t)s->n * sizeof(int));
      s->best_cost = cost;
      s->best_bw = bw;
    }
    return;
  }
  for (int i = 1; i < s->n; i++) {
    if (s->used[i]) continue;
    int prev = s->cur[depth - 1], next = s->gpus[i];
    const struct weft_topo_path_info *e = weft_topo_gpu_path(s->topo, prev, next);
    s->used[i] = 1;
    s->cur[depth] = next;
    ring_dfs(s, depth + 1, cost + edge_cost(s->topo, prev, next), e->bw < bw ? e->bw : bw);
    s->used[i] = 0;
  }
}

/* Large rings: nearest neighbour, then 2-opt until no reversal helps. */
static void ring_greedy(const struct weft_topo *topo, const int *gpus, int n, int *order,
                        char *used) {
  order[0] = gpus[0];
  used[0] = 1;
  for (int k = 1; k < n; k++) {
    int pick = -1;
    for (int i = 1; i < n; i++)
      if (!used[i] && (pick < 0 || edge_cost(topo, order[k - 1], gpus[i]) <
                                       edge_cost(topo, order[k - 1], gpus[pick])))
        pick = i;
    used[pick] = 1;
    order[k] = gpus[pick];
  }
  for (int improved = 1; improved;) {
    improved = 0;
    for (int i = 1; i < n - 1; i++) {
      for (int j = i + 1; j < n; j++) {
        int a = order[i - 1], b = order[i], c = order[j], d = order[(j + 1) % n];
        if (edge_cost(topo, a, c) + edge_cost(topo, b, d) >=
            edge_cost(topo, a, b) + edge_cost(topo, c, d))
          continue;
        for (int l = i, r = j; l < r; l++, r--) {
          int x = order[l];
          order[l] = order[r];
          order[r] = x;
        }
        improved = 1;
      }
    }
  }
}

static ncclResult_t check_gpus(const struct weft_topo *topo, const int *gpus, int n) {
  for (int i = 0; i < n; i++) {
    if (gpus[i] < 0 || gpus[i] >= topo->ngpus) {
      WARN("topology: ring member %d is GPU %d, but %d GPUs were found", i, gpus[i], topo->ngpus);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

ncclResult_t weft_topo_ring_order(const struct weft_topo *topo, const int *gpus, int n,
                                  int *order_out) {
  if (n <= 0) return ncclSuccess;
  WEFT_CHECK(check_gpus(topo, gpus, n));
  struct ring_search s = {topo, gpus, n, calloc((size_t)n, sizeof(int)), order_out,
                          calloc((size_t)n, 1), INT64_MAX, 0};
  if (s.cur == NULL || s.used == NULL) {
    free(s.cur);
    free(s.used);
    WARN("topology: out of memory ordering a ring of %d GPUs", n);
    return ncclSystemError;
  }
  if (n <= 10) {
    s.cur[0] = gpus[0];
    s.used[0] = 1;
    ring_dfs(&s, 1, 0, 1e30);
  } else {
    ring_greedy(topo, gpus, n, order_out, s.used);
  }
  free(s.cur);
  free(s.used);
  return ncclSuccess;
}

/* 1 if path a is better than path b: type first, then bandwidth. */
static int better(const struct weft_topo_path_info *a, const struct weft_topo_path_info *b) {
  return a->type < b->type || (a->type == b->type && a->bw > b->bw * (1 + 1e-9));
}

ncclResult_t weft_topo_tree_order(const struct weft_topo *topo, const int *gpus, int n,
                                  int *order_out) {
  if (n <= 0) return ncclSuccess;
  int *ring = calloc((size_t)n, sizeof(int));
  if (ring == NULL) {
    WARN("topology: out of memory ordering a tree of %d GPUs", n);
    return ncclSystemError;
  }
  ncclResult_t res = weft_topo_ring_order(topo, gpus, n, ring);
  int root = 0;
  for (int i = 1; res == ncclSuccess && i < n && topo->nnics > 0; i++) {
    const struct weft_topo_path_info *best = NULL, *cand = NULL;
    for (int k = 0; k < topo->nnics; k++) {
      const struct weft_topo_path_info *p = weft_topo_nic_path(topo, ring[root], k);
      const struct weft_topo_path_info *q = weft_topo_nic_path(topo, ring[i], k);
      if (best == NULL || better(p, best)) best = p;
      if (cand == NULL || better(q, cand)) cand = q;
    }
    if (better(cand, best)) root = i;
  }
  for (int i = 0; res == ncclSuccess && i < n; i++) order_out[i] = ring[(root + i) % n];
  free(ring);
  return res;
}
