/* ncclAllReduce on host ranks: every datatype x operator x count, in place
 * and out of place, on 1..8 ranks in separate processes, checked against a
 * double-precision reference; plus threads, ncclCommInitAll driven by one
 * thread inside a group, and grouped calls.
 *
 * Inputs are chosen so every result is exact in its type: small integers
 * whose sums over 8 ranks fit (fp8, half, bf16 included), and for products
 * only 1, -1, 2 and 0.5 with at most two 2s and two 0.5s per element. Only
 * ncclAvg on floating types is compared with a tolerance, stated in
 * ref_build. Outputs are poisoned before each call (NaN for floating types,
 * 0x7b bytes for integers, a value no expected integer result takes) and
 * NaN never passes. Inputs repeat with a prime period, so the reference is
 * computed once per case and a misplaced block shows up. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elem.h"
#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define PERIOD 1009 /* prime: block moves by a power of two are caught */
#define GUARD 16    /* poisoned elements after the result, must stay so */
#define LARGE_COUNT (((size_t)1 << 20) + 3)
#define SESSION_TIMEOUT_S 240

static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
static const char *const op_names[] = {"sum", "prod", "max", "min", "avg"};
#define NOPS 5

/* ---- Inputs and the reference ----------------------------------------- */

/* Rank `rank`'s input at position j of the period, for case `salt`. */
static double gen_value(const struct dtype_info *d, ncclRedOp_t op, int rank, int j,
                        uint32_t salt) {
  uint32_t h =
      mix((uint32_t)j * 0x9e3779b1U ^ mix((uint32_t)rank + 1) ^ mix(salt * 0x85ebca77U + 7));
  if (op == ncclProd) {
    /* At most two ranks (of 8) take 2 and two take 0.5 at any position, so
     * every partial product lies in [1/4, 4]: exact everywhere, no
     * overflow in int8 or fp8. */
    double v = 1;
    if ((j + rank) % 4 == 0)
      v = 2;
    else if ((j + rank) % 4 == 2 && d->kind == K_FLOAT)
      v = 0.5;
    if (d->kind != K_UINT && (h & 1)) v = -v;
    return v;
  }
  int r = d->range;
  double v = d->kind == K_UINT ? (double)(h % (uint32_t)(r + 1))
                               : (double)((int)(h % (uint32_t)(2 * r + 1)) - r);
  if (d->type == ncclFloat32 || d->type == ncclFloat64) v /= 8; /* fractions too, still exact */
  return v;
}

/* One rank's view of one case: its input and the expected output over one
 * period, as bytes of the type (exact cases) or value and tolerance. */
struct ref {
  const struct dtype_info *d;
  ncclRedOp_t op;
  int nranks, rank;
  uint32_t salt;
  int exact;
  unsigned char in[PERIOD * 8];
  unsigned char want[PERIOD * 8];
  double value[PERIOD];
  double tol[PERIOD];
};

static void ref_build(struct ref *rf, const struct dtype_info *d, ncclRedOp_t op, int rank,
                      int nranks, uint32_t salt) {
  rf->d = d;
  rf->op = op;
  rf->rank = rank;
  rf->nranks = nranks;
  rf->salt = salt;
  rf->exact = !(op == ncclAvg && d->kind == K_FLOAT);
  for (int j = 0; j < PERIOD; j++) {
    double acc = 0, abs_sum = 0;
    for (int r = 0; r < nranks; r++) {
      double x = gen_value(d, op, r, j, salt);
      abs_sum += fabs(x);
      if (r == 0) {
        acc = x;
        continue;
      }
      switch (op) {
        case ncclProd: acc *= x; break;
        case ncclMax: acc = x > acc ? x : acc; break;
        case ncclMin: acc = x < acc ? x : acc; break;
        default: acc += x;
      }
    }
    if (op == ncclAvg) acc = d->kind == K_FLOAT ? acc / nranks : trunc(acc / nranks);
    elem_store(d, rf->in + (size_t)j * d->size, gen_value(d, op, rank, j, salt));
    elem_store(d, rf->want + (size_t)j * d->size, acc);
    rf->value[j] = acc;
    /* ncclAvg on floating types: a library may divide before or after
     * summing, in the type or wider. Allowed: (n+1) ulps of the mean of the
     * magnitudes, plus n of the smallest subnormal. */
    rf->tol[j] = 0;
    if (!rf->exact) {
      int bias = (1 << (d->ebits - 1)) - 1;
      rf->tol[j] = (nranks + 1) * ldexp(abs_sum / nranks, -d->mbits) +
                   nranks * ldexp(1.0, 1 - bias - d->mbits);
    }
  }
}

static void fill_input(const struct ref *rf, void *buf, size_t count) {
  size_t s = rf->d->size;
  size_t first = count < PERIOD ? count : PERIOD;
  memcpy(buf, rf->in, first * s);
  for (size_t done = first; done < count;) {
    size_t n = done < count - done ? done : count - done;
    memcpy((char *)buf + done * s, buf, n * s);
    done += n;
  }
}

static int elem_same(const unsigned char *a, const unsigned char *b, size_t s) {
  switch (s) {
    case 1: return a[0] == b[0];
    case 2: return memcmp(a, b, 2) == 0;
    case 4: return memcmp(a, b, 4) == 0;
    default: return memcmp(a, b, 8) == 0;
  }
}

static const char *op_name(ncclRedOp_t op) {
  return (int)op >= 0 && (int)op < NOPS ? op_names[op] : "?";
}

/* Checks count results in buf and the GUARD poisoned elements after them. */
static int check_output(const struct ref *rf, const void *buf, size_t count, const char *what) {
  const struct dtype_info *d = rf->d;
  const unsigned char *p = buf;
  size_t s = d->size;
  size_t j = 0;
  for (size_t i = 0; i < count; i++, j = j + 1 == PERIOD ? 0 : j + 1) {
    const unsigned char *e = p + i * s;
    if (rf->exact && elem_same(e, rf->want + j * s, s)) continue;
    double got = elem_load(d, e);
    double diff = fabs(got - rf->value[j]);
    if (!isnan(got) && diff <= rf->tol[j]) continue;
    return harness_fail(__FILE__, __LINE__,
                        "%s %s %s nranks=%d count=%zu: element %zu is %.17g, "
                        "expected %.17g (tolerance %g)",
                        what, d->name, op_name(rf->op), rf->nranks, count, i, got, rf->value[j],
                        rf->tol[j]);
  }
  unsigned char poison = poison_byte(d);
  for (size_t b = count * s; b < (count + GUARD) * s; b++)
    HCHECK(p[b] == poison, "%s %s %s nranks=%d count=%zu: byte %zu past the end was written", what,
           d->name, op_name(rf->op), rf->nranks, count, b - count * s);
  return 0;
}

/* The send buffer of an out-of-place call must come back untouched. */
static int check_input(const struct ref *rf, const void *buf, size_t count) {
  const unsigned char *p = buf;
  size_t s = rf->d->size;
  for (size_t i = 0, j = 0; i < count; i++, j = j + 1 == PERIOD ? 0 : j + 1)
    HCHECK(elem_same(p + i * s, rf->in + j * s, s),
           "%s %s nranks=%d count=%zu: sendbuff element %zu was modified", rf->d->name,
           op_name(rf->op), rf->nranks, count, i);
  return 0;
}

/* Prepares one call's buffers: poison recv (count + GUARD), input in send
 * (or in recv when in place). Returns the send pointer to pass. */
static void *prepare(const struct ref *rf, void *send, void *recv, size_t count, int inplace) {
  memset(recv, poison_byte(rf->d), (count + GUARD) * rf->d->size);
  fill_input(rf, inplace ? recv : send, count);
  return inplace ? recv : send;
}

static int verify(const struct ref *rf, const void *send, const void *recv, size_t count,
                  int inplace) {
  if (check_output(rf, recv, count, inplace ? "in-place" : "out-of-place")) return 1;
  return inplace ? 0 : check_input(rf, send, count);
}

/* One blocking all-reduce, poisoned, called and checked. */
static int run_case(ncclComm_t comm, const struct ref *rf, void *send, void *recv, size_t count,
                    int inplace) {
  const void *sb = prepare(rf, send, recv, count, inplace);
  ncclResult_t res = ncclAllReduce(sb, recv, count, rf->d->type, rf->op, comm, NULL);
  HCHECK(res == ncclSuccess, "ncclAllReduce(%s, %s, count=%zu, %s) -> %d (%s): %s", rf->d->name,
         op_name(rf->op), count, inplace ? "in-place" : "out-of-place", (int)res,
         ncclGetErrorString(res), ncclGetLastError(comm));
  return verify(rf, send, recv, count, inplace);
}

/* ---- The matrix, one communicator per session -------------------------- */

struct matrix_arg {
  int large; /* also run LARGE_COUNT for every dtype x op */
  int quick; /* only a few dtypes (threads mode) */
};

static const size_t small_counts[] = {1, 7, 1031};

static int matrix_rank(int rank, int nranks, ncclUniqueId id, void *argp) {
  const struct matrix_arg *arg = argp;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  int n = -1, me = -1;
  HNCCL(ncclCommCount(comm, &n));
  HNCCL(ncclCommUserRank(comm, &me));
  HCHECK(n == nranks && me == rank, "count %d rank %d, expected %d %d", n, me, nranks, rank);

  size_t max_count = arg->large ? LARGE_COUNT : 1031;
  unsigned char *send = malloc((max_count + GUARD) * 8);
  unsigned char *recv = malloc((max_count + GUARD) * 8);
  struct ref *rf = malloc(sizeof *rf);
  HCHECK(send && recv && rf, "out of memory");

  for (int di = 0; di < ndtypes; di++) {
    const struct dtype_info *d = &dtypes[di];
    if (arg->quick && d->type != ncclInt32 && d->type != ncclFloat32 && d->type != ncclFloat16 &&
        d->type != ncclFloat8e4m3)
      continue;
    for (int oi = 0; oi < NOPS; oi++) {
      ref_build(rf, d, ops[oi], rank, nranks, (uint32_t)(di * NOPS + oi));

      /* Count 0: success, and nothing written. */
      memset(recv, poison_byte(d), GUARD * d->size);
      ncclResult_t res = ncclAllReduce(send, recv, 0, d->type, ops[oi], comm, NULL);
      HCHECK(res == ncclSuccess, "ncclAllReduce(count=0, %s, %s) -> %d: %s", d->name, op_names[oi],
             (int)res, ncclGetLastError(comm));
      if (check_output(rf, recv, 0, "count 0")) return 1;

      for (size_t ci = 0; ci < sizeof small_counts / sizeof *small_counts; ci++)
        for (int inplace = 0; inplace <= 1; inplace++)
          if (run_case(comm, rf, send, recv, small_counts[ci], inplace)) return 1;
      /* The large count alternates placement to keep the suite quick. */
      if (arg->large && run_case(comm, rf, send, recv, LARGE_COUNT, (di + oi) % 2)) return 1;
    }
  }
  free(rf);
  free(send);
  free(recv);
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

/* WEFT_TEST_LARGE=0 leaves out the large count (slow sanitizer builds). */
static int want_large(void) {
  const char *v = getenv("WEFT_TEST_LARGE");
  return v == NULL || strcmp(v, "0") != 0;
}

START_TEST(test_matrix_procs) {
  int nranks = _i;
  struct matrix_arg arg = {want_large(), 0};
  char why[8192];
  int rc = harness_procs(nranks, SESSION_TIMEOUT_S, matrix_rank, &arg, why, sizeof why);
  ck_assert_msg(rc == 0, "%d ranks: %s", nranks, why);
}
END_TEST

START_TEST(test_matrix_threads) {
  struct matrix_arg arg = {0, 1};
  char why[8192];
  int rc = harness_threads(3, 60, matrix_rank, &arg, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- Groups ------------------------------------------------------------ */

/* Several all-reduces of one rank, issued in one group. */
struct grouped_call {
  ncclDataType_t type;
  ncclRedOp_t op;
  size_t count;
  int inplace;
};

static const struct grouped_call grouped_calls[] = {
    {ncclInt32, ncclSum, 1031, 0},    {ncclFloat16, ncclMax, 7, 1},
    {ncclBfloat16, ncclAvg, 4099, 0}, {ncclUint8, ncclProd, 1, 0},
    {ncclFloat64, ncclMin, 65537, 1}, {ncclFloat32, ncclSum, 0, 0},
};
#define NGROUPED (int)(sizeof grouped_calls / sizeof grouped_calls[0])

struct grouped_bufs {
  struct ref *rf[NGROUPED];
  void *send[NGROUPED];
  void *recv[NGROUPED];
};

static int grouped_alloc(struct grouped_bufs *b, int rank, int nranks, uint32_t salt) {
  for (int k = 0; k < NGROUPED; k++) {
    const struct grouped_call *c = &grouped_calls[k];
    const struct dtype_info *d = dtype_find(c->type);
    b->rf[k] = malloc(sizeof *b->rf[k]);
    b->send[k] = malloc((c->count + GUARD) * d->size);
    b->recv[k] = malloc((c->count + GUARD) * d->size);
    HCHECK(b->rf[k] && b->send[k] && b->recv[k], "out of memory");
    ref_build(b->rf[k], d, c->op, rank, nranks, salt + 100u * (uint32_t)k);
  }
  return 0;
}

static void grouped_free(struct grouped_bufs *b) {
  for (int k = 0; k < NGROUPED; k++) {
    free(b->rf[k]);
    free(b->send[k]);
    free(b->recv[k]);
  }
}

/* Issues every grouped call of one rank (inside the caller's group). */
static int grouped_issue(struct grouped_bufs *b, ncclComm_t comm) {
  for (int k = 0; k < NGROUPED; k++) {
    const struct grouped_call *c = &grouped_calls[k];
    const void *sb = prepare(b->rf[k], b->send[k], b->recv[k], c->count, c->inplace);
    HNCCL(ncclAllReduce(sb, b->recv[k], c->count, c->type, c->op, comm, NULL));
  }
  return 0;
}

static int grouped_verify(struct grouped_bufs *b) {
  for (int k = 0; k < NGROUPED; k++) {
    const struct grouped_call *c = &grouped_calls[k];
    if (verify(b->rf[k], b->send[k], b->recv[k], c->count, c->inplace)) return 1;
  }
  return 0;
}

static int grouped_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  for (uint32_t round = 0; round < 3; round++) {
    struct grouped_bufs b;
    if (grouped_alloc(&b, rank, nranks, 7000 + round)) return 1;
    HNCCL(ncclGroupStart());
    if (grouped_issue(&b, comm)) return 1;
    HNCCL(ncclGroupEnd());
    if (grouped_verify(&b)) return 1;
    grouped_free(&b);
  }
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_grouped_procs) {
  char why[8192];
  int rc = harness_procs(3, 60, grouped_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

#define INITALL_N 4

/* One thread drives all ranks of ncclCommInitAll: one all-reduce per
 * communicator in one group, then several per communicator in one group. */
static int initall_solo(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)rank, (void)nranks, (void)id, (void)arg;
  ncclComm_t comms[INITALL_N];
  HNCCL(ncclCommInitAll(comms, INITALL_N, NULL));
  for (int i = 0; i < INITALL_N; i++) {
    int n = -1, me = -1;
    HNCCL(ncclCommCount(comms[i], &n));
    HNCCL(ncclCommUserRank(comms[i], &me));
    HCHECK(n == INITALL_N && me == i, "comm %d: count %d rank %d", i, n, me);
  }

  const struct dtype_info *d = dtype_find(ncclFloat32);
  size_t count = 4099;
  struct ref *rf[INITALL_N];
  void *send[INITALL_N], *recv[INITALL_N];
  for (int i = 0; i < INITALL_N; i++) {
    rf[i] = malloc(sizeof *rf[i]);
    send[i] = malloc((count + GUARD) * d->size);
    recv[i] = malloc((count + GUARD) * d->size);
    HCHECK(rf[i] && send[i] && recv[i], "out of memory");
    ref_build(rf[i], d, ncclSum, i, INITALL_N, 42);
  }
  for (int inplace = 0; inplace <= 1; inplace++) {
    HNCCL(ncclGroupStart());
    for (int i = 0; i < INITALL_N; i++) {
      const void *sb = prepare(rf[i], send[i], recv[i], count, inplace);
      HNCCL(ncclAllReduce(sb, recv[i], count, d->type, ncclSum, comms[i], NULL));
    }
    HNCCL(ncclGroupEnd());
    for (int i = 0; i < INITALL_N; i++)
      if (verify(rf[i], send[i], recv[i], count, inplace)) return 1;
  }
  for (int i = 0; i < INITALL_N; i++) {
    free(rf[i]);
    free(send[i]);
    free(recv[i]);
  }

  struct grouped_bufs b[INITALL_N];
  for (int i = 0; i < INITALL_N; i++)
    if (grouped_alloc(&b[i], i, INITALL_N, 9000)) return 1;
  HNCCL(ncclGroupStart());
  for (int i = 0; i < INITALL_N; i++)
    if (grouped_issue(&b[i], comms[i])) return 1;
  HNCCL(ncclGroupEnd());
  for (int i = 0; i < INITALL_N; i++) {
    if (grouped_verify(&b[i])) return 1;
    grouped_free(&b[i]);
  }
  for (int i = 0; i < INITALL_N; i++) HNCCL(ncclCommDestroy(comms[i]));
  return 0;
}

START_TEST(test_initall_group) {
  char why[8192];
  int rc = harness_solo(60, initall_solo, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Many small calls back to back, each checked: every rank must count the
 * same sequence of operations, also when one of them is late. */
static int sequence_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  const struct dtype_info *d = dtype_find(ncclFloat32);
  struct ref *rf = malloc(sizeof *rf);
  float send[64 + GUARD], recv[64 + GUARD];
  HCHECK(rf != NULL, "out of memory");
  for (uint32_t k = 0; k < 200; k++) {
    size_t count = 1 + k % 37;
    ref_build(rf, d, ops[k % NOPS], rank, nranks, 500 + k);
    /* Now and then one rank comes late. */
    if (k % 40 == (uint32_t)rank * 7) harness_sleep_ms(20);
    if (run_case(comm, rf, send, recv, count, (int)(k % 3 == 0))) return 1;
  }
  free(rf);
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_sequence_procs) {
  char why[8192];
  int rc = harness_procs(4, 60, sequence_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("allreduce");

  TCase *tc = tcase_create("matrix");
  tcase_set_timeout(tc, SESSION_TIMEOUT_S + 30);
  tcase_add_loop_test(tc, test_matrix_procs, 1, 9);
  tcase_add_test(tc, test_matrix_threads);
  suite_add_tcase(s, tc);

  tc = tcase_create("groups");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_grouped_procs);
  tcase_add_test(tc, test_initall_group);
  tcase_add_test(tc, test_sequence_procs);
  suite_add_tcase(s, tc);

  return suite_run(s);
}
