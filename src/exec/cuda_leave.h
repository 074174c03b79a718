/* Ranks of a communicator that are threads of one process leave it in step
 * (exec/cuda_leave.c): the CUDA engine's destroy frees device and pinned
 * memory, and those frees wait for every kernel issued on the GPU. */
#ifndef WEFT_EXEC_CUDA_LEAVE_H
#define WEFT_EXEC_CUDA_LEAVE_H

#include <stdint.h>

#include "core/comm.h"
#include "nccl.h"

struct weft_cuda_leave;

/* Joins comm's ranks of this process (one bootstrap all-gather, made by
 * every rank). *out is NULL where this rank is the only one here; *index is
 * this rank's place among them. */
ncclResult_t weft_cuda_leave_join(struct ncclComm *comm, struct weft_cuda_leave **out, int *index);

/* The shared record of nlocal ranks (their ranks in ranks[]), each
 * holding a reference; join makes it (tests may too). NULL: no memory. */
struct weft_cuda_leave *weft_cuda_leave_new(int nlocal, const int *ranks);

/* Tells the others this rank (index among them) has launched ncolls
 * collectives. */
void weft_cuda_leave_issued(struct weft_cuda_leave *l, int index, uint64_t ncolls);

/* Tells the others this rank has launched a send to, or a receive from,
 * rank peer (nothing where peer is not here, or is this rank). */
void weft_cuda_leave_p2p(struct weft_cuda_leave *l, int index, int peer);

/* In destroy, once this rank's last launch has ended: unless abort, waits
 * until every other rank here has launched ncolls collectives and as many
 * sends and receives with this rank as this rank did with it, or is
 * leaving too (at most timeout_s seconds, then a WARN naming them). */
void weft_cuda_leave_wait(struct weft_cuda_leave *l, int index, uint64_t ncolls, int abort,
                          double timeout_s);

/* Lets go of the shared record (the last rank frees it). */
void weft_cuda_leave_release(struct weft_cuda_leave *l, int index);

#endif
