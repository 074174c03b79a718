/* net/ib's credit and completion state machine (ib_fifo.h): the sender's
 * and the receiver's bookkeeping, driven by posts and completions, with
 * no verbs call, so tests feed it completions in any order. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "transport/net/ib/ib_fifo.h"

uint64_t weft_ib_wr_id(enum weft_ib_wr_kind kind, int qp, uint32_t seq) {
  return (uint64_t)kind << 56 | (uint64_t)(uint16_t)qp << 32 | seq;
}
enum weft_ib_wr_kind weft_ib_wr_kind_of(uint64_t wr_id) {
  return (enum weft_ib_wr_kind)(wr_id >> 56);
}
int weft_ib_wr_qp(uint64_t wr_id) {
  return (int)(uint16_t)(wr_id >> 32);
}
uint32_t weft_ib_wr_seq(uint64_t wr_id) {
  return (uint32_t)wr_id;
}

/* bits 31..16: the sequence's low 16 bits; 15..8: pieces; 7..0: flags. */
uint32_t weft_ib_imm_make(uint32_t seq, int pieces, unsigned flags) {
  return (seq & 0xffffu) << 16 | ((uint32_t)pieces & 0xffu) << 8 | (flags & 0xffu);
}

/* Records the comm's first error; later ones are consequences. */
static ncclResult_t fail(int *err, char *why, size_t len, ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static ncclResult_t fail(int *err, char *why, size_t len, ncclResult_t res, const char *fmt, ...) {
  if (*err != ncclSuccess) return (ncclResult_t)*err;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  *err = (int)res;
  return res;
}
#define SFAIL(s, res, ...) fail(&(s)->err, (s)->why, sizeof((s)->why), res, __VA_ARGS__)

void weft_ib_sender_init(struct weft_ib_sender *s, int nqps, uint32_t first_seq, const char *name) {
  memset(s, 0, sizeof(*s));
  s->nqps = nqps < 1 ? 1 : nqps > WEFT_IB_MAX_QPS ? WEFT_IB_MAX_QPS : nqps;
  s->seq = first_seq;
  snprintf(s->name, sizeof(s->name), "%s", name);
}

void weft_ib_receiver_init(struct weft_ib_receiver *r, int nqps, uint32_t first_seq,
                           const char *name) {
  memset(r, 0, sizeof(*r));
  r->nqps = nqps < 1 ? 1 : nqps > WEFT_IB_MAX_QPS ? WEFT_IB_MAX_QPS : nqps;
  r->seq = first_seq;
  snprintf(r->name, sizeof(r->name), "%s", name);
}

/* ---- Sender ------------------------------------------------------------------- */

/* Cuts size bytes into pieces over the QPs, the first on QP seq % nqps so
 * that small messages spread over them. -1 when too large. */
static int plan_pieces(struct weft_ib_send_plan *p, int nqps, uint32_t seq, size_t size) {
  size_t k = (size + WEFT_IB_PIECE_MAX - 1) / WEFT_IB_PIECE_MAX;
  size_t aligned = (size + WEFT_IB_PIECE_ALIGN - 1) / WEFT_IB_PIECE_ALIGN;
  if (k < (size_t)nqps) k = aligned < (size_t)nqps ? aligned : (size_t)nqps;
  if (k == 0) k = 1;
  if (k > WEFT_IB_MAX_PIECES || (k + nqps - 1) / nqps > WEFT_IB_PIECES_PER_QP) return -1;
  size_t chunk = (size + k - 1) / k;
  chunk = (chunk + WEFT_IB_PIECE_ALIGN - 1) / WEFT_IB_PIECE_ALIGN * WEFT_IB_PIECE_ALIGN;
  if (chunk > WEFT_IB_PIECE_MAX) chunk = WEFT_IB_PIECE_MAX;
  int n = 0;
  for (size_t off = 0; n == 0 || off < size; off += chunk, n++) {
    struct weft_ib_piece *q = &p->p[n];
    q->qp = (int)((seq + (uint32_t)n) % (uint32_t)nqps);
    q->offset = off;
    q->len = size - off < chunk ? size - off : chunk;
    q->wr_id = weft_ib_wr_id(WEFT_IB_WR_DATA, q->qp, seq);
  }
  for (int i = 0; i < n; i++) p->p[i].imm = weft_ib_imm_make(seq, n, 0);
  p->npieces = n;
  return n;
}

ncclResult_t weft_ib_send_post(struct weft_ib_sender *s, const volatile struct weft_ib_cts *fifo,
                               size_t size, int *req_out) {
  *req_out = -1;
  if (s->err != ncclSuccess) return (ncclResult_t)s->err;
  int slot = (int)(s->seq % WEFT_IB_SLOTS);
  struct weft_ib_sreq *q = &s->reqs[slot];
  if (q->used) return ncclSuccess; /* the caller has not tested seq - SLOTS yet */
  const volatile struct weft_ib_cts *c = &fifo[slot];
  if (__atomic_load_n(&c->stamp, __ATOMIC_ACQUIRE) != WEFT_IB_CTS_STAMP(s->seq))
    return ncclSuccess; /* no credit: the receive is not posted yet */
  struct weft_ib_send_plan *p = &s->plan;
  p->raddr = c->addr;
  p->rkey = c->rkey;
  uint64_t rsize = c->size;
  if (size > rsize) {
    /* Tell the receiver, then fail: its test must not wait forever. */
    p->npieces = 1;
    p->p[0] = (struct weft_ib_piece){.qp = 0,
                                     .imm = weft_ib_imm_make(s->seq, 1, WEFT_IB_IMM_MISMATCH),
                                     .wr_id = weft_ib_wr_id(WEFT_IB_WR_DATA, 0, s->seq)};
    s->seq++;
    return SFAIL(s, ncclInvalidUsage,
                 "NET/IB: %s: send %u of %zu bytes is larger than the receive of %llu bytes the "
                 "peer posted for it (the two sides' calls do not match)",
                 s->name, (unsigned)(s->seq - 1), size, (unsigned long long)rsize);
  }
  int n = plan_pieces(p, s->nqps, s->seq, size);
  if (n < 0) p->npieces = 0;
  if (n < 0)
    return SFAIL(s, ncclInvalidArgument,
                 "NET/IB: %s: send of %zu bytes is larger than %d QPs carry in one message "
                 "(%d pieces of at most %zu bytes per QP)",
                 s->name, size, s->nqps, WEFT_IB_PIECES_PER_QP, WEFT_IB_PIECE_MAX);
  for (int i = 0; i < n; i++)
    if (s->sq_inflight[p->p[i].qp] + WEFT_IB_PIECES_PER_QP > WEFT_IB_SQ_DEPTH) return ncclSuccess;
  for (int i = 0; i < n; i++) s->sq_inflight[p->p[i].qp]++;
  *q = (struct weft_ib_sreq){.used = 1, .seq = s->seq, .size = size, .pending = n};
  s->seq++;
  *req_out = slot;
  return ncclSuccess;
}

ncclResult_t weft_ib_send_complete(struct weft_ib_sender *s, uint64_t wr_id, int ok,
                                   ncclResult_t fail_as, const char *status) {
  uint32_t seq = weft_ib_wr_seq(wr_id);
  int qp = weft_ib_wr_qp(wr_id);
  if (!ok)
    return SFAIL(s, fail_as, "NET/IB: %s: send %u failed on QP %d: completion status %s", s->name,
                 (unsigned)seq, qp, status);
  if (weft_ib_wr_kind_of(wr_id) != WEFT_IB_WR_DATA || qp >= s->nqps)
    return SFAIL(s, ncclInternalError, "NET/IB: %s: a send completion of unknown work 0x%llx",
                 s->name, (unsigned long long)wr_id);
  if (s->sq_inflight[qp] > 0) s->sq_inflight[qp]--;
  struct weft_ib_sreq *q = &s->reqs[seq % WEFT_IB_SLOTS];
  if (!q->used || q->seq != seq || q->pending == 0) {
    /* The mismatch notice (no request) completes here; anything else is a bug. */
    if (s->err == ncclInvalidUsage) return (ncclResult_t)s->err;
    return SFAIL(s, ncclInternalError,
                 "NET/IB: %s: a completion for send %u, which is not in flight", s->name,
                 (unsigned)seq);
  }
  if (--q->pending == 0) q->done = 1;
  return (ncclResult_t)s->err;
}

ncclResult_t weft_ib_send_test(struct weft_ib_sender *s, int req, int *done, size_t *size) {
  *done = 0;
  if (s->err != ncclSuccess) return (ncclResult_t)s->err;
  struct weft_ib_sreq *q = &s->reqs[req];
  if (!q->done) return ncclSuccess;
  if (size != NULL) *size = q->size;
  memset(q, 0, sizeof(*q));
  *done = 1;
  return ncclSuccess;
}

/* ---- Receiver ----------------------------------------------------------------- */

ncclResult_t weft_ib_recv_post(struct weft_ib_receiver *r, uint64_t addr, size_t size,
                               uint32_t rkey, int *req_out) {
  *req_out = -1;
  if (r->err != ncclSuccess) return (ncclResult_t)r->err;
  int slot = (int)(r->seq % WEFT_IB_SLOTS);
  struct weft_ib_rreq *q = &r->reqs[slot];
  /* Credits: SLOTS receives posted; the sender's slot is still unread. */
  if (q->used) return ncclSuccess;
  *q = (struct weft_ib_rreq){.used = 1, .seq = r->seq, .posted = size};
  r->cts = (struct weft_ib_cts){
      .addr = addr, .size = size, .rkey = rkey, .stamp = WEFT_IB_CTS_STAMP(r->seq)};
  r->cts_slot = slot;
  r->cts_wr_id = weft_ib_wr_id(WEFT_IB_WR_CTS, 0, r->seq);
  r->cts_inflight++;
  r->seq++;
  *req_out = slot;
  return ncclSuccess;
}

/* The posted receive whose sequence ends in seq16, or NULL. At most SLOTS
 * are posted, consecutive: the low 16 bits tell them apart. */
static struct weft_ib_rreq *recv_find(struct weft_ib_receiver *r, uint32_t seq16) {
  for (int i = 0; i < WEFT_IB_SLOTS; i++) {
    struct weft_ib_rreq *q = &r->reqs[i];
    if (q->used && !q->done && (q->seq & 0xffffu) == seq16) return q;
  }
  return NULL;
}

#define RFAIL(r, res, ...) fail(&(r)->err, (r)->why, sizeof((r)->why), res, __VA_ARGS__)

static ncclResult_t recv_piece(struct weft_ib_receiver *r, uint32_t imm, uint32_t byte_len) {
  uint32_t seq16 = imm >> 16;
  int pieces = (int)((imm >> 8) & 0xffu);
  struct weft_ib_rreq *q = recv_find(r, seq16);
  if (q == NULL)
    return RFAIL(r, ncclInternalError,
                 "NET/IB: %s: data arrived for message %u (low 16 bits), which no receive "
                 "posted for",
                 r->name, (unsigned)seq16);
  if (imm & WEFT_IB_IMM_MISMATCH)
    return RFAIL(r, ncclInvalidUsage,
                 "NET/IB: %s: the peer's send %u is larger than the receive of %zu bytes posted "
                 "for it (the two sides' calls do not match)",
                 r->name, (unsigned)q->seq, q->posted);
  if (pieces == 0 || (q->pieces != 0 && q->pieces != pieces) || q->got + byte_len > q->posted ||
      q->arrived >= pieces)
    return RFAIL(r, ncclInternalError,
                 "NET/IB: %s: receive %u: a piece of %u bytes (1 of %d) does not fit what "
                 "arrived so far (%zu of %zu bytes, %d pieces)",
                 r->name, (unsigned)q->seq, (unsigned)byte_len, pieces, q->got, q->posted,
                 q->arrived);
  q->pieces = pieces;
  q->got += byte_len;
  if (++q->arrived == pieces) q->done = 1;
  return ncclSuccess;
}

ncclResult_t weft_ib_recv_complete(struct weft_ib_receiver *r, uint64_t wr_id, uint32_t imm,
                                   uint32_t byte_len, int ok, ncclResult_t fail_as,
                                   const char *status) {
  enum weft_ib_wr_kind kind = weft_ib_wr_kind_of(wr_id);
  static const char *what[] = {"?", "data", "CTS write", "receive", "flush read"};
  if (!ok)
    return RFAIL(r, fail_as, "NET/IB: %s: %s failed on QP %d: completion status %s", r->name,
                 what[kind <= WEFT_IB_WR_FLUSH ? kind : 0], weft_ib_wr_qp(wr_id), status);
  switch (kind) {
    case WEFT_IB_WR_RECV: return r->err ? (ncclResult_t)r->err : recv_piece(r, imm, byte_len);
    case WEFT_IB_WR_CTS:
      if (r->cts_inflight > 0) r->cts_inflight--;
      return (ncclResult_t)r->err;
    case WEFT_IB_WR_FLUSH: {
      uint32_t i = weft_ib_wr_seq(wr_id);
      if (i < WEFT_IB_SLOTS && r->flush_used[i]) {
        r->flush_done[i] = 1;
        return (ncclResult_t)r->err;
      }
      break;
    }
    default: break;
  }
  return RFAIL(r, ncclInternalError, "NET/IB: %s: a completion of unknown work 0x%llx", r->name,
               (unsigned long long)wr_id);
}

ncclResult_t weft_ib_recv_test(struct weft_ib_receiver *r, int req, int *done, size_t *size) {
  *done = 0;
  if (r->err != ncclSuccess) return (ncclResult_t)r->err;
  struct weft_ib_rreq *q = &r->reqs[req];
  if (!q->done) return ncclSuccess;
  if (size != NULL) *size = q->got;
  memset(q, 0, sizeof(*q));
  *done = 1;
  return ncclSuccess;
}

ncclResult_t weft_ib_flush_post(struct weft_ib_receiver *r, int *req_out, uint64_t *wr_id_out) {
  *req_out = -1;
  if (r->err != ncclSuccess) return (ncclResult_t)r->err;
  for (int i = 0; i < WEFT_IB_SLOTS; i++)
    if (!r->flush_used[i]) {
      r->flush_used[i] = 1;
      r->flush_done[i] = 0;
      *req_out = i;
      *wr_id_out = weft_ib_wr_id(WEFT_IB_WR_FLUSH, 0, (uint32_t)i);
      return ncclSuccess;
    }
  return ncclSuccess;
}

ncclResult_t weft_ib_flush_test(struct weft_ib_receiver *r, int req, int *done) {
  *done = 0;
  if (r->err != ncclSuccess) return (ncclResult_t)r->err;
  if (!r->flush_done[req]) return ncclSuccess;
  r->flush_used[req] = r->flush_done[req] = 0;
  *done = 1;
  return ncclSuccess;
}
