/* libibverbs: every active port of every HCA, with its link speed, as NCCL's
 * IB transport numbers them. A port fills the NIC hwloc found under the
 * same name, or hangs from the HCA's PCI function (its NUMA node when
 * hwloc did not see it). */
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "topo/detect.h"
#include "weft_config.h"

#if WEFT_HAVE_IBVERBS
#include <endian.h>
#include <infiniband/verbs.h>

/* Mb/s of a port from the verbs encodings of lane rate and width. */
static int port_speed(const struct ibv_port_attr *a) {
  int lanes = a->active_width == 1 ? 1 : a->active_width == 2 ? 4 : a->active_width == 4 ? 8
            : a->active_width == 8 ? 12 : a->active_width == 16 ? 2 : 1;
  int rate;
  switch (a->active_speed) {
  case 1: rate = 2500; break;
  case 2: rate = 5000; break;
  case 4: case 8: rate = 10000; break;
  case 16: rate = 14000; break;
  case 32: rate = 25000; break;
  case 64: rate = 50000; break;
  case 128: rate = 100000; break;
  default: rate = 10000; break;
  }
  return lanes * rate;
}

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
  snprintf(topo->nodes[n].name, sizeof(topo->nodes[n].name), "%s", name);
  *node_out = n;
  return ncclSuccess;
}

static ncclResult_t hca_ports(struct weft_topo *topo, struct ibv_device *d, int *next_dev) {
  struct ibv_context *ctx = ibv_open_device(d);
  struct ibv_device_attr da;
  ncclResult_t res = ncclSuccess;
  if (ctx == NULL) return ncclSuccess;
  if (ibv_query_device(ctx, &da) != 0) da.phys_port_cnt = 0;
  for (int p = 1; p <= da.phys_port_cnt && res == ncclSuccess; p++) {
    struct ibv_port_attr pa;
    int n;
    if (ibv_query_port(ctx, (uint8_t)p, &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
    res = port_node(topo, ibv_get_device_name(d), p, &n);
    if (res != ncclSuccess) break;
    struct weft_topo_node *nic = &topo->nodes[n];
    nic->port = p;
    nic->speed = port_speed(&pa);
    nic->guid = be64toh(ibv_get_device_guid(d));
    nic->maxconn = 131072;
    nic->gdr = 1;
    nic->net_dev = (*next_dev)++;
  }
  ibv_close_device(ctx);
  return res;
}

ncclResult_t weft_topo_detect_ibverbs(struct weft_topo *topo) {
  int n = 0, next_dev = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (list == NULL || n == 0) {
    INFO(WEFT_GRAPH, "topology: no InfiniBand/RoCE device; NICs are network interfaces only");
    if (list) ibv_free_device_list(list);
    return ncclSuccess;
  }
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < n && res == ncclSuccess; i++) res = hca_ports(topo, list[i], &next_dev);
  ibv_free_device_list(list);
  topo->sources |= WEFT_TOPO_SRC_IBVERBS;
  INFO(WEFT_GRAPH, "topology: verbs found %d HCAs, %d active ports", n, next_dev);
  return res;
}

#else

ncclResult_t weft_topo_detect_ibverbs(struct weft_topo *topo) {
  (void)topo;
  INFO(WEFT_GRAPH, "topology: built without libibverbs; HCA ports and link speeds unknown");
  return ncclSuccess;
}

#endif
