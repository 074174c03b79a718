/* NCCL entry points that weft exports but does not implement yet.
 *
 * A program that calls one of these gets ncclInvalidUsage and one WARN naming
 * the call (also what ncclGetLastError returns), instead of failing to link
 * or load. When a call gets a real implementation, delete its line here. */
#include "nccl.h"

#include "api/alias.h"
#include "core/debug.h"

/* NCCL 2.28's device API (nccl_device/core.h, a CUDA C++ header that nccl.h
 * does not include) adds these two host calls. Programs built against it link
 * to them, so they are exported; their argument types are opaque here. */
struct ncclDevComm;
struct ncclDevCommRequirements;
ncclResult_t ncclDevCommCreate(ncclComm_t comm,
                               const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm,
                                const struct ncclDevComm *devComm);
ncclResult_t pncclDevCommCreate(ncclComm_t comm,
                                const struct ncclDevCommRequirements *reqs,
                                struct ncclDevComm *outDevComm);
ncclResult_t pncclDevCommDestroy(ncclComm_t comm,
                                 const struct ncclDevComm *devComm);

/* The stubs ignore their arguments by design. */
#pragma GCC diagnostic ignored "-Wunused-parameter"

#define WEFT_UNSUPPORTED(fn, params)                                           \
  WEFT_API ncclResult_t fn params {                                            \
    weft_log_unsupported(#fn);                                                 \
    return ncclInvalidUsage;                                                   \
  }                                                                            \
  WEFT_ALIAS(fn)

/* Memory */
WEFT_UNSUPPORTED(ncclMemAlloc, (void **ptr, size_t size))
WEFT_UNSUPPORTED(ncclMemFree, (void *ptr))
WEFT_UNSUPPORTED(ncclCommRegister, (const ncclComm_t comm, void *buff,
                                    size_t size, void **handle))
WEFT_UNSUPPORTED(ncclCommDeregister, (const ncclComm_t comm, void *handle))
WEFT_UNSUPPORTED(ncclCommWindowRegister, (ncclComm_t comm, void *buff,
                                          size_t size, ncclWindow_t *win,
                                          int winFlags))
WEFT_UNSUPPORTED(ncclCommWindowDeregister, (ncclComm_t comm, ncclWindow_t win))

/* Communicator lifecycle */
WEFT_UNSUPPORTED(ncclCommInitRankScalable,
                 (ncclComm_t *newcomm, int nranks, int myrank, int nId,
                  ncclUniqueId *commIds, ncclConfig_t *config))
WEFT_UNSUPPORTED(ncclCommShrink, (ncclComm_t comm, int *excludeRanksList,
                                  int excludeRanksCount, ncclComm_t *newcomm,
                                  ncclConfig_t *config, int shrinkFlags))
WEFT_UNSUPPORTED(ncclCommRevoke, (ncclComm_t comm, int revokeFlags))

/* Device API */
WEFT_UNSUPPORTED(ncclDevCommCreate,
                 (ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                  struct ncclDevComm *outDevComm))
WEFT_UNSUPPORTED(ncclDevCommDestroy,
                 (ncclComm_t comm, const struct ncclDevComm *devComm))
