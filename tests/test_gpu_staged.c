/* GPU suite: the staged path (src/exec/cuda_staged.c). NCCL_P2P_DISABLE=1
 * makes every communicator with a CUDA device stage its device buffers
 * through host memory and run on the host engine, with NCCL's stream
 * semantics. Ranks: 2 forked processes on GPU 0 (forked before this
 * process touches CUDA), then 2 and 3 threads of this process on GPU 0.
 *
 * Every rank runs one matrix: AllReduce, AllGather, ReduceScatter,
 * Broadcast and Reduce in and out of place, send/recv on two streams,
 * AlltoAll (also in place), Gather and Scatter; several datatypes (fp8
 * included), counts 0, 1, 61 and a large prime; on float32 every operator,
 * PreMulSum with a host and with a device scalar. Outputs are poisoned
 * first; a Reduce's non-root receive buffer must stay poisoned. A queued
 * chain of in-place AllReduces checks stream order, a group of three
 * collectives that a group returns at once and runs in order, and forty
 * calls of varied sizes queued without a wait the reuse of staging memory.
 * One thread driving both ranks of ncclCommInitAll, and page-locked host
 * buffers, run too.
 *
 * Failures in flight: ranks that disagree on a count (the streams still
 * finish; ncclCommGetAsyncError reports it), a rank aborted while its call
 * waits for a peer that never comes (its stream still finishes), and a
 * call during CUDA graph capture (refused, naming the reason; the
 * communicator stays usable). Exits 77 (skip) when there is no GPU. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "elem.h"
#include "harness.h"
#include "suite_run.h"

#define MAXR 3
#ifndef LARGE                   /* -DLARGE=4099 for a quick (sanitizer) build */
#define LARGE ((size_t)1048573) /* a prime */
#endif
#define BUF_BYTES ((size_t)MAXR * LARGE * 8)
#define RUN_TIMEOUT_S 600

enum { OP_PREMUL_HOST = ncclNumOps, OP_PREMUL_DEV };

/* Fails the rank function unless call returns cudaSuccess. */
#define HCUDA(call)                                                                               \
  do {                                                                                            \
    cudaError_t hcuda_err_ = (call);                                                              \
    if (hcuda_err_ != cudaSuccess)                                                                \
      return harness_fail(__FILE__, __LINE__, "%s -> %s", #call, cudaGetErrorString(hcuda_err_)); \
  } while (0)

/* One rank's communicator, streams and buffers (allocated once: cudaFree
 * would synchronize the device while a peer thread's stream waits). */
struct rk {
  int r, n;
  ncclComm_t comm;
  cudaStream_t s, s2;
  char *in, *out;
  unsigned char *h;
  float *dscalar;
};

/* One case of the matrix. */
struct cs {
  const struct dtype_info *d;
  int op;
  size_t count;
  int inplace;
};

/* ---- Values ------------------------------------------------------------------ */

/* Rank r's input element i: small integers, so every result is exact in
 * its type (see the ranges in elem.c). */
static double val(const struct cs *c, int n, int r, size_t i) {
  uint32_t h = mix((uint32_t)i * 2654435761u ^ (uint32_t)(r * 40503 + c->op * 977 + 1));
  if (c->op == ncclProd) return 1 + (double)(h % 2);
  if (c->op == ncclAvg) return (double)n * (double)(h % 4);
  if (c->d->kind == K_UINT) return (double)(h % (uint32_t)(c->d->range + 1));
  return (double)(int)(h % (uint32_t)(2 * c->d->range + 1)) - c->d->range;
}

static double premul_scalar(int op, int r) {
  return op == OP_PREMUL_HOST ? r + 1 : 0.5 * (r + 1);
}

/* The reduction of every rank's element i. */
static double fold(const struct cs *c, int n, size_t i) {
  double acc = 0;
  for (int q = 0; q < n; q++) {
    double x = val(c, n, q, i);
    if (c->op >= ncclNumOps) x *= premul_scalar(c->op, q);
    if (q == 0)
      acc = x;
    else if (c->op == ncclProd)
      acc *= x;
    else if (c->op == ncclMax)
      acc = fmax(acc, x);
    else if (c->op == ncclMin)
      acc = fmin(acc, x);
    else
      acc += x;
  }
  return c->op == ncclAvg ? acc / n : acc;
}

/* Whether the element at p is want, as the type stores it. */
static int same(const struct dtype_info *d, const void *p, double want) {
  unsigned char b[8];
  elem_store(d, b, want);
  return elem_load(d, p) == elem_load(d, b);
}

static int bad(const struct rk *k, const struct cs *c, const char *what, size_t idx, double want) {
  return harness_fail(__FILE__, __LINE__,
                      "%s %s op %d count %zu%s: rank %d of %d [%zu] = %g, expected %g", what,
                      c->d->name, c->op, c->count, c->inplace ? " in place" : "", k->r, k->n, idx,
                      elem_load(c->d, k->h + idx * c->d->size), want);
}

#define EXPECT(k, c, what, idx, want)                                                            \
  do {                                                                                           \
    double want_ = (want);                                                                       \
    if (!same((c)->d, (k)->h + (idx) * (c)->d->size, want_)) return bad(k, c, what, idx, want_); \
  } while (0)

/* ---- Buffers ------------------------------------------------------------------- */

/* dev[at..at+count) = rank src's input elements base..base+count. */
static int fill(struct rk *k, const struct cs *c, char *dev, size_t at, int src, size_t base,
                size_t count) {
  size_t es = c->d->size;
  for (size_t i = 0; i < count; i++) elem_store(c->d, k->h + i * es, val(c, k->n, src, base + i));
  HCUDA(cudaMemcpyAsync(dev + at * es, k->h, count * es, cudaMemcpyHostToDevice, k->s));
  HCUDA(cudaStreamSynchronize(k->s)); /* k->h is reused at once */
  return 0;
}

static int poison(struct rk *k, const struct cs *c, char *dev, size_t count) {
  HCUDA(cudaMemsetAsync(dev, poison_byte(c->d), count * c->d->size, k->s));
  return 0;
}

/* The call a rank-thread checks, for fetch's message. */
static _Thread_local const char *t_call = "";

/* Waits for the rank's streams, checks the communicator, downloads. */
static int fetch(struct rk *k, const struct cs *c, const char *dev, size_t count) {
  HCUDA(cudaStreamSynchronize(k->s2));
  HCUDA(cudaStreamSynchronize(k->s));
  ncclResult_t err = ncclInProgress;
  HNCCL(ncclCommGetAsyncError(k->comm, &err));
  HCHECK(err == ncclSuccess, "async error %d after %s %s count %zu%s: %s", (int)err, t_call,
         c->d->name, c->count, c->inplace ? " in place" : "", ncclGetLastError(k->comm));
  HCUDA(cudaMemcpyAsync(k->h, dev, count * c->d->size, cudaMemcpyDeviceToHost, k->s));
  HCUDA(cudaStreamSynchronize(k->s));
  return 0;
}

/* The operator of a case (PreMulSum made here, destroyed at once after
 * the call, as NCCL allows). */
static ncclResult_t op_make(struct rk *k, const struct cs *c, ncclRedOp_t *op) {
  if (c->op < ncclNumOps) {
    *op = (ncclRedOp_t)c->op;
    return ncclSuccess;
  }
  float f = (float)premul_scalar(c->op, k->r);
  if (c->op == OP_PREMUL_HOST)
    return ncclRedOpCreatePreMulSum(op, &f, ncclFloat32, ncclScalarHostImmediate, k->comm);
  if (cudaMemcpy(k->dscalar, &f, sizeof(f), cudaMemcpyHostToDevice) != cudaSuccess)
    return ncclUnhandledCudaError;
  return ncclRedOpCreatePreMulSum(op, k->dscalar, ncclFloat32, ncclScalarDevice, k->comm);
}

static void op_drop(struct rk *k, const struct cs *c, ncclRedOp_t op) {
  if (c->op >= ncclNumOps) ncclRedOpDestroy(op, k->comm);
}

/* ---- Collectives ---------------------------------------------------------------- */

static int t_allreduce(struct rk *k, const struct cs *c) {
  t_call = "AllReduce";
  char *out = c->inplace ? k->in : k->out;
  if (fill(k, c, k->in, 0, k->r, 0, c->count) || (!c->inplace && poison(k, c, out, c->count)))
    return 1;
  ncclRedOp_t op;
  HNCCL(op_make(k, c, &op));
  HNCCL(ncclAllReduce(k->in, out, c->count, c->d->type, op, k->comm, k->s));
  op_drop(k, c, op);
  if (fetch(k, c, out, c->count)) return 1;
  for (size_t i = 0; i < c->count; i++) EXPECT(k, c, "AllReduce", i, fold(c, k->n, i));
  return 0;
}

static int t_allgather(struct rk *k, const struct cs *c) {
  t_call = "AllGather";
  size_t n = (size_t)k->n, es = c->d->size;
  char *in = c->inplace ? k->out + (size_t)k->r * c->count * es : k->in;
  if (poison(k, c, k->out, n * c->count) || fill(k, c, in, 0, k->r, 0, c->count)) return 1;
  HNCCL(ncclAllGather(in, k->out, c->count, c->d->type, k->comm, k->s));
  if (fetch(k, c, k->out, n * c->count)) return 1;
  for (size_t q = 0; q < n; q++)
    for (size_t i = 0; i < c->count; i++)
      EXPECT(k, c, "AllGather", q * c->count + i, val(c, k->n, (int)q, i));
  return 0;
}

static int t_reducescatter(struct rk *k, const struct cs *c) {
  t_call = "ReduceScatter";
  size_t n = (size_t)k->n, es = c->d->size, own = (size_t)k->r * c->count;
  char *out = c->inplace ? k->in + own * es : k->out;
  if (fill(k, c, k->in, 0, k->r, 0, n * c->count) || (!c->inplace && poison(k, c, out, c->count)))
    return 1;
  ncclRedOp_t op;
  HNCCL(op_make(k, c, &op));
  HNCCL(ncclReduceScatter(k->in, out, c->count, c->d->type, op, k->comm, k->s));
  op_drop(k, c, op);
  if (fetch(k, c, out, c->count)) return 1;
  for (size_t i = 0; i < c->count; i++) EXPECT(k, c, "ReduceScatter", i, fold(c, k->n, own + i));
  return 0;
}

/* Root n-1; non-roots pass no send buffer (out of place) or, in place,
 * their poisoned receive buffer. */
static int t_broadcast(struct rk *k, const struct cs *c) {
  t_call = "Broadcast";
  int root = k->n - 1, me = k->r == root;
  char *out = c->inplace ? k->in : k->out;
  if (poison(k, c, out, c->count) || (me && fill(k, c, k->in, 0, root, 0, c->count))) return 1;
  const void *send = me ? k->in : c->inplace ? out : NULL;
  HNCCL(ncclBroadcast(send, out, c->count, c->d->type, root, k->comm, k->s));
  if (fetch(k, c, out, c->count)) return 1;
  for (size_t i = 0; i < c->count; i++) EXPECT(k, c, "Broadcast", i, val(c, k->n, root, i));
  return 0;
}

/* Root 0; a non-root's receive buffer is NULL (in place) or poisoned, and
 * must stay so: only what the engine writes is copied back. */
static int t_reduce(struct rk *k, const struct cs *c) {
  t_call = "Reduce";
  int me = k->r == 0;
  char *out = c->inplace ? (me ? k->in : NULL) : k->out;
  if (fill(k, c, k->in, 0, k->r, 0, c->count) ||
      (out != NULL && out != k->in && poison(k, c, out, c->count)))
    return 1;
  ncclRedOp_t op;
  HNCCL(op_make(k, c, &op));
  HNCCL(ncclReduce(k->in, out, c->count, c->d->type, op, 0, k->comm, k->s));
  op_drop(k, c, op);
  if (out == NULL) return fetch(k, c, k->in, 0);
  if (fetch(k, c, out, c->count)) return 1;
  unsigned char p[8];
  memset(p, poison_byte(c->d), sizeof(p));
  for (size_t i = 0; i < c->count; i++) {
    if (me) EXPECT(k, c, "Reduce", i, fold(c, k->n, i));
    if (!me && memcmp(k->h + i * c->d->size, p, c->d->size) != 0)
      return bad(k, c, "Reduce (non-root recvbuff written)", i, NAN);
  }
  return 0;
}

/* A ring: send on one stream, receive on another, in one group. */
static int t_sendrecv(struct rk *k, const struct cs *c) {
  t_call = "Send/Recv";
  int next = (k->r + 1) % k->n, prev = (k->r + k->n - 1) % k->n;
  if (fill(k, c, k->in, 0, k->r, 0, c->count) || poison(k, c, k->out, c->count)) return 1;
  HCUDA(cudaStreamSynchronize(k->s)); /* s2 must see the poison */
  HNCCL(ncclGroupStart());
  HNCCL(ncclSend(k->in, c->count, c->d->type, next, k->comm, k->s));
  HNCCL(ncclRecv(k->out, c->count, c->d->type, prev, k->comm, k->s2));
  HNCCL(ncclGroupEnd());
  if (fetch(k, c, k->out, c->count)) return 1;
  for (size_t i = 0; i < c->count; i++) EXPECT(k, c, "Send/Recv", i, val(c, k->n, prev, i));
  return 0;
}

static int t_alltoall(struct rk *k, const struct cs *c) {
  t_call = "AlltoAll";
  size_t n = (size_t)k->n;
  char *out = c->inplace ? k->in : k->out;
  if (fill(k, c, k->in, 0, k->r, 0, n * c->count) ||
      (!c->inplace && poison(k, c, out, n * c->count)))
    return 1;
  HNCCL(ncclAlltoAll(k->in, out, c->count, c->d->type, k->comm, k->s));
  if (fetch(k, c, out, n * c->count)) return 1;
  for (size_t p = 0; p < n; p++)
    for (size_t i = 0; i < c->count; i++)
      EXPECT(k, c, "AlltoAll", p * c->count + i, val(c, k->n, (int)p, (size_t)k->r * c->count + i));
  return 0;
}

/* Gather to root 1 % n, then Scatter from it. */
static int t_gather_scatter(struct rk *k, const struct cs *c) {
  t_call = "Gather/Scatter";
  size_t n = (size_t)k->n;
  int root = 1 % k->n, me = k->r == root;
  if (fill(k, c, k->in, 0, k->r, 0, c->count) || poison(k, c, k->out, n * c->count)) return 1;
  HNCCL(ncclGather(k->in, k->out, c->count, c->d->type, root, k->comm, k->s));
  if (fetch(k, c, k->out, me ? n * c->count : 0)) return 1;
  for (size_t q = 0; me && q < n; q++)
    for (size_t i = 0; i < c->count; i++)
      EXPECT(k, c, "Gather", q * c->count + i, val(c, k->n, (int)q, i));
  if ((me && fill(k, c, k->in, 0, root, 0, n * c->count)) || poison(k, c, k->out, c->count))
    return 1;
  HNCCL(ncclScatter(k->in, k->out, c->count, c->d->type, root, k->comm, k->s));
  if (fetch(k, c, k->out, c->count)) return 1;
  for (size_t i = 0; i < c->count; i++)
    EXPECT(k, c, "Scatter", i, val(c, k->n, root, (size_t)k->r * c->count + i));
  return 0;
}

/* ---- Ordering -------------------------------------------------------------------- */

/* Eight in-place AllReduces queued back to back, with a device copy on the
 * stream between them: each must see the one before. */
static int t_chain(struct rk *k) {
  t_call = "AllReduce chain";
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 61, 1};
  if (fill(k, &c, k->in, 0, k->r, 0, c.count)) return 1;
  for (int it = 0; it < 8; it++) {
    HNCCL(ncclAllReduce(k->in, k->out, c.count, ncclFloat32, ncclSum, k->comm, k->s));
    HCUDA(cudaMemcpyAsync(k->in, k->out, c.count * 4, cudaMemcpyDeviceToDevice, k->s));
  }
  if (fetch(k, &c, k->in, c.count)) return 1;
  double scale = pow(k->n, 7);
  for (size_t i = 0; i < c.count; i++)
    EXPECT(k, &c, "AllReduce chain", i, scale * fold(&c, k->n, i));
  return 0;
}

/* Three collectives in one group: ncclGroupEnd returns at once and the
 * stream runs them in order. */
static int t_group(struct rk *k) {
  t_call = "group";
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 1001, 0};
  size_t es = 4, n = (size_t)k->n;
  char *a = k->out, *b = k->out + c.count * es, *g = k->out + 2 * c.count * es;
  if (fill(k, &c, k->in, 0, k->r, 0, c.count)) return 1;
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(k->in, a, c.count, ncclFloat32, ncclSum, k->comm, k->s));
  HNCCL(ncclAllReduce(a, b, c.count, ncclFloat32, ncclSum, k->comm, k->s));
  HNCCL(ncclAllGather(b, g, c.count, ncclFloat32, k->comm, k->s));
  HNCCL(ncclGroupEnd());
  if (fetch(k, &c, g, n * c.count)) return 1;
  for (size_t q = 0; q < n; q++)
    for (size_t i = 0; i < c.count; i++)
      EXPECT(k, &c, "grouped AllReduce, AllReduce, AllGather", q * c.count + i,
             (double)n * fold(&c, k->n, i));
  return 0;
}

/* Forty calls of varied sizes queued with no wait between them: staging
 * is reused only once a stream is done with it, and grows with the sizes. */
static int t_backlog(struct rk *k) {
  t_call = "backlog";
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 65536, 0};
  size_t off[40], cnt[40], at = 0;
  if (fill(k, &c, k->in, 0, k->r, 0, c.count)) return 1;
  for (int it = 0; it < 40; it++) {
    cnt[it] = 1 + ((size_t)it * 7919u * (size_t)(it + 3)) % c.count;
    off[it] = at;
    at += cnt[it];
    HNCCL(ncclAllReduce(k->in, k->out + off[it] * 4, cnt[it], ncclFloat32, ncclSum, k->comm, k->s));
  }
  if (fetch(k, &c, k->out, at)) return 1;
  for (int it = 0; it < 40; it++)
    for (size_t i = 0; i < cnt[it]; i++)
      EXPECT(k, &c, "queued AllReduce", off[it] + i, fold(&c, k->n, i));
  return 0;
}

/* ---- The matrix ------------------------------------------------------------------- */

typedef int (*coll_fn)(struct rk *k, const struct cs *c);

static const size_t counts[] = {0, 1, 61, LARGE};
static const ncclDataType_t sum_types[] = {ncclUint8,   ncclInt32,      ncclInt64,
                                           ncclFloat16, ncclBfloat16,   ncclFloat32,
                                           ncclFloat64, ncclFloat8e4m3, ncclFloat8e5m2};
/* Large counts only for these, to keep the suite's time in bounds. */
static int large_ok(ncclDataType_t t) {
  return t == ncclFloat32 || t == ncclFloat8e4m3 || t == ncclInt64;
}

static int run_case(struct rk *k, struct cs *c) {
  static const coll_fn reducing[] = {t_allreduce, t_reducescatter, t_reduce};
  static const coll_fn moving[] = {t_allgather, t_broadcast, t_alltoall};
  for (c->inplace = 0; c->inplace < 2; c->inplace++) {
    for (size_t f = 0; f < sizeof(reducing) / sizeof(reducing[0]); f++)
      if (reducing[f](k, c)) return 1;
    for (size_t f = 0; c->op == ncclSum && f < sizeof(moving) / sizeof(moving[0]); f++)
      if (moving[f](k, c)) return 1;
  }
  c->inplace = 0;
  if (c->op == ncclSum && (t_sendrecv(k, c) || t_gather_scatter(k, c))) return 1;
  return 0;
}

static int matrix(struct rk *k) {
  static const int f32_ops[] = {ncclProd, ncclMax, ncclMin, ncclAvg, OP_PREMUL_HOST, OP_PREMUL_DEV};
  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
    for (size_t t = 0; t < sizeof(sum_types) / sizeof(sum_types[0]); t++) {
      if (counts[ci] == LARGE && !large_ok(sum_types[t])) continue;
      struct cs c = {dtype_find(sum_types[t]), ncclSum, counts[ci], 0};
      if (run_case(k, &c)) return 1;
    }
    for (size_t o = 0; o < sizeof(f32_ops) / sizeof(f32_ops[0]); o++) {
      struct cs c = {dtype_find(ncclFloat32), f32_ops[o], counts[ci], 0};
      if (run_case(k, &c)) return 1;
    }
    struct cs c = {dtype_find(ncclInt32), ncclMax, counts[ci], 0};
    if (run_case(k, &c)) return 1;
  }
  return t_chain(k) || t_group(k) || t_backlog(k);
}

/* ---- Ranks -------------------------------------------------------------------------- */

static int rank_bufs(struct rk *k, int rank, int nranks) {
  memset(k, 0, sizeof(*k));
  k->r = rank;
  k->n = nranks;
  HCUDA(cudaSetDevice(0));
  HCUDA(cudaStreamCreateWithFlags(&k->s, cudaStreamNonBlocking));
  HCUDA(cudaStreamCreateWithFlags(&k->s2, cudaStreamNonBlocking));
  HCUDA(cudaMalloc((void **)&k->in, BUF_BYTES));
  HCUDA(cudaMalloc((void **)&k->out, BUF_BYTES));
  HCUDA(cudaMalloc((void **)&k->dscalar, sizeof(float)));
  k->h = malloc(BUF_BYTES);
  HCHECK(k->h != NULL, "out of host memory");
  return 0;
}

static int rank_open(struct rk *k, int rank, int nranks, ncclUniqueId id) {
  if (rank_bufs(k, rank, nranks)) return 1;
  HNCCL(ncclCommInitRank(&k->comm, nranks, id, rank));
  return 0;
}

/* After every stream of this rank is idle: nothing of a peer waits on it. */
static void rank_close(struct rk *k, int destroy) {
  cudaStreamSynchronize(k->s);
  cudaStreamSynchronize(k->s2);
  if (destroy && k->comm != NULL) ncclCommDestroy(k->comm);
  cudaFree(k->in);
  cudaFree(k->out);
  cudaFree(k->dscalar);
  cudaStreamDestroy(k->s);
  cudaStreamDestroy(k->s2);
  free(k->h);
}

static int matrix_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  struct rk k;
  int rc = rank_open(&k, rank, nranks, id) || matrix(&k);
  rank_close(&k, 1);
  return rc;
}

static void run(int procs, int nranks, harness_rank_fn fn, void *arg) {
  char why[4096];
  int rc = procs ? harness_procs(nranks, RUN_TIMEOUT_S, fn, arg, why, sizeof(why))
                 : harness_threads(nranks, RUN_TIMEOUT_S, fn, arg, why, sizeof(why));
  ck_assert_msg(rc == 0, "%d %s: %s", nranks, procs ? "processes" : "threads", why);
}

START_TEST(procs_2) {
  run(1, 2, matrix_rank, NULL);
}
END_TEST

START_TEST(threads_2) {
  run(0, 2, matrix_rank, NULL);
}
END_TEST

START_TEST(threads_3) {
  run(0, 3, matrix_rank, NULL);
}
END_TEST

/* One thread drives both ranks of ncclCommInitAll: a group with three
 * dependent AllReduces per rank and a send/recv ring returns at once (no
 * rank's task may wait for a call the thread has yet to make), and the
 * streams carry the results. */
static int initall_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)rank, (void)nranks, (void)id, (void)arg;
  struct rk k[2];
  ncclComm_t comms[2];
  int devs[2] = {0, 0};
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 4099, 0};
  size_t es = 4, off = c.count * es;
  for (int r = 0; r < 2; r++)
    if (rank_bufs(&k[r], r, 2) || fill(&k[r], &c, k[r].in, 0, r, 0, c.count)) return 1;
  HNCCL(ncclCommInitAll(comms, 2, devs));
  HNCCL(ncclGroupStart());
  for (int r = 0; r < 2; r++) {
    k[r].comm = comms[r];
    char *a = k[r].out, *b = a + off, *d = b + off;
    HNCCL(ncclAllReduce(k[r].in, a, c.count, ncclFloat32, ncclSum, comms[r], k[r].s));
    HNCCL(ncclAllReduce(a, b, c.count, ncclFloat32, ncclSum, comms[r], k[r].s));
    HNCCL(ncclAllReduce(b, d, c.count, ncclFloat32, ncclSum, comms[r], k[r].s));
    HNCCL(ncclSend(k[r].in, c.count, ncclFloat32, 1 - r, comms[r], k[r].s2));
    HNCCL(ncclRecv(k[r].in + off, c.count, ncclFloat32, 1 - r, comms[r], k[r].s2));
  }
  HNCCL(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    if (fetch(&k[r], &c, k[r].out + 2 * off, c.count)) return 1;
    for (size_t i = 0; i < c.count; i++)
      EXPECT(&k[r], &c, "InitAll AllReduce x3", i, 4 * fold(&c, 2, i));
    if (fetch(&k[r], &c, k[r].in + off, c.count)) return 1;
    for (size_t i = 0; i < c.count; i++)
      EXPECT(&k[r], &c, "InitAll Send/Recv", i, val(&c, 2, 1 - r, i));
  }
  for (int r = 0; r < 2; r++) rank_close(&k[r], 1);
  return 0;
}

/* Page-locked host buffers (which the checks accept): the worker copies
 * them, since cudaMemcpyAsync between host buffers would not wait for the
 * stream. AllReduce host to device and device to host, AlltoAll in place
 * on host memory. */
static int host_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  struct rk k;
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 1021, 0};
  size_t es = 4, n = (size_t)nranks, bytes = n * c.count * es;
  char *hb = NULL;
  /* Page-locked before the communicator exists, and freed after it is
   * gone: cudaFreeHost waits for every stream of the context, and the
   * other rank's stream may wait for this rank's part of a call. */
  HCUDA(cudaHostAlloc((void **)&hb, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  if (rank_open(&k, rank, nranks, id)) {
    cudaFreeHost(hb);
    return 1;
  }
  for (size_t i = 0; i < c.count; i++) elem_store(c.d, hb + i * es, val(&c, k.n, rank, i));
  HNCCL(ncclAllReduce(hb, k.out, c.count, ncclFloat32, ncclSum, k.comm, k.s));
  HNCCL(ncclAllReduce(k.out, hb, c.count, ncclFloat32, ncclSum, k.comm, k.s));
  HCUDA(cudaStreamSynchronize(k.s));
  ncclResult_t err = ncclInProgress;
  HNCCL(ncclCommGetAsyncError(k.comm, &err));
  HCHECK(err == ncclSuccess, "async error %d after the host-memory AllReduces: %s", (int)err,
         ncclGetLastError(k.comm));
  memcpy(k.h, hb, c.count * es);
  for (size_t i = 0; i < c.count; i++)
    EXPECT(&k, &c, "host-memory AllReduce x2", i, n * fold(&c, k.n, i));
  for (size_t i = 0; i < n * c.count; i++) elem_store(c.d, hb + i * es, val(&c, k.n, rank, i));
  HNCCL(ncclAlltoAll(hb, hb, c.count, ncclFloat32, k.comm, k.s));
  HCUDA(cudaStreamSynchronize(k.s));
  memcpy(k.h, hb, bytes);
  for (size_t p = 0; p < n; p++)
    for (size_t i = 0; i < c.count; i++)
      EXPECT(&k, &c, "host-memory AlltoAll in place", p * c.count + i,
             val(&c, k.n, (int)p, (size_t)rank * c.count + i));
  rank_close(&k, 1);
  cudaFreeHost(hb);
  return 0;
}

START_TEST(initall_2) {
  char why[4096];
  ck_assert_msg(harness_solo(RUN_TIMEOUT_S, initall_rank, NULL, why, sizeof(why)) == 0, "%s", why);
}
END_TEST

START_TEST(host_buffers) {
  run(0, 2, host_rank, NULL);
}
END_TEST

/* ---- Failures ------------------------------------------------------------------------- */

/* Rank 1 asks for one more element: the call check fails on both ranks,
 * their streams still finish, and the communicators report the error. */
static int mismatch_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  struct rk k;
  if (rank_open(&k, rank, nranks, id)) return 1;
  HNCCL(ncclAllReduce(k.in, k.out, 100 + (size_t)rank, ncclFloat32, ncclSum, k.comm, k.s));
  HCUDA(cudaStreamSynchronize(k.s));
  ncclResult_t err = ncclSuccess;
  HNCCL(ncclCommGetAsyncError(k.comm, &err));
  HCHECK(err != ncclSuccess, "mismatched counts: the communicator reports no error");
  ncclResult_t again = ncclAllReduce(k.in, k.out, 100, ncclFloat32, ncclSum, k.comm, k.s);
  HCHECK(again != ncclSuccess, "a failed communicator accepted another call");
  rank_close(&k, 1);
  return 0;
}

/* After one call together (the links are up), rank 0's next call waits
 * for rank 1, which never makes it; rank 0 aborts, and its stream must
 * finish anyway. Rank 1 aborts once rank 0 is through. */
static int abort_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  _Atomic int *through = arg;
  struct rk k;
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 1000, 0};
  if (rank_open(&k, rank, nranks, id) || t_allreduce(&k, &c)) return 1;
  if (rank == 0) {
    HNCCL(ncclAllReduce(k.in, k.out, 1000, ncclFloat32, ncclSum, k.comm, k.s));
    harness_sleep_ms(300);
    HCHECK(cudaStreamQuery(k.s) == cudaErrorNotReady, "the stream did not wait for the call");
    double t0 = harness_now();
    HNCCL(ncclCommAbort(k.comm));
    HCUDA(cudaStreamSynchronize(k.s));
    HCHECK(harness_now() - t0 < 8, "the aborted call held its stream %.1f s", harness_now() - t0);
    atomic_store(through, 1);
  } else {
    while (!atomic_load(through)) harness_sleep_ms(10);
    HNCCL(ncclCommAbort(k.comm));
  }
  rank_close(&k, 0);
  return 0;
}

/* Both ranks call during a capture: refused with the reason, nothing runs,
 * and the next call works. */
static int capture_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  struct rk k;
  if (rank_open(&k, rank, nranks, id)) return 1;
  cudaGraph_t graph = NULL;
  HCUDA(cudaStreamBeginCapture(k.s, cudaStreamCaptureModeRelaxed));
  ncclResult_t res = ncclAllReduce(k.in, k.out, 64, ncclFloat32, ncclSum, k.comm, k.s);
  const char *msg = ncclGetLastError(k.comm);
  HCUDA(cudaStreamEndCapture(k.s, &graph));
  if (graph != NULL) cudaGraphDestroy(graph);
  HCHECK(res == ncclInvalidUsage, "a captured call returned %d", (int)res);
  HCHECK(strstr(msg, "CUDA graph capture") && strstr(msg, "staged through host memory"),
         "unexpected message: %s", msg);
  struct cs c = {dtype_find(ncclFloat32), ncclSum, 64, 0};
  int rc = t_allreduce(&k, &c);
  rank_close(&k, 1);
  return rc;
}

START_TEST(mismatch) {
  run(0, 2, mismatch_rank, NULL);
}
END_TEST

START_TEST(abort_in_flight) {
  _Atomic int through = 0;
  run(0, 2, abort_rank, &through);
}
END_TEST

START_TEST(capture_refused) {
  run(0, 2, capture_rank, NULL);
}
END_TEST

/* ---- Main ------------------------------------------------------------------------------ */

/* Asked in a child, so this process forks its rank processes before it
 * ever touches CUDA. */
static int gpu_present(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
  }
  int st = 0;
  return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(void) {
  if (!gpu_present()) {
    printf("no CUDA device: skipping the staged-path GPU suite\n");
    return 77;
  }
  /* Read once, at the first call: every communicator is staged. */
  setenv("NCCL_P2P_DISABLE", "1", 1);
  unsetenv("WEFT_DEVICE");
  setenv("WEFT_TIMEOUT", "20", 0);
  Suite *s = suite_create("gpu_staged");
  TCase *tc = tcase_create("staged");
  tcase_set_timeout(tc, 3 * RUN_TIMEOUT_S);
  /* Processes first: after the thread cases this process has CUDA. */
  tcase_add_test(tc, procs_2);
  tcase_add_test(tc, threads_2);
  tcase_add_test(tc, threads_3);
  tcase_add_test(tc, initall_2);
  tcase_add_test(tc, host_buffers);
  tcase_add_test(tc, mismatch);
  tcase_add_test(tc, abort_in_flight);
  tcase_add_test(tc, capture_refused);
  suite_add_tcase(s, tc);
  return suite_run_nofork(s);
}
