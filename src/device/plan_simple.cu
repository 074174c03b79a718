/* The plan kernels for the Simple protocol (plan_kernel.cuh: one plan, and a
 * group's plans fused into one launch), in a translation unit of its own
 * so the two protocols compile in parallel. */
#include "device/plan_kernel.cuh"

WEFT_PLAN_KERNELS(simple, WEFT_PROTO_SIMPLE)
