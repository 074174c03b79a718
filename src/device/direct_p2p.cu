/* Grouped send/recv directly: where every rank of a communicator lives in
 * one process (direct.cu), a send is one copy from the sender's buffer
 * into the receiver's, made by the sender's kernel. One kernel per rank
 * and group, for the sends and receives that are the only one of their
 * direction with their peer in the group (the caller keeps the others on
 * the FIFO plan):
 *
 *  1. The rank's first CTA posts each receive on its board: the buffer,
 *     its size and whether the rank's send to that peer is from the same
 *     buffer (in place), then the call's number with that peer (seq).
 *     Posting waits for nothing, so no two ranks can wait on each other
 *     here.
 *  2. Every CTA takes every send in turn (peers from rank + 1 on, so the
 *     ranks spread over the receivers; where the rank also copies to
 *     itself beside sends to others, its last self_ctas CTAs make that
 *     copy while the others make the sends, so the local copy runs beside
 *     the link's instead of after it): thread 0 waits until the peer
 *     posted this call's receive, then the CTAs copy their share of the
 *     bytes into it, and the last CTA done marks the send finished (with
 *     its size). Where the peer is in place, the peer's receive buffer is
 *     what it sends from: both in place, the two ranks exchange the two
 *     blocks, each one half of them (no copy aside, every byte read and
 *     written once, both ranks' CTAs at work); the peer alone, the rank's
 *     copy waits (in a second round, after every other send) until the
 *     peer's send finished. That send never waits, so no sends wait in a circle. A
 *     send whose size differs from the receive's copies nothing and sets
 *     the error word (WEFT_DEV_ERR_P2P_SIZE), as the FIFO path does; no
 *     buffer is overrun.
 *  3. The rank's last CTA waits until every peer it receives from
 *     finished its send, and checks the size that peer had against its
 *     own.
 * A receiver's next post for a peer comes only after that peer finished
 * the current send, so a sender never reads a post of another call. The
 * counts live on the board and the kernel advances them, so a captured
 * CUDA graph replays correctly. */
#include "device/dev_check.cuh"
#include "device/direct.cuh"

struct direct_p2p_args {
  exec_args x;
  weft_dev_board *const *boards;
  int rank, nranks;
  uint32_t sys;
  struct weft_dev_direct_p2p ops;
};

/* The CTAs of a send: ncta of them, this one number cta. */
struct p2p_team {
  unsigned cta, ncta;
};

/* The team's copy of n bytes, 16 bytes at a time where both ends allow. */
__device__ void p2p_copy(char *dst, const char *src, size_t n, p2p_team t) {
  const char *in[1] = {src};
  char *out[1] = {dst};
  if ((((uintptr_t)dst | (uintptr_t)src | n) & 3) == 0)
    nway<uint32_t, OP_COPY>(in, 1, out, 1, n / 4, 0, t.cta, t.ncta);
  else
    nway<uint8_t, OP_COPY>(in, 1, out, 1, n, 0, t.cta, t.ncta);
}

__device__ __forceinline__ int has(uint64_t mask, int p) {
  return (int)((mask >> p) & 1u);
}

/* Words of type W from x to y and back, n / sizeof(W) of them, UNROLL in
 * flight per thread (g, G: the thread's index and stride); returns the
 * bytes done. */
template <typename W, int UNROLL>
__device__ size_t swap_words(char *x, char *y, size_t n, size_t g, size_t G) {
  const size_t nw = n / sizeof(W);
  W *a = (W *)x, *b = (W *)y;
  for (size_t i = g; i < nw; i += G * UNROLL) {
    W u[UNROLL], v[UNROLL];
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
      if (i + k * G < nw) u[k] = a[i + k * G], v[k] = b[i + k * G];
#pragma unroll
    for (int k = 0; k < UNROLL; k++)
      if (i + k * G < nw) a[i + k * G] = v[k], b[i + k * G] = u[k];
  }
  return nw * sizeof(W);
}

/* b's bytes to a and a's to b, n of them, over the team's CTAs: an
 * in-place pair exchanged by its two ranks. 16 bytes at a time where both
 * are 16-byte aligned, else 4 where both are 4-byte aligned (an AlltoAll's
 * blocks of a count that is not a multiple of 4 floats: byte by byte that
 * ran 3.6x slower than a copy), the rest byte by byte. */
__device__ void p2p_swap(char *x, char *y, size_t n, p2p_team t) {
  const size_t g = (size_t)t.cta * blockDim.x + threadIdx.x;
  const size_t G = (size_t)t.ncta * blockDim.x;
  const uintptr_t m = (uintptr_t)x | (uintptr_t)y;
  size_t done = 0;
  if ((m & 15) == 0)
    done = swap_words<uint4, 2>(x, y, n, g, G);
  else if ((m & 3) == 0)
    done = swap_words<uint32_t, 4>(x, y, n, g, G);
  for (size_t i = done + g; i < n; i += G) {
    char c = x[i];
    x[i] = y[i];
    y[i] = c;
  }
}

/* What a send does once its peer posted the receive. Both ends in place
 * (the send's buffer is the receive's from the same peer, on both ranks):
 * each exchanges its half of both blocks (SWAP, swap_part). The peer
 * alone in place: this rank writes into the buffer the peer sends from, so
 * it waits until that send is done (LATER); that send waits for nothing,
 * so no two sends wait on each other. */
enum { SEND_COPY, SEND_SWAP, SEND_SKIP, SEND_LATER };

__device__ __forceinline__ int send_kind(const direct_p2p_args &a, int p, int peer_inplace) {
  const int mine = has(a.ops.inplace_mask, p);
  if (mine && p == a.rank) return SEND_SKIP; /* to itself, in place: nothing to move */
  if (mine && peer_inplace) return SEND_SWAP;
  return peer_inplace ? SEND_LATER : SEND_COPY;
}

/* The part of an in-place pair's n bytes that this rank exchanges with p:
 * the lower rank the first half (cut at 16 bytes, so both parts keep the
 * blocks' alignment), the higher one the rest. */
__device__ __forceinline__ void swap_part(int rank, int p, size_t n, size_t *off, size_t *len) {
  const size_t half = (n / 2) & ~(size_t)15;
  *off = rank < p ? 0 : half;
  *len = rank < p ? half : n - half;
}

/* The shared view of a peer's post. */
struct p2p_post {
  char *dst;
  size_t room;
  int inplace, go;
};

/* Thread 0 waits for p's post of this call, then the CTA reads it. */
__device__ void p2p_read_post(const direct_p2p_args &a, int p, p2p_post *post) {
  if (threadIdx.x == 0) {
    const weft_dev_board *peer = a.boards[p];
    const uint64_t s = a.boards[a.rank]->send_seq[p] + 1;
    post->go = direct_wait(a.x, &peer->recv[a.rank].seq, a.sys, s, WEFT_DEV_WAIT_PEER_READY, p);
    post->dst = *(char *volatile *)&peer->recv[a.rank].addr;
    post->room = *(volatile size_t *)&peer->recv[a.rank].bytes;
    post->inplace = (int)*(volatile uint64_t *)&peer->recv[a.rank].inplace;
  }
  __syncthreads();
}

/* The send to p is done on this CTA; the last CTA of the team to say so
 * marks it finished (with its size) on the rank's board. */
__device__ void send_done(const direct_p2p_args &a, int p, p2p_team t) {
  __syncthreads(); /* the shared post is read before the next send */
  if (threadIdx.x != 0) return;
  weft_dev_board *me = a.boards[a.rank];
  if (a.sys)
    __threadfence_system();
  else
    __threadfence();
  if (atomicAdd(&me->send_arrive[p], 1u) != t.ncta - 1) return;
  me->send_arrive[p] = 0;
  me->sent[p].bytes = a.ops.send_bytes[p];
  __threadfence();
  st_release(&me->sent[p].seq, me->send_seq[p] + 1, a.sys);
}

/* Step 2 for the send to p: 0 once the kernel must stop. In the first
 * round a send that must wait for the peer's is only noted in *later; the
 * second round takes those (their post is still this call's: the peer
 * cannot finish the call before they do). */
__device__ int p2p_send(const direct_p2p_args &a, int p, int round, uint64_t *later,
                        p2p_post *post, p2p_team t) {
  p2p_read_post(a, p, post);
  if (!post->go) return 0;
  const int kind = send_kind(a, p, post->inplace);
  if (round == 0 && kind == SEND_LATER) {
    __syncthreads(); /* the shared post is read before the next send */
    if (threadIdx.x == 0) *later |= 1ull << p;
    return 1;
  }
  if (kind == SEND_LATER) {
    if (threadIdx.x == 0) {
      const weft_dev_board *me = a.boards[a.rank];
      post->go = direct_wait(a.x, &a.boards[p]->sent[a.rank].seq, a.sys, me->recv_seq[p] + 1,
                             WEFT_DEV_WAIT_PEER_DONE, p);
    }
    __syncthreads();
    if (!post->go) return 0;
  }
  const size_t n = a.ops.send_bytes[p];
  if (n != post->room) {
    if (t.cta == 0 && threadIdx.x == 0) error_word_set(a.x, WEFT_DEV_ERR_P2P_SIZE, p);
  } else if (n > 0 && kind == SEND_SWAP) {
    size_t off, len;
    swap_part(a.rank, p, n, &off, &len);
    p2p_swap((char *)a.ops.send_buf[p] + off, post->dst + off, len, t);
  } else if (n > 0 && kind != SEND_SKIP) {
    p2p_copy(post->dst, (const char *)a.ops.send_buf[p], n, t);
  }
  send_done(a, p, t);
  return 1;
}

/* Step 3, the rank's last CTA, thread 0: every receive's send finished. */
__device__ void p2p_finish(const direct_p2p_args &a) {
  weft_dev_board *me = a.boards[a.rank];
  const int n = a.nranks;
  for (int q = 0; q < n; q++) {
    if (!has(a.ops.recv_mask, q)) continue;
    const weft_dev_board *peer = a.boards[q];
    const uint64_t e = me->recv_seq[q] + 1;
    if (!direct_wait(a.x, &peer->sent[a.rank].seq, a.sys, e, WEFT_DEV_WAIT_PEER_DONE, q)) return;
    if (*(volatile const size_t *)&peer->sent[a.rank].bytes != a.ops.recv_bytes[q])
      error_word_set(a.x, WEFT_DEV_ERR_P2P_SIZE, q);
  }
  /* Only now: every CTA read the counts at its start. */
  for (int p = 0; p < n; p++) {
    if (has(a.ops.send_mask, p)) me->send_seq[p]++;
    if (has(a.ops.recv_mask, p)) me->recv_seq[p]++;
  }
}

__global__ void __launch_bounds__(DIRECT_THREADS, 1)
    weft_direct_p2p_kernel(const __grid_constant__ direct_p2p_args a) {
  __shared__ p2p_post post;
  __shared__ uint64_t later; /* sends that wait for the peer's (second round) */
  weft_dev_board *me = a.boards[a.rank];
  const int n = a.nranks, r = a.rank;
  if (blockIdx.x == 0)
    for (int q = threadIdx.x; q < n; q += blockDim.x) {
      if (!has(a.ops.recv_mask, q)) continue;
      me->recv[q].addr = (char *)a.ops.recv_buf[q];
      me->recv[q].bytes = a.ops.recv_bytes[q];
      me->recv[q].inplace = has(a.ops.inplace_mask, q);
      st_release(&me->recv[q].seq, me->recv_seq[q] + 1, a.sys);
    }
  /* The last self_ctas CTAs copy to the rank itself, the others send to
   * the peers (0: every CTA takes every send). */
  const unsigned split = gridDim.x - (unsigned)a.ops.self_ctas;
  const int self_team = a.ops.self_ctas > 0 && blockIdx.x >= split;
  const p2p_team team = {self_team ? blockIdx.x - split : blockIdx.x,
                         a.ops.self_ctas == 0 ? gridDim.x
                         : self_team          ? (unsigned)a.ops.self_ctas
                                              : split};
  int go = 1;
  if (threadIdx.x == 0) later = 0;
  for (int round = 0; round < 2 && go; round++) {
    __syncthreads(); /* later, as thread 0 left it */
    const uint64_t todo = round == 0 ? a.ops.send_mask : later;
    for (int k = 1; k <= n && go; k++) {
      const int p = (r + k) % n; /* the rank itself last */
      if (a.ops.self_ctas > 0 && (p == r) != self_team) continue;
      if (has(todo, p)) go = p2p_send(a, p, round, &later, &post, team);
    }
  }
  if (!go) return;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (atomicAdd(&me->p2p_arrive, 1u) == gridDim.x - 1) {
      me->p2p_arrive = 0;
      __threadfence();
      p2p_finish(a);
    }
  }
}

extern "C" ncclResult_t weft_dev_direct_p2p_launch(const struct weft_dev_direct_p2p *ops,
                                                   struct weft_dev_board *const *table,
                                                   const struct weft_dev_conns *conns, int sys,
                                                   int nctas, cudaStream_t stream) {
  if (conns->nranks > WEFT_DEV_DIRECT_MAX_RANKS || nctas < 1 || ops->self_ctas < 0 ||
      ops->self_ctas >= nctas) {
    WARN("device engine: rank %d: a direct send/recv over %d ranks on %d CTAs (%d of them "
         "for the copy to itself) cannot run",
         conns->rank, conns->nranks, nctas, ops->self_ctas);
    return ncclInternalError;
  }
  direct_p2p_args a = {};
  a.boards = table;
  a.rank = conns->rank;
  a.nranks = conns->nranks;
  a.sys = sys ? 1u : 0u;
  a.ops = *ops;
  a.x.conns = *conns;
  void *args[] = {&a};
  DEV_CUDA(cudaLaunchKernel((const void *)weft_direct_p2p_kernel, dim3((unsigned)nctas),
                            dim3(DIRECT_THREADS), args, 0, stream),
           "launching the direct send/recv kernel");
  return ncclSuccess;
}

cudaError_t weft_direct_p2p_load(void) {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, (const void *)weft_direct_p2p_kernel);
}
