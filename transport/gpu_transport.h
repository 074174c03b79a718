/* The GPU side of a transport: how the CUDA engine's kernels reach a peer.
 * At engine creation every rank asks each GPU transport, in one fixed
 * order (p2p, then net: the calls are collective), to link the peers the
 * engine gave it; the transport fills the host copies of the kernel's link
 * descriptors (transport/dev_link.h) and the engine uploads the tables
 * (src/device/conns.cu). What a link needs at run time beyond the kernel
 * (the proxy thread for net links) stays with the engine and src/proxy/.
 * This header includes no core/ or device/ header: the setup carries what
 * a transport needs of the communicator. */
#ifndef WEFT_TRANSPORT_GPU_TRANSPORT_H
#define WEFT_TRANSPORT_GPU_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/dev_link.h"

/* All-gather over the communicator's bootstrap: all holds nranks blocks of
 * bytes, this rank's filled; on return every block is filled. */
typedef ncclResult_t (*weft_gpu_allgather_fn)(void *ctx, void *all, size_t bytes);

/* The device layer's inbox functions (src/device/conns.cu), handed down so
 * that transport/ never includes src/device/. */
struct weft_gpu_inbox_fns {
  ncclResult_t (*create)(int nranks, int nchannels, size_t slot_bytes, int ll128,
                         struct weft_dev_inbox *out);
  void (*destroy)(struct weft_dev_inbox *inbox);
  struct weft_dev_link (*link)(const struct weft_dev_inbox *layout, void *base, int src,
                               int channel);
};

/* What every GPU transport is told about the communicator. */
struct weft_gpu_setup {
  int rank;
  int nranks;
  int nchannels;     /* of the link tables (plans use half: trees use twice as many) */
  int nslots;        /* WEFT_DEV_NSLOTS */
  size_t slot_bytes; /* of a Simple slot, the same on every rank */
  int ll128;         /* inboxes hold LL128 slots (the same on every rank) */
  int cuda_dev;
  /* nranks: peer p runs on another GPU than this rank (by PCI bus id). */
  const unsigned char *cross;
  int64_t timeout_s; /* WEFT_TIMEOUT: bound on every wait of the setup */
  weft_gpu_allgather_fn allgather;
  void *allgather_ctx;
  /* The engine's host-mapped words (host addresses): the error word the
   * kernels watch and the abort word that stops them. */
  uint64_t *error;
  const volatile uint32_t *abort;
  const struct weft_gpu_inbox_fns *inbox;
  /* The NIC nearest the rank's GPU by the topology (its name, "" none;
   * its port, 0 any): the net transport uses the network device of that
   * name, else device 0. */
  const char *net_nic;
  int net_nic_port;
  /* The topology's GPUDirect RDMA verdicts (NCCL_NET_GDR_LEVEL) and their
   * reasons, for the log: for net_nic, and for a network device the
   * topology cannot place (it has no NIC, or net_nic is not a device of
   * the network). The net transport puts a link's slots in device memory
   * only where the verdict allows it (transport/net/net_gdr.h). */
  int net_nic_gdr;
  const char *net_nic_gdr_why;
  int net_unplaced_gdr;
  const char *net_unplaced_gdr_why;
};

struct weft_gpu_transport_ops {
  const char *name;
  /* Collective (every rank calls it, with its own peers): links this rank
   * to every peer p with peers[p] nonzero, filling send[i] and recv[i]
   * (i = p * nchannels + channel; other entries untouched), and logs one
   * INFO/GRAPH line per peer. *state (NULL: nothing to free) is the
   * transport's, for the calls below. */
  ncclResult_t (*connect)(const struct weft_gpu_setup *s, const unsigned char *peers,
                          struct weft_dev_link *send, struct weft_dev_link *recv, void **state);
  /* Releases what connect made, once no kernel uses the links (abort:
   * after ncclCommAbort; nothing waits). NULL state: nothing. */
  void (*free)(void *state, int abort);
};

extern const struct weft_gpu_transport_ops weft_p2p_gpu_ops;
extern const struct weft_gpu_transport_ops weft_net_gpu_ops;

#endif
