/* Group semantics: between ncclGroupStart and ncclGroupEnd a thread's calls
 * are collected; ncclGroupEnd hands each communicator its operations, then
 * waits for all of them, so one thread can drive every rank of
 * ncclCommInitAll. A call outside a group is a group of one. */
#include "api/group.h"

#include <stdlib.h>

#include "api/alias.h"
#include "core/check.h"
#include "core/comm.h"
#include "exec/host.h"

struct group_task {
  struct ncclComm *comm;
  struct weft_coll coll;
};

static _Thread_local int group_depth;
static _Thread_local struct group_task *tasks;
static _Thread_local size_t ntasks;
static _Thread_local size_t cap_tasks;
/* Communicators created inside the group, finished at ncclGroupEnd. */
static _Thread_local struct ncclComm **inits;
static _Thread_local size_t ninits;

int weft_group_depth(void) { return group_depth; }

ncclResult_t weft_group_add_init(struct ncclComm *comm) {
  struct ncclComm **grown = realloc(inits, (ninits + 1) * sizeof(*grown));
  if (grown == NULL) {
    WARN("rank %d: out of memory for the group's communicator list", comm->rank);
    return ncclSystemError;
  }
  inits = grown;
  inits[ninits++] = comm;
  return ncclSuccess;
}

/* Waits for the blocking inits of the group; non-blocking ones go on and
 * report through ncclCommGetAsyncError. */
static ncclResult_t finish_inits(void) {
  ncclResult_t res = ncclSuccess;
  for (size_t i = 0; i < ninits; i++) {
    if (!inits[i]->config.blocking) continue;
    ncclResult_t r = weft_comm_init_wait(inits[i]);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  free(inits);
  inits = NULL;
  ninits = 0;
  return res;
}

static ncclResult_t push_task(struct ncclComm *comm, const struct weft_coll *coll) {
  if (ntasks == cap_tasks) {
    size_t cap = cap_tasks ? cap_tasks * 2 : 16;
    struct group_task *grown = realloc(tasks, cap * sizeof(*grown));
    if (grown == NULL) {
      WARN("rank %d: out of memory for %zu grouped operations", comm->rank, cap);
      return ncclSystemError;
    }
    tasks = grown;
    cap_tasks = cap;
  }
  tasks[ntasks++] = (struct group_task){comm, *coll};
  return ncclSuccess;
}

/* Hands every task to its engine, then waits for each communicator once. */
static ncclResult_t launch_tasks(void) {
  ncclResult_t res = ncclSuccess;
  for (size_t i = 0; i < ntasks; i++) {
    ncclResult_t r = weft_host_engine_enqueue(tasks[i].comm, &tasks[i].coll);
    tasks[i].comm->op_seq++;
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  for (size_t i = 0; i < ntasks; i++) {
    int seen = 0;
    for (size_t j = 0; j < i && !seen; j++) seen = tasks[j].comm == tasks[i].comm;
    if (seen) continue;
    ncclResult_t r = weft_host_engine_wait(tasks[i].comm);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  /* Freed, not kept, so a thread that ends leaves nothing behind. */
  free(tasks);
  tasks = NULL;
  ntasks = cap_tasks = 0;
  return res;
}

ncclResult_t weft_group_add(struct ncclComm *comm, const struct weft_coll *coll) {
  WEFT_CHECK(push_task(comm, coll));
  if (group_depth > 0) return ncclSuccess;
  return launch_tasks();
}

WEFT_API ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}
WEFT_ALIAS(ncclGroupStart)

WEFT_API ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) {
    WARN("ncclGroupEnd: called without a matching ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t res = finish_inits();
  ncclResult_t r = launch_tasks();
  return res != ncclSuccess ? res : r;
}
WEFT_ALIAS(ncclGroupEnd)
