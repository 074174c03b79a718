/* The plan executor kernel, a template on the protocol: one CTA runs one
 * lane of one rank's plan (src/sched/schedule.h) on device buffers, over
 * device-memory FIFOs with the launch's protocol: Simple (prims.cuh),
 * LL (proto_ll.cuh) or LL128 (proto_ll128.cuh).
 *
 * A CTA splits in two halves: the first moves the step's send (wait for a
 * free slot, copy a slot's worth in, publish the tail), the second its
 * receive (wait for the tail, copy or reduce the slot into the destination,
 * publish the head), so a step that sends to one peer and receives from
 * another never waits on itself. Both ends cut a message into slots the
 * same way (the sizes on a link agree in every plan, and every rank runs
 * the launch with the same protocol), so slot boundaries match. A LOCAL
 * copy runs on the whole CTA before the send and receive.
 *
 * Waits spin on device memory, so ranks whose kernels exchange data must
 * run at the same time: streams of one context, other GPUs, or processes
 * under MPS. src/exec/cuda.c never launches this kernel between processes
 * that time-slice one GPU. Every wait is bounded (conns.timeout_ns) and a
 * timeout is reported, not hung.
 *
 * plan_simple.cu compiles Simple's kernels and plan_ll.cu LL's and
 * LL128's (translation units that build in parallel); plan_exec.cu
 * launches them. */
#ifndef WEFT_DEVICE_PLAN_KERNEL_CUH
#define WEFT_DEVICE_PLAN_KERNEL_CUH

#include "device/prims.cuh"
#include "device/proto_ll.cuh"
#include "device/proto_ll128.cuh"

/* Runs lane l of the plan x describes on this CTA; 0 when the run must
 * stop (a wait failed, or an error or abort elsewhere). */
template <int PROTO>
__device__ __forceinline__ int run_lane(const exec_args &x, const weft_dev_lane &l, int *stop) {
  const int tid = threadIdx.x;
  for (uint64_t i = 0; i < l.nsteps; i++) {
    const weft_step &s = x.steps[l.first + i];
    const int div = (s.flags & WEFT_STEP_POSTOP) && x.avg ? x.conns.nranks : 0;
    if (s.flags & WEFT_STEP_LOCAL) {
      char *dst = buf_of(x, l, s.dst_buf, s.dst_off);
      const char *src = buf_of(x, l, s.local_buf, s.local_off);
      if (dst != src || div)
        reduce_any(x.dt, OP_COPY, dst, NULL, src, s.recv_bytes, div, tid, EXEC_THREADS);
      __syncthreads();
    }
    if (tid < EXEC_HALF) {
      if (s.flags & WEFT_STEP_SEND) {
        if constexpr (PROTO == WEFT_PROTO_LL)
          flag_send<ll_proto>(x, l, s, tid, stop);
        else if constexpr (PROTO == WEFT_PROTO_LL128)
          flag_send<ll128_proto>(x, l, s, tid, stop);
        else
          exec_send(x, l, s, tid, stop);
      }
    } else if (s.flags & WEFT_STEP_RECV) {
      if constexpr (PROTO == WEFT_PROTO_LL)
        flag_recv<ll_proto>(x, l, s, tid - EXEC_HALF, stop);
      else if constexpr (PROTO == WEFT_PROTO_LL128)
        flag_recv<ll128_proto>(x, l, s, tid - EXEC_HALF, stop);
      else
        exec_recv(x, l, s, tid - EXEC_HALF, stop);
    }
    __syncthreads();
    if (*stop) return 0;
    /* A POSTOP on a step that names only its destination. */
    if (div && !(s.flags & (WEFT_STEP_LOCAL | WEFT_STEP_RECV))) {
      char *dst = buf_of(x, l, s.dst_buf, s.dst_off);
      reduce_any(x.dt, OP_COPY, dst, NULL, dst, s.recv_bytes, div, tid, EXEC_THREADS);
      __syncthreads();
    }
  }
  return 1;
}

/* One kernel per protocol, so neither's register pressure reaches the
 * other (the kernel runs at the 128-register cap of 512 threads). */
template <int PROTO>
__global__ void __launch_bounds__(EXEC_THREADS, 1)
    weft_plan_kernel(const __grid_constant__ exec_args x) {
  __shared__ int stop;
  if (threadIdx.x == 0) stop = 0;
  __syncthreads();
  run_lane<PROTO>(x, x.lanes[blockIdx.x], &stop);
}

/* ---- A group's collectives in one launch ---------------------------------- */

struct fused_args {
  struct weft_dev_conns conns;
  unsigned *barrier; /* [0] arrivals, [1] generation (weft_dev_barrier_create) */
  int nwork;
  struct exec_work work[WEFT_DEV_FUSE_MAX];
  int nlanes[WEFT_DEV_FUSE_MAX]; /* lanes of work[i]'s plan */
};

/* Every CTA of the launch waits here until all have arrived: the next
 * collective may use the links this one used. The last to arrive resets
 * the count and bumps the generation, so the words serve any number of
 * launches (and CUDA graph replays) one after another. 0: the run must
 * stop (an error or abort while waiting; the wait is bounded too). */
__device__ inline int grid_barrier(const exec_args &x, unsigned *barrier, int *stop) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned *gen = barrier + 1;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(barrier, 1u) == gridDim.x - 1) {
      barrier[0] = 0;
      __threadfence();
      atomicAdd(barrier + 1, 1u);
    } else {
      const wait_site w = {WEFT_DEV_WAIT_GROUP, x.conns.rank, -1, WEFT_PROTO_SIMPLE, 0};
      uint64_t start = 0;
      for (unsigned spins = 0; *gen == g; spins++)
        if (wait_check_due(spins) && !wait_check(x, &start, w, g)) {
          stop_set(stop);
          break;
        }
    }
    __threadfence();
  }
  __syncthreads();
  return !*stop;
}

template <int PROTO>
__global__ void __launch_bounds__(EXEC_THREADS, 1)
    weft_fused_kernel(const __grid_constant__ fused_args a) {
  __shared__ int stop;
  __shared__ exec_args x;
  if (threadIdx.x == 0) {
    stop = 0;
    x.conns = a.conns;
  }
  for (int w = 0; w < a.nwork; w++) {
    __syncthreads();
    if ((int)blockIdx.x < a.nlanes[w]) {
      if (threadIdx.x == 0) static_cast<exec_work &>(x) = a.work[w];
      __syncthreads();
      if (!run_lane<PROTO>(x, x.lanes[blockIdx.x], &stop)) return;
    }
    if (w + 1 < a.nwork && !grid_barrier(x, a.barrier, &stop)) return;
  }
}

/* Launchers of the two instantiations, one per translation unit. Each
 * returns its launch's own status (cudaLaunchKernel), not whatever error
 * an earlier runtime call left pending in the thread. */
cudaError_t weft_plan_launch_simple(exec_args x, int nlanes, cudaStream_t stream);
cudaError_t weft_plan_launch_ll(exec_args x, int nlanes, cudaStream_t stream);
cudaError_t weft_fused_launch_simple(fused_args a, int nctas, cudaStream_t stream);
cudaError_t weft_fused_launch_ll(fused_args a, int nctas, cudaStream_t stream);
cudaError_t weft_plan_launch_ll128(exec_args x, int nlanes, cudaStream_t stream);

/* One protocol's plan-kernel launcher. */
#define WEFT_PLAN_LAUNCHER(name, PROTO)                                               \
  cudaError_t weft_plan_launch_##name(exec_args x, int nlanes, cudaStream_t stream) { \
    void *args[] = {&x};                                                              \
    return cudaLaunchKernel((const void *)weft_plan_kernel<PROTO>, dim3(nlanes),      \
                            dim3(EXEC_THREADS), args, 0, stream);                     \
  }

/* Defines one protocol's plan-kernel launcher and loader. */
#define WEFT_PLAN_KERNEL(name, PROTO)                             \
  WEFT_PLAN_LAUNCHER(name, PROTO)                                 \
  cudaError_t weft_plan_load_##name(void) {                       \
    cudaFuncAttributes attr;                                      \
    return cudaFuncGetAttributes(&attr, weft_plan_kernel<PROTO>); \
  }

/* Defines one protocol's launchers (plan and fused) and loader;
 * plan_simple.cu and plan_ll.cu each hold one. LL128 (WEFT_PLAN_KERNEL,
 * in plan_ll.cu) has the plan kernel only: the engine never fuses its
 * collectives (exec/engine_cuda.c). */
#define WEFT_PLAN_KERNELS(name, PROTO)                                                    \
  WEFT_PLAN_LAUNCHER(name, PROTO)                                                         \
  cudaError_t weft_fused_launch_##name(fused_args a, int nctas, cudaStream_t stream) {    \
    void *args[] = {&a};                                                                  \
    return cudaLaunchKernel((const void *)weft_fused_kernel<PROTO>, dim3(nctas),          \
                            dim3(EXEC_THREADS), args, 0, stream);                         \
  }                                                                                       \
  cudaError_t weft_plan_load_##name(void) {                                               \
    cudaFuncAttributes attr;                                                              \
    cudaError_t e = cudaFuncGetAttributes(&attr, weft_plan_kernel<PROTO>);                \
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&attr, weft_fused_kernel<PROTO>); \
  }

/* Each translation unit's kernels loaded into the current context
 * (weft_dev_load_kernels). */
cudaError_t weft_plan_load_simple(void);
cudaError_t weft_plan_load_ll(void);
cudaError_t weft_plan_load_ll128(void);
cudaError_t weft_p2p_load(void);
cudaError_t weft_local_load(void);
cudaError_t weft_direct_load(void);
cudaError_t weft_direct_p2p_load(void);
cudaError_t weft_direct_ll_load(void);

#endif
