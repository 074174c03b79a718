/* Launches a rank's plan, or a group's plans fused: the checks, the
 * kernel's arguments, and the protocol's kernel (plan_kernel.cuh, compiled
 * in plan_simple.cu and plan_ll.cu). And loads every kernel of the engine
 * up front. */
#include "device/dev_check.cuh"
#include "device/plan_kernel.cuh"

/* Whether plan can run on conns with datatype and op (WARNs why not). */
static ncclResult_t launch_check(const struct weft_dev_plan *plan,
                                 const struct weft_dev_conns *conns, ncclDataType_t datatype,
                                 ncclRedOp_t op) {
  /* PreMulSum arrives here as ncclSum over an input already scaled
   * (weft_dev_scale), so only the built-in ops are left to refuse. */
  if ((int)op < 0 || (int)op >= ncclNumOps || (int)datatype < 0 || (int)datatype >= ncclNumTypes) {
    WARN("device engine: rank %d: datatype %d / op %d is not supported", conns->rank, (int)datatype,
         (int)op);
    return ncclInvalidArgument;
  }
  /* LL stages a reduction in the Simple slot of the same position; LL128
   * stages at most what that slot holds (ll128_payload), in whole lines. */
  const int ll = plan->proto == WEFT_PROTO_LL, ll128 = plan->proto == WEFT_PROTO_LL128;
  if ((plan->proto != WEFT_PROTO_SIMPLE && !ll && !ll128) ||
      (ll && (conns->ll_slot_bytes < 16 || conns->ll_slot_bytes % 16 != 0 ||
              conns->ll_slot_bytes / 2 > conns->slot_bytes)) ||
      (ll128 && (!conns->ll128 || conns->ll_slot_bytes < 128 ||
                 conns->ll_slot_bytes % 128 != 0 || conns->slot_bytes < 120))) {
    WARN("device engine: rank %d: protocol %d cannot run on slots of %zu / LL %zu bytes%s",
         conns->rank, plan->proto, conns->slot_bytes, conns->ll_slot_bytes,
         ll128 && !conns->ll128 ? " (the inboxes have no LL128 slots)" : "");
    return ncclInternalError;
  }
  return ncclSuccess;
}

/* What the kernel reads of plan run on sendbuff and recvbuff (launch_check
 * passed). */
static exec_work work_of(const struct weft_dev_plan *plan, const void *sendbuff, void *recvbuff,
                         ncclDataType_t datatype, ncclRedOp_t op) {
  exec_work w = {};
  w.lanes = plan->lanes;
  w.steps = plan->steps;
  w.scratch = plan->scratch;
  w.bufs[0] = (char *)sendbuff;
  w.bufs[1] = (char *)recvbuff;
  w.dt = (int)datatype;
  w.op = exec_op_of(op);
  w.avg = op == ncclAvg;
  return w;
}

extern "C" ncclResult_t weft_dev_plan_launch(const struct weft_dev_plan *plan,
                                             const struct weft_dev_conns *conns,
                                             const void *sendbuff, void *recvbuff,
                                             ncclDataType_t datatype, ncclRedOp_t op,
                                             cudaStream_t stream) {
  ncclResult_t res = launch_check(plan, conns, datatype, op);
  if (res != ncclSuccess) return res;
  if (plan->nlanes == 0) return ncclSuccess;
  exec_args x = {};
  static_cast<exec_work &>(x) = work_of(plan, sendbuff, recvbuff, datatype, op);
  x.conns = *conns;
  DEV_CUDA(plan->proto == WEFT_PROTO_LL      ? weft_plan_launch_ll(x, plan->nlanes, stream)
           : plan->proto == WEFT_PROTO_LL128 ? weft_plan_launch_ll128(x, plan->nlanes, stream)
                                             : weft_plan_launch_simple(x, plan->nlanes, stream),
           "launching the plan kernel");
  return ncclSuccess;
}

extern "C" ncclResult_t weft_dev_fused_launch(const struct weft_dev_fused_coll *colls, int n,
                                              const struct weft_dev_conns *conns, unsigned *barrier,
                                              cudaStream_t stream) {
  if (n < 1 || n > WEFT_DEV_FUSE_MAX || barrier == NULL) {
    WARN("device engine: rank %d: a fused launch of %d collectives (1..%d, with a barrier)",
         conns->rank, n, WEFT_DEV_FUSE_MAX);
    return ncclInternalError;
  }
  fused_args a = {};
  a.conns = *conns;
  a.barrier = barrier;
  a.nwork = n;
  int nctas = 0, proto = colls[0].plan->proto;
  for (int i = 0; i < n; i++) {
    const weft_dev_fused_coll &c = colls[i];
    ncclResult_t res = launch_check(c.plan, conns, c.datatype, c.op);
    if (res == ncclSuccess && c.plan->proto == WEFT_PROTO_LL128) {
      WARN("device engine: rank %d: LL128 has no fused kernel (its collectives launch alone)",
           conns->rank);
      res = ncclInternalError;
    }
    if (res == ncclSuccess && c.plan->proto != proto) {
      WARN("device engine: rank %d: a fused launch mixes protocols %d and %d", conns->rank, proto,
           c.plan->proto);
      res = ncclInternalError;
    }
    if (res != ncclSuccess) return res;
    a.work[i] = work_of(c.plan, c.sendbuff, c.recvbuff, c.datatype, c.op);
    a.nlanes[i] = c.plan->nlanes;
    if (c.plan->nlanes > nctas) nctas = c.plan->nlanes;
  }
  if (nctas == 0) return ncclSuccess;
  cudaError_t e = proto == WEFT_PROTO_LL ? weft_fused_launch_ll(a, nctas, stream)
                                         : weft_fused_launch_simple(a, nctas, stream);
  if (e != cudaSuccess) {
    WARN(
        "device engine: rank %d: launching the fused plan kernel (%d collectives, %d CTAs, %zu "
        "bytes of arguments) failed: %s",
        conns->rank, n, nctas, sizeof(a), cudaGetErrorString(e));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

extern "C" ncclResult_t weft_dev_barrier_create(unsigned **out) {
  unsigned *b = NULL;
  DEV_CUDA(cudaMalloc((void **)&b, 2 * sizeof(unsigned)), "allocating a launch barrier");
  cudaError_t e = cudaMemset(b, 0, 2 * sizeof(unsigned));
  if (e != cudaSuccess) {
    cudaFree(b);
    DEV_CUDA(e, "zeroing a launch barrier");
  }
  *out = b;
  return ncclSuccess;
}

extern "C" void weft_dev_barrier_destroy(unsigned *barrier) {
  if (barrier != NULL) cudaFree(barrier);
}

extern "C" ncclResult_t weft_dev_load_kernels(void) {
  cudaError_t (*const loads[])(void) = {
      weft_plan_load_simple, weft_plan_load_ll,    weft_plan_load_ll128, weft_p2p_load,
      weft_local_load,       weft_direct_load,     weft_direct_p2p_load, weft_direct_ll_load};
  for (size_t i = 0; i < sizeof(loads) / sizeof(loads[0]); i++)
    DEV_CUDA(loads[i](), "loading the engine's kernels (cudaFuncGetAttributes)");
  return ncclSuccess;
}
