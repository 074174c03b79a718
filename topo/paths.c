/* Path types and bottleneck bandwidths between GPUs, and from GPUs to NICs,
 * as NCCL defines them: NVLink (direct or through NVSwitches) first, else
 * the PCI tree: PIX under one switch, PXB under nested switches, PHB through
 * the CPU's root complex, SYS across sockets, NET across hosts. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/check.h"
#include "topo/graph.h"

#define WEFT_LOC_BW 5000.0

static const char *const path_names[WEFT_PATH_COUNT] = {"LOC", "NVL", "PIX", "PXB",
                                                        "PHB", "SYS", "NET"};

const char *weft_topo_path_name(enum weft_topo_path path) {
  return (unsigned)path < WEFT_PATH_COUNT ? path_names[path] : "?";
}

ncclResult_t weft_topo_level_parse(const char *var, const char *s, enum weft_topo_path *path_out) {
  /* NCCL's old numbers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and 5 SYS. */
  static const enum weft_topo_path old[] = {WEFT_PATH_LOC, WEFT_PATH_PIX, WEFT_PATH_PXB,
                                            WEFT_PATH_PHB, WEFT_PATH_SYS, WEFT_PATH_SYS};
  /* NCCL's types weft does not tell apart: a level is a bound, so each
   * reads as the largest weft type it admits (weft finds no NVLink through
   * a GPU, no C2C link, no PXN path). */
  static const struct {
    const char *name;
    enum weft_topo_path as;
  } alias[] = {{"NVB", WEFT_PATH_NVL},
               {"C2C", WEFT_PATH_NVL},
               {"PXN", WEFT_PATH_PXB},
               {"P2C", WEFT_PATH_PXB}};
  if (s == NULL) goto bad;
  for (int p = WEFT_PATH_LOC; p <= WEFT_PATH_SYS; p++) {
    if (strcasecmp(s, path_names[p]) == 0) {
      *path_out = (enum weft_topo_path)p;
      return ncclSuccess;
    }
  }
  for (size_t i = 0; i < sizeof(alias) / sizeof(alias[0]); i++) {
    if (strcasecmp(s, alias[i].name) == 0) {
      *path_out = alias[i].as;
      return ncclSuccess;
    }
  }
  if (s[0] >= '0' && s[0] <= '5' && s[1] == '\0') {
    *path_out = old[s[0] - '0'];
    return ncclSuccess;
  }
bad:
  WARN(
      "%s=%s is not a path type: use LOC, NVL, PIX, PXB, PHB, SYS (NCCL's NVB, C2C, PXN, P2C "
      "too) or NCCL's old numbers 0..5",
      var, s ? s : "(null)");
  return ncclInvalidUsage;
}

ncclResult_t weft_topo_path_parse(const char *s, enum weft_topo_path *path_out) {
  return weft_topo_level_parse("NCCL_P2P_LEVEL", s, path_out);
}

/* GB/s of one NVLink, by the GPU generation (NCCL's numbers). */
static double nvlink_bw(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm >= 70) return 20.0;
  return 18.0;
}

/* GB/s between two sockets, by CPU (NCCL's numbers: QPI, UPI on Skylake,
 * Sapphire and Emerald Rapids, AMD xGMI, ARM, POWER). */
static double inter_cpu_bw(const struct weft_topo_node *cpu) {
  if (strcasecmp(cpu->cpu_vendor, "AuthenticAMD") == 0) return 16.0;
  if (strcasecmp(cpu->arch, "arm64") == 0 || strcasecmp(cpu->arch, "aarch64") == 0) return 6.0;
  if (strcasecmp(cpu->arch, "ppc64") == 0) return 32.0;
  if (strcasecmp(cpu->cpu_vendor, "GenuineIntel") == 0) {
    if (cpu->familyid == 6 && cpu->modelid >= 0xcf) return 40.0;
    if (cpu->familyid == 6 && cpu->modelid >= 0x8f) return 22.0;
    if (cpu->familyid == 6 && cpu->modelid >= 0x55) return 10.0;
    return 6.0;
  }
  return 10.0;
}

/* Depth of a node in its tree (bounded, so a broken graph cannot loop). */
static int node_depth(const struct weft_topo *topo, int node) {
  int d = 0;
  while (node >= 0 && topo->nodes[node].parent >= 0 && d <= topo->nnodes) {
    node = topo->nodes[node].parent;
    d++;
  }
  return d;
}

/* Climbs one step from node, folding the step into the path: a PCI switch
 * passed counts, and the link's bandwidth bounds the path. */
static int climb(const struct weft_topo *topo, int node, int *switches,
                 struct weft_topo_path_info *p) {
  const struct weft_topo_node *n = &topo->nodes[node];
  if (n->up_bw > 0 && n->up_bw < p->bw) p->bw = n->up_bw;
  /* One link of unknown speed leaves the bottleneck unknown. */
  if (n->up_bw_assumed) p->bw_unknown = 1;
  int up = n->parent;
  if (up >= 0 && topo->nodes[up].kind == WEFT_TOPO_PCI) (*switches)++;
  return up;
}

/* The path through the PCI trees between nodes a and b. */
static struct weft_topo_path_info pci_path(const struct weft_topo *topo, int a, int b) {
  struct weft_topo_path_info p = {WEFT_PATH_LOC, WEFT_LOC_BW, 0, 0};
  if (a == b) return p;
  int da = node_depth(topo, a), db = node_depth(topo, b), sw = 0;
  while (da > db) a = climb(topo, a, &sw, &p), da--;
  while (db > da) b = climb(topo, b, &sw, &p), db--;
  while (a != b && a >= 0 && b >= 0 && topo->nodes[a].parent >= 0) {
    a = climb(topo, a, &sw, &p);
    b = climb(topo, b, &sw, &p);
  }
  if (a == b && topo->nodes[a].kind == WEFT_TOPO_PCI) {
    /* The common switch was counted from both sides. */
    p.type = sw - 1 <= 1 ? WEFT_PATH_PIX : WEFT_PATH_PXB;
  } else if (a == b && topo->nodes[a].kind == WEFT_TOPO_CPU) {
    p.type = WEFT_PATH_PHB;
  } else if (a == b) {
    p.type = WEFT_PATH_PIX; /* under one non-switch device: a NIC's ports */
  } else {
    /* Different roots: two sockets, or two hosts when their hashes differ. */
    const struct weft_topo_node *ca = &topo->nodes[a], *cb = &topo->nodes[b];
    int cpus = ca->kind == WEFT_TOPO_CPU && cb->kind == WEFT_TOPO_CPU;
    p.type = cpus && ca->host_hash && cb->host_hash && ca->host_hash != cb->host_hash
                 ? WEFT_PATH_NET
                 : WEFT_PATH_SYS;
    double x = cpus ? inter_cpu_bw(ca) : 10.0;
    if (x < p.bw) p.bw = x;
  }
  return p;
}

struct weft_topo_path_info weft_topo_node_path(const struct weft_topo *topo, int a, int b) {
  return pci_path(topo, a, b);
}

/* NVLinks from GPU node g to node to (to == -1: to any NVSwitch). */
static int nvlink_count(const struct weft_topo *topo, int g, int to) {
  int c = 0;
  for (int i = 0; i < topo->nnvlinks; i++) {
    const struct weft_topo_nvlink *l = &topo->nvlinks[i];
    if (l->from != g || l->to < 0) continue;
    if (to >= 0 ? l->to == to : topo->nodes[l->to].kind == WEFT_TOPO_NVS) c += l->count;
  }
  return c;
}

static struct weft_topo_path_info gpu_path(const struct weft_topo *topo, int a, int b) {
  const struct weft_topo_node *na = &topo->nodes[a], *nb = &topo->nodes[b];
  if (a != b) {
    int direct = nvlink_count(topo, a, b), back = nvlink_count(topo, b, a);
    /* A link listed on one side only still joins both GPUs. */
    if (back > direct) direct = back;
    int sa = nvlink_count(topo, a, -1), sb = nvlink_count(topo, b, -1);
    /* NVSwitches of one machine form one fabric: a GPU reaches every other
     * through them at the rate of the fewer links. */
    int viaswitch = sa < sb ? sa : sb;
    int links = direct > viaswitch ? direct : viaswitch;
    if (links > 0) {
      int sm = na->sm < nb->sm ? na->sm : nb->sm;
      struct weft_topo_path_info p = {WEFT_PATH_NVL, links * nvlink_bw(sm), links, 0};
      return p;
    }
  }
  return pci_path(topo, a, b);
}

ncclResult_t weft_topo_compute_paths(struct weft_topo *topo) {
  int ng = topo->ngpus, nn = topo->nnics;
  free(topo->gpu_gpu);
  free(topo->gpu_nic);
  topo->gpu_gpu = calloc((size_t)ng * ng + 1, sizeof(*topo->gpu_gpu));
  topo->gpu_nic = calloc((size_t)ng * nn + 1, sizeof(*topo->gpu_nic));
  if (topo->gpu_gpu == NULL || topo->gpu_nic == NULL) {
    WARN("topology: out of memory for %d x %d paths", ng, ng + nn);
    return ncclSystemError;
  }
  for (int i = 0; i < ng; i++) {
    for (int j = 0; j < ng; j++)
      topo->gpu_gpu[i * ng + j] = gpu_path(topo, topo->gpus[i], topo->gpus[j]);
    for (int k = 0; k < nn; k++)
      topo->gpu_nic[i * nn + k] = pci_path(topo, topo->gpus[i], topo->nics[k]);
  }
  return ncclSuccess;
}

const struct weft_topo_path_info *weft_topo_gpu_path(const struct weft_topo *topo, int gpu_a,
                                                     int gpu_b) {
  if (gpu_a < 0 || gpu_b < 0 || gpu_a >= topo->ngpus || gpu_b >= topo->ngpus) return NULL;
  return &topo->gpu_gpu[gpu_a * topo->ngpus + gpu_b];
}

const struct weft_topo_path_info *weft_topo_nic_path(const struct weft_topo *topo, int gpu,
                                                     int nic) {
  if (gpu < 0 || nic < 0 || gpu >= topo->ngpus || nic >= topo->nnics) return NULL;
  return &topo->gpu_nic[gpu * topo->nnics + nic];
}
