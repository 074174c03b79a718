/* weft-stream-probe: which CUDA calls hold back work on other streams
 * while one stream waits. The staged path (src/exec/cuda_staged.c) parks
 * a rank's stream on cuStreamWaitValue32 until the host engine has run the
 * task, which needs the peers' work; a call of another thread that made
 * work queued after it wait for that stream would stall every rank
 * (docs/CUDA.md, "Known problems", `gpu staged`).
 *
 * For each call: stream A waits on a host-mapped word; another thread
 * makes the call, then queues a write of a second word on stream B. The
 * main thread watches the second word for --window seconds, then releases
 * A. A line per call says whether the call returned within the window and
 * whether B's write ran while A waited ("ran") or only after ("HELD BACK").
 * The first line (no call) is the control. Two rounds.
 *
 *   weft-stream-probe [--window SECONDS]    (default 0.5; GPU 0)
 *
 * Exit 0 when every line could be measured, 1 when a CUDA call failed,
 * 2 on usage, 77 without a GPU. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef CUresult (*wait_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
typedef CUresult (*write_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned);

enum call {
  CALL_NONE,
  CALL_HOST_ALLOC_64K,
  CALL_HOST_ALLOC_4M,
  CALL_MALLOC_HOST_4M,
  CALL_HOST_REGISTER_4M,
  CALL_MALLOC_4M,
  CALL_MALLOC_256M,
  CALL_MEMSET_SYNC,
  CALL_MEMCPY_PAGEABLE,
  CALL_EVENT_CREATE,
  CALL_STREAM_CREATE,
  CALL_MALLOC_ASYNC,
  CALL_FREE,
  CALL_FREE_HOST,
  CALL_COUNT
};

static const char *const call_names[CALL_COUNT] = {"(none: the control)",
                                                   "cudaHostAlloc 64 KiB",
                                                   "cudaHostAlloc 4 MiB",
                                                   "cudaMallocHost 4 MiB",
                                                   "cudaHostRegister 4 MiB",
                                                   "cudaMalloc 4 MiB",
                                                   "cudaMalloc 256 MiB",
                                                   "cudaMemset (sync)",
                                                   "cudaMemcpy from pageable",
                                                   "cudaEventCreate",
                                                   "cudaStreamCreate",
                                                   "cudaMallocAsync",
                                                   "cudaFree",
                                                   "cudaFreeHost"};

struct probe {
  volatile uint32_t *held, *mark; /* host-mapped words */
  CUdeviceptr held_dev, mark_dev;
  cudaStream_t a, b;
  void *dev_buf; /* 1 MiB of device memory for the memset and copy */
  wait_fn wait32;
  write_fn write32;
  enum call call;
  volatile int returned;
  double call_s;
  cudaError_t call_err;
  CUresult write_err;
};

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&t, NULL);
}

/* Makes the call; what it allocates is kept until the process ends (a
 * free here would be another call that may wait). */
static cudaError_t make_call(struct probe *p) {
  void *m = NULL;
  char small[4096] = {0};
  switch (p->call) {
    case CALL_NONE: return cudaSuccess;
    case CALL_HOST_ALLOC_64K: return cudaHostAlloc(&m, 64 << 10, cudaHostAllocPortable);
    case CALL_HOST_ALLOC_4M: return cudaHostAlloc(&m, 4 << 20, cudaHostAllocPortable);
    case CALL_MALLOC_HOST_4M: return cudaMallocHost(&m, 4 << 20);
    case CALL_HOST_REGISTER_4M:
      m = malloc(4 << 20);
      return m == NULL ? cudaErrorMemoryAllocation
                       : cudaHostRegister(m, 4 << 20, cudaHostRegisterPortable);
    case CALL_MALLOC_4M: return cudaMalloc(&m, 4 << 20);
    case CALL_MALLOC_256M: return cudaMalloc(&m, (size_t)256 << 20);
    case CALL_MEMSET_SYNC: return cudaMemset(p->dev_buf, 0, 1 << 20);
    case CALL_MEMCPY_PAGEABLE:
      return cudaMemcpy(p->dev_buf, small, sizeof(small), cudaMemcpyHostToDevice);
    case CALL_EVENT_CREATE: {
      cudaEvent_t e;
      return cudaEventCreate(&e);
    }
    case CALL_STREAM_CREATE: {
      cudaStream_t s;
      return cudaStreamCreate(&s);
    }
    case CALL_MALLOC_ASYNC: return cudaMallocAsync(&m, 1 << 20, p->b);
    case CALL_FREE: {
      cudaError_t err = cudaMalloc(&m, 1 << 20);
      return err != cudaSuccess ? err : cudaFree(m);
    }
    case CALL_FREE_HOST: {
      cudaError_t err = cudaHostAlloc(&m, 1 << 20, 0);
      return err != cudaSuccess ? err : cudaFreeHost(m);
    }
    default: return cudaErrorInvalidValue;
  }
}

static void *caller_main(void *arg) {
  struct probe *p = arg;
  double t0 = now_s();
  p->call_err = make_call(p);
  p->call_s = now_s() - t0;
  p->returned = 1;
  p->write_err = p->write32((CUstream)p->b, p->mark_dev, 1, CU_STREAM_WRITE_VALUE_DEFAULT);
  return NULL;
}

static int driver_fn(const char *name, void **out) {
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, out, 11070, cudaEnableDefault, &q);
#else
  cudaError_t err = cudaGetDriverEntryPoint(name, out, cudaEnableDefault, &q);
#endif
  if (err != cudaSuccess || q != cudaDriverEntryPointSuccess || *out == NULL) {
    fprintf(stderr, "weft-stream-probe: the driver has no %s\n", name);
    return 1;
  }
  return 0;
}

static int setup(struct probe *p) {
  void *w = NULL, *wd = NULL;
  if (cudaSetDevice(0) != cudaSuccess || cudaFree(NULL) != cudaSuccess) return 1;
  if (driver_fn("cuStreamWaitValue32", (void **)&p->wait32) ||
      driver_fn("cuStreamWriteValue32", (void **)&p->write32))
    return 1;
  if (cudaHostAlloc(&w, 128, cudaHostAllocMapped) != cudaSuccess ||
      cudaHostGetDevicePointer(&wd, w, 0) != cudaSuccess)
    return 1;
  p->held = w;
  p->mark = (volatile uint32_t *)((char *)w + 64);
  p->held_dev = (CUdeviceptr)(uintptr_t)wd;
  p->mark_dev = p->held_dev + 64;
  if (cudaStreamCreateWithFlags(&p->a, cudaStreamNonBlocking) != cudaSuccess ||
      cudaStreamCreateWithFlags(&p->b, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc(&p->dev_buf, 1 << 20) != cudaSuccess)
    return 1;
  return 0;
}

/* One line: 0 measured, 1 a CUDA call failed. */
static int probe_one(struct probe *p, enum call call, double window) {
  *p->held = 0;
  *p->mark = 0;
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  p->call = call;
  p->returned = 0;
  CUresult r = p->wait32((CUstream)p->a, p->held_dev, 1, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    fprintf(stderr, "weft-stream-probe: cuStreamWaitValue32: error %d\n", (int)r);
    return 1;
  }
  sleep_s(0.02); /* the wait reaches the GPU */
  pthread_t t;
  if (pthread_create(&t, NULL, caller_main, p) != 0) return 1;
  double t0 = now_s();
  int ran = 0;
  while (now_s() - t0 < window && !ran) {
    ran = *p->mark == 1;
    if (!ran) sleep_s(1e-4);
  }
  int returned = p->returned;
  *p->held = 1; /* release A */
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  pthread_join(t, NULL);
  cudaError_t sa = cudaStreamSynchronize(p->a), sb = cudaStreamSynchronize(p->b);
  printf("%-26s call %s (%.3f s); work queued after it on another stream while one waits: %s\n",
         call_names[call], returned ? "returned" : "BLOCKED", p->call_s, ran ? "ran" : "HELD BACK");
  if (p->call_err != cudaSuccess || p->write_err != CUDA_SUCCESS || sa != cudaSuccess ||
      sb != cudaSuccess) {
    fprintf(stderr, "weft-stream-probe: %s: %s; write %d; streams %s / %s\n", call_names[call],
            cudaGetErrorString(p->call_err), (int)p->write_err, cudaGetErrorString(sa),
            cudaGetErrorString(sb));
    return 1;
  }
  return 0;
}

int main(int argc, char **argv) {
  double window = 0.5;
  for (int i = 1; i < argc; i++) {
    char *end = NULL;
    if (strcmp(argv[i], "--window") == 0 && i + 1 < argc) {
      window = strtod(argv[++i], &end);
      if (*end == '\0' && window > 0 && window <= 60) continue;
    }
    fprintf(stderr, "usage: weft-stream-probe [--window SECONDS (0-60]]\n");
    return 2;
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    printf("weft-stream-probe: no GPU: skipped\n");
    return 77;
  }
  struct probe p;
  memset(&p, 0, sizeof(p));
  if (setup(&p)) {
    fprintf(stderr, "weft-stream-probe: setup failed: %s\n",
            cudaGetErrorString(cudaGetLastError()));
    return 1;
  }
  int bad = 0;
  for (int round = 0; round < 2; round++)
    for (int c = 0; c < CALL_COUNT; c++) bad |= probe_one(&p, (enum call)c, window);
  return bad;
}
