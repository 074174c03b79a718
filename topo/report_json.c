/* weft-topo --json: GPUs, NICs, CPUs, the path matrices (types and GB/s),
 * the transports and the ring, tree and NIC choices. Names come from
 * untrusted files, so every string is escaped. */
#include <stdlib.h>

#include "topo/graph.h"

static void json_str(FILE *out, const char *s) {
  fputc('"', out);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(out, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7f)
      fprintf(out, "\\u%04x", *p);
    else
      fputc(*p, out);
  }
  fputc('"', out);
}

static int node_numa(const struct weft_topo *t, int node) {
  int cpu = weft_topo_node_cpu(t, node);
  return cpu >= 0 ? t->nodes[cpu].numaid : -1;
}

/* The path to the GPU's NIC and whether GPUDirect RDMA may cross it. */
static void json_gpu_nic(const struct weft_topo *t, int g, int nic, FILE *out) {
  int gdr = 0;
  if (nic < 0) {
    fprintf(out, ", \"nic_path\": null, \"gdr\": false");
    return;
  }
  weft_topo_gpu_nic_gdr(t, g, nic, &gdr);
  fprintf(out, ", \"nic_path\": \"%s\", \"gdr\": %s",
          weft_topo_path_name(weft_topo_nic_path(t, g, nic)->type), gdr ? "true" : "false");
}

static void json_gpus(const struct weft_topo *t, const int *nics, FILE *out) {
  fprintf(out, "  \"gpus\": [");
  for (int g = 0; g < t->ngpus; g++) {
    const struct weft_topo_node *n = &t->nodes[t->gpus[g]];
    char list[256];
    int cpu = weft_topo_node_cpu(t, t->gpus[g]), links = 0;
    for (int i = 0; i < t->nnvlinks; i++)
      links += t->nvlinks[i].from == t->gpus[g] ? t->nvlinks[i].count : 0;
    weft_topo_mask_to_list(cpu >= 0 ? t->nodes[cpu].affinity : "", list, sizeof(list));
    fprintf(out, "%s\n    {\"index\": %d, \"busid\": ", g ? "," : "", g);
    json_str(out, n->busid);
    fprintf(out, ", \"dev\": %d, \"sm\": %d, \"numa\": %d, \"cpu_affinity\": ", n->dev, n->sm,
            node_numa(t, t->gpus[g]));
    json_str(out, list);
    fprintf(out, ", \"nvlinks\": %d, \"nearest_nic\": %d", links, nics[g]);
    json_gpu_nic(t, g, nics[g], out);
    fprintf(out, "}");
  }
  fprintf(out, "\n  ],\n");
}

static void json_nics(const struct weft_topo *t, FILE *out) {
  fprintf(out, "  \"nics\": [");
  for (int k = 0; k < t->nnics; k++) {
    const struct weft_topo_node *n = &t->nodes[t->nics[k]];
    fprintf(out, "%s\n    {\"index\": %d, \"name\": ", k ? "," : "", k);
    json_str(out, n->name);
    fprintf(out, ", \"busid\": ");
    json_str(out, n->parent >= 0 ? t->nodes[n->parent].busid : "");
    fprintf(out, ", \"dev\": %d, \"port\": %d, \"speed_mbps\": ", n->net_dev, n->port);
    /* Unknown is null, never 0: no reader should take it for a dead link. */
    if (n->speed > 0)
      fprintf(out, "%d", n->speed);
    else
      fprintf(out, "null");
    fprintf(out, ", \"numa\": %d}", node_numa(t, t->nics[k]));
  }
  fprintf(out, "\n  ],\n");
}

/* One N x M matrix of path types (bw == 0) or bandwidths (bw == 1). */
static void json_matrix(const struct weft_topo *t, int nic, int bw, FILE *out) {
  int m = nic ? t->nnics : t->ngpus;
  fprintf(out, "[");
  for (int g = 0; g < t->ngpus; g++) {
    fprintf(out, "%s\n      [", g ? "," : "");
    for (int j = 0; j < m; j++) {
      const struct weft_topo_path_info *p =
          nic ? weft_topo_nic_path(t, g, j) : weft_topo_gpu_path(t, g, j);
      if (bw && p->bw_unknown)
        fprintf(out, "%snull", j ? ", " : ""); /* a link on the way has no known speed */
      else if (bw)
        fprintf(out, "%s%.1f", j ? ", " : "", p->bw);
      else
        fprintf(out, "%s\"%s\"", j ? ", " : "", weft_topo_path_name(p->type));
    }
    fprintf(out, "]");
  }
  fprintf(out, "%s]", t->ngpus ? "\n    " : "");
}

static void json_list(const char *key, const int *v, int n, int last, FILE *out) {
  fprintf(out, "  \"%s\": [", key);
  for (int i = 0; i < n; i++) fprintf(out, "%s%d", i ? ", " : "", v[i]);
  fprintf(out, "]%s\n", last ? "" : ",");
}

static void json_transports(const struct weft_topo *t, FILE *out) {
  fprintf(out, "  \"p2p_level\": \"%s\",\n  \"gdr_level\": \"%s\",\n  \"transports\": [",
          weft_topo_path_name(t->policy.p2p_level), weft_topo_path_name(t->policy.gdr_level));
  for (int g = 0; g < t->ngpus; g++) {
    fprintf(out, "%s\n    [", g ? "," : "");
    for (int j = 0; j < t->ngpus; j++) {
      enum weft_topo_transport x = WEFT_TRANSPORT_NET;
      weft_topo_choose_transport(t, g, j, 1, &x);
      fprintf(out, "%s\"%s\"", j ? ", " : "", weft_topo_transport_name(x));
    }
    fprintf(out, "]");
  }
  fprintf(out, "%s],\n", t->ngpus ? "\n  " : "");
}

void weft_topo_print_json(const struct weft_topo *t, FILE *out) {
  int n = t->ngpus;
  int *buf = calloc(4 * (size_t)n + 1, sizeof(int));
  if (buf == NULL) return;
  int *gpus = buf, *ring = buf + n, *tree = buf + 2 * n, *nics = buf + 3 * n;
  for (int i = 0; i < n; i++) gpus[i] = i, nics[i] = -1;
  weft_topo_nearest_nics(t, nics);
  weft_topo_ring_order(t, gpus, n, ring);
  weft_topo_tree_order(t, gpus, n, tree);
  fprintf(out, "{\n  \"source\": ");
  json_str(out, t->origin);
  fprintf(out, ",\n  \"cpus\": [");
  int first = 1;
  for (int i = 0; i < t->nnodes; i++) {
    const struct weft_topo_node *c = &t->nodes[i];
    char list[256];
    if (c->kind != WEFT_TOPO_CPU) continue;
    weft_topo_mask_to_list(c->affinity, list, sizeof(list));
    fprintf(out, "%s\n    {\"numa\": %d, \"cpus\": ", first ? "" : ",", c->numaid);
    json_str(out, list);
    fprintf(out, ", \"arch\": ");
    json_str(out, c->arch);
    fprintf(out, ", \"vendor\": ");
    json_str(out, c->cpu_vendor);
    fprintf(out, "}");
    first = 0;
  }
  fprintf(out, "\n  ],\n");
  json_gpus(t, nics, out);
  json_nics(t, out);
  fprintf(out, "  \"paths\": {\n    \"gpu_gpu\": ");
  json_matrix(t, 0, 0, out);
  fprintf(out, ",\n    \"gpu_nic\": ");
  json_matrix(t, 1, 0, out);
  fprintf(out, ",\n    \"gpu_gpu_bw\": ");
  json_matrix(t, 0, 1, out);
  fprintf(out, ",\n    \"gpu_nic_bw\": ");
  json_matrix(t, 1, 1, out);
  fprintf(out, "\n  },\n");
  json_transports(t, out);
  json_list("ring", ring, n, 0, out);
  json_list("tree", tree, n, 1, out);
  fprintf(out, "}\n");
  free(buf);
}
