/* Test-side element codec (see elem.h). */
#include "elem.h"

#include <math.h>
#include <string.h>

const struct dtype_info dtypes[] = {
    {ncclInt8, "int8", 1, K_INT, 15, 0, 0, 0},
    {ncclUint8, "uint8", 1, K_UINT, 15, 0, 0, 0},
    {ncclInt32, "int32", 4, K_INT, 1000, 0, 0, 0},
    {ncclUint32, "uint32", 4, K_UINT, 1000, 0, 0, 0},
    {ncclInt64, "int64", 8, K_INT, 1000, 0, 0, 0},
    {ncclUint64, "uint64", 8, K_UINT, 1000, 0, 0, 0},
    {ncclFloat16, "float16", 2, K_FLOAT, 15, 5, 10, 0},
    {ncclFloat32, "float32", 4, K_FLOAT, 1000, 8, 23, 0},
    {ncclFloat64, "float64", 8, K_FLOAT, 1000, 11, 52, 0},
    {ncclBfloat16, "bfloat16", 2, K_FLOAT, 15, 8, 7, 0},
    {ncclFloat8e4m3, "float8e4m3", 1, K_FLOAT, 2, 4, 3, 1},
    {ncclFloat8e5m2, "float8e5m2", 1, K_FLOAT, 1, 5, 2, 0},
};
const int ndtypes = (int)(sizeof dtypes / sizeof dtypes[0]);

const struct dtype_info *dtype_find(ncclDataType_t t) {
  for (int i = 0; i < ndtypes; i++)
    if (dtypes[i].type == t) return &dtypes[i];
  return NULL;
}

/* ---- Small floating formats, written out here so the test does not share
 * the library's conversions. ------------------------------------------- */

static uint64_t mf_encode(double x, int ebits, int mbits, int fn) {
  uint64_t sign = signbit(x) ? (uint64_t)1 << (ebits + mbits) : 0;
  int bias = (1 << (ebits - 1)) - 1;
  int emin = 1 - bias;
  uint64_t emax_field = ((uint64_t)1 << ebits) - 1;
  double a = fabs(x);
  if (isnan(x)) return sign | (emax_field << mbits) | (((uint64_t)1 << mbits) - 1);
  if (a == 0) return sign;
  int e;
  (void)frexp(a, &e);
  e -= 1; /* a = 1.f * 2^e */
  uint64_t ef, m;
  if (e < emin) {
    m = (uint64_t)nearbyint(ldexp(a, mbits - emin));
    ef = 0;
    if (m >> mbits) {
      ef = 1;
      m = 0;
    }
  } else {
    m = (uint64_t)nearbyint(ldexp(ldexp(a, -e) - 1.0, mbits));
    if (m >> mbits) {
      m = 0;
      e++;
    }
    ef = (uint64_t)(e + bias);
  }
  if (fn && (ef > emax_field || (ef == emax_field && m == ((uint64_t)1 << mbits) - 1))) {
    ef = emax_field; /* saturate to the largest finite value */
    m = ((uint64_t)1 << mbits) - 2;
  } else if (!fn && ef >= emax_field) {
    ef = emax_field; /* infinity */
    m = 0;
  }
  return sign | (ef << mbits) | m;
}

static double mf_decode(uint64_t bits, int ebits, int mbits, int fn) {
  int bias = (1 << (ebits - 1)) - 1;
  uint64_t mmask = ((uint64_t)1 << mbits) - 1;
  uint64_t emax_field = ((uint64_t)1 << ebits) - 1;
  uint64_t m = bits & mmask;
  uint64_t ef = (bits >> mbits) & emax_field;
  int neg = (int)((bits >> (ebits + mbits)) & 1);
  double v;
  if (fn && ef == emax_field && m == mmask) return NAN;
  if (!fn && ef == emax_field) return m ? NAN : (neg ? -INFINITY : INFINITY);
  if (ef == 0)
    v = ldexp((double)m, 1 - bias - mbits);
  else
    v = ldexp((double)(m | ((uint64_t)1 << mbits)), (int)ef - bias - mbits);
  return neg ? -v : v;
}

/* Stores x as one element of type d at p. */
void elem_store(const struct dtype_info *d, void *p, double x) {
  uint64_t u = 0;
  switch (d->kind) {
    case K_INT: u = (uint64_t)(int64_t)x; break;
    case K_UINT: u = (uint64_t)x; break;
    case K_FLOAT:
      if (d->type == ncclFloat32) {
        float f = (float)x;
        memcpy(p, &f, 4);
        return;
      }
      if (d->type == ncclFloat64) {
        memcpy(p, &x, 8);
        return;
      }
      u = mf_encode(x, d->ebits, d->mbits, d->fn);
      break;
  }
  switch (d->size) { /* little-endian hosts only, like weft */
    case 1: {
      uint8_t v = (uint8_t)u;
      memcpy(p, &v, 1);
    } break;
    case 2: {
      uint16_t v = (uint16_t)u;
      memcpy(p, &v, 2);
    } break;
    case 4: {
      uint32_t v = (uint32_t)u;
      memcpy(p, &v, 4);
    } break;
    default: memcpy(p, &u, 8);
  }
}

double elem_load(const struct dtype_info *d, const void *p) {
  uint64_t u = 0;
  switch (d->size) {
    case 1: {
      uint8_t v;
      memcpy(&v, p, 1);
      u = v;
    } break;
    case 2: {
      uint16_t v;
      memcpy(&v, p, 2);
      u = v;
    } break;
    case 4: {
      uint32_t v;
      memcpy(&v, p, 4);
      u = v;
    } break;
    default: memcpy(&u, p, 8);
  }
  switch (d->kind) {
    case K_INT:
      switch (d->size) {
        case 1: return (double)(int8_t)u;
        case 2: return (double)(int16_t)u;
        case 4: return (double)(int32_t)u;
        default: return (double)(int64_t)u;
      }
    case K_UINT: return (double)u;
    case K_FLOAT:
      if (d->type == ncclFloat32) {
        float f;
        memcpy(&f, p, 4);
        return f;
      }
      if (d->type == ncclFloat64) {
        double x;
        memcpy(&x, p, 8);
        return x;
      }
      return mf_decode(u, d->ebits, d->mbits, d->fn);
  }
  return NAN;
}

unsigned char poison_byte(const struct dtype_info *d) {
  return d->kind == K_FLOAT ? 0xff : 0x7b;
}

uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

static double combine(int op, double acc, double x) {
  switch (op) {
    case ncclProd: return acc * x;
    case ncclMax: return x > acc ? x : acc;
    case ncclMin: return x < acc ? x : acc;
    default: return acc + x;
  }
}

double elem_reduce(const struct dtype_info *d, int op, const double *xs, int n, double *tol) {
  double acc = 0, abs_sum = 0;
  for (int r = 0; r < n; r++) {
    abs_sum += fabs(xs[r]);
    acc = r == 0 ? xs[r] : combine(op, acc, xs[r]);
  }
  if (op == ncclAvg) acc = d->kind == K_FLOAT ? acc / n : trunc(acc / n);
  /* The bound: (n+1) ulps of the mean magnitude, plus n subnormals. */
  *tol = 0;
  if (op == ncclAvg && d->kind == K_FLOAT) {
    int bias = (1 << (d->ebits - 1)) - 1;
    *tol = (n + 1) * ldexp(abs_sum / n, -d->mbits) + n * ldexp(1.0, 1 - bias - d->mbits);
  }
  return acc;
}
