/* Tuning: a cost model picks the algorithm of each collective, and the
 * channel count and chunk size follow the message size; NCCL_ALGO,
 * NCCL_PROTO, NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS override, read once
 * per process in NCCL's syntax.
 *
 * The model is latency + bytes / bandwidth per algorithm, with a latency
 * (alpha) and a bandwidth (beta) per transport: shared memory when every
 * peer is on this host and NCCL_SHM_DISABLE is not set, else sockets. The
 * numbers are host-rank figures measured with weft-bench on a small machine;
 * they only need to be right relative to each other, and they give
 * ncclGroupSimulateEnd its estimate.
 *
 * The protocol matters on the CUDA engine only (host ranks run Simple):
 * there the same latency + bytes / bandwidth, with the kernels' figures per
 * protocol, weighs LL against Simple per step (LL's measured latency is
 * not yet established as lower, so it is chosen only when NCCL_PROTO
 * forces it; see CUDA_LL_ALPHA_US). */
#include "sched/tuning.h"

#include <math.h>
#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "core/comm.h"
#include "base/debug.h"
#include "base/param.h"

/* Per-step latency in microseconds and bandwidth in bytes per microsecond. */
#define SHM_ALPHA_US 3.0
#define SHM_BETA 5000.0 /* 5 GB/s */
#define SOCK_ALPHA_US 15.0
#define SOCK_BETA 1000.0   /* 1 GB/s */
#define LOCAL_BETA 10000.0 /* one rank: a memory copy */

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
/* Bytes per channel below which another channel does not pay off. */
#define BYTES_PER_CHANNEL (1024 * 1024)

/* Direct sends n-1 copies of the input: worth it only while latency rules. */
#define DIRECT_MAX_BYTES (16 * 1024)

/* The CUDA engine's kernels (src/device/), per step on a link: Simple
 * waits for a slot, copies, fences and publishes a counter that the peer
 * then reads; LL's lines carry their own flags, so no fence, but half of
 * every line is flag and every line is polled. Measured on an H200 (2
 * ranks on the one GPU, one lane, 2026-11-29, tests/test_gpu_plan.c's
 * ll_speed): LL took 13.4 us against Simple's 12.8 us at 256 bytes, 19.0
 * against 13.9 at 32 KiB and 3x Simple's time from 512 KiB. weft-bench
 * through the API (2 ranks, docs/PERFORMANCE.md, two separate runs) had LL
 * ahead up to 8 KiB (15.3 against 18.7 us at 8 B) and behind from 128
 * KiB. Until one run measures both, the model gives LL a latency just
 * above Simple's and its lower bandwidth: it never picks LL, and
 * NCCL_PROTO=LL forces it. */
#define CUDA_SIMPLE_ALPHA_US 4.0
#define CUDA_SIMPLE_BETA 100000.0 /* 100 GB/s */
#define CUDA_LL_ALPHA_US 4.2
#define CUDA_LL_BETA 18000.0 /* 18 GB/s */

/* Direct on the ranks' own buffers (one kernel, two waits on the peers):
 * a first estimate for reports (ncclGroupSimulateEnd, TUNING lines), not
 * yet fitted; the choice does not depend on it. */
#define CUDA_DIRECT_ALPHA_US 6.0
#define CUDA_DIRECT_BETA 1000000.0 /* 1 TB/s */

/* NCCL's protocols; the host engine runs Simple whatever is asked. */
enum { PROTO_SIMPLE, PROTO_LL, PROTO_LL128, PROTO_NCCL_COUNT };
/* The ones weft has (bits of PROTO_*; PROTO_x == WEFT_PROTO_x for both). */
#define WEFT_PROTOS ((1u << PROTO_SIMPLE) | (1u << PROTO_LL))
_Static_assert(PROTO_SIMPLE == (int)WEFT_PROTO_SIMPLE && PROTO_LL == (int)WEFT_PROTO_LL,
               "weft's protocols are NCCL's first two");
/* NCCL_ALGO and NCCL_PROTO are parsed by the parameter table
 * (base/param_table.c): names in the order of enum weft_algo, then NCCL's
 * algorithms weft lacks; protocols in PROTO_* order; keys in enum
 * weft_func order. */
#define WEFT_ALGOS ((1u << WEFT_ALGO_COUNT) - 1)
static const char *const algo_names[WEFT_ALGO_COUNT] = {"Ring", "Tree", "Direct"};
static const char *const proto_names[PROTO_NCCL_COUNT] = {"Simple", "LL", "LL128"};

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
  const char *proto = weft_param_str(WEFT_PARAM_PROTO);
  weft_param_list(WEFT_PARAM_PROTO, tuning.proto_mask, WEFT_FUNC_COUNT);
  /* LL128 is NCCL's alone: a collective left with nothing else is tuned as
   * if NCCL_PROTO did not name it. */
  int lost = 0;
  for (int f = 0; f < WEFT_FUNC_COUNT; f++) {
    if ((tuning.proto_mask[f] & WEFT_PROTOS) != 0) continue;
    tuning.proto_mask[f] |= WEFT_PROTOS;
    lost = 1;
  }
  if (lost)
    WARN(
        "NCCL_PROTO=%s: LL128 is a protocol of NCCL only; collectives left without Simple or "
        "LL get the one the tuning model picks",
        proto != NULL ? proto : "");
}

/* Shared memory when every peer is on this host and it is not disabled. */
static int comm_on_shm(const struct ncclComm *comm) {
  if (weft_param_int(WEFT_PARAM_SHM_DISABLE) != 0) return 0;
  for (int i = 0; i < comm->nranks; i++)
    if (comm->peers[i].host_hash != comm->peers[comm->rank].host_hash) return 0;
  return 1;
}

/* The model: microseconds for func moving `bytes` (the caller's buffer; for
 * AllGather/ReduceScatter one rank's share) with algo over n ranks. */
static double model_us(enum weft_func func, enum weft_algo algo, int n, double bytes, double alpha,
                       double beta) {
  if (n == 1) return bytes / LOCAL_BETA;
  double steps = n - 1;
  switch (func) {
    case WEFT_FUNC_ALLREDUCE:
      if (algo == WEFT_ALGO_TREE) return 2.0 * ceil(log2(n)) * alpha + 2.0 * bytes / beta;
      if (algo == WEFT_ALGO_DIRECT) return alpha + steps * bytes / beta;
      return 2.0 * steps * alpha + 2.0 * steps / n * bytes / beta;
    case WEFT_FUNC_ALLGATHER:
    case WEFT_FUNC_REDUCESCATTER: return steps * alpha + steps * bytes / beta;
    case WEFT_FUNC_BROADCAST:
    case WEFT_FUNC_REDUCE: return steps * alpha + bytes / beta; /* a pipelined chain */
    default: return alpha + bytes / beta;                       /* send/recv */
  }
}

/* The allowed algorithm the model says is fastest (Ring when NCCL_ALGO
 * leaves nothing weft has for func). */
static enum weft_algo pick_algo(enum weft_func func, int n, double bytes, double alpha, double beta,
                                int cuda, double *est_out) {
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
  if (func != WEFT_FUNC_ALLREDUCE) mask &= 1u << WEFT_ALGO_RING; /* tree, direct: AllReduce only */
  if (mask == 0) mask = 1u << WEFT_ALGO_RING;
  /* Direct past its size only when NCCL_ALGO asks for nothing else. */
  if (bytes > DIRECT_MAX_BYTES && (mask & ~(1u << WEFT_ALGO_DIRECT)) != 0)
    mask &= ~(1u << WEFT_ALGO_DIRECT);
  enum weft_algo best = WEFT_ALGO_RING;
  double best_us = -1;
  for (int a = 0; a < WEFT_ALGO_COUNT; a++) {
    if (!(mask & (1u << a))) continue;
    double us = model_us(func, (enum weft_algo)a, n, bytes, alpha, beta);
    if (best_us < 0 || us < best_us) best = (enum weft_algo)a, best_us = us;
  }
  *est_out = best_us;
  return best;
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
  int64_t n = (int64_t)(total_bytes / BYTES_PER_CHANNEL);
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

/* Bytes one step of the plan moves on a link (src/sched/ring.c, tree.c,
 * with the chunk and channels chosen): a ring AllReduce step carries one
 * position's slice of a round, a tree step a chunk of one of the 2 *
 * nchannels parts, Direct the whole input, the others a chunk of a
 * channel's part of the buffer (a rank's block for AllGather and
 * ReduceScatter). */
static double step_bytes(enum weft_func func, enum weft_algo algo, int n, size_t bytes,
                         int nchannels, size_t chunk) {
  double lane = (double)bytes / nchannels;
  if (algo == WEFT_ALGO_DIRECT) return (double)bytes;
  if (algo == WEFT_ALGO_TREE) lane /= 2;
  if (func == WEFT_FUNC_ALLREDUCE && algo == WEFT_ALGO_RING) lane /= n;
  return lane < (double)chunk ? lane : (double)chunk;
}

/* The protocol the CUDA engine runs (host ranks run Simple whatever is
 * asked): the one NCCL_PROTO leaves, else the one the model says moves a
 * step faster. Both ends of a link must run the same protocol. Every rank
 * tunes a collective alike, but a send and its receive are tuned as
 * different calls (sizes, NCCL_PROTO sections), so they get LL only when
 * NCCL_PROTO allows nothing else for sends and receives both. */
static enum weft_proto pick_proto(const struct ncclComm *comm, int kernels, enum weft_func func,
                                  enum weft_algo algo, size_t bytes, int nchannels, size_t chunk) {
  const unsigned ll = 1u << PROTO_LL;
  if (!kernels || comm->nranks == 1 || comm->cuda_net_links) return WEFT_PROTO_SIMPLE;
  if (func == WEFT_FUNC_SEND || func == WEFT_FUNC_RECV) {
    unsigned both = (tuning.proto_mask[WEFT_FUNC_SEND] | tuning.proto_mask[WEFT_FUNC_RECV]);
    return (both & WEFT_PROTOS) == ll ? WEFT_PROTO_LL : WEFT_PROTO_SIMPLE;
  }
  unsigned mask = tuning.proto_mask[func] & WEFT_PROTOS;
  if (mask != WEFT_PROTOS) return mask == ll ? WEFT_PROTO_LL : WEFT_PROTO_SIMPLE;
  double b = step_bytes(func, algo, comm->nranks, bytes, nchannels, chunk);
  double simple = CUDA_SIMPLE_ALPHA_US + b / CUDA_SIMPLE_BETA;
  double low = CUDA_LL_ALPHA_US + b / CUDA_LL_BETA;
  return low < simple ? WEFT_PROTO_LL : WEFT_PROTO_SIMPLE;
}

/* Whether Direct on the ranks' own buffers (comm->cuda_direct) runs func:
 * the collectives it has, where NCCL_ALGO allows it; by default only where
 * every rank shares one GPU (measured there, docs/PERFORMANCE.md), on
 * several GPUs of one process when NCCL_ALGO names it. */
static int direct_on_buffers(const struct ncclComm *comm, int kernels, enum weft_func func) {
  if (!kernels || comm->nranks < 2 || comm->cuda_direct == 0) return 0;
  if (func != WEFT_FUNC_ALLREDUCE && func != WEFT_FUNC_ALLGATHER &&
      func != WEFT_FUNC_REDUCESCATTER && func != WEFT_FUNC_BROADCAST && func != WEFT_FUNC_REDUCE)
    return 0;
  if (!(tuning.algo_mask[func] & (1u << WEFT_ALGO_DIRECT))) return 0;
  return comm->cuda_direct == 1 || weft_param_str(WEFT_PARAM_ALGO) != NULL;
}

ncclResult_t weft_tune(const struct ncclComm *comm, int kernels, enum weft_func func, size_t bytes,
                       size_t elem_size, struct weft_tuning *out) {
  pthread_once(&tuning_once, tuning_load);
  int n = comm->nranks;
  int shm = comm_on_shm(comm);
  double alpha = shm ? SHM_ALPHA_US : SOCK_ALPHA_US, beta = shm ? SHM_BETA : SOCK_BETA;
  int p2p = func == WEFT_FUNC_SEND || func == WEFT_FUNC_RECV;
  size_t total = bytes;
  if ((func == WEFT_FUNC_ALLGATHER || func == WEFT_FUNC_REDUCESCATTER) &&
      bytes <= SIZE_MAX / (size_t)n)
    total = bytes * (size_t)n;
  double est;
  int own = direct_on_buffers(comm, kernels, func);
  if (own) {
    out->algo = WEFT_ALGO_DIRECT;
    est = CUDA_DIRECT_ALPHA_US + (double)total / CUDA_DIRECT_BETA;
  } else {
    out->algo = pick_algo(func, n, (double)bytes, alpha, beta,
                          kernels ? 1 + (comm->cuda_net_direct != 0) : 0, &est);
  }
  out->nchannels = p2p ? 1 : pick_nchannels(comm, kernels, total, out->algo);
  out->chunk_bytes = pick_chunk(total, out->nchannels, elem_size ? elem_size : 1, kernels);
  out->proto = own ? WEFT_PROTO_SIMPLE
                   : pick_proto(comm, kernels, func, out->algo, bytes, out->nchannels,
                                out->chunk_bytes);
  out->estimated_us = (float)est;
  int simple_only = !kernels && !(tuning.proto_mask[func] & (1u << PROTO_SIMPLE));
  INFO(WEFT_TUNING, "%s %zu bytes nranks %d: %s, %s%s, %d channel%s, chunk %zu (est %.1f us, %s)",
       weft_func_name(func), bytes, n, algo_names[out->algo], proto_names[out->proto],
       simple_only ? " (host ranks run Simple whatever NCCL_PROTO says)" : "", out->nchannels,
       out->nchannels == 1 ? "" : "s", out->chunk_bytes, est,
       n == 1 ? "local"
       : own  ? "the ranks' own buffers"
       : shm  ? "shm"
              : "socket");
  return ncclSuccess;
}
