/* The calling thread's group of pending operations. */
#ifndef WEFT_API_GROUP_H
#define WEFT_API_GROUP_H

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* Adds one checked operation; outside a group it runs at once and this
 * returns when it has finished. */
ncclResult_t weft_group_add(struct ncclComm *comm, const struct weft_coll *coll);

#endif
