/* Where a rank's buffers live. Host ranks (weft's host engine) take plain
 * host memory and ignore the stream: a call returns once its result is in
 * the buffer, so copies are memcpy and sync has nothing to wait for.
 *
 * A device path is one more table: cudaMalloc'd buffers, copies and syncs
 * on the rank's stream. It sits behind WEFT_BENCH_CUDA and is not built
 * until weft has a CUDA engine to measure. */
#include <stdlib.h>
#include <string.h>

#include "bench_weft.h"

static int host_bind(int local_index) {
  (void)local_index;
  return 0;
}

static int host_stream_create(cudaStream_t *stream_out) {
  *stream_out = NULL; /* the host engine ignores streams */
  return 0;
}

static void host_stream_destroy(cudaStream_t stream) {
  (void)stream;
}

static int host_alloc(void **ptr_out, size_t bytes) {
  /* 4 KiB alignment, like device allocations, so no engine takes a slow
   * unaligned path that a GPU run would not take. */
  void *p = NULL;
  size_t rounded = (bytes + 4095) & ~(size_t)4095;

  if (posix_memalign(&p, 4096, rounded ? rounded : 4096) != 0) {
    fprintf(stderr, "weft-bench: cannot allocate %zu bytes of host memory\n", bytes);
    return -1;
  }
  *ptr_out = p;
  return 0;
}

static void host_release(void *ptr) {
  free(ptr);
}

static int host_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
  (void)stream;
  if (dst != src) memcpy(dst, src, bytes);
  return 0;
}

static int host_sync(cudaStream_t stream) {
  (void)stream;
  return 0;
}

static void host_describe(int local_index, struct bench_rank_info *info) {
  (void)local_index;
  info->device = -1;
  snprintf(info->label, sizeof(info->label), "cpu");
  snprintf(info->devname, sizeof(info->devname), "host");
}

static const struct bench_mem_ops bench_mem_host = {
    .name = "host",
    .bind = host_bind,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .alloc = host_alloc,
    .release = host_release,
    .upload = host_copy,
    .download = host_copy,
    .sync = host_sync,
    .describe = host_describe,
};

#if WEFT_BENCH_CUDA
#include <cuda_runtime.h>

static int cuda_check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return 0;
  fprintf(stderr, "weft-bench: %s failed: %s\n", what, cudaGetErrorString(err));
  return -1;
}

static int cuda_bind(int local_index) {
  int ndev = 0;
  if (cuda_check(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount")) return -1;
  return cuda_check(cudaSetDevice(local_index % ndev), "cudaSetDevice");
}

static int cuda_stream_create(cudaStream_t *stream_out) {
  return cuda_check(cudaStreamCreateWithFlags(stream_out, cudaStreamNonBlocking),
                    "cudaStreamCreate");
}

static void cuda_stream_destroy(cudaStream_t stream) {
  cudaStreamDestroy(stream);
}

static int cuda_alloc(void **ptr_out, size_t bytes) {
  return cuda_check(cudaMalloc(ptr_out, bytes ? bytes : 1), "cudaMalloc");
}

static void cuda_release(void *ptr) {
  cudaFree(ptr);
}

static int cuda_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
  if (cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), "cudaMemcpyAsync"))
    return -1;
  return cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

static int cuda_sync(cudaStream_t stream) {
  return cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

static void cuda_describe(int local_index, struct bench_rank_info *info) {
  struct cudaDeviceProp prop;
  int dev = 0;

  (void)local_index;
  cudaGetDevice(&dev);
  info->device = dev;
  if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return;
  snprintf(info->label, sizeof(info->label), "0x%02x", prop.pciBusID);
  snprintf(info->devname, sizeof(info->devname), "%s", prop.name);
}

static const struct bench_mem_ops bench_mem_cuda = {
    .name = "cuda",
    .bind = cuda_bind,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_copy,
    .download = cuda_copy,
    .sync = cuda_sync,
    .describe = cuda_describe,
};
#endif

/* Host memory until weft's CUDA engine exists; then device memory where
 * the ranks have GPUs. */
const struct bench_mem_ops *bench_mem_select(void) {
#if WEFT_BENCH_CUDA
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0) return &bench_mem_cuda;
#endif
  return &bench_mem_host;
}
