/* GPU suite: on a machine with a CUDA device, a device pointer given to a
 * host rank (WEFT_DEVICE=cpu: the communicator runs on host buffers) is
 * refused with a clear ncclInvalidArgument naming the call and the buffer,
 * and nothing runs; a host-buffer all-reduce on the same communicator still
 * works. Exits 77 (skip) when there is no GPU. */
#include <check.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suite_run.h"

static int have_gpu(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

START_TEST(test_device_pointer_refused) {
  ncclComm_t comm;
  int dev = 0;
  ck_assert_int_eq(ncclCommInitAll(&comm, 1, &dev), ncclSuccess);
  float *d = NULL;
  ck_assert_int_eq(cudaMalloc((void **)&d, 1024 * sizeof(float)), cudaSuccess);
  float host[1024];
  for (int i = 0; i < 1024; i++) host[i] = (float)i;
  ck_assert_int_eq(ncclAllReduce(d, host, 1024, ncclFloat, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  const char *msg = ncclGetLastError(comm);
  ck_assert_msg(
      strstr(msg, "ncclAllReduce") && strstr(msg, "sendbuff") && strstr(msg, "device memory"),
      "unexpected message: %s", msg);
  ck_assert_int_eq(ncclBroadcast(host, d, 1024, ncclFloat, 0, comm, NULL), ncclInvalidArgument);
  ck_assert_msg(strstr(ncclGetLastError(comm), "recvbuff") != NULL, "%s", ncclGetLastError(comm));
  /* Nothing was queued: a host all-reduce still gives the right answer. */
  ck_assert_int_eq(ncclAllReduce(host, host, 1024, ncclFloat, ncclSum, comm, NULL), ncclSuccess);
  for (int i = 0; i < 1024; i++) ck_assert_float_eq(host[i], (float)i);
  cudaFree(d);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

int main(void) {
  if (!have_gpu()) {
    printf("no CUDA device: skipping the GPU suite\n");
    return 77;
  }
  /* Host ranks, though a GPU is here: read once, at the first init. */
  setenv("WEFT_DEVICE", "cpu", 1);
  Suite *s = suite_create("gpu_args");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_device_pointer_refused);
  suite_add_tcase(s, tc);
  /* CUDA is already initialized here (the device query); a forked child
   * could not use it. */
  return suite_run_with(s, CK_NOFORK, CK_NORMAL);
}
