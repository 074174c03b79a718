/* Unit tests of src/exec/reduce.c: every datatype x op against references
 * computed in double with an independent rounding routine, the narrow
 * formats' rounding, NaN/inf/subnormal/signed-zero rules, aliasing, and
 * ncclAvg's divide, with the CPU's best loops and the portable ones. Needs
 * reduce.c, param.c and debug.c. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exec/reduce.h"
#include "suite_run.h"

/* Check's asserts talk to the runner on every call; loops over millions of
 * elements call it only on failure. */
#define EXPECT(cond, ...)                   \
  do {                                      \
    if (!(cond)) ck_abort_msg(__VA_ARGS__); \
  } while (0)

/* ---- Independent decoders and rounding ------------------------------------- */

enum fmt { FMT_F16, FMT_BF16, FMT_E4M3, FMT_E5M2 };

struct fmt_info {
  ncclDataType_t dt;
  int bytes;
  int mbits; /* explicit mantissa bits */
  int emin;  /* exponent of the smallest normal */
  double maxfinite;
  int satfinite; /* overflow gives maxfinite (fp8) instead of inf */
};

static const struct fmt_info fmts[] = {
    [FMT_F16] = {ncclFloat16, 2, 10, -14, 65504.0, 0},
    [FMT_BF16] = {ncclBfloat16, 2, 7, -126, 3.38953138925153547590470800371487866880e38, 0},
    [FMT_E4M3] = {ncclFloat8e4m3, 1, 3, -6, 448.0, 1},
    [FMT_E5M2] = {ncclFloat8e5m2, 1, 2, -14, 57344.0, 1},
};

static double decode(enum fmt f, unsigned x) {
  int neg, e, m;
  double v;
  switch (f) {
    case FMT_F16:
      neg = x >> 15, e = (x >> 10) & 31, m = x & 1023;
      if (e == 31)
        v = m ? NAN : INFINITY;
      else
        v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
      break;
    case FMT_BF16:
      neg = x >> 15, e = (x >> 7) & 255, m = x & 127;
      if (e == 255)
        v = m ? NAN : INFINITY;
      else
        v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
      break;
    case FMT_E4M3:
      neg = x >> 7, e = (x >> 3) & 15, m = x & 7;
      if ((x & 0x7f) == 0x7f)
        v = NAN;
      else
        v = e ? ldexp(8 + m, e - 10) : ldexp(m, -9);
      break;
    default:
      neg = x >> 7, e = (x >> 2) & 31, m = x & 3;
      if (e == 31)
        v = m ? NAN : INFINITY;
      else
        v = e ? ldexp(4 + m, e - 17) : ldexp(m, -16);
      break;
  }
  return neg ? -v : v;
}

/* v rounded to format f, nearest-even, as a double. */
static double ref_round(enum fmt f, double v) {
  const struct fmt_info *fi = &fmts[f];
  if (isnan(v)) return NAN;
  double a = fabs(v);
  if (isinf(a)) return fi->satfinite ? copysign(fi->maxfinite, v) : v;
  if (a == 0) return v;
  int ex;
  frexp(a, &ex);
  int e = ex - 1 < fi->emin ? fi->emin : ex - 1;
  double ulp = ldexp(1.0, e - fi->mbits);
  double q = nearbyint(a / ulp) * ulp;
  if (q > fi->maxfinite) q = fi->satfinite ? fi->maxfinite : INFINITY;
  return copysign(q, v);
}

/* fmaxf/__hmax: NaN loses to a number; +0 above -0. */
static double ref_minmax(double a, double b, int is_max) {
  if (isnan(a)) return b;
  if (isnan(b)) return a;
  if (a == b && a != 0) return a;
  if (a == b) {
    int neg = is_max ? (signbit(a) && signbit(b)) : (signbit(a) || signbit(b));
    return neg ? -0.0 : 0.0;
  }
  return (a > b) == is_max ? a : b;
}

static int same_value(double got, double want) {
  if (isnan(want)) return isnan(got);
  return got == want && signbit(got) == signbit(want);
}

static unsigned load_code(const void *p, int bytes, size_t i) {
  if (bytes == 1) return ((const uint8_t *)p)[i];
  return ((const uint16_t *)p)[i];
}

static void store_code(void *p, int bytes, size_t i, unsigned v) {
  if (bytes == 1)
    ((uint8_t *)p)[i] = (uint8_t)v;
  else
    ((uint16_t *)p)[i] = (uint16_t)v;
}

static double ref_op(double a, double b, ncclRedOp_t op) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return ref_minmax(a, b, 1);
    case ncclMin: return ref_minmax(a, b, 0);
    default: return a + b;
  }
}

/* Checks a op b for every a in codes_a against every b in codes_b. */
static void check_narrow_pairs(enum fmt f, ncclRedOp_t op, const unsigned *codes_a, size_t na,
                               const unsigned *codes_b, size_t nb) {
  const struct fmt_info *fi = &fmts[f];
  void *a = malloc(na * 2), *b = malloc(na * 2), *d = malloc(na * 2);
  for (size_t j = 0; j < nb; j++) {
    for (size_t i = 0; i < na; i++) {
      store_code(a, fi->bytes, i, codes_a[i]);
      store_code(b, fi->bytes, i, codes_b[j]);
    }
    weft_reduce_host(d, a, b, na, fi->dt, op);
    for (size_t i = 0; i < na; i++) {
      double x = decode(f, codes_a[i]), y = decode(f, codes_b[j]);
      double want = ref_round(f, ref_op(x, y, op));
      double got = decode(f, load_code(d, fi->bytes, i));
      EXPECT(same_value(got, want), "%s %s: 0x%x op 0x%x = 0x%x (%g), want %g",
             weft_dtype_name(fi->dt), weft_op_name(op), codes_a[i], codes_b[j],
             load_code(d, fi->bytes, i), got, want);
    }
  }
  free(a);
  free(b);
  free(d);
}

static unsigned *all_codes(enum fmt f, size_t *n_out) {
  size_t n = fmts[f].bytes == 1 ? 256 : 65536;
  unsigned *c = malloc(n * sizeof(*c));
  for (size_t i = 0; i < n; i++) c[i] = (unsigned)i;
  *n_out = n;
  return c;
}

/* ---- fp8: every pair, every op ------------------------------------------------ */

START_TEST(fp8_all_pairs) {
  static const enum fmt fs[] = {FMT_E4M3, FMT_E5M2};
  for (int k = 0; k < 2; k++) {
    size_t n;
    unsigned *c = all_codes(fs[k], &n);
    for (int op = 0; op < 4; op++) check_narrow_pairs(fs[k], (ncclRedOp_t)op, c, n, c, n);
    free(c);
  }
}
END_TEST

/* ---- half and bf16: every code against specials and random codes ------------- */

START_TEST(f16_bf16_sampled_pairs) {
  static const enum fmt fs[] = {FMT_F16, FMT_BF16};
  unsigned partners[64] = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00,
                           0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0x7f80, 0xff80, 0x7fc0,
                           0x1000, 0x3f80, 0x3b80, 0x7f7f, 0xff7f, 0x0080, 0x007f, 0x3c01};
  srand(12345);
  for (int i = 24; i < 64; i++) partners[i] = (unsigned)rand() & 0xffff;
  for (int k = 0; k < 2; k++) {
    size_t n;
    unsigned *c = all_codes(fs[k], &n);
    for (int op = 0; op < 4; op++) check_narrow_pairs(fs[k], (ncclRedOp_t)op, c, n, partners, 64);
    free(c);
  }
}
END_TEST

/* ---- Known values, written out ------------------------------------------------ */

static unsigned op1(ncclDataType_t dt, ncclRedOp_t op, unsigned a, unsigned b) {
  uint16_t x[1], y[1], d[1];
  uint8_t x8[1], y8[1], d8[1];
  if (weft_dtype_size(dt) == 1) {
    x8[0] = (uint8_t)a, y8[0] = (uint8_t)b;
    weft_reduce_host(d8, x8, y8, 1, dt, op);
    return d8[0];
  }
  x[0] = (uint16_t)a, y[0] = (uint16_t)b;
  weft_reduce_host(d, x, y, 1, dt, op);
  return d[0];
}

START_TEST(known_values) {
  /* half: exact, ties to even, overflow to inf, subnormals */
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x3c00, 0x1400), 0x3c01);
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x3c00, 0x1000), 0x3c00);
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x3c01, 0x1000), 0x3c02);
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x7bff, 0x4c00), 0x7c00);
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x7bff, 0x4b00), 0x7bff);
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x0001, 0x0001), 0x0002);
  ck_assert_uint_eq(op1(ncclFloat16, ncclProd, 0x0001, 0x3800), 0x0000); /* 2^-25: tie to 0 */
  ck_assert_uint_eq(op1(ncclFloat16, ncclSum, 0x7c00, 0xfc00) & 0x7e00, 0x7e00); /* NaN */
  ck_assert_uint_eq(op1(ncclFloat16, ncclMax, 0x0000, 0x8000), 0x0000);
  ck_assert_uint_eq(op1(ncclFloat16, ncclMin, 0x0000, 0x8000), 0x8000);
  ck_assert_uint_eq(op1(ncclFloat16, ncclMax, 0x7e00, 0x3c00), 0x3c00);
  /* bf16 */
  ck_assert_uint_eq(op1(ncclBfloat16, ncclSum, 0x3f80, 0x3b80), 0x3f80);
  ck_assert_uint_eq(op1(ncclBfloat16, ncclSum, 0x3f81, 0x3b80), 0x3f82);
  ck_assert_uint_eq(op1(ncclBfloat16, ncclSum, 0x7f7f, 0x7f7f), 0x7f80);
  /* e4m3: 1+1, tie to even, saturation (no inf), NaN */
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0x38, 0x38), 0x40);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0x38, 0x18), 0x38);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0x7e, 0x7e), 0x7e);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0xfe, 0xfe), 0xfe);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclProd, 0x7e, 0x7e), 0x7e);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0x01, 0x01), 0x02);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0x7f, 0x38), 0x7f);
  ck_assert_uint_eq(op1(ncclFloat8e4m3, ncclSum, 0xff, 0x38), 0x7f);
  /* e5m2: satfinite turns inf into the largest finite, as CUDA's constructor */
  ck_assert_uint_eq(op1(ncclFloat8e5m2, ncclSum, 0x7b, 0x7b), 0x7b);
  ck_assert_uint_eq(op1(ncclFloat8e5m2, ncclSum, 0x7c, 0x3c), 0x7b);
  ck_assert_uint_eq(op1(ncclFloat8e5m2, ncclSum, 0x7e, 0x3c), 0x7f);
  ck_assert_uint_eq(op1(ncclFloat8e5m2, ncclSum, 0x7c, 0xfc), 0x7f);
}
END_TEST

/* ---- NaN never becomes a number in a sum ------------------------------------- */

START_TEST(nan_survives_sum) {
  static const struct {
    ncclDataType_t dt;
    unsigned nan;
  } cases[] = {{ncclFloat16, 0x7e00},
               {ncclBfloat16, 0x7fc0},
               {ncclFloat8e4m3, 0x7f},
               {ncclFloat8e5m2, 0x7e}};
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
    int bytes = (int)weft_dtype_size(cases[k].dt);
    enum fmt f = (enum fmt)k;
    unsigned limit = bytes == 1 ? 256u : 65536u;
    for (unsigned x = 0; x < limit; x++)
      for (int op = 0; op < 5; op += (op == 1 ? 3 : 1)) { /* sum, prod, avg */
        unsigned r = op1(cases[k].dt, (ncclRedOp_t)op, cases[k].nan, x);
        EXPECT(isnan(decode(f, r)), "%s NaN + 0x%x gave 0x%x", weft_dtype_name(cases[k].dt), x, r);
      }
  }
  float fa[3] = {NAN, 1.0f, INFINITY}, fb[3] = {2.0f, NAN, -INFINITY}, fd[3];
  weft_reduce_host(fd, fa, fb, 3, ncclFloat32, ncclSum);
  for (int i = 0; i < 3; i++) ck_assert(isnan(fd[i]));
  double da[2] = {NAN, 1.0}, db[2] = {3.0, NAN}, dd[2];
  weft_reduce_host(dd, da, db, 2, ncclFloat64, ncclProd);
  ck_assert(isnan(dd[0]) && isnan(dd[1]));
}
END_TEST

/* ---- float and double ------------------------------------------------------- */

START_TEST(float_double_ops) {
  enum { N = 1031 };
  static float a[N], b[N], d[N];
  static double da[N], db[N], dd[N];
  srand(7);
  for (int i = 0; i < N; i++) {
    a[i] = (float)(rand() - RAND_MAX / 2) / 1000.0f;
    b[i] = (float)(rand() - RAND_MAX / 2) / 1000.0f;
    da[i] = a[i] * 1.25, db[i] = b[i] * 0.75;
  }
  a[0] = NAN, b[1] = NAN, a[2] = 0.0f, b[2] = -0.0f, a[3] = -0.0f, b[3] = 0.0f;
  a[4] = NAN, b[4] = NAN, a[5] = INFINITY, b[5] = 3.0f;
  da[0] = NAN, db[1] = NAN, da[2] = 0.0, db[2] = -0.0, da[3] = -0.0, db[3] = 0.0;
  for (int op = 0; op < 5; op++) {
    weft_reduce_host(d, a, b, N, ncclFloat32, (ncclRedOp_t)op);
    weft_reduce_host(dd, da, db, N, ncclFloat64, (ncclRedOp_t)op);
    for (int i = 0; i < N; i++) {
      double want = op == ncclProd  ? (double)(a[i] * b[i])
                    : op == ncclMax ? ref_minmax(a[i], b[i], 1)
                    : op == ncclMin ? ref_minmax(a[i], b[i], 0)
                                    : (double)(a[i] + b[i]);
      EXPECT(same_value(d[i], want), "float op %d at %d: %g, want %g", op, i, d[i], want);
      double dwant = op == ncclProd  ? da[i] * db[i]
                     : op == ncclMax ? ref_minmax(da[i], db[i], 1)
                     : op == ncclMin ? ref_minmax(da[i], db[i], 0)
                                     : da[i] + db[i];
      EXPECT(same_value(dd[i], dwant), "double op %d at %d", op, i);
    }
  }
}
END_TEST

/* ---- Integers: wrap, signedness, every width ---------------------------------- */

static int64_t sext(uint64_t v, int bytes) {
  int sh = 64 - 8 * bytes;
  return (int64_t)(v << sh) >> sh;
}

START_TEST(integer_ops) {
  static const struct {
    ncclDataType_t dt;
    int is_signed;
  } types[] = {{ncclInt8, 1},   {ncclUint8, 0}, {ncclInt32, 1},
               {ncclUint32, 0}, {ncclInt64, 1}, {ncclUint64, 0}};
  enum { N = 1000 };
  static uint8_t a[N * 8], b[N * 8], d[N * 8];
  srand(99);
  for (size_t t = 0; t < 6; t++) {
    int bytes = (int)weft_dtype_size(types[t].dt);
    for (size_t i = 0; i < sizeof(a); i++) a[i] = (uint8_t)rand(), b[i] = (uint8_t)rand();
    memset(a, 0x7f, (size_t)bytes); /* the top positive value: sums must wrap */
    for (int op = 0; op < 4; op++) {
      weft_reduce_host(d, a, b, N, types[t].dt, (ncclRedOp_t)op);
      uint64_t mask = bytes == 8 ? ~0ull : (1ull << (8 * bytes)) - 1;
      for (int i = 0; i < N; i++) {
        uint64_t x = 0, y = 0, z = 0;
        memcpy(&x, a + i * bytes, (size_t)bytes);
        memcpy(&y, b + i * bytes, (size_t)bytes);
        memcpy(&z, d + i * bytes, (size_t)bytes);
        uint64_t want;
        int less = types[t].is_signed ? sext(x, bytes) < sext(y, bytes) : x < y;
        switch (op) {
          case ncclSum: want = (x + y) & mask; break;
          case ncclProd: want = (x * y) & mask; break;
          case ncclMax: want = less ? y : x; break;
          default: want = less ? x : y; break;
        }
        EXPECT(z == want, "%s %s at %d", weft_dtype_name(types[t].dt),
               weft_op_name((ncclRedOp_t)op), i);
      }
    }
  }
}
END_TEST

/* ---- Aliasing and loop tails -------------------------------------------------- */

START_TEST(aliasing_and_lengths) {
  static const size_t lens[] = {0, 1, 63, 64, 65, 127, 1000};
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    size_t es = weft_dtype_size((ncclDataType_t)dt);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
      size_t n = lens[l];
      uint8_t *a = malloc(n * es + 1), *b = malloc(n * es + 1), *ref = malloc(n * es + 1);
      uint8_t *x = malloc(n * es + 1);
      for (size_t i = 0; i < n * es; i++) a[i] = (uint8_t)(i * 7 + 3), b[i] = (uint8_t)(i * 13 + 1);
      for (int op = 0; op < 5; op++) {
        weft_reduce_host(ref, a, b, n, (ncclDataType_t)dt, (ncclRedOp_t)op);
        memcpy(x, a, n * es); /* dst == a */
        weft_reduce_host(x, x, b, n, (ncclDataType_t)dt, (ncclRedOp_t)op);
        EXPECT(n == 0 || memcmp(x, ref, n * es) == 0, "dst==a %d/%d n=%zu", dt, op, n);
        memcpy(x, b, n * es); /* dst == b */
        weft_reduce_host(x, a, x, n, (ncclDataType_t)dt, (ncclRedOp_t)op);
        if (op != ncclMax && op != ncclMin) /* NaN op NaN may keep either payload */
          EXPECT(n == 0 || memcmp(x, ref, n * es) == 0, "dst==b %d/%d n=%zu", dt, op, n);
      }
      free(a), free(b), free(ref), free(x);
    }
  }
}
END_TEST

/* ---- ncclAvg's divide ---------------------------------------------------------- */

START_TEST(avg_divide) {
  /* Narrow floats: every code, several rank counts. */
  for (int f = 0; f < 4; f++) {
    size_t n;
    unsigned *c = all_codes((enum fmt)f, &n);
    void *buf = malloc(n * 2);
    for (int nr = 1; nr <= 8; nr += 3) {
      for (size_t i = 0; i < n; i++) store_code(buf, fmts[f].bytes, i, c[i]);
      weft_postop_avg_host(buf, n, fmts[f].dt, nr);
      for (size_t i = 0; i < n; i++) {
        /* One rank: the divide is skipped, the value kept as it is. */
        double want = nr == 1 ? decode((enum fmt)f, c[i])
                              : ref_round((enum fmt)f, decode((enum fmt)f, c[i]) / nr);
        double got = decode((enum fmt)f, load_code(buf, fmts[f].bytes, i));
        EXPECT(same_value(got, want), "%s 0x%x / %d", weft_dtype_name(fmts[f].dt), c[i], nr);
      }
    }
    free(buf);
    free(c);
  }
  /* Integers truncate toward zero. */
  int8_t i8[4] = {-7, 7, -128, 127};
  weft_postop_avg_host(i8, 4, ncclInt8, 2);
  ck_assert(i8[0] == -3 && i8[1] == 3 && i8[2] == -64 && i8[3] == 63);
  int64_t i64[2] = {-9, INT64_MIN};
  weft_postop_avg_host(i64, 2, ncclInt64, 4);
  ck_assert(i64[0] == -2 && i64[1] == INT64_MIN / 4);
  uint32_t u32[2] = {0xffffffffu, 5};
  weft_postop_avg_host(u32, 2, ncclUint32, 3);
  ck_assert(u32[0] == 0x55555555u && u32[1] == 1);
  float f32[2] = {1.0f, -3.0f};
  weft_postop_avg_host(f32, 2, ncclFloat32, 3);
  ck_assert(f32[0] == 1.0f / 3.0f && f32[1] == -1.0f);
  double f64[1] = {10.0};
  weft_postop_avg_host(f64, 1, ncclFloat64, 4);
  ck_assert(f64[0] == 2.5);
}
END_TEST

START_TEST(names_and_sizes) {
  static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  for (int dt = 0; dt < ncclNumTypes; dt++)
    ck_assert_uint_eq(weft_dtype_size((ncclDataType_t)dt), sizes[dt]);
  ck_assert_uint_eq(weft_dtype_size((ncclDataType_t)ncclNumTypes), 0);
  ck_assert_str_eq(weft_dtype_name(ncclFloat8e4m3), "ncclFloat8e4m3");
  ck_assert_str_eq(weft_op_name(ncclAvg), "ncclAvg");
}
END_TEST

/* The portable loops, where the CPU would otherwise get AVX2/F16C ones.
 * weft reads WEFT_REDUCE_SIMD once per process, so this relies on Check
 * running each test in a fresh child (its default; CK_FORK=no runs the
 * default loops twice). */
static void portable_setup(void) {
  setenv("WEFT_REDUCE_SIMD", "0", 1);
}

static void add_tests(TCase *tc) {
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, names_and_sizes);
  tcase_add_test(tc, known_values);
  tcase_add_test(tc, fp8_all_pairs);
  tcase_add_test(tc, f16_bf16_sampled_pairs);
  tcase_add_test(tc, nan_survives_sum);
  tcase_add_test(tc, float_double_ops);
  tcase_add_test(tc, integer_ops);
  tcase_add_test(tc, aliasing_and_lengths);
  tcase_add_test(tc, avg_divide);
}

static Suite *reduce_suite(void) {
  Suite *s = suite_create("reduce");
  TCase *tc = tcase_create("best");
  add_tests(tc);
  suite_add_tcase(s, tc);
  TCase *portable = tcase_create("portable");
  tcase_add_checked_fixture(portable, portable_setup, NULL);
  add_tests(portable);
  suite_add_tcase(s, portable);
  return s;
}

int main(void) {
  return suite_run(reduce_suite());
}
