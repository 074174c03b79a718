/* Argument checks shared by the collective and point-to-point calls; each
 * WARNs naming the call, the argument and what was expected. */
#ifndef WEFT_API_CHECK_H
#define WEFT_API_CHECK_H

#include <stddef.h>

#include "nccl.h"

struct ncclComm;

/* nblocks blocks of count elements at p: a size that fits the address
 * space, non-NULL unless count is 0, and host memory (host ranks). */
ncclResult_t weft_check_buffer(const char *caller, const char *name, const void *p, size_t count,
                               ncclDataType_t datatype, int nblocks);
/* The same on comm: host ranks as above; CUDA-engine ranks (opt-in,
 * comm->host_engine == 0) need CUDA device memory instead. */
ncclResult_t weft_check_comm_buffer(const struct ncclComm *comm, const char *caller,
                                    const char *name, const void *p, size_t count,
                                    ncclDataType_t datatype, int nblocks);
/* CUDA-engine communicators: ncclInvalidUsage, naming it, for what that
 * engine does not run yet: fp8 (datatype) and PreMulSum (premul_sum != 0);
 * pass datatype ncclInt8 and 0 to check only for send/recv (p2p != 0). */
ncclResult_t weft_check_engine_supports(const struct ncclComm *comm, const char *caller,
                                        ncclDataType_t datatype, int premul_sum, int p2p);
/* A rank argument (root, peer) in 0..nranks-1. */
ncclResult_t weft_check_rank_arg(const char *caller, const char *name, int value,
                                 const struct ncclComm *comm);

#endif
