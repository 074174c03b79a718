/* Element-wise reductions on host memory: every ncclDataType_t x every
 * built-in ncclRedOp_t, and the divide that finishes ncclAvg.
 *
 * The numbers match what NCCL's kernels produce:
 * - Integer sum and product wrap (computed in unsigned arithmetic); avg
 *   divides the wrapped sum with C's truncating division, as NCCL does.
 * - half, bfloat16 and fp8 are widened to float, combined, and rounded back
 *   to nearest-even. One float rounding followed by one narrow rounding is
 *   the same as a single correct rounding here (float has more than twice
 *   the narrow formats' precision plus two bits), so the results equal
 *   CUDA's __hadd/__hmul and NCCL's fp8 path bit for bit.
 * - fp8 is narrowed with CUDA's __NV_SATFINITE rule, the one the
 *   __nv_fp8_e4m3/__nv_fp8_e5m2 constructors use in NCCL: magnitudes past
 *   the largest finite value (inf included, even for e5m2) become that
 *   value; NaN stays NaN (0x7f). e4m3 is OCP's "fn" variant: no inf, 448 max.
 * - max and min follow CUDA's fmaxf/__hmax, which NCCL calls: a NaN operand
 *   loses to a number (only NaN op NaN gives NaN) and +0 is above -0. Sum
 *   and product propagate NaN as IEEE arithmetic does.
 * - avg on floating types divides by nranks (x / n, rounded once), which is
 *   closer to the exact mean than multiplying by a rounded 1/n.
 *
 * Speed: the dtype x op choice is made once per call; each pair has its own
 * branch-free loop over restrict pointers that GCC vectorizes at -O3, with
 * two-operand variants for the in-place case (dst == a or dst == b) so the
 * restrict promise stays true. The narrow-format conversions are integer
 * and float bit tricks without tables, and none relies on float subnormals,
 * so they stay exact when a caller has set flush-to-zero/denormals-are-zero. */
#include "exec/reduce.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "base/param.h"

/* ---- Bit casts ---------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

static inline uint64_t f64_bits(double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof(u));
  return u;
}

static inline double f64_from(uint64_t u) {
  double d;
  memcpy(&d, &u, sizeof(d));
  return d;
}

/* ---- Narrow formats to float (exact) ------------------------------------ */

/* Chooses x where mask is all ones, y where it is zero: a select the
 * compiler keeps branch-free, so float work is never made conditional (that
 * would stop vectorization under -ftrapping-math). */
static inline uint32_t sel32(uint32_t mask, uint32_t x, uint32_t y) {
  return (x & mask) | (y & ~mask);
}

static inline uint32_t mask32(int cond) {
  return (uint32_t)0 - (uint32_t)(cond != 0);
}

static inline float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t em = h & 0x7fffu;
  /* Normal numbers: rebias the exponent by 127-15; inf/NaN (exponent 31)
   * need the float exponent 255, i.e. the same shift once more. */
  uint32_t bits = (em << 13) + 0x38000000u + (mask32(em >= 0x7c00u) & 0x38000000u);
  /* Subnormals: m * 2^-24 is a normal float, computed without denormals. */
  float sub = (float)(int32_t)em * 0x1p-24f;
  return f32_from(sel32(mask32(em < 0x400u), f32_bits(sub), bits) | sign);
}

static inline float bf16_to_float(uint16_t b) {
  return f32_from((uint32_t)b << 16);
}

static inline float e4m3_to_float(uint8_t x) {
  uint32_t sign = (uint32_t)(x & 0x80u) << 24;
  uint32_t em = x & 0x7fu;
  uint32_t bits = (em << 20) + (120u << 23); /* rebias 7 -> 127 */
  float sub = (float)(int32_t)em * 0x1p-9f;  /* subnormal: m/8 * 2^-6 */
  uint32_t mag = sel32(mask32(em < 8u), f32_bits(sub), bits);
  mag = sel32(mask32(em == 0x7fu), 0x7fc00000u, mag); /* S.1111.111 is NaN; no inf */
  return f32_from(mag | sign);
}

/* e5m2 is the top byte of an IEEE half. */
static inline float e5m2_to_float(uint8_t x) {
  return half_to_float((uint16_t)(x << 8));
}

/* ---- float to narrow formats, round to nearest even ---------------------- */

/* Adding a power of two big enough that the float grid at its magnitude is
 * the half grid at the input's magnitude lets the FPU do the rounding; the
 * result's low bits are then the half encoding. 2^112 * 2^-110 scales by 4
 * while turning anything at or past 2^16 into inf. */
static inline uint16_t float_to_half(float f) {
  uint32_t w = f32_bits(f);
  uint32_t shl1 = w + w;
  uint32_t sign = w & 0x80000000u;
  float base = (f32_from(w & 0x7fffffffu) * 0x1p112f) * 0x1p-110f;
  uint32_t bias = shl1 & 0xff000000u;
  bias = sel32(mask32(bias < 0x71000000u), 0x71000000u, bias); /* subnormals: 2^-14's grid */
  base = f32_from((bias >> 1) + 0x07800000u) + base;
  uint32_t bits = f32_bits(base);
  uint32_t nonsign = ((bits >> 13) & 0x7c00u) + (bits & 0x0fffu);
  uint32_t out = sel32(mask32(shl1 > 0xff000000u), 0x7e00u, nonsign); /* NaN -> quiet NaN */
  return (uint16_t)((sign >> 16) | out);
}

static inline uint16_t float_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  uint32_t nan = (u >> 16) | 0x40u; /* keep the payload's top, force quiet */
  return (uint16_t)sel32(mask32((u & 0x7fffffffu) > 0x7f800000u), nan, rounded);
}

/* Narrows |f| to an fp8 code with `mbits` mantissa bits and minimum normal
 * exponent `emin`, saturating to `maxcode` past `maxval` (satfinite). The
 * same trick as float_to_half: magic = 2^(e + 23 - mbits) puts the float's
 * last place where the fp8 last place is. */
static inline uint8_t float_to_fp8(float f, int mbits, int emin, uint32_t maxcode, float maxval) {
  uint32_t u = f32_bits(f);
  uint32_t a = u & 0x7fffffffu;
  uint32_t sign = (u >> 24) & 0x80u;
  int32_t e = (int32_t)(a >> 23) - 127;
  e = e < emin ? emin : e;
  e = e > 16 ? 16 : e; /* anything this large saturates below */
  float magic = f32_from((uint32_t)(e + 127 + 23 - mbits) << 23);
  uint32_t count = f32_bits(f32_from(a) + magic) & 0x7fffffu;
  uint32_t code = ((uint32_t)(e - emin) << mbits) + count;
  code = sel32(mask32(a > f32_bits(maxval)), maxcode, code) | sign;
  return (uint8_t)sel32(mask32(a > 0x7f800000u), 0x7fu, code);
}

static inline uint8_t float_to_e4m3(float f) {
  return float_to_fp8(f, 3, -6, 0x7eu, 448.0f);
}
static inline uint8_t float_to_e5m2(float f) {
  return float_to_fp8(f, 2, -14, 0x7bu, 57344.0f);
}

/* ---- max/min with CUDA's NaN and signed-zero rules ----------------------- */

/* Floating max/min work on the encodings: flipping the magnitude bits of
 * negative values makes a two's-complement key that orders like the numbers
 * and puts -0 just below +0, as __hmax/fmaxf do. A NaN operand loses to a
 * number; NaN op NaN gives NaN. Integer compares keep the loop branch-free
 * (float compares may trap, which stops vectorization). */
#define DEF_FLOAT_MINMAX(sfx, T, S, U, ABS_MASK, INF_BITS)              \
  static inline U minmax_key_##sfx(U x) {                               \
    S s = (S)x;                                                         \
    return (U)(s ^ (S)((U)(s >> (8 * sizeof(S) - 1)) & (U)(ABS_MASK))); \
  }                                                                     \
  static inline U minmax_##sfx(U a, U b, int is_max) {                  \
    U nan_a = (U)0 - (U)((U)(a & (U)(ABS_MASK)) > (U)(INF_BITS));       \
    U nan_b = (U)0 - (U)((U)(b & (U)(ABS_MASK)) > (U)(INF_BITS));       \
    S ka = (S)minmax_key_##sfx(a), kb = (S)minmax_key_##sfx(b);         \
    U a_wins = (U)0 - (U)(is_max ? ka > kb : ka < kb);                  \
    a_wins = (U)((a_wins | nan_b) & ~(nan_a & ~nan_b));                 \
    return (U)((a & a_wins) | (b & ~a_wins));                           \
  }

DEF_FLOAT_MINMAX(f32, float, int32_t, uint32_t, 0x7fffffffu, 0x7f800000u)
DEF_FLOAT_MINMAX(f64, double, int64_t, uint64_t, 0x7fffffffffffffffull, 0x7ff0000000000000ull)
DEF_FLOAT_MINMAX(f16, uint16_t, int16_t, uint16_t, 0x7fffu, 0x7c00u)
DEF_FLOAT_MINMAX(bf16, uint16_t, int16_t, uint16_t, 0x7fffu, 0x7f80u)
/* e4m3 has no inf: 0x7f is its only NaN magnitude, so "above 0x7e". */
DEF_FLOAT_MINMAX(e4m3, uint8_t, int8_t, uint8_t, 0x7fu, 0x7eu)
DEF_FLOAT_MINMAX(e5m2, uint8_t, int8_t, uint8_t, 0x7fu, 0x7cu)

static inline float max_f32(float a, float b) {
  return f32_from(minmax_f32(f32_bits(a), f32_bits(b), 1));
}
static inline float min_f32(float a, float b) {
  return f32_from(minmax_f32(f32_bits(a), f32_bits(b), 0));
}
static inline double max_f64(double a, double b) {
  return f64_from(minmax_f64(f64_bits(a), f64_bits(b), 1));
}
static inline double min_f64(double a, double b) {
  return f64_from(minmax_f64(f64_bits(a), f64_bits(b), 0));
}

/* ---- Element operations --------------------------------------------------- */

#define INT_OPS(sfx, T, U)               \
  static inline T sum_##sfx(T a, T b) {  \
    return (T)((U)a + (U)b);             \
  }                                      \
  static inline T prod_##sfx(T a, T b) { \
    return (T)((U)((U)a * (U)b));        \
  }                                      \
  static inline T max_##sfx(T a, T b) {  \
    return a > b ? a : b;                \
  }                                      \
  static inline T min_##sfx(T a, T b) {  \
    return a < b ? a : b;                \
  }

/* uint8 products go through unsigned int so the promotion cannot overflow int. */
INT_OPS(i8, int8_t, unsigned int)
INT_OPS(u8, uint8_t, unsigned int)
INT_OPS(i32, int32_t, uint32_t)
INT_OPS(u32, uint32_t, uint32_t)
INT_OPS(i64, int64_t, uint64_t)
INT_OPS(u64, uint64_t, uint64_t)

static inline float sum_f32(float a, float b) {
  return a + b;
}
static inline float prod_f32(float a, float b) {
  return a * b;
}
static inline double sum_f64(double a, double b) {
  return a + b;
}
static inline double prod_f64(double a, double b) {
  return a * b;
}

/* Narrow floats: widen, combine, round back. max/min select an operand. */
#define NARROW_OPS(sfx, T, TO_F, FROM_F, SAT) \
  static inline T sum_##sfx(T a, T b) {       \
    return FROM_F(TO_F(a) + TO_F(b));         \
  }                                           \
  static inline T prod_##sfx(T a, T b) {      \
    return FROM_F(TO_F(a) * TO_F(b));         \
  }                                           \
  static inline T max_##sfx(T a, T b) {       \
    return SAT(minmax_##sfx(a, b, 1));        \
  }                                           \
  static inline T min_##sfx(T a, T b) {       \
    return SAT(minmax_##sfx(a, b, 0));        \
  }

/* NCCL's e5m2 max/min goes through __nv_fp8_e5m2's satfinite constructor,
 * so an inf operand that wins comes out as the largest finite value. */
static inline uint8_t e5m2_satfinite(uint8_t x) {
  return (uint8_t)sel32(mask32((x & 0x7fu) == 0x7cu), (x & 0x80u) | 0x7bu, x);
}
#define SAT_NONE(x) (x)

NARROW_OPS(f16, uint16_t, half_to_float, float_to_half, SAT_NONE)
NARROW_OPS(bf16, uint16_t, bf16_to_float, float_to_bf16, SAT_NONE)
NARROW_OPS(e4m3, uint8_t, e4m3_to_float, float_to_e4m3, SAT_NONE)
NARROW_OPS(e5m2, uint8_t, e5m2_to_float, float_to_e5m2, e5m2_satfinite)

/* ---- Loops ------------------------------------------------------------------ */

typedef void (*reduce3_fn)(void *dst, const void *a, const void *b, size_t n);
typedef void (*reduce2_fn)(void *dst, const void *b, size_t n);

/* dst = a op b over disjoint arrays, and dst = dst op b. The inner loops
 * have a fixed trip count so that GCC vectorizes them even at -O2 (whose
 * "very cheap" cost model refuses loops that need a scalar epilogue);
 * restrict sits on parameters, where GCC trusts it without versioning. */
#define REDUCE_BLOCK 64

/* ATTR compiles a variant for an instruction set; V names it. */
#define DEF_LOOPS(op, sfx, T, V, ATTR)                                                            \
  ATTR static void op##_##sfx##_##V##_3t(T *restrict d, const T *restrict x, const T *restrict y, \
                                         size_t n) {                                              \
    size_t i = 0;                                                                                 \
    for (; i + REDUCE_BLOCK <= n; i += REDUCE_BLOCK)                                              \
      for (size_t j = 0; j < REDUCE_BLOCK; j++) d[i + j] = op##_##sfx(x[i + j], y[i + j]);        \
    for (; i < n; i++) d[i] = op##_##sfx(x[i], y[i]);                                             \
  }                                                                                               \
  ATTR static void op##_##sfx##_##V##_2t(T *restrict d, const T *restrict y, size_t n) {          \
    size_t i = 0;                                                                                 \
    for (; i + REDUCE_BLOCK <= n; i += REDUCE_BLOCK)                                              \
      for (size_t j = 0; j < REDUCE_BLOCK; j++) d[i + j] = op##_##sfx(d[i + j], y[i + j]);        \
    for (; i < n; i++) d[i] = op##_##sfx(d[i], y[i]);                                             \
  }                                                                                               \
  ATTR static void op##_##sfx##_##V##_3(void *dst, const void *a, const void *b, size_t n) {      \
    op##_##sfx##_##V##_3t(dst, a, b, n);                                                          \
  }                                                                                               \
  ATTR static void op##_##sfx##_##V##_2(void *dst, const void *b, size_t n) {                     \
    op##_##sfx##_##V##_2t(dst, b, n);                                                             \
  }

#define DEF_TYPE(sfx, T, V, ATTR)  \
  DEF_LOOPS(sum, sfx, T, V, ATTR)  \
  DEF_LOOPS(prod, sfx, T, V, ATTR) \
  DEF_LOOPS(max, sfx, T, V, ATTR)  \
  DEF_LOOPS(min, sfx, T, V, ATTR)

#define DEF_ALL_TYPES(V, ATTR)      \
  DEF_TYPE(i8, int8_t, V, ATTR)     \
  DEF_TYPE(u8, uint8_t, V, ATTR)    \
  DEF_TYPE(i32, int32_t, V, ATTR)   \
  DEF_TYPE(u32, uint32_t, V, ATTR)  \
  DEF_TYPE(i64, int64_t, V, ATTR)   \
  DEF_TYPE(u64, uint64_t, V, ATTR)  \
  DEF_TYPE(f16, uint16_t, V, ATTR)  \
  DEF_TYPE(f32, float, V, ATTR)     \
  DEF_TYPE(f64, double, V, ATTR)    \
  DEF_TYPE(bf16, uint16_t, V, ATTR) \
  DEF_TYPE(e4m3, uint8_t, V, ATTR)  \
  DEF_TYPE(e5m2, uint8_t, V, ATTR)

struct reduce_loops {
  reduce3_fn three;
  reduce2_fn two;
};

/* Rows in ncclDataType_t order; columns sum, prod, max, min, avg (= sum). */
#define ROW_OPS(sfx, V, SUM, PROD)                                                        \
  {                                                                                       \
    {SUM##_3, SUM##_2}, {PROD##_3, PROD##_2}, {max_##sfx##_##V##_3, max_##sfx##_##V##_2}, \
        {min_##sfx##_##V##_3, min_##sfx##_##V##_2}, {                                     \
      SUM##_3, SUM##_2                                                                    \
    }                                                                                     \
  }
#define ROW(sfx, V) ROW_OPS(sfx, V, sum_##sfx##_##V, prod_##sfx##_##V)

#define NO_ATTR
DEF_ALL_TYPES(gen, NO_ATTR)

static const struct reduce_loops reduce_table_gen[ncclNumTypes][ncclNumOps] = {
    ROW(i8, gen),  ROW(u8, gen),  ROW(i32, gen), ROW(u32, gen),  ROW(i64, gen),  ROW(u64, gen),
    ROW(f16, gen), ROW(f32, gen), ROW(f64, gen), ROW(bf16, gen), ROW(e4m3, gen), ROW(e5m2, gen),
};

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

/* x86-64 only guarantees SSE2; most hosts have AVX2, and F16C converts
 * halves in hardware (round-to-nearest-even, subnormals kept, whatever
 * MXCSR says). The same source compiled for AVX2 doubles the vector width;
 * half sum and product use F16C directly. Chosen once, at run time. */
#define REDUCE_HAVE_AVX2 1
#define AVX2_ATTR __attribute__((target("avx2,f16c")))
/* "unused": the table takes half sum/prod from the F16C loops instead. */
#define AVX2_LOOP_ATTR AVX2_ATTR __attribute__((unused))
DEF_ALL_TYPES(avx2, AVX2_LOOP_ATTR)

#define DEF_F16C(op, VOP)                                                                    \
  AVX2_ATTR static void op##_f16_f16c_3(void *dst, const void *a, const void *b, size_t n) { \
    uint16_t *d = dst;                                                                       \
    const uint16_t *x = a, *y = b;                                                           \
    size_t i = 0;                                                                            \
    for (; i + 8 <= n; i += 8) {                                                             \
      __m256 fx = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(x + i)));  \
      __m256 fy = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(y + i)));  \
      _mm_storeu_si128((__m128i *)(void *)(d + i), _mm256_cvtps_ph(VOP(fx, fy), 0));         \
    }                                                                                        \
    for (; i < n; i++) d[i] = op##_f16(x[i], y[i]);                                          \
  }                                                                                          \
  AVX2_ATTR static void op##_f16_f16c_2(void *dst, const void *b, size_t n) {                \
    op##_f16_f16c_3(dst, dst, b, n);                                                         \
  }

DEF_F16C(sum, _mm256_add_ps)
DEF_F16C(prod, _mm256_mul_ps)

static const struct reduce_loops reduce_table_avx2[ncclNumTypes][ncclNumOps] = {
    ROW(i8, avx2),
    ROW(u8, avx2),
    ROW(i32, avx2),
    ROW(u32, avx2),
    ROW(i64, avx2),
    ROW(u64, avx2),
    ROW_OPS(f16, avx2, sum_f16_f16c, prod_f16_f16c),
    ROW(f32, avx2),
    ROW(f64, avx2),
    ROW(bf16, avx2),
    ROW(e4m3, avx2),
    ROW(e5m2, avx2),
};
#endif

#ifdef REDUCE_HAVE_AVX2
#include <cpuid.h>

/* AVX2 and F16C, and the OS saving the YMM registers. Read from CPUID, since
 * not every compiler's __builtin_cpu_supports knows "f16c". */
static int cpu_has_avx2_f16c(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int f16c = (c >> 29) & 1, osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
  if (!f16c || !osxsave || !avx) return 0;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 0x6) != 0x6) return 0; /* XMM and YMM state enabled */
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  return (b >> 5) & 1; /* AVX2 */
}
#endif

/* The table for this CPU; WEFT_REDUCE_SIMD=0 keeps the portable loops. */
static const struct reduce_loops *reduce_pick_table(void) {
  static const struct reduce_loops *_Atomic chosen;
  const struct reduce_loops *t = atomic_load_explicit(&chosen, memory_order_relaxed);
  if (t != NULL) return t;
  t = &reduce_table_gen[0][0];
#ifdef REDUCE_HAVE_AVX2
  if (weft_param_int(WEFT_PARAM_REDUCE_SIMD) != 0 && cpu_has_avx2_f16c())
    t = &reduce_table_avx2[0][0];
#endif
  atomic_store_explicit(&chosen, t, memory_order_relaxed);
  return t;
}

/* Every built-in op is commutative, so dst == b is dst = dst op a. Partly
 * overlapping arrays are not supported (NCCL forbids them too). */
void weft_reduce_host(void *dst, const void *a, const void *b, size_t count, ncclDataType_t dt,
                      ncclRedOp_t op) {
  if ((unsigned)dt >= ncclNumTypes || (unsigned)op >= ncclNumOps || count == 0) return;
  const struct reduce_loops *l = &reduce_pick_table()[(size_t)dt * ncclNumOps + (size_t)op];
  if (dst == a)
    l->two(dst, b, count);
  else if (dst == b)
    l->two(dst, a, count);
  else
    l->three(dst, a, b, count);
}

/* ---- ncclAvg's divide ------------------------------------------------------- */

/* The same fixed-size inner blocks as the reduce loops. */
#define DEF_DIV(sfx, T, W, TO_W, FROM_W)                                               \
  static void div_##sfx##_t(T *restrict p, size_t n, W d) {                            \
    size_t i = 0;                                                                      \
    for (; i + REDUCE_BLOCK <= n; i += REDUCE_BLOCK)                                   \
      for (size_t j = 0; j < REDUCE_BLOCK; j++) p[i + j] = FROM_W(TO_W(p[i + j]) / d); \
    for (; i < n; i++) p[i] = FROM_W(TO_W(p[i]) / d);                                  \
  }                                                                                    \
  static void div_##sfx(void *buf, size_t n, int nranks) {                             \
    div_##sfx##_t(buf, n, (W)nranks);                                                  \
  }

#define DIV_ID(x) (x)
/* Integers divide in their own type: C's division truncates toward zero. */
DEF_DIV(i8, int8_t, int, DIV_ID, (int8_t))
DEF_DIV(u8, uint8_t, unsigned, DIV_ID, (uint8_t))
DEF_DIV(i32, int32_t, int32_t, DIV_ID, DIV_ID)
DEF_DIV(u32, uint32_t, uint32_t, DIV_ID, DIV_ID)
DEF_DIV(i64, int64_t, int64_t, DIV_ID, DIV_ID)
DEF_DIV(u64, uint64_t, uint64_t, DIV_ID, DIV_ID)
DEF_DIV(f32, float, float, DIV_ID, DIV_ID)
DEF_DIV(f64, double, double, DIV_ID, DIV_ID)
DEF_DIV(f16, uint16_t, float, half_to_float, float_to_half)
DEF_DIV(bf16, uint16_t, float, bf16_to_float, float_to_bf16)
DEF_DIV(e4m3, uint8_t, float, e4m3_to_float, float_to_e4m3)
DEF_DIV(e5m2, uint8_t, float, e5m2_to_float, float_to_e5m2)

typedef void (*div_fn)(void *buf, size_t n, int nranks);

static const div_fn div_table[ncclNumTypes] = {
    div_i8,  div_u8,  div_i32, div_u32,  div_i64,  div_u64,
    div_f16, div_f32, div_f64, div_bf16, div_e4m3, div_e5m2,
};

void weft_postop_avg_host(void *buf, size_t count, ncclDataType_t dt, int nranks) {
  /* Dividing by one changes nothing, not even a NaN's payload. */
  if ((unsigned)dt >= ncclNumTypes || nranks <= 1 || count == 0) return;
  div_table[dt](buf, count, nranks);
}

/* ---- PreMulSum's scaling ----------------------------------------------------- */

/* dst = src * scalar, as NCCL's PreMulSum multiplies before it sums:
 * integers in their own type (wrapping), narrow floats through float. */
#define DEF_SCALE(sfx, T, W, TO_W, FROM_W)                                               \
  static void scale_##sfx(void *dst, const void *src, size_t n, const void *scalar) {    \
    T s;                                                                                 \
    memcpy(&s, scalar, sizeof(s));                                                       \
    W w = TO_W(s);                                                                       \
    T *d = dst;                                                                          \
    const T *a = src;                                                                    \
    for (size_t i = 0; i < n; i++) d[i] = FROM_W(TO_W(a[i]) * w);                        \
  }

#define SCALE_TO_U(x) (x)
DEF_SCALE(i8, int8_t, unsigned, (unsigned)(uint8_t), (int8_t)(uint8_t))
DEF_SCALE(u8, uint8_t, unsigned, SCALE_TO_U, (uint8_t))
DEF_SCALE(i32, int32_t, uint32_t, (uint32_t), (int32_t))
DEF_SCALE(u32, uint32_t, uint32_t, SCALE_TO_U, SCALE_TO_U)
DEF_SCALE(i64, int64_t, uint64_t, (uint64_t), (int64_t))
DEF_SCALE(u64, uint64_t, uint64_t, SCALE_TO_U, SCALE_TO_U)
DEF_SCALE(f32, float, float, DIV_ID, DIV_ID)
DEF_SCALE(f64, double, double, DIV_ID, DIV_ID)
DEF_SCALE(f16, uint16_t, float, half_to_float, float_to_half)
DEF_SCALE(bf16, uint16_t, float, bf16_to_float, float_to_bf16)
DEF_SCALE(e4m3, uint8_t, float, e4m3_to_float, float_to_e4m3)
DEF_SCALE(e5m2, uint8_t, float, e5m2_to_float, float_to_e5m2)

typedef void (*scale_fn)(void *dst, const void *src, size_t n, const void *scalar);

static const scale_fn scale_table[ncclNumTypes] = {
    scale_i8,  scale_u8,  scale_i32, scale_u32,  scale_i64,  scale_u64,
    scale_f16, scale_f32, scale_f64, scale_bf16, scale_e4m3, scale_e5m2,
};

void weft_scale_host(void *dst, const void *src, size_t count, ncclDataType_t dt,
                     const void *scalar) {
  if ((unsigned)dt >= ncclNumTypes || count == 0) return;
  scale_table[dt](dst, src, count, scalar);
}
