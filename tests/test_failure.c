/* Failures named everywhere (issue 14, items 3-6), with real processes and
 * real signals: a rank SIGKILLed mid-collective and left a zombie, over
 * shared memory and over sockets; a rank SIGSTOPped mid-collective and
 * resumed after its peers gave up; a split one rank calls with a NULL
 * newcomm; a first call that needs a link its peer, busy in another call,
 * never sets up. Every rank must return an error within 2 s of the failure
 * (WEFT_TIMEOUT is far longer, so the timeout cannot pass these), and
 * ncclGetLastError must name the rank that failed and how. */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define PROMPT_S 2.0
#define MAX_RANKS 8
#define MSG 512

/* What the ranks share: a page mapped before the harness forks them. */
struct shared {
  _Atomic long long event_ns; /* when the failure happened (monotonic) */
  _Atomic int victim_pid;
  _Atomic int failed; /* survivors that have returned their error */
  _Atomic int victim_done;
  int res[MAX_RANKS];
  double took[MAX_RANKS];
  char msg[MAX_RANKS][MSG];
};

static struct shared *sh;

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void shared_map(void) {
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(sh != MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
}

/* Waits (sleeping) until *v reaches want or timeout_s passes. */
static int wait_count(_Atomic int *v, int want, double timeout_s) {
  double end = harness_now() + timeout_s;
  while (atomic_load(v) < want) {
    if (harness_now() > end) return 0;
    harness_sleep_ms(5);
  }
  return 1;
}

/* A survivor's error: when, what, which message. */
static void survivor_record(int rank, ncclResult_t res) {
  long long ev = atomic_load(&sh->event_ns);
  sh->res[rank] = (int)res;
  sh->took[rank] = ev > 0 ? (double)(now_ns() - ev) / 1e9 : -1.0;
  snprintf(sh->msg[rank], MSG, "%s", ncclGetLastError(NULL));
  fprintf(stderr, "rank %d: error %d %.3f s after the failure: %s\n", rank, (int)res,
          sh->took[rank], sh->msg[rank]);
}

static int check_survivor(int rank, int failed_rank, const char *how1, const char *how2) {
  char name[32];
  snprintf(name, sizeof(name), "rank %d ", failed_rank);
  HCHECK(sh->res[rank] == ncclRemoteError, "returned %d, expected ncclRemoteError (6): %s",
         sh->res[rank], sh->msg[rank]);
  HCHECK(sh->took[rank] >= 0 && sh->took[rank] < PROMPT_S,
         "returned %.2f s after the failure (limit %.1f s): %s", sh->took[rank], PROMPT_S,
         sh->msg[rank]);
  HCHECK(strstr(sh->msg[rank], name) != NULL &&
             (strstr(sh->msg[rank], how1) != NULL || strstr(sh->msg[rank], how2) != NULL),
         "the message does not name rank %d as \"%s\"/\"%s\": %s", failed_rank, how1, how2,
         sh->msg[rank]);
  return 0;
}

/* ---- A rank killed mid-collective, left unreaped ---------------------------- */

#define KILL_VICTIM 3
#define KILL_COUNT (1u << 18) /* floats: 1 MiB */

static void *killer_main(void *arg) {
  (void)arg;
  harness_sleep_ms(150);
  atomic_store(&sh->event_ns, now_ns());
  raise(SIGKILL);
  return NULL;
}

/* The victim's communicator rank runs in a child of the harness's rank
 * process, which does not reap it until the survivors are done: over
 * shared memory the dead rank is a zombie all that time. */
static int kill_victim(int rank, int nranks, ncclUniqueId id) {
  pid_t child = fork();
  HCHECK(child >= 0, "fork failed");
  if (child == 0) {
    ncclComm_t comm = NULL;
    float *buf = calloc(KILL_COUNT, sizeof(float));
    if (buf == NULL || ncclCommInitRank(&comm, nranks, id, rank) != ncclSuccess) _exit(2);
    if (harness_allreduce_ok(comm, nranks)) _exit(3);
    pthread_t t;
    if (pthread_create(&t, NULL, killer_main, NULL) != 0) _exit(4);
    for (int i = 0; i < 10000; i++)
      (void)ncclAllReduce(buf, buf, KILL_COUNT, ncclFloat32, ncclSum, comm, NULL);
    _exit(5);
  }
  int ok = wait_count(&sh->failed, nranks - 1, 30);
  int st = 0;
  waitpid(child, &st, 0);
  HCHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "the victim ended with status %#x", st);
  HCHECK(ok, "the survivors did not all return");
  return 0;
}

static int kill_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  if (rank == KILL_VICTIM) return kill_victim(rank, nranks, id);
  ncclComm_t comm = NULL;
  float *buf = calloc(KILL_COUNT, sizeof(float));
  HCHECK(buf != NULL, "out of memory");
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < 10000 && res == ncclSuccess; i++)
    res = ncclAllReduce(buf, buf, KILL_COUNT, ncclFloat32, ncclSum, comm, NULL);
  survivor_record(rank, res);
  /* The communicator stays open until every survivor has its answer: none
   * may learn of the death from a survivor that closed its links. */
  atomic_fetch_add(&sh->failed, 1);
  int all = wait_count(&sh->failed, nranks - 1, 30);
  ncclResult_t async = ncclSuccess;
  HNCCL(ncclCommGetAsyncError(comm, &async));
  (void)ncclCommAbort(comm);
  free(buf);
  HCHECK(all, "not every survivor returned");
  if (check_survivor(rank, KILL_VICTIM, "died", "exited")) return 1;
  HCHECK(async == ncclRemoteError, "ncclCommGetAsyncError says %d", (int)async);
  return 0;
}

static void run_kill(void) {
  shared_map();
  setenv("WEFT_TIMEOUT", "20", 1);
  char why[16384] = "";
  int rc = harness_procs(MAX_RANKS, 60, kill_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}

START_TEST(test_kill_shm_zombie) {
  run_kill();
}
END_TEST

START_TEST(test_kill_socket) {
  setenv("NCCL_SHM_DISABLE", "1", 1);
  run_kill();
}
END_TEST

/* ---- A rank stopped in a collective, resumed after its peers gave up -------- */

#define STOP_RANKS 4
#define STOP_VICTIM 2

static int stop_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  float x = 1.0f;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank == STOP_VICTIM) {
    atomic_store(&sh->victim_pid, (int)getpid());
    /* Stopped before it sends a byte of this all-reduce, resumed once every
     * peer has failed it: the data they sent is all there, but the call
     * must fail as theirs did. */
    atomic_store(&sh->event_ns, now_ns());
    raise(SIGSTOP);
    ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL);
    snprintf(sh->msg[rank], MSG, "%s", ncclGetLastError(NULL));
    atomic_store(&sh->victim_done, 1);
    (void)ncclCommAbort(comm);
    HCHECK(res != ncclSuccess, "the resumed rank's all-reduce returned success (x = %g)", x);
    HCHECK(strstr(sh->msg[rank], "rank 2 stopped answering") != NULL,
           "the resumed rank's message does not say it stopped answering: %s", sh->msg[rank]);
    return 0;
  }
  harness_sleep_ms(300); /* the victim is stopped by now */
  ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL);
  survivor_record(rank, res);
  if (atomic_fetch_add(&sh->failed, 1) == nranks - 2)
    kill(atomic_load(&sh->victim_pid), SIGCONT); /* the last survivor resumes it */
  int done = wait_count(&sh->victim_done, 1, 20);
  (void)ncclCommAbort(comm);
  HCHECK(done, "the resumed rank did not return");
  HCHECK(res != ncclSuccess, "the all-reduce with rank 2 stopped returned success");
  /* The stall is found at WEFT_TIMEOUT (2 s here): the limit counts from then. */
  sh->took[rank] -= 2.0;
  return check_survivor(rank, STOP_VICTIM, "stopped answering", "stopped answering");
}

START_TEST(test_stop_resume) {
  shared_map();
  setenv("WEFT_TIMEOUT", "2", 1);
  char why[16384] = "";
  int rc = harness_procs(STOP_RANKS, 60, stop_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- A split one rank calls wrongly ------------------------------------------ */

#define SPLIT_BAD 1

static int split_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, child = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank == SPLIT_BAD) {
    atomic_store(&sh->event_ns, now_ns());
    ncclResult_t res = ncclCommSplit(comm, 0, rank, NULL, NULL);
    atomic_fetch_add(&sh->failed, 1);
    wait_count(&sh->failed, nranks, 20);
    (void)ncclCommAbort(comm);
    HCHECK(res == ncclInvalidArgument, "split with newcomm NULL -> %d", (int)res);
    return 0;
  }
  harness_sleep_ms(50 * rank);
  ncclResult_t res = ncclCommSplit(comm, 0, rank, &child, NULL);
  survivor_record(rank, res);
  atomic_fetch_add(&sh->failed, 1);
  int all = wait_count(&sh->failed, nranks, 20);
  if (child != NULL) (void)ncclCommAbort(child);
  (void)ncclCommAbort(comm);
  HCHECK(all, "not every rank returned from the split");
  return check_survivor(rank, SPLIT_BAD, "newcomm is NULL", "newcomm is NULL");
}

START_TEST(test_split_null_newcomm) {
  shared_map();
  setenv("WEFT_TIMEOUT", "20", 1);
  char why[16384] = "";
  int rc = harness_procs(4, 60, split_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- Result codes of an abort ------------------------------------------------ */

static void *abort_later(void *arg) {
  harness_sleep_ms(300);
  (void)ncclCommAbort(arg);
  return NULL;
}

/* Rank 0's all-reduce waits for rank 1, which has not called it; a thread of
 * rank 0 aborts the communicator under it: that call returns
 * ncclInvalidUsage (the program ended it), not ncclInternalError (a bug).
 * Rank 1's all-reduce, made after the abort, returns ncclRemoteError at
 * once, naming rank 0's abort. */
static int abort_code_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  float x = 1.0f;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  if (rank == 0) {
    pthread_t t;
    HCHECK(pthread_create(&t, NULL, abort_later, comm) == 0, "pthread_create failed");
    ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL);
    pthread_join(t, NULL);
    atomic_store(&sh->victim_done, 1);
    HCHECK(res == ncclInvalidUsage, "the all-reduce ended by this rank's abort returned %d: %s",
           (int)res, ncclGetLastError(NULL));
    wait_count(&sh->failed, 1, 20); /* alive until rank 1 has its answer */
    return 0;
  }
  wait_count(&sh->victim_done, 1, 20);
  atomic_store(&sh->event_ns, now_ns());
  ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL);
  survivor_record(rank, res);
  atomic_fetch_add(&sh->failed, 1);
  (void)ncclCommAbort(comm);
  return check_survivor(rank, 0, "aborted the communicator", "aborted the communicator");
}

START_TEST(test_abort_codes) {
  shared_map();
  setenv("WEFT_TIMEOUT", "20", 1);
  char why[16384] = "";
  int rc = harness_procs(2, 60, abort_code_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- A peer alive in another call --------------------------------------------- */

#define UNMATCHED_TIMEOUT_S 3

/* The first call of the communicator: rank 0 sends to rank 1, which runs an
 * AllReduce instead. The AllReduce needs a link rank 0 never sets up; once
 * WEFT_TIMEOUT passes, rank 1 returns ncclRemoteError naming rank 0, alive,
 * and the missing link, rather than a bootstrap tag. */
static int unmatched_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  float x = 1.0f;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (rank == 0) {
    (void)ncclSend(&x, 1, ncclFloat32, 1, comm, NULL);
    wait_count(&sh->failed, 1, 30); /* alive, answering pings, until rank 1 has its answer */
    (void)ncclCommAbort(comm);
    return 0;
  }
  atomic_store(&sh->event_ns, now_ns());
  ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL);
  survivor_record(rank, res);
  atomic_fetch_add(&sh->failed, 1);
  (void)ncclCommAbort(comm);
  HCHECK(res == ncclRemoteError, "returned %d, expected ncclRemoteError (6): %s", (int)res,
         sh->msg[rank]);
  HCHECK(sh->took[rank] < UNMATCHED_TIMEOUT_S + PROMPT_S, "returned after %.2f s: %s",
         sh->took[rank], sh->msg[rank]);
  HCHECK(strstr(sh->msg[rank], "rank 0 ") != NULL &&
             strstr(sh->msg[rank], "no link set up to rank 1") != NULL &&
             strstr(sh->msg[rank], "alive") != NULL,
         "the message does not name rank 0, alive, and the missing link: %s", sh->msg[rank]);
  return 0;
}

START_TEST(test_unmatched_call) {
  shared_map();
  char text[8];
  snprintf(text, sizeof(text), "%d", UNMATCHED_TIMEOUT_S);
  setenv("WEFT_TIMEOUT", text, 1);
  char why[16384] = "";
  int rc = harness_procs(2, 60, unmatched_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("failure");
  TCase *tc = tcase_create("failure");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_kill_shm_zombie);
  tcase_add_test(tc, test_kill_socket);
  tcase_add_test(tc, test_stop_resume);
  tcase_add_test(tc, test_split_null_newcomm);
  tcase_add_test(tc, test_abort_codes);
  tcase_add_test(tc, test_unmatched_call);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
