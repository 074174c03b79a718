/* The plan kernels for the LL protocol (plan_kernel.cuh: one plan, and a
 * group's plans fused into one launch) and LL128's plan kernel (it has no
 * fused one), in a translation unit apart from Simple's so the two build in
 * parallel. LL128 shares this one: alone it cost 17 CPU-seconds of build,
 * here 9 (one front end, docs/CUDA.md, "Build time"). */
#include "device/plan_kernel.cuh"

WEFT_PLAN_KERNELS(ll, WEFT_PROTO_LL)
WEFT_PLAN_KERNEL(ll128, WEFT_PROTO_LL128)
