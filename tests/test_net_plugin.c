/* The external net plugin loader (transport/net/plugin/) through
 * weft_net_get: TestNet (tests/net_plugin/test_net.c, a plugin built
 * against the ABI header alone) loads in each ABI version, reports its
 * name and version and moves messages through weft's table; plugins that
 * lack symbols, export an unknown version, lack a member, fail init, or
 * are not there are refused with one WARN naming the file and what it
 * lacked, and the Socket network is used; NCCL_NET_PLUGIN=none and
 * NCCL_NET pick or refuse by name.
 *
 * weft reads its parameters and picks its network once per process:
 * every test sets the environment first and runs in its own Check fork.
 * WEFT_TEST_NET_PLUGIN_DIR (meson sets it, and LD_LIBRARY_PATH to it) is
 * where the plugins were built. */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/debug.h"
#include "transport/net/net.h"
#include "transport/net/plugin/plugin.h"

/* Check's messages are short: the logs go to stderr, the message says
 * what was wrong. */
#define LOGS_ASSERT(logs, cond, ...)                                               \
  do {                                                                             \
    if (!(cond)) fprintf(stderr, "--- logs ---\n%s--- end of logs ---\n", (logs)); \
    ck_assert_msg(cond, __VA_ARGS__);                                              \
  } while (0)

static char plugin_dir[1024];
static char log_path[1100];

static void set_plugin(const char *file) {
  char path[2048];
  snprintf(path, sizeof(path), "%s/%s", plugin_dir, file);
  setenv("NCCL_NET_PLUGIN", path, 1);
}

/* WARN lines go to a file of this test's own. */
static void log_to_file(void) {
  snprintf(log_path, sizeof(log_path), "/tmp/weft-net-plugin-%d.log", (int)getpid());
  unlink(log_path);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "NET,INIT", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
}

static char *log_take(void) {
  FILE *f = fopen(log_path, "r");
  ck_assert_msg(f != NULL, "no log at %s", log_path);
  static char text[65536];
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  text[n] = '\0';
  fclose(f);
  unlink(log_path);
  return text;
}

/* A comm pair in this process, then messages of 0 B, 1000 B and 1 MiB
 * through it, each checked byte for byte. */
static void exchange(const struct weft_net_ops *net) {
  char handle[WEFT_NET_HANDLE_BYTES] = {0};
  void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL;
  ck_assert_int_eq(net->listen(0, handle, &lc), ncclSuccess);
  for (int i = 0; i < 100000 && (sc == NULL || rc == NULL); i++) {
    if (sc == NULL) ck_assert_int_eq(net->connect(0, handle, &sc), ncclSuccess);
    if (rc == NULL) ck_assert_int_eq(net->accept(lc, &rc), ncclSuccess);
  }
  ck_assert_msg(sc != NULL && rc != NULL, "connect/accept never finished");
  const size_t sizes[] = {0, 1000, 1 << 20};
  char *src = malloc(sizes[2]), *dst = malloc(sizes[2]);
  ck_assert_int_eq(net->reg_mr(sc, src, sizes[2], WEFT_NET_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(net->reg_mr(rc, dst, sizes[2], WEFT_NET_PTR_HOST, &rmh), ncclSuccess);
  for (size_t k = 0; k < 3; k++) {
    for (size_t i = 0; i < sizes[k]; i++) src[i] = (char)(i * 7 + k);
    memset(dst, 0x5a, sizes[2]);
    void *sreq = NULL, *rreq = NULL;
    void *data = dst;
    size_t cap = sizes[2];
    int tag = 0;
    while (sreq == NULL)
      ck_assert_int_eq(net->isend(sc, src, sizes[k], 0, smh, &sreq), ncclSuccess);
    while (rreq == NULL)
      ck_assert_int_eq(net->irecv(rc, 1, &data, &cap, &tag, &rmh, &rreq), ncclSuccess);
    int sdone = 0, rdone = 0;
    size_t got = 0;
    for (long i = 0; i < 100000000 && !(sdone && rdone); i++) {
      if (!sdone) ck_assert_int_eq(net->test(sreq, &sdone, NULL), ncclSuccess);
      if (!rdone) ck_assert_int_eq(net->test(rreq, &rdone, &got), ncclSuccess);
    }
    ck_assert_msg(sdone && rdone, "message %zu never arrived", sizes[k]);
    ck_assert_uint_eq(got, sizes[k]);
    ck_assert_msg(memcmp(src, dst, sizes[k]) == 0, "message of %zu bytes differs", sizes[k]);
    ck_assert_msg(sizes[k] == sizes[2] || (unsigned char)dst[sizes[k]] == 0x5a,
                  "bytes past a %zu-byte message were written", sizes[k]);
  }
  ck_assert_int_eq(net->dereg_mr(sc, smh), ncclSuccess);
  ck_assert_int_eq(net->dereg_mr(rc, rmh), ncclSuccess);
  ck_assert_int_eq(net->close_send(sc), ncclSuccess);
  ck_assert_int_eq(net->close_recv(rc), ncclSuccess);
  ck_assert_int_eq(net->close_listen(lc), ncclSuccess);
  free(src);
  free(dst);
}

/* Each version loads by path, says so, and carries messages. */
START_TEST(test_version_loads) {
  int version = 8 + _i;
  char file[64];
  snprintf(file, sizeof(file), "libnccl-net-testnet-v%d.so", version);
  set_plugin(file);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_str_eq(net->name, "TestNet");
  ck_assert_int_eq(weft_net_plugin_version(), version);
  ck_assert_msg(strstr(weft_net_plugin_file(), file) != NULL, "file %s", weft_net_plugin_file());
  struct weft_net_props props;
  ck_assert_int_eq(net->get_properties(0, &props), ncclSuccess);
  ck_assert_str_eq(props.name, "lo");
  ck_assert_int_eq(props.ptr_support, WEFT_NET_PTR_HOST);
  ck_assert_int_eq(props.speed, 10000);
  exchange(net);
  char *logs = log_take();
  char want[128];
  snprintf(want, sizeof(want), "using the TestNet network (plugin ");
  LOGS_ASSERT(logs, strstr(logs, want) != NULL, "no INFO naming the network");
  snprintf(want, sizeof(want), "ncclNetPlugin_v%d)", version);
  LOGS_ASSERT(logs, strstr(logs, want) != NULL, "no INFO naming the version");
  /* The plugin's own log line came through the logger weft gave it. */
  snprintf(want, sizeof(want), "TestNet v%d: send comm closed after %d bytes in 3 messages",
           version, 1000 + (1 << 20));
  LOGS_ASSERT(logs, strstr(logs, want) != NULL, "no log line from the plugin");
}
END_TEST

/* A name is looked up as libnccl-net-<name>.so on the loader's path. */
START_TEST(test_name_lookup) {
  setenv("NCCL_NET_PLUGIN", "testnet-v10", 1);
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_str_eq(net->name, "TestNet");
  ck_assert_int_eq(weft_net_plugin_version(), 10);
  ck_assert_msg(strstr(weft_net_plugin_file(), "libnccl-net-testnet-v10.so") != NULL, "%s",
                weft_net_plugin_file());
}
END_TEST

/* A comma list: each entry in turn, the first that loads is used; the
 * ones before it are refused with their WARN. */
START_TEST(test_list) {
  char list[2200];
  snprintf(list, sizeof(list), "%s/libnccl-net-broken-v7.so,testnet-v9,testnet-v11", plugin_dir);
  setenv("NCCL_NET_PLUGIN", list, 1);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_str_eq(net->name, "TestNet");
  ck_assert_int_eq(weft_net_plugin_version(), 9);
  char *logs = log_take();
  LOGS_ASSERT(logs, strstr(logs, "libnccl-net-broken-v7.so refused") != NULL,
              "no WARN for the first entry");
  LOGS_ASSERT(logs, strstr(logs, "testnet-v11") == NULL,
              "the entry after the loaded one was tried");
}
END_TEST

/* Refused plugins: the file and what it lacked in one WARN; Socket used. */
static const struct {
  const char *file; /* under plugin_dir; NULL: TestNet v8 with a failing init */
  const char *why;
} refused[] = {
    {"libnccl-net-broken-nosym.so", "exports none of ncclNetPlugin_v11, _v10, _v9, _v8"},
    {"libnccl-net-broken-v7.so", "(only ncclNetPlugin_v7: versions weft does not load)"},
    {"libnccl-net-broken-partial.so", "its table has no getProperties"},
    {"libnccl-net-absent.so", "cannot load it"},
    {NULL, "its init failed"},
};

START_TEST(test_refused) {
  const char *file = refused[_i].file ? refused[_i].file : "libnccl-net-testnet-v8.so";
  set_plugin(file);
  if (refused[_i].file == NULL) setenv("TESTNET_FAIL_INIT", "1", 1);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_ptr_eq(net, &weft_net_socket);
  ck_assert_int_eq(weft_net_plugin_version(), 0);
  char *logs = log_take();
  const char *warn = strstr(logs, "NCCL WARN net plugin");
  LOGS_ASSERT(logs, warn != NULL, "no WARN for %s", file);
  const char *end = strchr(warn, '\n');
  size_t len = end ? (size_t)(end - warn) : strlen(warn);
  char line[2048];
  snprintf(line, sizeof(line), "%.*s", (int)len, warn);
  ck_assert_msg(strstr(line, file) != NULL, "the WARN does not name %s: %s", file, line);
  ck_assert_msg(strstr(line, refused[_i].why) != NULL, "the WARN does not say '%s': %s",
                refused[_i].why, line);
  ck_assert_msg(strstr(line, "using the built-in networks") != NULL, "%s", line);
  LOGS_ASSERT(logs, strstr(warn + 1, "NCCL WARN") == NULL, "more than one WARN");
  LOGS_ASSERT(logs, strstr(logs, "using the Socket network") != NULL, "no fallback");
  exchange(net);
}
END_TEST

START_TEST(test_none) {
  setenv("NCCL_NET_PLUGIN", _i == 0 ? "none" : "NONE", 1);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_ptr_eq(net, &weft_net_socket);
  char *logs = log_take();
  LOGS_ASSERT(logs, strstr(logs, "NCCL WARN") == NULL, "a WARN with none");
}
END_TEST

/* --probe: what weft_net_get picks in a fresh process, on the last line:
 * the network, the plugin's version and file, and whether a
 * libnccl-net.so is on this process's loader path at all (1/0). */
static int probe(void) {
  void *any = dlopen("libnccl-net.so", RTLD_LAZY | RTLD_LOCAL);
  if (any != NULL) dlclose(any);
  const struct weft_net_ops *net = NULL;
  if (weft_net_get(&net) != ncclSuccess) return 1;
  const char *file = weft_net_plugin_file();
  printf("%s %d %s %d\n", net->name, weft_net_plugin_version(), file ? file : "-", any != NULL);
  return 0;
}

/* Runs the probe with NCCL_NET_PLUGIN unset, LD_LIBRARY_PATH=lib_dir
 * (read at process start, so a process exec'd for it) and INFO logging to
 * stdout; out gets everything it printed, *last its last line. */
static void run_probe(const char *lib_dir, char *out, size_t size, const char **last) {
  char lib_path[1100];
  snprintf(lib_path, sizeof(lib_path), "LD_LIBRARY_PATH=%s", lib_dir);
  char *const argv[] = {(char *)"test_net_plugin", (char *)"--probe", NULL};
  char *const envp[] = {lib_path, (char *)"WEFT_DEVICE=cpu", (char *)"NCCL_DEBUG=INFO",
                        (char *)"NCCL_DEBUG_SUBSYS=NET,INIT", NULL};
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 1);
    execve("/proc/self/exe", argv, envp);
    _exit(127);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t k;
  while (n < size - 1 && (k = read(fds[0], out + n, size - 1 - n)) > 0) n += (size_t)k;
  out[n] = '\0';
  close(fds[0]);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the probe failed: %s", out);
  while (n > 0 && out[n - 1] == '\n') out[--n] = '\0';
  const char *nl = strrchr(out, '\n');
  *last = nl != NULL ? nl + 1 : out;
}

/* Unset: libnccl-net.so. Where there is none on the loader's path (here:
 * LD_LIBRARY_PATH holds none), its absence is not worth a WARN. */
START_TEST(test_unset_quiet) {
  char out[16384];
  const char *last;
  run_probe(plugin_dir, out, sizeof(out), &last);
  size_t len = strlen(last);
  if (len > 0 && last[len - 1] == '1') {
    /* This machine has one elsewhere on the path: weft must have tried it. */
    ck_assert_msg(strstr(out, "libnccl-net.so") != NULL,
                  "libnccl-net.so is on the path and weft did not try it: %s", out);
    return;
  }
  ck_assert_msg(strncmp(last, "Socket 0 ", 9) == 0, "NCCL_NET_PLUGIN unset picked: %s", last);
  ck_assert_msg(strstr(out, "NCCL WARN") == NULL, "a WARN without a plugin: %s", out);
  ck_assert_msg(strstr(out, "no libnccl-net.so") != NULL,
                "no INFO saying libnccl-net.so is absent: %s", out);
}
END_TEST

/* Unset, with a libnccl-net.so on LD_LIBRARY_PATH: that plugin is loaded. */
START_TEST(test_unset_default_loads) {
  char dir[1100], out[16384];
  const char *last;
  snprintf(dir, sizeof(dir), "%s/default", plugin_dir);
  run_probe(dir, out, sizeof(out), &last);
  ck_assert_msg(strncmp(last, "TestNet 9 ", 10) == 0 && strstr(last, "/default/libnccl-net.so"),
                "NCCL_NET_PLUGIN unset picked: %s", last);
}
END_TEST

/* NCCL_NET picks by name, any case, between Socket and the plugin. */
START_TEST(test_net_picks) {
  static const char *names[] = {"socket", "SOCKET", "testnet", "TestNet"};
  set_plugin("libnccl-net-testnet-v11.so");
  setenv("NCCL_NET", names[_i], 1);
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_str_eq(net->name, _i < 2 ? "Socket" : "TestNet");
  ck_assert_int_eq(weft_net_plugin_version(), 11);
}
END_TEST

START_TEST(test_net_refuses) {
  if (_i == 0)
    set_plugin("libnccl-net-testnet-v9.so");
  else
    setenv("NCCL_NET_PLUGIN", "none", 1);
  /* (NCCL_NET=IB is net/ib's: test_ib_units checks it.) */
  setenv("NCCL_NET", _i == 0 ? "Verbs" : "TestNet", 1);
  const struct weft_net_ops *net = NULL;
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(weft_net_get(&net), ncclInvalidArgument);
    const char *msg = weft_last_error();
    ck_assert_msg(strstr(msg, _i == 0 ? "NCCL_NET=Verbs matches no network"
                                      : "NCCL_NET=TestNet matches no network") != NULL,
                  "%s", msg);
    ck_assert_msg(strstr(msg, _i == 0 ? "networks here: IB, Socket, TestNet;"
                                      : "networks here: IB, Socket;") != NULL,
                  "%s", msg);
  }
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "--probe") == 0) return probe();
  const char *dir = getenv("WEFT_TEST_NET_PLUGIN_DIR");
  if (dir == NULL) {
    fprintf(stderr, "WEFT_TEST_NET_PLUGIN_DIR is not set (meson test sets it)\n");
    return 1;
  }
  snprintf(plugin_dir, sizeof(plugin_dir), "%s", dir);
  unsetenv("NCCL_NET");
  unsetenv("NCCL_NET_PLUGIN");
  Suite *s = suite_create("net_plugin");
  TCase *tc = tcase_create("load");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_version_loads, 0, 4);
  tcase_add_test(tc, test_name_lookup);
  tcase_add_test(tc, test_list);
  tcase_add_loop_test(tc, test_refused, 0, (int)(sizeof(refused) / sizeof(refused[0])));
  tcase_add_loop_test(tc, test_none, 0, 2);
  tcase_add_test(tc, test_unset_quiet);
  tcase_add_test(tc, test_unset_default_loads);
  suite_add_tcase(s, tc);
  tc = tcase_create("NCCL_NET");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_net_picks, 0, 4);
  tcase_add_loop_test(tc, test_net_refuses, 0, 2);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
