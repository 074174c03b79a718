/* The CUDA engine, opt-in (WEFT_CUDA_ENGINE=1): see exec/cuda.h and
 * docs/CUDA.md. Device FIFOs are per communicator, not per rank: the ranks
 * of one process find them in a registry keyed by the communicator hash. */
#include "exec/cuda.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/param.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include "core/device.h"
#include "device/device.h"

/* One communicator's FIFOs, shared by its ranks in this process. */
struct weft_cuda_engine {
  struct weft_cuda_engine *next;
  uint64_t comm_hash;
  int nranks;
  int refs;
  int dev;
  struct weft_dev_conns conns;
  cudaStream_t poll; /* non-blocking: reads the error word beside running kernels */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct weft_cuda_engine *registry;

int weft_cuda_engine_wanted(const struct ncclComm *comm) {
  if (weft_param_int(WEFT_PARAM_CUDA_ENGINE) != 1) return 0;
  int pid = (int)getpid();
  for (int r = 0; r < comm->nranks; r++) {
    const struct weft_peer_info *p = &comm->peers[r];
    if (p->pid != pid || p->host_hash != comm->peers[comm->rank].host_hash || p->cuda_dev < 0 ||
        p->cuda_dev != comm->cuda_dev) {
      INFO(WEFT_INIT,
           "rank %d: WEFT_CUDA_ENGINE=1 but rank %d is %s; this communicator stays on the host "
           "engine (the CUDA engine serves ranks of one process on one GPU)",
           comm->rank, r,
           p->pid != pid ? "in another process"
           : p->cuda_dev < 0 ? "a host rank"
                             : "on another GPU");
      return 0;
    }
  }
  return 1;
}

int weft_cuda_engine_max_channels(const struct ncclComm *comm) {
  return comm->cuda != NULL ? comm->cuda->conns.nchannels / 2 : 1;
}

ncclResult_t weft_cuda_engine_create(struct ncclComm *comm) {
  int64_t nch = weft_param_int(WEFT_PARAM_MAX_NCHANNELS);
  if (nch < 1) nch = 1;
  if (nch > WEFT_MAX_CHANNELS / 2) nch = WEFT_MAX_CHANNELS / 2;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&registry_lock);
  struct weft_cuda_engine *e = registry;
  while (e != NULL && !(e->comm_hash == comm->comm_hash && e->nranks == comm->nranks)) e = e->next;
  if (e == NULL) {
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
      WARN("rank %d: out of memory for the CUDA engine", comm->rank);
      res = ncclSystemError;
      goto out;
    }
    weft_device_select(comm->cuda_dev);
    res = weft_dev_conns_create(comm->nranks, (int)nch * 2, &e->conns);
    if (res != ncclSuccess) {
      free(e);
      goto out;
    }
    cudaError_t err = cudaStreamCreateWithFlags(&e->poll, cudaStreamNonBlocking);
    if (err != cudaSuccess) {
      WARN("rank %d: CUDA engine: cudaStreamCreateWithFlags: %s", comm->rank,
           cudaGetErrorString(err));
      weft_dev_conns_destroy(&e->conns);
      free(e);
      res = ncclUnhandledCudaError;
      goto out;
    }
    e->comm_hash = comm->comm_hash;
    e->nranks = comm->nranks;
    e->dev = comm->cuda_dev;
    e->next = registry;
    registry = e;
  }
  e->refs++;
  comm->cuda = e;
out:
  pthread_mutex_unlock(&registry_lock);
  return res;
}

void weft_cuda_engine_destroy(struct ncclComm *comm) {
  struct weft_cuda_engine *e = comm->cuda;
  if (e == NULL) return;
  comm->cuda = NULL;
  pthread_mutex_lock(&registry_lock);
  if (--e->refs == 0) {
    struct weft_cuda_engine **pp = &registry;
    while (*pp != e) pp = &(*pp)->next;
    *pp = e->next;
    weft_device_select(e->dev);
    cudaStreamDestroy(e->poll);
    weft_dev_conns_destroy(&e->conns);
    free(e);
  }
  pthread_mutex_unlock(&registry_lock);
}

ncclResult_t weft_cuda_engine_launch(struct ncclComm *comm, const struct weft_coll *coll,
                                     const struct weft_plan *plan, void *stream) {
  cudaStream_t s = (cudaStream_t)stream;
  struct weft_dev_plan dp;
  weft_device_select(comm->cuda_dev);
  WEFT_CHECK(weft_dev_plan_upload(plan, s, &dp));
  ncclResult_t res = weft_dev_plan_launch(&dp, &comm->cuda->conns, comm->rank, coll->sendbuff,
                                          coll->recvbuff, coll->datatype, coll->op, s);
  /* Freed in stream order, after the kernel: nothing here waits. */
  weft_dev_plan_free_async(&dp, s);
  if (res != ncclSuccess)
    WARN("rank %d: %s: launching on the CUDA engine failed", comm->rank,
         weft_func_name(coll->func));
  return res;
}

ncclResult_t weft_cuda_engine_check(struct ncclComm *comm) {
  struct weft_cuda_engine *e = comm->cuda;
  if (e == NULL) return ncclSuccess;
  uint64_t v = 0;
  cudaError_t err = cudaMemcpyAsync(&v, e->conns.error, sizeof(v), cudaMemcpyDeviceToHost, e->poll);
  if (err == cudaSuccess) err = cudaStreamSynchronize(e->poll);
  if (err != cudaSuccess) {
    WARN("rank %d: CUDA engine: reading the error word: %s", comm->rank, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  if (v == 0) return ncclSuccess;
  WARN("rank %d: CUDA engine: a kernel wait timed out (rank %d waited %.0f s for its peer); the "
       "communicator has failed",
       comm->rank, (int)v - 1, e->conns.timeout_ns ? (double)e->conns.timeout_ns / 1e9 : 10.0);
  return ncclRemoteError;
}

#else /* no kernels in this build */

int weft_cuda_engine_wanted(const struct ncclComm *comm) {
  if (weft_param_int(WEFT_PARAM_CUDA_ENGINE) == 1 && comm->rank == 0)
    INFO(WEFT_INIT, "WEFT_CUDA_ENGINE=1 ignored: this build has no CUDA kernels");
  return 0;
}

int weft_cuda_engine_max_channels(const struct ncclComm *comm) {
  (void)comm;
  return 1;
}

ncclResult_t weft_cuda_engine_create(struct ncclComm *comm) {
  WARN("rank %d: the CUDA engine is not in this build", comm->rank);
  return ncclInvalidUsage;
}

void weft_cuda_engine_destroy(struct ncclComm *comm) {
  (void)comm;
}

ncclResult_t weft_cuda_engine_launch(struct ncclComm *comm, const struct weft_coll *coll,
                                     const struct weft_plan *plan, void *stream) {
  (void)coll;
  (void)plan;
  (void)stream;
  WARN("rank %d: the CUDA engine is not in this build", comm->rank);
  return ncclInvalidUsage;
}

ncclResult_t weft_cuda_engine_check(struct ncclComm *comm) {
  (void)comm;
  return ncclSuccess;
}

#endif
