/* The RDMA network's table (weft_net_ib) and the calls that need no
 * connection: init (the port list of ib_dev.c, libibverbs kept open),
 * devices, properties, and opening a port on first use (its context,
 * protection domain and GPUDirect probe). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/ib/ib_net.h"

struct weft_ib_verbs weft__ib_v;
struct weft_ib_port weft__ib_ports[WEFT_IB_DEV_MAX];
int weft__ib_nports;

static pthread_once_t ib_once = PTHREAD_ONCE_INIT;
static const char *ib_lib = WEFT_IB_VERBS_LIB;

void weft__ib_set_lib(const char *path) {
  ib_lib = path;
}

static void ib_init_once(void) {
  struct weft_ib_dev d[WEFT_IB_DEV_MAX];
  char why[512] = "";
  int n = weft_ib_devices_find(ib_lib, d, WEFT_IB_DEV_MAX, why, sizeof(why));
  if (n == 0) return; /* logged by weft_ib_devices_find */
  if (weft_ib_verbs_open(ib_lib, &weft__ib_v, why, sizeof(why)) != 0) {
    WARN("NET/IB: %s; no IB network", why);
    return;
  }
  for (int i = 0; i < n; i++) {
    struct weft_ib_port *p = &weft__ib_ports[i];
    p->d = d[i];
    pthread_mutex_init(&p->lock, NULL);
    char link[160];
    snprintf(link, sizeof(link), "/sys/class/infiniband/%.64s/device", p->d.name);
    char *real = realpath(link, NULL);
    snprintf(p->pci_path, sizeof(p->pci_path), "%s", real != NULL ? real : "");
    free(real);
  }
  weft__ib_nports = n;
}

static ncclResult_t ib_init(void) {
  pthread_once(&ib_once, ib_init_once);
  return ncclSuccess;
}

static ncclResult_t ib_devices(int *ndev) {
  pthread_once(&ib_once, ib_init_once);
  *ndev = weft__ib_nports;
  return ncclSuccess;
}

static ncclResult_t dev_check(int dev, const char *call) {
  pthread_once(&ib_once, ib_init_once); /* a caller that skipped init */
  if (dev >= 0 && dev < weft__ib_nports) return ncclSuccess;
  WARN("NET/IB: %s on device %d; this host has %d IB port%s (net/ib devices 0..%d)", call, dev,
       weft__ib_nports, weft__ib_nports == 1 ? "" : "s", weft__ib_nports - 1);
  return ncclInvalidArgument;
}

ncclResult_t weft__ib_port_open(int dev, struct weft_ib_port **out) {
  WEFT_CHECK(dev_check(dev, "open"));
  struct weft_ib_port *p = &weft__ib_ports[dev];
  const struct weft_ib_verbs *v = &weft__ib_v;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&p->lock);
  if (!p->opened) {
    int ndev = 0;
    struct ibv_device **list = v->get_device_list(&ndev);
    for (int i = 0; list != NULL && i < ndev && p->ctx == NULL; i++)
      if (strcmp(v->get_device_name(list[i]), p->d.name) == 0) p->ctx = v->open_device(list[i]);
    if (list != NULL) v->free_device_list(list);
    struct ibv_port_attr pa;
    union ibv_gid gid;
    memset(&pa, 0, sizeof(pa));
    if (p->ctx != NULL) p->pd = v->alloc_pd(p->ctx);
    if (p->pd == NULL || v->query_port(p->ctx, (uint8_t)p->d.port, &pa) != 0 ||
        v->query_gid(p->ctx, (uint8_t)p->d.port, p->d.gid_index, &gid) != 0) {
      WARN("NET/IB: cannot open %s port %d (%s)", p->d.name, p->d.port,
           p->ctx == NULL  ? "ibv_open_device failed"
           : p->pd == NULL ? "ibv_alloc_pd failed"
                           : "ibv_query_port or ibv_query_gid failed");
      if (p->pd != NULL) v->dealloc_pd(p->pd);
      if (p->ctx != NULL) v->close_device(p->ctx);
      p->pd = NULL, p->ctx = NULL;
      res = ncclSystemError;
    } else {
      p->lid = pa.lid;
      memcpy(p->gid, gid.raw, sizeof(p->gid));
      weft__ib_gdr_probe(p);
      p->opened = 1;
    }
  }
  pthread_mutex_unlock(&p->lock);
  WEFT_CHECK(res);
  WEFT_CHECK(weft__ib_async_start(p));
  *out = p;
  return ncclSuccess;
}

static ncclResult_t ib_get_properties(int dev, struct weft_net_props *props) {
  WEFT_CHECK(dev_check(dev, "get_properties"));
  struct weft_ib_port *p = NULL;
  /* GPUDirect support is probed on the open port. */
  WEFT_CHECK(weft__ib_port_open(dev, &p));
  memset(props, 0, sizeof(*props));
  snprintf(props->name, sizeof(props->name), "%s", p->d.name);
  snprintf(props->pci_path, sizeof(props->pci_path), "%s", p->pci_path);
  props->guid = p->d.guid;
  props->ptr_support = WEFT_NET_PTR_HOST;
  if (p->gdr.dmabuf || p->gdr.peermem) props->ptr_support |= WEFT_NET_PTR_CUDA;
  if (p->gdr.dmabuf) props->ptr_support |= WEFT_NET_PTR_DMABUF;
  props->speed = p->d.speed;
  props->port = p->d.port;
  props->max_comms = 65536;
  props->max_recvs = 1; /* grouped receives (NCCL's up to 8) are not there */
  return ncclSuccess;
}

const struct weft_net_ops weft_net_ib = {
    .name = "IB",
    .init = ib_init,
    .devices = ib_devices,
    .get_properties = ib_get_properties,
    .listen = weft__ib_listen,
    .connect = weft__ib_connect,
    .accept = weft__ib_accept,
    .reg_mr = weft__ib_reg_mr,
    .dereg_mr = weft__ib_dereg_mr,
    .isend = weft__ib_isend,
    .irecv = weft__ib_irecv,
    .iflush = weft__ib_iflush,
    .test = weft__ib_test,
    .close_send = weft__ib_close,
    .close_recv = weft__ib_close,
    .close_listen = weft__ib_close_listen,
};
