/* ncclCommShrink and ncclCommRevoke: argument checks, then core/shrink.c.
 *
 * Only the ranks that stay call it. The parent may have failed (that is
 * what shrinking is for), so unlike the other communicator calls it is
 * accepted on a communicator with an error; only one still initializing is
 * refused. Inside a group, or with a non-blocking config, the new rank is
 * finished in the background like a grouped ncclCommInitRank: the call
 * returns once the kept ranks have agreed on its unique id. */
#include <stdlib.h>

#include "api/alias.h"
#include "api/config.h"
#include "api/group.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/shrink.h"

static const char caller[] = "ncclCommShrink";

static ncclResult_t shrink_check_parent(const struct ncclComm *comm) {
  int err;
  WEFT_CHECK(weft_comm_check_ready(comm, caller, &err));
  if (err != ncclSuccess)
    INFO(WEFT_INIT, "%s: rank %d: shrinking a communicator that failed with error %d", caller,
         comm->rank, err);
  return ncclSuccess;
}

/* Every entry a rank of comm, none twice, not the caller, and one rank left. */
static ncclResult_t shrink_check_list(const struct ncclComm *comm, const int *list, int count) {
  if (count < 0) {
    WARN("%s: excludeRanksCount is %d, expected >= 0", caller, count);
    return ncclInvalidArgument;
  }
  if (count > 0 && list == NULL) {
    WARN("%s: excludeRanksList is NULL with excludeRanksCount %d", caller, count);
    return ncclInvalidArgument;
  }
  if (count >= comm->nranks) {
    WARN("%s: excludeRanksCount is %d, which leaves no rank of %d", caller, count, comm->nranks);
    return ncclInvalidArgument;
  }
  char *seen = calloc((size_t)comm->nranks, 1);
  if (seen == NULL) {
    WARN("%s: rank %d: out of memory for %d ranks", caller, comm->rank, comm->nranks);
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < count && res == ncclSuccess; i++) {
    int r = list[i];
    res = ncclInvalidArgument;
    if (r < 0 || r >= comm->nranks)
      WARN("%s: excludeRanksList[%d] is %d, expected a rank 0..%d", caller, i, r, comm->nranks - 1);
    else if (seen[r])
      WARN("%s: excludeRanksList[%d] is %d, which the list already holds", caller, i, r);
    else if (r == comm->rank)
      WARN(
          "%s: excludeRanksList[%d] is %d, the calling rank: excluded ranks must not call "
          "ncclCommShrink",
          caller, i, r);
    else
      res = ncclSuccess;
    if (r >= 0 && r < comm->nranks) seen[r] = 1;
  }
  free(seen);
  return res;
}

WEFT_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                     ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  WEFT_CHECK(shrink_check_parent(comm));
  if (newcomm == NULL) {
    WARN("%s: newcomm is NULL", caller);
    return ncclInvalidArgument;
  }
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT) {
    WARN(
        "%s: shrinkFlags is 0x%x, expected NCCL_SHRINK_DEFAULT (0x%x) or NCCL_SHRINK_ABORT "
        "(0x%x)",
        caller, (unsigned)shrinkFlags, NCCL_SHRINK_DEFAULT, NCCL_SHRINK_ABORT);
    return ncclInvalidArgument;
  }
  WEFT_CHECK(shrink_check_list(comm, excludeRanksList, excludeRanksCount));
  ncclConfig_t cfg = comm->config; /* a NULL config inherits the parent's */
  if (config != NULL) WEFT_CHECK(weft_config_normalize(caller, config, &cfg));
  *newcomm = NULL;
  int in_group = weft_group_depth() > 0;
  ncclResult_t res = weft_comm_shrink(comm, excludeRanksList, excludeRanksCount, shrinkFlags, &cfg,
                                      in_group || !cfg.blocking, newcomm);
  if (in_group && res == ncclInProgress) {
    WEFT_CHECK(weft_group_add_init(*newcomm));
    return cfg.blocking ? ncclSuccess : ncclInProgress;
  }
  return res;
}
WEFT_ALIAS(ncclCommShrink)

/* Like shrink, accepted on a failed communicator: stopping its work is
 * what revoking is for. Returns once that work has stopped (the host
 * engine idle; GPU kernels told to stop at their next wait), so the
 * communicator is quiescent when it returns. Operations the calling
 * thread's open group queued on comm are dropped, as ncclCommAbort's. */
WEFT_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  static const char revoke[] = "ncclCommRevoke";
  int err;
  WEFT_CHECK(weft_comm_check_ready(comm, revoke, &err));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("%s: revokeFlags is 0x%x, expected NCCL_REVOKE_DEFAULT (0x%x)", revoke,
         (unsigned)revokeFlags, NCCL_REVOKE_DEFAULT);
    return ncclInvalidArgument;
  }
  weft_group_forget(revoke, comm, 1);
  weft_comm_revoke(comm);
  INFO(WEFT_INIT, "%s: rank %d: revoked%s", revoke, comm->rank,
       err == ncclSuccess ? "" : " (it had failed before)");
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommRevoke)
