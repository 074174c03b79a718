/* Ring schedules: AllReduce, AllGather and ReduceScatter as rings, and
 * Broadcast and Reduce as chains along the ring, pipelined by chunk.
 *
 * Everything is written in ring positions: position p receives from
 * ring[p-1] and sends to ring[p+1], on the lane's channel. Channel c takes
 * part c of the data (of each rank's block for AllGather/ReduceScatter), so
 * lanes never touch the same bytes. Both ends of a link name the same piece
 * of data at the same step, so the sizes on a link always agree; a step
 * whose piece is empty is left out on both ends.
 *
 * AllReduce: rounds of up to chunk*n elements, cut into n slices (slice k
 * belongs to position k). Reduce-scatter step j sends slice p-j-1 and
 * reduces slice p-j-2 (input + received) into the output; the last one
 * completes slice p (POSTOP there). All-gather step j sends slice p-j and
 * copies in slice p-j-1. Step 0 sends from the input, later steps send what
 * the step before wrote, so in-place calls read every input element before
 * it is overwritten.
 *
 * ReduceScatter: per chunk, the partial sum of block ring[q] starts at
 * position q+1 (from its input) and travels n-1 hops to position q, each
 * hop adding that rank's input. Partials live in two scratch slots that
 * alternate, since a step sends one partial while it receives the next;
 * only the last hop writes the output (POSTOP there).
 *
 * AllGather: per chunk, n-1 steps forward the blocks around the ring; a
 * rank's own block goes straight from its input.
 *
 * Broadcast: a chain from the root along the ring; each rank forwards chunk
 * i-1 while chunk i arrives. The root's steps send a chunk and copy it to
 * its own output (LOCAL with SEND), so that copy is spread over the chain. Reduce: a chain that ends at the root (it
 * starts at the root's successor); partial sums ride in two scratch slots,
 * so a non-root output is never touched. */
#include <stdint.h>
#include <stdlib.h>

#include "base/check.h"
#include "base/debug.h"
#include "sched/plan.h"
#include "sched/schedule.h"

/* What one lane needs to know, in elements (offsets scale by es). */
struct ring_lane {
  const struct weft_sched_args *a;
  struct weft_lane *lane;
  int pos, prev, next;
  size_t es;
  size_t chunk;    /* elements per step, >= 1 */
  size_t off, len; /* this lane's part */
  size_t slot;     /* bytes of one scratch slot: a chunk of this part */
  int root_pos;    /* the root's ring position (Broadcast, Reduce) */
};

static int ring_mod(int x, int n) {
  return ((x % n) + n) % n;
}

static size_t ring_min(size_t a, size_t b) {
  return a < b ? a : b;
}

/* One step from a send piece and a receive piece (bytes 0: none). */
static ncclResult_t ring_step(struct weft_lane *lane, struct weft_step send,
                              struct weft_step recv) {
  if (send.send_bytes == 0 && recv.recv_bytes == 0) return ncclSuccess;
  struct weft_step s = recv;
  if (recv.recv_bytes == 0)
    s = send;
  else if (send.send_bytes > 0) {
    s.flags |= WEFT_STEP_SEND;
    s.send_buf = send.send_buf;
    s.send_peer = send.send_peer;
    s.send_off = send.send_off;
    s.send_bytes = send.send_bytes;
  }
  return weft_lane_push(lane, &s);
}

static ncclResult_t ring_allreduce_round(const struct ring_lane *l, size_t base, size_t len) {
  const int n = l->a->nranks, p = l->pos;
  const size_t es = l->es, g = weft_split_grain(es);
  size_t so, sl, ro, rl;
  for (int j = 0; j < n - 1; j++) {
    weft_split(len, n, ring_mod(p - j - 1, n), g, &so, &sl);
    weft_split(len, n, ring_mod(p - j - 2, n), g, &ro, &rl);
    uint16_t in = j == 0 ? WEFT_BUF_IN : WEFT_BUF_OUT;
    uint16_t flags = WEFT_STEP_REDUCE | (j == n - 2 ? WEFT_STEP_POSTOP : 0);
    WEFT_CHECK(ring_step(l->lane, weft_step_send(l->next, in, (base + so) * es, sl * es),
                         weft_step_recv(l->prev, flags, WEFT_BUF_OUT, (base + ro) * es, WEFT_BUF_IN,
                                        (base + ro) * es, rl * es)));
  }
  for (int j = 0; j < n - 1; j++) {
    weft_split(len, n, ring_mod(p - j, n), g, &so, &sl);
    weft_split(len, n, ring_mod(p - j - 1, n), g, &ro, &rl);
    WEFT_CHECK(ring_step(
        l->lane, weft_step_send(l->next, WEFT_BUF_OUT, (base + so) * es, sl * es),
        weft_step_recv(l->prev, WEFT_STEP_COPY, WEFT_BUF_OUT, (base + ro) * es, 0, 0, rl * es)));
  }
  return ncclSuccess;
}

static ncclResult_t ring_allreduce(const struct ring_lane *l) {
  const size_t n = (size_t)l->a->nranks;
  /* A round gives every position one slice of at most chunk elements. */
  size_t round = l->chunk > l->len / n ? l->len : l->chunk * n;
  for (size_t done = 0; done < l->len; done += round) {
    size_t len = ring_min(round, l->len - done);
    WEFT_CHECK(ring_allreduce_round(l, l->off + done, len));
  }
  return ncclSuccess;
}

static ncclResult_t ring_allgather(const struct ring_lane *l) {
  const int n = l->a->nranks, p = l->pos;
  const size_t es = l->es, count = l->a->count;
  for (size_t co = l->off; co < l->off + l->len; co += l->chunk) {
    size_t cl = ring_min(l->chunk, l->off + l->len - co);
    for (int j = 0; j < n - 1; j++) {
      size_t sb = (size_t)l->a->ring[ring_mod(p - j, n)];
      size_t rb = (size_t)l->a->ring[ring_mod(p - j - 1, n)];
      struct weft_step s =
          j == 0 ? weft_step_send(l->next, WEFT_BUF_IN, co * es, cl * es)
                 : weft_step_send(l->next, WEFT_BUF_OUT, (sb * count + co) * es, cl * es);
      WEFT_CHECK(ring_step(l->lane, s,
                           weft_step_recv(l->prev, WEFT_STEP_COPY, WEFT_BUF_OUT,
                                          (rb * count + co) * es, 0, 0, cl * es)));
    }
  }
  /* The own block last, so the ring starts at once; skipped when in place. */
  size_t own = (size_t)l->a->rank * count;
  struct weft_step copy =
      weft_step_local(WEFT_BUF_OUT, (own + l->off) * es, WEFT_BUF_IN, l->off * es, l->len * es, 0);
  return weft_lane_push(l->lane, &copy);
}

/* Where hop j of a reduce-scatter chunk sends from: the input at hop 0,
 * else the scratch slot that hop j-1 filled. */
static struct weft_step ring_rs_send(const struct ring_lane *l, int j, size_t block, size_t co,
                                     size_t cl) {
  const size_t es = l->es;
  if (j == 0) return weft_step_send(l->next, WEFT_BUF_IN, (block * l->a->count + co) * es, cl * es);
  return weft_step_send(l->next, WEFT_BUF_SCRATCH, (size_t)((j - 1) % 2) * l->slot, cl * es);
}

static ncclResult_t ring_reducescatter(const struct ring_lane *l) {
  const int n = l->a->nranks, p = l->pos;
  const size_t es = l->es, count = l->a->count;
  l->lane->scratch_bytes = n > 2 ? 2 * l->slot : 0;
  for (size_t co = l->off; co < l->off + l->len; co += l->chunk) {
    size_t cl = ring_min(l->chunk, l->off + l->len - co);
    for (int j = 0; j < n - 1; j++) {
      size_t sb = (size_t)l->a->ring[ring_mod(p - j - 1, n)];
      size_t rb = (size_t)l->a->ring[ring_mod(p - j - 2, n)];
      struct weft_step r;
      if (j == n - 2)
        r = weft_step_recv(l->prev, WEFT_STEP_REDUCE | WEFT_STEP_POSTOP, WEFT_BUF_OUT, co * es,
                           WEFT_BUF_IN, (rb * count + co) * es, cl * es);
      else
        r = weft_step_recv(l->prev, WEFT_STEP_REDUCE, WEFT_BUF_SCRATCH, (size_t)(j % 2) * l->slot,
                           WEFT_BUF_IN, (rb * count + co) * es, cl * es);
      WEFT_CHECK(ring_step(l->lane, ring_rs_send(l, j, sb, co, cl), r));
    }
  }
  return ncclSuccess;
}

static ncclResult_t ring_broadcast(const struct ring_lane *l) {
  const int n = l->a->nranks;
  const size_t es = l->es;
  int dist = ring_mod(l->pos - l->root_pos, n); /* hops from the root */
  struct weft_lane_writer w = {.lane = l->lane};
  for (size_t co = l->off; co < l->off + l->len; co += l->chunk) {
    size_t cl = ring_min(l->chunk, l->off + l->len - co);
    if (dist == 0) {
      /* The root sends the chunk and copies it to its own output in one
       * step (n > 1 here), so the copy overlaps the chain (in place it is
       * nothing). */
      struct weft_step s = weft_step_send(l->next, WEFT_BUF_IN, co * es, cl * es);
      weft_step_add_local(&s, WEFT_BUF_OUT, co * es, WEFT_BUF_IN, co * es, cl * es);
      WEFT_CHECK(weft_lane_emit(&w, &s));
      continue;
    }
    struct weft_step r =
        weft_step_recv(l->prev, WEFT_STEP_COPY, WEFT_BUF_OUT, co * es, 0, 0, cl * es);
    WEFT_CHECK(weft_lane_emit(&w, &r));
    if (dist < n - 1) WEFT_CHECK(weft_lane_defer_send(&w, l->next, WEFT_BUF_OUT, co * es, cl * es));
  }
  return weft_lane_flush(&w);
}

static ncclResult_t ring_reduce(const struct ring_lane *l) {
  const int n = l->a->nranks;
  const size_t es = l->es;
  int dist = ring_mod(l->pos - l->root_pos - 1, n); /* hops from the chain's start */
  struct weft_lane_writer w = {.lane = l->lane};
  if (n == 1) {
    struct weft_step copy = weft_step_local(WEFT_BUF_OUT, l->off * es, WEFT_BUF_IN, l->off * es,
                                            l->len * es, WEFT_STEP_POSTOP);
    return weft_lane_push(l->lane, &copy);
  }
  if (dist > 0 && dist < n - 1) l->lane->scratch_bytes = 2 * l->slot;
  size_t i = 0;
  for (size_t co = l->off; co < l->off + l->len; co += l->chunk, i++) {
    size_t cl = ring_min(l->chunk, l->off + l->len - co);
    struct weft_step s;
    if (dist == 0) {
      s = weft_step_send(l->next, WEFT_BUF_IN, co * es, cl * es);
    } else if (dist == n - 1) {
      s = weft_step_recv(l->prev, WEFT_STEP_REDUCE | WEFT_STEP_POSTOP, WEFT_BUF_OUT, co * es,
                         WEFT_BUF_IN, co * es, cl * es);
    } else {
      size_t slot = (i % 2) * l->slot;
      s = weft_step_recv(l->prev, WEFT_STEP_REDUCE, WEFT_BUF_SCRATCH, slot, WEFT_BUF_IN, co * es,
                         cl * es);
      WEFT_CHECK(weft_lane_emit(&w, &s));
      WEFT_CHECK(weft_lane_defer_send(&w, l->next, WEFT_BUF_SCRATCH, slot, cl * es));
      continue;
    }
    WEFT_CHECK(weft_lane_emit(&w, &s));
  }
  return weft_lane_flush(&w);
}

/* With one rank every collective is a copy; reductions still divide (by 1)
 * so the engine treats every op alike. */
static ncclResult_t ring_single(const struct ring_lane *l) {
  enum weft_func f = l->a->func;
  int reduces = f == WEFT_FUNC_ALLREDUCE || f == WEFT_FUNC_REDUCESCATTER || f == WEFT_FUNC_REDUCE;
  struct weft_step copy = weft_step_local(WEFT_BUF_OUT, l->off * l->es, WEFT_BUF_IN, l->off * l->es,
                                          l->len * l->es, reduces ? WEFT_STEP_POSTOP : 0);
  return weft_lane_push(l->lane, &copy);
}

static ncclResult_t ring_lane_build(const struct ring_lane *l) {
  if (l->len == 0) return ncclSuccess;
  if (l->a->nranks == 1) return ring_single(l);
  switch (l->a->func) {
    case WEFT_FUNC_ALLREDUCE: return ring_allreduce(l);
    case WEFT_FUNC_ALLGATHER: return ring_allgather(l);
    case WEFT_FUNC_REDUCESCATTER: return ring_reducescatter(l);
    case WEFT_FUNC_BROADCAST: return ring_broadcast(l);
    case WEFT_FUNC_REDUCE: return ring_reduce(l);
    default: break;
  }
  WARN("ring schedule: %s is not a ring collective", weft_func_name(l->a->func));
  return ncclInternalError;
}

/* Position of `rank` in the ring, or -1. */
static int ring_find(const struct weft_sched_args *a, int rank) {
  for (int i = 0; i < a->nranks; i++)
    if (a->ring[i] == rank) return i;
  return -1;
}

static ncclResult_t ring_check_args(const struct weft_sched_args *a) {
  int rooted = a->func == WEFT_FUNC_BROADCAST || a->func == WEFT_FUNC_REDUCE;
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->nchannels < 1 ||
      a->elem_size == 0 || a->ring == NULL || (rooted && (a->root < 0 || a->root >= a->nranks))) {
    WARN("ring schedule for %s: bad arguments (rank %d of %d, root %d, %d channels, elem %zu)",
         weft_func_name(a->func), a->rank, a->nranks, a->root, a->nchannels, a->elem_size);
    return ncclInternalError;
  }
  if (ring_find(a, a->rank) < 0 || (rooted && ring_find(a, a->root) < 0)) {
    WARN("ring schedule for %s: rank %d or root %d is not in the ring of %d ranks",
         weft_func_name(a->func), a->rank, a->root, a->nranks);
    return ncclInternalError;
  }
  return ncclSuccess;
}

ncclResult_t weft_ring_plan(const struct weft_sched_args *args, struct weft_plan *out) {
  ncclResult_t res = ncclSuccess;
  struct weft_plan plan = {0, NULL};
  WEFT_CHECK(ring_check_args(args));
  if (args->count == 0) {
    *out = plan;
    return ncclSuccess;
  }
  const int n = args->nranks, pos = ring_find(args, args->rank);
  /* chunk_bytes 0: no limit; below one element: one element. */
  size_t chunk = args->chunk_bytes == 0 ? SIZE_MAX : args->chunk_bytes / args->elem_size;
  struct ring_lane l = {
      .a = args,
      .pos = pos,
      .prev = args->ring[ring_mod(pos - 1, n)],
      .next = args->ring[ring_mod(pos + 1, n)],
      .es = args->elem_size,
      .chunk = chunk ? chunk : 1,
      .root_pos = args->func == WEFT_FUNC_BROADCAST || args->func == WEFT_FUNC_REDUCE
                      ? ring_find(args, args->root)
                      : 0};
  WEFT_CHECK(weft_plan_alloc(&plan, args->nchannels));
  for (int c = 0; c < plan.nlanes; c++) {
    plan.lanes[c].channel = c;
    l.lane = &plan.lanes[c];
    weft_split(args->count, args->nchannels, c, weft_split_grain(l.es), &l.off, &l.len);
    l.slot = (l.chunk < l.len ? l.chunk : l.len) * l.es;
    WEFT_CHECK_GOTO(ring_lane_build(&l), res, err_build);
  }
  *out = plan;
  return ncclSuccess;
err_build:
  weft_plan_free(&plan);
  return res;
}
