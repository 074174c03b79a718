/* Issue 17's placement decisions, without a GPU or a NIC:
 *   - where a GPU rank's net link keeps its slots (transport/net/net_gdr.h):
 *     every combination of the network's memory types, the topology's
 *     GPUDirect RDMA verdict, NCCL_NET_GDR_READ and the direction, and the
 *     reason each answer gives;
 *   - the topology's verdict for a network device it cannot place
 *     (weft_topo_unplaced_nic_gdr: SYS, so NCCL_NET_GDR_LEVEL=SYS only);
 *   - the NIC a host rank takes (weft_topo_cpu_nic) on the HGX H100 XML
 *     (4 NICs per NUMA node) and on nic-speeds.xml (the fastest wins);
 *   - a FIFO whose receive slots are "device" slots (net_fifo.h): its
 *     slots are registered as CUDA memory and each receive is flushed
 *     before its tail is published. No GPU here, so the slots are host
 *     memory and the network is the socket network (which moves the bytes
 *     for real) behind a table that takes the CUDA registration and whose
 *     iflush requests finish only when the test releases them: the one
 *     part of GPUDirect RDMA this machine cannot give. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "topo/topo.h"
#include "transport/net/net.h"
#include "transport/net/net_fifo.h"
#include "transport/net/net_gdr.h"
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

/* ---- Flush before publish ------------------------------------------------ */

/* The socket network, but for registrations of type CUDA (taken as host
 * memory) and flushes, which the test finishes by hand. */
static struct {
  int cuda_regs;   /* reg_mr calls of type WEFT_NET_PTR_CUDA */
  int flushes;     /* iflush calls */
  int last_size;   /* the last iflush's size */
  void *last_data; /* and its buffer */
  void *last_mh;
  int released;   /* flushes the test let finish */
  int null_flush; /* 1: iflush returns no request (nothing to flush) */
} fn;
static char flush_tokens[64];

static ncclResult_t fn_reg_mr(void *comm, void *data, size_t size, int type, void **mh) {
  if (type == WEFT_NET_PTR_CUDA) fn.cuda_regs++;
  return weft_net_socket.reg_mr(comm, data, size, WEFT_NET_PTR_HOST, mh);
}

static ncclResult_t fn_iflush(void *comm, int n, void **data, int *sizes, void **mhandles,
                              void **request) {
  (void)comm;
  ck_assert_int_eq(n, 1);
  fn.last_data = data[0];
  fn.last_size = sizes[0];
  fn.last_mh = mhandles[0];
  *request = fn.null_flush ? NULL : &flush_tokens[fn.flushes % 64];
  fn.flushes++;
  return ncclSuccess;
}

static ncclResult_t fn_test(void *request, int *done, size_t *sizes) {
  char *r = request;
  if (r >= flush_tokens && r < flush_tokens + sizeof(flush_tokens)) {
    *done = (r - flush_tokens) < fn.released;
    if (sizes != NULL) sizes[0] = 0;
    return ncclSuccess;
  }
  return weft_net_socket.test(request, done, sizes);
}

static struct weft_net_ops flush_net;

#define FSLOTS 4
#define FSLOT 4096

struct fpair {
  struct weft_net_fifo send, recv;
  void *smem, *rmem;
  char *dslots; /* the receive side's "device" slots */
};

static void fpair_open(struct fpair *p) {
  ck_assert_int_eq(weft_net_socket.init(), ncclSuccess);
  flush_net = weft_net_socket;
  flush_net.reg_mr = fn_reg_mr;
  flush_net.iflush = fn_iflush;
  flush_net.test = fn_test;
  memset(&fn, 0, sizeof(fn));
  p->smem = aligned_alloc(4096, weft_net_fifo_bytes(FSLOTS, FSLOT));
  p->rmem = aligned_alloc(4096, weft_net_fifo_ctrl_bytes(FSLOTS));
  p->dslots = aligned_alloc(4096, FSLOTS * FSLOT);
  ck_assert(p->smem != NULL && p->rmem != NULL && p->dslots != NULL);
  char handle[WEFT_NET_HANDLE_BYTES];
  ck_assert_int_eq(
      weft_net_fifo_open(&flush_net, 0, 0, 1, 0, FSLOTS, FSLOT, p->rmem, handle, &p->recv),
      ncclSuccess);
  weft_net_fifo_use_device_slots(&p->recv, p->dslots);
  ck_assert_int_eq(
      weft_net_fifo_open(&weft_net_socket, 0, 1, 1, 0, FSLOTS, FSLOT, p->smem, NULL, &p->send),
      ncclSuccess);
  int sd = 0, rd = 0;
  for (int i = 0; i < 100000 && !(sd && rd); i++) {
    if (!sd) ck_assert_int_eq(weft_net_fifo_connect(&p->send, handle, &sd), ncclSuccess);
    if (!rd) ck_assert_int_eq(weft_net_fifo_connect(&p->recv, NULL, &rd), ncclSuccess);
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
  }
  ck_assert_msg(sd && rd, "the loopback FIFO did not connect");
  ck_assert_int_eq(p->recv.slot_type, WEFT_NET_PTR_CUDA);
  ck_assert_int_eq(fn.cuda_regs, 1); /* the receive slots, as CUDA memory */
}

static void fpair_close(struct fpair *p) {
  weft_net_fifo_close(&p->send);
  weft_net_fifo_close(&p->recv);
  free(p->smem);
  free(p->rmem);
  free(p->dslots);
}

/* The sending kernel's part: slot pos % FSLOTS gets n bytes of pos + j. */
static void fill(struct fpair *p, uint64_t pos, uint32_t n) {
  unsigned char *slot = (unsigned char *)p->send.slots + (pos % FSLOTS) * FSLOT;
  for (uint32_t j = 0; j < n; j++) slot[j] = (unsigned char)(pos + j);
  p->send.sizes[pos % FSLOTS] = n;
  __atomic_store_n(p->send.tail, pos + 1, __ATOMIC_RELEASE);
}

/* Runs both ends' progress until cond holds (10 s at most). */
#define PUMP_UNTIL(p, target, cond)                                               \
  do {                                                                            \
    int moved_;                                                                   \
    for (int i_ = 0; i_ < 100000 && !(cond); i_++) {                              \
      ck_assert_int_eq(weft_net_fifo_progress(&(p)->send, (target), &moved_), 0); \
      ck_assert_int_eq(weft_net_fifo_progress(&(p)->recv, (target), &moved_), 0); \
      struct timespec ts_ = {0, 100000};                                          \
      nanosleep(&ts_, NULL);                                                      \
    }                                                                             \
    ck_assert_msg((cond), "timed out waiting for " #cond);                        \
  } while (0)

static uint64_t tail_of(const struct weft_net_fifo *f) {
  return __atomic_load_n(f->tail, __ATOMIC_ACQUIRE);
}

/* A receive into device slots is flushed (its slot, its size, the slots'
 * registration) and published only when the flush finished; an empty one
 * needs no flush. */
START_TEST(flush_before_tail) {
  struct fpair p;
  fpair_open(&p);
  fill(&p, 0, 1000);
  PUMP_UNTIL(&p, 1, fn.flushes == 1);
  ck_assert_ptr_eq(fn.last_data, p.dslots);
  ck_assert_int_eq(fn.last_size, 1000);
  ck_assert_ptr_eq(fn.last_mh, p.recv.mh);
  /* Landed but not flushed: the kernel must not see it yet. */
  int moved;
  for (int i = 0; i < 50; i++) {
    ck_assert_int_eq(weft_net_fifo_progress(&p.recv, 1, &moved), ncclSuccess);
    ck_assert_uint_eq(tail_of(&p.recv), 0);
  }
  for (int j = 0; j < 1000; j++) ck_assert_uint_eq((unsigned char)p.dslots[j], (unsigned char)j);
  fn.released = 1;
  PUMP_UNTIL(&p, 1, tail_of(&p.recv) == 1);
  ck_assert_uint_eq(p.recv.flushes, 1);
  /* Two more: a full slot, then an empty message (no flush). */
  __atomic_store_n(p.recv.head, 1, __ATOMIC_RELEASE);
  fill(&p, 1, FSLOT);
  fill(&p, 2, 0);
  PUMP_UNTIL(&p, 3, fn.flushes == 2);
  ck_assert_int_eq(fn.last_size, FSLOT);
  ck_assert_ptr_eq(fn.last_data, p.dslots + FSLOT);
  ck_assert_uint_eq(tail_of(&p.recv), 1);
  fn.released = 2;
  PUMP_UNTIL(&p, 3, tail_of(&p.recv) == 3);
  ck_assert_int_eq(fn.flushes, 2);
  /* A network with nothing to flush: published at once. */
  fn.null_flush = 1;
  fill(&p, 3, 77);
  PUMP_UNTIL(&p, 4, tail_of(&p.recv) == 4);
  ck_assert_int_eq(fn.flushes, 3);
  ck_assert_uint_eq(p.recv.flushes, 2); /* requests waited on */
  PUMP_UNTIL(&p, 4, __atomic_load_n(p.send.head, __ATOMIC_ACQUIRE) == 4);
  fpair_close(&p);
}
END_TEST

int main(void) {
  Suite *s = suite_create("net_gdr");
  TCase *tc = tcase_create("slots");
  tcase_add_test(tc, decision_matrix);
  tcase_add_test(tc, decision_reasons);
  tcase_add_test(tc, unplaced_device);
  suite_add_tcase(s, tc);
  tc = tcase_create("flush");
  tcase_add_test(tc, flush_before_tail);
  suite_add_tcase(s, tc);
  tc = tcase_create("host nic");
  tcase_add_test(tc, host_nic_hgx);
  tcase_add_test(tc, host_nic_speed_and_none);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
