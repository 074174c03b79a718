/* ncclMemAlloc and ncclMemFree: device memory for buffers a program hands
 * to collectives (PyTorch's NCCL memory pool asks for it this way).
 *
 * NCCL allocates with cuMem at the device's granularity so it can map the
 * buffer into peers; weft copies through its own FIFOs and needs nothing
 * special, so plain cudaMalloc/cudaFree serve. As in NCCL, a size of 0
 * gives a NULL pointer and success, and freeing NULL does nothing. */
#include <string.h>

#include "nccl.h"

#include "api/alias.h"
#include "base/debug.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#if WEFT_HAVE_CUDA
/* Names why there is no device to allocate on, for the WARN. */
static const char *no_device_reason(cudaError_t err) {
  if (err == cudaErrorNoDevice) return "no CUDA device is visible to this process";
  if (err == cudaErrorInsufficientDriver)
    return "no usable CUDA driver (none is installed, or it is older than weft's CUDA runtime)";
  return cudaGetErrorString(err);
}

WEFT_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  if (ptr == NULL) {
    WARN("ncclMemAlloc: ptr (the output pointer) is NULL");
    return ncclInvalidArgument;
  }
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
  int dev = -1;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) {
    cudaGetLastError(); /* clear the error the runtime keeps */
    WARN("ncclMemAlloc: cannot allocate %zu bytes of device memory: %s", size,
         no_device_reason(err));
    return ncclUnhandledCudaError;
  }
  void *p = NULL;
  err = cudaMalloc(&p, size);
  if (err != cudaSuccess) {
    cudaGetLastError();
    WARN("ncclMemAlloc: cudaMalloc of %zu bytes on device %d failed: %s", size, dev,
         err == cudaErrorNoDevice ? no_device_reason(err) : cudaGetErrorString(err));
    return err == cudaErrorMemoryAllocation ? ncclSystemError : ncclUnhandledCudaError;
  }
  INFO(WEFT_ALLOC, "ncclMemAlloc: %zu bytes at %p on device %d", size, p, dev);
  *ptr = p;
  return ncclSuccess;
}
WEFT_ALIAS(ncclMemAlloc)

WEFT_API ncclResult_t ncclMemFree(void *ptr) {
  if (ptr == NULL) return ncclSuccess;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof(attr));
  cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    WARN("ncclMemFree: cannot look up ptr %p: %s", ptr, no_device_reason(err));
    return ncclInvalidArgument;
  }
  if (attr.type != cudaMemoryTypeDevice) {
    WARN("ncclMemFree: ptr %p is not device memory (ncclMemAlloc returns device memory)", ptr);
    return ncclInvalidArgument;
  }
  err = cudaFree(ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    WARN("ncclMemFree: cudaFree(%p) on device %d failed: %s", ptr, attr.device,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  INFO(WEFT_ALLOC, "ncclMemFree: %p on device %d", ptr, attr.device);
  return ncclSuccess;
}
WEFT_ALIAS(ncclMemFree)

#else /* !WEFT_HAVE_CUDA */

WEFT_API ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
  if (ptr == NULL) {
    WARN("ncclMemAlloc: ptr (the output pointer) is NULL");
    return ncclInvalidArgument;
  }
  *ptr = NULL;
  if (size == 0) return ncclSuccess;
  WARN("ncclMemAlloc: cannot allocate %zu bytes of device memory: weft was built without CUDA",
       size);
  return ncclInvalidUsage;
}
WEFT_ALIAS(ncclMemAlloc)

WEFT_API ncclResult_t ncclMemFree(void *ptr) {
  if (ptr == NULL) return ncclSuccess;
  WARN("ncclMemFree: ptr %p cannot come from ncclMemAlloc: weft was built without CUDA", ptr);
  return ncclInvalidArgument;
}
WEFT_ALIAS(ncclMemFree)

#endif
