/* The detectors: each fills what its source knows into one graph and
 * returns ncclSuccess when its source is missing (saying so at INFO).
 * Private to topo/. */
#ifndef WEFT_TOPO_DETECT_H
#define WEFT_TOPO_DETECT_H

#include "topo/graph.h"

/* sysfs and /proc: the fallback when hwloc is missing, and PCI link details. */
/* The CPU node of NUMA node numaid, made (with its cpumap) on first use. */
ncclResult_t weft_topo_sysfs_cpu(struct weft_topo *topo, int numaid, int *node_out);
/* The CPU node above the PCI device busid (its sysfs numa_node). */
ncclResult_t weft_topo_sysfs_device_cpu(struct weft_topo *topo, const char *busid,
                                        int *node_out);
/* Fills link_speed and link_width of a PCI node from sysfs, as NCCL does. */
void weft_topo_sysfs_link(struct weft_topo_node *node);
/* The bus id of a sysfs class device (/sys/class/<cls>/<name>/device). */
int weft_topo_sysfs_class_busid(const char *cls, const char *name,
                                char busid_out[WEFT_TOPO_BUSID_LEN]);

ncclResult_t weft_topo_detect_hwloc(struct weft_topo *topo);
/* Before finalize: GPU nodes, CUDA numbers, compute capability. */
ncclResult_t weft_topo_detect_cuda(struct weft_topo *topo);
/* After finalize: cudaDeviceCanAccessPeer and P2P attributes. */
ncclResult_t weft_topo_detect_cuda_peers(struct weft_topo *topo);
ncclResult_t weft_topo_detect_nvml(struct weft_topo *topo);
/* The bus id NVSwitch links lead to when NVML names no far end. */
#define WEFT_TOPO_HIDDEN_NVS "ffffffff:ff:1f.7"
/* An NVLink's far end as NVML gave it (bus_id; type: NVML's remote device
 * type, 0 GPU, 2 NVSwitch, -1 unknown): its bus id in target and its
 * class (0x030200 GPU, 0x068000 NVSwitch, 0x060000 other), or 0 where the
 * link cannot be placed. */
uint32_t weft_topo_nvml_far(const struct weft_topo *topo, const char *bus_id, int type,
                            char target[WEFT_TOPO_BUSID_LEN]);
ncclResult_t weft_topo_detect_ibverbs(struct weft_topo *topo);

#endif
