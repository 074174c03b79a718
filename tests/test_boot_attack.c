/* The bootstrap under attack, and NCCL_COMM_ID, through nccl.h only (issue
 * 14). Ranks are processes forked before any weft call, each setting its
 * own environment, as the separately launched ranks of a job do; the
 * stranger that floods the listeners is another process (boot_flood.c). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "boot_flood.h"
#include "free_port.h"
#include "suite_run.h"

#define COUNT 1024
#define MAX_RANKS 8
#define FLOOD_PER_PORT 1200
/* test_flood_threads' fd limit. Its job peaks near 200 fds of its own (8
 * ranks and their split: sockets, shm); the gates' shared budget adds at
 * most 320/8 + 1 per listener (~20). With the per-gate limit alone (320/16
 * = 20 per listener) the flood exhausts the fds: measured, the job fails. */
#define FLOOD_THREADS_NOFILE 320

/* ---- Time, ports, logs ------------------------------------------------------- */

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_until(int64_t t) {
  for (int64_t left = t - now_ms(); left > 0; left = t - now_ms()) {
    struct timespec ts = {.tv_sec = left / 1000, .tv_nsec = (long)(left % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
}

static void log_dir_make(char *dir, size_t size) {
  snprintf(dir, size, "/tmp/weft_boot_attack.XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

/* Every log file of dir, concatenated; removes them and dir. */
static char *logs_take(const char *dir) {
  size_t len = 0;
  char *all = calloc(1, 1);
  DIR *d = opendir(dir);
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    char buf[4096];
    size_t n;
    while (f != NULL && (n = fread(buf, 1, sizeof(buf), f)) > 0) {
      all = realloc(all, len + n + 1);
      memcpy(all + len, buf, n);
      len += n;
      all[len] = '\0';
    }
    if (f != NULL) fclose(f);
    unlink(path);
  }
  if (d != NULL) closedir(d);
  rmdir(dir);
  return all;
}

static int count_lines_with(const char *text, const char *needle) {
  int n = 0;
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) n++;
  return n;
}

/* Fails the test with a short message; the logs, which may be long, go to
 * stderr (Check's messages are size-limited). */
#define ASSERT_LOGS(cond, logs, ...)                                      \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "---- logs ----\n%s---- end of logs ----\n", logs); \
      ck_abort_msg(__VA_ARGS__);                                          \
    }                                                                     \
  } while (0)

/* ---- Ranks ------------------------------------------------------------------------ */

struct job {
  int nranks;
  int port;                      /* NCCL_COMM_ID=127.0.0.1:port */
  const char *secret[MAX_RANKS]; /* WEFT_COMM_SECRET per rank; NULL: unset */
  int start_ms[MAX_RANKS];       /* after t0 */
  int64_t t0;
  int timeout_s;
  int split_at_ms; /* after t0; 0: no split */
  int nofile;      /* the ranks' fd limit; 0: unchanged */
  const char *log_dir;
  const char *log_level;
  const char *log_subsys;
};

#define RANK_FAIL(...)                  \
  do {                                  \
    fprintf(stderr, "rank %d: ", rank); \
    fprintf(stderr, __VA_ARGS__);       \
    fprintf(stderr, "\n");              \
    return 1;                           \
  } while (0)

static void rank_env(const struct job *j, int rank) {
  char text[64];
  setenv("WEFT_DEVICE", "cpu", 1);
  snprintf(text, sizeof(text), "%d", j->timeout_s);
  setenv("WEFT_TIMEOUT", text, 1);
  snprintf(text, sizeof(text), "127.0.0.1:%d", j->port);
  setenv("NCCL_COMM_ID", text, 1);
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  if (j->secret[rank] != NULL)
    setenv("WEFT_COMM_SECRET", j->secret[rank], 1);
  else
    unsetenv("WEFT_COMM_SECRET");
  setenv("NCCL_DEBUG", j->log_level, 1);
  if (j->log_subsys != NULL) setenv("NCCL_DEBUG_SUBSYS", j->log_subsys, 1);
  char path[512];
  snprintf(path, sizeof(path), "%s/log.%%p", j->log_dir);
  setenv("NCCL_DEBUG_FILE", path, 1);
  if (j->nofile > 0) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = (rlim_t)j->nofile < rl.rlim_max ? (rlim_t)j->nofile : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

/* An AllReduce of COUNT floats, each rank giving rank + 1. */
static int allreduce_ok(ncclComm_t comm, int rank, int nranks, const char *which) {
  float *send = malloc(COUNT * sizeof(float)), *recv = malloc(COUNT * sizeof(float));
  for (int i = 0; i < COUNT; i++) send[i] = (float)(rank + 1), recv[i] = -1.0f;
  ncclResult_t r = ncclAllReduce(send, recv, COUNT, ncclFloat, ncclSum, comm, NULL);
  float want = (float)nranks * (float)(nranks + 1) / 2.0f;
  int bad = r != ncclSuccess;
  for (int i = 0; i < COUNT && !bad; i++) bad = recv[i] != want;
  if (bad)
    fprintf(stderr, "rank %d: AllReduce on %s: %s, recv[0] %g, want %g (%s)\n", rank, which,
            ncclGetErrorString(r), recv[0], want, ncclGetLastError(comm));
  free(send);
  free(recv);
  return bad;
}

/* As NCCL users do with NCCL_COMM_ID: every rank makes the id itself. */
static int rank_main(const struct job *j, int rank) {
  rank_env(j, rank);
  sleep_until(j->t0 + j->start_ms[rank]);
  ncclUniqueId id;
  ncclComm_t comm = NULL, child = NULL;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) RANK_FAIL("ncclGetUniqueId: %s", ncclGetLastError(NULL));
  r = ncclCommInitRank(&comm, j->nranks, id, rank);
  if (r != ncclSuccess) RANK_FAIL("ncclCommInitRank: %s", ncclGetLastError(NULL));
  if (allreduce_ok(comm, rank, j->nranks, "the job")) return 1;
  if (j->split_at_ms > 0) {
    sleep_until(j->t0 + j->split_at_ms);
    /* Two halves at once: each needs its own root, not the NCCL_COMM_ID port. */
    r = ncclCommSplit(comm, rank % 2, rank, &child, NULL);
    if (r != ncclSuccess) RANK_FAIL("ncclCommSplit: %s", ncclGetLastError(comm));
    if (allreduce_ok(child, rank / 2, (j->nranks - rank % 2 + 1) / 2, "the split")) return 1;
    ncclCommDestroy(child);
  }
  ncclCommDestroy(comm);
  return 0;
}

/* A rank whose init must fail; `expect` must be in the last error. */
static int rank_expect_refused(const struct job *j, int rank, const char *expect, int max_ms) {
  rank_env(j, rank);
  sleep_until(j->t0 + j->start_ms[rank]);
  int64_t start = now_ms();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  if (ncclGetUniqueId(&id) != ncclSuccess) RANK_FAIL("ncclGetUniqueId failed");
  ncclResult_t r = ncclCommInitRank(&comm, j->nranks, id, rank);
  const char *err = ncclGetLastError(NULL);
  if (r == ncclSuccess) RANK_FAIL("ncclCommInitRank succeeded; expected it to fail");
  if (strstr(err, expect) == NULL) RANK_FAIL("last error lacks \"%s\": %s", expect, err);
  if (now_ms() - start > max_ms)
    RANK_FAIL("failed after %d ms, expected within %d ms", (int)(now_ms() - start), max_ms);
  return 0;
}

/* In a rank process after rank_expect_refused: 1 unless `expect` is in
 * the last error too. */
static int rank_check_last_error(const char *expect) {
  if (strstr(ncclGetLastError(NULL), expect) != NULL) return 0;
  fprintf(stderr, "last error lacks \"%s\": %s\n", expect, ncclGetLastError(NULL));
  return 1;
}

static void spawn_job(const struct job *j, pid_t *pids, int (*fn)(const struct job *, int)) {
  for (int i = 0; i < j->nranks; i++) {
    pids[i] = fork();
    ck_assert_int_ge(pids[i], 0);
    if (pids[i] == 0) _exit(fn(j, i));
  }
}

/* Waits for every pid; returns how many did not exit 0. Kills stragglers. */
static int reap(pid_t *pids, int n, int timeout_s) {
  int failed = 0, left = n;
  int64_t deadline = now_ms() + timeout_s * 1000;
  while (left > 0 && now_ms() < deadline) {
    for (int i = 0; i < n; i++) {
      int status;
      if (pids[i] <= 0 || waitpid(pids[i], &status, WNOHANG) != pids[i]) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed++;
      pids[i] = 0;
      left--;
    }
    sleep_until(now_ms() + 20);
  }
  for (int i = 0; i < n; i++) {
    if (pids[i] <= 0) continue;
    fprintf(stderr, "rank process %d hung; killing it\n", (int)pids[i]);
    kill(pids[i], SIGKILL);
    waitpid(pids[i], NULL, 0);
    failed++;
  }
  return failed;
}

static void job_init(struct job *j, int nranks, const char *dir) {
  memset(j, 0, sizeof(*j));
  j->nranks = nranks;
  j->port = test_free_port();
  ck_assert_int_gt(j->port, 0);
  j->timeout_s = 15;
  j->log_dir = dir;
  j->log_level = "WARN";
  j->t0 = now_ms() + 100;
}

/* ---- NCCL_COMM_ID ---------------------------------------------------------------- */

/* Every rank calls ncclGetUniqueId itself; rank 0, started last, hosts the
 * root; collectives and a split (two roots at once, neither on the
 * NCCL_COMM_ID port) work. The secret never reaches a log. */
START_TEST(test_comm_id) {
  char dir[64];
  log_dir_make(dir, sizeof(dir));
  struct job j;
  job_init(&j, 4, dir);
  j.log_level = "INFO";
  j.log_subsys = "INIT,ENV,BOOTSTRAP";
  for (int i = 0; i < 4; i++) j.secret[i] = "correct-horse-battery";
  j.start_ms[0] = 300;
  j.split_at_ms = 400;
  pid_t pids[4];
  spawn_job(&j, pids, rank_main);
  int failed = reap(pids, 4, 30);
  char *logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "%d ranks failed", failed);
  ASSERT_LOGS(strstr(logs, "correct-horse-battery") == NULL, logs, "the secret is in a log");
  ASSERT_LOGS(strstr(logs, "WEFT_COMM_SECRET is not set") == NULL, logs,
              "a job with a secret says it has none");
  free(logs);
}
END_TEST

/* Without WEFT_COMM_SECRET the job runs, and says at INFO that it has no secret. */
START_TEST(test_comm_id_no_secret) {
  char dir[64];
  log_dir_make(dir, sizeof(dir));
  struct job j;
  job_init(&j, 2, dir);
  j.log_level = "INFO";
  j.log_subsys = "INIT";
  pid_t pids[2];
  spawn_job(&j, pids, rank_main);
  int failed = reap(pids, 2, 30);
  char *logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "%d ranks failed", failed);
  ASSERT_LOGS(count_lines_with(logs,
                               "WEFT_COMM_SECRET is not set, so this job runs without a "
                               "secret") == 2,
              logs, "each rank should say once that it runs without a secret");
  free(logs);
}
END_TEST

/* Rank 1 has another secret: it is refused at once with an error that names
 * WEFT_COMM_SECRET; rank 0 reports rank 1 missing when its wait ends. */
static int rank_wrong_secret(const struct job *j, int rank) {
  if (rank == 1) return rank_expect_refused(j, rank, "WEFT_COMM_SECRET", 2500);
  return rank_expect_refused(j, rank,
                             "rank 1 of 2 did not reach the bootstrap root within 4 s; meanwhile "
                             "it dropped 1 connection that did not present the secret (1 from "
                             "127.0.0.1: 1 wrong secret)",
                             (j->timeout_s + 5) * 1000);
}

START_TEST(test_comm_id_wrong_secret) {
  char dir[64];
  log_dir_make(dir, sizeof(dir));
  struct job j;
  job_init(&j, 2, dir);
  j.timeout_s = 4;
  j.secret[0] = "alpha-secret";
  j.secret[1] = "beta-secret";
  j.start_ms[1] = 200;
  pid_t pids[2];
  spawn_job(&j, pids, rank_wrong_secret);
  int failed = reap(pids, 2, 30);
  char *logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "%d ranks failed", failed);
  free(logs);
}
END_TEST

/* A value that is no address, and a port someone else holds: both errors
 * name NCCL_COMM_ID. */
static int rank_bad_comm_id(const struct job *j, int rank) {
  rank_env(j, rank);
  setenv("NCCL_COMM_ID", "no-port-here", 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclInvalidArgument) RANK_FAIL("a bad NCCL_COMM_ID was accepted");
  if (strstr(ncclGetLastError(NULL), "NCCL_COMM_ID=no-port-here") == NULL)
    RANK_FAIL("last error does not name NCCL_COMM_ID: %s", ncclGetLastError(NULL));
  return 0;
}

static int rank_busy_port(const struct job *j, int rank) {
  return rank_expect_refused(j, rank, "(NCCL_COMM_ID)", 5000);
}

/* Rank 1 of 2 alone: rank 0, which hosts the root, never comes. */
static int rank_no_root(const struct job *j, int unused) {
  (void)unused;
  return rank_expect_refused(
             j, 1, "cannot reach the bootstrap root at 127.0.0.1:", (j->timeout_s + 5) * 1000) ||
         rank_check_last_error("(NCCL_COMM_ID; rank 0 hosts it)");
}

START_TEST(test_comm_id_bad) {
  char dir[64];
  log_dir_make(dir, sizeof(dir));
  struct job j;
  job_init(&j, 1, dir);
  pid_t pid[1];
  spawn_job(&j, pid, rank_bad_comm_id);
  if (reap(pid, 1, 30) != 0) {
    char *logs = logs_take(dir);
    ASSERT_LOGS(0, logs, "a bad NCCL_COMM_ID was not reported");
  }
  /* Another process listens on the port rank 0 must host the root on. */
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)j.port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(listen(fd, 4), 0);
  j.t0 = now_ms();
  spawn_job(&j, pid, rank_busy_port);
  int failed = reap(pid, 1, 30);
  close(fd);
  char *logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "the busy port was not reported");
  free(logs);
  log_dir_make(dir, sizeof(dir));
  job_init(&j, 2, dir);
  j.timeout_s = 2;
  pid[0] = fork();
  ck_assert_int_ge(pid[0], 0);
  if (pid[0] == 0) _exit(rank_no_root(&j, 1));
  failed = reap(pid, 1, 30);
  logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "a missing root was not reported with NCCL_COMM_ID");
  free(logs);
}
END_TEST

/* ---- A flood of strangers -------------------------------------------------------- */

/* A stranger holds 1,200 idle connections to the root's port and to every
 * rank's listener (and opens new ones as they are closed) while a 4-rank
 * job starts its ranks 1 to 2 s apart, with the usual fd limit of 1,024,
 * then splits. Every rank gets in, and the logs name the flood's source a
 * few times instead of once per connection, and blame no rank. With
 * `talk`, each stranger sends a byte, so the kernel hands them all to the
 * gates at once (TCP_DEFER_ACCEPT holds back only silent ones). */
static void run_flooded_job(int talk) {
  char dir[64];
  log_dir_make(dir, sizeof(dir));
  struct job j;
  job_init(&j, 4, dir);
  j.timeout_s = 20;
  j.nofile = 1024;
  j.t0 = now_ms() + 300;
  for (int i = 0; i < 4; i++) j.secret[i] = "flood-test-secret";
  int starts[4] = {0, 1000, 3000, 4500};
  memcpy(j.start_ms, starts, sizeof(starts));
  j.split_at_ms = 6000;
  pid_t pids[4];
  spawn_job(&j, pids, rank_main);
  int stop_fd, stats_fd;
  pid_t flooder = flood_start(j.port, pids, 4, FLOOD_PER_PORT, talk, &stop_fd, &stats_fd);
  ck_assert_int_gt(flooder, 0);
  int failed = reap(pids, 4, 45);
  struct flood_stats st;
  int flood_res = flood_stop(flooder, stop_fd, stats_fd, &st);
  char *logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "%d ranks failed under the flood", failed);
  ck_assert_int_eq(flood_res, 0);
  /* The flood was real: 1,100+ connections at once on the root and on at
   * least the four ranks' listeners. */
  int flooded = 0;
  long connects = 0;
  for (int i = 0; i < st.ntargets; i++) {
    fprintf(stderr, "flooded port %d: %ld connections, %ld closed by it, %d at once\n", st.port[i],
            st.connects[i], st.closed[i], st.held_max[i]);
    flooded += st.held_max[i] >= 1100;
    connects += st.connects[i];
  }
  ck_assert_msg(st.ntargets >= 5 && st.held_max[0] >= 1100 && flooded >= 5,
                "the flood did not reach the root and 4 listeners with 1,100 connections each");
  ASSERT_LOGS(strstr(logs, "dropped connection from 127.0.0.1:") != NULL, logs,
              "no log line names the flood's source");
  ASSERT_LOGS(strstr(logs, "did not reach") == NULL, logs, "ranks were blamed");
  int lines = count_lines_with(logs, "dropped");
  ASSERT_LOGS(lines <= 10 * st.ntargets && lines * 20 < connects, logs,
              "%d log lines about drops for %ld connections: not rate-limited", lines, connects);
  free(logs);
}

START_TEST(test_flood) {
  run_flooded_job(0);
}
END_TEST

START_TEST(test_flood_talking) {
  run_flooded_job(1);
}
END_TEST

/* ---- Many ranks of one process under a flood --------------------------------------- */

#define THREAD_RANKS 8

struct thread_rank {
  ncclComm_t comm;
  int rank;
  int64_t split_at;
  int failed;
};

static void *thread_rank_main(void *arg) {
  struct thread_rank *t = arg;
  int rank = t->rank;
  ncclComm_t child = NULL;
  t->failed = 1;
  if (allreduce_ok(t->comm, rank, THREAD_RANKS, "the job")) return NULL;
  sleep_until(t->split_at);
  if (ncclCommSplit(t->comm, rank % 2, rank, &child, NULL) != ncclSuccess) {
    fprintf(stderr, "rank %d: ncclCommSplit: %s\n", rank, ncclGetLastError(t->comm));
    return NULL;
  }
  if (allreduce_ok(child, rank / 2, THREAD_RANKS / 2, "the split")) return NULL;
  ncclCommDestroy(child);
  t->failed = 0;
  return NULL;
}

/* One process, THREAD_RANKS ranks (ncclCommInitAll), one thread each. */
static int job_threads_main(const struct job *j, int unused) {
  int rank = unused;
  rank_env(j, 0);
  unsetenv("NCCL_COMM_ID");
  sleep_until(j->t0);
  ncclComm_t comms[THREAD_RANKS];
  if (ncclCommInitAll(comms, THREAD_RANKS, NULL) != ncclSuccess)
    RANK_FAIL("ncclCommInitAll: %s", ncclGetLastError(NULL));
  pthread_t th[THREAD_RANKS];
  struct thread_rank t[THREAD_RANKS];
  for (int i = 0; i < THREAD_RANKS; i++) {
    t[i] = (struct thread_rank){.comm = comms[i], .rank = i, .split_at = j->t0 + j->split_at_ms};
    if (pthread_create(&th[i], NULL, thread_rank_main, &t[i]) != 0) RANK_FAIL("pthread_create");
  }
  int failed = 0;
  for (int i = 0; i < THREAD_RANKS; i++) {
    pthread_join(th[i], NULL);
    failed += t[i].failed;
  }
  for (int i = 0; i < THREAD_RANKS; i++) ncclCommDestroy(comms[i]);
  return failed != 0;
}

/* A process hosting 8 ranks has 8 listeners, and its splits add roots and
 * listeners: with a low fd limit (FLOOD_THREADS_NOFILE), what the gates hold for strangers
 * must stay within one share of it for the process, or the ranks cannot
 * open what they need. These strangers send a byte each, so the kernel
 * does not hold them back (TCP_DEFER_ACCEPT) and the gates must. */
START_TEST(test_flood_threads) {
  char dir[64];
  log_dir_make(dir, sizeof(dir));
  struct job j;
  job_init(&j, 1, dir);
  j.timeout_s = 20;
  j.nofile = FLOOD_THREADS_NOFILE;
  j.t0 = now_ms() + 300;
  j.split_at_ms = 1500;
  pid_t pid[1];
  spawn_job(&j, pid, job_threads_main);
  int stop_fd, stats_fd;
  pid_t flooder = flood_start(0, pid, 1, FLOOD_PER_PORT, 1, &stop_fd, &stats_fd);
  ck_assert_int_gt(flooder, 0);
  int failed = reap(pid, 1, 45);
  struct flood_stats st;
  int flood_res = flood_stop(flooder, stop_fd, stats_fd, &st);
  char *logs = logs_take(dir);
  ASSERT_LOGS(failed == 0, logs, "the 8-rank process failed under the flood");
  ck_assert_int_eq(flood_res, 0);
  int flooded = 0;
  for (int i = 0; i < st.ntargets; i++) flooded += st.held_max[i] >= 1100;
  ck_assert_msg(flooded >= THREAD_RANKS, "only %d listeners were flooded", flooded);
  free(logs);
}
END_TEST

int main(void) {
  Suite *s = suite_create("boot_attack");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_comm_id);
  tcase_add_test(tc, test_comm_id_no_secret);
  tcase_add_test(tc, test_comm_id_wrong_secret);
  tcase_add_test(tc, test_comm_id_bad);
  tcase_add_test(tc, test_flood);
  tcase_add_test(tc, test_flood_talking);
  tcase_add_test(tc, test_flood_threads);
  suite_add_tcase(s, tc);
  /* Each test's ranks read their environment once per process: fork mode. */
  return suite_run_with(s, CK_FORK, CK_NORMAL);
}
