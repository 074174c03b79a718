/* Argument checks shared by the collective and point-to-point calls. */
#include "api/check.h"

#include <stdint.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "exec/reduce.h"

/* Size and NULL checks; *empty_out: count is 0 (nothing else to check). */
static ncclResult_t check_extent(const char *caller, const char *name, const void *p, size_t count,
                                 ncclDataType_t datatype, int nblocks, int *empty_out) {
  size_t elem = weft_dtype_size(datatype);
  *empty_out = 1;
  if (count > SIZE_MAX / elem / (size_t)nblocks) {
    WARN("%s: count %zu of %s%s overflows the address space", caller, count,
         weft_dtype_name(datatype), nblocks > 1 ? " per rank" : "");
    return ncclInvalidArgument;
  }
  if (count == 0) return ncclSuccess;
  if (p == NULL) {
    WARN("%s: %s is NULL with count %zu", caller, name, count);
    return ncclInvalidArgument;
  }
  *empty_out = 0;
  return ncclSuccess;
}

ncclResult_t weft_check_buffer(const char *caller, const char *name, const void *p, size_t count,
                               ncclDataType_t datatype, int nblocks) {
  int empty;
  WEFT_CHECK(check_extent(caller, name, p, count, datatype, nblocks, &empty));
  if (empty) return ncclSuccess;
  if (weft_device_is_device_ptr(p)) {
    WARN(
        "%s: %s %p is CUDA device memory; this communicator runs on host buffers (the CUDA "
        "engine is not in this build yet)",
        caller, name, p);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t weft_check_comm_buffer(const struct ncclComm *comm, const char *caller,
                                    const char *name, const void *p, size_t count,
                                    ncclDataType_t datatype, int nblocks) {
  if (comm->host_engine) return weft_check_buffer(caller, name, p, count, datatype, nblocks);
  int empty;
  WEFT_CHECK(check_extent(caller, name, p, count, datatype, nblocks, &empty));
  if (empty) return ncclSuccess;
  if (!weft_device_is_device_ptr(p)) {
    WARN("%s: %s %p is not CUDA device memory; rank %d runs on the CUDA engine "
         "(WEFT_CUDA_ENGINE=1), which needs device buffers",
         caller, name, p, comm->rank);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t weft_check_engine_supports(const struct ncclComm *comm, const char *caller,
                                        ncclDataType_t datatype, int premul_sum, int p2p) {
  if (comm->host_engine) return ncclSuccess;
  const char *what = p2p                           ? "send/recv (and AlltoAll, Gather, Scatter)"
                     : premul_sum                  ? "PreMulSum reductions"
                     : datatype == ncclFloat8e4m3 ? "the fp8 datatype ncclFloat8e4m3"
                     : datatype == ncclFloat8e5m2 ? "the fp8 datatype ncclFloat8e5m2"
                                                  : NULL;
  if (what == NULL) return ncclSuccess;
  WARN("%s: rank %d: %s: not supported by the CUDA engine (WEFT_CUDA_ENGINE=1) yet; it runs "
       "AllReduce, AllGather, ReduceScatter, Broadcast and Reduce",
       caller, comm->rank, what);
  return ncclInvalidUsage;
}

ncclResult_t weft_check_rank_arg(const char *caller, const char *name, int value,
                                 const struct ncclComm *comm) {
  if (value < 0 || value >= comm->nranks) {
    WARN("%s: %s is %d, expected a rank in 0..%d", caller, name, value, comm->nranks - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
