/* Export markers for the public NCCL entry points.
 *
 * The library is built with -fvisibility=hidden, so only what is marked here
 * is exported. Every nccl* entry point is defined once, marked WEFT_API, and
 * followed by WEFT_ALIAS, which exports the same code as pnccl* (NCCL's
 * profiling names; tools wrap nccl* and call pnccl*):
 *
 *   WEFT_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
 *     ...
 *   }
 *   WEFT_ALIAS(ncclCommCount)
 *
 * The alias must sit in the same file as the definition, after it. */
#ifndef WEFT_API_ALIAS_H
#define WEFT_API_ALIAS_H

#define WEFT_API __attribute__((visibility("default")))

/* __typeof__ of ncclResetDebugInit counts as a use of a deprecated function,
 * hence the pragmas. */
#define WEFT_ALIAS(fn)                                                         \
  _Pragma("GCC diagnostic push")                                               \
  _Pragma("GCC diagnostic ignored \"-Wdeprecated-declarations\"")              \
  extern __typeof__(fn) p##fn                                                  \
      __attribute__((alias(#fn), visibility("default")));                      \
  _Pragma("GCC diagnostic pop")

#endif
