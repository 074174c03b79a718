/* What a kernel reads to reach a peer: one direction of one connection as
 * the device sees it, and the layout of a rank's inbox. Plain C (no CUDA
 * types), shared by src/device/ (device.h includes it) and the GPU sides
 * of the transports (transport/gpu_transport.h), which fill these for the
 * engine to upload. */
#ifndef WEFT_TRANSPORT_DEV_LINK_H
#define WEFT_TRANSPORT_DEV_LINK_H

#include <stddef.h>
#include <stdint.h>

/* Simple protocol defaults: slots per connection and bytes per slot. */
#define WEFT_DEV_NSLOTS 8
#define WEFT_DEV_SLOT_BYTES (128u << 10)
/* Counter words per connection: head at 0, tail at 16 (128 bytes apart). */
#define WEFT_DEV_CTRL_WORDS 32
/* LL protocol slots (src/device/proto_ll.cuh): nslots per connection too,
 * each of 16-byte lines that carry 8 bytes of data, so half is payload.
 * LL128's (src/device/proto_ll128.cuh) are as many of the same size, in an
 * area of their own, of 128-byte lines that carry 120; only inboxes of
 * communicators that may run LL128 have them (weft_tune_ll128_links). */
#define WEFT_DEV_LL_SLOT_BYTES (32u << 10)

/* One direction of one connection, as a kernel sees it: nslots slots of
 * slot_bytes, nslots LL and nslots LL128 slots of ll_slot_bytes, and two
 * 64-bit counters,
 * head (slots consumed, written by the receiver) and tail (slots filled,
 * written by the sender), counting the slots of both protocols. They live
 * in the receiver's memory; the sender reaches them by a pointer that is
 * its own (same process), a peer pointer (another GPU of this process) or
 * a CUDA IPC mapping (another process). */
struct weft_dev_link {
  char *slots;
  uint64_t *head;
  uint64_t *tail;
  char *ll;    /* LL slots: only LL ever writes them, so no stale flag is data */
  char *ll128; /* LL128 slots: the same, for LL128's flags (NULL: none) */
  /* Bytes the sender put in each Simple slot, written before the tail's
   * release: a net link's proxy sends that many (src/proxy/). NULL on the
   * links where the receiving kernel reads the slot itself. */
  uint32_t *sizes;
  /* The two ends are on different GPUs: the counters are released and
   * acquired at system scope (the GPU scope orders one GPU's threads only). */
  uint32_t sys;
};

/* A rank's inbox: the FIFOs its peers send to, in its own device memory,
 * one allocation so one IPC handle shares all of it. Layout: counters
 * [src][channel][WEFT_DEV_CTRL_WORDS], one error word, LL slots
 * [src][channel][1 or 2][nslots][ll_slot_bytes] (LL's, then LL128's where
 * ll128; zeroed: flag 0 is never expected), then slots
 * [src][channel][nslots][slot_bytes]. */
struct weft_dev_inbox {
  void *base;
  size_t bytes;
  int nranks;
  int nchannels;
  int nslots;
  size_t slot_bytes;
  size_t ll_slot_bytes;
  int ll128; /* the LL128 slots are there */
};

#endif
