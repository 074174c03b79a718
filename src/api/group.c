/* Group semantics: between ncclGroupStart and ncclGroupEnd a thread's calls
 * are collected; ncclGroupEnd hands each communicator its operations, then
 * waits for all of them, so one thread can drive every rank of
 * ncclCommInitAll. A call outside a group is a group of one.
 *
 * At the end of a group, per communicator in the order they first appear:
 * each collective, in call order, is tuned, planned and queued as one task;
 * then all the group's sends and receives on that communicator form one
 * more task, so they progress together whatever order the ranks issued them
 * in. ncclGroupSimulateEnd does the tuning only and sums its estimates.
 *
 * A communicator on the CUDA engine (comm->host_engine == 0) gets the same
 * plans, launched on the calls' streams: consecutive collectives of one
 * communicator share one kernel (launch_cuda_colls), its sends and
 * receives another; ncclGroupEnd then returns without waiting for them
 * (NCCL's stream semantics). So does a staged one
 * (comm->staged): its tasks go to the host engine with their copies through
 * host memory queued on the calls' streams (exec/cuda_staged.c). */
#include "api/group.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/alias.h"
#include "core/check.h"
#include "core/comm.h"
#include "core/param.h"
#include "exec/cuda.h"
#include "exec/cuda_staged.h"
#include "exec/host.h"
#include "exec/reduce.h"
#include "sched/tuning.h"

#define SIM_INFO_MAGIC 0x74685283u

struct group_task {
  struct ncclComm *comm;
  struct weft_coll coll;
  struct weft_redop_use redop; /* stays here until the group has finished */
  void *stream;                /* the call's cudaStream_t (CUDA engine only) */
};

static _Thread_local int group_depth;
static _Thread_local struct group_task *tasks;
static _Thread_local size_t ntasks;
static _Thread_local size_t cap_tasks;
/* Copies of send buffers that overlap a receive buffer, freed after the
 * group has run. */
static _Thread_local void **staged;
static _Thread_local size_t nstaged;
/* Communicators created inside the group, finished at ncclGroupEnd. */
static _Thread_local struct ncclComm **inits;
static _Thread_local size_t ninits;

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

size_t weft_group_forget(const struct ncclComm *comm) {
  size_t kept = 0, dropped = 0;
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
  return dropped;
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

static ncclResult_t push_task(struct ncclComm *comm, const struct weft_coll *coll,
                              const struct weft_redop_use *use, void *stream) {
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
  struct group_task *t = &tasks[ntasks++];
  t->comm = comm;
  t->coll = *coll;
  t->stream = stream;
  if (use != NULL)
    t->redop = *use;
  else
    memset(&t->redop, 0, sizeof(t->redop));
  return ncclSuccess;
}

/* Freed, not kept, so a thread that ends leaves nothing behind. */
static void clear_tasks(void) {
  free(tasks);
  tasks = NULL;
  ntasks = cap_tasks = 0;
}

static int is_p2p(const struct group_task *t) {
  return t->coll.func == WEFT_FUNC_SEND || t->coll.func == WEFT_FUNC_RECV;
}

/* Bytes a collective's caller buffer holds: count elements (per rank for
 * AllGather/ReduceScatter). */
static size_t coll_bytes(const struct weft_coll *coll) {
  return coll->count * weft_dtype_size(coll->datatype);
}

/* A collective of a CUDA-engine communicator, tuned and planned. */
static ncclResult_t cuda_call(struct group_task *t, struct weft_cuda_call *out) {
  struct ncclComm *comm = t->comm;
  const struct weft_coll *coll = &t->coll;
  struct weft_tuning tune;
  WEFT_CHECK(weft_tune(comm, coll->func, coll_bytes(coll), weft_dtype_size(coll->datatype), &tune));
  int max_ch = weft_cuda_engine_max_channels(comm);
  *out = (struct weft_cuda_call){
      .coll = coll,
      .args = {.func = coll->func,
               .rank = comm->rank,
               .nranks = comm->nranks,
               .root = coll->root,
               .count = coll->count,
               .elem_size = weft_dtype_size(coll->datatype),
               .nchannels = tune.nchannels < max_ch ? tune.nchannels : max_ch,
               .chunk_bytes = tune.chunk_bytes,
               .ring = comm->ring_order},
      .algo = tune.algo,
      .proto = tune.proto,
      .stream = t->stream,
  };
  return ncclSuccess;
}

/* Whether a collective can share a kernel with others: PreMulSum and a
 * Direct AllReduce launch kernels of their own around the plan's. */
static int cuda_fusable(const struct group_task *t, const struct weft_cuda_call *c) {
  return !t->redop.premul_sum && !(c->algo == WEFT_ALGO_DIRECT && t->comm->nranks > 1);
}

/* Launches calls[0..n) of comm: one alone as weft_cuda_engine_launch does,
 * more as one kernel. Returns without waiting. */
static ncclResult_t launch_cuda_run(struct ncclComm *comm, const struct group_task *t,
                                    const struct weft_cuda_call *calls, int n) {
  if (n == 0) return ncclSuccess;
  if (n > 1) return weft_cuda_engine_launch_fused(comm, calls, n);
  /* A device scalar stays a pointer: the kernel reads it when it runs. */
  struct weft_cuda_premul premul = {.dev_ptr = t->redop.scalar_ptr};
  memcpy(premul.value, t->redop.value, sizeof(premul.value));
  return weft_cuda_engine_launch(comm, calls->coll, &calls->args, calls->algo, calls->proto,
                                 t->redop.premul_sum ? &premul : NULL, calls->stream);
}

/* The collectives of a CUDA-engine communicator in the group, from
 * tasks[first] on, in call order: each run of consecutive ones that can
 * share a kernel (cuda_fusable, one protocol, at most WEFT_CUDA_FUSE_MAX)
 * is one launch; the others launch alone. Every rank sees the same calls
 * and tunes them alike, so every rank fuses the same runs. */
static ncclResult_t launch_cuda_colls(struct ncclComm *comm, size_t first) {
  struct weft_cuda_call run[WEFT_CUDA_FUSE_MAX];
  const struct group_task *run_first = NULL;
  int nrun = 0;
  for (size_t i = first; i < ntasks; i++) {
    struct group_task *t = &tasks[i];
    if (t->comm != comm || is_p2p(t)) continue;
    struct weft_cuda_call c;
    WEFT_CHECK(cuda_call(t, &c));
    int fusable = cuda_fusable(t, &c);
    if (nrun > 0 && (!fusable || c.proto != run[0].proto || nrun == WEFT_CUDA_FUSE_MAX)) {
      WEFT_CHECK(launch_cuda_run(comm, run_first, run, nrun));
      nrun = 0;
    }
    comm->op_seq++;
    if (!fusable) {
      WEFT_CHECK(launch_cuda_run(comm, t, &c, 1));
      continue;
    }
    if (nrun == 0) run_first = t;
    run[nrun++] = c;
  }
  return launch_cuda_run(comm, run_first, run, nrun);
}

/* Tunes, plans and queues one collective on its communicator. */
static ncclResult_t enqueue_coll(struct group_task *t) {
  struct ncclComm *comm = t->comm;
  const struct weft_coll *coll = &t->coll;
  size_t elem = weft_dtype_size(coll->datatype);
  struct weft_tuning tune;
  WEFT_CHECK(weft_tune(comm, coll->func, coll_bytes(coll), elem, &tune));
  struct weft_sched_args args = {
      .func = coll->func,
      .rank = comm->rank,
      .nranks = comm->nranks,
      .root = coll->root,
      .count = coll->count,
      .elem_size = elem,
      .nchannels = tune.nchannels,
      .chunk_bytes = tune.chunk_bytes,
      .ring = comm->ring_order, /* set at init from the topology */
  };
  struct weft_host_task task;
  memset(&task, 0, sizeof(task));
  task.coll = *coll;
  task.nbufs = 2;
  task.bufs = malloc(2 * sizeof(*task.bufs));
  if (task.bufs == NULL) {
    WARN("rank %d: out of memory queuing %s", comm->rank, weft_func_name(coll->func));
    return ncclSystemError;
  }
  task.bufs[WEFT_BUF_IN] = (void *)(uintptr_t)coll->sendbuff;
  task.bufs[WEFT_BUF_OUT] = coll->recvbuff;
  ncclResult_t res;
  if (tune.algo == WEFT_ALGO_DIRECT && comm->nranks > 1) {
    task.algo = WEFT_ALGO_DIRECT;
    res = weft_direct_plan(comm->rank, comm->nranks, coll_bytes(coll), &task.plan);
  } else if (tune.algo == WEFT_ALGO_TREE) {
    res = weft_tree_plan(&args, &task.plan);
  } else {
    res = weft_ring_plan(&args, &task.plan);
  }
  if (res != ncclSuccess) {
    free(task.bufs);
    WEFT_CHECK(res);
  }
  if (t->redop.premul_sum) {
    /* The engine scales the input by the scalar, then sums. */
    task.coll.op = ncclSum;
    task.premul_sum = 1;
    task.premul_scalar = t->redop.scalar_ptr ? t->redop.scalar_ptr : t->redop.value;
  }
  comm->op_seq++;
  if (comm->staged)
    return weft_cuda_staged_coll(comm, &task, t->redop.scalar_ptr != NULL, t->stream);
  return weft_host_engine_enqueue(comm, &task);
}

static int overlaps(const void *a, size_t alen, const void *b, size_t blen) {
  const char *x = a, *y = b;
  return alen > 0 && blen > 0 && x < y + blen && y < x + alen;
}

/* Whether op k, a send, reads memory that a receive of the group writes. */
static int send_overlaps_recv(void *const *bufs, const struct weft_p2p *ops, int nops, int k) {
  for (int j = 0; j < nops; j++)
    if (!ops[j].is_send && overlaps(bufs[k], ops[k].bytes, bufs[j], ops[j].bytes)) return 1;
  return 0;
}

/* A send that reads a buffer a receive of the same group writes (in-place
 * AlltoAll, a send/recv pair on one buffer) would read data already
 * overwritten: such sends go from a copy taken now. */
static ncclResult_t stage_overlapping_sends(struct weft_host_task *task, int rank) {
  for (int k = 0; k < task->nbufs; k++) {
    if (!task->p2p[k].is_send) continue;
    if (!send_overlaps_recv(task->bufs, task->p2p, task->nbufs, k)) continue;
    void **grown = realloc(staged, (nstaged + 1) * sizeof(*grown));
    void *copy = grown ? malloc(task->p2p[k].bytes) : NULL;
    if (grown) staged = grown;
    if (copy == NULL) {
      WARN("rank %d: out of memory staging a %zu-byte in-place send", rank, task->p2p[k].bytes);
      return ncclSystemError;
    }
    memcpy(copy, task->bufs[k], task->p2p[k].bytes);
    staged[nstaged++] = copy;
    task->bufs[k] = copy;
  }
  return ncclSuccess;
}

static void free_staged(void) {
  for (size_t i = 0; i < nstaged; i++) free(staged[i]);
  free(staged);
  staged = NULL;
  nstaged = 0;
}

/* A staged communicator's p2p task, with each op's stream (in op order):
 * the copies through host memory run on them. Takes the task. */
static ncclResult_t enqueue_p2p_staged(struct ncclComm *comm, struct weft_host_task *task,
                                       size_t first, size_t nops) {
  void **streams = malloc(nops * sizeof(*streams));
  if (streams == NULL) {
    WARN("rank %d: out of memory queuing %zu grouped sends/receives", comm->rank, nops);
    weft_host_task_free(task);
    return ncclSystemError;
  }
  size_t k = 0;
  for (size_t i = first; i < ntasks && k < nops; i++)
    if (tasks[i].comm == comm && is_p2p(&tasks[i])) streams[k++] = tasks[i].stream;
  ncclResult_t res = weft_cuda_staged_p2p(comm, task, streams);
  free(streams);
  return res;
}

/* Launches every send and receive of a CUDA-engine comm in the group as
 * one kernel on the first call's stream (the others' streams are joined
 * to it and back, as NCCL orders a group's streams); returns without
 * waiting. Sends that overlap a receive go from a copy on the stream. */
static ncclResult_t launch_cuda_p2p(struct ncclComm *comm, size_t first, size_t nops) {
  ncclResult_t res = ncclSystemError;
  struct weft_p2p *ops = malloc(nops * sizeof(*ops));
  void **bufs = malloc(nops * sizeof(*bufs));
  void **streams = malloc(nops * sizeof(*streams));
  unsigned char *stage = calloc(nops, 1);
  if (ops == NULL || bufs == NULL || streams == NULL || stage == NULL || nops > INT32_MAX) {
    WARN("rank %d: cannot launch %zu grouped sends/receives (out of memory)", comm->rank, nops);
  } else {
    int k = 0, nstreams = 0;
    for (size_t i = first; i < ntasks && (size_t)k < nops; i++) {
      const struct group_task *t = &tasks[i];
      if (t->comm != comm || !is_p2p(t)) continue;
      int send = t->coll.func == WEFT_FUNC_SEND;
      bufs[k] = send ? (void *)(uintptr_t)t->coll.sendbuff : t->coll.recvbuff;
      ops[k++] = (struct weft_p2p){t->coll.root, send, coll_bytes(&t->coll)};
      nstreams = weft_cuda_stream_add(streams, nstreams, t->stream);
    }
    for (int j = 0; j < k; j++) stage[j] = ops[j].is_send && send_overlaps_recv(bufs, ops, k, j);
    struct weft_cuda_p2p p = {ops, bufs, stage, k, streams, nstreams};
    res = weft_cuda_engine_launch_p2p(comm, &p);
  }
  free(ops);
  free(bufs);
  free(streams);
  free(stage);
  return res;
}

/* Queues every send and receive of comm in the group as one task. */
static ncclResult_t enqueue_p2p(struct ncclComm *comm, size_t first, size_t nops) {
  if (!comm->host_engine) return launch_cuda_p2p(comm, first, nops);
  struct weft_host_task task;
  memset(&task, 0, sizeof(task));
  task.is_p2p = 1;
  task.coll.func = WEFT_FUNC_SEND;
  task.nbufs = (int)nops;
  task.bufs = malloc(nops * sizeof(*task.bufs));
  task.p2p = malloc(nops * sizeof(*task.p2p));
  if (task.bufs == NULL || task.p2p == NULL || nops > INT32_MAX) {
    WARN("rank %d: cannot queue %zu grouped sends/receives (out of memory)", comm->rank, nops);
    free(task.bufs);
    free(task.p2p);
    return ncclSystemError;
  }
  size_t k = 0;
  for (size_t i = first; i < ntasks && k < nops; i++) {
    const struct group_task *t = &tasks[i];
    if (t->comm != comm || !is_p2p(t)) continue;
    int send = t->coll.func == WEFT_FUNC_SEND;
    task.bufs[k] = send ? (void *)(uintptr_t)t->coll.sendbuff : t->coll.recvbuff;
    task.p2p[k] = (struct weft_p2p){t->coll.root, send, coll_bytes(&t->coll)};
    k++;
  }
  /* Staged ops each get their own staging copy: nothing to stage here. */
  ncclResult_t res = comm->staged ? ncclSuccess : stage_overlapping_sends(&task, comm->rank);
  if (res == ncclSuccess) res = weft_p2p_plan(comm->rank, task.p2p, (int)nops, &task.plan);
  if (res != ncclSuccess) {
    free(task.bufs);
    free(task.p2p);
    WEFT_CHECK(res);
  }
  if (comm->staged) return enqueue_p2p_staged(comm, &task, first, nops);
  return weft_host_engine_enqueue(comm, &task);
}

/* Queues the group's operations on the communicator first seen at tasks[first]. */
static ncclResult_t enqueue_comm(size_t first) {
  struct ncclComm *comm = tasks[first].comm;
  size_t np2p = 0;
  if (!comm->host_engine) WEFT_CHECK(launch_cuda_colls(comm, first));
  for (size_t i = first; i < ntasks; i++) {
    if (tasks[i].comm != comm) continue;
    if (is_p2p(&tasks[i])) {
      np2p++;
      continue;
    }
    if (comm->host_engine) WEFT_CHECK(enqueue_coll(&tasks[i]));
  }
  if (np2p > 0) WEFT_CHECK(enqueue_p2p(comm, first, np2p));
  return ncclSuccess;
}

static int comm_seen_before(size_t i) {
  for (size_t j = 0; j < i; j++)
    if (tasks[j].comm == tasks[i].comm) return 1;
  return 0;
}

/* Hands every task to its engine, then waits for each communicator once. */
static ncclResult_t launch_tasks(void) {
  ncclResult_t res = ncclSuccess;
  for (size_t i = 0; i < ntasks; i++) {
    if (comm_seen_before(i)) continue;
    ncclResult_t r = enqueue_comm(i);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  /* Staged communicators keep stream semantics: their streams wait. */
  for (size_t i = 0; i < ntasks; i++) {
    if (comm_seen_before(i) || !tasks[i].comm->host_engine || tasks[i].comm->staged) continue;
    ncclResult_t r = weft_host_engine_wait(tasks[i].comm);
    if (r != ncclSuccess && res == ncclSuccess) res = r;
  }
  clear_tasks();
  free_staged();
  return res;
}

ncclResult_t weft_group_add(struct ncclComm *comm, const struct weft_coll *coll,
                            const struct weft_redop_use *use) {
  return weft_group_add_on(comm, coll, use, NULL);
}

ncclResult_t weft_group_add_on(struct ncclComm *comm, const struct weft_coll *coll,
                               const struct weft_redop_use *use, void *stream) {
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
  ncclResult_t r = launch_tasks();
  return res != ncclSuccess ? res : r;
}
WEFT_ALIAS(ncclGroupEnd)

static ncclResult_t sim_info_check(const ncclSimInfo_t *info) {
  static const char caller[] = "ncclGroupSimulateEnd";
  size_t need = offsetof(ncclSimInfo_t, estimatedTime) + sizeof(info->estimatedTime);
  if (info == NULL) {
    WARN("%s: simInfo is NULL, expected an ncclSimInfo_t set to NCCL_SIM_INFO_INITIALIZER", caller);
    return ncclInvalidArgument;
  }
  if (info->magic != SIM_INFO_MAGIC) {
    WARN(
        "%s: simInfo->magic is 0x%x, expected 0x%x: initialize it with "
        "NCCL_SIM_INFO_INITIALIZER",
        caller, info->magic, SIM_INFO_MAGIC);
    return ncclInvalidArgument;
  }
  if (info->size < need) {
    WARN("%s: simInfo->size is %zu, expected at least %zu (an ncclSimInfo_t)", caller, info->size,
         need);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* The model's time for the whole group: the sum over its operations. */
static ncclResult_t group_estimate(float *us_out) {
  float total = 0;
  for (size_t i = 0; i < ntasks; i++) {
    const struct weft_coll *coll = &tasks[i].coll;
    struct weft_tuning tune;
    size_t elem = weft_dtype_size(coll->datatype);
    WEFT_CHECK(weft_tune(tasks[i].comm, coll->func, coll_bytes(coll), elem, &tune));
    total += tune.estimated_us;
  }
  *us_out = total;
  return ncclSuccess;
}

/* Like ncclGroupEnd, but the operations are only estimated, never run; the
 * group is cleared either way. Communicators created in the group are
 * finished, as they would be. */
WEFT_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  WEFT_CHECK(sim_info_check(simInfo));
  if (group_depth == 0) {
    WARN("ncclGroupSimulateEnd: called without a matching ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) {
    simInfo->estimatedTime = 0;
    return ncclSuccess;
  }
  float us = 0;
  ncclResult_t res = group_estimate(&us);
  clear_tasks();
  ncclResult_t r = finish_inits();
  if (res == ncclSuccess) res = r;
  if (res == ncclSuccess) simInfo->estimatedTime = us;
  return res;
}
WEFT_ALIAS(ncclGroupSimulateEnd)
