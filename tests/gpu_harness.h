/* What the GPU suites add to the multi-rank harness: the device check that
 * decides skip (77), a CUDA check for rank functions, and workers: this
 * test binary run again as a fresh process, so each piece of the matrix
 * gets its own environment (weft reads NCCL_ALGO and friends once per
 * process) and its own CUDA state (CUDA does not survive fork, so ranks
 * that are processes must be forked before the process touches CUDA). */
#ifndef WEFT_TESTS_GPU_HARNESS_H
#define WEFT_TESTS_GPU_HARNESS_H

#include <check.h>
#include <stddef.h>

#include "harness.h"

/* CUDA devices this process sees; 0 when there is no driver or device.
 * Initializes CUDA in the caller: a process that will fork ranks must not
 * call it (workers do, the Check driver may). */
int gpu_device_count(void);

/* Exits 77 (meson's skip) with a line saying why when there is no GPU;
 * otherwise returns the number of devices. */
int gpu_require_device(const char *suite);

/* 1 when MPS serves device dev (contexts of separate processes then run
 * kernels at the same time), 0 when not or unknown. */
int gpu_mps_enabled(int dev);

/* main() of a suite of n cases (Check loop test fn, run in this process:
 * each case forks its rank processes) whose procs ranks are processes on
 * GPUs rank % count: exits 77, saying why, without a device or where
 * fewer than procs GPUs mean processes share GPU 0 and MPS does not serve
 * it. Returns the exit status. */
int gpu_procs_suite_main(const char *name, int procs, const TTest *fn, int n);

/* Fails the current rank function unless call returns cudaSuccess. */
#define HCUDA(call)                                                               \
  do {                                                                            \
    int hcuda_err_ = (int)(call);                                                 \
    if (hcuda_err_ != 0)                                                          \
      return harness_fail(__FILE__, __LINE__, "%s -> %d (%s)", #call, hcuda_err_, \
                          gpu_error_string(hcuda_err_));                          \
  } while (0)

/* cudaGetErrorString, for code that does not include the CUDA headers. */
const char *gpu_error_string(int err);

/* Runs this binary again with argv and env (see harness_exec_self), its
 * stderr kept in a file. The file is copied to this process's stderr, so
 * the test log holds everything; the lines that report failures (those
 * from harness_fail and lines starting "FAIL") go to why, for the Check
 * message. Returns 0 when the worker exited 0, else 1 (why says how it
 * ended). */
int gpu_worker(char *const argv[], const char *const env[], int timeout_s, char *why,
               size_t why_len);

#endif
