/* weft_copy_stream (base/copy.h). The x86-64 body uses SSE2, which every
 * x86-64 processor has: 16-byte loads, then four 16-byte streaming stores
 * a line, which the processor's write-combining buffers merge into one
 * whole-line write. */
#include "base/copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h>

void weft_copy_stream(void *dst, const void *src, size_t n) {
  char *d = dst;
  const char *s = src;
  if (n < WEFT_COPY_STREAM_MIN) {
    memcpy(d, s, n);
    return;
  }
  size_t head = (64 - ((uintptr_t)d & 63)) & 63; /* whole lines from here */
  memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  size_t body = n & ~(size_t)63;
  for (size_t i = 0; i < body; i += 64) {
    __m128i a = _mm_loadu_si128((const __m128i *)(s + i));
    __m128i b = _mm_loadu_si128((const __m128i *)(s + i + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(s + i + 32));
    __m128i e = _mm_loadu_si128((const __m128i *)(s + i + 48));
    _mm_stream_si128((__m128i *)(d + i), a);
    _mm_stream_si128((__m128i *)(d + i + 16), b);
    _mm_stream_si128((__m128i *)(d + i + 32), c);
    _mm_stream_si128((__m128i *)(d + i + 48), e);
  }
  memcpy(d + body, s + body, n - body);
  _mm_sfence();
}

#else

void weft_copy_stream(void *dst, const void *src, size_t n) {
  memcpy(dst, src, n);
}

#endif
