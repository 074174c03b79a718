/* The LL line (proto_ll.cuh says why it needs no fence): a 16-byte line
 * {data[0:4], flag, data[4:8], flag} written by one volatile store, and
 * the packing of up to 8 bytes of a buffer of any alignment into it. Used
 * by the plan kernel's LL protocol and the direct LL kernel. */
#ifndef WEFT_DEVICE_LL_LINE_CUH
#define WEFT_DEVICE_LL_LINE_CUH

#include <stdint.h>

#include "device/prims.cuh"

__device__ __forceinline__ void ll_store(uint4 *line, uint64_t data, uint32_t flag) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"((uint32_t)data),
               "r"(flag), "r"((uint32_t)(data >> 32)), "r"(flag)
               : "memory");
}

__device__ __forceinline__ uint4 ll_load(const uint4 *line) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(line)
               : "memory");
  return v;
}

__device__ __forceinline__ int ll_ready(const uint4 &v, uint32_t flag) {
  return v.y == flag && v.w == flag;
}

__device__ __forceinline__ uint64_t ll_data(const uint4 &v) {
  return (uint64_t)v.x | (uint64_t)v.z << 32;
}

/* The largest power of two up to 8 that p is aligned to: user buffers at
 * an element offset need not be 8-aligned (a half at an odd index). */
__device__ __forceinline__ int align8(const void *p) {
  unsigned a = (unsigned)((uintptr_t)p & 7);
  return a == 0 ? 8 : (int)(a & (0u - a));
}

/* nb (<= 8) bytes at p as the low bytes of a word, zeros above, in units
 * that alignment al allows. Read through L2, as Simple's sends read. */
__device__ __forceinline__ uint64_t pack_load(const char *p, int nb, int al) {
  if (nb == 8 && al == 8) return __ldcg((const unsigned long long *)p);
  if (nb == 8 && al == 4) {
    const unsigned int *w = (const unsigned int *)p;
    return (uint64_t)__ldcg(w) | (uint64_t)__ldcg(w + 1) << 32;
  }
  uint64_t v = 0;
  if (al >= 2 && nb % 2 == 0) {
    for (int k = 0; k < nb / 2; k++)
      v |= (uint64_t)__ldcg((const unsigned short *)p + k) << (16 * k);
    return v;
  }
  for (int k = 0; k < nb; k++) v |= (uint64_t)__ldcg((const unsigned char *)p + k) << (8 * k);
  return v;
}

/* The low nb bytes of v to p (the padding of a last line stays out). */
__device__ __forceinline__ void pack_store(char *p, uint64_t v, int nb, int al) {
  if (nb == 8 && al == 8) {
    *(uint64_t *)p = v;
  } else if (nb == 8 && al == 4) {
    ((uint32_t *)p)[0] = (uint32_t)v;
    ((uint32_t *)p)[1] = (uint32_t)(v >> 32);
  } else if (al >= 2 && nb % 2 == 0) {
    for (int k = 0; k < nb / 2; k++) ((uint16_t *)p)[k] = (uint16_t)(v >> (16 * k));
  } else {
    for (int k = 0; k < nb; k++) p[k] = (char)(v >> (8 * k));
  }
}

/* Polls one line until it carries flag; 0 when the run must stop (every
 * waiting thread checks the error and abort words and its own timeout). */
__device__ __forceinline__ int ll_wait(const exec_args &x, const wait_site &w, const uint4 *line,
                                       uint32_t flag, uint4 &v) {
  uint64_t start = 0;
  for (unsigned spins = 0;; spins++) {
    v = ll_load(line);
    if (ll_ready(v, flag)) return 1;
    if (wait_check_due(spins) && !wait_check(x, &start, w, v.y)) return 0;
  }
}

#endif
