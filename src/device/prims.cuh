/* What the kernel's protocols share (memory ordering, bounded waits, the
 * kernel's arguments, where a receive's result goes), and the Simple
 * protocol: 64-bit head and tail counters, slot-sized copies in, a fence,
 * copies or reductions out. One half of a CTA moves a step's send, the
 * other its receive. The LL protocol is proto_ll.cuh. Included by the
 * kernel's translation unit only. */
#ifndef WEFT_DEVICE_PRIMS_CUH
#define WEFT_DEVICE_PRIMS_CUH

#include <stdint.h>

#include "device/device.h"
#include "device/reduce.cuh"

#define EXEC_THREADS 512
#define EXEC_HALF (EXEC_THREADS / 2)

/* ---- Memory ordering ----------------------------------------------------- */

/* A link's counters synchronize its two ends: at GPU scope when both run
 * on one GPU, at system scope when the link crosses GPUs (link.sys), where
 * GPU scope would not order the peer GPU's threads. The release by one
 * thread after a barrier of its half also publishes the half's slot
 * writes (release is cumulative over what the barrier ordered before). */
__device__ __forceinline__ uint64_t ld_acquire(const uint64_t *p, uint32_t sys) {
  uint64_t v;
  if (sys)
    asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release(uint64_t *p, uint64_t v, uint32_t sys) {
  if (sys)
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
  else
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* A counter nobody synchronizes on (LL's tail): no ordering asked. */
__device__ __forceinline__ void st_relaxed(uint64_t *p, uint64_t v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ uint64_t now_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* A barrier for one half of the CTA (ids 1 and 2; 0 is __syncthreads). */
__device__ __forceinline__ void half_sync(int id) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(EXEC_HALF) : "memory");
}

/* The CTA's stop word (shared memory): one half sets it while the other
 * runs and reads it, so both go through atomics; a plain flag would be a
 * data race between the halves. */
__device__ __forceinline__ void stop_set(int *stop) {
  atomicExch(stop, 1);
}
__device__ __forceinline__ int stop_seen(int *stop) {
  return atomicAdd(stop, 0) != 0;
}

/* half_sync that also returns whether any thread of the half passed a
 * nonzero pred. Every thread gets the same answer, so a half leaves a loop
 * together: reading the shared stop word after a plain barrier would let
 * the other half's late write split it, and the threads that stayed would
 * wait at the next barrier for the ones that left. */
__device__ __forceinline__ int half_sync_any(int id, int pred) {
  int r;
  asm volatile(
      "{\n\t.reg .pred p, q;\n\t"
      "setp.ne.s32 p, %1, 0;\n\t"
      "bar.red.or.pred q, %2, %3, p;\n\t"
      "selp.s32 %0, 1, 0, q;\n\t}"
      : "=r"(r)
      : "r"(pred), "r"(id), "r"(EXEC_HALF)
      : "memory");
  return r;
}

/* What the kernel reads of one collective: its plan on the device, its
 * buffers, datatype and reduction. A fused launch carries one for each of
 * its collectives. */
struct exec_work {
  const struct weft_dev_lane *lanes;
  const struct weft_step *steps;
  char *scratch;
  char *bufs[2];
  int dt;
  int op;  /* exec_op of the reduction */
  int avg; /* POSTOP divides by nranks */
};

/* A kernel's arguments: the collective it runs now and the rank's links. */
struct exec_args : exec_work {
  struct weft_dev_conns conns;
};

/* The link this rank sends to dst on (is_send), or receives from src on. */
__device__ __forceinline__ const weft_dev_link &link_of(const exec_args &x, int peer, int ch,
                                                        int is_send) {
  size_t i = (size_t)peer * x.conns.nchannels + ch;
  return is_send ? x.conns.send[i] : x.conns.recv[i];
}

__device__ inline char *buf_of(const exec_args &x, const weft_dev_lane &l, unsigned idx,
                               size_t off) {
  char *base = idx == WEFT_BUF_SCRATCH ? x.scratch + l.scratch_off : x.bufs[idx];
  return base + off;
}

/* ---- Bounded waits ------------------------------------------------------- */

/* Which wait a spinning thread is in, for the report of a timeout. */
struct wait_site {
  int dir; /* WEFT_DEV_WAIT_FREE or WEFT_DEV_WAIT_DATA */
  int peer;
  int channel;
  int proto;
  uint64_t pos;
};

/* Marks this rank failed for `reason` (enum weft_dev_error) with peer
 * `peer`, unless something failed first; every wait of the rank sees the
 * word and stops, and the host reads it without waiting. */
__device__ inline void error_word_set(const exec_args &x, int reason, int peer) {
  atomicCAS((unsigned long long *)x.conns.error, 0ull,
            (unsigned long long)WEFT_DEV_ERROR_WORD(reason, x.conns.rank, peer));
  __threadfence_system();
}

/* A timed-out wait: the first one of the rank describes itself in
 * conns.diag (before the error word, which the host reads first), then
 * the error word names the rank and the peer. */
__device__ inline void wait_report(const exec_args &x, const wait_site &w, uint64_t seen) {
  weft_dev_wait_diag *d = x.conns.diag;
  if (d != NULL && atomicCAS(&d->claimed, 0u, 1u) == 0u) {
    d->dir = (uint32_t)w.dir;
    d->peer = w.peer;
    d->channel = w.channel;
    d->lane = blockIdx.x;
    d->proto = (uint32_t)w.proto;
    d->pos = w.pos;
    d->seen = seen;
    __threadfence_system();
  }
  error_word_set(x, WEFT_DEV_ERR_TIMEOUT, w.peer);
}

/* Whether a wait's spin number `spins` (0 first) also calls wait_check:
 * every 1024th, and not the first. wait_check reads the error and abort
 * words, which live in mapped host memory, and the clock. Called on every
 * wait's first unready spin (every CTA's thread 0 waits for the peers at
 * a direct kernel's start), it made a 2-rank in-place AllGather of 16 MiB
 * on one H200 take 115 us instead of 15, the more CTAs the slower
 * (docs/CUDA.md, "Waits and the host words"). */
__device__ __forceinline__ bool wait_check_due(unsigned spins) { return (spins & 1023) == 1023; }

/* Called now and then by a spinning thread (wait_check_due): 0 once the
 * run must stop (an error word set by anyone, an abort, or this wait past
 * conns.timeout_ns, which it reports with what it last saw). *start is 0
 * before the first call. */
__device__ inline int wait_check(const exec_args &x, uint64_t *start, const wait_site &w,
                                 uint64_t seen) {
  if (*(volatile uint64_t *)x.conns.error != 0) return 0;
  if (x.conns.abort != NULL && *x.conns.abort != 0) return 0;
  uint64_t t = now_ns(), limit = x.conns.timeout_ns ? x.conns.timeout_ns : 10000000000ull;
  if (*start == 0) {
    *start = t;
  } else if (t - *start > limit) {
    wait_report(x, w, seen);
    return 0;
  }
  return 1;
}

/* Spins until *p passes the bound (ready(*p)), an error elsewhere, or the
 * timeout; returns 0 when the run must stop. *seen keeps the last value
 * read. Thread 0 of a half only. */
template <typename Ready>
__device__ int wait_for(const exec_args &x, const uint64_t *p, uint32_t sys, Ready ready,
                        const wait_site &w, uint64_t *seen) {
  uint64_t start = 0;
  for (unsigned spins = 0;; spins++) {
    uint64_t v = ld_acquire(p, sys);
    *seen = v;
    if (ready(v)) return 1;
    if (wait_check_due(spins) && !wait_check(x, &start, w, v)) return 0;
  }
}

/* Slot waits of a half of the CTA: thread 0 spins, then the whole half
 * decides together (half_sync_any) whether to go on, so a failed wait or
 * a stop set by the other half ends every thread of it alike. 1: go on.
 * peer and channel name the link for a timeout's report. *seen is thread
 * 0's last reading of the peer's counter (0 before the first): while it
 * already allows slot pos, nothing is read. The counter only grows, and
 * the acquire that read it ordered every slot up to it, so the reading
 * stays good; on a link across GPUs this saves a round trip per slot. */

/* The sending half (barrier 1): until slot pos of c (to peer) is free. */
__device__ inline int half_wait_free(const exec_args &x, const weft_dev_link &c, int peer,
                                     int channel, int proto, uint64_t pos, uint64_t *seen, int t,
                                     int *stop) {
  int failed = 0;
  if (t == 0) {
    const uint64_t ns = (uint64_t)x.conns.nslots;
    if (!(*seen <= pos && pos - *seen < ns)) {
      const wait_site w = {WEFT_DEV_WAIT_FREE, peer, channel, proto, pos};
      failed = !wait_for(
          x, c.head, c.sys, [=](uint64_t v) { return pos - v < ns; }, w, seen);
    }
    if (failed) stop_set(stop);
  }
  return !half_sync_any(1, failed || (t == 0 && stop_seen(stop)));
}

/* The receiving half (barrier 2): until slot pos of c (from peer) is
 * filled. */
__device__ inline int half_wait_filled(const exec_args &x, const weft_dev_link &c, int peer,
                                       int channel, uint64_t pos, uint64_t *seen, int t,
                                       int *stop) {
  int failed = 0;
  if (t == 0) {
    if (!(*seen > pos)) {
      const wait_site w = {WEFT_DEV_WAIT_DATA, peer, channel, WEFT_PROTO_SIMPLE, pos};
      failed = !wait_for(
          x, c.tail, c.sys, [=](uint64_t v) { return v > pos; }, w, seen);
    }
    if (failed) stop_set(stop);
  }
  return !half_sync_any(2, failed || (t == 0 && stop_seen(stop)));
}

/* ---- Where a receive goes ------------------------------------------------ */

struct recv_target {
  char *dst;
  const char *loc; /* the local operand of a reduction, else NULL */
  int op;          /* exec_op; OP_COPY for a copy */
  int div;         /* avg's divide (nranks), 0 for none */
};

__device__ inline recv_target recv_target_of(const exec_args &x, const weft_dev_lane &l,
                                             const weft_step &s) {
  recv_target r;
  r.dst = buf_of(x, l, s.dst_buf, s.dst_off);
  r.loc = (s.flags & WEFT_STEP_REDUCE) ? buf_of(x, l, s.local_buf, s.local_off) : NULL;
  r.op = (s.flags & WEFT_STEP_REDUCE) ? x.op : OP_COPY;
  r.div = (s.flags & WEFT_STEP_POSTOP) && x.avg ? x.conns.nranks : 0;
  return r;
}

/* Whether recv_out is a plain byte copy (LL then skips its staging). */
__device__ __forceinline__ int recv_is_copy(const recv_target &r) {
  return r.op == OP_COPY && !r.div;
}

/* Bytes [off, off + n) of a receive, arrived at in (a slot), to dst. */
__device__ __forceinline__ void recv_out(const exec_args &x, const recv_target &r, size_t off,
                                         const char *in, size_t n, int t) {
  reduce_any(x.dt, r.op, r.dst + off, r.loc ? r.loc + off : NULL, in, n, r.div, t, EXEC_HALF);
}

/* ---- Simple -------------------------------------------------------------- */

__device__ inline int exec_send(const exec_args &x, const weft_dev_lane &l, const weft_step &s,
                                int t, int *stop) {
  const weft_dev_link c = link_of(x, s.send_peer, l.channel, 1);
  const char *src = buf_of(x, l, s.send_buf, s.send_off);
  const size_t sb = x.conns.slot_bytes;
  const int ns = x.conns.nslots;
  uint64_t pos = *(volatile uint64_t *)c.tail, head = 0;
  for (size_t off = 0; off < s.send_bytes; off += sb, pos++) {
    size_t n = s.send_bytes - off < sb ? s.send_bytes - off : sb;
    if (!half_wait_free(x, c, s.send_peer, l.channel, WEFT_PROTO_SIMPLE, pos, &head, t, stop))
      return 0;
    copy_bytes(c.slots + (pos % ns) * sb, src + off, n, t, EXEC_HALF);
    /* The barrier orders the half's copies before thread 0's release. */
    half_sync(1);
    if (t == 0) {
      if (c.sizes != NULL) c.sizes[pos % ns] = (uint32_t)n; /* released with the tail */
      st_release(c.tail, pos + 1, c.sys);
    }
  }
  return 1;
}

__device__ inline int exec_recv(const exec_args &x, const weft_dev_lane &l, const weft_step &s,
                                int t, int *stop) {
  const weft_dev_link c = link_of(x, s.recv_peer, l.channel, 0);
  const recv_target r = recv_target_of(x, l, s);
  const size_t sb = x.conns.slot_bytes;
  const int ns = x.conns.nslots;
  uint64_t pos = *(volatile uint64_t *)c.head, tail = 0;
  for (size_t off = 0; off < s.recv_bytes; off += sb, pos++) {
    size_t n = s.recv_bytes - off < sb ? s.recv_bytes - off : sb;
    if (!half_wait_filled(x, c, s.recv_peer, l.channel, pos, &tail, t, stop)) return 0;
    recv_out(x, r, off, c.slots + (pos % ns) * sb, n, t);
    half_sync(2);
    if (t == 0) st_release(c.head, pos + 1, c.sys);
  }
  return 1;
}

#endif
