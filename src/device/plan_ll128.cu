/* The plan kernel for the LL128 protocol (plan_kernel.cuh; no fused
 * kernel: the engine launches LL128 collectives one at a time), in a
 * translation unit of its own so the protocols compile in parallel. */
#include "device/plan_kernel.cuh"

WEFT_PLAN_KERNEL(ll128, WEFT_PROTO_LL128)
