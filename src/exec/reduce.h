/* Element-wise reductions on host memory for every datatype and op;
 * half, bfloat16 and fp8 are reduced through float with round-to-nearest-even. */
#ifndef WEFT_EXEC_REDUCE_H
#define WEFT_EXEC_REDUCE_H

#include <stddef.h>

#include "base/dtype.h"
#include "nccl.h"

/* dst[i] = a[i] op b[i]; dst may alias a or b. ncclAvg sums here. */
void weft_reduce_host(void *dst, const void *a, const void *b, size_t count, ncclDataType_t dt,
                      ncclRedOp_t op);
/* buf[i] /= nranks for ncclAvg (integers: truncating division as NCCL). */
void weft_postop_avg_host(void *buf, size_t count, ncclDataType_t dt, int nranks);
/* dst[i] = src[i] * *scalar (PreMulSum's first half); scalar points to one
 * value of dt. dst may equal src. */
void weft_scale_host(void *dst, const void *src, size_t count, ncclDataType_t dt,
                     const void *scalar);

#endif
