/* The topology decisions a communicator takes at init, through the public
 * API on forked host ranks, read from NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH
 * logs: SHM between host ranks of one host, NET with NCCL_SHM_DISABLE=1,
 * the ring in rank order; NCCL_TOPO_DUMP_FILE written once, by rank 0, in
 * a file that NCCL_TOPO_FILE loads again.
 *
 * Each test runs in its own Check fork, so the environment a test sets is
 * read by that test's first NCCL call. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

static int init_destroy(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

#ifdef WEFT_HAVE_LIBXML
static int count(const char *text, const char *what) {
  int n = 0;
  for (const char *p = strstr(text, what); p != NULL; p = strstr(p + 1, what)) n++;
  return n;
}
#endif

/* Runs nranks forked ranks that init and destroy; their logs. */
static char *run_logged(const char *dir, int nranks) {
  char why[4096];
  int rc = harness_procs(nranks, 20, init_destroy, NULL, why, sizeof(why));
  char *logs = harness_logs_take(dir);
  ck_assert_msg(rc == 0, "%s\n%s", why, logs);
  return logs;
}

static void expect(const char *logs, const char *line) {
  ck_assert_msg(strstr(logs, line) != NULL, "no \"%s\" in the logs:\n%s", line, logs);
}

START_TEST(test_host_ranks_shm) {
  char dir[64];
  harness_log_to_dir(dir, sizeof(dir), "GRAPH");
  char *logs = run_logged(dir, 3);
  rmdir(dir);
  for (int a = 0; a < 3; a++) {
    for (int b = 0; b < 3; b++) {
      char line[128];
      snprintf(line, sizeof(line), "rank %d -> rank %d: SHM (host ranks on one host)", a, b);
      if (a != b) expect(logs, line);
    }
    char ring[128];
    snprintf(ring, sizeof(ring), "rank %d: ring order (rank order: host ranks): 0 1 2\n", a);
    expect(logs, ring);
  }
  ck_assert_msg(strstr(logs, ": NET (") == NULL, "NET between local ranks:\n%s", logs);
  free(logs);
}
END_TEST

START_TEST(test_shm_disabled_net) {
  char dir[64];
  setenv("NCCL_SHM_DISABLE", "1", 1);
  harness_log_to_dir(dir, sizeof(dir), "GRAPH");
  char *logs = run_logged(dir, 2);
  rmdir(dir);
  expect(logs, "rank 0 -> rank 1: NET (host ranks on one host, NCCL_SHM_DISABLE=1)");
  expect(logs, "rank 1 -> rank 0: NET (host ranks on one host, NCCL_SHM_DISABLE=1)");
  ck_assert_msg(strstr(logs, ": SHM (") == NULL, "SHM with NCCL_SHM_DISABLE=1:\n%s", logs);
  free(logs);
}
END_TEST

/* The dump runs in a child process, so this process reads NCCL_TOPO_FILE
 * afresh (weft reads its parameters once per process). */
START_TEST(test_topo_dump_reloads) {
  char dir[64], xml[128];
  harness_log_to_dir(dir, sizeof(dir), "GRAPH");
  snprintf(xml, sizeof(xml), "%s/topo.xml", dir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("NCCL_TOPO_DUMP_FILE", xml, 1);
    char why[4096];
    int rc = harness_procs(2, 20, init_destroy, NULL, why, sizeof(why));
    if (rc != 0) fprintf(stderr, "%s\n", why);
    _exit(rc == 0 ? 0 : 1);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  char *logs = harness_logs_take(dir);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "dump run failed:\n%s", logs);
#ifndef WEFT_HAVE_LIBXML
  /* Without libxml2 there is no XML writer: init still succeeds and the
   * WARN says why there is no file. */
  ck_assert_msg(strstr(logs, "built without libxml2") != NULL, "no WARN about the dump:\n%s",
                logs);
  free(logs);
  rmdir(dir);
#else
  ck_assert_msg(count(logs, "topology written to") == 1 &&
                    strstr(logs, "[0] NCCL INFO topology written to") != NULL,
                "the dump is not written once, by rank 0:\n%s", logs);
  free(logs);
  char *text = harness_read_file(xml);
  ck_assert_msg(text != NULL && strstr(text, "<system") != NULL && strstr(text, "</system>"),
                "%s is not a topology: %s", xml, text ? text : "(missing)");
  free(text);

  setenv("NCCL_TOPO_FILE", xml, 1);
  logs = run_logged(dir, 2);
  char from[256];
  snprintf(from, sizeof(from), "topology %s (from xml)", xml);
  expect(logs, from);
  expect(logs, "rank 0 -> rank 1: SHM (host ranks on one host)");
  free(logs);
  unlink(xml);
  rmdir(dir);
#endif
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("graph");
  TCase *tc = tcase_create("decisions");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_host_ranks_shm);
  tcase_add_test(tc, test_shm_disabled_net);
  tcase_add_test(tc, test_topo_dump_reloads);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
