/* Every collective on host ranks, against double-precision references:
 * AllReduce, AllGather, ReduceScatter, Broadcast, Bcast and Reduce x
 * datatypes x operators (PreMulSum included, with a host-immediate and a
 * "device" scalar) x counts 0, 1, 7, 1031 and 1000003 x in place / out of
 * place x every root, on 1..8 ranks in separate processes; and send/recv:
 * a ring exchange, ncclAlltoAll, ncclGather, ncclScatter, sends to self,
 * unequal sizes per peer and lone calls outside a group.
 *
 * Algorithm and transport are per-process parameters, so each session is
 * this binary run again (harness_exec_self) with NCCL_ALGO and
 * NCCL_SHM_DISABLE set; inside it, one communicator per rank count runs all
 * of its cases in a loop, to keep the suite fast. A few sessions force the
 * host engine's copy pool on (WEFT_HOST_COPY_THREADS) and check that its
 * threads ran at the root of the large out-of-place broadcast; a few run
 * every collective of several lanes on a lane team (WEFT_HOST_LANE_THREADS)
 * and check that its threads ran.
 *
 * Inputs are small integers (products: 1, -1 and a few 2s) so every result
 * is exact in its type; only ncclAvg on floating types gets a tolerance.
 * Outputs are poisoned before each call (NaN bytes for floating types, 0x7b
 * for integers) with guard elements after them, NaN never passes, and
 * out-of-place inputs must come back untouched. Inputs repeat with a prime
 * period, so references are tables of one period. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "elem.h"
#include "harness.h"
#include "nccl.h"
#include "proc_threads.h"
#include "suite_run.h"

#define PERIOD 1009
#define GUARD 16
#define LARGE_COUNT ((size_t)1000003)
#define MAX_RANKS 8
#define SESSION_TIMEOUT_S 120

/* The datatypes of the matrix (the allreduce suite covers every one). */
static const ncclDataType_t matrix_types[] = {ncclInt8,     ncclUint8,   ncclInt32,
                                              ncclUint64,   ncclInt64,   ncclFloat16,
                                              ncclBfloat16, ncclFloat32, ncclFloat64};
#define NDTYPES (int)(sizeof matrix_types / sizeof matrix_types[0])

/* Operators of the matrix: the built-in five, then PreMulSum with a host
 * scalar and with a "device" one (host memory on host ranks). */
enum { OP_PREMUL_HOST = ncclNumOps, OP_PREMUL_DEV, NOPS_ALL };
static const char *const op_names[NOPS_ALL] = {"sum", "prod",        "max",       "min",
                                               "avg", "premul-host", "premul-dev"};

/* ---- Inputs and references -------------------------------------------- */

/* Rank r's input at position j of the period. */
static double gen_value(const struct dtype_info *d, int op, int r, int j, uint32_t salt) {
  uint32_t h = mix(salt * 2654435761u ^ mix((uint32_t)r * 40503u + (uint32_t)j * 977u + 1u));
  if (op == ncclProd) {
    if (r < 2 && h % 3 == 1) return 2; /* at most 4 in magnitude over any ranks */
    return d->kind != K_UINT && (h >> 8) % 4 == 0 ? -1 : 1;
  }
  int range = d->size <= 2 ? 15 : 1000; /* sums over 8 ranks stay exact */
  if (d->kind == K_UINT) return (double)(h % (uint32_t)(range + 1));
  return (double)(int)(h % (uint32_t)(2 * range + 1)) - range;
}

/* PreMulSum scalars: rank r multiplies by r+1 (host) or r+2 ("device"). */
static double premul_scalar(int op, int r) {
  return op == OP_PREMUL_HOST ? r + 1 : r + 2;
}

static int premul_ok(const struct dtype_info *d) {
  return d->type == ncclInt32 || d->type == ncclInt64 || d->type == ncclFloat16 ||
         d->type == ncclFloat32 || d->type == ncclFloat64;
}

/* One case's inputs for every rank and its reduction, over one period. */
struct table {
  const struct dtype_info *d;
  int op;
  int nranks;
  int exact;
  unsigned char in[MAX_RANKS][PERIOD * 8];
  unsigned char red_b[PERIOD * 8];
  double red[PERIOD];
  double tol[PERIOD];
};

static void table_build(struct table *t, const struct dtype_info *d, int op, int nranks,
                        uint32_t salt) {
  t->d = d;
  t->op = op;
  t->nranks = nranks;
  t->exact = !(op == ncclAvg && d->kind == K_FLOAT);
  for (int j = 0; j < PERIOD; j++) {
    double xs[MAX_RANKS];
    for (int r = 0; r < nranks; r++) {
      xs[r] = gen_value(d, op, r, j, salt);
      elem_store(d, t->in[r] + (size_t)j * d->size, xs[r]);
      if (op >= ncclNumOps) xs[r] *= premul_scalar(op, r);
    }
    t->red[j] = elem_reduce(d, op, xs, nranks, &t->tol[j]);
    elem_store(d, t->red_b + (size_t)j * d->size, t->red[j]);
  }
}

/* buf[k] = rank r's input at (base + k) mod PERIOD, for k < count. */
static void fill(const struct table *t, int r, void *buf, size_t base, size_t count) {
  size_t s = t->d->size;
  unsigned char *p = buf;
  size_t k = 0;
  while (k < count && k < PERIOD) {
    memcpy(p + k * s, t->in[r] + ((base + k) % PERIOD) * s, s);
    k++;
  }
  while (k < count) { /* k is a multiple of PERIOD here: copy what is done */
    size_t n = k < count - k ? k : count - k;
    memcpy(p + k * s, p, n * s);
    k += n;
  }
}

struct ctx {
  ncclComm_t comm;
  int rank, nranks;
  char label[160]; /* the case, for messages */
  struct table *t;
};

/* Checks count elements of buf from element `at`: rank src's input
 * (src >= 0) or the reduction (src < 0), from period position base. */
static int check_elems(const struct ctx *c, const void *buf, size_t at, size_t count, int src,
                       size_t base) {
  const struct table *t = c->t;
  const struct dtype_info *d = t->d;
  size_t s = d->size;
  const unsigned char *p = (const unsigned char *)buf + at * s;
  const unsigned char *want = src >= 0 ? t->in[src] : t->red_b;
  for (size_t k = 0, j = base % PERIOD; k < count; k++, j = j + 1 == PERIOD ? 0 : j + 1) {
    if ((src >= 0 || t->exact) && memcmp(p + k * s, want + j * s, s) == 0) continue;
    double got = elem_load(d, p + k * s);
    double ref = src >= 0 ? elem_load(d, want + j * s) : t->red[j];
    double tol = src >= 0 ? 0 : t->tol[j];
    if (!isnan(got) && fabs(got - ref) <= tol) continue;
    return harness_fail(__FILE__, __LINE__, "%s: element %zu is %.17g, expected %.17g (tol %g)",
                        c->label, at + k, got, ref, tol);
  }
  return 0;
}

/* The GUARD elements after element `end` (or count elements from `at`)
 * must still hold the poison. */
static int check_poison(const struct ctx *c, const void *buf, size_t at, size_t count,
                        const char *what) {
  const unsigned char *p = buf;
  unsigned char poison = poison_byte(c->t->d);
  size_t s = c->t->d->size;
  for (size_t b = at * s; b < (at + count) * s; b++)
    HCHECK(p[b] == poison, "%s: %s: byte %zu was written", c->label, what, b);
  return 0;
}

/* ---- Collectives -------------------------------------------------------- */

enum coll { C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_BROADCAST, C_REDUCE, NCOLLS };
static const char *const coll_names[NCOLLS] = {"AllReduce", "AllGather", "ReduceScatter",
                                               "Broadcast", "Reduce"};

struct bufs {
  unsigned char *send, *recv, *orig;
};

/* Makes the case's operator: a built-in, or a fresh PreMulSum (its "device"
 * scalar is set only after creation: it must be read when the op runs). */
static int make_op(struct ctx *c, int op, ncclRedOp_t *op_out, void *dev_scalar) {
  const struct dtype_info *d = c->t->d;
  if (op < ncclNumOps) {
    *op_out = (ncclRedOp_t)op;
    return 0;
  }
  unsigned char host[8];
  elem_store(d, host, premul_scalar(op, c->rank));
  if (op == OP_PREMUL_HOST) {
    HNCCL(ncclRedOpCreatePreMulSum(op_out, host, d->type, ncclScalarHostImmediate, c->comm));
    memset(host, 0, sizeof host); /* copied at creation: must not matter now */
  } else {
    memset(dev_scalar, 0, 8);
    HNCCL(ncclRedOpCreatePreMulSum(op_out, dev_scalar, d->type, ncclScalarDevice, c->comm));
    memcpy(dev_scalar, host, d->size);
  }
  return 0;
}

static ncclResult_t call_coll(enum coll k, const void *sb, void *rb, size_t count,
                              const struct dtype_info *d, ncclRedOp_t op, int root, int inplace,
                              ncclComm_t comm) {
  switch (k) {
    case C_ALLREDUCE: return ncclAllReduce(sb, rb, count, d->type, op, comm, NULL);
    case C_ALLGATHER: return ncclAllGather(sb, rb, count, d->type, comm, NULL);
    case C_REDUCESCATTER: return ncclReduceScatter(sb, rb, count, d->type, op, comm, NULL);
    case C_BROADCAST:
      /* In place: the old ncclBcast for half the roots. */
      if (inplace && root % 2 == 0) return ncclBcast(rb, count, d->type, root, comm, NULL);
      return ncclBroadcast(sb, rb, count, d->type, root, comm, NULL);
    default: return ncclReduce(sb, rb, count, d->type, op, root, comm, NULL);
  }
}

/* Where one rank's input and output live for one call. */
static void coll_layout(const struct ctx *c, enum coll k, size_t count, size_t *nsend,
                        size_t *nrecv) {
  size_t n = (size_t)c->nranks;
  *nsend = k == C_REDUCESCATTER ? count * n : count;
  *nrecv = k == C_ALLGATHER ? count * n : count;
}

/* Checks recv after the call (out of place: also that send is untouched). */
static int coll_verify(const struct ctx *c, enum coll k, const struct bufs *b, size_t count,
                       int root, int inplace, size_t nsend, size_t nrecv) {
  size_t s = c->t->d->size, n = (size_t)c->nranks, me = (size_t)c->rank;
  size_t end = inplace ? (nsend > nrecv ? nsend : nrecv) : nrecv; /* guard starts here */
  switch (k) {
    case C_ALLREDUCE:
      if (check_elems(c, b->recv, 0, count, -1, 0)) return 1;
      break;
    case C_ALLGATHER:
      for (size_t r = 0; r < n; r++)
        if (check_elems(c, b->recv, r * count, count, (int)r, 0)) return 1;
      break;
    case C_REDUCESCATTER:
      if (check_elems(c, b->recv, inplace ? me * count : 0, count, -1, me * count)) return 1;
      break;
    case C_BROADCAST:
      if (check_elems(c, b->recv, 0, count, root, 0)) return 1;
      break;
    default:
      if (c->rank == root) {
        if (check_elems(c, b->recv, 0, count, -1, 0)) return 1;
      } else if (inplace) { /* recvbuff is not used off the root */
        if (check_elems(c, b->recv, 0, count, c->rank, 0)) return 1;
      } else if (check_poison(c, b->recv, 0, count, "recvbuff off the root")) {
        return 1;
      }
  }
  if (check_poison(c, b->recv, end, GUARD, "guard after the output")) return 1;
  if (!inplace)
    HCHECK(memcmp(b->send, b->orig, nsend * s) == 0, "%s: sendbuff was modified", c->label);
  return 0;
}

/* One call: poison, fill, call, check. */
static int coll_case(struct ctx *c, enum coll k, const struct bufs *b, size_t count, int op,
                     int root, int inplace) {
  const struct dtype_info *d = c->t->d;
  size_t s = d->size, me = (size_t)c->rank, nsend, nrecv;
  coll_layout(c, k, count, &nsend, &nrecv);
  snprintf(c->label, sizeof c->label, "%s %s %s count=%zu root=%d %s nranks=%d rank=%d",
           coll_names[k], d->name, op_names[op], count, root, inplace ? "in-place" : "out-of-place",
           c->nranks, c->rank);
  size_t span = (nsend > nrecv ? nsend : nrecv) + GUARD;
  memset(b->recv, poison_byte(d), span * s);
  fill(c->t, c->rank, b->orig, 0, nsend);
  const void *sb = b->send;
  void *rb = b->recv;
  if (!inplace) {
    memcpy(b->send, b->orig, nsend * s);
  } else if (k == C_ALLGATHER) {
    memcpy(b->recv + me * count * s, b->orig, nsend * s);
    sb = b->recv + me * count * s;
  } else {
    memcpy(b->recv, b->orig, nsend * s);
    sb = b->recv;
    if (k == C_REDUCESCATTER) rb = b->recv + me * count * s;
  }
  ncclRedOp_t nop;
  unsigned char dev_scalar[8];
  if (make_op(c, op, &nop, dev_scalar)) return 1;
  ncclResult_t res = call_coll(k, sb, rb, count, d, nop, root, inplace, c->comm);
  HCHECK(res == ncclSuccess, "%s -> %d (%s): %s", c->label, (int)res, ncclGetErrorString(res),
         ncclGetLastError(c->comm));
  if (op >= ncclNumOps) HNCCL(ncclRedOpDestroy(nop, c->comm));
  return coll_verify(c, k, b, count, root, inplace, nsend, nrecv);
}

static const size_t small_counts[] = {0, 1, 7, 1031};
#define NSMALL (int)(sizeof small_counts / sizeof small_counts[0])

/* Every dtype x op x small count x placement of one collective; roots
 * rotate from case to case. */
static int coll_matrix(struct ctx *c, enum coll k, const struct bufs *b, uint32_t *salt) {
  int reduces = k == C_ALLREDUCE || k == C_REDUCESCATTER || k == C_REDUCE;
  int root = 0;
  for (int di = 0; di < NDTYPES; di++) {
    const struct dtype_info *d = dtype_find(matrix_types[di]);
    for (int op = 0; op < (reduces ? NOPS_ALL : 1); op++) {
      if (op >= ncclNumOps && !premul_ok(d)) continue;
      table_build(c->t, d, op, c->nranks, (*salt)++);
      for (int ci = 0; ci < NSMALL; ci++)
        for (int inplace = 0; inplace <= 1; inplace++) {
          if (coll_case(c, k, b, small_counts[ci], op, root, inplace)) return 1;
          root = (root + 1) % c->nranks;
        }
    }
  }
  return 0;
}

/* The large count, for the 4-byte types: AllGather and ReduceScatter move
 * about LARGE_COUNT elements in all. */
static int coll_large(struct ctx *c, enum coll k, const struct bufs *b, uint32_t *salt) {
  size_t count = LARGE_COUNT;
  if (k == C_ALLGATHER || k == C_REDUCESCATTER) count = (LARGE_COUNT / (size_t)c->nranks) | 1;
  table_build(c->t, dtype_find(ncclFloat32), ncclSum, c->nranks, (*salt)++);
  if (coll_case(c, k, b, count, ncclSum, c->nranks - 1, 0)) return 1;
  int op = k == C_ALLREDUCE ? OP_PREMUL_DEV : ncclMax;
  table_build(c->t, dtype_find(ncclInt32), op, c->nranks, (*salt)++);
  return coll_case(c, k, b, count, op, 0, 1);
}

/* ---- Send/recv ---------------------------------------------------------- */

static int p2p_label(struct ctx *c, const char *what, size_t count, int root) {
  snprintf(c->label, sizeof c->label, "%s count=%zu root=%d nranks=%d rank=%d", what, count, root,
           c->nranks, c->rank);
  return 0;
}

/* Each rank sends to the next and receives from the previous, in one group. */
static int ring_exchange(struct ctx *c, const struct bufs *b, size_t count) {
  int n = c->nranks, me = c->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  size_t s = c->t->d->size;
  p2p_label(c, "ring exchange", count, -1);
  memset(b->recv, poison_byte(c->t->d), (count + GUARD) * s);
  fill(c->t, me, b->send, 0, count);
  HNCCL(ncclGroupStart());
  HNCCL(ncclSend(b->send, count, c->t->d->type, next, c->comm, NULL));
  HNCCL(ncclRecv(b->recv, count, c->t->d->type, prev, c->comm, NULL));
  HNCCL(ncclGroupEnd());
  if (check_elems(c, b->recv, 0, count, prev, 0)) return 1;
  return check_poison(c, b->recv, count, GUARD, "guard");
}

/* The ring exchange on one buffer: what is sent is overwritten by what
 * arrives, so the send must read it before the receive lands. */
static int ring_exchange_inplace(struct ctx *c, const struct bufs *b, size_t count) {
  int n = c->nranks, me = c->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  p2p_label(c, "ring exchange in-place", count, -1);
  fill(c->t, me, b->recv, 0, count);
  HNCCL(ncclGroupStart());
  HNCCL(ncclSend(b->recv, count, c->t->d->type, next, c->comm, NULL));
  HNCCL(ncclRecv(b->recv, count, c->t->d->type, prev, c->comm, NULL));
  HNCCL(ncclGroupEnd());
  return check_elems(c, b->recv, 0, count, prev, 0);
}

/* In-place ncclAlltoAll: one buffer is both input and output. */
static int alltoall_inplace(struct ctx *c, const struct bufs *b, size_t count) {
  size_t n = (size_t)c->nranks, me = (size_t)c->rank;
  p2p_label(c, "ncclAlltoAll in-place", count, -1);
  fill(c->t, c->rank, b->recv, 0, count * n);
  HNCCL(ncclAlltoAll(b->recv, b->recv, count, c->t->d->type, c->comm, NULL));
  for (size_t r = 0; r < n; r++)
    if (check_elems(c, b->recv, r * count, count, (int)r, me * count)) return 1;
  return 0;
}

/* SendRecv on one buffer with a partner (rank ^ 1; an odd last rank sits
 * out), the directions of unequal sizes and each several bounce pieces of
 * the host engine (1 MiB): what arrives overwrites what is sent, and the
 * longer send's tail beyond what arrives stays as it was. */
static int exchange_inplace_unequal(struct ctx *c, const struct bufs *b) {
  int me = c->rank, peer = me ^ 1;
  size_t s = c->t->d->size;
  size_t mine = me % 2 ? LARGE_COUNT / 3 : LARGE_COUNT - 7,
         theirs = peer % 2 ? LARGE_COUNT / 3 : LARGE_COUNT - 7;
  if (peer >= c->nranks) return 0;
  p2p_label(c, "exchange in-place, unequal sizes", mine, -1);
  size_t span = mine > theirs ? mine : theirs;
  memset(b->recv, poison_byte(c->t->d), (span + GUARD) * s);
  fill(c->t, me, b->recv, 0, mine);
  HNCCL(ncclGroupStart());
  HNCCL(ncclSend(b->recv, mine, c->t->d->type, peer, c->comm, NULL));
  HNCCL(ncclRecv(b->recv, theirs, c->t->d->type, peer, c->comm, NULL));
  HNCCL(ncclGroupEnd());
  if (check_elems(c, b->recv, 0, theirs, peer, 0)) return 1;
  if (mine > theirs && check_elems(c, b->recv, theirs, mine - theirs, me, theirs)) return 1;
  return check_poison(c, b->recv, span, GUARD, "guard");
}

/* SendRecv with a partner (rank ^ 1), large enough for single-copy shared
 * memory: the even rank on one buffer, the odd rank from another, so only
 * one side offers the host engine's swap and the pair must fall back to
 * moving the bytes through the link. */
static int exchange_one_side_inplace(struct ctx *c, const struct bufs *b) {
  int me = c->rank, peer = me ^ 1;
  size_t s = c->t->d->size, count = LARGE_COUNT;
  if (peer >= c->nranks) return 0;
  p2p_label(c, "exchange, in place on the even rank only", count, -1);
  unsigned char *sb = me % 2 ? b->send : b->recv;
  memset(b->recv, poison_byte(c->t->d), (count + GUARD) * s);
  fill(c->t, me, sb, 0, count);
  HNCCL(ncclGroupStart());
  HNCCL(ncclSend(sb, count, c->t->d->type, peer, c->comm, NULL));
  HNCCL(ncclRecv(b->recv, count, c->t->d->type, peer, c->comm, NULL));
  HNCCL(ncclGroupEnd());
  if (check_elems(c, b->recv, 0, count, peer, 0)) return 1;
  if (me % 2 && check_elems(c, b->send, 0, count, me, 0)) return 1;
  return check_poison(c, b->recv, count, GUARD, "guard");
}

/* ncclAlltoAll: block p of rank r's input (positions p*count...) lands in
 * block r of rank p's output. */
static int alltoall(struct ctx *c, const struct bufs *b, size_t count) {
  size_t s = c->t->d->size, n = (size_t)c->nranks, me = (size_t)c->rank;
  p2p_label(c, "ncclAlltoAll", count, -1);
  memset(b->recv, poison_byte(c->t->d), (count * n + GUARD) * s);
  fill(c->t, c->rank, b->send, 0, count * n);
  memcpy(b->orig, b->send, count * n * s);
  HNCCL(ncclAlltoAll(b->send, b->recv, count, c->t->d->type, c->comm, NULL));
  for (size_t r = 0; r < n; r++)
    if (check_elems(c, b->recv, r * count, count, (int)r, me * count)) return 1;
  HCHECK(memcmp(b->send, b->orig, count * n * s) == 0, "%s: sendbuff was modified", c->label);
  return check_poison(c, b->recv, count * n, GUARD, "guard");
}

static int gather(struct ctx *c, const struct bufs *b, size_t count, int root, int inplace) {
  size_t s = c->t->d->size, n = (size_t)c->nranks;
  int me = c->rank;
  p2p_label(c, inplace ? "ncclGather in-place" : "ncclGather", count, root);
  memset(b->recv, poison_byte(c->t->d), (count * n + GUARD) * s);
  const void *sb = b->send;
  if (inplace && me == root) {
    sb = b->recv + (size_t)root * count * s;
    fill(c->t, me, b->recv + (size_t)root * count * s, 0, count);
  } else {
    fill(c->t, me, b->send, 0, count);
  }
  HNCCL(ncclGather(sb, b->recv, count, c->t->d->type, root, c->comm, NULL));
  if (me != root) return check_poison(c, b->recv, 0, count * n + GUARD, "recvbuff off the root");
  for (size_t r = 0; r < n; r++)
    if (check_elems(c, b->recv, r * count, count, (int)r, 0)) return 1;
  return check_poison(c, b->recv, count * n, GUARD, "guard");
}

static int scatter(struct ctx *c, const struct bufs *b, size_t count, int root, int inplace) {
  size_t s = c->t->d->size, n = (size_t)c->nranks, me = (size_t)c->rank;
  p2p_label(c, inplace ? "ncclScatter in-place" : "ncclScatter", count, root);
  memset(b->recv, poison_byte(c->t->d), (count * n + GUARD) * s);
  void *rb = b->recv;
  if (c->rank == root) {
    unsigned char *src = inplace ? b->recv : b->send;
    fill(c->t, root, src, 0, count * n);
    if (inplace) rb = b->recv + me * count * s;
    HNCCL(ncclScatter(src, rb, count, c->t->d->type, root, c->comm, NULL));
  } else {
    HNCCL(ncclScatter(NULL, rb, count, c->t->d->type, root, c->comm, NULL));
  }
  if (check_elems(c, rb, 0, count, root, me * count)) return 1;
  size_t end = c->rank == root && inplace ? count * n : count;
  return check_poison(c, b->recv, end, GUARD, "guard");
}

/* Sizes that differ per (sender, receiver) pair. */
static size_t pair_count(int from, int to) {
  return 1 + (size_t)((from * 7 + to * 3) % 13) * 37;
}

/* One group: to every peer (self included) a message of its own size, then
 * a second, short one to the next rank (the k-th send to a peer pairs with
 * its k-th receive). */
static int unequal(struct ctx *c, const struct bufs *b) {
  int n = c->nranks, me = c->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
  size_t s = c->t->d->size, at_send = 0, at_recv = 0, total = 0;
  ncclDataType_t dt = c->t->d->type;
  p2p_label(c, "unequal sizes", 0, -1);
  for (int p = 0; p < n; p++) total += pair_count(p, me);
  memset(b->recv, poison_byte(c->t->d), (total + 5 + GUARD) * s);
  fill(c->t, me, b->send, 0, (size_t)n * 13 * 37 + 5);
  HNCCL(ncclGroupStart());
  for (int p = 0; p < n; p++) {
    HNCCL(ncclSend(b->send + at_send * s, pair_count(me, p), dt, p, c->comm, NULL));
    HNCCL(ncclRecv(b->recv + at_recv * s, pair_count(p, me), dt, p, c->comm, NULL));
    at_send += pair_count(me, p);
    at_recv += pair_count(p, me);
  }
  HNCCL(ncclSend(b->send + at_send * s, 5, dt, next, c->comm, NULL));
  HNCCL(ncclRecv(b->recv + at_recv * s, 5, dt, prev, c->comm, NULL));
  HNCCL(ncclGroupEnd());
  at_recv = 0;
  for (int p = 0; p < n; p++) {
    size_t sent_at = 0; /* where p's message to me started in p's send buffer */
    for (int q = 0; q < me; q++) sent_at += pair_count(p, q);
    if (check_elems(c, b->recv, at_recv, pair_count(p, me), p, sent_at)) return 1;
    at_recv += pair_count(p, me);
  }
  size_t prev_tail = 0;
  for (int q = 0; q < n; q++) prev_tail += pair_count(prev, q);
  if (check_elems(c, b->recv, at_recv, 5, prev, prev_tail)) return 1;
  return check_poison(c, b->recv, at_recv + 5, GUARD, "guard");
}

/* Send to self, and lone calls outside a group (ranks 0 and 1). */
static int self_and_lone(struct ctx *c, const struct bufs *b) {
  size_t s = c->t->d->size, count = 1031;
  ncclDataType_t dt = c->t->d->type;
  p2p_label(c, "send to self", count, -1);
  memset(b->recv, poison_byte(c->t->d), (count + GUARD) * s);
  fill(c->t, c->rank, b->send, 0, count);
  HNCCL(ncclGroupStart());
  HNCCL(ncclRecv(b->recv, count, dt, c->rank, c->comm, NULL));
  HNCCL(ncclSend(b->send, count, dt, c->rank, c->comm, NULL));
  HNCCL(ncclGroupEnd());
  if (check_elems(c, b->recv, 0, count, c->rank, 0)) return 1;
  if (c->nranks < 2 || c->rank > 1) return 0;
  int peer = 1 - c->rank;
  p2p_label(c, "lone send/recv", count, -1);
  memset(b->recv, poison_byte(c->t->d), (count + GUARD) * s);
  if (c->rank == 0) {
    HNCCL(ncclSend(b->send, count, dt, peer, c->comm, NULL));
    HNCCL(ncclRecv(b->recv, count, dt, peer, c->comm, NULL));
  } else {
    HNCCL(ncclRecv(b->recv, count, dt, peer, c->comm, NULL));
    HNCCL(ncclSend(b->send, count, dt, peer, c->comm, NULL));
  }
  if (check_elems(c, b->recv, 0, count, peer, 0)) return 1;
  return check_poison(c, b->recv, count, GUARD, "guard");
}

static int p2p_matrix(struct ctx *c, const struct bufs *b, uint32_t *salt) {
  static const ncclDataType_t types[] = {ncclInt32, ncclFloat16, ncclFloat64};
  for (int ti = 0; ti < 3; ti++) {
    table_build(c->t, dtype_find(types[ti]), ncclSum, c->nranks, (*salt)++);
    for (int ci = 0; ci < NSMALL; ci++) {
      size_t count = small_counts[ci];
      int root = (ci + ti) % c->nranks;
      if (ring_exchange(c, b, count) || alltoall(c, b, count)) return 1;
      if (ring_exchange_inplace(c, b, count) || alltoall_inplace(c, b, count)) return 1;
      for (int inplace = 0; inplace <= 1; inplace++)
        if (gather(c, b, count, root, inplace) || scatter(c, b, count, root, inplace)) return 1;
    }
    if (unequal(c, b) || self_and_lone(c, b)) return 1;
  }
  /* One large all-to-all. */
  table_build(c->t, dtype_find(ncclFloat32), ncclSum, c->nranks, (*salt)++);
  size_t large = (LARGE_COUNT / (size_t)c->nranks) | 1;
  if (ring_exchange_inplace(c, b, LARGE_COUNT) || exchange_inplace_unequal(c, b) ||
      exchange_one_side_inplace(c, b))
    return 1;
  return alltoall(c, b, large) || alltoall_inplace(c, b, large);
}

/* ---- Sessions ------------------------------------------------------------ */

struct session {
  int nranks;
  const char *algo; /* NCCL_ALGO, or NULL: the model chooses */
  int shm_disable;  /* NCCL_SHM_DISABLE=1: sockets only */
  int allreduce_only;
};

static int session_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  const struct session *ses = arg;
  struct ctx c = {.rank = rank, .nranks = nranks};
  HNCCL(ncclCommInitRank(&c.comm, nranks, id, rank));
  size_t elems = LARGE_COUNT + MAX_RANKS + GUARD; /* 4-byte types only at this size */
  size_t small = (1031 * MAX_RANKS + GUARD) * 8;
  size_t bytes = elems * 4 > small ? elems * 4 : small;
  struct bufs b = {malloc(bytes), malloc(bytes), malloc(bytes)};
  c.t = malloc(sizeof *c.t);
  HCHECK(b.send && b.recv && b.orig && c.t, "out of memory");
  uint32_t salt = 1;
  for (int k = 0; k < NCOLLS; k++) {
    if (ses->allreduce_only && k != C_ALLREDUCE) continue;
    if (coll_matrix(&c, (enum coll)k, &b, &salt)) return 1;
    if (coll_large(&c, (enum coll)k, &b, &salt)) return 1;
  }
  if (!ses->allreduce_only && p2p_matrix(&c, &b, &salt)) return 1;
  /* The last rank was the root of a large out-of-place broadcast, whose
   * copy went to the pool (coll_large). */
  const char *copy = getenv("WEFT_HOST_COPY_THREADS");
  int want = copy != NULL ? atoi(copy) : 0;
  if (want > 0 && !ses->allreduce_only && rank == nranks - 1)
    HCHECK(proc_threads_named("weft-copy") == want,
           "rank %d: %d copy threads after a large out-of-place broadcast at this root, "
           "expected WEFT_HOST_COPY_THREADS=%d",
           rank, proc_threads_named("weft-copy"), want);
  /* With WEFT_HOST_LANE_MIN_BYTES=0 every collective of several lanes
   * (any of 2 ranks or more) ran on the lane team. */
  const char *lanes = getenv("WEFT_HOST_LANE_THREADS");
  int team = lanes != NULL ? atoi(lanes) : 0;
  if (team > 1 && nranks > 1)
    HCHECK(proc_threads_named("weft-lanes") == team - 1,
           "rank %d: %d lane threads after the collectives, expected WEFT_HOST_LANE_THREADS=%d "
           "less the engine's own thread",
           rank, proc_threads_named("weft-lanes"), team);
  HNCCL(ncclCommDestroy(c.comm));
  free(c.t);
  free(b.send);
  free(b.recv);
  free(b.orig);
  return 0;
}

/* Runs in the fresh process harness_exec_self starts: argv is
 * --session nranks allreduce_only; NCCL_ALGO etc. are in the environment. */
static int session_main(int argc, char **argv) {
  if (argc < 4) return 2;
  struct session ses = {atoi(argv[2]), NULL, 0, atoi(argv[3])};
  char why[8192];
  double t0 = harness_now();
  int rc = harness_procs(ses.nranks, SESSION_TIMEOUT_S, session_rank, &ses, why, sizeof why);
  if (rc != 0) fprintf(stderr, "%s\n", why);
  fprintf(stderr, "session: %d ranks, %.1f s\n", ses.nranks, harness_now() - t0);
  return rc == 0 ? 0 : 1;
}

static const struct session sessions[] = {
    {1, "ring", 0, 0},   {2, "ring", 0, 0},   {3, "ring", 0, 0},
    {4, "ring", 0, 0},   {5, "ring", 0, 0},   {6, "ring", 0, 0},
    {7, "ring", 0, 0},   {8, "ring", 0, 0},   {2, "allreduce:tree;broadcast:ring", 0, 1},
    {3, "Tree", 0, 1},   {5, "tree", 0, 1},   {8, "tree", 0, 1},
    {3, "ring", 1, 0},   {4, NULL, 1, 0},     {6, NULL, 0, 0},
    {1, "direct", 0, 0}, {2, "direct", 0, 0}, {3, "Direct", 0, 0},
    {4, "direct", 1, 0}, {5, "direct", 0, 0}, {8, "direct", 0, 0},
};
#define NSESSIONS (int)(sizeof sessions / sizeof sessions[0])

/* The host engine's copy pool forced on CI's 2 cores
 * (WEFT_HOST_COPY_THREADS): broadcast roots' copies, one-rank copies and
 * copies to self on threads beside the engine's; and its lane team
 * (WEFT_HOST_LANE_THREADS, with WEFT_HOST_LANE_MIN_BYTES=0 so every
 * collective of several lanes runs on it): lanes over shared memory and
 * over sockets, rings and trees, on several threads of each rank. */
static const struct {
  struct session ses;
  int threads;
  int lanes;
} copy_sessions[] = {
    {{1, "ring", 0, 0}, 2, 0}, {{2, "ring", 1, 0}, 2, 0}, {{3, NULL, 0, 0}, 2, 0},
    {{4, NULL, 1, 0}, 3, 0},   {{2, "ring", 1, 0}, 0, 2}, {{3, "tree", 0, 0}, 2, 3},
    {{4, NULL, 1, 0}, 0, 3},
};
#define NCOPY_SESSIONS (int)(sizeof copy_sessions / sizeof copy_sessions[0])

static void run_session(const struct session *ses, int copy_threads, int lane_threads, int idx) {
  char nranks[16], only[16], algo[128];
  snprintf(nranks, sizeof nranks, "%d", ses->nranks);
  snprintf(only, sizeof only, "%d", ses->allreduce_only);
  char *argv[] = {"test_collectives", "--session", nranks, only, NULL};
  const char *env[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
  char copy[64], lanes[64];
  int ne = 0;
  if (ses->algo != NULL) {
    snprintf(algo, sizeof algo, "NCCL_ALGO=%s", ses->algo);
    env[ne++] = algo;
  } else {
    env[ne++] = "NCCL_ALGO";
  }
  env[ne++] = ses->shm_disable ? "NCCL_SHM_DISABLE=1" : "NCCL_SHM_DISABLE";
  snprintf(copy, sizeof copy, "WEFT_HOST_COPY_THREADS=%d", copy_threads);
  env[ne++] = copy_threads > 0 ? copy : "WEFT_HOST_COPY_THREADS";
  snprintf(lanes, sizeof lanes, "WEFT_HOST_LANE_THREADS=%d", lane_threads);
  env[ne++] = lane_threads > 0 ? lanes : "WEFT_HOST_LANE_THREADS";
  env[ne++] = lane_threads > 0 ? "WEFT_HOST_LANE_MIN_BYTES=0" : "WEFT_HOST_LANE_MIN_BYTES";
  char err_path[256];
  snprintf(err_path, sizeof err_path, "/tmp/weft-test-collectives-%d-%d.err", (int)getpid(), idx);
  int st = harness_exec_self(argv, env, NULL, err_path, SESSION_TIMEOUT_S + 10, NULL);
  char *err = harness_read_file(err_path);
  unlink(err_path);
  ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "session %d ranks NCCL_ALGO=%s NCCL_SHM_DISABLE=%d WEFT_HOST_COPY_THREADS=%d "
                "WEFT_HOST_LANE_THREADS=%d%s failed (status 0x%x): %s",
                ses->nranks, ses->algo ? ses->algo : "(unset)", ses->shm_disable, copy_threads,
                lane_threads, ses->allreduce_only ? " (AllReduce only)" : "", st,
                err ? err : "(no output)");
  free(err);
}

START_TEST(test_session) {
  run_session(&sessions[_i], 0, 0, _i);
}
END_TEST

START_TEST(test_copy_session) {
  run_session(&copy_sessions[_i].ses, copy_sessions[_i].threads, copy_sessions[_i].lanes,
              NSESSIONS + _i);
}
END_TEST

int main(int argc, char **argv) {
  harness_env_defaults();
  if (argc > 1 && strcmp(argv[1], "--session") == 0) return session_main(argc, argv);
  Suite *s = suite_create("collectives");
  TCase *tc = tcase_create("sessions");
  tcase_set_timeout(tc, SESSION_TIMEOUT_S + 30);
  tcase_add_loop_test(tc, test_session, 0, NSESSIONS);
  tcase_add_loop_test(tc, test_copy_session, 0, NCOPY_SESSIONS);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
