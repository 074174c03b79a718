/* Inputs and double-precision references for the GPU suites: every rank's
 * input and the reduction of all of them, over one period of a prime number
 * of elements (inputs repeat with that period, so a table is cheap for any
 * count and a misplaced block still shows).
 *
 * Inputs are small integers (float and double: eighths; products: 1, -1, 2
 * and 0.5) chosen so every result is exact in its type, PreMulSum and fp8
 * included: only ncclAvg on floating types is compared with a tolerance,
 * stated in ref_build. The tables know nothing of CUDA: the suites copy
 * device buffers to the host and check them here. */
#ifndef WEFT_TESTS_GPU_REF_H
#define WEFT_TESTS_GPU_REF_H

#include <stddef.h>
#include <stdint.h>

#include "elem.h"
#include "nccl.h"

#define REF_PERIOD 1009 /* prime: a block moved by a power of two is caught */
#define REF_MAX_RANKS 8

/* Operators: the built-in five, then PreMulSum with a host-immediate scalar
 * and with a device scalar (ncclScalarDevice: read when the kernel runs). */
enum { OP_PREMUL_HOST = ncclNumOps, OP_PREMUL_DEV, REF_NOPS };
extern const char *const ref_op_names[REF_NOPS];

struct ref_table {
  const struct dtype_info *d;
  int op;
  int nranks;
  int exact; /* 1: results must match bit for bit */
  unsigned char in[REF_MAX_RANKS][REF_PERIOD * 8];
  unsigned char red_b[REF_PERIOD * 8]; /* the reduction, stored in the type */
  double red[REF_PERIOD];
  double tol[REF_PERIOD];
};

/* Builds the inputs of nranks ranks and their reduction under op for one
 * case; salt makes cases differ. */
void ref_build(struct ref_table *t, const struct dtype_info *d, int op, int nranks, uint32_t salt);

/* The PreMulSum scalar rank r uses for op (OP_PREMUL_HOST or _DEV) on d. */
double ref_premul_scalar(const struct dtype_info *d, int op, int r);

/* buf[k] = rank r's input at period position (base + k), for k < count. */
void ref_fill(const struct ref_table *t, int r, void *buf, size_t base, size_t count);

/* The first element that does not match, and how many did not. */
struct ref_bad {
  size_t index; /* element index in the buffer checked */
  double got, want, tol;
  size_t nbad;
};

/* Checks count elements of buf from element `at` against rank src's input
 * (src >= 0) or the reduction (src < 0), starting at period position base.
 * NaN never passes. Returns the number of bad elements (details in *bad). */
size_t ref_check(const struct ref_table *t, const void *buf, size_t at, size_t count, int src,
                 size_t base, struct ref_bad *bad);

/* Checks that count elements of buf from `at` still hold the poison byte.
 * Returns the number of elements written (details in *bad). */
size_t ref_check_poison(const struct ref_table *t, const void *buf, size_t at, size_t count,
                        struct ref_bad *bad);

#endif
