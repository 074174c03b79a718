/* Argument checks shared by the collective and point-to-point calls.
 *
 * Buffers of a rank that takes device buffers (the CUDA engine's kernels,
 * or device buffers staged through the host engine) must be memory its GPU
 * can use, as NCCL's kernels would: device memory of that GPU, managed
 * memory, page-locked host memory mapped at the same address
 * (cudaMallocHost, cudaHostRegister), or any host memory where the GPU
 * reads pageable memory coherently (HMM or ATS). Refused: pageable host
 * memory elsewhere, device memory of another GPU (even with peer access:
 * the engine reads and writes buffers only from the rank's own GPU), a
 * mapped host buffer passed by an address the GPU does not map, and a
 * stream of another GPU. Alignment is never refused: the kernels handle
 * any. Each refusal WARNs naming the call, the argument and what was
 * expected, and nothing is enqueued. The CUDA queries are here, not in
 * core/device.c, because only these checks need the answers' detail. */
#include "api/check.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "base/dtype.h"
#include "base/param.h"
#include "exec/engine.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* Size and NULL checks; *empty_out: count is 0 (nothing else to check). */
static ncclResult_t check_extent(const char *caller, const char *name, const void *p, size_t count,
                                 ncclDataType_t datatype, int nblocks, int *empty_out) {
  size_t elem = weft_dtype_size(datatype);
  *empty_out = 1;
  if (count > SIZE_MAX / elem / (size_t)nblocks) {
    WARN("%s: count %zu of %s%s overflows the address space", caller, count,
         weft_dtype_name(datatype), nblocks > 1 ? " per rank" : "");
    return ncclInvalidArgument;
  }
  if (count == 0) return ncclSuccess;
  if (p == NULL) {
    WARN("%s: %s is NULL with count %zu; expected a buffer of %zu %s elements", caller, name, count,
         count * (size_t)nblocks, weft_dtype_name(datatype));
    return ncclInvalidArgument;
  }
  *empty_out = 0;
  return ncclSuccess;
}

#if WEFT_HAVE_CUDA
/* Memory that passed a check on this thread, as [lo, hi), with the GPU it
 * passed for (-1: a host rank's buffer, found not to be device memory):
 * asking CUDA (cudaPointerGetAttributes) cost 0.1-0.3 us a buffer on the
 * H200 machine, which made a one-rank in-place call 0.2-0.3 us slower
 * than NCCL's, which asks nothing unless NCCL_CHECK_POINTERS=1
 * (docs/PERFORMANCE.md, "Eleventh pass"); host ranks paid it on every
 * call too. Device memory of the rank's GPU is kept as its whole
 * allocation, so a pointer that moves inside one is not asked again
 * (nccl-tests moves its buffers at every call, caching allocators hand
 * out pieces of a few large blocks: "Fifteenth pass"); anything else as
 * the one address. A hit skips the question unless NCCL_CHECK_POINTERS=1. */
#define REACHED_MAX 64
static _Thread_local struct {
  uintptr_t lo, hi;
  int dev;
} reached[REACHED_MAX];
static _Thread_local unsigned reached_next;

static int reached_before(const void *p, int dev) {
  uintptr_t a = (uintptr_t)p;
  /* An unused entry is [0, 0): a - lo < hi - lo never holds. */
  for (int i = 0; i < REACHED_MAX; i++)
    if (reached[i].dev == dev && a - reached[i].lo < reached[i].hi - reached[i].lo) return 1;
  return 0;
}

static void reached_add(uintptr_t lo, uintptr_t hi, int dev) {
  unsigned i = reached_next++ % REACHED_MAX;
  reached[i].lo = lo;
  reached[i].hi = hi;
  reached[i].dev = dev;
}
#endif

ncclResult_t weft_check_buffer(const char *caller, const char *name, const void *p, size_t count,
                               ncclDataType_t datatype, int nblocks) {
  int empty;
  WEFT_CHECK(check_extent(caller, name, p, count, datatype, nblocks, &empty));
  if (empty) return ncclSuccess;
#if WEFT_HAVE_CUDA
  int every = weft_param_int(WEFT_PARAM_CHECK_POINTERS) != 0;
  if (!every && reached_before(p, -1)) return ncclSuccess;
#endif
  if (weft_device_is_device_ptr(p)) {
    WARN(
        "%s: %s %p is CUDA device memory; this communicator's ranks run on host buffers "
        "(WEFT_DEVICE=cpu, or no GPU when it was made); expected host memory",
        caller, name, p);
    return ncclInvalidArgument;
  }
#if WEFT_HAVE_CUDA
  if (!every) reached_add((uintptr_t)p, (uintptr_t)p + 1, -1);
#endif
  return ncclSuccess;
}

/* Whether comm's calls take device buffers and streams: the CUDA engine's
 * kernels, or device buffers staged through the host engine. */
static int comm_device_buffers(const struct ncclComm *comm) {
  return comm->engine->device_buffers;
}

#if WEFT_HAVE_CUDA
#define MAX_DEVICES 64

/* Per device: 0 not asked yet, 1 no, 2 yes. */
static _Atomic int pageable_access[MAX_DEVICES];

/* Whether dev's kernels read pageable host memory coherently (HMM, ATS):
 * then malloc'd buffers are as valid as NCCL would find them. */
static int device_reads_pageable(int dev) {
  if (dev < 0 || dev >= MAX_DEVICES) return 0;
  int known = atomic_load(&pageable_access[dev]);
  if (known == 0) {
    int yes = 0;
    if (cudaDeviceGetAttribute(&yes, cudaDevAttrPageableMemoryAccess, dev) != cudaSuccess) {
      cudaGetLastError();
      yes = 0;
    }
    known = yes ? 2 : 1;
    atomic_store(&pageable_access[dev], known);
  }
  return known == 2;
}

/* What CUDA says of p, for check_reach; [*lo, *hi): the memory the answer
 * holds for (device memory of comm's GPU: its allocation; else p alone). */
static ncclResult_t check_reach_ask(const struct ncclComm *comm, const char *caller,
                                    const char *name, const void *p, uintptr_t *lo, uintptr_t *hi) {
  int dev = comm->cuda_dev;
  /* The common case, memory of the rank's GPU, in one driver call. */
  if (weft_device_own_alloc(p, dev, lo, hi)) return ncclSuccess;
  *lo = (uintptr_t)p;
  *hi = (uintptr_t)p + 1;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof(attr));
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError(); /* CUDA before 11 said so for unregistered memory */
    attr.type = cudaMemoryTypeUnregistered;
  }
  switch (attr.type) {
    case cudaMemoryTypeManaged: return ncclSuccess;
    case cudaMemoryTypeDevice:
      if (attr.device == dev) {
        weft_device_alloc_range(p, lo, hi); /* left as p alone where unknown */
        return ncclSuccess;
      }
      WARN(
          "%s: rank %d: %s %p is device memory of GPU %d; expected memory of GPU %d, where "
          "the rank runs (or managed or mapped host memory)",
          caller, comm->rank, name, p, attr.device, dev);
      return ncclInvalidArgument;
    case cudaMemoryTypeHost:
      if (attr.devicePointer == p) return ncclSuccess;
      WARN(
          "%s: rank %d: %s %p is page-locked host memory that GPU %d maps at another address "
          "(%p); expected that device address (cudaHostGetDevicePointer)",
          caller, comm->rank, name, p, dev, attr.devicePointer);
      return ncclInvalidArgument;
    default:
      if (device_reads_pageable(dev)) return ncclSuccess;
      WARN(
          "%s: rank %d: %s %p is not CUDA device memory (pageable host memory, which GPU %d "
          "cannot reach); expected memory that GPU can use: cudaMalloc'd on it, managed "
          "(cudaMallocManaged) or mapped host memory (cudaMallocHost, cudaHostRegister). The "
          "rank has a CUDA device; WEFT_DEVICE=cpu runs ranks on host buffers",
          caller, comm->rank, name, p, dev);
      return ncclInvalidArgument;
  }
}

/* ncclInvalidArgument, with a WARN, unless comm's GPU can read and write
 * p (asked once per buffer and thread, or on every call with
 * NCCL_CHECK_POINTERS=1). */
static ncclResult_t check_reach(const struct ncclComm *comm, const char *caller, const char *name,
                                const void *p) {
  int every = weft_param_int(WEFT_PARAM_CHECK_POINTERS) != 0;
  if (!every && reached_before(p, comm->cuda_dev)) return ncclSuccess;
  uintptr_t lo, hi;
  WEFT_CHECK(check_reach_ask(comm, caller, name, p, &lo, &hi));
  if (!every) reached_add(lo, hi, comm->cuda_dev);
  return ncclSuccess;
}
#endif

ncclResult_t weft_check_comm_buffer(const struct ncclComm *comm, const char *caller,
                                    const char *name, const void *p, size_t count,
                                    ncclDataType_t datatype, int nblocks) {
  return weft_check_comm_buffer_after(comm, caller, name, p, count, datatype, nblocks, NULL);
}

ncclResult_t weft_check_comm_buffer_after(const struct ncclComm *comm, const char *caller,
                                          const char *name, const void *p, size_t count,
                                          ncclDataType_t datatype, int nblocks,
                                          const void *checked) {
  if (!comm_device_buffers(comm))
    return weft_check_buffer(caller, name, p, count, datatype, nblocks);
  int empty;
  WEFT_CHECK(check_extent(caller, name, p, count, datatype, nblocks, &empty));
  if (empty || p == checked) return ncclSuccess;
#if WEFT_HAVE_CUDA
  return check_reach(comm, caller, name, p);
#else
  return ncclSuccess; /* without CUDA no communicator takes device buffers */
#endif
}

ncclResult_t weft_check_overlap(const char *caller, const void *sendbuff, size_t send_bytes,
                                const void *recvbuff, size_t recv_bytes, ptrdiff_t in_place_at,
                                const char *in_place) {
  uintptr_t s = (uintptr_t)sendbuff, r = (uintptr_t)recvbuff;
  if (send_bytes == 0 || recv_bytes == 0 || s == r + (uintptr_t)in_place_at) return ncclSuccess;
  if (s >= r + recv_bytes || r >= s + send_bytes) return ncclSuccess;
  WARN(
      "%s: sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap without being in place; "
      "expected %s (in place) or buffers that do not overlap",
      caller, sendbuff, send_bytes, recvbuff, recv_bytes, in_place);
  return ncclInvalidArgument;
}

ncclResult_t weft_check_comm_stream(const struct ncclComm *comm, const char *caller,
                                    cudaStream_t stream) {
  if (!comm_device_buffers(comm)) return ncclSuccess; /* host ranks ignore the stream */
#if WEFT_HAVE_CUDA && CUDART_VERSION >= 12080
  /* The default streams are resolved on the rank's own device at launch. */
  if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return ncclSuccess;
  /* A stream keeps its device: the thread's last stream found on the
   * rank's GPU is not asked again (two CUDA calls a call, a third of an
   * in-place one-rank call's time). A stream destroyed since and a new
   * one of another GPU under the same handle fails at launch instead. */
  static _Thread_local struct {
    cudaStream_t stream;
    int dev;
  } last_ok = {NULL, -1};
  if (stream == last_ok.stream && comm->cuda_dev == last_ok.dev) return ncclSuccess;
  /* Asking a capturing stream may end its capture (as cudaStreamQuery
   * would); a stream being captured was checked when it ran eagerly. */
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess) {
    cudaGetLastError();
    return ncclSuccess;
  }
  if (cap != cudaStreamCaptureStatusNone) return ncclSuccess;
  int dev = -1;
  if (cudaStreamGetDevice(stream, &dev) != cudaSuccess) {
    /* Not knowable here; the launch reports a stream that is not valid. */
    cudaGetLastError();
    return ncclSuccess;
  }
  if (dev != comm->cuda_dev) {
    WARN(
        "%s: rank %d: stream %p belongs to GPU %d; expected a stream of GPU %d, where the rank "
        "runs",
        caller, comm->rank, (void *)stream, dev, comm->cuda_dev);
    return ncclInvalidArgument;
  }
  last_ok.stream = stream;
  last_ok.dev = dev;
#else
  (void)caller;
  (void)stream; /* cudaStreamGetDevice is CUDA 12.8's: older builds cannot tell */
#endif
  return ncclSuccess;
}

ncclResult_t weft_check_engine_supports(const struct ncclComm *comm, const char *caller,
                                        ncclDataType_t datatype, int premul_sum, int p2p) {
  /* Every engine now runs every datatype (fp8 included), PreMulSum with a
   * host or a device scalar, and grouped send/recv (AlltoAll, Gather,
   * Scatter): nothing is left to refuse. The check stays at every call so
   * that a feature an engine lacks is refused here, before anything is
   * queued, with a WARN naming the call, the rank and the feature. */
  (void)comm;
  (void)caller;
  (void)datatype;
  (void)premul_sum;
  (void)p2p;
  return ncclSuccess;
}

ncclResult_t weft_check_rank_arg(const char *caller, const char *name, int value,
                                 const struct ncclComm *comm) {
  if (value < 0 || value >= comm->nranks) {
    WARN("%s: %s is %d, expected a rank in 0..%d", caller, name, value, comm->nranks - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
