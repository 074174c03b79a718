/* Logging through the environment NCCL users know: NCCL_DEBUG,
 * NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE (%h host, %p pid), in NCCL's exact
 * line format (checked with regular expressions), and bad parameter values:
 * one WARN naming the variable, the value and what is allowed, then the
 * default (the NCCL_DEBUG_SUBSYS=ENV listing shows the value used).
 *
 * weft reads these once per process, so every case runs this binary again
 * (`test_debug --child MODE`) with the environment it needs and reads what
 * the child wrote. Positive checks accept stdout or stderr (NCCL writes its
 * log to stdout, weft to stderr); "nothing printed" means neither. */
#include <check.h>
#include <glob.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

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
  ck_assert_msg(strstr(log, "NCCL INFO") != NULL, "no 'NCCL INFO' line in the log file: %s", log);
  ck_assert_msg(line_has_pid(log, "NCCL INFO", co.pid),
                "INFO lines do not carry host:pid:tid of pid %d: %s", co.pid, log);
  free(log);
  child_out_free(&co);
}
END_TEST

START_TEST(test_info_to_stream) {
  const char *env[] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("init", env, &co);
  ck_assert_msg(either_has(&co, "NCCL INFO"), "no 'NCCL INFO' line; stdout: %s; stderr: %s", co.out,
                co.err);
  child_out_free(&co);
}
END_TEST

START_TEST(test_warn_bad_argument) {
  const char *env[] = {"NCCL_DEBUG=WARN", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("badarg", env, &co);
  ck_assert_msg(either_has(&co, "NCCL WARN"), "no 'NCCL WARN' line; stdout: %s; stderr: %s", co.out,
                co.err);
  ck_assert_msg(
      line_has_pid(co.out, "NCCL WARN", co.pid) || line_has_pid(co.err, "NCCL WARN", co.pid),
      "WARN line without host:pid:tid of pid %d; stderr: %s", co.pid, co.err);
  ck_assert_msg(either_has(&co, "ncclAllReduce") && either_has(&co, "recvbuff"),
                "WARN does not name the call and argument; stderr: %s", co.err);
  ck_assert_msg(!either_has(&co, "NCCL INFO"), "INFO lines at NCCL_DEBUG=WARN; stderr: %s", co.err);
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

/* ---- NCCL's line format -------------------------------------------------- */

/* NCCL 2.2x's lines (src/debug.cc), with the pid of the child:
 *   host:pid:tid [dev] NCCL INFO msg
 *   <blank>
 *   [YYYY-MM-DD HH:MM:SS] host:pid:tid [dev] file:line NCCL WARN msg
 * and the version line, an INFO line at INFO, a bare line at WARN. */
#define RE_HEAD "^[^ :]+:%d:[0-9]+ \\[[0-9]+\\] "
#define RE_INFO RE_HEAD "NCCL INFO .+$"
#define RE_WARN                                                                    \
  "^\\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\] [^ :]+:%d:[0-9]+ " \
  "\\[[0-9]+\\] [a-z_/]+\\.c:[0-9]+ NCCL WARN .+$"
#define RE_VERSION "NCCL version 2\\.[0-9]+\\.[0-9]+(\\+cuda[0-9]+\\.[0-9]+)? \\(weft [0-9.]+\\)$"

static int matches(const char *pattern_fmt, int pid, const char *line) {
  char pattern[512];
  snprintf(pattern, sizeof pattern, pattern_fmt, pid);
  regex_t re;
  ck_assert_int_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
  int ok = regexec(&re, line, 0, NULL, 0) == 0;
  regfree(&re);
  return ok;
}

/* Every line of text is NCCL's INFO or WARN (a WARN after a blank line)
 * or the bare version line; counts each kind. */
static void check_lines(char *text, int pid, int *ninfo, int *nwarn, int *nversion) {
  *ninfo = *nwarn = *nversion = 0;
  int blank_before = 0;
  char *save = NULL;
  for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    /* strtok_r ends a line with NUL and skips the next '\n's untouched: a
     * '\n' just before this line means an empty line before it. */
    blank_before = line > text && line[-1] == '\n';
    if (matches(RE_INFO, pid, line)) {
      (*ninfo)++;
      if (strstr(line, "NCCL INFO NCCL version") != NULL) {
        ck_assert_msg(matches(RE_HEAD "NCCL INFO " RE_VERSION, pid, line),
                      "version line not in NCCL's form: '%s'", line);
        (*nversion)++;
      }
    } else if (matches(RE_WARN, pid, line)) {
      ck_assert_msg(blank_before, "no blank line before the WARN '%s'", line);
      (*nwarn)++;
    } else if (matches("^" RE_VERSION, pid, line)) {
      (*nversion)++;
    } else {
      ck_abort_msg("a log line not in NCCL's format: '%s'", line);
    }
  }
}

START_TEST(test_nccl_format_info) {
  const char *env[] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("badarg", env, &co);
  int ninfo, nwarn, nversion;
  check_lines(co.out, co.pid, &ninfo, &nwarn, &nversion);
  ck_assert_msg(ninfo > 0 && nwarn == 1 && nversion == 1,
                "expected INFO lines, one WARN and one version line: %d, %d, %d", ninfo, nwarn,
                nversion);
  ck_assert_msg(co.err[0] == '\0', "log lines on stderr (NCCL logs to stdout): %.1500s", co.err);
  child_out_free(&co);
}
END_TEST

START_TEST(test_nccl_format_warn) {
  const char *env[] = {"NCCL_DEBUG=WARN", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", NULL};
  struct child_out co;
  run_child("badarg", env, &co);
  int ninfo, nwarn, nversion;
  check_lines(co.out, co.pid, &ninfo, &nwarn, &nversion);
  ck_assert_msg(ninfo == 0 && nwarn == 1 && nversion == 1,
                "expected one WARN and one bare version line: %d INFO, %d, %d", ninfo, nwarn,
                nversion);
  child_out_free(&co);
}
END_TEST

/* As NCCL: "NCCL_X set by environment to V" for the variables set, and
 * nothing about those left unset unless NCCL_DEBUG_SUBSYS names ENV. */
START_TEST(test_env_lists_only_set) {
  const char *env[] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE",
                       "WEFT_TIMEOUT=7",  "NCCL_BUFFSIZE",     NULL};
  struct child_out co;
  run_child("init", env, &co);
  ck_assert_msg(strstr(co.out, "NCCL INFO WEFT_TIMEOUT set by environment to 7\n") != NULL,
                "no 'WEFT_TIMEOUT set by environment to 7': %.1500s", co.out);
  ck_assert_msg(strstr(co.out, "NCCL_BUFFSIZE") == NULL, "an unset variable listed: %.1500s",
                co.out);
  child_out_free(&co);
}
END_TEST

/* ---- Bad values: WARN, then the default -------------------------------- */

struct bad_case {
  const char *set[3];  /* the bad settings */
  const char *warn;    /* in the WARN line */
  const char *used[2]; /* in the ENV listing: the value used */
};

static const struct bad_case bad_cases[] = {
    {{"NCCL_ALGO=bogus"},
     "NCCL_ALGO=bogus is not valid (expected names from Ring,Tree,Direct",
     {"NCCL_ALGO=(the tuning model picks) (default;"}},
    {{"NCCL_MAX_NCHANNELS=-3"},
     "NCCL_MAX_NCHANNELS=-3 is not valid (expected an integer in 1..32); using the default",
     {"NCCL_MAX_NCHANNELS=2 (default;"}},
    {{"NCCL_MIN_NCHANNELS=8", "NCCL_MAX_NCHANNELS=4"},
     "NCCL_MIN_NCHANNELS=8 is above NCCL_MAX_NCHANNELS=4",
     {"NCCL_MIN_NCHANNELS=4 (set by environment to 8;", "NCCL_MAX_NCHANNELS=4 (set"}},
    {{"WEFT_TIMEOUT=-1"},
     "WEFT_TIMEOUT=-1 is not valid (expected an integer in 1..1000000); using the default 300",
     {"WEFT_TIMEOUT=300 (default;"}},
    {{"NCCL_P2P_LEVEL=FOO"},
     "NCCL_P2P_LEVEL=FOO is not valid (expected one of LOC,NVL,PIX,PXB,PHB,SYS, or 0..5)",
     {"NCCL_P2P_LEVEL=PXB (SYS on AMD CPUs) (default;"}},
    {{"NCCL_PROTO=^LL,Fast"},
     "NCCL_PROTO=^LL,Fast is not valid (expected names from Simple,LL,LL128",
     {"NCCL_PROTO=(the tuning model picks) (default;"}},
    {{"NCCL_DEBUG_SUBSYS=ENV,BOGUS"}, "NCCL_DEBUG_SUBSYS=ENV,BOGUS is not valid", {NULL}},
};

START_TEST(test_bad_value) {
  const struct bad_case *bc = &bad_cases[_i];
  /* Defaults here: WEFT_TIMEOUT comes from meson's test environment. */
  const char *env[12] = {"NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=ENV", "NCCL_DEBUG_FILE",
                         "WEFT_TIMEOUT",    "NCCL_MIN_NCHANNELS",    "NCCL_MAX_NCHANNELS"};
  int n = 6;
  for (int i = 0; i < 3 && bc->set[i]; i++) env[n++] = bc->set[i];
  env[n] = NULL;
  struct child_out co;
  run_child("init", env, &co); /* exits 0: the default served */
  int ninfo, nwarn, nversion;
  char *copy = strdup(co.out);
  check_lines(copy, co.pid, &ninfo, &nwarn, &nversion);
  free(copy);
  ck_assert_msg(nwarn == 1, "%d WARN lines for %s, expected one: %.1500s", nwarn, bc->set[0],
                co.out);
  const char *w = strstr(co.out, " NCCL WARN ");
  ck_assert_msg(w != NULL && strncmp(w + 11, bc->warn, strlen(bc->warn)) == 0,
                "no WARN '%s': %.1500s", bc->warn, co.out);
  for (int i = 0; i < 2 && bc->used[i]; i++)
    ck_assert_msg(strstr(co.out, bc->used[i]) != NULL, "not '%s' after %s: %.1500s", bc->used[i],
                  bc->set[0], co.out);
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
  tcase_add_test(tc, test_nccl_format_info);
  tcase_add_test(tc, test_nccl_format_warn);
  tcase_add_test(tc, test_env_lists_only_set);
  tcase_add_loop_test(tc, test_bad_value, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
  suite_add_tcase(s, tc);

  return suite_run(s);
}
