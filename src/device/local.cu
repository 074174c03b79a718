/* Kernels that work on one rank's own memory, outside the FIFOs: the
 * scaling that starts a PreMulSum, the rank-ordered reduction that ends a
 * Direct AllReduce, and the copies of a communicator of one rank. The
 * first two are small grid-stride loops over elements with the element
 * operations of reduce.cuh, so their numbers are the plan kernel's and the
 * host engine's (src/exec/reduce.c). Each is queued
 * on the caller's stream next to the plan kernel, so stream order replaces
 * any completion counter and CUDA graph capture records them as they are. */
#include <string.h>

#include "device/dev_check.cuh"
#include "device/device.h"
#include "device/reduce.cuh"

#define LOCAL_THREADS 256
#define LOCAL_MAX_BLOCKS 1024

/* Enough CTAs for a few elements per thread, never more than a full GPU's
 * worth: the loops stride over the rest. */
static unsigned local_blocks(size_t count) {
  size_t per_block = (size_t)LOCAL_THREADS * 4;
  size_t b = (count + per_block - 1) / per_block;
  return (unsigned)(b < 1 ? 1 : b > LOCAL_MAX_BLOCKS ? LOCAL_MAX_BLOCKS : b);
}

/* Calls F<T>::run(args...) for the element type of dt, its launch's
 * status in *err; false for a datatype the engine does not know. */
template <template <typename> class F, typename... A>
static bool with_type(ncclDataType_t dt, cudaError_t *err, A... args) {
  switch (dt) {
    case ncclInt8: *err = F<int8_t>::run(args...); return true;
    case ncclUint8: *err = F<uint8_t>::run(args...); return true;
    case ncclInt32: *err = F<int32_t>::run(args...); return true;
    case ncclUint32: *err = F<uint32_t>::run(args...); return true;
    case ncclInt64: *err = F<int64_t>::run(args...); return true;
    case ncclUint64: *err = F<uint64_t>::run(args...); return true;
    case ncclFloat16: *err = F<__half>::run(args...); return true;
    case ncclFloat32: *err = F<float>::run(args...); return true;
    case ncclFloat64: *err = F<double>::run(args...); return true;
    case ncclBfloat16: *err = F<__nv_bfloat16>::run(args...); return true;
    case ncclFloat8e4m3: *err = F<__nv_fp8_e4m3>::run(args...); return true;
    case ncclFloat8e5m2: *err = F<__nv_fp8_e5m2>::run(args...); return true;
    default: return false;
  }
}

/* ---- PreMulSum's scaling ------------------------------------------------- */

/* The scalar is read here, when the kernel runs, so a device scalar that
 * the caller updates between enqueue and run (or between graph replays)
 * is the one used, as NCCL does. The product is the plan kernel's OP_PROD
 * (src[i] * s, rounded once to T), which is weft_scale_host's formula. */
template <typename T>
__global__ void __launch_bounds__(LOCAL_THREADS)
    scale_kernel(T *dst, const T *src, size_t count, const T *scalar_ptr, T scalar_value) {
  const T s = scalar_ptr != NULL ? *scalar_ptr : scalar_value;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
    dst[i] = elem<T>::apply(OP_PROD, src[i], s);
}

template <typename T>
struct scale_launch {
  static cudaError_t run(void *dst, const void *src, size_t count, const weft_dev_scalar *scalar,
                         cudaStream_t stream) {
    T value;
    memcpy(&value, scalar->value, sizeof(T));
    T *d = (T *)dst;
    const T *s = (const T *)src, *sp = (const T *)scalar->ptr;
    void *args[] = {&d, &s, &count, &sp, &value};
    return cudaLaunchKernel((const void *)scale_kernel<T>, dim3(local_blocks(count)),
                            dim3(LOCAL_THREADS), args, 0, stream);
  }
};

extern "C" ncclResult_t weft_dev_scale(void *dst, const void *src, size_t count,
                                       ncclDataType_t datatype,
                                       const struct weft_dev_scalar *scalar, cudaStream_t stream) {
  if (count == 0) return ncclSuccess;
  cudaError_t err = cudaSuccess;
  if (!with_type<scale_launch>(datatype, &err, dst, src, count, scalar, stream)) {
    WARN("device engine: PreMulSum of datatype %d is not supported", (int)datatype);
    return ncclInvalidArgument;
  }
  DEV_CUDA(err, "launching the PreMulSum scaling kernel");
  return ncclSuccess;
}

/* ---- Direct: the arrivals reduced in rank order ------------------------- */

struct direct_args {
  const weft_dev_lane *lanes;
  const char *scratch;
  const void *in;
  void *out;
  size_t count;
  int rank;
  int nranks;
  int op;  /* exec_op */
  int div; /* nranks for avg, else 0 */
};

/* Element i: rank 0's value op rank 1's, then op rank 2's, ... each step
 * rounded to T, exactly the host engine's weft_reduce_host sequence, then
 * avg's divide. A thread reads every input of element i before it writes
 * out[i], so in place needs no copy of the input. The sources sit in
 * shared memory: src[k] is rank k's input (this rank's sendbuff, or the
 * scratch of the lane that received from k, lane (k - rank - 1) mod n as
 * weft_direct_plan lays them out). */
template <typename T, int OP>
__device__ void direct_loop(const direct_args &a, const T *const *src) {
  T *out = (T *)a.out;
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < a.count; i += stride) {
    T acc = src[0][i];
    for (int k = 1; k < a.nranks; k++) acc = elem<T>::apply(OP, acc, src[k][i]);
    out[i] = a.div ? elem<T>::div(acc, a.div) : acc;
  }
}

template <typename T>
__global__ void __launch_bounds__(LOCAL_THREADS) direct_kernel(direct_args a) {
  extern __shared__ const void *direct_src[];
  for (int k = threadIdx.x; k < a.nranks; k += blockDim.x) {
    int lane = (k - a.rank - 1 + a.nranks) % a.nranks;
    direct_src[k] = k == a.rank ? a.in : (const void *)(a.scratch + a.lanes[lane].scratch_off);
  }
  __syncthreads();
  const T *const *src = (const T *const *)direct_src;
  switch (a.op) {
    case OP_SUM: direct_loop<T, OP_SUM>(a, src); break;
    case OP_PROD: direct_loop<T, OP_PROD>(a, src); break;
    case OP_MAX: direct_loop<T, OP_MAX>(a, src); break;
    case OP_MIN: direct_loop<T, OP_MIN>(a, src); break;
    default: break;
  }
}

template <typename T>
struct direct_launch {
  static cudaError_t run(direct_args a, cudaStream_t stream) {
    size_t shared = (size_t)a.nranks * sizeof(void *);
    void *args[] = {&a};
    return cudaLaunchKernel((const void *)direct_kernel<T>, dim3(local_blocks(a.count)),
                            dim3(LOCAL_THREADS), args, shared, stream);
  }
};

/* ---- One rank's copy ---------------------------------------------------- */

/* Through nccl-tests on an H100, one rank's out-of-place calls of up to
 * 32 KiB took 0.5-1.5 us less as this kernel than as cudaMemcpyAsync;
 * 128-512 KiB were even and 2-8 MiB 1.2-1.5 us slower (docs/PERFORMANCE.md,
 * "Fifteenth pass"). Words of 16 bytes, four in flight per thread. */
#define COPY_KERNEL_MAX (64u << 10)
#define COPY_BYTES_MAX 2048u /* not 16-byte aligned: byte by byte, this far */

template <typename W>
__global__ void __launch_bounds__(LOCAL_THREADS) copy_kernel(W *dst, const W *src, size_t n) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) {
    W a = src[i], b = src[i + stride], c = src[i + 2 * stride], d = src[i + 3 * stride];
    dst[i] = a;
    dst[i + stride] = b;
    dst[i + 2 * stride] = c;
    dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = src[i];
}

template <typename W>
static cudaError_t copy_launch(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
  W *d = (W *)dst;
  const W *s = (const W *)src;
  size_t n = bytes / sizeof(W);
  /* 16 words a thread (four passes of four), bytes four: at most 64 KiB
   * (COPY_KERNEL_MAX) takes one CTA, at most 2 KiB in bytes two. */
  size_t per_block = (size_t)LOCAL_THREADS * 4 * (sizeof(W) == 1 ? 1 : 4);
  size_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  void *args[] = {&d, &s, &n};
  return cudaLaunchKernel((const void *)copy_kernel<W>, dim3((unsigned)blocks),
                          dim3(LOCAL_THREADS), args, 0, stream);
}

extern "C" cudaError_t weft_dev_copy(void *dst, const void *src, size_t bytes,
                                     cudaStream_t stream) {
  if (bytes == 0 || dst == src) return cudaSuccess;
  uintptr_t align = (uintptr_t)dst | (uintptr_t)src | (uintptr_t)bytes;
  if (bytes <= COPY_KERNEL_MAX && align % 16 == 0)
    return copy_launch<uint4>(dst, src, bytes, stream);
  if (bytes <= COPY_BYTES_MAX) return copy_launch<unsigned char>(dst, src, bytes, stream);
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
}

/* ---- Loading ------------------------------------------------------------ */

template <typename T>
struct local_load_type {
  static cudaError_t run() {
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, scale_kernel<T>);
    return e != cudaSuccess ? e : cudaFuncGetAttributes(&a, direct_kernel<T>);
  }
};

cudaError_t weft_local_load(void) {
  cudaFuncAttributes a;
  cudaError_t e = cudaFuncGetAttributes(&a, copy_kernel<uint4>);
  if (e == cudaSuccess) e = cudaFuncGetAttributes(&a, copy_kernel<unsigned char>);
  if (e != cudaSuccess) return e;
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    cudaError_t err = cudaSuccess;
    with_type<local_load_type>((ncclDataType_t)dt, &err);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

extern "C" ncclResult_t weft_dev_direct_reduce(const struct weft_dev_plan *plan, int rank,
                                               int nranks, const void *sendbuff, void *recvbuff,
                                               size_t count, ncclDataType_t datatype,
                                               ncclRedOp_t op, cudaStream_t stream) {
  static const int ops[] = {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_SUM};
  if (count == 0) return ncclSuccess;
  if ((int)op < 0 || (int)op >= ncclNumOps || plan->nlanes != nranks - 1 ||
      (size_t)nranks * sizeof(void *) > 48 * 1024) {
    WARN(
        "device engine: rank %d: a Direct reduction of op %d over %d ranks with a %d-lane plan "
        "is not supported",
        rank, (int)op, nranks, plan->nlanes);
    return ncclInvalidArgument;
  }
  direct_args a;
  a.lanes = plan->lanes;
  a.scratch = plan->scratch;
  a.in = sendbuff;
  a.out = recvbuff;
  a.count = count;
  a.rank = rank;
  a.nranks = nranks;
  a.op = ops[op];
  a.div = op == ncclAvg ? nranks : 0;
  cudaError_t err = cudaSuccess;
  if (!with_type<direct_launch>(datatype, &err, a, stream)) {
    WARN("device engine: rank %d: a Direct reduction of datatype %d is not supported", rank,
         (int)datatype);
    return ncclInvalidArgument;
  }
  DEV_CUDA(err, "launching the Direct reduction kernel");
  return ncclSuccess;
}
