/* Reduction operators of a communicator: the built-in ones and the
 * PreMulSum operators made by ncclRedOpCreatePreMulSum. */
#ifndef WEFT_API_REDOP_H
#define WEFT_API_REDOP_H

#include "nccl.h"

struct ncclComm;

/* One PreMulSum operator; op value ncclNumOps + its index in comm->redops. */
struct weft_redop {
  int live;
  ncclDataType_t datatype;
  ncclScalarResidence_t residence;
  const void *scalar_ptr;   /* ncclScalarDevice: the caller's pointer */
  unsigned char value[8];   /* ncclScalarHostImmediate: the value, copied */
};

/* What a collective needs to know about its operator. */
struct weft_redop_use {
  int premul_sum;           /* 1: scale the input by the scalar, then sum */
  const void *scalar_ptr;   /* the caller's pointer, read when the op runs (or NULL) */
  unsigned char value[8];   /* the copied scalar when scalar_ptr is NULL */
};

/* Checks datatype and op for `caller` on comm: a built-in op, or a live
 * PreMulSum made on comm for this datatype; WARNs naming the argument. */
ncclResult_t weft_redop_check(const struct ncclComm *comm, const char *caller,
                              ncclDataType_t datatype, ncclRedOp_t op,
                              struct weft_redop_use *use_out);
/* Checks only the datatype (calls without an operator). */
ncclResult_t weft_dtype_check(const char *caller, ncclDataType_t datatype);

#endif
