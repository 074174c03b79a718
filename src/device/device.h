/* The CUDA engine as host C sees it: plain structs and extern "C" launch
 * functions. conns.cu holds connections and plans in device memory,
 * plan_exec.cu the kernel that runs one rank's plan (src/sched/schedule.h)
 * on device buffers; reduce.cuh and prims.cuh are its pieces. The library
 * drives it from src/exec/cuda.c. */
#ifndef WEFT_DEVICE_DEVICE_H
#define WEFT_DEVICE_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "nccl.h"
#include "sched/schedule.h"
#include "transport/dev_link.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The link descriptor, the inbox layout and the slot constants are plain C
 * shared with the transports' GPU sides: transport/dev_link.h. */

/* What one rank's kernels use: its send and receive links, indexed
 * [peer * nchannels + channel], as device arrays, and its error word
 * (nonzero once one of its waits timed out: the rank + 1). */
struct weft_dev_conns {
  int rank;
  int nranks;
  int nchannels;
  int nslots;
  size_t slot_bytes;
  size_t ll_slot_bytes;
  int ll128;                  /* the links have LL128 slots */
  struct weft_dev_link *send; /* device array */
  struct weft_dev_link *recv; /* device array */
  /* Device address of the error word: by default in the rank's inbox; the
   * engine points it at host-mapped memory so the host reads it freely. */
  uint64_t *error;
  /* Host-mapped word, nonzero once ncclCommAbort was called: every wait
   * gives up. NULL: none. */
  const volatile uint32_t *abort;
  /* Where the rank's first timed-out wait is described (host-mapped);
   * NULL: not recorded. */
  struct weft_dev_wait_diag *diag;
  uint64_t timeout_ns; /* bound on every wait (0: 10 s) */
};

/* The first wait of a rank that timed out, as the kernel saw it: which
 * link, which position it waited for and the counter's last value. dir is
 * WEFT_DEV_WAIT_FREE (a send waited for the peer to free a slot: head,
 * slots the peer consumed) or WEFT_DEV_WAIT_DATA (a receive waited for
 * the peer's data: tail, slots the peer filled; for LL, the flag of one
 * line) or WEFT_DEV_WAIT_GROUP (a fused launch's CTA waited for the others
 * between two collectives). claimed is set by the one wait that writes it. */
enum {
  WEFT_DEV_WAIT_FREE = 1,
  WEFT_DEV_WAIT_DATA = 2,
  WEFT_DEV_WAIT_GROUP = 3,
  /* A direct collective (direct.cu) waited for a peer to reach the call
   * (pos: the call's epoch, seen: the peer's) or to finish its part. */
  WEFT_DEV_WAIT_PEER_READY = 4,
  WEFT_DEV_WAIT_PEER_DONE = 5,
};
struct weft_dev_wait_diag {
  uint32_t claimed;
  uint32_t dir;
  int32_t peer;
  int32_t channel;
  uint32_t lane; /* the CTA (the plan's lane) */
  uint32_t proto;
  uint64_t pos;  /* the slot position awaited */
  uint64_t seen; /* the counter (or LL flag) last read */
};

/* One line saying what a timed-out wait saw (nslots: the inbox's). */
void weft_dev_wait_describe(const struct weft_dev_wait_diag *d, int nslots, char *buf, size_t len);

/* Stream-ordered allocations (plans, PreMulSum inputs, p2p tables) come
 * from dev's default pool, which by default may hand one stream memory
 * another stream freed by making the first wait for the second. With
 * ranks' kernels spinning on each other that wait can be a deadlock (rank
 * A's allocation waits for rank B's kernel, which waits for rank A's), so
 * this limits reuse to frees the stream already follows. */
ncclResult_t weft_dev_pool_no_hidden_waits(int dev);

/* Loads every kernel of the engine into the current device's context.
 * CUDA loads a kernel at its first launch by default (lazy loading), and
 * loading may wait for the kernels already running: a rank's first launch
 * of a kernel would then wait for a peer's kernel that spins until this
 * rank's kernel runs. So the engine loads them all when a communicator is
 * made, before any of its kernels can spin (NCCL does the same). */
ncclResult_t weft_dev_load_kernels(void);

/* Allocates and zeroes an inbox on the current device, with Simple slots
 * of slot_bytes (0: WEFT_DEV_SLOT_BYTES; at least half an LL slot, a
 * multiple of 16), and LL128 slots when ll128. */
ncclResult_t weft_dev_inbox_create(int nranks, int nchannels, size_t slot_bytes, int ll128,
                                   struct weft_dev_inbox *out);
void weft_dev_inbox_destroy(struct weft_dev_inbox *inbox);
/* The link from src into the inbox laid out as `layout` and mapped at base
 * (the owner's own address, or this process's mapping of it). */
struct weft_dev_link weft_dev_inbox_link(const struct weft_dev_inbox *layout, void *base, int src,
                                         int channel);

/* Builds rank's tables: recv from mine, send through peer_bases[p] (this
 * process's address of peer p's inbox, laid out as mine; unused for p ==
 * rank, where mine is used). cross[p] is nonzero when peer p runs on
 * another GPU (NULL: every peer shares this rank's GPU). */
ncclResult_t weft_dev_conns_build(const struct weft_dev_inbox *mine, void *const *peer_bases,
                                  const unsigned char *cross, int rank, struct weft_dev_conns *out);
/* Copies rank's tables to the device from host arrays send and recv
 * ([peer * nchannels + channel], shape->nranks * nchannels each, as the
 * transports filled them: transport/gpu_transport.h); the other fields
 * are shape's (error, abort, diag and timeout are the caller's to set). */
ncclResult_t weft_dev_conns_upload(const struct weft_dev_conns *shape,
                                   const struct weft_dev_link *send,
                                   const struct weft_dev_link *recv, struct weft_dev_conns *out);
void weft_dev_conns_destroy(struct weft_dev_conns *conns);
/* Reads the error word on stream (waits for that stream only). */
ncclResult_t weft_dev_conns_error(const struct weft_dev_conns *conns, cudaStream_t stream,
                                  int *failed_out, int *rank_out);

/* One lane of a device plan: its steps are steps[first .. first+nsteps). */
struct weft_dev_lane {
  uint64_t first;
  uint64_t nsteps;
  uint64_t scratch_off; /* into the plan's scratch */
  int32_t channel;
  int32_t pad;
};

/* A plan copied to the device: lanes and steps in one flat allocation.
 * proto (enum weft_proto, Simple after upload) is the protocol its launches
 * use; the caller sets it, and every rank of a launch must set the same. */
struct weft_dev_plan {
  int nlanes;
  int proto;
  size_t nsteps;
  void *mem; /* device: lanes, then steps, then scratch */
  struct weft_dev_lane *lanes;
  struct weft_step *steps;
  char *scratch;
};

/* Copies a host plan to the device (ordered on stream; the host plan may
 * be freed when this returns). */
ncclResult_t weft_dev_plan_upload(const struct weft_plan *plan, cudaStream_t stream,
                                  struct weft_dev_plan *out);
void weft_dev_plan_free(struct weft_dev_plan *plan);
/* Frees a plan in stream order (after work already queued on stream). */
void weft_dev_plan_free_async(struct weft_dev_plan *plan, cudaStream_t stream);

/* Launches conns->rank's plan on stream: one CTA per lane. bufs[0] is the
 * send buffer (WEFT_BUF_IN), bufs[1] the receive buffer (WEFT_BUF_OUT).
 * Ranks that exchange data must run concurrently (their kernels spin on
 * each other's counters). */
ncclResult_t weft_dev_plan_launch(const struct weft_dev_plan *plan,
                                  const struct weft_dev_conns *conns, const void *sendbuff,
                                  void *recvbuff, ncclDataType_t datatype, ncclRedOp_t op,
                                  cudaStream_t stream);

/* Why a rank's error word was set: its value is the rank + 1 in bits
 * 0..31, the peer involved + 1 in bits 32..55 (0: none known) and one of
 * these in bits 56..63. A timeout writes the rank + 1 alone. */
enum weft_dev_error {
  WEFT_DEV_ERR_TIMEOUT = 0,  /* a wait passed conns.timeout_ns */
  WEFT_DEV_ERR_P2P_SIZE = 1, /* a send's byte count differs from the receive's */
  WEFT_DEV_ERR_P2P_STEP = 2, /* a receive found no send header: the ranks are out of step */
  WEFT_DEV_ERR_NET = 3,      /* the proxy's network link to the peer failed (src/proxy/) */
  WEFT_DEV_ERR_WINDOW = 4,   /* a direct call across processes: a peer's buffer in no window */
};
#define WEFT_DEV_ERROR_WORD(reason, rank, peer)                                \
  (((uint64_t)(reason) << 56) | (((uint64_t)((peer) + 1) & 0xffffffu) << 32) | \
   (uint64_t)(uint32_t)((rank) + 1))
#define WEFT_DEV_ERROR_REASON(word) ((int)((word) >> 56))
#define WEFT_DEV_ERROR_RANK(word) ((int)((uint32_t)(word)) - 1)
#define WEFT_DEV_ERROR_PEER(word) ((int)(((word) >> 32) & 0xffffffu) - 1)

/* PreMulSum's scalar, of the collective's datatype: a device pointer read
 * by the kernel when it runs (ncclScalarDevice), or the value captured when
 * the operator was made (ncclScalarHostImmediate; ptr NULL). */
struct weft_dev_scalar {
  const void *ptr;
  unsigned char value[8];
};

/* dst = src * scalar over count elements of datatype, on stream: the first
 * half of PreMulSum, as weft_scale_host (integers wrap, narrow floats are
 * widened to float and rounded once). dst may equal src. */
ncclResult_t weft_dev_scale(void *dst, const void *src, size_t count, ncclDataType_t datatype,
                            const struct weft_dev_scalar *scalar, cudaStream_t stream);

/* The Direct algorithm's second half, queued on stream right after its
 * plan (weft_direct_plan) ran there: recvbuff = the ranks' inputs reduced
 * in rank order (rank 0 op rank 1, then op rank 2, ...), the arrivals read
 * from the plan's lane scratch and this rank's own from sendbuff, then
 * avg's divide. Every rank computes the same operations in the same order,
 * so every rank gets the same bits. sendbuff may equal recvbuff. */
ncclResult_t weft_dev_direct_reduce(const struct weft_dev_plan *plan, int rank, int nranks,
                                    const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, cudaStream_t stream);

/* ---- Direct collectives on the ranks' own buffers ------------------------ */

/* Where every rank of a communicator lives in one process (one GPU, or
 * GPUs with peer access), each rank's kernel reads and writes its peers'
 * buffers itself (direct.cu says how). A rank's board is a little device
 * memory its kernels publish their buffers on; the table lists every
 * rank's board, in rank order, for the kernels. */
#define WEFT_DEV_DIRECT_MAX_RANKS 64
struct weft_dev_board;
/* Zeroed, on the current device, with LL scratch for nranks senders;
 * *ll_bytes: the most bytes a rank sends a peer in one LL call. */
ncclResult_t weft_dev_board_create(int nranks, struct weft_dev_board **out, size_t *ll_bytes);
void weft_dev_board_destroy(struct weft_dev_board *board);
ncclResult_t weft_dev_board_table(struct weft_dev_board *const *boards, int n,
                                  struct weft_dev_board ***out);
void weft_dev_board_table_free(struct weft_dev_board **table);
/* Fills n bytes at dst (device) from src (host), or zeroes them when src
 * is NULL, on a stream of its own: waiting for it never waits for a kernel
 * of another rank that may be spinning on this one. */
cudaError_t weft_dev_fill(void *dst, const void *src, size_t n);
/* Copies bytes from src to dst (memory the device reads and writes) on
 * stream, as cudaMemcpyAsync would: a kernel where that is faster (16-byte
 * aligned up to 64 KiB, any up to 2 KiB), else cudaMemcpyAsync. */
cudaError_t weft_dev_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* One collective run directly: func is AllReduce, AllGather,
 * ReduceScatter, Broadcast or Reduce; count as NCCL's call has it (per
 * rank for AllGather and ReduceScatter); op a built-in one. */
struct weft_dev_direct {
  int func; /* enum weft_func */
  int root;
  size_t count;
  ncclDataType_t datatype;
  ncclRedOp_t op;
  const void *sendbuff;
  void *recvbuff;
  /* Ranks in several processes: the windows holding sendbuff and recvbuff
   * (WEFT_DEV_NO_WINDOW: none), and xlate[w * nranks + p], what to add to
   * rank p's address in window w to reach it here (nwin windows); xlate
   * NULL: every rank in this process, addresses good as published. */
  uint32_t in_win, out_win;
  const long long *xlate;
  uint32_t nwin;
};
#define WEFT_DEV_NO_WINDOW 0xffffffffu

/* Launches conns->rank's part on stream with nctas CTAs (any number per
 * rank; every rank of the table must launch the same call, in the same
 * order). sys: some rank is on another GPU. Waits are bounded and give
 * up on abort or a peer's error as the plan kernel's do. */
ncclResult_t weft_dev_direct_launch(const struct weft_dev_direct *d,
                                    struct weft_dev_board *const *table,
                                    const struct weft_dev_conns *conns, int sys, int nctas,
                                    cudaStream_t stream);

/* The same for a small call in LL lines, no barrier (direct_ll.cu): bytes
 * is a sender's payload (count * element; at most the board's ll_bytes). */
ncclResult_t weft_dev_direct_ll_launch(const struct weft_dev_direct *d,
                                       struct weft_dev_board *const *table,
                                       const struct weft_dev_conns *conns, size_t bytes, int nctas,
                                       cudaStream_t stream);

/* A rank's part of a grouped send/recv run directly (direct_p2p.cu says
 * how): at most one send to and one receive from each peer, by rank. */
struct weft_dev_direct_p2p {
  uint64_t send_mask, recv_mask; /* bit p: a send to (a receive from) peer p */
  uint64_t inplace_mask;         /* bit p: the send to p is from the receive's buffer */
  const void *send_buf[WEFT_DEV_DIRECT_MAX_RANKS];
  size_t send_bytes[WEFT_DEV_DIRECT_MAX_RANKS];
  void *recv_buf[WEFT_DEV_DIRECT_MAX_RANKS];
  size_t recv_bytes[WEFT_DEV_DIRECT_MAX_RANKS];
  /* > 0: the launch's last self_ctas CTAs make the copy to the rank itself
   * while the others make the sends to peers (less than the launch's CTAs;
   * the copy must be one: a send to the rank itself, not in place). */
  int self_ctas;
};

/* Launches it on stream with nctas CTAs. Every peer named must launch its
 * matching part (in the same order relative to its other direct
 * launches); sizes that differ set the error word on both ranks and copy
 * nothing. */
ncclResult_t weft_dev_direct_p2p_launch(const struct weft_dev_direct_p2p *ops,
                                        struct weft_dev_board *const *table,
                                        const struct weft_dev_conns *conns, int sys, int nctas,
                                        cudaStream_t stream);

/* ---- A group's collectives in one launch -------------------------------- */

/* Collectives one fused launch carries (its kernel parameters hold them). */
#define WEFT_DEV_FUSE_MAX 32

/* One collective of a fused launch: its uploaded plan (whose proto is the
 * launch's), buffers, datatype and built-in op. */
struct weft_dev_fused_coll {
  const struct weft_dev_plan *plan;
  const void *sendbuff;
  void *recvbuff;
  ncclDataType_t datatype;
  ncclRedOp_t op;
};

/* Two words in device memory, zeroed: the barrier between the collectives
 * of a fused launch. One per rank (its launches run one after another). */
ncclResult_t weft_dev_barrier_create(unsigned **out);
void weft_dev_barrier_destroy(unsigned *barrier);

/* Launches n (1..WEFT_DEV_FUSE_MAX) collectives of conns->rank as one
 * kernel on stream: as many CTAs as the widest plan; the collectives run
 * in order, each CTA running lane b of each plan that has one, every CTA
 * waiting for all between two collectives (the next may use the same
 * links). Every rank must fuse the same collectives in the same order. */
ncclResult_t weft_dev_fused_launch(const struct weft_dev_fused_coll *colls, int n,
                                   const struct weft_dev_conns *conns, unsigned *barrier,
                                   cudaStream_t stream);

/* Buffers of a grouped send/recv launch passed in the kernel's parameters;
 * past this many they go to a device table filled in stream order. */
#define WEFT_DEV_P2P_INLINE 64

/* Launches a grouped send/recv plan (weft_p2p_plan_parts) on stream: one
 * CTA per lane (a few per peer). bufs[i] is the buffer of the plan's i-th op (nbufs of them); any
 * count works, and the table is captured by value (kernel parameters, or a
 * stream-ordered allocation filled by kernels), so CUDA graph capture
 * records it. Each send travels behind a 16-byte header carrying its byte
 * count; a receive whose posted count differs copies nothing and sets the
 * error word (WEFT_DEV_ERR_P2P_SIZE), so no buffer is ever overrun. */
ncclResult_t weft_dev_p2p_launch(const struct weft_dev_plan *plan,
                                 const struct weft_dev_conns *conns, void *const *bufs, int nbufs,
                                 cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
