/* Datatypes and operators by value: sizes and the names logs print. */
#ifndef WEFT_BASE_DTYPE_H
#define WEFT_BASE_DTYPE_H

#include <stddef.h>

#include "nccl.h"

/* Bytes per element; 0 for an invalid datatype. */
size_t weft_dtype_size(ncclDataType_t dt);
const char *weft_dtype_name(ncclDataType_t dt);
const char *weft_op_name(ncclRedOp_t op);

#endif
