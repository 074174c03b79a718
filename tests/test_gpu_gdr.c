/* GPU suite, issue 17: GPU ranks on simulated hosts (two processes, each
 * its own NCCL_HOSTID) whose net links keep their slots in device memory,
 * carried by TestNet (tests/net_plugin/) with TESTNET_CUDA_PTRS=1: it
 * takes CUDA pointers, stages them through host copies and counts its
 * flushes. The machine's topology has no NIC TestNet names, so the rule
 * for a device the topology cannot place decides (docs/NETWORK.md,
 * "Device-memory slots"): NCCL_NET_GDR_LEVEL=SYS allows it, the default
 * (PXB) and LOC do not. Cases (each a worker process with its own
 * environment):
 *   device     level SYS: both ways in device memory, receives flushed;
 *   gdr_read0  level SYS, NCCL_NET_GDR_READ=0: receives in device memory,
 *              sends from host memory;
 *   default    level unset (PXB): host memory both ways, nothing flushed;
 *   loc        level LOC: host memory both ways, nothing flushed.
 * Each runs AllReduce (float sum, 1031 and 1000003 elements, in and out of
 * place; half avg), AllGather and a send/recv ring, every element checked
 * against gpu_ref's references, and checks the INFO log: the links are
 * NET/TestNet/proxy, each way's memory is the expected one, and the recv
 * comms' flush counts add up to more than 0 exactly where receives land
 * in device memory. Ranks share GPU 0 when there is one, so the suite
 * needs MPS there (else it skips, 77), as 'gpu net' does.
 *
 * Usage: test_gpu_gdr (every case), test_gpu_gdr --worker NAME. */
#include <check.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_case.h"
#include "gpu_harness.h"
#include "gpu_ref.h"
#include "nccl.h"

#define RUN_TIMEOUT_S 240
#define LARGE_COUNT ((size_t)1000003)
#define NPROCS 2

static size_t cap_bytes(void) {
  return (LARGE_COUNT + 2 * REF_MAX_RANKS + GCASE_GUARD) * 8;
}

static void gdr_cases(struct run *ru) {
  static const size_t counts[] = {1031, LARGE_COUNT};
  int n = ru->nranks;
  for (int ci = 0; ci < 2 && !ru->fatal; ci++) {
    size_t count = counts[ci];
    ref_build(ru->t, dtype_find(ncclFloat32), ncclSum, n, ru->salt++);
    for (int inplace = 0; inplace <= 1; inplace++) {
      gcase_run(ru, C_ALLREDUCE, ncclSum, count, 0, inplace);
      gcase_run(ru, C_ALLGATHER, ncclSum, (count / (size_t)n) | 1, 0, inplace);
    }
    gcase_run(ru, C_RING, ncclSum, count, 0, 0);
  }
  ref_build(ru->t, dtype_find(ncclFloat16), ncclAvg, n, ru->salt++);
  gcase_run(ru, C_ALLREDUCE, ncclAvg, LARGE_COUNT, 0, 0);
}

static int gdr_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  char host[32];
  snprintf(host, sizeof host, "weft-gdr-host-%d", rank);
  setenv("NCCL_HOSTID", host, 1);
  return gcase_comm_rank("gdr", rank, nranks, id, cap_bytes(), gdr_cases);
}

struct gdr_case {
  const char *name;
  const char *level;    /* NCCL_NET_GDR_LEVEL, NULL: unset */
  const char *gdr_read; /* NCCL_NET_GDR_READ, NULL: unset */
  const char *recv_mem; /* "device" or "host" */
  const char *send_mem;
};

static const struct gdr_case cases[] = {
    {"device", "SYS", NULL, "device", "device"},
    {"gdr_read0", "SYS", "0", "device", "host"},
    {"default", NULL, NULL, "host", "host"},
    {"loc", "LOC", NULL, "host", "host"},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

/* The flushes every recv comm reported when it closed, added up; -1 when
 * no recv comm reported (the plugin's close lines are missing). */
static long long flushes_logged(const char *logs) {
  static const char key[] = "recv comm closed after ";
  long long total = -1;
  for (const char *p = strstr(logs, key); p != NULL; p = strstr(p + 1, key)) {
    unsigned long long bytes = 0, msgs = 0, flushes = 0;
    if (sscanf(p + strlen(key), "%llu bytes in %llu messages, %llu flushes", &bytes, &msgs,
               &flushes) != 3)
      continue;
    total = (total < 0 ? 0 : total) + (long long)flushes;
  }
  return total;
}

/* What the ranks' logs must say for case c; prints a FAIL line per miss. */
static int logs_check(const struct gdr_case *c, const char *logs) {
  int bad = 0;
  char want[128];
  const char *lines[] = {"rank 0 -> rank 1 channel 0 via NET/TestNet/proxy",
                         "rank 1 -> rank 0 channel 0 via NET/TestNet/proxy", NULL, NULL};
  snprintf(want, sizeof want, "net links' receive slots in %s memory", c->recv_mem);
  lines[2] = strdup(want);
  snprintf(want, sizeof want, "net links' send slots in %s memory", c->send_mem);
  lines[3] = strdup(want);
  for (int i = 0; i < 4; i++)
    if (lines[i] == NULL || strstr(logs, lines[i]) == NULL) {
      fprintf(stderr, "FAIL %s: the INFO log does not say \"%s\"\n", c->name,
              lines[i] ? lines[i] : "?");
      bad = 1;
    }
  free((char *)lines[2]);
  free((char *)lines[3]);
  long long flushes = flushes_logged(logs);
  int device_recv = strcmp(c->recv_mem, "device") == 0;
  if (flushes < 0 || (device_recv ? flushes == 0 : flushes != 0)) {
    fprintf(stderr,
            "FAIL %s: TestNet's recv comms logged %lld flushes of device memory "
            "(-1: none reported); expected %s\n",
            c->name, flushes, device_recv ? "> 0" : "0");
    bad = 1;
  }
  return bad;
}

static int worker_main(const char *name) {
  for (int i = 0; i < NCASES; i++) {
    if (strcmp(cases[i].name, name) != 0) continue;
    char why[8192], *logs = NULL;
    int rc = harness_procs_logged(NPROCS, RUN_TIMEOUT_S, "INIT,NET", gdr_rank, NULL, &logs, why,
                                  sizeof why);
    if (rc != 0) fprintf(stderr, "FAIL %s: %s\n", name, why);
    int bad = logs == NULL ? 1 : logs_check(&cases[i], logs);
    free(logs);
    return rc != 0 || bad;
  }
  fprintf(stderr, "no case %s\n", name);
  return 2;
}

START_TEST(test_case) {
  const struct gdr_case *c = &cases[_i];
  const char *dir = getenv("WEFT_TEST_NET_PLUGIN_DIR");
  ck_assert_msg(dir != NULL, "WEFT_TEST_NET_PLUGIN_DIR is not set (meson sets it)");
  char plugin[1200], level[64], gdr_read[64];
  snprintf(plugin, sizeof plugin, "NCCL_NET_PLUGIN=%s/libnccl-net-testnet-v11.so", dir);
  snprintf(level, sizeof level, c->level ? "NCCL_NET_GDR_LEVEL=%s" : "NCCL_NET_GDR_LEVEL",
           c->level ? c->level : "");
  snprintf(gdr_read, sizeof gdr_read, c->gdr_read ? "NCCL_NET_GDR_READ=%s" : "NCCL_NET_GDR_READ",
           c->gdr_read ? c->gdr_read : "");
  char *argv[] = {"test_gpu_gdr", "--worker", (char *)c->name, NULL};
  const char *env[] = {"WEFT_DEVICE",
                       "WEFT_CUDA_ENGINE=1",
                       "WEFT_NET_GPU=1",
                       "NCCL_HOSTID",
                       "NCCL_NET=TestNet",
                       "TESTNET_CUDA_PTRS=1",
                       "NCCL_TOPO_FILE",
                       plugin,
                       level,
                       gdr_read,
                       NULL};
  char why[3000];
  int rc = gpu_worker(argv, env, RUN_TIMEOUT_S + 30, why, sizeof why);
  ck_assert_msg(rc == 0, "case %s failed: %s", c->name, why);
}
END_TEST

int main(int argc, char **argv) {
  setenv("WEFT_CUDA_ENGINE", "1", 1);
  setenv("WEFT_TIMEOUT", "30", 0);
  if (argc == 3 && strcmp(argv[1], "--worker") == 0) return worker_main(argv[2]);
  return gpu_procs_suite_main("gpu_gdr", NPROCS, test_case, NCASES);
}
