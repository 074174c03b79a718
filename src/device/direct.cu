/* Direct collectives: every rank of the communicator reads and writes the
 * other ranks' buffers itself (they live in one process: one GPU, or GPUs
 * with peer access), so there are no FIFOs and no copies in between. One
 * kernel per rank and call:
 *
 *  1. Each rank publishes its buffers on its board (device memory, one per
 *     rank) under the call's epoch, then waits for every peer's. A rank's
 *     kernel runs only once its stream reached the call, so a peer never
 *     writes into memory the rank's earlier work still uses.
 *  2. Each rank moves its share, reading every input byte once and
 *     writing every output byte once over all ranks ("push"):
 *     - AllReduce: rank r reduces slice r of every input, in rank order,
 *       and stores the result into slice r of every output;
 *     - ReduceScatter: rank r reduces block r of every input into its
 *       output; Reduce: slice r of every input into the root's output;
 *     - AllGather: rank r copies its input into block r of every output;
 *     - Broadcast: rank r copies slice r of the root's input into every
 *       output.
 *     Only rank r reads the bytes rank r writes (in place too: a slice's
 *     inputs are read before its outputs are written, by the same thread),
 *     so the ranks need no barrier in between.
 *  3. Each CTA fences its writes and counts itself on its rank's board; the
 *     rank's last CTA marks the rank done and waits until every peer is,
 *     so no rank's stream goes on while a peer still reads or writes its
 *     buffers.
 * The epoch lives on the board and the kernel advances it, so a CUDA graph
 * that captured the launch replays it correctly. Every wait is bounded by
 * conns.timeout_ns and gives up on an abort or a peer's error, as the
 * plan kernel's do. */
#include <stddef.h>

#include "device/dev_check.cuh"
#include "device/direct.cuh"

struct direct_args : direct_call {
  uint32_t sys; /* some peer is on another GPU: system-scope ordering */
  size_t count; /* elements: per rank for AllGather and ReduceScatter */
};

/* Bytes of an element of datatype dt (refused at launch if unknown). */
__device__ __forceinline__ size_t dtype_bytes(int dt) {
  switch (dt) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 4;
  }
}

/* Thread 0: until every board's word at `field` reaches e (0: stop). */
__device__ int wait_boards(const direct_args &a, size_t field, uint64_t e, int dir) {
  for (int q = 0; q < a.nranks; q++) {
    const uint64_t *w = (const uint64_t *)((const char *)a.boards[q] + field);
    if (!direct_wait(a.x, w, a.sys, e, dir, q)) return 0;
  }
  return 1;
}

/* Slice r of count elements cut n ways at 16-byte boundaries (so every
 * rank's vectors stay aligned where the buffers are). */
__device__ __forceinline__ void direct_slice(size_t count, size_t es, int n, int r, size_t *lo,
                                             size_t *len) {
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  size_t align = 16 / es;
  per = (per + align - 1) / align * align;
  size_t l = per * (size_t)r;
  *lo = l < count ? l : count;
  *len = count - *lo < per ? count - *lo : per;
}

/* One datatype's reductions, called (not inlined into the kernel). */
template <typename T>
__device__ __noinline__ void nway_op(int op, const char *const *in, int nin, char *const *out,
                                     int nout, size_t len, int div) {
  switch (op) {
    case OP_SUM: nway<T, OP_SUM>(in, nin, out, nout, len, div); break;
    case OP_PROD: nway<T, OP_PROD>(in, nin, out, nout, len, div); break;
    case OP_MAX: nway<T, OP_MAX>(in, nin, out, nout, len, div); break;
    case OP_MIN: nway<T, OP_MIN>(in, nin, out, nout, len, div); break;
    default: break;
  }
}

__device__ void nway_any(int dt, int op, const char *const *in, int nin, char *const *out, int nout,
                         size_t bytes, int div) {
  if (op == OP_COPY) {
    uintptr_t mis = (uintptr_t)in[0] | bytes;
    for (int o = 0; o < nout; o++) mis |= (uintptr_t)out[o];
    if (mis & 3)
      nway<uint8_t, OP_COPY>(in, 1, out, nout, bytes, 0);
    else
      nway<uint32_t, OP_COPY>(in, 1, out, nout, bytes / 4, 0);
    return;
  }
  /* clang-format off */
  switch (dt) {
#define CASE(e, T) case e: nway_op<T>(op, in, nin, out, nout, bytes / sizeof(T), div); break;
    DIRECT_DTYPES(CASE)
#undef CASE
    default: break; /* refused at launch */
  }
  /* clang-format on */
}

__global__ void __launch_bounds__(DIRECT_THREADS, 1) weft_direct_kernel(direct_args a) {
  __shared__ const char *ins[WEFT_DEV_DIRECT_MAX_RANKS];
  __shared__ char *outs[WEFT_DEV_DIRECT_MAX_RANKS];
  __shared__ uint64_t epoch;
  __shared__ int go, sh_nin, sh_nout, bad;
  weft_dev_board *me = a.boards[a.rank];
  const int n = a.nranks, r = a.rank, t = threadIdx.x;
  if (t == 0) {
    bad = -1;
    epoch = *(volatile uint64_t *)&me->epoch + 1;
    if (blockIdx.x == 0) {
      me->in = a.in;
      me->out = a.out;
      me->in_win = a.in_win;
      me->out_win = a.out_win;
      st_release(&me->ready, epoch, a.sys);
    }
    go = wait_boards(a, offsetof(weft_dev_board, ready), epoch, WEFT_DEV_WAIT_PEER_READY);
  }
  __syncthreads();
  if (!go) return;
  const uint64_t e = epoch;
  /* Which bytes this rank moves, from and to where. */
  const size_t es = dtype_bytes(a.dt);
  size_t lo = 0, len = a.count;
  int nin = n, nout = n;
  const bool slices = a.func != WEFT_FUNC_ALLGATHER && a.func != WEFT_FUNC_REDUCESCATTER;
  if (slices) direct_slice(a.count, es, n, r, &lo, &len);
  for (int q = t; q < n; q += blockDim.x) {
    const weft_dev_board *b = a.boards[q];
    const char *qin = b->in;
    char *qout = b->out;
    if (a.xlate != NULL) {
      /* Across processes: a peer's address in its window, moved to where
       * this process maps that window; only the buffers this call uses. */
      const bool need_in =
          a.func != WEFT_FUNC_ALLGATHER && (a.func != WEFT_FUNC_BROADCAST || q == a.root);
      const bool need_out =
          a.func != WEFT_FUNC_REDUCESCATTER && (a.func != WEFT_FUNC_REDUCE || q == a.root);
      const uint32_t wi = b->in_win, wo = b->out_win;
      if ((need_in && wi >= a.nwin) || (need_out && wo >= a.nwin)) {
        bad = q;
      } else {
        if (need_in) qin += a.xlate[(size_t)wi * n + q];
        if (need_out) qout += a.xlate[(size_t)wo * n + q];
      }
    }
    switch (a.func) {
      case WEFT_FUNC_ALLREDUCE:
      case WEFT_FUNC_REDUCE:
        ins[q] = qin + lo * es;
        outs[q] = qout + lo * es; /* Reduce: only the root's is used */
        break;
      case WEFT_FUNC_REDUCESCATTER: ins[q] = qin + ((size_t)r * a.count) * es; break;
      case WEFT_FUNC_ALLGATHER: outs[q] = qout + ((size_t)r * a.count) * es; break;
      case WEFT_FUNC_BROADCAST:
        outs[q] = qout + lo * es;
        if (q == a.root) ins[0] = qin + lo * es;
        break;
      default: break;
    }
  }
  __syncthreads();
  if (t == 0) {
    /* A peer's buffer in no window: nothing moves, the ranks still end
     * the call together, and the error word says whose. */
    if (bad >= 0 && blockIdx.x == 0) error_word_set(a.x, WEFT_DEV_ERR_WINDOW, bad);
    if (a.func == WEFT_FUNC_REDUCESCATTER) {
      outs[0] = a.out;
      nout = 1;
    } else if (a.func == WEFT_FUNC_REDUCE) {
      outs[0] = outs[a.root];
      nout = 1;
    } else if (a.func == WEFT_FUNC_ALLGATHER) {
      ins[0] = a.in;
    }
    if (a.func == WEFT_FUNC_ALLGATHER || a.func == WEFT_FUNC_BROADCAST) {
      nin = 1;
      /* An output that is the input itself (in place) is left alone. */
      int k = 0;
      for (int o = 0; o < n; o++)
        if (outs[o] != ins[0]) outs[k++] = outs[o];
      nout = k;
    }
    sh_nin = nin;
    sh_nout = nout;
  }
  __syncthreads();
  nin = sh_nin;
  nout = sh_nout;
  if (bad >= 0) len = 0;
  const int op = a.func == WEFT_FUNC_ALLGATHER || a.func == WEFT_FUNC_BROADCAST ? OP_COPY : a.op;
  const int div = a.avg && op != OP_COPY ? n : 0;
  if (len > 0 && nout > 0) nway_any(a.dt, op, ins, nin, outs, nout, len * es, div);
  /* Done: the writes reach the peers before the rank says so. */
  __syncthreads();
  if (t == 0) {
    if (a.sys)
      __threadfence_system();
    else
      __threadfence();
    if (atomicAdd(&me->arrive, 1u) == gridDim.x - 1) {
      me->arrive = 0;
      __threadfence();
      st_release(&me->done, e, a.sys);
      if (wait_boards(a, offsetof(weft_dev_board, done), e, WEFT_DEV_WAIT_PEER_DONE))
        *(volatile uint64_t *)&me->epoch = e;
    }
  }
}

/* ---- Host side ------------------------------------------------------------ */

extern "C" cudaError_t weft_dev_fill(void *dst, const void *src, size_t n) {
  cudaStream_t s;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  e = src != NULL ? cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, s)
                  : cudaMemsetAsync(dst, 0, n, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  return e;
}

/* Bytes of LL scratch per rank (two calls' lines from every sender),
 * allocated with the board, right after it (DIRECT_BOARD_BYTES). */
#define DIRECT_LL_SCRATCH (1u << 20)

extern "C" ncclResult_t weft_dev_board_create(int nranks, struct weft_dev_board **out,
                                              size_t *ll_bytes) {
  char *mem = NULL;
  weft_dev_board host = {};
  DEV_CUDA(cudaMalloc((void **)&mem, DIRECT_BOARD_BYTES + DIRECT_LL_SCRATCH),
           "allocating a direct board");
  host.ll_lines = DIRECT_LL_SCRATCH / sizeof(uint4) / (2u * (unsigned)nranks);
  cudaError_t e = weft_dev_fill(mem, NULL, DIRECT_BOARD_BYTES + DIRECT_LL_SCRATCH);
  if (e == cudaSuccess) e = weft_dev_fill(mem, &host, sizeof(host));
  if (e != cudaSuccess) {
    cudaFree(mem);
    DEV_CUDA(e, "setting up a direct board");
  }
  *out = (weft_dev_board *)mem;
  *ll_bytes = host.ll_lines * 8; /* a line carries 8 bytes */
  return ncclSuccess;
}

extern "C" void weft_dev_board_destroy(struct weft_dev_board *board) {
  if (board != NULL) cudaFree(board);
}

extern "C" ncclResult_t weft_dev_board_table(struct weft_dev_board *const *boards, int n,
                                             struct weft_dev_board ***out) {
  weft_dev_board **t = NULL;
  DEV_CUDA(cudaMalloc((void **)&t, (size_t)n * sizeof(*t)), "allocating the direct boards' table");
  cudaError_t e = weft_dev_fill(t, boards, (size_t)n * sizeof(*t));
  if (e != cudaSuccess) {
    cudaFree(t);
    DEV_CUDA(e, "copying the direct boards' table");
  }
  *out = t;
  return ncclSuccess;
}

extern "C" void weft_dev_board_table_free(struct weft_dev_board **table) {
  if (table != NULL) cudaFree(table);
}

extern "C" ncclResult_t weft_dev_direct_launch(const struct weft_dev_direct *d,
                                               struct weft_dev_board *const *table,
                                               const struct weft_dev_conns *conns, int sys,
                                               int nctas, cudaStream_t stream) {
  if ((int)d->op < 0 || (int)d->op >= ncclNumOps || (int)d->datatype < 0 ||
      (int)d->datatype >= ncclNumTypes || conns->nranks > WEFT_DEV_DIRECT_MAX_RANKS || nctas < 1) {
    WARN(
        "device engine: rank %d: a direct %d of datatype %d / op %d over %d ranks on %d CTAs "
        "cannot run",
        conns->rank, d->func, (int)d->datatype, (int)d->op, conns->nranks, nctas);
    return ncclInternalError;
  }
  direct_args a = {};
  direct_call_fill(&a, d, table, conns);
  a.sys = sys ? 1u : 0u;
  a.count = d->count;
  void *args[] = {&a};
  DEV_CUDA(cudaLaunchKernel((const void *)weft_direct_kernel, dim3((unsigned)nctas),
                            dim3(DIRECT_THREADS), args, 0, stream),
           "launching the direct kernel");
  return ncclSuccess;
}

cudaError_t weft_direct_load(void) {
  cudaFuncAttributes attr;
  return cudaFuncGetAttributes(&attr, (const void *)weft_direct_kernel);
}
