/* Which way a communicator runs device buffers, decided once at init.
 *
 * Kernels of two ranks that exchange data spin on each other's counters,
 * so they must run at the same time. That holds for streams of one process
 * (one context), for kernels on different GPUs, and for processes sharing
 * a GPU under MPS. Without MPS, contexts of different processes time-slice
 * a GPU: a kernel spinning on a peer that is not scheduled waits out whole
 * time slices (measured on an H200: 4.5 ms per round trip instead of
 * 1.4 us). Such communicators, and those whose GPUs cannot reach each other
 * (no peer access, another host, NCCL_P2P_DISABLE=1), stage device buffers
 * through host memory and run on the host engine instead. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/mps.h"
#include "core/comm.h"
#include "base/param.h"
#include "exec/cuda.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include <cuda_runtime_api.h>

#include "core/bootstrap.h"
#include "core/device.h"

/* CUDA maps a context's streams onto CUDA_DEVICE_MAX_CONNECTIONS hardware
 * queues (8 by default); two streams on one queue run in order. Ranks
 * sharing a GPU in one process each have a stream and a side stream, and
 * their kernels spin on each other, so with more streams than queues a
 * kernel (or a plan upload) can sit behind one that waits for it. The
 * variable is read when the context is created, which in most programs is
 * after this library is loaded; a value the user set is kept. Under MPS
 * the server hands every client its queues from one pool, and 32 per
 * client made the fourth client's context fail on the H200, so where an
 * MPS daemon answers on its pipe (CUDA_MPS_PIPE_DIRECTORY, or
 * /tmp/nvidia-mps, its default) the default stays: MPS ranks are
 * processes of their own. A pipe left behind by a daemon that quit does
 * not count (it kept 8 queues once, and 6 rank-threads hung). */
__attribute__((constructor)) static void cuda_more_queues(void) {
  const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  char control[4096];
  snprintf(control, sizeof(control), "%s/control", dir != NULL && *dir ? dir : "/tmp/nvidia-mps");
  if (weft_mps_daemon_live(control)) return;
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);
}

/* Rank-threads of this process on this rank's GPU whose streams (the
 * caller's and the side stream, two each) outnumber the hardware queues
 * may wait on each other's kernels until the timeout: said once at init,
 * naming the fix, instead of a hang with no culprit. */
void weft_cuda_queues_check(const struct ncclComm *comm) {
  const struct weft_peer_info *me = &comm->peers[comm->rank];
  int here = 0;
  for (int p = 0; p < comm->nranks; p++)
    here += comm->peers[p].pid == me->pid && comm->peers[p].host_hash == me->host_hash &&
            weft_peer_same_gpu(&comm->peers[p], me);
  const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  int queues = v != NULL && *v ? atoi(v) : 8;
  /* Under MPS the server grants a client fewer queues than it asks for
   * (3 rank-threads, 6 streams, timed out there on the H200): any two
   * rank-threads on one GPU may wait on each other. */
  int mps = 0;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, comm->cuda_dev) != cudaSuccess) mps = 0;
  if (here < 2 || (!mps && 2 * here <= queues)) return;
  static atomic_int said;
  if (mps) {
    if (atomic_fetch_add(&said, 1) == 0)
      WARN(
          "rank %d: %d ranks of this process share GPU %d under MPS: the MPS server gives this "
          "process fewer hardware queues than their %d streams, so a rank's kernel can wait "
          "behind a peer's that waits for it (a timeout naming no culprit). Run rank-threads "
          "sharing a GPU without MPS, one rank per process under MPS, or set "
          "CUDA_DEVICE_MAX_CONNECTIONS=8 or more before the process starts CUDA (docs/CUDA.md)",
          comm->rank, here, comm->cuda_dev, 2 * here);
    return;
  }
  if (atomic_fetch_add(&said, 1) == 0)
    WARN(
        "rank %d: %d ranks of this process share GPU %d: their %d streams share "
        "CUDA_DEVICE_MAX_CONNECTIONS=%d hardware queues, so a rank's kernel can wait behind a "
        "peer's that waits for it (a timeout naming no culprit). Set "
        "CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts (weft does so when it loads, unless "
        "set or an MPS daemon runs; docs/CUDA.md)",
        comm->rank, here, comm->cuda_dev, 2 * here, queues);
}

/* Why rank me cannot run kernels against peer p, or NULL when it can. */
static const char *pair_blocker(const struct ncclComm *comm, int p, int mps) {
  const struct weft_peer_info *me = &comm->peers[comm->rank], *q = &comm->peers[p];
  /* Another host: net links carried by the proxy thread (exec/cuda_net.h),
   * unless WEFT_NET_GPU=0 keeps the staged path. */
  if (q->host_hash != me->host_hash)
    return weft_param_int(WEFT_PARAM_NET_GPU) ? NULL : "on another host (WEFT_NET_GPU=0)";
  if (q->pid == me->pid) {
    int ok = 0;
    if (q->cuda_dev == me->cuda_dev) return NULL;
    if (cudaDeviceCanAccessPeer(&ok, me->cuda_dev, q->cuda_dev) != cudaSuccess || !ok)
      return "on a GPU this one has no peer access to";
    return NULL;
  }
  if (weft_peer_same_gpu(q, me))
    return mps ? NULL : "on this GPU in another process, and MPS is not running";
  int dev = -1, ok = 0;
  if (cudaDeviceGetByPCIBusId(&dev, q->busid) != cudaSuccess)
    return "on a GPU this process cannot see";
  if (cudaDeviceCanAccessPeer(&ok, me->cuda_dev, dev) != cudaSuccess || !ok)
    return "on a GPU this one has no peer access to";
  return NULL;
}

/* This rank's verdict: -1 when every pair can run kernels, else the first
 * peer that cannot (its reason in *why_out). */
static int my_blocker(const struct ncclComm *comm, const char **why_out) {
  int mps = 0;
  if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, comm->cuda_dev) != cudaSuccess) mps = 0;
  if (weft_param_int(WEFT_PARAM_P2P_DISABLE) == 1 && comm->nranks > 1) {
    *why_out = "NCCL_P2P_DISABLE=1";
    return comm->rank;
  }
  for (int p = 0; p < comm->nranks; p++) {
    if (p == comm->rank) continue;
    const char *why = pair_blocker(comm, p, mps);
    if (why != NULL) {
      *why_out = why;
      return p;
    }
  }
  return -1;
}

ncclResult_t weft_cuda_engine_choose(struct ncclComm *comm, enum weft_cuda_path *path_out) {
  for (int r = 0; r < comm->nranks; r++) {
    if (comm->peers[r].cuda_dev >= 0) continue;
    if (comm->cuda_dev >= 0 && comm->rank == 0)
      INFO(WEFT_INIT,
           "rank %d is a host rank: every rank of this communicator runs on host buffers (the "
           "host engine)",
           r);
    *path_out = WEFT_CUDA_PATH_HOST;
    return ncclSuccess;
  }
  if (weft_param_int(WEFT_PARAM_CUDA_ENGINE) == 0) {
    if (comm->rank == 0)
      INFO(WEFT_INIT, "WEFT_CUDA_ENGINE=0: device buffers are staged through host memory");
    *path_out = WEFT_CUDA_PATH_STAGED;
    return ncclSuccess;
  }
  weft_device_select(comm->cuda_dev);
  const char *why = NULL;
  int mine = my_blocker(comm, &why);
  int *votes = calloc((size_t)comm->nranks, sizeof(*votes));
  if (votes == NULL) {
    WARN("rank %d: out of memory choosing the CUDA path", comm->rank);
    return ncclSystemError;
  }
  votes[comm->rank] = mine;
  ncclResult_t res = weft_bootstrap_allgather(comm->bootstrap, votes, sizeof(*votes));
  int blocked_rank = -1;
  for (int r = 0; res == ncclSuccess && r < comm->nranks && blocked_rank < 0; r++)
    if (votes[r] >= 0) blocked_rank = r;
  free(votes);
  WEFT_CHECK(res);
  if (blocked_rank < 0) {
    if (comm->rank == 0)
      INFO(WEFT_INIT, "CUDA engine: %d ranks run kernels over device FIFOs", comm->nranks);
    *path_out = WEFT_CUDA_PATH_KERNEL;
    return ncclSuccess;
  }
  if (blocked_rank == comm->rank && mine == comm->rank)
    INFO(WEFT_INIT, "%s: device buffers are staged through host memory", why);
  else if (blocked_rank == comm->rank)
    INFO(WEFT_INIT,
         "rank %d: peer %d is %s: device buffers are staged through host memory (no spinning "
         "kernels across processes)%s",
         comm->rank, mine, why,
         strstr(why, "MPS") ? "; start MPS (nvidia-cuda-mps-control -d) for the faster kernel path"
                            : "");
  *path_out = WEFT_CUDA_PATH_STAGED;
  return ncclSuccess;
}

#else /* no kernels in this build */

ncclResult_t weft_cuda_engine_choose(struct ncclComm *comm, enum weft_cuda_path *path_out) {
  if (comm->cuda_dev >= 0 && comm->rank == 0)
    INFO(WEFT_INIT,
         "this build has no CUDA kernels: device buffers are staged through host "
         "memory");
  *path_out = comm->cuda_dev >= 0 ? WEFT_CUDA_PATH_STAGED : WEFT_CUDA_PATH_HOST;
  return ncclSuccess;
}

#endif

#if WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

ncclResult_t weft_cuda_driver_fn(const struct ncclComm *comm, const char *who, const char *name,
                                 void *pfn_out, size_t size) {
  const char *why = "";
  void *fn = weft_device_driver_symbol(name, &why);
  if (fn != NULL) {
    memcpy(pfn_out, &fn, size);
    return ncclSuccess;
  }
  WARN(
      "rank %d: %s: the CUDA driver does not provide %s (%s); it needs a driver for CUDA 11.7 "
      "or later",
      comm->rank, who, name, why);
  return ncclSystemError;
}
#endif
