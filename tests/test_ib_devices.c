/* net/ib on this host's RDMA devices: every device under
 * /sys/class/infiniband with an active port is listed by
 * weft_ib_devices_find, with a speed, an MTU and a GID index; then two
 * processes move messages over the weft_net_ib table on the first port
 * (ib_devices_xfer.c). Where the host has no RDMA device (or weft was
 * built without rdma-core's header) this exits 77, a skip, naming what is
 * missing: it never passes without having looked at a device. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/net/ib/ib.h"

/* ib_devices_xfer.c: 0 when the transfer checked out. */
int ib_devices_transfer(void);

#if WEFT_HAVE_IB_NET

/* Whether a port of dev is ACTIVE per sysfs ("4: ACTIVE"). */
static int sysfs_active(const char *dev) {
  char path[512], line[64];
  int active = 0;
  for (int p = 1; p <= 8 && !active; p++) {
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/state", dev, p);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    active = fgets(line, sizeof(line), f) != NULL && strstr(line, "ACTIVE") != NULL;
    fclose(f);
  }
  return active;
}

int main(void) {
  unsetenv("NCCL_IB_HCA");
  unsetenv("NCCL_IB_DISABLE");
  unsetenv("NCCL_IB_GID_INDEX");
  /* Before anything reads the parameters (once per process): the
   * transfer splits messages over two QPs. */
  setenv("NCCL_IB_QPS_PER_CONNECTION", "2", 1);
  DIR *dir = opendir("/sys/class/infiniband");
  if (dir == NULL) {
    printf("SKIP ib_devices: no RDMA device on this host (/sys/class/infiniband is absent)\n");
    return 77;
  }
  struct weft_ib_dev d[WEFT_IB_DEV_MAX];
  char why[512] = "";
  int n = weft_ib_devices_find(NULL, d, WEFT_IB_DEV_MAX, why, sizeof(why));
  for (int i = 0; i < n; i++)
    printf("ib_devices: [%d] %s:%d %s speed %d Mb/s MTU %d GID index %d\n", i, d[i].name, d[i].port,
           d[i].link == WEFT_IB_LINK_ETH ? "RoCE" : "IB", d[i].speed, weft_ib_mtu_bytes(d[i].mtu),
           d[i].gid_index);
  int seen = 0, failed = 0;
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) {
    if (e->d_name[0] == '.') continue;
    seen++;
    if (!sysfs_active(e->d_name)) {
      printf("ib_devices: %s has no active port (not expected in the list)\n", e->d_name);
      continue;
    }
    int found = 0;
    for (int i = 0; i < n; i++) found |= strcmp(d[i].name, e->d_name) == 0;
    if (!found) {
      printf("FAIL ib_devices: %s has an active port but is not listed (%s)\n", e->d_name, why);
      failed = 1;
    }
  }
  closedir(dir);
  if (seen == 0) {
    printf("SKIP ib_devices: no RDMA device on this host (/sys/class/infiniband is empty)\n");
    return 77;
  }
  for (int i = 0; i < n; i++) {
    if (weft_ib_mtu_bytes(d[i].mtu) == 0 || d[i].gid_index < 0) {
      printf("FAIL ib_devices: %s:%d: MTU code %d, GID index %d\n", d[i].name, d[i].port, d[i].mtu,
             d[i].gid_index);
      failed = 1;
    }
  }
  if (n == 0) {
    printf("SKIP ib_devices: no port net/ib may use (%s): no transfer to run\n", why);
    return failed ? 1 : 77;
  }
  return failed || ib_devices_transfer() != 0;
}

#else

int main(void) {
  printf(
      "SKIP ib_devices: weft was built without rdma-core's <infiniband/verbs.h> "
      "(no net/ib device code to run)\n");
  return 77;
}

#endif
