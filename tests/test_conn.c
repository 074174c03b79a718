/* Connections and the call check, through the public API on forked ranks:
 * shm is chosen between ranks of one host and sockets with
 * NCCL_SHM_DISABLE=1 (read from the NCCL_DEBUG=INFO logs); a /dev/shm
 * without room falls back to sockets with a WARN; a rank killed mid-
 * collective leaves no /dev/shm/weft-* behind and the others get an error
 * within WEFT_TIMEOUT; ranks that disagree on a call, or on a send/recv
 * size, all get ncclInvalidUsage and can go on with the communicator; a
 * 2-rank broadcast over sockets moves whole on the wide link from
 * WEFT_SOCKET_WIDE_MIN_BYTES, correct in place and out of place, and its
 * root gets an error in time when the peer dies mid-call.
 *
 * Each test runs in its own Check fork, so the environment a test sets is
 * read by that test's first NCCL call. */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define COUNT 4096

/* ---- Helpers ---------------------------------------------------------------- */

static int allreduce_check(ncclComm_t comm, int rank, int nranks, size_t count) {
  float *buf = calloc(count, sizeof(float));
  HCHECK(buf != NULL, "out of memory");
  for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + (int)(i % 7));
  ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
  int bad = -1;
  for (size_t i = 0; i < count && bad < 0 && res == ncclSuccess; i++) {
    float want = (float)(nranks * (nranks - 1) / 2 + nranks * (int)(i % 7));
    if (buf[i] != want) bad = (int)i;
  }
  free(buf);
  HCHECK(res == ncclSuccess, "ncclAllReduce -> %d: %s", (int)res, ncclGetLastError(comm));
  HCHECK(bad < 0, "all-reduce element %d is wrong", bad);
  return 0;
}

/* The communicator still in step after a misuse: an all-reduce gives the
 * right sums; then it is destroyed. */
static int in_step_destroy(ncclComm_t comm, int rank, int nranks) {
  if (allreduce_check(comm, rank, nranks, COUNT)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

/* fn on n forked ranks; every rank must return 0. */
static void run_procs(int n, harness_rank_fn fn) {
  char why[4096];
  int rc = harness_procs(n, 60, fn, NULL, why, sizeof(why));
  ck_assert_msg(rc == 0, "%s", why);
}

static int init_allreduce_destroy(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  return in_step_destroy(comm, rank, nranks);
}

/* ---- Transport choice ----------------------------------------------------------- */

static char *run_logged(int nranks) {
  char why[4096], *logs;
  int rc = harness_procs_logged(nranks, 60, "INIT,SHM,NET", init_allreduce_destroy, NULL, &logs,
                                why, sizeof(why));
  ck_assert_msg(rc == 0, "%s", why);
  return logs;
}

START_TEST(test_shm_by_default) {
  char *logs = run_logged(2);
  ck_assert_msg(harness_links_via(logs, "shm"), "no shm links in the logs:\n%s", logs);
  ck_assert_msg(strstr(logs, "via net_socket") == NULL, "a socket link between local ranks:\n%s",
                logs);
  free(logs);
}
END_TEST

START_TEST(test_sockets_without_shm) {
  setenv("NCCL_SHM_DISABLE", "1", 1);
  char *logs = run_logged(2);
  ck_assert_msg(harness_links_via(logs, "net_socket"), "no socket links in the logs:\n%s", logs);
  ck_assert_msg(strstr(logs, "via shm") == NULL, "shm with NCCL_SHM_DISABLE=1:\n%s", logs);
  free(logs);
}
END_TEST

/* Slots twice the size of /dev/shm: posix_fallocate fails at once. */
START_TEST(test_shm_full_falls_back) {
  struct statvfs vfs;
  ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
  unsigned long long total = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
  char text[32];
  snprintf(text, sizeof(text), "%llu", total / 4 + 4096);
  setenv("WEFT_SHM_SLOT_BYTES", text, 1);
  setenv("WEFT_SHM_SLOTS", "8", 1);
  char *logs = run_logged(2);
  ck_assert_msg(strstr(logs, "via net_socket") != NULL && strstr(logs, "via shm") == NULL,
                "no fallback to sockets:\n%s", logs);
  ck_assert_msg(strstr(logs, "WARN") != NULL && strstr(logs, "using sockets") != NULL,
                "no WARN about the fallback:\n%s", logs);
  free(logs);
}
END_TEST

/* ---- The wide link ------------------------------------------------------------------ */

/* 40 MiB and 3 floats: three 16 MiB messages, the last one short, and a
 * count that is not a multiple of any grain. */
#define WIDE_COUNT ((size_t)10 * 1024 * 1024 + 3)
#define WIDE_GUARD 16

static float wide_value(size_t i, int root) {
  return (float)((i * 7 + (size_t)root * 3) % 1021);
}

/* Broadcasts that go wide (WEFT_SOCKET_WIDE_MIN_BYTES=1 MiB), from each
 * root, in place and out of place, every element checked, the guard after
 * the output and a root's input untouched; then one that does not, and an
 * all-reduce on the channels. */
static int wide_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  float *send = malloc(WIDE_COUNT * sizeof(float));
  float *recv = malloc((WIDE_COUNT + WIDE_GUARD) * sizeof(float));
  HCHECK(send != NULL && recv != NULL, "out of memory");
  size_t counts[2] = {WIDE_COUNT, 128 * 1024}; /* 512 KiB: below the threshold */
  for (int k = 0; k < 2; k++)
    for (int root = 0; root < nranks; root++)
      for (int inplace = 0; inplace <= 1; inplace++) {
        size_t count = counts[k];
        for (size_t i = 0; i < count + WIDE_GUARD; i++) recv[i] = -1.0f;
        float *src = inplace ? recv : send;
        if (rank == root)
          for (size_t i = 0; i < count; i++) src[i] = wide_value(i, root);
        HNCCL(ncclBroadcast(src, recv, count, ncclFloat32, root, comm, NULL));
        for (size_t i = 0; i < count; i++)
          HCHECK(recv[i] == wide_value(i, root),
                 "rank %d: broadcast of %zu floats from root %d (%s): element %zu is %g, "
                 "expected %g",
                 rank, count, root, inplace ? "in place" : "out of place", i, (double)recv[i],
                 (double)wide_value(i, root));
        for (size_t i = count; i < count + WIDE_GUARD; i++)
          HCHECK(recv[i] == -1.0f, "rank %d: the broadcast wrote past its output (element %zu)",
                 rank, i);
        if (rank == root && !inplace)
          for (size_t i = 0; i < count; i++)
            HCHECK(send[i] == wide_value(i, root), "rank %d: the root's input changed at %zu", rank,
                   i);
      }
  free(send);
  free(recv);
  return in_step_destroy(comm, rank, nranks);
}

/* The line of logs that names a Broadcast of `bytes` (the TUNING line). */
static const char *tuning_line(const char *logs, size_t bytes, char *line, size_t size) {
  char want[64];
  snprintf(want, sizeof(want), "Broadcast %zu bytes nranks 2", bytes);
  const char *at = strstr(logs, want);
  if (at == NULL) return NULL;
  const char *end = strchr(at, '\n');
  size_t n = end != NULL ? (size_t)(end - at) : strlen(at);
  snprintf(line, size, "%.*s", (int)(n < size ? n : size - 1), at);
  return line;
}

/* A 2-rank Broadcast over sockets from WEFT_SOCKET_WIDE_MIN_BYTES moves
 * whole on the wide link (channel 31), its helper threads forced on CI's
 * 2 cores; a smaller one keeps the channels. */
START_TEST(test_wide_broadcast) {
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("WEFT_SOCKET_WIDE_MIN_BYTES", "1048576", 1);
  setenv("WEFT_SOCKET_HOST_THREADS", "1", 1);
  setenv("NCCL_SOCKET_NTHREADS", "4", 1);
  char why[4096], *logs, line[512];
  int rc = harness_procs_logged(2, 60, "NET,TUNING", wide_rank, NULL, &logs, why, sizeof(why));
  ck_assert_msg(rc == 0, "%s", why);
  for (int r = 0; r < 2; r++) {
    char want[128];
    snprintf(want, sizeof(want),
             "rank %d: wide link to rank %d on channel 31: whole calls dealt between", r, 1 - r);
    ck_assert_msg(strstr(logs, want) != NULL, "no \"%s\" in the logs, which begin:\n%.3000s", want,
                  logs);
  }
  ck_assert_msg(tuning_line(logs, WIDE_COUNT * sizeof(float), line, sizeof(line)) != NULL &&
                    strstr(line, "on the wide link") != NULL,
                "the 40 MiB broadcast was not planned on the wide link: %s", line);
  ck_assert_msg(tuning_line(logs, 128 * 1024 * sizeof(float), line, sizeof(line)) != NULL &&
                    strstr(line, "wide") == NULL,
                "the 512 KiB broadcast was planned on the wide link: %s", line);
  free(logs);
}
END_TEST

/* ---- A rank dies ------------------------------------------------------------------ */

#define DIE_RANK 2
#define DIE_TIMEOUT_S 5

static void *die_later(void *arg) {
  (void)arg;
  harness_sleep_ms(300);
  raise(SIGKILL);
  return NULL;
}

/* Which rank dies, and whether the loop is of broadcasts from rank 0
 * (NULL: all-reduces, DIE_RANK dies). */
struct die_case {
  int die;
  int broadcast;
};

/* Big all-reduces (or broadcasts) in a loop; one rank kills itself in the
 * middle. The others must see an error within the timeout, then abort. */
static int die_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  const struct die_case *dc = arg;
  int dier = dc != NULL ? dc->die : DIE_RANK;
  ncclComm_t comm;
  size_t count = 1 << 20;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  float *buf = calloc(count, sizeof(float));
  HCHECK(buf != NULL, "out of memory");
  pthread_t t;
  if (rank == dier) HCHECK(pthread_create(&t, NULL, die_later, NULL) == 0, "pthread_create");
  ncclResult_t res = ncclSuccess;
  double start = harness_now(), failed_at = 0;
  while (res == ncclSuccess && harness_now() < start + 30) {
    double t0 = harness_now();
    res = dc != NULL && dc->broadcast
              ? ncclBroadcast(buf, buf, count, ncclFloat32, 0, comm, NULL)
              : ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
    failed_at = harness_now() - t0;
  }
  free(buf);
  HCHECK(res != ncclSuccess, "the calls kept succeeding after rank %d died", dier);
  HCHECK(failed_at < DIE_TIMEOUT_S + 3, "the failing all-reduce took %.1f s", failed_at);
  HNCCL(ncclCommAbort(comm));
  return 0;
}

static int weft_shm_names(char names[][256], int max) {
  DIR *d = opendir("/dev/shm");
  int n = 0;
  struct dirent *e;
  if (d == NULL) return 0;
  while ((e = readdir(d)) != NULL && n < max)
    if (strncmp(e->d_name, "weft-", 5) == 0) snprintf(names[n++], 256, "%s", e->d_name);
  closedir(d);
  return n;
}

/* Names in /dev/shm now that were not there before (others' tests may
 * come and go meanwhile; ours must not stay). */
static int new_segments(char before[][256], int nbefore) {
  static char now[256][256];
  int n = weft_shm_names(now, 256), fresh = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < nbefore && !seen; j++) seen = strcmp(now[i], before[j]) == 0;
    fresh += !seen;
  }
  return fresh;
}

START_TEST(test_rank_killed) {
  static char before[256][256];
  char why[4096];
  char timeout[16];
  snprintf(timeout, sizeof(timeout), "%d", DIE_TIMEOUT_S);
  setenv("WEFT_TIMEOUT", timeout, 1);
  int nbefore = weft_shm_names(before, 256);
  int rc = harness_procs(3, 60, die_rank, NULL, why, sizeof(why));
  ck_assert_msg(rc != 0, "rank %d did not die", DIE_RANK);
  ck_assert_msg(strstr(why, "rank 2: died of signal 9") != NULL, "%s", why);
  ck_assert_msg(strstr(why, "rank 0:") == NULL && strstr(why, "rank 1:") == NULL,
                "a surviving rank failed: %s", why);
  double until = harness_now() + 3;
  int fresh;
  while ((fresh = new_segments(before, nbefore)) > 0 && harness_now() < until) harness_sleep_ms(50);
  ck_assert_msg(fresh == 0, "%d /dev/shm/weft-* segments left behind", fresh);
}
END_TEST

/* The peer of a wide-link broadcast (2 ranks over sockets, helper threads)
 * dies mid-call: the root gets an error within the timeout. */
START_TEST(test_wide_peer_killed) {
  char why[4096], timeout[16];
  snprintf(timeout, sizeof(timeout), "%d", DIE_TIMEOUT_S);
  setenv("WEFT_TIMEOUT", timeout, 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("WEFT_SOCKET_WIDE_MIN_BYTES", "1048576", 1);
  setenv("WEFT_SOCKET_HOST_THREADS", "1", 1);
  setenv("NCCL_SOCKET_NTHREADS", "4", 1);
  struct die_case dc = {.die = 1, .broadcast = 1};
  int rc = harness_procs(2, 60, die_rank, &dc, why, sizeof(why));
  ck_assert_msg(rc != 0, "rank 1 did not die");
  ck_assert_msg(strstr(why, "rank 1: died of signal 9") != NULL, "%s", why);
  ck_assert_msg(strstr(why, "rank 0:") == NULL, "the root failed: %s", why);
}
END_TEST

/* ---- Mismatches ------------------------------------------------------------------- */

static int mismatch_count(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  float buf[16] = {0};
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  size_t count = rank == 0 ? 8 : 9;
  ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
  HCHECK(res == ncclInvalidUsage, "mismatched all-reduce -> %d, expected ncclInvalidUsage",
         (int)res);
  const char *msg = ncclGetLastError(comm);
  HCHECK(strstr(msg, "mismatch") && strstr(msg, "rank 0 called AllReduce(count 8") &&
             strstr(msg, "rank 1 called AllReduce(count 9"),
         "the error does not name the ranks and counts: %s", msg);
  /* Nothing moved; the communicator is still in step. */
  return in_step_destroy(comm, rank, nranks);
}

START_TEST(test_mismatched_count) {
  run_procs(2, mismatch_count);
}
END_TEST

/* Rank 0's 8 floats go direct (its record and data in one exchange), rank
 * 1's 100000 go by ring after the call check: each reads the other's record,
 * drains what follows it, and both report the mismatch and go on. */
static int mismatch_algo(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  size_t count = rank == 0 ? 8 : 100000;
  float *buf = calloc(count, sizeof(float));
  HCHECK(buf != NULL, "out of memory");
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  for (int i = 0; i < 3; i++) {
    ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
    HCHECK(res == ncclInvalidUsage, "mismatched all-reduce -> %d, expected ncclInvalidUsage",
           (int)res);
    const char *msg = ncclGetLastError(comm);
    HCHECK(strstr(msg, "rank 0 called AllReduce(count 8,") &&
               strstr(msg, "rank 1 called AllReduce(count 100000,"),
           "the error does not name the ranks and counts: %s", msg);
  }
  free(buf);
  return in_step_destroy(comm, rank, nranks);
}

START_TEST(test_mismatched_algo) {
  run_procs(2, mismatch_algo);
}
END_TEST

static int mismatch_func(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  float buf[64] = {0};
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  ncclResult_t res = rank == 2 ? ncclBroadcast(buf, buf, 64, ncclFloat32, 0, comm, NULL)
                               : ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, comm, NULL);
  HCHECK(res == ncclInvalidUsage, "mismatched call -> %d, expected ncclInvalidUsage", (int)res);
  const char *msg = ncclGetLastError(comm);
  HCHECK(strstr(msg, "ranks 0-1 called AllReduce") && strstr(msg, "rank 2 called Broadcast"),
         "the error does not name who called what: %s", msg);
  return in_step_destroy(comm, rank, nranks);
}

START_TEST(test_mismatched_call) {
  run_procs(3, mismatch_func);
}
END_TEST

/* Calls small enough to run directly (records and data in one exchange),
 * each round a different disagreement: a ReduceScatter, a Reduce at root
 * 1 and a Broadcast from root 2; Broadcasts from three roots; AllGathers
 * of 8 floats (direct) and 100000 (ring, after the call check). Each rank
 * reads every other's record, drains the bytes that follow it (what the
 * sender's own call sends this rank), reports who called what and leaves
 * its output untouched; the communicator stays in step. */
#define DIRECT_ROUNDS 3
static int mismatch_direct(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  size_t big = 100000 * (size_t)nranks;
  float *send = calloc(big, sizeof(float)), *recv = malloc(big * sizeof(float));
  HCHECK(send != NULL && recv != NULL, "out of memory");
  for (size_t i = 0; i < big; i++) send[i] = (float)(rank + 1);
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  static const char *const want[DIRECT_ROUNDS][3] = {
      {"rank 0 called ReduceScatter(count 16, ncclFloat32, ncclSum)",
       "rank 1 called Reduce(count 16, ncclFloat32, ncclSum, root 1)",
       "rank 2 called Broadcast(count 16, ncclFloat32, root 2)"},
      {"rank 0 called Broadcast(count 16, ncclFloat32, root 0)",
       "rank 1 called Broadcast(count 16, ncclFloat32, root 1)",
       "rank 2 called Broadcast(count 16, ncclFloat32, root 2)"},
      {"rank 0 called AllGather(count 8, ncclFloat32)", "ranks 1-2 called AllGather(count 100000",
       NULL}};
  for (int round = 0; round < DIRECT_ROUNDS; round++) {
    memset(recv, 0x7f, big * sizeof(float));
    ncclResult_t res;
    if (round == 0 && rank == 0)
      res = ncclReduceScatter(send, recv, 16, ncclFloat32, ncclSum, comm, NULL);
    else if (round == 0 && rank == 1)
      res = ncclReduce(send, recv, 16, ncclFloat32, ncclSum, 1, comm, NULL);
    else if (round <= 1)
      res = ncclBroadcast(send, recv, 16, ncclFloat32, rank, comm, NULL);
    else
      res = ncclAllGather(send, recv, rank == 0 ? 8 : 100000, ncclFloat32, comm, NULL);
    HCHECK(res == ncclInvalidUsage, "round %d: mismatched call -> %d, expected ncclInvalidUsage",
           round, (int)res);
    const char *msg = ncclGetLastError(comm);
    for (int k = 0; k < 3; k++)
      HCHECK(want[round][k] == NULL || strstr(msg, want[round][k]) != NULL,
             "round %d: the error does not say \"%s\": %s", round, want[round][k], msg);
    for (size_t i = 0; i < big; i++)
      HCHECK(((const unsigned char *)recv)[i * sizeof(float)] == 0x7f,
             "round %d: the output was written (element %zu)", round, i);
  }
  free(send);
  free(recv);
  return in_step_destroy(comm, rank, nranks);
}

START_TEST(test_mismatched_direct) {
  run_procs(3, mismatch_direct);
}
END_TEST

/* Rank 0 sends 100 floats, rank 1 posts 50: rank 1 gets ncclInvalidUsage,
 * its buffer is untouched, and both go on. */
static int mismatch_p2p(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  float buf[100];
  for (int i = 0; i < 100; i++) buf[i] = (float)(rank * 1000 + i);
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (rank == 0) {
    HNCCL(ncclSend(buf, 100, ncclFloat32, 1, comm, NULL));
  } else {
    ncclResult_t res = ncclRecv(buf, 50, ncclFloat32, 0, comm, NULL);
    HCHECK(res == ncclInvalidUsage, "mismatched recv -> %d, expected ncclInvalidUsage", (int)res);
    HCHECK(buf[0] == 1000.0f && buf[49] == 1049.0f, "the recv buffer was written");
    const char *msg = ncclGetLastError(comm);
    HCHECK(strstr(msg, "rank 0 sends 400 bytes but rank 1 receives 200"), "%s", msg);
  }
  return in_step_destroy(comm, rank, nranks);
}

START_TEST(test_mismatched_p2p) {
  run_procs(2, mismatch_p2p);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("conn");
  TCase *tc = tcase_create("transports");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_shm_by_default);
  tcase_add_test(tc, test_sockets_without_shm);
  tcase_add_test(tc, test_shm_full_falls_back);
  tcase_add_test(tc, test_wide_broadcast);
  tcase_add_test(tc, test_rank_killed);
  tcase_add_test(tc, test_wide_peer_killed);
  suite_add_tcase(s, tc);
  tc = tcase_create("mismatch");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_mismatched_count);
  tcase_add_test(tc, test_mismatched_call);
  tcase_add_test(tc, test_mismatched_algo);
  tcase_add_test(tc, test_mismatched_direct);
  tcase_add_test(tc, test_mismatched_p2p);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
