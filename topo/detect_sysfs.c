/* What sysfs and /proc say about CPUs and PCI devices: NUMA nodes and their
 * CPU masks, a device's NUMA node and link, the CPU's vendor and model.
 * Enough for a coarse graph (PHB/SYS) when hwloc is missing. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/check.h"
#include "topo/detect.h"

/* Reads the first line of a file into buf, without its newline. */
static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  char *ok = fgets(buf, (int)len, f);
  fclose(f);
  if (ok == NULL) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* NCCL's host hash: of the host name, so two hosts' CPUs differ in a
 * merged file. */
static uint64_t host_hash(void) {
  char host[256] = "";
  uint64_t h = 1469598103934665603ULL;
  gethostname(host, sizeof(host) - 1);
  for (const char *p = host; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
  return h;
}

static void cpu_identify(struct weft_topo_node *cpu) {
  struct utsname u;
  char line[256];
  if (uname(&u) == 0) snprintf(cpu->arch, sizeof(cpu->arch), "%.15s", u.machine);
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof(line), f)) {
    char *v = strchr(line, ':');
    if (v == NULL) continue;
    v += 1 + (v[1] == ' ');
    v[strcspn(v, "\n")] = '\0';
    if (strncmp(line, "vendor_id", 9) == 0 && cpu->cpu_vendor[0] == '\0')
      snprintf(cpu->cpu_vendor, sizeof(cpu->cpu_vendor), "%s", v);
    else if (strncmp(line, "cpu family", 10) == 0 && cpu->familyid == 0)
      cpu->familyid = atoi(v);
    else if (strncmp(line, "model\t", 6) == 0 && cpu->modelid == 0)
      cpu->modelid = atoi(v);
  }
  if (f) fclose(f);
  cpu->host_hash = host_hash();
}

ncclResult_t weft_topo_sysfs_cpu(struct weft_topo *topo, int numaid, int *node_out) {
  char path[128];
  if (numaid < 0) numaid = 0;
  for (int i = 0; i < topo->nnodes; i++) {
    if (topo->nodes[i].kind == WEFT_TOPO_CPU && topo->nodes[i].numaid == numaid) {
      *node_out = i;
      return ncclSuccess;
    }
  }
  int n;
  WEFT_CHECK(weft_topo_add_node(topo, WEFT_TOPO_CPU, -1, &n));
  struct weft_topo_node *cpu = &topo->nodes[n];
  cpu->numaid = numaid;
  snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpumap", numaid);
  if (read_line(path, cpu->affinity, sizeof(cpu->affinity)) != 0)
    read_line("/sys/devices/system/cpu/online", cpu->affinity, sizeof(cpu->affinity));
  cpu_identify(cpu);
  *node_out = n;
  return ncclSuccess;
}

ncclResult_t weft_topo_sysfs_device_cpu(struct weft_topo *topo, const char *busid,
                                        int *node_out) {
  char path[128], buf[32];
  int numa = 0;
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/numa_node", busid);
  if (read_line(path, buf, sizeof(buf)) == 0) numa = atoi(buf);
  return weft_topo_sysfs_cpu(topo, numa, node_out);
}

void weft_topo_sysfs_link(struct weft_topo_node *node) {
  char path[128], buf[32];
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/max_link_speed", node->busid);
  if (read_line(path, node->link_speed, sizeof(node->link_speed)) != 0)
    node->link_speed[0] = '\0';
  snprintf(path, sizeof(path), "/sys/bus/pci/devices/%s/max_link_width", node->busid);
  if (read_line(path, buf, sizeof(buf)) == 0) node->link_width = atoi(buf);
}

int weft_topo_sysfs_class_busid(const char *cls, const char *name,
                                char busid_out[WEFT_TOPO_BUSID_LEN]) {
  char path[PATH_MAX], real[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/class/%s/%s/device", cls, name);
  if (realpath(path, real) == NULL) return -1;
  const char *base = strrchr(real, '/');
  return weft_topo_busid_normalize(base ? base + 1 : real, busid_out);
}
