/* Bootstrap tests: ranks are processes forked from the test, which then
 * makes the id (starting the root thread, ncclGetUniqueId's) and hands it to
 * them through pipes: a process forked from a threaded one may inherit a
 * lock another thread held (the allocator's, a sanitizer's) and hang on it.
 * Each test runs in its own process (Check's fork mode), so each sets its
 * WEFT_TIMEOUT before the first weft call reads the parameters, and has no
 * thread when it forks. */
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fork_guard.h"

#include "core/bootstrap.h"
#include "core/bootstrap_internal.h"
#include "base/debug.h"
#include "transport/socket.h"
#include "free_port.h"
#include "suite_run.h"

#define MAX_RANKS 8
#define HARNESS_WAIT_MS 20000

/* Each test's environment, set before its first weft call (parameters are
 * read once per process); what the caller's environment says about
 * interfaces or NCCL_COMM_ID must not change what a test means. */
static void set_env(int timeout_s) {
  char text[16];
  snprintf(text, sizeof(text), "%d", timeout_s);
  setenv("WEFT_TIMEOUT", text, 1);
  unsetenv("NCCL_COMM_ID");
  unsetenv("NCCL_SOCKET_IFNAME");
  unsetenv("WEFT_SOCKET_IPV6");
}

typedef int (*rank_fn)(const ncclUniqueId *id, int rank, int nranks);

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Reads the id the test process sends; 0 on success. */
static int read_id(int fd, ncclUniqueId *id) {
  size_t got = 0;
  while (got < sizeof(*id)) {
    ssize_t n = read(fd, (char *)id + got, sizeof(*id) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

/* Forks one process per rank in ranks[], before this process has any
 * thread; each waits for its id on a pipe (give_id). Returns their pids and
 * the pipes' write ends. */
static void spawn_ranks(const int *ranks, int count, int nranks, rank_fn fn, pid_t *pids,
                        int *pipes) {
  pid_t parent = getpid();
  int threads = fork_guard_wait(5000);
  ck_assert_msg(threads == 0, "forking ranks from a process with %d threads", threads);
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < count; i++) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pids[i] = fork();
    ck_assert_int_ge(pids[i], 0);
    if (pids[i] == 0) {
      /* A rank must never outlive the test that started it. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      /* Only the root's log (this process's) is read: the ranks' would be
       * files nobody removes. */
      unsetenv("NCCL_DEBUG_FILE");
      for (int k = 0; k < i; k++) close(pipes[k]);
      close(fds[1]);
      ncclUniqueId id;
      if (read_id(fds[0], &id) != 0) _exit(98); /* the test gave up */
      close(fds[0]);
      _exit(fn(&id, ranks[i], nranks));
    }
    close(fds[0]);
    pipes[i] = fds[1];
  }
}

/* Hands id (a zeroed one when NULL) to the ranks spawn_ranks started. */
static void give_id(const ncclUniqueId *id, int *pipes, int count) {
  ncclUniqueId zero;
  memset(&zero, 0, sizeof(zero));
  if (id == NULL) id = &zero;
  for (int i = 0; i < count; i++) {
    ck_assert_int_eq(write(pipes[i], id, sizeof(*id)), (ssize_t)sizeof(*id));
    close(pipes[i]);
  }
}

/* Forks the ranks, then makes the id they share (the root thread starts
 * here, after the forks) and hands it over. */
static void start_ranks(const int *ranks, int count, int nranks, rank_fn fn, pid_t *pids,
                        ncclUniqueId *id_out) {
  int pipes[MAX_RANKS];
  spawn_ranks(ranks, count, nranks, fn, pids, pipes);
  ck_assert_int_eq(weft_bootstrap_get_unique_id(id_out), ncclSuccess);
  give_id(id_out, pipes, count);
}

/* Waits for every pid; returns how many did not exit 0. Kills stragglers. */
static int reap_ranks(pid_t *pids, int count) {
  int failed = 0, left = count;
  int64_t deadline = weft_time_ms() + HARNESS_WAIT_MS;
  while (left > 0 && weft_time_ms() < deadline) {
    for (int i = 0; i < count; i++) {
      int status;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank process %d failed (status 0x%x)\n", (int)pids[i], status);
        failed++;
      }
      pids[i] = 0;
      left--;
    }
    sleep_ms(10);
  }
  for (int i = 0; i < count; i++) {
    if (pids[i] <= 0) continue;
    fprintf(stderr, "rank process %d hung; killing it\n", (int)pids[i]);
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
    failed++;
  }
  return failed;
}

/* Runs fn as ranks 0..nranks-1 on an id made here (make_id) or on none
 * (the ranks make their own). Returns how many ranks failed. */
static int run_ranks(int nranks, rank_fn fn, int make_id) {
  int ranks[MAX_RANKS], pipes[MAX_RANKS];
  pid_t pids[MAX_RANKS];
  ncclUniqueId id;
  for (int i = 0; i < nranks; i++) ranks[i] = i;
  spawn_ranks(ranks, nranks, nranks, fn, pids, pipes);
  if (make_id) ck_assert_int_eq(weft_bootstrap_get_unique_id(&id), ncclSuccess);
  give_id(make_id ? &id : NULL, pipes, nranks);
  return reap_ranks(pids, nranks);
}

#define EXPECT(cond)                                                                              \
  do {                                                                                            \
    if (!(cond)) {                                                                                \
      fprintf(stderr, "rank %d: %s:%d: expected %s (last error: %s)\n", rank, __FILE__, __LINE__, \
              #cond, weft_last_error());                                                          \
      return 1;                                                                                   \
    }                                                                                             \
  } while (0)

/* ---- The happy path ------------------------------------------------------- */

static int check_allgather(struct weft_bootstrap *b, int rank, int n) {
  int all[MAX_RANKS] = {0};
  all[rank] = rank * 10 + 1;
  EXPECT(weft_bootstrap_allgather(b, all, sizeof(int)) == ncclSuccess);
  for (int i = 0; i < n; i++) EXPECT(all[i] == i * 10 + 1);
  /* Blocks larger than socket buffers: the ring step must not deadlock. */
  size_t block = 1 << 20;
  unsigned char *big = malloc(block * (size_t)n);
  EXPECT(big != NULL);
  memset(big + block * (size_t)rank, rank + 1, block);
  EXPECT(weft_bootstrap_allgather(b, big, block) == ncclSuccess);
  for (int i = 0; i < n; i++) {
    EXPECT(big[block * (size_t)i] == i + 1);
    EXPECT(big[block * (size_t)i + block - 1] == i + 1);
  }
  free(big);
  return 0;
}

/* Out-of-order tags, several messages on one tag, and a message to itself. */
static int check_p2p(struct weft_bootstrap *b, int rank, int n) {
  int next = (rank + 1) % n, prev = (rank + n - 1) % n;
  int v;
  EXPECT(weft_bootstrap_send(b, next, 2, &(int){rank + 100}, sizeof(int)) == ncclSuccess);
  for (int k = 0; k < 3; k++)
    EXPECT(weft_bootstrap_send(b, next, 5, &(int){rank * 1000 + k}, sizeof(int)) == ncclSuccess);
  EXPECT(weft_bootstrap_send(b, next, 1, &rank, sizeof(int)) == ncclSuccess);
  EXPECT(weft_bootstrap_send(b, rank, 9, &(int){rank + 7}, sizeof(int)) == ncclSuccess);
  EXPECT(weft_bootstrap_recv(b, prev, 1, &v, sizeof(v)) == ncclSuccess && v == prev);
  EXPECT(weft_bootstrap_recv(b, prev, 2, &v, sizeof(v)) == ncclSuccess && v == prev + 100);
  for (int k = 0; k < 3; k++)
    EXPECT(weft_bootstrap_recv(b, prev, 5, &v, sizeof(v)) == ncclSuccess && v == prev * 1000 + k);
  EXPECT(weft_bootstrap_recv(b, rank, 9, &v, sizeof(v)) == ncclSuccess && v == rank + 7);
  /* Everyone to rank 0, which receives in reverse order. */
  if (rank != 0) EXPECT(weft_bootstrap_send(b, 0, 77, &rank, sizeof(int)) == ncclSuccess);
  for (int p = n - 1; rank == 0 && p > 0; p--)
    EXPECT(weft_bootstrap_recv(b, p, 77, &v, sizeof(v)) == ncclSuccess && v == p);
  return 0;
}

static int rank_basic(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  EXPECT(weft_bootstrap_create(id, 1, rank, n, &b) == ncclSuccess);
  if (check_allgather(b, rank, n) != 0) return 1;
  EXPECT(weft_bootstrap_barrier(b) == ncclSuccess);
  if (check_p2p(b, rank, n) != 0) return 1;
  EXPECT(weft_bootstrap_barrier(b) == ncclSuccess);
  weft_bootstrap_destroy(b);
  return 0;
}

/* 1 to 8 ranks, one Check process each (_i is the rank count): a process
 * that has made an id has a thread and must not fork again. */
START_TEST(test_ranks_1_to_8) {
  set_env(15);
  ck_assert_msg(run_ranks(_i, rank_basic, 1) == 0, "%d ranks failed", _i);
}
END_TEST

START_TEST(test_ipv6) {
  set_env(15);
  setenv("WEFT_SOCKET_IPV6", "1", 1);
  ck_assert_int_eq(run_ranks(3, rank_basic, 1), 0);
}
END_TEST

/* ---- Intruders at the root ---------------------------------------------------- */

/* The id's bytes as the library reads them (copied: the bytes need not be
 * aligned for the struct). */
static struct weft_unique_id id_view(const ncclUniqueId *id) {
  struct weft_unique_id v;
  memcpy(&v, id->internal, sizeof(v));
  return v;
}

static int connect_root(const ncclUniqueId *id) {
  int fd = -1;
  struct weft_unique_id v = id_view(id);
  ck_assert_int_eq(weft_socket_connect(&v.root, weft_time_ms() + 5000, &fd), ncclSuccess);
  return fd;
}

static void send_bytes(int fd, const void *buf, size_t size) {
  ck_assert_int_eq(weft_socket_send_all(fd, buf, size, weft_time_ms() + 5000, "root"), ncclSuccess);
}

/* The root must have closed fd: a read sees EOF (or a reset) soon. */
static void expect_dropped(int fd) {
  char c;
  size_t done = 0;
  int64_t deadline = weft_time_ms() + 5000;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && weft_time_ms() < deadline) {
    r = weft_socket_recv_some(fd, &c, 1, &done, "root");
    if (r == ncclSuccess) sleep_ms(10);
  }
  ck_assert_int_eq(r, ncclRemoteError);
  close(fd);
}

/* Reads the root's reply to a registration, then the close: whether its
 * text holds want. */
static int reply_has(int fd, const char *want) {
  struct weft_boot_reply reply;
  char text[WEFT_BOOT_ERROR_MAX + 1];
  int64_t deadline = weft_time_ms() + 5000;
  if (weft_socket_recv_all(fd, &reply, sizeof(reply), deadline, "root") != ncclSuccess) return 0;
  if (reply.status != WEFT_BOOT_REPLY_ERROR || reply.len <= 0 || reply.len > WEFT_BOOT_ERROR_MAX)
    return 0;
  if (weft_socket_recv_all(fd, text, (size_t)reply.len, deadline, "root") != ncclSuccess) return 0;
  text[reply.len] = '\0';
  expect_dropped(fd);
  return strstr(text, want) != NULL;
}

/* Sends this process's log to a file, so a test can read what the root
 * WARNed. Call before the first weft call. */
static void log_to_file(char *path, size_t size) {
  snprintf(path, size, "/tmp/weft_test_bootstrap.%d.log", (int)getpid());
  unlink(path);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", "/tmp/weft_test_bootstrap.%p.log", 1);
}

/* Returns whether the log at path has a line containing both a and b. */
static int log_has(const char *path, const char *a, const char *b) {
  FILE *f = fopen(path, "r");
  char line[1024];
  int found = 0;
  while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
    found = strstr(line, a) != NULL && strstr(line, b) != NULL;
  if (f != NULL) fclose(f);
  return found;
}

/* Ranks start a moment late, so intruders reach the root first. */
static int rank_basic_late(const ncclUniqueId *id, int rank, int n) {
  sleep_ms(150);
  return rank_basic(id, rank, n);
}

START_TEST(test_wrong_secret) {
  char log[128];
  log_to_file(log, sizeof(log));
  set_env(15);
  ncclUniqueId id;
  int ranks[4] = {0, 1, 2, 3};
  pid_t pids[4];
  start_ranks(ranks, 4, 4, rank_basic_late, pids, &id);
  int fd = connect_root(&id);
  uint64_t wrong = id_view(&id).secret ^ 1;
  send_bytes(fd, &wrong, sizeof(wrong));
  expect_dropped(fd);
  ck_assert_int_eq(reap_ranks(pids, 4), 0);
  ck_assert(log_has(log, "bootstrap root: dropped connection from ", ": wrong secret"));
  unlink(log);
}
END_TEST

START_TEST(test_garbage) {
  char log[128];
  log_to_file(log, sizeof(log));
  set_env(15);
  ncclUniqueId id;
  int ranks[3] = {0, 1, 2};
  pid_t pids[3];
  start_ranks(ranks, 3, 3, rank_basic_late, pids, &id);
  unsigned char junk[100];
  for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (unsigned char)(i * 37 + 11);
  int fd_junk = connect_root(&id);
  send_bytes(fd_junk, junk, sizeof(junk));
  /* The right secret, then junk where the registration should be. */
  int fd_magic = connect_root(&id);
  uint64_t secret = id_view(&id).secret;
  send_bytes(fd_magic, &secret, sizeof(secret));
  send_bytes(fd_magic, junk, sizeof(junk));
  /* The right secret and magic, a rank out of range. */
  struct weft_boot_reg reg;
  memset(&reg, 0, sizeof(reg));
  reg.secret = secret;
  reg.magic = WEFT_BOOT_REG_MAGIC;
  reg.rank = 7;
  reg.nranks = 3;
  int fd_range = connect_root(&id);
  send_bytes(fd_range, &reg, sizeof(reg));
  /* Three bytes, then gone. */
  int fd_short = connect_root(&id);
  send_bytes(fd_short, junk, 3);
  close(fd_short);
  expect_dropped(fd_junk);
  expect_dropped(fd_magic);
  ck_assert_int_eq(reap_ranks(pids, 3), 0);
  const char *drop = "bootstrap root: dropped connection from ";
  ck_assert(log_has(log, drop, ": wrong secret"));
  ck_assert(log_has(log, drop, "bad magic"));
  ck_assert(log_has(log, drop, "registration for rank 7 of 3"));
  /* It held the secret: it was told why before the close. */
  ck_assert(reply_has(fd_range, "registration for rank 7 of 3"));
  ck_assert(log_has(log, "connection closed by ", "before presenting the secret"));
  unlink(log);
}
END_TEST

START_TEST(test_silent_connection) {
  set_env(15);
  ncclUniqueId id;
  int ranks[4] = {0, 1, 2, 3};
  pid_t pids[4];
  int64_t start = weft_time_ms();
  start_ranks(ranks, 4, 4, rank_basic_late, pids, &id);
  int silent[3];
  for (int i = 0; i < 3; i++) silent[i] = connect_root(&id);
  ck_assert_int_eq(reap_ranks(pids, 4), 0);
  /* Well inside the 5 s a silent client is given: nobody waited on it. */
  ck_assert_int_lt(weft_time_ms() - start, 4000);
  for (int i = 0; i < 3; i++) close(silent[i]);
}
END_TEST

/* ---- Missing ranks, timeouts, abort ----------------------------------------- */

static int rank_expect_missing(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  int64_t start = weft_time_ms();
  ncclResult_t r = weft_bootstrap_create(id, 1, rank, n, &b);
  EXPECT(r == ncclRemoteError || r == ncclSystemError);
  EXPECT(b == NULL);
  EXPECT(weft_time_ms() - start < 7000);
  EXPECT(strstr(weft_last_error(), "rank 2 of 3 did not reach the bootstrap root") != NULL);
  return 0;
}

START_TEST(test_missing_rank) {
  set_env(3);
  ncclUniqueId id;
  int ranks[2] = {0, 1};
  pid_t pids[2];
  start_ranks(ranks, 2, 3, rank_expect_missing, pids, &id);
  ck_assert_int_eq(reap_ranks(pids, 2), 0);
}
END_TEST

/* A rank whose registration the root refuses hears why at once; the others
 * fail at the timeout with a verdict that names the refusal. Which rank is
 * refused depends on who registers first, so each accepts either story. */
static int expect_refused(int rank, int64_t start, ncclResult_t r, const char *why) {
  EXPECT(r == ncclRemoteError);
  const char *msg = weft_last_error();
  int fast = weft_time_ms() - start < 2000;
  EXPECT(strstr(msg, why) != NULL);
  EXPECT(fast ? strstr(msg, "a registration was refused") == NULL
              : strstr(msg, "a registration was refused") != NULL);
  return 0;
}

/* Rank 1 says the communicator has one rank more than rank 0 says. */
static int rank_other_nranks(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  int64_t start = weft_time_ms();
  ncclResult_t r = weft_bootstrap_create(id, 1, rank, rank == 1 ? n + 1 : n, &b);
  EXPECT(b == NULL);
  return expect_refused(rank, start, r, "every rank must pass the same nranks");
}

/* Two processes are rank 0. */
static int rank_twice(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  int64_t start = weft_time_ms();
  ncclResult_t r = weft_bootstrap_create(id, 1, rank, n, &b);
  EXPECT(b == NULL);
  return expect_refused(rank, start, r, "rank 0 registered twice");
}

START_TEST(test_refused_registration) {
  set_env(3);
  ncclUniqueId id;
  int ranks[3] = {0, 1, 0};
  pid_t pids[3];
  start_ranks(ranks, 2, 2, rank_other_nranks, pids, &id);
  ck_assert_int_eq(reap_ranks(pids, 2), 0);
  start_ranks(ranks, 3, 3, rank_twice, pids, &id);
  ck_assert_int_eq(reap_ranks(pids, 3), 0);
}
END_TEST

/* An id serves one communicator: its root ends once that one is made, and
 * a second bootstrap on the same id says so after the timeout. */
static int rank_id_twice(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  EXPECT(weft_bootstrap_create(id, 1, rank, n, &b) == ncclSuccess);
  weft_bootstrap_destroy(b);
  b = NULL;
  int64_t start = weft_time_ms();
  EXPECT(weft_bootstrap_create(id, 1, rank, n, &b) != ncclSuccess);
  EXPECT(b == NULL);
  EXPECT(weft_time_ms() - start < 5000);
  EXPECT(strstr(weft_last_error(), "an id serves one communicator") != NULL);
  return 0;
}

START_TEST(test_id_twice) {
  set_env(2);
  ncclUniqueId id;
  int ranks[2] = {0, 1};
  pid_t pids[2];
  start_ranks(ranks, 2, 2, rank_id_twice, pids, &id);
  ck_assert_int_eq(reap_ranks(pids, 2), 0);
}
END_TEST

/* Rank 0 waits for a message rank 1 never sends; rank 1 stays up. The
 * failure is told apart as a timeout (weft_bootstrap_timed_out) until the
 * next call, which fails otherwise. */
static int rank_recv_timeout(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  EXPECT(weft_bootstrap_create(id, 1, rank, n, &b) == ncclSuccess);
  if (rank == 1) {
    sleep_ms(3000);
  } else {
    int v;
    int64_t start = weft_time_ms();
    EXPECT(weft_bootstrap_recv(b, 1, 7, &v, sizeof(v)) == ncclSystemError);
    EXPECT(weft_time_ms() - start < 2900);
    EXPECT(strstr(weft_last_error(), "rank 1 (tag 7)") != NULL);
    EXPECT(weft_bootstrap_timed_out());
    EXPECT(weft_bootstrap_recv(b, 0, 7, &v, sizeof(v)) == ncclInvalidUsage); /* from itself */
    EXPECT(!weft_bootstrap_timed_out());
  }
  weft_bootstrap_destroy(b);
  return 0;
}

START_TEST(test_recv_timeout) {
  set_env(2);
  ck_assert_int_eq(run_ranks(2, rank_recv_timeout, 1), 0);
}
END_TEST

/* Rank 1 sends one message and leaves; rank 0 then hears it has gone. */
static int rank_peer_gone(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  int v = 5;
  EXPECT(weft_bootstrap_create(id, 1, rank, n, &b) == ncclSuccess);
  if (rank == 1) {
    EXPECT(weft_bootstrap_send(b, 0, 1, &v, sizeof(v)) == ncclSuccess);
  } else {
    EXPECT(weft_bootstrap_recv(b, 1, 1, &v, sizeof(v)) == ncclSuccess && v == 5);
    EXPECT(weft_bootstrap_recv(b, 1, 2, &v, sizeof(v)) == ncclRemoteError);
    EXPECT(strstr(weft_last_error(), "connection closed by rank 1") != NULL);
    EXPECT(!weft_bootstrap_timed_out());
  }
  weft_bootstrap_destroy(b);
  return 0;
}

START_TEST(test_peer_gone) {
  set_env(10);
  ck_assert_int_eq(run_ranks(2, rank_peer_gone, 1), 0);
}
END_TEST

static void *abort_later(void *arg) {
  sleep_ms(200);
  weft_bootstrap_abort(arg);
  return NULL;
}

static int rank_abort(const ncclUniqueId *id, int rank, int n) {
  struct weft_bootstrap *b = NULL;
  EXPECT(weft_bootstrap_create(id, 1, rank, n, &b) == ncclSuccess);
  if (rank == 1) {
    sleep_ms(1500);
  } else {
    pthread_t t;
    int v;
    int64_t start = weft_time_ms();
    EXPECT(pthread_create(&t, NULL, abort_later, b) == 0);
    EXPECT(weft_bootstrap_recv(b, 1, 3, &v, sizeof(v)) == ncclInternalError);
    EXPECT(weft_time_ms() - start < 1000);
    pthread_join(t, NULL);
  }
  weft_bootstrap_destroy(b);
  return 0;
}

START_TEST(test_abort) {
  set_env(10);
  ck_assert_int_eq(run_ranks(2, rank_abort, 1), 0);
}
END_TEST

/* ---- NCCL_COMM_ID ----------------------------------------------------------- */

/* Each rank builds the id from the environment alone, as separate jobs do. */
static int rank_comm_id(const ncclUniqueId *unused, int rank, int n) {
  (void)unused;
  ncclUniqueId id;
  EXPECT(weft_bootstrap_get_unique_id(&id) == ncclSuccess);
  return rank_basic(&id, rank, n);
}

START_TEST(test_comm_id) {
  char env[64];
  int port = test_free_port();
  ck_assert_int_gt(port, 0);
  snprintf(env, sizeof(env), "127.0.0.1:%d", port);
  set_env(15);
  setenv("NCCL_COMM_ID", env, 1);
  ck_assert_int_eq(run_ranks(4, rank_comm_id, 0), 0);
  /* The same port serves a second communicator once the first root is done. */
  ck_assert_int_eq(run_ranks(3, rank_comm_id, 0), 0);
}
END_TEST

/* ---- Socket helpers ----------------------------------------------------------- */

START_TEST(test_parse_addr) {
  set_env(15);
  union weft_sockaddr a;
  char buf[64];
  ck_assert_int_eq(weft_socket_parse_addr("127.0.0.1:1234", &a), ncclSuccess);
  ck_assert_str_eq(weft_sockaddr_str(&a, buf, sizeof(buf)), "127.0.0.1:1234");
  ck_assert_int_eq(weft_socket_parse_addr("[::1]:80", &a), ncclSuccess);
  ck_assert_str_eq(weft_sockaddr_str(&a, buf, sizeof(buf)), "[::1]:80");
  ck_assert_int_eq(weft_socket_parse_addr("localhost:5", &a), ncclSuccess);
  ck_assert_int_ne(weft_socket_parse_addr("127.0.0.1", &a), ncclSuccess);
  ck_assert_int_ne(weft_socket_parse_addr("127.0.0.1:0", &a), ncclSuccess);
  ck_assert_int_ne(weft_socket_parse_addr("127.0.0.1:x", &a), ncclSuccess);
  ck_assert_int_ne(weft_socket_parse_addr("[::1:80", &a), ncclSuccess);
}
END_TEST

START_TEST(test_ifname_loopback) {
  set_env(15);
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  union weft_sockaddr a;
  char buf[64];
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSuccess);
  ck_assert_str_eq(weft_sockaddr_str(&a, buf, sizeof(buf)), "127.0.0.1:0");
}
END_TEST

START_TEST(test_ifname_none) {
  set_env(15);
  setenv("NCCL_SOCKET_IFNAME", "=no_such_if0", 1);
  union weft_sockaddr a;
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSystemError);
}
END_TEST

static Suite *bootstrap_suite(void) {
  Suite *s = suite_create("bootstrap");
  TCase *tc = tcase_create("bootstrap");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_parse_addr);
  tcase_add_test(tc, test_ifname_loopback);
  tcase_add_test(tc, test_ifname_none);
  tcase_add_loop_test(tc, test_ranks_1_to_8, 1, MAX_RANKS + 1);
  tcase_add_test(tc, test_ipv6);
  tcase_add_test(tc, test_wrong_secret);
  tcase_add_test(tc, test_garbage);
  tcase_add_test(tc, test_silent_connection);
  tcase_add_test(tc, test_missing_rank);
  tcase_add_test(tc, test_refused_registration);
  tcase_add_test(tc, test_id_twice);
  tcase_add_test(tc, test_recv_timeout);
  tcase_add_test(tc, test_peer_gone);
  tcase_add_test(tc, test_abort);
  tcase_add_test(tc, test_comm_id);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  /* Parameters are read once per process: every test sets its own in its
   * own forked process, so fork mode is required. */
  return suite_run_with(bootstrap_suite(), CK_FORK, CK_NORMAL);
}
