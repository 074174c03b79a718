/* The socket network (transport/net/socket/) through its ops table, over
 * real loopback sockets between two processes: the test process receives,
 * a forked child sends (forked before either starts a helper thread; the
 * handle crosses a pipe). Messages of 0 B..64 MiB with random contents,
 * many in flight, a send smaller and one larger than the receive, a
 * stranger at the listener, a peer killed mid-message, a send that leaves
 * a copy behind (isend_mirror), a sender whose
 * socket is full sleeping, and the thread and socket counts (1x1, 4x2).
 * Parameters are read once per process, so each test sets them before its
 * fork (Check runs each test in its own fork). */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/param.h"
#include "transport/net/net.h"
#include "transport/net/socket/socket_net.h"
#include "transport/socket.h"
#include "proc_threads.h"
#include "suite_run.h"

#define WAIT_MS 20000
#define MIB (1024 * 1024)

static const struct weft_net_ops *net;
/* How the sender connects: -1 net->connect (the parameters' counts); 0
 * weft_net_socket_connect_single (no data sockets, no threads: the host
 * engine's links on a busy host); k weft_net_socket_connect_threads with
 * k threads of one socket each (the host engine's links with 8 channels). */
static int connect_threads = -1;

static void nap_us(long us) {
  struct timespec ts = {0, us * 1000};
  nanosleep(&ts, NULL);
}

/* xorshift64, 8 bytes a step: the sender fills, the receiver checks the
 * same stream. */
static void fill(char *buf, size_t n, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    memcpy(buf + i, &x, 8);
  }
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  memcpy(buf + i, &x, n - i);
}

static int matches(const char *buf, size_t n, uint64_t seed) {
  char *want = malloc(n + 8);
  fill(want, n, seed);
  int ok = memcmp(buf, want, n) == 0;
  free(want);
  return ok;
}

/* Whether buf[0..n) is all byte c. */
static int all_bytes(const char *buf, size_t n, char c) {
  for (size_t i = 0; i < n; i++)
    if (buf[i] != c) return 0;
  return 1;
}

/* Tests until done; returns the result (ncclSuccess with *size set). */
static ncclResult_t wait_req(void *req, size_t *size) {
  int64_t end = weft_time_ms() + WAIT_MS;
  for (;;) {
    int done = 0;
    ncclResult_t res = net->test(req, &done, size);
    if (res != ncclSuccess || done) return res;
    if (weft_time_ms() > end) return ncclInternalError;
    nap_us(20);
  }
}

static void *accept_comm(void *listen) {
  void *comm = NULL;
  int64_t end = weft_time_ms() + WAIT_MS;
  while (comm == NULL && weft_time_ms() < end) {
    ck_assert_int_eq(net->accept(listen, &comm), ncclSuccess);
    if (comm == NULL) nap_us(100);
  }
  ck_assert_msg(comm != NULL, "accept did not complete");
  return comm;
}

/* The child's side: connect to the handle (read from fd), then run. */
static int child_connect(int fd, void **comm) {
  char handle[WEFT_NET_HANDLE_BYTES];
  if (read(fd, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 0;
  if (weft_net_get(&net) != ncclSuccess) return 0;
  *comm = NULL;
  int64_t end = weft_time_ms() + WAIT_MS;
  while (*comm == NULL && weft_time_ms() < end) {
    ncclResult_t res = connect_threads == 0  ? weft_net_socket_connect_single(0, handle, comm)
                       : connect_threads > 0 ? weft_net_socket_connect_threads(0, handle,
                                                                              connect_threads, comm)
                                             : net->connect(0, handle, comm);
    if (res != ncclSuccess) return 0;
    if (*comm == NULL) nap_us(100);
  }
  return *comm != NULL;
}

typedef int (*sender_fn)(void *send_comm, int back_fd);

/* A sender child and the listener it connects to. */
struct pair {
  pid_t pid;
  void *listen;
  int hand; /* write end: the handle to the child */
  int back; /* read end: child to parent */
  char handle[WEFT_NET_HANDLE_BYTES];
};

/* Forks a sender that runs fn once it has the handle (pair_hand), and
 * listens. */
static struct pair pair_start_held(sender_fn fn) {
  int hp[2], bp[2];
  ck_assert(pipe(hp) == 0 && pipe(bp) == 0);
  pid_t pid = fork();
  ck_assert(pid >= 0);
  if (pid == 0) {
    close(hp[1]), close(bp[0]);
    void *comm = NULL;
    int ok = child_connect(hp[0], &comm) && fn(comm, bp[1]);
    _exit(ok ? 0 : 1);
  }
  close(hp[0]), close(bp[1]);
  struct pair p = {.pid = pid, .hand = hp[1], .back = bp[0]};
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_int_eq(net->listen(0, p.handle, &p.listen), ncclSuccess);
  return p;
}

static void pair_hand(struct pair *p) {
  ck_assert(write(p->hand, p->handle, sizeof(p->handle)) == (ssize_t)sizeof(p->handle));
  close(p->hand);
  p->hand = -1;
}

static struct pair pair_start(sender_fn fn) {
  struct pair p = pair_start_held(fn);
  pair_hand(&p);
  return p;
}

static void pair_finish(struct pair *p, void *recv_comm) {
  int status = 0;
  if (recv_comm) ck_assert_int_eq(net->close_recv(recv_comm), ncclSuccess);
  ck_assert_int_eq(net->close_listen(p->listen), ncclSuccess);
  ck_assert(waitpid(p->pid, &status, 0) == p->pid);
  close(p->back);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "sender failed (status 0x%x)",
                status);
}

static void set_counts(const char *threads, const char *socks) {
  setenv("NCCL_SOCKET_NTHREADS", threads, 1);
  setenv("NCCL_NSOCKS_PERTHREAD", socks, 1);
}

/* ---- Messages one at a time, every size class ------------------------------ */

static const size_t sizes[] = {
    0, 1, 7, 8, 4096, 64 * 1024 - 1, 64 * 1024, 64 * 1024 + 1, 1 * MIB + 3, 5 * MIB, 64 * MIB};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static int send_sizes(void *comm, int fd) {
  (void)fd;
  char *buf = malloc(64 * MIB);
  for (size_t i = 0; i < NSIZES; i++) {
    fill(buf, sizes[i], i + 1);
    void *req = NULL;
    while (req == NULL)
      if (net->isend(comm, buf, sizes[i], 0, NULL, &req) != ncclSuccess) return 0;
    size_t n = 0;
    if (wait_req(req, &n) != ncclSuccess) return 0;
  }
  free(buf);
  return net->close_send(comm) == ncclSuccess;
}

/* threads x sockets per thread; "0" x "0": connect_single; "3" x "t":
 * connect_threads(3) under the default parameters (2 x 1). */
static const char *counts[][2] = {{"1", "1"}, {"4", "2"}, {"0", "0"}, {"3", "t"}};

static void set_variant_counts(int i) {
  if (counts[i][1][0] == 't') {
    connect_threads = atoi(counts[i][0]);
  } else {
    connect_threads = counts[i][0][0] == '0' ? 0 : -1;
    if (connect_threads < 0) set_counts(counts[i][0], counts[i][1]);
  }
}

START_TEST(test_sizes) {
  set_variant_counts(_i);
  struct pair p = pair_start(send_sizes);
  void *comm = accept_comm(p.listen);
  const struct weft_ns_comm *c = comm;
  ck_assert_int_eq(c->nthreads, atoi(counts[_i][0]));
  int per_thread = counts[_i][1][0] == 't' ? 1 : atoi(counts[_i][1]);
  ck_assert_int_eq(c->nsocks, atoi(counts[_i][0]) * per_thread);
  char *buf = malloc(64 * MIB + 16);
  for (size_t i = 0; i < NSIZES; i++) {
    void *req = NULL;
    void *data = buf;
    size_t posted = sizes[i], got = 12345;
    int tag = 0;
    while (req == NULL)
      ck_assert_int_eq(net->irecv(comm, 1, &data, &posted, &tag, NULL, &req), ncclSuccess);
    ck_assert_int_eq(wait_req(req, &got), ncclSuccess);
    ck_assert_uint_eq(got, sizes[i]);
    ck_assert_msg(matches(buf, got, i + 1), "message %zu (%zu bytes) differs", i, sizes[i]);
  }
  free(buf);
  pair_finish(&p, comm);
}
END_TEST

/* ---- Many in flight ---------------------------------------------------------- */

#define ROUNDS 4
#define INFLIGHT WEFT_NS_MAX_REQUESTS

static size_t inflight_size(int round, int k) {
  static const size_t mix[] = {8, 300 * 1024, 0, 70 * 1024, 2 * MIB + 5, 100};
  return mix[(round * 7 + k) % 6];
}

static int send_inflight(void *comm, int fd) {
  (void)fd;
  char *bufs[INFLIGHT];
  for (int k = 0; k < INFLIGHT; k++) bufs[k] = malloc(2 * MIB + 5);
  for (int round = 0; round < ROUNDS; round++) {
    void *reqs[INFLIGHT];
    for (int k = 0; k < INFLIGHT; k++) {
      fill(bufs[k], inflight_size(round, k), (uint64_t)(round * 100 + k));
      reqs[k] = NULL;
      if (net->isend(comm, bufs[k], inflight_size(round, k), 0, NULL, &reqs[k]) != ncclSuccess ||
          reqs[k] == NULL)
        return 0;
    }
    /* One more than the network takes: it says "later", not an error. */
    void *extra = (void *)1;
    if (net->isend(comm, bufs[0], 1, 0, NULL, &extra) != ncclSuccess || extra != NULL) return 0;
    for (int k = INFLIGHT - 1; k >= 0; k--)
      if (wait_req(reqs[k], NULL) != ncclSuccess) return 0;
  }
  for (int k = 0; k < INFLIGHT; k++) free(bufs[k]);
  return net->close_send(comm) == ncclSuccess;
}

START_TEST(test_inflight) {
  set_variant_counts(_i);
  struct pair p = pair_start(send_inflight);
  void *comm = accept_comm(p.listen);
  char *bufs[INFLIGHT];
  for (int k = 0; k < INFLIGHT; k++) bufs[k] = malloc(3 * MIB);
  for (int round = 0; round < ROUNDS; round++) {
    void *reqs[INFLIGHT];
    for (int k = 0; k < INFLIGHT; k++) {
      void *data = bufs[k];
      size_t posted = 3 * MIB; /* larger than any send */
      int tag = 0;
      reqs[k] = NULL;
      ck_assert_int_eq(net->irecv(comm, 1, &data, &posted, &tag, NULL, &reqs[k]), ncclSuccess);
      ck_assert_ptr_nonnull(reqs[k]);
    }
    /* Tested out of order: completion is per request, matching in order. */
    for (int k = 0; k < INFLIGHT; k++) {
      int j = (k * 5) % INFLIGHT;
      size_t got = 0;
      ck_assert_int_eq(wait_req(reqs[j], &got), ncclSuccess);
      ck_assert_uint_eq(got, inflight_size(round, j));
      ck_assert_msg(matches(bufs[j], got, (uint64_t)(round * 100 + j)), "round %d message %d",
                    round, j);
    }
  }
  for (int k = 0; k < INFLIGHT; k++) free(bufs[k]);
  pair_finish(&p, comm);
}
END_TEST

/* ---- Sizes that differ -------------------------------------------------------- */

static int send_small_then_large(void *comm, int fd) {
  (void)fd;
  char *buf = malloc(4 * MIB);
  static const size_t n[] = {1000, 3 * MIB, 150, 2 * MIB};
  for (int i = 0; i < 4; i++) {
    fill(buf, n[i], (uint64_t)i + 7);
    void *req = NULL;
    ncclResult_t res = net->isend(comm, buf, n[i], 0, NULL, &req);
    if (res == ncclSuccess && req == NULL) return 0; /* one in flight: always room */
    if (res == ncclSuccess) res = wait_req(req, NULL);
    /* The receiver refuses one message (which depends on the test) and
     * closes: from then on an error is fine, a hang (wait_req's
     * ncclInternalError) is not. The receiver checks what arrived. */
    if (res == ncclInternalError || (i == 0 && res != ncclSuccess)) return 0;
    if (res != ncclSuccess) break;
  }
  free(buf);
  return net->close_send(comm) == ncclSuccess;
}

static void recv_into(void *comm, char *buf, size_t posted, ncclResult_t want, size_t want_size,
                      uint64_t seed) {
  void *req = NULL, *data = buf;
  int tag = 0;
  size_t got = 0;
  /* An error is returned by the call that sees it: irecv or test. */
  ncclResult_t res = net->irecv(comm, 1, &data, &posted, &tag, NULL, &req);
  if (res == ncclSuccess) {
    ck_assert_ptr_nonnull(req);
    res = wait_req(req, &got);
  }
  ck_assert_int_eq(res, want);
  if (want == ncclSuccess) {
    ck_assert_uint_eq(got, want_size);
    ck_assert(matches(buf, got, seed));
  }
}

START_TEST(test_send_smaller_then_larger) {
  set_counts("2", "1");
  struct pair p = pair_start(send_small_then_large);
  void *comm = accept_comm(p.listen);
  char *buf = malloc(8 * MIB);
  recv_into(comm, buf, 1 * MIB, ncclSuccess, 1000, 7);
  recv_into(comm, buf, 8 * MIB, ncclSuccess, 3 * MIB, 8);
  /* 150 bytes into a 100-byte receive: an error, and not one byte past. */
  memset(buf, 0x5a, 256);
  recv_into(comm, buf, 100, ncclInvalidUsage, 0, 0);
  ck_assert(all_bytes(buf + 100, 156, 0x5a));
  /* After an error the comm only closes. */
  void *req = NULL, *data = buf;
  size_t posted = 10;
  int tag = 0;
  ck_assert_int_ne(net->irecv(comm, 1, &data, &posted, &tag, NULL, &req), ncclSuccess);
  free(buf);
  pair_finish(&p, comm);
}
END_TEST

START_TEST(test_send_larger_chunked) {
  set_counts("2", "2");
  struct pair p = pair_start(send_small_then_large);
  void *comm = accept_comm(p.listen);
  char *buf = malloc(8 * MIB);
  recv_into(comm, buf, 1000, ncclSuccess, 1000, 7);
  /* 3 MiB (chunked, on the data sockets) into 2 MiB. */
  memset(buf, 0x5a, 3 * MIB);
  recv_into(comm, buf, 2 * MIB, ncclInvalidUsage, 0, 0);
  ck_assert(all_bytes(buf + 2 * MIB, 1 * MIB, 0x5a));
  free(buf);
  pair_finish(&p, comm);
}
END_TEST

/* ---- A send that leaves a copy behind ----------------------------------------- */

#define MIRROR_GUARD 64

/* isend_mirror of a chunked message (its chunks copied by the helper
 * threads that send them) and of an inline one (copied by the caller):
 * each mirror holds the message when the request is done, and nothing
 * past it changed. */
static int send_mirrored(void *comm, int fd) {
  (void)fd;
  static const size_t n[] = {5 * MIB + 3, 1000};
  char *buf = malloc(6 * MIB), *mirror = malloc(6 * MIB + MIRROR_GUARD);
  if (buf == NULL || mirror == NULL) return 0;
  for (int i = 0; i < 2; i++) {
    fill(buf, n[i], (uint64_t)i + 11);
    memset(mirror, 0x5a, n[i] + MIRROR_GUARD);
    void *req = NULL;
    if (weft_net_socket_isend_mirror(comm, buf, n[i], mirror, &req) != ncclSuccess || req == NULL ||
        wait_req(req, NULL) != ncclSuccess)
      return 0;
    if (!matches(mirror, n[i], (uint64_t)i + 11) || !all_bytes(mirror + n[i], MIRROR_GUARD, 0x5a))
      return 0;
  }
  free(buf);
  free(mirror);
  return net->close_send(comm) == ncclSuccess;
}

START_TEST(test_send_mirror) {
  set_counts("4", "1");
  struct pair p = pair_start(send_mirrored);
  void *comm = accept_comm(p.listen);
  char *buf = malloc(8 * MIB);
  recv_into(comm, buf, 8 * MIB, ncclSuccess, 5 * MIB + 3, 11);
  recv_into(comm, buf, 8 * MIB, ncclSuccess, 1000, 12);
  free(buf);
  pair_finish(&p, comm);
}
END_TEST

/* ---- Chunks go to whichever socket is free ----------------------------------- */

#define DEAL_MSGS 48
#define DEAL_THREADS 4

/* 4 threads of a socket each; socket 0's send buffer is made tiny, so it
 * moves far less per wake-up than the others. The child reports how many
 * bytes each helper thread moved (read after every request ended: the
 * requests' completion orders the helpers' counts before the read). */
static int send_dealt(void *comm, int fd) {
  struct weft_ns_comm *c = comm;
  int small = 4096;
  if (c->nsocks != DEAL_THREADS ||
      setsockopt(c->socks[0].fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)) != 0)
    return 0;
  char *buf = malloc(1 * MIB);
  fill(buf, 1 * MIB, 7); /* every message: the helpers read it while others post */
  void *reqs[8];
  for (int m = 0; m < DEAL_MSGS; m += 8) {
    for (int k = 0; k < 8; k++) {
      reqs[k] = NULL;
      while (reqs[k] == NULL)
        if (net->isend(comm, buf, 1 * MIB, 0, NULL, &reqs[k]) != ncclSuccess) return 0;
    }
    for (int k = 0; k < 8; k++)
      if (wait_req(reqs[k], NULL) != ncclSuccess) return 0;
  }
  uint64_t bytes[DEAL_THREADS];
  for (int t = 0; t < DEAL_THREADS; t++) bytes[t] = c->threads[t].bytes;
  if (write(fd, bytes, sizeof(bytes)) != (ssize_t)sizeof(bytes)) return 0;
  free(buf);
  return net->close_send(comm) == ncclSuccess;
}

/* Round-robin dealing would give every socket exactly a quarter; dealing
 * to whichever socket is free gives the slowed one less, and every
 * message still lands whole. */
START_TEST(test_chunks_to_free_sockets) {
  set_counts("4", "1");
  struct pair p = pair_start(send_dealt);
  void *comm = accept_comm(p.listen);
  char *buf = malloc(1 * MIB);
  for (int m = 0; m < DEAL_MSGS; m++) {
    memset(buf, 0, 1 * MIB);
    recv_into(comm, buf, 1 * MIB, ncclSuccess, 1 * MIB, 7);
  }
  uint64_t bytes[DEAL_THREADS], all = 0;
  ck_assert(read(p.back, bytes, sizeof(bytes)) == (ssize_t)sizeof(bytes));
  for (int t = 0; t < DEAL_THREADS; t++) all += bytes[t];
  ck_assert_msg(all >= (uint64_t)DEAL_MSGS * MIB, "the helpers moved %llu bytes of %llu",
                (unsigned long long)all, (unsigned long long)DEAL_MSGS * MIB);
  ck_assert_msg(bytes[0] * 10 < all * 2,
                "the slowed socket moved %llu of %llu bytes: at least the 1/4 of a fixed deal "
                "(the others: %llu, %llu, %llu)",
                (unsigned long long)bytes[0], (unsigned long long)all, (unsigned long long)bytes[1],
                (unsigned long long)bytes[2], (unsigned long long)bytes[3]);
  free(buf);
  pair_finish(&p, comm);
}
END_TEST

/* ---- A sender whose sockets are full sleeps ----------------------------------- */

#define FULL_BYTES (32 * MIB)
#define FULL_NAP_US (500 * 1000)

/* One message far larger than the sockets hold, while the receiver posts
 * nothing: its helper reads the first chunk's header and parks, so the
 * socket fills with chunks still queued. The child reports the CPU its
 * process (the helper thread) used over FULL_NAP_US meanwhile. */
static int send_full(void *comm, int fd) {
  char *buf = malloc(FULL_BYTES);
  fill(buf, FULL_BYTES, 11);
  void *req = NULL;
  while (req == NULL)
    if (net->isend(comm, buf, FULL_BYTES, 0, NULL, &req) != ncclSuccess) return 0;
  nap_us(200 * 1000); /* the socket fills */
  double c0 = proc_cpu_s();
  nap_us(FULL_NAP_US);
  double used = proc_cpu_s() - c0;
  if (write(fd, &used, sizeof(used)) != (ssize_t)sizeof(used)) return 0;
  if (wait_req(req, NULL) != ncclSuccess) return 0;
  free(buf);
  return net->close_send(comm) == ncclSuccess;
}

/* A helper whose sockets are all full sleeps in poll() on them, however
 * many chunks wait to be dealt (before 2026-12-06 it went round its loop,
 * sendmsg failing with EAGAIN, until the receiver read: a core at 100%);
 * the message then lands whole. */
START_TEST(test_full_sockets_sleep) {
  set_counts("1", "1");
  struct pair p = pair_start(send_full);
  void *comm = accept_comm(p.listen);
  double used = -1;
  ck_assert(read(p.back, &used, sizeof(used)) == (ssize_t)sizeof(used));
  char *buf = malloc(FULL_BYTES);
  recv_into(comm, buf, FULL_BYTES, ncclSuccess, FULL_BYTES, 11);
  ck_assert_msg(used >= 0 && used < 0.1,
                "a sender whose socket was full used %.3f s of CPU in %.1f s (it should sleep)",
                used, FULL_NAP_US * 1e-6);
  free(buf);
  pair_finish(&p, comm);
}
END_TEST

/* ---- A receive with a spare buffer -------------------------------------------- */

static const size_t spare_sends[] = {1000, 3 * MIB, 150, 2 * MIB + 5, 64 * 1024 + 1};

static int send_spare_sizes(void *comm, int fd) {
  (void)fd;
  char *buf = malloc(4 * MIB);
  for (int i = 0; i < 5; i++) {
    fill(buf, spare_sends[i], (uint64_t)i + 20);
    void *req = NULL;
    ncclResult_t res = net->isend(comm, buf, spare_sends[i], 0, NULL, &req);
    if (res == ncclSuccess && req == NULL) return 0;
    if (res == ncclSuccess) res = wait_req(req, NULL);
    /* The last one is refused by the receiver, which then closes. */
    if (res == ncclInternalError || (i < 4 && res != ncclSuccess)) return 0;
  }
  free(buf);
  return net->close_send(comm) == ncclSuccess;
}

/* Posts (size, spare_size) and checks where the message landed: in the
 * buffer (in_spare 0) or the spare, whole, and nothing written in the
 * other one or past either. */
static void recv_spare(void *comm, size_t size, size_t spare_size, int want_spare, int i) {
  char *buf = malloc(size + 64), *spare = malloc(spare_size + 64);
  memset(buf, 0x5a, size + 64);
  memset(spare, 0x5a, spare_size + 64);
  void *req = NULL;
  size_t got = 0, known = 0;
  /* An error is returned by the call that sees it: irecv or test. */
  ncclResult_t res = weft_net_socket_irecv_spare(comm, buf, size, spare, spare_size, &req);
  if (res == ncclSuccess) {
    ck_assert_ptr_nonnull(req);
    res = wait_req(req, &got);
  }
  if (want_spare < 0) {
    ck_assert_int_eq(res, ncclInvalidUsage);
    ck_assert(all_bytes(buf, size + 64, 0x5a) && all_bytes(spare, spare_size + 64, 0x5a));
  } else {
    ck_assert_int_eq(res, ncclSuccess);
    ck_assert_uint_eq(got, spare_sends[i]);
    ck_assert(weft_net_socket_recv_size(req, &known) && known == got);
    ck_assert_int_eq(weft_net_socket_recv_in_spare(req), want_spare);
    char *in = want_spare ? spare : buf, *other = want_spare ? buf : spare;
    size_t in_size = want_spare ? spare_size : size, other_size = want_spare ? size : spare_size;
    ck_assert_msg(matches(in, got, (uint64_t)i + 20), "message %d (%zu bytes) differs", i, got);
    ck_assert(all_bytes(in + got, in_size + 64 - got, 0x5a));
    ck_assert(all_bytes(other, other_size + 64, 0x5a));
  }
  free(buf);
  free(spare);
}

START_TEST(test_recv_spare) {
  set_counts("2", "2");
  struct pair p = pair_start(send_spare_sizes);
  void *comm = accept_comm(p.listen);
  recv_spare(comm, 2000, 4096, 0, 0);             /* fits: inline, in the buffer */
  recv_spare(comm, 1 * MIB, 4 * MIB, 1, 1);       /* chunked, into the spare */
  recv_spare(comm, 100, 200, 1, 2);               /* inline, into the spare */
  recv_spare(comm, 2 * MIB + 5, 1 * MIB, 0, 3);   /* exactly the buffer */
  recv_spare(comm, 10, 100, -1, 4);               /* fits neither: refused */
  pair_finish(&p, comm);
}
END_TEST

/* ---- A stranger at the listener ----------------------------------------------- */

/* Connects raw TCP to the handle's address and presents a hello with the
 * wrong nonce; exits 0 when the listener then closes the socket. */
static int stranger(const struct weft_ns_handle *h, int send_hello, int ready_fd, int hold_fd) {
  int fd = -1;
  if (weft_socket_connect(&h->addr, weft_time_ms() + WAIT_MS, &fd) != ncclSuccess) return 0;
  if (send_hello) {
    struct weft_ns_hello m = {
        .magic = WEFT_NS_MAGIC, .nonce = h->nonce ^ 1, .nsocks = 1, .nthreads = 1};
    if (weft_socket_send_all(fd, &m, sizeof(m), weft_time_ms() + WAIT_MS, "listener") !=
        ncclSuccess)
      return 0;
  }
  char c = 1;
  if (write(ready_fd, &c, 1) != 1) return 0;
  /* Dropped: the read ends (EOF or reset) well before our deadline. */
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  if (!send_hello) {
    /* Silent: holds its socket open until the test is over (EOF on
     * hold_fd); it must not stand in the real peer's way meanwhile. */
    if (read(hold_fd, &c, 1) < 0) return 0;
    close(fd);
    return 1;
  }
  int n = poll(&pf, 1, 5000);
  int dropped = n == 1 && recv(fd, &c, 1, 0) <= 0;
  close(fd);
  return dropped;
}

static int send_one(void *comm, int fd) {
  (void)fd;
  char buf[64];
  fill(buf, sizeof(buf), 42);
  void *req = NULL;
  if (net->isend(comm, buf, sizeof(buf), 0, NULL, &req) != ncclSuccess || req == NULL) return 0;
  if (wait_req(req, NULL) != ncclSuccess) return 0;
  return net->close_send(comm) == ncclSuccess;
}

START_TEST(test_stranger_refused) {
  set_counts("2", "2");
  int hp[2], rp[2], gp[2]; /* handles, ready signals, the silent one's hold */
  ck_assert(pipe(hp) == 0 && pipe(rp) == 0 && pipe(gp) == 0);
  /* Strangers are forked before anything starts a thread, too: one with a
   * wrong nonce, one that never says a word. */
  pid_t s[2];
  for (int k = 0; k < 2; k++) {
    s[k] = fork();
    ck_assert(s[k] >= 0);
    if (s[k] == 0) {
      struct weft_ns_handle h;
      close(hp[1]), close(rp[0]), close(gp[1]);
      if (read(hp[0], &h, sizeof(h)) != (ssize_t)sizeof(h)) _exit(1);
      _exit(stranger(&h, k == 0, rp[1], gp[0]) ? 0 : 1);
    }
  }
  close(rp[1]), close(gp[0]);
  struct pair p = pair_start_held(send_one);
  for (int k = 0; k < 2; k++)
    ck_assert(write(hp[1], p.handle, sizeof(struct weft_ns_handle)) ==
              (ssize_t)sizeof(struct weft_ns_handle));
  /* Both strangers are connected (and one said its hello) before the peer. */
  char c;
  for (int k = 0; k < 2; k++) ck_assert(read(rp[0], &c, 1) == 1);
  pair_hand(&p);
  void *comm = accept_comm(p.listen);
  char buf[64];
  recv_into(comm, buf, sizeof(buf), ncclSuccess, sizeof(buf), 42);
  close(gp[1]); /* lets the silent stranger go (once the sender exits too) */
  for (int k = 0; k < 2; k++) {
    int status = 0;
    ck_assert(waitpid(s[k], &status, 0) == s[k]);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "stranger %d was not dropped (status 0x%x)", k, status);
  }
  close(hp[0]), close(hp[1]), close(rp[0]);
  pair_finish(&p, comm);
}
END_TEST

/* ---- A peer killed ------------------------------------------------------------ */

/* Variant 0 posts 64 MiB (far more than the sockets buffer) and waits to be
 * killed mid-message; variant 1 sends nothing and waits to be killed while
 * the receiver waits for a header. */
static int variant;

static int send_then_wait(void *comm, int back) {
  char *buf = calloc(1, 64 * MIB);
  void *req = NULL;
  if (variant == 0 && (net->isend(comm, buf, 64 * MIB, 0, NULL, &req) != ncclSuccess || !req))
    return 0;
  char c = 1;
  if (write(back, &c, 1) != 1) return 0;
  for (;;) pause();
}

START_TEST(test_peer_killed) {
  set_counts("2", "2");
  variant = _i;
  struct pair p = pair_start(send_then_wait);
  void *comm = accept_comm(p.listen);
  char c;
  ck_assert(read(p.back, &c, 1) == 1);
  char *buf = malloc(64 * MIB);
  void *req = NULL, *data = buf;
  size_t posted = 64 * MIB;
  int tag = 0;
  if (_i == 0) {
    /* Let some of the message into the socket buffers, then kill. */
    nap_us(50 * 1000);
    kill(p.pid, SIGKILL);
  }
  ck_assert_int_eq(net->irecv(comm, 1, &data, &posted, &tag, NULL, &req), ncclSuccess);
  ck_assert_ptr_nonnull(req);
  int64_t t0 = weft_time_ms();
  if (_i == 1) {
    int done = 0;
    ck_assert_int_eq(net->test(req, &done, NULL), ncclSuccess);
    ck_assert_int_eq(done, 0);
    kill(p.pid, SIGKILL);
  }
  ck_assert_int_eq(wait_req(req, NULL), ncclRemoteError);
  int64_t took = weft_time_ms() - t0;
  ck_assert_msg(took < 2000, "the error took %lld ms", (long long)took);
  /* Every later call says so too; close still frees everything. */
  int done = 0;
  ck_assert_int_eq(net->test(req, &done, NULL), ncclRemoteError);
  int status = 0;
  ck_assert(waitpid(p.pid, &status, 0) == p.pid);
  ck_assert(WIFSIGNALED(status));
  ck_assert_int_eq(net->close_recv(comm), ncclSuccess);
  ck_assert_int_eq(net->close_listen(p.listen), ncclSuccess);
  close(p.back);
  free(buf);
}
END_TEST

/* The sender's side of a peer that goes away: its receiver closes without
 * reading a 64 MiB message; the sender's test must fail (ncclRemoteError)
 * soon after, on the chunked path (threads) and the inline path. */
static int send_into_closed(void *comm, int back) {
  char *buf = calloc(1, 64 * MIB);
  if (variant == 1) weft_net_socket_set_inline(comm, 64 * MIB);
  void *req = NULL;
  if (net->isend(comm, buf, 64 * MIB, 0, NULL, &req) != ncclSuccess || req == NULL) return 0;
  char c = 1;
  if (write(back, &c, 1) != 1) return 0;
  int64_t end = weft_time_ms() + WAIT_MS;
  ncclResult_t res = ncclSuccess;
  int done = 0;
  while (res == ncclSuccess && !done && weft_time_ms() < end) {
    res = net->test(req, &done, NULL);
    nap_us(100);
  }
  if (res != ncclRemoteError) return 0;
  /* Closing after the error frees everything, threads included. */
  return net->close_send(comm) == ncclSuccess;
}

START_TEST(test_receiver_closes) {
  set_counts("2", "2");
  variant = _i;
  struct pair p = pair_start(send_into_closed);
  void *comm = accept_comm(p.listen);
  char c;
  ck_assert(read(p.back, &c, 1) == 1);
  /* Nothing received: the unread bytes make close reset the sockets. */
  pair_finish(&p, comm);
}
END_TEST

/* ---- Parameters, memory types ------------------------------------------------- */

/* {NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD} -> threads, sockets. */
static const struct {
  const char *t, *s;
  int threads, socks;
} count_cases[] = {
    {"4", "2", 4, 8},  {"16", "4", 16, 64}, {"16", "8", 16, 64}, /* capped: 4 per thread */
    {"99", "1", 2, 2}, {"0", "1", 2, 2},    {"x", "-1", 2, 2},   /* bad: WARN, defaults */
};

START_TEST(test_count_params) {
  set_counts(count_cases[_i].t, count_cases[_i].s);
  int t = 0, n = 0;
  weft__ns_sock_counts(&t, &n);
  ck_assert_int_eq(t, count_cases[_i].threads);
  ck_assert_int_eq(n, count_cases[_i].socks);
}
END_TEST

START_TEST(test_reg_mr_host_only) {
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  char buf[16];
  void *mh = NULL;
  ck_assert_int_eq(net->reg_mr(NULL, buf, sizeof(buf), WEFT_NET_PTR_HOST, &mh), ncclSuccess);
  ck_assert_ptr_nonnull(mh);
  ck_assert_int_eq(net->dereg_mr(NULL, mh), ncclSuccess);
  mh = NULL;
  ck_assert_int_eq(net->reg_mr(NULL, buf, sizeof(buf), WEFT_NET_PTR_CUDA, &mh),
                   ncclInvalidArgument);
  ck_assert_ptr_null(mh);
  void *req = (void *)1;
  ck_assert_int_eq(net->iflush(NULL, 1, NULL, NULL, NULL, &req), ncclSuccess);
  ck_assert_ptr_null(req);
  struct weft_net_props props;
  ck_assert_int_eq(net->get_properties(0, &props), ncclSuccess);
  ck_assert_int_eq(props.ptr_support, WEFT_NET_PTR_HOST);
  ck_assert_int_eq(props.max_recvs, 1);
  ck_assert_int_gt(props.speed, 0);
}
END_TEST

/* The device named like a NIC (how a GPU's nearest NIC becomes the device
 * of its net links): every device by its own name, the first of a name;
 * unknown and empty names none; a port is ignored where devices have none. */
START_TEST(test_dev_by_name) {
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  int ndev = 0;
  ck_assert_int_eq(net->devices(&ndev), ncclSuccess);
  ck_assert_int_gt(ndev, 0);
  for (int d = 0; d < ndev; d++) {
    struct weft_net_props props;
    ck_assert_int_eq(net->get_properties(d, &props), ncclSuccess);
    int first = weft_net_dev_by_name(net, props.name, 0);
    ck_assert_msg(first >= 0 && first <= d, "device %d (%s): found %d", d, props.name, first);
    if (props.port == 0) ck_assert_int_eq(weft_net_dev_by_name(net, props.name, 7), first);
  }
  ck_assert_int_eq(weft_net_dev_by_name(net, "no-such-nic0", 0), -1);
  ck_assert_int_eq(weft_net_dev_by_name(net, "", 0), -1);
  ck_assert_int_eq(weft_net_dev_by_name(net, NULL, 0), -1);
}
END_TEST

/* ---- Suite -------------------------------------------------------------------- */

static Suite *net_socket_suite(void) {
  Suite *s = suite_create("net_socket");
  TCase *tc = tcase_create("messages");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_sizes, 0, 4);
  tcase_add_loop_test(tc, test_inflight, 0, 4);
  tcase_add_test(tc, test_send_smaller_then_larger);
  tcase_add_test(tc, test_send_larger_chunked);
  tcase_add_test(tc, test_send_mirror);
  tcase_add_test(tc, test_recv_spare);
  tcase_add_test(tc, test_chunks_to_free_sockets);
  tcase_add_test(tc, test_full_sockets_sleep);
  tcase_add_test(tc, test_stranger_refused);
  tcase_add_loop_test(tc, test_peer_killed, 0, 2);
  tcase_add_loop_test(tc, test_receiver_closes, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("params");
  tcase_add_loop_test(tc, test_count_params, 0, 6);
  tcase_add_test(tc, test_reg_mr_host_only);
  tcase_add_test(tc, test_dev_by_name);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return suite_run(net_socket_suite());
}
