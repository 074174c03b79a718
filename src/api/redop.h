/* Reduction operators of a communicator: the built-in ones and the
 * PreMulSum operators made by ncclRedOpCreatePreMulSum. */
#ifndef WEFT_API_REDOP_H
#define WEFT_API_REDOP_H

#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* One PreMulSum operator; op value ncclNumOps + its index in comm->redops. */
struct weft_redop {
  int live;
  ncclDataType_t datatype;
  ncclScalarResidence_t residence;
  const void *scalar_ptr; /* ncclScalarDevice: the caller's pointer */
  unsigned char value[8]; /* ncclScalarHostImmediate: the value, copied */
};

/* struct weft_redop_use, what a collective needs to know about its
 * operator, is in sched/schedule.h: the engines take it. */

/* Checks datatype and op for `caller` on comm: a built-in op, or a live
 * PreMulSum made on comm for this datatype; WARNs naming the argument. */
ncclResult_t weft_redop_check(const struct ncclComm *comm, const char *caller,
                              ncclDataType_t datatype, ncclRedOp_t op,
                              struct weft_redop_use *use_out);
/* Checks only the datatype (calls without an operator). */
ncclResult_t weft_dtype_check(const char *caller, ncclDataType_t datatype);

#endif
