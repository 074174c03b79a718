/* ncclRedOpCreatePreMulSum and ncclRedOpDestroy: a per-communicator table
 * of PreMulSum operators, and the operator check every reducing call makes.
 * Slots of destroyed operators are reused, as NCCL does, so a program that
 * makes one per call (PyTorch does) keeps a small table. */
#include "api/redop.h"

#include <stdlib.h>
#include <string.h>

#include "api/alias.h"
#include "base/check.h"
#include "core/comm.h"
#include "base/dtype.h"

ncclResult_t weft_dtype_check(const char *caller, ncclDataType_t datatype) {
  if ((int)datatype < 0 || (int)datatype >= ncclNumTypes) {
    WARN("%s: datatype is %d, expected an ncclDataType_t in 0..%d", caller, (int)datatype,
         ncclNumTypes - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The live PreMulSum behind op on comm, or NULL. */
static const struct weft_redop *redop_find(const struct ncclComm *comm, ncclRedOp_t op) {
  if ((int)op < ncclNumOps) return NULL;
  long idx = (long)op - ncclNumOps;
  if (idx >= comm->nredops || !comm->redops[idx].live) return NULL;
  return &comm->redops[idx];
}

ncclResult_t weft_redop_check(const struct ncclComm *comm, const char *caller,
                              ncclDataType_t datatype, ncclRedOp_t op,
                              struct weft_redop_use *use_out) {
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  memset(use_out, 0, sizeof(*use_out));
  if ((int)op >= 0 && (int)op < ncclNumOps) return ncclSuccess;
  const struct weft_redop *r = (int)op > 0 ? redop_find(comm, op) : NULL;
  if (r == NULL) {
    WARN("%s: op is %d, expected ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg (0..%d) or a "
         "live ncclRedOpCreatePreMulSum operator of this communicator (none is %d)",
         caller, (int)op, ncclNumOps - 1, (int)op);
    return ncclInvalidArgument;
  }
  if (r->datatype != datatype) {
    WARN("%s: op %d is a PreMulSum made for datatype %s, used with datatype %s", caller,
         (int)op, weft_dtype_name(r->datatype), weft_dtype_name(datatype));
    return ncclInvalidArgument;
  }
  use_out->premul_sum = 1;
  if (r->residence == ncclScalarDevice)
    use_out->scalar_ptr = r->scalar_ptr;
  else
    memcpy(use_out->value, r->value, sizeof(r->value));
  return ncclSuccess;
}

static ncclResult_t create_args_check(const ncclRedOp_t *op, const void *scalar,
                                      ncclDataType_t datatype, ncclScalarResidence_t residence,
                                      const struct ncclComm *comm) {
  static const char caller[] = "ncclRedOpCreatePreMulSum";
  WEFT_CHECK(weft_comm_check(comm, caller));
  if (op == NULL) {
    WARN("%s: op is NULL, expected a pointer to receive the new operator", caller);
    return ncclInvalidArgument;
  }
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  if (scalar == NULL) {
    WARN("%s: scalar is NULL, expected a pointer to one %s value", caller,
         weft_dtype_name(datatype));
    return ncclInvalidArgument;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("%s: residence is %d, expected ncclScalarDevice (0) or ncclScalarHostImmediate (1)",
         caller, (int)residence);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* A free slot of comm's table (grown when full); -1 when out of memory. */
static int redop_slot(struct ncclComm *comm) {
  for (int i = 0; i < comm->nredops; i++)
    if (!comm->redops[i].live) return i;
  if (comm->nredops >= ncclMaxRedOp - ncclNumOps) return -1;
  struct weft_redop *grown = realloc(comm->redops, (comm->nredops + 1) * sizeof(*grown));
  if (grown == NULL) return -1;
  comm->redops = grown;
  memset(&grown[comm->nredops], 0, sizeof(*grown));
  return comm->nredops++;
}

WEFT_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                               ncclDataType_t datatype,
                                               ncclScalarResidence_t residence, ncclComm_t comm) {
  WEFT_CHECK(create_args_check(op, scalar, datatype, residence, comm));
  int slot = redop_slot(comm);
  if (slot < 0) {
    WARN("ncclRedOpCreatePreMulSum: rank %d: no room for another operator (%d live)",
         comm->rank, comm->nredops);
    return ncclSystemError;
  }
  struct weft_redop *r = &comm->redops[slot];
  r->live = 1;
  r->datatype = datatype;
  r->residence = residence;
  r->scalar_ptr = residence == ncclScalarDevice ? scalar : NULL;
  memset(r->value, 0, sizeof(r->value));
  /* Host ranks: a "device" scalar is host memory, read when the op runs. */
  if (residence == ncclScalarHostImmediate) memcpy(r->value, scalar, weft_dtype_size(datatype));
  *op = (ncclRedOp_t)(ncclNumOps + slot);
  INFO(WEFT_COLL, "ncclRedOpCreatePreMulSum: rank %d op %d (%s, %s scalar)", comm->rank,
       (int)*op, weft_dtype_name(datatype),
       residence == ncclScalarDevice ? "device" : "host immediate");
  return ncclSuccess;
}
WEFT_ALIAS(ncclRedOpCreatePreMulSum)

WEFT_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  static const char caller[] = "ncclRedOpDestroy";
  /* Cleanup: allowed on a communicator that failed, was revoked or
   * finalized, as in NCCL. */
  WEFT_CHECK(weft_comm_check_live(comm, caller));
  if ((int)op >= 0 && (int)op < ncclNumOps) {
    WARN("%s: op %d is a built-in operator (%s); only ncclRedOpCreatePreMulSum operators can "
         "be destroyed", caller, (int)op, weft_op_name(op));
    return ncclInvalidArgument;
  }
  if ((int)op < 0 || redop_find(comm, op) == NULL) {
    WARN("%s: op %d was not made by ncclRedOpCreatePreMulSum on this communicator (rank %d), "
         "or was already destroyed", caller, (int)op, comm->rank);
    return ncclInvalidArgument;
  }
  comm->redops[(int)op - ncclNumOps].live = 0;
  return ncclSuccess;
}
WEFT_ALIAS(ncclRedOpDestroy)
