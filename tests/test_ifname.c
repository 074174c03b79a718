/* NCCL_SOCKET_IFNAME as NCCL parses it, and the default interface order,
 * on synthetic interface lists (transport/ifname.c is pure); then the real
 * choice (weft_socket_local_addr) with NCCL_SOCKET_IFNAME and
 * NCCL_SOCKET_FAMILY set, one Check fork per test (parameters are read
 * once per process). */
#include <arpa/inet.h>
#include <check.h>
#include <ifaddrs.h>
#include <stdlib.h>
#include <string.h>

#include "base/debug.h"
#include "transport/ifname.h"
#include "transport/socket.h"
#include "suite_run.h"

/* ---- The matcher ------------------------------------------------------------ */

START_TEST(test_prefix_list) {
  ck_assert(weft_ifname_match("eth0", "eth"));
  ck_assert(weft_ifname_match("eth12", "eth1"));
  ck_assert(weft_ifname_match("ib0", "eth,ib"));
  ck_assert(!weft_ifname_match("lo", "eth,ib"));
  ck_assert(!weft_ifname_match("et", "eth"));
  /* Empty items are skipped, not "match everything". */
  ck_assert(!weft_ifname_match("lo", "eth,,ib,"));
  ck_assert(weft_ifname_match("ib1", ",,ib"));
}
END_TEST

START_TEST(test_exclude_whole_list) {
  ck_assert(!weft_ifname_match("docker0", "^docker,lo"));
  ck_assert(!weft_ifname_match("lo", "^docker,lo"));
  ck_assert(weft_ifname_match("eth0", "^docker,lo"));
  /* '^' is a flag of the list, not of its first item. */
  ck_assert(!weft_ifname_match("lo", "^eth,lo"));
}
END_TEST

START_TEST(test_exact) {
  ck_assert(weft_ifname_match("eth0", "=eth0"));
  ck_assert(!weft_ifname_match("eth01", "=eth0"));
  ck_assert(!weft_ifname_match("eth", "=eth0"));
  /* '=' applies to every item. */
  ck_assert(weft_ifname_match("ib1", "=eth0,ib1"));
  ck_assert(!weft_ifname_match("ib10", "=eth0,ib1"));
  /* '^' then '=': everything but exactly these. */
  ck_assert(!weft_ifname_match("eth0", "^=eth0"));
  ck_assert(weft_ifname_match("eth01", "^=eth0"));
}
END_TEST

START_TEST(test_port_suffix_ignored) {
  ck_assert(weft_ifname_match("eth0", "eth0:1"));
  ck_assert(weft_ifname_match("eth0", "=eth0:1"));
  ck_assert(weft_ifname_match("ib0", "eth1:2,ib"));
  ck_assert(!weft_ifname_match("eth1", "=eth0:1,ib"));
}
END_TEST

START_TEST(test_spec_valid) {
  ck_assert(weft_ifname_spec_valid("eth0"));
  ck_assert(weft_ifname_spec_valid("^=lo"));
  ck_assert(weft_ifname_spec_valid(",eth"));
  ck_assert(!weft_ifname_spec_valid("^"));
  ck_assert(!weft_ifname_spec_valid("="));
  ck_assert(!weft_ifname_spec_valid("^="));
  ck_assert(!weft_ifname_spec_valid(",,"));
  ck_assert(!weft_ifname_spec_valid(":1"));
}
END_TEST

/* ---- The choice, on synthetic lists ------------------------------------------ */

static struct weft_ifaddr v4(const char *name, const char *ip) {
  struct weft_ifaddr a;
  memset(&a, 0, sizeof(a));
  a.name = name;
  a.up = 1;
  a.addr.sin.sin_family = AF_INET;
  ck_assert_int_eq(inet_pton(AF_INET, ip, &a.addr.sin.sin_addr), 1);
  return a;
}

static struct weft_ifaddr v6(const char *name, const char *ip) {
  struct weft_ifaddr a;
  memset(&a, 0, sizeof(a));
  a.name = name;
  a.up = 1;
  a.addr.sin6.sin6_family = AF_INET6;
  ck_assert_int_eq(inet_pton(AF_INET6, ip, &a.addr.sin6.sin6_addr), 1);
  return a;
}

START_TEST(test_default_order) {
  struct weft_ifaddr ifs[] = {v4("lo", "127.0.0.1"), v4("docker0", "172.17.0.1"),
                              v4("virbr0", "192.168.122.1"), v4("eth0", "10.0.0.1"),
                              v4("ib0", "10.1.0.1")};
  /* ib first, even after eth0 in the list. */
  ck_assert_int_eq(weft_ifname_choose(ifs, 5, NULL, AF_UNSPEC, 0), 4);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, NULL, AF_UNSPEC, 0), 3);
  /* Then docker, then lo; never virbr. */
  ck_assert_int_eq(weft_ifname_choose(ifs, 3, NULL, AF_UNSPEC, 0), 1);
  ck_assert_int_eq(weft_ifname_choose(ifs, 1, NULL, AF_UNSPEC, 0), 0);
  struct weft_ifaddr virbr_only[] = {v4("virbr0", "192.168.122.1")};
  ck_assert_int_eq(weft_ifname_choose(virbr_only, 1, NULL, AF_UNSPEC, 0), -1);
}
END_TEST

START_TEST(test_down_skipped) {
  struct weft_ifaddr ifs[] = {v4("ib0", "10.1.0.1"), v4("eth0", "10.0.0.1")};
  ifs[0].up = 0;
  ck_assert_int_eq(weft_ifname_choose(ifs, 2, NULL, AF_UNSPEC, 0), 1);
  ck_assert_int_eq(weft_ifname_choose(ifs, 2, "ib", AF_UNSPEC, 0), -1);
}
END_TEST

START_TEST(test_user_list) {
  struct weft_ifaddr ifs[] = {v4("lo", "127.0.0.1"), v4("eth0", "10.0.0.1"),
                              v4("eth01", "10.0.1.1"), v4("docker0", "172.17.0.1")};
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "lo", AF_UNSPEC, 0), 0);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "=lo", AF_UNSPEC, 0), 0);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "docker", AF_UNSPEC, 0), 3);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "^lo,eth", AF_UNSPEC, 0), 3);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "=eth01", AF_UNSPEC, 0), 2);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "nonexistent", AF_UNSPEC, 0), -1);
  ck_assert_int_eq(weft_ifname_choose(ifs, 4, "=eth", AF_UNSPEC, 0), -1);
}
END_TEST

START_TEST(test_family) {
  struct weft_ifaddr ifs[] = {v4("eth0", "10.0.0.1"), v6("eth0", "fe80::1"), v6("eth0", "fd00::2"),
                              v6("lo", "::1"), v4("lo", "127.0.0.1")};
  ck_assert_int_eq(weft_ifname_choose(ifs, 5, NULL, AF_UNSPEC, 0), 0);
  /* Link-local and ::1 only when the user names the interface. */
  ck_assert_int_eq(weft_ifname_choose(ifs, 5, NULL, AF_INET6, 0), 2);
  ck_assert_int_eq(weft_ifname_choose(ifs, 5, NULL, AF_UNSPEC, 1), 2);
  ck_assert_int_eq(weft_ifname_choose(ifs, 5, "eth", AF_INET6, 0), 1);
  ck_assert_int_eq(weft_ifname_choose(ifs, 5, "lo", AF_INET6, 0), 3);
  ck_assert_int_eq(weft_ifname_choose(ifs + 3, 2, NULL, AF_INET6, 0), -1);
  /* A forced family never falls back to the other one. */
  ck_assert_int_eq(weft_ifname_choose(ifs, 1, "eth", AF_INET6, 0), -1);
  ck_assert_int_eq(weft_ifname_choose(ifs + 1, 3, "eth", AF_INET, 0), -1);
  /* A preference does. */
  ck_assert_int_eq(weft_ifname_choose(ifs, 1, "eth", AF_UNSPEC, 1), 0);
}
END_TEST

/* ---- The real choice, from the environment ----------------------------------- */

START_TEST(test_env_lo) {
  setenv("NCCL_SOCKET_IFNAME", "=lo", 1);
  setenv("NCCL_SOCKET_FAMILY", "AF_INET", 1);
  union weft_sockaddr a;
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSuccess);
  ck_assert_int_eq(a.sa.sa_family, AF_INET);
  ck_assert_uint_eq(ntohl(a.sin.sin_addr.s_addr), INADDR_LOOPBACK);
}
END_TEST

/* Whether lo has ::1 here (containers may run without IPv6). */
static int have_v6_loopback(void) {
  struct ifaddrs *all = NULL, *ifa;
  int found = 0;
  ck_assert_int_eq(getifaddrs(&all), 0);
  for (ifa = all; ifa != NULL && !found; ifa = ifa->ifa_next)
    found = ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == AF_INET6 &&
            IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr);
  freeifaddrs(all);
  return found;
}

/* lo with AF_INET6: ::1, or, without IPv6 here, an error (never 127.0.0.1). */
START_TEST(test_env_lo_v6) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  union weft_sockaddr a;
  if (!have_v6_loopback()) {
    ck_assert_int_eq(weft_socket_local_addr(&a), ncclSystemError);
    ck_assert(strstr(weft_last_error(), "NCCL_SOCKET_FAMILY=AF_INET6") != NULL);
    return;
  }
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSuccess);
  ck_assert_int_eq(a.sa.sa_family, AF_INET6);
  ck_assert(IN6_IS_ADDR_LOOPBACK(&a.sin6.sin6_addr));
}
END_TEST

START_TEST(test_env_nonexistent) {
  setenv("NCCL_SOCKET_IFNAME", "nonexistent", 1);
  union weft_sockaddr a;
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSystemError);
  const char *msg = weft_last_error();
  ck_assert_msg(strstr(msg, "NCCL_SOCKET_IFNAME=nonexistent") != NULL && strstr(msg, "lo") != NULL,
                "the error names neither the variable nor the interfaces: %s", msg);
}
END_TEST

/* Values that name nothing are WARNed and the default applies, as NCCL
 * ignores them. */
START_TEST(test_env_bad_values) {
  setenv("NCCL_SOCKET_IFNAME", _i == 0 ? "^" : "=", 1);
  setenv("NCCL_SOCKET_FAMILY", "ipv4", 1);
  union weft_sockaddr a;
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSuccess);
  const char *msg = weft_last_error();
  ck_assert_msg(strstr(msg, "NCCL_SOCKET_IFNAME=") != NULL && strstr(msg, "names no interface"),
                "%s", msg);
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSuccess);
}
END_TEST

START_TEST(test_env_bad_family) {
  setenv("NCCL_SOCKET_FAMILY", "ipv6", 1);
  union weft_sockaddr a;
  ck_assert_int_eq(weft_socket_local_addr(&a), ncclSuccess);
  const char *msg = weft_last_error();
  ck_assert_msg(strstr(msg, "NCCL_SOCKET_FAMILY=ipv6") != NULL && strstr(msg, "AF_INET6"), "%s",
                msg);
}
END_TEST

int main(void) {
  unsetenv("NCCL_SOCKET_IFNAME");
  unsetenv("NCCL_SOCKET_FAMILY");
  unsetenv("WEFT_SOCKET_IPV6");
  Suite *s = suite_create("ifname");
  TCase *tc = tcase_create("match");
  tcase_add_test(tc, test_prefix_list);
  tcase_add_test(tc, test_exclude_whole_list);
  tcase_add_test(tc, test_exact);
  tcase_add_test(tc, test_port_suffix_ignored);
  tcase_add_test(tc, test_spec_valid);
  suite_add_tcase(s, tc);
  tc = tcase_create("choose");
  tcase_add_test(tc, test_default_order);
  tcase_add_test(tc, test_down_skipped);
  tcase_add_test(tc, test_user_list);
  tcase_add_test(tc, test_family);
  suite_add_tcase(s, tc);
  tc = tcase_create("env");
  tcase_add_test(tc, test_env_lo);
  tcase_add_test(tc, test_env_lo_v6);
  tcase_add_test(tc, test_env_nonexistent);
  tcase_add_loop_test(tc, test_env_bad_values, 0, 2);
  tcase_add_test(tc, test_env_bad_family);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
