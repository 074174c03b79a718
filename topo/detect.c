/* Detection: the graph from whichever sources this machine and build have.
 * hwloc gives the PCI tree, CUDA the GPUs weft may use, NVML the NVLinks,
 * verbs the HCA ports; any may be missing, and the graph is coarser for it. */
#include <stdio.h>

#include "base/check.h"
#include "topo/detect.h"

ncclResult_t weft_topo_detect(struct weft_topo **topo_out) {
  struct weft_topo *t = NULL;
  ncclResult_t res;
  WEFT_CHECK(weft_topo_alloc(&t));
  snprintf(t->origin, sizeof(t->origin), "detected");
  WEFT_CHECK_GOTO(weft_topo_detect_hwloc(t), res, fail);
  if (!(t->sources & WEFT_TOPO_SRC_HWLOC)) t->sources |= WEFT_TOPO_SRC_SYSFS;
  WEFT_CHECK_GOTO(weft_topo_detect_cuda(t), res, fail);
  WEFT_CHECK_GOTO(weft_topo_detect_nvml(t), res, fail);
  WEFT_CHECK_GOTO(weft_topo_detect_ibverbs(t), res, fail);
  /* A machine with nothing to attach still has a CPU to show. */
  if (t->nnodes == 0) {
    int cpu;
    WEFT_CHECK_GOTO(weft_topo_sysfs_cpu(t, 0, &cpu), res, fail);
  }
  WEFT_CHECK_GOTO(weft_topo_finalize(t), res, fail);
  WEFT_CHECK_GOTO(weft_topo_detect_cuda_peers(t), res, fail);
  WEFT_CHECK_GOTO(weft_topo_compute_paths(t), res, fail);
  *topo_out = t;
  return ncclSuccess;
fail:
  weft_topo_free(t);
  return res;
}
