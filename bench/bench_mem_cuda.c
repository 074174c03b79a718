/* GPU ranks' buffers: cudaMalloc'd memory, one stream per rank, copies
 * and waits on that stream, as nccl-tests does. Built only when Meson finds
 * CUDA (WEFT_BENCH_CUDA). Also here: whether there is a device at all
 * (probed in a child process), and the device's own copy bandwidth, the
 * memory roofline printed next to busbw.
 *
 * Several ranks may share a GPU (weft allows it; NCCL does not): the rank
 * with local index i uses device i % (devices this process sees). */
#include <cuda_runtime.h>
#include <errno.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_weft.h"

/* Timed copies for the roofline, after two untimed ones. */
#define COPY_BW_ITERS 20
/* The smallest copy worth timing, when memory is short. */
#define COPY_BW_MIN_BYTES ((size_t)64 << 20)

static int cuda_check(cudaError_t err, const char *what) {
  if (err == cudaSuccess) return 0;
  fprintf(stderr, "weft-bench: %s failed: %s\n", what, cudaGetErrorString(err));
  return -1;
}

/* The device a local index maps to; -1 (and a message) when none. */
static int device_of(int local_index) {
  int ndev = 0;

  if (cuda_check(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount")) return -1;
  if (ndev < 1) {
    fprintf(stderr, "weft-bench: cudaGetDeviceCount found no device\n");
    return -1;
  }
  return local_index % ndev;
}

static int cuda_bind(int local_index) {
  int dev = device_of(local_index);

  if (dev < 0) return -1;
  return cuda_check(cudaSetDevice(dev), "cudaSetDevice");
}

static int cuda_stream_create(cudaStream_t *stream_out) {
  return cuda_check(cudaStreamCreateWithFlags(stream_out, cudaStreamNonBlocking),
                    "cudaStreamCreateWithFlags");
}

static void cuda_stream_destroy(cudaStream_t stream) {
  if (stream) cudaStreamDestroy(stream);
}

static int cuda_alloc(void **ptr_out, size_t bytes) {
  cudaError_t err = cudaMalloc(ptr_out, bytes ? bytes : 1);

  if (err == cudaSuccess) return 0;
  fprintf(stderr, "weft-bench: cudaMalloc of %zu bytes failed: %s\n", bytes,
          cudaGetErrorString(err));
  return -1;
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

/* nccl-tests' device line: index, [domain:bus:device], name. */
static void cuda_describe(int local_index, struct bench_rank_info *info) {
  struct cudaDeviceProp prop;
  int dev = device_of(local_index);

  info->device = dev;
  if (dev < 0 || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) return;
  snprintf(info->label, sizeof(info->label), "%04x:%02x:%02x", (unsigned)prop.pciDomainID & 0xffff,
           (unsigned)prop.pciBusID & 0xff, (unsigned)prop.pciDeviceID & 0xff);
  snprintf(info->devname, sizeof(info->devname), "%.*s", (int)sizeof(info->devname) - 1, prop.name);
}

/* Two buffers of the largest size up to max_bytes that fits, halving on
 * failure: the roofline should not fail a run where memory is tight. */
static size_t copy_buffers(size_t max_bytes, void **src, void **dst) {
  for (size_t bytes = max_bytes; bytes >= COPY_BW_MIN_BYTES; bytes /= 2) {
    *src = *dst = NULL;
    if (cudaMalloc(src, bytes) == cudaSuccess && cudaMalloc(dst, bytes) == cudaSuccess)
      return bytes;
    cudaGetLastError(); /* out of memory is not sticky; clear it anyway */
    if (*src) cudaFree(*src);
    *src = NULL;
  }
  fprintf(stderr, "weft-bench: no device memory for two %zu-byte copy buffers\n",
          COPY_BW_MIN_BYTES);
  return 0;
}

/* Times back-to-back cudaMemcpyAsync D2D copies with events on one stream;
 * every copy reads bytes and writes bytes. */
static int time_copies(void *dst, void *src, size_t bytes, double *sec_out) {
  cudaStream_t s = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  float ms = 0;
  int rc = -1;

  if (cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
      cuda_check(cudaEventCreate(&start), "cudaEventCreate") ||
      cuda_check(cudaEventCreate(&stop), "cudaEventCreate"))
    goto out;
  /* Touch the source once, so no first-use cost lands in the timing. */
  if (cuda_check(cudaMemsetAsync(src, 0x5a, bytes, s), "cudaMemsetAsync")) goto out;
  for (int i = 0; i < 2 + COPY_BW_ITERS; i++) {
    if (i == 2 && cuda_check(cudaEventRecord(start, s), "cudaEventRecord")) goto out;
    if (cuda_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s),
                   "cudaMemcpyAsync (device to device)"))
      goto out;
  }
  if (cuda_check(cudaEventRecord(stop, s), "cudaEventRecord") ||
      cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize") ||
      cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime"))
    goto out;
  *sec_out = (double)ms * 1e-3 / COPY_BW_ITERS;
  rc = 0;
out:
  if (stop) cudaEventDestroy(stop);
  if (start) cudaEventDestroy(start);
  if (s) cudaStreamDestroy(s);
  return rc;
}

static int cuda_copy_bw(int local_index, size_t max_bytes, struct bench_copy_bw *out) {
  struct cudaDeviceProp prop;
  void *src = NULL, *dst = NULL;
  double sec = 0;
  int dev = device_of(local_index);
  size_t bytes;

  if (dev < 0 || cuda_check(cudaSetDevice(dev), "cudaSetDevice")) return -1;
  bytes = copy_buffers(max_bytes, &src, &dst);
  if (bytes == 0) return -1;
  int rc = time_copies(dst, src, bytes, &sec);
  cudaFree(src);
  cudaFree(dst);
  if (rc != 0 || sec <= 0) return -1;
  memset(out, 0, sizeof(*out));
  out->bytes = bytes;
  out->device = dev;
  out->gbps = 2.0 * (double)bytes / sec / 1e9;
  if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
    snprintf(out->devname, sizeof(out->devname), "%.*s", (int)sizeof(out->devname) - 1, prop.name);
  return 0;
}

static int cuda_mem_used(int local_index, double *bytes_out) {
  size_t free_bytes = 0, total = 0;

  if (cuda_bind(local_index) != 0 ||
      cuda_check(cudaMemGetInfo(&free_bytes, &total), "cudaMemGetInfo (-M)"))
    return -1;
  *bytes_out = (double)(total - free_bytes);
  return 0;
}

/* Thread-local capture: other threads' ranks capture at the same time. */
static int cuda_graph_begin(cudaStream_t stream) {
  return cuda_check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
                    "cudaStreamBeginCapture (-G)");
}

static int cuda_graph_end(cudaStream_t stream, void **graph_out) {
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  int rc = cuda_check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture (-G)");

  if (rc == 0) rc = cuda_check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate (-G)");
  if (graph) cudaGraphDestroy(graph);
  *graph_out = rc == 0 ? (void *)exec : NULL;
  return rc;
}

static int cuda_graph_launch(void *graph, cudaStream_t stream) {
  return cuda_check(cudaGraphLaunch((cudaGraphExec_t)graph, stream), "cudaGraphLaunch (-G)");
}

static void cuda_graph_free(void *graph) {
  cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

const struct bench_mem_ops bench_mem_cuda = {
    .name = "cuda",
    .header =
        "# Buffers: CUDA device memory (cudaMalloc), one stream per rank; time: wall clock "
        "over the iterations, after cudaStreamSynchronize\n",
    .bind = cuda_bind,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .upload = cuda_copy,
    .download = cuda_copy,
    .sync = cuda_sync,
    .describe = cuda_describe,
    .copy_bw = cuda_copy_bw,
    .mem_used = cuda_mem_used,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_launch = cuda_graph_launch,
    .graph_free = cuda_graph_free,
};

/* ---- Is there a device? ----------------------------------------------------
 *
 * CUDA does not survive fork: a process that has initialized it cannot
 * use it in a forked child. weft-bench forks its ranks, so the parent must
 * not touch CUDA; a throwaway child asks instead and writes the answer
 * down a pipe. */

struct probe_answer {
  int ndev;
  char why[200];
};

static void probe_child(int fd) {
  struct probe_answer ans;
  cudaError_t err;

  memset(&ans, 0, sizeof(ans));
  err = cudaGetDeviceCount(&ans.ndev);
  if (err != cudaSuccess) {
    ans.ndev = 0;
    snprintf(ans.why, sizeof(ans.why), "cudaGetDeviceCount: %s", cudaGetErrorString(err));
  } else if (ans.ndev == 0) {
    snprintf(ans.why, sizeof(ans.why), "cudaGetDeviceCount found 0 devices");
  }
  /* One write below PIPE_BUF is atomic; _exit skips the parent's stdio. */
  if (write(fd, &ans, sizeof(ans)) != (ssize_t)sizeof(ans)) _exit(1);
  _exit(0);
}

int bench_mem_cuda_probe(char *why, size_t len) {
  struct probe_answer ans;
  size_t got = 0;
  int fd[2], status;
  pid_t pid;

  if (pipe(fd) != 0) {
    snprintf(why, len, "cannot probe for devices: pipe: %s", strerror(errno));
    return 0;
  }
  fflush(NULL); /* nothing buffered is printed twice */
  pid = fork();
  if (pid == 0) {
    close(fd[0]);
    probe_child(fd[1]);
  }
  close(fd[1]);
  if (pid < 0) {
    snprintf(why, len, "cannot probe for devices: fork: %s", strerror(errno));
    close(fd[0]);
    return 0;
  }
  while (got < sizeof(ans)) {
    ssize_t n = read(fd[0], (char *)&ans + got, sizeof(ans) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(fd[0]);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (got < sizeof(ans)) {
    snprintf(why, len, "the process that asked CUDA for devices died without an answer");
    return 0;
  }
  ans.why[sizeof(ans.why) - 1] = '\0';
  snprintf(why, len, "%s", ans.why);
  return ans.ndev;
}
