/* Argument checks shared by the collective and point-to-point calls. */
#include "api/check.h"

#include <stdint.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "exec/reduce.h"

ncclResult_t weft_check_buffer(const char *caller, const char *name, const void *p, size_t count,
                               ncclDataType_t datatype, int nblocks) {
  size_t elem = weft_dtype_size(datatype);
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
  if (weft_device_is_device_ptr(p)) {
    WARN(
        "%s: %s %p is CUDA device memory; this communicator runs on host buffers (the CUDA "
        "engine is not in this build yet)",
        caller, name, p);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t weft_check_rank_arg(const char *caller, const char *name, int value,
                                 const struct ncclComm *comm) {
  if (value < 0 || value >= comm->nranks) {
    WARN("%s: %s is %d, expected a rank in 0..%d", caller, name, value, comm->nranks - 1);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}
