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
/* The same on comm: host ranks as above; ranks that take device buffers
 * (comm->engine->device_buffers) need memory their GPU can use:
 * device memory of that GPU, managed memory, mapped host memory, or any
 * host memory where the GPU reads pageable memory (HMM, ATS). Device
 * memory of another GPU is refused. */
ncclResult_t weft_check_comm_buffer(const struct ncclComm *comm, const char *caller,
                                    const char *name, const void *p, size_t count,
                                    ncclDataType_t datatype, int nblocks);
/* The same for a call's second buffer once its first (checked) passed:
 * in place (p == checked) only the extent is checked, the GPU is not asked
 * about the same address twice (it costs an in-place call on one rank,
 * which launches nothing, a fifth of its time). */
ncclResult_t weft_check_comm_buffer_after(const struct ncclComm *comm, const char *caller,
                                          const char *name, const void *p, size_t count,
                                          ncclDataType_t datatype, int nblocks,
                                          const void *checked);
/* A collective's two buffers, of send_bytes and recv_bytes: either in place
 * (sendbuff == recvbuff + in_place_at bytes; `in_place` says so for the
 * message, "sendbuff == recvbuff" say) or not overlapping at all. A
 * partial overlap would have the call read what it already wrote. */
ncclResult_t weft_check_overlap(const char *caller, const void *sendbuff, size_t send_bytes,
                                const void *recvbuff, size_t recv_bytes, ptrdiff_t in_place_at,
                                const char *in_place);
/* Ranks that take device buffers: stream must belong to the rank's GPU
 * (NULL, cudaStreamLegacy and cudaStreamPerThread always do). Host ranks
 * ignore the stream. Needs CUDA 12.8 (cudaStreamGetDevice); older builds
 * accept every stream. */
ncclResult_t weft_check_comm_stream(const struct ncclComm *comm, const char *caller,
                                    cudaStream_t stream);
/* ncclInvalidUsage, naming it, for what comm's engine does not run: a
 * datatype, PreMulSum (premul_sum != 0) or send/recv (p2p != 0; pass
 * datatype ncclInt8 and 0 to check only that). Every engine runs all of
 * them now, so it refuses nothing. */
ncclResult_t weft_check_engine_supports(const struct ncclComm *comm, const char *caller,
                                        ncclDataType_t datatype, int premul_sum, int p2p);
/* A rank argument (root, peer) in 0..nranks-1. */
ncclResult_t weft_check_rank_arg(const char *caller, const char *name, int value,
                                 const struct ncclComm *comm);

#endif
