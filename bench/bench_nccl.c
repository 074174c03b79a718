/* Every NCCL call weft-bench makes: communicator setup and teardown, the
 * collective under test, and the small allreduces that gather timings and
 * error counts. A failed call is reported here, once, with the rank, the
 * call, the result code and the library's own message. */
#include <stdlib.h>

#include "bench_weft.h"

static const char *const result_names[ncclNumResults] = {
    "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};

int bench_nccl_fail(const struct bench_rank *r, const char *call, ncclResult_t res) {
  const char *name = res >= 0 && res < ncclNumResults ? result_names[res] : "unknown result";
  const char *last = ncclGetLastError(r->comm);

  /* The library's last WARN says why; without one, the result's text. */
  if (last && *last)
    fprintf(stderr, "weft-bench: rank %d: %s failed: %s: %s\n", r->rank, call, name, last);
  else
    fprintf(stderr, "weft-bench: rank %d: %s failed: %s (%s)\n", r->rank, call, name,
            ncclGetErrorString(res));
  return BENCH_EXIT_ERROR;
}

int bench_nccl_init(struct bench_thread *t) {
  ncclResult_t res = ncclSuccess;
  int failed = -1, unbound = 0;

  if (t->nlocal > 1) ncclGroupStart();
  for (int i = 0; i < t->nlocal && failed < 0 && !unbound; i++) {
    struct bench_rank *r = &t->ranks[i];
    /* The rank's device is current when its init is called: that is how
     * NCCL (and weft) learn which GPU a communicator's rank is on. */
    if (t->mem->bind(r->local_index) != 0) {
      unbound = 1;
      break;
    }
    res = ncclCommInitRank(&r->comm, t->nranks, t->id, r->rank);
    if (res != ncclSuccess) failed = i;
  }
  if (t->nlocal > 1) {
    ncclResult_t end = ncclGroupEnd();
    if (failed < 0 && end != ncclSuccess) {
      res = end;
      failed = 0;
    }
  }
  if (unbound) return BENCH_EXIT_ERROR;
  if (failed >= 0) return bench_nccl_fail(&t->ranks[failed], "ncclCommInitRank", res);
  return 0;
}

/* Finalizes together (in one group when one thread drives several ranks,
 * since finalizing waits for the peers), then frees each. */
void bench_nccl_fini(struct bench_thread *t) {
  if (t->nlocal > 1) ncclGroupStart();
  for (int i = 0; i < t->nlocal; i++)
    if (t->ranks[i].comm) ncclCommFinalize(t->ranks[i].comm);
  if (t->nlocal > 1) ncclGroupEnd();
  for (int i = 0; i < t->nlocal; i++)
    if (t->ranks[i].comm) ncclCommDestroy(t->ranks[i].comm);
}

/* Send to the next rank, receive from the previous one: a ring shift. */
static ncclResult_t sendrecv(const void *sbuf, void *rbuf, size_t count, ncclDataType_t type,
                             int rank, int n, ncclComm_t comm, cudaStream_t s) {
  ncclResult_t res, end;

  ncclGroupStart();
  res = ncclSend(sbuf, count, type, (rank + 1) % n, comm, s);
  if (res == ncclSuccess) res = ncclRecv(rbuf, count, type, (rank + n - 1) % n, comm, s);
  end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

/* Issues c on one rank; in place, the buffers sit where nccl-tests puts
 * them: both inside recv, shifted by rank times the offsets. */
static ncclResult_t coll_issue(const struct bench_case *c, const struct bench_rank *r, int in_place,
                               cudaStream_t s) {
  const size_t ts = bench_types[c->type].size;
  char *rb = r->recv;
  const void *sb = in_place ? rb + c->send_off * (size_t)r->rank * ts : r->send;
  void *dst = in_place ? rb + c->recv_off * (size_t)r->rank * ts : rb;
  const size_t n = c->param_count;

  switch (c->coll) {
    case BENCH_ALLREDUCE: return ncclAllReduce(sb, dst, n, c->type, c->op, r->comm, s);
    case BENCH_ALLGATHER: return ncclAllGather(sb, dst, n, c->type, r->comm, s);
    case BENCH_REDUCESCATTER: return ncclReduceScatter(sb, dst, n, c->type, c->op, r->comm, s);
    case BENCH_BROADCAST: return ncclBroadcast(sb, dst, n, c->type, c->root, r->comm, s);
    case BENCH_REDUCE: return ncclReduce(sb, dst, n, c->type, c->op, c->root, r->comm, s);
    case BENCH_SENDRECV: return sendrecv(sb, dst, n, c->type, r->rank, c->nranks, r->comm, s);
    case BENCH_ALLTOALL: return ncclAlltoAll(sb, dst, n, c->type, r->comm, s);
    default: return ncclInvalidArgument;
  }
}

int bench_nccl_iteration(struct bench_thread *t, const struct bench_case *c, int in_place,
                         int agg_iters) {
  const int grouped = t->nlocal > 1 || agg_iters > 1;
  const char *call = bench_colls[c->coll].nccl_fn;
  ncclResult_t res = ncclSuccess;
  int failed = -1;

  if (grouped) ncclGroupStart();
  for (int a = 0; a < agg_iters && failed < 0; a++)
    for (int i = 0; i < t->nlocal && failed < 0; i++) {
      res = coll_issue(c, &t->ranks[i], in_place, t->ranks[i].stream);
      if (res != ncclSuccess) failed = i;
    }
  if (grouped) {
    ncclResult_t end = ncclGroupEnd();
    if (failed < 0 && end != ncclSuccess) {
      res = end;
      failed = 0;
      call = "ncclGroupEnd";
    }
  }
  if (failed >= 0) return bench_nccl_fail(&t->ranks[failed], call, res);
  return 0;
}

int bench_nccl_allreduce(struct bench_thread *t, void *const *bufs, size_t count,
                         ncclDataType_t type, ncclRedOp_t op) {
  ncclResult_t res = ncclSuccess;
  int failed = -1;

  if (t->nlocal > 1) ncclGroupStart();
  for (int i = 0; i < t->nlocal && failed < 0; i++) {
    res = ncclAllReduce(bufs[i], bufs[i], count, type, op, t->ranks[i].comm, t->ranks[i].stream);
    if (res != ncclSuccess) failed = i;
  }
  if (t->nlocal > 1) {
    ncclResult_t end = ncclGroupEnd();
    if (failed < 0 && end != ncclSuccess) {
      res = end;
      failed = 0;
    }
  }
  if (failed >= 0) return bench_nccl_fail(&t->ranks[failed], "ncclAllReduce (bench)", res);
  return bench_nccl_wait(t);
}

int bench_nccl_wait(struct bench_thread *t) {
  for (int i = 0; i < t->nlocal; i++)
    if (t->mem->sync(t->ranks[i].stream) != 0) {
      fprintf(stderr, "weft-bench: rank %d: waiting for its stream failed\n", t->ranks[i].rank);
      return BENCH_EXIT_ERROR;
    }
  for (int i = 0; i < t->nlocal; i++) {
    ncclResult_t async = ncclSuccess;
    ncclResult_t res = ncclCommGetAsyncError(t->ranks[i].comm, &async);
    if (res != ncclSuccess) return bench_nccl_fail(&t->ranks[i], "ncclCommGetAsyncError", res);
    if (async != ncclSuccess && async != ncclInProgress)
      return bench_nccl_fail(&t->ranks[i], "a collective (asynchronous error)", async);
  }
  return 0;
}
