/* Logging through the environment NCCL users know: NCCL_DEBUG,
 * NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE (%h host, %p pid).
 *
 * weft reads these once per process, so every case runs this binary again
 * (`test_debug --child MODE`) with the environment it needs and reads what
 * the child wrote. Positive checks accept stdout or stderr (NCCL writes its
 * log to stdout, weft to stderr); "nothing printed" means neither. */
#include <check.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"

/* ---- The child: one single-rank communicator, maybe a bad call --------- */

static int child_main(const char *mode) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  /* Failures go to stdout: stderr must stay as weft left it. */
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    printf("child: init failed: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float buf[4] = {1, 2, 3, 4};
  if (ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess || buf[3] != 4) {
    printf("child: all-reduce failed: %s\n", ncclGetLastError(comm));
    return 1;
  }
  if (strcmp(mode, "badarg") == 0 &&
      ncclAllReduce(buf, NULL, 4, ncclFloat32, ncclSum, comm, NULL) != ncclInvalidArgument) {
    printf("child: the bad call was not rejected\n");
    return 1;
  }
  if (ncclCommDestroy(comm) != ncclSuccess) {
    printf("child: destroy failed: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  return 0;
}

/* ---- The parent --------------------------------------------------------- */

struct child_out {
  int pid;
  char *out; /* stdout, NUL-terminated */
  char *err; /* stderr */
};

static const char *tmp_dir(void) {
  const char *t = getenv("TMPDIR");
  return t != NULL && t[0] != '\0' ? t : "/tmp";
}

/* Runs `--child mode` with env (see harness_exec_self) and captures its
 * output; fails the test unless it exits 0. */
static void run_child(const char *mode, const char *const env[], struct child_out *co) {
  char out_path[512], err_path[512];
  snprintf(out_path, sizeof out_path, "%s/weft-test-debug-%d-out-XXXXXX", tmp_dir(), (int)getpid());
  snprintf(err_path, sizeof err_path, "%s/weft-test-debug-%d-err-XXXXXX", tmp_dir(), (int)getpid());
  int fo = mkstemp(out_path), fe = mkstemp(err_path);
  ck_assert_msg(fo >= 0 && fe >= 0, "mkstemp in %s failed", tmp_dir());
  close(fo);
  close(fe);

  char *argv[] = {"test_debug", "--child", (char *)mode, NULL};
  int st = harness_exec_self(argv, env, out_path, err_path, 30, &co->pid);
  co->out = harness_read_file(out_path);
  co->err = harness_read_file(err_path);
  unlink(out_path);
  unlink(err_path);
  ck_assert_msg(co->out != NULL && co->err != NULL, "child output lost");
  ck_assert_msg(st != -1, "child (%s) did not finish in 30 s", mode);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "child (%s) failed, status 0x%x; stdout: %s; stderr: %s", mode, st, co->out,
                co->err);
}

static void child_out_free(struct child_out *co) {
  free(co->out);
  free(co->err);
}

static int either_has(const struct child_out *co, const char *needle) {
  return strstr(co->out, needle) != NULL || strstr(co->err, needle) != NULL;
}

/* A log line of the child starts "host:pid:tid"; checks one holding
 * `needle` carries the child's pid. */
static int line_has_pid(const char *text, const char *needle, int pid) {
  char tag[32];
  snprintf(tag, sizeof tag, ":%d:", pid);
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle)) {
    const char *start = p;
    while (start > text && start[-1] != '\n') start--;
    const char *hit = strstr(start, tag);
    if (hit != NULL && hit < p) return 1;
  }
  return 0;
}

START_TEST(test_info_to_file) {
  char pattern[512];
  snprintf(pattern, sizeof pattern, "%s/weft-test-debug-%d-%%h-%%p.log", tmp_dir(), (int)getpid());
  char file_env[600];
  snprintf(file_env, sizeof file_env, "NCCL_DEBUG_FILE=%s", pattern);
  const char *env[] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS", file_env, NULL};
  struct child_out co;
  run_child("init", env, &co);

  /* %h is the host name (NCCL cuts it at the first dot), %p the pid. */
  char glob_pat[600];
  snprintf(glob_pat, sizeof glob_pat, "%s/weft-test-debug-%d-*-%d.log", tmp_dir(), (int)getpid(),
           co.pid);
  glob_t g;
  int found = glob(glob_pat, 0, NULL, &g) == 0 && g.gl_pathc == 1;
  char *log = found ? harness_read_file(g.gl_pathv[0]) : NULL;
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  int host_ok = 0;
  if (found) {
    const char *name = strrchr(g.gl_pathv[0], '/') + 1;
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "weft-test-debug-%d-", (int)getpid());
    const char *h = name + n;
    size_t hlen = strlen(h) - strlen(strrchr(h, '-'));
    host_ok = hlen > 0 && strncmp(h, host, hlen) == 0;
    for (size_t i = 0; i < g.gl_pathc; i++) unlink(g.gl_pathv[i]);
  }
  globfree(&g);

  ck_assert_msg(found, "no log file %s (stdout: %s; stderr: %s)", glob_pat, co.out, co.err);
  ck_assert_msg(host_ok, "%%h did not expand to this host (%s)", host);
  ck_assert_ptr_nonnull(log);
  ck_assert_msg(strstr(log, "weft INFO") != NULL, "no 'weft INFO' line in the log file: %s", log);
  ck_assert_msg(line_has_pid(log, "weft INFO", co.pid),
                "INFO lines do not carry host:pid:tid of pid %d: %s", co.pid, log);
  free(log);
  child_out_free(&co);
}
END_TEST

START_TEST(test_info_to_stream) {
  const char *env[] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("init", env, &co);
  ck_assert_msg(either_has(&co, "weft INFO"), "no 'weft INFO' line; stdout: %s; stderr: %s", co.out,
                co.err);
  child_out_free(&co);
}
END_TEST

START_TEST(test_warn_bad_argument) {
  const char *env[] = {"NCCL_DEBUG=WARN", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("badarg", env, &co);
  ck_assert_msg(either_has(&co, "weft WARN"), "no 'weft WARN' line; stdout: %s; stderr: %s", co.out,
                co.err);
  ck_assert_msg(
      line_has_pid(co.out, "weft WARN", co.pid) || line_has_pid(co.err, "weft WARN", co.pid),
      "WARN line without host:pid:tid of pid %d; stderr: %s", co.pid, co.err);
  ck_assert_msg(either_has(&co, "ncclAllReduce") && either_has(&co, "recvbuff"),
                "WARN does not name the call and argument; stderr: %s", co.err);
  ck_assert_msg(!either_has(&co, "weft INFO"), "INFO lines at NCCL_DEBUG=WARN; stderr: %s", co.err);
  child_out_free(&co);
}
END_TEST

START_TEST(test_subsys_env) {
  const char *env[] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=ENV", "NCCL_DEBUG_FILE",
                       "WEFT_TIMEOUT=7", NULL};
  struct child_out co;
  run_child("init", env, &co);
  ck_assert_msg(either_has(&co, "WEFT_TIMEOUT=7"),
                "no 'WEFT_TIMEOUT=7' with NCCL_DEBUG_SUBSYS=ENV; stdout: %s; "
                "stderr: %s",
                co.out, co.err);
  ck_assert_msg(either_has(&co, "NCCL_DEBUG="),
                "NCCL_DEBUG not among the parameters printed; stderr: %s", co.err);
  child_out_free(&co);
}
END_TEST

START_TEST(test_subsys_excludes_env) {
  const char *masks[] = {"NCCL_DEBUG_SUBSYS=INIT", "NCCL_DEBUG_SUBSYS=^ENV"};
  for (int i = 0; i < 2; i++) {
    const char *env[] = {"NCCL_DEBUG=INFO", masks[i], "NCCL_DEBUG_FILE", NULL};
    struct child_out co;
    run_child("init", env, &co);
    ck_assert_msg(!either_has(&co, "WEFT_TIMEOUT="), "parameters printed with %s; stderr: %s",
                  masks[i], co.err);
    child_out_free(&co);
  }
}
END_TEST

START_TEST(test_quiet_by_default) {
  const char *env[] = {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("badarg", env, &co);
  ck_assert_msg(co.err[0] == '\0', "stderr without NCCL_DEBUG: %s", co.err);
  ck_assert_msg(co.out[0] == '\0', "stdout without NCCL_DEBUG: %s", co.out);
  child_out_free(&co);
}
END_TEST

int main(int argc, char **argv) {
  harness_env_defaults();
  if (argc >= 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);

  Suite *s = suite_create("debug");
  TCase *tc = tcase_create("logging");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_info_to_file);
  tcase_add_test(tc, test_info_to_stream);
  tcase_add_test(tc, test_warn_bad_argument);
  tcase_add_test(tc, test_subsys_env);
  tcase_add_test(tc, test_subsys_excludes_env);
  tcase_add_test(tc, test_quiet_by_default);
  suite_add_tcase(s, tc);

  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
