/* The host engine's copy pool (src/exec/host_copy.c): how many threads a
 * rank gets, copies made by the pool's threads alone, by them and the
 * poster together, many copies at once, a cancelled copy that nothing
 * touches afterwards; then through nccl.h, on communicators of this one
 * process (so ThreadSanitizer sees the engine and the pool together), an
 * out-of-place broadcast and a one-rank AllReduce with the pool forced on
 * (WEFT_HOST_COPY_THREADS), the broadcast's copy also past the cache. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec/host_copy.h"
#include "nccl.h"
#include "proc_threads.h"
#include "suite_run.h"

static void fill(char *buf, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) buf[i] = (char)((i * 2654435761u + seed) >> 13);
}

START_TEST(test_threads_rule) {
  /* WEFT_HOST_COPY_THREADS is unset here (meson's test environment). */
  ck_assert_int_eq(weft_host_copy_threads(2, 1), 0); /* CI: 2 cores */
  ck_assert_int_eq(weft_host_copy_threads(2, 8), 0); /* 8 ranks on 2 cores */
  ck_assert_int_eq(weft_host_copy_threads(3, 1), 0);
  ck_assert_int_eq(weft_host_copy_threads(4, 1), 2);
  ck_assert_int_eq(weft_host_copy_threads(8, 2), 2);
  ck_assert_int_eq(weft_host_copy_threads(16, 2), 4); /* the 16-core GPU machine, 2 ranks */
  ck_assert_int_eq(weft_host_copy_threads(16, 8), 0);
  ck_assert_int_eq(weft_host_copy_threads(128, 1), WEFT_HOST_COPY_MAX_AUTO);
  ck_assert_int_eq(weft_host_copy_threads(16, 0), 4); /* no local count: one rank */
}
END_TEST

START_TEST(test_wants) {
  struct weft_host_copy_pool none, pool;
  weft_host_copy_pool_init(&none, 0, 0);
  weft_host_copy_pool_init(&pool, 2, 0);
  ck_assert(!weft_host_copy_wants(&none, (size_t)1 << 30));
  ck_assert(!weft_host_copy_wants(&pool, WEFT_HOST_COPY_PIECE));
  ck_assert(weft_host_copy_wants(&pool, WEFT_HOST_COPY_PIECE + 1));
  ck_assert_int_eq(proc_threads_named("weft-copy"), 0); /* nothing posted: no thread yet */
  weft_host_copy_pool_stop(&pool);
  weft_host_copy_pool_stop(&none);
}
END_TEST

/* The poster only waits: every byte is the pool threads' work; copied
 * with memcpy (_i 0) and past the cache (_i 1). */
START_TEST(test_pool_alone) {
  size_t n = ((size_t)8 << 20) + 12345;
  char *src = malloc(n), *dst = malloc(n);
  ck_assert(src && dst);
  fill(src, n, 7);
  memset(dst, 0, n);
  struct weft_host_copy_pool pool;
  struct weft_host_copy c = {0};
  weft_host_copy_pool_init(&pool, 3, 0);
  weft_host_copy_post(&pool, &c, dst, src, n, _i);
  ck_assert_int_eq(proc_threads_named("weft-copy"), 3);
  while (!weft_host_copy_finished(&c)) weft_host_copy_wait(&pool);
  ck_assert(memcmp(src, dst, n) == 0);
  ck_assert_uint_eq(c.pool_bytes, n);
  weft_host_copy_pool_stop(&pool);
  ck_assert_int_eq(proc_threads_named("weft-copy"), 0);
  free(src);
  free(dst);
}
END_TEST

/* Many copies of odd sizes at once (every other one past the cache), the
 * poster helping as the engine does; then the same pool again (threads
 * that slept wake for it). */
START_TEST(test_many_copies) {
  enum { NCOPIES = 12 };
  size_t n = (size_t)24 << 20;
  char *src = malloc(n), *dst = malloc(n);
  ck_assert(src && dst);
  fill(src, n, 11);
  struct weft_host_copy_pool pool;
  struct weft_host_copy c[NCOPIES];
  memset(c, 0, sizeof c);
  weft_host_copy_pool_init(&pool, 2, 0);
  for (int round = 0; round < 3; round++) {
    memset(dst, 0, n);
    size_t off = 0;
    for (int i = 0; i < NCOPIES; i++) {
      size_t len = (size_t)(i + 1) * 300007 + (size_t)round * 4099;
      weft_host_copy_post(&pool, &c[i], dst + off, src + off, len, (int)(i & 1));
      off += len + 64;
    }
    ck_assert(off < n);
    for (int i = 0; i < NCOPIES; i++)
      while (!weft_host_copy_finished(&c[i]))
        if (!weft_host_copy_help(&pool)) weft_host_copy_wait(&pool);
    off = 0;
    for (int i = 0; i < NCOPIES; i++) {
      size_t len = c[i].bytes;
      ck_assert_msg(memcmp(dst + off, src + off, len) == 0, "round %d copy %d", round, i);
      ck_assert_int_eq(dst[off + len], 0); /* nothing past the end */
      off += len + 64;
    }
  }
  weft_host_copy_pool_stop(&pool);
  free(src);
  free(dst);
}
END_TEST

/* A cancelled copy: once cancel returns, no thread writes its buffer. */
START_TEST(test_cancel) {
  size_t n = (size_t)64 << 20;
  char *src = malloc(n), *dst = malloc(n);
  ck_assert(src && dst);
  memset(src, 1, n);
  memset(dst, 0, n);
  struct weft_host_copy_pool pool;
  struct weft_host_copy c = {0};
  weft_host_copy_pool_init(&pool, 2, 0);
  weft_host_copy_post(&pool, &c, dst, src, n, 0);
  weft_host_copy_cancel(&pool, &c);
  ck_assert(weft_host_copy_finished(&c));
  memset(dst, 2, n);
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  for (size_t i = 0; i < n; i += 4096) ck_assert_int_eq(dst[i], 2);
  weft_host_copy_pool_stop(&pool);
  free(src);
  free(dst);
}
END_TEST

/* Broadcasts 8 MiB + 4 floats (_i 0) or WEFT_HOST_COPY_STREAM_MIN + 4
 * floats (_i 1: the pool copies past the cache) from rank 1 of two ranks
 * (the root's copy goes to its pool), then AllReduces on one rank out of
 * place (a LOCAL copy of the whole input, with memcpy: it reduces). _i 2:
 * the large broadcast with no pool (the root's lane copies past the cache
 * beside its sends). */
START_TEST(test_engine_pool) {
  int pool = _i < 2 ? 2 : 0;
  setenv("WEFT_HOST_COPY_THREADS", pool ? "2" : "0", 1);
  enum { N = 2 };
  size_t count = (_i ? WEFT_HOST_COPY_STREAM_MIN / sizeof(float) : ((size_t)2 << 20)) + 4;
  size_t bytes = count * sizeof(float);
  ncclComm_t comms[N], solo;
  ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
  float *in[N], *out[N];
  for (int r = 0; r < N; r++) {
    in[r] = malloc(bytes);
    out[r] = malloc(bytes);
    ck_assert(in[r] && out[r]);
    for (size_t i = 0; i < count; i++) in[r][i] = (float)(r * 1000003 + (int)(i % 65521));
    memset(out[r], 0xff, bytes);
  }
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < N; r++)
    ck_assert_int_eq(ncclBroadcast(in[r], out[r], count, ncclFloat32, 1, comms[r], NULL),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < N; r++)
    ck_assert_msg(memcmp(out[r], in[1], bytes) == 0, "rank %d's output is not rank 1's input", r);
  ck_assert_int_eq(proc_threads_named("weft-copy"), pool); /* the root's pool only */
  ck_assert_int_eq(ncclCommInitAll(&solo, 1, NULL), ncclSuccess);
  memset(out[0], 0xff, bytes);
  ck_assert_int_eq(ncclAllReduce(in[0], out[0], count, ncclFloat32, ncclSum, solo, NULL),
                   ncclSuccess);
  ck_assert(memcmp(out[0], in[0], bytes) == 0);
  ck_assert_int_eq(proc_threads_named("weft-copy"), 2 * pool);
  ck_assert_int_eq(ncclCommDestroy(solo), ncclSuccess);
  for (int r = 0; r < N; r++) {
    ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
    free(in[r]);
    free(out[r]);
  }
  ck_assert_int_eq(proc_threads_named("weft-copy"), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("host_copy");
  TCase *tc = tcase_create("pool");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_threads_rule);
  tcase_add_test(tc, test_wants);
  tcase_add_loop_test(tc, test_pool_alone, 0, 2);
  tcase_add_test(tc, test_many_copies);
  tcase_add_test(tc, test_cancel);
  suite_add_tcase(s, tc);
  TCase *te = tcase_create("engine");
  tcase_set_timeout(te, 60);
  tcase_add_loop_test(te, test_engine_pool, 0, 3);
  suite_add_tcase(s, te);
  return suite_run(s);
}
