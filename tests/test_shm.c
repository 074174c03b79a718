/* Shared-memory transport tests: the ops table driven directly, by two
 * processes (fork) that pass the receiver's handle through a pipe, or by one
 * process holding both ends. Each test runs in its own process (Check's fork
 * mode) and sets its parameters before the first weft call reads them. Each
 * uses its own random comm hash, so it can tell its /dev/shm segments from
 * anyone else's.
 * Links: src/base/debug.c src/base/param.c transport/shm/shm.c
 *        transport/shm/segment.c */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/debug.h"
#include "transport/transport.h"
#include "suite_run.h"

#define WAIT_MS 20000
#define BIG_BYTES (3 * 1024 * 1024 + 5)

static const size_t stream_sizes[] = {1, 7, BIG_BYTES};
#define NMSG (sizeof(stream_sizes) / sizeof(stream_sizes[0]))

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_us(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* Parameters this suite depends on, whatever the caller's environment. */
static void set_env(void) {
  setenv("WEFT_TIMEOUT", "20", 1);
  unsetenv("NCCL_SHM_DISABLE");
  unsetenv("WEFT_SHM_SLOTS");
  unsetenv("WEFT_SHM_SLOT_BYTES");
  unsetenv("NCCL_BUFFSIZE");
  unsetenv("WEFT_SHM_CMA");
  setenv("WEFT_SHM_CMA_MIN", "65536", 1); /* the mixed sizes straddle it */
}

static uint64_t random_hash(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x =
      (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_sec;
  return x | 1;
}

static uint64_t xorshift(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* The bytes of message `msg` from `rank`: both ends compute them. */
static void fill(char *buf, size_t bytes, uint64_t seed, int rank, int msg) {
  uint64_t s = seed ^ (uint64_t)(rank + 1) * 0x100000001b3ull ^ (uint64_t)(msg + 7) << 40;
  for (size_t i = 0; i < bytes; i++) buf[i] = (char)(xorshift(&s) >> 24);
}

static void conn_init(struct weft_conn *c, enum weft_conn_dir dir, int rank, int peer, int channel,
                      uint64_t hash, const _Atomic int *abort_flag) {
  memset(c, 0, sizeof(*c));
  c->ops = &weft_shm_ops;
  c->dir = dir;
  c->rank = rank;
  c->peer = peer;
  c->channel = channel;
  c->comm_hash = hash;
  c->abort_flag = abort_flag;
}

/* Entries of /dev/shm that belong to comm `hash`. */
static int count_segments(uint64_t hash) {
  char prefix[64];
  int n = 0;
  snprintf(prefix, sizeof(prefix), "weft-%016" PRIx64 "-", hash);
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
  closedir(d);
  return n;
}

static int shm_exists(const char *entry) {
  char path[256];
  snprintf(path, sizeof(path), "/dev/shm/%s", entry);
  return access(path, F_OK) == 0;
}

static int write_all(int fd, const void *buf, size_t n) {
  return write(fd, buf, n) == (ssize_t)n ? 0 : -1;
}

/* Reads n bytes within WAIT_MS; -1 on timeout or EOF. */
static int read_all(int fd, void *buf, size_t n) {
  size_t got = 0;
  int64_t deadline = now_ms() + WAIT_MS;
  while (got < n) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int left = (int)(deadline - now_ms());
    if (left <= 0 || poll(&p, 1, left) <= 0) return -1;
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

/* What the engine does: progress both directions until both are done,
 * spinning briefly, then yielding and sleeping. Returns the first error. */
static ncclResult_t pump(struct weft_conn *s, const char *sbuf, size_t sbytes, struct weft_conn *r,
                         char *rbuf, size_t rbytes, int timeout_ms) {
  size_t sdone = 0, rdone = 0;
  int64_t deadline = now_ms() + timeout_ms;
  for (unsigned idle = 0; sdone < sbytes || rdone < rbytes;) {
    size_t before = sdone + rdone;
    ncclResult_t res;
    if (s != NULL && sdone < sbytes && (res = s->ops->send(s, sbuf, sbytes, &sdone)) != ncclSuccess)
      return res;
    if (r != NULL && rdone < rbytes && (res = r->ops->recv(r, rbuf, rbytes, &rdone)) != ncclSuccess)
      return res;
    if (sdone + rdone != before) {
      idle = 0;
      continue;
    }
    if (now_ms() > deadline) return ncclInProgress; /* the test's own "timed out" */
    if (++idle < 200) continue;
    if (idle < 400)
      sched_yield();
    else
      sleep_us(50);
  }
  return ncclSuccess;
}

/* One rank of the two-process stream test: returns 0 or a line number. */
static int stream_rank(int rank, int to_peer, int from_peer, uint64_t hash, uint64_t seed) {
  int peer = 1 - rank;
  struct weft_conn sc, rc;
  char handle[WEFT_CONN_HANDLE_BYTES], peer_handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&sc, WEFT_CONN_SEND, rank, peer, 0, hash, NULL);
  conn_init(&rc, WEFT_CONN_RECV, rank, peer, 0, hash, NULL);
  if (weft_shm_ops.setup(&rc, handle) != ncclSuccess) return __LINE__;
  if (weft_shm_ops.setup(&sc, NULL) != ncclSuccess) return __LINE__;
  if (write_all(to_peer, handle, sizeof(handle)) != 0) return __LINE__;
  if (read_all(from_peer, peer_handle, sizeof(peer_handle)) != 0) return __LINE__;
  /* Send sides first: the receiver's connect waits for its sender's. */
  if (weft_shm_ops.connect(&sc, peer_handle, 0) != ncclSuccess) return __LINE__;
  if (weft_shm_ops.connect(&rc, NULL, now_ms() + WAIT_MS) != ncclSuccess) return __LINE__;
  char *sbuf = malloc(BIG_BYTES), *rbuf = malloc(BIG_BYTES), *want = malloc(BIG_BYTES);
  if (sbuf == NULL || rbuf == NULL || want == NULL) return __LINE__;
  for (int m = 0; m < (int)NMSG; m++) {
    size_t n = stream_sizes[m];
    fill(sbuf, n, seed, rank, m);
    fill(want, n, seed, peer, m);
    memset(rbuf, 0x5a, n);
    if (pump(&sc, sbuf, n, &rc, rbuf, n, WAIT_MS) != ncclSuccess) return __LINE__;
    if (memcmp(rbuf, want, n) != 0) return __LINE__;
  }
  free(sbuf);
  free(rbuf);
  free(want);
  if (weft_shm_ops.close(&sc) != ncclSuccess || weft_shm_ops.close(&rc) != ncclSuccess)
    return __LINE__;
  return 0;
}

static int wait_exit(pid_t pid) {
  int status = -1;
  int64_t deadline = now_ms() + WAIT_MS;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (now_ms() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    sleep_us(1000);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Two processes stream 1 B, 7 B and 3 MiB + 5 B both ways at once. */
static void run_stream(void) {
  int a[2], b[2];
  uint64_t hash = random_hash(), seed = random_hash();
  ck_assert_int_eq(pipe(a), 0);
  ck_assert_int_eq(pipe(b), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(stream_rank(1, b[1], a[0], hash, seed) == 0 ? 0 : 1);
  int line = stream_rank(0, a[1], b[0], hash, seed);
  ck_assert_msg(line == 0, "rank 0 failed at line %d: %s", line, weft_last_error());
  ck_assert_int_eq(wait_exit(pid), 0);
  ck_assert_int_eq(count_segments(hash), 0);
}

START_TEST(test_stream_default) {
  set_env();
  run_stream();
}
END_TEST

/* Small slots: the 3 MiB message wraps the ring hundreds of times, at
 * offsets the 1- and 7-byte messages made odd. */
START_TEST(test_stream_small_slots) {
  set_env();
  setenv("WEFT_SHM_SLOTS", "3", 1);
  setenv("WEFT_SHM_SLOT_BYTES", "5000", 1);
  run_stream();
}
END_TEST

/* One process holds both ends (ranks as threads do); sender and receiver
 * cut the same stream into different random pieces. */
START_TEST(test_stream_pieces) {
  set_env();
  setenv("WEFT_SHM_SLOTS", "2", 1);
  setenv("WEFT_SHM_SLOT_BYTES", "4096", 1);
  uint64_t hash = random_hash(), rng = random_hash();
  struct weft_conn sc, rc;
  char handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&sc, WEFT_CONN_SEND, 0, 1, 3, hash, NULL);
  conn_init(&rc, WEFT_CONN_RECV, 1, 0, 3, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(&rc, handle), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.setup(&sc, NULL), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.connect(&sc, handle, 0), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.connect(&rc, NULL, now_ms() + WAIT_MS), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 0);
  ck_assert_int_eq(weft_shm_ops.wait_fd(&sc), -1);
  size_t total = 1 << 20, sent = 0, got = 0, spiece = 0, rpiece = 0, sdone = 0, rdone = 0;
  char *src = malloc(total), *dst = malloc(total);
  fill(src, total, rng, 0, 0);
  while (got < total) {
    if (sdone == spiece && sent < total) {
      sent += spiece;
      spiece = 1 + xorshift(&rng) % 9000;
      if (spiece > total - sent) spiece = total - sent;
      sdone = 0;
    }
    if (rdone == rpiece) {
      got += rpiece;
      rpiece = 1 + xorshift(&rng) % 7000;
      if (rpiece > total - got) rpiece = total - got;
      rdone = 0;
      if (got == total) break;
    }
    if (sent < total)
      ck_assert_int_eq(weft_shm_ops.send(&sc, src + sent, spiece, &sdone), ncclSuccess);
    ck_assert_int_eq(weft_shm_ops.recv(&rc, dst + got, rpiece, &rdone), ncclSuccess);
  }
  ck_assert(memcmp(src, dst, total) == 0);
  /* A sender that closes: what it sent still arrives, then the receiver
   * gets an error instead of waiting forever. */
  size_t done = 0;
  ck_assert_int_eq(weft_shm_ops.send(&sc, "tail", 4, &done), ncclSuccess);
  ck_assert_int_eq(done, 4);
  ck_assert_int_eq(weft_shm_ops.close(&sc), ncclSuccess);
  char last[8];
  done = 0;
  ck_assert_int_eq(weft_shm_ops.recv(&rc, last, 4, &done), ncclSuccess);
  ck_assert(done == 4 && memcmp(last, "tail", 4) == 0);
  done = 0;
  ck_assert_int_eq(weft_shm_ops.recv(&rc, last, 1, &done), ncclRemoteError);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "closed"));
  ck_assert_int_eq(weft_shm_ops.close(&rc), ncclSuccess);
  free(src);
  free(dst);
}
END_TEST

/* Single copy off: every byte goes through the segment. */
START_TEST(test_stream_cma_off) {
  set_env();
  setenv("WEFT_SHM_CMA", "0", 1);
  run_stream();
}
END_TEST

/* The probe fails (as under ptrace restrictions): the connection copies. */
START_TEST(test_stream_cma_fallback) {
  set_env();
  setenv("WEFT_SHM_CMA", "-1", 1);
  run_stream();
}
END_TEST

/* The sizes of the one-way stream: copied and single-copy sends, mixed,
 * around the threshold (64 KiB). */
static const size_t mixed_sizes[] = {1,     65535, 65536, 7,          200001,
                                     13,    65537, 4096,  BIG_BYTES, 3};
#define NMIXED (sizeof(mixed_sizes) / sizeof(mixed_sizes[0]))

/* The sender of the one-way tests (a child): connects, waits for "go" (the
 * receiver's probe is in by then), then sends the mixed stream, or, with
 * `hang` set, publishes one send of `hang` bytes, says "r" and waits to be
 * killed. Exits 0 when the stream went out. */
static void oneway_sender(int to_parent, int from_parent, uint64_t hash, uint64_t seed,
                          size_t hang) {
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES], go;
  conn_init(&c, WEFT_CONN_SEND, 1, 0, 0, hash, NULL);
  if (weft_shm_ops.setup(&c, NULL) != ncclSuccess) _exit(1);
  if (read_all(from_parent, handle, sizeof(handle)) != 0) _exit(2);
  if (weft_shm_ops.connect(&c, handle, 0) != ncclSuccess) _exit(3);
  if (read_all(from_parent, &go, 1) != 0) _exit(4);
  if (hang > 0) {
    char *buf = malloc(hang);
    size_t done = 0;
    fill(buf, hang, seed, 1, 0);
    if (weft_shm_ops.send(&c, buf, hang, &done) != ncclSuccess || done != 0) _exit(5);
    if (write_all(to_parent, "r", 1) != 0) _exit(6);
    for (;;) pause();
  }
  char *buf = malloc(BIG_BYTES);
  for (int m = 0; m < (int)NMIXED; m++) {
    fill(buf, mixed_sizes[m], seed, 1, m);
    if (pump(&c, buf, mixed_sizes[m], NULL, NULL, 0, WAIT_MS) != ncclSuccess) _exit(7);
  }
  free(buf);
  _exit(weft_shm_ops.close(&c) == ncclSuccess ? 0 : 8);
}

/* The receiving end of the one-way tests: forks the sender and connects. */
static pid_t oneway_start(struct weft_conn *c, uint64_t hash, uint64_t seed, size_t hang,
                          int *up_out, int *down_out) {
  int up[2], down[2];
  char handle[WEFT_CONN_HANDLE_BYTES];
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) oneway_sender(up[1], down[0], hash, seed, hang);
  conn_init(c, WEFT_CONN_RECV, 0, 1, 0, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(c, handle), ncclSuccess);
  ck_assert_int_eq(write_all(down[1], handle, sizeof(handle)), 0);
  ck_assert_int_eq(weft_shm_ops.connect(c, NULL, now_ms() + WAIT_MS), ncclSuccess);
  ck_assert_int_eq(write_all(down[1], "g", 1), 0);
  *up_out = up[0];
  *down_out = down[1];
  return pid;
}

/* Another process sends copied and single-copy messages in one stream; the
 * receiver reads it in pieces of random sizes that straddle the messages. */
static void run_mixed_pieces(void) {
  uint64_t hash = random_hash(), seed = random_hash(), rng = random_hash();
  struct weft_conn c;
  int up, down;
  pid_t pid = oneway_start(&c, hash, seed, 0, &up, &down);
  size_t total = 0;
  for (size_t m = 0; m < NMIXED; m++) total += mixed_sizes[m];
  char *want = malloc(total), *got = malloc(total);
  for (size_t m = 0, off = 0; m < NMIXED; off += mixed_sizes[m++])
    fill(want + off, mixed_sizes[m], seed, 1, (int)m);
  memset(got, 0x5a, total);
  for (size_t off = 0; off < total;) {
    size_t piece = 1 + xorshift(&rng) % 300000;
    if (piece > total - off) piece = total - off;
    ck_assert_int_eq(pump(NULL, NULL, 0, &c, got + off, piece, WAIT_MS), ncclSuccess);
    off += piece;
  }
  ck_assert(memcmp(want, got, total) == 0);
  ck_assert_int_eq(wait_exit(pid), 0);
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 0);
  close(up);
  close(down);
  free(want);
  free(got);
}

START_TEST(test_mixed_pieces) {
  set_env();
  run_mixed_pieces();
}
END_TEST

START_TEST(test_mixed_pieces_cma_off) {
  set_env();
  setenv("WEFT_SHM_CMA", "0", 1);
  run_mixed_pieces();
}
END_TEST

/* kill -9 of a sender whose single-copy send is half read: the receiver
 * gets ncclRemoteError, not a hang. */
START_TEST(test_kill_sender_cma) {
  set_env();
  uint64_t hash = random_hash(), seed = random_hash();
  size_t big = 8u << 20, first = 1u << 20;
  struct weft_conn c;
  int up, down;
  char ready;
  pid_t pid = oneway_start(&c, hash, seed, big, &up, &down);
  ck_assert_int_eq(read_all(up, &ready, 1), 0);
  char *buf = malloc(big), *want = malloc(big);
  fill(want, big, seed, 1, 0);
  ck_assert_int_eq(pump(NULL, NULL, 0, &c, buf, first, WAIT_MS), ncclSuccess);
  ck_assert(memcmp(buf, want, first) == 0);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  int64_t t0 = now_ms();
  ck_assert_int_eq(pump(NULL, NULL, 0, &c, buf + first, big - first, WAIT_MS), ncclRemoteError);
  ck_assert_int_lt(now_ms() - t0, 5000);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "exited"));
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 0);
  close(up);
  close(down);
  free(buf);
  free(want);
}
END_TEST

/* One process holds both ends: a large send waits for its reader when
 * single copy is on, and lands in the segment at once when it is off or
 * the probe failed; either way the bytes arrive in order. */
static void run_cma_mode(int expect_cma) {
  uint64_t hash = random_hash(), seed = random_hash();
  struct weft_conn sc, rc;
  char handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&sc, WEFT_CONN_SEND, 0, 1, 2, hash, NULL);
  conn_init(&rc, WEFT_CONN_RECV, 1, 0, 2, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(&rc, handle), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.setup(&sc, NULL), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.connect(&sc, handle, 0), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.connect(&rc, NULL, now_ms() + WAIT_MS), ncclSuccess);
  size_t small = 100, big = 200000, sdone = 0, rdone = 0;
  char *src = malloc(small + big), *dst = malloc(small + big);
  fill(src, small + big, seed, 0, 0);
  ck_assert_int_eq(weft_shm_ops.send(&sc, src, small, &sdone), ncclSuccess);
  ck_assert_uint_eq(sdone, small);
  sdone = 0;
  ck_assert_int_eq(weft_shm_ops.send(&sc, src + small, big, &sdone), ncclSuccess);
  ck_assert_uint_eq(sdone, expect_cma ? 0 : big);
  /* 150 bytes: the copied 100, then 50 of the large send. */
  ck_assert_int_eq(weft_shm_ops.recv(&rc, dst, 150, &rdone), ncclSuccess);
  ck_assert_uint_eq(rdone, 150);
  if (expect_cma) {
    ck_assert_int_eq(weft_shm_ops.send(&sc, src + small, big, &sdone), ncclSuccess);
    ck_assert_uint_eq(sdone, 50);
  }
  rdone = 0;
  ck_assert_int_eq(weft_shm_ops.recv(&rc, dst + 150, small + big - 150, &rdone), ncclSuccess);
  ck_assert_uint_eq(rdone, small + big - 150);
  ck_assert_int_eq(weft_shm_ops.send(&sc, src + small, big, &sdone), ncclSuccess);
  ck_assert_uint_eq(sdone, big);
  ck_assert(memcmp(src, dst, small + big) == 0);
  ck_assert_int_eq(weft_shm_ops.close(&sc), ncclSuccess);
  ck_assert_int_eq(weft_shm_ops.close(&rc), ncclSuccess);
  free(src);
  free(dst);
}

START_TEST(test_cma_mode_on) {
  set_env();
  run_cma_mode(1);
}
END_TEST

START_TEST(test_cma_mode_off) {
  set_env();
  setenv("WEFT_SHM_CMA", "0", 1);
  run_cma_mode(0);
}
END_TEST

START_TEST(test_cma_mode_fallback) {
  set_env();
  setenv("WEFT_SHM_CMA", "-1", 1);
  run_cma_mode(0);
}
END_TEST

/* The far end of the kill tests: connects, sends `pre` bytes if it is the
 * sender, says "ready" and waits to be killed. */
static void kill_peer(enum weft_conn_dir dir, int to_parent, int from_parent, uint64_t hash,
                      size_t pre) {
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&c, dir, 1, 0, 0, hash, NULL);
  if (weft_shm_ops.setup(&c, handle) != ncclSuccess) _exit(1);
  if (dir == WEFT_CONN_RECV) {
    if (write_all(to_parent, handle, sizeof(handle)) != 0) _exit(2);
    if (weft_shm_ops.connect(&c, NULL, now_ms() + WAIT_MS) != ncclSuccess) _exit(3);
  } else {
    if (read_all(from_parent, handle, sizeof(handle)) != 0) _exit(2);
    if (weft_shm_ops.connect(&c, handle, 0) != ncclSuccess) _exit(3);
    char *buf = calloc(1, pre);
    if (pump(&c, buf, pre, NULL, NULL, 0, WAIT_MS) != ncclSuccess) _exit(4);
  }
  if (write_all(to_parent, "r", 1) != 0) _exit(5);
  for (;;) pause();
}

/* kill -9 of the sender after connect: nothing of the comm in /dev/shm,
 * what it sent still arrives, then the receiver gets ncclRemoteError. */
START_TEST(test_kill_sender) {
  set_env();
  setenv("WEFT_SHM_CMA", "0", 1); /* what it sent is in the segment */
  int up[2], down[2];
  uint64_t hash = random_hash();
  size_t pre = 100000;
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) kill_peer(WEFT_CONN_SEND, up[1], down[0], hash, pre);
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES], ready;
  conn_init(&c, WEFT_CONN_RECV, 0, 1, 0, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(&c, handle), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 1);
  ck_assert_int_eq(write_all(down[1], handle, sizeof(handle)), 0);
  ck_assert_int_eq(weft_shm_ops.connect(&c, NULL, now_ms() + WAIT_MS), ncclSuccess);
  ck_assert_int_eq(read_all(up[0], &ready, 1), 0);
  ck_assert_int_eq(count_segments(hash), 0);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  ck_assert_int_eq(count_segments(hash), 0);
  char *buf = malloc(pre + 1);
  ck_assert_int_eq(pump(NULL, NULL, 0, &c, buf, pre, WAIT_MS), ncclSuccess);
  int64_t t0 = now_ms();
  ck_assert_int_eq(pump(NULL, NULL, 0, &c, buf, 1, WAIT_MS), ncclRemoteError);
  ck_assert_int_lt(now_ms() - t0, 5000);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "exited"));
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
  free(buf);
}
END_TEST

/* kill -9 of the sender, which its parent (this process) does not reap yet:
 * a zombie is as dead as a reaped process. kill(pid, 0) succeeds on one, so
 * the receiver used to wait until its deadline; a pidfd sees the exit. */
START_TEST(test_kill_sender_zombie) {
  set_env();
  setenv("WEFT_SHM_CMA", "0", 1);
  int up[2], down[2];
  uint64_t hash = random_hash();
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) kill_peer(WEFT_CONN_SEND, up[1], down[0], hash, 1);
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES], ready, byte;
  conn_init(&c, WEFT_CONN_RECV, 0, 1, 0, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(&c, handle), ncclSuccess);
  ck_assert_int_eq(write_all(down[1], handle, sizeof(handle)), 0);
  ck_assert_int_eq(weft_shm_ops.connect(&c, NULL, now_ms() + WAIT_MS), ncclSuccess);
  ck_assert_int_eq(read_all(up[0], &ready, 1), 0);
  ck_assert_int_eq(pump(NULL, NULL, 0, &c, &byte, 1, WAIT_MS), ncclSuccess);
  kill(pid, SIGKILL);
  siginfo_t info;
  ck_assert_int_eq(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0); /* dead, unreaped */
  int64_t t0 = now_ms();
  ck_assert_int_eq(pump(NULL, NULL, 0, &c, &byte, 1, 3000), ncclRemoteError);
  ck_assert_int_lt(now_ms() - t0, 1000);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "exited"));
  waitpid(pid, NULL, 0);
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
}
END_TEST

/* kill -9 of the receiver after connect: the sender fills the ring, then
 * gets ncclRemoteError; nothing left in /dev/shm. */
START_TEST(test_kill_receiver) {
  set_env();
  int up[2], down[2];
  uint64_t hash = random_hash();
  ck_assert_int_eq(pipe(up), 0);
  ck_assert_int_eq(pipe(down), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) kill_peer(WEFT_CONN_RECV, up[1], down[0], hash, 0);
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES], ready;
  conn_init(&c, WEFT_CONN_SEND, 0, 1, 0, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(&c, NULL), ncclSuccess);
  ck_assert_int_eq(read_all(up[0], handle, sizeof(handle)), 0);
  ck_assert_int_eq(weft_shm_ops.connect(&c, handle, 0), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 0);
  ck_assert_int_eq(read_all(up[0], &ready, 1), 0);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  size_t big = 64u << 20;
  char *buf = calloc(1, big);
  ck_assert_int_eq(pump(&c, buf, big, NULL, NULL, 0, WAIT_MS), ncclRemoteError);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "exited"));
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 0);
  free(buf);
}
END_TEST

static pid_t dead_pid(void) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

/* An empty segment named like ours, with its mtime age_s seconds ago. */
static void fake_segment(char *entry, size_t size, uint64_t hash, int sender, int pid,
                         time_t age_s) {
  char name[160];
  snprintf(entry, size, "weft-%016" PRIx64 "-%d-0-0-%d", hash, sender, pid);
  snprintf(name, sizeof(name), "/%s", entry);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  ck_assert_int_ge(fd, 0);
  struct timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= age_s;
  times[1] = times[0];
  ck_assert_int_eq(futimens(fd, times), 0);
  close(fd);
}

static void unlink_entry(const char *entry) {
  char name[160];
  snprintf(name, sizeof(name), "/%s", entry);
  shm_unlink(name);
}

/* Setup reclaims segments of dead creators and leaves live ones alone. */
START_TEST(test_reclaim_stale) {
  set_env();
  uint64_t hash = random_hash();
  /* A real orphan: its creator died between setup and connect. */
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    struct weft_conn c;
    char handle[WEFT_CONN_HANDLE_BYTES];
    conn_init(&c, WEFT_CONN_RECV, 0, 1, 0, hash, NULL);
    _exit(weft_shm_ops.setup(&c, handle) == ncclSuccess ? 0 : 1);
  }
  ck_assert_int_eq(wait_exit(pid), 0);
  char orphan[128], old_dead[128], new_dead[128], live[128];
  snprintf(orphan, sizeof(orphan), "weft-%016" PRIx64 "-1-0-0-%d", hash, (int)pid);
  ck_assert(shm_exists(orphan));
  int dead = (int)dead_pid();
  /* Headerless, dead and a day old: whoever made it has given up. */
  fake_segment(old_dead, sizeof(old_dead), hash, 2, dead, 86400);
  /* Headerless, dead to us, fresh: its creator may be alive in another pid
   * namespace sharing /dev/shm, so it stays (until twice WEFT_TIMEOUT). */
  fake_segment(new_dead, sizeof(new_dead), hash, 3, dead, 0);
  /* A live creator's, however old: never touched. */
  fake_segment(live, sizeof(live), hash, 4, (int)getpid(), 86400);

  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&c, WEFT_CONN_RECV, 0, 1, 1, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.setup(&c, handle), ncclSuccess);
  ck_assert(!shm_exists(orphan));
  ck_assert(!shm_exists(old_dead));
  ck_assert(shm_exists(new_dead));
  ck_assert(shm_exists(live));
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
  unlink_entry(new_dead);
  unlink_entry(live);
  ck_assert_int_eq(count_segments(hash), 0);
}
END_TEST

/* /dev/shm without room: ncclSystemError with errno ENOSPC (the caller's cue
 * to fall back), a WARN naming the sizes, no SIGBUS, nothing left. */
START_TEST(test_enospc) {
  set_env();
  struct statvfs vfs;
  ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
  uint64_t total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
  /* An unlimited tmpfs would try to back the request: do not. */
  if (total == 0) return;
  /* Two slots of the whole of /dev/shm: more than is free, and more than
   * its size, which tmpfs refuses before it allocates a page. */
  uint64_t slot = (total + 4095) / 4096 * 4096;
  char text[32], need[32];
  snprintf(text, sizeof(text), "%" PRIu64, slot);
  setenv("WEFT_SHM_SLOTS", "2", 1);
  setenv("WEFT_SHM_SLOT_BYTES", text, 1);
  snprintf(need, sizeof(need), "%" PRIu64 " bytes", 2 * slot + 4096);
  uint64_t hash = random_hash();
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&c, WEFT_CONN_RECV, 0, 1, 0, hash, NULL);
  errno = 0;
  ck_assert_int_eq(weft_shm_ops.setup(&c, handle), ncclSystemError);
  ck_assert_int_eq(errno, ENOSPC);
  ck_assert_msg(strstr(weft_last_error(), need) != NULL, "WARN \"%s\" does not say %s",
                weft_last_error(), need);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "free"));
  ck_assert_ptr_null(c.priv);
  ck_assert_int_eq(count_segments(hash), 0);
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
}
END_TEST

/* A receiver whose sender never comes: the deadline and an abort both end
 * the wait, and close removes the segment. */
START_TEST(test_connect_deadline_abort) {
  set_env();
  uint64_t hash = random_hash();
  _Atomic int abort_flag = 0;
  struct weft_conn c;
  char handle[WEFT_CONN_HANDLE_BYTES];
  conn_init(&c, WEFT_CONN_RECV, 0, 1, 0, hash, &abort_flag);
  ck_assert_int_eq(weft_shm_ops.setup(&c, handle), ncclSuccess);
  int64_t t0 = now_ms();
  ck_assert_int_eq(weft_shm_ops.connect(&c, NULL, t0 + 300), ncclSystemError);
  ck_assert_int_ge(now_ms() - t0, 300);
  ck_assert_int_lt(now_ms() - t0, 3000);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "did not map"));
  atomic_store(&abort_flag, 1);
  t0 = now_ms();
  ck_assert_int_eq(weft_shm_ops.connect(&c, NULL, t0 + WAIT_MS), ncclInternalError);
  ck_assert_int_lt(now_ms() - t0, 1000);
  ck_assert_int_eq(count_segments(hash), 1);
  ck_assert_int_eq(weft_shm_ops.close(&c), ncclSuccess);
  ck_assert_int_eq(count_segments(hash), 0);
  /* The sender of a receiver that closed first gets ncclRemoteError. */
  struct weft_conn s;
  conn_init(&s, WEFT_CONN_SEND, 1, 0, 0, hash, NULL);
  ck_assert_int_eq(weft_shm_ops.connect(&s, handle, 0), ncclRemoteError);
  ck_assert_int_eq(weft_shm_ops.close(&s), ncclSuccess);
}
END_TEST

START_TEST(test_can_connect) {
  set_env();
  struct weft_transport_peer a = {.rank = 0, .cuda_dev = -1, .pid = 1, .host_hash = 42};
  struct weft_transport_peer b = {.rank = 1, .cuda_dev = -1, .pid = 2, .host_hash = 42};
  struct weft_transport_peer far = {.rank = 2, .cuda_dev = -1, .pid = 3, .host_hash = 43};
  int out = -1;
  ck_assert_int_eq(weft_shm_ops.can_connect(&a, &b, &out), ncclSuccess);
  ck_assert_int_eq(out, 1);
  ck_assert_int_eq(weft_shm_ops.can_connect(&a, &far, &out), ncclSuccess);
  ck_assert_int_eq(out, 0);
  ck_assert_str_eq(weft_shm_ops.name, "shm");
  ck_assert_uint_eq(weft_shm_ops.size, sizeof(struct weft_transport_ops));
}
END_TEST

START_TEST(test_can_connect_disabled) {
  set_env();
  setenv("NCCL_SHM_DISABLE", "1", 1);
  struct weft_transport_peer a = {.rank = 0, .host_hash = 42};
  struct weft_transport_peer b = {.rank = 1, .host_hash = 42};
  int out = -1;
  ck_assert_int_eq(weft_shm_ops.can_connect(&a, &b, &out), ncclSuccess);
  ck_assert_int_eq(out, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("shm");
  TCase *tc = tcase_create("shm");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_can_connect);
  tcase_add_test(tc, test_can_connect_disabled);
  tcase_add_test(tc, test_stream_default);
  tcase_add_test(tc, test_stream_small_slots);
  tcase_add_test(tc, test_stream_pieces);
  tcase_add_test(tc, test_stream_cma_off);
  tcase_add_test(tc, test_stream_cma_fallback);
  tcase_add_test(tc, test_mixed_pieces);
  tcase_add_test(tc, test_mixed_pieces_cma_off);
  tcase_add_test(tc, test_kill_sender_cma);
  tcase_add_test(tc, test_cma_mode_on);
  tcase_add_test(tc, test_cma_mode_off);
  tcase_add_test(tc, test_cma_mode_fallback);
  tcase_add_test(tc, test_kill_sender);
  tcase_add_test(tc, test_kill_sender_zombie);
  tcase_add_test(tc, test_kill_receiver);
  tcase_add_test(tc, test_reclaim_stale);
  tcase_add_test(tc, test_enospc);
  tcase_add_test(tc, test_connect_deadline_abort);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
