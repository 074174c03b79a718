/* CUDA: which GPUs this process sees (CUDA_VISIBLE_DEVICES applies), their
 * numbers, bus ids and compute capability, and whether each pair can
 * reach the other's memory (cudaDeviceCanAccessPeer). */
#include <stdio.h>

#include "base/check.h"
#include "topo/detect.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda_runtime.h>

/* The GPU node of CUDA device d, made under its NUMA node when hwloc did
 * not see it. */
static ncclResult_t cuda_gpu(struct weft_topo *topo, int d) {
  char raw[32], busid[WEFT_TOPO_BUSID_LEN];
  int major = 0, minor = 0, n;
  cudaError_t e = cudaDeviceGetPCIBusId(raw, sizeof(raw), d);
  if (e != cudaSuccess || weft_topo_busid_normalize(raw, busid) != 0) {
    INFO(WEFT_GRAPH, "topology: CUDA device %d has no PCI bus id (%s); left out", d,
         cudaGetErrorString(e));
    return ncclSuccess;
  }
  n = weft_topo_find_busid(topo, busid);
  if (n < 0) {
    int cpu;
    WEFT_CHECK(weft_topo_sysfs_device_cpu(topo, busid, &cpu));
    WEFT_CHECK(weft_topo_add_node(topo, WEFT_TOPO_GPU, cpu, &n));
    snprintf(topo->nodes[n].busid, sizeof(topo->nodes[n].busid), "%s", busid);
    topo->nodes[n].pci_class = 0x030200;
    topo->nodes[n].vendor = 0x10de;
    weft_topo_sysfs_link(&topo->nodes[n]);
  }
  struct weft_topo_node *g = &topo->nodes[n];
  g->kind = WEFT_TOPO_GPU;
  g->dev = d;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d);
  g->sm = major * 10 + minor;
  g->gdr = 1;
  return ncclSuccess;
}

ncclResult_t weft_topo_detect_cuda(struct weft_topo *topo) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    INFO(WEFT_GRAPH, "topology: no CUDA device (%s); GPUs seen on the PCI bus are kept "
         "without CUDA numbers", e != cudaSuccess ? cudaGetErrorString(e) : "count 0");
    return ncclSuccess;
  }
  for (int d = 0; d < count; d++) WEFT_CHECK(cuda_gpu(topo, d));
  /* GPUs CUDA does not show (CUDA_VISIBLE_DEVICES) are not ours to use. */
  for (int i = 0; i < topo->nnodes; i++)
    if (topo->nodes[i].kind == WEFT_TOPO_GPU && topo->nodes[i].dev < 0)
      topo->nodes[i].kind = WEFT_TOPO_PCIDEV;
  topo->sources |= WEFT_TOPO_SRC_CUDA;
  return ncclSuccess;
}

ncclResult_t weft_topo_detect_cuda_peers(struct weft_topo *topo) {
  if (!(topo->sources & WEFT_TOPO_SRC_CUDA)) return ncclSuccess;
  for (int i = 0; i < topo->ngpus; i++) {
    for (int j = 0; j < topo->ngpus; j++) {
      int a = topo->nodes[topo->gpus[i]].dev, b = topo->nodes[topo->gpus[j]].dev;
      int access = 0, atomics = 0, rank = 0;
      if (i == j) continue;
      if (cudaDeviceCanAccessPeer(&access, a, b) != cudaSuccess) access = 0;
      cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, a, b);
      cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, a, b);
      topo->peer_access[i * topo->ngpus + j] = (int8_t)(access != 0);
      INFO(WEFT_GRAPH, "topology: GPU %d -> GPU %d: peer access %d, native atomics %d, "
           "performance rank %d", a, b, access, atomics, rank);
    }
  }
  cudaGetLastError(); /* the queries leave no error behind for the caller */
  return ncclSuccess;
}

#else

ncclResult_t weft_topo_detect_cuda(struct weft_topo *topo) {
  (void)topo;
  INFO(WEFT_GRAPH, "topology: built without CUDA; GPUs come from the PCI bus only and peer "
       "access is assumed where the path allows it");
  return ncclSuccess;
}

ncclResult_t weft_topo_detect_cuda_peers(struct weft_topo *topo) {
  (void)topo;
  return ncclSuccess;
}

#endif
