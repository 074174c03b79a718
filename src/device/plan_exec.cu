/* The plan executor kernel: one CTA runs one lane of one rank's plan
 * (src/sched/schedule.h) on device buffers, with the Simple protocol over
 * device-memory FIFOs between ranks on the same GPU in the same process.
 *
 * A CTA splits in two halves: the first moves the step's send (wait for a
 * free slot, copy a slot's worth in, publish the tail), the second its
 * receive (wait for the tail, copy or reduce the slot into the destination,
 * publish the head), so a step that sends to one peer and receives from
 * another never waits on itself. Both ends cut a message into slots the
 * same way (the sizes on a link agree in every plan), so slot boundaries
 * match. A LOCAL copy runs on the whole CTA before the send and receive.
 *
 * Waits spin on device memory. That is fine here: the ranks' kernels run
 * concurrently on different streams of one context. Across processes
 * without MPS two contexts time-slice the GPU and a spinning kernel can
 * keep its peer from ever running; a later slice handles that. Every wait
 * is bounded (conns->timeout_ns) and a timeout is reported, not hung. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

#include "device/device.h"

extern "C" {
#include "core/debug.h"
}

#define EXEC_THREADS 512
#define EXEC_HALF (EXEC_THREADS / 2)
#define EXEC_CTRL_WORDS 32 /* head at 0, tail at 16: 128 bytes apart */

enum exec_op { OP_COPY, OP_SUM, OP_PROD, OP_MAX, OP_MIN };

/* ---- Memory ordering ----------------------------------------------------- */

__device__ __forceinline__ uint64_t ld_acquire(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release(uint64_t *p, uint64_t v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
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

/* ---- Element operations ------------------------------------------------- */

template <typename T>
struct elem {
  /* Integers: sum and product wrap (unsigned arithmetic), as NCCL's do. */
  typedef typename std::make_unsigned<T>::type U;
  static __device__ __forceinline__ T apply(int op, T a, T b) {
    switch (op) {
      case OP_SUM: return (T)(U)((U)a + (U)b);
      case OP_PROD: return (T)(U)((U)a * (U)b);
      case OP_MAX: return a > b ? a : b;
      case OP_MIN: return a < b ? a : b;
      default: return b;
    }
  }
  static __device__ __forceinline__ T div(T x, int n) { return (T)(x / (T)n); }
};

template <>
struct elem<float> {
  static __device__ __forceinline__ float apply(int op, float a, float b) {
    switch (op) {
      case OP_SUM: return a + b;
      case OP_PROD: return a * b;
      case OP_MAX: return fmaxf(a, b);
      case OP_MIN: return fminf(a, b);
      default: return b;
    }
  }
  static __device__ __forceinline__ float div(float x, int n) { return x / (float)n; }
};

template <>
struct elem<double> {
  static __device__ __forceinline__ double apply(int op, double a, double b) {
    switch (op) {
      case OP_SUM: return a + b;
      case OP_PROD: return a * b;
      case OP_MAX: return fmax(a, b);
      case OP_MIN: return fmin(a, b);
      default: return b;
    }
  }
  static __device__ __forceinline__ double div(double x, int n) { return x / (double)n; }
};

/* half and bfloat16: widened to float, combined, rounded back once. */
template <>
struct elem<__half> {
  static __device__ __forceinline__ __half apply(int op, __half a, __half b) {
    return op == OP_COPY
               ? b
               : __float2half_rn(elem<float>::apply(op, __half2float(a), __half2float(b)));
  }
  static __device__ __forceinline__ __half div(__half x, int n) {
    return __float2half_rn(__half2float(x) / (float)n);
  }
};

template <>
struct elem<__nv_bfloat16> {
  static __device__ __forceinline__ __nv_bfloat16 apply(int op, __nv_bfloat16 a, __nv_bfloat16 b) {
    return op == OP_COPY ? b
                         : __float2bfloat16_rn(
                               elem<float>::apply(op, __bfloat162float(a), __bfloat162float(b)));
  }
  static __device__ __forceinline__ __nv_bfloat16 div(__nv_bfloat16 x, int n) {
    return __float2bfloat16_rn(__bfloat162float(x) / (float)n);
  }
};

/* dst = a op b over bytes (b alone for OP_COPY), then / nranks when div.
 * b may be a FIFO slot: read through L2 (__ldcg), never a stale L1 line.
 * 16-byte vectors when all three pointers allow, 4 in flight per thread. */
template <typename T, int OP>
__device__ void span(char *dst, const char *a, const char *b, size_t bytes, int div, int t,
                     int nt) {
  const size_t ne = bytes / sizeof(T);
  size_t done = 0;
  if ((((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b) & 15) == 0) {
    const int V = 16 / sizeof(T), U = 4;
    const size_t nv = bytes / 16;
    uint4 *d4 = (uint4 *)dst;
    const uint4 *a4 = (const uint4 *)a, *b4 = (const uint4 *)b;
    size_t i = (size_t)t;
    for (; i + (size_t)(U - 1) * nt < nv; i += (size_t)U * nt) {
      uint4 vb[U], va[U];
#pragma unroll
      for (int u = 0; u < U; u++) vb[u] = __ldcg(b4 + i + (size_t)u * nt);
      if (OP != OP_COPY) {
#pragma unroll
        for (int u = 0; u < U; u++) va[u] = a4[i + (size_t)u * nt];
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (OP != OP_COPY || div) {
          T *x = (T *)&vb[u];
          const T *y = (const T *)&va[u];
#pragma unroll
          for (int k = 0; k < V; k++) {
            T r = OP == OP_COPY ? x[k] : elem<T>::apply(OP, y[k], x[k]);
            x[k] = div ? elem<T>::div(r, div) : r;
          }
        }
        d4[i + (size_t)u * nt] = vb[u];
      }
    }
    for (; i < nv; i += nt) {
      uint4 vb = __ldcg(b4 + i), va = OP != OP_COPY ? a4[i] : vb;
      T *x = (T *)&vb;
      const T *y = (const T *)&va;
#pragma unroll
      for (int k = 0; k < V; k++) {
        T r = OP == OP_COPY ? x[k] : elem<T>::apply(OP, y[k], x[k]);
        x[k] = div ? elem<T>::div(r, div) : r;
      }
      d4[i] = vb;
    }
    done = nv * V;
  }
  T *d = (T *)dst;
  const T *pa = (const T *)a, *pb = (const T *)b;
  for (size_t i = done + t; i < ne; i += nt) {
    T r = OP == OP_COPY ? pb[i] : elem<T>::apply(OP, pa[i], pb[i]);
    d[i] = div ? elem<T>::div(r, div) : r;
  }
}

/* Byte copies (sends, copies without a divide) need no element type. */
__device__ void copy_bytes(char *dst, const char *src, size_t bytes, int t, int nt) {
  if (((uintptr_t)dst & 15) == ((uintptr_t)src & 15)) {
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > bytes) head = bytes;
    if (t < (int)head) dst[t] = src[t];
    span<uint32_t, OP_COPY>(dst + head, NULL, src + head, (bytes - head) & ~(size_t)15, 0, t, nt);
    size_t tail = (bytes - head) & 15, at = bytes - tail;
    if (t < (int)tail) dst[at + t] = src[at + t];
    return;
  }
  for (size_t i = t; i < bytes; i += nt) dst[i] = __ldcg(src + i);
}

template <typename T>
__device__ void span_op(int op, char *dst, const char *a, const char *b, size_t bytes, int div,
                        int t, int nt) {
  switch (op) {
    case OP_SUM: span<T, OP_SUM>(dst, a, b, bytes, div, t, nt); break;
    case OP_PROD: span<T, OP_PROD>(dst, a, b, bytes, div, t, nt); break;
    case OP_MAX: span<T, OP_MAX>(dst, a, b, bytes, div, t, nt); break;
    case OP_MIN: span<T, OP_MIN>(dst, a, b, bytes, div, t, nt); break;
    default: span<T, OP_COPY>(dst, a, b, bytes, div, t, nt); break;
  }
}

/* The one runtime switch on the datatype. */
__device__ void reduce_any(int dt, int op, char *dst, const char *a, const char *b, size_t bytes,
                           int div, int t, int nt) {
  if (op == OP_COPY && !div) {
    copy_bytes(dst, b, bytes, t, nt);
    return;
  }
  switch (dt) {
    case ncclInt8: span_op<int8_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclUint8: span_op<uint8_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclInt32: span_op<int32_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclUint32: span_op<uint32_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclInt64: span_op<int64_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclUint64: span_op<uint64_t>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat16: span_op<__half>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat32: span_op<float>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclFloat64: span_op<double>(op, dst, a, b, bytes, div, t, nt); break;
    case ncclBfloat16: span_op<__nv_bfloat16>(op, dst, a, b, bytes, div, t, nt); break;
    default: break; /* refused at launch */
  }
}

/* ---- The kernel ------------------------------------------------------------ */

struct exec_args {
  struct weft_dev_conns conns;
  const struct weft_dev_lane *lanes;
  const struct weft_step *steps;
  char *scratch;
  char *bufs[2];
  int rank;
  int dt;
  int op;  /* exec_op of the reduction */
  int avg; /* POSTOP divides by nranks */
};

struct exec_conn {
  char *slots;
  uint64_t *head, *tail;
};

__device__ exec_conn conn_of(const exec_args &x, int src, int dst, int ch) {
  const weft_dev_conns &c = x.conns;
  size_t i = ((size_t)src * c.nranks + dst) * c.nchannels + ch;
  uint64_t *ctrl = c.ctrl + i * EXEC_CTRL_WORDS;
  return exec_conn{c.slots + i * c.nslots * c.slot_bytes, ctrl, ctrl + 16};
}

__device__ char *buf_of(const exec_args &x, const weft_dev_lane &l, unsigned idx, size_t off) {
  char *base = idx == WEFT_BUF_SCRATCH ? x.scratch + l.scratch_off : x.bufs[idx];
  return base + off;
}

/* Spins until *p passes the bound (ready(*p)), an error elsewhere, or the
 * timeout; returns 0 when the run must stop. Thread 0 of a half only. */
template <typename Ready>
__device__ int wait_for(const exec_args &x, const uint64_t *p, Ready ready, uint64_t *seen) {
  uint64_t start = 0, limit = x.conns.timeout_ns ? x.conns.timeout_ns : 10000000000ull;
  for (unsigned spins = 0;; spins++) {
    uint64_t v = ld_acquire(p);
    if (ready(v)) {
      *seen = v;
      return 1;
    }
    if ((spins & 1023) == 0) {
      if (*(volatile uint64_t *)x.conns.error != 0) return 0;
      uint64_t t = now_ns();
      if (start == 0)
        start = t;
      else if (t - start > limit) {
        atomicCAS((unsigned long long *)x.conns.error, 0ull, (unsigned long long)(x.rank + 1));
        return 0;
      }
    }
  }
}

__device__ int exec_send(const exec_args &x, const weft_dev_lane &l, const weft_step &s, int t,
                         int *stop) {
  exec_conn c = conn_of(x, x.rank, s.send_peer, l.channel);
  const char *src = buf_of(x, l, s.send_buf, s.send_off);
  const size_t sb = x.conns.slot_bytes;
  const int ns = x.conns.nslots;
  uint64_t pos = *(volatile uint64_t *)c.tail;
  for (size_t off = 0; off < s.send_bytes; off += sb, pos++) {
    size_t n = s.send_bytes - off < sb ? s.send_bytes - off : sb;
    if (t == 0) {
      uint64_t h;
      if (!wait_for(
              x, c.head, [=](uint64_t v) { return pos - v < (uint64_t)ns; }, &h))
        *stop = 1;
    }
    half_sync(1);
    if (*(volatile int *)stop) return 0;
    copy_bytes(c.slots + (pos % ns) * sb, src + off, n, t, EXEC_HALF);
    __threadfence();
    half_sync(1);
    if (t == 0) st_release(c.tail, pos + 1);
  }
  return 1;
}

__device__ int exec_recv(const exec_args &x, const weft_dev_lane &l, const weft_step &s, int t,
                         int *stop) {
  exec_conn c = conn_of(x, s.recv_peer, x.rank, l.channel);
  char *dst = buf_of(x, l, s.dst_buf, s.dst_off);
  const char *loc = (s.flags & WEFT_STEP_REDUCE) ? buf_of(x, l, s.local_buf, s.local_off) : NULL;
  const int op = (s.flags & WEFT_STEP_REDUCE) ? x.op : OP_COPY;
  const int div = (s.flags & WEFT_STEP_POSTOP) && x.avg ? x.conns.nranks : 0;
  const size_t sb = x.conns.slot_bytes;
  const int ns = x.conns.nslots;
  uint64_t pos = *(volatile uint64_t *)c.head;
  for (size_t off = 0; off < s.recv_bytes; off += sb, pos++) {
    size_t n = s.recv_bytes - off < sb ? s.recv_bytes - off : sb;
    if (t == 0) {
      uint64_t tl;
      if (!wait_for(
              x, c.tail, [=](uint64_t v) { return v > pos; }, &tl))
        *stop = 1;
    }
    half_sync(2);
    if (*(volatile int *)stop) return 0;
    reduce_any(x.dt, op, dst + off, loc ? loc + off : NULL, c.slots + (pos % ns) * sb, n, div, t,
               EXEC_HALF);
    half_sync(2);
    if (t == 0) st_release(c.head, pos + 1);
  }
  return 1;
}

__global__ void __launch_bounds__(EXEC_THREADS, 1) weft_plan_kernel(exec_args x) {
  __shared__ int stop;
  const weft_dev_lane l = x.lanes[blockIdx.x];
  const int tid = threadIdx.x;
  if (tid == 0) stop = 0;
  __syncthreads();
  for (uint64_t i = 0; i < l.nsteps; i++) {
    const weft_step s = x.steps[l.first + i];
    const int div = (s.flags & WEFT_STEP_POSTOP) && x.avg ? x.conns.nranks : 0;
    if (s.flags & WEFT_STEP_LOCAL) {
      char *dst = buf_of(x, l, s.dst_buf, s.dst_off);
      const char *src = buf_of(x, l, s.local_buf, s.local_off);
      if (dst != src || div)
        reduce_any(x.dt, OP_COPY, dst, NULL, src, s.recv_bytes, div, tid, EXEC_THREADS);
      __syncthreads();
    }
    if (tid < EXEC_HALF) {
      if (s.flags & WEFT_STEP_SEND) exec_send(x, l, s, tid, &stop);
    } else if (s.flags & WEFT_STEP_RECV) {
      exec_recv(x, l, s, tid - EXEC_HALF, &stop);
    }
    __syncthreads();
    if (stop) return;
    /* A POSTOP on a step that names only its destination. */
    if (div && !(s.flags & (WEFT_STEP_LOCAL | WEFT_STEP_RECV))) {
      char *dst = buf_of(x, l, s.dst_buf, s.dst_off);
      reduce_any(x.dt, OP_COPY, dst, NULL, dst, s.recv_bytes, div, tid, EXEC_THREADS);
      __syncthreads();
    }
  }
}

/* ---- Host side ------------------------------------------------------------- */

#define DEV_CUDA(call, what)                                                \
  do {                                                                      \
    cudaError_t e_ = (call);                                                \
    if (e_ != cudaSuccess) {                                                \
      WARN("device engine: %s failed: %s", (what), cudaGetErrorString(e_)); \
      return ncclUnhandledCudaError;                                        \
    }                                                                       \
  } while (0)

extern "C" ncclResult_t weft_dev_conns_create(int nranks, int nchannels,
                                              struct weft_dev_conns *out) {
  struct weft_dev_conns c = {};
  c.nranks = nranks;
  c.nchannels = nchannels;
  c.nslots = WEFT_DEV_NSLOTS;
  c.slot_bytes = WEFT_DEV_SLOT_BYTES;
  size_t nconn = (size_t)nranks * nranks * nchannels;
  size_t ctrl = nconn * EXEC_CTRL_WORDS * sizeof(uint64_t) + sizeof(uint64_t);
  DEV_CUDA(cudaMalloc((void **)&c.ctrl, ctrl), "cudaMalloc of connection counters");
  c.error = c.ctrl + nconn * EXEC_CTRL_WORDS;
  cudaError_t e = cudaMemset(c.ctrl, 0, ctrl);
  if (e == cudaSuccess) e = cudaMalloc((void **)&c.slots, nconn * c.nslots * c.slot_bytes);
  if (e != cudaSuccess) {
    WARN("device engine: %zu connections of %d x %zu bytes: %s", nconn, c.nslots, c.slot_bytes,
         cudaGetErrorString(e));
    cudaFree(c.ctrl);
    return ncclUnhandledCudaError;
  }
  *out = c;
  return ncclSuccess;
}

extern "C" void weft_dev_conns_destroy(struct weft_dev_conns *conns) {
  cudaFree(conns->slots);
  cudaFree(conns->ctrl);
  *conns = weft_dev_conns{};
}

extern "C" ncclResult_t weft_dev_conns_error(const struct weft_dev_conns *conns, int *failed_out,
                                             int *rank_out) {
  uint64_t v = 0;
  DEV_CUDA(cudaMemcpy(&v, conns->error, sizeof(v), cudaMemcpyDeviceToHost),
           "reading the error word");
  *failed_out = v != 0;
  *rank_out = (int)v - 1;
  return ncclSuccess;
}

extern "C" ncclResult_t weft_dev_plan_upload(const struct weft_plan *plan, cudaStream_t stream,
                                             struct weft_dev_plan *out) {
  struct weft_dev_plan p = {};
  size_t nsteps = 0, scratch = 0;
  for (int i = 0; i < plan->nlanes; i++) nsteps += plan->lanes[i].nsteps;
  size_t lanes_bytes = ((size_t)plan->nlanes * sizeof(weft_dev_lane) + 255) & ~(size_t)255;
  size_t steps_bytes = (nsteps * sizeof(weft_step) + 255) & ~(size_t)255;
  weft_dev_lane *lanes = new weft_dev_lane[plan->nlanes > 0 ? plan->nlanes : 1];
  size_t first = 0;
  for (int i = 0; i < plan->nlanes; i++) {
    const weft_lane *l = &plan->lanes[i];
    lanes[i] = weft_dev_lane{first, l->nsteps, scratch, l->channel, 0};
    first += l->nsteps;
    scratch += (l->scratch_bytes + 255) & ~(size_t)255;
  }
  size_t total = lanes_bytes + steps_bytes + scratch;
  /* Stream-ordered, so neither this nor the free after the launch waits
   * for kernels that are running (they may be spinning on a peer). */
  cudaError_t e = cudaMallocAsync(&p.mem, total > 0 ? total : 1, stream);
  p.nlanes = plan->nlanes;
  p.nsteps = nsteps;
  p.lanes = (weft_dev_lane *)p.mem;
  p.steps = (weft_step *)((char *)p.mem + lanes_bytes);
  p.scratch = (char *)p.mem + lanes_bytes + steps_bytes;
  /* Pageable sources: cudaMemcpyAsync returns once it has staged them, so
   * the host plan and the lane table may go right after. */
  if (e == cudaSuccess && plan->nlanes > 0)
    e = cudaMemcpyAsync(p.lanes, lanes, plan->nlanes * sizeof(weft_dev_lane),
                        cudaMemcpyHostToDevice, stream);
  first = 0;
  for (int i = 0; e == cudaSuccess && i < plan->nlanes; i++) {
    const weft_lane *l = &plan->lanes[i];
    if (l->nsteps > 0)
      e = cudaMemcpyAsync(p.steps + first, l->steps, l->nsteps * sizeof(weft_step),
                          cudaMemcpyHostToDevice, stream);
    first += l->nsteps;
  }
  delete[] lanes;
  if (e != cudaSuccess) {
    WARN("device engine: copying a plan of %d lanes, %zu steps to the device: %s", plan->nlanes,
         nsteps, cudaGetErrorString(e));
    if (p.mem != NULL) cudaFreeAsync(p.mem, stream);
    return ncclUnhandledCudaError;
  }
  *out = p;
  return ncclSuccess;
}

extern "C" void weft_dev_plan_free(struct weft_dev_plan *plan) {
  cudaFree(plan->mem);
  *plan = weft_dev_plan{};
}

extern "C" void weft_dev_plan_free_async(struct weft_dev_plan *plan, cudaStream_t stream) {
  cudaFreeAsync(plan->mem, stream);
  *plan = weft_dev_plan{};
}

extern "C" ncclResult_t weft_dev_plan_launch(const struct weft_dev_plan *plan,
                                             const struct weft_dev_conns *conns, int rank,
                                             const void *sendbuff, void *recvbuff,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             cudaStream_t stream) {
  static const int ops[] = {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_SUM};
  if ((int)op < 0 || (int)op >= ncclNumOps || (int)datatype < 0 || (int)datatype > ncclBfloat16) {
    WARN("device engine: rank %d: datatype %d / op %d is not supported yet", rank, (int)datatype,
         (int)op);
    return ncclInvalidArgument;
  }
  if (plan->nlanes == 0) return ncclSuccess;
  exec_args x = {};
  x.conns = *conns;
  x.lanes = plan->lanes;
  x.steps = plan->steps;
  x.scratch = plan->scratch;
  x.bufs[0] = (char *)sendbuff;
  x.bufs[1] = (char *)recvbuff;
  x.rank = rank;
  x.dt = (int)datatype;
  x.op = ops[op];
  x.avg = op == ncclAvg;
  weft_plan_kernel<<<plan->nlanes, EXEC_THREADS, 0, stream>>>(x);
  DEV_CUDA(cudaGetLastError(), "launching the plan kernel");
  return ncclSuccess;
}
