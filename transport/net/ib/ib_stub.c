/* The RDMA network where weft was built without rdma-core's header (or
 * with -Dibverbs=disabled): a table with no device, so transport/net/net.c
 * lists it the same way everywhere and picks sockets. */
#include <stdio.h>

#include "base/debug.h"
#include "transport/net/net.h"

static ncclResult_t stub_init(void) {
  return ncclSuccess;
}

static ncclResult_t stub_devices(int *ndev) {
  *ndev = 0;
  return ncclSuccess;
}

static ncclResult_t stub_get_properties(int dev, struct weft_net_props *props) {
  (void)props;
  WARN(
      "NET/IB: get_properties of device %d: weft was built without net/ib (no rdma-core "
      "headers)",
      dev);
  return ncclInvalidArgument;
}

const struct weft_net_ops weft_net_ib = {
    .name = "IB",
    .init = stub_init,
    .devices = stub_devices,
    .get_properties = stub_get_properties,
};

int weft_net_ib_mr_bounce(void *comm, int type, char *why_out, size_t why_len) {
  (void)comm, (void)type;
  snprintf(why_out, why_len, "weft was built without net/ib");
  return 1;
}
