/* The ABI table of weft's include/nccl.h, compared with abi_ref.c's. */
#include "nccl.h"

#ifndef WEFT_NCCL_H
#error "abi_weft.c found NVIDIA's nccl.h; put weft's include/ directory first"
#endif

#include "abi_common.h"

ABI_DEFINE_TABLE(abi_weft_table)
