/* TestNet's device memory (TESTNET_CUDA_PTRS=1, tn.h): a region registered
 * as NCCL_PTR_CUDA gets a pinned host copy of its own size; isend copies
 * the bytes it sends from the device into that copy and sends from there,
 * a receive lands there and test copies it to the device before it says
 * done. The copies run on a non-blocking stream of the region's device
 * (never the legacy default stream, which would wait for the kernels that
 * wait for these very bytes) with the current device restored after.
 * Built without CUDA (TESTNET_CUDA 0), TestNet never advertises CUDA
 * pointers and every function here refuses. */
#include <stdlib.h>
#include <string.h>

#include "tests/net_plugin/tn.h"

#if TESTNET_CUDA
#include <cuda_runtime_api.h>

struct tn_cuda {
  int dev;
  cudaStream_t stream;
};

int tn_cuda_built(void) {
  return 1;
}

static ncclResult_t tn_cuda_fail(const char *what, cudaError_t err) {
  TN_WARN("TestNet v%d: %s: %s", tn_version, what, cudaGetErrorString(err));
  return ncclUnhandledCudaError;
}

ncclResult_t tn_cuda_open(const void *dev_ptr, size_t size, char **stage_out, void **cuda_out) {
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof(attr));
  cudaError_t err = cudaPointerGetAttributes(&attr, dev_ptr);
  if (err != cudaSuccess) return tn_cuda_fail("cudaPointerGetAttributes", err);
  if (attr.type != cudaMemoryTypeDevice) {
    TN_WARN("TestNet v%d: %p registered as CUDA memory is not device memory", tn_version, dev_ptr);
    return ncclInvalidArgument;
  }
  struct tn_cuda *c = calloc(1, sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->dev = attr.device;
  int old = 0;
  cudaGetDevice(&old);
  err = cudaSetDevice(c->dev);
  if (err == cudaSuccess) err = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
  if (err == cudaSuccess)
    err = cudaHostAlloc((void **)stage_out, size > 0 ? size : 1, cudaHostAllocDefault);
  cudaSetDevice(old);
  if (err != cudaSuccess) {
    if (c->stream != NULL) cudaStreamDestroy(c->stream);
    free(c);
    return tn_cuda_fail("a pinned copy of a device region", err);
  }
  *cuda_out = c;
  return ncclSuccess;
}

ncclResult_t tn_cuda_copy(void *cuda, void *dst, const void *src, size_t size) {
  struct tn_cuda *c = cuda;
  if (size == 0) return ncclSuccess;
  int old = 0;
  cudaGetDevice(&old);
  cudaError_t err = old == c->dev ? cudaSuccess : cudaSetDevice(c->dev);
  if (err == cudaSuccess) err = cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, c->stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(c->stream);
  if (old != c->dev) cudaSetDevice(old);
  return err == cudaSuccess ? ncclSuccess : tn_cuda_fail("staging a device region", err);
}

void tn_cuda_close(void *cuda, char *stage) {
  struct tn_cuda *c = cuda;
  if (c == NULL) return;
  cudaStreamDestroy(c->stream);
  cudaFreeHost(stage);
  free(c);
}

#else /* no CUDA in this build */

int tn_cuda_built(void) {
  return 0;
}

ncclResult_t tn_cuda_open(const void *dev_ptr, size_t size, char **stage_out, void **cuda_out) {
  (void)dev_ptr, (void)size, (void)stage_out, (void)cuda_out;
  return ncclInternalError;
}

ncclResult_t tn_cuda_copy(void *cuda, void *dst, const void *src, size_t size) {
  (void)cuda, (void)dst, (void)src, (void)size;
  return ncclInternalError;
}

void tn_cuda_close(void *cuda, char *stage) {
  (void)cuda, (void)stage;
}

#endif
