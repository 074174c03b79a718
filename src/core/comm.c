/* The communicator's life: create (bootstrap, peer exchange, engine),
 * finalize, free. The API layer has checked the arguments; this file
 * assumes they are sane. */
#include "core/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "base/cpus.h"
#include "core/comm_topo.h"
#include "core/connect.h"
#include "core/device.h"
#include "core/failure.h"
#include "base/param.h"
#include "core/engine.h"
#include "weft_config.h"

ncclResult_t weft_comm_check_live(const struct ncclComm *comm, const char *caller) {
  if (comm == NULL) {
    WARN("%s: comm is NULL", caller);
    return ncclInvalidArgument;
  }
  if (comm->magic != WEFT_COMM_MAGIC) {
    WARN("%s: comm %p is not a live communicator (destroyed, or never initialized)", caller,
         (const void *)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Still initializing: ncclInvalidUsage with a WARN; else ncclSuccess and
 * the communicator's error state in *err_out. */
ncclResult_t weft_comm_check_ready(const struct ncclComm *comm, const char *caller, int *err_out) {
  WEFT_CHECK(weft_comm_check_live(comm, caller));
  int err = atomic_load(&comm->async_error);
  if (err == ncclInProgress) {
    WARN(
        "%s: comm %p is still initializing; wait until ncclCommGetAsyncError returns "
        "ncclSuccess",
        caller, (const void *)comm);
    return ncclInvalidUsage;
  }
  *err_out = err;
  return ncclSuccess;
}

ncclResult_t weft_comm_check(const struct ncclComm *comm, const char *caller) {
  int err;
  WEFT_CHECK(weft_comm_check_ready(comm, caller, &err));
  if (atomic_load(&comm->revoked)) {
    WARN(
        "%s: comm %p (rank %d) was revoked (ncclCommRevoke): only ncclCommSplit, ncclCommShrink, "
        "ncclCommDestroy and ncclCommAbort may follow",
        caller, (const void *)comm, comm->rank);
    return ncclInvalidUsage;
  }
  if (comm->finalized) {
    WARN(
        "%s: comm %p (rank %d) was finalized (ncclCommFinalize): only ncclCommDestroy and "
        "ncclCommAbort may follow",
        caller, (const void *)comm, comm->rank);
    return ncclInvalidUsage;
  }
  if (err != ncclSuccess) {
    char what[320];
    if (!weft_failure_describe(comm, what, sizeof(what)))
      snprintf(what, sizeof(what), "error %d", err);
    WARN("%s: comm %p (rank %d) has failed earlier (%s); abort or destroy it", caller,
         (const void *)comm, comm->rank, what);
    return (ncclResult_t)err;
  }
  return ncclSuccess;
}

void weft_comm_set_error(struct ncclComm *comm, ncclResult_t err) {
  int expected = ncclSuccess;
  atomic_compare_exchange_strong(&comm->async_error, &expected, (int)err);
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/* Ranks on one host (one kernel boot, one host name) share this value.
 * NCCL_HOSTID replaces both, as in NCCL: ranks of one machine in different
 * containers (or tests) then count as different hosts, so they share no
 * memory and no GPU, and talk over sockets. */
static uint64_t host_hash(void) {
  char buf[256] = {0};
  const char *host_id = weft_param_str(WEFT_PARAM_HOSTID);
  if (host_id != NULL) {
    snprintf(buf, sizeof(buf), "hostid:%s", host_id);
    return fnv1a(0xcbf29ce484222325ULL, buf, strlen(buf));
  }
  gethostname(buf, sizeof(buf) - 64);
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f != NULL) {
    size_t len = strlen(buf);
    if (fgets(buf + len, (int)(sizeof(buf) - len), f) == NULL) buf[len] = '\0';
    fclose(f);
  }
  return fnv1a(0xcbf29ce484222325ULL, buf, strlen(buf));
}

static ncclResult_t exchange_peer_info(struct ncclComm *comm) {
  comm->peers = calloc((size_t)comm->nranks, sizeof(*comm->peers));
  if (comm->peers == NULL) {
    WARN("rank %d: out of memory for %d peer records", comm->rank, comm->nranks);
    return ncclSystemError;
  }
  struct weft_peer_info *me = &comm->peers[comm->rank];
  me->rank = comm->rank;
  me->cuda_dev = comm->cuda_dev;
  me->pid = (int)getpid();
  me->cpus = weft_cpus_usable();
  me->host_hash = host_hash();
  me->comm_hash = comm->comm_hash;
  WEFT_CHECK(weft_comm_topo_describe(comm, me));
  WEFT_CHECK(weft_bootstrap_allgather(comm->bootstrap, comm->peers, sizeof(*comm->peers)));
  for (int r = 0; r < comm->nranks; r++) {
    if (comm->peers[r].rank != r || comm->peers[r].comm_hash != comm->comm_hash) {
      WARN("rank %d: peer %d sent inconsistent init data (rank %d, comm %llx, expected %llx)",
           comm->rank, r, comm->peers[r].rank, (unsigned long long)comm->peers[r].comm_hash,
           (unsigned long long)comm->comm_hash);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

static ncclResult_t comm_init_body(struct ncclComm *comm, const ncclUniqueId *ids, int nids) {
  weft_log_set_rank(comm->rank);
  weft_device_select(comm->cuda_dev); /* a non-blocking init runs on its own thread */
  weft_param_print_all();
  WEFT_CHECK(weft_bootstrap_create(ids, nids, comm->rank, comm->nranks, &comm->bootstrap));
  WEFT_CHECK(exchange_peer_info(comm));
  WEFT_CHECK(weft_failure_start(comm));
  /* Transport per peer and the ring (with ring_next/ring_prev). */
  WEFT_CHECK(weft_comm_topo_decide(comm));
  /* Data links are made when the first task needs them (core/connect.c),
   * so init costs no connections. */
  const struct weft_engine_ops *engine;
  WEFT_CHECK(weft_engine_choose(comm, &engine));
  comm->engine = engine; /* before create: a failed one is destroyed through it */
  WEFT_CHECK(engine->create(comm));
  INFO(WEFT_INIT, "comm %p rank %d nranks %d cudaDev %d engine %s commId 0x%llx - Init COMPLETE",
       (void *)comm, comm->rank, comm->nranks, comm->cuda_dev, engine->name,
       (unsigned long long)comm->comm_hash);
  return ncclSuccess;
}

struct init_job {
  struct ncclComm *comm;
  int nids;
  ncclUniqueId ids[]; /* nids */
};

static void *init_thread_main(void *arg) {
  struct init_job *job = arg;
  ncclResult_t res = comm_init_body(job->comm, job->ids, job->nids);
  atomic_store(&job->comm->async_error, (int)res);
  free(job);
  return NULL;
}

ncclResult_t weft_comm_create(const ncclUniqueId *ids, int nids, int nranks, int rank,
                              const ncclConfig_t *config, int async, struct ncclComm **out) {
  weft_log_version();
  struct ncclComm *comm = calloc(1, sizeof(*comm));
  if (comm == NULL) {
    WARN("rank %d: out of memory for a communicator", rank);
    return ncclSystemError;
  }
  comm->magic = WEFT_COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->config = *config;
  comm->cuda_dev = weft_device_current();
  comm->comm_hash = fnv1a(0xcbf29ce484222325ULL, &ids[0], sizeof(ids[0]));
  atomic_init(&comm->async_error, ncclInProgress);
  atomic_init(&comm->abort_flag, 0);
  if (!async) {
    ncclResult_t res = comm_init_body(comm, ids, nids);
    if (res != ncclSuccess) {
      weft_comm_free(comm, 1);
      return res;
    }
    atomic_store(&comm->async_error, ncclSuccess);
    *out = comm;
    return ncclSuccess;
  }
  struct init_job *job = malloc(sizeof(*job) + (size_t)nids * sizeof(ids[0]));
  if (job == NULL) {
    WARN("rank %d: out of memory", rank);
    free(comm);
    return ncclSystemError;
  }
  job->comm = comm;
  job->nids = nids;
  memcpy(job->ids, ids, (size_t)nids * sizeof(ids[0]));
  int err = pthread_create(&comm->init_thread, NULL, init_thread_main, job);
  if (err != 0) {
    WARN("rank %d: cannot start the init thread: %s", rank, strerror(err));
    free(job);
    free(comm);
    return ncclSystemError;
  }
  comm->init_thread_live = 1;
  *out = comm;
  return ncclInProgress;
}

ncclResult_t weft_comm_init_wait(struct ncclComm *comm) {
  if (comm->init_thread_live) {
    pthread_join(comm->init_thread, NULL);
    comm->init_thread_live = 0;
  }
  return (ncclResult_t)atomic_load(&comm->async_error);
}

ncclResult_t weft_comm_finalize(struct ncclComm *comm) {
  if (comm->engine != NULL) WEFT_CHECK(comm->engine->wait(comm));
  comm->finalized = 1;
  return ncclSuccess;
}

void weft_comm_free(struct ncclComm *comm, int abort) {
  if (abort) {
    atomic_store(&comm->abort_flag, 1);
    if (comm->bootstrap != NULL) weft_bootstrap_abort(comm->bootstrap);
  }
  if (comm->init_thread_live) {
    pthread_join(comm->init_thread, NULL);
    comm->init_thread_live = 0;
  }
  weft_failure_quiet(comm); /* its thread pokes the engines freed below */
  if (abort) atomic_store(&comm->abort_flag, 1);
  const struct weft_engine_ops *engine = comm->engine; /* NULL: init failed before choosing */
  if (engine != NULL) {
    /* Streams and kernels stop waiting before anything below waits on
     * them (exec/engine.h). */
    if (abort) engine->abort(comm);
    engine->destroy(comm, abort);
  }
  weft_comm_disconnect(comm);
  weft_failure_stop(comm);
  weft_bootstrap_destroy(comm->bootstrap);
  free(comm->peers);
  free(comm->redops);
  free(comm->ring_order);
  free(comm->peer_transport);
  comm->magic = 0;
  free(comm);
}
