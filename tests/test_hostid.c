/* NCCL_HOSTID and NCCL_SOCKET_IFNAME through nccl.h on forked host ranks:
 * ranks of this machine with different NCCL_HOSTID are different hosts and
 * connect over sockets, with the same one they use shared memory (read from
 * the NCCL_DEBUG=INFO logs); NCCL_SOCKET_IFNAME=lo and =lo work, and a name
 * that matches nothing fails ncclGetUniqueId and ncclCommInitRank with an
 * error naming the variable.
 *
 * Each test runs in its own Check fork, so the environment a test sets is
 * read by that test's first NCCL call; a rank sets its own NCCL_HOSTID
 * before its first call. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "free_port.h"
#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define COUNT 4096

/* arg: NULL for one NCCL_HOSTID for all, else different ones per rank. */
static int hostid_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  char text[32];
  snprintf(text, sizeof(text), "box-%d", arg != NULL ? rank : 0);
  setenv("NCCL_HOSTID", text, 1);
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

static char *run_logged(int nranks, harness_rank_fn fn, void *arg) {
  char why[4096], *logs;
  int rc = harness_procs_logged(nranks, 60, "INIT,SHM,NET", fn, arg, &logs, why, sizeof(why));
  ck_assert_msg(rc == 0, "%s", why);
  return logs;
}

START_TEST(test_different_hostid_uses_sockets) {
  static int differ = 1;
  char *logs = run_logged(2, hostid_rank, &differ);
  ck_assert_msg(harness_links_via(logs, "net_socket"),
                "no socket links between ranks of different NCCL_HOSTID:\n%s", logs);
  ck_assert_msg(strstr(logs, "via shm") == NULL, "shm between different NCCL_HOSTID:\n%s", logs);
  free(logs);
}
END_TEST

START_TEST(test_same_hostid_uses_shm) {
  char *logs = run_logged(2, hostid_rank, NULL);
  ck_assert_msg(harness_links_via(logs, "shm"),
                "no shm links between ranks of one NCCL_HOSTID:\n%s", logs);
  ck_assert_msg(strstr(logs, "via net_socket") == NULL, "sockets within one NCCL_HOSTID:\n%s",
                logs);
  free(logs);
}
END_TEST

/* Three ranks, two "hosts": 0 and 2 share one, 1 is alone. */
static int two_hosts_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  setenv("NCCL_HOSTID", rank == 1 ? "box-b" : "box-a", 1);
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

/* Every "rank A -> rank B channel C via X" line: links between ranks of
 * one host (0 and 2) must be shm, links to rank 1 net_socket; counts each. */
static void check_mixed_links(const char *logs, int *shm_out, int *net_out) {
  *shm_out = *net_out = 0;
  for (const char *p = strstr(logs, "rank "); p != NULL; p = strstr(p + 1, "rank ")) {
    int a, b, ch;
    char via[32];
    if (sscanf(p, "rank %d -> rank %d channel %d via %31s", &a, &b, &ch, via) != 4) continue;
    int same = a != 1 && b != 1;
    ck_assert_msg(strcmp(via, same ? "shm" : "net_socket") == 0,
                  "rank %d -> rank %d via %s (NCCL_HOSTID %s):\n%s", a, b, via,
                  same ? "alike" : "different", logs);
    *(same ? shm_out : net_out) += 1;
  }
}

START_TEST(test_mixed_hosts) {
  char *logs = run_logged(3, two_hosts_rank, NULL);
  int shm, net;
  check_mixed_links(logs, &shm, &net);
  ck_assert_msg(net > 0, "no socket links to the rank of the other NCCL_HOSTID:\n%s", logs);
  ck_assert_msg(shm > 0, "no shm link between the ranks of one NCCL_HOSTID:\n%s", logs);
  free(logs);
}
END_TEST

static int plain_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (harness_allreduce_ok(comm, nranks)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_ifname_lo) {
  setenv("NCCL_SOCKET_IFNAME", _i == 0 ? "lo" : "=lo", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  char *logs = run_logged(2, plain_rank, NULL);
  ck_assert_msg(strstr(logs, "bootstrap interface lo,") != NULL,
                "the bootstrap did not take lo:\n%s", logs);
  ck_assert_msg(strstr(logs, "via net_socket") != NULL, "no socket links:\n%s", logs);
  free(logs);
}
END_TEST

START_TEST(test_ifname_nonexistent_id) {
  setenv("NCCL_SOCKET_IFNAME", "nonexistent", 1);
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  ck_assert_int_eq(res, ncclSystemError);
  const char *msg = ncclGetLastError(NULL);
  ck_assert_msg(strstr(msg, "NCCL_SOCKET_IFNAME=nonexistent") != NULL, "%s", msg);
}
END_TEST

/* With NCCL_COMM_ID no interface is needed for the id; the rank's own
 * listener then needs one, and communicator creation fails, not hangs. */
START_TEST(test_ifname_nonexistent_init) {
  int port = test_free_port();
  ck_assert_int_gt(port, 0);
  char text[64];
  snprintf(text, sizeof(text), "127.0.0.1:%d", port);
  setenv("NCCL_COMM_ID", text, 1);
  setenv("NCCL_SOCKET_IFNAME", "nonexistent", 1);
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res == ncclSuccess) res = ncclCommInitRank(&comm, 1, id, 0);
  ck_assert_int_ne(res, ncclSuccess);
  const char *msg = ncclGetLastError(NULL);
  ck_assert_msg(strstr(msg, "NCCL_SOCKET_IFNAME=nonexistent") != NULL, "%s", msg);
}
END_TEST

int main(void) {
  harness_env_defaults();
  unsetenv("NCCL_SOCKET_IFNAME");
  unsetenv("NCCL_SOCKET_FAMILY");
  unsetenv("NCCL_HOSTID");
  unsetenv("NCCL_SHM_DISABLE");
  unsetenv("NCCL_COMM_ID");
  Suite *s = suite_create("hostid");
  TCase *tc = tcase_create("hostid");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_different_hostid_uses_sockets);
  tcase_add_test(tc, test_same_hostid_uses_shm);
  tcase_add_test(tc, test_mixed_hosts);
  suite_add_tcase(s, tc);
  tc = tcase_create("ifname");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_ifname_lo, 0, 2);
  tcase_add_test(tc, test_ifname_nonexistent_id);
  tcase_add_test(tc, test_ifname_nonexistent_init);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
