/* Building the topology graph: what the XML loader and the detectors share.
 * Private to topo/. */
#ifndef WEFT_TOPO_GRAPH_H
#define WEFT_TOPO_GRAPH_H

#include "topo/topo.h"

/* Caps that keep a hostile file from growing the graph without bound. */
#define WEFT_TOPO_MAX_NODES 4096
#define WEFT_TOPO_MAX_NVLINKS 16384

ncclResult_t weft_topo_alloc(struct weft_topo **topo_out);
/* Appends a node (zeroed, fields -1 where 0 means something) under parent. */
ncclResult_t weft_topo_add_node(struct weft_topo *topo, enum weft_topo_kind kind, int parent,
                                int *node_out);
ncclResult_t weft_topo_add_nvlink(struct weft_topo *topo, int from, const char *target,
                                  uint32_t tclass, int count);
/* "0000:1A:00.0" or "00000000:1a:00.0" -> "0000:1a:00.0"; -1 if not a bus id. */
int weft_topo_busid_normalize(const char *in, char out[WEFT_TOPO_BUSID_LEN]);
/* Node with that (normalized) bus id, or -1. */
int weft_topo_find_busid(const struct weft_topo *topo, const char *busid);
/* GB/s of a PCIe link from NCCL's link_speed text and width (24 if unknown). */
double weft_topo_pci_bw(const char *link_speed, int link_width);
/* 1 when link_speed and link_width say what the link is (no default). */
int weft_topo_pci_bw_known(const char *link_speed, int link_width);
/* After nodes are added: GPU and NIC lists, NVLink targets, link
 * bandwidths, the peer-access matrix (all unknown). Paths come after, from
 * weft_topo_compute_paths, once peer access is filled in. */
ncclResult_t weft_topo_finalize(struct weft_topo *topo);
/* The path between any two nodes through the PCI trees (no NVLink). */
struct weft_topo_path_info weft_topo_node_path(const struct weft_topo *topo, int a, int b);
/* "0000ffff,ffffffff" (NCCL's CPU mask) -> "0-47"; other text is copied. */
void weft_topo_mask_to_list(const char *mask, char *out, size_t len);

#endif
