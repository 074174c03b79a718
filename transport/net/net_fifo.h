/* One direction of a FIFO whose slots a network carries: the GPU side of
 * the net transport. The FIFO (slots, per-slot sizes, head and tail) lives
 * in host memory the caller provides (pinned and mapped for a kernel: see
 * src/exec/cuda_net.c); the kernel is one end, the network the other, and
 * the proxy thread (src/proxy/) calls progress.
 *
 * Send side (this rank -> peer): the kernel fills slot pos % nslots,
 * stores its byte count in sizes[] and releases tail = pos + 1; progress
 * isends the slot once tail > pos (up to nslots in flight) and, when the
 * send completed, releases head = pos + 1 so the kernel may reuse it.
 * Receive side (peer -> this rank): progress irecvs into slot pos once the
 * kernel freed it (pos < head + nslots), and when the data landed releases
 * tail = pos + 1; the kernel reads the slot and releases head.
 * Positions count from 0 on both ends and only grow; progress moves no
 * further than `target`, the slots the plans launched so far carry.
 *
 * The slots may live in device memory instead (weft_net_fifo_use_device_
 * slots, where GPUDirect RDMA is allowed: net_gdr.h); the counters and
 * sizes stay in the host memory, where the kernel polls them and the
 * proxy writes them. A receive into device slots is flushed (the
 * network's iflush) before its tail is published, so the kernel never
 * reads bytes the NIC has not made visible to the GPU. */
#ifndef WEFT_TRANSPORT_NET_NET_FIFO_H
#define WEFT_TRANSPORT_NET_NET_FIFO_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/net/net.h"

#define WEFT_NET_FIFO_MAX_SLOTS 16

/* Bytes of host memory a FIFO of nslots slots of slot_bytes needs
 * (counters, sizes, slots, in that order; slots 4 KiB aligned). */
size_t weft_net_fifo_bytes(int nslots, size_t slot_bytes);
/* The same without the slots: a FIFO whose slots are in device memory. */
size_t weft_net_fifo_ctrl_bytes(int nslots);

struct weft_net_fifo {
  int is_send;
  int peer;    /* the rank at the other end (for messages) */
  int channel; /* for messages */
  int nslots;
  size_t slot_bytes;
  /* In the caller's memory: */
  uint64_t *head; /* slots consumed (send: by the network; recv: by the kernel) */
  uint64_t *tail; /* slots filled (send: by the kernel; recv: by the network) */
  uint32_t *sizes;
  char *slots;
  int slot_type; /* WEFT_NET_PTR_HOST, or _CUDA: slots in device memory */
  /* The network's side: */
  const struct weft_net_ops *net;
  int dev;      /* the network's device it listens and connects on */
  void *listen; /* receive side, until accepted */
  void *comm;   /* send or recv comm once connected */
  void *mh;     /* the slots' registration */
  void *req[WEFT_NET_FIFO_MAX_SLOTS];
  uint32_t flushing; /* bit s: req[s] is slot s's flush, not its receive */
  uint64_t flushes;  /* flushes the network asked for (device slots) */
  uint64_t posted;   /* slots handed to the network */
  uint64_t done;     /* slots the network finished */
};

/* Lays a FIFO out over mem (weft_net_fifo_bytes of them, zeroed here) and
 * for receive sides starts listening: handle (WEFT_NET_HANDLE_BYTES) is
 * what the sending peer connects to. */
ncclResult_t weft_net_fifo_open(const struct weft_net_ops *net, int dev, int is_send, int peer,
                                int channel, int nslots, size_t slot_bytes, void *mem, void *handle,
                                struct weft_net_fifo *out);
/* Puts the slots in device memory: nslots * slot_bytes bytes at dev_slots
 * (the caller's cudaMalloc), registered as WEFT_NET_PTR_CUDA. Between open
 * and the first connect; mem then needs only weft_net_fifo_ctrl_bytes. */
void weft_net_fifo_use_device_slots(struct weft_net_fifo *f, void *dev_slots);
/* One step of connecting (send: to the peer's handle; recv: accepting);
 * *done_out set once connected and the slots registered. Never blocks. */
ncclResult_t weft_net_fifo_connect(struct weft_net_fifo *f, const void *handle, int *done_out);
/* Moves what can move now, up to target slots; *moved_out is nonzero when
 * anything did. An error (WARN naming the peer) leaves the FIFO for close. */
ncclResult_t weft_net_fifo_progress(struct weft_net_fifo *f, uint64_t target, int *moved_out);
/* Closes the network's comms (the memory stays the caller's). */
void weft_net_fifo_close(struct weft_net_fifo *f);

#endif
