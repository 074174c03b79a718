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
/* A rank argument (root, peer) in 0..nranks-1. */
ncclResult_t weft_check_rank_arg(const char *caller, const char *name, int value,
                                 const struct ncclComm *comm);

#endif
