/* GPU suite: GPU ranks on simulated hosts (NCCL_HOSTID per process) run the
 * CUDA engine's kernels over net links that the proxy thread carries over
 * the socket network (docs/CUDA.md, "GPU ranks on other hosts"):
 *   procs N    N processes, one rank each, each its own host (N = 2, 4);
 *   threads    2 processes (hosts) of 2 rank-threads each (4 ranks; the
 *              two ranks of a process talk over device FIFOs, the others
 *              over the net);
 *   graph      2 processes: an AllReduce captured in a CUDA graph, replayed
 *              with new inputs each time (the proxy's ops come from a host
 *              function in the graph);
 *   killed     2 processes: rank 1 exits while rank 0's AllReduce waits on
 *              it; rank 0 gets an error from ncclCommGetAsyncError well
 *              within WEFT_TIMEOUT.
 * Each case also checks the INFO log: the links between the hosts are
 * "NET/<network>/proxy". Collectives, send/recv patterns and AlltoAll are
 * checked against gpu_ref's references (gpu_case.c). Ranks of different
 * processes share GPU 0 when there is one, so their kernels run at once
 * only under MPS: with one GPU and no MPS the suite skips (77).
 *
 * Usage: test_gpu_net (every case), test_gpu_net --worker NAME (one case in
 * this process, for a debugger). */
#include <check.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_case.h"
#include "gpu_harness.h"
#include "gpu_ref.h"
#include "nccl.h"

#define RUN_TIMEOUT_S 240
#define LARGE_COUNT ((size_t)1000003)

/* NCCL_HOSTID for process p: set before the library reads it. */
static void be_host(int p) {
  char host[32];
  snprintf(host, sizeof host, "weft-net-host-%d", p);
  setenv("NCCL_HOSTID", host, 1);
}

static size_t cap_bytes(void) {
  return (LARGE_COUNT + 2 * REF_MAX_RANKS + GCASE_GUARD) * 8;
}

static size_t per_rank(int n, enum coll k, size_t count) {
  int blocks = k == C_ALLGATHER || k == C_REDUCESCATTER || k == C_ALLTOALL || k == C_GATHER ||
               k == C_SCATTER;
  return blocks && count >= (size_t)n ? (count / (size_t)n) | 1 : count;
}

/* Every collective, send/recv pattern and AlltoAll: float sum at counts
 * 0..1000003 in and out of place, int32 max and half avg for the reducing
 * ones. */
static void net_cases(struct run *ru) {
  static const enum coll all[] = {C_ALLREDUCE, C_ALLGATHER, C_REDUCESCATTER, C_BROADCAST, C_REDUCE,
                                  C_RING,      C_ALLTOALL,  C_GATHER,        C_SCATTER};
  static const size_t counts[] = {0, 1, 1031, LARGE_COUNT};
  int n = ru->nranks, root = 0;
  for (int ci = 0; ci < 4 && !ru->fatal; ci++) {
    ref_build(ru->t, dtype_find(ncclFloat32), ncclSum, n, ru->salt++);
    for (int ki = 0; ki < 9; ki++)
      for (int inplace = 0; inplace <= 1; inplace++, root = (root + 1) % n)
        gcase_run(ru, all[ki], ncclSum, per_rank(n, all[ki], counts[ci]), root, inplace);
  }
  ref_build(ru->t, dtype_find(ncclFloat32), ncclSum, n, ru->salt++);
  gcase_run(ru, C_UNEQUAL, ncclSum, 0, 0, 0);
  gcase_run(ru, C_SELF, ncclSum, 1031, 0, 0);
  gcase_run(ru, C_LONE, ncclSum, 1031, 0, 0);
  ref_build(ru->t, dtype_find(ncclInt32), ncclMax, n, ru->salt++);
  gcase_run(ru, C_ALLREDUCE, ncclMax, 1031, 0, 0);
  gcase_run(ru, C_REDUCESCATTER, ncclMax, per_rank(n, C_REDUCESCATTER, 1031), 0, 1);
  ref_build(ru->t, dtype_find(ncclFloat16), ncclAvg, n, ru->salt++);
  gcase_run(ru, C_ALLREDUCE, ncclAvg, LARGE_COUNT, 0, 0);
}

/* One rank: joins, runs the cases, leaves. */
static int one_rank(int rank, int nranks, ncclUniqueId id) {
  return gcase_comm_rank("net", rank, nranks, id, cap_bytes(), net_cases);
}

static int procs_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  be_host(rank);
  return one_rank(rank, nranks, id);
}

/* ---- 2 processes x 2 rank-threads ---------------------------------------- */

struct thr {
  int rank;
  ncclUniqueId id;
  int rc;
};

static void *thr_main(void *arg) {
  struct thr *t = arg;
  t->rc = one_rank(t->rank, 4, t->id);
  return NULL;
}

static int threads_proc(int proc, int nprocs, ncclUniqueId id, void *arg) {
  (void)nprocs;
  (void)arg;
  be_host(proc);
  struct thr t[2];
  pthread_t th[2];
  for (int i = 0; i < 2; i++) {
    t[i] = (struct thr){proc * 2 + i, id, 1};
    HCHECK(pthread_create(&th[i], NULL, thr_main, &t[i]) == 0, "pthread_create");
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  return t[0].rc || t[1].rc;
}

/* A rank of a process that is a host of its own: its GPU, its
 * communicator and a stream. */
static int net_rank_open(int rank, int nranks, ncclUniqueId id, ncclComm_t *comm, cudaStream_t *s) {
  be_host(rank);
  int ndev = 0;
  HCUDA(cudaGetDeviceCount(&ndev));
  HCUDA(cudaSetDevice(rank % ndev));
  HNCCL(ncclCommInitRank(comm, nranks, id, rank));
  HCUDA(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  return 0;
}

/* ---- A captured AllReduce ------------------------------------------------- */

#define GRAPH_COUNT ((size_t)(4 << 20) / sizeof(float)) /* 4 MiB: many slots */
#define GRAPH_REPLAYS 5

static int graph_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  cudaStream_t s;
  int rc = net_rank_open(rank, nranks, id, &comm, &s);
  if (rc != 0) return rc;
  float *buf, *out, *h = malloc(GRAPH_COUNT * sizeof(float));
  HCHECK(h != NULL, "out of memory");
  HCUDA(cudaMalloc((void **)&buf, GRAPH_COUNT * sizeof(float)));
  HCUDA(cudaMalloc((void **)&out, GRAPH_COUNT * sizeof(float)));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  HCUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  HNCCL(ncclAllReduce(buf, out, GRAPH_COUNT, ncclFloat32, ncclSum, comm, s));
  HCUDA(cudaStreamEndCapture(s, &g));
  HCUDA(cudaGraphInstantiate(&ge, g, 0));
  for (int it = 0; it < GRAPH_REPLAYS; it++) {
    /* Rank r holds (r + 1) * (it + 1) + i % 7: small integers, exact. */
    for (size_t i = 0; i < GRAPH_COUNT; i++) h[i] = (float)((rank + 1) * (it + 1)) + (float)(i % 7);
    HCUDA(cudaMemcpyAsync(buf, h, GRAPH_COUNT * sizeof(float), cudaMemcpyHostToDevice, s));
    HCUDA(cudaMemsetAsync(out, 0xff, GRAPH_COUNT * sizeof(float), s));
    HCUDA(cudaGraphLaunch(ge, s));
    HCUDA(cudaMemcpyAsync(h, out, GRAPH_COUNT * sizeof(float), cudaMemcpyDeviceToHost, s));
    HCUDA(cudaStreamSynchronize(s));
    ncclResult_t async = ncclSuccess;
    HNCCL(ncclCommGetAsyncError(comm, &async));
    HCHECK(async == ncclSuccess, "replay %d: async error %d: %s", it, (int)async,
           ncclGetLastError(comm));
    float ranks_sum = (float)(nranks * (nranks + 1) / 2 * (it + 1));
    for (size_t i = 0; i < GRAPH_COUNT; i++) {
      float want = ranks_sum + (float)nranks * (float)(i % 7);
      HCHECK(h[i] == want, "replay %d: element %zu is %g, expected %g", it, i, h[i], want);
    }
  }
  HCUDA(cudaGraphExecDestroy(ge));
  HCUDA(cudaGraphDestroy(g));
  cudaFree(buf);
  cudaFree(out);
  free(h);
  cudaStreamDestroy(s);
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

/* ---- A peer that dies --------------------------------------------------- */

static int killed_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm;
  cudaStream_t s;
  int rc = net_rank_open(rank, nranks, id, &comm, &s);
  if (rc != 0) return rc;
  size_t count = (size_t)16 << 20;
  float *buf;
  HCUDA(cudaMalloc((void **)&buf, count * sizeof(float)));
  HNCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, s));
  HCUDA(cudaStreamSynchronize(s));
  if (rank == 1) _exit(0); /* gone while rank 0's next call waits on it */
  double t0 = harness_now();
  HNCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, s));
  ncclResult_t state = ncclSuccess;
  while (harness_now() - t0 < 25) {
    HNCCL(ncclCommGetAsyncError(comm, &state));
    if (state != ncclSuccess && state != ncclInProgress) break;
    harness_sleep_ms(20);
  }
  double took = harness_now() - t0;
  fprintf(stderr, "killed: rank 0 saw %d (%s) after %.2f s: %s\n", (int)state,
          ncclGetErrorString(state), took, ncclGetLastError(comm));
  HCHECK(state != ncclSuccess && state != ncclInProgress,
         "rank 0 saw no error %.0f s after its peer exited", took);
  ncclCommAbort(comm);
  return 0;
}

/* ---- Cases ------------------------------------------------------------------ */

struct net_case {
  const char *name;
  int nprocs;
  harness_rank_fn fn;
};

static const struct net_case cases[] = {
    {"procs2", 2, procs_rank}, {"procs4", 4, procs_rank},  {"threads", 2, threads_proc},
    {"graph", 2, graph_rank},  {"killed", 2, killed_rank},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static int worker_main(const char *name) {
  for (int i = 0; i < NCASES; i++) {
    if (strcmp(cases[i].name, name) != 0) continue;
    char why[8192], *logs = NULL;
    int rc = harness_procs_logged(cases[i].nprocs, RUN_TIMEOUT_S, "INIT,NET", cases[i].fn, NULL,
                                  &logs, why, sizeof why);
    if (rc != 0) fprintf(stderr, "FAIL %s: %s\n", name, why);
    /* Rank 0 and its first peer on another host (process). */
    int peer = cases[i].fn == threads_proc ? 2 : 1;
    char fwd[96], back[96];
    snprintf(fwd, sizeof fwd, "rank 0 -> rank %d channel 0 via NET/Socket/proxy", peer);
    snprintf(back, sizeof back, "rank %d -> rank 0 channel 0 via NET/Socket/proxy", peer);
    int via = logs != NULL && strstr(logs, fwd) != NULL && strstr(logs, back) != NULL;
    if (!via)
      fprintf(stderr, "FAIL %s: the INFO log does not say the links are NET/Socket/proxy\n", name);
    free(logs);
    return rc != 0 || !via;
  }
  fprintf(stderr, "no case %s\n", name);
  return 2;
}

START_TEST(test_case) {
  char *argv[] = {"test_gpu_net", "--worker", (char *)cases[_i].name, NULL};
  const char *env[] = {"WEFT_DEVICE", "WEFT_CUDA_ENGINE=1", "WEFT_NET_GPU=1", "NCCL_HOSTID", NULL};
  char why[3000];
  int rc = gpu_worker(argv, env, RUN_TIMEOUT_S + 30, why, sizeof why);
  ck_assert_msg(rc == 0, "case %s failed: %s", cases[_i].name, why);
}
END_TEST

int main(int argc, char **argv) {
  setenv("WEFT_CUDA_ENGINE", "1", 1);
  setenv("WEFT_TIMEOUT", "30", 0);
  if (argc == 3 && strcmp(argv[1], "--worker") == 0) return worker_main(argv[2]);
  return gpu_procs_suite_main("gpu_net", 4, test_case, NCASES);
}
