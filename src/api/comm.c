/* The communicator calls of the NCCL API: argument checks, then core/comm.c. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/alias.h"
#include "api/config.h"
#include "api/group.h"
#include "api/register.h"
#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "core/failure.h"
#include "exec/engine.h"

static ncclResult_t check_rank_args(const char *caller, ncclComm_t *comm, int nranks, int rank) {
  if (comm == NULL) {
    WARN("%s: comm (the output pointer) is NULL", caller);
    return ncclInvalidArgument;
  }
  if (nranks < 1) {
    WARN("%s: nranks is %d, expected at least 1", caller, nranks);
    return ncclInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    WARN("%s: rank is %d, expected 0..%d (nranks %d)", caller, rank, nranks - 1, nranks);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* ids[0..nids-1]: the commId of ncclCommInitRank*, or the commIds of
 * ncclCommInitRankScalable (arg names them in a WARN). */
static ncclResult_t check_unique_ids(const char *caller, const char *arg, const ncclUniqueId *ids,
                                     int nids) {
  for (int k = 0; k < nids; k++) {
    const struct weft_unique_id *body = (const struct weft_unique_id *)&ids[k];
    if (body->magic != WEFT_ID_MAGIC && body->magic != WEFT_ID_MAGIC_COMM_ID) {
      if (nids == 1)
        WARN("%s: %s is not an id made by ncclGetUniqueId (bad magic 0x%llx)", caller, arg,
             (unsigned long long)body->magic);
      else
        WARN("%s: %s[%d] is not an id made by ncclGetUniqueId (bad magic 0x%llx)", caller, arg, k,
             (unsigned long long)body->magic);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

static ncclResult_t init_rank(const char *caller, ncclComm_t *comm, int nranks,
                              const ncclUniqueId *ids, int nids, int rank, ncclConfig_t *config) {
  ncclConfig_t cfg;
  WEFT_CHECK(weft_config_normalize(caller, config, &cfg));
  *comm = NULL;
  /* Inside a group, creating a rank waits for the others, so it is started
   * now and finished at ncclGroupEnd: one thread can create every rank. */
  int in_group = weft_group_depth() > 0;
  ncclResult_t res =
      weft_comm_create(ids, nids, nranks, rank, &cfg, in_group || !cfg.blocking, comm);
  if (in_group && res == ncclInProgress) {
    WEFT_CHECK(weft_group_add_init(*comm));
    return cfg.blocking ? ncclSuccess : ncclInProgress;
  }
  return res;
}

WEFT_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                       int rank) {
  static const char caller[] = "ncclCommInitRank";
  WEFT_CHECK(check_rank_args(caller, comm, nranks, rank));
  WEFT_CHECK(check_unique_ids(caller, "commId", &commId, 1));
  return init_rank(caller, comm, nranks, &commId, 1, rank, NULL);
}
WEFT_ALIAS(ncclCommInitRank)

WEFT_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                             int rank, ncclConfig_t *config) {
  static const char caller[] = "ncclCommInitRankConfig";
  WEFT_CHECK(check_rank_args(caller, comm, nranks, rank));
  WEFT_CHECK(check_unique_ids(caller, "commId", &commId, 1));
  return init_rank(caller, comm, nranks, &commId, 1, rank, config);
}
WEFT_ALIAS(ncclCommInitRankConfig)

/* Several roots share the ranks' bootstrap (core/bootstrap.c: NCCL's
 * blocks); every rank passes the same nId ids. */
WEFT_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank, int nId,
                                               ncclUniqueId *commIds, ncclConfig_t *config) {
  static const char caller[] = "ncclCommInitRankScalable";
  WEFT_CHECK(check_rank_args(caller, newcomm, nranks, myrank));
  if (nId < 1 || nId > nranks) {
    WARN("%s: nId is %d, expected 1..%d (at most one root per rank; nranks %d)", caller, nId,
         nranks, nranks);
    return ncclInvalidArgument;
  }
  if (commIds == NULL) {
    WARN("%s: commIds is NULL, expected an array of %d ids from ncclGetUniqueId", caller, nId);
    return ncclInvalidArgument;
  }
  WEFT_CHECK(check_unique_ids(caller, "commIds", commIds, nId));
  return init_rank(caller, newcomm, nranks, commIds, nId, myrank, config);
}
WEFT_ALIAS(ncclCommInitRankScalable)

struct init_all_job {
  ncclComm_t *slot;
  ncclUniqueId id;
  int nranks;
  int rank;
  int dev;
  ncclResult_t res;
};

static void *init_all_main(void *arg) {
  struct init_all_job *job = arg;
  weft_device_select(job->dev);
  ncclConfig_t cfg;
  job->res = weft_config_normalize("ncclCommInitAll", NULL, &cfg);
  if (job->res == ncclSuccess)
    job->res = weft_comm_create(&job->id, 1, job->nranks, job->rank, &cfg, 0, job->slot);
  return NULL;
}

/* One thread per rank, since creating a rank waits for the others. */
static ncclResult_t init_all_threads(ncclComm_t *comms, int ndev, const int *devlist,
                                     const ncclUniqueId *id) {
  struct init_all_job *jobs = calloc((size_t)ndev, sizeof(*jobs));
  pthread_t *threads = calloc((size_t)ndev, sizeof(*threads));
  ncclResult_t res = ncclSuccess;
  int started = 0;
  if (jobs == NULL || threads == NULL) {
    WARN("ncclCommInitAll: out of memory for %d ranks", ndev);
    res = ncclSystemError;
    goto out;
  }
  for (int i = 0; i < ndev; i++) {
    jobs[i] = (struct init_all_job){&comms[i], *id, ndev, i, devlist ? devlist[i] : i, 0};
    int err = pthread_create(&threads[i], NULL, init_all_main, &jobs[i]);
    if (err != 0) {
      WARN("ncclCommInitAll: cannot start a thread for rank %d: %s", i, strerror(err));
      res = ncclSystemError;
      break;
    }
    started++;
  }
  for (int i = 0; i < started; i++) {
    pthread_join(threads[i], NULL);
    if (res == ncclSuccess && jobs[i].res != ncclSuccess) res = jobs[i].res;
  }
  if (res != ncclSuccess) {
    for (int i = 0; i < started; i++)
      if (jobs[i].res == ncclSuccess && comms[i] != NULL) weft_comm_free(comms[i], 1);
    for (int i = 0; i < ndev; i++) comms[i] = NULL;
  }
out:
  free(jobs);
  free(threads);
  return res;
}

WEFT_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  if (comms == NULL) {
    WARN("ncclCommInitAll: comms is NULL");
    return ncclInvalidArgument;
  }
  if (ndev < 1) {
    WARN("ncclCommInitAll: ndev is %d, expected at least 1", ndev);
    return ncclInvalidArgument;
  }
  for (int i = 0; devlist != NULL && i < ndev; i++) {
    if (devlist[i] < 0) {
      WARN("ncclCommInitAll: devlist[%d] is %d, expected a CUDA device number >= 0", i, devlist[i]);
      return ncclInvalidArgument;
    }
  }
  ncclUniqueId id;
  WEFT_CHECK(weft_bootstrap_new_id(&id));
  return init_all_threads(comms, ndev, devlist, &id);
}
WEFT_ALIAS(ncclCommInitAll)

WEFT_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  WEFT_CHECK(weft_comm_check(comm, "ncclCommFinalize"));
  return weft_comm_finalize(comm);
}
WEFT_ALIAS(ncclCommFinalize)

/* A communicator whose init has not finished or has failed can still be
 * destroyed or aborted: only the pointer itself must be sane. */
static ncclResult_t check_comm_pointer(const char *caller, ncclComm_t comm) {
  if (comm == NULL) {
    WARN("%s: comm is NULL", caller);
    return ncclInvalidArgument;
  }
  if (comm->magic != WEFT_COMM_MAGIC) {
    WARN("%s: comm %p is not a live communicator (destroyed, or never initialized)", caller,
         (void *)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* What the API layer holds for comm besides the communicator: operations
 * the calling thread's open group queued on it (they must not be launched on
 * a freed communicator at ncclGroupEnd) and its buffer registrations. */
static void release_api_state(const char *caller, ncclComm_t comm, int abort) {
  weft_group_forget(caller, comm, abort);
  weft_register_release_comm(comm);
}

WEFT_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess; /* as NCCL: destroying NULL is a no-op */
  WEFT_CHECK(check_comm_pointer("ncclCommDestroy", comm));
  release_api_state("ncclCommDestroy", comm, 0);
  /* A revoked communicator's peers may be gone: no finalize with them. */
  int healthy = atomic_load(&comm->async_error) == ncclSuccess && !atomic_load(&comm->revoked);
  ncclResult_t res = healthy && !comm->finalized ? weft_comm_finalize(comm) : ncclSuccess;
  weft_comm_free(comm, !healthy || res != ncclSuccess);
  return res;
}
WEFT_ALIAS(ncclCommDestroy)

/* Also from another thread while a call waits on comm: the abort flag ends
 * every wait at once, the waiting call returns an error, and comm is freed
 * only after that call has left the engine (exec/host.c). Inside a group,
 * what the group queued on comm is dropped. */
WEFT_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == NULL) return ncclSuccess;
  WEFT_CHECK(check_comm_pointer("ncclCommAbort", comm));
  /* Peers waiting on a healthy communicator learn at once that this rank
   * is gone; a call of ours it ends returns ncclInvalidUsage. */
  if (atomic_load(&comm->async_error) == ncclSuccess)
    (void)weft_failure_raise(comm, WEFT_FAIL_ABORTED, ncclInvalidUsage, "ncclCommAbort");
  release_api_state("ncclCommAbort", comm, 1);
  weft_comm_free(comm, 1);
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommAbort)

WEFT_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  WEFT_CHECK(check_comm_pointer("ncclCommGetAsyncError", comm));
  if (asyncError == NULL) {
    WARN("ncclCommGetAsyncError: asyncError is NULL");
    return ncclInvalidArgument;
  }
  if (atomic_load(&comm->revoked)) {
    /* ncclCommRevoke returned once its work had stopped: quiescent, as
     * NCCL reports a revoked communicator, whatever that work ended with. */
    *asyncError = ncclSuccess;
    return ncclSuccess;
  }
  if (comm->engine != NULL && atomic_load(&comm->async_error) == ncclSuccess) {
    /* A kernel-side timeout surfaces here: it fails the communicator, and
     * every rank hears of it (core/failure.h). */
    ncclResult_t err = comm->engine->check(comm);
    if (err != ncclSuccess) weft_comm_set_error(comm, weft_failure_report(comm, err));
  }
  *asyncError = (ncclResult_t)atomic_load(&comm->async_error);
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommGetAsyncError)

static ncclResult_t check_query(const char *caller, const ncclComm_t comm, const void *out,
                                const char *out_name) {
  WEFT_CHECK(check_comm_pointer(caller, comm));
  if (out == NULL) {
    WARN("%s: %s is NULL", caller, out_name);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

WEFT_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  WEFT_CHECK(check_query("ncclCommCount", comm, count, "count"));
  *count = comm->nranks;
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommCount)

WEFT_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
  WEFT_CHECK(check_query("ncclCommCuDevice", comm, device, "device"));
  *device = comm->cuda_dev;
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommCuDevice)

WEFT_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  WEFT_CHECK(check_query("ncclCommUserRank", comm, rank, "rank"));
  *rank = comm->rank;
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommUserRank)

WEFT_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                    ncclConfig_t *config) {
  /* A revoked communicator splits whatever its abandoned work ended with. */
  int err;
  WEFT_CHECK(weft_comm_check_ready(comm, "ncclCommSplit", &err));
  if (!atomic_load(&comm->revoked)) WEFT_CHECK(weft_comm_check(comm, "ncclCommSplit"));
  /* Every rank of comm waits in a split for every other: one that cannot
   * take part fails the communicator everywhere (core/failure.h) rather
   * than leave the others waiting for WEFT_TIMEOUT. */
  if (newcomm == NULL) {
    WARN("ncclCommSplit: newcomm is NULL");
    return weft_failure_raise(comm, WEFT_FAIL_ERROR, ncclInvalidArgument,
                              "ncclCommSplit: newcomm is NULL");
  }
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    WARN("ncclCommSplit: color is %d, expected >= 0 or NCCL_SPLIT_NOCOLOR (%d)", color,
         NCCL_SPLIT_NOCOLOR);
    return weft_failure_raise(comm, WEFT_FAIL_ERROR, ncclInvalidArgument,
                              "ncclCommSplit: color is %d", color);
  }
  ncclConfig_t cfg = comm->config;
  ncclResult_t res;
  if (config != NULL && (res = weft_config_normalize("ncclCommSplit", config, &cfg)) != ncclSuccess)
    return weft_failure_raise(comm, WEFT_FAIL_ERROR, res, "ncclCommSplit: bad config (%s)",
                              weft_last_error());
  return weft_failure_result(comm, weft_comm_split(comm, color, key, &cfg, newcomm));
}
WEFT_ALIAS(ncclCommSplit)
