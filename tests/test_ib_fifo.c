/* net/ib's credit and completion state machine (transport/net/ib/ib_fifo.c)
 * driven by a harness that stands in for the wire and the completion
 * queues: a receive's CTS lands in the sender's FIFO when the harness
 * says, a send's pieces are copied into the receive buffer and their
 * completions queued on both sides, then delivered in order, reversed or
 * shuffled. Also the registration cache (ib_mr_cache.c) and, where
 * rdma-core's header is, the rules of ib_rule.c (async events, failed
 * completions, how a buffer is registered). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "suite_run.h"
#include "transport/net/ib/ib_fifo.h"
#include "transport/net/ib/ib_mr_cache.h"
#if WEFT_HAVE_IB_NET
#include "transport/net/ib/ib_rule.h"
#include "transport/net/net.h"
#endif

#define NAME "mlx5_0:1 with peer 10.0.0.2:5000"

/* ---- The harness ------------------------------------------------------------ */

struct ev {
  int to_recv; /* 1: the receiver's CQ; 0: the sender's */
  uint64_t wr_id;
  uint32_t imm, len;
};

struct harness {
  struct weft_ib_sender s;
  struct weft_ib_receiver r;
  struct weft_ib_cts fifo[WEFT_IB_SLOTS]; /* the sender's, written by "RDMA" */
  struct weft_ib_cts cts_wire[64];        /* CTS writes not landed yet */
  int ncts_wire;
  struct ev q[4096];
  int nq;
  int qp_used[WEFT_IB_MAX_QPS]; /* pieces seen per QP */
};

static struct harness *h_new(int nqps, uint32_t first_seq) {
  struct harness *h = calloc(1, sizeof(*h));
  ck_assert_ptr_nonnull(h);
  weft_ib_sender_init(&h->s, nqps, first_seq, NAME);
  weft_ib_receiver_init(&h->r, nqps, first_seq, NAME);
  return h;
}

/* irecv; the CTS stays on the wire until h_land. -1: no credit. */
static int h_recv(struct harness *h, void *buf, size_t size) {
  int req;
  ck_assert_int_eq(weft_ib_recv_post(&h->r, (uint64_t)(uintptr_t)buf, size, 0x1234, &req),
                   ncclSuccess);
  if (req < 0) return -1;
  ck_assert_int_eq(h->r.cts.rkey, 0x1234);
  ck_assert_int_eq(h->r.cts_slot, req);
  h->cts_wire[h->ncts_wire++] = h->r.cts;
  h->q[h->nq++] = (struct ev){.to_recv = 1, .wr_id = h->r.cts_wr_id};
  return req;
}

/* The oldest CTS writes land in the sender's FIFO (all: n < 0). */
static void h_land(struct harness *h, int n) {
  if (n < 0 || n > h->ncts_wire) n = h->ncts_wire;
  for (int i = 0; i < n; i++) {
    struct weft_ib_cts c = h->cts_wire[i];
    h->fifo[(uint32_t)c.stamp % WEFT_IB_SLOTS] = c;
  }
  memmove(h->cts_wire, h->cts_wire + n, (size_t)(h->ncts_wire - n) * sizeof(h->cts_wire[0]));
  h->ncts_wire -= n;
}

/* isend: on success the pieces are "written" (copied when buf is not
 * NULL) and their completions queued on both sides. -1: not now. */
static int h_send(struct harness *h, const void *buf, size_t size, ncclResult_t *res_out) {
  int req;
  ncclResult_t res = weft_ib_send_post(&h->s, h->fifo, size, &req);
  if (res_out != NULL)
    *res_out = res;
  else
    ck_assert_int_eq(res, ncclSuccess);
  if (req < 0 && res == ncclSuccess) return -1;
  const struct weft_ib_send_plan *p = &h->s.plan;
  for (int i = 0; i < p->npieces; i++) {
    const struct weft_ib_piece *pc = &p->p[i];
    ck_assert_int_lt(pc->qp, h->s.nqps);
    h->qp_used[pc->qp]++;
    if (buf != NULL && pc->len > 0)
      memcpy((char *)(uintptr_t)p->raddr + pc->offset, (const char *)buf + pc->offset, pc->len);
    h->q[h->nq++] = (struct ev){.to_recv = 0, .wr_id = pc->wr_id};
    h->q[h->nq++] = (struct ev){.to_recv = 1,
                                .wr_id = weft_ib_wr_id(WEFT_IB_WR_RECV, pc->qp, 0),
                                .imm = pc->imm,
                                .len = (uint32_t)pc->len};
  }
  return req;
}

static void h_deliver(struct harness *h, const struct ev *e) {
  if (e->to_recv)
    ck_assert_int_eq(weft_ib_recv_complete(&h->r, e->wr_id, e->imm, e->len, 1, ncclSuccess, ""),
                     ncclSuccess);
  else
    ck_assert_int_eq(weft_ib_send_complete(&h->s, e->wr_id, 1, ncclSuccess, ""), ncclSuccess);
}

enum order { IN_ORDER, REVERSED, SHUFFLED };

/* Delivers every queued completion in the given order. */
static void h_drain(struct harness *h, enum order o, unsigned *seed) {
  if (o == REVERSED)
    for (int i = 0; i < h->nq / 2; i++) {
      struct ev t = h->q[i];
      h->q[i] = h->q[h->nq - 1 - i];
      h->q[h->nq - 1 - i] = t;
    }
  if (o == SHUFFLED)
    for (int i = h->nq - 1; i > 0; i--) {
      int j = rand_r(seed) % (i + 1);
      struct ev t = h->q[i];
      h->q[i] = h->q[j];
      h->q[j] = t;
    }
  for (int i = 0; i < h->nq; i++) h_deliver(h, &h->q[i]);
  h->nq = 0;
}

static int recv_done(struct harness *h, int req, size_t *size) {
  int done;
  ck_assert_int_eq(weft_ib_recv_test(&h->r, req, &done, size), ncclSuccess);
  return done;
}

static int send_done(struct harness *h, int req, size_t *size) {
  int done;
  ck_assert_int_eq(weft_ib_send_test(&h->s, req, &done, size), ncclSuccess);
  return done;
}

static void fill(unsigned char *b, size_t n, unsigned salt) {
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i * 7 + salt);
}

/* Batches of `batch` messages (sizes from sizes[]) posted, then their
 * completions delivered in order o; every byte and size checked. */
static void run_batches(int nqps, uint32_t first_seq, int batch, int rounds, enum order o) {
  static const size_t sizes[] = {0, 1, 127, 128, 129, 1000, 4096, 65537, 300000};
  const int nsizes = (int)(sizeof(sizes) / sizeof(sizes[0]));
  struct harness *h = h_new(nqps, first_seq);
  unsigned seed = 12345;
  size_t cap = 300000 + 64;
  unsigned char *src = malloc(cap), *dst = malloc(cap * (size_t)batch);
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(dst);
  int k = 0;
  for (int round = 0; round < rounds; round++) {
    int rreq[WEFT_IB_SLOTS], sreq[WEFT_IB_SLOTS];
    size_t sz[WEFT_IB_SLOTS];
    memset(dst, 0xee, cap * (size_t)batch);
    for (int i = 0; i < batch; i++) {
      sz[i] = sizes[(k + i) % nsizes];
      rreq[i] = h_recv(h, dst + cap * (size_t)i, cap - 64 + (size_t)(i % 2) * 64);
      ck_assert_int_ge(rreq[i], 0);
    }
    h_land(h, -1);
    for (int i = 0; i < batch; i++) {
      fill(src, sz[i], (unsigned)(k + i));
      sreq[i] = h_send(h, src, sz[i], NULL);
      ck_assert_int_ge(sreq[i], 0);
    }
    /* Nothing is done before its completions. */
    for (int i = 0; i < batch; i++) {
      size_t got;
      ck_assert_int_eq(send_done(h, sreq[i], &got), 0);
      ck_assert_int_eq(recv_done(h, rreq[i], &got), 0);
    }
    h_drain(h, o, &seed);
    for (int i = 0; i < batch; i++) {
      size_t got = 999;
      ck_assert_int_eq(send_done(h, sreq[i], &got), 1);
      ck_assert_uint_eq(got, sz[i]);
      ck_assert_int_eq(recv_done(h, rreq[i], &got), 1);
      ck_assert_uint_eq(got, sz[i]);
      fill(src, sz[i], (unsigned)(k + i));
      ck_assert_int_eq(memcmp(dst + cap * (size_t)i, src, sz[i]), 0);
      /* Never past what was sent. */
      ck_assert_int_eq(dst[cap * (size_t)i + sz[i]], 0xee);
    }
    k += batch;
  }
  free(src);
  free(dst);
  free(h);
}

START_TEST(test_in_order) {
  run_batches(1, 0, 1, 100, IN_ORDER);
}
END_TEST

START_TEST(test_out_of_order_one_qp) {
  run_batches(1, 0, 8, 10, REVERSED);
}
END_TEST

START_TEST(test_out_of_order_qps) {
  run_batches(4, 0, 16, 10, REVERSED);
  run_batches(4, 0, WEFT_IB_SLOTS, 6, SHUFFLED);
  run_batches(3, 7, 5, 20, SHUFFLED);
}
END_TEST

/* A message is cut over every QP; small ones spread over them. */
START_TEST(test_pieces_over_qps) {
  struct harness *h = h_new(4, 0);
  static unsigned char dst[8192], src[8192];
  int r = h_recv(h, dst, sizeof(dst));
  h_land(h, -1);
  int s = h_send(h, src, 4096, NULL);
  ck_assert_int_ge(s, 0);
  ck_assert_int_eq(h->s.plan.npieces, 4);
  for (int q = 0; q < 4; q++) ck_assert_int_eq(h->qp_used[q], 1);
  size_t sum = 0;
  for (int i = 0; i < 4; i++) {
    sum += h->s.plan.p[i].len;
    ck_assert_uint_eq(h->s.plan.p[i].offset % WEFT_IB_PIECE_ALIGN, 0);
  }
  ck_assert_uint_eq(sum, 4096);
  /* 200 bytes: two 128-byte pieces at most, never one of zero bytes. */
  h_drain(h, IN_ORDER, NULL);
  size_t got;
  ck_assert_int_eq(recv_done(h, r, &got), 1);
  ck_assert_int_eq(send_done(h, s, &got), 1);
  r = h_recv(h, dst, sizeof(dst));
  h_land(h, -1);
  s = h_send(h, src, 200, NULL);
  ck_assert_int_eq(h->s.plan.npieces, 2);
  ck_assert_uint_eq(h->s.plan.p[1].len, 72);
  /* Message 1 starts on QP 1: small messages spread. */
  ck_assert_int_eq(h->s.plan.p[0].qp, 1);
  h_drain(h, REVERSED, NULL);
  ck_assert_int_eq(recv_done(h, r, &got), 1);
  ck_assert_uint_eq(got, 200);
  free(h);
}
END_TEST

/* Without a posted receive the sender gets no credit and writes nothing. */
START_TEST(test_credit_exhaustion) {
  struct harness *h = h_new(2, 0);
  static unsigned char dst[WEFT_IB_SLOTS + 1][64], src[64];
  ck_assert_int_eq(h_send(h, src, 16, NULL), -1);
  ck_assert_int_eq(h->nq, 0);
  /* Posted but its CTS not landed yet: still no credit. */
  int r0 = h_recv(h, dst[0], 64);
  ck_assert_int_eq(h_send(h, src, 16, NULL), -1);
  h_land(h, -1);
  int s0 = h_send(h, src, 16, NULL);
  ck_assert_int_ge(s0, 0);
  /* One credit, one send: the next waits. */
  ck_assert_int_eq(h_send(h, src, 16, NULL), -1);
  h_drain(h, IN_ORDER, NULL);
  size_t got;
  ck_assert_int_eq(recv_done(h, r0, &got), 1);
  ck_assert_int_eq(send_done(h, s0, &got), 1);
  /* SLOTS receives posted: the next one waits for a test. */
  int r[WEFT_IB_SLOTS];
  for (int i = 0; i < WEFT_IB_SLOTS; i++) ck_assert_int_ge(r[i] = h_recv(h, dst[i], 64), 0);
  ck_assert_int_eq(h_recv(h, dst[WEFT_IB_SLOTS], 64), -1);
  /* Only half the CTS landed: half the sends go. */
  h_land(h, WEFT_IB_SLOTS / 2);
  int sent = 0, s[WEFT_IB_SLOTS];
  while ((s[sent] = h_send(h, src, 64, NULL)) >= 0) sent++;
  ck_assert_int_eq(sent, WEFT_IB_SLOTS / 2);
  h_land(h, -1);
  while (sent < WEFT_IB_SLOTS && (s[sent] = h_send(h, src, 64, NULL)) >= 0) sent++;
  ck_assert_int_eq(sent, WEFT_IB_SLOTS);
  /* SLOTS sends untested: the next one waits even with a credit. */
  h_drain(h, IN_ORDER, NULL);
  ck_assert_int_eq(recv_done(h, r[0], &got), 1);
  ck_assert_int_ge(h_recv(h, dst[WEFT_IB_SLOTS], 64), 0);
  h_land(h, -1);
  ck_assert_int_eq(h_send(h, src, 64, NULL), -1);
  ck_assert_int_eq(send_done(h, s[0], &got), 1);
  ck_assert_int_ge(h_send(h, src, 64, NULL), 0);
  free(h);
}
END_TEST

/* A send larger than its receive: both sides fail, nothing is written. */
START_TEST(test_size_mismatch) {
  struct harness *h = h_new(2, 0);
  static unsigned char dst[256], src[256];
  memset(dst, 0xee, sizeof(dst));
  int r = h_recv(h, dst, 100);
  h_land(h, -1);
  ncclResult_t res;
  ck_assert_int_eq(h_send(h, src, 200, &res), -1);
  ck_assert_int_eq(res, ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(h->s.why, "200 bytes is larger than the receive of 100 bytes"));
  ck_assert_ptr_nonnull(strstr(h->s.why, NAME));
  /* The notice: one zero-byte piece. */
  ck_assert_int_eq(h->s.plan.npieces, 1);
  ck_assert_uint_eq(h->s.plan.p[0].len, 0);
  struct ev notice = h->q[h->nq - 1];
  ck_assert_int_eq(notice.to_recv, 1);
  ck_assert_int_eq(weft_ib_recv_complete(&h->r, notice.wr_id, notice.imm, 0, 1, ncclSuccess, ""),
                   ncclInvalidUsage);
  int done;
  size_t got;
  ck_assert_int_eq(weft_ib_recv_test(&h->r, r, &done, &got), ncclInvalidUsage);
  ck_assert_int_eq(done, 0);
  ck_assert_ptr_nonnull(strstr(h->r.why, "larger than the receive of 100 bytes"));
  for (size_t i = 0; i < sizeof(dst); i++) ck_assert_int_eq(dst[i], 0xee);
  /* The sender stays failed. */
  ck_assert_int_eq(weft_ib_send_post(&h->s, h->fifo, 10, &done), ncclInvalidUsage);
  /* Equal and smaller sends are fine (checked on a fresh pair). */
  free(h);
  h = h_new(1, 0);
  r = h_recv(h, dst, 100);
  h_land(h, -1);
  ck_assert_int_ge(h_send(h, src, 100, NULL), 0);
  h_drain(h, IN_ORDER, NULL);
  ck_assert_int_eq(recv_done(h, r, &got), 1);
  ck_assert_uint_eq(got, 100);
  free(h);
}
END_TEST

/* A completion with an error status fails the request, naming the peer. */
START_TEST(test_error_completion) {
  struct harness *h = h_new(2, 0);
  static unsigned char dst[4096], src[4096];
  int r = h_recv(h, dst, sizeof(dst));
  h_land(h, -1);
  int s = h_send(h, src, 4096, NULL);
  ck_assert_int_ge(s, 0);
  ck_assert_int_eq(weft_ib_send_complete(&h->s, h->s.plan.p[1].wr_id, 0, ncclRemoteError,
                                         "transport retry counter exceeded"),
                   ncclRemoteError);
  int done;
  size_t got;
  ck_assert_int_eq(weft_ib_send_test(&h->s, s, &done, &got), ncclRemoteError);
  ck_assert_int_eq(done, 0);
  ck_assert_ptr_nonnull(strstr(h->s.why, NAME));
  ck_assert_ptr_nonnull(strstr(h->s.why, "transport retry counter exceeded"));
  ck_assert_ptr_nonnull(strstr(h->s.why, "QP 1"));
  /* The receiver: a flushed receive. */
  ck_assert_int_eq(weft_ib_recv_complete(&h->r, weft_ib_wr_id(WEFT_IB_WR_RECV, 0, 0), 0, 0, 0,
                                         ncclSystemError, "Work Request Flushed Error"),
                   ncclSystemError);
  ck_assert_int_eq(weft_ib_recv_test(&h->r, r, &done, &got), ncclSystemError);
  ck_assert_ptr_nonnull(strstr(h->r.why, "receive failed on QP 0"));
  ck_assert_ptr_nonnull(strstr(h->r.why, NAME));
  /* The first error stays: a later one does not replace it. */
  ck_assert_int_eq(weft_ib_recv_complete(&h->r, weft_ib_wr_id(WEFT_IB_WR_CTS, 0, 0), 0, 0, 0,
                                         ncclRemoteError, "other"),
                   ncclSystemError);
  free(h);
}
END_TEST

/* Data for no posted receive, or pieces that disagree: an error, not a write. */
START_TEST(test_unexpected_completion) {
  struct harness *h = h_new(1, 0);
  ck_assert_int_eq(weft_ib_recv_complete(&h->r, weft_ib_wr_id(WEFT_IB_WR_RECV, 0, 0),
                                         weft_ib_imm_make(5, 1, 0), 10, 1, ncclSuccess, ""),
                   ncclInternalError);
  ck_assert_ptr_nonnull(strstr(h->r.why, "no receive posted"));
  free(h);
  h = h_new(1, 0);
  static unsigned char dst[64];
  h_recv(h, dst, 64);
  /* More bytes than posted (a broken peer): refused. */
  ck_assert_int_eq(weft_ib_recv_complete(&h->r, weft_ib_wr_id(WEFT_IB_WR_RECV, 0, 0),
                                         weft_ib_imm_make(0, 1, 0), 65, 1, ncclSuccess, ""),
                   ncclInternalError);
  free(h);
  h = h_new(1, 0);
  ck_assert_int_eq(
      weft_ib_send_complete(&h->s, weft_ib_wr_id(WEFT_IB_WR_DATA, 0, 3), 1, ncclSuccess, ""),
      ncclInternalError);
  free(h);
}
END_TEST

/* The FIFO index wraps (slot 31 -> 0) and so does the 32-bit sequence
 * (and its low 16 bits, which the immediate carries). */
START_TEST(test_wrap_around) {
  run_batches(2, UINT32_MAX - 70, 7, 30, SHUFFLED);
  run_batches(3, 0xfff0u, WEFT_IB_SLOTS, 4, REVERSED);
  run_batches(1, UINT32_MAX, 1, 3 * WEFT_IB_SLOTS, IN_ORDER);
}
END_TEST

/* A stale CTS (last lap's) in a slot gives no credit. */
START_TEST(test_stale_cts) {
  struct harness *h = h_new(1, 0);
  static unsigned char dst[64], src[64];
  for (int i = 0; i < WEFT_IB_SLOTS; i++) {
    int r = h_recv(h, dst, 64);
    h_land(h, -1);
    int s = h_send(h, src, 8, NULL);
    h_drain(h, IN_ORDER, NULL);
    size_t got;
    ck_assert_int_eq(recv_done(h, r, &got), 1);
    ck_assert_int_eq(send_done(h, s, &got), 1);
  }
  /* Slot 0 holds sequence 0's CTS; sequence 32 must not take it. */
  ck_assert_int_eq(h_send(h, src, 8, NULL), -1);
  free(h);
}
END_TEST

/* Messages over 1 GiB go in several pieces; past what the QPs carry, refused. */
START_TEST(test_large_plans) {
  struct harness *h = h_new(1, 0);
  static unsigned char dst[1];
  h_recv(h, dst, (size_t)8 << 30);
  h_land(h, -1);
  ncclResult_t res;
  ck_assert_int_ge(weft_ib_send_post(&h->s, h->fifo, (size_t)3 << 30, &(int){0}), 0);
  ck_assert_int_eq(h->s.plan.npieces, 3);
  for (int i = 0; i < 3; i++) ck_assert_uint_le(h->s.plan.p[i].len, WEFT_IB_PIECE_MAX);
  free(h);
  h = h_new(1, 0);
  h_recv(h, dst, (size_t)8 << 30);
  h_land(h, -1);
  ck_assert_int_eq(h_send(h, NULL, (size_t)5 << 30, &res), -1);
  ck_assert_int_eq(res, ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(h->s.why, "larger than 1 QPs carry"));
  free(h);
}
END_TEST

START_TEST(test_flush) {
  struct harness *h = h_new(1, 0);
  int req[WEFT_IB_SLOTS + 1], done;
  uint64_t wr[WEFT_IB_SLOTS + 1];
  for (int i = 0; i < WEFT_IB_SLOTS; i++) {
    ck_assert_int_eq(weft_ib_flush_post(&h->r, &req[i], &wr[i]), ncclSuccess);
    ck_assert_int_ge(req[i], 0);
  }
  ck_assert_int_eq(weft_ib_flush_post(&h->r, &req[WEFT_IB_SLOTS], &wr[WEFT_IB_SLOTS]), ncclSuccess);
  ck_assert_int_eq(req[WEFT_IB_SLOTS], -1);
  ck_assert_int_eq(weft_ib_flush_test(&h->r, req[3], &done), ncclSuccess);
  ck_assert_int_eq(done, 0);
  ck_assert_int_eq(weft_ib_recv_complete(&h->r, wr[3], 0, 1, 1, ncclSuccess, ""), ncclSuccess);
  ck_assert_int_eq(weft_ib_flush_test(&h->r, req[3], &done), ncclSuccess);
  ck_assert_int_eq(done, 1);
  ck_assert_int_eq(weft_ib_flush_post(&h->r, &req[WEFT_IB_SLOTS], &wr[WEFT_IB_SLOTS]), ncclSuccess);
  ck_assert_int_eq(req[WEFT_IB_SLOTS], 3);
  free(h);
}
END_TEST

/* ---- The registration cache ------------------------------------------------- */

START_TEST(test_mr_cache) {
  struct weft_ib_mr_cache c = {0};
  uintptr_t start;
  size_t span;
  weft_ib_mr_cache_range(0x10010, 0x2000, 0x1000, &start, &span);
  ck_assert_uint_eq(start, 0x10000);
  ck_assert_uint_eq(span, 0x3000);
  weft_ib_mr_cache_range(0x20000, 0, 0x1000, &start, &span);
  ck_assert_uint_eq(span, 0x1000);
  int a, b, d;
  ck_assert_ptr_null(weft_ib_mr_cache_get(&c, 0x10010, 0x2000, 1));
  ck_assert_int_eq(weft_ib_mr_cache_put(&c, 0x10000, 0x3000, 1, &a), 0);
  /* Inside: a hit, one more reference. */
  ck_assert_ptr_eq(weft_ib_mr_cache_get(&c, 0x11000, 0x100, 1), &a);
  ck_assert_ptr_eq(weft_ib_mr_cache_get(&c, 0x10000, 0x3000, 1), &a);
  /* Past the end, or another memory type: a miss. */
  ck_assert_ptr_null(weft_ib_mr_cache_get(&c, 0x12000, 0x1001, 1));
  ck_assert_ptr_null(weft_ib_mr_cache_get(&c, 0x11000, 0x100, 2));
  ck_assert_ptr_null(weft_ib_mr_cache_get(&c, 0xf000, 0x1001, 1));
  ck_assert_int_eq(weft_ib_mr_cache_put(&c, 0x12000, 0x2000, 1, &b), 0);
  ck_assert_ptr_eq(weft_ib_mr_cache_get(&c, 0x13000, 0x10, 1), &b);
  /* An overlap: the oldest serves. */
  ck_assert_ptr_eq(weft_ib_mr_cache_get(&c, 0x12000, 0x10, 1), &a);
  for (int i = 0; i < 40; i++)
    ck_assert_int_eq(weft_ib_mr_cache_put(&c, 0x100000 * (uintptr_t)(i + 1), 0x1000, 2, &d), 0);
  ck_assert_int_eq(c.n, 42);
  /* a: put + 3 gets = 4 references. */
  for (int i = 0; i < 3; i++) ck_assert_int_eq(weft_ib_mr_cache_release(&c, &a), 0);
  ck_assert_int_eq(weft_ib_mr_cache_release(&c, &a), 1);
  ck_assert_int_eq(weft_ib_mr_cache_release(&c, &a), -1);
  ck_assert_ptr_eq(weft_ib_mr_cache_get(&c, 0x12000, 0x10, 1), &b);
  ck_assert_ptr_null(weft_ib_mr_cache_get(&c, 0x10000, 0x10, 1));
  /* b: put + 2 gets. */
  ck_assert_int_eq(weft_ib_mr_cache_release(&c, &b), 0);
  ck_assert_int_eq(weft_ib_mr_cache_release(&c, &b), 0);
  ck_assert_int_eq(weft_ib_mr_cache_release(&c, &b), 1);
  ck_assert_int_eq(c.n, 40);
  weft_ib_mr_cache_free(&c);
  ck_assert_int_eq(c.n, 0);
}
END_TEST

#if WEFT_HAVE_IB_NET
/* ---- Rules: async events, failed completions, registration ------------------- */

struct async_case {
  enum ibv_event_type type;
  enum weft_ib_async_scope scope;
  ncclResult_t res;
};

static const struct async_case async_cases[] = {
    {IBV_EVENT_PORT_ERR, WEFT_IB_ASYNC_PORT, ncclRemoteError},
    {IBV_EVENT_QP_FATAL, WEFT_IB_ASYNC_QP, ncclSystemError},
    {IBV_EVENT_QP_REQ_ERR, WEFT_IB_ASYNC_QP, ncclSystemError},
    {IBV_EVENT_QP_ACCESS_ERR, WEFT_IB_ASYNC_QP, ncclSystemError},
    {IBV_EVENT_CQ_ERR, WEFT_IB_ASYNC_CQ, ncclSystemError},
    {IBV_EVENT_DEVICE_FATAL, WEFT_IB_ASYNC_DEVICE, ncclSystemError},
    {IBV_EVENT_PORT_ACTIVE, WEFT_IB_ASYNC_NONE, ncclSuccess},
    {IBV_EVENT_LID_CHANGE, WEFT_IB_ASYNC_NONE, ncclSuccess},
    {IBV_EVENT_GID_CHANGE, WEFT_IB_ASYNC_NONE, ncclSuccess},
    {IBV_EVENT_COMM_EST, WEFT_IB_ASYNC_NONE, ncclSuccess},
    {IBV_EVENT_SQ_DRAINED, WEFT_IB_ASYNC_NONE, ncclSuccess},
};

START_TEST(test_async_table) {
  const struct async_case *c = &async_cases[_i];
  struct weft_ib_async_verdict v;
  weft_ib_async_decide(c->type, &v);
  ck_assert_int_eq(v.scope, c->scope);
  ck_assert_int_eq(v.res, c->res);
}
END_TEST

START_TEST(test_async_message) {
  struct weft_ib_async_verdict v;
  char msg[512];
  weft_ib_async_decide(IBV_EVENT_PORT_ERR, &v);
  weft_ib_async_message(&v, "mlx5_3", 2, "10.1.2.3:40000", "port error", msg, sizeof(msg));
  ck_assert_str_eq(msg,
                   "NET/IB: mlx5_3:2: the port went down (async event port error); connection "
                   "with peer 10.1.2.3:40000 failed");
  weft_ib_async_decide(IBV_EVENT_QP_FATAL, &v);
  weft_ib_async_message(&v, "mlx5_0", 1, "[fe80::1]:5", "local work queue catastrophic error", msg,
                        sizeof(msg));
  ck_assert_ptr_nonnull(strstr(msg, "mlx5_0:1"));
  ck_assert_ptr_nonnull(strstr(msg, "[fe80::1]:5"));
  ck_assert_ptr_nonnull(strstr(msg, "queue pair"));
}
END_TEST

START_TEST(test_wc_status) {
  ck_assert_int_eq(weft_ib_wc_fail_as(IBV_WC_RETRY_EXC_ERR), ncclRemoteError);
  ck_assert_int_eq(weft_ib_wc_fail_as(IBV_WC_RNR_RETRY_EXC_ERR), ncclRemoteError);
  ck_assert_int_eq(weft_ib_wc_fail_as(IBV_WC_REM_ACCESS_ERR), ncclRemoteError);
  ck_assert_int_eq(weft_ib_wc_fail_as(IBV_WC_LOC_PROT_ERR), ncclSystemError);
  ck_assert_int_eq(weft_ib_wc_fail_as(IBV_WC_WR_FLUSH_ERR), ncclSystemError);
  ck_assert_int_eq(weft_ib_wc_fail_as(IBV_WC_LOC_LEN_ERR), ncclSystemError);
}
END_TEST

START_TEST(test_mr_choose) {
  char why[256];
  struct weft_ib_gdr_caps none = {0, 0, 1}, dmabuf = {1, 1, 1}, peer = {0, 1, 1},
                          noread = {1, 1, 0};
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_HOST, 1, &none, why, sizeof(why)),
                   WEFT_IB_MR_HOST);
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_CUDA, 0, &dmabuf, why, sizeof(why)),
                   WEFT_IB_MR_DMABUF);
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_CUDA, 0, &peer, why, sizeof(why)),
                   WEFT_IB_MR_PEERMEM);
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_DMABUF, 0, &peer, why, sizeof(why)),
                   WEFT_IB_MR_BOUNCE);
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_CUDA, 1, &none, why, sizeof(why)),
                   WEFT_IB_MR_BOUNCE);
  ck_assert_ptr_nonnull(strstr(why, "nvidia-peermem"));
  /* NCCL_NET_GDR_READ=0: sends bounce, receives still land in device memory. */
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_CUDA, 1, &noread, why, sizeof(why)),
                   WEFT_IB_MR_BOUNCE);
  ck_assert_ptr_nonnull(strstr(why, "NCCL_NET_GDR_READ=0"));
  ck_assert_int_eq(weft_ib_mr_choose(WEFT_NET_PTR_CUDA, 0, &noread, why, sizeof(why)),
                   WEFT_IB_MR_DMABUF);
}
END_TEST
#endif

static Suite *ib_fifo_suite(void) {
  Suite *s = suite_create("ib_fifo");
  TCase *tc = tcase_create("fifo");
  tcase_add_test(tc, test_in_order);
  tcase_add_test(tc, test_out_of_order_one_qp);
  tcase_add_test(tc, test_out_of_order_qps);
  tcase_add_test(tc, test_pieces_over_qps);
  tcase_add_test(tc, test_credit_exhaustion);
  tcase_add_test(tc, test_size_mismatch);
  tcase_add_test(tc, test_error_completion);
  tcase_add_test(tc, test_unexpected_completion);
  tcase_add_test(tc, test_wrap_around);
  tcase_add_test(tc, test_stale_cts);
  tcase_add_test(tc, test_large_plans);
  tcase_add_test(tc, test_flush);
  suite_add_tcase(s, tc);
  tc = tcase_create("mr_cache");
  tcase_add_test(tc, test_mr_cache);
  suite_add_tcase(s, tc);
#if WEFT_HAVE_IB_NET
  tc = tcase_create("rules");
  tcase_add_loop_test(tc, test_async_table, 0, (int)(sizeof(async_cases) / sizeof(async_cases[0])));
  tcase_add_test(tc, test_async_message);
  tcase_add_test(tc, test_wc_status);
  tcase_add_test(tc, test_mr_choose);
  suite_add_tcase(s, tc);
#endif
  return s;
}

int main(void) {
  return suite_run(ib_fifo_suite());
}
