/* The ring all-reduce as a schedule: reduce-scatter, then all-gather, n-1
 * steps each, repeated over rounds of the buffer.
 *
 * A round covers nranks slices of equal size; slice k of a round belongs to
 * ring position k, which ends the reduce-scatter holding it complete. At
 * reduce-scatter step j, position p sends slice p-j-1 and receives slice
 * p-j-2 from its predecessor, adding it to its own input; so step 0 sends
 * straight from the input buffer, later steps send what the previous step
 * reduced into the output, and the last step completes slice p (POSTOP:
 * ncclAvg's divide happens there, once per element). At all-gather step j,
 * p sends slice p-j and receives slice p-j-1, a plain copy.
 *
 * Every slice a rank does not own is written by a receive (reduce-scatter
 * or all-gather) and the slice it owns by the last reduce, so out-of-place
 * calls need no local copy and in-place calls read each input element before
 * overwriting it.
 *
 * A step moves one count in both directions, so the two slices it touches
 * must be the same size. Rounds are cut to keep that true: full rounds of
 * chunk_elems per slice, then one round of floor(rest / n) per slice, then
 * the last rest < n elements as one element in each of the first slices
 * and empty slices after. A step whose send slice is empty becomes a
 * receive-only step and vice versa; a step with both empty is left out.
 * Both ends of a link agree on all of this, because the sender's slice at a
 * step is the receiver's slice at the same step. */
#include <stdint.h>
#include <stdlib.h>

#include "core/debug.h"
#include "sched/schedule.h"

/* One round: slices of `slice` elements starting at `base`; only the first
 * `nonempty` slices hold data. */
struct ring_round {
  size_t base;
  size_t slice;
  int nonempty;
};

static size_t slice_count(const struct ring_round *r, int k) {
  return k < r->nonempty ? r->slice : 0;
}

static size_t slice_off(const struct ring_round *r, int k) {
  return r->base + (size_t)k * r->slice;
}

static int ring_mod(int x, int n) {
  return ((x % n) + n) % n;
}

/* Fills in one step from a send slice and a receive slice (-1: none). */
static void ring_emit(const struct ring_round *r, int send_k, int recv_k, uint32_t recv_flags,
                      uint8_t send_buf, int prev, int next, struct weft_step *st, size_t *n_out) {
  size_t sc = send_k >= 0 ? slice_count(r, send_k) : 0;
  size_t rc = recv_k >= 0 ? slice_count(r, recv_k) : 0;
  if (sc == 0 && rc == 0) return;
  struct weft_step *s = &st[(*n_out)++];
  *s = (struct weft_step){.local_buf = WEFT_BUF_IN, .send_peer = -1, .recv_peer = -1};
  if (sc) {
    s->flags |= WEFT_STEP_SEND;
    s->send_buf = send_buf;
    s->send_peer = next;
    s->send_off = slice_off(r, send_k);
  }
  if (rc) {
    s->flags |= WEFT_STEP_RECV | recv_flags;
    s->recv_peer = prev;
    s->recv_off = slice_off(r, recv_k);
  }
  s->count = sc ? sc : rc;
}

static void ring_emit_round(const struct ring_round *r, int p, int n, int prev, int next,
                            struct weft_step *st, size_t *n_out) {
  for (int j = 0; j < n - 1; j++) {
    uint32_t flags = WEFT_STEP_REDUCE | (j == n - 2 ? WEFT_STEP_POSTOP : 0);
    ring_emit(r, ring_mod(p - j - 1, n), ring_mod(p - j - 2, n), flags,
              j == 0 ? WEFT_BUF_IN : WEFT_BUF_OUT, prev, next, st, n_out);
  }
  for (int j = 0; j < n - 1; j++)
    ring_emit(r, ring_mod(p - j, n), ring_mod(p - j - 1, n), WEFT_STEP_COPY, WEFT_BUF_OUT, prev,
              next, st, n_out);
}

/* Cuts count elements into rounds (see the file comment); writes at most
 * *n rounds to out (NULL: only counts) and returns how many there are. */
static size_t ring_plan_rounds(size_t count, int n, size_t chunk, struct ring_round *out) {
  size_t nrounds = 0, base = 0, nn = (size_t)n;
  /* chunk * n may overflow; chunk 0 means "no limit". */
  if (chunk == 0 || chunk > count / nn) chunk = count / nn;
  if (chunk > 0) {
    size_t full = count / nn / chunk;
    if (out)
      for (size_t i = 0; i < full; i++)
        out[nrounds + i] = (struct ring_round){base + i * chunk * nn, chunk, n};
    nrounds += full;
    base += full * chunk * nn;
  }
  size_t rest = count - base;
  if (rest >= nn) {
    if (out) out[nrounds] = (struct ring_round){base, rest / nn, n};
    nrounds++;
    base += rest / nn * nn;
    rest = count - base;
  }
  if (rest > 0) {
    if (out) out[nrounds] = (struct ring_round){base, 1, (int)rest};
    nrounds++;
  }
  return nrounds;
}

ncclResult_t weft_ring_schedule_allreduce(int rank, int nranks, int ring_prev, int ring_next,
                                          size_t count, size_t chunk_elems,
                                          struct weft_schedule *out) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("ring all-reduce schedule: rank %d of %d is not a ring position", rank, nranks);
    return ncclInternalError;
  }
  struct weft_schedule s = {0, NULL};
  if (count == 0) {
    *out = s;
    return ncclSuccess;
  }
  if (nranks == 1) {
    /* No peer: the input becomes the output, and avg's divide is by one. */
    s.steps = calloc(1, sizeof(*s.steps));
    if (s.steps == NULL) goto err_alloc;
    s.steps[0] = (struct weft_step){.flags = WEFT_STEP_LOCAL | WEFT_STEP_POSTOP,
                                    .send_peer = -1,
                                    .recv_peer = -1,
                                    .count = count};
    s.nsteps = 1;
    *out = s;
    return ncclSuccess;
  }
  size_t nrounds = ring_plan_rounds(count, nranks, chunk_elems, NULL);
  struct ring_round *rounds = calloc(nrounds, sizeof(*rounds));
  s.steps = calloc(nrounds * 2 * (size_t)(nranks - 1), sizeof(*s.steps));
  if (rounds == NULL || s.steps == NULL) {
    free(rounds);
    goto err_alloc;
  }
  ring_plan_rounds(count, nranks, chunk_elems, rounds);
  for (size_t i = 0; i < nrounds; i++)
    ring_emit_round(&rounds[i], rank, nranks, ring_prev, ring_next, s.steps, &s.nsteps);
  free(rounds);
  *out = s;
  return ncclSuccess;
err_alloc:
  free(s.steps);
  WARN("rank %d: out of memory building the ring all-reduce schedule (%zu elements, %d ranks)",
       rank, count, nranks);
  return ncclSystemError;
}

void weft_schedule_free(struct weft_schedule *s) {
  if (s == NULL) return;
  free(s->steps);
  s->steps = NULL;
  s->nsteps = 0;
}
