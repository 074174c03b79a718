/* A real transfer over net/ib's table (weft_net_ib) between two
 * processes on this host's first IB port: the receiver listens and hands
 * its handle over a pipe, the sender connects; messages of 0 bytes to 8
 * MiB over 2 QPs (NCCL_IB_QPS_PER_CONNECTION=2, set by main), every byte
 * checked, four receives in flight, then a send larger than its receive,
 * which must fail on both sides (ncclInvalidUsage) instead of hanging.
 * Every wait is bounded. Run only where an RDMA device exists
 * (test_ib_devices). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "transport/net/net.h"

#if WEFT_HAVE_IB_NET

#define NMSG 80
#define MAXSZ ((size_t)8 << 20)
#define FAIL(...) \
  (fprintf(stderr, "FAIL ib_devices transfer: " __VA_ARGS__), fputc('\n', stderr), 1)

static size_t size_of(int i) {
  static const size_t sizes[] = {0, 1, 100, 4096, 65536, 1 << 20, MAXSZ, 12345};
  return sizes[i % 8];
}

static unsigned char pattern(int i, size_t k) {
  return (unsigned char)(k * 13 + (size_t)i * 7);
}

/* Tests req until done (or an error, or 20 s). */
static int wait_req(void *req, size_t *size, ncclResult_t *res_out) {
  const struct weft_net_ops *n = &weft_net_ib;
  int64_t end = weft_time_ms() + 20000;
  int done = 0;
  while (!done) {
    ncclResult_t res = n->test(req, &done, size);
    if (res != ncclSuccess) return *res_out = res, -1;
    if (weft_time_ms() > end) return *res_out = ncclSystemError, -1;
  }
  return *res_out = ncclSuccess, 0;
}

static int receiver(int wfd) {
  const struct weft_net_ops *n = &weft_net_ib;
  char handle[WEFT_NET_HANDLE_BYTES];
  void *lc = NULL, *rc = NULL, *mh = NULL;
  if (n->listen(0, handle, &lc) != ncclSuccess) return FAIL("listen");
  if (write(wfd, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return FAIL("pipe");
  int64_t end = weft_time_ms() + 20000;
  while (rc == NULL && weft_time_ms() < end)
    if (n->accept(lc, &rc) != ncclSuccess) return FAIL("accept");
  if (rc == NULL) return FAIL("accept: no connection in 20 s");
  unsigned char *buf = malloc(MAXSZ * 4);
  if (buf == NULL || n->reg_mr(rc, buf, MAXSZ * 4, WEFT_NET_PTR_HOST, &mh) != ncclSuccess)
    return FAIL("reg_mr");
  void *reqs[4];
  ncclResult_t res;
  /* Four receives in flight at a time, into four buffer slots. */
  for (int i = 0; i < NMSG; i++) {
    int slot = i % 4;
    if (i >= 4) {
      size_t got = 0;
      int j = i - 4;
      if (wait_req(reqs[slot], &got, &res) != 0) return FAIL("receive %d: error %d", j, res);
      if (got != size_of(j)) return FAIL("receive %d: %zu bytes, expected %zu", j, got, size_of(j));
      for (size_t k = 0; k < got; k++)
        if (buf[MAXSZ * (size_t)slot + k] != pattern(j, k))
          return FAIL("receive %d: byte %zu", j, k);
    }
    void *data = buf + MAXSZ * (size_t)slot;
    size_t sz = MAXSZ;
    int tag = 0;
    reqs[slot] = NULL;
    while (reqs[slot] == NULL)
      if (n->irecv(rc, 1, &data, &sz, &tag, &mh, &reqs[slot]) != ncclSuccess) return FAIL("irecv");
  }
  for (int j = NMSG - 4; j < NMSG; j++) {
    size_t got;
    if (wait_req(reqs[j % 4], &got, &res) != 0 || got != size_of(j)) return FAIL("last receives");
  }
  /* The mismatch: 100 bytes posted, 200 sent. */
  void *data = buf;
  size_t sz = 100;
  int tag = 0;
  void *req = NULL;
  while (req == NULL)
    if (n->irecv(rc, 1, &data, &sz, &tag, &mh, &req) != ncclSuccess) return FAIL("irecv");
  size_t got;
  if (wait_req(req, &got, &res) == 0 || res != ncclInvalidUsage)
    return FAIL("oversized send: the receiver got %d, expected ncclInvalidUsage", res);
  n->dereg_mr(rc, mh);
  n->close_recv(rc);
  n->close_listen(lc);
  return 0;
}

static int sender(int rfd) {
  const struct weft_net_ops *n = &weft_net_ib;
  char handle[WEFT_NET_HANDLE_BYTES];
  void *sc = NULL, *mh = NULL;
  if (read(rfd, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return FAIL("pipe");
  int64_t end = weft_time_ms() + 20000;
  while (sc == NULL && weft_time_ms() < end)
    if (n->connect(0, handle, &sc) != ncclSuccess) return FAIL("connect");
  if (sc == NULL) return FAIL("connect: no connection in 20 s");
  unsigned char *buf = malloc(MAXSZ);
  if (buf == NULL || n->reg_mr(sc, buf, MAXSZ, WEFT_NET_PTR_HOST, &mh) != ncclSuccess)
    return FAIL("reg_mr");
  ncclResult_t res;
  for (int i = 0; i < NMSG; i++) {
    for (size_t k = 0; k < size_of(i); k++) buf[k] = pattern(i, k);
    void *req = NULL;
    end = weft_time_ms() + 20000;
    while (req == NULL && weft_time_ms() < end)
      if (n->isend(sc, buf, size_of(i), 0, mh, &req) != ncclSuccess) return FAIL("isend %d", i);
    if (req == NULL) return FAIL("isend %d: no credit in 20 s", i);
    size_t got;
    if (wait_req(req, &got, &res) != 0 || got != size_of(i)) return FAIL("send %d: %d", i, res);
  }
  void *req = NULL;
  end = weft_time_ms() + 20000;
  while (req == NULL && weft_time_ms() < end) {
    res = n->isend(sc, buf, 200, 0, mh, &req);
    if (res != ncclSuccess) break;
  }
  if (res != ncclInvalidUsage) return FAIL("oversized send: %d, expected ncclInvalidUsage", res);
  n->dereg_mr(sc, mh);
  n->close_send(sc);
  return 0;
}

int ib_devices_transfer(void) {
  int fds[2];
  if (pipe(fds) != 0) return FAIL("pipe");
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) _exit(receiver(fds[1]));
  int rc = sender(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = FAIL("the receiver failed (status 0x%x)", st);
  if (rc == 0)
    printf("ib_devices: %d messages over weft_net_ib, and the mismatch, checked\n", NMSG);
  return rc;
}

#else
int ib_devices_transfer(void) {
  return 77;
}
#endif
