/* net/ib's parts that need no RDMA device (transport/net/ib/, issue 17):
 * NCCL_IB_HCA parsed and applied to (device, port) pairs, the GID choice
 * from GID tables (and from a sysfs tree written here), MTU and speed
 * mapping, and, where rdma-core's header was found, the verbs loader on a
 * library that is not there and on one that is not libibverbs, the
 * NCCL_IB_* switches and the QP attributes NCCL_IB_TIMEOUT & co. set. One
 * Check fork per test: parameters are read once per process. */
#include <arpa/inet.h>
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/debug.h"
#include "suite_run.h"
#include "transport/net/ib/ib.h"
#if WEFT_HAVE_IB_NET
#include "transport/net/ib/ib_qp.h"
#endif

/* ---- NCCL_IB_HCA -------------------------------------------------------------- */

struct hca_case {
  const char *value;
  const char *dev;
  int port;
  int keep;
};

static const struct hca_case hca_cases[] = {
    /* No value: every port. */
    {NULL, "mlx5_0", 1, 1},
    {"", "mlx4_0", 2, 1},
    /* Prefixes. */
    {"mlx5", "mlx5_0", 1, 1},
    {"mlx5", "mlx5_3", 2, 1},
    {"mlx5", "mlx4_0", 1, 0},
    {"mlx5_1", "mlx5_10", 1, 1},
    {"mlx5_1", "mlx5_0", 1, 0},
    {"mlx5_0,mlx5_2", "mlx5_2", 1, 1},
    {"mlx5_0,mlx5_2", "mlx5_1", 1, 0},
    /* Exact names. */
    {"=mlx5_1", "mlx5_1", 1, 1},
    {"=mlx5_1", "mlx5_10", 1, 0},
    {"=mlx5", "mlx5_0", 1, 0},
    /* Exclusion, prefix and exact. */
    {"^mlx5_0", "mlx5_0", 1, 0},
    {"^mlx5_0", "mlx5_0", 2, 0},
    {"^mlx5_0", "mlx5_1", 1, 1},
    {"^mlx5_1", "mlx5_10", 1, 0},
    {"^=mlx5_1", "mlx5_10", 1, 1},
    {"^=mlx5_1", "mlx5_1", 1, 0},
    /* Ports. */
    {"mlx5_0:1,mlx5_1:2", "mlx5_0", 1, 1},
    {"mlx5_0:1,mlx5_1:2", "mlx5_0", 2, 0},
    {"mlx5_0:1,mlx5_1:2", "mlx5_1", 2, 1},
    {"mlx5_0:1,mlx5_1:2", "mlx5_1", 1, 0},
    {"^mlx5_0:2", "mlx5_0", 1, 1},
    {"^mlx5_0:2", "mlx5_0", 2, 0},
    {"=mlx5_0:2", "mlx5_0", 2, 1},
    {"=mlx5_0:2", "mlx5_0", 1, 0},
    /* Blanks and empty entries. */
    {" mlx5_0 : 1 , mlx5_1 ", "mlx5_0", 1, 1},
    {" mlx5_0 : 1 , mlx5_1 ", "mlx5_0", 2, 0},
    {" mlx5_0 : 1 , mlx5_1 ", "mlx5_1", 2, 1},
    {" ^ = mlx5_0", "mlx5_0", 1, 0},
    {" ^ = mlx5_0", "mlx5_00", 1, 1},
    {"mlx5_0,,mlx5_1,", "mlx5_1", 1, 1},
    {",,mlx5_1", "mlx5_0", 1, 0},
    {",,,", "mlx4_0", 1, 1},
};

START_TEST(test_hca_table) {
  const struct hca_case *c = &hca_cases[_i];
  struct weft_ib_hca_filter f;
  char why[256] = "";
  ck_assert_msg(weft_ib_hca_parse(c->value, &f, why, sizeof(why)) == 0, "'%s': %s",
                c->value ? c->value : "(null)", why);
  ck_assert_msg(weft_ib_hca_keeps(&f, c->dev, c->port) == c->keep,
                "NCCL_IB_HCA='%s' on %s:%d: expected %s", c->value ? c->value : "(null)", c->dev,
                c->port, c->keep ? "kept" : "left out");
}
END_TEST

START_TEST(test_hca_entries) {
  struct weft_ib_hca_filter f;
  char why[256];
  ck_assert_int_eq(weft_ib_hca_parse("  ^=mlx5_0:1 ,, mlx5_1 ", &f, why, sizeof(why)), 0);
  ck_assert(f.exclude && f.exact);
  ck_assert_int_eq(f.n, 2);
  ck_assert_str_eq(f.e[0].name, "mlx5_0");
  ck_assert_int_eq(f.e[0].port, 1);
  ck_assert_str_eq(f.e[1].name, "mlx5_1");
  ck_assert_int_eq(f.e[1].port, -1);
}
END_TEST

struct hca_bad {
  const char *value;
  const char *why; /* a piece of the message */
};

static const struct hca_bad hca_bads[] = {
    {":1", "entry 1 ':1' has no device name"},
    {"mlx5_0, :2", "entry 2 ':2' has no device name"},
    {"mlx5_0:x", "port 'x' is not a number in 1..255"},
    {"mlx5_0:", "port '' is not a number"},
    {"mlx5_0:0", "port '0' is not a number in 1..255"},
    {"mlx5_0:256", "port '256'"},
    {"mlx5_0:1:2", "port '1:2'"},
    {"mlx5_0:-1", "port '-1'"},
    {"mlx5_0,^mlx5_1", "'^' and '=' may only open the whole value"},
    {"=^mlx5_1", "'^' and '=' may only open"},
    {"^", "names no device"},
    {"^=", "names no device"},
    {" = , ", "names no device"},
    {"a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a,a", "more than 32 entries"},
    {"mlx5_0123456789012345678901234567890123456789012345678901234567890123",
     "longer than 63 characters"},
};

START_TEST(test_hca_bad) {
  const struct hca_bad *c = &hca_bads[_i];
  struct weft_ib_hca_filter f = {.n = 7};
  char why[256] = "";
  ck_assert_msg(weft_ib_hca_parse(c->value, &f, why, sizeof(why)) == -1, "'%s' accepted", c->value);
  ck_assert_msg(strstr(why, c->why) != NULL, "'%s': got \"%s\", expected \"%s\"", c->value, why,
                c->why);
  ck_assert_int_eq(f.n, 7); /* output untouched */
}
END_TEST

/* ---- GID choice ------------------------------------------------------------------- */

static struct weft_ib_gid gid(int index, enum weft_ib_gid_type type, const char *addr) {
  struct weft_ib_gid g = {.index = index, .type = type};
  ck_assert_msg(inet_pton(AF_INET6, addr, g.raw) == 1, "bad test address %s", addr);
  return g;
}

#define V1 WEFT_IB_GID_ROCE_V1
#define V2 WEFT_IB_GID_ROCE_V2

static int choose(enum weft_ib_link link, const struct weft_ib_gid *t, int n, int param,
                  char *why) {
  int index = -42;
  if (weft_ib_gid_choose(link, t, n, param, &index, why, 256) != 0) return -1;
  return index;
}

START_TEST(test_gid_ib) {
  char why[256];
  struct weft_ib_gid t[] = {gid(0, WEFT_IB_GID_IB, "fe80::248a:703:49:d4f0"),
                            gid(1, WEFT_IB_GID_IB, "fec0::248a:703:49:d4f0")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_IB, t, 2, -1, why), 0);
  ck_assert_int_eq(choose(WEFT_IB_LINK_IB, t, 2, 1, why), 1);
  /* Index 0 empty (not in the table read): no usable GID. */
  ck_assert_int_eq(choose(WEFT_IB_LINK_IB, t + 1, 1, -1, why), -1);
  ck_assert_msg(strstr(why, "index 0") != NULL, "%s", why);
}
END_TEST

/* The usual RoCE table: v1 and v2 of the link-local address, then of the
 * interface's IPv4 address. */
START_TEST(test_gid_roce_ipv4) {
  char why[256];
  struct weft_ib_gid t[] = {gid(0, V1, "fe80::ba3f:d2ff:fe12:3456"),
                            gid(1, V2, "fe80::ba3f:d2ff:fe12:3456"), gid(2, V1, "::ffff:10.0.0.7"),
                            gid(3, V2, "::ffff:10.0.0.7")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 4, -1, why), 3);
}
END_TEST

START_TEST(test_gid_roce_ipv4_beats_ipv6) {
  char why[256];
  struct weft_ib_gid t[] = {gid(0, V1, "fe80::1:2"),          gid(1, V2, "fe80::1:2"),
                            gid(2, V1, "2001:db8::7"),        gid(3, V2, "2001:db8::7"),
                            gid(4, V1, "::ffff:192.168.1.7"), gid(5, V2, "::ffff:192.168.1.7")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 6, -1, why), 5);
  /* Without the IPv4 entries: the v2 IPv6 one. */
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 4, -1, why), 3);
}
END_TEST

START_TEST(test_gid_roce_v1_only) {
  char why[256];
  struct weft_ib_gid t[] = {gid(0, V1, "fe80::1:2"), gid(2, V1, "::ffff:10.1.1.1")};
  /* NCCL prefers an IPv4 address (NCCL_IB_ADDR_FAMILY=AF_INET) in v1 too. */
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 2, -1, why), 2);
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 1, -1, why), 0);
  /* A v1 GID beats a link-local v2 one. */
  struct weft_ib_gid u[] = {gid(0, V2, "fe80::1:2"), gid(1, V1, "fe80::1:2")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, u, 2, -1, why), 1);
  /* The lowest index of the best kind. */
  struct weft_ib_gid w[] = {gid(4, V2, "::ffff:10.0.0.9"), gid(3, V2, "::ffff:10.0.0.8")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, w, 2, -1, why), 3);
}
END_TEST

START_TEST(test_gid_index_param) {
  char why[256];
  struct weft_ib_gid t[] = {gid(0, V1, "fe80::1:2"), gid(1, V2, "fe80::1:2"),
                            gid(3, V2, "::ffff:10.0.0.7")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 3, 1, why), 1);
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 3, 0, why), 0);
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 3, 2, why), -1);
  ck_assert_msg(strstr(why, "NCCL_IB_GID_INDEX=2: the port has no GID at that index") != NULL, "%s",
                why);
}
END_TEST

START_TEST(test_gid_none_usable) {
  char why[256] = "";
  struct weft_ib_gid t[] = {gid(0, V1, "::"), gid(1, V2, "fe80::")};
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 2, -1, why), -1);
  ck_assert_msg(strstr(why, "no configured GID among 2 entries") != NULL, "%s", why);
  ck_assert_int_eq(choose(WEFT_IB_LINK_ETH, t, 0, -1, why), -1);
}
END_TEST

/* Writes text to root/rel, making its folders. */
static void put_file(const char *root, const char *rel, const char *text) {
  char path[512], cmd[600];
  snprintf(path, sizeof(path), "%s/%s", root, rel);
  snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
  ck_assert_int_eq(system(cmd), 0);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fputs(text, f);
  fclose(f);
}

/* A sysfs tree as the kernel writes it for a RoCE port (rxe0, port 1):
 * entry 2 empty, 3 and 4 the IPv4 address. */
START_TEST(test_gid_sysfs) {
  char root[] = "/tmp/weft-ib-sysfs-XXXXXX", cmd[600];
  ck_assert_ptr_nonnull(mkdtemp(root));
  const char *p = "class/infiniband/rxe0/ports/1/";
  static const char *const vals[] = {
      "fe80:0000:0000:0000:ba3f:d2ff:fe12:3456", "fe80:0000:0000:0000:ba3f:d2ff:fe12:3456",
      "0000:0000:0000:0000:0000:0000:0000:0000", "0000:0000:0000:0000:0000:ffff:0a00:0007",
      "0000:0000:0000:0000:0000:ffff:0a00:0007"};
  static const char *const types[] = {"IB/RoCE v1\n", "RoCE v2\n", NULL, "IB/RoCE v1\n",
                                      "RoCE v2\n"};
  for (int i = 0; i < 5; i++) {
    char rel[256], text[64];
    snprintf(rel, sizeof(rel), "%sgids/%d", p, i);
    snprintf(text, sizeof(text), "%s\n", vals[i]);
    put_file(root, rel, text);
    if (types[i] == NULL) continue;
    snprintf(rel, sizeof(rel), "%sgid_attrs/types/%d", p, i);
    put_file(root, rel, types[i]);
  }
  struct weft_ib_gid t[16];
  int n = weft_ib_gid_read_sysfs(root, "rxe0", 1, WEFT_IB_LINK_ETH, t, 16);
  ck_assert_int_eq(n, 4);
  ck_assert_int_eq(t[0].index, 0);
  ck_assert_int_eq(t[0].type, V1);
  ck_assert_int_eq(t[1].type, V2);
  ck_assert_int_eq(t[2].index, 3);
  ck_assert_int_eq(t[3].index, 4);
  ck_assert_int_eq(t[3].type, V2);
  ck_assert_int_eq(t[3].raw[10], 0xff);
  ck_assert_int_eq(t[3].raw[12], 10);
  ck_assert_int_eq(t[3].raw[15], 7);
  char s[64], why[256];
  weft_ib_gid_str(t[3].raw, s, sizeof(s));
  ck_assert_str_eq(s, "0000:0000:0000:0000:0000:ffff:0a00:0007");
  int index = -1;
  ck_assert_int_eq(weft_ib_gid_choose(WEFT_IB_LINK_ETH, t, n, -1, &index, why, sizeof(why)), 0);
  ck_assert_int_eq(index, 4);
  /* On an InfiniBand port "IB/RoCE v1" reads as IB. */
  ck_assert_int_eq(weft_ib_gid_read_sysfs(root, "rxe0", 1, WEFT_IB_LINK_IB, t, 16), 4);
  ck_assert_int_eq(t[0].type, WEFT_IB_GID_IB);
  /* No such port; a table cut at max. */
  ck_assert_int_eq(weft_ib_gid_read_sysfs(root, "rxe0", 2, WEFT_IB_LINK_ETH, t, 16), -1);
  ck_assert_int_eq(weft_ib_gid_read_sysfs(root, "mlx5_0", 1, WEFT_IB_LINK_ETH, t, 16), -1);
  ck_assert_int_eq(weft_ib_gid_read_sysfs(root, "rxe0", 1, WEFT_IB_LINK_ETH, t, 2), 2);
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- MTU and speed ---------------------------------------------------------------- */

START_TEST(test_mtu) {
  static const int bytes[] = {0, 256, 512, 1024, 2048, 4096, 0};
  for (int m = 0; m <= 6; m++) ck_assert_int_eq(weft_ib_mtu_bytes(m), bytes[m]);
  for (int m = 1; m <= 5; m++) ck_assert_int_eq(weft_ib_mtu_from_bytes(bytes[m]), m);
  ck_assert_int_eq(weft_ib_mtu_bytes(-1), 0);
  ck_assert_int_eq(weft_ib_mtu_from_bytes(1500), 0);
  ck_assert_int_eq(weft_ib_mtu_from_bytes(8192), 0);
  ck_assert_int_eq(weft_ib_mtu_from_bytes(0), 0);
}
END_TEST

struct speed_case {
  unsigned speed, width;
  int mbps;
};

static const struct speed_case speed_cases[] = {
    {1, 1, 2500},      /* SDR 1x */
    {1, 2, 10000},     /* SDR 4x */
    {2, 2, 20000},     /* DDR 4x */
    {4, 2, 40000},     /* QDR 4x */
    {8, 2, 40000},     /* FDR10 4x */
    {16, 2, 56000},    /* FDR 4x */
    {32, 2, 100000},   /* EDR 4x */
    {32, 8, 300000},   /* EDR 12x */
    {64, 2, 200000},   /* HDR 4x */
    {64, 4, 400000},   /* HDR 8x */
    {64, 16, 100000},  /* HDR 2x */
    {128, 2, 400000},  /* NDR 4x */
    {128, 16, 200000}, /* NDR 2x */
    {256, 2, 800000},  /* XDR 4x (active_speed_ex) */
    {0, 2, 0},         /* unknown: no bit */
    {3, 2, 0},         /* two bits */
    {512, 2, 0},       /* past XDR */
    {32, 0, 0},        /* no width */
    {32, 32, 0},       /* past 2x */
    {32, 3, 0},
};

START_TEST(test_speed_table) {
  const struct speed_case *c = &speed_cases[_i];
  ck_assert_msg(weft_ib_port_speed(c->speed, c->width) == c->mbps,
                "speed %u width %u: %d Mb/s, expected %d", c->speed, c->width,
                weft_ib_port_speed(c->speed, c->width), c->mbps);
}
END_TEST

/* ---- The verbs loader and the NCCL_IB_* switches ------------------------------------ */

#if WEFT_HAVE_IB_NET

/* Sends NCCL_DEBUG=INFO (subsystem NET) to a file this test reads back;
 * before anything logs (each test is a fresh fork). */
static void log_to(char *path, size_t len) {
  snprintf(path, len, "/tmp/weft-ib-log-%d", (int)getpid());
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
}

static int log_has(const char *path, const char *what) {
  char line[1024];
  int found = 0;
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) found = strstr(line, what) != NULL;
  fclose(f);
  return found;
}

START_TEST(test_lib_missing) {
  char log[128], why[512] = "";
  struct weft_ib_dev d[4];
  log_to(log, sizeof(log));
  const char *bogus = "/nonexistent/weft-test/libibverbs.so.1";
  ck_assert_int_eq(weft_ib_devices_find(bogus, d, 4, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why, "dlopen /nonexistent/weft-test/libibverbs.so.1: ") != NULL, "%s", why);
  ck_assert_msg(log_has(log, "NET/IB: no IB network (dlopen /nonexistent/weft-test/"),
                "no INFO line in %s", log);
  unlink(log);
}
END_TEST

START_TEST(test_lib_not_verbs) {
  char why[512] = "";
  struct weft_ib_dev d[4];
  /* A library that loads but is not libibverbs: named with what it lacks. */
  ck_assert_int_eq(weft_ib_devices_find("libm.so.6", d, 4, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why, "libm.so.6 has no ibv_get_device_list") != NULL, "%s", why);
  ck_assert_msg(strstr(weft_last_error(), "libm.so.6 has no ibv_get_device_list") != NULL,
                "no WARN: '%s'", weft_last_error());
}
END_TEST

START_TEST(test_disable) {
  char why[512] = "";
  struct weft_ib_dev d[4];
  setenv("NCCL_IB_DISABLE", "1", 1);
  ck_assert_int_eq(weft_ib_devices_find(NULL, d, 4, why, sizeof(why)), 0);
  ck_assert_str_eq(why, "NCCL_IB_DISABLE=1");
}
END_TEST

START_TEST(test_hca_env_bad) {
  char why[512] = "";
  struct weft_ib_dev d[4];
  setenv("NCCL_IB_HCA", "mlx5_0:one", 1);
  ck_assert_int_eq(weft_ib_devices_find(NULL, d, 4, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why,
                       "NCCL_IB_HCA=mlx5_0:one: entry 1 'mlx5_0:one': port 'one' is not "
                       "a number in 1..255") != NULL,
                "%s", why);
  ck_assert_msg(strstr(weft_last_error(), "NCCL_IB_HCA=mlx5_0:one is not valid") != NULL, "%s",
                weft_last_error());
}
END_TEST

static int have_sysfs_devices(void) {
  DIR *d = opendir("/sys/class/infiniband");
  struct dirent *e;
  int n = 0;
  if (d == NULL) return 0;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* The real library on a host without RDMA devices: 0 ports, said so.
 * (Hosts with devices: test_ib_devices.) */
START_TEST(test_lib_no_device) {
  char why[512] = "";
  struct weft_ib_dev d[4];
  if (have_sysfs_devices()) return;
  ck_assert_int_eq(weft_ib_devices_find(NULL, d, 4, why, sizeof(why)), 0);
  ck_assert_msg(strstr(why, "libibverbs found no RDMA device") != NULL ||
                    strstr(why, "dlopen libibverbs.so.1") != NULL,
                "%s", why);
}
END_TEST

/* ---- QP attributes ------------------------------------------------------------------- */

static const struct weft_ib_dev local_roce = {
    .name = "mlx5_0", .port = 1, .link = WEFT_IB_LINK_ETH, .mtu = 5, .gid_index = 3};
static const struct weft_ib_dev local_ib = {
    .name = "mlx5_1", .port = 2, .link = WEFT_IB_LINK_IB, .mtu = 4, .gid_index = 0};

START_TEST(test_qp_defaults) {
  struct weft_ib_qp_conf c;
  struct ibv_qp_attr a;
  weft_ib_qp_conf_get(&c);
  ck_assert_int_eq(c.nqps, 1);
  int mask = weft_ib_qp_rts_attr(&c, &a);
  ck_assert_int_eq(a.qp_state, IBV_QPS_RTS);
  ck_assert_int_eq(a.timeout, 20);
  ck_assert_int_eq(a.retry_cnt, 7);
  ck_assert_int_eq(a.rnr_retry, 7);
  ck_assert_int_eq(mask & (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT);
  struct weft_ib_qp_peer r = {.qpn = 0x1234, .lid = 17, .link = WEFT_IB_LINK_IB, .mtu = 5};
  mask = weft_ib_qp_rtr_attr(&c, &local_ib, &r, &a);
  ck_assert_int_eq(a.qp_state, IBV_QPS_RTR);
  ck_assert_int_eq(a.dest_qp_num, 0x1234);
  ck_assert_int_eq(a.path_mtu, 4); /* the smaller port's */
  ck_assert_int_eq(a.ah_attr.is_global, 0);
  ck_assert_int_eq(a.ah_attr.dlid, 17);
  ck_assert_int_eq(a.ah_attr.sl, 0);
  ck_assert_int_eq(a.ah_attr.port_num, 2);
  ck_assert_int_eq(mask & IBV_QP_AV, IBV_QP_AV);
}
END_TEST

START_TEST(test_qp_params) {
  setenv("NCCL_IB_TIMEOUT", "14", 1);
  setenv("NCCL_IB_RETRY_CNT", "3", 1);
  setenv("NCCL_IB_SL", "5", 1);
  setenv("NCCL_IB_TC", "106", 1);
  setenv("NCCL_IB_QPS_PER_CONNECTION", "4", 1);
  struct weft_ib_qp_conf c;
  struct ibv_qp_attr a;
  weft_ib_qp_conf_get(&c);
  ck_assert_int_eq(c.nqps, 4);
  weft_ib_qp_rts_attr(&c, &a);
  ck_assert_int_eq(a.timeout, 14);
  ck_assert_int_eq(a.retry_cnt, 3);
  struct weft_ib_qp_peer r = {.qpn = 77, .link = WEFT_IB_LINK_ETH, .mtu = 3};
  ck_assert_int_eq(inet_pton(AF_INET6, "::ffff:10.0.0.8", r.gid), 1);
  weft_ib_qp_rtr_attr(&c, &local_roce, &r, &a);
  ck_assert_int_eq(a.path_mtu, 3);
  ck_assert_int_eq(a.ah_attr.is_global, 1);
  ck_assert_int_eq(a.ah_attr.grh.sgid_index, 3);
  ck_assert_int_eq(a.ah_attr.grh.traffic_class, 106);
  ck_assert_int_eq(a.ah_attr.grh.hop_limit, 255);
  ck_assert_int_eq(memcmp(a.ah_attr.grh.dgid.raw, r.gid, 16), 0);
  ck_assert_int_eq(a.ah_attr.sl, 5);
  ck_assert_int_eq(a.ah_attr.port_num, 1);
}
END_TEST

/* Out of bounds: the default, with the parameter table's WARN. */
START_TEST(test_qp_params_bad) {
  setenv("NCCL_IB_TIMEOUT", "0", 1);
  setenv("NCCL_IB_RETRY_CNT", "8", 1);
  setenv("NCCL_IB_QPS_PER_CONNECTION", "0", 1);
  struct weft_ib_qp_conf c;
  weft_ib_qp_conf_get(&c);
  ck_assert_int_eq(c.timeout, 20);
  ck_assert_int_eq(c.retry_cnt, 7);
  ck_assert_int_eq(c.nqps, 1);
}
END_TEST

#endif

int main(void) {
  static const char *const vars[] = {
      "NCCL_IB_HCA",       "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT",
      "NCCL_IB_RETRY_CNT", "NCCL_IB_SL",      "NCCL_IB_TC",        "NCCL_IB_QPS_PER_CONNECTION",
      "NCCL_DEBUG_FILE"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
  Suite *s = suite_create("ib_units");
  TCase *tc = tcase_create("hca");
  tcase_add_loop_test(tc, test_hca_table, 0, (int)(sizeof(hca_cases) / sizeof(hca_cases[0])));
  tcase_add_test(tc, test_hca_entries);
  tcase_add_loop_test(tc, test_hca_bad, 0, (int)(sizeof(hca_bads) / sizeof(hca_bads[0])));
  suite_add_tcase(s, tc);
  tc = tcase_create("gid");
  tcase_add_test(tc, test_gid_ib);
  tcase_add_test(tc, test_gid_roce_ipv4);
  tcase_add_test(tc, test_gid_roce_ipv4_beats_ipv6);
  tcase_add_test(tc, test_gid_roce_v1_only);
  tcase_add_test(tc, test_gid_index_param);
  tcase_add_test(tc, test_gid_none_usable);
  tcase_add_test(tc, test_gid_sysfs);
  suite_add_tcase(s, tc);
  tc = tcase_create("port");
  tcase_add_test(tc, test_mtu);
  tcase_add_loop_test(tc, test_speed_table, 0, (int)(sizeof(speed_cases) / sizeof(speed_cases[0])));
  suite_add_tcase(s, tc);
#if WEFT_HAVE_IB_NET
  tc = tcase_create("verbs");
  tcase_add_test(tc, test_lib_missing);
  tcase_add_test(tc, test_lib_not_verbs);
  tcase_add_test(tc, test_disable);
  tcase_add_test(tc, test_hca_env_bad);
  tcase_add_test(tc, test_lib_no_device);
  suite_add_tcase(s, tc);
  tc = tcase_create("qp");
  tcase_add_test(tc, test_qp_defaults);
  tcase_add_test(tc, test_qp_params);
  tcase_add_test(tc, test_qp_params_bad);
  suite_add_tcase(s, tc);
#else
  printf(
      "ib_units: built without <infiniband/verbs.h>: the verbs loader and QP attribute "
      "cases are not built\n");
#endif
  return suite_run(s);
}
