/* weft-topo --measure: copy bandwidth and latency between every GPU pair, in
 * the layout of CUDA's p2pBandwidthLatencyTest: copy engine
 * (cudaMemcpyPeerAsync) with peer access off and on, a copy kernel that
 * pushes into the peer's memory, one and both directions; host<->device
 * for every GPU. With one GPU the matrices are its own device copy. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "topo/measure.h"

#define MCHECK(call)                                                              \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      fprintf(stderr, "weft-topo --measure: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      return -1.0;                                                                \
    }                                                                             \
  } while (0)

enum { MODE_CE = 0, MODE_KERNEL = 1 };

struct gpu_bufs {
  void *src, *dst;
  cudaStream_t stream;
  cudaEvent_t start, stop;
};

static struct gpu_bufs *bufs;
static int ngpus;

/* The smallest copy kernel: 16-byte words, grid-stride. */
__global__ void copy_kernel(int4 *dst, const int4 *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

/* Enqueues one copy of bytes from GPU a's src to GPU b's dst on stream s
 * (which belongs to a for the kernel, since it pushes). */
static cudaError_t enqueue_copy(int a, int b, size_t bytes, int mode, cudaStream_t s) {
  if (mode == MODE_CE) return cudaMemcpyPeerAsync(bufs[b].dst, b, bufs[a].src, a, bytes, s);
  copy_kernel<<<264, 512, 0, s>>>((int4 *)bufs[b].dst, (const int4 *)bufs[a].src, bytes / 16);
  return cudaGetLastError();
}

/* GB/s of reps copies a->b (and b->a at once when bidir). */
static double bandwidth(int a, int b, size_t bytes, int reps, int mode, int bidir) {
  struct gpu_bufs *x = &bufs[a], *y = &bufs[b];
  MCHECK(cudaSetDevice(a));
  MCHECK(cudaDeviceSynchronize());
  MCHECK(cudaEventRecord(x->start, x->stream));
  if (bidir) MCHECK(cudaStreamWaitEvent(y->stream, x->start, 0));
  for (int r = 0; r < reps; r++) {
    MCHECK(cudaSetDevice(a));
    MCHECK(enqueue_copy(a, b, bytes, mode, x->stream));
    if (bidir) {
      MCHECK(cudaSetDevice(b));
      MCHECK(enqueue_copy(b, a, bytes, mode, y->stream));
    }
  }
  if (bidir) {
    MCHECK(cudaSetDevice(b));
    MCHECK(cudaEventRecord(y->stop, y->stream));
    MCHECK(cudaSetDevice(a));
    MCHECK(cudaStreamWaitEvent(x->stream, y->stop, 0));
  }
  MCHECK(cudaSetDevice(a));
  MCHECK(cudaEventRecord(x->stop, x->stream));
  MCHECK(cudaEventSynchronize(x->stop));
  float ms = 0;
  MCHECK(cudaEventElapsedTime(&ms, x->start, x->stop));
  return (double)bytes * reps * (bidir ? 2 : 1) / (ms * 1e6);
}

/* Microseconds per 4-byte copy engine copy a->b. */
static double latency(int a, int b) {
  const int reps = 100;
  struct gpu_bufs *x = &bufs[a];
  MCHECK(cudaSetDevice(a));
  MCHECK(cudaEventRecord(x->start, x->stream));
  for (int r = 0; r < reps; r++) MCHECK(enqueue_copy(a, b, 4, MODE_CE, x->stream));
  MCHECK(cudaEventRecord(x->stop, x->stream));
  MCHECK(cudaEventSynchronize(x->stop));
  float ms = 0;
  MCHECK(cudaEventElapsedTime(&ms, x->start, x->stop));
  return ms * 1e3 / reps;
}

static void peer_access(int on) {
  for (int a = 0; a < ngpus; a++) {
    cudaSetDevice(a);
    for (int b = 0; b < ngpus; b++) {
      int ok = 0;
      if (a == b || cudaDeviceCanAccessPeer(&ok, a, b) != cudaSuccess || !ok) continue;
      if (on) cudaDeviceEnablePeerAccess(b, 0);
      else cudaDeviceDisablePeerAccess(b);
    }
  }
  cudaGetLastError(); /* "already enabled" is not an error here */
}

/* One matrix; kernel copies only where peer access works. Returns -1 on a
 * CUDA error. */
static int matrix(FILE *out, const char *title, size_t bytes, int reps, int mode, int bidir,
                  int lat) {
  fprintf(out, "\n%s\n   D\\D", title);
  for (int b = 0; b < ngpus; b++) fprintf(out, " %8d", b);
  for (int a = 0; a < ngpus; a++) {
    fprintf(out, "\n %6d", a);
    for (int b = 0; b < ngpus; b++) {
      int ok = a == b;
      if (!ok) cudaDeviceCanAccessPeer(&ok, a, b);
      if (mode == MODE_KERNEL && !ok) {
        fprintf(out, " %8s", "n/a");
        continue;
      }
      double v = lat ? latency(a, b) : bandwidth(a, b, bytes, reps, mode, bidir && a != b);
      if (v < 0) return -1;
      fprintf(out, lat ? " %8.2f" : " %8.1f", v);
    }
  }
  fprintf(out, "\n");
  return 0;
}

/* Host<->device over pinned memory, per GPU. */
static int host_copies(FILE *out, size_t bytes, int reps) {
  void *host = NULL;
  if (cudaMallocHost(&host, bytes) != cudaSuccess) return -1;
  fprintf(out, "\nHost <-> device (pinned), GB/s and us per 4-byte copy\n   GPU      H2D      D2H  H2D lat  D2H lat\n");
  for (int a = 0; a < ngpus; a++) {
    struct gpu_bufs *x = &bufs[a];
    double r[4];
    cudaSetDevice(a);
    for (int k = 0; k < 4; k++) {
      size_t n = k < 2 ? bytes : 4;
      int times = k < 2 ? reps : 100;
      float ms = 0;
      cudaEventRecord(x->start, x->stream);
      for (int i = 0; i < times; i++)
        cudaMemcpyAsync(k % 2 ? host : x->dst, k % 2 ? x->src : host, n,
                        k % 2 ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice, x->stream);
      cudaEventRecord(x->stop, x->stream);
      if (cudaEventSynchronize(x->stop) != cudaSuccess) return -1;
      cudaEventElapsedTime(&ms, x->start, x->stop);
      r[k] = k < 2 ? (double)n * times / (ms * 1e6) : ms * 1e3 / times;
    }
    fprintf(out, " %5d %8.1f %8.1f %8.2f %8.2f\n", a, r[0], r[1], r[2], r[3]);
  }
  cudaFreeHost(host);
  return 0;
}

static int setup(FILE *out, size_t bytes) {
  bufs = (struct gpu_bufs *)calloc((size_t)ngpus, sizeof(*bufs));
  if (bufs == NULL) return -1;
  for (int a = 0; a < ngpus; a++) {
    cudaDeviceProp p;
    struct gpu_bufs *x = &bufs[a];
    if (cudaSetDevice(a) != cudaSuccess || cudaGetDeviceProperties(&p, a) != cudaSuccess ||
        cudaMalloc(&x->src, bytes) != cudaSuccess || cudaMalloc(&x->dst, bytes) != cudaSuccess ||
        cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreate(&x->start) != cudaSuccess || cudaEventCreate(&x->stop) != cudaSuccess)
      return -1;
    cudaMemset(x->src, 1, bytes);
    fprintf(out, "Device: %d, %s, pciBusID: %x, pciDeviceID: %x, pciDomainID:%x\n", a, p.name,
            p.pciBusID, p.pciDeviceID, p.pciDomainID);
  }
  fprintf(out, "\nP2P Connectivity Matrix\n     D\\D");
  for (int b = 0; b < ngpus; b++) fprintf(out, " %5d", b);
  for (int a = 0; a < ngpus; a++) {
    fprintf(out, "\n %7d", a);
    for (int b = 0; b < ngpus; b++) {
      int ok = a == b;
      if (!ok) cudaDeviceCanAccessPeer(&ok, a, b);
      fprintf(out, " %5d", ok);
    }
  }
  fprintf(out, "\n");
  return 0;
}

extern "C" int weft_topo_measure(FILE *out, size_t bytes, int reps) {
  cudaError_t e = cudaGetDeviceCount(&ngpus);
  if (e != cudaSuccess || ngpus == 0) {
    fprintf(stderr, "weft-topo --measure: no GPU to measure (%s)\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "CUDA sees 0 devices");
    return 2;
  }
  bytes = (bytes + 15) / 16 * 16;
  fprintf(out, "[weft-topo --measure] %d GPU(s), %zu bytes per copy, %d repetitions\n", ngpus,
          bytes, reps);
  int rc = setup(out, bytes);
  if (rc == 0) rc = matrix(out, "Unidirectional P2P=Disabled Bandwidth (copy engine) Matrix (GB/s)", bytes, reps, MODE_CE, 0, 0);
  if (rc == 0) rc = matrix(out, "Bidirectional P2P=Disabled Bandwidth (copy engine) Matrix (GB/s)", bytes, reps, MODE_CE, 1, 0);
  if (rc == 0) rc = matrix(out, "P2P=Disabled Latency (copy engine) Matrix (us)", bytes, reps, MODE_CE, 0, 1);
  peer_access(1);
  if (rc == 0) rc = matrix(out, "Unidirectional P2P=Enabled Bandwidth (copy engine) Matrix (GB/s)", bytes, reps, MODE_CE, 0, 0);
  if (rc == 0) rc = matrix(out, "Bidirectional P2P=Enabled Bandwidth (copy engine) Matrix (GB/s)", bytes, reps, MODE_CE, 1, 0);
  if (rc == 0) rc = matrix(out, "Unidirectional P2P=Enabled Bandwidth (kernel copy) Matrix (GB/s)", bytes, reps, MODE_KERNEL, 0, 0);
  if (rc == 0) rc = matrix(out, "Bidirectional P2P=Enabled Bandwidth (kernel copy) Matrix (GB/s)", bytes, reps, MODE_KERNEL, 1, 0);
  if (rc == 0) rc = matrix(out, "P2P=Enabled Latency (copy engine) Matrix (us)", bytes, reps, MODE_CE, 0, 1);
  peer_access(0);
  if (rc == 0) rc = host_copies(out, bytes, reps);
  if (rc != 0) fprintf(stderr, "weft-topo --measure: a CUDA call failed: %s\n", cudaGetErrorString(cudaGetLastError()));
  return rc == 0 ? 0 : 1;
}
