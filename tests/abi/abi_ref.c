/* The ABI table of NVIDIA's nccl.h, the reference weft must match.
 *
 * Compile with the CUDA toolkit's include directory (where NVIDIA's nccl.h
 * and cuda_runtime.h live) and without weft's include/ directory. */
#include <nccl.h>

#ifdef WEFT_NCCL_H
#error "abi_ref.c found weft's nccl.h; build it with only the CUDA toolkit's include directory"
#endif

#include "abi_common.h"

ABI_DEFINE_TABLE(abi_ref_table)
