/* One case of the GPU collective matrix (see gpu_case.h). */
#include "gpu_case.h"

#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"

#define MAX_FAIL_LINES 12 /* per rank and run; the rest are only counted */

const char *const gcase_coll_names[NCOLLS] = {
    "AllReduce", "AllGather",         "ReduceScatter", "Broadcast",
    "Reduce",    "Send/Recv ring",    "AlltoAll",      "Gather",
    "Scatter",   "Send/Recv unequal", "Send to self",  "lone Send/Recv"};

int gcase_rank_open(struct lrank *l, size_t cap) {
  l->cap = cap;
  HCUDA(cudaSetDevice(l->dev));
  HCUDA(cudaStreamCreateWithFlags(&l->stream, cudaStreamNonBlocking));
  HCUDA(cudaMalloc((void **)&l->d_send, l->cap));
  HCUDA(cudaMalloc((void **)&l->d_recv, l->cap));
  HCUDA(cudaMalloc(&l->d_scalar, 8));
  l->h_send = malloc(l->cap);
  l->h_recv = malloc(l->cap);
  l->h_back = malloc(l->cap);
  HCHECK(l->h_send && l->h_recv && l->h_back, "out of memory");
  return 0;
}

void gcase_rank_close(struct lrank *l) {
  cudaSetDevice(l->dev);
  cudaFree(l->d_send);
  cudaFree(l->d_recv);
  cudaFree(l->d_scalar);
  if (l->stream != NULL) cudaStreamDestroy(l->stream);
  free(l->h_send);
  free(l->h_recv);
  free(l->h_back);
}

/* Where one rank's input and output live for one case, in elements. */
struct layout {
  int inplace;  /* the input is in d_recv (only where this rank has an in-place form) */
  size_t nin;   /* input elements */
  size_t in_at; /* in place: where in d_recv the input starts */
  size_t nout;  /* elements of d_recv the call may write */
  size_t span;  /* elements of d_recv uploaded and read back, before GCASE_GUARD */
  size_t s;     /* element size */
  const void *sb;
  void *rb;
};

static size_t pair_count(int from, int to) {
  return 1 + (size_t)((from * 7 + to * 3) % 13) * 37;
}

static void case_layout(const struct run *ru, const struct lrank *l, const struct gcase *c,
                        struct layout *lo) {
  size_t n = (size_t)ru->nranks, me = (size_t)l->rank, cnt = c->count;
  int at_root = l->rank == c->root;
  memset(lo, 0, sizeof *lo);
  lo->s = ru->t->d->size;
  lo->inplace = c->inplace;
  lo->nin = cnt;
  lo->nout = cnt;
  switch (c->k) {
    case C_ALLGATHER:
      lo->nout = cnt * n;
      lo->in_at = me * cnt;
      break;
    case C_REDUCESCATTER: lo->nin = cnt * n; break;
    case C_ALLTOALL: lo->nin = lo->nout = cnt * n; break;
    case C_GATHER:
      lo->nout = cnt * n;
      lo->inplace = c->inplace && at_root; /* in place means the root's own block */
      lo->in_at = me * cnt;
      break;
    case C_SCATTER:
      lo->nin = at_root ? cnt * n : 0;
      lo->inplace = c->inplace && at_root;
      lo->nout = lo->inplace ? cnt * n : cnt;
      break;
    case C_UNEQUAL:
      lo->inplace = 0;
      lo->nin = lo->nout = 5;
      for (int p = 0; p < ru->nranks; p++) {
        lo->nin += pair_count(l->rank, p);
        lo->nout += pair_count(p, l->rank);
      }
      break;
    case C_SELF:
    case C_LONE: lo->inplace = 0; break;
    default: break;
  }
  size_t in_end = lo->inplace ? lo->in_at + lo->nin : 0;
  lo->span = in_end > lo->nout ? in_end : lo->nout;
  unsigned char *recv = l->d_recv;
  lo->sb = lo->inplace ? recv + lo->in_at * lo->s : l->d_send;
  lo->rb = recv;
  if (lo->inplace && c->k == C_REDUCESCATTER) lo->rb = recv + me * cnt * lo->s;
  if (lo->inplace && c->k == C_SCATTER) {
    lo->sb = recv;
    lo->rb = recv + me * cnt * lo->s;
  }
  if (c->k == C_SCATTER && !at_root) lo->sb = NULL; /* read only at the root */
}

/* "threads rank 2/4 Reduce float16 op=max count=7 root=1 in-place". */
static void case_label(char *buf, size_t len, const struct run *ru, const struct lrank *l,
                       const struct gcase *c) {
  int reduces = c->k == C_ALLREDUCE || c->k == C_REDUCESCATTER || c->k == C_REDUCE;
  int rooted = c->k == C_BROADCAST || c->k == C_REDUCE || c->k == C_GATHER || c->k == C_SCATTER;
  char op[32] = "", root[32] = "";
  if (reduces) snprintf(op, sizeof op, " op=%s", ref_op_names[c->op]);
  if (rooted) snprintf(root, sizeof root, " root=%d", c->root);
  snprintf(buf, len, "%s rank %d/%d %s %s%s count=%zu%s %s", ru->mode, l->rank, ru->nranks,
           gcase_coll_names[c->k], ru->t->d->name, op, c->count, root,
           c->inplace ? "in-place" : "out-of-place");
}

void gcase_fail(const struct run *ru, struct lrank *l, const struct gcase *c, const char *fmt,
                ...) {
  char label[200], text[400];
  case_label(label, sizeof label, ru, l, c);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  if (l->nfail == 0) snprintf(l->first_fail, sizeof l->first_fail, "%s: %s", label, text);
  if (l->nfail++ < MAX_FAIL_LINES) {
    fprintf(stderr, "FAIL %s: %s\n", label, text);
    fflush(stderr);
  }
}

int gcase_report_bad(const struct run *ru, struct lrank *l, const struct gcase *c, const char *what,
                     size_t nbad, size_t of, const struct ref_bad *bad) {
  if (nbad == 0) return 0;
  if (isnan(bad->want))
    gcase_fail(ru, l, c, "%s: element %zu was written (now %.17g); %zu of %zu elements written",
               what, bad->index, bad->got, nbad, of);
  else
    gcase_fail(ru, l, c,
               "%s: first bad element %zu is %.17g, expected %.17g (tol %g); %zu of %zu "
               "elements wrong",
               what, bad->index, bad->got, bad->want, bad->tol, nbad, of);
  return 1;
}

static int check_range(const struct run *ru, struct lrank *l, const struct gcase *c,
                       const char *what, size_t at, size_t count, int src, size_t base) {
  struct ref_bad bad;
  size_t nbad = ref_check(ru->t, l->h_recv, at, count, src, base, &bad);
  return gcase_report_bad(ru, l, c, what, nbad, count, &bad);
}

static int check_poisoned(const struct run *ru, struct lrank *l, const struct gcase *c,
                          const char *what, size_t at, size_t count) {
  struct ref_bad bad;
  size_t nbad = ref_check_poison(ru->t, l->h_recv, at, count, &bad);
  return gcase_report_bad(ru, l, c, what, nbad, count, &bad);
}

/* Poisons d_recv over the layout's span and GCASE_GUARD, uploads the input. */
static int case_upload(const struct run *ru, struct lrank *l, const struct layout *lo) {
  size_t s = lo->s;
  ref_fill(ru->t, l->rank, l->h_send, 0, lo->nin);
  memset(l->h_recv, poison_byte(ru->t->d), (lo->span + GCASE_GUARD) * s);
  if (lo->inplace) memcpy(l->h_recv + lo->in_at * s, l->h_send, lo->nin * s);
  HCUDA(cudaSetDevice(l->dev));
  HCUDA(cudaMemcpyAsync(l->d_recv, l->h_recv, (lo->span + GCASE_GUARD) * s, cudaMemcpyHostToDevice,
                        l->stream));
  if (!lo->inplace && lo->nin > 0)
    HCUDA(cudaMemcpyAsync(l->d_send, l->h_send, lo->nin * s, cudaMemcpyHostToDevice, l->stream));
  return 0;
}

/* Makes the case's operator on l's communicator: a built-in, or a fresh
 * PreMulSum. The host scalar is overwritten after creation (it must have
 * been copied); the device scalar is written after creation, on the
 * stream, so it must be read when the kernel runs. */
static ncclResult_t make_op(struct run *ru, struct lrank *l, int op, ncclRedOp_t *op_out) {
  const struct dtype_info *d = ru->t->d;
  if (op < ncclNumOps) {
    *op_out = (ncclRedOp_t)op;
    return ncclSuccess;
  }
  unsigned char host[8];
  elem_store(d, host, ref_premul_scalar(d, op, l->rank));
  ncclResult_t res;
  if (op == OP_PREMUL_HOST) {
    res = ncclRedOpCreatePreMulSum(op_out, host, d->type, ncclScalarHostImmediate, l->comm);
    memset(host, 0, sizeof host);
    return res;
  }
  if (cudaMemsetAsync(l->d_scalar, 0, 8, l->stream) != cudaSuccess) return ncclUnhandledCudaError;
  res = ncclRedOpCreatePreMulSum(op_out, l->d_scalar, d->type, ncclScalarDevice, l->comm);
  memcpy(l->h_scalar, host, sizeof host);
  if (res == ncclSuccess && cudaMemcpyAsync(l->d_scalar, l->h_scalar, d->size,
                                            cudaMemcpyHostToDevice, l->stream) != cudaSuccess)
    return ncclUnhandledCudaError;
  return res;
}

static ncclResult_t group_end(ncclResult_t res) {
  ncclResult_t e = ncclGroupEnd();
  return res != ncclSuccess ? res : e;
}

static ncclResult_t call_p2p(const struct run *ru, struct lrank *l, const struct gcase *c,
                             const struct layout *lo) {
  int n = ru->nranks, me = l->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  ncclDataType_t dt = ru->t->d->type;
  size_t s = lo->s, cnt = c->count;
  const unsigned char *sb = lo->sb;
  unsigned char *rb = lo->rb;
  ncclComm_t comm = l->comm;
  cudaStream_t st = l->stream;
  ncclResult_t res = ncclSuccess;
  if (c->k == C_LONE) { /* no group: each call is launched on its own */
    if (me > 1) return ncclSuccess;
    if (me == 0 && (res = ncclSend(sb, cnt, dt, 1, comm, st)) != ncclSuccess) return res;
    if ((res = ncclRecv(rb, cnt, dt, 1 - me, comm, st)) != ncclSuccess) return res;
    return me == 1 ? ncclSend(sb, cnt, dt, 0, comm, st) : ncclSuccess;
  }
  ncclGroupStart();
  if (c->k == C_RING) {
    res = ncclSend(sb, cnt, dt, next, comm, st);
    if (res == ncclSuccess) res = ncclRecv(rb, cnt, dt, prev, comm, st);
  } else if (c->k == C_SELF) {
    res = ncclRecv(rb, cnt, dt, me, comm, st);
    if (res == ncclSuccess) res = ncclSend(sb, cnt, dt, me, comm, st);
  } else { /* C_UNEQUAL */
    size_t at_send = 0, at_recv = 0;
    for (int p = 0; p < n && res == ncclSuccess; p++) {
      res = ncclSend(sb + at_send * s, pair_count(me, p), dt, p, comm, st);
      if (res == ncclSuccess) res = ncclRecv(rb + at_recv * s, pair_count(p, me), dt, p, comm, st);
      at_send += pair_count(me, p);
      at_recv += pair_count(p, me);
    }
    if (res == ncclSuccess) res = ncclSend(sb + at_send * s, 5, dt, next, comm, st);
    if (res == ncclSuccess) res = ncclRecv(rb + at_recv * s, 5, dt, prev, comm, st);
  }
  return group_end(res);
}

static ncclResult_t case_call(const struct run *ru, struct lrank *l, const struct gcase *c,
                              const struct layout *lo, ncclRedOp_t op) {
  ncclDataType_t dt = ru->t->d->type;
  size_t cnt = c->count;
  ncclComm_t comm = l->comm;
  cudaStream_t st = l->stream;
  switch (c->k) {
    case C_ALLREDUCE: return ncclAllReduce(lo->sb, lo->rb, cnt, dt, op, comm, st);
    case C_ALLGATHER: return ncclAllGather(lo->sb, lo->rb, cnt, dt, comm, st);
    case C_REDUCESCATTER: return ncclReduceScatter(lo->sb, lo->rb, cnt, dt, op, comm, st);
    case C_BROADCAST:
      /* In place: NCCL 1's ncclBcast for even roots. */
      if (c->inplace && c->root % 2 == 0) return ncclBcast(lo->rb, cnt, dt, c->root, comm, st);
      return ncclBroadcast(lo->sb, lo->rb, cnt, dt, c->root, comm, st);
    case C_REDUCE: return ncclReduce(lo->sb, lo->rb, cnt, dt, op, c->root, comm, st);
    case C_ALLTOALL: return ncclAlltoAll(lo->sb, lo->rb, cnt, dt, comm, st);
    case C_GATHER: return ncclGather(lo->sb, lo->rb, cnt, dt, c->root, comm, st);
    case C_SCATTER: return ncclScatter(lo->sb, lo->rb, cnt, dt, c->root, comm, st);
    default: return call_p2p(ru, l, c, lo);
  }
}

/* Checks the output that came back into h_recv; returns 1 on a mismatch. */
static int case_check_output(const struct run *ru, struct lrank *l, const struct gcase *c,
                             const struct layout *lo) {
  size_t n = (size_t)ru->nranks, me = (size_t)l->rank, cnt = c->count;
  int nr = ru->nranks, root = c->root, prev = (l->rank + nr - 1) % nr, bad = 0;
  switch (c->k) {
    case C_ALLREDUCE: return check_range(ru, l, c, "recvbuff", 0, cnt, -1, 0);
    case C_ALLGATHER:
    case C_GATHER:
      if (c->k == C_GATHER && l->rank != root)
        return check_poisoned(ru, l, c, "recvbuff off the root", 0, lo->nout);
      for (size_t r = 0; r < n && !bad; r++)
        bad = check_range(ru, l, c, "recvbuff block", r * cnt, cnt, (int)r, 0);
      return bad;
    case C_REDUCESCATTER:
      return check_range(ru, l, c, "recvbuff", lo->inplace ? me * cnt : 0, cnt, -1, me * cnt);
    case C_BROADCAST: return check_range(ru, l, c, "recvbuff", 0, cnt, root, 0);
    case C_REDUCE:
      if (l->rank == root) return check_range(ru, l, c, "recvbuff at the root", 0, cnt, -1, 0);
      if (lo->inplace) /* the buffer is the rank's input and is not written */
        return check_range(ru, l, c, "buffer off the root", 0, cnt, l->rank, 0);
      return check_poisoned(ru, l, c, "recvbuff off the root", 0, cnt);
    case C_RING: return check_range(ru, l, c, "recvbuff", 0, cnt, prev, 0);
    case C_SELF: return check_range(ru, l, c, "recvbuff", 0, cnt, l->rank, 0);
    case C_LONE:
      if (l->rank > 1) return 0;
      return check_range(ru, l, c, "recvbuff", 0, cnt, 1 - l->rank, 0);
    case C_ALLTOALL:
      for (size_t r = 0; r < n && !bad; r++)
        bad = check_range(ru, l, c, "recvbuff block", r * cnt, cnt, (int)r, me * cnt);
      return bad;
    case C_SCATTER:
      return check_range(ru, l, c, "recvbuff", lo->inplace ? me * cnt : 0, cnt, root, me * cnt);
    case C_UNEQUAL: {
      size_t at = 0;
      for (int p = 0; p < nr && !bad; p++) {
        size_t sent_at = 0; /* where p's message to me starts in p's input */
        for (int q = 0; q < l->rank; q++) sent_at += pair_count(p, q);
        bad = check_range(ru, l, c, "message from a peer", at, pair_count(p, l->rank), p, sent_at);
        at += pair_count(p, l->rank);
      }
      size_t prev_tail = 0;
      for (int q = 0; q < nr; q++) prev_tail += pair_count(prev, q);
      return bad || check_range(ru, l, c, "second message", at, 5, prev, prev_tail);
    }
    default: return 0;
  }
}

/* Waits for l's stream, reads the buffers back and checks them. */
static int case_finish(struct run *ru, struct lrank *l, const struct gcase *c,
                       const struct layout *lo) {
  size_t s = lo->s;
  cudaError_t ce = cudaSetDevice(l->dev);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(l->stream);
  if (ce != cudaSuccess) {
    gcase_fail(ru, l, c, "cudaStreamSynchronize -> %d (%s)", (int)ce, cudaGetErrorString(ce));
    ru->fatal = 1;
    return 1;
  }
  ncclResult_t async = ncclInProgress;
  ncclResult_t res = ncclCommGetAsyncError(l->comm, &async);
  if (res != ncclSuccess || async != ncclSuccess) {
    gcase_fail(ru, l, c, "ncclCommGetAsyncError -> %d, error %d (%s): %s", (int)res, (int)async,
               ncclGetErrorString(async), ncclGetLastError(l->comm));
    ru->fatal = 1;
    return 1;
  }
  ce = cudaMemcpyAsync(l->h_recv, l->d_recv, (lo->span + GCASE_GUARD) * s, cudaMemcpyDeviceToHost,
                       l->stream);
  if (ce == cudaSuccess && !lo->inplace && lo->nin > 0)
    ce = cudaMemcpyAsync(l->h_back, l->d_send, lo->nin * s, cudaMemcpyDeviceToHost, l->stream);
  if (ce == cudaSuccess) ce = cudaStreamSynchronize(l->stream);
  if (ce != cudaSuccess) {
    gcase_fail(ru, l, c, "reading back: %d (%s)", (int)ce, cudaGetErrorString(ce));
    ru->fatal = 1;
    return 1;
  }
  int bad = case_check_output(ru, l, c, lo);
  bad |= check_poisoned(ru, l, c, "guard after the output", lo->span, GCASE_GUARD);
  if (!lo->inplace && lo->nin > 0 && memcmp(l->h_back, l->h_send, lo->nin * s) != 0) {
    size_t i = 0;
    while (memcmp(l->h_back + i * s, l->h_send + i * s, s) == 0) i++;
    gcase_fail(ru, l, c, "sendbuff was modified: element %zu is %.17g, was %.17g", i,
               elem_load(ru->t->d, l->h_back + i * s), elem_load(ru->t->d, l->h_send + i * s));
    bad = 1;
  }
  return bad;
}

/* One case on every local rank: upload, call (one group in initall mode),
 * then wait and check each. */
int gcase_run(struct run *ru, enum coll k, int op, size_t count, int root, int inplace) {
  if (ru->fatal) return 1;
  struct gcase c = {k, op, count, root, inplace};
  struct layout lo[REF_MAX_RANKS];
  ncclRedOp_t ops[REF_MAX_RANKS];
  ncclResult_t res[REF_MAX_RANKS];
  int failed = 0;
  ru->ncases++;
  for (int i = 0; i < ru->nlocal; i++) {
    struct lrank *l = &ru->l[i];
    case_layout(ru, l, &c, &lo[i]);
    if (case_upload(ru, l, &lo[i]) != 0) {
      ru->fatal = 1;
      return 1;
    }
    ncclResult_t r = make_op(ru, l, op, &ops[i]);
    if (r != ncclSuccess) {
      gcase_fail(ru, l, &c, "making the operator -> %d (%s): %s", (int)r, ncclGetErrorString(r),
                 ncclGetLastError(l->comm));
      ru->fatal = 1;
      return 1;
    }
  }
  if (ru->group) ncclGroupStart();
  for (int i = 0; i < ru->nlocal; i++) res[i] = case_call(ru, &ru->l[i], &c, &lo[i], ops[i]);
  if (ru->group) {
    ncclResult_t e = ncclGroupEnd();
    for (int i = 0; i < ru->nlocal; i++)
      if (res[i] == ncclSuccess) res[i] = e;
  }
  for (int i = 0; i < ru->nlocal; i++) {
    struct lrank *l = &ru->l[i];
    if (res[i] != ncclSuccess) {
      gcase_fail(ru, l, &c, "%s -> %d (%s): %s", gcase_coll_names[k], (int)res[i],
                 ncclGetErrorString(res[i]), ncclGetLastError(l->comm));
      /* A refusal launches nothing; any other error leaves the
       * communicator in doubt. */
      if (res[i] != ncclInvalidArgument && res[i] != ncclInvalidUsage) ru->fatal = 1;
      failed = 1;
    } else if (case_finish(ru, l, &c, &lo[i]) != 0) {
      failed = 1;
    }
    if (op >= ncclNumOps) ncclRedOpDestroy(ops[i], l->comm);
  }
  return failed;
}

int gcase_comm_rank(const char *tag, int rank, int nranks, ncclUniqueId id, size_t cap,
                    void (*cases)(struct run *ru)) {
  int ndev = 0;
  HCUDA(cudaGetDeviceCount(&ndev));
  struct lrank l;
  memset(&l, 0, sizeof l);
  l.rank = rank;
  l.dev = rank % ndev;
  HCUDA(cudaSetDevice(l.dev));
  HNCCL(ncclCommInitRank(&l.comm, nranks, id, rank));
  struct run ru = {tag, nranks, 1, 0, &l, NULL, 1, 0, 0};
  ru.t = malloc(sizeof *ru.t);
  HCHECK(ru.t != NULL, "out of memory");
  int rc = gcase_rank_open(&l, cap);
  if (rc == 0) cases(&ru);
  free(ru.t);
  /* The communicator before the buffers: cudaFree waits for every kernel on
   * the GPU, and ncclCommDestroy for the rank-threads' last launches. */
  if (ru.fatal || l.nfail > 0)
    ncclCommAbort(l.comm);
  else
    ncclCommDestroy(l.comm); /* closes the network's comms (a plugin may log on close) */
  gcase_rank_close(&l);
  if (rc != 0) return rc;
  fprintf(stderr, "%s: rank %d of %d: %d cases, %d failures\n", tag, rank, nranks, ru.ncases,
          l.nfail);
  HCHECK(l.nfail == 0 && !ru.fatal, "rank %d: %d failures; first: %s", rank, l.nfail, l.first_fail);
  return 0;
}
