/* weft-topo --measure: P2P copy bandwidth and latency between every GPU
 * pair (measure.cu, built only with CUDA). */
#ifndef WEFT_TOPO_MEASURE_H
#define WEFT_TOPO_MEASURE_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Prints the matrices to out; 0 on success, 2 without a GPU, 1 on a CUDA
 * error (said on stderr). */
int weft_topo_measure(FILE *out, size_t bytes, int reps);

#ifdef __cplusplus
}
#endif

#endif
