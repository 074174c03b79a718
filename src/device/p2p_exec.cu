/* Grouped send/recv on the device: one CTA per lane of a weft_p2p_plan_parts
 * plan (src/sched/p2p.c: a few lanes per peer, each moving one part of
 * every op on its own channel) over the same FIFOs as the plan kernel,
 * half the CTA sending and half receiving, so two ranks that send to each
 * other never wait on each other.
 *
 * Unlike a collective, the two ends of a send/recv were sized by two
 * different callers, so a send travels behind a 16-byte header that
 * carries its byte count (a magic in the top 16 bits, as the host engine's
 * header). The message on the link is header + data, cut into slots of
 * slot_bytes: the header takes the first 16 bytes of the first slot, so a
 * 16-byte aligned buffer stays 16-byte aligned in the slots. The receiver
 * reads the header before it touches its buffer: when the count is the one
 * it posted it copies the data; otherwise it copies nothing, sets the error
 * word (WEFT_DEV_ERR_P2P_SIZE, naming the sender) and stops, so a longer
 * send can never run past the receive buffer. The host engine drains the
 * message and fails only that call; here an error word is fatal to the
 * communicator, as every asynchronous CUDA engine error is, so there is
 * nothing to keep in step.
 *
 * Sends and receives are byte copies, whatever the datatype. Buffers are
 * the plan's op indexes into a table: in the kernel's parameters for up to
 * WEFT_DEV_P2P_INLINE ops, else in a device array allocated in stream
 * order and filled by small kernels whose parameters carry the pointers, so
 * nothing is read from host memory after the launch returns (CUDA graph
 * capture records the values). */
#include "device/dev_check.cuh"
#include "device/prims.cuh"

#define P2P_HDR_BYTES 16
#define P2P_MAGIC 0x5750ull /* "WP", the header's top 16 bits */
#define P2P_BYTES_MASK ((1ull << 48) - 1)
/* Pointers per table-filling kernel: 2 KiB of parameters, well inside
 * every CUDA version's limit. */
#define P2P_FILL 256

struct p2p_args {
  exec_args x;        /* conns, lanes and steps; its bufs are unused */
  char *const *table; /* NULL: the buffers are in inl */
  char *inl[WEFT_DEV_P2P_INLINE];
};

__device__ __forceinline__ char *p2p_buf(const p2p_args &a, unsigned idx, size_t off) {
  char *base = a.table != NULL ? a.table[idx] : a.inl[idx];
  return base + off;
}

/* The send half: header, then the data, slot by slot. */
__device__ int p2p_send(const p2p_args &a, const weft_dev_lane &l, const weft_step &s, int t,
                        int *stop) {
  const weft_dev_link c = link_of(a.x, s.send_peer, l.channel, 1);
  const char *src = p2p_buf(a, s.send_buf, s.send_off);
  const size_t sb = a.x.conns.slot_bytes, total = P2P_HDR_BYTES + s.send_bytes;
  const int ns = a.x.conns.nslots;
  uint64_t pos = *(volatile uint64_t *)c.tail, head = 0;
  for (size_t so = 0; so < total; so += sb, pos++) {
    const size_t n = total - so < sb ? total - so : sb;
    if (!half_wait_free(a.x, c, s.send_peer, l.channel, WEFT_PROTO_SIMPLE, pos, &head, t, stop))
      return 0;
    char *slot = c.slots + (pos % ns) * sb;
    if (so == 0 && t == 0) {
      ((uint64_t *)slot)[0] = (P2P_MAGIC << 48) | ((uint64_t)s.send_bytes & P2P_BYTES_MASK);
      ((uint64_t *)slot)[1] = 0;
    }
    /* Stream bytes [so, so + n) of header + data; the data starts at 16. */
    const size_t lo = so < P2P_HDR_BYTES ? P2P_HDR_BYTES : so;
    copy_bytes(slot + (lo - so), src + (lo - P2P_HDR_BYTES), so + n - lo, t, EXEC_HALF);
    /* The barrier orders the half's copies before thread 0's release. */
    half_sync(1);
    if (t == 0) {
      if (c.sizes != NULL) c.sizes[pos % ns] = (uint32_t)n; /* released with the tail */
      st_release(c.tail, pos + 1, c.sys);
    }
  }
  return 1;
}

/* The receive half: the header first, then the data only when its count
 * is the posted one. */
__device__ int p2p_recv(const p2p_args &a, const weft_dev_lane &l, const weft_step &s, int t,
                        int *stop) {
  const weft_dev_link c = link_of(a.x, s.recv_peer, l.channel, 0);
  char *dst = p2p_buf(a, s.dst_buf, s.dst_off);
  const size_t sb = a.x.conns.slot_bytes;
  const int ns = a.x.conns.nslots;
  uint64_t pos = *(volatile uint64_t *)c.head, tail = 0;
  size_t total = P2P_HDR_BYTES;
  for (size_t so = 0; so < total; so += sb, pos++) {
    const char *slot = c.slots + (pos % ns) * sb;
    if (!half_wait_filled(a.x, c, s.recv_peer, l.channel, pos, &tail, t, stop)) return 0;
    /* The header, read by every thread after the barrier that follows
     * thread 0's acquire of the tail (as the data is): the whole half
     * decides alike. */
    if (so == 0) {
      const uint64_t h = __ldcg((const unsigned long long *)slot);
      const size_t sent = (size_t)(h & P2P_BYTES_MASK);
      if ((h >> 48) != P2P_MAGIC || sent != s.recv_bytes) {
        if (t == 0) {
          error_word_set(a.x,
                         (h >> 48) != P2P_MAGIC ? WEFT_DEV_ERR_P2P_STEP : WEFT_DEV_ERR_P2P_SIZE,
                         s.recv_peer);
          stop_set(stop);
        }
        return 0;
      }
      total += sent;
    }
    const size_t n = total - so < sb ? total - so : sb;
    const size_t lo = so < P2P_HDR_BYTES ? P2P_HDR_BYTES : so;
    copy_bytes(dst + (lo - P2P_HDR_BYTES), slot + (lo - so), so + n - lo, t, EXEC_HALF);
    half_sync(2);
    if (t == 0) st_release(c.head, pos + 1, c.sys);
  }
  return 1;
}

__global__ void __launch_bounds__(EXEC_THREADS, 1) weft_p2p_kernel(p2p_args a) {
  __shared__ int stop;
  const weft_dev_lane l = a.x.lanes[blockIdx.x];
  const int tid = threadIdx.x;
  if (tid == 0) stop = 0;
  __syncthreads();
  for (uint64_t i = 0; i < l.nsteps; i++) {
    const weft_step s = a.x.steps[l.first + i];
    /* A send to self paired with a receive from self (src/sched/p2p.c);
     * an overlapping send was copied aside before the launch. */
    if (s.flags & WEFT_STEP_LOCAL) {
      char *dst = p2p_buf(a, s.dst_buf, s.dst_off);
      const char *src = p2p_buf(a, s.local_buf, s.local_off);
      if (dst != src) copy_bytes(dst, src, s.recv_bytes, tid, EXEC_THREADS);
      __syncthreads();
    }
    if (tid < EXEC_HALF) {
      if (s.flags & WEFT_STEP_SEND) p2p_send(a, l, s, tid, &stop);
    } else if (s.flags & WEFT_STEP_RECV) {
      p2p_recv(a, l, s, tid - EXEC_HALF, &stop);
    }
    __syncthreads();
    if (stop) return;
  }
}

struct p2p_fill_args {
  char **table;
  int first;
  int n;
  char *ptrs[P2P_FILL];
};

__global__ void p2p_fill_kernel(p2p_fill_args f) {
  if ((int)threadIdx.x < f.n) f.table[f.first + threadIdx.x] = f.ptrs[threadIdx.x];
}

/* A device table of the nbufs pointers, filled on stream; freed by the
 * caller in stream order after the kernel that reads it. */
static ncclResult_t p2p_table(void *const *bufs, int nbufs, cudaStream_t stream,
                              char ***table_out) {
  char **table = NULL;
  DEV_CUDA(cudaMallocAsync((void **)&table, (size_t)nbufs * sizeof(char *), stream),
           "allocating a send/recv buffer table");
  for (int first = 0; first < nbufs; first += P2P_FILL) {
    p2p_fill_args f;
    f.table = table;
    f.first = first;
    f.n = nbufs - first < P2P_FILL ? nbufs - first : P2P_FILL;
    for (int i = 0; i < f.n; i++) f.ptrs[i] = (char *)bufs[first + i];
    void *args[] = {&f};
    cudaError_t e =
        cudaLaunchKernel((const void *)p2p_fill_kernel, dim3(1), dim3(P2P_FILL), args, 0, stream);
    if (e != cudaSuccess) {
      WARN("device engine: filling a send/recv buffer table of %d entries: %s", nbufs,
           cudaGetErrorString(e));
      cudaFreeAsync(table, stream);
      return ncclUnhandledCudaError;
    }
  }
  *table_out = table;
  return ncclSuccess;
}

cudaError_t weft_p2p_load(void) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, weft_p2p_kernel);
  return e != cudaSuccess ? e : cudaFuncGetAttributes(&a, p2p_fill_kernel);
}

extern "C" ncclResult_t weft_dev_p2p_launch(const struct weft_dev_plan *plan,
                                            const struct weft_dev_conns *conns, void *const *bufs,
                                            int nbufs, cudaStream_t stream) {
  if (plan->nlanes == 0) return ncclSuccess;
  p2p_args a = {};
  a.x.conns = *conns;
  a.x.lanes = plan->lanes;
  a.x.steps = plan->steps;
  a.x.scratch = plan->scratch;
  char **table = NULL;
  if (nbufs <= WEFT_DEV_P2P_INLINE) {
    for (int i = 0; i < nbufs; i++) a.inl[i] = (char *)bufs[i];
  } else {
    ncclResult_t res = p2p_table(bufs, nbufs, stream, &table);
    if (res != ncclSuccess) return res;
    a.table = table;
  }
  void *args[] = {&a};
  cudaError_t e = cudaLaunchKernel((const void *)weft_p2p_kernel, dim3(plan->nlanes),
                                   dim3(EXEC_THREADS), args, 0, stream);
  if (table != NULL) cudaFreeAsync(table, stream);
  if (e != cudaSuccess) {
    WARN("device engine: rank %d: launching the send/recv kernel (%d peers, %d ops): %s",
         conns->rank, plan->nlanes, nbufs, cudaGetErrorString(e));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}
