/* Issue 17's placement decisions, without a GPU or a NIC:
 *   - where a GPU rank's net link keeps its slots (transport/net/net_gdr.h):
 *     every combination of the network's memory types, the topology's
 *     GPUDirect RDMA verdict, NCCL_NET_GDR_READ and the direction, and the
 *     reason each answer gives;
 *   - the topology's verdict for a network device it cannot place
 *     (weft_topo_unplaced_nic_gdr: SYS, so NCCL_NET_GDR_LEVEL=SYS only);
 *   - the NIC a host rank takes (weft_topo_cpu_nic) on the HGX H100 XML
 *     (4 NICs per NUMA node) and on nic-speeds.xml (the fastest wins). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"
#include "transport/net/net.h"
#include "transport/net/net_gdr.h"

static struct weft_topo *load(const char *file) {
  char path[1024];
  const char *dir = getenv("WEFT_TOPO_FIXTURES");
  snprintf(path, sizeof(path), "%s/%s", dir ? dir : "tests/topo", file);
  struct weft_topo *t = NULL;
  ck_assert_int_eq(weft_topo_load_xml(path, &t), ncclSuccess);
  ck_assert_ptr_nonnull(t);
  return t;
}

/* The whole matrix: device memory exactly where the network takes CUDA
 * pointers, the topology allows GDR, and the way is a receive or a send
 * that NCCL_NET_GDR_READ lets read device memory. */
START_TEST(decision_matrix) {
  static const int ptrs[] = {WEFT_NET_PTR_HOST, WEFT_NET_PTR_HOST | WEFT_NET_PTR_CUDA,
                             WEFT_NET_PTR_HOST | WEFT_NET_PTR_DMABUF,
                             WEFT_NET_PTR_HOST | WEFT_NET_PTR_CUDA | WEFT_NET_PTR_DMABUF};
  int ndevice = 0;
  for (int pi = 0; pi < 4; pi++)
    for (int topo = 0; topo <= 1; topo++)
      for (int gdr_read = 0; gdr_read <= 1; gdr_read++)
        for (int is_send = 0; is_send <= 1; is_send++) {
          struct weft_net_gdr_in in = {.net = "IB",
                                       .ptr_support = ptrs[pi],
                                       .topo_gdr = topo,
                                       .topo_why = "GPU-NIC path PXB, NCCL_NET_GDR_LEVEL=PXB",
                                       .gdr_read = gdr_read};
          char why[256] = "";
          int want = (ptrs[pi] & WEFT_NET_PTR_CUDA) && topo && (!is_send || gdr_read);
          int got = weft_net_gdr_device_slots(&in, is_send, why, sizeof(why));
          ck_assert_msg(got == want, "ptr 0x%x topo %d gdr_read %d send %d: %d, expected %d (%s)",
                        ptrs[pi], topo, gdr_read, is_send, got, want, why);
          ck_assert_msg(why[0] != '\0', "no reason given");
          ndevice += got;
        }
  /* 2 memory types x receive (2 gdr_read values) + send (gdr_read 1). */
  ck_assert_int_eq(ndevice, 6);
}
END_TEST

/* Each answer says why, naming what decided it. */
START_TEST(decision_reasons) {
  struct weft_net_gdr_in in = {.net = "TestNet",
                               .ptr_support = WEFT_NET_PTR_HOST,
                               .topo_gdr = 1,
                               .topo_why = "GPU-NIC path PIX, NCCL_NET_GDR_LEVEL=PXB",
                               .gdr_read = 1};
  char why[256];
  ck_assert_int_eq(weft_net_gdr_device_slots(&in, 0, why, sizeof(why)), 0);
  ck_assert_str_eq(why, "net TestNet does not support CUDA pointers");
  in.ptr_support = WEFT_NET_PTR_HOST | WEFT_NET_PTR_DMABUF;
  ck_assert_int_eq(weft_net_gdr_device_slots(&in, 0, why, sizeof(why)), 0);
  ck_assert_ptr_nonnull(strstr(why, "only as a dma-buf"));
  in.ptr_support = WEFT_NET_PTR_HOST | WEFT_NET_PTR_CUDA;
  ck_assert_int_eq(weft_net_gdr_device_slots(&in, 0, why, sizeof(why)), 1);
  ck_assert_str_eq(why,
                   "GDR allowed (GPU-NIC path PIX, NCCL_NET_GDR_LEVEL=PXB), net TestNet "
                   "supports CUDA pointers");
  in.gdr_read = 0;
  ck_assert_int_eq(weft_net_gdr_device_slots(&in, 1, why, sizeof(why)), 0);
  ck_assert_str_eq(why, "NCCL_NET_GDR_READ=0: sends do not read device memory");
  in.topo_gdr = 0;
  in.topo_why = "GPU-NIC path SYS, NCCL_NET_GDR_LEVEL=PXB";
  ck_assert_int_eq(weft_net_gdr_device_slots(&in, 0, why, sizeof(why)), 0);
  ck_assert_str_eq(why, "GDR not allowed (GPU-NIC path SYS, NCCL_NET_GDR_LEVEL=PXB)");
}
END_TEST

/* A device the topology cannot place counts as SYS: only a level raised
 * to SYS allows it, and never for a GPU whose XML says gdr="0". */
START_TEST(unplaced_device) {
  struct weft_topo *t = load("nic-speeds.xml");
  static const struct {
    enum weft_topo_path level;
    int want;
  } rows[] = {{WEFT_PATH_LOC, 0},
              {WEFT_PATH_PIX, 0},
              {WEFT_PATH_PXB, 0},
              {WEFT_PATH_PHB, 0},
              {WEFT_PATH_SYS, 1}};
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    t->policy.gdr_level = rows[i].level;
    ck_assert_msg(weft_topo_unplaced_nic_gdr(t, 0) == rows[i].want, "GPU 0 at level %s",
                  weft_topo_path_name(rows[i].level));
    ck_assert_msg(weft_topo_unplaced_nic_gdr(t, -1) == rows[i].want, "no GPU at level %s",
                  weft_topo_path_name(rows[i].level));
    ck_assert_msg(weft_topo_unplaced_nic_gdr(t, 2) == 0, "GPU 2 (gdr=0) at level %s",
                  weft_topo_path_name(rows[i].level));
  }
  weft_topo_free(t);
  t = load("no-nic.xml");
  t->policy.gdr_level = WEFT_PATH_PXB; /* the default */
  ck_assert_int_eq(weft_topo_unplaced_nic_gdr(t, 0), 0);
  t->policy.gdr_level = WEFT_PATH_SYS;
  ck_assert_int_eq(weft_topo_unplaced_nic_gdr(t, 0), 1);
  weft_topo_free(t);
}
END_TEST

static const char *cpu_nic_name(const struct weft_topo *t, int numa, int spread, int *local) {
  int nic = -2;
  ck_assert_int_eq(weft_topo_cpu_nic(t, numa, spread, &nic, local), ncclSuccess);
  ck_assert_int_ge(nic, 0);
  ck_assert_int_lt(nic, t->nnics);
  return t->nodes[t->nics[nic]].name;
}

/* HGX H100: mlx5_4..7 hang under NUMA node 0, mlx5_0..3 under node 1, all
 * 200 Gb/s. The ranks of a node spread over its four in NIC order; a
 * fifth wraps; a node with no NIC takes any. */
START_TEST(host_nic_hgx) {
  struct weft_topo *t = load("hgx-h100-8gpu-8nic.xml");
  ck_assert_int_eq(t->nnics, 8);
  static const char *node0[] = {"mlx5_4", "mlx5_5", "mlx5_6", "mlx5_7"};
  static const char *node1[] = {"mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"};
  int local = -1;
  for (int r = 0; r < 4; r++) {
    ck_assert_str_eq(cpu_nic_name(t, 0, r, &local), node0[r]);
    ck_assert_int_eq(local, 1);
    ck_assert_str_eq(cpu_nic_name(t, 1, r, &local), node1[r]);
    ck_assert_int_eq(local, 1);
  }
  ck_assert_str_eq(cpu_nic_name(t, 0, 4, &local), "mlx5_4");
  ck_assert_str_eq(cpu_nic_name(t, 1, 6, &local), "mlx5_2");
  /* No NIC on node 7 (or an unknown node): the fastest of all, spread. */
  ck_assert_str_eq(cpu_nic_name(t, 7, 0, &local), "mlx5_0");
  ck_assert_int_eq(local, 0);
  ck_assert_str_eq(cpu_nic_name(t, -1, 5, &local), "mlx5_5");
  ck_assert_int_eq(local, 0);
  weft_topo_free(t);
}
END_TEST

/* The fastest NIC of the node wins (mlx5_1, 400 Gb/s) whatever the rank;
 * a topology without a NIC has none to give. */
START_TEST(host_nic_speed_and_none) {
  struct weft_topo *t = load("nic-speeds.xml");
  int local = -1;
  for (int r = 0; r < 3; r++) ck_assert_str_eq(cpu_nic_name(t, 0, r, &local), "mlx5_1");
  ck_assert_int_eq(local, 1);
  weft_topo_free(t);
  t = load("no-nic.xml");
  int nic = 5;
  ck_assert_int_eq(weft_topo_cpu_nic(t, 0, 0, &nic, &local), ncclSuccess);
  ck_assert_int_eq(nic, -1);
  ck_assert_int_eq(local, 0);
  weft_topo_free(t);
}
END_TEST

int main(void) {
  Suite *s = suite_create("net_gdr");
  TCase *tc = tcase_create("slots");
  tcase_add_test(tc, decision_matrix);
  tcase_add_test(tc, decision_reasons);
  tcase_add_test(tc, unplaced_device);
  suite_add_tcase(s, tc);
  tc = tcase_create("host nic");
  tcase_add_test(tc, host_nic_hgx);
  tcase_add_test(tc, host_nic_speed_and_none);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
