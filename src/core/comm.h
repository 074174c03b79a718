/* The communicator object behind ncclComm_t. */
#ifndef WEFT_CORE_COMM_H
#define WEFT_CORE_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "nccl.h"

#define WEFT_COMM_MAGIC 0x7765667443304d4dULL /* "weftC0MM" */

/* What every rank learns about every other at init (bootstrap all-gather). */
struct weft_peer_info {
  int rank;
  int cuda_dev; /* -1: host rank */
  int pid;
  int cpus; /* CPUs the rank's process may run on */
  uint64_t host_hash;
  uint64_t comm_hash;
  /* Names the rank's view of the topology (GPUs and paths); ranks of one
   * host with equal views compute equal rings from it (core/comm_topo.c). */
  uint64_t topo_hash;
  char busid[24]; /* the GPU's PCI bus id; "" for a host rank */
};

/* Whether two ranks of one host run on the same GPU: by PCI bus id, which
 * names a GPU alike in every process, whatever device number each uses. */
static inline int weft_peer_same_gpu(const struct weft_peer_info *a,
                                     const struct weft_peer_info *b) {
  return strcmp(a->busid, b->busid) == 0;
}

struct weft_conn;
struct weft_channel_conns;

/* Channels a communicator may connect (lanes of a plan name one each). */
#define WEFT_MAX_CHANNELS 32
/* The channel of the wide link (transport.h, weft_conn.wide): a socket
 * link whose helpers carry a whole call alone (a 2-rank Broadcast over
 * sockets; sched/tuning.c). The last channel, which plans use only when
 * NCCL_MAX_NCHANNELS asks for all 32; such a plan's last lane then rides
 * the wide link as one channel's. */
#define WEFT_WIDE_CHANNEL (WEFT_MAX_CHANNELS - 1)
struct weft_bootstrap;
struct weft_engine_ops;
struct weft_host_engine;
struct weft_cuda_engine;
struct weft_cuda_staged;
struct weft_redop;
struct weft_failure_state;

struct ncclComm {
  uint64_t magic;
  int rank;
  int nranks;
  int cuda_dev;        /* the device the rank was created on; -1 when none */
  uint64_t comm_hash;  /* names this communicator in logs and shm */
  ncclConfig_t config; /* normalised: every field defined */

  struct weft_bootstrap *bootstrap;
  struct weft_peer_info *peers; /* nranks entries */

  /* The ring: this rank sends to ring_next and receives from ring_prev. */
  int ring_next;
  int ring_prev;
  /* Data connections, made when a task first needs them (core/connect.c):
   * per channel (allocated on first use) a send and a recv conn per peer. */
  struct weft_channel_conns *channels[WEFT_MAX_CHANNELS];
  int shm_fallback_warned; /* the shm -> socket fallback WARNs once */

  /* The engine that runs the communicator's operations (core/engine.h),
   * set once at init; NULL until then. Atomic: the failure watcher reads it
   * while a non-blocking init may still be setting it. The states below are
   * the engines' own. */
  const struct weft_engine_ops *_Atomic engine;
  struct weft_host_engine *host;
  /* The CUDA engine: this rank's inbox, links and cached plans. */
  struct weft_cuda_engine *cuda;
  /* CTAs one launch of the CUDA engine may use: the device's SMs shared
   * by the ranks on it, whose kernels must all run at once (0: no engine). */
  int cuda_max_lanes;
  /* The CUDA engine reaches some peer over net links (exec/cuda_net.h):
   * Simple only (LL's flags cannot cross the network). */
  int cuda_net_links;
  /* ... and no two ranks of the communicator are threads of one process
   * on one GPU, so the tuning may default to Direct for small all-reduces
   * (sched/tuning.c says why not otherwise). The same on every rank. */
  int cuda_net_direct;
  /* Direct collectives on the ranks' own buffers (exec/cuda_direct.h):
   * 0 none, 1 every rank on one GPU (the default algorithm there), 2 on
   * several GPUs of one process (only when NCCL_ALGO names Direct), 3 in
   * several processes on one GPU (calls of at most cuda_direct_ll_bytes a
   * rank, in LL lines: weft_cuda_direct_ll_bytes). The same on every rank. */
  int cuda_direct;
  size_t cuda_direct_ll_bytes;
  /* Most channels the host engine's collectives use by default: 8 or 4
   * where sockets carry the links and every host has cores for the helper
   * threads, 0 for the tuning's own default (core/comm_topo.c). The same
   * on every rank. */
  int host_channels;
  /* The slowest kind of link between two GPU ranks of the communicator, an
   * enum weft_tune_path (base/path_type.h) for the tuning model: same
   * GPU, NVLink, PCIe, staged or net; 0 where a rank has no GPU the
   * topology knows (core/comm_topo.c). Over every pair, so the same on
   * every rank that sees the same topology. */
  int gpu_path;
  /* Some two ranks share a GPU (an NVLink communicator may have pairs on
   * one GPU too: the worst pair is what gpu_path says). */
  int gpu_shared;
  /* The NIC nearest this rank's GPU in the topology (core/comm_topo.c):
   * its name and port as the topology has them (net_nic[0] == '\0': none
   * known), the path type to it (enum weft_topo_path) and whether
   * GPUDirect RDMA is allowed over that path (NCCL_NET_GDR_LEVEL). The
   * CUDA engine's net links use the network device of that name. For a
   * host rank: the NIC nearest its CPU (NUMA node), used by its net
   * links the same way. */
  char net_nic[64];
  int net_nic_port;
  int net_nic_path;
  int net_nic_gdr;
  char net_nic_gdr_why[96];
  /* GPU ranks: the GPUDirect RDMA verdict for a network device the
   * topology cannot place (no NIC known, or not net_nic): judged as the
   * farthest path on one host, SYS, so only NCCL_NET_GDR_LEVEL=SYS
   * allows it. */
  int net_unplaced_gdr;
  char net_unplaced_gdr_why[96];
  /* staged: the staging memory and stream flags (exec/cuda_staged.c). */
  struct weft_cuda_staged *staged_state;

  /* PreMulSum operators (api/redop.c): op ncclNumOps + i is redops[i]. */
  struct weft_redop *redops;
  int nredops;
  /* Ring order the schedules use: ring_order[i] is the rank at position i.
   * Set at init from the topology (core/comm_topo.c). */
  int *ring_order;
  /* Transport to each peer (enum weft_topo_transport), decided at init from
   * the topology; core/connect.c follows it. nranks entries. */
  uint8_t *peer_transport;

  /* Collectives issued, in order; every rank counts the same sequence. */
  uint64_t op_seq;
  /* ncclCommSplit calls made on this communicator (bootstrap message tags). */
  uint32_t split_seq;

  /* Set once: the first fatal error; every later call returns it. */
  _Atomic int async_error;
  /* Non-zero after ncclCommAbort: every wait gives up at once (other
   * values: core/failure.h). */
  _Atomic int abort_flag;
  /* The failure record and its notices (core/failure.c); NULL: 1 rank. */
  struct weft_failure_state *failure;
  int finalized;
  /* Set by ncclCommRevoke once its work in flight has stopped: no new
   * work; split, shrink, destroy and abort only (core/shrink.c). */
  _Atomic int revoked;

  /* Non-blocking init runs here; ncclCommGetAsyncError reports progress. */
  pthread_t init_thread;
  int init_thread_live;
};

/* comm is not NULL and not destroyed; WARNs naming `caller` if not. */
ncclResult_t weft_comm_check_live(const struct ncclComm *comm, const char *caller);
/* Live and done initializing (*err_out: its error state, maybe failed). */
ncclResult_t weft_comm_check_ready(const struct ncclComm *comm, const char *caller, int *err_out);
/* Checks that comm is a live communicator that takes work: ready, not
 * failed, not revoked, not finalized; WARNs naming `caller` if not. */
ncclResult_t weft_comm_check(const struct ncclComm *comm, const char *caller);

/* Records err as the communicator's fatal error (first one wins). */
void weft_comm_set_error(struct ncclComm *comm, ncclResult_t err);

/* Creates rank `rank` of nranks on the nids ids (one, or several roots:
 * weft_bootstrap_create) with a normalised config. Without `async` it
 * returns when the communicator is ready; with it, it returns
 * ncclInProgress at once with *out set and finishes on a thread (joined by
 * weft_comm_init_wait) whose result ncclCommGetAsyncError reports. */
ncclResult_t weft_comm_create(const ncclUniqueId *ids, int nids, int nranks, int rank,
                              const ncclConfig_t *config, int async, struct ncclComm **out);
/* Joins an async init; returns its result. */
ncclResult_t weft_comm_init_wait(struct ncclComm *comm);
/* ncclCommSplit: ranks of parent with one color form a new communicator,
 * ordered by (key, parent rank). NCCL_SPLIT_NOCOLOR sets *out = NULL. */
ncclResult_t weft_comm_split(struct ncclComm *parent, int color, int key,
                             const ncclConfig_t *config, struct ncclComm **out);
/* Waits for everything issued on comm to finish. */
ncclResult_t weft_comm_finalize(struct ncclComm *comm);
/* Releases everything comm holds. abort: do not wait for peers or work. */
void weft_comm_free(struct ncclComm *comm, int abort);

#endif
