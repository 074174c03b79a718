/* weft_copy_stream (base/copy.h) against memcpy: every size around the
 * plain-copy threshold and the 64-byte body, every destination and source
 * offset within a line, and the bytes either side of the destination left
 * as they were. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/copy.h"
#include "suite_run.h"

#define GUARD 80

static void fill(unsigned char *buf, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)((i * 2654435761u + seed) >> 11);
}

/* Copies n bytes from src + soff to dst + doff and checks them and the
 * guard bytes around them. */
static void check_copy(size_t n, size_t doff, size_t soff) {
  size_t cap = n + 2 * GUARD + 64;
  unsigned char *src = malloc(cap), *dst = malloc(cap);
  ck_assert(src != NULL && dst != NULL);
  fill(src, cap, (uint32_t)(n + doff * 131 + soff));
  memset(dst, 0xA5, cap);
  weft_copy_stream(dst + GUARD + doff, src + soff, n);
  ck_assert_msg(memcmp(dst + GUARD + doff, src + soff, n) == 0,
                "%zu bytes to offset %zu from offset %zu differ from the source", n, doff, soff);
  for (size_t i = 0; i < GUARD + doff; i++)
    ck_assert_msg(dst[i] == 0xA5, "byte %zu before the destination written (%zu bytes)", i, n);
  for (size_t i = GUARD + doff + n; i < cap; i++)
    ck_assert_msg(dst[i] == 0xA5, "byte %zu past the destination written (%zu bytes)", i, n);
  free(src);
  free(dst);
}

START_TEST(test_sizes) {
  static const size_t sizes[] = {
      0,    1,         15,        63,   64,    65,         4095,       4096,
      4097, 4096 + 63, 4096 + 64, 8191, 65536, 65536 + 17, 512 * 1024, 512 * 1024 + 3};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) check_copy(sizes[i], 0, 0);
}
END_TEST

START_TEST(test_offsets) {
  /* Each pairing of a destination and a source offset in a line, at a size
   * with a head, a body and a tail. */
  for (size_t doff = 0; doff < 64; doff += 3)
    for (size_t soff = 0; soff < 64; soff += 5)
      check_copy(3 * WEFT_COPY_STREAM_MIN + 37, doff, soff);
}
END_TEST

int main(void) {
  Suite *s = suite_create("copy");
  TCase *tc = tcase_create("stream");
  tcase_add_test(tc, test_sizes);
  tcase_add_test(tc, test_offsets);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
