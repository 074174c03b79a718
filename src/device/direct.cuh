/* What the direct kernels share (direct.cu: collectives, direct_p2p.cu:
 * grouped send/recv): a rank's board, the n-way copy and reduction over
 * the CTAs, and the bounded wait on a peer's board word. */
#ifndef WEFT_DEVICE_DIRECT_CUH
#define WEFT_DEVICE_DIRECT_CUH

#include "device/plan_kernel.cuh"

#define DIRECT_THREADS 512
/* Vectors of 16 bytes in flight per thread and input (1-byte types: half as
 * many, so their 16 lanes a vector fit the registers). */
#define DIRECT_UNROLL_MAX 4
/* A copy's vectors in flight per thread: it holds no second operand, and
 * 4 left a 2-rank AllGather or Broadcast in place 4-12% slower than 8 on
 * the H200; 16 was no faster and made the send/recv kernel spill
 * (docs/PERFORMANCE.md, "Seventh pass"). */
#ifndef DIRECT_UNROLL_COPY
#define DIRECT_UNROLL_COPY 8
#endif

/* A receive a rank posted for a peer's send (direct_p2p.cu): written by
 * the receiver, read by the sender once seq shows it is this call's. */
struct direct_p2p_slot {
  uint64_t seq;
  char *addr;
  size_t bytes;
  uint64_t inplace; /* the rank's send to this peer is from addr (and as long) */
};
/* A send a rank finished for a peer: written by the sender, read by the
 * receiver (bytes: what the sender had, to catch a size mismatch). */
struct direct_p2p_sent {
  uint64_t seq;
  size_t bytes;
};

/* Every field its own 128-byte line: ready and the buffers are written
 * once a call by the rank and read by every peer; done is read by every
 * peer's last CTA; epoch and arrive are the rank's own. */
struct weft_dev_board {
  alignas(128) uint64_t ready;
  const char *in;
  char *out;
  uint32_t in_win, out_win; /* across processes: their windows (weft_dev_direct) */
  alignas(128) uint64_t done;
  alignas(128) uint64_t epoch;
  unsigned arrive;
  /* Grouped send/recv, per peer: the receives this rank posted, the sends
   * it finished, and its own counts of the calls with that peer. */
  alignas(128) struct direct_p2p_slot recv[WEFT_DEV_DIRECT_MAX_RANKS];
  alignas(128) struct direct_p2p_sent sent[WEFT_DEV_DIRECT_MAX_RANKS];
  alignas(128) uint64_t send_seq[WEFT_DEV_DIRECT_MAX_RANKS];
  uint64_t recv_seq[WEFT_DEV_DIRECT_MAX_RANKS];
  unsigned send_arrive[WEFT_DEV_DIRECT_MAX_RANKS]; /* CTAs done with the send to a peer */
  unsigned p2p_arrive;
  /* Small collectives in LL lines (direct_ll.cu): the rank's scratch
   * (direct_ll_scratch), [2 call parities][nranks senders][ll_lines
   * lines], written by every peer; its calls so far, and the CTAs of the
   * current one that ended. */
  alignas(128) size_t ll_lines;
  alignas(128) uint64_t ll_epoch;
  unsigned ll_arrive;
  unsigned ll_prev_all;          /* the last LL call needed every rank's lines */
  alignas(128) uint64_t ll_done; /* the last LL call the rank finished reading */
};

/* A board's bytes; its LL scratch follows them in the same allocation. */
#define DIRECT_BOARD_BYTES ((sizeof(weft_dev_board) + 255) & ~(size_t)255)

/* Board b's LL scratch, from b's address as this process maps it (a
 * pointer stored in the board would be its owner's, wrong in a peer's
 * process). */
__host__ __device__ inline uint4 *direct_ll_scratch(const weft_dev_board *b) {
  return (uint4 *)((char *)b + DIRECT_BOARD_BYTES);
}

/* Every datatype the direct kernels reduce, as X(NCCL's enum, element
 * type): one list for their dispatch switches. */
#define DIRECT_DTYPES(X)                                                                          \
  X(ncclInt8, int8_t)                                                                             \
  X(ncclUint8, uint8_t) X(ncclInt32, int32_t) X(ncclUint32, uint32_t) X(ncclInt64, int64_t)       \
      X(ncclUint64, uint64_t) X(ncclFloat16, __half) X(ncclFloat32, float) X(ncclFloat64, double) \
          X(ncclBfloat16, __nv_bfloat16) X(ncclFloat8e4m3, __nv_fp8_e4m3)                         \
              X(ncclFloat8e5m2, __nv_fp8_e5m2)

/* What a direct collective's kernel gets (direct.cu, direct_ll.cu add
 * their own fields). */
struct direct_call {
  exec_args x;                   /* x.conns: abort, error word, timeout (the waits' own) */
  weft_dev_board *const *boards; /* [nranks], device array */
  int rank, nranks, func, root, dt, op, avg;
  const char *in;
  char *out;
  uint32_t in_win, out_win, nwin; /* across processes (weft_dev_direct) */
  const long long *xlate;
};

/* The call's fields from the engine's description (host side). */
static inline void direct_call_fill(direct_call *c, const struct weft_dev_direct *d,
                                    weft_dev_board *const *table,
                                    const struct weft_dev_conns *conns) {
  c->boards = table;
  c->rank = conns->rank;
  c->nranks = conns->nranks;
  c->func = d->func;
  c->root = d->root;
  c->dt = (int)d->datatype;
  c->op = exec_op_of(d->op);
  c->avg = d->op == ncclAvg;
  c->in = (const char *)d->sendbuff;
  c->out = (char *)d->recvbuff;
  c->in_win = d->in_win;
  c->out_win = d->out_win;
  c->nwin = d->nwin;
  c->xlate = d->xlate;
  c->x.conns = *conns;
}

/* Thread 0: until *w reaches e (peer: whose board, for a timeout's
 * report); 0: stop (an error, an abort or the timeout). */
__device__ inline int direct_wait(const exec_args &x, const uint64_t *w, uint32_t sys, uint64_t e,
                                  int dir, int peer) {
  uint64_t start = 0;
  for (unsigned spins = 0;; spins++) {
    uint64_t v = ld_acquire(w, sys);
    if (v >= e) return 1;
    if (wait_check_due(spins)) {
      const wait_site s = {dir, peer, -1, WEFT_PROTO_SIMPLE, e};
      if (!wait_check(x, &start, s, v)) return 0;
    }
  }
}

/* out[o][i] = in[0][i] op in[1][i] op ... (op in rank order), for every
 * output o and element i < len, then / div when div is set; the rank's
 * CTAs and threads share the elements. A copy is nin == 1 and OP_COPY.
 * ncta > 0: only ncta CTAs share them, this one being number cta. */
template <typename T, int OP>
__device__ void nway(const char *const *in, int nin, char *const *out, int nout, size_t len,
                     int div, unsigned cta = 0, unsigned ncta = 0) {
  const size_t g = (size_t)(ncta ? cta : blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t G = (size_t)(ncta ? ncta : gridDim.x) * blockDim.x;
  const int V = 16 / sizeof(T);
  constexpr int DIRECT_UNROLL = OP == OP_COPY ? DIRECT_UNROLL_COPY
                                : sizeof(T) == 1 ? 2
                                                 : DIRECT_UNROLL_MAX;
  uintptr_t mis = 0;
  for (int q = 0; q < nin; q++) mis |= (uintptr_t)in[q];
  for (int o = 0; o < nout; o++) mis |= (uintptr_t)out[o];
  size_t done = 0;
  if ((mis & 15) == 0) {
    const size_t nv = len * sizeof(T) / 16;
    for (size_t base = g; base < nv; base += G * DIRECT_UNROLL) {
      uint4 acc[DIRECT_UNROLL];
#pragma unroll
      for (int u = 0; u < DIRECT_UNROLL; u++) {
        size_t i = base + (size_t)u * G;
        if (i < nv) acc[u] = ((const uint4 *)in[0])[i];
      }
      for (int q = 1; q < nin; q++) {
        uint4 v[DIRECT_UNROLL];
#pragma unroll
        for (int u = 0; u < DIRECT_UNROLL; u++) {
          size_t i = base + (size_t)u * G;
          if (i < nv) v[u] = ((const uint4 *)in[q])[i];
        }
#pragma unroll
        for (int u = 0; u < DIRECT_UNROLL; u++) {
          T *x = (T *)&acc[u];
          const T *y = (const T *)&v[u];
#pragma unroll
          for (int k = 0; k < V; k++) x[k] = elem<T>::apply(OP, x[k], y[k]);
        }
      }
      if constexpr (OP == OP_SUM) { /* avg */
        if (div) {
#pragma unroll
          for (int u = 0; u < DIRECT_UNROLL; u++) {
            T *x = (T *)&acc[u];
            for (int k = 0; k < V; k++) x[k] = elem<T>::div(x[k], div);
          }
        }
      }
      for (int o = 0; o < nout; o++) {
#pragma unroll
        for (int u = 0; u < DIRECT_UNROLL; u++) {
          size_t i = base + (size_t)u * G;
          if (i < nv) ((uint4 *)out[o])[i] = acc[u];
        }
      }
    }
    done = nv * V;
  }
  /* Element by element (the rest after the vectors, or every element
   * where some buffer is not 16-byte aligned: an AllGather's blocks of an
   * odd count), DIRECT_UNROLL elements in flight per thread. */
  size_t i = done + g;
  for (; i + (size_t)(DIRECT_UNROLL - 1) * G < len; i += G * DIRECT_UNROLL) {
    T acc[DIRECT_UNROLL];
#pragma unroll
    for (int u = 0; u < DIRECT_UNROLL; u++) acc[u] = ((const T *)in[0])[i + (size_t)u * G];
    for (int q = 1; q < nin; q++) {
      T v[DIRECT_UNROLL];
#pragma unroll
      for (int u = 0; u < DIRECT_UNROLL; u++) v[u] = ((const T *)in[q])[i + (size_t)u * G];
#pragma unroll
      for (int u = 0; u < DIRECT_UNROLL; u++) acc[u] = elem<T>::apply(OP, acc[u], v[u]);
    }
    if constexpr (OP == OP_SUM) {
      if (div) {
#pragma unroll
        for (int u = 0; u < DIRECT_UNROLL; u++) acc[u] = elem<T>::div(acc[u], div);
      }
    }
    for (int o = 0; o < nout; o++) {
#pragma unroll
      for (int u = 0; u < DIRECT_UNROLL; u++) ((T *)out[o])[i + (size_t)u * G] = acc[u];
    }
  }
  for (; i < len; i += G) {
    T x = ((const T *)in[0])[i];
    for (int q = 1; q < nin; q++) x = elem<T>::apply(OP, x, ((const T *)in[q])[i]);
    if constexpr (OP == OP_SUM)
      if (div) x = elem<T>::div(x, div);
    for (int o = 0; o < nout; o++) ((T *)out[o])[i] = x;
  }
}

#endif
