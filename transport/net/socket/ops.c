/* The socket network's table, and the calls that need no connection state:
 * init, devices, properties, memory registration (host memory only),
 * flush (nothing to flush) and close. */
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "base/check.h"
#include "base/debug.h"
#include "transport/net/socket/socket_net.h"

/* A comm holds 1 + N sockets and 2 + nthreads eventfd/epoll descriptors,
 * and a rank many comms: lift the soft descriptor limit to the hard one,
 * as NCCL does. Failing costs only headroom. */
static ncclResult_t ns_init(void) {
  struct rlimit lim;
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    rlim_t was = lim.rlim_cur;
    lim.rlim_cur = lim.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &lim) == 0)
      INFO(WEFT_NET | WEFT_INIT, "net/socket: open file limit raised from %llu to %llu",
           (unsigned long long)was, (unsigned long long)lim.rlim_max);
  }
  return ncclSuccess;
}

static ncclResult_t ns_devices(int *ndev) {
  *ndev = 1; /* the interface weft_socket_local_addr picks */
  return ncclSuccess;
}

/* The name of the interface that holds addr, or "" when none does. */
static void ifname_of(const union weft_sockaddr *addr, char *buf, size_t size) {
  struct ifaddrs *all = NULL;
  buf[0] = '\0';
  if (getifaddrs(&all) != 0) return;
  for (struct ifaddrs *ifa = all; ifa != NULL; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != addr->sa.sa_family) continue;
    const void *a = addr->sa.sa_family == AF_INET ? (const void *)&addr->sin.sin_addr
                                                  : (const void *)&addr->sin6.sin6_addr;
    const void *b = addr->sa.sa_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
    if (memcmp(a, b, addr->sa.sa_family == AF_INET ? 4 : 16) == 0) {
      snprintf(buf, size, "%s", ifa->ifa_name);
      break;
    }
  }
  freeifaddrs(all);
}

/* Mb/s from sysfs, 10000 when the interface does not say (loopback, VMs),
 * as NCCL does. */
static int if_speed(const char *name) {
  char path[128];
  int speed = 0;
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", name);
  FILE *f = name[0] ? fopen(path, "r") : NULL;
  if (f != NULL) {
    if (fscanf(f, "%d", &speed) != 1) speed = 0;
    fclose(f);
  }
  return speed > 0 ? speed : 10000;
}

static ncclResult_t ns_get_properties(int dev, struct weft_net_props *props) {
  if (dev != 0) {
    WARN("net/socket: get_properties of device %d; this network has device 0 only", dev);
    return ncclInvalidArgument;
  }
  union weft_sockaddr addr;
  WEFT_CHECK(weft_socket_local_addr(&addr));
  memset(props, 0, sizeof(*props));
  ifname_of(&addr, props->name, sizeof(props->name));
  props->ptr_support = WEFT_NET_PTR_HOST;
  props->speed = if_speed(props->name);
  props->max_comms = 65536;
  props->max_recvs = 1;
  return ncclSuccess;
}

/* Sockets read and write any host memory: the handle only says so. */
static int host_mr;

static ncclResult_t ns_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  const struct weft_ns_comm *c = comm;
  if (type != WEFT_NET_PTR_HOST) {
    WARN(
        "net/socket: reg_mr of %zu bytes at %p (comm with %s): memory type 0x%x is not host "
        "memory; sockets move host memory only (stage device buffers through host memory)",
        size, data, c ? c->peer : "?", type);
    return ncclInvalidArgument;
  }
  *mhandle = &host_mr;
  return ncclSuccess;
}

static ncclResult_t ns_dereg_mr(void *comm, void *mhandle) {
  (void)comm, (void)mhandle;
  return ncclSuccess;
}

static ncclResult_t ns_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request) {
  (void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
  *request = NULL;
  return ncclSuccess;
}

static ncclResult_t ns_close(void *comm) {
  weft__ns_comm_destroy(comm);
  return ncclSuccess;
}

const struct weft_net_ops weft_net_socket = {
    .name = "Socket",
    .init = ns_init,
    .devices = ns_devices,
    .get_properties = ns_get_properties,
    .listen = weft__ns_listen,
    .connect = weft__ns_connect,
    .accept = weft__ns_accept,
    .reg_mr = ns_reg_mr,
    .dereg_mr = ns_dereg_mr,
    .isend = weft__ns_isend,
    .irecv = weft__ns_irecv,
    .iflush = ns_iflush,
    .test = weft__ns_test,
    .close_send = ns_close,
    .close_recv = ns_close,
    .close_listen = weft__ns_close_listen,
};
