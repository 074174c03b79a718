/* What weft-topo prints: the GPU/NIC matrix in nvidia-smi's layout with the
 * decisions below it, the same as JSON, and the graph for Graphviz. */
#include <stdlib.h>
#include <string.h>

#include "topo/graph.h"

void weft_topo_mask_to_list(const char *mask, char *out, size_t len) {
  size_t n = strlen(mask), used = 0;
  int bit = 0, start = -1, any = 0;
  out[0] = '\0';
  if (n == 0 || strspn(mask, "0123456789abcdefABCDEF,") != n) {
    snprintf(out, len, "%s", mask);
    return;
  }
  /* Right to left: the last group holds CPUs 0..31. */
  for (size_t i = n; i-- > 0;) {
    char c = mask[i];
    if (c == ',') {
      bit = (bit + 31) / 32 * 32;
      continue;
    }
    int v = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
    for (int b = 0; b < 4; b++, bit++) {
      int on = (v >> b) & 1;
      if (on && start < 0) start = bit;
      if (!on && start >= 0) {
        used += (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%d", any ? "," : "",
                                 start);
        if (bit - 1 > start)
          used += (size_t)snprintf(out + used, used < len ? len - used : 0, "-%d", bit - 1);
        any = 1;
        start = -1;
      }
    }
  }
  if (start >= 0) {
    used +=
        (size_t)snprintf(out + used, used < len ? len - used : 0, "%s%d", any ? "," : "", start);
    if (bit - 1 > start) snprintf(out + used, used < len ? len - used : 0, "-%d", bit - 1);
  }
  if (out[0] == '\0') snprintf(out, len, "N/A");
}

/* An nvidia-smi cell: X on the diagonal, NV<count> for NVLink. */
static void cell(const struct weft_topo_path_info *p, int self, char *buf, size_t len) {
  if (self)
    snprintf(buf, len, "X");
  else if (p->type == WEFT_PATH_NVL)
    snprintf(buf, len, "NV%d", p->nvlinks);
  else
    snprintf(buf, len, "%s", weft_topo_path_name(p->type));
}

static void cpu_cols(const struct weft_topo *t, int node, FILE *out) {
  int cpu = weft_topo_node_cpu(t, node);
  char list[256];
  weft_topo_mask_to_list(cpu >= 0 ? t->nodes[cpu].affinity : "", list, sizeof(list));
  fprintf(out, "  %-20s %d\n", list, cpu >= 0 ? t->nodes[cpu].numaid : -1);
}

static void print_rows(const struct weft_topo *t, FILE *out) {
  char c[16];
  for (int g = 0; g < t->ngpus; g++) {
    fprintf(out, "GPU%-5d", g);
    for (int j = 0; j < t->ngpus; j++)
      cell(weft_topo_gpu_path(t, g, j), g == j, c, sizeof(c)), fprintf(out, "%-8s", c);
    for (int k = 0; k < t->nnics; k++)
      cell(weft_topo_nic_path(t, g, k), 0, c, sizeof(c)), fprintf(out, "%-8s", c);
    cpu_cols(t, t->gpus[g], out);
  }
  for (int k = 0; k < t->nnics; k++) {
    fprintf(out, "NIC%-5d", k);
    for (int g = 0; g < t->ngpus; g++)
      cell(weft_topo_nic_path(t, g, k), 0, c, sizeof(c)), fprintf(out, "%-8s", c);
    for (int m = 0; m < t->nnics; m++) {
      struct weft_topo_path_info p = weft_topo_node_path(t, t->nics[k], t->nics[m]);
      cell(&p, k == m, c, sizeof(c));
      fprintf(out, "%-8s", c);
    }
    cpu_cols(t, t->nics[k], out);
  }
}

static void print_legend(const struct weft_topo *t, FILE *out) {
  fprintf(out,
          "\nLegend:\n\n"
          "  X    = Self\n"
          "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes "
          "(e.g., QPI/UPI)\n"
          "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
          "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host "
          "Bridge)\n"
          "  PIX  = Connection traversing at most a single PCIe bridge\n"
          "  NV#  = Connection traversing a bonded set of # NVLinks\n");
  if (t->nnics > 0) fprintf(out, "\nNIC Legend:\n\n");
  for (int k = 0; k < t->nnics; k++) {
    const struct weft_topo_node *n = &t->nodes[t->nics[k]];
    fprintf(out, "  NIC%d: %s", k, n->name);
    if (n->port > 0) fprintf(out, " port %d", n->port);
    if (n->speed > 0)
      fprintf(out, " (%d Gb/s)", n->speed / 1000);
    else
      fprintf(out, " (speed unknown)");
    fprintf(out, "\n");
  }
}

static int any_unknown(const struct weft_topo *t) {
  for (int g = 0; g < t->ngpus; g++)
    for (int j = 0; j < t->ngpus; j++)
      if (weft_topo_gpu_path(t, g, j)->bw_unknown) return 1;
  return 0;
}

/* Per GPU: the NIC it uses, the path to it and whether GPUDirect RDMA
 * may cross that path (NCCL_NET_GDR_LEVEL). */
static void print_nics(const struct weft_topo *t, const int *nics, FILE *out) {
  if (t->nnics == 0) {
    fprintf(out, "NIC per GPU: none (the topology has no NIC)\n");
    return;
  }
  fprintf(out, "NIC per GPU (GDR level %s):\n", weft_topo_path_name(t->policy.gdr_level));
  for (int g = 0; g < t->ngpus; g++) {
    const struct weft_topo_node *n = &t->nodes[t->nics[nics[g]]];
    enum weft_topo_path p = weft_topo_nic_path(t, g, nics[g])->type;
    int gdr = 0;
    weft_topo_gpu_nic_gdr(t, g, nics[g], &gdr);
    fprintf(out, "  GPU%d -> NIC%d %s", g, nics[g], n->name);
    if (n->port > 0) fprintf(out, " port %d", n->port);
    fprintf(out, ", %s, %s", weft_topo_path_name(p), gdr ? "GDR" : "no GDR");
    if (!gdr && p > t->policy.gdr_level)
      fprintf(out, " (%s beyond %s)", weft_topo_path_name(p),
              weft_topo_path_name(t->policy.gdr_level));
    else if (!gdr)
      fprintf(out, " (gdr=0 in the topology)");
    fprintf(out, "\n");
  }
}

/* Rings, trees, NICs, transports and bandwidths: what weft decides. */
static void print_decisions(const struct weft_topo *t, FILE *out) {
  int n = t->ngpus;
  int *buf = calloc(4 * (size_t)n + 1, sizeof(int));
  if (buf == NULL || n == 0) {
    free(buf);
    return;
  }
  int *gpus = buf, *ring = buf + n, *tree = buf + 2 * n, *nics = buf + 3 * n;
  for (int i = 0; i < n; i++) gpus[i] = i;
  if (weft_topo_ring_order(t, gpus, n, ring) == ncclSuccess) {
    fprintf(out, "\nRing:        ");
    for (int i = 0; i < n; i++) fprintf(out, "%d -> ", ring[i]);
    fprintf(out, "%d\n", ring[0]);
  }
  if (weft_topo_tree_order(t, gpus, n, tree) == ncclSuccess) {
    fprintf(out, "Tree chain:  ");
    for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? " -> " : "", tree[i]);
    fprintf(out, " (root first)\n");
  }
  if (weft_topo_nearest_nics(t, nics) == ncclSuccess) print_nics(t, nics, out);
  fprintf(out, "\nTransport (same host, P2P level %s%s%s), bottleneck GB/s:\n      ",
          weft_topo_path_name(t->policy.p2p_level), t->policy.p2p_disable ? ", P2P disabled" : "",
          t->policy.shm_disable ? ", SHM disabled" : "");
  for (int j = 0; j < n; j++) fprintf(out, "  GPU%-8d", j);
  for (int g = 0; g < n; g++) {
    fprintf(out, "\nGPU%-3d", g);
    for (int j = 0; j < n; j++) {
      enum weft_topo_transport x = WEFT_TRANSPORT_NET;
      const struct weft_topo_path_info *p = weft_topo_gpu_path(t, g, j);
      weft_topo_choose_transport(t, g, j, 1, &x);
      if (p->bw_unknown)
        fprintf(out, "  %s %7s", weft_topo_transport_name(x), "unknown");
      else
        fprintf(out, "  %s %7.1f", weft_topo_transport_name(x), p->bw);
    }
  }
  fprintf(out, "\n");
  if (any_unknown(t))
    fprintf(out,
            "(unknown: a PCIe link or NIC on the way reported no speed; weft assumes NCCL's "
            "default, 24 GB/s, for its choices)\n");
  free(buf);
}

void weft_topo_print_matrix(const struct weft_topo *t, FILE *out) {
  fprintf(out, "Topology: %s\n", t->origin);
  if (t->ngpus == 0)
    fprintf(out, "No GPU found%s; CPUs and NICs follow.\n",
            t->sources & WEFT_TOPO_SRC_CUDA ? "" : " (no CUDA device visible)");
  for (int i = 0; i < t->nnodes; i++) {
    const struct weft_topo_node *n = &t->nodes[i];
    char list[256];
    if (n->kind != WEFT_TOPO_CPU) continue;
    weft_topo_mask_to_list(n->affinity, list, sizeof(list));
    fprintf(out, "CPU NUMA %d: %s %s, CPUs %s\n", n->numaid, n->arch[0] ? n->arch : "?",
            n->cpu_vendor[0] ? n->cpu_vendor : "?", list);
  }
  fprintf(out, "\n        ");
  for (int g = 0; g < t->ngpus; g++) fprintf(out, "GPU%-5d", g);
  for (int k = 0; k < t->nnics; k++) fprintf(out, "NIC%-5d", k);
  fprintf(out, "  %-20s %s\n", "CPU Affinity", "NUMA Affinity");
  print_rows(t, out);
  print_legend(t, out);
  print_decisions(t, out);
}
