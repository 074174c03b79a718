/* One rank on the CUDA engine (exec/cuda_one.c), called by exec/cuda.c. */
#ifndef WEFT_EXEC_CUDA_ONE_H
#define WEFT_EXEC_CUDA_ONE_H

#include <cuda_runtime_api.h>

#include "exec/cuda.h"
#include "nccl.h"

/* coll on a communicator of one rank: one copy out of place (PreMulSum:
 * the scaling kernel), nothing in place. */
ncclResult_t weft_cuda_one_rank(struct ncclComm *comm, const struct weft_coll *coll,
                                const struct weft_cuda_premul *premul, cudaStream_t s);

/* A group of one rank's sends to itself and receives from itself as device
 * copies on s, device dev selected before the first (none: no CUDA call):
 * 1 when done (*res says how), 0 where the send/recv kernel must run it. */
int weft_cuda_one_rank_p2p(struct ncclComm *comm, const struct weft_cuda_p2p *p, cudaStream_t s,
                           int dev, ncclResult_t *res);

#endif
