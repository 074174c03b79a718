/* GPU suite: weft collectives captured into CUDA graphs. Each rank captures
 * an AllReduce (1000003 floats, sum) and an AllGather (65537 floats per
 * rank) on its stream, the graph is instantiated and replayed three times
 * with new inputs copied in between (stream-ordered copies outside the
 * graph), outputs poisoned before each replay and checked after it. An
 * uncaptured AllReduce runs between the first and the second replay, so
 * graph replays and eager calls must share the communicator's connections.
 *
 * Two ways of driving ranks:
 *   threads  one thread per rank (ncclCommInitRank), each capturing its own
 *            stream; barriers keep every other CUDA call out of the capture
 *            window (global capture mode refuses unsafe calls from any
 *            thread);
 *   initall  ncclCommInitAll and one thread: either one graph per rank's
 *            stream, or one graph for all ranks (fork and join through
 *            events), the calls of all ranks in one ncclGroupStart/End.
 * Capture modes: global, thread-local and relaxed; with and without an
 * eager warm-up of the same calls before the capture (capturing a
 * communicator's very first call is the strict case).
 *
 * Inputs and references come from gpu_ref.c (exact float sums). Exits 77
 * without a GPU. */
#include <check.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "gpu_ref.h"
#include "nccl.h"
#include "suite_run.h"

#define AR_COUNT ((size_t)1000003)
#define AG_COUNT ((size_t)65537)
#define REPLAYS 3
#define MAX_RANKS 4
#define RUN_TIMEOUT_S 180

static const char *mode_name(enum cudaStreamCaptureMode m) {
  switch (m) {
    case cudaStreamCaptureModeGlobal: return "global";
    case cudaStreamCaptureModeThreadLocal: return "thread-local";
    default: return "relaxed";
  }
}

/* ---- One rank's state ---------------------------------------------------------- */

struct grank {
  int rank, nranks, dev;
  ncclComm_t comm;
  cudaStream_t stream;
  float *d_in, *d_ar, *d_ag; /* input, AllReduce output, AllGather output */
  float *h_in, *h_ar, *h_ag;
  struct ref_table *t;
};

static size_t in_count(void) {
  return AR_COUNT > AG_COUNT ? AR_COUNT : AG_COUNT;
}

static int grank_open(struct grank *g) {
  HCUDA(cudaSetDevice(g->dev));
  HCUDA(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking));
  HCUDA(cudaMalloc((void **)&g->d_in, in_count() * sizeof(float)));
  HCUDA(cudaMalloc((void **)&g->d_ar, AR_COUNT * sizeof(float)));
  HCUDA(cudaMalloc((void **)&g->d_ag, AG_COUNT * MAX_RANKS * sizeof(float)));
  g->h_in = malloc(in_count() * sizeof(float));
  g->h_ar = malloc(AR_COUNT * sizeof(float));
  g->h_ag = malloc(AG_COUNT * MAX_RANKS * sizeof(float));
  g->t = malloc(sizeof *g->t);
  HCHECK(g->h_in && g->h_ar && g->h_ag && g->t, "out of memory");
  return 0;
}

static void grank_close(struct grank *g) {
  cudaSetDevice(g->dev);
  if (g->stream != NULL) cudaStreamSynchronize(g->stream);
  cudaFree(g->d_in);
  cudaFree(g->d_ar);
  cudaFree(g->d_ag);
  if (g->stream != NULL) cudaStreamDestroy(g->stream);
  free(g->h_in);
  free(g->h_ar);
  free(g->h_ag);
  free(g->t);
}

/* Round `round`'s input, and poisoned outputs, all ordered on the rank's
 * stream before whatever is launched next on it. */
static int grank_prepare(struct grank *g, int round) {
  ref_build(g->t, dtype_find(ncclFloat32), ncclSum, g->nranks, 1000u + (uint32_t)round);
  ref_fill(g->t, g->rank, g->h_in, 0, in_count());
  HCUDA(cudaSetDevice(g->dev));
  HCUDA(cudaMemcpyAsync(g->d_in, g->h_in, in_count() * sizeof(float), cudaMemcpyHostToDevice,
                        g->stream));
  HCUDA(cudaMemsetAsync(g->d_ar, 0xff, AR_COUNT * sizeof(float), g->stream));
  HCUDA(cudaMemsetAsync(g->d_ag, 0xff, AG_COUNT * MAX_RANKS * sizeof(float), g->stream));
  return 0;
}

/* Waits for the rank's stream and checks round `round`'s outputs (what = how
 * they were produced, for messages); with_ag: the AllGather ran too. */
static int grank_verify(struct grank *g, const char *what, int round, int with_ag) {
  HCUDA(cudaSetDevice(g->dev));
  HCUDA(cudaStreamSynchronize(g->stream));
  ncclResult_t async = ncclInProgress;
  HNCCL(ncclCommGetAsyncError(g->comm, &async));
  HCHECK(async == ncclSuccess, "%s: rank %d: asynchronous error %d (%s): %s", what, g->rank,
         (int)async, ncclGetErrorString(async), ncclGetLastError(g->comm));
  HCUDA(cudaMemcpy(g->h_ar, g->d_ar, AR_COUNT * sizeof(float), cudaMemcpyDeviceToHost));
  struct ref_bad bad;
  size_t nbad = ref_check(g->t, g->h_ar, 0, AR_COUNT, -1, 0, &bad);
  HCHECK(nbad == 0,
         "%s, round %d: rank %d/%d AllReduce float sum count=%zu: first bad element %zu is %.9g, "
         "expected %.9g; %zu of %zu wrong",
         what, round, g->rank, g->nranks, AR_COUNT, bad.index, bad.got, bad.want, nbad, AR_COUNT);
  if (!with_ag) return 0;
  HCUDA(cudaMemcpy(g->h_ag, g->d_ag, AG_COUNT * (size_t)g->nranks * sizeof(float),
                   cudaMemcpyDeviceToHost));
  for (int r = 0; r < g->nranks; r++) {
    nbad = ref_check(g->t, g->h_ag, (size_t)r * AG_COUNT, AG_COUNT, r, 0, &bad);
    HCHECK(nbad == 0,
           "%s, round %d: rank %d/%d AllGather float count=%zu block %d: first bad element %zu "
           "is %.9g, expected %.9g; %zu wrong",
           what, round, g->rank, g->nranks, AG_COUNT, r, bad.index, bad.got, bad.want, nbad);
  }
  return 0;
}

static ncclResult_t grank_allreduce(struct grank *g) {
  return ncclAllReduce(g->d_in, g->d_ar, AR_COUNT, ncclFloat32, ncclSum, g->comm, g->stream);
}

static ncclResult_t grank_allgather(struct grank *g) {
  return ncclAllGather(g->d_in, g->d_ag, AG_COUNT, ncclFloat32, g->comm, g->stream);
}

/* ---- Ranks as threads ---------------------------------------------------------- */

struct thread_case {
  int nranks;
  enum cudaStreamCaptureMode mode;
  int warmup;
};

struct thread_run {
  const struct thread_case *tc;
  pthread_barrier_t barrier;
};

/* Captures both calls on the rank's stream; the capture is always ended,
 * so a refused call cannot leave the stream capturing. */
static int capture_own(struct grank *g, enum cudaStreamCaptureMode mode, cudaGraph_t *graph) {
  HCUDA(cudaSetDevice(g->dev));
  HCUDA(cudaStreamBeginCapture(g->stream, mode));
  ncclResult_t ar = grank_allreduce(g);
  ncclResult_t ag = ar == ncclSuccess ? grank_allgather(g) : ncclSuccess;
  cudaError_t end = cudaStreamEndCapture(g->stream, graph);
  HCHECK(ar == ncclSuccess, "ncclAllReduce under %s capture -> %d (%s): %s", mode_name(mode),
         (int)ar, ncclGetErrorString(ar), ncclGetLastError(g->comm));
  HCHECK(ag == ncclSuccess, "ncclAllGather under %s capture -> %d (%s): %s", mode_name(mode),
         (int)ag, ncclGetErrorString(ag), ncclGetLastError(g->comm));
  HCHECK(end == cudaSuccess, "cudaStreamEndCapture (%s) -> %d (%s): the capture was invalidated",
         mode_name(mode), (int)end, cudaGetErrorString(end));
  return 0;
}

/* Replays exec three times with new inputs; an eager AllReduce runs after
 * the first replay. */
static int replay_own(struct grank *g, cudaGraphExec_t exec, const char *what) {
  for (int round = 0; round < REPLAYS; round++) {
    if (grank_prepare(g, round)) return 1;
    HCUDA(cudaGraphLaunch(exec, g->stream));
    if (grank_verify(g, what, round, 1)) return 1;
    if (round == 0) {
      if (grank_prepare(g, 100)) return 1;
      HNCCL(grank_allreduce(g));
      if (grank_verify(g, "eager AllReduce between replays", 100, 0)) return 1;
    }
  }
  return 0;
}

/* Device, communicator, buffers and (tc->warmup) the eager warm-up. */
static int thread_setup(struct grank *g, ncclUniqueId id, const struct thread_case *tc) {
  int ndev = 0;
  HCUDA(cudaGetDeviceCount(&ndev));
  HCHECK(ndev > 0, "no CUDA device");
  g->dev = g->rank % ndev;
  HCUDA(cudaSetDevice(g->dev));
  HNCCL(ncclCommInitRank(&g->comm, g->nranks, id, g->rank));
  if (grank_open(g)) return 1;
  if (!tc->warmup) return 0;
  if (grank_prepare(g, 50)) return 1;
  HNCCL(grank_allreduce(g));
  HNCCL(grank_allgather(g));
  return grank_verify(g, "eager warm-up", 50, 1);
}

static int graph_thread_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  struct thread_run *tr = arg;
  const struct thread_case *tc = tr->tc;
  struct grank g;
  memset(&g, 0, sizeof g);
  g.rank = rank;
  g.nranks = nranks;
  int rc = thread_setup(&g, id, tc);
  /* Every rank passes both barriers, failed or not, so none waits forever:
   * between them no thread makes a CUDA call other than its capture's
   * (global capture mode refuses unsafe calls from any thread). */
  pthread_barrier_wait(&tr->barrier);
  cudaGraph_t graph = NULL;
  if (rc == 0) rc = capture_own(&g, tc->mode, &graph);
  pthread_barrier_wait(&tr->barrier);
  cudaGraphExec_t exec = NULL;
  if (rc == 0 && cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
    rc = harness_fail(__FILE__, __LINE__, "cudaGraphInstantiate failed");
  char what[96];
  snprintf(what, sizeof what, "threads, %s capture%s, replay", mode_name(tc->mode),
           tc->warmup ? " after a warm-up" : "");
  if (rc == 0) rc = replay_own(&g, exec, what);
  if (exec != NULL) cudaGraphExecDestroy(exec);
  if (graph != NULL) cudaGraphDestroy(graph);
  grank_close(&g);
  if (g.comm != NULL && rc == 0) HNCCL(ncclCommDestroy(g.comm));
  if (g.comm != NULL && rc != 0) ncclCommAbort(g.comm);
  return rc;
}

static const struct thread_case thread_cases[] = {
    {2, cudaStreamCaptureModeGlobal, 0},      {2, cudaStreamCaptureModeGlobal, 1},
    {2, cudaStreamCaptureModeThreadLocal, 0}, {3, cudaStreamCaptureModeThreadLocal, 1},
    {4, cudaStreamCaptureModeGlobal, 0},      {2, cudaStreamCaptureModeRelaxed, 0},
};
#define NTHREAD_CASES (int)(sizeof thread_cases / sizeof thread_cases[0])

START_TEST(test_threads) {
  const struct thread_case *tc = &thread_cases[_i];
  struct thread_run tr;
  tr.tc = tc;
  pthread_barrier_init(&tr.barrier, NULL, (unsigned)tc->nranks);
  char why[3000];
  int rc = harness_threads(tc->nranks, RUN_TIMEOUT_S, graph_thread_rank, &tr, why, sizeof why);
  pthread_barrier_destroy(&tr.barrier);
  ck_assert_msg(rc == 0, "%d ranks as threads, %s capture%s: %s", tc->nranks, mode_name(tc->mode),
                tc->warmup ? " after a warm-up" : "", why);
}
END_TEST

/* ---- ncclCommInitAll and one thread ---------------------------------------------- */

struct initall_case {
  int nranks;
  enum cudaStreamCaptureMode mode;
  int one_graph; /* 1: one graph for all ranks (fork/join); 0: one per stream */
};

struct initall_run {
  const struct initall_case *ic;
  struct grank g[MAX_RANKS];
  cudaEvent_t fork, join[MAX_RANKS];
  cudaGraph_t graph[MAX_RANKS];
  cudaGraphExec_t exec[MAX_RANKS];
};

/* Both calls of every rank, each call one group over the ranks. */
static int group_calls(struct initall_run *ir, const char *when) {
  int n = ir->ic->nranks;
  ncclResult_t res = ncclSuccess;
  ncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) res = grank_allreduce(&ir->g[r]);
  ncclResult_t end = ncclGroupEnd();
  HCHECK(res == ncclSuccess && end == ncclSuccess, "grouped ncclAllReduce %s -> %d / %d: %s", when,
         (int)res, (int)end, ncclGetLastError(NULL));
  ncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) res = grank_allgather(&ir->g[r]);
  end = ncclGroupEnd();
  HCHECK(res == ncclSuccess && end == ncclSuccess, "grouped ncclAllGather %s -> %d / %d: %s", when,
         (int)res, (int)end, ncclGetLastError(NULL));
  return 0;
}

static int initall_capture(struct initall_run *ir) {
  const struct initall_case *ic = ir->ic;
  int n = ic->nranks;
  struct grank *g = ir->g;
  if (ic->one_graph) {
    /* Stream 0 is the origin: the others join its capture through an
     * event and rejoin it at the end, so one graph holds every rank. */
    HCUDA(cudaSetDevice(g[0].dev));
    HCUDA(cudaStreamBeginCapture(g[0].stream, ic->mode));
    HCUDA(cudaEventRecord(ir->fork, g[0].stream));
    for (int r = 1; r < n; r++) HCUDA(cudaStreamWaitEvent(g[r].stream, ir->fork, 0));
  } else {
    for (int r = 0; r < n; r++) {
      HCUDA(cudaSetDevice(g[r].dev));
      HCUDA(cudaStreamBeginCapture(g[r].stream, ic->mode));
    }
  }
  int rc = group_calls(ir, "under capture");
  if (ic->one_graph) {
    for (int r = 1; r < n; r++) {
      cudaSetDevice(g[r].dev);
      cudaEventRecord(ir->join[r], g[r].stream);
      cudaSetDevice(g[0].dev);
      cudaStreamWaitEvent(g[0].stream, ir->join[r], 0);
    }
    cudaSetDevice(g[0].dev);
    cudaError_t e = cudaStreamEndCapture(g[0].stream, &ir->graph[0]);
    HCHECK(rc != 0 || e == cudaSuccess, "cudaStreamEndCapture -> %d (%s)", (int)e,
           cudaGetErrorString(e));
  } else {
    for (int r = 0; r < n; r++) {
      cudaSetDevice(g[r].dev);
      cudaError_t e = cudaStreamEndCapture(g[r].stream, &ir->graph[r]);
      HCHECK(rc != 0 || e == cudaSuccess, "cudaStreamEndCapture of rank %d -> %d (%s)", r, (int)e,
             cudaGetErrorString(e));
    }
  }
  if (rc != 0) return rc;
  for (int r = 0; r < (ic->one_graph ? 1 : n); r++) {
    cudaSetDevice(g[r].dev);
    HCUDA(cudaGraphInstantiate(&ir->exec[r], ir->graph[r], 0));
  }
  return 0;
}

static int initall_replay(struct initall_run *ir) {
  const struct initall_case *ic = ir->ic;
  int n = ic->nranks;
  char what[96];
  snprintf(what, sizeof what, "initall, %s capture, %s, replay", mode_name(ic->mode),
           ic->one_graph ? "one graph" : "a graph per rank");
  for (int round = 0; round < REPLAYS; round++) {
    for (int r = 0; r < n; r++) {
      if (grank_prepare(&ir->g[r], round)) return 1;
      /* One graph: its launch on stream 0 must follow every rank's copies. */
      if (ic->one_graph) HCUDA(cudaStreamSynchronize(ir->g[r].stream));
    }
    for (int r = 0; r < (ic->one_graph ? 1 : n); r++) {
      HCUDA(cudaSetDevice(ir->g[r].dev));
      HCUDA(cudaGraphLaunch(ir->exec[r], ir->g[r].stream));
    }
    if (ic->one_graph) {
      HCUDA(cudaSetDevice(ir->g[0].dev));
      HCUDA(cudaStreamSynchronize(ir->g[0].stream));
    }
    for (int r = 0; r < n; r++)
      if (grank_verify(&ir->g[r], what, round, 1)) return 1;
    if (round == 0) {
      for (int r = 0; r < n; r++)
        if (grank_prepare(&ir->g[r], 100)) return 1;
      if (group_calls(ir, "between replays")) return 1;
      for (int r = 0; r < n; r++)
        if (grank_verify(&ir->g[r], "eager calls between replays", 100, 1)) return 1;
    }
  }
  return 0;
}

static int graph_initall(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)rank;
  (void)nranks;
  (void)id;
  struct initall_run *ir = arg;
  int n = ir->ic->nranks, ndev = 0, devs[MAX_RANKS];
  ncclComm_t comms[MAX_RANKS];
  HCUDA(cudaGetDeviceCount(&ndev));
  for (int r = 0; r < n; r++) devs[r] = r % ndev;
  HNCCL(ncclCommInitAll(comms, n, devs));
  int rc = 0;
  for (int r = 0; r < n && rc == 0; r++) {
    ir->g[r].rank = r;
    ir->g[r].nranks = n;
    ir->g[r].dev = devs[r];
    ir->g[r].comm = comms[r];
    rc = grank_open(&ir->g[r]);
    if (rc == 0 && cudaEventCreateWithFlags(&ir->join[r], cudaEventDisableTiming) != cudaSuccess)
      rc = harness_fail(__FILE__, __LINE__, "cudaEventCreate failed");
  }
  cudaSetDevice(devs[0]);
  if (rc == 0 && cudaEventCreateWithFlags(&ir->fork, cudaEventDisableTiming) != cudaSuccess)
    rc = harness_fail(__FILE__, __LINE__, "cudaEventCreate failed");
  if (rc == 0) rc = initall_capture(ir);
  if (rc == 0) rc = initall_replay(ir);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(devs[r]);
    if (ir->exec[r] != NULL) cudaGraphExecDestroy(ir->exec[r]);
    if (ir->graph[r] != NULL) cudaGraphDestroy(ir->graph[r]);
    if (ir->join[r] != NULL) cudaEventDestroy(ir->join[r]);
    grank_close(&ir->g[r]);
  }
  if (ir->fork != NULL) cudaEventDestroy(ir->fork);
  for (int r = 0; r < n; r++) {
    if (rc == 0)
      HNCCL(ncclCommDestroy(comms[r]));
    else
      ncclCommAbort(comms[r]);
  }
  return rc;
}

static const struct initall_case initall_cases[] = {
    {2, cudaStreamCaptureModeGlobal, 0},
    {3, cudaStreamCaptureModeThreadLocal, 0},
    {2, cudaStreamCaptureModeGlobal, 1},
    {4, cudaStreamCaptureModeThreadLocal, 1},
};
#define NINITALL_CASES (int)(sizeof initall_cases / sizeof initall_cases[0])

START_TEST(test_initall) {
  const struct initall_case *ic = &initall_cases[_i];
  struct initall_run *ir = calloc(1, sizeof *ir);
  ck_assert_ptr_nonnull(ir);
  ir->ic = ic;
  char why[3000];
  int rc = harness_solo(RUN_TIMEOUT_S, graph_initall, ir, why, sizeof why);
  free(ir);
  ck_assert_msg(rc == 0, "ncclCommInitAll, %d ranks, %s capture, %s: %s", ic->nranks,
                mode_name(ic->mode), ic->one_graph ? "one graph" : "a graph per rank", why);
}
END_TEST

int main(void) {
  gpu_require_device("gpu_graph");
  setenv("WEFT_CUDA_ENGINE", "1", 1); /* before the first NCCL call reads it */
  unsetenv("WEFT_DEVICE");
  Suite *s = suite_create("gpu_graph");
  TCase *tc = tcase_create("graph");
  tcase_add_loop_test(tc, test_threads, 0, NTHREAD_CASES);
  tcase_add_loop_test(tc, test_initall, 0, NINITALL_CASES);
  suite_add_tcase(s, tc);
  return suite_run_nofork(s);
}
