/* NCCL_TOPO_FILE: reads a topology in NCCL's XML schema (system, cpu, pci,
 * gpu, nvlink, nic, net). A <pci> without a <gpu> or <nic> child is
 * classified by its PCI class, as cloud vendors' files need. The file is
 * untrusted: no entities, no network, no DTD, bounded size and depth, and
 * every error names its line. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/check.h"
#include "topo/graph.h"
#include "weft_config.h"

#ifndef WEFT_HAVE_LIBXML
#define WEFT_HAVE_LIBXML 0
#endif

#if WEFT_HAVE_LIBXML
#include <libxml/parser.h>
#include <libxml/tree.h>

#define WEFT_TOPO_MAX_FILE (16 << 20)
#define WEFT_TOPO_MAX_DEPTH 32

struct load_ctx {
  struct weft_topo *topo;
  const char *name; /* file name for messages */
};

static ncclResult_t bad(const struct load_ctx *c, const xmlNode *x, const char *what,
                        const char *detail) {
  WARN("topology file %s:%ld: %s%s%s", c->name, x ? (long)xmlGetLineNo(x) : 0L, what,
       detail ? ": " : "", detail ? detail : "");
  return ncclInvalidUsage;
}

static int is(const xmlNode *x, const char *name) {
  return x->type == XML_ELEMENT_NODE && strcmp((const char *)x->name, name) == 0;
}

/* Copies attribute name into buf ("" when absent); 1 if present. */
static int attr(const xmlNode *x, const char *name, char *buf, size_t len) {
  xmlChar *v = xmlGetProp(x, (const xmlChar *)name);
  buf[0] = '\0';
  if (v == NULL) return 0;
  snprintf(buf, len, "%s", (const char *)v);
  xmlFree(v);
  return 1;
}

/* Integer attribute (decimal or 0x hex); absent leaves *out alone. */
static ncclResult_t attr_u64(const struct load_ctx *c, const xmlNode *x, const char *name,
                             uint64_t *out) {
  char buf[64], *end;
  if (!attr(x, name, buf, sizeof(buf)) || buf[0] == '\0') return ncclSuccess;
  errno = 0;
  unsigned long long v = strtoull(buf, &end, 0);
  if (errno != 0 || *end != '\0' || buf[0] == '-')
    return bad(c, x, "attribute is not a number", name);
  *out = v;
  return ncclSuccess;
}

static ncclResult_t attr_int(const struct load_ctx *c, const xmlNode *x, const char *name,
                             int *out) {
  char buf[64], *end;
  if (!attr(x, name, buf, sizeof(buf)) || buf[0] == '\0') return ncclSuccess;
  errno = 0;
  long v = strtol(buf, &end, 0);
  if (errno != 0 || *end != '\0' || v < INT_MIN || v > INT_MAX)
    return bad(c, x, "attribute is not a number in range", name);
  *out = (int)v;
  return ncclSuccess;
}

static ncclResult_t attr_u32(const struct load_ctx *c, const xmlNode *x, const char *name,
                             uint32_t *out) {
  uint64_t v = *out;
  WEFT_CHECK(attr_u64(c, x, name, &v));
  if (v > UINT32_MAX) return bad(c, x, "attribute too large", name);
  *out = (uint32_t)v;
  return ncclSuccess;
}

static ncclResult_t load_net(struct load_ctx *c, const xmlNode *x, int parent) {
  int n;
  WEFT_CHECK(weft_topo_add_node(c->topo, WEFT_TOPO_NIC, parent, &n));
  struct weft_topo_node *nic = &c->topo->nodes[n];
  char lat[32];
  nic->line = (int)xmlGetLineNo(x);
  attr(x, "name", nic->name, sizeof(nic->name));
  WEFT_CHECK(attr_int(c, x, "dev", &nic->net_dev));
  WEFT_CHECK(attr_int(c, x, "speed", &nic->speed));
  WEFT_CHECK(attr_int(c, x, "port", &nic->port));
  WEFT_CHECK(attr_u64(c, x, "guid", &nic->guid));
  WEFT_CHECK(attr_int(c, x, "maxconn", &nic->maxconn));
  WEFT_CHECK(attr_int(c, x, "gdr", &nic->gdr));
  if (attr(x, "latency", lat, sizeof(lat))) nic->latency = strtod(lat, NULL);
  if (nic->name[0] == '\0') {
    const char *above = parent >= 0 ? c->topo->nodes[parent].busid : "";
    snprintf(nic->name, sizeof(nic->name), "nic@%s", above[0] ? above : "cpu");
  }
  return ncclSuccess;
}

/* <nic> holds one <net> per port; a bare NIC (class only) gets one port. */
static ncclResult_t load_nic(struct load_ctx *c, const xmlNode *x, int parent) {
  int nets = 0;
  for (const xmlNode *k = x ? x->children : NULL; k; k = k->next) {
    if (!is(k, "net")) continue;
    WEFT_CHECK(load_net(c, k, parent));
    nets++;
  }
  if (nets > 0) return ncclSuccess;
  int n;
  WEFT_CHECK(weft_topo_add_node(c->topo, WEFT_TOPO_NIC, parent, &n));
  struct weft_topo_node *nic = &c->topo->nodes[n];
  nic->line = x ? (int)xmlGetLineNo(x) : c->topo->nodes[parent].line;
  snprintf(nic->name, sizeof(nic->name), "nic@%s", c->topo->nodes[parent].busid);
  return ncclSuccess;
}

static ncclResult_t load_gpu(struct load_ctx *c, const xmlNode *x, int node) {
  struct weft_topo_node *g = &c->topo->nodes[node];
  if (x == NULL) return ncclSuccess;
  WEFT_CHECK(attr_int(c, x, "dev", &g->dev));
  WEFT_CHECK(attr_int(c, x, "sm", &g->sm));
  WEFT_CHECK(attr_int(c, x, "rank", &g->rank));
  WEFT_CHECK(attr_int(c, x, "gdr", &g->gdr));
  for (const xmlNode *k = x->children; k; k = k->next) {
    if (!is(k, "nvlink")) continue;
    char target[64], norm[WEFT_TOPO_BUSID_LEN];
    uint32_t tclass = 0;
    int count = 1;
    attr(k, "target", target, sizeof(target));
    if (weft_topo_busid_normalize(target, norm) != 0)
      return bad(c, k, "nvlink target is not a PCI bus id", target);
    WEFT_CHECK(attr_u32(c, k, "tclass", &tclass));
    WEFT_CHECK(attr_int(c, k, "count", &count));
    if (count < 0 || count > 64) return bad(c, k, "nvlink count out of range", NULL);
    WEFT_CHECK(weft_topo_add_nvlink(c->topo, node, norm, tclass, count));
  }
  return ncclSuccess;
}

static const xmlNode *child(const xmlNode *x, const char *name) {
  for (const xmlNode *k = x->children; k; k = k->next)
    if (is(k, name)) return k;
  return NULL;
}

static ncclResult_t load_children(struct load_ctx *c, const xmlNode *x, int node, int depth);

/* Reads the attributes every <pci> has into node n. */
static ncclResult_t load_pci_attrs(struct load_ctx *c, const xmlNode *x, int n) {
  struct weft_topo_node *p = &c->topo->nodes[n];
  char busid[64];
  p->line = (int)xmlGetLineNo(x);
  if (!attr(x, "busid", busid, sizeof(busid))) return bad(c, x, "<pci> without busid", NULL);
  if (weft_topo_busid_normalize(busid, p->busid) != 0)
    return bad(c, x, "busid is not a PCI bus id", busid);
  if (weft_topo_find_busid(c->topo, p->busid) != n)
    return bad(c, x, "busid appears twice", p->busid);
  WEFT_CHECK(attr_u32(c, x, "class", &p->pci_class));
  WEFT_CHECK(attr_u32(c, x, "vendor", &p->vendor));
  WEFT_CHECK(attr_u32(c, x, "device", &p->device));
  WEFT_CHECK(attr_u32(c, x, "subsystem_vendor", &p->subsys_vendor));
  WEFT_CHECK(attr_u32(c, x, "subsystem_device", &p->subsys_device));
  WEFT_CHECK(attr_int(c, x, "link_width", &p->link_width));
  attr(x, "link_speed", p->link_speed, sizeof(p->link_speed));
  return ncclSuccess;
}

/* What a <pci> is: its <gpu>/<nic> child says; else its class (display
 * controllers of other vendors, such as a BMC's VGA, are not GPUs). */
static enum weft_topo_kind pci_kind(const xmlNode *x, uint32_t cls, uint32_t vendor) {
  if (child(x, "gpu")) return WEFT_TOPO_GPU;
  if (child(x, "nic")) return WEFT_TOPO_PCIDEV;
  if ((cls >> 16) == 0x03 && (vendor == 0 || vendor == 0x10de)) return WEFT_TOPO_GPU;
  if ((cls >> 8) == 0x0604 || child(x, "pci")) return WEFT_TOPO_PCI;
  return WEFT_TOPO_PCIDEV;
}

static ncclResult_t load_pci(struct load_ctx *c, const xmlNode *x, int parent, int depth) {
  int n;
  WEFT_CHECK(weft_topo_add_node(c->topo, WEFT_TOPO_PCIDEV, parent, &n));
  WEFT_CHECK(load_pci_attrs(c, x, n));
  struct weft_topo_node *p = &c->topo->nodes[n];
  p->kind = pci_kind(x, p->pci_class, p->vendor);
  int nic_class = (p->pci_class >> 16) == 0x02;
  if (p->kind == WEFT_TOPO_GPU) WEFT_CHECK(load_gpu(c, child(x, "gpu"), n));
  if (p->kind == WEFT_TOPO_PCIDEV && (child(x, "nic") || nic_class))
    WEFT_CHECK(load_nic(c, child(x, "nic"), n));
  return load_children(c, x, n, depth + 1);
}

/* The <pci> (and <nic> directly under a <cpu>) children of a node. */
static ncclResult_t load_children(struct load_ctx *c, const xmlNode *x, int node, int depth) {
  if (depth > WEFT_TOPO_MAX_DEPTH) return bad(c, x, "PCI tree nested too deep", NULL);
  for (const xmlNode *k = x->children; k; k = k->next) {
    if (is(k, "pci"))
      WEFT_CHECK(load_pci(c, k, node, depth));
    else if (is(k, "nic") && c->topo->nodes[node].kind == WEFT_TOPO_CPU)
      WEFT_CHECK(load_nic(c, k, node));
  }
  return ncclSuccess;
}

static ncclResult_t load_cpu(struct load_ctx *c, const xmlNode *x) {
  int n;
  WEFT_CHECK(weft_topo_add_node(c->topo, WEFT_TOPO_CPU, -1, &n));
  struct weft_topo_node *cpu = &c->topo->nodes[n];
  cpu->line = (int)xmlGetLineNo(x);
  WEFT_CHECK(attr_int(c, x, "numaid", &cpu->numaid));
  WEFT_CHECK(attr_int(c, x, "familyid", &cpu->familyid));
  WEFT_CHECK(attr_int(c, x, "modelid", &cpu->modelid));
  WEFT_CHECK(attr_u64(c, x, "host_hash", &cpu->host_hash));
  attr(x, "affinity", cpu->affinity, sizeof(cpu->affinity));
  attr(x, "arch", cpu->arch, sizeof(cpu->arch));
  attr(x, "vendor", cpu->cpu_vendor, sizeof(cpu->cpu_vendor));
  return load_children(c, x, n, 1);
}

static ncclResult_t load_doc(struct load_ctx *c, xmlDoc *doc) {
  const xmlNode *root = xmlDocGetRootElement(doc);
  if (doc->intSubset != NULL || doc->extSubset != NULL)
    return bad(c, root, "a DOCTYPE (before this element) is not allowed in a topology file",
               NULL);
  if (root == NULL || !is(root, "system"))
    return bad(c, root, "the root element must be <system>",
               root ? (const char *)root->name : "empty document");
  for (const xmlNode *k = root->children; k; k = k->next)
    if (is(k, "cpu")) WEFT_CHECK(load_cpu(c, k));
  if (c->topo->nnodes == 0) INFO(WEFT_GRAPH, "topology file %s has no <cpu> node", c->name);
  return ncclSuccess;
}

/* The first error libxml2 reports is the one to show; later ones are its
 * consequences. It arrives through the parser context's _private. */
struct first_error {
  int set, line;
  char msg[200];
};

#if LIBXML_VERSION >= 21200
static void on_error(void *user, const xmlError *e) {
#else
static void on_error(void *user, xmlErrorPtr e) {
#endif
  struct first_error *f = user ? ((xmlParserCtxt *)user)->_private : NULL;
  if (f == NULL || f->set || e == NULL || e->level < XML_ERR_ERROR) return;
  f->set = 1;
  f->line = e->line;
  snprintf(f->msg, sizeof(f->msg), "%s", e->message ? e->message : "unreadable");
  f->msg[strcspn(f->msg, "\n")] = '\0';
}

static ncclResult_t parse(const char *buf, size_t len, const char *name,
                          struct weft_topo **topo_out) {
  ncclResult_t res = ncclSuccess;
  struct load_ctx c = {NULL, name};
  struct first_error first = {0, 0, ""};
  if (len > WEFT_TOPO_MAX_FILE || len > INT_MAX) {
    WARN("topology file %s: %zu bytes, more than the %d allowed", name, len, WEFT_TOPO_MAX_FILE);
    return ncclInvalidUsage;
  }
  xmlParserCtxt *ctxt = xmlNewParserCtxt();
  if (ctxt == NULL) {
    WARN("topology file %s: libxml2 could not make a parser", name);
    return ncclSystemError;
  }
  ctxt->_private = &first;
  ctxt->sax->serror = on_error;
  /* No XML_PARSE_NOENT (entities stay unexpanded), no DTD loading, no
   * network, no HUGE (libxml2's own depth and size limits stay on). */
  int opts = XML_PARSE_NONET | XML_PARSE_NOBLANKS;
  xmlDoc *doc = xmlCtxtReadMemory(ctxt, buf, (int)len, name, NULL, opts);
  if (doc == NULL || !ctxt->wellFormed) {
    WARN("topology file %s:%d: not well-formed XML: %s", name, first.line,
         first.set ? first.msg : "unreadable");
    xmlFreeDoc(doc);
    xmlFreeParserCtxt(ctxt);
    return ncclInvalidUsage;
  }
  WEFT_CHECK_GOTO(weft_topo_alloc(&c.topo), res, out);
  snprintf(c.topo->origin, sizeof(c.topo->origin), "%s", name);
  c.topo->sources = WEFT_TOPO_SRC_XML;
  WEFT_CHECK_GOTO(load_doc(&c, doc), res, out);
  WEFT_CHECK_GOTO(weft_topo_finalize(c.topo), res, out);
  WEFT_CHECK_GOTO(weft_topo_compute_paths(c.topo), res, out);
  *topo_out = c.topo;
  c.topo = NULL;
out:
  weft_topo_free(c.topo);
  xmlFreeDoc(doc);
  xmlFreeParserCtxt(ctxt);
  return res;
}

ncclResult_t weft_topo_load_xml_memory(const char *buf, size_t len, const char *name,
                                       struct weft_topo **topo_out) {
  return parse(buf, len, name ? name : "(memory)", topo_out);
}

ncclResult_t weft_topo_load_xml(const char *path, struct weft_topo **topo_out) {
  ncclResult_t res = ncclSuccess;
  struct stat st;
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    WARN("topology file %s: cannot open: %s", path, strerror(errno));
    return ncclInvalidUsage;
  }
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > WEFT_TOPO_MAX_FILE) {
    WARN("topology file %s: not a regular file of at most %d bytes", path, WEFT_TOPO_MAX_FILE);
    fclose(f);
    return ncclInvalidUsage;
  }
  char *buf = malloc((size_t)st.st_size + 1);
  if (buf == NULL || fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
    WARN("topology file %s: cannot read %lld bytes", path, (long long)st.st_size);
    res = ncclSystemError;
  } else {
    res = parse(buf, (size_t)st.st_size, path, topo_out);
  }
  free(buf);
  fclose(f);
  return res;
}

#else /* !WEFT_HAVE_LIBXML */

static ncclResult_t no_libxml(const char *name) {
  WARN("topology file %s: weft was built without libxml2, so NCCL_TOPO_FILE cannot be read; "
       "install libxml2's development files and rebuild, or unset NCCL_TOPO_FILE",
       name ? name : "(memory)");
  return ncclInvalidUsage;
}

ncclResult_t weft_topo_load_xml_memory(const char *buf, size_t len, const char *name,
                                       struct weft_topo **topo_out) {
  (void)buf, (void)len, (void)topo_out;
  return no_libxml(name);
}

ncclResult_t weft_topo_load_xml(const char *path, struct weft_topo **topo_out) {
  (void)topo_out;
  return no_libxml(path);
}

#endif
