/* The topology the communicator uses: loaded or detected, with the policy
 * from the environment, dumped when asked, and its decisions logged at
 * INFO/GRAPH so NCCL_DEBUG_SUBSYS=GRAPH shows why each choice was made. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/param.h"
#include "topo/graph.h"

static void log_sources(const struct weft_topo *t) {
  static const char *const names[] = {"xml", "hwloc", "cuda", "nvml", "ibverbs", "sysfs"};
  char buf[128] = "";
  for (unsigned i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    if (t->sources & (1u << i))
      snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), "%s%s", buf[0] ? "," : "", names[i]);
  INFO(WEFT_GRAPH,
       "topology %s (from %s): %d GPUs, %d NICs, %d NVLink entries; P2P level %s%s%s; GDR level "
       "%s",
       t->origin, buf, t->ngpus, t->nnics, t->nnvlinks, weft_topo_path_name(t->policy.p2p_level),
       t->policy.p2p_disable ? ", P2P disabled" : "", t->policy.shm_disable ? ", SHM disabled" : "",
       weft_topo_path_name(t->policy.gdr_level));
}

/* One line per GPU: its paths, the transport to each peer, its NIC. */
static void log_gpu(const struct weft_topo *t, int g, const int *nics) {
  char paths[512] = "", tr[512] = "";
  for (int j = 0; j < t->ngpus; j++) {
    enum weft_topo_transport x = WEFT_TRANSPORT_NET;
    weft_topo_choose_transport(t, g, j, 1, &x);
    size_t lp = strlen(paths), lt = strlen(tr);
    snprintf(paths + lp, sizeof(paths) - lp, " %s", weft_topo_path_name(weft_topo_gpu_path(t, g, j)->type));
    snprintf(tr + lt, sizeof(tr) - lt, " %s", weft_topo_transport_name(x));
  }
  const struct weft_topo_node *n = &t->nodes[t->gpus[g]];
  int cpu = weft_topo_node_cpu(t, t->gpus[g]);
  int gdr = 0;
  if (nics[g] >= 0) weft_topo_gpu_nic_gdr(t, g, nics[g], &gdr);
  INFO(WEFT_GRAPH, "GPU %d [%s] NUMA %d: paths%s; transports%s; NIC %s (%s, %s)", g, n->busid,
       cpu >= 0 ? t->nodes[cpu].numaid : -1, paths, tr,
       nics[g] >= 0 ? t->nodes[t->nics[nics[g]]].name : "none",
       nics[g] >= 0 ? weft_topo_path_name(weft_topo_nic_path(t, g, nics[g])->type) : "-",
       gdr ? "GDR" : "no GDR");
}

static ncclResult_t log_decisions(const struct weft_topo *t) {
  int n = t->ngpus;
  int *buf = calloc(3 * (size_t)n + 1, sizeof(int));
  if (buf == NULL) {
    WARN("topology: out of memory logging decisions");
    return ncclSystemError;
  }
  int *gpus = buf, *ring = buf + n, *nics = buf + 2 * n;
  ncclResult_t res;
  for (int i = 0; i < n; i++) gpus[i] = i;
  WEFT_CHECK_GOTO(weft_topo_nearest_nics(t, nics), res, out);
  WEFT_CHECK_GOTO(weft_topo_ring_order(t, gpus, n, ring), res, out);
  for (int g = 0; g < n; g++) log_gpu(t, g, nics);
  char line[512] = "";
  for (int i = 0; i < n; i++)
    snprintf(line + strlen(line), sizeof(line) - strlen(line), " %d", ring[i]);
  if (n > 0) INFO(WEFT_GRAPH, "ring order:%s", line);
out:
  free(buf);
  return res;
}

ncclResult_t weft_topo_open(struct weft_topo **topo_out) {
  const char *file = weft_param_str(WEFT_PARAM_TOPO_FILE);
  struct weft_topo *t = NULL;
  ncclResult_t res;
  if (file != NULL)
    WEFT_CHECK(weft_topo_load_xml(file, &t));
  else
    WEFT_CHECK(weft_topo_detect(&t));
  WEFT_CHECK_GOTO(weft_topo_policy_from_env(t, &t->policy), res, fail);
  log_sources(t);
  WEFT_CHECK_GOTO(log_decisions(t), res, fail);
  *topo_out = t;
  return ncclSuccess;
fail:
  weft_topo_free(t);
  return res;
}

ncclResult_t weft_topo_create(struct weft_topo **topo_out) {
  const char *dump = weft_param_str(WEFT_PARAM_TOPO_DUMP_FILE);
  struct weft_topo *t = NULL;
  WEFT_CHECK(weft_topo_open(&t));
  if (dump != NULL) {
    ncclResult_t res = weft_topo_dump_xml(t, dump);
    if (res != ncclSuccess) {
      weft_topo_free(t);
      return res;
    }
  }
  *topo_out = t;
  return ncclSuccess;
}
