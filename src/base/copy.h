/* A copy whose destination nobody reads soon. */
#ifndef WEFT_BASE_COPY_H
#define WEFT_BASE_COPY_H

#include <stddef.h>
#include <string.h>

/* memcpy(dst, src, n) for a large destination that is not read again
 * soon (a broadcast root's output): on x86-64 with non-temporal stores,
 * which write whole lines to memory without first reading them into the
 * cache (the read for ownership a plain store costs) and leave the cache
 * to the source (read next by a send). Ends with a store fence, so a
 * release store after it publishes the bytes. Elsewhere, and below
 * WEFT_COPY_STREAM_MIN bytes, memcpy. dst and src must not overlap. */
void weft_copy_stream(void *dst, const void *src, size_t n);

#define WEFT_COPY_STREAM_MIN 4096

/* weft_copy_stream where stream is set, else memcpy: for callers that
 * decide per copy. */
static inline void weft_copy(void *dst, const void *src, size_t n, int stream) {
  if (stream)
    weft_copy_stream(dst, src, n);
  else
    memcpy(dst, src, n);
}

#endif
