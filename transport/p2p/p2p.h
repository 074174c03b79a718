/* The p2p transport's GPU side (transport/gpu_transport.h: weft_p2p_gpu_ops):
 * FIFOs in the receiver's GPU memory. Each rank owns an inbox (the FIFOs
 * its peers write into, one allocation); at connect the ranks exchange
 * where theirs are (a pointer, or a CUDA IPC handle for another process)
 * and each points its send links into its peers' inboxes: by pointer (same
 * process and GPU), peer access (another GPU of the process: NVLink or
 * PCIe) or a CUDA IPC mapping (another process). Public: the engine sizes
 * every transport's slots by this transport's rule. */
#ifndef WEFT_TRANSPORT_P2P_P2P_H
#define WEFT_TRANSPORT_P2P_P2P_H

#include <stddef.h>

#include "weft_config.h"

/* The Simple slot size of the communicator's links, the same on every rank
 * (all see the same bus ids and environment; connect checks): NCCL_BUFFSIZE,
 * when set, is one link's slots together, as NCCL's per-connection buffer;
 * else 512 KiB when some rank is on another GPU (cross[p], nranks entries),
 * else the device default (WEFT_DEV_SLOT_BYTES). rank names this rank in
 * the INFO line about a too small NCCL_BUFFSIZE. */
size_t weft_p2p_slot_bytes(int rank, int nranks, const unsigned char *cross);

#if WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

/* CUDA IPC, which only this transport speaks: the CUDA engine's direct
 * collectives (src/exec/cuda_direct.c) map their boards and registered
 * windows across processes the way inboxes are mapped. Each returns the
 * CUDA runtime's answer. export: the handle of the allocation that starts
 * at base; open: this process's address of a peer's allocation (peer
 * access enabled lazily); close: unmaps what open mapped. */
cudaError_t weft_p2p_ipc_export(void *base, cudaIpcMemHandle_t *out);
cudaError_t weft_p2p_ipc_open(cudaIpcMemHandle_t handle, void **out);
void weft_p2p_ipc_close(void *mapped);
#endif

#endif
