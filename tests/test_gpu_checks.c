/* GPU suite: bad input on the device path (src/api/check.c). Ranks with a
 * CUDA device take device buffers; given something their GPU cannot use,
 * every call returns ncclInvalidArgument with a WARN (ncclGetLastError)
 * naming the call, the argument and what was expected, and launches
 * nothing: the output stays poisoned, ncclCommGetAsyncError stays clean and
 * a correct AllReduce works right after.
 *
 * Refused: pageable host memory (malloc'd, on the stack), NULL with a
 * count, device memory of another GPU and a stream of another GPU (these two
 * need 2 GPUs: with one they are not registered, and a line says so).
 * Accepted, with correct results, because NCCL's kernels can use them:
 * managed memory, cudaMallocHost and cudaHostRegister'd memory, stream-
 * ordered (cudaMallocAsync) memory, buffers at any alignment, NULL with
 * count 0 or where only the root reads or writes, and the default streams
 * (NULL, cudaStreamLegacy, cudaStreamPerThread). Where the GPU reads
 * pageable memory coherently (HMM, ATS), malloc'd buffers are valid too:
 * then the refusal of host memory is not run and their acceptance is.
 *
 * Exits 77 without a GPU. */
#include <check.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "gpu_ref.h"
#include "nccl.h"
#include "suite_run.h"

#define COUNT ((size_t)1031) /* prime, and not gpu_ref's period: blocks differ */
#define NR 2                 /* ranks of the communicators below */

static int ndev;

#define CK_CUDA(call)                                                                 \
  do {                                                                                \
    cudaError_t ck_cuda_e_ = (call);                                                  \
    ck_assert_msg(ck_cuda_e_ == cudaSuccess, "%s -> %d (%s)", #call, (int)ck_cuda_e_, \
                  cudaGetErrorString(ck_cuda_e_));                                    \
  } while (0)

#define CK_NCCL(call)                                                                     \
  do {                                                                                    \
    ncclResult_t ck_nccl_r_ = (call);                                                     \
    ck_assert_msg(ck_nccl_r_ == ncclSuccess, "%s -> %d (%s): %s", #call, (int)ck_nccl_r_, \
                  ncclGetErrorString(ck_nccl_r_), ncclGetLastError(NULL));                \
  } while (0)

/* Two ranks driven by this thread (ncclCommInitAll), on GPUs devs[]. Each
 * has a stream and device buffers of NR * COUNT floats on its GPU. */
struct pair {
  int devs[NR];
  ncclComm_t comms[NR];
  cudaStream_t st[NR];
  float *send[NR], *recv[NR];
};

static void pair_open(struct pair *p, int dev1) {
  p->devs[0] = 0;
  p->devs[1] = dev1;
  CK_NCCL(ncclCommInitAll(p->comms, NR, p->devs));
  for (int r = 0; r < NR; r++) {
    CK_CUDA(cudaSetDevice(p->devs[r]));
    CK_CUDA(cudaStreamCreateWithFlags(&p->st[r], cudaStreamNonBlocking));
    CK_CUDA(cudaMalloc((void **)&p->send[r], NR * COUNT * sizeof(float)));
    CK_CUDA(cudaMalloc((void **)&p->recv[r], NR * COUNT * sizeof(float)));
  }
}

static void pair_close(struct pair *p) {
  for (int r = 0; r < NR; r++) {
    CK_CUDA(cudaSetDevice(p->devs[r]));
    CK_CUDA(cudaStreamSynchronize(p->st[r]));
    cudaFree(p->send[r]);
    cudaFree(p->recv[r]);
    cudaStreamDestroy(p->st[r]);
  }
  for (int r = 0; r < NR; r++) CK_NCCL(ncclCommDestroy(p->comms[r]));
}

/* A grouped AllReduce (sum) of `count` elements of dt over both ranks, on
 * send[r] and recv[r] of any memory kind; the results are checked.
 * cudaMemcpyDefault moves data in and out of every kind. */
static void allreduce_ok(struct pair *p, void *const send[NR], void *const recv[NR], size_t count,
                         ncclDataType_t dt, const char *what) {
  const struct dtype_info *d = dtype_find(dt);
  struct ref_table *t = malloc(sizeof *t);
  unsigned char *host = malloc((count + 1) * d->size);
  ck_assert(t != NULL && host != NULL);
  ref_build(t, d, ncclSum, NR, 7);
  for (int r = 0; r < NR; r++) {
    CK_CUDA(cudaSetDevice(p->devs[r]));
    ref_fill(t, r, host, 0, count);
    CK_CUDA(cudaMemcpy(send[r], host, count * d->size, cudaMemcpyDefault));
    memset(host, poison_byte(d), count * d->size);
    CK_CUDA(cudaMemcpy(recv[r], host, count * d->size, cudaMemcpyDefault));
    CK_CUDA(cudaDeviceSynchronize());
  }
  ncclResult_t res[NR];
  CK_NCCL(ncclGroupStart());
  for (int r = 0; r < NR; r++)
    res[r] = ncclAllReduce(send[r], recv[r], count, dt, ncclSum, p->comms[r], p->st[r]);
  CK_NCCL(ncclGroupEnd());
  for (int r = 0; r < NR; r++)
    ck_assert_msg(res[r] == ncclSuccess, "%s: ncclAllReduce on rank %d -> %d (%s): %s", what, r,
                  (int)res[r], ncclGetErrorString(res[r]), ncclGetLastError(NULL));
  for (int r = 0; r < NR; r++) {
    CK_CUDA(cudaSetDevice(p->devs[r]));
    CK_CUDA(cudaStreamSynchronize(p->st[r]));
    ncclResult_t async = ncclInProgress;
    CK_NCCL(ncclCommGetAsyncError(p->comms[r], &async));
    ck_assert_msg(async == ncclSuccess, "%s: rank %d: asynchronous error %d: %s", what, r,
                  (int)async, ncclGetLastError(NULL));
    CK_CUDA(cudaMemcpy(host, recv[r], count * d->size, cudaMemcpyDefault));
    struct ref_bad bad;
    size_t nbad = ref_check(t, host, 0, count, -1, 0, &bad);
    ck_assert_msg(nbad == 0,
                  "%s: rank %d AllReduce %s count=%zu: first bad element %zu is %g, expected %g; "
                  "%zu wrong",
                  what, r, d->name, count, bad.index, bad.got, bad.want, nbad);
  }
  free(host);
  free(t);
}

/* The AllReduce of allreduce_ok on the pair's own device buffers. */
static void still_works(struct pair *p, const char *after) {
  void *s[NR] = {p->send[0], p->send[1]}, *r[NR] = {p->recv[0], p->recv[1]};
  allreduce_ok(p, s, r, COUNT, ncclFloat32, after);
}

/* res must be ncclInvalidArgument, and the last WARN must name the call,
 * the argument (and, when bad is not NULL, its value: a stale message from
 * an earlier refusal does not pass), what was expected and, if not NULL,
 * say `phrase`. */
static void refused(ncclResult_t res, const char *caller, const char *arg, const void *bad,
                    const char *phrase) {
  ck_assert_msg(res == ncclInvalidArgument,
                "%s with a bad %s returned %d (%s), expected ncclInvalidArgument", caller, arg,
                (int)res, ncclGetErrorString(res));
  const char *msg = ncclGetLastError(NULL);
  char value[32] = "";
  if (bad != NULL) snprintf(value, sizeof value, "%p", bad);
  ck_assert_msg(msg != NULL && strstr(msg, caller) != NULL && strstr(msg, arg) != NULL &&
                    strstr(msg, value) != NULL && strstr(msg, "expected") != NULL &&
                    (phrase == NULL || strstr(msg, phrase)),
                "%s, bad %s %s: the WARN should name the call, the argument and its value, and "
                "what was expected%s%s: \"%s\"",
                caller, arg, value, phrase ? ", and say " : "", phrase ? phrase : "",
                msg ? msg : "(null)");
}

/* Poisons rank 0's recvbuff before refused calls that would write it. */
static void poison_recv0(struct pair *p) {
  CK_CUDA(cudaSetDevice(p->devs[0]));
  CK_CUDA(cudaMemsetAsync(p->recv[0], 0xff, NR * COUNT * sizeof(float), p->st[0]));
  CK_CUDA(cudaStreamSynchronize(p->st[0]));
}

/* After refused calls: nothing ran on rank 0's stream, nothing failed. */
static void nothing_launched(struct pair *p, const char *after) {
  CK_CUDA(cudaSetDevice(p->devs[0]));
  CK_CUDA(cudaStreamSynchronize(p->st[0]));
  ncclResult_t async = ncclInProgress;
  CK_NCCL(ncclCommGetAsyncError(p->comms[0], &async));
  ck_assert_msg(async == ncclSuccess, "after %s: asynchronous error %d: %s", after, (int)async,
                ncclGetLastError(NULL));
  size_t n = NR * COUNT * sizeof(float);
  unsigned char *h = malloc(n);
  ck_assert_ptr_nonnull(h);
  CK_CUDA(cudaMemcpy(h, p->recv[0], n, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(h[i] == 0xff, "after %s: rank 0's recvbuff byte %zu was written", after, i);
  free(h);
}

/* ---- Refused ------------------------------------------------------------------- */

START_TEST(test_host_pointer_refused) {
  struct pair p;
  pair_open(&p, 0);
  float *h = calloc(NR * COUNT, sizeof(float));
  float stack[64] = {0};
  ck_assert_ptr_nonnull(h);
  ncclComm_t c = p.comms[0];
  cudaStream_t s = p.st[0];
  const char *no = "not CUDA device memory";
  poison_recv0(&p);
  refused(ncclAllReduce(h, p.recv[0], COUNT, ncclFloat32, ncclSum, c, s), "ncclAllReduce",
          "sendbuff", h, no);
  refused(ncclAllReduce(p.send[0], h, COUNT, ncclFloat32, ncclSum, c, s), "ncclAllReduce",
          "recvbuff", h, no);
  refused(ncclAllReduce(stack, p.recv[0], 64, ncclFloat32, ncclMax, c, s), "ncclAllReduce",
          "sendbuff", stack, no);
  refused(ncclAllGather(p.send[0], h, COUNT, ncclFloat32, c, s), "ncclAllGather", "recvbuff", h,
          no);
  refused(ncclReduceScatter(h, p.recv[0], COUNT, ncclFloat32, ncclSum, c, s), "ncclReduceScatter",
          "sendbuff", h, no);
  refused(ncclBroadcast(h, p.recv[0], COUNT, ncclFloat32, 0, c, s), "ncclBroadcast", "sendbuff", h,
          no);
  refused(ncclBcast(h, COUNT, ncclFloat32, 1, c, s), "ncclBcast", "buff", h, no);
  refused(ncclReduce(p.send[0], h, COUNT, ncclFloat32, ncclSum, 0, c, s), "ncclReduce", "recvbuff",
          h, no);
  refused(ncclSend(h, COUNT, ncclFloat32, 1, c, s), "ncclSend", "sendbuff", h, no);
  refused(ncclRecv(h, COUNT, ncclFloat32, 1, c, s), "ncclRecv", "recvbuff", h, no);
  refused(ncclAlltoAll(h, p.recv[0], COUNT, ncclFloat32, c, s), "ncclAlltoAll", "sendbuff", h, no);
  refused(ncclGather(h, p.recv[0], COUNT, ncclFloat32, 0, c, s), "ncclGather", "sendbuff", h, no);
  refused(ncclScatter(p.send[0], h, COUNT, ncclFloat32, 0, c, s), "ncclScatter", "recvbuff", h, no);
  nothing_launched(&p, "host pointers");
  still_works(&p, "AllReduce after refused host pointers");
  free(h);
  pair_close(&p);
}
END_TEST

/* Host ranks (WEFT_DEVICE=cpu) take host buffers: one of device memory
 * is refused, each time (a buffer that passed is not asked about again; a
 * refused one never passed), while host buffers passed again keep working.
 * weft reads WEFT_DEVICE once per process and this suite runs without
 * forking, so the body runs in a fresh process of this binary
 * (--host-ranks), started by the test below with WEFT_DEVICE=cpu. */
START_TEST(host_ranks_body) {
  ncclComm_t c;
  CK_NCCL(ncclCommInitAll(&c, 1, NULL));
  float *h = malloc(2 * COUNT * sizeof(float)), *d = NULL;
  ck_assert_ptr_nonnull(h);
  CK_CUDA(cudaMalloc((void **)&d, COUNT * sizeof(float)));
  for (int round = 0; round < 2; round++) {
    for (size_t i = 0; i < COUNT; i++) h[i] = (float)i, h[COUNT + i] = -1;
    CK_NCCL(ncclAllReduce(h, h + COUNT, COUNT, ncclFloat32, ncclSum, c, NULL));
    ck_assert_msg(h[COUNT + 5] == 5.0f, "round %d: host ranks' AllReduce gave %g", round,
                  (double)h[COUNT + 5]);
    refused(ncclAllReduce(d, h + COUNT, COUNT, ncclFloat32, ncclSum, c, NULL), "ncclAllReduce",
            "sendbuff", d, "is CUDA device memory");
    refused(ncclAllReduce(h, d, COUNT, ncclFloat32, ncclSum, c, NULL), "ncclAllReduce", "recvbuff",
            d, "is CUDA device memory");
  }
  cudaFree(d);
  free(h);
  CK_NCCL(ncclCommDestroy(c));
}
END_TEST

START_TEST(test_device_pointer_refused_on_host_ranks) {
  char *const argv[] = {"test_gpu_checks", "--host-ranks", NULL};
  const char *const env[] = {"WEFT_DEVICE=cpu", NULL};
  char why[2048];
  ck_assert_msg(gpu_worker(argv, env, 120, why, sizeof why) == 0,
                "host ranks with a device buffer (WEFT_DEVICE=cpu, in a fresh process): %s", why);
}
END_TEST

START_TEST(test_null_refused) {
  struct pair p;
  pair_open(&p, 0);
  ncclComm_t c = p.comms[0];
  cudaStream_t s = p.st[0];
  poison_recv0(&p);
  refused(ncclAllReduce(NULL, p.recv[0], COUNT, ncclFloat32, ncclSum, c, s), "ncclAllReduce",
          "sendbuff", NULL, "NULL");
  refused(ncclAllReduce(p.send[0], NULL, COUNT, ncclFloat32, ncclSum, c, s), "ncclAllReduce",
          "recvbuff", NULL, "NULL");
  refused(ncclAllGather(p.send[0], NULL, COUNT, ncclFloat32, c, s), "ncclAllGather", "recvbuff",
          NULL, "NULL");
  refused(ncclReduceScatter(NULL, p.recv[0], COUNT, ncclFloat32, ncclSum, c, s),
          "ncclReduceScatter", "sendbuff", NULL, "NULL");
  refused(ncclBroadcast(NULL, p.recv[0], COUNT, ncclFloat32, 0, c, s), "ncclBroadcast", "sendbuff",
          NULL, "NULL");
  refused(ncclReduce(p.send[0], NULL, COUNT, ncclFloat32, ncclSum, 0, c, s), "ncclReduce",
          "recvbuff", NULL, "NULL");
  refused(ncclSend(NULL, COUNT, ncclFloat32, 1, c, s), "ncclSend", "sendbuff", NULL, "NULL");
  refused(ncclRecv(NULL, COUNT, ncclFloat32, 1, c, s), "ncclRecv", "recvbuff", NULL, "NULL");
  refused(ncclAlltoAll(NULL, p.recv[0], COUNT, ncclFloat32, c, s), "ncclAlltoAll", "sendbuff", NULL,
          "NULL");
  refused(ncclScatter(NULL, p.recv[0], COUNT, ncclFloat32, 0, c, s), "ncclScatter", "sendbuff",
          NULL, "NULL");
  nothing_launched(&p, "NULL buffers");
  still_works(&p, "AllReduce after refused NULL buffers");
  pair_close(&p);
}
END_TEST

START_TEST(test_other_device_buffer_refused) {
  struct pair p;
  pair_open(&p, 1);
  float *other = NULL; /* on GPU 1, given to rank 0 (GPU 0) */
  CK_CUDA(cudaSetDevice(1));
  CK_CUDA(cudaMalloc((void **)&other, NR * COUNT * sizeof(float)));
  ncclComm_t c = p.comms[0];
  cudaStream_t s = p.st[0];
  poison_recv0(&p);
  refused(ncclAllReduce(other, p.recv[0], COUNT, ncclFloat32, ncclSum, c, s), "ncclAllReduce",
          "sendbuff", other, "GPU 1");
  refused(ncclAllReduce(p.send[0], other, COUNT, ncclFloat32, ncclSum, c, s), "ncclAllReduce",
          "recvbuff", other, "GPU 1");
  refused(ncclAllGather(other, p.recv[0], COUNT, ncclFloat32, c, s), "ncclAllGather", "sendbuff",
          other, "GPU 1");
  refused(ncclSend(other, COUNT, ncclFloat32, 1, c, s), "ncclSend", "sendbuff", other, "GPU 1");
  refused(ncclRecv(other, COUNT, ncclFloat32, 1, c, s), "ncclRecv", "recvbuff", other, "GPU 1");
  nothing_launched(&p, "another GPU's buffers");
  still_works(&p, "AllReduce after refused buffers of another GPU");
  CK_CUDA(cudaSetDevice(1));
  cudaFree(other);
  pair_close(&p);
}
END_TEST

#if CUDART_VERSION >= 12080
START_TEST(test_other_device_stream_refused) {
  struct pair p;
  pair_open(&p, 1);
  cudaStream_t other = NULL; /* of GPU 1, given to rank 0 (GPU 0) */
  CK_CUDA(cudaSetDevice(1));
  CK_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  ncclComm_t c = p.comms[0];
  poison_recv0(&p);
  refused(ncclAllReduce(p.send[0], p.recv[0], COUNT, ncclFloat32, ncclSum, c, other),
          "ncclAllReduce", "stream", other, "GPU 1");
  refused(ncclBroadcast(p.send[0], p.recv[0], COUNT, ncclFloat32, 0, c, other), "ncclBroadcast",
          "stream", other, "GPU 1");
  refused(ncclSend(p.send[0], COUNT, ncclFloat32, 1, c, other), "ncclSend", "stream", other,
          "GPU 1");
  refused(ncclRecv(p.recv[0], COUNT, ncclFloat32, 1, c, other), "ncclRecv", "stream", other,
          "GPU 1");
  CK_CUDA(cudaSetDevice(1));
  CK_CUDA(cudaStreamSynchronize(other));
  nothing_launched(&p, "another GPU's stream");
  still_works(&p, "AllReduce after a refused stream of another GPU");
  CK_CUDA(cudaSetDevice(1));
  cudaStreamDestroy(other);
  pair_close(&p);
}
END_TEST
#endif

/* ---- Accepted ------------------------------------------------------------------ */

/* NULL where NCCL allows it: count 0, and buffers only the root uses. */
START_TEST(test_null_accepted) {
  struct pair p;
  pair_open(&p, 0);
  const struct dtype_info *d = dtype_find(ncclFloat32);
  struct ref_table *t = malloc(sizeof *t);
  float *host = malloc(NR * COUNT * sizeof(float));
  ck_assert(t != NULL && host != NULL);
  ref_build(t, d, ncclSum, NR, 11);
  for (int r = 0; r < NR; r++) {
    ref_fill(t, r, host, 0, NR * COUNT);
    CK_CUDA(cudaSetDevice(p.devs[r]));
    CK_CUDA(cudaMemcpy(p.send[r], host, NR * COUNT * sizeof(float), cudaMemcpyHostToDevice));
    CK_CUDA(cudaMemset(p.recv[r], 0xff, NR * COUNT * sizeof(float)));
    CK_CUDA(cudaDeviceSynchronize());
  }
  /* Count 0 with NULL everywhere, then root 0 with rank 1's unused
   * buffer NULL: Broadcast (sendbuff), Reduce (recvbuff), Gather
   * (recvbuff), Scatter (sendbuff); each in its own group. */
  CK_NCCL(ncclGroupStart());
  for (int r = 0; r < NR; r++) {
    CK_NCCL(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, p.comms[r], p.st[r]));
    CK_NCCL(ncclSend(NULL, 0, ncclFloat32, 1 - r, p.comms[r], p.st[r]));
    CK_NCCL(ncclRecv(NULL, 0, ncclFloat32, 1 - r, p.comms[r], p.st[r]));
  }
  CK_NCCL(ncclGroupEnd());
  struct {
    const char *name;
    int check_rank; /* whose recvbuff holds the result */
  } calls[] = {{"Broadcast", 1}, {"Reduce", 0}, {"Gather", 0}, {"Scatter", 1}};
  for (int k = 0; k < 4; k++) {
    for (int r = 0; r < NR; r++) { /* each result must be this call's */
      CK_CUDA(cudaSetDevice(p.devs[r]));
      CK_CUDA(cudaMemset(p.recv[r], 0xff, NR * COUNT * sizeof(float)));
      CK_CUDA(cudaDeviceSynchronize());
    }
    CK_NCCL(ncclGroupStart());
    for (int r = 0; r < NR; r++) {
      ncclComm_t c = p.comms[r];
      cudaStream_t s = p.st[r];
      void *sb = p.send[r], *rb = p.recv[r];
      switch (k) {
        case 0: CK_NCCL(ncclBroadcast(r ? NULL : sb, rb, COUNT, ncclFloat32, 0, c, s)); break;
        case 1: CK_NCCL(ncclReduce(sb, r ? NULL : rb, COUNT, ncclFloat32, ncclSum, 0, c, s)); break;
        case 2: CK_NCCL(ncclGather(sb, r ? NULL : rb, COUNT, ncclFloat32, 0, c, s)); break;
        default: CK_NCCL(ncclScatter(r ? NULL : sb, rb, COUNT, ncclFloat32, 0, c, s)); break;
      }
    }
    CK_NCCL(ncclGroupEnd());
    for (int r = 0; r < NR; r++) {
      CK_CUDA(cudaSetDevice(p.devs[r]));
      CK_CUDA(cudaStreamSynchronize(p.st[r]));
    }
    int cr = calls[k].check_rank;
    CK_CUDA(cudaMemcpy(host, p.recv[cr], NR * COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    struct ref_bad bad;
    size_t nbad = 0;
    if (k == 0) nbad = ref_check(t, host, 0, COUNT, 0, 0, &bad);  /* root's input */
    if (k == 1) nbad = ref_check(t, host, 0, COUNT, -1, 0, &bad); /* the sum */
    for (int q = 0; k == 2 && q < NR && nbad == 0; q++)           /* every rank's block */
      nbad = ref_check(t, host, (size_t)q * COUNT, COUNT, q, 0, &bad);
    if (k == 3) nbad = ref_check(t, host, 0, COUNT, 0, COUNT, &bad); /* root's block 1 */
    ck_assert_msg(nbad == 0,
                  "%s with NULL off the root: rank %d: first bad element %zu is %g, expected %g",
                  calls[k].name, cr, bad.index, bad.got, bad.want);
  }
  free(host);
  free(t);
  still_works(&p, "AllReduce after NULL buffers where allowed");
  pair_close(&p);
}
END_TEST

/* Memory kinds NCCL's kernels can use, on both ranks at once. */
enum kind_id { MK_MANAGED, MK_PINNED, MK_REGISTERED, MK_ASYNC, MK_PAGEABLE, NKINDS };
static const char *const kind_names[NKINDS] = {"cudaMallocManaged", "cudaMallocHost",
                                               "cudaHostRegister", "cudaMallocAsync",
                                               "malloc (pageable, HMM/ATS)"};

static void *kind_alloc(enum kind_id k, size_t bytes, cudaStream_t st) {
  void *p = NULL;
  switch (k) {
    case MK_MANAGED: CK_CUDA(cudaMallocManaged(&p, bytes, cudaMemAttachGlobal)); break;
    case MK_PINNED: CK_CUDA(cudaMallocHost(&p, bytes)); break;
    case MK_REGISTERED:
      p = malloc(bytes);
      ck_assert_ptr_nonnull(p);
      CK_CUDA(cudaHostRegister(p, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
      break;
    case MK_ASYNC:
      CK_CUDA(cudaMallocAsync(&p, bytes, st));
      CK_CUDA(cudaStreamSynchronize(st));
      break;
    default: p = malloc(bytes); break;
  }
  ck_assert_ptr_nonnull(p);
  return p;
}

static void kind_free(enum kind_id k, void *p, cudaStream_t st) {
  switch (k) {
    case MK_MANAGED: cudaFree(p); break;
    case MK_PINNED: cudaFreeHost(p); break;
    case MK_REGISTERED:
      cudaHostUnregister(p);
      free(p);
      break;
    case MK_ASYNC:
      cudaFreeAsync(p, st);
      cudaStreamSynchronize(st);
      break;
    default: free(p); break;
  }
}

static void kind_case(enum kind_id k) {
  struct pair p;
  pair_open(&p, 0);
  void *s[NR], *r[NR];
  for (int q = 0; q < NR; q++) {
    CK_CUDA(cudaSetDevice(p.devs[q]));
    s[q] = kind_alloc(k, COUNT * sizeof(float), p.st[q]);
    r[q] = kind_alloc(k, COUNT * sizeof(float), p.st[q]);
  }
  char what[96];
  snprintf(what, sizeof what, "buffers from %s", kind_names[k]);
  allreduce_ok(&p, s, r, COUNT, ncclFloat32, what);
  for (int q = 0; q < NR; q++) {
    CK_CUDA(cudaSetDevice(p.devs[q]));
    kind_free(k, s[q], p.st[q]);
    kind_free(k, r[q], p.st[q]);
  }
  pair_close(&p);
}

START_TEST(test_memory_kinds_accepted) {
  kind_case((enum kind_id)_i);
}
END_TEST

/* Any alignment: sendbuff and recvbuff offset by different amounts. */
START_TEST(test_unaligned_accepted) {
  static const ncclDataType_t types[] = {ncclInt8, ncclFloat16, ncclFloat32, ncclFloat64};
  struct pair p;
  pair_open(&p, 0);
  for (int ti = 0; ti < 4; ti++) {
    size_t sz = dtype_find(types[ti])->size;
    for (size_t off = 1; off <= 3; off += 2) {
      void *s[NR], *r[NR];
      for (int q = 0; q < NR; q++) {
        s[q] = (char *)p.send[q] + off * sz;       /* elements 1 and 3 */
        r[q] = (char *)p.recv[q] + (4 - off) * sz; /* elements 3 and 1 */
      }
      char what[64];
      snprintf(what, sizeof what, "%s buffers at elements %zu and %zu", dtype_find(types[ti])->name,
               off, 4 - off);
      allreduce_ok(&p, s, r, COUNT - 4, types[ti], what);
    }
  }
  pair_close(&p);
}
END_TEST

/* The default streams belong to whatever GPU is current at launch, so they
 * are never refused: a one-rank communicator on each of them. */
START_TEST(test_default_streams_accepted) {
  ncclComm_t c;
  int dev = 0;
  CK_NCCL(ncclCommInitAll(&c, 1, &dev));
  CK_CUDA(cudaSetDevice(0));
  float *d = NULL, host[COUNT];
  CK_CUDA(cudaMalloc((void **)&d, 2 * COUNT * sizeof(float)));
  cudaStream_t streams[] = {NULL, cudaStreamLegacy, cudaStreamPerThread};
  for (int k = 0; k < 3; k++) {
    for (size_t i = 0; i < COUNT; i++) host[i] = (float)(i % 97) + (float)k;
    CK_CUDA(cudaMemcpy(d, host, COUNT * sizeof(float), cudaMemcpyHostToDevice));
    CK_CUDA(cudaMemset(d + COUNT, 0xff, COUNT * sizeof(float)));
    CK_CUDA(cudaDeviceSynchronize());
    CK_NCCL(ncclAllReduce(d, d + COUNT, COUNT, ncclFloat32, ncclSum, c, streams[k]));
    CK_CUDA(cudaDeviceSynchronize());
    CK_CUDA(cudaMemcpy(host, d + COUNT, COUNT * sizeof(float), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < COUNT; i++)
      ck_assert_msg(host[i] == (float)(i % 97) + (float)k,
                    "one rank on default stream %d: element %zu is %g", k, i, (double)host[i]);
  }
  cudaFree(d);
  CK_NCCL(ncclCommDestroy(c));
}
END_TEST

int main(int argc, char **argv) {
  ndev = gpu_require_device("gpu_checks");
  if (argc > 1 && strcmp(argv[1], "--host-ranks") == 0) {
    Suite *hs = suite_create("gpu_checks_host_ranks");
    TCase *htc = tcase_create("host_ranks");
    tcase_add_test(htc, host_ranks_body);
    suite_add_tcase(hs, htc);
    return suite_run_nofork(hs);
  }
  setenv("WEFT_CUDA_ENGINE", "1", 1); /* before the first NCCL call reads it */
  unsetenv("WEFT_DEVICE");
  int pageable = 0, same_address = 0;
  if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, 0) != cudaSuccess)
    pageable = 0;
  if (cudaDeviceGetAttribute(&same_address, cudaDevAttrCanUseHostPointerForRegisteredMem, 0) !=
      cudaSuccess)
    same_address = 0;

  Suite *s = suite_create("gpu_checks");
  TCase *tc = tcase_create("checks");
  if (pageable) {
    printf(
        "gpu_checks: GPU 0 reads pageable host memory (HMM/ATS), so malloc'd buffers are "
        "valid: the refusal of host pointers is not run, their acceptance is\n");
    tcase_add_loop_test(tc, test_memory_kinds_accepted, MK_PAGEABLE, MK_PAGEABLE + 1);
  } else {
    tcase_add_test(tc, test_host_pointer_refused);
  }
  tcase_add_test(tc, test_null_refused);
  tcase_add_test(tc, test_device_pointer_refused_on_host_ranks);
  tcase_add_test(tc, test_null_accepted);
  tcase_add_loop_test(tc, test_memory_kinds_accepted, MK_MANAGED, MK_REGISTERED);
  if (same_address)
    tcase_add_loop_test(tc, test_memory_kinds_accepted, MK_REGISTERED, MK_REGISTERED + 1);
  else
    printf(
        "gpu_checks: not run: cudaHostRegister'd buffers (GPU 0 maps them at another "
        "address)\n");
  tcase_add_loop_test(tc, test_memory_kinds_accepted, MK_ASYNC, MK_ASYNC + 1);
  tcase_add_test(tc, test_unaligned_accepted);
  tcase_add_test(tc, test_default_streams_accepted);
  if (ndev >= 2) {
    tcase_add_test(tc, test_other_device_buffer_refused);
#if CUDART_VERSION >= 12080
    tcase_add_test(tc, test_other_device_stream_refused);
#else
    printf(
        "gpu_checks: not run: the stream of another GPU (needs CUDA 12.8's "
        "cudaStreamGetDevice)\n");
#endif
  } else {
    printf(
        "gpu_checks: not run: a buffer and a stream of another GPU (they need 2 GPUs, %d "
        "found); not counted as passes\n",
        ndev);
  }
  fflush(stdout);
  suite_add_tcase(s, tc);
  return suite_run_nofork(s);
}
