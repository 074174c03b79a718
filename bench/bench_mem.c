/* Where a rank's buffers live, and which kind a run uses.
 *
 * Host ranks (weft's host engine) take plain host memory and ignore the
 * stream: a call returns once its result is in the buffer, so copies are
 * memcpy and sync has nothing to wait for. GPU ranks are the table in
 * bench_mem_cuda.c, built when Meson finds CUDA (WEFT_BENCH_CUDA).
 *
 * The choice is made once, in the parent before any rank starts: --cpu or
 * WEFT_DEVICE=cpu give host ranks; otherwise GPU ranks where a CUDA device
 * is found (--gpu makes its absence an error), else host ranks. Host ranks
 * always run with WEFT_DEVICE=cpu, so on a machine with a GPU the library
 * treats them as host ranks too, as the bench does. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>

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

/* -M on host ranks: this process's resident memory. */
static int host_mem_used(int local_index, double *bytes_out) {
  long pages = 0, resident = 0;
  FILE *f = fopen("/proc/self/statm", "r");

  (void)local_index;
  if (!f) return -1;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
  fclose(f);
  if (resident < 0) return -1;
  *bytes_out = (double)resident * (double)sysconf(_SC_PAGESIZE);
  return 0;
}

const struct bench_mem_ops bench_mem_host = {
    .name = "host",
    .header = NULL,
    .bind = host_bind,
    .stream_create = host_stream_create,
    .stream_destroy = host_stream_destroy,
    .alloc = host_alloc,
    .release = host_release,
    .upload = host_copy,
    .download = host_copy,
    .sync = host_sync,
    .describe = host_describe,
    .copy_bw = NULL,
    .mem_used = host_mem_used,
};

static int env_says_cpu(void) {
  const char *d = getenv("WEFT_DEVICE");
  return d != NULL && strcasecmp(d, "cpu") == 0;
}

/* Host ranks: the library must see WEFT_DEVICE=cpu before its first call,
 * in this process and in every rank forked from it. */
static int choose_host(struct bench_args *a) {
  a->use_gpu = 0;
  if (setenv("WEFT_DEVICE", "cpu", 1) != 0) {
    perror("weft-bench: setenv WEFT_DEVICE");
    return -1;
  }
  return 0;
}

int bench_mem_choose(struct bench_args *a) {
  if (a->force_cpu) return choose_host(a);
  if (env_says_cpu()) {
    if (!a->force_gpu) return choose_host(a);
    fprintf(stderr,
            "weft-bench: --gpu, but WEFT_DEVICE=cpu in the environment makes every rank a host "
            "rank: unset WEFT_DEVICE, or drop --gpu\n");
    return -1;
  }
#if WEFT_BENCH_CUDA
  char why[256];
  if (bench_mem_cuda_probe(why, sizeof(why)) > 0) {
    a->use_gpu = 1;
    return 0;
  }
  if (a->force_gpu) {
    fprintf(stderr, "weft-bench: --gpu, but there is no CUDA device: %s\n", why);
    return -1;
  }
  fprintf(stderr,
          "weft-bench: no CUDA device (%s); running host ranks on host buffers "
          "(--cpu skips this check)\n",
          why);
#else
  if (a->force_gpu) {
    fprintf(stderr,
            "weft-bench: --gpu, but this weft-bench was built without CUDA: rebuild with the "
            "CUDA toolkit installed (meson setup -Dcuda=enabled)\n");
    return -1;
  }
#endif
  return choose_host(a);
}

const struct bench_mem_ops *bench_mem_get(const struct bench_args *a) {
#if WEFT_BENCH_CUDA
  if (a->use_gpu) return &bench_mem_cuda;
#else
  (void)a;
#endif
  return &bench_mem_host;
}
