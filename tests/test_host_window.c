/* The host window's buffer rule (src/exec/host_window.c,
 * weft__host_window_clear): which queued collective may run beside an
 * earlier one. The API suite `window` runs the window itself; whether two
 * channels of different calls race on a byte there depends on timing, so
 * the rule is checked here, case by case. */
#include <check.h>
#include <stdint.h>

#include "exec/host_internal.h"
#include "suite_run.h"

static char mem[1 << 16];
static struct weft_lane lanes_a[2] = {{.channel = 0, .nsteps = 3}, {.channel = 1, .nsteps = 3}};
static struct weft_lane lanes_b[2] = {{.channel = 0, .nsteps = 4}, {.channel = 1, .nsteps = 3}};
static void *bufs_store[8][2];
static int nstore;

/* A float collective of count elements reading mem+in and writing mem+out
 * (-1: no buffer), planned on two lanes. */
static struct weft_host_task coll(enum weft_func f, size_t count, long in, long out) {
  struct weft_host_task t = {0};
  t.coll.func = f;
  t.coll.count = count;
  t.coll.datatype = ncclFloat32;
  t.coll.op = ncclSum;
  t.coll.root = 0;
  t.nbufs = 2;
  t.bufs = bufs_store[nstore++ % 8];
  t.bufs[WEFT_BUF_IN] = in < 0 ? NULL : mem + in;
  t.bufs[WEFT_BUF_OUT] = out < 0 ? NULL : mem + out;
  t.plan = (struct weft_plan){.nlanes = 2, .lanes = lanes_a};
  return t;
}

START_TEST(disjoint_and_shared_inputs) {
  struct weft_host_task e = coll(WEFT_FUNC_ALLREDUCE, 256, 0, 1024);
  struct weft_host_task t = coll(WEFT_FUNC_ALLREDUCE, 256, 2048, 3072);
  ck_assert(weft__host_window_clear(2, &t, &e));
  t = coll(WEFT_FUNC_ALLREDUCE, 256, 0, 3072); /* both only read mem+0 */
  ck_assert(weft__host_window_clear(2, &t, &e));
  t = coll(WEFT_FUNC_BROADCAST, 256, -1, 2048); /* a non-root's broadcast: no input */
  ck_assert(weft__host_window_clear(2, &t, &e));
}
END_TEST

START_TEST(conflicts) {
  struct weft_host_task e = coll(WEFT_FUNC_ALLREDUCE, 256, 0, 1024);
  struct weft_host_task t = coll(WEFT_FUNC_ALLREDUCE, 256, 1024 + 1020, 4096);
  ck_assert_msg(!weft__host_window_clear(2, &t, &e), "t reads the last float e writes");
  t = coll(WEFT_FUNC_ALLREDUCE, 256, 8192, 1020);
  ck_assert_msg(!weft__host_window_clear(2, &t, &e), "t writes where e reads and writes");
  t = coll(WEFT_FUNC_ALLREDUCE, 256, 8192, 2044);
  ck_assert_msg(!weft__host_window_clear(2, &t, &e), "t writes what e writes");
  t = coll(WEFT_FUNC_ALLREDUCE, 256, 1024, 1024);
  ck_assert_msg(!weft__host_window_clear(2, &t, &e), "in place on e's output, another call");
  t = coll(WEFT_FUNC_ALLREDUCE, 256, 1024 + 1024, 4096);
  ck_assert_msg(weft__host_window_clear(2, &t, &e), "t reads just past e's output");
}
END_TEST

/* AllGather writes nranks x count, ReduceScatter reads it. */
START_TEST(sizes_by_function) {
  struct weft_host_task e = coll(WEFT_FUNC_ALLGATHER, 64, 0, 1024); /* writes 1024..2048 on 4 */
  struct weft_host_task t = coll(WEFT_FUNC_ALLREDUCE, 16, 1024 + 3 * 256, 8192);
  ck_assert(!weft__host_window_clear(4, &t, &e));
  ck_assert(weft__host_window_clear(3, &t, &e)); /* on 3 ranks it ends at 1024 + 768 */
  t = coll(WEFT_FUNC_ALLREDUCE, 16, 2048, 8192);
  ck_assert(weft__host_window_clear(4, &t, &e));
  e = coll(WEFT_FUNC_REDUCESCATTER, 64, 0, 4096); /* reads 0..1024 on 4 */
  t = coll(WEFT_FUNC_ALLREDUCE, 16, 8192, 1000);
  ck_assert(!weft__host_window_clear(4, &t, &e));
  ck_assert(weft__host_window_clear(3, &t, &e));
}
END_TEST

/* The same call again may overlap (channel by channel), even in place;
 * with another plan or other buffers it may not. */
START_TEST(same_call) {
  struct weft_host_task e = coll(WEFT_FUNC_ALLREDUCE, 256, 1024, 1024);
  struct weft_host_task t = coll(WEFT_FUNC_ALLREDUCE, 256, 1024, 1024);
  ck_assert(weft__host_window_clear(2, &t, &e));
  t.plan.lanes = lanes_b;
  ck_assert(!weft__host_window_clear(2, &t, &e));
  t = coll(WEFT_FUNC_ALLREDUCE, 255, 1024, 1024);
  ck_assert(!weft__host_window_clear(2, &t, &e));
  e = coll(WEFT_FUNC_BROADCAST, 256, 0, 1024);
  t = coll(WEFT_FUNC_BROADCAST, 256, 0, 1024);
  ck_assert(weft__host_window_clear(2, &t, &e));
  t.coll.root = 1;
  ck_assert(!weft__host_window_clear(2, &t, &e));
}
END_TEST

int main(void) {
  Suite *s = suite_create("host_window");
  TCase *tc = tcase_create("rule");
  tcase_add_test(tc, disjoint_and_shared_inputs);
  tcase_add_test(tc, conflicts);
  tcase_add_test(tc, sizes_by_function);
  tcase_add_test(tc, same_call);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
