/* ncclCommShrink's and ncclCommRevoke's core (core/shrink.c). */
#ifndef WEFT_CORE_SHRINK_H
#define WEFT_CORE_SHRINK_H

#include "nccl.h"

struct ncclComm;

/* Creates, from the parent's ranks not in exclude (nexclude entries, in
 * range, distinct, not this rank: the API layer has checked), a new
 * communicator of those ranks in parent order. Only the kept ranks call it,
 * and nothing here waits on an excluded one. flags: NCCL_SHRINK_*; with
 * NCCL_SHRINK_ABORT the parent's work in flight is abandoned first. async:
 * as weft_comm_create (*out set, ncclInProgress returned). */
ncclResult_t weft_comm_shrink(struct ncclComm *parent, const int *exclude, int nexclude, int flags,
                              const ncclConfig_t *config, int async, struct ncclComm **out);

/* Abandons comm's work in flight (its waits give up; returns once its
 * engine is idle) and marks it revoked (struct ncclComm, `revoked`). */
void weft_comm_revoke(struct ncclComm *comm);

#endif
