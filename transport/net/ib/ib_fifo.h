/* net/ib's credit and completion state machine, as pure code: no verbs
 * call inside, so a test harness standing in for the completion queue
 * drives it (tests/test_ib_fifo.c). The verbs glue (ib_data.c) posts what
 * it plans and feeds it what the CQ returns.
 *
 * NCCL's scheme (net_ib.cc): the sender owns a FIFO of WEFT_IB_SLOTS
 * "clear to send" (CTS) slots, registered for remote writes. irecv number
 * s writes {buffer address, size, rkey, stamp} into slot s % SLOTS of it by
 * RDMA write; isend number s waits until that slot carries s's stamp, then
 * RDMA-writes-with-immediate the data straight into the receiver's buffer,
 * split in pieces over the connection's QPs. The immediate says which
 * message (its sequence's low 16 bits) and into how many pieces it was cut;
 * each piece's receive completion says how many bytes it carried. A
 * receive completes when all its pieces are in, in whatever order they
 * arrive across QPs. Credits: a receiver has at most SLOTS receives posted,
 * and a send goes only into a receive's buffer, so nothing is ever
 * written where no buffer was posted; a send larger than its receive is
 * refused by the sender (ncclInvalidUsage, as NCCL) and announced to the
 * receiver by a zero-byte write whose immediate carries WEFT_IB_IMM_MISMATCH,
 * so that both sides fail instead of one hanging. Private to
 * transport/net/ib/ (and its tests). */
#ifndef WEFT_TRANSPORT_NET_IB_IB_FIFO_H
#define WEFT_TRANSPORT_NET_IB_IB_FIFO_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* Requests in flight per comm and CTS slots (NCCL_NET_MAX_REQUESTS). */
#define WEFT_IB_SLOTS 32
#define WEFT_IB_MAX_QPS 128
/* The most one RDMA write carries (a work request's length is 32 bits). */
#define WEFT_IB_PIECE_MAX ((size_t)1 << 30)
/* Pieces of one message per QP: receive queues are sized for it. */
#define WEFT_IB_PIECES_PER_QP 4
/* Pieces of one message (the immediate's 8-bit count). */
#define WEFT_IB_MAX_PIECES 255
/* Pieces are cut on this boundary (NCCL's 128-byte split alignment). */
#define WEFT_IB_PIECE_ALIGN 128
/* Work requests per QP: every piece of SLOTS messages, plus the CTS
 * writes of SLOTS receives (the receiver's side), plus a flush. */
#define WEFT_IB_SQ_DEPTH (WEFT_IB_SLOTS * WEFT_IB_PIECES_PER_QP + WEFT_IB_SLOTS + 2)
#define WEFT_IB_RQ_DEPTH (WEFT_IB_SLOTS * WEFT_IB_PIECES_PER_QP)

#define WEFT_IB_IMM_MISMATCH 0x1u

/* One CTS slot, as the receiver writes it (one 32-byte inline write). The
 * stamp is last: the NIC writes in address order (NCCL relies on it too),
 * so a stamp that matches means the fields before it are in. The valid
 * bit (1 << 32) keeps zeroed memory from matching sequence 0. */
struct weft_ib_cts {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  uint32_t pad;
  uint64_t stamp;
};
#define WEFT_IB_CTS_STAMP(seq) (((uint64_t)1 << 32) | (uint32_t)(seq))

/* What a work request is, in its wr_id: kind, QP, sequence. */
enum weft_ib_wr_kind {
  WEFT_IB_WR_DATA = 1,  /* a sender's piece */
  WEFT_IB_WR_CTS = 2,   /* a receiver's CTS write */
  WEFT_IB_WR_RECV = 3,  /* a posted receive (for an immediate) */
  WEFT_IB_WR_FLUSH = 4, /* a receiver's flush read */
};
uint64_t weft_ib_wr_id(enum weft_ib_wr_kind kind, int qp, uint32_t seq);
enum weft_ib_wr_kind weft_ib_wr_kind_of(uint64_t wr_id);
int weft_ib_wr_qp(uint64_t wr_id);
uint32_t weft_ib_wr_seq(uint64_t wr_id);

uint32_t weft_ib_imm_make(uint32_t seq, int pieces, unsigned flags);

/* One RDMA write with immediate of a send: bytes [offset, offset + len) of
 * the send buffer to the receive buffer's same offset, on QP qp. */
struct weft_ib_piece {
  int qp;
  size_t offset;
  size_t len;
  uint32_t imm;
  uint64_t wr_id;
};

struct weft_ib_send_plan {
  uint64_t raddr; /* the receive buffer */
  uint32_t rkey;
  int npieces;
  struct weft_ib_piece p[WEFT_IB_MAX_PIECES];
};

struct weft_ib_sreq {
  int used, done;
  uint32_t seq;
  size_t size;
  int pending; /* pieces not completed */
};

struct weft_ib_sender {
  int nqps;
  uint32_t seq; /* the next isend's */
  struct weft_ib_sreq reqs[WEFT_IB_SLOTS];
  int sq_inflight[WEFT_IB_MAX_QPS];
  int err; /* ncclResult_t: the first error; after it only close */
  char why[384];
  char name[192];                /* "mlx5_0:1 with peer 10.0.0.2:40001", for messages */
  struct weft_ib_send_plan plan; /* what the last post asks the glue to post */
};

struct weft_ib_rreq {
  int used, done;
  uint32_t seq;
  size_t posted; /* the buffer's size */
  size_t got;    /* bytes in so far */
  int pieces;    /* announced by the first piece; 0: none in yet */
  int arrived;
};

struct weft_ib_receiver {
  int nqps;
  uint32_t seq; /* the next irecv's */
  struct weft_ib_rreq reqs[WEFT_IB_SLOTS];
  int cts_inflight;
  int flush_used[WEFT_IB_SLOTS], flush_done[WEFT_IB_SLOTS];
  int err;
  char why[384];
  char name[192];
  /* What the last post asks the glue to write: cts into the sender's
   * FIFO slot cts_slot, on QP 0. */
  struct weft_ib_cts cts;
  int cts_slot;
  uint64_t cts_wr_id;
};

/* first_seq: the sequence of the first message (0; tests start near the
 * 32-bit wrap). name: for messages. */
void weft_ib_sender_init(struct weft_ib_sender *s, int nqps, uint32_t first_seq, const char *name);
void weft_ib_receiver_init(struct weft_ib_receiver *r, int nqps, uint32_t first_seq,
                           const char *name);

/* isend of size bytes, fifo: the sender's CTS FIFO (written by the peer).
 * ncclSuccess with *req_out (0..SLOTS-1) and s->plan to post, or with
 * *req_out -1: not now (no CTS yet, or every request in use: try again,
 * nothing changed). A send larger than the receive posted for it:
 * ncclInvalidUsage, s->why set, and s->plan holds the zero-byte notice
 * to post so the receiver fails too. Any earlier error: returned again. */
ncclResult_t weft_ib_send_post(struct weft_ib_sender *s, const volatile struct weft_ib_cts *fifo,
                               size_t size, int *req_out);
/* A send-queue completion. ok: its status was success; else fail_as
 * (ncclRemoteError, ncclSystemError) and status (the status's text) make
 * the comm's error. */
ncclResult_t weft_ib_send_complete(struct weft_ib_sender *s, uint64_t wr_id, int ok,
                                   ncclResult_t fail_as, const char *status);
/* 1 when request req finished (then it is free again, *size the bytes
 * sent), 0 not yet; the comm's error when there is one. */
ncclResult_t weft_ib_send_test(struct weft_ib_sender *s, int req, int *done, size_t *size);

/* irecv into [addr, addr + size) of key rkey: ncclSuccess with *req_out
 * and r->cts to write, or *req_out -1 when SLOTS receives are posted (the
 * caller tests them and tries again). */
ncclResult_t weft_ib_recv_post(struct weft_ib_receiver *r, uint64_t addr, size_t size,
                               uint32_t rkey, int *req_out);
/* A completion on the receiver's CQ (a piece's immediate, a CTS write, a
 * flush read). imm and byte_len: a piece's. */
ncclResult_t weft_ib_recv_complete(struct weft_ib_receiver *r, uint64_t wr_id, uint32_t imm,
                                   uint32_t byte_len, int ok, ncclResult_t fail_as,
                                   const char *status);
ncclResult_t weft_ib_recv_test(struct weft_ib_receiver *r, int req, int *done, size_t *size);
/* A flush read: *req_out and *wr_id_out, or -1 when SLOTS are in flight. */
ncclResult_t weft_ib_flush_post(struct weft_ib_receiver *r, int *req_out, uint64_t *wr_id_out);
ncclResult_t weft_ib_flush_test(struct weft_ib_receiver *r, int req, int *done);

#endif
