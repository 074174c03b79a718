/* Collective calls of the NCCL API: every argument is checked here, with an
 * error naming the call and the argument, before anything is queued. */
#include <stdint.h>

#include "api/alias.h"
#include "api/group.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "exec/reduce.h"

static ncclResult_t check_dtype_op(const char *caller, ncclDataType_t datatype, ncclRedOp_t op) {
  if ((int)datatype < 0 || (int)datatype >= ncclNumTypes) {
    WARN("%s: datatype is %d, expected an ncclDataType_t in 0..%d", caller, (int)datatype,
         ncclNumTypes - 1);
    return ncclInvalidArgument;
  }
  if ((int)op < 0 || (int)op >= ncclNumOps) {
    WARN("%s: op is %d, expected ncclSum, ncclProd, ncclMax, ncclMin or ncclAvg (0..%d)", caller,
         (int)op, ncclNumOps - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* A host rank reads and writes count elements at p: p must be host memory. */
static ncclResult_t check_buffer(const char *caller, const char *name, const void *p,
                                 size_t count, ncclDataType_t datatype) {
  if (count > SIZE_MAX / weft_dtype_size(datatype)) {
    WARN("%s: count %zu of %s overflows the address space", caller, count,
         weft_dtype_name(datatype));
    return ncclInvalidArgument;
  }
  if (count == 0) return ncclSuccess;
  if (p == NULL) {
    WARN("%s: %s is NULL with count %zu", caller, name, count);
    return ncclInvalidArgument;
  }
  if (weft_device_is_device_ptr(p)) {
    WARN("%s: %s %p is CUDA device memory; this communicator runs on host buffers (the CUDA "
         "engine is not in this build yet)",
         caller, name, p);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

WEFT_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream) {
  static const char caller[] = "ncclAllReduce";
  (void)stream; /* host ranks: the call returns when the result is in recvbuff */
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(check_dtype_op(caller, datatype, op));
  WEFT_CHECK(check_buffer(caller, "sendbuff", sendbuff, count, datatype));
  WEFT_CHECK(check_buffer(caller, "recvbuff", recvbuff, count, datatype));
  struct weft_coll coll = {
      .func = WEFT_FUNC_ALLREDUCE,
      .sendbuff = sendbuff,
      .recvbuff = recvbuff,
      .count = count,
      .datatype = datatype,
      .op = op,
      .root = 0,
  };
  TRACE(WEFT_COLL, "ncclAllReduce: rank %d opCount %llu count %zu %s %s", comm->rank,
        (unsigned long long)comm->op_seq, count, weft_dtype_name(datatype), weft_op_name(op));
  return weft_group_add(comm, &coll);
}
WEFT_ALIAS(ncclAllReduce)
