/* GPU additions to the multi-rank harness (see gpu_harness.h). */
#include "gpu_harness.h"

#include <check.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "suite_run.h"

int gpu_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

int gpu_require_device(const char *suite) {
  int n = gpu_device_count();
  if (n > 0) return n;
  printf("%s: no CUDA device: skipped\n", suite);
  fflush(stdout);
  exit(77);
}

int gpu_mps_enabled(int dev) {
  int on = 0;
  if (cudaDeviceGetAttribute(&on, cudaDevAttrMpsEnabled, dev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return on != 0;
}

const char *gpu_error_string(int err) {
  return cudaGetErrorString((cudaError_t)err);
}

/* The failure lines of a worker's stderr, in order, into why. */
static void collect_failures(const char *text, char *why, size_t why_len) {
  const char *line = text;
  while (line != NULL && *line != '\0') {
    const char *end = strchr(line, '\n');
    size_t n = end != NULL ? (size_t)(end - line) : strlen(line);
    if (strncmp(line, "FAIL", 4) == 0 || strncmp(line, "[harness", 8) == 0 ||
        strncmp(line, "harness:", 8) == 0)
      harness_append(why, why_len, "\n  %.*s", (int)(n < 600 ? n : 600), line);
    line = end != NULL ? end + 1 : NULL;
  }
}

int gpu_worker(char *const argv[], const char *const env[], int timeout_s, char *why,
               size_t why_len) {
  char err_path[128];
  snprintf(err_path, sizeof err_path, "/tmp/weft-gpu-worker-%d.err", (int)getpid());
  why[0] = '\0';
  int st = harness_exec_self(argv, env, NULL, err_path, timeout_s, NULL);
  char *err = harness_read_file(err_path);
  unlink(err_path);
  if (err != NULL) {
    fputs(err, stderr);
    fflush(stderr);
  }
  int ok = st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (!ok) {
    if (st == -1)
      harness_append(why, why_len, "did not finish in %d s (killed) or could not start", timeout_s);
    else if (WIFSIGNALED(st))
      harness_append(why, why_len, "died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
      harness_append(why, why_len, "exited with status %d", WEXITSTATUS(st));
    if (err != NULL) collect_failures(err, why, why_len);
  }
  free(err);
  return ok ? 0 : 1;
}

int gpu_procs_suite_main(const char *name, int procs, const TTest *fn, int n) {
  int ndev = gpu_require_device(name);
  if (ndev < procs && !gpu_mps_enabled(0)) {
    printf(
        "%s: processes share GPU 0 and MPS does not serve it (start nvidia-cuda-mps-control -d): "
        "skipped\n",
        name);
    return 77;
  }
  Suite *s = suite_create(name);
  TCase *tc = tcase_create("cases");
  tcase_add_loop_test(tc, fn, 0, n);
  suite_add_tcase(s, tc);
  return suite_run_nofork(s);
}
