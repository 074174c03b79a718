/* Collectives through an external net plugin, for each ABI version weft
 * loads: four host ranks on two simulated hosts (NCCL_HOSTID box-0 for
 * ranks 0 and 1, box-1 for 2 and 3), so the links between the hosts go
 * over the network, with NCCL_NET_PLUGIN naming TestNet vN
 * (tests/net_plugin/test_net.c). Each rank runs test_netns's checks
 * (netns_rank.c: every collective and grouped send/recv, every element,
 * and at least the large all-reduce's bytes sent through lo), and the
 * ranks' logs must show that TestNet vN was the network and carried the
 * data (its own log line at close, through the logger weft gave it).
 *
 * Ranks are forked before anything starts a thread; they meet through
 * NCCL_COMM_ID on loopback. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "free_port.h"
#include "harness.h"
#include "netns_rank.h"
#include "suite_run.h"

/* Check's messages are short: the logs go to stderr, the message says
 * what was wrong. */
#define LOGS_ASSERT(logs, cond, ...)                                               \
  do {                                                                             \
    if (!(cond)) fprintf(stderr, "--- logs ---\n%s--- end of logs ---\n", (logs)); \
    ck_assert_msg(cond, __VA_ARGS__);                                              \
  } while (0)

static int plugin_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)nranks, (void)id, (void)arg;
  char host[32];
  snprintf(host, sizeof(host), "box-%d", rank / 2);
  setenv("NCCL_HOSTID", host, 1);
  int rc = netns_rank_main(rank, "colls");
  HCHECK(rc == NETNS_RANK_OK, "the collectives through the plugin failed (rank %d: %d, said above)",
         rank, rc);
  return 0;
}

/* Sum of the bytes TestNet vN's send comms report at close, and how many
 * did. */
static unsigned long long plugin_bytes(const char *logs, int version, int *comms_out) {
  char want[64];
  snprintf(want, sizeof(want), "TestNet v%d: send comm closed after ", version);
  unsigned long long sum = 0;
  *comms_out = 0;
  for (const char *p = strstr(logs, want); p != NULL; p = strstr(p + 1, want)) {
    sum += strtoull(p + strlen(want), NULL, 10);
    *comms_out += 1;
  }
  return sum;
}

START_TEST(test_collectives_through_plugin) {
  int version = 8 + _i;
  char path[2048], text[64], dir[256];
  snprintf(path, sizeof(path), "%s/libnccl-net-testnet-v%d.so", getenv("WEFT_TEST_NET_PLUGIN_DIR"),
           version);
  setenv("NCCL_NET_PLUGIN", path, 1);
  int port = test_free_port();
  ck_assert_int_gt(port, 0);
  snprintf(text, sizeof(text), "127.0.0.1:%d", port);
  setenv("NCCL_COMM_ID", text, 1);
  snprintf(text, sizeof(text), "plugin-test-%d-%d", (int)getpid(), version);
  setenv("WEFT_COMM_SECRET", text, 1);
  setenv("WEFT_NETNS_IFACE", "lo", 1);
  harness_log_to_dir(dir, sizeof(dir), "INIT,NET");
  struct harness_opts opts = {
      .mode = HARNESS_PROCS, .nranks = NETNS_NRANKS, .timeout_s = 120, .no_id = 1};
  char why[4096];
  int rc = harness_run(&opts, plugin_rank, NULL, why, sizeof(why));
  char *logs = harness_logs_take(dir);
  rmdir(dir);
  ck_assert_msg(rc == 0, "%s", why);
  ck_assert_msg(logs != NULL, "no logs");
  char using_text[2200];
  snprintf(using_text, sizeof(using_text), "(plugin %s, ncclNetPlugin_v%d)", path, version);
  int using = 0;
  for (const char *p = strstr(logs, using_text); p != NULL; p = strstr(p + 1, using_text)) using ++;
  LOGS_ASSERT(logs, using == NETNS_NRANKS, "%d of %d ranks say they use TestNet v%d", using,
              NETNS_NRANKS, version);
  LOGS_ASSERT(logs, strstr(logs, "via net_socket") != NULL, "no network links");
  int comms;
  unsigned long long bytes = plugin_bytes(logs, version, &comms);
  /* The large all-reduce alone moves its 4 MiB buffer between the hosts
   * (256 KiB with WEFT_TEST_LARGE=0). */
  LOGS_ASSERT(logs, comms > 0 && bytes >= (1u << 18), "TestNet v%d carried %llu bytes in %d comms",
              version, bytes, comms);
  free(logs);
}
END_TEST

/* NCCL_NET naming no network: the ranks' first call that needs the
 * network fails with the name in the error, never hangs. */
static int refused_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  char host[32];
  snprintf(host, sizeof(host), "box-%d", rank);
  setenv("NCCL_HOSTID", host, 1);
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclCommInitRank(&comm, nranks, id, rank);
  if (res == ncclSuccess) {
    float x = 1;
    res = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, NULL);
  }
  HCHECK(res != ncclSuccess, "NCCL_NET=nonesuch: init and an all-reduce succeeded");
  const char *msg = ncclGetLastError(comm);
  HCHECK(strstr(msg, "NCCL_NET=nonesuch matches no network") != NULL, "error %d: %s", (int)res,
         msg);
  if (comm != NULL) ncclCommAbort(comm);
  return 0;
}

START_TEST(test_net_name_refused) {
  setenv("NCCL_NET", "nonesuch", 1);
  char why[4096];
  int rc = harness_procs(2, 60, refused_rank, NULL, why, sizeof(why));
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  if (getenv("WEFT_TEST_NET_PLUGIN_DIR") == NULL) {
    fprintf(stderr, "WEFT_TEST_NET_PLUGIN_DIR is not set (meson test sets it)\n");
    return 1;
  }
  unsetenv("NCCL_NET");
  unsetenv("NCCL_HOSTID");
  unsetenv("NCCL_SHM_DISABLE");
  unsetenv("NCCL_SOCKET_IFNAME");
  Suite *s = suite_create("net_plugin_colls");
  TCase *tc = tcase_create("collectives");
  tcase_set_timeout(tc, 150);
  tcase_add_loop_test(tc, test_collectives_through_plugin, 0, 4);
  tcase_add_test(tc, test_net_name_refused);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
