/* The RDMA ports, as net/ib finds them (transport/net/ib/ib_dev.c: libibverbs
 * through dlopen, NCCL_IB_DISABLE and NCCL_IB_HCA applied), so the
 * topology's NICs are the devices net/ib numbers, in its order: NIC k of
 * the graph is net/ib's device k. A port fills the NIC hwloc found under
 * the same name, or hangs from the HCA's PCI function (its NUMA node when
 * hwloc did not see it). Built where <infiniband/verbs.h> is; elsewhere
 * the topology has no RDMA ports (network interfaces stay). */
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "topo/detect.h"

#if WEFT_HAVE_IB_NET
/* The one include of a transport's header from topo/: net/ib's port
 * discovery, shared with the topology (issue 17; tests/check_layers.sh). */
#include "transport/net/ib/ib.h"

/* The NIC node for port p of HCA name: hwloc's, or a new one. */
static ncclResult_t port_node(struct weft_topo *topo, const char *name, int p, int *node_out) {
  char busid[WEFT_TOPO_BUSID_LEN];
  int fn = -1, n;
  for (int i = 0; i < topo->nnodes; i++) {
    struct weft_topo_node *x = &topo->nodes[i];
    if (x->kind != WEFT_TOPO_NIC || strcmp(x->name, name) != 0) continue;
    if (x->port < 0 || x->port == p) {
      *node_out = i;
      return ncclSuccess;
    }
    fn = x->parent; /* another port of a known HCA */
  }
  if (fn < 0 && weft_topo_sysfs_class_busid("infiniband", name, busid) == 0) {
    fn = weft_topo_find_busid(topo, busid);
    if (fn < 0) {
      int cpu;
      WEFT_CHECK(weft_topo_sysfs_device_cpu(topo, busid, &cpu));
      WEFT_CHECK(weft_topo_add_node(topo, WEFT_TOPO_PCIDEV, cpu, &fn));
      snprintf(topo->nodes[fn].busid, sizeof(topo->nodes[fn].busid), "%s", busid);
      topo->nodes[fn].pci_class = 0x020700;
      weft_topo_sysfs_link(&topo->nodes[fn]);
    }
  }
  if (fn < 0) WEFT_CHECK(weft_topo_sysfs_cpu(topo, 0, &fn));
  WEFT_CHECK(weft_topo_add_node(topo, WEFT_TOPO_NIC, fn, &n));
  snprintf(topo->nodes[n].name, sizeof(topo->nodes[n].name), "%.63s", name);
  *node_out = n;
  return ncclSuccess;
}

ncclResult_t weft_topo_detect_ibverbs(struct weft_topo *topo) {
  struct weft_ib_dev devs[WEFT_IB_DEV_MAX];
  char why[512] = "";
  int n = weft_ib_devices_find(NULL, devs, WEFT_IB_DEV_MAX, why, sizeof(why));
  if (n == 0) {
    INFO(WEFT_GRAPH, "topology: no RDMA port (%s); NICs are network interfaces only", why);
    return ncclSuccess;
  }
  for (int i = 0; i < n; i++) {
    int node;
    WEFT_CHECK(port_node(topo, devs[i].name, devs[i].port, &node));
    struct weft_topo_node *nic = &topo->nodes[node];
    nic->port = devs[i].port;
    nic->speed = devs[i].speed;
    nic->guid = devs[i].guid;
    nic->maxconn = 131072;
    /* Whether the NIC can reach GPU memory (peer memory or dma-buf) is
     * net/ib's to find at registration; the topology allows it, and the
     * distance (NCCL_NET_GDR_LEVEL) decides. */
    nic->gdr = 1;
    nic->net_dev = i;
  }
  topo->sources |= WEFT_TOPO_SRC_IBVERBS;
  INFO(WEFT_GRAPH, "topology: net/ib found %d RDMA ports", n);
  return ncclSuccess;
}

#else

ncclResult_t weft_topo_detect_ibverbs(struct weft_topo *topo) {
  (void)topo;
  INFO(WEFT_GRAPH,
       "topology: built without <infiniband/verbs.h> (rdma-core's headers) or with "
       "-Dibverbs=disabled; no RDMA port, NICs are network interfaces only");
  return ncclSuccess;
}

#endif
