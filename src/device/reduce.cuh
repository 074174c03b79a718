/* Element operations of the device engine: copy, or reduce a received
 * span into a local one, for every datatype and built-in op. One runtime
 * switch on the datatype, a template loop per (type, op) so each one
 * vectorizes. The numbers are src/exec/reduce.c's, so a rank on the CUDA
 * engine and one on the host engine compute the same bits. Included by
 * the kernels' translation units only. */
#ifndef WEFT_DEVICE_REDUCE_CUH
#define WEFT_DEVICE_REDUCE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

#include "nccl.h"

enum exec_op { OP_COPY, OP_SUM, OP_PROD, OP_MAX, OP_MIN };

/* The element operation of a built-in ncclRedOp_t (checked by the caller):
 * avg sums, then divides. */
static inline int exec_op_of(ncclRedOp_t op) {
  static const int ops[] = {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_SUM};
  return ops[op];
}

template <typename T>
struct elem {
  /* Integers: sum and product wrap (unsigned arithmetic), as NCCL's do. */
  typedef typename std::make_unsigned<T>::type U;
  /* avg divides 8-bit values in int (unsigned int), as the host does, so
   * a rank count past 255 is not truncated to the element type first. */
  typedef typename std::conditional<
      (sizeof(T) < 4), typename std::conditional<std::is_signed<T>::value, int, unsigned>::type,
      T>::type W;
  static __device__ __forceinline__ T apply(int op, T a, T b) {
    switch (op) {
      case OP_SUM: return (T)(U)((U)a + (U)b);
      case OP_PROD: return (T)(U)((U)a * (U)b);
      case OP_MAX: return a > b ? a : b;
      case OP_MIN: return a < b ? a : b;
      default: return b;
    }
  }
  static __device__ __forceinline__ T div(T x, int n) { return (T)((W)x / (W)n); }
};

/* float and double: IEEE arithmetic; max and min are fmax/fmin (a NaN
 * operand loses to a number), CUDA's overloads for either width. */
template <typename F>
struct elem_ieee {
  static __device__ __forceinline__ F apply(int op, F a, F b) {
    switch (op) {
      case OP_SUM: return a + b;
      case OP_PROD: return a * b;
      case OP_MAX: return fmax(a, b);
      case OP_MIN: return fmin(a, b);
      default: return b;
    }
  }
  static __device__ __forceinline__ F div(F x, int n) { return x / (F)n; }
};

template <>
struct elem<float> : elem_ieee<float> {};
template <>
struct elem<double> : elem_ieee<double> {};

/* half and bfloat16: widened to float, combined, rounded back once. */
template <>
struct elem<__half> {
  static __device__ __forceinline__ __half apply(int op, __half a, __half b) {
    return op == OP_COPY
               ? b
               : __float2half_rn(elem<float>::apply(op, __half2float(a), __half2float(b)));
  }
  static __device__ __forceinline__ __half div(__half x, int n) {
    return __float2half_rn(__half2float(x) / (float)n);
  }
};

template <>
struct elem<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 apply(int op, __nv_bfloat16 a, __nv_bfloat16 b) {
    return op == OP_COPY ? b
                         : __float2bfloat16_rn(
                               elem<float>::apply(op, __bfloat162float(a), __bfloat162float(b)));
  }
  static __device__ __forceinline__ __nv_bfloat16 div(__nv_bfloat16 x, int n) {
    return __float2bfloat16_rn(__bfloat162float(x) / (float)n);
  }
};

/* fp8 max and min select an operand by its encoding, as src/exec/reduce.c
 * does: flipping the magnitude bits of negative codes gives keys that order
 * like the numbers with -0 just below +0; a NaN operand loses to a number
 * and NaN op NaN gives a (the local operand). Codes whose magnitude is
 * above nan_above are NaN (e4m3: 0x7f only; e5m2: 0x7d..0x7f). e5m2's
 * winner then goes through the satfinite rule NCCL's conversion applies,
 * so an inf that wins comes out as the largest finite value. */
__device__ __forceinline__ int fp8_key(uint8_t x) {
  int s = (int)(int8_t)x;
  return s < 0 ? s ^ 0x7f : s;
}

template <unsigned NAN_ABOVE, bool SAT_INF>
__device__ __forceinline__ uint8_t fp8_minmax(uint8_t a, uint8_t b, bool is_max) {
  bool nan_a = (a & 0x7fu) > NAN_ABOVE, nan_b = (b & 0x7fu) > NAN_ABOVE;
  int ka = fp8_key(a), kb = fp8_key(b);
  bool a_wins = (is_max ? ka > kb : ka < kb) || nan_b;
  if (nan_a && !nan_b) a_wins = false;
  uint8_t r = a_wins ? a : b;
  if (SAT_INF && (r & 0x7fu) == 0x7cu) r = (uint8_t)((r & 0x80u) | 0x7bu);
  return r;
}

/* fp8 (CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2): widened to float exactly,
 * combined, and narrowed once by the types' float constructors, which round
 * to nearest even with __NV_SATFINITE (past the largest finite value, inf
 * included, gives that value; NaN gives the canonical NaN 0x7f). That is
 * the host engine's float_to_e4m3/e5m2, so the bits agree. */
template <typename F8, unsigned NAN_ABOVE, bool SAT_INF>
struct elem_fp8 {
  static __device__ __forceinline__ F8 code(uint8_t c) {
    F8 r;
    r.__x = c;
    return r;
  }
  static __device__ __forceinline__ F8 apply(int op, F8 a, F8 b) {
    switch (op) {
      case OP_SUM: return F8(float(a) + float(b));
      case OP_PROD: return F8(float(a) * float(b));
      case OP_MAX: return code(fp8_minmax<NAN_ABOVE, SAT_INF>(a.__x, b.__x, true));
      case OP_MIN: return code(fp8_minmax<NAN_ABOVE, SAT_INF>(a.__x, b.__x, false));
      default: return b;
    }
  }
  static __device__ __forceinline__ F8 div(F8 x, int n) { return F8(float(x) / (float)n); }
};

template <>
struct elem<__nv_fp8_e4m3> : elem_fp8<__nv_fp8_e4m3, 0x7eu, false> {};
template <>
struct elem<__nv_fp8_e5m2> : elem_fp8<__nv_fp8_e5m2, 0x7cu, true> {};

/* One element read through L2 (a FIFO slot's element: never a stale L1
 * line), for every element type: __ldcg takes integers of its size. */
template <typename T>
__device__ __forceinline__ T ldcg_elem(const T *p) {
  using W = typename std::conditional<
      sizeof(T) == 1, unsigned char,
      typename std::conditional<sizeof(T) == 2, unsigned short,
                                typename std::conditional<sizeof(T) == 4, unsigned int,
                                                          unsigned long long>::type>::type>::type;
  W w = __ldcg((const W *)p);
  T v;
  memcpy(&v, &w, sizeof(T));
  return v;
}

/* dst = a op b over bytes (b alone for OP_COPY), then / div when DIV.
 * b may be a FIFO slot: read through L2 (__ldcg), never a stale L1 line.
 * 16-byte vectors when all three pointers allow, U in flight per thread. */
template <typename T, int OP, int U, bool DIV>
__device__ __forceinline__ void span_loop(char *dst, const char *a, const char *b, size_t bytes,
                                          int div, int t, int nt) {
  const size_t ne = bytes / sizeof(T);
  size_t done = 0;
  if ((((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) & 15) == 0) {
    const int V = 16 / sizeof(T);
    const size_t nv = bytes / 16;
    uint4 *d4 = (uint4 *)dst;
    const uint4 *a4 = (const uint4 *)a, *b4 = (const uint4 *)b;
    size_t i = (size_t)t;
    for (; i + (size_t)(U - 1) * nt < nv; i += (size_t)U * nt) {
      uint4 vb[U], va[U];
#pragma unroll
      for (int u = 0; u < U; u++) vb[u] = __ldcg(b4 + i + (size_t)u * nt);
      if (OP != OP_COPY) {
#pragma unroll
        for (int u = 0; u < U; u++) va[u] = a4[i + (size_t)u * nt];
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (OP != OP_COPY || DIV) {
          T *x = (T *)&vb[u];
          const T *y = (const T *)&va[u];
#pragma unroll
          for (int k = 0; k < V; k++) {
            T r = OP == OP_COPY ? x[k] : elem<T>::apply(OP, y[k], x[k]);
            x[k] = DIV ? elem<T>::div(r, div) : r;
          }
        }
        d4[i + (size_t)u * nt] = vb[u];
      }
    }
    /* With U == 1 the loop above left nothing. */
    for (; U > 1 && i < nv; i += nt) {
      uint4 vb = __ldcg(b4 + i), va = OP != OP_COPY ? a4[i] : vb;
      T *x = (T *)&vb;
      const T *y = (const T *)&va;
#pragma unroll
      for (int k = 0; k < V; k++) {
        T r = OP == OP_COPY ? x[k] : elem<T>::apply(OP, y[k], x[k]);
        x[k] = DIV ? elem<T>::div(r, div) : r;
      }
      d4[i] = vb;
    }
    done = nv * V;
  }
  /* Element by element (the rest after the vectors, or every element
   * where some pointer is not 16-byte aligned), U in flight per thread for
   * a reduction (a copy that is not 16-byte aligned goes to
   * copy_misaligned, and one unrolled here would crowd the kernel that
   * inlines copy_bytes). */
  T *d = (T *)dst;
  const T *pa = (const T *)a, *pb = (const T *)b;
  size_t i = done + t;
  for (; OP != OP_COPY && U > 1 && i + (size_t)(U - 1) * nt < ne; i += (size_t)U * nt) {
    T vb[U], va[U];
#pragma unroll
    for (int u = 0; u < U; u++) vb[u] = ldcg_elem(pb + i + (size_t)u * nt);
#pragma unroll
    for (int u = 0; u < U; u++) va[u] = pa[i + (size_t)u * nt];
#pragma unroll
    for (int u = 0; u < U; u++) {
      T r = elem<T>::apply(OP, va[u], vb[u]);
      d[i + (size_t)u * nt] = DIV ? elem<T>::div(r, div) : r;
    }
  }
  for (; i < ne; i += nt) {
    T x = ldcg_elem(pb + i), r = OP == OP_COPY ? x : elem<T>::apply(OP, pa[i], x);
    d[i] = DIV ? elem<T>::div(r, div) : r;
  }
}

/* span_loop for one op, 4 vectors in flight (a copy holds no second
 * operand: 8), with the divide a separate instantiation rather than a
 * test inside the unrolled loop: an unrolled divide is the bulk of the
 * code ptxas compiles (an IEEE or integer divide per element, 64 per
 * iteration for 1-byte types). Only avg divides, and avg sums, so prod,
 * max and min have no divide to instantiate (div is 0 for them). A copy
 * divides only where one rank runs avg alone (the schedules' LOCAL copy
 * with POSTOP when nranks is 1), so that loop is not unrolled. */
template <typename T, int OP>
__device__ void span(char *dst, const char *a, const char *b, size_t bytes, int div, int t,
                     int nt) {
  const int U = OP == OP_COPY ? 8 : 4;
  if constexpr (OP == OP_SUM || OP == OP_COPY) {
    if (div) {
      span_loop<T, OP, OP == OP_COPY ? 1 : U, true>(dst, a, b, bytes, div, t, nt);
      return;
    }
  }
  span_loop<T, OP, U, false>(dst, a, b, bytes, 0, t, nt);
}

/* n words of W from src to dst (both W-aligned), 8 in flight per thread:
 * a copy whose ends differ in alignment cannot take 16-byte vectors, and
 * one word in flight per thread left it several times slower, most of all
 * from a FIFO in pinned host memory. */
template <typename W>
__device__ __forceinline__ void copy_words(W *dst, const W *src, size_t n, int t, int nt) {
  constexpr int U = 8;
  size_t i = (size_t)t;
  for (; i + (size_t)(U - 1) * nt < n; i += (size_t)U * nt) {
    W v[U];
#pragma unroll
    for (int u = 0; u < U; u++) v[u] = __ldcg(src + i + (size_t)u * nt);
#pragma unroll
    for (int u = 0; u < U; u++) dst[i + (size_t)u * nt] = v[u];
  }
  for (; i < n; i += nt) dst[i] = __ldcg(src + i);
}

/* A copy whose ends differ in alignment mod 16: the widest word both
 * share their alignment mod (8, 4, 2 bytes, else 1), with the bytes before
 * the first aligned word and after the last one by one. Called, not
 * inlined: its loops would crowd the plan kernel's registers. */
static __device__ __noinline__ void copy_misaligned(char *dst, const char *src, size_t bytes, int t,
                                             int nt) {
  const uintptr_t d = (uintptr_t)dst, diff = d ^ (uintptr_t)src;
  const size_t w = (diff & 7) == 0 ? 8 : (diff & 3) == 0 ? 4 : (diff & 1) == 0 ? 2 : 1;
  size_t head = (w - (d & (w - 1))) & (w - 1);
  if (head > bytes) head = bytes;
  if (t < (int)head) dst[t] = __ldcg(src + t);
  const size_t body = (bytes - head) & ~(w - 1);
  char *bd = dst + head;
  const char *bs = src + head;
  switch (w) {
    case 8:
      copy_words((unsigned long long *)bd, (const unsigned long long *)bs, body / 8, t, nt);
      break;
    case 4: copy_words((uint32_t *)bd, (const uint32_t *)bs, body / 4, t, nt); break;
    case 2: copy_words((uint16_t *)bd, (const uint16_t *)bs, body / 2, t, nt); break;
    default: copy_words((uint8_t *)bd, (const uint8_t *)bs, body, t, nt); break;
  }
  size_t tail = bytes - head - body, at = bytes - tail;
  if (t < (int)tail) dst[at + t] = __ldcg(src + at + t);
}

/* Byte copies (sends, copies without a divide) need no element type:
 * 16-byte vectors where both ends share their alignment mod 16. */
__device__ inline void copy_bytes(char *dst, const char *src, size_t bytes, int t, int nt) {
  if (((uintptr_t)dst & 15) == ((uintptr_t)src & 15)) {
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > bytes) head = bytes;
    if (t < (int)head) dst[t] = __ldcg(src + t);
    span<uint32_t, OP_COPY>(dst + head, NULL, src + head, (bytes - head) & ~(size_t)15, 0, t, nt);
    size_t tail = (bytes - head) & 15, at = bytes - tail;
    if (t < (int)tail) dst[at + t] = __ldcg(src + at + t);
    return;
  }
  copy_misaligned(dst, src, bytes, t, nt);
}

/* One datatype's reduction, called rather than inlined: a kernel calls
 * it from three places (a LOCAL copy with a divide, a receive, a POSTOP),
 * and ptxas's time grows faster than linearly with the size of the
 * function it allocates registers for, so twelve called functions compile
 * many times faster than the same code inlined three times over. A call
 * costs a few instructions per slot, against the slot's loop. */
template <typename T>
__device__ __noinline__ void span_op(int op, char *dst, const char *a, const char *b, size_t bytes,
                                     int div, int t, int nt) {
  switch (op) {
    case OP_SUM: span<T, OP_SUM>(dst, a, b, bytes, div, t, nt); break;
    case OP_PROD: span<T, OP_PROD>(dst, a, b, bytes, div, t, nt); break;
    case OP_MAX: span<T, OP_MAX>(dst, a, b, bytes, div, t, nt); break;
    case OP_MIN: span<T, OP_MIN>(dst, a, b, bytes, div, t, nt); break;
    default: span<T, OP_COPY>(dst, a, b, bytes, div, t, nt); break;
  }
}

/* The one runtime switch on the datatype. */
__device__ inline void reduce_any(int dt, int op, char *dst, const char *a, const char *b,
                                  size_t bytes, int div, int t, int nt) {
  if (op == OP_COPY && !div) {
    copy_bytes(dst, b, bytes, t, nt);
    return;
  }
  switch (dt) {
    case ncclInt8: span_op<int8_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclUint8: span_op<uint8_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclInt32: span_op<int32_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclUint32: span_op<uint32_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclInt64: span_op<int64_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclUint64: span_op<uint64_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat16: span_op<__half>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat32: span_op<float>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat64: span_op<double>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclBfloat16: span_op<__nv_bfloat16>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat8e4m3: span_op<__nv_fp8_e4m3>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat8e5m2: span_op<__nv_fp8_e5m2>(op, dst, a, b, bytes, div, t, nt); break;
    default: break; /* refused at launch */
  }
}

#endif
