/* GPU suite: the opt-in CUDA engine (WEFT_CUDA_ENGINE=1) through the NCCL
 * API. ncclCommInitAll puts 2 and 4 ranks on GPU 0 in this process; a group
 * of per-rank calls on per-rank streams returns at ncclGroupEnd without
 * waiting, and the streams carry the results: float AllReduce (counts 1, 7,
 * 1000003, in and out of place), AllGather and Broadcast, outputs poisoned
 * first. Host pointers are refused with a clear error; ranks 0 and 1 swap
 * buffers with grouped ncclSend/ncclRecv. A group of three collectives per
 * rank is one kernel (counted in a captured graph) and replays right.
 * Three rank-threads, one late to a Broadcast whose root destroys its
 * communicator at once, all get the data (late_peer_destroy). Calls of one
 * communicator on two streams per rank run in call order (two_streams).
 * Exits 77 (skip) when there is no GPU. */
#include <check.h>
#include <cuda_runtime.h>
#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_initall.h"
#include "suite_run.h"

static const int nranks_of[] = {2, 4};
static const size_t counts[] = {1, 7, 1000003};

static float input(int r, size_t i) {
  return (float)((int)(i % 13) + r);
}

static void upload(float *d, int r, size_t count, size_t offset, float *host) {
  for (size_t i = 0; i < count; i++) host[i] = input(r, i + offset);
  ck_assert_int_eq(cudaMemcpy(d, host, count * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
}

START_TEST(allreduce) {
  int n = nranks_of[_i];
  struct ranks rs;
  ranks_open(&rs, n);
  size_t maxc = counts[sizeof(counts) / sizeof(counts[0]) - 1];
  float *host = malloc(maxc * sizeof(float));
  ck_assert_ptr_nonnull(host);
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
    for (int inplace = 0; inplace < 2; inplace++) {
      size_t count = counts[c];
      float *in[MAXR], *out[MAXR];
      for (int r = 0; r < n; r++) {
        in[r] = dev_alloc(count);
        out[r] = inplace ? in[r] : dev_alloc(count);
        upload(in[r], r, count, 0, host);
      }
      ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
      for (int r = 0; r < n; r++)
        ck_assert_int_eq(
            ncclAllReduce(in[r], out[r], count, ncclFloat, ncclSum, rs.comms[r], rs.streams[r]),
            ncclSuccess);
      ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
      ranks_sync(&rs);
      for (int r = 0; r < n; r++) {
        ck_assert_int_eq(cudaMemcpy(host, out[r], count * sizeof(float), cudaMemcpyDeviceToHost),
                         cudaSuccess);
        for (size_t i = 0; i < count; i++) {
          double want = 0;
          for (int q = 0; q < n; q++) want += input(q, i);
          ck_assert_msg(host[i] == (float)want,
                        "%d ranks, count %zu, %s: rank %d [%zu] = %g, expected %g", n, count,
                        inplace ? "in place" : "out of place", r, i, (double)host[i], want);
        }
      }
      for (int r = 0; r < n; r++) {
        cudaFree(in[r]);
        if (!inplace) cudaFree(out[r]);
      }
    }
  }
  free(host);
  ranks_close(&rs, 0);
}
END_TEST

START_TEST(allgather_broadcast) {
  int n = nranks_of[_i];
  struct ranks rs;
  ranks_open(&rs, n);
  size_t count = 1003;
  float *host = malloc(count * MAXR * sizeof(float));
  ck_assert_ptr_nonnull(host);
  float *in[MAXR], *out[MAXR];
  for (int r = 0; r < n; r++) {
    in[r] = dev_alloc(count);
    out[r] = dev_alloc(count * (size_t)n);
    upload(in[r], r, count, 0, host);
  }
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(ncclAllGather(in[r], out[r], count, ncclFloat, rs.comms[r], rs.streams[r]),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ranks_sync(&rs);
  for (int r = 0; r < n; r++) {
    ck_assert_int_eq(
        cudaMemcpy(host, out[r], count * (size_t)n * sizeof(float), cudaMemcpyDeviceToHost),
        cudaSuccess);
    for (int q = 0; q < n; q++)
      for (size_t i = 0; i < count; i++)
        ck_assert_msg(host[(size_t)q * count + i] == input(q, i),
                      "AllGather %d ranks: rank %d block %d [%zu] = %g", n, r, q, i,
                      (double)host[(size_t)q * count + i]);
  }
  /* Broadcast from the last rank, out of place, into the first count
   * elements of out. */
  int root = n - 1;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(
        ncclBroadcast(in[r], out[r], count, ncclFloat, root, rs.comms[r], rs.streams[r]),
        ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ranks_sync(&rs);
  for (int r = 0; r < n; r++) {
    ck_assert_int_eq(cudaMemcpy(host, out[r], count * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (size_t i = 0; i < count; i++)
      ck_assert_msg(host[i] == input(root, i), "Broadcast %d ranks: rank %d [%zu] = %g", n, r, i,
                    (double)host[i]);
  }
  for (int r = 0; r < n; r++) {
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  free(host);
  ranks_close(&rs, 0);
}
END_TEST

/* A group of three collectives per rank (AllReduce, AllGather,
 * ReduceScatter, on the rank's stream): on the ring's plans
 * (NCCL_ALGO=Ring) one kernel per communicator; as direct collectives (the
 * default for ranks sharing one GPU) one kernel each, whose epochs live in
 * device memory. Captured (each rank's stream into its own graph) and
 * replayed twice, the results are right. */
START_TEST(group_one_launch) {
  const char *algo = getenv("NCCL_ALGO");
  const size_t want_kernels = algo != NULL && strcmp(algo, "Ring") == 0 ? 1 : 3;
  int n = nranks_of[_i];
  struct ranks rs;
  ranks_open(&rs, n);
  const size_t count = 4099;
  float *ar[MAXR], *ag[MAXR], *rsin[MAXR], *rsout[MAXR];
  float *host = malloc(count * MAXR * sizeof(float));
  ck_assert_ptr_nonnull(host);
  for (int r = 0; r < n; r++) {
    ar[r] = dev_alloc(count);
    ag[r] = dev_alloc(count * (size_t)n);
    rsin[r] = dev_alloc(count * (size_t)n);
    rsout[r] = dev_alloc(count);
    upload(rsin[r], r, count * (size_t)n, 0, host);
  }
  cudaGraph_t graphs[MAXR];
  cudaGraphExec_t execs[MAXR];
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(cudaStreamBeginCapture(rs.streams[r], cudaStreamCaptureModeThreadLocal),
                     cudaSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    /* In place: the AllGather's input is the rank's block of its output. */
    ck_assert_int_eq(
        ncclAllReduce(ar[r], ar[r], count, ncclFloat, ncclSum, rs.comms[r], rs.streams[r]),
        ncclSuccess);
    ck_assert_int_eq(ncclAllGather(ag[r] + (size_t)r * count, ag[r], count, ncclFloat, rs.comms[r],
                                   rs.streams[r]),
                     ncclSuccess);
    ck_assert_int_eq(
        ncclReduceScatter(rsin[r], rsout[r], count, ncclFloat, ncclSum, rs.comms[r], rs.streams[r]),
        ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  /* Every capture ends before any graph is instantiated: in thread-local
   * mode an instantiation while another stream captures is refused. */
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(cudaStreamEndCapture(rs.streams[r], &graphs[r]), cudaSuccess);
  for (int r = 0; r < n; r++) {
    ck_assert_msg(kernel_nodes(graphs[r]) == want_kernels,
                  "%d ranks: rank %d's group of 3 collectives captured %zu kernels, expected %zu",
                  n, r, kernel_nodes(graphs[r]), want_kernels);
    ck_assert_int_eq(cudaGraphInstantiate(&execs[r], graphs[r], 0), cudaSuccess);
  }
  for (int rep = 0; rep < 2; rep++) {
    for (int r = 0; r < n; r++) {
      upload(ar[r], r + rep, count, 0, host);
      upload(ag[r] + (size_t)r * count, r + 2 * rep, count, 0, host);
    }
    for (int r = 0; r < n; r++)
      ck_assert_int_eq(cudaGraphLaunch(execs[r], rs.streams[r]), cudaSuccess);
    ranks_sync(&rs);
    for (int r = 0; r < n; r++) {
      ck_assert_int_eq(cudaMemcpy(host, ar[r], count * sizeof(float), cudaMemcpyDeviceToHost),
                       cudaSuccess);
      for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int q = 0; q < n; q++) want += input(q + rep, i);
        ck_assert_msg(host[i] == (float)want,
                      "replay %d, %d ranks: AllReduce rank %d [%zu] = %g, "
                      "expected %g",
                      rep, n, r, i, (double)host[i], want);
      }
      ck_assert_int_eq(
          cudaMemcpy(host, ag[r], count * (size_t)n * sizeof(float), cudaMemcpyDeviceToHost),
          cudaSuccess);
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < count; i++)
          ck_assert_msg(host[(size_t)q * count + i] == input(q + 2 * rep, i),
                        "replay %d: AllGather rank %d block %d [%zu] = %g", rep, r, q, i,
                        (double)host[(size_t)q * count + i]);
      ck_assert_int_eq(cudaMemcpy(host, rsout[r], count * sizeof(float), cudaMemcpyDeviceToHost),
                       cudaSuccess);
      for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int q = 0; q < n; q++) want += input(q, (size_t)r * count + i);
        ck_assert_msg(host[i] == (float)want,
                      "replay %d: ReduceScatter rank %d [%zu] = %g, "
                      "expected %g",
                      rep, r, i, (double)host[i], want);
      }
    }
  }
  for (int r = 0; r < n; r++) {
    cudaGraphExecDestroy(execs[r]);
    cudaGraphDestroy(graphs[r]);
    cudaFree(ar[r]);
    cudaFree(ag[r]);
    cudaFree(rsin[r]);
    cudaFree(rsout[r]);
  }
  free(host);
  ranks_close(&rs, 0);
}
END_TEST

/* One communicator's calls on two streams per rank, with nothing ordering
 * the streams: in-place AllReduces of two buffers alternate between the
 * streams, then a send/recv ring on the second stream reads the first
 * buffer. Every launch waits for the communicator's last one (launch_order
 * in exec/cuda.c), as NCCL's do; two of them running at once would share
 * the links and mix their data. */
START_TEST(two_streams) {
  int n = nranks_of[_i];
  struct ranks rs;
  ranks_open(&rs, n);
  const size_t count = 1000003;
  const int rounds = 3;
  cudaStream_t s2[MAXR];
  float *a[MAXR], *b[MAXR], *c[MAXR];
  float *host = malloc(count * sizeof(float));
  ck_assert_ptr_nonnull(host);
  for (int r = 0; r < n; r++) {
    ck_assert_int_eq(cudaStreamCreateWithFlags(&s2[r], cudaStreamNonBlocking), cudaSuccess);
    a[r] = dev_alloc(count);
    b[r] = dev_alloc(count);
    c[r] = dev_alloc(count);
    upload(a[r], r, count, 0, host);
    upload(b[r], r, count, 7, host);
  }
  for (int it = 0; it < rounds; it++) {
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      ck_assert_int_eq(
          ncclAllReduce(a[r], a[r], count, ncclFloat, ncclSum, rs.comms[r], rs.streams[r]),
          ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < n; r++)
      ck_assert_int_eq(ncclAllReduce(b[r], b[r], count, ncclFloat, ncclSum, rs.comms[r], s2[r]),
                       ncclSuccess);
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  }
  /* On s2, after the last AllReduce of a (on the first stream): only the
   * communicator's order makes a's result what is sent. */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++) {
    ck_assert_int_eq(ncclSend(a[r], count, ncclFloat, (r + 1) % n, rs.comms[r], s2[r]),
                     ncclSuccess);
    ck_assert_int_eq(ncclRecv(c[r], count, ncclFloat, (r + n - 1) % n, rs.comms[r], s2[r]),
                     ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < n; r++) ck_assert_int_eq(cudaStreamSynchronize(s2[r]), cudaSuccess);
  ranks_sync(&rs);
  double scale = 1;
  for (int it = 1; it < rounds; it++) scale *= n;
  float *bufs[3][MAXR];
  memcpy(bufs[0], a, sizeof(a));
  memcpy(bufs[1], b, sizeof(b));
  memcpy(bufs[2], c, sizeof(c));
  static const char *const names[3] = {"AllReduce on stream 1", "AllReduce on stream 2",
                                       "Recv on stream 2 of stream 1's result"};
  for (int k = 0; k < 3; k++)
    for (int r = 0; r < n; r++) {
      ck_assert_int_eq(cudaMemcpy(host, bufs[k][r], count * sizeof(float), cudaMemcpyDeviceToHost),
                       cudaSuccess);
      for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int q = 0; q < n; q++) want += input(q, i + (k == 1 ? 7 : 0));
        want *= scale;
        ck_assert_msg(host[i] == (float)want, "%d ranks, %s: rank %d [%zu] = %g, expected %g", n,
                      names[k], r, i, (double)host[i], want);
      }
    }
  for (int r = 0; r < n; r++) {
    cudaFree(a[r]);
    cudaFree(b[r]);
    cudaFree(c[r]);
    cudaStreamDestroy(s2[r]);
  }
  free(host);
  ranks_close(&rs, 0);
}
END_TEST

START_TEST(refusals) {
  struct ranks rs;
  ranks_open(&rs, 2);
  float *d = dev_alloc(1024);
  float host[1024] = {0};
  ck_assert_int_eq(ncclAllReduce(host, d, 1024, ncclFloat, ncclSum, rs.comms[0], rs.streams[0]),
                   ncclInvalidArgument);
  const char *msg = ncclGetLastError(rs.comms[0]);
  ck_assert_msg(strstr(msg, "ncclAllReduce") && strstr(msg, "sendbuff") &&
                    strstr(msg, "not CUDA device memory"),
                "unexpected message: %s", msg);
  cudaFree(d);
  /* Send/recv run on the engine: ranks 0 and 1 swap 1000 floats in one
   * group, each on its own stream. */
  float *sb[2], *rb[2];
  for (int r = 0; r < 2; r++) {
    sb[r] = dev_alloc(1000);
    rb[r] = dev_alloc(1000);
    upload(sb[r], r, 1000, 0, host);
  }
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(ncclSend(sb[r], 1000, ncclFloat, 1 - r, rs.comms[r], rs.streams[r]),
                     ncclSuccess);
    ck_assert_int_eq(ncclRecv(rb[r], 1000, ncclFloat, 1 - r, rs.comms[r], rs.streams[r]),
                     ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ranks_sync(&rs);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(cudaMemcpy(host, rb[r], 1000 * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    for (int i = 0; i < 1000; i++)
      ck_assert_msg(host[i] == input(1 - r, (size_t)i), "rank %d received %g at %d, expected %g", r,
                    host[i], i, input(1 - r, (size_t)i));
    cudaFree(sb[r]);
    cudaFree(rb[r]);
  }
  ranks_close(&rs, 0);
}
END_TEST

/* Rank-threads (ncclCommInitRank, one thread each) where one leaves early.
 * Rank 0 broadcasts 256 KiB (it fits the FIFOs, so the root's kernel ends
 * at once), destroys its communicator and frees its buffers; rank `late`
 * sleeps 300 ms before it makes the call. A free waits for every kernel
 * issued on the GPU and holds back kernels issued after it, so a destroy
 * that freed then would leave the ranks already spinning on the late one
 * waiting for it, and it waiting behind the free (the hang of gpu coll
 * algos' last Broadcast with 8 rank-threads on the ring). The destroy
 * waits until every rank-thread has launched the call (exec/cuda_leave.c):
 * every rank then gets the root's data and no communicator fails. Run with
 * late = 1 and 2, so that with either ring order the late rank is one that
 * another rank waits for. */
#define LATE_NRANKS 3
#define LATE_COUNT (64 * 1024)

struct late_rank {
  ncclUniqueId id;
  int rank, late;
  ncclResult_t res; /* the first failure */
  char why[256];
};

static void *late_rank_main(void *arg) {
  struct late_rank *lr = arg;
  lr->res = ncclSuccess;
  cudaStream_t st = NULL;
  ncclComm_t comm = NULL;
  float *buf = NULL, *host = malloc(LATE_COUNT * sizeof(float));
  if (host == NULL || cudaSetDevice(0) != cudaSuccess ||
      cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
      cudaMalloc((void **)&buf, LATE_COUNT * sizeof(float)) != cudaSuccess) {
    snprintf(lr->why, sizeof lr->why, "rank %d: setup failed", lr->rank);
    lr->res = ncclSystemError;
    free(host);
    return NULL;
  }
  for (size_t i = 0; i < LATE_COUNT; i++) host[i] = lr->rank == 0 ? input(0, i) : -1.0f;
  cudaMemcpy(buf, host, LATE_COUNT * sizeof(float), cudaMemcpyHostToDevice);
  ncclResult_t r = ncclCommInitRank(&comm, LATE_NRANKS, lr->id, lr->rank);
  if (r != ncclSuccess) {
    snprintf(lr->why, sizeof lr->why, "rank %d: ncclCommInitRank -> %d", lr->rank, (int)r);
    lr->res = r;
  } else {
    if (lr->rank == lr->late) {
      struct timespec nap = {0, 300 * 1000 * 1000};
      nanosleep(&nap, NULL);
    }
    r = ncclBroadcast(buf, buf, LATE_COUNT, ncclFloat, 0, comm, st);
    if (r != ncclSuccess) {
      snprintf(lr->why, sizeof lr->why, "rank %d: ncclBroadcast -> %d", lr->rank, (int)r);
      lr->res = r;
    }
    if (lr->rank != 0 && r == ncclSuccess) {
      /* The others check before they leave; the root leaves at once. */
      ncclResult_t async = ncclSuccess;
      cudaError_t ce = cudaStreamSynchronize(st);
      ncclCommGetAsyncError(comm, &async);
      if (ce != cudaSuccess || async != ncclSuccess) {
        snprintf(lr->why, sizeof lr->why, "rank %d: stream %s, async error %d: %s", lr->rank,
                 cudaGetErrorString(ce), (int)async, ncclGetLastError(comm));
        lr->res = async != ncclSuccess ? async : ncclUnhandledCudaError;
      } else {
        cudaMemcpy(host, buf, LATE_COUNT * sizeof(float), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < LATE_COUNT && lr->res == ncclSuccess; i++)
          if (host[i] != input(0, i)) {
            snprintf(lr->why, sizeof lr->why, "rank %d: [%zu] = %g, expected %g", lr->rank, i,
                     (double)host[i], (double)input(0, i));
            lr->res = ncclInternalError;
          }
      }
    }
    r = ncclCommDestroy(comm);
    if (r != ncclSuccess && lr->res == ncclSuccess) {
      snprintf(lr->why, sizeof lr->why, "rank %d: ncclCommDestroy -> %d", lr->rank, (int)r);
      lr->res = r;
    }
  }
  cudaFree(buf); /* device-wide: safe once the destroy has returned */
  cudaStreamDestroy(st);
  free(host);
  return NULL;
}

START_TEST(late_peer_destroy) {
  struct late_rank lr[LATE_NRANKS];
  pthread_t th[LATE_NRANKS];
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (int r = 0; r < LATE_NRANKS; r++) {
    memset(&lr[r], 0, sizeof lr[r]);
    lr[r].id = id;
    lr[r].rank = r;
    lr[r].late = 1 + _i;
    ck_assert_int_eq(pthread_create(&th[r], NULL, late_rank_main, &lr[r]), 0);
  }
  for (int r = 0; r < LATE_NRANKS; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < LATE_NRANKS; r++)
    ck_assert_msg(lr[r].res == ncclSuccess, "late rank %d: %s", 1 + _i, lr[r].why);
}
END_TEST

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  setenv("WEFT_CUDA_ENGINE", "1", 1); /* before the first nccl call reads it */
  Suite *s = suite_create("gpu_engine");
  TCase *tc = tcase_create("engine");
  tcase_set_timeout(tc, 240);
  int nn = (int)(sizeof(nranks_of) / sizeof(nranks_of[0]));
  tcase_add_loop_test(tc, allreduce, 0, nn);
  tcase_add_loop_test(tc, allgather_broadcast, 0, nn);
  tcase_add_loop_test(tc, group_one_launch, 0, nn);
  tcase_add_loop_test(tc, two_streams, 0, nn);
  tcase_add_test(tc, refusals);
  tcase_add_loop_test(tc, late_peer_destroy, 0, 2);
  suite_add_tcase(s, tc);
  return suite_run_nofork(s);
}
