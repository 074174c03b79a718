/* Library-wide calls: version, error strings, last error, unique ids. */
#include "api/alias.h"
#include "core/bootstrap.h"
#include "base/check.h"

WEFT_API ncclResult_t ncclGetVersion(int *version) {
  if (version == NULL) {
    WARN("ncclGetVersion: version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}
WEFT_ALIAS(ncclGetVersion)

WEFT_API const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the weft developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}
WEFT_ALIAS(ncclGetErrorString)

/* One message for the process, as NCCL keeps: the last WARN, whichever
 * communicator it came from. */
WEFT_API const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return weft_last_error();
}
WEFT_ALIAS(ncclGetLastError)

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
WEFT_API void ncclResetDebugInit(void) { weft_log_reset(); }
WEFT_ALIAS(ncclResetDebugInit)
#pragma GCC diagnostic pop

WEFT_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (uniqueId == NULL) {
    WARN("ncclGetUniqueId: uniqueId is NULL");
    return ncclInvalidArgument;
  }
  return weft_bootstrap_get_unique_id(uniqueId);
}
WEFT_ALIAS(ncclGetUniqueId)
