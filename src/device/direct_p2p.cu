/* Grouped send/recv directly: where every rank of a communicator lives in
 * one process (direct.cu), a send is one copy from the sender's buffer
 * into the receiver's, made by the sender's kernel. One kernel per rank
 * and group, for the sends and receives that are the only one of their
 * direction with their peer in the group (the caller keeps the others on
 * the FIFO plan):
 *
 *  1. The rank's first CTA posts each receive on its board: the buffer and
 *     its size, then the call's number with that peer (seq). Posting waits
 *     for nothing, so no two ranks can wait on each other here.
 *  2. Every CTA takes every send in turn (peers from rank + 1 on, so the
 *     ranks spread over the receivers): thread 0 waits until the peer
 *     posted this call's receive, then the CTAs copy their share of the
 *     bytes into it. A send whose size differs from the receive's copies
 *     nothing and sets the error word (WEFT_DEV_ERR_P2P_SIZE), as the FIFO
 *     path does; no buffer is overrun.
 *  3. Each CTA fences its writes and counts itself; the last one marks
 *     every send finished (with its size) on the rank's board, then waits
 *     until every peer it receives from finished its send, and checks the
 *     size that peer had against its own.
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

__device__ void p2p_size_error(const exec_args &x, int peer) {
  atomicCAS((unsigned long long *)x.conns.error, 0ull,
            (unsigned long long)WEFT_DEV_ERROR_WORD(WEFT_DEV_ERR_P2P_SIZE, x.conns.rank, peer));
  __threadfence_system();
}

/* The CTAs' copy of n bytes, 16 bytes at a time where both ends allow. */
__device__ void p2p_copy(char *dst, const char *src, size_t n) {
  const char *in[1] = {src};
  char *out[1] = {dst};
  if ((((uintptr_t)dst | (uintptr_t)src | n) & 3) == 0)
    nway<uint32_t, OP_COPY>(in, 1, out, 1, n / 4, 0);
  else
    nway<uint8_t, OP_COPY>(in, 1, out, 1, n, 0);
}

__device__ __forceinline__ int has(uint64_t mask, int p) {
  return (int)((mask >> p) & 1u);
}

/* Step 2 for the send to p: 0 once the kernel must stop. */
__device__ int p2p_send(const direct_p2p_args &a, int p, char **dst, size_t *room) {
  if (threadIdx.x == 0) {
    weft_dev_board *peer = a.boards[p];
    const uint64_t s = a.boards[a.rank]->send_seq[p] + 1;
    int go = direct_wait(a.x, &peer->recv[a.rank].seq, a.sys, s, WEFT_DEV_WAIT_PEER_READY, p);
    *dst = go ? *(char *volatile *)&peer->recv[a.rank].addr : NULL;
    *room = go ? *(volatile size_t *)&peer->recv[a.rank].bytes : 0;
    if (!go) *room = ~(size_t)0;
  }
  __syncthreads();
  if (*room == ~(size_t)0) return 0;
  const size_t n = a.ops.send_bytes[p];
  if (n != *room) {
    if (blockIdx.x == 0 && threadIdx.x == 0) p2p_size_error(a.x, p);
  } else if (n > 0) {
    p2p_copy(*dst, (const char *)a.ops.send_buf[p], n);
  }
  __syncthreads(); /* the shared dst and room are read before the next send */
  return 1;
}

/* Step 3, the rank's last CTA, thread 0. */
__device__ void p2p_finish(const direct_p2p_args &a) {
  weft_dev_board *me = a.boards[a.rank];
  const int n = a.nranks;
  for (int p = 0; p < n; p++) {
    if (!has(a.ops.send_mask, p)) continue;
    me->sent[p].bytes = a.ops.send_bytes[p];
    st_release(&me->sent[p].seq, me->send_seq[p] + 1, a.sys);
  }
  for (int q = 0; q < n; q++) {
    if (!has(a.ops.recv_mask, q)) continue;
    const weft_dev_board *peer = a.boards[q];
    const uint64_t e = me->recv_seq[q] + 1;
    if (!direct_wait(a.x, &peer->sent[a.rank].seq, a.sys, e, WEFT_DEV_WAIT_PEER_DONE, q)) return;
    if (*(volatile const size_t *)&peer->sent[a.rank].bytes != a.ops.recv_bytes[q])
      p2p_size_error(a.x, q);
  }
  /* Only now: every CTA read the counts at its start. */
  for (int p = 0; p < n; p++) {
    if (has(a.ops.send_mask, p)) me->send_seq[p]++;
    if (has(a.ops.recv_mask, p)) me->recv_seq[p]++;
  }
}

__global__ void __launch_bounds__(DIRECT_THREADS, 1)
    weft_direct_p2p_kernel(const __grid_constant__ direct_p2p_args a) {
  __shared__ char *dst;
  __shared__ size_t room;
  weft_dev_board *me = a.boards[a.rank];
  const int n = a.nranks, r = a.rank;
  if (blockIdx.x == 0)
    for (int q = threadIdx.x; q < n; q += blockDim.x) {
      if (!has(a.ops.recv_mask, q)) continue;
      me->recv[q].addr = (char *)a.ops.recv_buf[q];
      me->recv[q].bytes = a.ops.recv_bytes[q];
      st_release(&me->recv[q].seq, me->recv_seq[q] + 1, a.sys);
    }
  int go = 1;
  for (int k = 1; k <= n && go; k++) {
    const int p = (r + k) % n; /* the rank itself last */
    if (has(a.ops.send_mask, p)) go = p2p_send(a, p, &dst, &room);
  }
  if (!go) return;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (a.sys)
      __threadfence_system();
    else
      __threadfence();
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
  if (conns->nranks > WEFT_DEV_DIRECT_MAX_RANKS || nctas < 1) {
    WARN("device engine: rank %d: a direct send/recv over %d ranks on %d CTAs cannot run",
         conns->rank, conns->nranks, nctas);
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
