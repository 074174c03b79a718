/* The system topology: one graph of NUMA nodes (CPUs), PCI switches, GPUs,
 * NICs and NVLinks, detected (hwloc, CUDA, NVML, verbs) or read from an NCCL
 * topology XML; the path type and bottleneck bandwidth between devices; and
 * the decisions the communicator takes from them (transport per peer, ring
 * and tree order, nearest NIC). Only this header is for code outside topo/. */
#ifndef WEFT_TOPO_TOPO_H
#define WEFT_TOPO_TOPO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nccl.h"

/* NCCL's path types, best first; the numbers order them, as in NCCL. */
enum weft_topo_path {
  WEFT_PATH_LOC = 0, /* the same device */
  WEFT_PATH_NVL,     /* NVLink, direct or through NVSwitches */
  WEFT_PATH_PIX,     /* at most one PCIe switch */
  WEFT_PATH_PXB,     /* several PCIe switches, not through the CPU */
  WEFT_PATH_PHB,     /* through the CPU's root complex */
  WEFT_PATH_SYS,     /* across CPU sockets (QPI/UPI/xGMI) */
  WEFT_PATH_NET,     /* across hosts */
  WEFT_PATH_COUNT
};

enum weft_topo_kind {
  WEFT_TOPO_CPU,    /* a NUMA node: the root of a PCI tree */
  WEFT_TOPO_PCI,    /* a PCIe switch or bridge */
  WEFT_TOPO_PCIDEV, /* another PCI function (a NIC's, or unknown) */
  WEFT_TOPO_GPU,
  WEFT_TOPO_NIC, /* one network port (NCCL's <net>) */
  WEFT_TOPO_NVS, /* an NVSwitch, known only as an NVLink target */
};

enum weft_topo_transport {
  WEFT_TRANSPORT_P2P = 0,
  WEFT_TRANSPORT_SHM,
  WEFT_TRANSPORT_NET,
};

/* Where the graph came from (bits of weft_topo.sources). */
enum {
  WEFT_TOPO_SRC_XML = 0x1,
  WEFT_TOPO_SRC_HWLOC = 0x2,
  WEFT_TOPO_SRC_CUDA = 0x4,
  WEFT_TOPO_SRC_NVML = 0x8,
  WEFT_TOPO_SRC_IBVERBS = 0x10,
  WEFT_TOPO_SRC_SYSFS = 0x20,
};

#define WEFT_TOPO_BUSID_LEN 20

struct weft_topo_node {
  enum weft_topo_kind kind;
  int parent; /* node above in the PCI tree; -1 for CPUs and NVSwitches */
  int line;   /* XML line it came from; 0 when detected */
  /* PCI (switches, devices, GPUs; NVSwitches carry only busid) */
  char busid[WEFT_TOPO_BUSID_LEN]; /* "dddd:bb:dd.f", lower case */
  uint32_t pci_class;
  uint32_t vendor, device, subsys_vendor, subsys_device;
  char link_speed[24]; /* as NCCL writes it: "32.0 GT/s PCIe" */
  int link_width;
  double up_bw; /* GB/s of the link to the parent node */
  int up_bw_assumed; /* 1: its speed is unknown; up_bw is NCCL's default */
  /* CPU */
  int numaid;
  char affinity[512];
  char arch[16], cpu_vendor[24];
  int familyid, modelid;
  uint64_t host_hash;
  /* GPU */
  int dev, sm, rank, gdr;
  /* NIC */
  char name[64];
  int net_dev, port, maxconn;
  int speed; /* Mb/s */
  uint64_t guid;
  double latency;
};

struct weft_topo_nvlink {
  int from; /* GPU node */
  int to;   /* GPU or NVS node; -1 when the target is unknown */
  char target[WEFT_TOPO_BUSID_LEN];
  uint32_t tclass;
  int count;
};

struct weft_topo_path_info {
  enum weft_topo_path type;
  double bw;   /* bottleneck bandwidth, GB/s */
  int nvlinks; /* NVLinks carrying it (NVL only) */
  int bw_unknown; /* 1: a link on the way reported no speed; bw assumes a default */
};

/* What the transport choice honours; read from the environment by
 * weft_topo_create, settable by tests and by the communicator. */
struct weft_topo_policy {
  enum weft_topo_path p2p_level; /* p2p where path <= this */
  int p2p_disable;
  int shm_disable;
  enum weft_topo_path gdr_level; /* GPUDirect RDMA where GPU-NIC path <= this */
};

struct weft_topo {
  struct weft_topo_node *nodes;
  int nnodes, cap_nodes;
  struct weft_topo_nvlink *nvlinks;
  int nnvlinks, cap_nvlinks;
  int *gpus; /* GPU index -> node; ordered by CUDA device number */
  int ngpus;
  int *nics; /* NIC index -> node; ordered by net device number */
  int nnics;
  struct weft_topo_path_info *gpu_gpu; /* ngpus x ngpus */
  struct weft_topo_path_info *gpu_nic; /* ngpus x nnics */
  int8_t *peer_access;                 /* ngpus x ngpus: 1, 0, -1 unknown */
  struct weft_topo_policy policy;
  unsigned sources;
  char origin[256]; /* the XML file, or "detected" */
};

/* The topology weft uses: NCCL_TOPO_FILE when set, else detection; paths
 * computed, policy from NCCL_P2P_LEVEL / NCCL_P2P_DISABLE / NCCL_SHM_DISABLE,
 * written to NCCL_TOPO_DUMP_FILE when set, summary logged at INFO/GRAPH. */
ncclResult_t weft_topo_create(struct weft_topo **topo_out);
/* weft_topo_create without writing NCCL_TOPO_DUMP_FILE: for the
 * communicator, where one rank of many writes the file. */
ncclResult_t weft_topo_open(struct weft_topo **topo_out);
/* Reads an NCCL topology XML and computes paths (environment not read). */
ncclResult_t weft_topo_load_xml(const char *path, struct weft_topo **topo_out);
ncclResult_t weft_topo_load_xml_memory(const char *buf, size_t len, const char *name,
                                       struct weft_topo **topo_out);
/* Detects this machine from whichever sources are present. */
ncclResult_t weft_topo_detect(struct weft_topo **topo_out);
/* Writes the graph in NCCL's XML schema. */
ncclResult_t weft_topo_dump_xml(const struct weft_topo *topo, const char *path);
void weft_topo_free(struct weft_topo *topo);

/* Paths between GPUs (and GPU to NIC); valid after create/load/detect. */
ncclResult_t weft_topo_compute_paths(struct weft_topo *topo);
const struct weft_topo_path_info *weft_topo_gpu_path(const struct weft_topo *topo, int gpu_a,
                                                     int gpu_b);
const struct weft_topo_path_info *weft_topo_nic_path(const struct weft_topo *topo, int gpu,
                                                     int nic);

const char *weft_topo_path_name(enum weft_topo_path path);
/* LOC/NVL/PIX/PXB/PHB/SYS (any case) or NCCL's numbers 0..5. */
ncclResult_t weft_topo_path_parse(const char *s, enum weft_topo_path *path_out);
/* The same for the variable var (named in the WARN of a bad value), with
 * NCCL's path names weft has no type of (NVB, C2C, PXN, P2C) read as the
 * weft level that admits the same paths: NVB, C2C -> NVL; PXN, P2C -> PXB. */
ncclResult_t weft_topo_level_parse(const char *var, const char *s, enum weft_topo_path *path_out);
const char *weft_topo_transport_name(enum weft_topo_transport t);

/* The GPU index whose bus id is busid (any case, 4 or 8 domain digits), or -1. */
int weft_topo_gpu_by_busid(const struct weft_topo *topo, const char *busid);
/* The CPU (NUMA) node above a node, or -1. */
int weft_topo_node_cpu(const struct weft_topo *topo, int node);

/* The policy from the environment (the default P2P level is NCCL's: PXB,
 * SYS on AMD CPUs; the GDR level NCCL_NET_GDR_LEVEL, default PXB). */
ncclResult_t weft_topo_policy_from_env(const struct weft_topo *topo,
                                       struct weft_topo_policy *policy_out);

/* Transport between the ranks on GPU a and GPU b (GPU indices; -1 for a
 * rank without a GPU): p2p within the P2P level where peer access works,
 * else shm on the same host, else net. Pure: reads topo->policy only. */
ncclResult_t weft_topo_choose_transport(const struct weft_topo *topo, int gpu_a, int gpu_b,
                                        int same_host, enum weft_topo_transport *transport_out);

/* A ring over the n GPUs in gpus[] (GPU indices) that crosses the fewest
 * slow links: fewest SYS edges, then PHB, ..., then the widest bottleneck.
 * order_out[0] == gpus[0]. */
ncclResult_t weft_topo_ring_order(const struct weft_topo *topo, const int *gpus, int n,
                                  int *order_out);
/* A chain for the intra-node tree: the ring, rotated so order_out[0] (the
 * root, which talks to the network) is the GPU nearest a NIC; the parent
 * of order_out[i] is order_out[i-1]. */
ncclResult_t weft_topo_tree_order(const struct weft_topo *topo, const int *gpus, int n,
                                  int *order_out);
/* The NIC index GPU gpu uses (nic.c), and the path type to it: the
 * nearest NIC by path type, then the widest bottleneck (the NIC's own
 * speed included), then among equals NCCL's spread by the GPU's device
 * number. *nic_out is -1 (path NET) when the topology has no NIC;
 * ncclInvalidArgument when gpu is not one of its GPUs. */
ncclResult_t weft_topo_gpu_nic(const struct weft_topo *topo, int gpu, int *nic_out,
                               enum weft_topo_path *path_out);
/* weft_topo_gpu_nic for every GPU (nic_out: ngpus entries). */
ncclResult_t weft_topo_nearest_nics(const struct weft_topo *topo, int *nic_out);
/* Whether GPUDirect RDMA may be used over a GPU-NIC path of this type:
 * path <= level (NCCL_NET_GDR_LEVEL; NCCL's default, PXB). Pure. */
int weft_topo_gdr_allowed(enum weft_topo_path path, enum weft_topo_path level);
/* The same for GPU gpu and NIC nic of the topology, at topo->policy's
 * level; a GPU or NIC whose XML says gdr="0" never allows it. */
ncclResult_t weft_topo_gpu_nic_gdr(const struct weft_topo *topo, int gpu, int nic,
                                   int *allowed_out);
/* The same for a network device the topology cannot place (it has no NIC,
 * or not that one): judged as the farthest path on one host, SYS, so only
 * NCCL_NET_GDR_LEVEL=SYS allows it; never for a GPU whose XML says
 * gdr="0" (gpu -1: a GPU the topology lacks). Pure. */
int weft_topo_unplaced_nic_gdr(const struct weft_topo *topo, int gpu);
/* The NIC a host rank on NUMA node numaid uses: the fastest of the NICs
 * under that node's CPU (*local_out 1), else of all NICs (0); among equally
 * fast ones the spread-th (modulo their count: the rank's index among the
 * host's ranks), in NIC order. *nic_out -1 when the topology has no NIC.
 * Where a network numbered its devices, only those count (as for GPUs). */
ncclResult_t weft_topo_cpu_nic(const struct weft_topo *topo, int numaid, int spread, int *nic_out,
                               int *local_out);

/* Reports for weft-topo (report.c). */
void weft_topo_print_matrix(const struct weft_topo *topo, FILE *out);
void weft_topo_print_json(const struct weft_topo *topo, FILE *out);
void weft_topo_print_dot(const struct weft_topo *topo, FILE *out);

#endif
