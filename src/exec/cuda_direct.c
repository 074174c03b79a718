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
#include "core/device.h"
#include "exec/engine.h"
#include "sched/schedule.h"
#include "transport/p2p/p2p.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include <cuda_runtime_api.h>

#include "device/device.h"
#include "exec/cuda.h"

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

/* Windows (ncclCommWindowRegister) across processes: at most this many a
 * communicator are mapped; xlate holds a row of nranks translations for
 * each, allocated once (a captured graph keeps its address). */
#define DIRECT_MAX_WINDOWS 256

/* A window every rank registered: this rank's buffer, and where the
 * peers' (opened by CUDA IPC) lie in this process. */
struct direct_window {
  struct direct_window *next;
  uint32_t id; /* registration order on the communicator: the same on every rank */
  const char *lo;
  size_t size;
  int usable;    /* every rank exported and mapped it */
  void **mapped; /* [nranks]: a peer's allocation opened here (NULL: not opened) */
};

struct weft_cuda_direct {
  struct direct_group *group;    /* one process; NULL: several */
  struct weft_dev_board *board;  /* this rank's */
  struct weft_dev_board **table; /* device: every rank's, in rank order */
  /* Several processes: each peer's board as this process maps it, and
   * whether by CUDA IPC (to close), [nranks] each. */
  struct weft_dev_board **mapped;
  unsigned char *opened;
  int nranks, rank;
  int sys;         /* some rank is on another GPU */
  int procs;       /* ranks in several processes (one GPU): LL lines only */
  size_t ll_bytes; /* most bytes a rank sends a peer in LL lines */
  /* Several processes: the windows, newest first; xlate (device,
   * DIRECT_MAX_WINDOWS x nranks, made at the first window); ids given. */
  struct direct_window *windows;
  long long *xlate;
  uint32_t nwindows;
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

/* Several GPUs of one process: the direct kernels read and write the
 * ranks' own buffers across GPUs. Peer access covers cudaMalloc's memory;
 * a stream-ordered pool's is reachable from another GPU only once the
 * pool grants it. The default pool of this rank's GPU (cudaMallocAsync's)
 * grants every peer GPU of the communicator read and write, as programs
 * that use pools across GPUs must; other pools and cuMem mappings are the
 * program's to share (docs/CUDA.md, "Known problems"). A refusal is said
 * at INFO and changes nothing else. */
static void pool_share(const struct ncclComm *comm, const unsigned char *cross) {
  int dev = comm->cuda_dev;
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, dev) != cudaSuccess) {
    cudaGetLastError();
    INFO(WEFT_INIT, "rank %d: GPU %d has no default memory pool to share", comm->rank, dev);
    return;
  }
  for (int p = 0; p < comm->nranks; p++) {
    int peer = comm->peers[p].cuda_dev;
    if (!cross[p] || peer < 0 || peer == dev) continue;
    struct cudaMemLocation at = {.type = cudaMemLocationTypeDevice, .id = peer};
    enum cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
    if (cudaMemPoolGetAccess(&flags, pool, &at) == cudaSuccess &&
        flags == cudaMemAccessFlagsProtReadWrite)
      continue;
    struct cudaMemAccessDesc desc = {.location = at, .flags = cudaMemAccessFlagsProtReadWrite};
    cudaError_t e = cudaMemPoolSetAccess(pool, &desc, 1);
    if (e != cudaSuccess) {
      cudaGetLastError();
      INFO(WEFT_INIT, "rank %d: GPU %d's default memory pool not shared with GPU %d: %s",
           comm->rank, dev, peer, cudaGetErrorString(e));
    }
  }
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
  d->rank = comm->rank;
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
  if (d->sys && !procs) pool_share(comm, cross);
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

/* Unlinks w from d's windows and closes what it opened. */
static void window_free(struct weft_cuda_direct *d, struct direct_window *w) {
  struct direct_window **pp = &d->windows;
  while (*pp != NULL && *pp != w) pp = &(*pp)->next;
  if (*pp == w) *pp = w->next;
  for (int p = 0; p < d->nranks && w->mapped != NULL; p++)
    if (w->mapped[p] != NULL) weft_p2p_ipc_close(w->mapped[p]);
  free(w->mapped);
  free(w);
}

void weft_cuda_direct_destroy(struct weft_cuda_direct *d) {
  if (d == NULL) return;
  weft_dev_board_table_free(d->table);
  if (d->procs) {
    /* Once this rank's last call ended, every peer has written its lines
     * here and read this rank's, and moved its share of any windowed call
     * (every rank makes the same calls); a peer's last CTA may still be
     * reading this board's done word, as it may a p2p inbox's (docs/
     * CUDA.md, "Across processes"). */
    while (d->windows != NULL) window_free(d, d->windows);
    if (d->xlate != NULL) cudaFree(d->xlate);
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

/* ---- Windows across processes -------------------------------------------- */

/* What each rank tells the others of a window. */
struct window_card {
  int pid;
  int ok;         /* exported (first round); mapped every peer's (second) */
  uintptr_t base; /* the allocation holding the buffer, at its owner's address */
  cudaIpcMemHandle_t handle;
};

/* This rank's card for buff: the allocation's base and IPC handle; ok 0
 * (with an INFO saying why) where it cannot be exported. */
static void window_export(const struct ncclComm *comm, void *buff, size_t size,
                          struct window_card *card) {
  card->pid = (int)getpid();
  if (buff == NULL || size == 0) return;
  uintptr_t base = 0, end = 0;
  int placed = weft_device_alloc_range(buff, &base, &end);
  cudaError_t e = cudaErrorInvalidValue;
  if (placed) e = weft_p2p_ipc_export((void *)base, &card->handle);
  if (!placed || e != cudaSuccess) {
    (void)cudaGetLastError();
    INFO(WEFT_REG | WEFT_INIT,
         "rank %d: ncclCommWindowRegister: buffer %p cannot be shared with other processes (%s): "
         "calls on it keep the ring",
         comm->rank, buff, !placed ? "not from cudaMalloc" : cudaGetErrorString(e));
    return;
  }
  card->base = base;
  card->ok = 1;
}

/* Opens every peer's allocation of another process; row[p]: what to add
 * to rank p's address to reach it here. 1 when all opened. */
static int window_open(const struct ncclComm *comm, struct weft_cuda_direct *d,
                       struct direct_window *w, const struct window_card *cards, long long *row) {
  for (int p = 0; p < d->nranks; p++) {
    if (cards[p].pid == cards[comm->rank].pid) continue; /* one address space */
    void *mem = NULL;
    cudaError_t e = weft_p2p_ipc_open(cards[p].handle, &mem);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      INFO(WEFT_REG | WEFT_INIT,
           "rank %d: ncclCommWindowRegister: cannot map rank %d's window (%s): calls on it "
           "keep the ring",
           comm->rank, p, cudaGetErrorString(e));
      return 0;
    }
    w->mapped[p] = mem;
    row[p] = (long long)((uintptr_t)mem - cards[p].base);
  }
  return 1;
}

ncclResult_t weft_cuda_direct_window_register(struct ncclComm *comm, struct weft_cuda_direct *d,
                                              void *buff, size_t size, void **out) {
  *out = NULL;
  if (d == NULL || !d->procs) return ncclSuccess; /* the same answer on every rank */
  int n = d->nranks;
  ncclResult_t res = ncclSystemError;
  struct window_card *cards = calloc((size_t)n, sizeof(*cards));
  long long *row = calloc((size_t)n, sizeof(*row));
  struct direct_window *w = calloc(1, sizeof(*w));
  if (w != NULL) w->mapped = calloc((size_t)n, sizeof(*w->mapped));
  if (cards == NULL || row == NULL || w == NULL || w->mapped == NULL) {
    WARN("rank %d: ncclCommWindowRegister: out of memory", comm->rank);
    goto fail;
  }
  w->id = d->nwindows++;
  w->lo = buff;
  w->size = size;
  if (d->xlate == NULL) {
    cudaError_t e = cudaMalloc((void **)&d->xlate, (size_t)DIRECT_MAX_WINDOWS * (size_t)n * 8);
    if (e != cudaSuccess) {
      WARN("rank %d: ncclCommWindowRegister: cudaMalloc of the windows' table: %s", comm->rank,
           cudaGetErrorString(e));
      d->xlate = NULL;
      res = ncclUnhandledCudaError;
      goto fail;
    }
  }
  /* Every rank takes part in both rounds, whatever it found, so all end
   * with the same answer: the window is usable where every rank exported
   * it and mapped every peer's. */
  if (w->id < DIRECT_MAX_WINDOWS) window_export(comm, buff, size, &cards[comm->rank]);
  res = weft_bootstrap_allgather(comm->bootstrap, cards, sizeof(*cards));
  if (res != ncclSuccess) goto fail;
  int all = 1;
  for (int p = 0; p < n; p++) all &= cards[p].ok;
  int mine = all && window_open(comm, d, w, cards, row);
  for (int p = 0; p < n; p++) cards[p].ok = 0;
  cards[comm->rank].ok = mine;
  res = weft_bootstrap_allgather(comm->bootstrap, cards, sizeof(*cards));
  if (res != ncclSuccess) goto fail;
  w->usable = 1;
  for (int p = 0; p < n; p++) w->usable &= cards[p].ok;
  if (w->usable) {
    cudaError_t e =
        weft_dev_fill(d->xlate + (size_t)w->id * (size_t)n, row, (size_t)n * sizeof(*row));
    if (e != cudaSuccess) {
      WARN("rank %d: ncclCommWindowRegister: copying the window's table: %s", comm->rank,
           cudaGetErrorString(e));
      res = ncclUnhandledCudaError;
      goto fail;
    }
  }
  INFO(WEFT_REG, "rank %d: window %u (%p, %zu bytes): %s", comm->rank, w->id, buff, size,
       w->usable ? "mapped by every rank: direct collectives on it at any size"
                 : "not mapped: calls on it keep the ring above the LL size");
  w->next = d->windows;
  d->windows = w;
  free(cards);
  free(row);
  *out = w;
  return ncclSuccess;
fail:
  if (w != NULL) window_free(d, w); /* not linked yet */
  free(cards);
  free(row);
  return res;
}

void weft_cuda_direct_window_release(struct weft_cuda_direct *d, void *window) {
  if (d == NULL || window == NULL) return;
  window_free(d, window);
}

/* The usable window holding [p, p + bytes), or NULL. */
static const struct direct_window *window_of(const struct weft_cuda_direct *d, const void *p,
                                             size_t bytes) {
  for (const struct direct_window *w = d->windows; w != NULL; w = w->next)
    if (w->usable && (const char *)p >= w->lo && bytes <= w->size &&
        (size_t)((const char *)p - w->lo) <= w->size - bytes)
      return w;
  return NULL;
}

/* The bytes of coll's input and output on this rank, and whether this
 * rank's kernel reads (writes) them; a Broadcast's input is the root's
 * alone, a Reduce's output too. */
static void coll_spans(const struct weft_coll *coll, int nranks, int rank, size_t *in_bytes,
                       size_t *out_bytes) {
  size_t b = coll->count * weft_dtype_size(coll->datatype);
  *in_bytes = *out_bytes = b;
  if (coll->func == WEFT_FUNC_ALLGATHER) *out_bytes = b * (size_t)nranks;
  if (coll->func == WEFT_FUNC_REDUCESCATTER) *in_bytes = b * (size_t)nranks;
  if (coll->func == WEFT_FUNC_BROADCAST && rank != coll->root) *in_bytes = 0;
  if (coll->func == WEFT_FUNC_REDUCE && rank != coll->root) *out_bytes = 0;
}

int weft_cuda_direct_mapped(const struct weft_cuda_direct *d, const struct weft_coll *coll) {
  if (d == NULL || !d->procs || d->windows == NULL) return 0;
  size_t in_bytes, out_bytes;
  coll_spans(coll, d->nranks, d->rank, &in_bytes, &out_bytes);
  return (in_bytes == 0 || window_of(d, coll->sendbuff, in_bytes) != NULL) &&
         (out_bytes == 0 || window_of(d, coll->recvbuff, out_bytes) != NULL);
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

int weft_cuda_direct_runs(const struct weft_cuda_direct *d, const struct weft_coll *coll,
                          int premul) {
  if (d == NULL) return 0;
  /* PreMulSum's scaled input comes from the stream's memory pool, which
   * peers on other GPUs cannot read (peer access covers cudaMalloc's
   * memory, not a pool's): across GPUs it goes over the links. */
  if (premul && d->sys) return 0;
  return !d->procs || ll_fits(d, coll->count * weft_dtype_size(coll->datatype)) ||
         (!premul && weft_cuda_direct_mapped(d, coll));
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
                                 .recvbuff = coll->recvbuff,
                                 .in_win = WEFT_DEV_NO_WINDOW,
                                 .out_win = WEFT_DEV_NO_WINDOW};
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
    /* Across processes: on windows, the peers' addresses translated
     * (weft_cuda_direct_runs said they are; a PreMulSum's scaled copy is
     * in none, so those stay in LL lines or on the ring). */
    size_t in_bytes, out_bytes;
    coll_spans(coll, d->nranks, d->rank, &in_bytes, &out_bytes);
    const struct direct_window *wi = in_bytes ? window_of(d, in, in_bytes) : NULL;
    const struct direct_window *wo = out_bytes ? window_of(d, coll->recvbuff, out_bytes) : NULL;
    if ((in_bytes && wi == NULL) || (out_bytes && wo == NULL)) {
      WARN(
          "rank %d: %s of %zu bytes a rank: direct collectives across processes need LL lines "
          "(at most %zu bytes) or buffers in windows every rank mapped",
          comm->rank, weft_func_name(coll->func), slot, weft_cuda_direct_ll_bytes(d));
      return ncclInternalError;
    }
    call.in_win = wi != NULL ? wi->id : WEFT_DEV_NO_WINDOW;
    call.out_win = wo != NULL ? wo->id : WEFT_DEV_NO_WINDOW;
    call.xlate = d->xlate;
    call.nwin = d->nwindows < DIRECT_MAX_WINDOWS ? d->nwindows : DIRECT_MAX_WINDOWS;
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
  int on = d != NULL && !d->procs && nranks <= WEFT_DEV_DIRECT_MAX_RANKS;
  /* Several GPUs (peer access, as the direct collectives): from
   * WEFT_DIRECT_P2P_GPUS bytes, where the copy beats the FIFOs
   * (docs/CUDA.md). A send and its receive have one size, so both ends
   * choose alike; sizes that differ across it end in the waits' timeout. */
  size_t min = d != NULL && d->sys ? (size_t)weft_param_int(WEFT_PARAM_DIRECT_P2P_GPUS) : 0;
  for (int k = 0; k < nops && on; k++)
    if (seen[ops[k].is_send != 0][ops[k].peer] < 2) seen[ops[k].is_send != 0][ops[k].peer]++;
  for (int k = 0; k < nops; k++) {
    direct[k] = on && seen[ops[k].is_send != 0][ops[k].peer] == 1 && ops[k].bytes >= min;
    picked += direct[k];
  }
  return picked;
}

/* A rank that copies to itself beside its sends to peers (a Scatter's
 * root, AlltoAll out of place) gives that copy its own CTAs, as many as its
 * share of the bytes, so the copy in the GPU's memory runs beside the sends
 * instead of after them (across GPUs the sends are bound by the link, the
 * copy by memory). 0: every CTA takes every send in turn. docs/CUDA.md,
 * "Send/recv directly". */
static int self_ctas(int rank, const struct weft_dev_direct_p2p *call, size_t sent, int nctas) {
  if (!(call->send_mask >> rank & 1) || (call->inplace_mask >> rank & 1)) return 0;
  /* Copies of words that are not 16-byte aligned (an AlltoAll's blocks of
   * an odd count) ran 4-17% slower split at 64-256 MiB on one H100. */
  if ((((uintptr_t)call->send_buf[rank] | (uintptr_t)call->recv_buf[rank]) & 15) != 0) return 0;
  size_t self = call->send_bytes[rank];
  if (self == 0 || self >= sent || nctas < 2) return 0;
  size_t k = (size_t)nctas * self / sent;
  return k < 1 ? 1 : k > (size_t)nctas - 1 ? nctas - 1 : (int)k;
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
  int nctas = direct_ctas(comm, sent);
  call.self_ctas = self_ctas(comm->rank, &call, sent, nctas);
  return weft_dev_direct_p2p_launch(&call, d->table, conns, d->sys, nctas, (cudaStream_t)stream);
}

#endif
