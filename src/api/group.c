/* Group semantics: between ncclGroupStart and ncclGroupEnd a thread's calls
 * are collected; ncclGroupEnd hands each communicator its operations, then
 * waits for all of them, so one thread can drive every rank of
 * ncclCommInitAll. A call outside a group is a group of one.
 *
 * At the end of a group, per communicator in the order they first appear,
 * the communicator's engine (exec/engine.h) takes its operations in call
 * order and tunes, plans and queues them; then each engine's group_wait
 * runs: the host engine waits for the results, engines with stream
 * semantics (cuda, staged) return at once, as NCCL's calls do.
 * ncclGroupSimulateEnd asks the engines for estimates only and sums them. */
#include "api/group.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/alias.h"
#include "base/check.h"
#include "core/comm.h"
#include "exec/engine.h"

#define SIM_INFO_MAGIC 0x74685283u

struct group_task {
  struct ncclComm *comm;
  struct weft_engine_op op; /* copied for the engine at the end of the group */
};

static _Thread_local int group_depth;
/* The operations of the open group: in inline_tasks while they fit (a
 * group of a few sends and receives then allocates nothing), else on the
 * heap. */
#define GROUP_INLINE 8
static _Thread_local struct group_task inline_tasks[GROUP_INLINE];
static _Thread_local struct group_task *tasks;
static _Thread_local size_t ntasks;
static _Thread_local size_t cap_tasks;
/* Communicators created inside the group, finished at ncclGroupEnd. */
static _Thread_local struct ncclComm **inits;
static _Thread_local size_t ninits;

/* Collective steps deferred to ncclGroupEnd (weft_group_add_step). */
struct group_step {
  struct ncclComm *comm;
  ncclResult_t (*fn)(void *arg);
  void *arg;
};
static _Thread_local struct group_step *steps;
static _Thread_local size_t nsteps;

int weft_group_depth(void) {
  return group_depth;
}

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

ncclResult_t weft_group_add_step(struct ncclComm *comm, ncclResult_t (*fn)(void *arg), void *arg) {
  struct group_step *grown = realloc(steps, (nsteps + 1) * sizeof(*grown));
  if (grown == NULL) {
    WARN("rank %d: out of memory for the group's deferred steps", comm->rank);
    return ncclSystemError;
  }
  steps = grown;
  steps[nsteps++] = (struct group_step){comm, fn, arg};
  return ncclSuccess;
}

void weft_group_forget(const char *caller, const struct ncclComm *comm, int quiet) {
  size_t kept = 0, dropped = 0;
  for (size_t i = 0; i < nsteps; i++)
    if (steps[i].comm != comm) steps[kept++] = steps[i];
  nsteps = kept;
  kept = 0;
  for (size_t i = 0; i < ntasks; i++) {
    if (tasks[i].comm == comm)
      dropped++;
    else
      tasks[kept++] = tasks[i];
  }
  ntasks = kept;
  kept = 0;
  for (size_t i = 0; i < ninits; i++)
    if (inits[i] != comm) inits[kept++] = inits[i];
  ninits = kept;
  if (dropped > 0 && !quiet)
    WARN("%s: rank %d: %zu operations queued on comm %p in the open group are dropped, never run",
         caller, comm->rank, dropped, (const void *)comm);
  else if (dropped > 0)
    INFO(WEFT_INIT, "%s: rank %d: dropped %zu operations queued in the open group", caller,
         comm->rank, dropped);
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

/* One communicator's deferred steps, run in call order (on a thread of
 * its own where several communicators have some). Every step runs even
 * after one failed: each is collective, so its peers expect it, and a
 * step that never ran would leave its object waiting (a window pending
 * for good); the first error is returned. */
struct step_run {
  struct ncclComm *comm;
  const struct group_step *steps;
  size_t nsteps;
  ncclResult_t res;
  pthread_t thread;
  int started;
};

static void *run_steps(void *arg) {
  struct step_run *r = arg;
  for (size_t i = 0; i < r->nsteps; i++) {
    if (r->steps[i].comm != r->comm) continue;
    ncclResult_t res = r->steps[i].fn(r->steps[i].arg);
    if (r->res == ncclSuccess) r->res = res;
  }
  return NULL;
}

static ncclResult_t finish_steps(void) {
  struct group_step *all = steps;
  size_t n = nsteps;
  steps = NULL;
  nsteps = 0;
  if (n == 0) {
    free(all);
    return ncclSuccess;
  }
  struct step_run *runs = calloc(n, sizeof(*runs));
  if (runs == NULL) {
    WARN("rank %d: out of memory running the group's deferred steps", all[0].comm->rank);
    free(all);
    return ncclSystemError;
  }
  size_t nruns = 0;
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < nruns && runs[j].comm != all[i].comm) j++;
    if (j == nruns)
      runs[nruns++] = (struct step_run){.comm = all[i].comm, .steps = all, .nsteps = n};
  }
  for (size_t j = 0; j < nruns && nruns > 1; j++) {
    runs[j].started = pthread_create(&runs[j].thread, NULL, run_steps, &runs[j]) == 0;
    if (!runs[j].started)
      WARN("rank %d: no thread for the group's deferred steps: run on this one",
           runs[j].comm->rank);
  }
  /* One communicator, or threads that could not start: on this thread. */
  for (size_t j = 0; j < nruns; j++)
    if (!runs[j].started) run_steps(&runs[j]);
  ncclResult_t res = ncclSuccess;
  for (size_t j = 0; j < nruns; j++) {
    if (runs[j].started) pthread_join(runs[j].thread, NULL);
    if (runs[j].res != ncclSuccess && res == ncclSuccess) res = runs[j].res;
  }
  free(runs);
  free(all);
  return res;
}

static void op_fill(struct weft_engine_op *op, const struct weft_coll *coll,
                    const struct weft_redop_use *use, void *stream) {
  op->coll = *coll;
  op->stream = stream;
  if (use != NULL)
    op->redop = *use;
  else
    memset(&op->redop, 0, sizeof(op->redop));
}

static ncclResult_t push_task(struct ncclComm *comm, const struct weft_coll *coll,
                              const struct weft_redop_use *use, void *stream) {
  if (cap_tasks == 0) {
    tasks = inline_tasks;
    cap_tasks = GROUP_INLINE;
  }
  if (ntasks == cap_tasks) {
    size_t cap = cap_tasks * 2;
    struct group_task *grown =
        tasks == inline_tasks ? malloc(cap * sizeof(*grown)) : realloc(tasks, cap * sizeof(*grown));
    if (grown == NULL) {
      WARN("rank %d: out of memory for %zu grouped operations", comm->rank, cap);
      return ncclSystemError;
    }
    if (tasks == inline_tasks) memcpy(grown, inline_tasks, ntasks * sizeof(*grown));
    tasks = grown;
    cap_tasks = cap;
  }
  struct group_task *t = &tasks[ntasks++];
  t->comm = comm;
  op_fill(&t->op, coll, use, stream);
  return ncclSuccess;
}

/* Freed, not kept, so a thread that ends leaves nothing behind. */
static void clear_tasks(void) {
  if (tasks != inline_tasks) free(tasks);
  tasks = NULL;
  ntasks = cap_tasks = 0;
}

static int comm_seen_before(size_t i) {
  for (size_t j = 0; j < i; j++)
    if (tasks[j].comm == tasks[i].comm) return 1;
  return 0;
}

/* Hands the communicator first seen at tasks[first] its operations, copied
 * to ops_out in call order; returns how many there were in *n_out. */
static ncclResult_t enqueue_comm(size_t first, struct weft_engine_op *ops_out, size_t *n_out) {
  struct ncclComm *comm = tasks[first].comm;
  size_t n = 0;
  for (size_t i = first; i < ntasks; i++)
    if (tasks[i].comm == comm) ops_out[n++] = tasks[i].op;
  *n_out = n;
  return comm->engine->enqueue(comm, ops_out, n);
}

/* Hands every communicator its operations, then waits for each once. The
 * operations are regrouped by communicator into one array that lives
 * until the waits are over: a host task reads its PreMulSum scalar there
 * when it starts. */
static ncclResult_t launch_tasks(void) {
  if (ntasks == 0) {
    clear_tasks(); /* a group whose operations were all forgotten */
    return ncclSuccess;
  }
  struct weft_engine_op few[GROUP_INLINE];
  struct weft_engine_op *ops = ntasks <= GROUP_INLINE ? few : malloc(ntasks * sizeof(*ops));
  if (ops == NULL) {
    WARN("rank %d: out of memory queuing %zu grouped operations", tasks[0].comm->rank, ntasks);
    clear_tasks();
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  size_t used = 0;
  for (size_t i = 0; i < ntasks; i++) {
    if (comm_seen_before(i)) continue;
    size_t n;
    ncclResult_t r = enqueue_comm(i, ops + used, &n);
    used += n;
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  for (size_t i = 0; i < ntasks; i++) {
    if (comm_seen_before(i)) continue;
    ncclResult_t r = tasks[i].comm->engine->group_wait(tasks[i].comm);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  if (ops != few) free(ops);
  clear_tasks();
  return res;
}

ncclResult_t weft_group_add(struct ncclComm *comm, const struct weft_coll *coll,
                            const struct weft_redop_use *use) {
  return weft_group_add_on(comm, coll, use, NULL);
}

ncclResult_t weft_group_add_on(struct ncclComm *comm, const struct weft_coll *coll,
                               const struct weft_redop_use *use, void *stream) {
  if (group_depth == 0 && ntasks == 0) {
    /* A call outside any group: its one operation goes to the engine from
     * here, as launch_tasks would hand it over, without the task list's
     * two allocations (a third of a one-rank call on host ranks). */
    struct weft_engine_op op;
    op_fill(&op, coll, use, stream);
    ncclResult_t res = comm->engine->enqueue(comm, &op, 1);
    ncclResult_t r = comm->engine->group_wait(comm);
    return res != ncclSuccess ? res : r;
  }
  WEFT_CHECK(push_task(comm, coll, use, stream));
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
  ncclResult_t s = finish_steps();
  if (res == ncclSuccess) res = s;
  ncclResult_t r = launch_tasks();
  return res != ncclSuccess ? res : r;
}
WEFT_ALIAS(ncclGroupEnd)

/* What is wrong with info, in buf ("" when nothing is). */
static void sim_info_problem(const ncclSimInfo_t *info, char *buf, size_t size) {
  size_t need = offsetof(ncclSimInfo_t, estimatedTime) + sizeof(info->estimatedTime);
  buf[0] = '\0';
  if (info == NULL)
    snprintf(buf, size,
             "simInfo is NULL, expected an ncclSimInfo_t set to NCCL_SIM_INFO_INITIALIZER");
  else if (info->magic != SIM_INFO_MAGIC)
    snprintf(buf, size,
             "simInfo->magic is 0x%x, expected 0x%x: initialize it with NCCL_SIM_INFO_INITIALIZER",
             info->magic, SIM_INFO_MAGIC);
  else if (info->size < need)
    snprintf(buf, size, "simInfo->size is %zu, expected at least %zu (an ncclSimInfo_t)",
             info->size, need);
}

/* The model's time for the whole group: the sum over its operations. */
static ncclResult_t group_estimate(float *us_out) {
  float total = 0;
  for (size_t i = 0; i < ntasks; i++) {
    struct ncclComm *comm = tasks[i].comm;
    float us;
    WEFT_CHECK(comm->engine->estimate(comm, &tasks[i].op, &us));
    total += us;
  }
  *us_out = total;
  return ncclSuccess;
}

/* Like ncclGroupEnd, but the operations are only estimated, never run; the
 * group is cleared either way. Communicators created in the group are
 * finished, and its deferred steps (windows registered in it) run, as they
 * would: peers that end the group with ncclGroupEnd expect them. A bad
 * simInfo inside a group still ends the group, as in NCCL, without an
 * estimate: left open, the caller's next calls would join a group nobody
 * ends, and never run. */
WEFT_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  static const char caller[] = "ncclGroupSimulateEnd";
  char bad[160];
  sim_info_problem(simInfo, bad, sizeof(bad));
  if (group_depth == 0) {
    WARN("%s: %s", caller, bad[0] != '\0' ? bad : "called without a matching ncclGroupStart");
    return bad[0] != '\0' ? ncclInvalidArgument : ncclInvalidUsage;
  }
  if (--group_depth > 0) {
    if (bad[0] != '\0') {
      WARN("%s: %s", caller, bad);
      return ncclInvalidArgument;
    }
    simInfo->estimatedTime = 0;
    return ncclSuccess;
  }
  float us = 0;
  ncclResult_t res = ncclSuccess;
  if (bad[0] != '\0') {
    WARN(
        "%s: %s; the group is ended all the same, its %zu operations dropped, never run (as a "
        "simulation's are)",
        caller, bad, ntasks);
    res = ncclInvalidArgument;
  } else {
    res = group_estimate(&us);
  }
  clear_tasks();
  ncclResult_t r = finish_inits();
  if (res == ncclSuccess) res = r;
  r = finish_steps();
  if (res == ncclSuccess) res = r;
  if (res == ncclSuccess) simInfo->estimatedTime = us;
  return res;
}
WEFT_ALIAS(ncclGroupSimulateEnd)
