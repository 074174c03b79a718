/* Tuning: a cost model picks the algorithm and protocol of each
 * collective, and the channel count and chunk size follow the message
 * size; NCCL_ALGO, NCCL_PROTO, NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS
 * override, read once per process in NCCL's syntax.
 *
 * The model is latency + bytes / bandwidth per algorithm, with a link's
 * latency (alpha) and bandwidth (beta) per path type, algorithm and
 * protocol from the table of sched/tuning_fit.c: fitted from weft-bench
 * runs (bench/tune-sweep.sh, bench/weft-fit) where measured, the old
 * hand-set figures where not. The choice is the (algorithm, protocol)
 * whose time is least among those NCCL_ALGO and NCCL_PROTO allow, and its
 * time is ncclGroupSimulateEnd's estimate. NCCL_DEBUG_SUBSYS=TUNING logs
 * the path type, the choice and the estimate of every call.
 *
 * The protocol matters on the CUDA engine only (host ranks run Simple). */
#include "sched/tuning.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>

#include "core/comm.h"
#include "base/debug.h"
#include "base/param.h"

#define DEFAULT_CHUNK (512 * 1024)
/* The CUDA engine's step is a chunk, and the pipeline drains at every
 * step's end, so its chunks are larger. Measured on 2 H200s over NVLink
 * (nccl-tests all_reduce_perf through weft, 16 channels, 128 KiB slots,
 * 1 GiB, 2026-11-29): busbw 55 GB/s with 128 KiB chunks, 156 with 512 KiB, 203
 * with 2 MiB, 212 with 4 MiB, 202 with 8 MiB. */
#define CUDA_DEFAULT_CHUNK (4 * 1024 * 1024)
/* Most channels without NCCL_MAX_NCHANNELS: host ranks gain little past 2
 * (every lane runs on the rank's one worker thread) unless sockets with
 * helper threads carry the links (comm->host_channels, core/comm_topo.c);
 * the CUDA engine's lanes are CTAs. */
#define HOST_DEFAULT_CHANNELS 2
/* Same runs, 512 KiB chunks: 97 GB/s with 8 channels, 156 with 16, 152
 * with 32; 4 MiB chunks: 212 with 16, 209 with 24, 212 with 32. */
#define CUDA_DEFAULT_CHANNELS 16
/* Bytes per channel below which another channel does not pay off: host
 * ranks and net links. */
#define BYTES_PER_CHANNEL (1024 * 1024)
/* The CUDA engine's links inside a host: another CTA pays from 8 KiB of
 * message. 2 processes on one H200 (MPS, the ring on IPC FIFOs), AllReduce
 * with channels forced by NCCL_MIN_NCHANNELS: 1 MiB 62.6 us on 1 channel,
 * 22.2 on 4, 18.0 on 8, 13.6 on 16; 64 KiB 14.2, 12.1, 10.9, 11.2;
 * AllGather fastest on 16 at every size from 64 KiB
 * (docs/PERFORMANCE.md, "Ninth pass"; the default since the tenth). */
#define CUDA_BYTES_PER_CHANNEL (8 * 1024)

/* Direct sends n-1 copies of the input: worth it only while latency rules;
 * a placeholder row is trusted up to this size (a fitted one everywhere). */
#define DIRECT_MAX_BYTES (16 * 1024)

/* NCCL's protocols; the host engine runs Simple whatever is asked. */
enum { PROTO_SIMPLE, PROTO_LL, PROTO_LL128, PROTO_NCCL_COUNT };
/* The ones weft has (bits of PROTO_*; PROTO_x == WEFT_PROTO_x). */
#define WEFT_PROTOS ((1u << PROTO_SIMPLE) | (1u << PROTO_LL) | (1u << PROTO_LL128))
_Static_assert(PROTO_SIMPLE == (int)WEFT_PROTO_SIMPLE && PROTO_LL == (int)WEFT_PROTO_LL &&
                   PROTO_LL128 == (int)WEFT_PROTO_LL128 &&
                   PROTO_NCCL_COUNT == (int)WEFT_PROTO_COUNT,
               "weft's protocols are NCCL's");
/* NCCL_ALGO and NCCL_PROTO are parsed by the parameter table
 * (base/param_table.c): names in the order of enum weft_algo, then NCCL's
 * algorithms weft lacks; protocols in PROTO_* order; keys in enum
 * weft_func order. */
#define WEFT_ALGOS ((1u << WEFT_ALGO_COUNT) - 1)
static const char *const algo_names[WEFT_ALGO_COUNT] = {"Ring", "Tree", "Direct"};

static struct {
  unsigned algo_mask[WEFT_FUNC_COUNT];  /* bit per enum weft_algo */
  unsigned proto_mask[WEFT_FUNC_COUNT]; /* bit per PROTO_* */
} tuning;
static pthread_once_t tuning_once = PTHREAD_ONCE_INIT;

static void tuning_load(void) {
  for (int f = 0; f < WEFT_FUNC_COUNT; f++) {
    tuning.algo_mask[f] = WEFT_ALGOS;
    tuning.proto_mask[f] = (1u << PROTO_NCCL_COUNT) - 1;
  }
  int foreign = 0;
  if (weft_param_list(WEFT_PARAM_ALGO, tuning.algo_mask, WEFT_FUNC_COUNT))
    for (int f = 0; f < WEFT_FUNC_COUNT; f++) {
      foreign |= (tuning.algo_mask[f] & ~WEFT_ALGOS) != 0;
      tuning.algo_mask[f] &= WEFT_ALGOS;
    }
  if (foreign)
    INFO(WEFT_TUNING,
         "NCCL_ALGO=%s: NCCL's CollNet, NVLS and PAT are not algorithms of weft; "
         "ignored",
         weft_param_str(WEFT_PARAM_ALGO));
  /* Where NCCL_ALGO leaves a collective nothing weft has, it runs Ring
   * (algos_allowed); NCCL would refuse the call, so say it once. */
  int none = 0;
  for (int f = 0; f < WEFT_FUNC_COUNT; f++) none |= tuning.algo_mask[f] == 0;
  if (none)
    WARN(
        "NCCL_ALGO=%s leaves some collectives none of weft's algorithms (Ring, Tree, Direct); "
        "they run Ring",
        weft_param_str(WEFT_PARAM_ALGO));
  const char *proto = weft_param_str(WEFT_PARAM_PROTO);
  weft_param_list(WEFT_PARAM_PROTO, tuning.proto_mask, WEFT_FUNC_COUNT);
  /* A collective NCCL_PROTO leaves without a protocol is tuned as if it
   * did not name it. */
  int lost = 0;
  for (int f = 0; f < WEFT_FUNC_COUNT; f++) {
    if ((tuning.proto_mask[f] & WEFT_PROTOS) != 0) continue;
    tuning.proto_mask[f] |= WEFT_PROTOS;
    lost = 1;
  }
  if (lost)
    WARN(
        "NCCL_PROTO=%s leaves some collectives without a protocol (Simple, LL, LL128); they "
        "get the one the tuning model picks",
        proto != NULL ? proto : "");
}

/* Shared memory when every peer is on this host and it is not disabled. */
static int comm_on_shm(const struct ncclComm *comm) {
  if (weft_param_int(WEFT_PARAM_SHM_DISABLE) != 0) return 0;
  for (int i = 0; i < comm->nranks; i++)
    if (comm->peers[i].host_hash != comm->peers[comm->rank].host_hash) return 0;
  return 1;
}

/* The path type whose rows the model reads. GPU ranks: the topology's
 * answer (comm->gpu_path), else what the engine knows; the same on every
 * rank, as every input of the choice must be. */
static enum weft_tune_path tune_path(const struct ncclComm *comm, int kernels) {
  if (comm->nranks == 1) return WEFT_TUNE_LOCAL;
  if (!kernels) return comm_on_shm(comm) ? WEFT_TUNE_SHM : WEFT_TUNE_SOCKET;
  if (comm->cuda_net_links) return WEFT_TUNE_NET;
  if (comm->gpu_path > 0 && comm->gpu_path < WEFT_TUNE_PATH_COUNT)
    return (enum weft_tune_path)comm->gpu_path;
  if (comm->cuda_direct == 1) return WEFT_TUNE_SAME_GPU;
  return comm_on_shm(comm) ? WEFT_TUNE_NVLINK : WEFT_TUNE_NET;
}

/* The algorithms the model may pick for func: NCCL_ALGO's (Ring when it
 * leaves nothing weft has for func); Tree is AllReduce's, and so is Direct
 * but on host ranks. */
static unsigned algos_allowed(enum weft_func func, int cuda) {
  unsigned mask = tuning.algo_mask[func];
  /* On the CUDA engine Direct adds a second kernel (the rank-ordered
   * reduction), keeps a group from being one launch, and has not been
   * measured faster where every link is a GPU's: it runs only when
   * NCCL_ALGO names it. Over net links (cuda == 2: comm->cuda_net_direct,
   * set where no two ranks are threads of one process on one GPU, whose
   * shared hardware queues could hold a rank's second kernel behind a
   * peer's spinning one, as seen with NCCL_ALGO=Direct and 8 rank-threads
   * on one H200) one network hop instead
   * of the ring's 2(n-1) pays for that: on the H200 (2 GPU ranks on
   * simulated hosts, loopback, 2026-12-02) an 8 B all-reduce took 31.7 us
   * with Direct against 52.5 us with Ring, 32 KiB 42.7 against 67.7. */
  if (cuda == 1 && weft_param_str(WEFT_PARAM_ALGO) == NULL) mask &= ~(1u << WEFT_ALGO_DIRECT);
  /* The host engine runs every collective directly (exec/host_check.c);
   * the CUDA engine's Direct over the links is AllReduce's. */
  unsigned have = 1u << WEFT_ALGO_RING;
  if (func == WEFT_FUNC_ALLREDUCE)
    have = WEFT_ALGOS;
  else if (cuda == 0)
    have |= 1u << WEFT_ALGO_DIRECT;
  mask &= have;
  return mask != 0 ? mask : 1u << WEFT_ALGO_RING;
}

/* Whether every link of the communicator keeps a 128-byte line whole, as
 * LL128 needs (device/proto_ll128.cuh): GPUs joined by NVLink, by the
 * topology's answer (comm->gpu_path: its worst pair), as NCCL runs it. Not
 * PCIe, host memory or the network, and not a path only guessed; and no
 * two ranks on one GPU (comm->gpu_shared), where nothing promises it and
 * LL128 measured slower than Simple at every size (docs/CUDA.md, "LL128"). */
int weft_tune_ll128_links(const struct ncclComm *comm) {
  return comm->gpu_path == WEFT_TUNE_NVLINK && !comm->gpu_shared;
}

/* The protocols it may pick (bits of PROTO_*): NCCL_PROTO's on the CUDA
 * engine; Simple on host ranks, one rank and net links (LL's flags cannot
 * cross the network); LL128 only where lines stay whole (a WARN, once,
 * where NCCL_PROTO asks for it alone and they may not). Both ends of a
 * link must run the same protocol. Every rank tunes a collective alike,
 * but a send and its receive are tuned as different calls (sizes,
 * NCCL_PROTO sections), so they get LL only when NCCL_PROTO allows nothing
 * else for sends and receives both; the send/recv kernel has no LL128. */
static unsigned protos_allowed(const struct ncclComm *comm, int kernels, enum weft_func func) {
  const unsigned simple = 1u << PROTO_SIMPLE, ll = 1u << PROTO_LL, ll128 = 1u << PROTO_LL128;
  if (!kernels || comm->nranks == 1 || comm->cuda_net_links) return simple;
  if (func == WEFT_FUNC_SEND || func == WEFT_FUNC_RECV) {
    unsigned both = tuning.proto_mask[WEFT_FUNC_SEND] | tuning.proto_mask[WEFT_FUNC_RECV];
    return (both & WEFT_PROTOS) == ll ? ll : simple;
  }
  unsigned mask = tuning.proto_mask[func] & WEFT_PROTOS; /* never 0: tuning_load */
  if (!(mask & ll128) || weft_tune_ll128_links(comm)) return mask;
  if (mask == ll128) {
    static atomic_int warned;
    if (atomic_fetch_add(&warned, 1) == 0)
      WARN(
          "NCCL_PROTO=%s: LL128 needs links that keep a 128-byte line whole (NVLink between "
          "GPUs); this communicator's are %s links%s, where nothing promises it (a line's flag "
          "could be read before its data): running Simple",
          weft_param_str(WEFT_PARAM_PROTO), weft_tune_path_name(tune_path(comm, kernels)),
          comm->gpu_shared ? " and some of its ranks share a GPU" : "");
    return simple;
  }
  return mask & ~ll128;
}

struct choice {
  enum weft_algo algo;
  enum weft_proto proto;
  const struct weft_tune_fit *row; /* NULL: the table has none for the path */
  double us;
};

/* The least of the model over the allowed algorithms and protocols. Where
 * the path has a measured row among them, only measured rows compete: a
 * placeholder's figure says nothing against a fitted one. plan_extra_us is
 * added to every algorithm but Direct when they are compared
 * (host_plan_extra); the estimate is the model's time alone. */
static void pick(enum weft_tune_path path, enum weft_func func, int n, double bytes, unsigned algos,
                 unsigned protos, double plan_extra_us, struct choice *out) {
  int measured = 0;
  for (int a = 0; a < WEFT_ALGO_COUNT; a++)
    for (int p = 0; p < WEFT_PROTO_COUNT; p++) {
      if (!(algos & (1u << a)) || !(protos & (1u << p))) continue;
      const struct weft_tune_fit *r = weft_tune_fit_find(path, func, a, p, n);
      measured |= r != NULL && r->measured;
    }
  out->row = NULL;
  out->algo = WEFT_ALGO_RING;
  out->proto = (protos & (1u << PROTO_SIMPLE)) ? WEFT_PROTO_SIMPLE
               : (protos & (1u << PROTO_LL))   ? WEFT_PROTO_LL
                                               : WEFT_PROTO_LL128;
  out->us = 0;
  double best = 0; /* the least time compared, plan_extra_us included */
  for (int a = 0; a < WEFT_ALGO_COUNT; a++)
    for (int p = 0; p < WEFT_PROTO_COUNT; p++) {
      if (!(algos & (1u << a)) || !(protos & (1u << p))) continue;
      const struct weft_tune_fit *r = weft_tune_fit_find(path, func, a, p, n);
      if (r == NULL || (measured && !r->measured)) continue;
      /* Direct past its size only when NCCL_ALGO asks for nothing else,
       * until a fit says where it stops paying. */
      if (a == WEFT_ALGO_DIRECT && !r->measured && bytes > DIRECT_MAX_BYTES &&
          (algos & ~(1u << WEFT_ALGO_DIRECT)) != 0)
        continue;
      double us = weft_tune_model_us(r, func, (enum weft_algo)a, n, bytes);
      double cmp = us + (a != WEFT_ALGO_DIRECT ? plan_extra_us : 0);
      if (out->row != NULL && cmp >= best) continue;
      best = cmp;
      out->algo = (enum weft_algo)a;
      out->proto = (enum weft_proto)p;
      out->row = r;
      out->us = us;
    }
}

/* Host ranks: a plan's run is preceded by the call check, one exchange of
 * records (a Direct of no bytes: the Direct row's latency), which a Direct
 * run folds into its data. The AllReduce rows were fitted on whole calls,
 * check included; the other collectives, read off them, add it to the
 * plans they would run when they are compared with Direct. */
static double host_plan_extra(enum weft_tune_path path, enum weft_func func, int n,
                              unsigned algos) {
  if (func == WEFT_FUNC_ALLREDUCE || n < 2 || !(algos & (1u << WEFT_ALGO_DIRECT)) ||
      weft_param_int(WEFT_PARAM_CHECK_MISMATCH) == 0)
    return 0;
  const struct weft_tune_fit *r =
      weft_tune_fit_find(path, func, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, n);
  return r != NULL ? r->alpha_us : 0;
}

int weft_tune_max_channels(int cuda_engine) {
  return weft_tune_max_channels_or(cuda_engine ? CUDA_DEFAULT_CHANNELS : HOST_DEFAULT_CHANNELS);
}

int weft_tune_max_channels_or(int def) {
  if (weft_param_is_set(WEFT_PARAM_MAX_NCHANNELS))
    return (int)weft_param_int(WEFT_PARAM_MAX_NCHANNELS);
  /* NCCL_MIN_NCHANNELS alone asks for that many: the default maximum
   * gives way (NCCL's default maximum is above any minimum). */
  int64_t lo = weft_param_int(WEFT_PARAM_MIN_NCHANNELS);
  return lo > def ? (int)lo : def;
}

/* Channels grow with the message, between NCCL_MIN_NCHANNELS and
 * weft_tune_max_channels. A ring lane is a channel; the tree runs 4 lanes
 * per channel (two trees, up and down, on channels 2k and 2k+1), so it
 * gets a quarter of the lanes. On the CUDA engine a lane is a CTA that
 * must run alongside every peer's (comm->cuda_max_lanes). */
static int pick_nchannels(const struct ncclComm *comm, int kernels, size_t total_bytes,
                          enum weft_algo algo) {
  if (algo == WEFT_ALGO_DIRECT) return 1; /* one lane per peer, on channel 0 */
  int64_t lo = weft_param_int(WEFT_PARAM_MIN_NCHANNELS);
  int64_t hi = kernels || comm->host_channels < 1 ? weft_tune_max_channels(kernels)
                                                  : weft_tune_max_channels_or(comm->host_channels);
  int64_t max = algo == WEFT_ALGO_TREE ? WEFT_MAX_CHANNELS / 2 : WEFT_MAX_CHANNELS;
  if (kernels && comm->cuda_max_lanes > 0) {
    int64_t lanes = comm->cuda_max_lanes / (algo == WEFT_ALGO_TREE ? 4 : 1);
    if (max > lanes) max = lanes;
  }
  if (hi > max) hi = max;
  if (hi < 1) hi = 1;
  if (lo < 1) lo = 1;
  if (lo > hi) lo = hi;
  const size_t per = kernels && !comm->cuda_net_links ? CUDA_BYTES_PER_CHANNEL : BYTES_PER_CHANNEL;
  int64_t n = (int64_t)(total_bytes / per);
  return (int)(n < lo ? lo : n > hi ? hi : n);
}

/* WEFT_CHUNK_SIZE or 512 KiB (the CUDA engine: 4 MiB), a multiple of the
 * element, no larger than a channel's share of the message (small messages
 * move in one piece). */
static size_t pick_chunk(size_t total_bytes, int nchannels, size_t elem_size, int cuda) {
  int64_t p = weft_param_int(WEFT_PARAM_CHUNK);
  size_t chunk = p > 0 ? (size_t)p : cuda ? CUDA_DEFAULT_CHUNK : DEFAULT_CHUNK;
  size_t lane = (total_bytes + (size_t)nchannels - 1) / (size_t)nchannels;
  lane = (lane + elem_size - 1) / elem_size * elem_size;
  if (chunk > lane) chunk = lane;
  chunk -= chunk % elem_size;
  return chunk < elem_size ? elem_size : chunk;
}

/* Sizes where a call on windows across processes (comm->cuda_direct 3)
 * keeps the ring because the direct kernel measured slower there (one
 * H200, MPS, weft-bench -f 2 -R 2; docs/PERFORMANCE.md, "Tenth pass"):
 * bytes a rank in [lo, hi), nranks 0 for any. A Broadcast's root hands
 * its data on and returns on the ring, where the direct root waits for
 * every reader: 2 processes, 1 MiB 8.4 us against 14.7, 4 MiB even
 * (17.9 against 17.1); 4 processes, 1 MiB 11.8 against 22.8, 4 MiB 25.1
 * against 29.2, 8 MiB 49.9 against 32.7. A 2-rank ReduceScatter of 512
 * KiB-1 MiB a rank: 9.3-10.8 us against 13.1-14.2; 2 MiB even; from 4
 * MiB the direct kernel is ahead (16.7 against 24.5, 16 MiB 34.4 against
 * 83.5). With 2 processes the ring is ahead for an AllGather of 128-512
 * KiB a rank (8.6-10.2 us against 13.6-14.0; 2 MiB: 20.0 against 16.5)
 * and an AllReduce of 256 KiB-1 MiB (13.7 against 16.7 at 1 MiB; 4 MiB:
 * 27.3 against 19.6); with 4 the direct kernel is even or ahead at every
 * size. NCCL_ALGO naming Direct runs them directly anyway. */
static const struct {
  enum weft_func func;
  int nranks;
  double lo, hi;
} window_ring[] = {
    {WEFT_FUNC_BROADCAST, 0, 0, 8.0 * 1024 * 1024},
    {WEFT_FUNC_REDUCESCATTER, 2, 0, 2.0 * 1024 * 1024},
    {WEFT_FUNC_ALLGATHER, 2, 0, 1024.0 * 1024},
    {WEFT_FUNC_ALLREDUCE, 2, 128.0 * 1024, 2.0 * 1024 * 1024},
};

static int window_keeps_ring(const struct ncclComm *comm, enum weft_func func, double bytes) {
  if (bytes <= (double)comm->cuda_direct_ll_bytes || weft_param_str(WEFT_PARAM_ALGO) != NULL)
    return 0;
  for (size_t i = 0; i < sizeof(window_ring) / sizeof(window_ring[0]); i++)
    if (window_ring[i].func == func &&
        (window_ring[i].nranks == 0 || window_ring[i].nranks == comm->nranks) &&
        bytes >= window_ring[i].lo && bytes < window_ring[i].hi)
      return 1;
  return 0;
}

/* Whether Direct on the ranks' own buffers (comm->cuda_direct) runs func,
 * and then *out: the collectives it has, where NCCL_ALGO allows it; by
 * default where every rank shares one GPU (measured there,
 * docs/PERFORMANCE.md) unless rows of the path fitted on func say a plan
 * is faster, and across processes there only for calls in LL lines; on
 * several GPUs of one process where rows of the path fitted on func say
 * it is faster than the plans (NVLink: docs/PERFORMANCE.md, "Two H200s
 * over NVLink, again"), or when NCCL_ALGO names it. */
static int own_buffers(const struct ncclComm *comm, int kernels, enum weft_func func,
                       enum weft_tune_path path, double bytes, int mapped, unsigned algos,
                       unsigned protos, struct choice *out) {
  int n = comm->nranks;
  if (!kernels || n < 2 || comm->cuda_direct == 0) return 0;
  if (func != WEFT_FUNC_ALLREDUCE && func != WEFT_FUNC_ALLGATHER &&
      func != WEFT_FUNC_REDUCESCATTER && func != WEFT_FUNC_BROADCAST && func != WEFT_FUNC_REDUCE)
    return 0;
  if (!(tuning.algo_mask[func] & (1u << WEFT_ALGO_DIRECT))) return 0;
  /* Several processes on one GPU: the calls that fit LL lines, and those
   * on windows every rank mapped (docs/CUDA.md, "Across processes"). */
  if (comm->cuda_direct == 3 && bytes > (double)comm->cuda_direct_ll_bytes && !mapped) return 0;
  if (comm->cuda_direct == 3 && mapped && window_keeps_ring(comm, func, bytes)) return 0;
  out->algo = WEFT_ALGO_DIRECT;
  out->proto = WEFT_PROTO_SIMPLE;
  out->row = weft_tune_fit_find(path, func, WEFT_ALGO_DIRECT, WEFT_PROTO_SIMPLE, n);
  out->us = out->row != NULL ? weft_tune_model_us(out->row, func, WEFT_ALGO_DIRECT, n, bytes) : 0;
  unsigned plans = algos & ~(1u << WEFT_ALGO_DIRECT);
  /* A Direct row fitted on another collective says little of this one's
   * own-buffers kernel, whose steps are not a ring's: the rule holds. On
   * several GPUs NCCL_ALGO naming Direct decides, else the fit, else the
   * plans. */
  int fitted = out->row != NULL && out->row->measured && out->row->func == func;
  if (comm->cuda_direct == 2) {
    if (weft_param_str(WEFT_PARAM_ALGO) != NULL) return 1;
    if (!fitted) return 0;
  } else if (comm->cuda_direct == 3 || !fitted) {
    return 1;
  }
  if (plans == 0) return 1;
  struct choice plan;
  pick(path, func, n, bytes, plans, protos, 0, &plan);
  return plan.row == NULL || !plan.row->measured || out->us <= plan.us;
}

/* The wide link's default threshold where the channels have helper
 * threads. On the 16 cores of two H100 servers (2 host ranks over
 * loopback, 2026-12-06, docs/PERFORMANCE.md "Twenty-second pass"), with
 * the root's copy made by the sending helpers, one link of 16 sockets
 * carrying the whole call moved a Broadcast of 32-256 MiB -7% to +52%
 * against 16 channels of 512 KiB steps out of place (within 1% or faster
 * in 21 of 24 same-round pairs) and -4% to +36% in place; at 16 MiB out
 * of place -16% to +2%. */
#define WIDE_MIN_BYTES ((size_t)32 << 20)

int weft_tune_wide(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                   enum weft_algo algo) {
  if (kernels || comm->nranks != 2 || func != WEFT_FUNC_BROADCAST || algo != WEFT_ALGO_RING ||
      tune_path(comm, kernels) != WEFT_TUNE_SOCKET)
    return 0;
  if (weft_param_is_set(WEFT_PARAM_MIN_NCHANNELS) || weft_param_is_set(WEFT_PARAM_MAX_NCHANNELS) ||
      weft_param_is_set(WEFT_PARAM_CHUNK))
    return 0;
  int64_t min = weft_param_int(WEFT_PARAM_SOCKET_WIDE_MIN_BYTES);
  if (min < 0) min = comm->host_channels >= 8 ? (int64_t)WIDE_MIN_BYTES : 0;
  return min > 0 && bytes >= (uint64_t)min;
}

ncclResult_t weft_tune(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                       size_t elem_size, struct weft_tuning *out) {
  return weft_tune_mapped(comm, kernels, func, bytes, elem_size, 0, out);
}

/* The thread's last answers: a communicator's calls ask the same few
 * questions call after call, and the model's pass over the rows was an
 * eighth of a 2-rank host AllReduce of 8 B (perf, the 2-core VM). The key
 * holds every input of the answer, so communicators of one shape share
 * answers: the call's, the communicator's fields the choice reads, its
 * path type (the only input that reads the rank and the peers' hosts), and
 * the table in use; the parameters are read once per process. */
struct tune_key {
  size_t bytes, elem_size, direct_ll_bytes;
  unsigned gen;
  int nranks, kernels, func, mapped, path;
  int net_links, net_direct, direct, gpu_path, gpu_shared, host_channels, max_lanes;
};
struct tune_memo {
  struct tune_key key;
  struct weft_tuning out;
  double us;
  int own, valid;
};
#define TUNE_MEMO_SLOTS 8
static _Thread_local struct tune_memo tune_memo[TUNE_MEMO_SLOTS];

static void tune_key_of(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                        size_t elem_size, int mapped, enum weft_tune_path path,
                        struct tune_key *k) {
  memset(k, 0, sizeof(*k)); /* padding too: keys are compared whole */
  k->bytes = bytes;
  k->elem_size = elem_size;
  k->direct_ll_bytes = comm->cuda_direct_ll_bytes;
  k->gen = weft_tune_fits_gen();
  k->nranks = comm->nranks;
  k->kernels = kernels;
  k->func = (int)func;
  k->mapped = mapped;
  k->path = (int)path;
  k->net_links = comm->cuda_net_links;
  k->net_direct = comm->cuda_net_direct;
  k->direct = comm->cuda_direct;
  k->gpu_path = comm->gpu_path;
  k->gpu_shared = comm->gpu_shared;
  k->host_channels = comm->host_channels;
  k->max_lanes = comm->cuda_max_lanes;
}

static void tune_log(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                     const struct weft_tuning *out, double us, int own) {
  int simple_only = !kernels && !(tuning.proto_mask[func] & (1u << PROTO_SIMPLE));
  INFO(WEFT_TUNING,
       "%s %zu bytes nranks %d path %s: %s, %s%s, %d channel%s, chunk %zu%s (est %.1f us, %s%s)",
       weft_func_name(func), bytes, comm->nranks, weft_tune_path_name(out->path),
       algo_names[out->algo], weft_proto_name(out->proto),
       simple_only ? " (host ranks run Simple whatever NCCL_PROTO says)" : "", out->nchannels,
       out->nchannels == 1 ? "" : "s", out->chunk_bytes,
       out->wide ? " (the whole call in one step on the wide link)" : "", us,
       out->fitted ? "fitted" : "placeholder", own ? ", the ranks' own buffers" : "");
}

ncclResult_t weft_tune_mapped(const struct ncclComm *comm, int kernels, enum weft_func func,
                              size_t bytes, size_t elem_size, int mapped, struct weft_tuning *out) {
  pthread_once(&tuning_once, tuning_load);
  enum weft_tune_path path = tune_path(comm, kernels);
  struct tune_key key;
  tune_key_of(comm, kernels, func, bytes, elem_size, mapped, path, &key);
  struct tune_memo *m =
      &tune_memo[((size_t)func * 7 + bytes / (elem_size ? elem_size : 1)) % TUNE_MEMO_SLOTS];
  if (m->valid && memcmp(&m->key, &key, sizeof(key)) == 0) {
    *out = m->out;
    tune_log(comm, kernels, func, bytes, out, m->us, m->own);
    return ncclSuccess;
  }
  int n = comm->nranks;
  int p2p = func == WEFT_FUNC_SEND || func == WEFT_FUNC_RECV;
  size_t total = bytes;
  if ((func == WEFT_FUNC_ALLGATHER || func == WEFT_FUNC_REDUCESCATTER) &&
      bytes <= SIZE_MAX / (size_t)n)
    total = bytes * (size_t)n;
  unsigned algos = algos_allowed(func, kernels ? 1 + (comm->cuda_net_direct != 0) : 0);
  unsigned protos = protos_allowed(comm, kernels, func);
  struct choice c;
  int own = own_buffers(comm, kernels, func, path, (double)bytes, mapped, algos, protos, &c);
  if (!own)
    pick(path, func, n, (double)bytes, algos, protos,
         kernels ? 0 : host_plan_extra(path, func, n, algos), &c);
  out->algo = c.algo;
  out->proto = c.proto;
  out->path = path;
  out->fitted = c.row != NULL && c.row->measured;
  out->wide = weft_tune_wide(comm, kernels, func, bytes, out->algo);
  out->nchannels = p2p || out->wide ? 1 : pick_nchannels(comm, kernels, total, out->algo);
  out->chunk_bytes =
      out->wide ? 0 : pick_chunk(total, out->nchannels, elem_size ? elem_size : 1, kernels);
  out->estimated_us = (float)c.us;
  memcpy(&m->key, &key, sizeof(key)); /* bytes, padding included */
  m->out = *out;
  m->us = c.us;
  m->own = own;
  m->valid = 1;
  tune_log(comm, kernels, func, bytes, out, c.us, own);
  return ncclSuccess;
}
