/* The CUDA check of the device engine's host code: a failed call WARNs
 * with what was being done and CUDA's error string, and returns
 * ncclUnhandledCudaError. */
#ifndef WEFT_DEVICE_DEV_CHECK_CUH
#define WEFT_DEVICE_DEV_CHECK_CUH

#include <cuda_runtime_api.h>

extern "C" {
#include "base/debug.h"
}

#define DEV_CUDA(call, what)                                                \
  do {                                                                      \
    cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                \
      WARN("device engine: %s failed: %s", (what), cudaGetErrorString(e_)); \
      return ncclUnhandledCudaError;                                        \
    }                                                                       \
  } while (0)

#endif
