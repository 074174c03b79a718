/* The CUDA engine: see exec/cuda.h and docs/CUDA.md. At init the GPU
 * transports (transport/gpu_transport.h: p2p, then net) link this rank to
 * its peers and the engine uploads the link tables its kernels read. Plans
 * go to the device once per shape and stay cached (exec/cuda_plans.c), so
 * a launch is one kernel on the caller's stream. */
#include "exec/cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "core/comm.h"
#include "exec/engine.h"
#include "exec/reduce.h"
#include "sched/tuning.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include "core/bootstrap.h"
#include "core/device.h"
#include "device/device.h"
#include "exec/cuda_direct.h"
#include "exec/cuda_leave.h"
#include "exec/cuda_one.h"
#include "exec/cuda_plans.h"
#include "exec/cuda_net.h"
#include "transport/gpu_transport.h"
#include "transport/p2p/p2p.h"

/* The host-mapped words a rank's kernels share with the host: abort
 * (kernels give up once it is set), error (device.h's error word) and the
 * description of the first timed-out wait. */
struct engine_flags {
  uint64_t abort;
  uint64_t error;
  struct weft_dev_wait_diag diag;
};

/* The GPU transports, in the order every rank connects them (collective),
 * and the state each keeps for this communicator. */
enum { LINKS_P2P, LINKS_NET, LINKS_N };
static const struct weft_gpu_transport_ops *const gpu_transports[LINKS_N] = {
    [LINKS_P2P] = &weft_p2p_gpu_ops,
    [LINKS_NET] = &weft_net_gpu_ops,
};

struct weft_cuda_engine {
  int dev;
  unsigned char *cross;            /* nranks: peer p runs on another GPU (weft_peer_same_gpu) */
  unsigned char *net_peer;         /* nranks: peer p is on another host: net links (cuda_net.h) */
  struct weft_cuda_net *net;       /* the net links' proxy side; NULL when no peer is a net peer */
  struct weft_cuda_direct *direct; /* direct collectives (cuda_direct.h); NULL: none */
  int p2p_parts;                   /* lanes (CTAs) a send/recv peer gets: p2p_parts_agree */
  void *links[LINKS_N];            /* gpu_transports[t]'s state (NULL: none) */
  struct weft_dev_conns conns;
  /* Host-mapped: kernels read and write it while the host reads it freely. */
  struct engine_flags *flags;
  cudaStream_t side; /* non-blocking: plan uploads and error reads */
  cudaEvent_t last;  /* recorded after each launch: destroy waits for it */
  /* The last launch's stream, and whether a capture recorded it (set by
   * launch_done, from what launch_order found: this_captured); nothing
   * launched yet while ordered is 0. */
  cudaStream_t last_stream;
  int last_captured, this_captured, ordered;
  cudaEvent_t join;  /* orders the streams of a group's calls */
  unsigned *barrier; /* device words of the fused launches' barrier */
  struct weft_cuda_plans plans;
  struct weft_cuda_leave *leave; /* this process's ranks of the communicator (NULL: one) */
  int leave_index;
};

#define CUDA_GOTO(comm, call, what, label)                                                \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      WARN("rank %d: CUDA engine: %s: %s", (comm)->rank, (what), cudaGetErrorString(e_)); \
      res = ncclUnhandledCudaError;                                                       \
      goto label;                                                                         \
    }                                                                                     \
  } while (0)

int weft_cuda_engine_max_channels(const struct ncclComm *comm) {
  return comm->cuda != NULL ? comm->cuda->conns.nchannels / 2 : 1;
}

/* Lanes (CTAs of 512 threads, one per SM) one launch may use: every rank
 * on the GPU has a launch running at once, and their CTAs wait for each
 * other, so together they must fit the GPU's SMs. */
static ncclResult_t lanes_cap(struct ncclComm *comm, const unsigned char *cross, int dev,
                              int *out) {
  int sms = 0, here = 0;
  cudaError_t err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) {
    WARN("rank %d: CUDA engine: the SM count of device %d: %s", comm->rank, dev,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  for (int p = 0; p < comm->nranks; p++) here += !cross[p];
  *out = sms / here > 0 ? sms / here : 1;
  INFO(WEFT_INIT, "rank %d: CUDA engine: %d ranks on device %d (%d SMs): at most %d CTAs a launch",
       comm->rank, here, dev, sms, *out);
  return ncclSuccess;
}

static ncclResult_t bootstrap_allgather(void *ctx, void *all, size_t bytes) {
  return weft_bootstrap_allgather(ctx, all, bytes);
}

static const struct weft_gpu_inbox_fns inbox_fns = {
    .create = weft_dev_inbox_create,
    .destroy = weft_dev_inbox_destroy,
    .link = weft_dev_inbox_link,
};

/* Links this rank to every peer, each through one GPU transport (net for
 * the net peers, p2p for the rest and for itself), asking the transports
 * in gpu_transports's order, and uploads the tables for nch channels. */
static ncclResult_t links_connect(struct ncclComm *comm, struct weft_cuda_engine *e, int nch) {
  ncclResult_t res = ncclSuccess;
  const struct weft_gpu_setup setup = {
      .rank = comm->rank,
      .nranks = comm->nranks,
      .nchannels = nch,
      .nslots = WEFT_DEV_NSLOTS,
      .slot_bytes = weft_p2p_slot_bytes(comm->rank, comm->nranks, e->cross),
      .ll128 = weft_tune_ll128_links(comm),
      .cuda_dev = e->dev,
      .cross = e->cross,
      .timeout_s = weft_param_int(WEFT_PARAM_TIMEOUT),
      .allgather = bootstrap_allgather,
      .allgather_ctx = comm->bootstrap,
      .error = &e->flags->error,
      .abort = (const volatile uint32_t *)&e->flags->abort,
      .inbox = &inbox_fns,
      .net_nic = comm->net_nic,
      .net_nic_port = comm->net_nic_port,
      .net_nic_gdr = comm->net_nic_gdr,
      .net_nic_gdr_why = comm->net_nic_gdr_why,
      .net_unplaced_gdr = comm->net_unplaced_gdr,
      .net_unplaced_gdr_why = comm->net_unplaced_gdr_why,
  };
  size_t n = (size_t)comm->nranks * nch;
  struct weft_dev_link *tables = calloc(2 * n, sizeof(*tables));
  unsigned char *mask = malloc((size_t)comm->nranks);
  if (tables == NULL || mask == NULL) {
    WARN("rank %d: out of memory for the CUDA engine's link tables", comm->rank);
    res = ncclSystemError;
    goto out;
  }
  for (int t = 0; t < LINKS_N; t++) {
    for (int p = 0; p < comm->nranks; p++) mask[p] = (t == LINKS_NET) == (e->net_peer[p] != 0);
    res = gpu_transports[t]->connect(&setup, mask, tables, tables + n, &e->links[t]);
    if (res != ncclSuccess) goto out;
  }
  struct weft_dev_conns shape = {.rank = comm->rank,
                                 .nranks = comm->nranks,
                                 .nchannels = nch,
                                 .nslots = WEFT_DEV_NSLOTS,
                                 .slot_bytes = setup.slot_bytes,
                                 .ll_slot_bytes = WEFT_DEV_LL_SLOT_BYTES,
                                 .ll128 = setup.ll128};
  res = weft_dev_conns_upload(&shape, tables, tables + n, &e->conns);
out:
  free(tables);
  free(mask);
  return res;
}

/* abort: no kernel waits are drained (init failed, or ncclCommAbort). */
static void engine_free(struct weft_cuda_engine *e, int abort) {
  weft_cuda_net_destroy(e->net); /* the proxy lets go of the net links first */
  weft_cuda_direct_destroy(e->direct);
  for (int t = LINKS_N - 1; t >= 0; t--) gpu_transports[t]->free(e->links[t], abort);
  weft_dev_conns_destroy(&e->conns);
  weft_cuda_plans_free(&e->plans);
  weft_dev_barrier_destroy(e->barrier);
  if (e->flags != NULL) cudaFreeHost(e->flags);
  if (e->side != NULL) cudaStreamDestroy(e->side);
  if (e->last != NULL) cudaEventDestroy(e->last);
  if (e->join != NULL) cudaEventDestroy(e->join);
  free(e->cross);
  free(e->net_peer);
  weft_cuda_leave_release(e->leave, e->leave_index);
  free(e);
}

/* Whether two ranks of comm are threads of one process on one GPU (they
 * then share its hardware queues). Every rank computes it from the same
 * peer table, so all agree. */
static int ranks_share_context(const struct ncclComm *comm) {
  for (int p = 0; p < comm->nranks; p++)
    for (int q = p + 1; q < comm->nranks; q++)
      if (comm->peers[p].pid == comm->peers[q].pid &&
          comm->peers[p].host_hash == comm->peers[q].host_hash &&
          weft_peer_same_gpu(&comm->peers[p], &comm->peers[q]))
        return 1;
  return 0;
}

/* Most lanes a send/recv peer gets; past this a peer's bytes are spread
 * over SMs enough to keep its links busy. */
#define P2P_MAX_PARTS 8

/* Lanes (CTAs, on channels 0..parts-1) each peer of a grouped send/recv
 * gets, the same on every rank: the fewest CTAs any rank may launch
 * (max_lanes, all-gathered) shared by every peer, so even a group with
 * every rank fits; 1 where any rank has net links (the proxy's links are
 * fewer). */
static ncclResult_t p2p_parts_agree(struct ncclComm *comm, int max_lanes, int nnet, int nch,
                                    int *out) {
  int *all = calloc((size_t)comm->nranks, sizeof(*all));
  if (all == NULL) {
    WARN("rank %d: out of memory agreeing on send/recv lanes", comm->rank);
    return ncclSystemError;
  }
  all[comm->rank] = nnet > 0 ? 0 : max_lanes;
  ncclResult_t res = weft_bootstrap_allgather(comm->bootstrap, all, sizeof(*all));
  int lo = max_lanes;
  for (int p = 0; res == ncclSuccess && p < comm->nranks; p++)
    if (all[p] < lo) lo = all[p];
  free(all);
  int parts = lo / comm->nranks;
  if (parts > P2P_MAX_PARTS) parts = P2P_MAX_PARTS;
  if (parts > nch) parts = nch;
  *out = parts < 1 ? 1 : parts;
  return res;
}

ncclResult_t weft_cuda_engine_create(struct ncclComm *comm) {
  ncclResult_t res = ncclSuccess;
  struct weft_cuda_engine *e = calloc(1, sizeof(*e));
  if (e != NULL) {
    e->cross = calloc((size_t)comm->nranks, 1);
    e->net_peer = calloc((size_t)comm->nranks, 1);
  }
  if (e == NULL || e->cross == NULL || e->net_peer == NULL ||
      weft_cuda_plans_init(comm, &e->plans) != ncclSuccess) {
    WARN("rank %d: out of memory for the CUDA engine", comm->rank);
    if (e != NULL) engine_free(e, 1);
    return ncclSystemError;
  }
  e->dev = comm->cuda_dev;
  /* By the PCI bus ids exchanged at init, so the same GPU counts once
   * whatever each process calls it (the kernel path runs on one host). */
  for (int p = 0; p < comm->nranks; p++)
    e->cross[p] = !weft_peer_same_gpu(&comm->peers[p], &comm->peers[comm->rank]);
  weft_device_select(e->dev);
  res = weft_dev_pool_no_hidden_waits(e->dev);
  if (res == ncclSuccess) res = weft_dev_load_kernels();
  int max_lanes = 1;
  if (res == ncclSuccess) res = lanes_cap(comm, e->cross, e->dev, &max_lanes);
  if (res != ncclSuccess) goto err;
  /* FIFOs for the most channels a plan can use (trees use twice as many). */
  int nch = weft_tune_max_channels(1);
  if (nch > max_lanes) nch = max_lanes;
  if (nch > WEFT_MAX_CHANNELS / 2) nch = WEFT_MAX_CHANNELS / 2;
  /* Each channel of a net peer is a network connection each way. */
  int nnet = weft_cuda_net_peers(comm, e->net_peer);
  const int net_max = nnet > 0 ? weft_cuda_net_max_channels(comm, nnet) : nch;
  if (nch > net_max) nch = net_max;
  if (nch < 1) nch = 1;
  res = p2p_parts_agree(comm, max_lanes, nnet, nch * 2, &e->p2p_parts);
  if (res == ncclSuccess) res = weft_cuda_leave_join(comm, &e->leave, &e->leave_index);
  if (res != ncclSuccess) goto err;
  CUDA_GOTO(comm, cudaStreamCreateWithFlags(&e->side, cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags", err);
  e->plans.side = e->side;
  CUDA_GOTO(comm, cudaEventCreateWithFlags(&e->last, cudaEventDisableTiming), "cudaEventCreate",
            err);
  CUDA_GOTO(comm, cudaEventCreateWithFlags(&e->join, cudaEventDisableTiming), "cudaEventCreate",
            err);
  CUDA_GOTO(comm, cudaHostAlloc((void **)&e->flags, sizeof(*e->flags), cudaHostAllocMapped),
            "cudaHostAlloc of the abort and error words", err);
  memset(e->flags, 0, sizeof(*e->flags));
  res = weft_dev_barrier_create(&e->barrier);
  if (res != ncclSuccess) goto err;
  res = links_connect(comm, e, nch * 2);
  if (res != ncclSuccess) goto err;
  struct engine_flags *flags_dev = NULL;
  CUDA_GOTO(comm, cudaHostGetDevicePointer((void **)&flags_dev, e->flags, 0),
            "cudaHostGetDevicePointer of the abort and error words", err);
  e->conns.abort = (const volatile uint32_t *)&flags_dev->abort;
  e->conns.error = &flags_dev->error;
  e->conns.diag = &flags_dev->diag;
  e->conns.timeout_ns = (uint64_t)weft_param_int(WEFT_PARAM_TIMEOUT) * 1000000000ull;
  if (nnet > 0)
    res = weft_cuda_net_create(comm, e->net_peer, &e->conns, e->links[LINKS_NET], &e->flags->error,
                               (const volatile uint32_t *)&e->flags->abort, &e->net);
  if (res != ncclSuccess) goto err;
  e->plans.net = e->net;
  if (nnet == 0) res = weft_cuda_direct_create(comm, e->cross, &e->direct);
  if (res != ncclSuccess) goto err;
  comm->cuda_direct = weft_cuda_direct_kind(e->direct);
  comm->cuda_direct_ll_bytes = weft_cuda_direct_ll_bytes(e->direct);
  comm->cuda_net_links = nnet > 0;
  comm->cuda_net_direct = nnet > 0 && !ranks_share_context(comm);
  weft_cuda_queues_check(comm);
  comm->cuda = e;
  comm->cuda_max_lanes = max_lanes;
  return ncclSuccess;
err:
  engine_free(e, 1);
  return res;
}

void weft_cuda_engine_abort(struct ncclComm *comm) {
  if (comm->cuda != NULL)
    __atomic_store_n((uint32_t *)&comm->cuda->flags->abort, 1, __ATOMIC_RELEASE);
}

ncclResult_t weft_cuda_engine_window_register(struct ncclComm *comm, void *buff, size_t size,
                                              void **out) {
  struct weft_cuda_engine *e = comm->cuda;
  *out = NULL;
  if (e == NULL) return ncclSuccess;
  weft_device_select(e->dev);
  return weft_cuda_direct_window_register(comm, e->direct, buff, size, out);
}

void weft_cuda_engine_window_release(struct ncclComm *comm, void *window) {
  struct weft_cuda_engine *e = comm->cuda;
  if (e == NULL || window == NULL) return;
  weft_device_select(e->dev);
  weft_cuda_direct_window_release(e->direct, window);
}

int weft_cuda_engine_mapped(const struct ncclComm *comm, const struct weft_coll *coll) {
  return comm->cuda != NULL && weft_cuda_direct_mapped(comm->cuda->direct, coll);
}

void weft_cuda_engine_issued(const struct ncclComm *comm) {
  if (comm->cuda != NULL)
    weft_cuda_leave_issued(comm->cuda->leave, comm->cuda->leave_index, comm->op_seq);
}

void weft_cuda_engine_issued_p2p(const struct ncclComm *comm, const struct weft_p2p *ops, int n) {
  if (comm->cuda == NULL || comm->cuda->leave == NULL) return;
  for (int k = 0; k < n; k++)
    weft_cuda_leave_p2p(comm->cuda->leave, comm->cuda->leave_index, ops[k].peer);
}

void weft_cuda_engine_destroy(struct ncclComm *comm, int abort) {
  struct weft_cuda_engine *e = comm->cuda;
  if (e == NULL) return;
  comm->cuda = NULL;
  weft_device_select(e->dev);
  if (abort) __atomic_store_n((uint32_t *)&e->flags->abort, 1, __ATOMIC_RELEASE);
  /* Kernels still reading the links or the plans must end first; with the
   * abort word set they end within one poll. */
  cudaEventSynchronize(e->last);
  if (!abort) weft_cuda_net_drain(e->net); /* the last slots the kernels published */
  /* Before any free: frees wait for every kernel on the GPU, so the
   * rank-threads sharing this process must have launched their last
   * collective (exec/cuda_leave.c). */
  weft_cuda_leave_wait(e->leave, e->leave_index, comm->op_seq, abort,
                       (double)weft_param_int(WEFT_PARAM_TIMEOUT));
  engine_free(e, abort);
}

/* Elements of the input a collective reads: count, or count per rank for
 * ReduceScatter. */
static size_t coll_in_count(const struct ncclComm *comm, const struct weft_coll *coll) {
  return coll->func == WEFT_FUNC_REDUCESCATTER ? coll->count * (size_t)comm->nranks : coll->count;
}

/* PreMulSum's first half: a stream-ordered copy of the input scaled by the
 * scalar (read on the device when the kernel runs), which the plan then
 * sums, exactly as the host engine scales a private copy (host_task.c).
 * *scaled_out stays NULL when there is no input to scale. */
static ncclResult_t premul_input(struct ncclComm *comm, const struct weft_coll *coll,
                                 const struct weft_cuda_premul *premul, cudaStream_t s,
                                 void **scaled_out) {
  size_t elems = coll_in_count(comm, coll), bytes = elems * weft_dtype_size(coll->datatype);
  *scaled_out = NULL;
  if (bytes == 0 || coll->sendbuff == NULL) return ncclSuccess;
  void *scaled = NULL;
  cudaError_t err = cudaMallocAsync(&scaled, bytes, s);
  if (err != cudaSuccess) {
    WARN("rank %d: %s: a %zu-byte PreMulSum input on the stream: %s", comm->rank,
         weft_func_name(coll->func), bytes, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  struct weft_dev_scalar scalar = {.ptr = premul->dev_ptr};
  memcpy(scalar.value, premul->value, sizeof(scalar.value));
  ncclResult_t res = weft_dev_scale(scaled, coll->sendbuff, elems, coll->datatype, &scalar, s);
  if (res != ncclSuccess) {
    cudaFreeAsync(scaled, s);
    return res;
  }
  *scaled_out = scaled;
  return ncclSuccess;
}

/* A launch of more CTAs than the GPU runs alongside the other ranks' could
 * wait forever for a peer's CTA that never gets an SM: refused instead. */
static ncclResult_t lanes_fit(const struct ncclComm *comm, const char *what, int nlanes) {
  if (nlanes <= comm->cuda_max_lanes) return ncclSuccess;
  WARN(
      "rank %d: %s: this launch needs %d CTAs, but with the other ranks on its GPU at most %d "
      "run at once; the kernels would wait for each other forever (fewer ranks per GPU, fewer "
      "peers per group, or a lower NCCL_MAX_NCHANNELS)",
      comm->rank, what, nlanes, comm->cuda_max_lanes);
  return ncclInvalidUsage;
}

/* Launches of a communicator run one after another, as NCCL's do, on
 * whatever streams they are issued: they share the links (FIFOs, boards,
 * barrier words) and the plan cache, which two of them running at once
 * would mix. A launch on another stream than the last one waits for the
 * last one's end (the event launch_done records), before anything of it
 * is queued. Not across a capture's boundary (the last launch captured,
 * or this one): CUDA lets no stream wait for an event of another capture
 * or of none, and a graph's kernels run where the program launches it,
 * so a program mixing captured and uncaptured calls of one communicator
 * on different streams orders them itself (docs/CUDA.md). */
static ncclResult_t launch_order(struct ncclComm *comm, const char *what, cudaStream_t s) {
  struct weft_cuda_engine *e = comm->cuda;
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  int captured = cudaStreamIsCapturing(s, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone;
  if (e->ordered && s != e->last_stream && !captured && !e->last_captured) {
    cudaError_t err = cudaStreamWaitEvent(s, e->last, 0);
    if (err != cudaSuccess) {
      WARN(
          "rank %d: %s: ordering this launch after the communicator's last one, on another "
          "stream: %s",
          comm->rank, what, cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  e->this_captured = captured;
  return ncclSuccess;
}

/* Records the launch's end on stream, for the next launch on another stream
 * (launch_order) and for destroy to wait on. */
static ncclResult_t launch_done(struct ncclComm *comm, const char *what, cudaStream_t s) {
  struct weft_cuda_engine *e = comm->cuda;
  cudaError_t err = cudaEventRecord(e->last, s);
  if (err != cudaSuccess) {
    WARN("rank %d: %s: cudaEventRecord after the launch: %s", comm->rank, what,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  e->last_stream = s;
  e->last_captured = e->this_captured;
  e->ordered = 1;
  return ncclSuccess;
}

/* The cached, uploaded plan of a collective, checked to fit the GPU and
 * marked used by this launch (on stream s, after launch_order). */
static ncclResult_t coll_plan(struct ncclComm *comm, const struct weft_coll *coll,
                              const struct weft_sched_args *args, int algo, int proto,
                              cudaStream_t s, struct weft_cuda_plan **out) {
  struct weft_cuda_engine *e = comm->cuda;
  struct weft_cuda_plan_key key;
  memset(&key, 0, sizeof(key));
  key.func = (int)args->func;
  key.algo = algo;
  key.proto = proto;
  key.count = args->count;
  key.elem_size = args->elem_size;
  /* A direct plan depends on its byte count alone. */
  if (algo != WEFT_ALGO_DIRECT) {
    key.nchannels = args->nchannels;
    key.root = args->root;
    key.chunk_bytes = args->chunk_bytes;
  }
  struct weft_cuda_plan *entry;
  WEFT_CHECK(weft_cuda_plans_coll(comm, &e->plans, &key, args, s, &entry));
  WEFT_CHECK(lanes_fit(comm, weft_func_name(coll->func), entry->plan.nlanes));
  entry->plan.proto = proto; /* in the key too: an entry serves one protocol */
  weft_cuda_plans_use(&e->plans, entry, e->this_captured);
  *out = entry;
  return ncclSuccess;
}

ncclResult_t weft_cuda_engine_launch(struct ncclComm *comm, const struct weft_coll *coll,
                                     const struct weft_sched_args *args, int algo, int proto,
                                     const struct weft_cuda_premul *premul, void *stream) {
  struct weft_cuda_engine *e = comm->cuda;
  cudaStream_t s = (cudaStream_t)stream;
  if (comm->nranks == 1 && premul == NULL && coll->sendbuff == coll->recvbuff) return ncclSuccess;
  weft_device_select(e->dev);
  if (comm->nranks == 1) return weft_cuda_one_rank(comm, coll, premul, s);
  WEFT_CHECK(launch_order(comm, weft_func_name(coll->func), s));
  /* Direct on the ranks' own buffers, or a plan over the links. */
  const int own =
      algo == WEFT_ALGO_DIRECT && weft_cuda_direct_runs(e->direct, coll, premul != NULL);
  struct weft_cuda_plan *entry = NULL;
  if (!own) WEFT_CHECK(coll_plan(comm, coll, args, algo, proto, s, &entry));
  const void *in = coll->sendbuff;
  ncclRedOp_t op = coll->op;
  void *scaled = NULL;
  if (premul != NULL) {
    WEFT_CHECK(premul_input(comm, coll, premul, s, &scaled));
    if (scaled != NULL) in = scaled;
    op = ncclSum;
  }
  ncclResult_t res;
  if (own) {
    res = weft_cuda_direct_launch(comm, e->direct, &e->conns, coll, in, op, s);
  } else {
    res = weft_cuda_net_post(comm, entry->net_ops, s);
    if (res == ncclSuccess)
      res =
          weft_dev_plan_launch(&entry->plan, &e->conns, in, coll->recvbuff, coll->datatype, op, s);
    /* Direct over the links: the plan exchanged the inputs; the arrivals
     * are reduced in rank order by a second kernel in stream order. The
     * host engine's Direct also sends a call record ahead of the data
     * (host_check.c) to catch ranks that called different collectives;
     * the device skips it, as every CUDA engine plan does: the kernels
     * trust that all ranks made the same call, as NCCL's kernels do. */
    if (res == ncclSuccess && algo == WEFT_ALGO_DIRECT)
      res = weft_dev_direct_reduce(&entry->plan, comm->rank, comm->nranks, in, coll->recvbuff,
                                   coll->count, coll->datatype, op, s);
  }
  /* Stream-ordered: freed once the kernels above have read it (a direct
   * kernel ends only once every peer is done reading it). */
  if (scaled != NULL) cudaFreeAsync(scaled, s);
  if (res != ncclSuccess) {
    WARN("rank %d: %s: launching on the CUDA engine failed", comm->rank,
         weft_func_name(coll->func));
    return res;
  }
  return launch_done(comm, weft_func_name(coll->func), s);
}

/* ---- Grouped send/recv --------------------------------------------------- */

/* With fork, streams[0] waits for what is queued on every other stream;
 * without, every other stream waits for what is queued on streams[0]. One
 * event serves all: a wait takes the record made just before it. what
 * names the calls for an error. */
static ncclResult_t streams_join(struct ncclComm *comm, const char *what, void *const *streams,
                                 int nstreams, int fork) {
  cudaEvent_t ev = comm->cuda->join;
  for (int i = 1; i < nstreams; i++) {
    cudaStream_t from = (cudaStream_t)(fork ? streams[i] : streams[0]);
    cudaStream_t to = (cudaStream_t)(fork ? streams[0] : streams[i]);
    cudaError_t err = cudaEventRecord(ev, from);
    if (err == cudaSuccess) err = cudaStreamWaitEvent(to, ev, 0);
    if (err != cudaSuccess) {
      WARN("rank %d: %s: ordering the %d streams of the group's calls: %s", comm->rank, what,
           nstreams, cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

/* Whether op k, a direct send marked for staging, is an in-place twin:
 * the direct receive from the same peer has its buffer and size, and it
 * overlaps no other receive of the group. The direct kernel moves those
 * without a copy aside (direct_p2p.cu). */
static int inplace_twin(const struct weft_cuda_p2p *p, const unsigned char *direct, int k) {
  const struct weft_p2p *o = &p->ops[k];
  const char *lo = p->bufs[k], *hi = lo + o->bytes;
  int twin = 0;
  for (int j = 0; j < p->nops; j++) {
    const struct weft_p2p *r = &p->ops[j];
    if (r->is_send || r->bytes == 0) continue;
    const char *rlo = p->bufs[j], *rhi = rlo + r->bytes;
    if (direct[j] && r->peer == o->peer && rlo == lo && r->bytes == o->bytes)
      twin = 1;
    else if (rlo < hi && lo < rhi)
      return 0;
  }
  return twin;
}

/* Copies the marked sends aside on s (one stream-ordered allocation) and
 * points bufs at the copies; *copies_out (NULL: none) is freed by the
 * caller in stream order after the kernel. direct (NULL: none) marks the
 * ops the direct kernel runs: their in-place twins stay where they are. */
static ncclResult_t stage_sends(struct ncclComm *comm, const struct weft_cuda_p2p *p,
                                const unsigned char *direct, cudaStream_t s, void **bufs,
                                char **copies_out) {
  size_t total = 0;
  *copies_out = NULL;
  unsigned char *stage = malloc((size_t)(p->nops > 0 ? p->nops : 1));
  if (stage == NULL) {
    WARN("rank %d: send/recv: out of memory for %d operations", comm->rank, p->nops);
    return ncclSystemError;
  }
  for (int k = 0; k < p->nops; k++) {
    stage[k] = p->stage[k] && !(direct != NULL && direct[k] && inplace_twin(p, direct, k));
    if (stage[k]) total += (p->ops[k].bytes + 255) & ~(size_t)255;
  }
  if (total == 0) {
    free(stage);
    return ncclSuccess;
  }
  char *copies = NULL;
  cudaError_t err = cudaMallocAsync((void **)&copies, total, s);
  size_t off = 0;
  for (int k = 0; k < p->nops && err == cudaSuccess; k++) {
    if (!stage[k] || p->ops[k].bytes == 0) continue;
    err = cudaMemcpyAsync(copies + off, p->bufs[k], p->ops[k].bytes, cudaMemcpyDefault, s);
    bufs[k] = copies + off;
    off += (p->ops[k].bytes + 255) & ~(size_t)255;
  }
  free(stage);
  if (err != cudaSuccess) {
    WARN("rank %d: send/recv: copying %zu bytes of sends that overlap receives: %s", comm->rank,
         total, cudaGetErrorString(err));
    if (copies != NULL) cudaFreeAsync(copies, s);
    return ncclUnhandledCudaError;
  }
  *copies_out = copies;
  return ncclSuccess;
}

_Static_assert(WEFT_CUDA_FUSE_MAX <= WEFT_DEV_FUSE_MAX,
               "a fused launch of the engine must fit the device's kernel parameters");

ncclResult_t weft_cuda_engine_launch_fused(struct ncclComm *comm,
                                           const struct weft_cuda_call *calls, int n) {
  struct weft_cuda_engine *e = comm->cuda;
  if (n < 2 || n > WEFT_CUDA_FUSE_MAX) {
    WARN("rank %d: CUDA engine: a fused launch of %d collectives (2..%d)", comm->rank, n,
         WEFT_CUDA_FUSE_MAX);
    return ncclInternalError;
  }
  cudaStream_t s = (cudaStream_t)calls[0].stream;
  void *streams[WEFT_CUDA_FUSE_MAX];
  int nstreams = 0;
  struct weft_dev_fused_coll fc[WEFT_CUDA_FUSE_MAX];
  struct weft_cuda_plan *entries[WEFT_CUDA_FUSE_MAX];
  weft_device_select(e->dev);
  WEFT_CHECK(launch_order(comm, "a group's collectives", s));
  for (int i = 0; i < n; i++) {
    const struct weft_cuda_call *c = &calls[i];
    struct weft_cuda_plan *entry;
    WEFT_CHECK(coll_plan(comm, c->coll, &c->args, c->algo, c->proto, s, &entry));
    entries[i] = entry;
    fc[i] = (struct weft_dev_fused_coll){&entry->plan, c->coll->sendbuff, c->coll->recvbuff,
                                         c->coll->datatype, c->coll->op};
    nstreams = weft_cuda_stream_add(streams, nstreams, c->stream);
  }
  WEFT_CHECK(streams_join(comm, "a group's collectives", streams, nstreams, 1));
  for (int i = 0; i < n; i++) WEFT_CHECK(weft_cuda_net_post(comm, entries[i]->net_ops, s));
  ncclResult_t res = weft_dev_fused_launch(fc, n, &e->conns, e->barrier, s);
  if (res != ncclSuccess) {
    WARN("rank %d: launching %d collectives of a group as one kernel failed", comm->rank, n);
    return res;
  }
  WEFT_CHECK(launch_done(comm, "a group's collectives", s));
  return streams_join(comm, "a group's collectives", streams, nstreams, 0);
}

/* The FIFO plan of nops ops (bufs: their buffers), launched on s. */
static ncclResult_t p2p_plan_launch(struct ncclComm *comm, const struct weft_p2p *ops,
                                    void *const *bufs, int nops, cudaStream_t s) {
  struct weft_cuda_engine *e = comm->cuda;
  struct weft_cuda_plan *entry;
  WEFT_CHECK(weft_cuda_plans_p2p(comm, &e->plans, ops, nops, e->p2p_parts, s, &entry));
  WEFT_CHECK(lanes_fit(comm, "send/recv", entry->plan.nlanes));
  weft_cuda_plans_use(&e->plans, entry, e->this_captured);
  WEFT_CHECK(weft_cuda_net_post(comm, entry->net_ops, s));
  return weft_dev_p2p_launch(&entry->plan, &e->conns, bufs, nops, s);
}

/* The ops of p not marked in direct, with their buffers, compacted into
 * ops (nops entries of room) and bufs (in place); returns how many. */
static int p2p_rest(const struct weft_cuda_p2p *p, const unsigned char *direct,
                    struct weft_p2p *ops, void **bufs) {
  int n = 0;
  for (int k = 0; k < p->nops; k++)
    if (!direct[k]) ops[n] = p->ops[k], bufs[n++] = bufs[k];
  return n;
}

ncclResult_t weft_cuda_engine_launch_p2p(struct ncclComm *comm, const struct weft_cuda_p2p *p) {
  struct weft_cuda_engine *e = comm->cuda;
  cudaStream_t s = (cudaStream_t)p->streams[0];
  ncclResult_t one = ncclSuccess;
  if (weft_cuda_one_rank_p2p(comm, p, s, e->dev, &one)) return one;
  weft_device_select(e->dev);
  WEFT_CHECK(launch_order(comm, "send/recv", s));
  size_t n = (size_t)(p->nops > 0 ? p->nops : 1);
  void **bufs = malloc(n * sizeof(*bufs));
  unsigned char *direct = malloc(n);
  if (bufs == NULL || direct == NULL) {
    free(bufs);
    free(direct);
    WARN("rank %d: send/recv: out of memory for %d buffers", comm->rank, p->nops);
    return ncclSystemError;
  }
  memcpy(bufs, p->bufs, (size_t)p->nops * sizeof(*bufs));
  int ndirect = weft_cuda_direct_p2p_pick(e->direct, comm->nranks, p->ops, p->nops, direct);
  char *copies = NULL;
  ncclResult_t res = streams_join(comm, "send/recv", p->streams, p->nstreams, 1);
  if (res == ncclSuccess) res = stage_sends(comm, p, ndirect > 0 ? direct : NULL, s, bufs, &copies);
  /* Every rank launches its direct part first: a direct kernel waits only
   * for its peers' direct kernels, never behind a FIFO plan. */
  if (res == ncclSuccess && ndirect > 0)
    res = weft_cuda_direct_p2p_launch(comm, e->direct, &e->conns, p->ops, bufs, direct, p->nops, s);
  if (res == ncclSuccess && ndirect == 0) {
    res = p2p_plan_launch(comm, p->ops, bufs, p->nops, s);
  } else if (res == ncclSuccess && ndirect < p->nops) {
    /* Only a group that mixes both paths pays for a list of the rest. */
    struct weft_p2p *rest = malloc((size_t)p->nops * sizeof(*rest));
    if (rest == NULL) {
      WARN("rank %d: send/recv: out of memory for %d operations", comm->rank, p->nops);
      res = ncclSystemError;
    } else {
      res = p2p_plan_launch(comm, rest, bufs, p2p_rest(p, direct, rest, bufs), s);
      free(rest);
    }
  }
  if (copies != NULL) cudaFreeAsync(copies, s);
  free(bufs);
  free(direct);
  if (res != ncclSuccess) return res;
  WEFT_CHECK(launch_done(comm, "send/recv", s));
  return streams_join(comm, "send/recv", p->streams, p->nstreams, 0);
}

ncclResult_t weft_cuda_engine_check(struct ncclComm *comm) {
  const struct weft_cuda_engine *e = comm->cuda;
  if (e == NULL) return ncclSuccess;
  /* Host memory: read without a CUDA call, so it costs nothing and works
   * while another thread captures a graph. */
  uint64_t v = __atomic_load_n(&e->flags->error, __ATOMIC_ACQUIRE);
  if (v == 0) return ncclSuccess;
  int who = WEFT_DEV_ERROR_RANK(v), peer = WEFT_DEV_ERROR_PEER(v);
  switch (WEFT_DEV_ERROR_REASON(v)) {
    case WEFT_DEV_ERR_P2P_SIZE:
      WARN(
          "rank %d: CUDA engine: a send/recv between rank %d and rank %d: the ncclSend's byte "
          "count is not the one the ncclRecv posted; nothing was copied and the communicator "
          "has failed",
          comm->rank, who, peer);
      break;
    case WEFT_DEV_ERR_NET:
      WARN(
          "rank %d: CUDA engine: the network link between rank %d and rank %d failed (the peer "
          "died or closed its connection); the communicator has failed",
          comm->rank, who, peer);
      break;
    case WEFT_DEV_ERR_WINDOW:
      WARN(
          "rank %d: CUDA engine: a direct collective across processes: rank %d's buffer is not "
          "in a window registered with ncclCommWindowRegister on every rank (rank %d's view); "
          "nothing was moved and the communicator has failed",
          comm->rank, peer, who);
      break;
    case WEFT_DEV_ERR_P2P_STEP:
      WARN(
          "rank %d: CUDA engine: what rank %d received from rank %d where an ncclRecv waited "
          "is not a send (the ranks' calls are out of step: a collective on one, send/recv on "
          "the other?); the communicator has failed",
          comm->rank, who, peer);
      break;
    default: {
      char what[256];
      weft_dev_wait_describe(&e->flags->diag, e->conns.nslots, what, sizeof(what));
      WARN(
          "rank %d: CUDA engine: rank %d waited %.0f s (WEFT_TIMEOUT) for rank %d: %s; a rank "
          "that did not make the same call, or whose kernel cannot run, stops its peers; the "
          "communicator has failed",
          comm->rank, who, (double)e->conns.timeout_ns / 1e9, peer, what);
      break;
    }
  }
  return ncclRemoteError;
}

#else /* no kernels in this build */

int weft_cuda_engine_max_channels(const struct ncclComm *comm) {
  (void)comm;
  return 1;
}

ncclResult_t weft_cuda_engine_create(struct ncclComm *comm) {
  WARN("rank %d: the CUDA engine is not in this build", comm->rank);
  return ncclInvalidUsage;
}

void weft_cuda_engine_destroy(struct ncclComm *comm, int abort) {
  (void)comm;
  (void)abort;
}

void weft_cuda_engine_abort(struct ncclComm *comm) {
  (void)comm;
}

ncclResult_t weft_cuda_engine_window_register(struct ncclComm *comm, void *buff, size_t size,
                                              void **out) {
  return weft__engine_no_window(comm, buff, size, out);
}

void weft_cuda_engine_window_release(struct ncclComm *comm, void *window) {
  weft__engine_no_window_release(comm, window);
}

int weft_cuda_engine_mapped(const struct ncclComm *comm, const struct weft_coll *coll) {
  (void)comm, (void)coll;
  return 0;
}

void weft_cuda_engine_issued(const struct ncclComm *comm) {
  (void)comm;
}

void weft_cuda_engine_issued_p2p(const struct ncclComm *comm, const struct weft_p2p *ops, int n) {
  (void)comm, (void)ops, (void)n;
}

ncclResult_t weft_cuda_engine_launch(struct ncclComm *comm, const struct weft_coll *coll,
                                     const struct weft_sched_args *args, int algo, int proto,
                                     const struct weft_cuda_premul *premul, void *stream) {
  (void)coll;
  (void)args;
  (void)algo;
  (void)proto;
  (void)premul;
  (void)stream;
  WARN("rank %d: the CUDA engine is not in this build", comm->rank);
  return ncclInvalidUsage;
}

ncclResult_t weft_cuda_engine_launch_fused(struct ncclComm *comm,
                                           const struct weft_cuda_call *calls, int n) {
  (void)calls;
  (void)n;
  WARN("rank %d: the CUDA engine is not in this build", comm->rank);
  return ncclInvalidUsage;
}

ncclResult_t weft_cuda_engine_launch_p2p(struct ncclComm *comm, const struct weft_cuda_p2p *p2p) {
  (void)p2p;
  WARN("rank %d: the CUDA engine is not in this build", comm->rank);
  return ncclInvalidUsage;
}

ncclResult_t weft_cuda_engine_check(struct ncclComm *comm) {
  (void)comm;
  return ncclSuccess;
}

#endif
