/* Ranks of one process on GPU 0 for the GPU suites that drive every rank
 * from one thread (test_gpu_engine.c, test_gpu_p2p.c): the communicators
 * from ncclCommInitAll, a non-blocking stream each, and the helpers those
 * suites share. Failures are Check assertions. */
#ifndef WEFT_TESTS_GPU_INITALL_H
#define WEFT_TESTS_GPU_INITALL_H

#include <cuda_runtime.h>
#include <stddef.h>

#include "nccl.h"

#define MAXR 4

struct ranks {
  int n;
  ncclComm_t comms[MAXR];
  cudaStream_t streams[MAXR];
};

void ranks_open(struct ranks *rs, int n);
/* Waits for every rank's stream, then asserts no communicator failed. */
void ranks_sync(struct ranks *rs);
/* Destroys (abort: aborts) every communicator and its stream. */
void ranks_close(struct ranks *rs, int abort);
/* count floats of device memory, all bits set (NaN): a missed write shows. */
float *dev_alloc(size_t count);
/* Kernel nodes in a captured graph. */
size_t kernel_nodes(cudaGraph_t g);

#endif
