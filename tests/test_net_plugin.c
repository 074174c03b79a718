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
#include "suite_run.h"

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

/* A connected comm pair of net in this process. */
static void pair_open(const struct weft_net_ops *net, void **lc, void **sc, void **rc) {
  char handle[WEFT_NET_HANDLE_BYTES] = {0};
  *lc = *sc = *rc = NULL;
  ck_assert_int_eq(net->listen(0, handle, lc), ncclSuccess);
  for (int i = 0; i < 100000 && (*sc == NULL || *rc == NULL); i++) {
    if (*sc == NULL) ck_assert_int_eq(net->connect(0, handle, sc), ncclSuccess);
    if (*rc == NULL) ck_assert_int_eq(net->accept(*lc, rc), ncclSuccess);
  }
  ck_assert_msg(*sc != NULL && *rc != NULL, "connect/accept never finished");
}

/* Messages of every kind TestNet has: empty, inline on the control
 * socket, just past it (cut in two), and larger than every socket's
 * chunk, with odd sizes so chunks end mid-word. */
static const size_t many_sizes[] = {
    0, 1, 1000, 64 * 1024, 64 * 1024 + 1, 300000, (1 << 20) + 13, (4 << 20) + 1};
#define MANY_MSGS (sizeof(many_sizes) / sizeof(many_sizes[0]))
#define MANY_COMMS 3

struct many_comm {
  void *lc, *sc, *rc, *smh, *rmh;
  char *src, *dst;
  size_t off[MANY_MSGS];
  void *sreq[MANY_MSGS], *rreq[MANY_MSGS];
  int sdone[MANY_MSGS], rdone[MANY_MSGS];
  size_t got[MANY_MSGS];
};

/* Posts every message of every comm (each receive 100 bytes larger than
 * its message), all outstanding at once. */
static void many_post(const struct weft_net_ops *net, struct many_comm *m, int k, size_t total) {
  pair_open(net, &m->lc, &m->sc, &m->rc);
  m->src = malloc(total);
  m->dst = malloc(total);
  ck_assert(m->src != NULL && m->dst != NULL);
  for (size_t i = 0; i < total; i++) m->src[i] = (char)(i * 13 + (size_t)k * 101 + i / 4093);
  memset(m->dst, 0x5a, total);
  ck_assert_int_eq(net->reg_mr(m->sc, m->src, total, WEFT_NET_PTR_HOST, &m->smh), ncclSuccess);
  ck_assert_int_eq(net->reg_mr(m->rc, m->dst, total, WEFT_NET_PTR_HOST, &m->rmh), ncclSuccess);
  for (size_t j = 0, off = 0; j < MANY_MSGS; off += many_sizes[j++] + 100) {
    m->off[j] = off;
    void *data = m->dst + off;
    size_t cap = many_sizes[j] + 100;
    int tag = 0;
    for (int t = 0; t < 1000 && m->rreq[j] == NULL; t++)
      ck_assert_int_eq(net->irecv(m->rc, 1, &data, &cap, &tag, &m->rmh, &m->rreq[j]), ncclSuccess);
    for (int t = 0; t < 1000 && m->sreq[j] == NULL; t++)
      ck_assert_int_eq(net->isend(m->sc, m->src + off, many_sizes[j], 0, m->smh, &m->sreq[j]),
                       ncclSuccess);
    ck_assert_msg(m->sreq[j] != NULL && m->rreq[j] != NULL, "message %zu was never posted", j);
  }
}

/* Many requests outstanding on several comms at once, tested newest
 * first, comm after comm: each completes whatever order it is asked in,
 * with its size, its bytes and nothing past them. */
static void exchange_many(const struct weft_net_ops *net) {
  static struct many_comm m[MANY_COMMS];
  memset(m, 0, sizeof(m));
  size_t total = 0;
  for (size_t j = 0; j < MANY_MSGS; j++) total += many_sizes[j] + 100;
  for (int k = 0; k < MANY_COMMS; k++) many_post(net, &m[k], k, total);
  int left = 2 * MANY_COMMS * (int)MANY_MSGS;
  for (long i = 0; i < 10000000 && left > 0; i++)
    for (int k = MANY_COMMS - 1; k >= 0; k--)
      for (int j = (int)MANY_MSGS - 1; j >= 0; j--) {
        if (!m[k].sdone[j]) {
          ck_assert_int_eq(net->test(m[k].sreq[j], &m[k].sdone[j], NULL), ncclSuccess);
          left -= m[k].sdone[j];
        }
        if (!m[k].rdone[j]) {
          ck_assert_int_eq(net->test(m[k].rreq[j], &m[k].rdone[j], &m[k].got[j]), ncclSuccess);
          left -= m[k].rdone[j];
        }
      }
  ck_assert_msg(left == 0, "%d requests never completed", left);
  for (int k = 0; k < MANY_COMMS; k++) {
    for (size_t j = 0; j < MANY_MSGS; j++) {
      size_t off = m[k].off[j];
      ck_assert_uint_eq(m[k].got[j], many_sizes[j]);
      ck_assert_msg(memcmp(m[k].src + off, m[k].dst + off, many_sizes[j]) == 0,
                    "comm %d: message %zu (%zu bytes) differs", k, j, many_sizes[j]);
      ck_assert_msg((unsigned char)m[k].dst[off + many_sizes[j]] == 0x5a,
                    "comm %d: bytes past message %zu were written", k, j);
    }
    ck_assert_int_eq(net->dereg_mr(m[k].sc, m[k].smh), ncclSuccess);
    ck_assert_int_eq(net->dereg_mr(m[k].rc, m[k].rmh), ncclSuccess);
    ck_assert_int_eq(net->close_send(m[k].sc), ncclSuccess);
    ck_assert_int_eq(net->close_recv(m[k].rc), ncclSuccess);
    ck_assert_int_eq(net->close_listen(m[k].lc), ncclSuccess);
    free(m[k].src);
    free(m[k].dst);
  }
}

/* TestNet's helper threads (tn.h), each version, with 3 data sockets and
 * with none: every message kind, all outstanding on three comms, tested
 * in reverse order; the send comms' logs show how many data sockets
 * carried what (with 3, each of them carried bytes). */
START_TEST(test_many_outstanding) {
  int version = 8 + _i / 2, nsocks = _i % 2 ? 0 : 3;
  char file[64], value[8];
  snprintf(file, sizeof(file), "libnccl-net-testnet-v%d.so", version);
  snprintf(value, sizeof(value), "%d", nsocks);
  set_plugin(file);
  setenv("TESTNET_NSOCKS", value, 1);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_str_eq(net->name, "TestNet");
  exchange_many(net);
  char *logs = log_take();
  size_t total = 0;
  for (size_t j = 0; j < MANY_MSGS; j++) total += many_sizes[j];
  char want[160];
  snprintf(want, sizeof(want),
           "TestNet v%d: send comm closed after %zu bytes in %zu messages (data sockets: %d, ",
           version, total, MANY_MSGS, nsocks);
  int closed = 0;
  for (const char *at = strstr(logs, want); at != NULL; at = strstr(at + 1, want)) {
    closed++;
    unsigned long long b[3] = {0, 0, 0};
    const char *each = strstr(at, "bytes on each: ");
    LOGS_ASSERT(logs, each != NULL, "no per-socket bytes");
    if (nsocks == 0) continue;
    LOGS_ASSERT(logs, sscanf(each, "bytes on each: %llu, %llu, %llu", &b[0], &b[1], &b[2]) == 3,
                "not 3 sockets' bytes");
    LOGS_ASSERT(logs, b[0] > 0 && b[1] > 0 && b[2] > 0, "a data socket carried nothing");
  }
  LOGS_ASSERT(logs, closed == MANY_COMMS, "%d send comms logged '%s', expected %d", closed, want,
              MANY_COMMS);
}
END_TEST

/* One large message (8 MiB and 3 bytes) over 4 data sockets arrives
 * intact, each socket carrying a quarter (the chunks' sizes add up). */
START_TEST(test_split_across_sockets) {
  set_plugin("libnccl-net-testnet-v11.so");
  setenv("TESTNET_NSOCKS", "4", 1);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  void *lc, *sc, *rc, *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  pair_open(net, &lc, &sc, &rc);
  const size_t size = (8u << 20) + 3;
  char *src = malloc(size), *dst = malloc(size);
  ck_assert(src != NULL && dst != NULL);
  for (size_t i = 0; i < size; i++) src[i] = (char)(i ^ (i >> 11) ^ (i >> 19));
  memset(dst, 0, size);
  ck_assert_int_eq(net->reg_mr(sc, src, size, WEFT_NET_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(net->reg_mr(rc, dst, size, WEFT_NET_PTR_HOST, &rmh), ncclSuccess);
  void *data = dst;
  size_t cap = size, got = 0;
  int tag = 0, sdone = 0, rdone = 0;
  ck_assert_int_eq(net->isend(sc, src, size, 0, smh, &sreq), ncclSuccess);
  ck_assert_int_eq(net->irecv(rc, 1, &data, &cap, &tag, &rmh, &rreq), ncclSuccess);
  ck_assert(sreq != NULL && rreq != NULL);
  for (long i = 0; i < 100000000 && !(sdone && rdone); i++) {
    if (!sdone) ck_assert_int_eq(net->test(sreq, &sdone, NULL), ncclSuccess);
    if (!rdone) ck_assert_int_eq(net->test(rreq, &rdone, &got), ncclSuccess);
  }
  ck_assert_msg(sdone && rdone, "the message never arrived");
  ck_assert_uint_eq(got, size);
  ck_assert_msg(memcmp(src, dst, size) == 0, "the message differs");
  ck_assert_int_eq(net->dereg_mr(sc, smh), ncclSuccess);
  ck_assert_int_eq(net->dereg_mr(rc, rmh), ncclSuccess);
  ck_assert_int_eq(net->close_send(sc), ncclSuccess);
  ck_assert_int_eq(net->close_recv(rc), ncclSuccess);
  ck_assert_int_eq(net->close_listen(lc), ncclSuccess);
  free(src);
  free(dst);
  char *logs = log_take();
  const char *each = strstr(logs, "(data sockets: 4, bytes on each: ");
  LOGS_ASSERT(logs, each != NULL, "no line of a send comm with 4 data sockets");
  unsigned long long b[4];
  LOGS_ASSERT(logs,
              sscanf(each, "(data sockets: 4, bytes on each: %llu, %llu, %llu, %llu)", &b[0], &b[1],
                     &b[2], &b[3]) == 4,
              "not 4 sockets' bytes");
  const unsigned long long quarter = (size + 3) / 4;
  LOGS_ASSERT(logs, b[0] == quarter && b[1] == quarter && b[2] == quarter,
              "the chunks are not quarters of %zu bytes", size);
  LOGS_ASSERT(logs, b[0] + b[1] + b[2] + b[3] == size, "the chunks do not add up to %zu", size);
}
END_TEST

/* A message larger than the receive posted for it (inline, and cut into
 * chunks) fails the receive with a WARN giving both sizes, and the comm
 * stays failed; nothing is written past the receive. */
START_TEST(test_oversize) {
  set_plugin("libnccl-net-testnet-v9.so");
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  void *lc, *sc, *rc, *smh = NULL, *rmh = NULL, *sreq = NULL, *rreq = NULL;
  pair_open(net, &lc, &sc, &rc);
  const size_t size = _i ? 1 << 20 : 1000, cap = size / 2;
  char *src = calloc(1, size), *dst = malloc(size);
  ck_assert(src != NULL && dst != NULL);
  memset(dst, 0x5a, size);
  ck_assert_int_eq(net->reg_mr(sc, src, size, WEFT_NET_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(net->reg_mr(rc, dst, size, WEFT_NET_PTR_HOST, &rmh), ncclSuccess);
  void *data = dst;
  size_t posted = cap;
  int tag = 0, rdone = 0;
  ck_assert_int_eq(net->isend(sc, src, size, 0, smh, &sreq), ncclSuccess);
  ck_assert(sreq != NULL);
  /* The size may already be there when irecv moves the control stream:
   * then irecv fails, else a later test does. */
  ncclResult_t res = net->irecv(rc, 1, &data, &posted, &tag, &rmh, &rreq);
  if (res == ncclSuccess) ck_assert(rreq != NULL);
  for (long i = 0; i < 10000000 && res == ncclSuccess && !rdone; i++)
    res = net->test(rreq, &rdone, NULL);
  ck_assert_msg(res != ncclSuccess && !rdone, "a %zu-byte message into %zu bytes: got %d", size,
                cap, (int)res);
  ck_assert_int_ne(net->irecv(rc, 1, &data, &posted, &tag, &rmh, &rreq), ncclSuccess);
  for (size_t i = cap; i < size; i++)
    ck_assert_msg((unsigned char)dst[i] == 0x5a, "byte %zu past the receive was written", i);
  (void)net->dereg_mr(sc, smh);
  (void)net->dereg_mr(rc, rmh);
  (void)net->close_send(sc);
  (void)net->close_recv(rc);
  (void)net->close_listen(lc);
  free(src);
  free(dst);
  char *logs = log_take();
  char want[96];
  snprintf(want, sizeof(want), "a %zu-byte message for a %zu-byte receive", size, cap);
  LOGS_ASSERT(logs, strstr(logs, want) != NULL, "no WARN saying '%s'", want);
}
END_TEST

/* A TESTNET_NSOCKS out of range fails init, with a WARN saying what is
 * allowed: the plugin is refused. */
START_TEST(test_bad_nsocks) {
  set_plugin("libnccl-net-testnet-v10.so");
  setenv("TESTNET_NSOCKS", _i ? "x" : "9", 1);
  log_to_file();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_ptr_eq(net, &weft_net_socket);
  char *logs = log_take();
  char want[96];
  snprintf(want, sizeof(want), "TESTNET_NSOCKS=%s: expected 0..8 data sockets per comm",
           _i ? "x" : "9");
  LOGS_ASSERT(logs, strstr(logs, want) != NULL, "no WARN saying '%s'", want);
  LOGS_ASSERT(logs, strstr(logs, "its init failed") != NULL, "the plugin was not refused");
}
END_TEST

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
  unsetenv("TESTNET_NSOCKS");
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
  tc = tcase_create("TestNet threads");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_many_outstanding, 0, 8);
  tcase_add_test(tc, test_split_across_sockets);
  tcase_add_loop_test(tc, test_oversize, 0, 2);
  tcase_add_loop_test(tc, test_bad_nsocks, 0, 2);
  suite_add_tcase(s, tc);
  tc = tcase_create("NCCL_NET");
  tcase_set_timeout(tc, 60);
  tcase_add_loop_test(tc, test_net_picks, 0, 4);
  tcase_add_loop_test(tc, test_net_refuses, 0, 2);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
