/* The CUDA engine's direct collectives (src/device/direct.cu): where every
 * rank of a communicator is a thread of one process (on one GPU, or on GPUs
 * the p2p transport gave peer access), each rank's kernel reads and writes
 * the other ranks' buffers itself: no FIFOs, every byte read once and
 * written once. Ranks in several processes on one GPU run the small calls
 * in LL lines (direct_ll.cu), which touch only the boards. Here: whether a communicator can, its
 * boards (made at init, their addresses all-gathered once), and the launch. */
#ifndef WEFT_EXEC_CUDA_DIRECT_H
#define WEFT_EXEC_CUDA_DIRECT_H

#include <stddef.h>

#include "nccl.h"

struct ncclComm;
struct weft_coll;
struct weft_dev_conns;
struct weft_cuda_direct;
struct weft_p2p;

/* Collective over comm's ranks (every rank calls it, and every rank
 * decides alike from the all-gathered peer table): *out is NULL where the
 * communicator cannot run direct collectives (ranks in several processes
 * on several GPUs, one rank, more than WEFT_DEV_DIRECT_MAX_RANKS); cross[p] is nonzero for
 * a peer on another GPU. Call once the p2p transport linked the peers. */
ncclResult_t weft_cuda_direct_create(struct ncclComm *comm, const unsigned char *cross,
                                     struct weft_cuda_direct **out);
void weft_cuda_direct_destroy(struct weft_cuda_direct *d);
/* 1: every rank on one GPU; 2: ranks on several GPUs of the process; 3:
 * ranks in several processes on one GPU (boards mapped by CUDA IPC; LL
 * lines only). */
int weft_cuda_direct_kind(const struct weft_cuda_direct *d);
/* Most bytes a rank sends a peer in one call in LL lines: the board's
 * scratch, at most WEFT_DIRECT_LL_MAX (0: none). */
size_t weft_cuda_direct_ll_bytes(const struct weft_cuda_direct *d);
/* Whether coll (premul: a PreMulSum, run from a scaled copy) can run
 * directly; kind 3: in LL lines, or on windows every rank mapped. */
int weft_cuda_direct_runs(const struct weft_cuda_direct *d, const struct weft_coll *coll,
                          int premul);
/* Kind 3: whether coll's buffers on this rank (those its kernel reads or
 * writes) lie in windows every rank mapped. */
int weft_cuda_direct_mapped(const struct weft_cuda_direct *d, const struct weft_coll *coll);

/* ncclCommWindowRegister on a kind-3 communicator (collective: every rank
 * calls it, in the same order): exports the buffer's allocation by CUDA
 * IPC, maps every peer's, and keeps the translations where the kernels
 * read them; *out the window (NULL on other kinds). A buffer some rank
 * cannot export (not from cudaMalloc) is registered but not mapped, on
 * every rank alike. */
ncclResult_t weft_cuda_direct_window_register(struct ncclComm *comm, struct weft_cuda_direct *d,
                                              void *buff, size_t size, void **out);
void weft_cuda_direct_window_release(struct weft_cuda_direct *d, void *window);

/* Launches coll on stream (a cudaStream_t), reading `in` (the input, or
 * PreMulSum's scaled copy) and reducing with op. */
ncclResult_t weft_cuda_direct_launch(struct ncclComm *comm, struct weft_cuda_direct *d,
                                     const struct weft_dev_conns *conns,
                                     const struct weft_coll *coll, const void *in, ncclRedOp_t op,
                                     void *stream);

/* Grouped send/recv: sets direct[k] for each of the nops ops that runs
 * directly (on one GPU, an op that is the only one of its direction with
 * its peer in the list: both ends see the same, so they agree without a
 * word) and returns how many do. */
int weft_cuda_direct_p2p_pick(const struct weft_cuda_direct *d, int nranks,
                              const struct weft_p2p *ops, int nops, unsigned char *direct);
/* Launches the ops marked in direct (bufs[k]: op k's buffer) on stream. */
ncclResult_t weft_cuda_direct_p2p_launch(struct ncclComm *comm, struct weft_cuda_direct *d,
                                         const struct weft_dev_conns *conns,
                                         const struct weft_p2p *ops, void *const *bufs,
                                         const unsigned char *direct, int nops, void *stream);

#endif
