/* The proxy without a GPU: its op accounting (how many slots a plan moves
 * on each net link, as the kernels cut messages), and the proxy thread
 * carrying a FIFO in host memory over the socket network on loopback, with
 * a thread of this test playing each kernel: the data arrives in order,
 * an idle proxy sleeps, and a peer that closes its end makes the proxy
 * write the communicator's error word. */
#include <check.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proxy/proxy.h"
#include "sched/schedule.h"
#include "transport/net/net.h"
#include "transport/net/net_fifo.h"
#include "proc_threads.h"
#include "suite_run.h"

/* Slots of link (peer, channel, way) in ops, 0 when none. */
static uint64_t slots_on(const struct weft_proxy_op *ops, int n, int nch, int peer, int ch,
                         int send) {
  uint32_t want = weft_proxy_link_index(nch, peer, ch, send);
  for (int i = 0; i < n; i++)
    if (ops[i].link == want) return ops[i].slots;
  return 0;
}

/* Send/recv: the 16-byte header counts (0 bytes still take a slot);
 * peers that are not net peers post nothing. */
START_TEST(test_ops_p2p) {
  const struct weft_p2p p2p[] = {{1, 1, 0}, {1, 1, 48}, {1, 0, 100}, {2, 1, 49},
                                 {2, 0, 1}, {0, 1, 8},  {0, 0, 8}};
  struct weft_plan plan;
  ck_assert_int_eq(weft_p2p_plan(0, p2p, 7, &plan), ncclSuccess);
  const unsigned char net_peer[3] = {0, 1, 0};
  struct weft_proxy_op *ops = NULL;
  int n = -1;
  ck_assert_int_eq(weft_proxy_ops_count(&plan, 1, 64, 3, 2, net_peer, &ops, &n), ncclSuccess);
  ck_assert_int_eq(n, 2);
  ck_assert_uint_eq(slots_on(ops, n, 2, 1, 0, 1), 1 + 1); /* 16 + 0, 16 + 48 */
  ck_assert_uint_eq(slots_on(ops, n, 2, 1, 0, 0), 2);     /* 16 + 100 */
  free(ops);
  weft_plan_free(&plan);
}
END_TEST

/* A ring AllReduce of 4 ranks, one channel: 2 * 3 steps of a quarter of
 * the buffer each to the next rank and from the previous one. */
START_TEST(test_ops_ring) {
  const int ring[4] = {0, 1, 2, 3};
  struct weft_sched_args a = {.func = WEFT_FUNC_ALLREDUCE,
                              .rank = 0,
                              .nranks = 4,
                              .count = 1024,
                              .elem_size = 4,
                              .nchannels = 1,
                              .chunk_bytes = 4096,
                              .ring = ring};
  struct weft_plan plan;
  ck_assert_int_eq(weft_ring_plan(&a, &plan), ncclSuccess);
  const unsigned char all[4] = {0, 1, 1, 1}, none[4] = {0};
  struct weft_proxy_op *ops = NULL;
  int n = -1;
  ck_assert_int_eq(weft_proxy_ops_count(&plan, 0, 512, 4, 2, all, &ops, &n), ncclSuccess);
  ck_assert_int_eq(n, 2);
  ck_assert_uint_eq(slots_on(ops, n, 2, 1, 0, 1), 6 * 2); /* 1024-byte steps, 512-byte slots */
  ck_assert_uint_eq(slots_on(ops, n, 2, 3, 0, 0), 6 * 2);
  free(ops);
  ck_assert_int_eq(weft_proxy_ops_count(&plan, 0, 600, 4, 2, all, &ops, &n), ncclSuccess);
  ck_assert_uint_eq(slots_on(ops, n, 2, 1, 0, 1), 6 * 2); /* 600 + 424 */
  free(ops);
  ck_assert_int_eq(weft_proxy_ops_count(&plan, 0, 512, 4, 2, none, &ops, &n), ncclSuccess);
  ck_assert_int_eq(n, 0);
  ck_assert_ptr_null(ops);
  weft_plan_free(&plan);
}
END_TEST

/* ---- The proxy over loopback -------------------------------------------- */

#define NSLOTS 4
#define SLOT 4096
#define NMSG 200

struct pair {
  struct weft_net_fifo send, recv;
  void *smem, *rmem;
  uint64_t error;
  uint32_t abort;
  struct weft_proxy_comm *pc;
};

/* Link table of one peer (1), one channel: the comm talks to itself. */
#define L_SEND 3 /* weft_proxy_link_index(1, 1, 0, 1) */
#define L_RECV 2

static void pair_open(struct pair *p) {
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_uint_eq(weft_proxy_link_index(1, 1, 0, 1), L_SEND);
  size_t bytes = weft_net_fifo_bytes(NSLOTS, SLOT);
  p->smem = aligned_alloc(4096, bytes);
  p->rmem = aligned_alloc(4096, bytes);
  ck_assert(p->smem != NULL && p->rmem != NULL);
  char handle[WEFT_NET_HANDLE_BYTES];
  ck_assert_int_eq(weft_net_fifo_open(net, 0, 0, 1, 0, NSLOTS, SLOT, p->rmem, handle, &p->recv),
                   ncclSuccess);
  ck_assert_int_eq(weft_net_fifo_open(net, 0, 1, 1, 0, NSLOTS, SLOT, p->smem, NULL, &p->send),
                   ncclSuccess);
  int sd = 0, rd = 0;
  for (int i = 0; i < 100000 && !(sd && rd); i++) {
    if (!sd) ck_assert_int_eq(weft_net_fifo_connect(&p->send, handle, &sd), ncclSuccess);
    if (!rd) ck_assert_int_eq(weft_net_fifo_connect(&p->recv, NULL, &rd), ncclSuccess);
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  ck_assert_msg(sd && rd, "the loopback FIFO did not connect");
  p->error = 0;
  p->abort = 0;
  ck_assert_int_eq(weft_proxy_comm_create(0, 0, 4, &p->error, &p->abort, &p->pc), ncclSuccess);
  weft_proxy_comm_set_link(p->pc, L_SEND, &p->send, 0x5eadull);
  weft_proxy_comm_set_link(p->pc, L_RECV, &p->recv, 0xdeadull);
  ck_assert_int_eq(weft_proxy_comm_start(p->pc), ncclSuccess);
}

static void pair_close(struct pair *p) {
  weft_proxy_comm_destroy(p->pc);
  weft_net_fifo_close(&p->send);
  weft_net_fifo_close(&p->recv);
  free(p->smem);
  free(p->rmem);
}

static void spin_until(const uint64_t *word, uint64_t at_least, const char *what) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (;;) {
    if (__atomic_load_n(word, __ATOMIC_ACQUIRE) >= at_least) return;
    clock_gettime(CLOCK_MONOTONIC, &now);
    ck_assert_msg(now.tv_sec - start.tv_sec < 20, "%s stuck below %llu", what,
                  (unsigned long long)at_least);
    sched_yield();
  }
}

/* The sending "kernel": message i is slot-sized or short, bytes i + j. */
static void *send_kernel(void *arg) {
  struct pair *p = arg;
  for (uint64_t pos = 0; pos < NMSG; pos++) {
    if (pos >= NSLOTS) spin_until(p->send.head, pos - NSLOTS + 1, "the send FIFO's head");
    uint32_t n = pos % 3 == 0 ? SLOT : (uint32_t)(pos * 7 % SLOT) + 1;
    unsigned char *slot = (unsigned char *)p->send.slots + (pos % NSLOTS) * SLOT;
    for (uint32_t j = 0; j < n; j++) slot[j] = (unsigned char)(pos + j);
    p->send.sizes[pos % NSLOTS] = n;
    __atomic_store_n(p->send.tail, pos + 1, __ATOMIC_RELEASE);
  }
  return NULL;
}

START_TEST(test_proxy_loopback) {
  struct pair p;
  pair_open(&p);
  const struct weft_proxy_op ops[] = {{L_SEND, NMSG / 2}, {L_RECV, NMSG / 2}};
  /* Two launches' worth, posted before and while the kernels run. */
  weft_proxy_post(p.pc, ops, 2);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, send_kernel, &p), 0);
  weft_proxy_post(p.pc, ops, 2);
  for (uint64_t pos = 0; pos < NMSG; pos++) {
    spin_until(p.recv.tail, pos + 1, "the receive FIFO's tail");
    uint32_t n = pos % 3 == 0 ? SLOT : (uint32_t)(pos * 7 % SLOT) + 1;
    const unsigned char *slot = (const unsigned char *)p.recv.slots + (pos % NSLOTS) * SLOT;
    for (uint32_t j = 0; j < n; j++)
      ck_assert_msg(slot[j] == (unsigned char)(pos + j), "message %llu byte %u: %u, expected %u",
                    (unsigned long long)pos, j, slot[j], (unsigned char)(pos + j));
    __atomic_store_n(p.recv.head, pos + 1, __ATOMIC_RELEASE);
  }
  pthread_join(t, NULL);
  spin_until(p.send.head, NMSG, "the send FIFO's head");
  ck_assert_uint_eq(weft_proxy_link_done(p.pc, L_SEND), NMSG);
  ck_assert_uint_eq(weft_proxy_link_done(p.pc, L_RECV), NMSG);
  /* Nothing pending: the proxy thread sleeps (well under 10% of a core). */
  double c0 = proc_cpu_s();
  struct timespec ts = {0, 300000000};
  nanosleep(&ts, NULL);
  double used = proc_cpu_s() - c0;
  ck_assert_msg(used < 0.03, "an idle proxy used %.3f s of CPU in 0.3 s", used);
  ck_assert_uint_eq(p.error, 0);
  pair_close(&p);
}
END_TEST

/* A "kernel" that published its last slots and ended: drain returns once
 * the proxy moved them all (a destroy then closes nothing in flight), and
 * gives up after its timeout when a slot never comes. */
START_TEST(test_proxy_drain) {
  struct pair p;
  pair_open(&p);
  const struct weft_proxy_op ops[] = {{L_SEND, NSLOTS}, {L_RECV, NSLOTS}};
  weft_proxy_post(p.pc, ops, 2);
  for (uint64_t pos = 0; pos < NSLOTS; pos++) {
    memset(p.send.slots + pos * SLOT, (int)pos + 1, SLOT);
    p.send.sizes[pos] = SLOT;
    __atomic_store_n(p.send.tail, pos + 1, __ATOMIC_RELEASE);
  }
  ck_assert_int_eq(weft_proxy_comm_drain(p.pc, 20), ncclSuccess);
  ck_assert_uint_eq(weft_proxy_link_done(p.pc, L_SEND), NSLOTS);
  ck_assert_uint_eq(weft_proxy_link_done(p.pc, L_RECV), NSLOTS);
  ck_assert_uint_eq(*p.recv.tail, NSLOTS);
  for (int pos = 0; pos < NSLOTS; pos++)
    ck_assert_int_eq(p.recv.slots[pos * SLOT + SLOT - 1], pos + 1);
  const struct weft_proxy_op more = {L_RECV, 1};
  weft_proxy_post(p.pc, &more, 1);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(weft_proxy_comm_drain(p.pc, 0.2), ncclRemoteError);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  ck_assert_msg(took >= 0.2 && took < 2, "drain gave up after %.3f s, expected 0.2", took);
  pair_close(&p);
}
END_TEST

/* The sender closes its end while a receive is pending: the proxy writes
 * the receive link's failure word, and posts after that are dropped. */
START_TEST(test_proxy_peer_closed) {
  struct pair p;
  pair_open(&p);
  const struct weft_proxy_op op = {L_RECV, 1};
  weft_proxy_post(p.pc, &op, 1);
  weft_net_fifo_close(&p.send);
  spin_until(&p.error, 1, "the error word");
  ck_assert_uint_eq(p.error, 0xdeadull);
  weft_proxy_post(p.pc, &op, 1);
  ck_assert_uint_eq(weft_proxy_link_done(p.pc, L_RECV), 0);
  pair_close(&p);
}
END_TEST

int main(void) {
  setenv("WEFT_TIMEOUT", "20", 0);
  Suite *s = suite_create("proxy");
  TCase *tc = tcase_create("proxy");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_ops_p2p);
  tcase_add_test(tc, test_ops_ring);
  tcase_add_test(tc, test_proxy_loopback);
  tcase_add_test(tc, test_proxy_drain);
  tcase_add_test(tc, test_proxy_peer_closed);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
