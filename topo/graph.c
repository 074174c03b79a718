/* The topology graph itself: nodes, NVLinks, bus ids, link bandwidths, and
 * the GPU/NIC lists in the order users number them. */
#include "topo/graph.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"

ncclResult_t weft_topo_alloc(struct weft_topo **topo_out) {
  struct weft_topo *t = calloc(1, sizeof(*t));
  if (t == NULL) {
    WARN("topology: out of memory");
    return ncclSystemError;
  }
  t->policy.p2p_level = WEFT_PATH_PXB;
  t->policy.gdr_level = WEFT_PATH_PXB;
  *topo_out = t;
  return ncclSuccess;
}

void weft_topo_free(struct weft_topo *topo) {
  if (topo == NULL) return;
  free(topo->nodes);
  free(topo->nvlinks);
  free(topo->gpus);
  free(topo->nics);
  free(topo->gpu_gpu);
  free(topo->gpu_nic);
  free(topo->peer_access);
  free(topo);
}

ncclResult_t weft_topo_add_node(struct weft_topo *topo, enum weft_topo_kind kind, int parent,
                                int *node_out) {
  if (topo->nnodes >= WEFT_TOPO_MAX_NODES) {
    WARN("topology: more than %d nodes; refusing to grow further", WEFT_TOPO_MAX_NODES);
    return ncclInvalidUsage;
  }
  if (topo->nnodes == topo->cap_nodes) {
    int cap = topo->cap_nodes ? 2 * topo->cap_nodes : 64;
    void *p = realloc(topo->nodes, (size_t)cap * sizeof(*topo->nodes));
    if (p == NULL) {
      WARN("topology: out of memory for %d nodes", cap);
      return ncclSystemError;
    }
    topo->nodes = p;
    topo->cap_nodes = cap;
  }
  struct weft_topo_node *n = &topo->nodes[topo->nnodes];
  memset(n, 0, sizeof(*n));
  n->kind = kind;
  n->parent = parent;
  n->numaid = n->dev = n->sm = n->rank = n->gdr = -1;
  n->net_dev = n->port = n->maxconn = -1;
  *node_out = topo->nnodes++;
  return ncclSuccess;
}

ncclResult_t weft_topo_add_nvlink(struct weft_topo *topo, int from, const char *target,
                                  uint32_t tclass, int count) {
  if (topo->nnvlinks >= WEFT_TOPO_MAX_NVLINKS) {
    WARN("topology: more than %d NVLink entries", WEFT_TOPO_MAX_NVLINKS);
    return ncclInvalidUsage;
  }
  if (topo->nnvlinks == topo->cap_nvlinks) {
    int cap = topo->cap_nvlinks ? 2 * topo->cap_nvlinks : 32;
    void *p = realloc(topo->nvlinks, (size_t)cap * sizeof(*topo->nvlinks));
    if (p == NULL) {
      WARN("topology: out of memory for %d NVLinks", cap);
      return ncclSystemError;
    }
    topo->nvlinks = p;
    topo->cap_nvlinks = cap;
  }
  struct weft_topo_nvlink *l = &topo->nvlinks[topo->nnvlinks++];
  memset(l, 0, sizeof(*l));
  l->from = from;
  l->to = -1;
  snprintf(l->target, sizeof(l->target), "%s", target);
  l->tclass = tclass;
  l->count = count;
  return ncclSuccess;
}

int weft_topo_busid_normalize(const char *in, char out[WEFT_TOPO_BUSID_LEN]) {
  unsigned long dom, bus, dev, fn;
  char tail;
  if (in == NULL) return -1;
  while (isspace((unsigned char)*in)) in++;
  /* NVML writes 8 domain digits, sysfs and NCCL 4; both name one device. */
  if (sscanf(in, "%lx:%lx:%lx.%lx%c", &dom, &bus, &dev, &fn, &tail) != 4) return -1;
  if (dom > 0xffffffffUL || bus > 0xff || dev > 0x1f || fn > 0x7) return -1;
  snprintf(out, WEFT_TOPO_BUSID_LEN, "%04lx:%02lx:%02lx.%lx", dom, bus, dev, fn);
  return 0;
}

int weft_topo_find_busid(const struct weft_topo *topo, const char *busid) {
  for (int i = 0; i < topo->nnodes; i++)
    if (topo->nodes[i].kind != WEFT_TOPO_NIC && strcmp(topo->nodes[i].busid, busid) == 0)
      return i;
  return -1;
}

int weft_topo_gpu_by_busid(const struct weft_topo *topo, const char *busid) {
  char norm[WEFT_TOPO_BUSID_LEN];
  if (weft_topo_busid_normalize(busid, norm) != 0) return -1;
  for (int g = 0; g < topo->ngpus; g++)
    if (strcmp(topo->nodes[topo->gpus[g]].busid, norm) == 0) return g;
  return -1;
}

int weft_topo_node_cpu(const struct weft_topo *topo, int node) {
  /* Bounded walk: a cycle in a broken graph must not hang us. */
  for (int hops = 0; node >= 0 && hops <= topo->nnodes; hops++) {
    if (topo->nodes[node].kind == WEFT_TOPO_CPU) return node;
    node = topo->nodes[node].parent;
  }
  return -1;
}

/* NCCL's table: 100 Mb/s per lane for each generation's transfer rate;
 * 0 when link_speed names none. */
static int pci_rate(const char *link_speed) {
  static const struct {
    const char *prefix;
    int rate;
  } gens[] = {{"2.5 GT/s", 15}, {"5 GT/s", 30},   {"5.0 GT/s", 30},   {"8 GT/s", 60},
              {"8.0 GT/s", 60}, {"16 GT/s", 120}, {"16.0 GT/s", 120}, {"32 GT/s", 240},
              {"32.0 GT/s", 240}, {"64 GT/s", 480}, {"64.0 GT/s", 480}};
  int rate = 0;
  for (size_t i = 0; link_speed && i < sizeof(gens) / sizeof(gens[0]); i++)
    if (strncmp(link_speed, gens[i].prefix, strlen(gens[i].prefix)) == 0) rate = gens[i].rate;
  return rate;
}

double weft_topo_pci_bw(const char *link_speed, int link_width) {
  /* bandwidth = width * rate / 80 GB/s. Unknown speed: Gen4, NCCL's
   * default; virtual machines often report width 0, and a missing value is
   * not a slow link: x16. */
  int rate = pci_rate(link_speed);
  if (rate == 0) rate = 120;
  if (link_width <= 0) link_width = 16;
  return link_width * rate / 80.0;
}

int weft_topo_pci_bw_known(const char *link_speed, int link_width) {
  return pci_rate(link_speed) > 0 && link_width > 0;
}

/* Sort key: the device number when known (CUDA's, or the net's), then the
 * order the nodes were found in. */
static int node_order_key(const struct weft_topo_node *n) {
  int dev = n->kind == WEFT_TOPO_GPU ? n->dev : n->net_dev;
  return dev >= 0 ? dev : 1 << 20;
}

static ncclResult_t collect_kind(struct weft_topo *topo, enum weft_topo_kind kind,
                                 int **list_out, int *n_out) {
  int n = 0;
  for (int i = 0; i < topo->nnodes; i++) n += topo->nodes[i].kind == kind;
  int *list = calloc(n ? (size_t)n : 1, sizeof(int));
  if (list == NULL) {
    WARN("topology: out of memory");
    return ncclSystemError;
  }
  n = 0;
  for (int i = 0; i < topo->nnodes; i++) {
    if (topo->nodes[i].kind != kind) continue;
    /* Insertion sort: stable, and lists are short. */
    int key = node_order_key(&topo->nodes[i]), j = n++;
    while (j > 0 && node_order_key(&topo->nodes[list[j - 1]]) > key) {
      list[j] = list[j - 1];
      j--;
    }
    list[j] = i;
  }
  free(*list_out);
  *list_out = list;
  *n_out = n;
  return ncclSuccess;
}

/* An NVLink's far end: a GPU of this graph, or an NVSwitch (made on first
 * sight; NVSwitches appear in NCCL's XML only as targets). */
static ncclResult_t resolve_nvlinks(struct weft_topo *topo) {
  for (int i = 0; i < topo->nnvlinks; i++) {
    struct weft_topo_nvlink *l = &topo->nvlinks[i];
    int to = weft_topo_find_busid(topo, l->target);
    if (to >= 0 && topo->nodes[to].kind != WEFT_TOPO_GPU && topo->nodes[to].kind != WEFT_TOPO_NVS)
      to = -1;
    if (to < 0 && (l->tclass >> 8) == 0x0680) {
      WEFT_CHECK(weft_topo_add_node(topo, WEFT_TOPO_NVS, -1, &to));
      struct weft_topo_node *nvs = &topo->nodes[to];
      snprintf(nvs->busid, sizeof(nvs->busid), "%s", l->target);
      nvs->pci_class = l->tclass;
    }
    if (to < 0)
      INFO(WEFT_GRAPH, "topology: NVLink from %s to %s (class 0x%06x) leads to no GPU or "
           "NVSwitch; ignored for paths", topo->nodes[l->from].busid, l->target, l->tclass);
    l->to = to;
  }
  return ncclSuccess;
}

ncclResult_t weft_topo_finalize(struct weft_topo *topo) {
  WEFT_CHECK(resolve_nvlinks(topo));
  for (int i = 0; i < topo->nnodes; i++) {
    struct weft_topo_node *n = &topo->nodes[i];
    if (n->parent < 0 || n->up_bw > 0) continue;
    /* Parents come first, so a NIC without a speed inherits a settled
     * value, and whether it was known. */
    if (n->kind == WEFT_TOPO_NIC && n->speed > 0) {
      n->up_bw = n->speed / 8000.0;
    } else if (n->kind == WEFT_TOPO_NIC) {
      const struct weft_topo_node *up = &topo->nodes[n->parent];
      n->up_bw = up->up_bw > 0 ? up->up_bw : 24.0;
      n->up_bw_assumed = up->up_bw > 0 ? up->up_bw_assumed : 1;
    } else {
      n->up_bw = weft_topo_pci_bw(n->link_speed, n->link_width);
      n->up_bw_assumed = !weft_topo_pci_bw_known(n->link_speed, n->link_width);
    }
  }
  WEFT_CHECK(collect_kind(topo, WEFT_TOPO_GPU, &topo->gpus, &topo->ngpus));
  WEFT_CHECK(collect_kind(topo, WEFT_TOPO_NIC, &topo->nics, &topo->nnics));
  size_t n2 = (size_t)topo->ngpus * (size_t)topo->ngpus;
  free(topo->peer_access);
  topo->peer_access = malloc(n2 ? n2 : 1);
  if (topo->peer_access == NULL) {
    WARN("topology: out of memory");
    return ncclSystemError;
  }
  memset(topo->peer_access, -1, n2);
  return ncclSuccess;
}
