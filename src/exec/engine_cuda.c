/* The CUDA engine's table: a group's operations tuned for the kernels and
 * launched on the callers' streams (exec/cuda.c); calls return once
 * launched, as NCCL's do. Consecutive collectives of a communicator share
 * one kernel where they can, its sends and receives another. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "exec/cuda.h"
#include "exec/engine.h"
#include "exec/reduce.h"
#include "sched/tuning.h"

/* A collective tuned and planned for the kernels. */
static ncclResult_t cuda_call(struct ncclComm *comm, const struct weft_engine_op *op,
                              struct weft_cuda_call *out) {
  const struct weft_coll *coll = &op->coll;
  size_t elem = weft_dtype_size(coll->datatype);
  if (comm->nranks == 1) {
    /* A copy or nothing (weft_cuda_engine_launch): nothing to tune. */
    *out = (struct weft_cuda_call){
        .coll = coll,
        .args = {.func = coll->func, .nranks = 1, .count = coll->count, .elem_size = elem},
        .algo = WEFT_ALGO_RING,
        .proto = WEFT_PROTO_SIMPLE,
        .stream = op->stream,
    };
    return ncclSuccess;
  }
  struct weft_tuning tune;
  int mapped = !op->redop.premul_sum && weft_cuda_engine_mapped(comm, coll);
  WEFT_CHECK(
      weft_tune_mapped(comm, 1, coll->func, weft_engine_op_bytes(coll), elem, mapped, &tune));
  int max_ch = weft_cuda_engine_max_channels(comm);
  *out = (struct weft_cuda_call){
      .coll = coll,
      .args = {.func = coll->func,
               .rank = comm->rank,
               .nranks = comm->nranks,
               .root = coll->root,
               .count = coll->count,
               .elem_size = elem,
               .nchannels = tune.nchannels < max_ch ? tune.nchannels : max_ch,
               .chunk_bytes = tune.chunk_bytes,
               .ring = comm->ring_order},
      .algo = tune.algo,
      .proto = tune.proto,
      .stream = op->stream,
  };
  return ncclSuccess;
}

/* Whether a collective can share a kernel with others: PreMulSum and
 * Direct launch kernels of their own, and one rank's are copies. */
/* LL128 has no fused kernel (device/plan_kernel.cuh: it would cost the
 * build several CPU-seconds for a protocol that runs over NVLink only). */
static int cuda_fusable(const struct ncclComm *comm, const struct weft_engine_op *op,
                        const struct weft_cuda_call *c) {
  return !op->redop.premul_sum && c->algo != WEFT_ALGO_DIRECT && c->proto != WEFT_PROTO_LL128 &&
         comm->nranks > 1;
}

/* Launches calls[0..n) of comm (op: the first one's): one alone as
 * weft_cuda_engine_launch does, more as one kernel. */
static ncclResult_t launch_run(struct ncclComm *comm, const struct weft_engine_op *op,
                               const struct weft_cuda_call *calls, int n) {
  if (n == 0) return ncclSuccess;
  if (n > 1) return weft_cuda_engine_launch_fused(comm, calls, n);
  /* A device scalar stays a pointer: the kernel reads it when it runs. */
  struct weft_cuda_premul premul = {.dev_ptr = op->redop.scalar_ptr};
  memcpy(premul.value, op->redop.value, sizeof(premul.value));
  return weft_cuda_engine_launch(comm, calls->coll, &calls->args, calls->algo, calls->proto,
                                 op->redop.premul_sum ? &premul : NULL, calls->stream);
}

/* The collectives in call order: each run of consecutive ones that can
 * share a kernel (cuda_fusable, one protocol, at most WEFT_CUDA_FUSE_MAX)
 * is one launch; the others launch alone. Every rank sees the same calls
 * and tunes them alike, so every rank fuses the same runs. */
static ncclResult_t launch_colls(struct ncclComm *comm, const struct weft_engine_op *ops,
                                 size_t n) {
  struct weft_cuda_call run[WEFT_CUDA_FUSE_MAX];
  const struct weft_engine_op *run_first = NULL;
  int nrun = 0;
  for (size_t i = 0; i < n; i++) {
    const struct weft_engine_op *op = &ops[i];
    if (weft_engine_op_is_p2p(op)) continue;
    struct weft_cuda_call c;
    WEFT_CHECK(cuda_call(comm, op, &c));
    int fusable = cuda_fusable(comm, op, &c);
    if (nrun > 0 && (!fusable || c.proto != run[0].proto || nrun == WEFT_CUDA_FUSE_MAX)) {
      WEFT_CHECK(launch_run(comm, run_first, run, nrun));
      nrun = 0;
    }
    comm->op_seq++;
    if (!fusable) {
      WEFT_CHECK(launch_run(comm, op, &c, 1));
      continue;
    }
    if (nrun == 0) run_first = op;
    run[nrun++] = c;
  }
  WEFT_CHECK(launch_run(comm, run_first, run, nrun));
  weft_cuda_engine_issued(comm);
  return ncclSuccess;
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

/* Every send and receive as one kernel on the first call's stream (the
 * others' streams are joined to it and back, as NCCL orders a group's
 * streams). Sends that overlap a receive go from a copy on the stream. */
static ncclResult_t launch_p2p(struct ncclComm *comm, const struct weft_engine_op *all, size_t n,
                               size_t nops) {
  ncclResult_t res = ncclSystemError;
  /* A few operations (a SendRecv, one rank's AlltoAll) on the stack. */
  enum { FEW = 16 };
  struct weft_p2p few_ops[FEW];
  void *few_bufs[FEW], *few_streams[FEW];
  unsigned char few_stage[FEW] = {0};
  const int few = nops <= FEW;
  struct weft_p2p *ops = few ? few_ops : malloc(nops * sizeof(*ops));
  void **bufs = few ? few_bufs : malloc(nops * sizeof(*bufs));
  void **streams = few ? few_streams : malloc(nops * sizeof(*streams));
  unsigned char *stage = few ? few_stage : calloc(nops, 1);
  if (ops == NULL || bufs == NULL || streams == NULL || stage == NULL || nops > INT32_MAX) {
    WARN("rank %d: cannot launch %zu grouped sends/receives (out of memory)", comm->rank, nops);
  } else {
    int k = 0, nstreams = 0;
    for (size_t i = 0; i < n && (size_t)k < nops; i++) {
      const struct weft_coll *c = &all[i].coll;
      if (!weft_engine_op_is_p2p(&all[i])) continue;
      int send = c->func == WEFT_FUNC_SEND;
      bufs[k] = send ? (void *)(uintptr_t)c->sendbuff : c->recvbuff;
      ops[k++] = (struct weft_p2p){c->root, send, weft_engine_op_bytes(c)};
      nstreams = weft_cuda_stream_add(streams, nstreams, all[i].stream);
    }
    for (int j = 0; j < k; j++) stage[j] = ops[j].is_send && send_overlaps_recv(bufs, ops, k, j);
    struct weft_cuda_p2p p = {ops, bufs, stage, k, streams, nstreams};
    res = weft_cuda_engine_launch_p2p(comm, &p);
    if (res == ncclSuccess) weft_cuda_engine_issued_p2p(comm, ops, k);
  }
  if (!few) {
    free(ops);
    free(bufs);
    free(streams);
    free(stage);
  }
  return res;
}

static ncclResult_t cuda_enqueue(struct ncclComm *comm, const struct weft_engine_op *ops,
                                 size_t n) {
  WEFT_CHECK(launch_colls(comm, ops, n));
  size_t np2p = 0;
  for (size_t i = 0; i < n; i++) np2p += weft_engine_op_is_p2p(&ops[i]);
  if (np2p > 0) WEFT_CHECK(launch_p2p(comm, ops, n, np2p));
  return ncclSuccess;
}

static ncclResult_t cuda_estimate(struct ncclComm *comm, const struct weft_engine_op *op,
                                  float *us_out) {
  const struct weft_coll *c = &op->coll;
  struct weft_tuning tune;
  WEFT_CHECK(
      weft_tune(comm, 1, c->func, weft_engine_op_bytes(c), weft_dtype_size(c->datatype), &tune));
  *us_out = tune.estimated_us;
  return ncclSuccess;
}

const struct weft_engine_ops weft_engine_cuda_ops = {
    .size = sizeof(struct weft_engine_ops),
    .name = "cuda",
    .device_buffers = 1,
    .create = weft_cuda_engine_create,
    .enqueue = cuda_enqueue,
    /* Work is ordered on the callers' streams: nothing to wait for here. */
    .group_wait = weft__engine_no_wait,
    .wait = weft__engine_no_wait,
    .estimate = cuda_estimate,
    .busy = weft__engine_never_busy,
    .check = weft_cuda_engine_check,
    .fail = weft_cuda_engine_abort,
    .abort = weft_cuda_engine_abort,
    .destroy = weft_cuda_engine_destroy,
    .window_register = weft_cuda_engine_window_register,
    .window_release = weft_cuda_engine_window_release,
};
