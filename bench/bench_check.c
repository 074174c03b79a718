/* Input values and expected results for checking a collective's output.
 *
 * Inputs are small integers, so sums, products, minima and maxima of them
 * are exact in every type as long as the partial results fit the type's
 * mantissa; the checker then demands exact equality. Only where a result
 * cannot be exact (averages of floats, which NCCL computes by pre-scaling,
 * or sums that outgrow an 8-bit float's mantissa) does it allow the
 * rounding error the type can make. NaN never passes.
 *
 * Outputs are poisoned before each checked run with bytes no correct run
 * produces: all ones in float types (NaN in every format, 8-bit ones too),
 * 0xA5 in integer types (large values of either sign). */
#include <math.h>
#include <string.h>

#include "bench.h"

/* A spread of values that differs between ranks and neighbouring
 * elements; rounded through the type so 8-bit floats hold them exactly. */
static double pattern(const struct bench_case *c, int rank, size_t i) {
  const struct bench_type *t = &bench_types[c->type];
  double v = (double)(((size_t)rank * 7 + i * 13) % 17);

  return bench_type_round(c->type, t->is_signed ? v - 8 : v);
}

/* The value rank contributes at element i of its input. */
static double input_value(const struct bench_case *c, int rank, size_t i) {
  const struct bench_type *t = &bench_types[c->type];
  const size_t n = (size_t)c->nranks;

  if (!bench_colls[c->coll].has_op) return pattern(c, rank, i);
  switch ((int)c->op) {
    case ncclSum:
    case BENCH_OP_MULSUM:
      /* -1, 0, 1 where the type has a sign: sums stay within n (2n
       * under mulsum, whose scalars are 1 and 2). */
      return (double)(((size_t)rank + i) % 3) - (t->is_signed ? 1 : 0);
    case ncclAvg:
      /* Never negative, so integer division truncates the one way. */
      return (double)(((size_t)rank + i) % 3);
    case ncclProd: {
      /* One rank gives 2, the others 1 (or -1): products stay within 2. */
      double v = i % n == (size_t)rank ? 2.0 : 1.0;
      return t->is_signed && (i / n + (size_t)rank) % 4 == 0 ? -v : v;
    }
    default: return pattern(c, rank, i);
  }
}

/* op over every rank's element i, exactly, then rounded into the type. */
static double reduce_all(const struct bench_case *c, size_t i) {
  const int mulsum = (int)c->op == BENCH_OP_MULSUM;
  double acc = input_value(c, 0, i) * (mulsum ? bench_mulsum_scalar(0) : 1.0);

  for (int r = 1; r < c->nranks; r++) {
    double v = input_value(c, r, i) * (mulsum ? bench_mulsum_scalar(r) : 1.0);
    switch ((int)c->op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = v > acc ? v : acc; break;
      case ncclMin: acc = v < acc ? v : acc; break;
      default: acc += v; break;
    }
  }
  if (c->op == ncclAvg) {
    acc /= c->nranks;
    if (!bench_types[c->type].is_float) acc = trunc(acc);
  }
  return bench_type_round(c->type, acc);
}

/* Element k of rank's output. */
static double expected(const struct bench_case *c, int rank, size_t k) {
  const size_t p = c->param_count;

  switch (c->coll) {
    case BENCH_REDUCESCATTER: return reduce_all(c, (size_t)rank * p + k);
    case BENCH_BROADCAST: return input_value(c, c->root, k);
    case BENCH_ALLGATHER:
    case BENCH_GATHER:
    case BENCH_HYPERCUBE: return input_value(c, (int)(k / p), k % p);
    case BENCH_SCATTER: return input_value(c, c->root, (size_t)rank * p + k);
    case BENCH_ALLTOALL: return input_value(c, (int)(k / p), (size_t)rank * p + k % p);
    case BENCH_SENDRECV: return input_value(c, (rank + c->nranks - 1) % c->nranks, k);
    default: return reduce_all(c, k); /* allreduce, reduce */
  }
}

/* How far a correct result may be from the exact one (see the top). */
static double tolerance(const struct bench_case *c) {
  const struct bench_type *t = &bench_types[c->type];
  const double n = c->nranks;
  const double eps = ldexp(1.0, -(t->mant_bits + 1));
  const double most = (int)c->op == BENCH_OP_MULSUM ? 2 * n : n;
  const int sum_exact = most <= ldexp(1.0, t->mant_bits + 1);

  if (!t->is_float || !bench_colls[c->coll].has_op) return 0.0;
  switch ((int)c->op) {
    case ncclSum:
    case BENCH_OP_MULSUM:
      /* Inputs are -1, 0, 1 (times 1 or 2): partial sums stay within
       * most, so does the error of each of the n roundings. */
      return sum_exact ? 0.0 : eps * n * most;
    case ncclAvg:
      /* Inputs are not negative, so every partial result is at most the
       * final one: the error is relative to it (pass want; see caller). */
      return eps * 2.0 * (n + 1) * (sum_exact ? 1.0 : n);
    default: return 0.0;
  }
}

void bench_check_poison(ncclDataType_t type, void *buf, size_t count) {
  memset(buf, bench_types[type].is_float ? 0xFF : 0xA5, count * bench_types[type].size);
}

void bench_check_fill(const struct bench_case *c, int rank, void *buf, size_t off) {
  for (size_t i = 0; i < c->send_count; i++)
    bench_type_store(c->type, buf, off + i, input_value(c, rank, i));
}

size_t bench_check_count(const struct bench_case *c, int rank, const void *out) {
  const double tol = tolerance(c);
  size_t wrong = 0;

  /* Only the root receives. */
  if ((c->coll == BENCH_REDUCE || c->coll == BENCH_GATHER) && rank != c->root) return 0;
  for (size_t k = 0; k < c->recv_count; k++) {
    double got = bench_type_load(c->type, out, k);
    double want = expected(c, rank, k);
    double allowed = c->op == ncclAvg ? tol * fabs(want) : tol;
    if (isnan(got) || fabs(got - want) > allowed) wrong++;
  }
  return wrong;
}
