/* Data types and operators as the bench names them, and element access in
 * double precision for every NCCL type, including the 16- and 8-bit floats
 * that C has no type for. */
#include <ctype.h>
#include <math.h>
#include <string.h>

#include "bench.h"

/* Names, sizes and precision of NCCL's types, in ncclDataType_t order, with
 * the names nccl-tests prints. */
const struct bench_type bench_types[ncclNumTypes] = {
    {"int8", ncclInt8, 1, 0, 1, 0},         {"uint8", ncclUint8, 1, 0, 0, 0},
    {"int32", ncclInt32, 4, 0, 1, 0},       {"uint32", ncclUint32, 4, 0, 0, 0},
    {"int64", ncclInt64, 8, 0, 1, 0},       {"uint64", ncclUint64, 8, 0, 0, 0},
    {"half", ncclFloat16, 2, 1, 1, 10},     {"float", ncclFloat32, 4, 1, 1, 23},
    {"double", ncclFloat64, 8, 1, 1, 52},   {"bfloat16", ncclBfloat16, 2, 1, 1, 7},
    {"f8e4m3", ncclFloat8e4m3, 1, 1, 1, 3}, {"f8e5m2", ncclFloat8e5m2, 1, 1, 1, 2},
};

const char *const bench_op_names[BENCH_NOPS] = {"sum", "prod", "max", "min", "avg", "mulsum"};

double bench_mulsum_scalar(int rank) {
  return rank % 2 ? 2.0 : 1.0;
}

/* Other spellings users type for the same types. */
static const struct {
  const char *alias;
  ncclDataType_t type;
} type_aliases[] = {
    {"char", ncclInt8},          {"int", ncclInt32},       {"fp16", ncclFloat16},
    {"float16", ncclFloat16},    {"fp32", ncclFloat32},    {"float32", ncclFloat32},
    {"fp64", ncclFloat64},       {"float64", ncclFloat64}, {"bf16", ncclBfloat16},
    {"fp8e4m3", ncclFloat8e4m3}, {"e4m3", ncclFloat8e4m3}, {"float8e4m3", ncclFloat8e4m3},
    {"fp8e5m2", ncclFloat8e5m2}, {"e5m2", ncclFloat8e5m2}, {"float8e5m2", ncclFloat8e5m2},
};

int bench_type_find(const char *name) {
  for (int t = 0; t < ncclNumTypes; t++)
    if (strcmp(name, bench_types[t].name) == 0) return t;
  for (size_t i = 0; i < sizeof(type_aliases) / sizeof(type_aliases[0]); i++)
    if (strcmp(name, type_aliases[i].alias) == 0) return (int)type_aliases[i].type;
  return -1;
}

int bench_op_find(const char *name) {
  for (int op = 0; op < BENCH_NOPS; op++)
    if (strcmp(name, bench_op_names[op]) == 0) return op;
  return -1;
}

/* ---- Small floats ----------------------------------------------------------
 *
 * One codec for binary16, bfloat16 and the two OCP 8-bit formats: ebits of
 * exponent, mbits of stored mantissa. "ieee" formats keep the all-ones
 * exponent for Inf and NaN; e4m3 (the "FN" variant) has no Inf, only NaN
 * at S.1111.111, and saturates to 448 as CUDA's satfinite conversion does. */

struct minifloat {
  int ebits;
  int mbits;
  int ieee;
};

static const struct minifloat fmt_half = {5, 10, 1};
static const struct minifloat fmt_bf16 = {8, 7, 1};
static const struct minifloat fmt_e4m3 = {4, 3, 0};
static const struct minifloat fmt_e5m2 = {5, 2, 1};

static uint32_t minifloat_encode(double x, const struct minifloat *f) {
  const uint32_t sign = signbit(x) ? 1u << (f->ebits + f->mbits) : 0;
  const int bias = (1 << (f->ebits - 1)) - 1;
  const uint32_t eall = (1u << f->ebits) - 1;
  const uint32_t mall = (1u << f->mbits) - 1;
  /* Largest finite value's bits, and what an overflow turns into. */
  const uint32_t maxfin =
      f->ieee ? ((eall - 1) << f->mbits) | mall : (eall << f->mbits) | (mall - 1);
  const uint32_t over = f->ieee ? eall << f->mbits : maxfin;

  if (isnan(x)) return sign | (eall << f->mbits) | (f->ieee ? 1u << (f->mbits - 1) : mall);
  double a = fabs(x);
  if (a == 0.0) return sign;
  int e;
  frexp(a, &e);
  e -= 1;                         /* a is in [2^e, 2^(e+1)) */
  if (e < 1 - bias) e = 1 - bias; /* subnormal: fixed quantum */
  /* The mantissa with its hidden bit, rounded half to even by rint. */
  double m = rint(ldexp(a, f->mbits - e));
  if (m >= ldexp(1.0, f->mbits + 1)) {
    m /= 2;
    e++;
  }
  uint32_t mi = (uint32_t)m;
  uint32_t field = mi > mall ? (uint32_t)(e + bias) : 0;
  uint32_t bits = (field << f->mbits) | (mi & mall);
  if (field > (f->ieee ? eall - 1 : eall) || bits > maxfin) return sign | over;
  return sign | bits;
}

static double minifloat_decode(uint32_t bits, const struct minifloat *f) {
  const int bias = (1 << (f->ebits - 1)) - 1;
  const uint32_t eall = (1u << f->ebits) - 1;
  const uint32_t mall = (1u << f->mbits) - 1;
  uint32_t field = (bits >> f->mbits) & eall;
  uint32_t frac = bits & mall;
  double v;

  if (f->ieee && field == eall)
    v = frac ? NAN : INFINITY;
  else if (!f->ieee && field == eall && frac == mall)
    v = NAN;
  else if (field == 0)
    v = ldexp((double)frac, 1 - bias - f->mbits);
  else
    v = ldexp((double)(frac | (mall + 1)), (int)field - bias - f->mbits);
  return (bits >> (f->ebits + f->mbits)) & 1 ? -v : v;
}

/* ---- Element access ------------------------------------------------------- */

/* Integers wrap like the unsigned arithmetic a reduction kernel does. */
static uint64_t wrap(double x) {
  return x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
}

void bench_type_store(ncclDataType_t t, void *buf, size_t i, double x) {
  switch (t) {
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)(uint8_t)wrap(x); break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)wrap(x); break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)(uint32_t)wrap(x); break;
    case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)wrap(x); break;
    case ncclInt64: ((int64_t *)buf)[i] = (int64_t)wrap(x); break;
    case ncclUint64: ((uint64_t *)buf)[i] = wrap(x); break;
    case ncclFloat16: ((uint16_t *)buf)[i] = (uint16_t)minifloat_encode(x, &fmt_half); break;
    case ncclFloat32: ((float *)buf)[i] = (float)x; break;
    case ncclFloat64: ((double *)buf)[i] = x; break;
    case ncclBfloat16: ((uint16_t *)buf)[i] = (uint16_t)minifloat_encode(x, &fmt_bf16); break;
    case ncclFloat8e4m3: ((uint8_t *)buf)[i] = (uint8_t)minifloat_encode(x, &fmt_e4m3); break;
    case ncclFloat8e5m2: ((uint8_t *)buf)[i] = (uint8_t)minifloat_encode(x, &fmt_e5m2); break;
    default: break;
  }
}

double bench_type_load(ncclDataType_t t, const void *buf, size_t i) {
  switch (t) {
    case ncclInt8: return ((const int8_t *)buf)[i];
    case ncclUint8: return ((const uint8_t *)buf)[i];
    case ncclInt32: return ((const int32_t *)buf)[i];
    case ncclUint32: return ((const uint32_t *)buf)[i];
    case ncclInt64: return (double)((const int64_t *)buf)[i];
    case ncclUint64: return (double)((const uint64_t *)buf)[i];
    case ncclFloat16: return minifloat_decode(((const uint16_t *)buf)[i], &fmt_half);
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclFloat64: return ((const double *)buf)[i];
    case ncclBfloat16: return minifloat_decode(((const uint16_t *)buf)[i], &fmt_bf16);
    case ncclFloat8e4m3: return minifloat_decode(((const uint8_t *)buf)[i], &fmt_e4m3);
    case ncclFloat8e5m2: return minifloat_decode(((const uint8_t *)buf)[i], &fmt_e5m2);
    default: return NAN;
  }
}

double bench_type_round(ncclDataType_t t, double x) {
  uint64_t cell = 0;

  bench_type_store(t, &cell, 0, x);
  return bench_type_load(t, &cell, 0);
}
