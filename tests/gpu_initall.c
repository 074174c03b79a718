/* See gpu_initall.h. */
#include "gpu_initall.h"

#include <check.h>
#include <stdlib.h>

void ranks_open(struct ranks *rs, int n) {
  int devs[MAXR] = {0, 0, 0, 0};
  rs->n = n;
  ck_assert_int_eq(ncclCommInitAll(rs->comms, n, devs), ncclSuccess);
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(cudaStreamCreateWithFlags(&rs->streams[r], cudaStreamNonBlocking),
                     cudaSuccess);
}

void ranks_sync(struct ranks *rs) {
  for (int r = 0; r < rs->n; r++)
    ck_assert_int_eq(cudaStreamSynchronize(rs->streams[r]), cudaSuccess);
  for (int r = 0; r < rs->n; r++) {
    ncclResult_t err = ncclInProgress;
    ck_assert_int_eq(ncclCommGetAsyncError(rs->comms[r], &err), ncclSuccess);
    ck_assert_msg(err == ncclSuccess, "rank %d: %s", r, ncclGetLastError(rs->comms[r]));
  }
}

void ranks_close(struct ranks *rs, int abort) {
  for (int r = 0; r < rs->n; r++) {
    ck_assert_int_eq(abort ? ncclCommAbort(rs->comms[r]) : ncclCommDestroy(rs->comms[r]),
                     ncclSuccess);
    cudaStreamDestroy(rs->streams[r]);
  }
}

float *dev_alloc(size_t count) {
  float *p = NULL;
  ck_assert_int_eq(cudaMalloc((void **)&p, (count ? count : 1) * sizeof(float)), cudaSuccess);
  ck_assert_int_eq(cudaMemset(p, 0xff, (count ? count : 1) * sizeof(float)), cudaSuccess);
  return p;
}

size_t kernel_nodes(cudaGraph_t g) {
  size_t n = 0;
  ck_assert_int_eq(cudaGraphGetNodes(g, NULL, &n), cudaSuccess);
  cudaGraphNode_t *nodes = calloc(n ? n : 1, sizeof(*nodes));
  ck_assert_ptr_nonnull(nodes);
  ck_assert_int_eq(cudaGraphGetNodes(g, nodes, &n), cudaSuccess);
  size_t kernels = 0;
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType t;
    ck_assert_int_eq(cudaGraphNodeGetType(nodes[i], &t), cudaSuccess);
    kernels += t == cudaGraphNodeTypeKernel;
  }
  free(nodes);
  return kernels;
}
