/* Communicator lifecycle through the public API: repeated init/destroy and
 * init/abort leave no file descriptors, threads or memory behind; finalize
 * then destroy; non-blocking init; a rank that never arrives makes init fail
 * (naming it) instead of hanging.
 *
 * Each test runs in its own Check fork, so WEFT_TIMEOUT set in a test is
 * read fresh by that test's first NCCL call (CK_FORK=no is not supported). */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define CYCLES 100

enum ending { END_DESTROY, END_ABORT, END_FINALIZE };

/* Entries of a /proc directory, "." and ".." aside. */
static int count_entries(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
  closedir(d);
  return n;
}

static int count_threads(void) {
  return count_entries("/proc/self/task");
}
/* Less the one opendir holds while counting. */
static int count_fds(void) {
  return count_entries("/proc/self/fd") - 1;
}

/* weft's shared-memory segments (/dev/shm/weft-*): they outlive processes,
 * so every one must be unlinked, also when a rank dies. A segment's name
 * ends with its creator's pid; SHM_DEAD counts those whose creator has
 * exited. */
#define SHM_DEAD ((pid_t)-1)
static int count_weft_shm_of(pid_t pid) {
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return 0;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "weft-", 5) != 0) continue;
    const char *dash = strrchr(e->d_name, '-');
    long creator = dash != NULL ? atol(dash + 1) : 0;
    if (pid == SHM_DEAD)
      n += creator > 0 && kill((pid_t)creator, 0) != 0 && errno == ESRCH;
    else
      n += creator == (long)pid;
  }
  closedir(d);
  return n;
}

/* Segments left by processes that have exited: a leak. Another weft job
 * running beside this test (meson runs tests in parallel) has segments
 * too, but their creators are alive while they are in use, and a job that
 * is ending unlinks its own within moments; so a count above `before` is
 * retried for up to 3 s before it is believed. */
static int dead_creators_shm(int before) {
  int n = count_weft_shm_of(SHM_DEAD);
  for (int i = 0; i < 30 && n > before; i++) {
    usleep(100 * 1000);
    n = count_weft_shm_of(SHM_DEAD);
  }
  return n;
}

static size_t heap_in_use(void) {
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

/* A small all-reduce, so every cycle sets up whatever collectives need. */
static int allreduce_check(ncclComm_t comm, int rank, int nranks) {
  float buf[3] = {(float)rank, 1.0f, (float)(2 * rank)};
  HNCCL(ncclAllReduce(buf, buf, 3, ncclFloat32, ncclSum, comm, NULL));
  float sum = (float)(nranks * (nranks - 1) / 2);
  HCHECK(buf[0] == sum && buf[1] == (float)nranks && buf[2] == 2 * sum, "all-reduce gave %g %g %g",
         buf[0], buf[1], buf[2]);
  return 0;
}

/* The test's own process: ranks that run there are threads. */
static pid_t test_pid;

static int cycle_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  enum ending how = *(enum ending *)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (allreduce_check(comm, rank, nranks)) return 1;
  switch (how) {
    case END_ABORT: HNCCL(ncclCommAbort(comm)); break;
    case END_FINALIZE: {
      /* After finalize only destroy or abort may follow: work, a second
       * finalize and a split are refused, saying so; an operator made
       * before may still be destroyed. */
      float one = 1;
      ncclRedOp_t op;
      HNCCL(ncclRedOpCreatePreMulSum(&op, &one, ncclFloat32, ncclScalarHostImmediate, comm));
      HNCCL(ncclCommFinalize(comm));
      float buf[1] = {0};
      ncclComm_t child = NULL;
      const ncclResult_t after[3] = {
          ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, NULL),
          ncclCommFinalize(comm),
          ncclCommSplit(comm, 0, rank, &child, NULL),
      };
      for (int i = 0; i < 3; i++)
        HCHECK(after[i] == ncclInvalidUsage, "call %d after ncclCommFinalize returned %d", i,
               (int)after[i]);
      HCHECK(child == NULL, "a split after ncclCommFinalize made a communicator");
      /* The last error is one per process: rank-threads would read each
       * other's while they write it. */
      if (getpid() != test_pid)
        HCHECK(strstr(ncclGetLastError(comm), "finalized") != NULL, "last error: %s",
               ncclGetLastError(comm));
      HNCCL(ncclRedOpDestroy(op, comm));
      HNCCL(ncclCommDestroy(comm));
      break;
    }
    default: HNCCL(ncclCommDestroy(comm));
  }
  return 0;
}

/* Waits (bounded) for exiting threads and closing sockets to settle back to
 * the counts taken before. */
static void settle(int fds0, int thr0, int *fds, int *thr) {
  double until = harness_now() + 5;
  do {
    *fds = count_fds();
    *thr = count_threads();
    if (*fds == fds0 && *thr == thr0) return;
    harness_sleep_ms(10);
  } while (harness_now() < until);
}

/* The counts once they hold still for 50 ms (bounded): the baseline. */
static void baseline(int *fds, int *thr) {
  double until = harness_now() + 2;
  *fds = count_fds();
  *thr = count_threads();
  while (harness_now() < until) {
    harness_sleep_ms(50);
    int f = count_fds(), t = count_threads();
    if (f == *fds && t == *thr) return;
    *fds = f;
    *thr = t;
  }
}

static void cycles(enum ending how) {
  char why[4096];
  /* The first communicator may set up what lives as long as the process
   * (parameters, the log file); count after it. */
  int rc = harness_threads(2, 30, cycle_rank, &how, why, sizeof why);
  ck_assert_msg(rc == 0, "warm-up: %s", why);
  int fds0 = -1, thr0 = -1;
  baseline(&fds0, &thr0);
  size_t mem0 = heap_in_use();
  /* Thread ranks: every segment they make carries this process's pid, so
   * other weft jobs on the machine do not disturb the count. */
  int shm0 = count_weft_shm_of(getpid());
  for (int i = 0; i < CYCLES; i++) {
    rc = harness_threads(2, 30, cycle_rank, &how, why, sizeof why);
    ck_assert_msg(rc == 0, "cycle %d: %s", i, why);
  }
  int fds, thr;
  settle(fds0, thr0, &fds, &thr);
  size_t mem = heap_in_use();
  ck_assert_msg(fds == fds0, "%d open fds before %d cycles, %d after", fds0, CYCLES, fds);
  ck_assert_msg(thr == thr0, "%d threads before %d cycles, %d after", thr0, CYCLES, thr);
  ck_assert_msg(count_weft_shm_of(getpid()) == shm0,
                "%d /dev/shm/weft-* of this process before %d cycles, %d after", shm0, CYCLES,
                count_weft_shm_of(getpid()));
  /* Bytes still allocated (mallinfo2 counts every arena; exited threads
   * return their caches). 64 KiB over 100 cycles leaves room for noise and
   * catches a leak of a few hundred bytes per communicator or thread. Under
   * ASan mallinfo2 reads 0 and LeakSanitizer does this job. */
  ck_assert_msg(mem < mem0 + 64 * 1024, "heap in use grew from %zu to %zu bytes over %d cycles",
                mem0, mem, CYCLES);
}

START_TEST(test_init_destroy_cycles) {
  cycles(END_DESTROY);
}
END_TEST

START_TEST(test_init_abort_cycles) {
  cycles(END_ABORT);
}
END_TEST

START_TEST(test_finalize_destroy) {
  enum ending how = END_FINALIZE;
  char why[4096];
  test_pid = getpid();
  /* Processes first: forking is safest before this process has threads. */
  int rc = harness_procs(3, 30, cycle_rank, &how, why, sizeof why);
  ck_assert_msg(rc == 0, "processes: %s", why);
  rc = harness_threads(2, 30, cycle_rank, &how, why, sizeof why);
  ck_assert_msg(rc == 0, "threads: %s", why);
}
END_TEST

/* ncclCommInitAll communicators, created and destroyed by one thread. */
START_TEST(test_init_all_cycles) {
  ncclComm_t comms[3];
  ck_assert_int_eq(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  int fds0, thr0;
  baseline(&fds0, &thr0);
  for (int k = 0; k < 20; k++) {
    ck_assert_int_eq(ncclCommInitAll(comms, 3, NULL), ncclSuccess);
    float buf[3][4];
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int i = 0; i < 3; i++) {
      for (int e = 0; e < 4; e++) buf[i][e] = (float)(i + e);
      ck_assert_int_eq(ncclAllReduce(buf[i], buf[i], 4, ncclFloat32, ncclMax, comms[i], NULL),
                       ncclSuccess);
    }
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    for (int i = 0; i < 3; i++)
      for (int e = 0; e < 4; e++)
        ck_assert_msg(buf[i][e] == (float)(2 + e), "comm %d [%d] = %g", i, e, buf[i][e]);
    for (int i = 0; i < 3; i++)
      ck_assert_int_eq(k % 2 ? ncclCommAbort(comms[i]) : ncclCommDestroy(comms[i]), ncclSuccess);
  }
  int fds, thr;
  settle(fds0, thr0, &fds, &thr);
  ck_assert_msg(fds == fds0, "%d open fds before, %d after", fds0, fds);
  ck_assert_msg(thr == thr0, "%d threads before, %d after", thr0, thr);
}
END_TEST

static int nonblocking_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  ncclResult_t res = harness_init_nonblocking(&comm, nranks, id, rank);
  HCHECK(res == ncclSuccess || res == ncclInProgress,
         "non-blocking ncclCommInitRankConfig -> %d (%s): %s", (int)res, ncclGetErrorString(res),
         ncclGetLastError(NULL));
  HCHECK(comm != NULL, "no communicator handle while init is in progress");
  res = harness_wait_ready(comm);
  HCHECK(res == ncclSuccess, "ncclCommGetAsyncError reached %d (%s): %s", (int)res,
         ncclGetErrorString(res), ncclGetLastError(comm));

  int n = -1, me = -1;
  HNCCL(ncclCommCount(comm, &n));
  HNCCL(ncclCommUserRank(comm, &me));
  HCHECK(n == nranks && me == rank, "count %d rank %d", n, me);

  int buf[5] = {rank, rank, rank, rank, rank};
  res = ncclAllReduce(buf, buf, 5, ncclInt32, ncclSum, comm, NULL);
  HCHECK(res == ncclSuccess || res == ncclInProgress, "non-blocking ncclAllReduce -> %d (%s): %s",
         (int)res, ncclGetErrorString(res), ncclGetLastError(comm));
  res = harness_wait_ready(comm);
  HCHECK(res == ncclSuccess, "after ncclAllReduce: async error %d (%s): %s", (int)res,
         ncclGetErrorString(res), ncclGetLastError(comm));
  for (int i = 0; i < 5; i++)
    HCHECK(buf[i] == nranks * (nranks - 1) / 2, "buf[%d] = %d", i, buf[i]);

  res = ncclCommFinalize(comm);
  HCHECK(res == ncclSuccess || res == ncclInProgress,
         "non-blocking ncclCommFinalize -> %d (%s): %s", (int)res, ncclGetErrorString(res),
         ncclGetLastError(comm));
  res = harness_wait_ready(comm);
  HCHECK(res == ncclSuccess, "after ncclCommFinalize: async error %d: %s", (int)res,
         ncclGetLastError(comm));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_nonblocking_init) {
  char why[4096];
  int rc = harness_procs(3, 60, nonblocking_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "processes: %s", why);
  rc = harness_threads(2, 60, nonblocking_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "threads: %s", why);
}
END_TEST

static int init_allreduce_destroy(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

/* Process ranks are not forked while this process has threads (here, live
 * communicators' workers): a child could inherit a lock one of them held
 * and hang. The harness refuses and says why; under ThreadSanitizer the
 * sanitizer refuses instead (the ranks die when they start a thread). Once
 * the communicators are gone, the same run works. */
START_TEST(test_no_fork_with_threads) {
  ncclComm_t comms[2];
  ck_assert_int_eq(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
  char why[4096];
  int rc = harness_procs(2, 30, init_allreduce_destroy, NULL, why, sizeof why);
  ck_assert_msg(rc != 0, "ranks were forked from a process with live communicators");
#if !defined(__SANITIZE_THREAD__)
  ck_assert_msg(strstr(why, "harness: cannot fork 2 rank processes: this process has ") != NULL,
                "the refusal does not say why: %s", why);
#endif
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  rc = harness_procs(2, 30, init_allreduce_destroy, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "after destroy: %s", why);
}
END_TEST

static int missing_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRank(&comm, nranks, id, rank);
  HCHECK(res != ncclSuccess && res != ncclInProgress,
         "ncclCommInitRank succeeded (%d) with rank 2 of 3 missing", (int)res);
  const char *msg = ncclGetLastError(NULL);
  HCHECK(msg != NULL && strstr(msg, "rank 2") != NULL,
         "ncclCommInitRank -> %d (%s); last error does not name rank 2: "
         "\"%s\"",
         (int)res, ncclGetErrorString(res), msg ? msg : "(null)");
  return 0;
}

START_TEST(test_missing_rank) {
  /* Read by this process's first NCCL call (ncclGetUniqueId, whose root
   * also waits) and inherited by the ranks. */
  setenv("WEFT_TIMEOUT", "3", 1);
  struct harness_opts o = {HARNESS_PROCS, 3, 2, 40, 0};
  char why[4096];
  int rc = harness_run(&o, missing_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* Rank 2 dies after one good all-reduce. The others' next all-reduce must
 * fail, not hang; so must every later call on that communicator; and abort
 * must still free it. */
static int peer_dies_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (allreduce_check(comm, rank, nranks)) return 1;
  if (rank == 2) _exit(0);
  float buf[1024] = {0};
  ncclResult_t res = ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, NULL);
  ncclResult_t async = ncclSuccess;
  if (res == ncclSuccess || res == ncclInProgress) {
    HNCCL(ncclCommGetAsyncError(comm, &async));
  }
  HCHECK((res != ncclSuccess && res != ncclInProgress) || async != ncclSuccess,
         "all-reduce with rank 2 dead returned %d (%s), async error %d", (int)res,
         ncclGetErrorString(res), (int)async);
  const char *msg = ncclGetLastError(comm);
  HCHECK(msg != NULL && msg[0] != '\0', "no last error after the failed all-reduce");
  res = ncclAllReduce(buf, buf, 1, ncclFloat32, ncclSum, comm, NULL);
  HCHECK(res != ncclSuccess, "an all-reduce after the failure succeeded");
  HNCCL(ncclCommAbort(comm));
  return 0;
}

START_TEST(test_peer_dies) {
  setenv("WEFT_TIMEOUT", "3", 1);
  int shm0 = count_weft_shm_of(SHM_DEAD);
  char why[4096];
  int rc = harness_procs(3, 40, peer_dies_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
  /* Every rank process has exited: a segment one of them made and nobody
   * unlinked has a dead creator. */
  int shm1 = dead_creators_shm(shm0);
  ck_assert_msg(shm1 <= shm0, "%d /dev/shm/weft-* of exited processes before, %d after a rank died",
                shm0, shm1);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("lifecycle");

  TCase *tc = tcase_create("cycles");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_init_destroy_cycles);
  tcase_add_test(tc, test_init_abort_cycles);
  tcase_add_test(tc, test_init_all_cycles);
  suite_add_tcase(s, tc);

  tc = tcase_create("modes");
  tcase_set_timeout(tc, 150);
  tcase_add_test(tc, test_finalize_destroy);
  tcase_add_test(tc, test_nonblocking_init);
  tcase_add_test(tc, test_missing_rank);
  tcase_add_test(tc, test_peer_dies);
  tcase_add_test(tc, test_no_fork_with_threads);
  suite_add_tcase(s, tc);

  return suite_run(s);
}
