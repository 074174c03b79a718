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

#include "device/ll_line.cuh"
#include "device/prims.cuh"

/* Lines a thread has in flight: 8 x 256 threads x 8 bytes is one 16 KiB
 * slot, so a receiver pays one memory latency per slot, not eight. */
#define LL_UNROLL 8

__device__ __forceinline__ uint32_t ll_flag(uint64_t pos, int nslots) {
  return (uint32_t)(pos / (uint64_t)nslots) + 1u;
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
 * holds every datatype and op, and inlined into flag_recv it would share
 * the polling loop's registers (the kernel runs at the 128 cap). */
static __device__ __noinline__ void ll_reduce_out(const exec_args &x, const recv_target &r,
                                                  size_t off, const char *in, size_t n, int t) {
  recv_out(x, r, off, in, n, t);
}

/* The slot loops LL and LL128 (proto_ll128.cuh) share. A protocol P
 * names its slot area of a link (area), a slot's payload (pay), the flag
 * of a position (flag) and its line writer and reader (write, read; read
 * returns 0 when a wait failed). Credits are Simple's; the tail the
 * sender stores after its last slot is bookkeeping only (the flags carry
 * the data, so no fence before it). */
template <typename P>
static __device__ inline int flag_send(const exec_args &x, const weft_dev_lane &l,
                                       const weft_step &s, int t, int *stop) {
  const weft_dev_link c = link_of(x, s.send_peer, l.channel, 1);
  const char *src = buf_of(x, l, s.send_buf, s.send_off);
  const size_t sb = x.conns.ll_slot_bytes, pay = P::pay(x.conns);
  const int ns = x.conns.nslots;
  const int al = align8(src); /* offsets below are multiples of pay, itself of 8 */
  uint64_t pos = *(volatile uint64_t *)c.tail, head = 0;
  for (size_t off = 0; off < s.send_bytes; off += pay, pos++) {
    size_t n = s.send_bytes - off < pay ? s.send_bytes - off : pay;
    if (!half_wait_free(x, c, s.send_peer, l.channel, P::id, pos, &head, t, stop)) return 0;
    P::write(P::area(c) + (pos % ns) * sb, P::flag(pos, ns), src + off, n, al, t);
  }
  if (t == 0 && s.send_bytes > 0) st_relaxed(c.tail, pos);
  return 1;
}

/* One receive's slots: copied from the lines straight to the destination
 * (COPY), or staged in the Simple slot of the same position (unused by a
 * launch of these protocols, and the receiver's until it publishes the
 * head) and reduced (ll_reduce_out). Two instantiations, so the copy's
 * loop, the one with the most registers (the read into any alignment),
 * holds nothing for a call it never makes: a value live across a call
 * needs a register the call leaves alone. */
template <typename P, bool COPY>
__device__ __forceinline__ int flag_recv_slots(const exec_args &x, const weft_dev_lane &l,
                                               const weft_step &s, const weft_dev_link &c,
                                               const recv_target &r, int t, int *stop) {
  const size_t sb = x.conns.ll_slot_bytes, pay = P::pay(x.conns);
  const int ns = x.conns.nslots;
  const int al = COPY ? align8(r.dst) : 8;
  uint64_t pos = *(volatile uint64_t *)c.head;
  for (size_t off = 0; off < s.recv_bytes; off += pay, pos++) {
    size_t n = s.recv_bytes - off < pay ? s.recv_bytes - off : pay;
    const char *slot = P::area(c) + (pos % ns) * sb;
    char *stage = c.slots + (pos % ns) * x.conns.slot_bytes;
    const wait_site w = {WEFT_DEV_WAIT_DATA, s.recv_peer, l.channel, P::id, pos};
    int failed = !P::read(x, w, slot, P::flag(pos, ns), n, COPY ? r.dst + off : stage, al, t);
    if (failed) stop_set(stop);
    if (half_sync_any(2, failed || (t == 0 && stop_seen(stop)))) return 0;
    if (!COPY) {
      ll_reduce_out(x, r, off, stage, n, t);
      half_sync(2);
    }
    if (t == 0) st_release(c.head, pos + 1, c.sys);
  }
  return 1;
}

/* Inlined into the kernel, as Simple's exec_recv is: called, it kept the
 * kernel's values across the call in registers saved on its entry, which
 * ptxas counted as spills (116 bytes stored, 164 loaded). */
template <typename P>
static __device__ inline int flag_recv(const exec_args &x, const weft_dev_lane &l,
                                       const weft_step &s, int t, int *stop) {
  const weft_dev_link c = link_of(x, s.recv_peer, l.channel, 0);
  const recv_target r = recv_target_of(x, l, s);
  if (recv_is_copy(r)) return flag_recv_slots<P, true>(x, l, s, c, r, t, stop);
  return flag_recv_slots<P, false>(x, l, s, c, r, t, stop);
}

/* LL for flag_send and flag_recv: 16-byte lines, half of a slot data. */
struct ll_proto {
  static constexpr int id = WEFT_PROTO_LL;
  static __device__ __forceinline__ char *area(const weft_dev_link &c) { return c.ll; }
  static __device__ __forceinline__ size_t pay(const weft_dev_conns &c) {
    return c.ll_slot_bytes / 2;
  }
  static __device__ __forceinline__ uint32_t flag(uint64_t pos, int ns) { return ll_flag(pos, ns); }
  static __device__ __forceinline__ void write(char *slot, uint32_t flag, const char *src,
                                               size_t n, int al, int t) {
    ll_write((uint4 *)slot, flag, src, n, al, t);
  }
  static __device__ __forceinline__ int read(const exec_args &x, const wait_site &w,
                                             const char *slot, uint32_t flag, size_t n, char *out,
                                             int al, int t) {
    return ll_read(x, w, (const uint4 *)slot, flag, n, out, al, t);
  }
};

#endif
