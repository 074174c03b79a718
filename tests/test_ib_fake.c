/* net/ib's verbs glue (transport/net/ib/: handshake, QP transitions,
 * posting, CQ polling, registration and its cache, the async thread) run
 * over a software stand-in for libibverbs and one device (ib_fake/,
 * loaded with dlopen as weft loads libibverbs). No machine here has an
 * RDMA device; this is not one either: it checks that the glue makes the
 * calls a NIC requires, in an order it accepts, and handles what comes
 * back. Both ends of every connection live in this process. The real
 * thing: test_ib_devices, where a device exists. */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/debug.h"
#include "transport/net/ib/ib_net.h"
#include "transport/socket.h"
#include "suite_run.h"

static void (*inject)(int type, int port, int qpn);
static void (*fail_next)(int status);
static const struct weft_net_ops *n = &weft_net_ib;

struct pair {
  void *lc, *sc, *rc, *smh, *rmh;
  unsigned char *sbuf, *rbuf;
};

#define BUF (4u << 20)

static void pair_open(struct pair *p) {
  char handle[WEFT_NET_HANDLE_BYTES];
  memset(p, 0, sizeof(*p));
  ck_assert_int_eq(n->listen(0, handle, &p->lc), ncclSuccess);
  int64_t end = weft_time_ms() + 5000;
  while ((p->sc == NULL || p->rc == NULL) && weft_time_ms() < end) {
    if (p->sc == NULL) ck_assert_int_eq(n->connect(0, handle, &p->sc), ncclSuccess);
    if (p->rc == NULL) ck_assert_int_eq(n->accept(p->lc, &p->rc), ncclSuccess);
  }
  ck_assert_ptr_nonnull(p->sc);
  ck_assert_ptr_nonnull(p->rc);
  p->sbuf = malloc(BUF);
  p->rbuf = malloc(BUF);
  ck_assert_int_eq(n->reg_mr(p->sc, p->sbuf, BUF, WEFT_NET_PTR_HOST, &p->smh), ncclSuccess);
  ck_assert_int_eq(n->reg_mr(p->rc, p->rbuf, BUF, WEFT_NET_PTR_HOST, &p->rmh), ncclSuccess);
}

static void pair_close(struct pair *p) {
  ck_assert_int_eq(n->dereg_mr(p->sc, p->smh), ncclSuccess);
  ck_assert_int_eq(n->dereg_mr(p->rc, p->rmh), ncclSuccess);
  ck_assert_int_eq(n->close_send(p->sc), ncclSuccess);
  ck_assert_int_eq(n->close_recv(p->rc), ncclSuccess);
  ck_assert_int_eq(n->close_listen(p->lc), ncclSuccess);
  free(p->sbuf);
  free(p->rbuf);
}

static void *post_recv(struct pair *p, size_t off, size_t size) {
  void *data = p->rbuf + off, *req = NULL;
  int tag = 0;
  ck_assert_int_eq(n->irecv(p->rc, 1, &data, &size, &tag, &p->rmh, &req), ncclSuccess);
  return req;
}

static void *post_send(struct pair *p, size_t off, size_t size) {
  void *req = NULL;
  ck_assert_int_eq(n->isend(p->sc, p->sbuf + off, size, 0, p->smh, &req), ncclSuccess);
  return req;
}

/* Tests req until done or an error (5 s at most); returns the result. */
static ncclResult_t wait_req(void *req, size_t *size) {
  int64_t end = weft_time_ms() + 5000;
  int done = 0;
  while (weft_time_ms() < end) {
    ncclResult_t res = n->test(req, &done, size);
    if (res != ncclSuccess || done) return res;
    usleep(200);
  }
  ck_abort_msg("a request did not finish in 5 s");
  return ncclInternalError;
}

START_TEST(test_props) {
  int ndev = 0;
  ck_assert_int_eq(n->devices(&ndev), ncclSuccess);
  ck_assert_int_eq(ndev, 1);
  struct weft_net_props pr;
  ck_assert_int_eq(n->get_properties(0, &pr), ncclSuccess);
  ck_assert_str_eq(pr.name, "fake_0");
  ck_assert_int_eq(pr.port, 1);
  ck_assert_int_eq(pr.speed, 100000);
  ck_assert_int_eq(pr.ptr_support, WEFT_NET_PTR_HOST); /* no dma-buf, no peermem */
  ck_assert_int_eq(pr.max_recvs, 1);
  ck_assert_int_eq(n->get_properties(1, &pr), ncclInvalidArgument);
  /* The device a GPU's nearest NIC names (the CUDA engine's net links). */
  ck_assert_int_eq(weft_net_dev_by_name(n, "fake_0", 1), 0);
  ck_assert_int_eq(weft_net_dev_by_name(n, "fake_0", 0), 0); /* any port */
  ck_assert_int_eq(weft_net_dev_by_name(n, "fake_0", 2), -1);
  ck_assert_int_eq(weft_net_dev_by_name(n, "fake_1", 1), -1);
  ck_assert_int_eq(weft_net_dev_by_name(n, "", 0), -1);
}
END_TEST

/* Messages of 0 bytes to 512 KiB over 3 QPs, 8 in flight, completed in
 * reverse order, every byte checked, nothing written past a message. */
START_TEST(test_transfer) {
  static const size_t sizes[] = {0, 1, 129, 4096, 100000, 300000, BUF / 8, 7};
  struct pair p;
  pair_open(&p);
  ck_assert_int_eq(((struct weft_ib_comm *)p.sc)->nqps, 3);
  const size_t slot = BUF / 8;
  for (int round = 0; round < 12; round++) {
    void *r[8], *s[8];
    memset(p.rbuf, 0xee, BUF);
    for (int i = 0; i < 8; i++) ck_assert_ptr_nonnull(r[i] = post_recv(&p, slot * i, slot));
    for (int i = 0; i < 8; i++) {
      for (size_t k = 0; k < slot; k++) p.sbuf[slot * i + k] = (unsigned char)(k * 3 + i + round);
      ck_assert_ptr_nonnull(s[i] = post_send(&p, slot * i, sizes[(i + round) % 8]));
    }
    for (int i = 7; i >= 0; i--) {
      size_t got = 99;
      ck_assert_int_eq(wait_req(r[i], &got), ncclSuccess);
      ck_assert_uint_eq(got, sizes[(i + round) % 8]);
      ck_assert_int_eq(wait_req(s[i], &got), ncclSuccess);
      ck_assert_uint_eq(got, sizes[(i + round) % 8]);
      ck_assert_int_eq(memcmp(p.rbuf + slot * i, p.sbuf + slot * i, got), 0);
      if (got < slot) ck_assert_int_eq(p.rbuf[slot * i + got], 0xee);
    }
  }
  pair_close(&p);
}
END_TEST

/* 32 receives posted: the 33rd waits; no receive: a send waits. */
START_TEST(test_credits) {
  struct pair p;
  pair_open(&p);
  ck_assert_ptr_null(post_send(&p, 0, 64));
  void *r[WEFT_IB_SLOTS], *s[WEFT_IB_SLOTS];
  for (int i = 0; i < WEFT_IB_SLOTS; i++) ck_assert_ptr_nonnull(r[i] = post_recv(&p, 64 * i, 64));
  ck_assert_ptr_null(post_recv(&p, 0, 64));
  for (int i = 0; i < WEFT_IB_SLOTS; i++) ck_assert_ptr_nonnull(s[i] = post_send(&p, 0, 64));
  ck_assert_ptr_null(post_send(&p, 0, 64));
  for (int i = 0; i < WEFT_IB_SLOTS; i++) {
    size_t got;
    ck_assert_int_eq(wait_req(r[i], &got), ncclSuccess);
    ck_assert_int_eq(wait_req(s[i], &got), ncclSuccess);
  }
  ck_assert_ptr_nonnull(post_recv(&p, 0, 64));
  pair_close(&p);
}
END_TEST

/* The cache: the same buffer twice is one registration; refcounted. */
START_TEST(test_reg_cache) {
  struct pair p;
  pair_open(&p);
  void *mh2 = NULL, *mh3 = NULL;
  ck_assert_int_eq(n->reg_mr(p.rc, p.sbuf + 100, 1000, WEFT_NET_PTR_HOST, &mh2), ncclSuccess);
  ck_assert_ptr_eq(mh2, p.smh); /* sender and receiver share the port's cache */
  ck_assert_int_eq(n->dereg_mr(p.rc, mh2), ncclSuccess);
  unsigned char *other = malloc(8192);
  ck_assert_int_eq(n->reg_mr(p.sc, other, 8192, WEFT_NET_PTR_HOST, &mh3), ncclSuccess);
  ck_assert_ptr_ne(mh3, p.smh); /* another buffer: another registration */
  ck_assert_int_eq(n->dereg_mr(p.sc, mh3), ncclSuccess);
  ck_assert_int_eq(n->dereg_mr(p.sc, mh3), ncclInvalidArgument); /* gone */
  free(other);
  pair_close(&p);
}
END_TEST

START_TEST(test_mismatch) {
  struct pair p;
  pair_open(&p);
  void *r = post_recv(&p, 0, 100), *s = NULL;
  ck_assert_int_eq(n->isend(p.sc, p.sbuf, 200, 0, p.smh, &s), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "larger than the receive of 100 bytes"));
  size_t got;
  ck_assert_int_eq(wait_req(r, &got), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "fake_0:1 with peer"));
  pair_close(&p);
}
END_TEST

START_TEST(test_error_completion) {
  struct pair p;
  pair_open(&p);
  void *r = post_recv(&p, 0, 4096);
  fail_next(IBV_WC_RETRY_EXC_ERR);
  void *s = post_send(&p, 0, 4096);
  ck_assert_ptr_nonnull(s);
  size_t got;
  ck_assert_int_eq(wait_req(s, &got), ncclRemoteError);
  const char *msg = weft_last_error();
  ck_assert_msg(
      strstr(msg, "fake_0:1 with peer") && strstr(msg, "transport retry counter exceeded"), "%s",
      msg);
  /* The comm stays failed. */
  ck_assert_int_eq(n->isend(p.sc, p.sbuf, 1, 0, p.smh, &s), ncclRemoteError);
  (void)r;
  pair_close(&p);
}
END_TEST

/* A port going down fails the connections on it: test returns, no hang. */
START_TEST(test_async_port) {
  struct pair p;
  pair_open(&p);
  void *r = post_recv(&p, 0, 64);
  inject(IBV_EVENT_PORT_ERR, 1, -1);
  size_t got;
  ck_assert_int_eq(wait_req(r, &got), ncclRemoteError);
  const char *msg = weft_last_error();
  ck_assert_msg(strstr(msg,
                       "fake_0:1: the port went down (async event port error); connection "
                       "with peer") != NULL,
                "%s", msg);
  void *s = NULL;
  ck_assert_int_eq(n->isend(p.sc, p.sbuf, 1, 0, p.smh, &s), ncclRemoteError);
  pair_close(&p);
}
END_TEST

/* A QP in error fails the connection that owns it, and only that one. */
START_TEST(test_async_qp) {
  struct pair p;
  pair_open(&p);
  struct weft_ib_comm *sc = p.sc;
  void *r = post_recv(&p, 0, 64);
  inject(IBV_EVENT_QP_FATAL, 0, (int)sc->qps[1]->qp_num);
  void *s = NULL;
  int64_t end = weft_time_ms() + 5000;
  ncclResult_t res = ncclSuccess;
  while (res == ncclSuccess && weft_time_ms() < end) {
    res = n->isend(p.sc, p.sbuf, 1, 0, p.smh, &s);
    usleep(200);
  }
  ck_assert_int_eq(res, ncclSystemError);
  ck_assert_msg(strstr(weft_last_error(), "a queue pair went into the error state"), "%s",
                weft_last_error());
  int done;
  ck_assert_int_eq(n->test(r, &done, NULL), ncclSuccess); /* the receiver is not concerned */
  pair_close(&p);
}
END_TEST

/* A stranger on the listener is dropped; the listener keeps serving. */
START_TEST(test_stranger) {
  struct {
    uint64_t magic, nonce;
    union weft_sockaddr addr;
  } h;
  char handle[WEFT_NET_HANDLE_BYTES];
  void *lc = NULL, *sc = NULL, *rc = NULL;
  ck_assert_int_eq(n->listen(0, handle, &lc), ncclSuccess);
  memcpy(&h, handle, sizeof(h));
  int fd = -1;
  ck_assert_int_eq(weft_socket_connect(&h.addr, weft_time_ms() + 5000, &fd), ncclSuccess);
  char junk[sizeof(struct weft_ib_wire)];
  memset(junk, 0x5a, sizeof(junk));
  ck_assert_int_eq(weft_socket_send_all(fd, junk, sizeof(junk), weft_time_ms() + 5000, "listener"),
                   ncclSuccess);
  int64_t end = weft_time_ms() + 5000;
  while ((sc == NULL || rc == NULL) && weft_time_ms() < end) {
    if (sc == NULL) ck_assert_int_eq(n->connect(0, handle, &sc), ncclSuccess);
    if (rc == NULL) ck_assert_int_eq(n->accept(lc, &rc), ncclSuccess);
  }
  ck_assert_ptr_nonnull(sc);
  ck_assert_ptr_nonnull(rc);
  ck_assert_msg(strstr(weft_last_error(), "dropped a connection from") &&
                    strstr(weft_last_error(), "not a weft IB client; still listening"),
                "%s", weft_last_error());
  weft_socket_close(&fd);
  ck_assert_int_eq(n->close_send(sc), ncclSuccess);
  ck_assert_int_eq(n->close_recv(rc), ncclSuccess);
  ck_assert_int_eq(n->close_listen(lc), ncclSuccess);
}
END_TEST

START_TEST(test_bad_calls) {
  struct pair p;
  pair_open(&p);
  void *req = NULL, *mh = NULL;
  ck_assert_int_eq(n->isend(p.sc, p.sbuf, 10, 0, NULL, &req), ncclInvalidArgument);
  char why[256];
  ck_assert_int_eq(weft_net_ib_mr_bounce(p.rc, WEFT_NET_PTR_CUDA, why, sizeof(why)), 1);
  ck_assert_int_eq(n->reg_mr(p.rc, p.rbuf, 64, WEFT_NET_PTR_CUDA, &mh), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "needs a host bounce buffer"));
  /* Host memory: nothing to flush. */
  void *data = p.rbuf;
  int size = 64;
  ck_assert_int_eq(n->iflush(p.rc, 1, &data, &size, &p.rmh, &req), ncclSuccess);
  ck_assert_ptr_null(req);
  pair_close(&p);
}
END_TEST

int main(void) {
  const char *lib = getenv("WEFT_TEST_FAKEVERBS");
  if (lib == NULL) {
    fprintf(stderr, "WEFT_TEST_FAKEVERBS is not set (meson test sets it)\n");
    return 1;
  }
  void *h = dlopen(lib, RTLD_NOW);
  if (h == NULL) {
    fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
    return 1;
  }
  void *a = dlsym(h, "fakeverbs_inject"), *b = dlsym(h, "fakeverbs_fail_next");
  memcpy(&inject, &a, sizeof(a));
  memcpy(&fail_next, &b, sizeof(b));
  weft__ib_set_lib(lib);
  unsetenv("NCCL_IB_HCA");
  unsetenv("NCCL_IB_DISABLE");
  setenv("NCCL_IB_QPS_PER_CONNECTION", "3", 1);
  Suite *s = suite_create("ib_fake");
  TCase *tc = tcase_create("glue");
  tcase_add_test(tc, test_props);
  tcase_add_test(tc, test_transfer);
  tcase_add_test(tc, test_credits);
  tcase_add_test(tc, test_reg_cache);
  tcase_add_test(tc, test_mismatch);
  tcase_add_test(tc, test_error_completion);
  tcase_add_test(tc, test_async_port);
  tcase_add_test(tc, test_async_qp);
  tcase_add_test(tc, test_stranger);
  tcase_add_test(tc, test_bad_calls);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
