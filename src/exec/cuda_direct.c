/* The CUDA engine's direct collectives: see exec/cuda_direct.h. */
#include "exec/cuda_direct.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/dtype.h"
#include "base/param.h"
#include "core/bootstrap.h"
#include "core/comm.h"
#include "exec/engine.h"
#include "sched/schedule.h"
#include "transport/p2p/p2p.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include <cuda_runtime_api.h>

#include "device/device.h"

/* Threads of a direct kernel's CTA (direct.cuh's DIRECT_THREADS). */
#define DIRECT_LL_THREADS 512

/* The communicator's boards, shared by its ranks (threads of one process):
 * a rank's last CTA may still read a peer's board after the rank's own
 * kernel ended, so no board is freed before every rank let go. */
struct direct_group {
  atomic_int refs;
  int nranks;
  struct weft_dev_board *boards[]; /* each rank sets its own */
};

struct weft_cuda_direct {
  struct direct_group *group;    /* one process; NULL: several */
  struct weft_dev_board *board;  /* this rank's */
  struct weft_dev_board **table; /* device: every rank's, in rank order */
  /* Several processes: each peer's board as this process maps it, and
   * whether by CUDA IPC (to close), [nranks] each. */
  struct weft_dev_board **mapped;
  unsigned char *opened;
  int nranks;
  int sys;         /* some rank is on another GPU */
  int procs;       /* ranks in several processes (one GPU): LL lines only */
  size_t ll_bytes; /* most bytes a rank sends a peer in LL lines */
};

/* What each rank tells the others at init. */
struct direct_card {
  struct weft_dev_board *board;
  struct direct_group *group; /* rank 0's is the communicator's (one process) */
  int pid;
  cudaIpcMemHandle_t handle; /* several processes: the board's */
};

/* Every rank a thread of one process: the same pid on the same host. */
static int one_process(const struct ncclComm *comm) {
  const struct weft_peer_info *p0 = &comm->peers[0];
  for (int p = 1; p < comm->nranks; p++)
    if (comm->peers[p].pid != p0->pid || comm->peers[p].host_hash != p0->host_hash) return 0;
  return 1;
}

/* Several processes: each peer's board mapped here (a peer of this
 * process by its address, another's by CUDA IPC: every rank is on this
 * GPU). */
static ncclResult_t map_boards(const struct ncclComm *comm, struct weft_cuda_direct *d,
                               const struct direct_card *cards, struct weft_dev_board **boards) {
  for (int p = 0; p < d->nranks; p++) {
    if (cards[p].pid == cards[comm->rank].pid) {
      boards[p] = cards[p].board;
      continue;
    }
    void *mem = NULL;
    cudaError_t e = weft_p2p_ipc_open(cards[p].handle, &mem);
    if (e != cudaSuccess) {
      WARN("rank %d: direct collectives: cudaIpcOpenMemHandle of rank %d's board: %s", comm->rank,
           p, cudaGetErrorString(e));
      return ncclUnhandledCudaError;
    }
    boards[p] = d->mapped[p] = mem;
    d->opened[p] = 1;
  }
  return ncclSuccess;
}

ncclResult_t weft_cuda_direct_create(struct ncclComm *comm, const unsigned char *cross,
                                     struct weft_cuda_direct **out) {
  *out = NULL;
  int n = comm->nranks;
  if (n < 2 || n > WEFT_DEV_DIRECT_MAX_RANKS) return ncclSuccess;
  /* Ranks in several processes: only where all share one GPU (the same
   * answer on every rank), and then only small calls, in LL lines, which
   * never touch a peer's buffers. */
  int procs = !one_process(comm);
  for (int p = 0; p < n && procs; p++)
    if (cross[p]) return ncclSuccess;
  ncclResult_t res = ncclSystemError;
  struct weft_cuda_direct *d = calloc(1, sizeof(*d));
  struct direct_card *cards = calloc((size_t)n, sizeof(*cards));
  struct weft_dev_board **boards = calloc((size_t)n, sizeof(*boards));
  struct direct_group *mine = NULL;
  if (comm->rank == 0 && !procs) {
    mine = calloc(1, sizeof(*mine) + (size_t)n * sizeof(mine->boards[0]));
    if (mine != NULL) atomic_init(&mine->refs, n), mine->nranks = n;
  }
  if (d != NULL && procs) {
    d->mapped = calloc((size_t)n, sizeof(*d->mapped));
    d->opened = calloc((size_t)n, 1);
  }
  if (d == NULL || cards == NULL || boards == NULL || (comm->rank == 0 && !procs && mine == NULL) ||
      (procs && (d->mapped == NULL || d->opened == NULL))) {
    WARN("rank %d: out of memory for the direct collectives' boards", comm->rank);
    goto fail;
  }
  d->nranks = n;
  d->procs = procs;
  res = weft_dev_board_create(n, &d->board, &d->ll_bytes);
  if (res != ncclSuccess) goto fail;
  cards[comm->rank] = (struct direct_card){.board = d->board, .group = mine, .pid = (int)getpid()};
  if (procs) {
    cudaError_t e = weft_p2p_ipc_export(d->board, &cards[comm->rank].handle);
    if (e != cudaSuccess) {
      WARN("rank %d: direct collectives: cudaIpcGetMemHandle of the board: %s", comm->rank,
           cudaGetErrorString(e));
      res = ncclUnhandledCudaError;
      goto fail;
    }
  }
  res = weft_bootstrap_allgather(comm->bootstrap, cards, sizeof(*cards));
  if (res != ncclSuccess) goto fail;
  if (procs) {
    res = map_boards(comm, d, cards, boards);
    if (res != ncclSuccess) goto fail;
  } else {
    /* One process: a board's address is good in every rank (peer access
     * across GPUs was enabled when the p2p transport linked them). */
    for (int p = 0; p < n; p++) boards[p] = cards[p].board;
    d->group = cards[0].group;
    d->group->boards[comm->rank] = d->board;
  }
  res = weft_dev_board_table(boards, n, &d->table);
  if (res != ncclSuccess) goto fail;
  for (int p = 0; p < n; p++) d->sys |= cross[p] != 0;
  if (procs)
    INFO(WEFT_INIT,
         "rank %d: CUDA engine: direct collectives in LL lines up to %zu bytes a rank (%d ranks "
         "in several processes on one GPU, boards mapped by CUDA IPC)",
         comm->rank, d->ll_bytes, n);
  else
    INFO(WEFT_INIT,
         "rank %d: CUDA engine: direct collectives on the ranks' own buffers (%d ranks "
         "in one process, %s)",
         comm->rank, n, d->sys ? "several GPUs" : "one GPU");
  free(cards);
  free(boards);
  *out = d;
  return ncclSuccess;
fail:
  /* Before the all-gather nothing is shared; after it a failure leaves the
   * group to the ranks that succeeded (its boards leak, like the rest of
   * a communicator whose init failed on some rank). */
  if (d != NULL && d->group == NULL) {
    weft_dev_board_destroy(d->board);
    free(mine);
  }
  if (d != NULL) {
    weft_dev_board_table_free(d->table);
    for (int p = 0; p < n && d->opened != NULL; p++)
      if (d->opened[p]) weft_p2p_ipc_close(d->mapped[p]);
    free(d->mapped);
    free(d->opened);
  }
  free(d);
  free(cards);
  free(boards);
  return res;
}

void weft_cuda_direct_destroy(struct weft_cuda_direct *d) {
  if (d == NULL) return;
  weft_dev_board_table_free(d->table);
  if (d->procs) {
    /* LL lines only: once this rank's last call ended, every peer has
     * written its lines here and read this rank's (every rank makes the
     * same calls), so no peer touches the board any more. */
    for (int p = 0; p < d->nranks; p++)
      if (d->opened[p]) weft_p2p_ipc_close(d->mapped[p]);
    weft_dev_board_destroy(d->board);
    free(d->mapped);
    free(d->opened);
    free(d);
    return;
  }
  /* The caller's kernels have ended; the last rank's end means every
   * rank's have, so no CTA reads a board any more. */
  struct direct_group *g = d->group;
  if (atomic_fetch_sub_explicit(&g->refs, 1, memory_order_acq_rel) == 1) {
    for (int p = 0; p < g->nranks; p++) weft_dev_board_destroy(g->boards[p]);
    free(g);
  }
  free(d);
}

int weft_cuda_direct_kind(const struct weft_cuda_direct *d) {
  return d == NULL ? 0 : d->procs ? 3 : d->sys ? 2 : 1;
}

size_t weft_cuda_direct_ll_bytes(const struct weft_cuda_direct *d) {
  if (d == NULL || d->sys) return 0; /* never across GPUs yet */
  int64_t ll_max = weft_param_int(WEFT_PARAM_DIRECT_LL_MAX);
  return ll_max < (int64_t)d->ll_bytes ? (size_t)ll_max : d->ll_bytes;
}

/* A call in LL lines: its payload a sender (the input, or a rank's block
 * of it) within WEFT_DIRECT_LL_MAX and the board's scratch. */
static int ll_fits(const struct weft_cuda_direct *d, size_t slot) {
  return slot <= weft_cuda_direct_ll_bytes(d);
}

int weft_cuda_direct_runs(const struct weft_cuda_direct *d, const struct weft_coll *coll) {
  if (d == NULL) return 0;
  return !d->procs || ll_fits(d, coll->count * weft_dtype_size(coll->datatype));
}

/* ctas, within the lanes every rank of the GPU can run at once (at least
 * one). */
static int ctas_fit(const struct ncclComm *comm, size_t ctas) {
  int nctas = ctas > (size_t)comm->cuda_max_lanes ? comm->cuda_max_lanes : (int)ctas;
  return nctas < 1 ? 1 : nctas;
}

/* CTAs for a rank moving `bytes`: one per WEFT_DIRECT_CTA_BYTES. */
static int direct_ctas(const struct ncclComm *comm, size_t bytes) {
  return ctas_fit(comm, bytes / (size_t)weft_param_int(WEFT_PARAM_DIRECT_CTA_BYTES) + 1);
}

ncclResult_t weft_cuda_direct_launch(struct ncclComm *comm, struct weft_cuda_direct *d,
                                     const struct weft_dev_conns *conns,
                                     const struct weft_coll *coll, const void *in, ncclRedOp_t op,
                                     void *stream) {
  if (coll->count == 0) return ncclSuccess; /* every rank makes the same call */
  struct weft_dev_direct call = {.func = (int)coll->func,
                                 .root = coll->root,
                                 .count = coll->count,
                                 .datatype = coll->datatype,
                                 .op = op,
                                 .sendbuff = in,
                                 .recvbuff = coll->recvbuff};
  /* Small: in LL lines, no barrier (a sender's payload: the input, or a
   * rank's block of it). */
  size_t slot = coll->count * weft_dtype_size(coll->datatype);
  if (ll_fits(d, slot)) {
    /* A line (8 bytes of a sender) a thread: the waits overlap. */
    size_t lines = (coll->func == WEFT_FUNC_ALLGATHER ? (size_t)comm->nranks : 1) * (slot + 7) / 8;
    int nctas = ctas_fit(comm, (lines + DIRECT_LL_THREADS - 1) / DIRECT_LL_THREADS);
    return weft_dev_direct_ll_launch(&call, d->table, conns, slot, nctas, (cudaStream_t)stream);
  }
  if (d->procs) {
    WARN(
        "rank %d: %s of %zu bytes a rank: direct collectives across processes run in LL lines "
        "only (at most %zu bytes): the tuning should not have picked it",
        comm->rank, weft_func_name(coll->func), slot, weft_cuda_direct_ll_bytes(d));
    return ncclInternalError;
  }
  /* The bytes this rank moves: its share of the call. */
  size_t bytes = weft_engine_op_bytes(coll);
  if (coll->func != WEFT_FUNC_ALLGATHER && coll->func != WEFT_FUNC_REDUCESCATTER)
    bytes /= (size_t)comm->nranks;
  return weft_dev_direct_launch(&call, d->table, conns, d->sys, direct_ctas(comm, bytes),
                                (cudaStream_t)stream);
}

int weft_cuda_direct_p2p_pick(const struct weft_cuda_direct *d, int nranks,
                              const struct weft_p2p *ops, int nops, unsigned char *direct) {
  unsigned char seen[2][WEFT_DEV_DIRECT_MAX_RANKS] = {{0}};
  int picked = 0;
  /* Several GPUs: not measured against the FIFO path yet (docs/CUDA.md). */
  int on = d != NULL && !d->sys && !d->procs && nranks <= WEFT_DEV_DIRECT_MAX_RANKS;
  for (int k = 0; k < nops && on; k++)
    if (seen[ops[k].is_send != 0][ops[k].peer] < 2) seen[ops[k].is_send != 0][ops[k].peer]++;
  for (int k = 0; k < nops; k++) {
    direct[k] = on && seen[ops[k].is_send != 0][ops[k].peer] == 1;
    picked += direct[k];
  }
  return picked;
}

ncclResult_t weft_cuda_direct_p2p_launch(struct ncclComm *comm, struct weft_cuda_direct *d,
                                         const struct weft_dev_conns *conns,
                                         const struct weft_p2p *ops, void *const *bufs,
                                         const unsigned char *direct, int nops, void *stream) {
  struct weft_dev_direct_p2p call;
  memset(&call, 0, sizeof(call));
  size_t sent = 0;
  for (int k = 0; k < nops; k++) {
    if (!direct[k]) continue;
    int p = ops[k].peer;
    if (ops[k].is_send) {
      call.send_mask |= 1ull << p;
      call.send_buf[p] = bufs[k];
      call.send_bytes[p] = ops[k].bytes;
      sent += ops[k].bytes;
    } else {
      call.recv_mask |= 1ull << p;
      call.recv_buf[p] = bufs[k];
      call.recv_bytes[p] = ops[k].bytes;
    }
  }
  for (int p = 0; p < comm->nranks; p++)
    if ((call.send_mask >> p & 1) && (call.recv_mask >> p & 1) &&
        call.send_buf[p] == call.recv_buf[p] && call.send_bytes[p] == call.recv_bytes[p])
      call.inplace_mask |= 1ull << p;
  return weft_dev_direct_p2p_launch(&call, d->table, conns, d->sys, direct_ctas(comm, sent),
                                    (cudaStream_t)stream);
}

#endif
