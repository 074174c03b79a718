/* Plans as containers: lanes that grow one step at a time, whole-plan
 * allocation and release, and the small step-writing helpers that every
 * generator shares (plan.h). */
#include <stdlib.h>

#include "base/check.h"
#include "base/debug.h"
#include "sched/plan.h"
#include "sched/schedule.h"

const char *weft_func_name(enum weft_func func) {
  static const char *const names[WEFT_FUNC_COUNT] = {
      "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv",
  };
  if ((int)func < 0 || func >= WEFT_FUNC_COUNT) return "Unknown";
  return names[func];
}

ncclResult_t weft_lane_push(struct weft_lane *lane, const struct weft_step *step) {
  if (lane->nsteps == lane->cap) {
    size_t cap = lane->cap ? lane->cap * 2 : 16;
    struct weft_step *steps = realloc(lane->steps, cap * sizeof(*steps));
    if (steps == NULL) {
      WARN("out of memory growing a schedule lane to %zu steps (channel %d)", cap, lane->channel);
      return ncclSystemError;
    }
    lane->steps = steps;
    lane->cap = cap;
  }
  lane->steps[lane->nsteps++] = *step;
  return ncclSuccess;
}

ncclResult_t weft_plan_alloc(struct weft_plan *plan, int nlanes) {
  plan->nlanes = 0;
  plan->lanes = NULL;
  if (nlanes <= 0) return ncclSuccess;
  plan->lanes = calloc((size_t)nlanes, sizeof(*plan->lanes));
  if (plan->lanes == NULL) {
    WARN("out of memory allocating a plan of %d lanes", nlanes);
    return ncclSystemError;
  }
  plan->nlanes = nlanes;
  return ncclSuccess;
}

void weft_plan_free(struct weft_plan *plan) {
  if (plan == NULL) return;
  for (int i = 0; i < plan->nlanes; i++) free(plan->lanes[i].steps);
  free(plan->lanes);
  plan->lanes = NULL;
  plan->nlanes = 0;
}

ncclResult_t weft_lane_emit(struct weft_lane_writer *w, const struct weft_step *step) {
  if (!w->has_pending) return weft_lane_push(w->lane, step);
  if (step->flags & WEFT_STEP_SEND) {
    WEFT_CHECK(weft_lane_flush(w));
    return weft_lane_push(w->lane, step);
  }
  struct weft_step merged = *step;
  merged.flags |= WEFT_STEP_SEND;
  merged.send_buf = w->pending.send_buf;
  merged.send_peer = w->pending.send_peer;
  merged.send_off = w->pending.send_off;
  merged.send_bytes = w->pending.send_bytes;
  w->has_pending = 0;
  return weft_lane_push(w->lane, &merged);
}

ncclResult_t weft_lane_defer_send(struct weft_lane_writer *w, int peer, uint16_t buf, size_t off,
                                  size_t bytes) {
  WEFT_CHECK(weft_lane_flush(w));
  w->pending = weft_step_send(peer, buf, off, bytes);
  w->has_pending = 1;
  return ncclSuccess;
}

ncclResult_t weft_lane_flush(struct weft_lane_writer *w) {
  if (!w->has_pending) return ncclSuccess;
  w->has_pending = 0;
  return weft_lane_push(w->lane, &w->pending);
}

void weft_split(size_t total, int nparts, int c, size_t grain, size_t *off_out, size_t *len_out) {
  size_t n = (size_t)nparts, k = (size_t)c, g = grain ? grain : 1;
  size_t grains = total / g, base = grains / n, extra = grains % n;
  *off_out = (k * base + (k < extra ? k : extra)) * g;
  *len_out = (base + (k < extra ? 1 : 0)) * g + (k + 1 == n ? total % g : 0);
}

struct weft_step weft_step_send(int peer, uint16_t buf, size_t off, size_t bytes) {
  return (struct weft_step){.flags = WEFT_STEP_SEND,
                            .send_buf = buf,
                            .send_peer = peer,
                            .recv_peer = -1,
                            .send_off = off,
                            .send_bytes = bytes};
}

struct weft_step weft_step_recv(int peer, uint16_t flags, uint16_t dst_buf, size_t dst_off,
                                uint16_t local_buf, size_t local_off, size_t bytes) {
  return (struct weft_step){.flags = (uint16_t)(WEFT_STEP_RECV | flags),
                            .dst_buf = dst_buf,
                            .local_buf = local_buf,
                            .send_peer = -1,
                            .recv_peer = peer,
                            .dst_off = dst_off,
                            .local_off = local_off,
                            .recv_bytes = bytes};
}

struct weft_step weft_step_local(uint16_t dst_buf, size_t dst_off, uint16_t src_buf, size_t src_off,
                                 size_t bytes, uint16_t extra_flags) {
  return (struct weft_step){.flags = (uint16_t)(WEFT_STEP_LOCAL | extra_flags),
                            .dst_buf = dst_buf,
                            .local_buf = src_buf,
                            .send_peer = -1,
                            .recv_peer = -1,
                            .dst_off = dst_off,
                            .local_off = src_off,
                            .recv_bytes = bytes};
}

void weft_step_add_local(struct weft_step *st, uint16_t dst_buf, size_t dst_off, uint16_t src_buf,
                         size_t src_off, size_t bytes) {
  st->flags |= WEFT_STEP_LOCAL;
  st->dst_buf = dst_buf;
  st->dst_off = dst_off;
  st->local_buf = src_buf;
  st->local_off = src_off;
  st->recv_bytes = bytes;
}
