/* hwloc: the PCI tree above every GPU and NIC, the NUMA node it hangs from,
 * and the NICs' names (InfiniBand devices, else network interfaces). PCIe
 * switches are folded as NCCL folds them: a switch's upstream and
 * downstream ports are one node, and a device on a root port hangs from
 * the CPU. */
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "topo/detect.h"
#include "weft_config.h"

#if WEFT_HAVE_HWLOC
#include <hwloc.h>
#include <pthread.h>
#endif

#if WEFT_HAVE_HWLOC && HWLOC_API_VERSION >= 0x00020000

#define WEFT_HWLOC_MAX_BRIDGES 32

static void pci_busid(const struct hwloc_pcidev_attr_s *a, char busid[WEFT_TOPO_BUSID_LEN]) {
  snprintf(busid, WEFT_TOPO_BUSID_LEN, "%04x:%02x:%02x.%x", (unsigned)a->domain, a->bus, a->dev,
           a->func);
}

/* A node for a PCI function, reused when the bus id is known already. */
static ncclResult_t pci_node(struct weft_topo *topo, const struct hwloc_pcidev_attr_s *a,
                             enum weft_topo_kind kind, int parent, int *node_out) {
  char busid[WEFT_TOPO_BUSID_LEN];
  pci_busid(a, busid);
  int n = weft_topo_find_busid(topo, busid);
  if (n < 0) {
    WEFT_CHECK(weft_topo_add_node(topo, kind, parent, &n));
    struct weft_topo_node *p = &topo->nodes[n];
    snprintf(p->busid, sizeof(p->busid), "%s", busid);
    p->pci_class = (uint32_t)a->class_id << 8;
    p->vendor = a->vendor_id;
    p->device = a->device_id;
    p->subsys_vendor = a->subvendor_id;
    p->subsys_device = a->subdevice_id;
    weft_topo_sysfs_link(p);
  }
  *node_out = n;
  return ncclSuccess;
}

/* The CPU (NUMA node) a PCI object hangs from. */
static ncclResult_t hwloc_cpu(struct weft_topo *topo, hwloc_topology_t h, hwloc_obj_t obj,
                              int *node_out) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(h, obj);
  int numa = anc && anc->nodeset ? hwloc_bitmap_first(anc->nodeset) : 0;
  return weft_topo_sysfs_cpu(topo, numa, node_out);
}

/* The folded switch chain above obj, from the CPU down; returns the node
 * the device itself hangs from. */
static ncclResult_t switch_chain(struct weft_topo *topo, hwloc_topology_t h, hwloc_obj_t obj,
                                 int *parent_out) {
  hwloc_obj_t bridges[WEFT_HWLOC_MAX_BRIDGES];
  int nb = 0, parent;
  for (hwloc_obj_t p = obj->parent; p && p->type == HWLOC_OBJ_BRIDGE && nb < WEFT_HWLOC_MAX_BRIDGES;
       p = p->parent) {
    if (p->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) break; /* host bridge */
    bridges[nb++] = p;
  }
  WEFT_CHECK(hwloc_cpu(topo, h, obj, &parent));
  /* bridges[0] is the downstream port above obj, bridges[1] its switch's
   * upstream port: keep every second one, as NCCL does. */
  for (int i = (nb % 2 == 0) ? nb - 1 : nb - 2; i >= 1; i -= 2)
    WEFT_CHECK(pci_node(topo, &bridges[i]->attr->bridge.upstream.pci, WEFT_TOPO_PCI, parent,
                        &parent));
  *parent_out = parent;
  return ncclSuccess;
}

/* NIC ports of a network PCI function: its InfiniBand devices, else its
 * network interfaces. */
static ncclResult_t add_nics(struct weft_topo *topo, hwloc_obj_t obj, int node) {
  for (int pass = 0; pass < 2; pass++) {
    int found = 0;
    for (hwloc_obj_t c = obj->io_first_child; c; c = c->next_sibling) {
      if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL) continue;
      hwloc_obj_osdev_type_t want = pass == 0 ? HWLOC_OBJ_OSDEV_OPENFABRICS : HWLOC_OBJ_OSDEV_NETWORK;
      if (c->attr->osdev.type != want) continue;
      int n;
      WEFT_CHECK(weft_topo_add_node(topo, WEFT_TOPO_NIC, node, &n));
      snprintf(topo->nodes[n].name, sizeof(topo->nodes[n].name), "%s", c->name);
      found++;
    }
    if (found) break;
  }
  return ncclSuccess;
}

static ncclResult_t walk(struct weft_topo *topo, hwloc_topology_t h, int *ngpu, int *nnic) {
  for (hwloc_obj_t o = hwloc_get_next_pcidev(h, NULL); o; o = hwloc_get_next_pcidev(h, o)) {
    unsigned cls = o->attr->pcidev.class_id >> 8;
    int gpu = cls == 0x03 && o->attr->pcidev.vendor_id == 0x10de, nic = cls == 0x02;
    if (!gpu && !nic) continue;
    int parent, n;
    WEFT_CHECK(switch_chain(topo, h, o, &parent));
    WEFT_CHECK(pci_node(topo, &o->attr->pcidev, gpu ? WEFT_TOPO_GPU : WEFT_TOPO_PCIDEV, parent, &n));
    if (nic) WEFT_CHECK(add_nics(topo, o, n));
    *ngpu += gpu;
    *nnic += nic;
  }
  return ncclSuccess;
}

/* The machine does not change under a process, so hwloc's view is loaded
 * once and kept: destroying the last hwloc topology unloads hwloc's PCI
 * plugin, whose library (libpciaccess) then leaks what it allocated. */
static hwloc_topology_t kept;
static int kept_state; /* 0: not loaded, 1: loaded, -1: init or load failed */
static pthread_once_t kept_once = PTHREAD_ONCE_INIT;

static void load_kept(void) {
  if (hwloc_topology_init(&kept) != 0) {
    kept_state = -1;
    return;
  }
  hwloc_topology_set_io_types_filter(kept, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (hwloc_topology_load(kept) != 0) {
    hwloc_topology_destroy(kept);
    kept_state = -1;
    return;
  }
  kept_state = 1;
}

ncclResult_t weft_topo_detect_hwloc(struct weft_topo *topo) {
  int ngpu = 0, nnic = 0;
  pthread_once(&kept_once, load_kept);
  if (kept_state != 1) {
    INFO(WEFT_GRAPH, "topology: hwloc could not load this machine; PCI switches are not seen "
         "(PHB/SYS only)");
    return ncclSuccess;
  }
  ncclResult_t res = walk(topo, kept, &ngpu, &nnic);
  if (res == ncclSuccess) topo->sources |= WEFT_TOPO_SRC_HWLOC;
  INFO(WEFT_GRAPH, "topology: hwloc found %d NVIDIA GPUs and %d network functions", ngpu, nnic);
  return res;
}

#else

ncclResult_t weft_topo_detect_hwloc(struct weft_topo *topo) {
  (void)topo;
  INFO(WEFT_GRAPH, "topology: built without hwloc (2.x); PCI switches are not seen, so "
       "paths are PHB or SYS only and NICs come from verbs alone");
  return ncclSuccess;
}

#endif
