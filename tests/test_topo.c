/* topo/: path types, transports, rings and NIC choices from NCCL topology
 * XML files (two published by cloud vendors, the rest in tests/topo/), and
 * clear errors for malformed or hostile files. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/debug.h"
#include "topo/detect.h"
#include "topo/topo.h"
#include "suite_run.h"

static struct weft_topo *load(const char *file) {
  char path[1024];
  const char *dir = getenv("WEFT_TOPO_FIXTURES");
  snprintf(path, sizeof(path), "%s/%s", dir ? dir : "tests/topo", file);
  struct weft_topo *t = NULL;
  ck_assert_int_eq(weft_topo_load_xml(path, &t), ncclSuccess);
  ck_assert_ptr_nonnull(t);
  return t;
}

static const char *path(const struct weft_topo *t, int a, int b) {
  return weft_topo_path_name(weft_topo_gpu_path(t, a, b)->type);
}

static const char *nic_path(const struct weft_topo *t, int g, int k) {
  return weft_topo_path_name(weft_topo_nic_path(t, g, k)->type);
}

static enum weft_topo_transport transport(const struct weft_topo *t, int a, int b) {
  enum weft_topo_transport x;
  ck_assert_int_eq(weft_topo_choose_transport(t, a, b, 1, &x), ncclSuccess);
  return x;
}

static void ring(const struct weft_topo *t, int *order) {
  int gpus[64];
  for (int i = 0; i < t->ngpus; i++) gpus[i] = i;
  ck_assert_int_eq(weft_topo_ring_order(t, gpus, t->ngpus, order), ncclSuccess);
}

START_TEST(hgx_nvswitch) {
  struct weft_topo *t = load("hgx-h100-8gpu-8nic.xml");
  int nics[8];
  ck_assert_int_eq(t->ngpus, 8);
  ck_assert_int_eq(t->nnics, 8);
  for (int a = 0; a < 8; a++) {
    for (int b = 0; b < 8; b++) {
      ck_assert_str_eq(path(t, a, b), a == b ? "LOC" : "NVL");
      if (a != b) ck_assert_int_eq(weft_topo_gpu_path(t, a, b)->nvlinks, 18);
      ck_assert_int_eq(transport(t, a, b), WEFT_TRANSPORT_P2P);
    }
  }
  /* NIC k is mlx5_k (ordered by net dev); GPU g sits with mlx5_(7-g). */
  ck_assert_int_eq(weft_topo_nearest_nics(t, nics), ncclSuccess);
  for (int g = 0; g < 8; g++) {
    char name[16];
    snprintf(name, sizeof(name), "mlx5_%d", 7 - g);
    ck_assert_str_eq(t->nodes[t->nics[nics[g]]].name, name);
    ck_assert_str_eq(nic_path(t, g, nics[g]), "PIX");
    ck_assert_str_eq(nic_path(t, g, g < 4 ? 0 : 7), "SYS"); /* the other socket */
  }
  int order[8];
  ring(t, order);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(order[i], i);
  weft_topo_free(t);
}
END_TEST

START_TEST(azure_pci_classes) {
  struct weft_topo *t = load("azure-ndv5-h100.xml");
  int nics[8], order[8];
  ck_assert_int_eq(t->ngpus, 8);
  ck_assert_int_eq(t->nnics, 8);
  ck_assert_str_eq(path(t, 0, 1), "PHB");
  ck_assert_str_eq(path(t, 0, 4), "SYS");
  ck_assert_str_eq(path(t, 5, 7), "PHB");
  ck_assert_int_eq(weft_topo_nearest_nics(t, nics), ncclSuccess);
  for (int g = 0; g < 8; g++) {
    ck_assert_int_eq(nics[g], g);
    ck_assert_str_eq(nic_path(t, g, g), "PIX");
  }
  ck_assert_str_eq(nic_path(t, 0, 4), "SYS");
  /* Default P2P level PXB: PHB and SYS pairs go through shared memory. */
  ck_assert_int_eq(transport(t, 0, 1), WEFT_TRANSPORT_SHM);
  ck_assert_int_eq(transport(t, 2, 2), WEFT_TRANSPORT_P2P);
  ring(t, order);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(order[i], i);
  weft_topo_free(t);
}
END_TEST

START_TEST(two_socket_ring) {
  struct weft_topo *t = load("2socket-pcie.xml");
  int order[4], tree[4], gpus[4] = {0, 1, 2, 3}, nics[4], sys = 0;
  ck_assert_str_eq(path(t, 0, 2), "PHB");
  ck_assert_str_eq(path(t, 0, 1), "SYS");
  ck_assert_str_eq(path(t, 1, 3), "PHB");
  ring(t, order);
  for (int i = 0; i < 4; i++) sys += weft_topo_gpu_path(t, order[i], order[(i + 1) % 4])->type == WEFT_PATH_SYS;
  ck_assert_int_eq(sys, 2); /* number order would cross four times */
  ck_assert_int_eq(order[0], 0);
  ck_assert_int_eq(order[1], 1);
  ck_assert_int_eq(order[2], 3);
  ck_assert_int_eq(order[3], 2);
  ck_assert_int_eq(weft_topo_tree_order(t, gpus, 4, tree), ncclSuccess);
  ck_assert_int_eq(tree[0], 0);
  ck_assert_int_eq(weft_topo_nearest_nics(t, nics), ncclSuccess);
  ck_assert_int_eq(nics[0], 0);
  ck_assert_int_eq(nics[1], 1);
  ck_assert_int_eq(nics[2], 0);
  ck_assert_int_eq(nics[3], 1);
  /* Transports across the P2P levels. */
  ck_assert_int_eq(transport(t, 0, 2), WEFT_TRANSPORT_SHM);
  t->policy.p2p_level = WEFT_PATH_PHB;
  ck_assert_int_eq(transport(t, 0, 2), WEFT_TRANSPORT_P2P);
  ck_assert_int_eq(transport(t, 0, 1), WEFT_TRANSPORT_SHM);
  t->policy.p2p_level = WEFT_PATH_SYS;
  ck_assert_int_eq(transport(t, 0, 1), WEFT_TRANSPORT_P2P);
  t->peer_access[0 * 4 + 1] = 0; /* cudaDeviceCanAccessPeer said no */
  ck_assert_int_eq(transport(t, 0, 1), WEFT_TRANSPORT_SHM);
  t->policy.p2p_disable = 1;
  ck_assert_int_eq(transport(t, 0, 2), WEFT_TRANSPORT_SHM);
  ck_assert_int_eq(transport(t, 3, 3), WEFT_TRANSPORT_P2P); /* ranks sharing a GPU */
  t->policy.shm_disable = 1;
  ck_assert_int_eq(transport(t, 0, 2), WEFT_TRANSPORT_NET);
  enum weft_topo_transport x;
  t->policy.shm_disable = 0;
  ck_assert_int_eq(weft_topo_choose_transport(t, 0, 2, 0, &x), ncclSuccess);
  ck_assert_int_eq(x, WEFT_TRANSPORT_NET); /* other host */
  ck_assert_int_eq(weft_topo_choose_transport(t, -1, 2, 1, &x), ncclSuccess);
  ck_assert_int_eq(x, WEFT_TRANSPORT_SHM); /* a host-memory rank */
  ck_assert_int_ne(weft_topo_choose_transport(t, 0, 9, 1, &x), ncclSuccess);
  weft_topo_free(t);
}
END_TEST

START_TEST(switch_pairs) {
  struct weft_topo *t = load("pcie-switch-pairs.xml");
  int order[6], nics[6];
  ck_assert_int_eq(t->ngpus, 6);
  ck_assert_int_eq(t->nnics, 2); /* one HCA, two ports */
  ck_assert_str_eq(path(t, 0, 1), "PIX");
  ck_assert_str_eq(path(t, 0, 2), "PXB");
  ck_assert_str_eq(path(t, 2, 3), "PIX");
  ck_assert_str_eq(path(t, 0, 4), "PHB");
  ck_assert_str_eq(path(t, 4, 5), "PIX");
  ck_assert_str_eq(nic_path(t, 0, 0), "PIX");
  ck_assert_str_eq(nic_path(t, 2, 1), "PXB");
  ck_assert_str_eq(nic_path(t, 5, 0), "PHB");
  ck_assert_int_eq(transport(t, 0, 2), WEFT_TRANSPORT_P2P); /* PXB is within the default */
  ck_assert_int_eq(transport(t, 0, 4), WEFT_TRANSPORT_SHM);
  t->policy.p2p_level = WEFT_PATH_PIX;
  ck_assert_int_eq(transport(t, 0, 2), WEFT_TRANSPORT_SHM);
  ring(t, order);
  for (int i = 0; i < 6; i++) ck_assert_int_eq(order[i], i);
  /* Two ports: GPU0 and GPU1 spread over them. */
  ck_assert_int_eq(weft_topo_nearest_nics(t, nics), ncclSuccess);
  ck_assert_int_eq(nics[0], 0);
  ck_assert_int_eq(nics[1], 1);
  weft_topo_free(t);
}
END_TEST

START_TEST(no_nic) {
  struct weft_topo *t = load("no-nic.xml");
  int nics[2] = {5, 5}, tree[2], gpus[2] = {1, 0};
  ck_assert_int_eq(t->ngpus, 2); /* the BMC's VGA is not a GPU */
  ck_assert_int_eq(t->nnics, 0);
  ck_assert_str_eq(path(t, 0, 1), "PIX");
  ck_assert_int_eq(weft_topo_nearest_nics(t, nics), ncclSuccess);
  ck_assert_int_eq(nics[0], -1);
  ck_assert_int_eq(weft_topo_tree_order(t, gpus, 2, tree), ncclSuccess);
  ck_assert_int_eq(tree[0], 1);
  struct weft_topo_policy p;
  ck_assert_int_eq(weft_topo_policy_from_env(t, &p), ncclSuccess);
  ck_assert_int_eq(p.p2p_level, WEFT_PATH_SYS); /* AMD: NCCL's default */
  weft_topo_free(t);
}
END_TEST

START_TEST(malformed_line) {
  struct weft_topo *t = NULL;
  char path[1024];
  const char *dir = getenv("WEFT_TOPO_FIXTURES");
  snprintf(path, sizeof(path), "%s/malformed.xml", dir ? dir : "tests/topo");
  ck_assert_int_eq(weft_topo_load_xml(path, &t), ncclInvalidUsage);
  ck_assert_ptr_null(t);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "malformed.xml:4:"));
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "not well-formed"));
}
END_TEST

/* Each must fail cleanly, naming the line. */
static const struct {
  const char *xml, *expect;
} bad_files[] = {
    {"<system>\n<cpu>\n<pci busid=\"zz:1\"/></cpu></system>", "x.xml:3: busid is not a PCI bus id"},
    {"<system>\n<cpu>\n<pci class=\"0x030200\"/></cpu></system>", "x.xml:3: <pci> without busid"},
    {"<system><cpu>\n<pci busid=\"0000:01:00.0\"/>\n<pci busid=\"0000:01:00.0\"/></cpu></system>",
     "x.xml:3: busid appears twice"},
    {"<system><cpu><pci busid=\"0000:01:00.0\" class=\"0x0302\">\n<gpu dev=\"x\"/></pci></cpu></system>",
     "x.xml:2: attribute is not a number"},
    {"<system><cpu><pci busid=\"0000:01:00.0\"><gpu>\n<nvlink target=\"bad\"/></gpu></pci></cpu></system>",
     "x.xml:2: nvlink target"},
    {"<topology/>", "the root element must be <system>"},
    {"", "not well-formed"},
    {"<?xml version=\"1.0\"?>\n<!DOCTYPE s [<!ENTITY a \"aaaaaaaaaa\"><!ENTITY b \"&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;\">"
     "<!ENTITY c \"&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;\"><!ENTITY d \"&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;\">]>\n"
     "<system><cpu affinity=\"&d;&d;&d;&d;\"/></system>", "x.xml:"},
    {"<!DOCTYPE system SYSTEM \"http://example.invalid/x.dtd\"><system/>", "a DOCTYPE (before this element) is not allowed"},
};

START_TEST(hostile_files) {
  const char *xml = bad_files[_i].xml;
  struct weft_topo *t = NULL;
  ck_assert_int_ne(weft_topo_load_xml_memory(xml, strlen(xml), "x.xml", &t), ncclSuccess);
  ck_assert_ptr_null(t);
  ck_assert_msg(strstr(weft_last_error(), bad_files[_i].expect) != NULL, "case %d: '%s' lacks '%s'",
                _i, weft_last_error(), bad_files[_i].expect);
}
END_TEST

START_TEST(deep_nesting) {
  char xml[8192] = "<system><cpu>";
  for (int i = 0; i < 40; i++)
    snprintf(xml + strlen(xml), sizeof(xml) - strlen(xml), "<pci busid=\"0000:%02x:00.0\">", i + 1);
  for (int i = 0; i < 40; i++) strcat(xml, "</pci>");
  strcat(xml, "</cpu></system>");
  struct weft_topo *t = NULL;
  ck_assert_int_eq(weft_topo_load_xml_memory(xml, strlen(xml), "deep.xml", &t), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(weft_last_error(), "nested too deep"));
}
END_TEST

START_TEST(two_hosts_net) {
  const char *xml =
      "<system><cpu host_hash=\"0x1\" numaid=\"0\"><pci busid=\"0000:01:00.0\" class=\"0x030200\"/></cpu>"
      "<cpu host_hash=\"0x2\" numaid=\"0\"><pci busid=\"0000:02:00.0\" class=\"0x030200\"/></cpu></system>";
  struct weft_topo *t = NULL;
  ck_assert_int_eq(weft_topo_load_xml_memory(xml, strlen(xml), "hosts.xml", &t), ncclSuccess);
  ck_assert_str_eq(path(t, 0, 1), "NET");
  ck_assert_int_eq(transport(t, 0, 1), WEFT_TRANSPORT_SHM);
  weft_topo_free(t);
}
END_TEST

START_TEST(p2p_level_parse) {
  enum weft_topo_path p;
  ck_assert_int_eq(weft_topo_path_parse("phb", &p), ncclSuccess);
  ck_assert_int_eq(p, WEFT_PATH_PHB);
  ck_assert_int_eq(weft_topo_path_parse("NVL", &p), ncclSuccess);
  ck_assert_int_eq(p, WEFT_PATH_NVL);
  ck_assert_int_eq(weft_topo_path_parse("1", &p), ncclSuccess);
  ck_assert_int_eq(p, WEFT_PATH_PIX);
  ck_assert_int_eq(weft_topo_path_parse("5", &p), ncclSuccess);
  ck_assert_int_eq(p, WEFT_PATH_SYS);
  ck_assert_int_ne(weft_topo_path_parse("6", &p), ncclSuccess);
  ck_assert_int_ne(weft_topo_path_parse("fast", &p), ncclSuccess);
}
END_TEST

/* Dump then load again: the same paths. */
START_TEST(dump_round_trip) {
  const char *files[] = {"hgx-h100-8gpu-8nic.xml", "azure-ndv5-h100.xml", "pcie-switch-pairs.xml"};
  for (unsigned f = 0; f < 3; f++) {
    struct weft_topo *a = load(files[f]), *b = NULL;
    char tmp[] = "/tmp/weft-topo-dump-XXXXXX";
    int fd = mkstemp(tmp);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(weft_topo_dump_xml(a, tmp), ncclSuccess);
    ck_assert_int_eq(weft_topo_load_xml(tmp, &b), ncclSuccess);
    unlink(tmp);
    ck_assert_int_eq(a->ngpus, b->ngpus);
    ck_assert_int_eq(a->nnics, b->nnics);
    for (int i = 0; i < a->ngpus; i++) {
      for (int j = 0; j < a->ngpus; j++) ck_assert_str_eq(path(a, i, j), path(b, i, j));
      for (int k = 0; k < a->nnics; k++) ck_assert_str_eq(nic_path(a, i, k), nic_path(b, i, k));
    }
    weft_topo_free(a);
    weft_topo_free(b);
  }
}
END_TEST

START_TEST(busid_lookup) {
  struct weft_topo *t = load("hgx-h100-8gpu-8nic.xml");
  ck_assert_int_eq(weft_topo_gpu_by_busid(t, "00000000:A4:00.0"), 0);
  ck_assert_int_eq(weft_topo_gpu_by_busid(t, "0000:ea:00.0"), 7);
  ck_assert_int_eq(weft_topo_gpu_by_busid(t, "0000:a3:00.0"), -1); /* a NIC */
  weft_topo_free(t);
}
END_TEST

/* Issue 17: the NIC each GPU uses and whether GPUDirect RDMA reaches it. */
static int gpu_nic(const struct weft_topo *t, int g, enum weft_topo_path *type) {
  int nic = -2;
  ck_assert_int_eq(weft_topo_gpu_nic(t, g, &nic, type), ncclSuccess);
  return nic;
}

static int gdr(const struct weft_topo *t, int g, int k) {
  int allowed = -1;
  ck_assert_int_eq(weft_topo_gpu_nic_gdr(t, g, k, &allowed), ncclSuccess);
  return allowed;
}

START_TEST(nic_distances) {
  struct weft_topo *t = load("nic-distances.xml");
  static const enum weft_topo_path want[4] = {WEFT_PATH_PIX, WEFT_PATH_PXB, WEFT_PATH_PHB,
                                              WEFT_PATH_SYS};
  ck_assert_int_eq(t->ngpus, 4);
  ck_assert_int_eq(t->nnics, 1);
  ck_assert_int_eq(t->policy.gdr_level, WEFT_PATH_PXB); /* NCCL's default */
  for (int g = 0; g < 4; g++) {
    enum weft_topo_path type = WEFT_PATH_COUNT;
    ck_assert_int_eq(gpu_nic(t, g, &type), 0);
    ck_assert_str_eq(weft_topo_path_name(type), weft_topo_path_name(want[g]));
    /* Default level PXB: PIX and PXB yes, PHB and SYS no. */
    ck_assert_int_eq(gdr(t, g, 0), g <= 1);
  }
  /* Each level admits the paths at or below it. */
  static const enum weft_topo_path levels[] = {WEFT_PATH_LOC, WEFT_PATH_PIX, WEFT_PATH_PXB,
                                               WEFT_PATH_PHB, WEFT_PATH_SYS};
  for (int l = 0; l < 5; l++) {
    t->policy.gdr_level = levels[l];
    for (int g = 0; g < 4; g++) ck_assert_int_eq(gdr(t, g, 0), want[g] <= levels[l]);
  }
  ck_assert_int_eq(weft_topo_gdr_allowed(WEFT_PATH_NET, WEFT_PATH_SYS), 0);
  int nic, allowed;
  ck_assert_int_eq(weft_topo_gpu_nic(t, 4, &nic, NULL), ncclInvalidArgument);
  ck_assert_int_eq(weft_topo_gpu_nic(t, -1, &nic, NULL), ncclInvalidArgument);
  ck_assert_int_eq(weft_topo_gpu_nic_gdr(t, 0, 1, &allowed), ncclInvalidArgument);
  weft_topo_free(t);
}
END_TEST

START_TEST(nic_speeds_and_ties) {
  struct weft_topo *t = load("nic-speeds.xml");
  enum weft_topo_path type;
  ck_assert_int_eq(t->nnics, 4);
  /* Equal distance (PIX), 100 vs 400 Gb/s: the faster, though numbered
   * second. */
  ck_assert_int_eq(gpu_nic(t, 0, &type), 1);
  ck_assert_int_eq(type, WEFT_PATH_PIX);
  /* A tie (two 200 Gb/s PIX NICs): NCCL's spread by device number, GPU
   * dev 1 to the second, dev 2 to the first. The 400 Gb/s NIC beyond the
   * CPU (PHB) has the wider bottleneck but is not the nearest. */
  ck_assert_int_eq(gpu_nic(t, 1, &type), 3);
  ck_assert_int_eq(type, WEFT_PATH_PIX);
  ck_assert_int_eq(gpu_nic(t, 2, &type), 2);
  int nics[3];
  ck_assert_int_eq(weft_topo_nearest_nics(t, nics), ncclSuccess);
  ck_assert_int_eq(nics[0], 1);
  ck_assert_int_eq(nics[1], 3);
  ck_assert_int_eq(nics[2], 2);
  /* GPU2 says gdr="0": never, even at PIX. */
  ck_assert_int_eq(gdr(t, 1, 3), 1);
  ck_assert_int_eq(gdr(t, 2, 2), 0);
  weft_topo_free(t);
}
END_TEST

START_TEST(nic_none) {
  struct weft_topo *t = load("no-nic.xml");
  enum weft_topo_path type = WEFT_PATH_LOC;
  int allowed;
  ck_assert_int_eq(gpu_nic(t, 0, &type), -1);
  ck_assert_int_eq(type, WEFT_PATH_NET);
  ck_assert_int_eq(weft_topo_gpu_nic_gdr(t, 0, -1, &allowed), ncclInvalidArgument);
  weft_topo_free(t);
}
END_TEST

START_TEST(gdr_level_parse) {
  static const struct {
    const char *s;
    enum weft_topo_path want;
  } ok[] = {{"LOC", WEFT_PATH_LOC}, {"pix", WEFT_PATH_PIX}, {"PXB", WEFT_PATH_PXB},
            {"Phb", WEFT_PATH_PHB}, {"SYS", WEFT_PATH_SYS}, {"NVL", WEFT_PATH_NVL},
            {"NVB", WEFT_PATH_NVL}, {"C2C", WEFT_PATH_NVL}, {"PXN", WEFT_PATH_PXB},
            {"P2C", WEFT_PATH_PXB}, {"0", WEFT_PATH_LOC},   {"1", WEFT_PATH_PIX},
            {"2", WEFT_PATH_PXB},   {"3", WEFT_PATH_PHB},   {"4", WEFT_PATH_SYS},
            {"5", WEFT_PATH_SYS}};
  for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
    enum weft_topo_path p = WEFT_PATH_COUNT;
    ck_assert_int_eq(weft_topo_level_parse("NCCL_NET_GDR_LEVEL", ok[i].s, &p), ncclSuccess);
    ck_assert_msg(p == ok[i].want, "%s read as %s", ok[i].s, weft_topo_path_name(p));
  }
  static const char *const bad[] = {"PXC", "6", "-1", "", "PXB ", "NET", "12"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    enum weft_topo_path p = WEFT_PATH_COUNT;
    ck_assert_int_eq(weft_topo_level_parse("NCCL_NET_GDR_LEVEL", bad[i], &p), ncclInvalidUsage);
    ck_assert_int_eq(p, WEFT_PATH_COUNT); /* untouched */
    const char *why = weft_last_error();
    ck_assert_msg(strstr(why, "NCCL_NET_GDR_LEVEL=") &&
                      strstr(why, "LOC, NVL, PIX, PXB, PHB, SYS") && strstr(why, "0..5"),
                  "error for '%s' does not name the variable and the values: %s", bad[i], why);
  }
}
END_TEST

/* NCCL_NET_GDR_LEVEL reaches the policy (main sets it before any test:
 * parameters are read once per process, and CK_FORK=no runs every test in
 * one). */
START_TEST(gdr_level_env) {
  struct weft_topo *t = load("nic-distances.xml");
  struct weft_topo_policy p;
  ck_assert_int_eq(weft_topo_policy_from_env(t, &p), ncclSuccess);
  ck_assert_int_eq(p.gdr_level, WEFT_PATH_PHB);
  t->policy = p;
  ck_assert_int_eq(gdr(t, 2, 0), 1);
  ck_assert_int_eq(gdr(t, 3, 0), 0);
  weft_topo_free(t);
}
END_TEST

/* NVML's far ends: a bus id a VM hides (FFFFFFFF:FF:FF.0) behind an
 * NVSwitch link becomes the one hidden NVSwitch; behind a GPU's, or of
 * unknown kind, the link cannot be placed; a real bus id stays. */
START_TEST(nvml_far_ends) {
  struct weft_topo *t = load("no-nic.xml");
  char target[WEFT_TOPO_BUSID_LEN];
  ck_assert_uint_eq(weft_topo_nvml_far(t, "FFFFFFFF:FF:FF.0", 2, target), 0x068000);
  ck_assert_str_eq(target, WEFT_TOPO_HIDDEN_NVS);
  ck_assert_uint_eq(weft_topo_nvml_far(t, "FFFFFFFF:FF:FF.0", 0, target), 0);
  ck_assert_uint_eq(weft_topo_nvml_far(t, "FFFFFFFF:FF:FF.0", -1, target), 0);
  ck_assert_uint_eq(weft_topo_nvml_far(t, "00000000:42:00.0", -1, target), 0x030200);
  ck_assert_str_eq(target, "0000:42:00.0");
  ck_assert_uint_eq(weft_topo_nvml_far(t, "00000000:F5:00.0", 2, target), 0x068000);
  ck_assert_str_eq(target, "0000:f5:00.0");
  weft_topo_free(t);
}
END_TEST

/* The VM's GPUs, linked only through the hidden NVSwitch: an NVLink path
 * (18 links) and P2P, where PCIe alone (PHB) would have given SHM. */
START_TEST(vm_hidden_nvswitch) {
  struct weft_topo *t = load("vm-hidden-nvswitch.xml");
  ck_assert_int_eq(t->ngpus, 2);
  ck_assert_str_eq(path(t, 0, 1), "NVL");
  ck_assert_int_eq(weft_topo_gpu_path(t, 0, 1)->nvlinks, 18);
  ck_assert_int_eq(transport(t, 0, 1), WEFT_TRANSPORT_P2P);
  ck_assert_int_eq(transport(t, 1, 0), WEFT_TRANSPORT_P2P);
  weft_topo_free(t);
}
END_TEST

int main(void) {
  setenv("NCCL_NET_GDR_LEVEL", "PHB", 1); /* gdr_level_env */
  Suite *s = suite_create("topo");
  TCase *tc = tcase_create("xml");
  tcase_add_test(tc, hgx_nvswitch);
  tcase_add_test(tc, nvml_far_ends);
  tcase_add_test(tc, vm_hidden_nvswitch);
  tcase_add_test(tc, azure_pci_classes);
  tcase_add_test(tc, two_socket_ring);
  tcase_add_test(tc, switch_pairs);
  tcase_add_test(tc, no_nic);
  tcase_add_test(tc, malformed_line);
  tcase_add_loop_test(tc, hostile_files, 0, (int)(sizeof(bad_files) / sizeof(bad_files[0])));
  tcase_add_test(tc, deep_nesting);
  tcase_add_test(tc, two_hosts_net);
  tcase_add_test(tc, p2p_level_parse);
  tcase_add_test(tc, dump_round_trip);
  tcase_add_test(tc, busid_lookup);
  tcase_add_test(tc, nic_distances);
  tcase_add_test(tc, nic_speeds_and_ties);
  tcase_add_test(tc, nic_none);
  tcase_add_test(tc, gdr_level_parse);
  tcase_add_test(tc, gdr_level_env);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
