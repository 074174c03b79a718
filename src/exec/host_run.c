/* Running one task's plan on the worker. Every lane is a small state
 * machine (its step, its send, its receive) and the worker moves all lanes
 * of the plan in turn with the transports' non-blocking send and recv, so
 * the lanes of one plan (channels, tree directions, send/recv peers)
 * progress together in one thread. When a whole pass over the lanes moves
 * nothing, the worker spins, yields, then sleeps (weft_conn_progress_wait);
 * WEFT_TIMEOUT without progress is an error naming the stalled peers.
 *
 * No data is copied twice: sends go straight from the user's buffers, a
 * copying receive lands straight in its destination, and a reducing
 * receive lands piece by piece in a small buffer that is reduced into the
 * destination while the next piece is on its way. The one exception is a
 * guarded receive (weft_host_task.rx_guard: in-place AlltoAll, SendRecv on
 * one buffer), whose destination is also its step's send: it lands through
 * a bounce buffer, a piece at a time, each piece copied into place once the
 * send has read past it. Each side's send only needs the other's receive
 * to take bytes, which a bounce buffer always does, so the pair never
 * waits on itself.
 *
 * Grouped send/recv put a 16-byte header before each send's bytes: a magic
 * and the byte count, and a word that offers a swap. The receiver compares
 * the count with the one it posted; on a mismatch it drains the sender's
 * bytes (the link stays in step), WARNs and the task ends in
 * ncclInvalidUsage.
 *
 * A swap: where a guarded pair's link reaches the peer's memory (shm:
 * process_vm_readv/writev; transport.h's peer_mem) and the exchange is at
 * least peer_mem_min bytes, the header offers it: the SWAP bit and the
 * buffer's address, and the data waits for the peer's header. When both
 * offered and the sizes match, nothing goes through the link: each side
 * takes half of the buffer (the lower rank the first half), and for each
 * piece of it reads the peer's piece into the bounce buffer, writes its
 * own into the peer's buffer and copies the bounce buffer into place;
 * then each sends a word that its half is done and waits for the peer's.
 * Each side touches only its half of both buffers, so the sides never
 * wait on each other until the end. Otherwise the data goes as above. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/copy.h"
#include "base/fail_note.h"
#include "core/comm.h"
#include "core/connect.h"
#include "base/debug.h"
#include "base/param.h"
#include "exec/host_internal.h"
#include "exec/reduce.h"

#define HOST_P2P_MAGIC 0x5750u /* "WP", the header's top 16 bits */
#define HOST_P2P_SWAP (UINT64_C(1) << 47)
#define HOST_P2P_BYTES_MASK (HOST_P2P_SWAP - 1)
#define HOST_P2P_SWAPPED UINT64_C(0x5745465453574150) /* "WEFTSWAP": a half is done */

/* ---- Buffers ------------------------------------------------------------- */

static char *run_buf(const struct weft_host_run *r, const struct weft_host_lane *l, unsigned idx,
                     size_t off) {
  char *base = idx == WEFT_BUF_SCRATCH ? l->scratch : r->bufs[idx];
  return base == NULL ? NULL : base + off;
}

/* An engine-owned buffer of a lane (piece, guard), allocated once. */
static ncclResult_t lane_buf(const struct weft_host_run *r, char **buf, size_t bytes) {
  if (*buf != NULL) return ncclSuccess;
  void *p;
  if (posix_memalign(&p, 64, bytes) != 0) {
    WARN("rank %d: out of memory for a %zu-byte receive buffer", r->h->comm->rank, bytes);
    return ncclSystemError;
  }
  *buf = p;
  return ncclSuccess;
}

static ncclResult_t lane_piece(const struct weft_host_run *r, struct weft_host_lane *l) {
  return lane_buf(r, &l->piece, WEFT_HOST_PIECE_BYTES);
}

static ncclResult_t lane_scratch(const struct weft_host_run *r, struct weft_host_lane *l,
                                 size_t bytes) {
  if (bytes <= l->scratch_cap) return ncclSuccess;
  void *p;
  if (posix_memalign(&p, 64, bytes) != 0) {
    WARN("rank %d: out of memory for %zu bytes of lane scratch", r->h->comm->rank, bytes);
    return ncclSystemError;
  }
  free(l->scratch);
  l->scratch = p;
  l->scratch_cap = bytes;
  return ncclSuccess;
}

static void run_postop(const struct weft_host_run *r, char *dst, size_t bytes) {
  if (r->op == ncclAvg && !r->is_p2p)
    weft_postop_avg_host(dst, bytes / r->esize, r->datatype, r->h->comm->nranks);
}

/* ---- Starting a step -------------------------------------------------------- */

/* The next piece of the step into buf (cap bytes). */
static void lane_rx_next(struct weft_host_lane *l, char *buf, size_t cap) {
  size_t n = l->rx_total - l->rx_off;
  if (n > cap) n = cap;
  l->rx = (struct weft_xfer){l->rx.conn, buf, n, 0};
}

static void lane_rx_piece(struct weft_host_lane *l) {
  lane_rx_next(l, l->piece, WEFT_HOST_PIECE_BYTES);
}

/* Whether n bytes may land at dst: they miss what the step's send (the
 * header first, then tx) has still to read. */
static int lane_guard_clear(const struct weft_host_lane *l, const char *dst, size_t n) {
  uintptr_t at = (uintptr_t)dst, base = (uintptr_t)l->tx_data;
  size_t sent = l->tx_hdr ? 0 : l->tx.done;
  return sent >= l->tx_bytes || at + n <= base + sent || at >= base + l->tx_bytes;
}

/* Whether this step's header offers a swap: its receive is guarded (the
 * same buffer as its send), both are one size, and the receive link
 * reaches the peer's memory at that size. */
static int lane_swap_offer(const struct weft_host_run *r, const struct weft_host_lane *l,
                           const struct weft_step *st) {
  if (!(st->flags & WEFT_STEP_RECV) || r->rx_guard == NULL || !r->rx_guard[st->dst_buf] ||
      st->send_bytes != st->recv_bytes || st->send_bytes == 0)
    return 0;
  const struct weft_conn *c =
      weft_comm_conn(r->h->comm, l->lane->channel, st->recv_peer, WEFT_CONN_RECV);
  size_t min = c->ops->peer_mem_min != NULL ? c->ops->peer_mem_min(c) : 0;
  return min > 0 && st->send_bytes >= min;
}

/* Where a step's LOCAL copy can ride its send (the copy reads the bytes
 * the send moves, to a destination apart from them, and the link can
 * write what it sends there too: transport.h, send_mirror): the
 * destination, else NULL. A broadcast root's copy of its input to its
 * output is then made by the socket helper threads as they send each
 * chunk, from their cache, instead of by the copy pool beside them. */
static char *lane_mirror(const struct weft_host_run *r, const struct weft_host_lane *l,
                         const struct weft_step *st, const struct weft_conn *c) {
  const unsigned both = WEFT_STEP_SEND | WEFT_STEP_LOCAL;
  if ((st->flags & both) != both || !c->can_mirror || c->ops->send_mirror == NULL ||
      r->records != NULL || r->is_p2p || st->local_buf != st->send_buf ||
      st->local_off != st->send_off || st->recv_bytes != st->send_bytes || st->send_bytes == 0)
    return NULL;
  char *dst = run_buf(r, l, st->dst_buf, st->dst_off);
  const char *src = run_buf(r, l, st->send_buf, st->send_off);
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src, n = st->send_bytes;
  return dst != NULL && src != NULL && (d + n <= s || s + n <= d) ? dst : NULL;
}

static void lane_start_send(struct weft_host_run *r, struct weft_host_lane *l,
                            const struct weft_step *st) {
  struct weft_conn *c = weft_comm_conn(r->h->comm, l->lane->channel, st->send_peer, WEFT_CONN_SEND);
  c->send_msg_max = r->msg_max;
  l->tx_data = run_buf(r, l, st->send_buf, st->send_off);
  l->tx_bytes = st->send_bytes;
  l->tx_mirror = lane_mirror(r, l, st, c);
  if (r->records != NULL) {
    l->tx_hdr = 1;
    l->tx = (struct weft_xfer){c, (char *)&r->records[r->h->comm->rank], sizeof(*r->records), 0};
  } else if (r->is_p2p && st->send_off == 0) {
    l->tx_hdr = 1;
    l->tx_hold = lane_swap_offer(r, l, st);
    l->tx_hdr_val[0] = ((uint64_t)HOST_P2P_MAGIC << 48) | (uint64_t)r->p2p[st->send_buf].bytes |
                       (l->tx_hold ? HOST_P2P_SWAP : 0);
    l->tx_hdr_val[1] = l->tx_hold ? (uint64_t)(uintptr_t)l->tx_data : 0;
    l->tx = (struct weft_xfer){c, (char *)l->tx_hdr_val, sizeof(l->tx_hdr_val), 0};
  } else {
    l->tx = (struct weft_xfer){c, l->tx_data, l->tx_bytes, 0};
  }
}

/* The step's bytes: straight into dst, or a piece at a time to reduce. */
static ncclResult_t lane_rx_data(const struct weft_host_run *r, struct weft_host_lane *l,
                                 const struct weft_step *st) {
  l->rx_mode = WEFT_HOST_RX_NONE;
  if ((st->flags & WEFT_STEP_REDUCE) && st->recv_bytes > 0) {
    WEFT_CHECK(lane_piece(r, l));
    l->rx_mode = WEFT_HOST_RX_REDUCE;
    l->rx_local = run_buf(r, l, st->local_buf, st->local_off);
    lane_rx_piece(l);
  } else if (st->recv_bytes > 0) {
    l->rx_mode = WEFT_HOST_RX_COPY;
    l->rx = (struct weft_xfer){l->rx.conn, l->rx_dst, st->recv_bytes, 0};
  }
  return ncclSuccess;
}

static ncclResult_t lane_start_recv(struct weft_host_run *r, struct weft_host_lane *l,
                                    const struct weft_step *st) {
  struct weft_conn *c = weft_comm_conn(r->h->comm, l->lane->channel, st->recv_peer, WEFT_CONN_RECV);
  l->rx_dst = run_buf(r, l, st->dst_buf, st->dst_off);
  l->rx_total = st->recv_bytes;
  l->rx_off = 0;
  l->rx.conn = c;
  if (r->records != NULL) {
    l->rx_mode = WEFT_HOST_RX_RECORD;
    l->rx = (struct weft_xfer){c, (char *)&r->records[st->recv_peer], sizeof(*r->records), 0};
  } else if (r->is_p2p && st->dst_buf == l->skip_buf && st->dst_off != 0) {
    l->rx_mode = WEFT_HOST_RX_NONE; /* the rest of an op already drained */
  } else if (r->is_p2p && st->dst_off == 0) {
    l->rx_mode = WEFT_HOST_RX_HDR;
    l->rx = (struct weft_xfer){c, (char *)l->rx_hdr_val, sizeof(l->rx_hdr_val), 0};
  } else {
    WEFT_CHECK(lane_rx_data(r, l, st));
  }
  return ncclSuccess;
}

static ncclResult_t lane_tx(struct weft_host_lane *l, int *moved) {
  if (l->tx_mirror != NULL) return weft_xfer_send_mirror(&l->tx, l->tx_mirror, moved);
  WEFT_CHECK(weft_xfer_progress(&l->tx, moved));
  if (l->tx_hdr && !l->tx_hold && !weft_xfer_pending(&l->tx)) {
    l->tx_hdr = 0;
    l->tx = (struct weft_xfer){l->tx.conn, l->tx_data, l->tx_bytes, 0};
    WEFT_CHECK(weft_xfer_progress(&l->tx, moved));
  }
  return ncclSuccess;
}

/* A LOCAL copy: a large one goes to the copy pool, whose threads copy it
 * while this one runs the lanes; else, beside a send (a broadcast root's),
 * it is copied a piece at a time while the transport moves the send and
 * the other lanes take turns; else at once. The first two go past the
 * cache in a large call that does not reduce (r->stream_copies: no later
 * step reads what the copy wrote, and the cache is left to the sends). */
static void lane_start_local(struct weft_host_run *r, struct weft_host_lane *l,
                             const struct weft_step *st) {
  char *dst = run_buf(r, l, st->dst_buf, st->dst_off);
  const char *src = run_buf(r, l, st->local_buf, st->local_off);
  size_t bytes = dst != src ? st->recv_bytes : 0;
  if (weft_host_copy_wants(&r->h->copy, bytes)) {
    weft_host_copy_post(&r->h->copy, &l->cp_job, dst, src, bytes, r->stream_copies);
    l->cp_pooled = 1;
  } else if (st->flags & WEFT_STEP_SEND) {
    l->cp_dst = dst;
    l->cp_src = src;
    l->cp_left = bytes;
  } else if (bytes > 0) {
    memcpy(dst, src, bytes);
  }
}

static ncclResult_t lane_step_start(struct weft_host_run *r, struct weft_host_lane *l) {
  const struct weft_step *st = &l->lane->steps[l->step];
  l->started = 1;
  l->tx = (struct weft_xfer){0};
  l->rx = (struct weft_xfer){0};
  l->tx_hdr = 0;
  l->tx_hold = 0;
  l->rx_mode = WEFT_HOST_RX_NONE;
  l->cp_left = 0;
  l->tx_mirror = NULL;
  if (st->flags & WEFT_STEP_SEND) lane_start_send(r, l, st);
  if ((st->flags & WEFT_STEP_LOCAL) && l->tx_mirror == NULL) lane_start_local(r, l, st);
  if (st->flags & WEFT_STEP_RECV) WEFT_CHECK(lane_start_recv(r, l, st));
  return ncclSuccess;
}

/* One piece of a LOCAL copy beside a send (past the cache as the pool's
 * would be: r->stream_copies); or whether the pool finished the lane's
 * copy. */
static void lane_copy(const struct weft_host_run *r, struct weft_host_lane *l, int *moved) {
  if (l->cp_pooled && weft_host_copy_finished(&l->cp_job)) {
    l->cp_pooled = 0;
    *moved = 1;
  }
  if (l->cp_left == 0) return;
  size_t n = l->cp_left < WEFT_HOST_PIECE_BYTES ? l->cp_left : WEFT_HOST_PIECE_BYTES;
  weft_copy(l->cp_dst, l->cp_src, n, r->stream_copies);
  l->cp_dst += n;
  l->cp_src += n;
  l->cp_left -= n;
  *moved = 1;
}

/* ---- Progress ---------------------------------------------------------------- */


/* A call record arrived (framed runs): receive the data that follows, or
 * drain it when the peer sends another size (the records will disagree,
 * and the caller reports that once every record is in). */
static ncclResult_t lane_rx_record(struct weft_host_run *r, struct weft_host_lane *l) {
  const struct weft_step *st = &l->lane->steps[l->step];
  const struct weft_conn *c = l->rx.conn;
  const struct weft_host_record *rec = &r->records[st->recv_peer];
  if (rec->magic != WEFT_HOST_RECORD_MAGIC || rec->rank != st->recv_peer || rec->seq != r->seq) {
    WARN("rank %d: %s #%llu: what rank %d sent on channel %d is not the call record of this "
         "collective (is it in send/recv, or running another communicator's calls?); the "
         "ranks are out of step",
         c->rank, r->what, (unsigned long long)r->seq, c->peer, c->channel);
    return ncclInvalidUsage;
  }
  size_t sent = weft_direct_sends((enum weft_func)rec->func, rec->rank, c->rank, rec->root,
                                  (size_t)rec->payload);
  if (sent == st->recv_bytes) return lane_rx_data(r, l, st);
  l->rx_mode = WEFT_HOST_RX_DRAIN;
  l->rx_total = sent;
  l->rx_off = 0;
  if (l->rx_total == 0) {
    l->rx_mode = WEFT_HOST_RX_NONE;
    return ncclSuccess;
  }
  WEFT_CHECK(lane_piece(r, l));
  lane_rx_piece(l);
  return ncclSuccess;
}

/* Both sides offered a swap: the send moves nothing through the link, and
 * this side takes its half. */
static ncclResult_t lane_swap_start(struct weft_host_run *r, struct weft_host_lane *l) {
  const struct weft_conn *c = l->rx.conn;
  size_t half = l->rx_total / 2 / 64 * 64;
  WEFT_CHECK(lane_buf(r, &l->guard, WEFT_HOST_GUARD_BYTES));
  l->tx_hdr = 0;
  l->tx = (struct weft_xfer){l->tx.conn, NULL, 0, 0};
  l->swap_peer = l->rx_hdr_val[1];
  l->swap_off = c->rank < c->peer ? 0 : half;
  l->swap_end = c->rank < c->peer ? half : l->rx_total;
  l->rx_mode = WEFT_HOST_RX_SWAP;
  l->rx = (struct weft_xfer){l->rx.conn, NULL, 0, 0};
  return ncclSuccess;
}

/* One piece of this side's half of a swap: the peer's piece into the
 * bounce buffer, this side's into the peer's buffer, the bounce buffer
 * into place. When the half is done, the word that says so goes out and
 * the peer's is awaited. */
static ncclResult_t lane_swap_piece(struct weft_host_lane *l) {
  struct weft_conn *c = l->rx.conn;
  if (l->swap_off < l->swap_end) {
    size_t n = l->swap_end - l->swap_off;
    if (n > WEFT_HOST_GUARD_BYTES) n = WEFT_HOST_GUARD_BYTES;
    char *mine = l->rx_dst + l->swap_off;
    uint64_t theirs = l->swap_peer + l->swap_off;
    WEFT_CHECK(c->ops->peer_mem(c, l->guard, theirs, n, 0));
    WEFT_CHECK(c->ops->peer_mem(c, mine, theirs, n, 1));
    memcpy(mine, l->guard, n);
    l->swap_off += n;
    return ncclSuccess;
  }
  l->swap_done_tx = HOST_P2P_SWAPPED;
  l->tx = (struct weft_xfer){l->tx.conn, (char *)&l->swap_done_tx, sizeof(l->swap_done_tx), 0};
  l->rx = (struct weft_xfer){c, (char *)&l->swap_done_rx, sizeof(l->swap_done_rx), 0};
  l->rx_mode = WEFT_HOST_RX_SWAPPED;
  return ncclSuccess;
}

/* A send/recv header arrived: receive the data, or drain a mismatch. */
static ncclResult_t lane_rx_header(struct weft_host_run *r, struct weft_host_lane *l) {
  const struct weft_step *st = &l->lane->steps[l->step];
  const struct weft_conn *c = l->rx.conn;
  uint64_t v = l->rx_hdr_val[0];
  size_t sent = (size_t)(v & HOST_P2P_BYTES_MASK), posted = r->p2p[st->dst_buf].bytes;
  if ((v >> 48) != HOST_P2P_MAGIC) {
    WARN("rank %d: send/recv #%llu: what rank %d sent on channel %d is not a send (the ranks' "
         "calls are out of step: a collective on one, send/recv on the other?)",
         c->rank, (unsigned long long)r->seq, c->peer, c->channel);
    return ncclInvalidUsage;
  }
  if (l->tx_hold) { /* this side offered a swap */
    l->tx_hold = 0;
    if ((v & HOST_P2P_SWAP) && sent == posted) return lane_swap_start(r, l);
  }
  if (sent == posted && st->recv_bytes > 0 && r->rx_guard != NULL && r->rx_guard[st->dst_buf]) {
    WEFT_CHECK(lane_buf(r, &l->guard, WEFT_HOST_GUARD_BYTES));
    l->rx_mode = WEFT_HOST_RX_GUARD;
    lane_rx_next(l, l->guard, WEFT_HOST_GUARD_BYTES);
    return ncclSuccess;
  }
  if (sent == posted) {
    l->rx_mode = st->recv_bytes > 0 ? WEFT_HOST_RX_COPY : WEFT_HOST_RX_NONE;
    l->rx = (struct weft_xfer){l->rx.conn, l->rx_dst, st->recv_bytes, 0};
    return ncclSuccess;
  }
  WARN("rank %d: send/recv #%llu: rank %d sends %zu bytes but rank %d receives %zu; the "
       "message is discarded",
       c->rank, (unsigned long long)r->seq, c->peer, sent, c->rank, posted);
  r->usage = ncclInvalidUsage;
  l->skip_buf = st->dst_buf;
  l->rx_mode = WEFT_HOST_RX_DRAIN;
  l->rx_total = sent;
  l->rx_off = 0;
  WEFT_CHECK(lane_piece(r, l));
  lane_rx_piece(l);
  return ncclSuccess;
}

/* Moves the receive; finished pieces are reduced (or dropped) at once. */
static ncclResult_t lane_rx(struct weft_host_run *r, struct weft_host_lane *l, int *moved) {
  while (l->rx_mode != WEFT_HOST_RX_NONE) {
    WEFT_CHECK(weft_xfer_progress(&l->rx, moved));
    if (weft_xfer_pending(&l->rx)) return ncclSuccess;
    size_t n = l->rx.bytes;
    switch (l->rx_mode) {
    case WEFT_HOST_RX_HDR:
      WEFT_CHECK(lane_rx_header(r, l));
      continue;
    case WEFT_HOST_RX_RECORD:
      WEFT_CHECK(lane_rx_record(r, l));
      continue;
    case WEFT_HOST_RX_SWAP:
      WEFT_CHECK(lane_swap_piece(l));
      *moved = 1;
      if (l->rx_mode == WEFT_HOST_RX_SWAP) return ncclSuccess; /* one piece a turn */
      continue;
    case WEFT_HOST_RX_SWAPPED:
      if (l->swap_done_rx != HOST_P2P_SWAPPED) {
        WARN(
            "rank %d: send/recv #%llu: rank %d did not end its half of an in-place exchange "
            "on channel %d with the word that says so; the ranks are out of step",
            l->rx.conn->rank, (unsigned long long)r->seq, l->rx.conn->peer, l->rx.conn->channel);
        return ncclInternalError;
      }
      break;
    case WEFT_HOST_RX_GUARD:
      if (!lane_guard_clear(l, l->rx_dst + l->rx_off, n)) return ncclSuccess;
      memcpy(l->rx_dst + l->rx_off, l->guard, n);
      l->rx_off += n;
      *moved = 1;
      if (l->rx_off < l->rx_total) {
        lane_rx_next(l, l->guard, WEFT_HOST_GUARD_BYTES);
        continue;
      }
      break;
    case WEFT_HOST_RX_REDUCE: {
      const struct weft_step *st = &l->lane->steps[l->step];
      char *dst = l->rx_dst + l->rx_off;
      weft_reduce_host(dst, l->rx_local + l->rx_off, l->piece, n / r->esize, r->datatype, r->op);
      if (st->flags & WEFT_STEP_POSTOP) run_postop(r, dst, n);
    }
      /* fall through */
    case WEFT_HOST_RX_DRAIN:
      l->rx_off += n;
      *moved = 1;
      if (l->rx_off < l->rx_total) {
        lane_rx_piece(l);
        continue;
      }
      break;
    default:
      break;
    }
    l->rx_mode = WEFT_HOST_RX_NONE;
  }
  return ncclSuccess;
}

/* POSTOP of a step whose result landed whole (a copying receive, a local
 * copy, or a step that names only its destination). */
static void lane_step_finish(struct weft_host_run *r, struct weft_host_lane *l) {
  const struct weft_step *st = &l->lane->steps[l->step];
  unsigned f = st->flags;
  if ((f & WEFT_STEP_POSTOP) && !((f & WEFT_STEP_RECV) && (f & WEFT_STEP_REDUCE)))
    run_postop(r, run_buf(r, l, st->dst_buf, st->dst_off), st->recv_bytes);
}

ncclResult_t weft__host_lane_progress(struct weft_host_run *r, struct weft_host_lane *l, int *moved,
                                      int *done) {
  while (l->step < l->lane->nsteps) {
    if (!l->started) {
      WEFT_CHECK(lane_step_start(r, l));
      *moved = 1;
    }
    WEFT_CHECK(lane_tx(l, moved));
    WEFT_CHECK(lane_rx(r, l, moved));
    lane_copy(r, l, moved);
    if (weft_xfer_pending(&l->tx) || l->rx_mode != WEFT_HOST_RX_NONE || l->cp_left > 0 ||
        l->cp_pooled)
      return ncclSuccess;
    lane_step_finish(r, l);
    l->step++;
    l->started = 0;
    *moved = 1;
  }
  *done = 1;
  return ncclSuccess;
}

/* ---- The run --------------------------------------------------------------- */

void weft__host_run_describe(void *ctx, char *buf, size_t size) {
  const struct weft_host_run *r = ctx;
  snprintf(buf, size, "%s #%llu", r->what, (unsigned long long)r->seq);
}

ncclResult_t weft__host_run_prepare(struct weft_host_run *r) {
  struct weft_host_slot *slot = r->slot != NULL ? r->slot : &r->h->w.slots[0];
  int n = r->plan->nlanes;
  r->slot = slot;
  if (n > slot->cap) {
    struct weft_host_lane *grown = realloc(slot->lanes, (size_t)n * sizeof(*grown));
    struct weft_xfer **pending = realloc(slot->pending, 2 * (size_t)n * sizeof(*pending));
    if (grown != NULL) {
      memset(grown + slot->cap, 0, (size_t)(n - slot->cap) * sizeof(*grown));
      slot->lanes = grown;
      slot->cap = n;
    }
    if (pending != NULL) slot->pending = pending;
    if (grown == NULL || pending == NULL) {
      WARN("rank %d: out of memory for %d lanes", r->h->comm->rank, n);
      return ncclSystemError;
    }
  }
  r->lanes = slot->lanes;
  for (int i = 0; i < n; i++) {
    struct weft_host_lane *l = &r->lanes[i];
    l->lane = &r->plan->lanes[i];
    l->step = 0;
    l->started = 0;
    l->skip_buf = -1;
    l->cp_pooled = 0;
    l->cp_left = 0;
    l->tx = (struct weft_xfer){0};
    l->rx = (struct weft_xfer){0};
    l->tx_hold = 0;
    l->tx_mirror = NULL;
    l->rx_mode = WEFT_HOST_RX_NONE;
    WEFT_CHECK(lane_scratch(r, l, l->lane->scratch_bytes));
  }
  return ncclSuccess;
}

/* Which member of a lane team runs a lane: by channel, since the lanes of
 * one channel (a tree's up and down lanes) order their writes through the
 * network (tree.c), and a thread sanitizer sees no order there; the lanes
 * of different channels move disjoint parts of the data. */
static int lane_member(const struct weft_host_lane *l, int members) {
  return members > 1 ? l->lane->channel % members : 0;
}

/* Nothing moved, and some lane of member m waits for the copy pool: take
 * a piece of its copies here, or, when every piece is taken, sleep until
 * one is done. 1 when that was the case (the caller counts it as
 * progress). */
static int run_copy_idle(struct weft_host_run *r, int m, int members) {
  int pooled = 0;
  for (int i = 0; i < r->plan->nlanes && !pooled; i++)
    pooled = lane_member(&r->lanes[i], members) == m && r->lanes[i].cp_pooled;
  if (!pooled) return 0;
  if (!weft_host_copy_help(&r->h->copy)) weft_host_copy_wait(&r->h->copy);
  return 1;
}

void weft__host_run_copy_cancel(struct weft_host_run *r) {
  if (r->lanes == NULL) return;
  for (int i = 0; i < r->plan->nlanes; i++) {
    if (!r->lanes[i].cp_pooled) continue;
    weft_host_copy_cancel(&r->h->copy, &r->lanes[i].cp_job);
    r->lanes[i].cp_pooled = 0;
  }
}

/* Runs member m's lanes (of members; every lane when members is 1) to the
 * end. Its stalled transfers are listed from the slot's pending + 2 x the lanes of
 * the members before it. With a lane team (stop != NULL), a member
 * returns ncclInProgress as soon as another member failed. */
static ncclResult_t run_lanes(struct weft_host_run *r, int m, int members,
                              const _Atomic int *stop) {
  const int n = r->plan->nlanes;
  struct weft_xfer **pending = r->slot->pending;
  for (int i = 0; i < n; i++) pending += 2 * (lane_member(&r->lanes[i], members) < m);
  struct weft_progress_wait wait;
  weft_progress_wait_init(&wait, 0, r->h->spin_pure);
  for (;;) {
    if (stop != NULL && atomic_load_explicit(stop, memory_order_relaxed)) return ncclInProgress;
    int moved = 0, active = 0;
    for (int i = 0; i < n; i++) {
      struct weft_host_lane *l = &r->lanes[i];
      int done = 1;
      if (lane_member(l, members) == m && l->step < l->lane->nsteps) {
        done = 0;
        WEFT_CHECK(weft__host_lane_progress(r, l, &moved, &done));
      }
      active += !done;
    }
    if (!active) return ncclSuccess;
    if (moved || run_copy_idle(r, m, members)) {
      weft_progress_wait_moved(&wait);
      continue;
    }
    int np = 0;
    for (int i = 0; i < n; i++) {
      struct weft_host_lane *l = &r->lanes[i];
      if (lane_member(l, members) != m) continue;
      if (weft_xfer_pending(&l->tx)) pending[np++] = &l->tx;
      if (weft_xfer_pending(&l->rx)) pending[np++] = &l->rx;
    }
    WEFT_CHECK(weft_conn_progress_wait(&wait, pending, np, &r->h->comm->abort_flag,
                                       weft__host_run_describe, r));
  }
}

/* ---- The lane team ----------------------------------------------------------- */

/* A plan on several threads (host_team.h): member m runs the lanes of its
 * channels (lanes use distinct connections, which weft__host_plan_connect
 * checks, and different channels move disjoint parts of the data). The
 * first member to fail stops the others; a failure note (base/fail_note.h)
 * is per thread, so a team thread's travels back to the thread that runs
 * the task, which tells the peers. */
struct run_team {
  struct weft_host_run *r;
  int members;
  _Atomic int stop;
  pthread_mutex_t lock;
  ncclResult_t res; /* under lock: the first failure */
  enum weft_fail_how how;
  int peer;
  char detail[200];
};

static void run_member(void *ctx, int m) {
  struct run_team *t = ctx;
  ncclResult_t res = run_lanes(t->r, m, t->members, &t->stop);
  if (res == ncclSuccess || res == ncclInProgress) return;
  int peer = -1;
  char detail[sizeof(t->detail)];
  enum weft_fail_how how = WEFT_FAIL_NONE;
  if (m != 0) how = weft_failure_note_take(&peer, detail, sizeof(detail));
  pthread_mutex_lock(&t->lock);
  if (t->res == ncclSuccess) {
    t->res = res;
    t->how = how;
    t->peer = peer;
    if (how != WEFT_FAIL_NONE) memcpy(t->detail, detail, sizeof(detail));
  }
  pthread_mutex_unlock(&t->lock);
  atomic_store_explicit(&t->stop, 1, memory_order_relaxed);
}

/* Bytes the plan sends and receives on this rank. */
static size_t plan_bytes(const struct weft_plan *plan) {
  size_t bytes = 0;
  for (int i = 0; i < plan->nlanes; i++) {
    const struct weft_lane *lane = &plan->lanes[i];
    for (size_t s = 0; s < lane->nsteps; s++) {
      const struct weft_step *st = &lane->steps[s];
      if (st->flags & WEFT_STEP_SEND) bytes += st->send_bytes;
      if (st->flags & WEFT_STEP_RECV) bytes += st->recv_bytes;
    }
  }
  return bytes;
}

/* Members for this run: 1 unless the rank has a team, the plan several
 * lanes and WEFT_HOST_LANE_MIN_BYTES to move. Collectives only (reducing
 * ones only, unless the team was asked for): send/recv and framed runs
 * (call records) share state between lanes. */
int weft__host_run_members(const struct weft_host_run *r) {
  struct weft_host_team *team = &r->h->team;
  if (team->nthreads == 0 || r->plan->nlanes < 2 || r->is_p2p || r->records != NULL) return 1;
  if (!team->all_colls && !r->reduces) return 1;
  if (plan_bytes(r->plan) < (size_t)weft_param_int(WEFT_PARAM_HOST_LANE_MIN_BYTES)) return 1;
  int channels = 0;
  for (int i = 0; i < r->plan->nlanes; i++)
    if (r->plan->lanes[i].channel >= channels) channels = r->plan->lanes[i].channel + 1;
  if (channels < 2) return 1;
  int members = weft_host_team_size(team);
  return members < channels ? members : channels;
}

static ncclResult_t run_team(struct weft_host_run *r, int members) {
  struct run_team t = {.r = r, .members = members, .res = ncclSuccess, .how = WEFT_FAIL_NONE};
  atomic_init(&t.stop, 0);
  pthread_mutex_init(&t.lock, NULL);
  weft_host_team_run(&r->h->team, members, run_member, &t);
  pthread_mutex_destroy(&t.lock);
  if (t.how != WEFT_FAIL_NONE) weft_failure_note(t.peer, t.how, "%s", t.detail);
  return t.res;
}

ncclResult_t weft__host_plan_run(struct weft_host_run *r) {
  WEFT_CHECK(weft__host_run_prepare(r));
  int members = weft__host_run_members(r);
  ncclResult_t res = members > 1 ? run_team(r, members) : run_lanes(r, 0, 1, NULL);
  if (res != ncclSuccess) weft__host_run_copy_cancel(r);
  return res;
}
