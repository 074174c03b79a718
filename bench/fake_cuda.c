/* A stand-in for the few CUDA runtime calls weft-bench makes, backed by
 * host memory, for one test: it runs weft-bench's GPU-rank path (device
 * choice, a stream per rank, binding, describing devices, the copy
 * roofline, the header lines and JSON keys) on machines without a GPU.
 *
 * Only the bench links these. The library keeps its own CUDA runtime
 * (static, hidden), finds no device, and runs the ranks on its host engine,
 * which takes these "device" buffers because they are host memory.
 *
 * WEFT_BENCH_FAKE_NDEV sets the device count (default 1). Allocations
 * above 64 MiB fail, as on a full device, so the roofline takes its
 * halving path and stays quick. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_DEVICE_LIMIT ((size_t)64 << 20)

static _Thread_local int current;

static double fake_now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

cudaError_t cudaGetDeviceCount(int *count) {
  const char *n = getenv("WEFT_BENCH_FAKE_NDEV");

  *count = n ? atoi(n) : 1;
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
  current = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
  *device = current;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device) {
  memset(prop, 0, sizeof(*prop));
  snprintf(prop->name, sizeof(prop->name), "fake GPU %d", device);
  prop->pciBusID = 0x10 + device;
  return cudaSuccess;
}

const char *cudaGetErrorString(cudaError_t err) {
  return err == cudaSuccess ? "no error" : "fake CUDA error";
}

cudaError_t cudaGetLastError(void) {
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
  (void)flags;
  *stream = (cudaStream_t)malloc(1);
  return *stream ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  free(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  (void)stream;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  *ptr = bytes <= FAKE_DEVICE_LIMIT ? malloc(bytes) : NULL;
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void *ptr) {
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  (void)kind;
  (void)stream;
  memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t bytes, cudaStream_t stream) {
  (void)stream;
  memset(dst, value, bytes);
  return cudaSuccess;
}

/* An event is the time it was recorded: the copies run synchronously. */
cudaError_t cudaEventCreate(cudaEvent_t *event) {
  *event = (cudaEvent_t)calloc(1, sizeof(double));
  return *event ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  free(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  (void)stream;
  *(double *)(void *)event = fake_now();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  (void)event;
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = (float)((*(double *)(void *)stop - *(double *)(void *)start) * 1e3);
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
  *free_bytes = FAKE_DEVICE_LIMIT;
  *total = FAKE_DEVICE_LIMIT;
  return cudaSuccess;
}

/* No graphs: the library runs these ranks on its host engine, which
 * completes each call at once and so has nothing a graph could replay. */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  (void)stream;
  (void)mode;
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
  (void)stream;
  *graph = NULL;
  return cudaErrorStreamCaptureUnsupported;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  (void)graph;
  (void)flags;
  *exec = NULL;
  return cudaErrorNotSupported;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  (void)exec;
  (void)stream;
  return cudaErrorNotSupported;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  (void)exec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  (void)graph;
  return cudaSuccess;
}
