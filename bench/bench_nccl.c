/* Every NCCL call weft-bench makes: communicator setup and teardown, the
 * collective under test, and the small allreduces that gather timings and
 * error counts. A failed call is reported here, once, with the rank, the
 * call, the result code and the library's own message. */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_weft.h"

static const char *const result_names[ncclNumResults] = {
    "ncclSuccess",         "ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError",
    "ncclInvalidArgument", "ncclInvalidUsage",       "ncclRemoteError", "ncclInProgress"};

static char timeout_msg[160];

static void on_timeout(int sig) {
  ssize_t ignored;
  (void)sig;
  ignored = write(STDERR_FILENO, timeout_msg, strlen(timeout_msg));
  (void)ignored;
  _exit(BENCH_EXIT_ERROR);
}

void bench_watchdog_start(const struct bench_args *a) {
  if (a->timeout <= 0) return;
  snprintf(timeout_msg, sizeof(timeout_msg),
           "weft-bench: pid %d: Test timeout (%ds): no call or wait completed for -T %d "
           "seconds; ending this process\n",
           (int)getpid(), a->timeout, a->timeout);
  signal(SIGALRM, on_timeout);
  bench_watchdog_kick(a);
}

/* One alarm per process: any of its threads' progress re-arms it. */
void bench_watchdog_kick(const struct bench_args *a) {
  if (a->timeout > 0) alarm((unsigned)a->timeout);
}

void bench_watchdog_stop(const struct bench_args *a) {
  if (a->timeout > 0) alarm(0);
}

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

/* Creates the communicators of n threads' ranks in one group: one thread
 * (nccl-tests' -p 0) or each its own (-p 1, or n = 1). -x sets the
 * config's CTA policy. */
static int init_group(struct bench_thread *threads, int n) {
  const int nlocal = n * threads[0].nlocal;
  ncclResult_t res = ncclSuccess;
  struct bench_rank *failed = NULL;
  int unbound = 0;

  if (nlocal > 1) ncclGroupStart();
  for (int k = 0; k < n && !failed && !unbound; k++)
    for (int i = 0; i < threads[k].nlocal && !failed && !unbound; i++) {
      struct bench_thread *t = &threads[k];
      struct bench_rank *r = &t->ranks[i];
      ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
      if (t->args->cta_policy >= 0) config.CTAPolicy = t->args->cta_policy;
      /* The rank's device is current when its init is called: that is how
       * NCCL (and weft) learn which GPU a communicator's rank is on. */
      if (t->mem->bind(r->local_index) != 0) {
        unbound = 1;
        break;
      }
      res = ncclCommInitRankConfig(&r->comm, t->nranks, t->id, r->rank, &config);
      if (res != ncclSuccess) failed = r;
    }
  if (nlocal > 1) {
    ncclResult_t end = ncclGroupEnd();
    if (!failed && end != ncclSuccess) {
      res = end;
      failed = &threads[0].ranks[0];
    }
  }
  if (unbound) return BENCH_EXIT_ERROR;
  if (failed) return bench_nccl_fail(failed, "ncclCommInitRankConfig", res);
  return 0;
}

int bench_nccl_init(struct bench_thread *t) {
  return init_group(t, 1);
}

int bench_nccl_init_all(struct bench_thread *threads, int n) {
  return init_group(threads, n);
}

/* -R 1: ncclCommRegister on each buffer; -R 2: symmetric windows, a
 * collective call, so one group over this thread's ranks. */
int bench_nccl_register(struct bench_thread *t) {
  const int mode = t->args->local_register;
  ncclResult_t res = ncclSuccess;
  int failed = -1;

  if (mode == 0) return 0;
  if (t->nlocal > 1 && mode == 2) ncclGroupStart();
  for (int i = 0; i < t->nlocal && failed < 0; i++) {
    struct bench_rank *r = &t->ranks[i];
    void *bufs[2] = {r->base[0], r->base[1]};
    for (int b = 0; b < 2 && res == ncclSuccess; b++)
      res = mode == 1 ? ncclCommRegister(r->comm, bufs[b], t->buf_bytes, &r->reg[b])
                      : ncclCommWindowRegister(r->comm, bufs[b], t->buf_bytes, &r->win[b],
                                               NCCL_WIN_COLL_SYMMETRIC);
    if (res != ncclSuccess) failed = i;
  }
  if (t->nlocal > 1 && mode == 2) {
    ncclResult_t end = ncclGroupEnd();
    if (failed < 0 && end != ncclSuccess) {
      res = end;
      failed = 0;
    }
  }
  if (failed >= 0)
    return bench_nccl_fail(&t->ranks[failed],
                           mode == 1 ? "ncclCommRegister (-R 1)" : "ncclCommWindowRegister (-R 2)",
                           res);
  return 0;
}

void bench_nccl_deregister(struct bench_thread *t) {
  if (t->nlocal > 1 && t->args->local_register == 2) ncclGroupStart();
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    for (int b = 0; b < 2; b++) {
      if (r->reg[b]) ncclCommDeregister(r->comm, r->reg[b]);
      if (r->win[b]) ncclCommWindowDeregister(r->comm, r->win[b]);
      r->reg[b] = NULL;
      r->win[b] = NULL;
    }
  }
  if (t->nlocal > 1 && t->args->local_register == 2) ncclGroupEnd();
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

/* nccl-tests' hypercube: an all-gather by recursive doubling over
 * send/recv, rank's own block first copied into place (a send to itself). */
static ncclResult_t hypercube(const void *sbuf, char *rbuf, size_t count, ncclDataType_t type,
                              int rank, int n, ncclComm_t comm, cudaStream_t s) {
  const size_t block = count * bench_types[type].size;
  ncclResult_t res = ncclSuccess, end;

  if (rbuf + (size_t)rank * block != sbuf) {
    ncclGroupStart();
    res = ncclSend(sbuf, count, type, rank, comm, s);
    if (res == ncclSuccess) res = ncclRecv(rbuf + (size_t)rank * block, count, type, rank, comm, s);
    end = ncclGroupEnd();
    if (res != ncclSuccess || end != ncclSuccess) return res != ncclSuccess ? res : end;
  }
  for (int mask = 1; mask < n; mask <<= 1) {
    const int first = rank & ~(mask - 1);
    ncclGroupStart();
    res = ncclSend(rbuf + (size_t)first * block, count * (size_t)mask, type, rank ^ mask, comm, s);
    if (res == ncclSuccess)
      res = ncclRecv(rbuf + (size_t)(first ^ mask) * block, count * (size_t)mask, type, rank ^ mask,
                     comm, s);
    end = ncclGroupEnd();
    if (res != ncclSuccess || end != ncclSuccess) return res != ncclSuccess ? res : end;
  }
  return ncclSuccess;
}

/* Issues c on one rank; in place, the buffers sit where nccl-tests puts
 * them: both inside recv, shifted by rank times the offsets. */
static ncclResult_t coll_issue(const struct bench_case *c, const struct bench_rank *r, int in_place,
                               cudaStream_t s) {
  const ncclRedOp_t op = (int)c->op == BENCH_OP_MULSUM ? r->mulsum : c->op;
  const size_t ts = bench_types[c->type].size;
  char *rb = r->recv;
  const void *sb = in_place ? rb + c->send_off * (size_t)r->rank * ts : r->send;
  void *dst = in_place ? rb + c->recv_off * (size_t)r->rank * ts : rb;
  const size_t n = c->param_count;

  switch (c->coll) {
    case BENCH_ALLREDUCE: return ncclAllReduce(sb, dst, n, c->type, op, r->comm, s);
    case BENCH_ALLGATHER: return ncclAllGather(sb, dst, n, c->type, r->comm, s);
    case BENCH_REDUCESCATTER: return ncclReduceScatter(sb, dst, n, c->type, op, r->comm, s);
    case BENCH_BROADCAST: return ncclBroadcast(sb, dst, n, c->type, c->root, r->comm, s);
    case BENCH_REDUCE: return ncclReduce(sb, dst, n, c->type, op, c->root, r->comm, s);
    case BENCH_SENDRECV: return sendrecv(sb, dst, n, c->type, r->rank, c->nranks, r->comm, s);
    case BENCH_ALLTOALL: return ncclAlltoAll(sb, dst, n, c->type, r->comm, s);
    case BENCH_GATHER: return ncclGather(sb, dst, n, c->type, c->root, r->comm, s);
    case BENCH_SCATTER: return ncclScatter(sb, dst, n, c->type, c->root, r->comm, s);
    case BENCH_HYPERCUBE: return hypercube(sb, dst, n, c->type, r->rank, c->nranks, r->comm, s);
    default: return ncclInvalidArgument;
  }
}

int bench_nccl_mulsum_create(struct bench_thread *t, ncclDataType_t type) {
  for (int i = 0; i < t->nlocal; i++) {
    struct bench_rank *r = &t->ranks[i];
    uint64_t scalar = 0; /* room for any type, aligned for all */
    ncclResult_t res;
    bench_type_store(type, &scalar, 0, bench_mulsum_scalar(r->rank));
    res = ncclRedOpCreatePreMulSum(&r->mulsum, &scalar, type, ncclScalarHostImmediate, r->comm);
    if (res != ncclSuccess) return bench_nccl_fail(r, "ncclRedOpCreatePreMulSum (-o mulsum)", res);
  }
  return 0;
}

void bench_nccl_mulsum_destroy(struct bench_thread *t) {
  for (int i = 0; i < t->nlocal; i++) {
    if (t->ranks[i].mulsum) ncclRedOpDestroy(t->ranks[i].mulsum, t->ranks[i].comm);
    t->ranks[i].mulsum = (ncclRedOp_t)0;
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
  bench_watchdog_kick(t->args);
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
  bench_watchdog_kick(t->args);
  return 0;
}
