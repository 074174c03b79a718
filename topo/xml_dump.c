/* NCCL_TOPO_DUMP_FILE: writes the graph in NCCL's XML schema, so a file
 * dumped here loads in NCCL_TOPO_FILE (weft's or NCCL's). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "base/check.h"
#include "topo/graph.h"

#ifndef WEFT_HAVE_LIBXML
#define WEFT_HAVE_LIBXML 0
#endif

#if WEFT_HAVE_LIBXML
#include <libxml/tree.h>

static void set(xmlNode *x, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set(xmlNode *x, const char *name, const char *fmt, ...) {
  char buf[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  xmlNewProp(x, (const xmlChar *)name, (const xmlChar *)buf);
}

static void set_int(xmlNode *x, const char *name, int v) {
  if (v >= 0) set(x, name, "%d", v);
}

static void dump_net(xmlNode *nic, const struct weft_topo_node *n) {
  xmlNode *x = xmlNewChild(nic, NULL, (const xmlChar *)"net", NULL);
  set(x, "name", "%s", n->name);
  set_int(x, "dev", n->net_dev);
  if (n->speed > 0) set(x, "speed", "%d", n->speed);
  set_int(x, "port", n->port);
  set(x, "latency", "%f", n->latency);
  if (n->guid) set(x, "guid", "0x%" PRIx64, n->guid);
  set_int(x, "maxconn", n->maxconn);
  set_int(x, "gdr", n->gdr);
}

static void dump_gpu(xmlNode *pci, const struct weft_topo *t, int node) {
  const struct weft_topo_node *n = &t->nodes[node];
  xmlNode *x = xmlNewChild(pci, NULL, (const xmlChar *)"gpu", NULL);
  set_int(x, "dev", n->dev);
  set_int(x, "sm", n->sm);
  set_int(x, "rank", n->rank);
  set_int(x, "gdr", n->gdr);
  for (int i = 0; i < t->nnvlinks; i++) {
    const struct weft_topo_nvlink *l = &t->nvlinks[i];
    if (l->from != node) continue;
    xmlNode *v = xmlNewChild(x, NULL, (const xmlChar *)"nvlink", NULL);
    set(v, "target", "%s", l->target);
    set(v, "count", "%d", l->count);
    set(v, "tclass", "0x%06x", l->tclass);
  }
}

static void dump_pci_attrs(xmlNode *x, const struct weft_topo_node *n) {
  set(x, "busid", "%s", n->busid);
  set(x, "class", "0x%06x", n->pci_class);
  set(x, "vendor", "0x%04x", n->vendor);
  set(x, "device", "0x%04x", n->device);
  set(x, "subsystem_vendor", "0x%04x", n->subsys_vendor);
  set(x, "subsystem_device", "0x%04x", n->subsys_device);
  if (n->link_speed[0]) set(x, "link_speed", "%s", n->link_speed);
  set(x, "link_width", "%d", n->link_width);
}

/* The children of node, in the order they were found. NICs under one PCI
 * function share one <nic>. */
static void dump_children(xmlNode *parent, const struct weft_topo *t, int node, int depth) {
  xmlNode *nic = NULL;
  for (int i = 0; i < t->nnodes && depth < 64; i++) {
    const struct weft_topo_node *n = &t->nodes[i];
    if (n->parent != node) continue;
    if (n->kind == WEFT_TOPO_NIC) {
      if (nic == NULL) nic = xmlNewChild(parent, NULL, (const xmlChar *)"nic", NULL);
      dump_net(nic, n);
      continue;
    }
    xmlNode *x = xmlNewChild(parent, NULL, (const xmlChar *)"pci", NULL);
    dump_pci_attrs(x, n);
    if (n->kind == WEFT_TOPO_GPU) dump_gpu(x, t, i);
    dump_children(x, t, i, depth + 1);
  }
}

static void dump_cpu(xmlNode *sys, const struct weft_topo *t, int node) {
  const struct weft_topo_node *n = &t->nodes[node];
  xmlNode *x = xmlNewChild(sys, NULL, (const xmlChar *)"cpu", NULL);
  if (n->host_hash) set(x, "host_hash", "0x%" PRIx64, n->host_hash);
  set_int(x, "numaid", n->numaid);
  if (n->affinity[0]) set(x, "affinity", "%s", n->affinity);
  if (n->arch[0]) set(x, "arch", "%s", n->arch);
  if (n->cpu_vendor[0]) set(x, "vendor", "%s", n->cpu_vendor);
  if (n->familyid) set(x, "familyid", "%d", n->familyid);
  if (n->modelid) set(x, "modelid", "%d", n->modelid);
  dump_children(x, t, node, 1);
}

ncclResult_t weft_topo_dump_xml(const struct weft_topo *topo, const char *path) {
  xmlDoc *doc = xmlNewDoc((const xmlChar *)"1.0");
  xmlNode *sys = doc ? xmlNewNode(NULL, (const xmlChar *)"system") : NULL;
  if (sys == NULL) {
    WARN("NCCL_TOPO_DUMP_FILE %s: libxml2 could not make a document", path);
    xmlFreeDoc(doc);
    return ncclSystemError;
  }
  xmlDocSetRootElement(doc, sys);
  set(sys, "version", "1");
  for (int i = 0; i < topo->nnodes; i++)
    if (topo->nodes[i].kind == WEFT_TOPO_CPU) dump_cpu(sys, topo, i);
  int rc = xmlSaveFormatFileEnc(path, doc, "UTF-8", 1);
  xmlFreeDoc(doc);
  if (rc < 0) {
    WARN("NCCL_TOPO_DUMP_FILE %s: cannot write the file", path);
    return ncclSystemError;
  }
  INFO(WEFT_GRAPH, "topology written to %s", path);
  return ncclSuccess;
}

#else /* !WEFT_HAVE_LIBXML */

ncclResult_t weft_topo_dump_xml(const struct weft_topo *topo, const char *path) {
  (void)topo;
  WARN("NCCL_TOPO_DUMP_FILE %s: weft was built without libxml2 and cannot write XML", path);
  return ncclInvalidUsage;
}

#endif
