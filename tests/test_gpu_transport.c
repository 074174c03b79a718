/* The GPU transports' tables (transport/gpu_transport.h) driven directly,
 * one rank: the p2p transport's slot-size rule, the net transport's GPU
 * side with no net peer (nothing made, nothing exchanged), and the p2p
 * transport linking a rank to itself: on a GPU the self link points into
 * the rank's own inbox; without one, connect fails with a CUDA error and
 * leaves nothing behind. Each test runs in its own process (Check's fork
 * mode) and sets its parameters before the first weft call reads them. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "suite_run.h"
#include "transport/gpu_transport.h"
#include "transport/net/net_gpu.h"
#include "transport/p2p/p2p.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include <cuda_runtime_api.h>

#include "device/device.h"
#endif

static const unsigned char same_gpu[3] = {0, 0, 0};
static const unsigned char other_gpu[3] = {0, 1, 0};

START_TEST(slots_default_one_gpu) {
  unsetenv("NCCL_BUFFSIZE");
  ck_assert_uint_eq(weft_p2p_slot_bytes(0, 3, same_gpu), WEFT_DEV_SLOT_BYTES);
}
END_TEST

START_TEST(slots_default_cross_gpu) {
  unsetenv("NCCL_BUFFSIZE");
  ck_assert_uint_eq(weft_p2p_slot_bytes(0, 3, other_gpu), 512u << 10);
}
END_TEST

/* NCCL_BUFFSIZE is a link's slots together, whatever the GPUs. */
START_TEST(slots_buffsize) {
  setenv("NCCL_BUFFSIZE", "4194304", 1);
  ck_assert_uint_eq(weft_p2p_slot_bytes(0, 3, same_gpu), 4194304 / WEFT_DEV_NSLOTS);
  ck_assert_uint_eq(weft_p2p_slot_bytes(0, 3, other_gpu), 4194304 / WEFT_DEV_NSLOTS);
}
END_TEST

/* Cut to a multiple of 16; never below half an LL slot. */
START_TEST(slots_buffsize_rounded) {
  setenv("NCCL_BUFFSIZE", "1000000", 1);
  ck_assert_uint_eq(weft_p2p_slot_bytes(0, 3, same_gpu), 124992);
}
END_TEST

START_TEST(slots_buffsize_small) {
  setenv("NCCL_BUFFSIZE", "4096", 1);
  ck_assert_uint_eq(weft_p2p_slot_bytes(0, 3, same_gpu), WEFT_DEV_LL_SLOT_BYTES / 2);
}
END_TEST

static ncclResult_t no_allgather(void *ctx, void *all, size_t bytes) {
  (void)all;
  (void)bytes;
  ++*(int *)ctx;
  return ncclInternalError;
}

/* No net peer on this rank means none on any: connect makes nothing and
 * joins no exchange, and the tables stay as they were. */
START_TEST(net_no_peers) {
  int calls = 0;
  unsigned char cross[3] = {0, 1, 1}, peers[3] = {0, 0, 0};
  struct weft_gpu_setup s = {.rank = 0,
                             .nranks = 3,
                             .nchannels = 2,
                             .nslots = WEFT_DEV_NSLOTS,
                             .slot_bytes = WEFT_DEV_SLOT_BYTES,
                             .cross = cross,
                             .timeout_s = 5,
                             .allgather = no_allgather,
                             .allgather_ctx = &calls};
  struct weft_dev_link send[6], recv[6];
  memset(send, 0xab, sizeof(send));
  memset(recv, 0xab, sizeof(recv));
  void *state = (void *)1;
  ck_assert_str_eq(weft_net_gpu_ops.name, "net");
  ck_assert_int_eq(weft_net_gpu_ops.connect(&s, peers, send, recv, &state), ncclSuccess);
  ck_assert_ptr_null(state);
  ck_assert_int_eq(calls, 0);
  for (size_t i = 0; i < sizeof(send); i++) {
    ck_assert_uint_eq(((unsigned char *)send)[i], 0xab);
    ck_assert_uint_eq(((unsigned char *)recv)[i], 0xab);
  }
  ck_assert_ptr_null(weft_net_gpu_fifo(state, 1, 0, 1));
  weft_net_gpu_ops.free(state, 0);
}
END_TEST

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
/* One rank: its all-gather has nothing to add. */
static ncclResult_t one_rank_allgather(void *ctx, void *all, size_t bytes) {
  (void)all;
  (void)bytes;
  ++*(int *)ctx;
  return ncclSuccess;
}

/* A direct collective's timed-out waits describe themselves: which call,
 * which peer, how far the peer got (no GPU needed: the report is host
 * code over the host-mapped record). */
START_TEST(direct_wait_reports) {
  struct weft_dev_wait_diag d = {.claimed = 1,
                                 .dir = WEFT_DEV_WAIT_PEER_READY,
                                 .peer = 3,
                                 .channel = -1,
                                 .lane = 2,
                                 .pos = 8,
                                 .seen = 7};
  char buf[512];
  weft_dev_wait_describe(&d, 8, buf, sizeof(buf));
  ck_assert_msg(strstr(buf, "call 8") && strstr(buf, "rank 3 to reach it") &&
                    strstr(buf, "reached call 7"),
                "%s", buf);
  d.dir = WEFT_DEV_WAIT_PEER_DONE;
  weft_dev_wait_describe(&d, 8, buf, sizeof(buf));
  ck_assert_msg(strstr(buf, "rank 3 to finish its part") && strstr(buf, "finished call 7"), "%s",
                buf);
}
END_TEST

START_TEST(p2p_self) {
  static const struct weft_gpu_inbox_fns fns = {weft_dev_inbox_create, weft_dev_inbox_destroy,
                                                weft_dev_inbox_link};
  int calls = 0, ndev = 0;
  unsigned char cross[1] = {0}, peers[1] = {1};
  struct weft_gpu_setup s = {.rank = 0,
                             .nranks = 1,
                             .nchannels = 2,
                             .nslots = WEFT_DEV_NSLOTS,
                             .slot_bytes = WEFT_DEV_SLOT_BYTES,
                             .cross = cross,
                             .timeout_s = 5,
                             .allgather = one_rank_allgather,
                             .allgather_ctx = &calls,
                             .inbox = &fns};
  struct weft_dev_link send[2], recv[2];
  memset(send, 0, sizeof(send));
  memset(recv, 0, sizeof(recv));
  void *state = (void *)1;
  ck_assert_str_eq(weft_p2p_gpu_ops.name, "p2p");
  int have_gpu = cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0;
  ncclResult_t res = weft_p2p_gpu_ops.connect(&s, peers, send, recv, &state);
  if (!have_gpu) {
    /* The inbox's cudaMalloc fails: a CUDA error, nothing kept, no
     * exchange joined. */
    ck_assert_int_eq(res, ncclUnhandledCudaError);
    ck_assert_ptr_null(state);
    ck_assert_int_eq(calls, 0);
    return;
  }
  ck_assert_int_eq(res, ncclSuccess);
  ck_assert_ptr_nonnull(state);
  ck_assert_int_eq(calls, 1);
  /* The self link is the inbox's slot from rank 0, both ways, GPU scope. */
  for (int ch = 0; ch < 2; ch++) {
    ck_assert_ptr_nonnull(send[ch].slots);
    ck_assert_ptr_eq(send[ch].slots, recv[ch].slots);
    ck_assert_ptr_eq(send[ch].head, recv[ch].head);
    ck_assert_ptr_eq(send[ch].tail, send[ch].head + 16);
    ck_assert_uint_eq(send[ch].sys, 0);
    ck_assert_ptr_null(send[ch].sizes);
  }
  ck_assert_ptr_ne(send[0].slots, send[1].slots);
  weft_p2p_gpu_ops.free(state, 0);
}
END_TEST
#endif

int main(void) {
  Suite *s = suite_create("gpu_transport");
  TCase *tc = tcase_create("tables");
  tcase_add_test(tc, slots_default_one_gpu);
  tcase_add_test(tc, slots_default_cross_gpu);
  tcase_add_test(tc, slots_buffsize);
  tcase_add_test(tc, slots_buffsize_rounded);
  tcase_add_test(tc, slots_buffsize_small);
  tcase_add_test(tc, net_no_peers);
#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
  tcase_add_test(tc, direct_wait_reports);
  tcase_add_test(tc, p2p_self);
#endif
  suite_add_tcase(s, tc);
  /* Each test in its own process: the environment is read once. */
  return suite_run_with(s, CK_FORK, CK_NORMAL);
}
