/* The LL128 protocol between two ranks' kernels: LL's flags in 128-byte
 * lines. Eight threads write a line together, each 16 bytes in one
 * volatile vector store of the same warp instruction; the line's last 8
 * bytes are the flag, so a line carries 120 bytes of data (LL's 16-byte
 * lines carry 8). A receiver's eight threads load the line in one warp
 * instruction too, and the line's data is there when its flag is.
 *
 * That rests on the hardware, not on the PTX memory model: a warp's store
 * of a whole aligned 128-byte line must reach the reader as one write,
 * and its load read one, so that no load sees the flag without the data
 * beside it. NVLink keeps 128-byte writes whole (NCCL runs LL128 there and
 * nowhere else between GPUs); PCIe may split a write, and inside one GPU
 * nothing promises it. So the engine runs LL128 only where every pair of
 * GPUs is joined by NVLink (sched/tuning.c, weft_tune_ll128_links);
 * tests/test_gpu_plan.c runs it between ranks of one GPU at kernel level,
 * where it was measured slower than Simple (docs/CUDA.md, "LL128").
 *
 * Everything else is LL's (proto_ll.cuh): positions, credits and the flag
 * of position pos, pos / nslots + 1, here in both halves of the 8-byte
 * flag word. The slots are the link's LL128 area (as many as LL's, as
 * large; only in inboxes of communicators that may run it), which only
 * LL128 writes, so a stale flag word there is an older one, never data. A slot carries 120 bytes of each 128
 * (no more than a Simple slot holds, where reductions are staged); a
 * warp's threads always run a line's loads and stores together
 * (__syncwarp before each), and a last line is padded with zeros.
 * Included by the kernel's translation unit only. */
#ifndef WEFT_DEVICE_PROTO_LL128_CUH
#define WEFT_DEVICE_PROTO_LL128_CUH

#include <stdint.h>

#include "device/ll_line.cuh"
#include "device/prims.cuh"

#define LL128_LINE 128
#define LL128_DATA 120
/* Lines a group of eight threads has in flight: 32 groups x 8 lines of
 * 128 bytes is one 32 KiB slot. */
#define LL128_UNROLL 8
#define LL128_GROUPS (EXEC_HALF / 8)

struct ll128_pair {
  uint64_t a, b;
};

__device__ __forceinline__ uint64_t ll128_flag(uint64_t pos, int nslots) {
  uint64_t f = (uint64_t)(uint32_t)(pos / (uint64_t)nslots + 1u);
  return f | f << 32;
}

/* Data bytes of one slot: 120 of each line, and no more than the Simple
 * slot where a reduction is staged; a multiple of 8 (ll128_write's units). */
__device__ __forceinline__ size_t ll128_payload(const weft_dev_conns &c) {
  size_t pay = c.ll_slot_bytes / LL128_LINE * LL128_DATA;
  size_t stage = c.slot_bytes / LL128_DATA * LL128_DATA;
  return pay < stage ? pay : stage;
}

__device__ __forceinline__ void ll128_store(uint64_t *p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

__device__ __forceinline__ ll128_pair ll128_load(const uint64_t *p) {
  ll128_pair v;
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(v.a), "=l"(v.b)
               : "l"(p)
               : "memory");
  return v;
}

/* Thread j (0..7) of a line's group holds bytes [16j, 16j + 16) of the
 * line; j == 7 holds 8 bytes of data and the flag. Where they lie in the
 * message: at line * 120 + 16j, 16 bytes (8 for j == 7). */
__device__ __forceinline__ int ll128_span(int j) { return j == 7 ? 8 : 16; }

/* Thread t's share of one slot: n bytes from src (alignment al). */
__device__ inline void ll128_write(uint64_t *slot, uint64_t flag, const char *src, size_t n,
                                   int al, int t) {
  const size_t nlines = (n + LL128_DATA - 1) / LL128_DATA;
  const int g = t >> 3, j = t & 7;
  for (size_t base = 0; base < nlines; base += (size_t)LL128_GROUPS * LL128_UNROLL) {
    ll128_pair v[LL128_UNROLL];
#pragma unroll
    for (int u = 0; u < LL128_UNROLL; u++) {
      size_t k = base + (size_t)u * LL128_GROUPS + (size_t)g, at = k * LL128_DATA + 16 * (size_t)j;
      v[u].a = v[u].b = 0;
      if (k >= nlines || at >= n) continue;
      size_t left = n - at;
      v[u].a = pack_load(src + at, left < 8 ? (int)left : 8, al);
      if (j < 7 && left > 8) v[u].b = pack_load(src + at + 8, left - 8 < 8 ? (int)(left - 8) : 8, al);
    }
    __syncwarp();
#pragma unroll
    for (int u = 0; u < LL128_UNROLL; u++) {
      size_t k = base + (size_t)u * LL128_GROUPS + (size_t)g;
      if (k < nlines) ll128_store(slot + k * (LL128_LINE / 8) + 2 * j, v[u].a, j == 7 ? flag : v[u].b);
    }
  }
}

/* Thread t's share of one slot: n bytes of data, read as they arrive and
 * written to out (alignment al). A group's lines are loaded together and
 * loaded again, all eight threads, until thread 7 sees the flag; the
 * warp's threads decide together, so the shuffles and loads stay whole
 * warp instructions. 0 when a wait failed (every thread of the warp). */
__device__ inline int ll128_read(const exec_args &x, const wait_site &w, const uint64_t *slot,
                                 uint64_t flag, size_t n, char *out, int al, int t) {
  const size_t nlines = (n + LL128_DATA - 1) / LL128_DATA;
  const int g = t >> 3, j = t & 7;
  const int flag_lane = (t & 31) | 7;
  for (size_t base = 0; base < nlines; base += (size_t)LL128_GROUPS * LL128_UNROLL) {
    ll128_pair v[LL128_UNROLL];
    unsigned pending = 0;
    __syncwarp();
#pragma unroll
    for (int u = 0; u < LL128_UNROLL; u++) {
      size_t k = base + (size_t)u * LL128_GROUPS + (size_t)g;
      v[u].a = v[u].b = 0;
      if (k < nlines) v[u] = ll128_load(slot + k * (LL128_LINE / 8) + 2 * j);
    }
#pragma unroll
    for (int u = 0; u < LL128_UNROLL; u++) {
      size_t k = base + (size_t)u * LL128_GROUPS + (size_t)g;
      int ok = __shfl_sync(0xffffffffu, (int)(v[u].b == flag), flag_lane);
      if (k < nlines && !ok) pending |= 1u << u;
    }
    uint64_t start = 0;
    int failed = 0;
    for (unsigned spins = 0; __any_sync(0xffffffffu, pending != 0) &&
                             !__any_sync(0xffffffffu, failed);
         spins++) {
      __syncwarp();
#pragma unroll
      for (int u = 0; u < LL128_UNROLL; u++) {
        size_t k = base + (size_t)u * LL128_GROUPS + (size_t)g;
        if (pending & (1u << u)) v[u] = ll128_load(slot + k * (LL128_LINE / 8) + 2 * j);
      }
#pragma unroll
      for (int u = 0; u < LL128_UNROLL; u++) {
        int ok = __shfl_sync(0xffffffffu, (int)(v[u].b == flag), flag_lane);
        if (ok) pending &= ~(1u << u);
      }
      /* Thread 7 of a group checks the time and the host words, and
       * reports the flag of its first line still missing. */
      if (j == 7 && pending != 0 && wait_check_due(spins)) {
        uint64_t seen = 0;
        int found = 0;
#pragma unroll
        for (int u = 0; u < LL128_UNROLL; u++)
          if (!found && (pending & (1u << u))) {
            seen = v[u].b >> 32;
            found = 1;
          }
        failed = !wait_check(x, &start, w, seen);
      }
    }
    if (__any_sync(0xffffffffu, failed)) return 0;
#pragma unroll
    for (int u = 0; u < LL128_UNROLL; u++) {
      size_t k = base + (size_t)u * LL128_GROUPS + (size_t)g, at = k * LL128_DATA + 16 * (size_t)j;
      if (k >= nlines || at >= n) continue;
      size_t left = n - at;
      pack_store(out + at, v[u].a, left < 8 ? (int)left : 8, al);
      if (j < 7 && left > 8) pack_store(out + at + 8, v[u].b, left - 8 < 8 ? (int)(left - 8) : 8, al);
    }
  }
  return 1;
}

/* LL128 for flag_send and flag_recv (proto_ll.cuh). */
struct ll128_proto {
  static constexpr int id = WEFT_PROTO_LL128;
  static __device__ __forceinline__ char *area(const weft_dev_link &c) { return c.ll128; }
  static __device__ __forceinline__ size_t pay(const weft_dev_conns &c) { return ll128_payload(c); }
  static __device__ __forceinline__ uint64_t flag(uint64_t pos, int ns) {
    return ll128_flag(pos, ns);
  }
  static __device__ __forceinline__ void write(char *slot, uint64_t flag, const char *src,
                                               size_t n, int al, int t) {
    ll128_write((uint64_t *)slot, flag, src, n, al, t);
  }
  static __device__ __forceinline__ int read(const exec_args &x, const wait_site &w,
                                             const char *slot, uint64_t flag, size_t n, char *out,
                                             int al, int t) {
    return ll128_read(x, w, (const uint64_t *)slot, flag, n, out, al, t);
  }
};

#endif
