/* Small direct collectives in LL lines: where every rank lives in one
 * process (direct.cu), or in several processes on one GPU (each board
 * mapped into every process by CUDA IPC), a small AllReduce, AllGather, ReduceScatter,
 * Broadcast or Reduce is one kernel per rank with no barrier:
 *
 *  1. Push: the rank writes what each peer needs from it (AllReduce,
 *     AllGather: its input; ReduceScatter: the peer's block; Broadcast:
 *     the root's input, from the root; Reduce: every input, to the root)
 *     as LL lines (ll_line.cuh: data and flag in one 16-byte store) into
 *     its own slot of the peer's scratch.
 *  2. Pull: the rank waits for the lines in its own scratch, from the
 *     senders it needs, and reduces them in rank order (so every rank
 *     gets the same bits) or copies them into its output.
 * No peer reads or writes the rank's buffers, so nothing waits for a peer
 * to finish. The flag is the call's number (the board's ll_epoch,
 * advanced by the kernel, so graph replays work), and calls alternate
 * between two halves of the scratch: call e's lines overwrite call
 * e - 2's, which the peer must have read. Where call e - 1 needed every
 * rank's lines (AllReduce, AllGather, ReduceScatter) that is implied: the
 * peer started e - 1, so it finished e - 2. After a Broadcast or Reduce,
 * whose root (or other ranks) waits for nobody and could run ahead, the
 * rank first waits for each peer it writes to to have finished e - 2 (the
 * peer's ll_done, one thread a peer). */
#include "device/dev_check.cuh"
#include "device/direct.cuh"
#include "device/ll_line.cuh"

struct direct_ll_args : direct_call {
  size_t bytes; /* a sender's slot: count * element (per rank for AllGather, ReduceScatter) */
};

/* 8 bytes of elements T: a op= b, elementwise. */
template <typename T>
__device__ __forceinline__ uint64_t red8(int op, uint64_t a, uint64_t b) {
  constexpr int V = 8 / sizeof(T);
  T x[V], y[V];
  memcpy(x, &a, 8);
  memcpy(y, &b, 8);
#pragma unroll
  for (int k = 0; k < V; k++) x[k] = elem<T>::apply(op, x[k], y[k]);
  memcpy(&a, x, 8);
  return a;
}

template <typename T>
__device__ __forceinline__ uint64_t div8(uint64_t a, int n) {
  constexpr int V = 8 / sizeof(T);
  T x[V];
  memcpy(x, &a, 8);
#pragma unroll
  for (int k = 0; k < V; k++) x[k] = elem<T>::div(x[k], n);
  memcpy(&a, x, 8);
  return a;
}

__device__ __forceinline__ const uint4 *ll_slot(const weft_dev_board *b, uint64_t e, int n,
                                                int sender) {
  return direct_ll_scratch(b) + ((size_t)(e & 1) * (size_t)n + (size_t)sender) * b->ll_lines;
}

/* Sender q's line v, loaded already, or once it carries flag; 0: stop. */
__device__ __forceinline__ int ll_take(const direct_ll_args &a, const uint4 *line, uint32_t flag,
                                       int q, uint4 v, uint64_t *data) {
  if (!ll_ready(v, flag)) {
    const wait_site w = {WEFT_DEV_WAIT_DATA, q, -1, WEFT_PROTO_LL, flag};
    if (!ll_wait(a.x, w, line, flag, v)) return 0;
  }
  *data = ll_data(v);
  return 1;
}

/* Senders' lines a thread loads before it checks the first: lines already
 * there cost one memory latency per batch, not one per sender. */
#define LL_BATCH 8

/* red8 and div8 for datatype dt, called: the reduction loop below is
 * compiled once, not once per datatype (docs/CUDA.md, "Build time"). */
/* clang-format off */
__device__ __noinline__ uint64_t red8_any(int dt, int op, uint64_t a, uint64_t b) {
  switch (dt) {
#define CASE(e, T) case e: return red8<T>(op, a, b);
    DIRECT_DTYPES(CASE)
#undef CASE
    default: return a; /* refused at launch */
  }
}
__device__ __noinline__ uint64_t div8_any(int dt, uint64_t a, int n) {
  switch (dt) {
#define CASE(e, T) case e: return div8<T>(a, n);
    DIRECT_DTYPES(CASE)
#undef CASE
    default: return a;
  }
}
/* clang-format on */

/* Step 2 of a reduction: line k of every sender, in rank order. */
__device__ int ll_reduce(const direct_ll_args &a, uint64_t e, size_t g, size_t G, size_t nlines,
                         char *out, int al) {
  const weft_dev_board *me = a.boards[a.rank];
  const uint32_t flag = (uint32_t)e;
  const int n = a.nranks;
  for (size_t k = g; k < nlines; k += G) {
    uint64_t acc = 0, d;
    for (int q0 = 0; q0 < n; q0 += LL_BATCH) {
      uint4 v[LL_BATCH];
#pragma unroll
      for (int u = 0; u < LL_BATCH; u++)
        if (q0 + u < n) v[u] = ll_load(ll_slot(me, e, n, q0 + u) + k);
#pragma unroll
      for (int u = 0; u < LL_BATCH; u++) {
        const int q = q0 + u;
        if (q >= n) break;
        if (!ll_take(a, ll_slot(me, e, n, q) + k, flag, q, v[u], &d)) return 0;
        acc = q == 0 ? d : red8_any(a.dt, a.op, acc, d);
      }
    }
    if (a.avg) acc = div8_any(a.dt, acc, n);
    size_t at = 8 * k;
    pack_store(out + at, acc, a.bytes - at < 8 ? (int)(a.bytes - at) : 8, al);
  }
  return 1;
}

/* Step 2 of a copy: sender q's lines into out. */
__device__ int ll_copy(const direct_ll_args &a, uint64_t e, int q, size_t g, size_t G,
                       size_t nlines, char *out) {
  const uint4 *slot = ll_slot(a.boards[a.rank], e, a.nranks, q);
  const int al = align8(out);
  uint64_t v;
  for (size_t k = g; k < nlines; k += G) {
    if (!ll_take(a, slot + k, (uint32_t)e, q, ll_load(slot + k), &v)) return 0;
    size_t at = 8 * k;
    pack_store(out + at, v, a.bytes - at < 8 ? (int)(a.bytes - at) : 8, al);
  }
  return 1;
}

/* Step 1: the rank's lines of src into its slot of peer q's scratch. */
__device__ void ll_push(const direct_ll_args &a, uint64_t e, int q, const char *src, size_t g,
                        size_t G, size_t nlines) {
  uint4 *slot = (uint4 *)ll_slot(a.boards[q], e, a.nranks, a.rank);
  const int al = align8(src);
  for (size_t k = g; k < nlines; k += G) {
    size_t at = 8 * k;
    ll_store(slot + k, pack_load(src + at, a.bytes - at < 8 ? (int)(a.bytes - at) : 8, al),
             (uint32_t)e);
  }
}

/* Whether the rank writes lines into q's scratch in this call. */
__device__ __forceinline__ int ll_pushes_to(const direct_ll_args &a, int q) {
  if (a.func == WEFT_FUNC_BROADCAST) return a.rank == a.root;
  if (a.func == WEFT_FUNC_REDUCE) return q == a.root;
  return 1;
}

__device__ __forceinline__ int ll_needs_all(int func) {
  return func == WEFT_FUNC_ALLREDUCE || func == WEFT_FUNC_ALLGATHER ||
         func == WEFT_FUNC_REDUCESCATTER;
}

__global__ void __launch_bounds__(DIRECT_THREADS, 1)
    weft_direct_ll_kernel(const __grid_constant__ direct_ll_args a) {
  __shared__ uint64_t epoch;
  __shared__ unsigned prev_all;
  weft_dev_board *me = a.boards[a.rank];
  if (threadIdx.x == 0) {
    epoch = *(volatile uint64_t *)&me->ll_epoch + 1;
    prev_all = *(volatile unsigned *)&me->ll_prev_all;
  }
  __syncthreads();
  const uint64_t e = epoch;
  const int n = a.nranks, r = a.rank;
  /* Call e's lines go where call e - 2's were: the peer must have read
   * those. Implied where call e - 1 needed every rank's lines (the peer
   * then started e - 1, so it finished e - 2); otherwise asked, every
   * peer by a thread of its own. */
  if (e > 2 && !prev_all) {
    int ok = 1;
    for (int q = threadIdx.x; q < n; q += blockDim.x)
      if (q != r && ll_pushes_to(a, q))
        ok &= direct_wait(a.x, &a.boards[q]->ll_done, 0, e - 2, WEFT_DEV_WAIT_PEER_DONE, q);
    if (!__syncthreads_and(ok)) return;
  }
  const size_t g = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  const size_t G = (size_t)gridDim.x * blockDim.x;
  const size_t nlines = (a.bytes + 7) / 8;
  for (int k = 1; k <= n; k++) { /* peers from r + 1 on: the ranks spread over the receivers */
    const int q = (r + k) % n;
    if (!ll_pushes_to(a, q)) continue;
    const char *src = a.in + (a.func == WEFT_FUNC_REDUCESCATTER ? (size_t)q * a.bytes : 0);
    ll_push(a, e, q, src, g, G, nlines);
  }
  int ok = 1;
  switch (a.func) {
    case WEFT_FUNC_ALLREDUCE:
    case WEFT_FUNC_REDUCESCATTER: ok = ll_reduce(a, e, g, G, nlines, a.out, align8(a.out)); break;
    case WEFT_FUNC_REDUCE:
      if (r == a.root) ok = ll_reduce(a, e, g, G, nlines, a.out, align8(a.out));
      break;
    case WEFT_FUNC_BROADCAST: ok = ll_copy(a, e, a.root, g, G, nlines, a.out); break;
    case WEFT_FUNC_ALLGATHER:
      for (int k = 0; k < n && ok; k++)
        ok = ll_copy(a, e, (r + k) % n, g, G, nlines, a.out + (size_t)((r + k) % n) * a.bytes);
      break;
    default: break;
  }
  /* The next call's CTAs read the count: only once every CTA of this one
   * has (a failed call leaves it: the communicator has failed). */
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0 && atomicAdd(&me->ll_arrive, 1u) == gridDim.x - 1) {
    me->ll_arrive = 0;
    me->ll_prev_all = ll_needs_all(a.func);
    *(volatile uint64_t *)&me->ll_epoch = e;
    st_release(&me->ll_done, e, 0);
  }
}

extern "C" ncclResult_t weft_dev_direct_ll_launch(const struct weft_dev_direct *d,
                                                  struct weft_dev_board *const *table,
                                                  const struct weft_dev_conns *conns, size_t bytes,
                                                  int nctas, cudaStream_t stream) {
  direct_ll_args a = {};
  direct_call_fill(&a, d, table, conns);
  a.bytes = bytes;
  void *args[] = {&a};
  DEV_CUDA(cudaLaunchKernel((const void *)weft_direct_ll_kernel, dim3((unsigned)nctas),
                            dim3(DIRECT_THREADS), args, 0, stream),
           "launching the direct LL kernel");
  return ncclSuccess;
}

cudaError_t weft_direct_ll_load(void) {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, (const void *)weft_direct_ll_kernel);
}
