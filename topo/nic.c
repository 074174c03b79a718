/* The NIC each GPU (and each host rank) uses and whether GPUDirect RDMA
 * reaches it: the decisions the networks take from the topology (issue
 * 17). Pure functions of the graph, its paths and its policy. */
#include <stdlib.h>

#include "base/check.h"
#include "topo/graph.h"

/* NCCL's mirrorBits: the low log2(pow2) bits of val, reversed, so GPUs
 * 0, 1, 2, 3 over four NICs take 0, 2, 1, 3 (neighbours apart). */
static int mirror_bits(int val, int pow2) {
  int m = 0;
  for (int b = 1, mb = pow2 >> 1; b < pow2; b <<= 1, mb >>= 1)
    if (val & b) m |= mb;
  return m;
}

/* 1 if path a is nearer than b: type first, then the wider bottleneck
 * (which holds the NIC's own speed: weft_topo_finalize). */
static int nearer(const struct weft_topo_path_info *a, const struct weft_topo_path_info *b) {
  return a->type < b->type || (a->type == b->type && a->bw > b->bw * (1 + 1e-9));
}

/* Whether NIC k may be chosen: where a network numbered its devices
 * (net/ib's ports, an XML's dev attributes), only those, so NIC k is a
 * device the network can open; network interfaces hwloc merely named
 * count only when nothing is numbered. */
static int candidate(const struct weft_topo *topo, int k, int numbered) {
  return !numbered || topo->nodes[topo->nics[k]].net_dev >= 0;
}

ncclResult_t weft_topo_gpu_nic(const struct weft_topo *topo, int gpu, int *nic_out,
                               enum weft_topo_path *path_out) {
  if (gpu < 0 || gpu >= topo->ngpus) {
    WARN("topology: GPU %d is not one of the %d GPUs found; no NIC to choose", gpu, topo->ngpus);
    return ncclInvalidArgument;
  }
  int best = -1, ties = 0, numbered = 0;
  for (int k = 0; k < topo->nnics; k++) numbered |= topo->nodes[topo->nics[k]].net_dev >= 0;
  for (int k = 0; k < topo->nnics; k++) {
    if (!candidate(topo, k, numbered)) continue;
    const struct weft_topo_path_info *p = weft_topo_nic_path(topo, gpu, k);
    if (best < 0 || nearer(p, weft_topo_nic_path(topo, gpu, best))) {
      best = k;
      ties = 1;
    } else if (!nearer(weft_topo_nic_path(topo, gpu, best), p)) {
      ties++;
    }
  }
  if (best < 0) {
    *nic_out = -1;
    if (path_out) *path_out = WEFT_PATH_NET;
    return ncclSuccess;
  }
  /* Among equally near NICs, NCCL (ncclTopoGetLocalNet, channel 0) takes
   * the one at the GPU's device number, bits mirrored when their count is
   * a power of two, so GPUs sharing a switch spread over its NICs. */
  int dev = topo->nodes[topo->gpus[gpu]].dev;
  if (dev < 0) dev = gpu;
  if ((ties & (ties - 1)) == 0) dev = mirror_bits(dev, ties);
  int want = dev % ties, pick = best;
  const struct weft_topo_path_info *b = weft_topo_nic_path(topo, gpu, best);
  for (int k = best, seen = 0; k < topo->nnics; k++) {
    const struct weft_topo_path_info *p = weft_topo_nic_path(topo, gpu, k);
    if (!candidate(topo, k, numbered) || nearer(b, p)) continue;
    if (seen++ == want) {
      pick = k;
      break;
    }
  }
  *nic_out = pick;
  if (path_out) *path_out = weft_topo_nic_path(topo, gpu, pick)->type;
  return ncclSuccess;
}

ncclResult_t weft_topo_nearest_nics(const struct weft_topo *topo, int *nic_out) {
  for (int g = 0; g < topo->ngpus; g++) WEFT_CHECK(weft_topo_gpu_nic(topo, g, &nic_out[g], NULL));
  return ncclSuccess;
}

int weft_topo_gdr_allowed(enum weft_topo_path path, enum weft_topo_path level) {
  /* NET is another host: no NIC of this one reaches that GPU. */
  return path != WEFT_PATH_NET && path <= level;
}

ncclResult_t weft_topo_gpu_nic_gdr(const struct weft_topo *topo, int gpu, int nic,
                                   int *allowed_out) {
  const struct weft_topo_path_info *p = weft_topo_nic_path(topo, gpu, nic);
  if (p == NULL) {
    WARN("topology: GPU %d / NIC %d is not a pair of the %d GPUs and %d NICs found", gpu, nic,
         topo->ngpus, topo->nnics);
    return ncclInvalidArgument;
  }
  /* As NCCL: a GPU or NIC that says it cannot (gdr="0" in the XML) never
   * does; -1 (not said) leaves it to the distance. */
  int off = topo->nodes[topo->gpus[gpu]].gdr == 0 || topo->nodes[topo->nics[nic]].gdr == 0;
  *allowed_out = !off && weft_topo_gdr_allowed(p->type, topo->policy.gdr_level);
  return ncclSuccess;
}

int weft_topo_unplaced_nic_gdr(const struct weft_topo *topo, int gpu) {
  /* NCCL places such a device by the plugin's PCI path; weft assumes the
   * worst path one host has, so only a level the user raised to SYS lets
   * GPUDirect RDMA reach a device whose distance nobody knows. */
  if (gpu >= 0 && gpu < topo->ngpus && topo->nodes[topo->gpus[gpu]].gdr == 0) return 0;
  return weft_topo_gdr_allowed(WEFT_PATH_SYS, topo->policy.gdr_level);
}

/* NIC k's NUMA node id, -1 when it hangs under no CPU. */
static int nic_numa(const struct weft_topo *topo, int k) {
  int cpu = weft_topo_node_cpu(topo, topo->nics[k]);
  return cpu >= 0 ? topo->nodes[cpu].numaid : -1;
}

ncclResult_t weft_topo_cpu_nic(const struct weft_topo *topo, int numaid, int spread, int *nic_out,
                               int *local_out) {
  int numbered = 0, local = 0;
  *nic_out = -1;
  *local_out = 0;
  for (int k = 0; k < topo->nnics; k++) numbered |= topo->nodes[topo->nics[k]].net_dev >= 0;
  for (int k = 0; k < topo->nnics; k++)
    local |= candidate(topo, k, numbered) && numaid >= 0 && nic_numa(topo, k) == numaid;
  /* The fastest NIC of the rank's NUMA node (of any node where it has
   * none), and among equals the spread-th, so host ranks of one node
   * share its NICs out. */
  int best_speed = -1, ties = 0;
  for (int k = 0; k < topo->nnics; k++) {
    if (!candidate(topo, k, numbered) || (local && nic_numa(topo, k) != numaid)) continue;
    int speed = topo->nodes[topo->nics[k]].speed;
    if (speed > best_speed) best_speed = speed, ties = 0;
    if (speed == best_speed) ties++;
  }
  if (ties == 0) return ncclSuccess;
  int want = (spread < 0 ? 0 : spread) % ties;
  for (int k = 0, seen = 0; k < topo->nnics; k++) {
    if (!candidate(topo, k, numbered) || (local && nic_numa(topo, k) != numaid)) continue;
    if (topo->nodes[topo->nics[k]].speed != best_speed || seen++ != want) continue;
    *nic_out = k;
    *local_out = local;
    return ncclSuccess;
  }
  return ncclSuccess;
}
