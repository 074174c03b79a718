/* The ports net/ib uses: libibverbs' devices, each active port, filtered
 * by NCCL_IB_HCA, with the speed, MTU and GID index the pure functions of
 * ib_port.c and ib_gid.c give for what the port reports. NCCL_IB_DISABLE,
 * an absent library and a host without HCAs all end in 0 ports and a
 * message saying which. */
#include <endian.h>
#include <stdio.h>
#include <string.h>

#include "base/debug.h"
#include "base/param.h"
#include "transport/net/ib/ib.h"
#include "transport/net/ib/ib_verbs.h"

/* Where sysfs has no GID table for the port (a container without
 * /sys/class/infiniband, a software device), an InfiniBand port's GID 0
 * from ibv_query_gid: RoCE needs sysfs's per-entry types, so it gets none. */
static int gid_from_verbs(const struct weft_ib_verbs *v, struct ibv_context *ctx, int p,
                          enum weft_ib_link link, struct weft_ib_gid *out) {
  union ibv_gid g;
  if (link != WEFT_IB_LINK_IB || v->query_gid(ctx, (uint8_t)p, 0, &g) != 0) return 0;
  out[0].index = 0;
  out[0].type = WEFT_IB_GID_IB;
  memcpy(out[0].raw, g.raw, sizeof(out[0].raw));
  return 1;
}

/* Fills d from port p of an open device; 0 when the port is usable. */
static int port_fill(const struct weft_ib_verbs *v, struct ibv_context *ctx, const char *name,
                     int p, struct weft_ib_dev *d) {
  struct ibv_port_attr pa;
  struct weft_ib_gid gids[256];
  char why[256];
  memset(&pa, 0, sizeof(pa));
  if (v->query_port(ctx, (uint8_t)p, &pa) != 0) {
    INFO(WEFT_NET, "NET/IB: %s port %d: ibv_query_port failed; port skipped", name, p);
    return -1;
  }
  if (pa.state != IBV_PORT_ACTIVE) return -1;
  memset(d, 0, sizeof(*d));
  snprintf(d->name, sizeof(d->name), "%s", name);
  d->port = p;
  d->link = pa.link_layer == IBV_LINK_LAYER_ETHERNET ? WEFT_IB_LINK_ETH : WEFT_IB_LINK_IB;
  d->speed = weft_ib_port_speed(pa.active_speed, pa.active_width);
  d->mtu = (int)pa.active_mtu;
  int n = weft_ib_gid_read_sysfs("/sys", name, p, d->link, gids, 256);
  if (n < 0) n = gid_from_verbs(v, ctx, p, d->link, gids);
  int gid_param = (int)weft_param_int(WEFT_PARAM_IB_GID_INDEX);
  if (weft_ib_gid_choose(d->link, gids, n, gid_param, &d->gid_index, why, sizeof(why)) != 0) {
    WARN("NET/IB: %s port %d: %s; port skipped", name, p, why);
    return -1;
  }
  return 0;
}

/* Appends the usable ports of device dev that the filter keeps. */
static int device_ports(const struct weft_ib_verbs *v, struct ibv_device *dev,
                        const struct weft_ib_hca_filter *f, struct weft_ib_dev *out, int n,
                        int max) {
  const char *name = v->get_device_name(dev);
  struct ibv_context *ctx = v->open_device(dev);
  struct ibv_device_attr da;
  if (ctx == NULL) {
    INFO(WEFT_NET, "NET/IB: cannot open %s; skipped", name);
    return n;
  }
  if (v->query_device(ctx, &da) != 0) da.phys_port_cnt = 0;
  for (int p = 1; p <= da.phys_port_cnt && n < max; p++) {
    if (!weft_ib_hca_keeps(f, name, p)) continue;
    if (port_fill(v, ctx, name, p, &out[n]) != 0) continue;
    out[n].guid = be64toh(v->get_device_guid(dev));
    n++;
  }
  v->close_device(ctx);
  return n;
}

static int ports_of(const struct weft_ib_verbs *v, const struct weft_ib_hca_filter *f,
                    struct weft_ib_dev *out, int max, char *why, size_t len) {
  int ndev = 0, n = 0;
  struct ibv_device **list = v->get_device_list(&ndev);
  for (int i = 0; list != NULL && i < ndev && n < max; i++)
    n = device_ports(v, list[i], f, out, n, max);
  if (list != NULL) v->free_device_list(list);
  if (n == 0 && ndev == 0) snprintf(why, len, "libibverbs found no RDMA device");
  if (n == 0 && ndev > 0)
    snprintf(why, len, "none of the %d RDMA devices has an active port that NCCL_IB_HCA keeps",
             ndev);
  return n;
}

int weft_ib_devices_find(const char *lib, struct weft_ib_dev *out, int max, char *why_out,
                         size_t why_len) {
  struct weft_ib_hca_filter f;
  struct weft_ib_verbs v;
  char why[512];
  const char *hca = weft_param_str(WEFT_PARAM_IB_HCA);
  if (weft_param_int(WEFT_PARAM_IB_DISABLE) != 0) {
    snprintf(why_out, why_len, "NCCL_IB_DISABLE=1");
    INFO(WEFT_NET | WEFT_INIT, "NET/IB: disabled by NCCL_IB_DISABLE=1");
    return 0;
  }
  if (weft_ib_hca_parse(hca, &f, why, sizeof(why)) != 0) {
    snprintf(why_out, why_len, "NCCL_IB_HCA=%s: %s", hca, why);
    WARN("NET/IB: NCCL_IB_HCA=%s is not valid: %s; no IB device is used", hca, why);
    return 0;
  }
  if (lib == NULL) lib = WEFT_IB_VERBS_LIB;
  if (weft_ib_verbs_open(lib, &v, why, sizeof(why)) != 0) {
    snprintf(why_out, why_len, "%s", why);
    /* Most hosts have no rdma-core: say it where NET is logged, no more;
     * a library that is there but broken is worth a WARN. */
    if (strncmp(why, "dlopen", 6) == 0)
      INFO(WEFT_NET | WEFT_INIT, "NET/IB: no IB network (%s)", why);
    else
      WARN("NET/IB: no IB network: %s", why);
    return 0;
  }
  int n = ports_of(&v, &f, out, max, why_out, why_len);
  weft_ib_verbs_close(&v);
  if (n == 0) INFO(WEFT_NET | WEFT_INIT, "NET/IB: no IB network (%s)", why_out);
  for (int i = 0; i < n; i++)
    INFO(WEFT_NET | WEFT_INIT, "NET/IB: [%d] %s:%d/%s speed %d Mb/s MTU %d GID index %d", i,
         out[i].name, out[i].port, out[i].link == WEFT_IB_LINK_ETH ? "RoCE" : "IB", out[i].speed,
         weft_ib_mtu_bytes(out[i].mtu), out[i].gid_index);
  return n;
}
