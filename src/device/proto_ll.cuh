/* The LL (low-latency) protocol between two ranks' kernels. A 16-byte
 * line carries 8 bytes of data and two copies of a 4-byte flag, laid out
 * {data[0:4], flag, data[4:8], flag} and written by one 16-byte volatile
 * store. Each 8-byte half arrives whole, so a receiver that sees both
 * flags equal to the value it expects has the line's data: no fence and
 * no tail counter on the data path, one NVLink/PCIe trip per message
 * instead of Simple's write, fence, flag, read.
 *
 * LL slots live in an area of the inbox of their own (zeroed at creation;
 * device.h), never written by Simple, so a stale word there is always an
 * older LL flag. Positions are the Simple counters' (head and tail only
 * grow, whichever protocol moved them), and the flag of position pos is
 * pos / nslots + 1: how many times the slot has been used, so a line left
 * from an earlier use never matches (it would take 2^32 uses of one slot
 * to come round again). Credits are Simple's: the sender waits until the
 * slot is free (head), the receiver publishes the head once it has used a
 * slot. The sender still stores the tail (relaxed, once per step) so a
 * later Simple launch on the link starts from the same position.
 *
 * A slot of ll_slot_bytes carries half that in data; both ends cut a
 * message at that size. A message whose size is not a multiple of 8 pads
 * its last line with zeros; the receiver writes only the real bytes.
 * Copies go from the lines straight to the destination; a reduction or a
 * divide first lands the slot's data in the Simple slot of the same
 * position (unused by an LL launch, and the receiver's until it publishes
 * the head), then runs Simple's reduction (recv_out), so every datatype
 * and op is written once. Included by the kernel's translation unit only. */
#ifndef WEFT_DEVICE_PROTO_LL_CUH
#define WEFT_DEVICE_PROTO_LL_CUH

#include <stdint.h>

#include "device/prims.cuh"

/* Lines a thread has in flight: 8 x 256 threads x 8 bytes is one 16 KiB
 * slot, so a receiver pays one memory latency per slot, not eight. */
#define LL_UNROLL 8

__device__ __forceinline__ uint32_t ll_flag(uint64_t pos, int nslots) {
  return (uint32_t)(pos / (uint64_t)nslots) + 1u;
}

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
  for (unsigned spins = 1;; spins++) {
    v = ll_load(line);
    if (ll_ready(v, flag)) return 1;
    if ((spins & 1023) == 0 && !wait_check(x, &start, w, v.y)) return 0;
  }
}

/* Thread t's lines of one slot: n bytes of data, read as they arrive and
 * written to out (alignment al). All of a batch's loads are issued before
 * the first is checked, so lines that are already there cost one latency.
 * 0 when a wait failed. */
__device__ inline int ll_read(const exec_args &x, const wait_site &w, const uint4 *slot,
                              uint32_t flag, size_t n, char *out, int al, int t) {
  const size_t nlines = (n + 7) / 8;
  for (size_t i = (size_t)t; i < nlines; i += (size_t)EXEC_HALF * LL_UNROLL) {
    uint4 v[LL_UNROLL];
#pragma unroll
    for (int u = 0; u < LL_UNROLL; u++) {
      size_t k = i + (size_t)u * EXEC_HALF;
      if (k < nlines) v[u] = ll_load(slot + k);
    }
#pragma unroll
    for (int u = 0; u < LL_UNROLL; u++) {
      size_t k = i + (size_t)u * EXEC_HALF;
      if (k >= nlines) continue;
      if (!ll_ready(v[u], flag) && !ll_wait(x, w, slot + k, flag, v[u])) return 0;
      size_t at = 8 * k;
      pack_store(out + at, ll_data(v[u]), n - at < 8 ? (int)(n - at) : 8, al);
    }
  }
  return 1;
}

/* Thread t's lines of one slot: n bytes from src (alignment al). */
__device__ inline void ll_write(uint4 *slot, uint32_t flag, const char *src, size_t n, int al,
                                int t) {
  const size_t nlines = (n + 7) / 8;
  for (size_t i = (size_t)t; i < nlines; i += (size_t)EXEC_HALF * LL_UNROLL) {
    uint64_t v[LL_UNROLL];
#pragma unroll
    for (int u = 0; u < LL_UNROLL; u++) {
      size_t k = i + (size_t)u * EXEC_HALF, at = 8 * k;
      if (k < nlines) v[u] = pack_load(src + at, n - at < 8 ? (int)(n - at) : 8, al);
    }
#pragma unroll
    for (int u = 0; u < LL_UNROLL; u++) {
      size_t k = i + (size_t)u * EXEC_HALF;
      if (k < nlines) ll_store(slot + k, v[u], flag);
    }
  }
}

/* Simple's reduction of a staged slot, called rather than inlined: it
 * holds every datatype and op, and inlined into ll_recv it would share
 * the polling loop's registers (the kernel runs at the 128 cap). */
static __device__ __noinline__ void ll_reduce_out(const exec_args &x, const recv_target &r,
                                                  size_t off, const char *in, size_t n, int t) {
  recv_out(x, r, off, in, n, t);
}

static __device__ __noinline__ int ll_send(const exec_args &x, const weft_dev_lane &l,
                                           const weft_step &s, int t, int *stop) {
  const weft_dev_link c = link_of(x, s.send_peer, l.channel, 1);
  const char *src = buf_of(x, l, s.send_buf, s.send_off);
  const size_t sb = x.conns.ll_slot_bytes, pay = sb / 2;
  const int ns = x.conns.nslots;
  const int al = align8(src); /* offsets below are multiples of pay, itself of 8 */
  uint64_t pos = *(volatile uint64_t *)c.tail, head = 0;
  for (size_t off = 0; off < s.send_bytes; off += pay, pos++) {
    size_t n = s.send_bytes - off < pay ? s.send_bytes - off : pay;
    if (!half_wait_free(x, c, s.send_peer, l.channel, WEFT_PROTO_LL, pos, &head, t, stop)) return 0;
    ll_write((uint4 *)(c.ll + (pos % ns) * sb), ll_flag(pos, ns), src + off, n, al, t);
  }
  /* Bookkeeping only: the flags carry the data, so no fence before it. */
  if (t == 0 && s.send_bytes > 0) st_relaxed(c.tail, pos);
  return 1;
}

static __device__ __noinline__ int ll_recv(const exec_args &x, const weft_dev_lane &l,
                                           const weft_step &s, int t, int *stop) {
  const weft_dev_link c = link_of(x, s.recv_peer, l.channel, 0);
  const recv_target r = recv_target_of(x, l, s);
  const int copy = recv_is_copy(r);
  const size_t sb = x.conns.ll_slot_bytes, pay = sb / 2;
  const int ns = x.conns.nslots;
  const int al = align8(r.dst);
  uint64_t pos = *(volatile uint64_t *)c.head;
  for (size_t off = 0; off < s.recv_bytes; off += pay, pos++) {
    size_t n = s.recv_bytes - off < pay ? s.recv_bytes - off : pay;
    const uint4 *slot = (const uint4 *)(c.ll + (pos % ns) * sb);
    char *stage = c.slots + (pos % ns) * x.conns.slot_bytes;
    const wait_site w = {WEFT_DEV_WAIT_DATA, s.recv_peer, l.channel, WEFT_PROTO_LL, pos};
    int failed =
        !ll_read(x, w, slot, ll_flag(pos, ns), n, copy ? r.dst + off : stage, copy ? al : 8, t);
    if (failed) stop_set(stop);
    if (half_sync_any(2, failed || (t == 0 && stop_seen(stop)))) return 0;
    if (!copy) {
      ll_reduce_out(x, r, off, stage, n, t);
      half_sync(2);
    }
    if (t == 0) st_release(c.head, pos + 1, c.sys);
  }
  return 1;
}

#endif
