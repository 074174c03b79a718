/* Private to the shm transport: the layout of a connection's /dev/shm
 * segment, and the helpers that create, open and reclaim segments
 * (segment.c) for the FIFO code (shm.c). Nothing outside transport/shm/
 * includes this. */
#ifndef WEFT_TRANSPORT_SHM_SHM_H
#define WEFT_TRANSPORT_SHM_SHM_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/transport.h"

#define WEFT_SHM_MAGIC 0x4d534657u /* "WFSM" */
#define WEFT_SHM_VERSION 3u
#define WEFT_SHM_DIR "/dev/shm"
#define WEFT_SHM_NAME_MAX 96
/* Two cache lines, so the adjacent-line prefetcher does not pull the other
 * side's counter into a line we write. */
#define WEFT_SHM_LINE 128
/* The slots start one page in, so a slot never shares a page with the
 * counters. */
#define WEFT_SHM_HEADER_BYTES 4096

/* Bits of weft_shm_header.closed. */
#define WEFT_SHM_CLOSED_SEND 1
#define WEFT_SHM_CLOSED_RECV 2

/* The segment starts with this header. The receiver writes the first line
 * before it hands the name to anyone; the sender then writes send_pidns and
 * publishes send_pid, which doubles as the "mapped" flag the receiver waits
 * for before it unlinks the name. tail and head count bytes since connect
 * and never wrap (2^64 bytes is centuries at memory speed). */
struct weft_shm_header {
  uint32_t magic;
  uint32_t version;
  uint64_t slot_bytes;
  uint64_t ring_bytes;
  int32_t recv_pid;
  int32_t recv_rank;
  uint64_t recv_pidns;                          /* pid namespace of recv_pid (0: unknown) */
  uint64_t recv_map;                            /* where recv_pid mapped this header */
  uint64_t send_pidns;                          /* written before send_pid is published */
  _Atomic int32_t send_pid;                     /* 0 until the sender has mapped the segment */
  _Atomic int32_t closed;                       /* WEFT_SHM_CLOSED_* of the sides that closed */
  uint64_t cma_probe_addr;                      /* sender: a word the receiver's probe reads */
  alignas(WEFT_SHM_LINE) _Atomic uint64_t tail; /* written by the sender only */
  alignas(WEFT_SHM_LINE) _Atomic uint64_t head; /* written by the receiver only */
  /* Single copy (shm.c): the sender's one outstanding descriptor, valid
   * once desc_seq counts it, and unchanged until the receiver has read it
   * all; the receiver's count of descriptor bytes read, and its verdict on
   * whether process_vm_readv works on this connection. */
  alignas(WEFT_SHM_LINE) _Atomic uint64_t desc_seq; /* sender: descriptors published */
  uint64_t desc_ring_pos;                           /* tail when it was published */
  uint64_t desc_addr;                               /* in the sender's address space */
  uint64_t desc_bytes;
  alignas(WEFT_SHM_LINE) _Atomic uint64_t cma_read; /* receiver: descriptor bytes read */
  _Atomic int32_t cma_state;                        /* receiver: WEFT_SHM_CMA_* */
};

/* Values of weft_shm_header.cma_state. */
#define WEFT_SHM_CMA_UNKNOWN 0 /* the receiver has not connected yet */
#define WEFT_SHM_CMA_ON 1
#define WEFT_SHM_CMA_OFF 2

_Static_assert(sizeof(struct weft_shm_header) <= WEFT_SHM_HEADER_BYTES,
               "the shm header must fit in front of the slots");
_Static_assert(ATOMIC_LONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2,
               "shm counters must be lock-free to be shared between processes");

/* One process's mapping of a segment. */
struct weft_shm_segment {
  struct weft_shm_header *hdr;
  char *ring; /* hdr->ring_bytes of slots */
  size_t map_bytes;
  char name[WEFT_SHM_NAME_MAX]; /* "/weft-...", as shm_open takes it */
};

/* Receiver side: creates conn's segment with space for ring_bytes of slots
 * reserved (posix_fallocate), maps it and writes the header's first line.
 * Without room in /dev/shm: a WARN naming the bytes needed and free, errno
 * ENOSPC and ncclSystemError; nothing is left behind. */
ncclResult_t weft__shm_segment_create(const struct weft_conn *conn, uint64_t slot_bytes,
                                      uint64_t ring_bytes, struct weft_shm_segment *out);
/* Sender side: maps the receiver's segment `name` of map_bytes and checks
 * its header. A name already gone is ncclRemoteError (the receiver closed or
 * exited first). */
ncclResult_t weft__shm_segment_open(const struct weft_conn *conn, const char *name,
                                    size_t map_bytes, struct weft_shm_segment *out);
/* Removes the name (ENOENT is fine: already gone); mappings stay valid. */
void weft__shm_segment_unlink(const struct weft_shm_segment *seg);
void weft__shm_segment_unmap(struct weft_shm_segment *seg);

/* Unlinks weft-* segments in /dev/shm left by processes that no longer
 * exist. At most one scan a second per process. */
void weft__shm_reclaim_stale(void);

/* Milliseconds on a monotonic clock (the same clock as weft_time_ms). */
int64_t weft__shm_now_ms(void);

/* This process's pid namespace (inode of /proc/self/ns/pid), 0 if unknown.
 * Pids are only comparable between processes of one namespace. */
uint64_t weft__shm_pidns(void);

#endif
