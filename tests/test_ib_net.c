/* net/ib through the network table (transport/net/net.c, weft_net_ib) on
 * this host: which network weft_net_get picks (IB when it has a port,
 * NCCL_IB_DISABLE=1 and NCCL_NET=Socket give sockets, NCCL_NET=IB without
 * a port is a clear error), and the table's calls on a device that is not
 * there. One Check fork per test: the network is chosen once per process.
 * (A transfer over real ports: test_ib_devices.) */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/debug.h"
#include "transport/net/net.h"
#include "suite_run.h"

static int host_has_rdma(void) {
  DIR *d = opendir("/sys/class/infiniband");
  struct dirent *e;
  int n = 0;
  if (d == NULL) return 0;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static void env_clean(void) {
  unsetenv("NCCL_NET");
  unsetenv("NCCL_IB_DISABLE");
  unsetenv("NCCL_IB_HCA");
  setenv("NCCL_NET_PLUGIN", "none", 1);
}

/* Unset NCCL_NET: IB where it has a port, else sockets. */
START_TEST(test_default) {
  env_clean();
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  int n = -1;
  ck_assert_int_eq(weft_net_ib.devices(&n), ncclSuccess);
  ck_assert_str_eq(net->name, n > 0 ? "IB" : "Socket");
  if (!host_has_rdma()) ck_assert_int_eq(n, 0);
}
END_TEST

/* NCCL_IB_DISABLE=1: sockets, and IB has no port, on any host. */
START_TEST(test_disable) {
  env_clean();
  setenv("NCCL_IB_DISABLE", "1", 1);
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_str_eq(net->name, "Socket");
  int n = -1;
  ck_assert_int_eq(weft_net_ib.devices(&n), ncclSuccess);
  ck_assert_int_eq(n, 0);
}
END_TEST

START_TEST(test_net_socket) {
  env_clean();
  setenv("NCCL_NET", "socket", 1);
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclSuccess);
  ck_assert_ptr_eq(net, &weft_net_socket);
}
END_TEST

/* NCCL_NET=IB where IB has no port: an error that says so, every call. */
START_TEST(test_net_ib_no_port) {
  env_clean();
  setenv("NCCL_IB_DISABLE", "1", 1);
  setenv("NCCL_NET", _i == 0 ? "IB" : "ib", 1);
  const struct weft_net_ops *net = NULL;
  for (int k = 0; k < 2; k++) {
    ck_assert_int_eq(weft_net_get(&net), ncclSystemError);
    ck_assert_msg(strstr(weft_last_error(), "the IB network has no usable port") != NULL, "%s",
                  weft_last_error());
  }
  ck_assert_ptr_null(net);
}
END_TEST

/* A name that is no network lists IB among those there are. */
START_TEST(test_net_unknown) {
  env_clean();
  setenv("NCCL_NET", "Verbs", 1);
  const struct weft_net_ops *net = NULL;
  ck_assert_int_eq(weft_net_get(&net), ncclInvalidArgument);
  ck_assert_msg(strstr(weft_last_error(), "networks here: IB, Socket;") != NULL, "%s",
                weft_last_error());
}
END_TEST

/* The table's calls on a device number the host does not have. */
START_TEST(test_no_such_device) {
  env_clean();
  setenv("NCCL_IB_DISABLE", "1", 1);
  ck_assert_int_eq(weft_net_ib.init(), ncclSuccess);
  struct weft_net_props props;
  ck_assert_int_eq(weft_net_ib.get_properties(0, &props), ncclInvalidArgument);
#if WEFT_HAVE_IB_NET
  char handle[WEFT_NET_HANDLE_BYTES];
  void *comm = NULL;
  ck_assert_int_eq(weft_net_ib.listen(0, handle, &comm), ncclInvalidArgument);
  ck_assert_ptr_null(comm);
  ck_assert_msg(
      strstr(weft_last_error(), "NET/IB: open on device 0; this host has 0 IB ports") != NULL, "%s",
      weft_last_error());
  /* A handle from another network is refused before anything is opened. */
  memset(handle, 0, sizeof(handle));
  ck_assert_int_eq(weft_net_ib.connect(0, handle, &comm), ncclInvalidArgument);
#endif
}
END_TEST

int main(void) {
  Suite *s = suite_create("ib_net");
  TCase *tc = tcase_create("pick");
  tcase_add_test(tc, test_default);
  tcase_add_test(tc, test_disable);
  tcase_add_test(tc, test_net_socket);
  tcase_add_loop_test(tc, test_net_ib_no_port, 0, 2);
  tcase_add_test(tc, test_net_unknown);
  tcase_add_test(tc, test_no_such_device);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
