/* NCCL entry points that weft exports but does not implement: NCCL 2.28's
 * device API (ncclDevCommCreate/Destroy), on purpose: it hands CUDA kernels
 * NCCL's own device-side structures (LSA/GIN windows, barriers), which
 * weft's engines do not have.
 *
 * A program that calls one gets ncclInvalidUsage and one WARN naming the
 * call (also what ncclGetLastError returns), instead of failing to link or
 * load. */
#include "nccl.h"

#include "api/alias.h"
#include "base/debug.h"

/* NCCL 2.28's device API (nccl_device/core.h, a CUDA C++ header that nccl.h
 * does not include) adds these two host calls. Programs built against it link
 * to them, so they are exported; their argument types are opaque here. */
struct ncclDevComm;
struct ncclDevCommRequirements;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm *devComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                                struct ncclDevComm *outDevComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm *devComm);

/* The stubs ignore their arguments by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

/* Said plainly: no equivalent is planned. */
WEFT_API ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                                        struct ncclDevComm *outDevComm) {
  WARN(
      "ncclDevCommCreate is not supported by weft: NCCL's device API (nccl_device.h, kernels "
      "that communicate from device code) has no weft equivalent; use the host calls");
  return ncclInvalidUsage;
}
WEFT_ALIAS(ncclDevCommCreate)

WEFT_API ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const struct ncclDevComm *devComm) {
  WARN(
      "ncclDevCommDestroy is not supported by weft: NCCL's device API (nccl_device.h) has no "
      "weft equivalent, so there is no device communicator to destroy");
  return ncclInvalidUsage;
}
WEFT_ALIAS(ncclDevCommDestroy)
