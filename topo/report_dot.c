/* weft-topo --dot: the graph for Graphviz: the PCI trees as edges labelled
 * with their GB/s, NVLinks in green with their counts. */
#include "topo/graph.h"

/* A label from untrusted text: only characters that are safe in a quoted
 * DOT string pass. */
static void dot_text(FILE *out, const char *s) {
  for (; *s; s++) fputc((*s == '"' || *s == '\\' || (unsigned char)*s < 0x20) ? '_' : *s, out);
}

static void dot_node(const struct weft_topo *t, int i, FILE *out) {
  const struct weft_topo_node *n = &t->nodes[i];
  fprintf(out, "  n%d [", i);
  switch (n->kind) {
    case WEFT_TOPO_CPU:
      fprintf(out, "shape=box, style=filled, fillcolor=lightblue, label=\"CPU NUMA %d\"",
              n->numaid);
      break;
    case WEFT_TOPO_PCI:
      fprintf(out, "shape=diamond, label=\"PCI switch\\n");
      dot_text(out, n->busid);
      fprintf(out, "\"");
      break;
    case WEFT_TOPO_GPU:
      for (int g = 0; g < t->ngpus; g++)
        if (t->gpus[g] == i)
          fprintf(out, "shape=box, style=filled, fillcolor=palegreen, label=\"GPU%d\\n", g);
      dot_text(out, n->busid);
      fprintf(out, "\"");
      break;
    case WEFT_TOPO_NIC:
      fprintf(out, "shape=ellipse, style=filled, fillcolor=gold, label=\"");
      dot_text(out, n->name);
      fprintf(out, "\"");
      break;
    case WEFT_TOPO_NVS:
      fprintf(out, "shape=hexagon, label=\"NVSwitch\\n");
      dot_text(out, n->busid);
      fprintf(out, "\"");
      break;
    case WEFT_TOPO_PCIDEV:
      fprintf(out, "shape=box, label=\"");
      dot_text(out, n->busid);
      fprintf(out, "\"");
      break;
  }
  fprintf(out, "];\n");
}

/* Each GPU to the NIC it uses: dotted, with the path type and whether
 * GPUDirect RDMA may cross it; not a link, so it does not shape the tree. */
static void dot_gpu_nics(const struct weft_topo *t, FILE *out) {
  for (int g = 0; g < t->ngpus; g++) {
    int nic = -1, gdr = 0;
    enum weft_topo_path p;
    if (weft_topo_gpu_nic(t, g, &nic, &p) != ncclSuccess || nic < 0) continue;
    weft_topo_gpu_nic_gdr(t, g, nic, &gdr);
    fprintf(out,
            "  n%d -- n%d [style=dotted, color=blue, constraint=false, label=\"uses: %s, %s\"];\n",
            t->gpus[g], t->nics[nic], weft_topo_path_name(p), gdr ? "GDR" : "no GDR");
  }
}

void weft_topo_print_dot(const struct weft_topo *t, FILE *out) {
  fprintf(out, "graph topology {\n  rankdir=TB;\n");
  for (int i = 0; i < t->nnodes; i++) dot_node(t, i, out);
  for (int i = 0; i < t->nnodes; i++) {
    const struct weft_topo_node *n = &t->nodes[i];
    if (n->parent < 0) continue;
    /* A speed nobody reported is shown as such, with what weft assumes. */
    if (n->up_bw_assumed)
      fprintf(out, "  n%d -- n%d [style=dashed, label=\"speed unknown (%.0f GB/s assumed)\"];\n",
              n->parent, i, n->up_bw);
    else
      fprintf(out, "  n%d -- n%d [label=\"%.0f GB/s\"];\n", n->parent, i, n->up_bw);
  }
  for (int i = 0; i < t->nnvlinks; i++)
    if (t->nvlinks[i].to >= 0)
      fprintf(out, "  n%d -- n%d [color=green, penwidth=2, label=\"NV%d\"];\n", t->nvlinks[i].from,
              t->nvlinks[i].to, t->nvlinks[i].count);
  dot_gpu_nics(t, out);
  fprintf(out, "}\n");
}
