/* Test-side element codec: every NCCL datatype written and read through
 * double, with the small floating formats (half, bfloat16, fp8) encoded
 * here so the suites share nothing with weft's own conversions. */
#ifndef WEFT_TEST_ELEM_H
#define WEFT_TEST_ELEM_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

enum kind { K_INT, K_UINT, K_FLOAT };

struct dtype_info {
  ncclDataType_t type;
  const char *name;
  size_t size;
  enum kind kind;
  int range;        /* inputs for sum/max/min/avg lie in [-range, range] */
  int ebits, mbits; /* floating types: exponent and mantissa bits */
  int fn;           /* 1: e4m3 "FN" encoding (no infinities, one NaN) */
};

/* Every datatype, in ncclDataType_t order. */
extern const struct dtype_info dtypes[];
extern const int ndtypes;
const struct dtype_info *dtype_find(ncclDataType_t t);

/* Stores x as one element of type d at p; reads one back. */
void elem_store(const struct dtype_info *d, void *p, double x);
double elem_load(const struct dtype_info *d, const void *p);
/* The byte outputs are filled with before a run (NaN for floating types). */
unsigned char poison_byte(const struct dtype_info *d);
/* A 32-bit integer hash, for inputs that differ by rank, position and case. */
uint32_t mix(uint32_t x);

/* The reference reduction of one position: xs[0..n) are the ranks' inputs
 * in rank order (PreMulSum scalars already applied), combined under op
 * (ops past ncclNumOps sum). ncclAvg divides, truncating for integer types.
 * *tol gets how far a result may lie from it: 0, except for ncclAvg on
 * floating types, which may divide before or after summing, in the type or
 * wider. */
double elem_reduce(const struct dtype_info *d, int op, const double *xs, int n, double *tol);

#endif
