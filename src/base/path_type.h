/* The path types: what carries a communicator's links, the slowest kind
 * where they differ. core/comm_topo.c finds a communicator's
 * (comm->gpu_path), the tuning model (sched/tuning_model.h) keys its rows
 * by it, and weft-fit names it. Here, below both, so that core/ needs
 * nothing of sched/. Header only. */
#ifndef WEFT_BASE_PATH_TYPE_H
#define WEFT_BASE_PATH_TYPE_H

/* What carries a communicator's links, the slowest kind where they
 * differ: the model's first key. */
enum weft_tune_path {
  WEFT_TUNE_LOCAL,    /* one rank: a local copy */
  WEFT_TUNE_SAME_GPU, /* GPU ranks, all on one GPU */
  WEFT_TUNE_NVLINK,   /* GPU ranks, p2p over NVLink */
  WEFT_TUNE_PCIE,     /* GPU ranks, p2p over PCIe */
  WEFT_TUNE_STAGED,   /* GPU ranks through host memory (the shm transport) */
  WEFT_TUNE_SHM,      /* host ranks of one host */
  WEFT_TUNE_SOCKET,   /* host ranks over sockets */
  WEFT_TUNE_NET,      /* GPU ranks over the network (net links) */
  WEFT_TUNE_PATH_COUNT
};

static inline const char *weft_tune_path_name(enum weft_tune_path p) {
  static const char *const names[WEFT_TUNE_PATH_COUNT] = {
      "local", "same-gpu", "nvlink", "pcie", "staged", "shm", "socket", "gpu-net"};
  return (int)p >= 0 && p < WEFT_TUNE_PATH_COUNT ? names[p] : "unknown";
}

#endif
