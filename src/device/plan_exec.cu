/* The plan executor kernel: one CTA runs one lane of one rank's plan
 * (src/sched/schedule.h) on device buffers, over device-memory FIFOs with
 * the launch's protocol: Simple (prims.cuh) or LL (proto_ll.cuh).
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
 * timeout is reported, not hung. */
#include "device/dev_check.cuh"
#include "device/prims.cuh"
#include "device/proto_ll.cuh"

/* One kernel per protocol, so neither's register pressure reaches the
 * other (the kernel runs at the 128-register cap of 512 threads). */
template <int PROTO>
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
      if ((s.flags & WEFT_STEP_SEND) && PROTO == WEFT_PROTO_LL)
        ll_send(x, l, s, tid, &stop);
      else if (s.flags & WEFT_STEP_SEND)
        exec_send(x, l, s, tid, &stop);
    } else if (s.flags & WEFT_STEP_RECV) {
      if (PROTO == WEFT_PROTO_LL)
        ll_recv(x, l, s, tid - EXEC_HALF, &stop);
      else
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

extern "C" ncclResult_t weft_dev_plan_launch(const struct weft_dev_plan *plan,
                                             const struct weft_dev_conns *conns,
                                             const void *sendbuff, void *recvbuff,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             cudaStream_t stream) {
  static const int ops[] = {OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_SUM};
  /* PreMulSum arrives here as ncclSum over an input already scaled
   * (weft_dev_scale), so only the built-in ops are left to refuse. */
  if ((int)op < 0 || (int)op >= ncclNumOps || (int)datatype < 0 || (int)datatype >= ncclNumTypes) {
    WARN("device engine: rank %d: datatype %d / op %d is not supported", conns->rank, (int)datatype,
         (int)op);
    return ncclInvalidArgument;
  }
  /* LL stages a reduction in the Simple slot of the same position. */
  if ((plan->proto != WEFT_PROTO_SIMPLE && plan->proto != WEFT_PROTO_LL) ||
      (plan->proto == WEFT_PROTO_LL &&
       (conns->ll_slot_bytes < 16 || conns->ll_slot_bytes % 16 != 0 ||
        conns->ll_slot_bytes / 2 > conns->slot_bytes))) {
    WARN("device engine: rank %d: protocol %d cannot run on slots of %zu / LL %zu bytes",
         conns->rank, plan->proto, conns->slot_bytes, conns->ll_slot_bytes);
    return ncclInternalError;
  }
  if (plan->nlanes == 0) return ncclSuccess;
  exec_args x = {};
  x.conns = *conns;
  x.lanes = plan->lanes;
  x.steps = plan->steps;
  x.scratch = plan->scratch;
  x.bufs[0] = (char *)sendbuff;
  x.bufs[1] = (char *)recvbuff;
  x.dt = (int)datatype;
  x.op = ops[op];
  x.avg = op == ncclAvg;
  if (plan->proto == WEFT_PROTO_LL)
    weft_plan_kernel<WEFT_PROTO_LL><<<plan->nlanes, EXEC_THREADS, 0, stream>>>(x);
  else
    weft_plan_kernel<WEFT_PROTO_SIMPLE><<<plan->nlanes, EXEC_THREADS, 0, stream>>>(x);
  DEV_CUDA(cudaGetLastError(), "launching the plan kernel");
  return ncclSuccess;
}
