/* Helpers that the schedule generators (ring.c, tree.c, p2p.c) share; not
 * for the engines, which only read plans. */
#ifndef WEFT_SCHED_PLAN_H
#define WEFT_SCHED_PLAN_H

#include <stddef.h>

#include "nccl.h"
#include "sched/schedule.h"

/* A lane being written. A send may be held back in `pending` so that the
 * next receive-only step carries it: a chain or tree then forwards chunk
 * i-1 while chunk i arrives. The caller makes sure the held send's source
 * is not what that receive writes. */
struct weft_lane_writer {
  struct weft_lane *lane;
  struct weft_step pending;
  int has_pending;
};

/* Appends a step; a receive-only step takes the held send along. */
ncclResult_t weft_lane_emit(struct weft_lane_writer *w, const struct weft_step *step);
/* Holds a send back for the next receive (writing out any held before). */
ncclResult_t weft_lane_defer_send(struct weft_lane_writer *w, int peer, uint16_t buf, size_t off,
                                  size_t bytes);
/* Writes out a held send as a step of its own. */
ncclResult_t weft_lane_flush(struct weft_lane_writer *w);

/* Part c of `total` items split into nparts contiguous parts, cut in
 * grains of `grain` items: every part starts on a grain, parts differ by at
 * most one grain, and the last part takes the items short of a grain. So
 * parts of a 16-byte-aligned buffer cut in WEFT_SPLIT_BYTES grains start
 * 16-byte aligned, and the kernels copy and reduce them in 16-byte vectors
 * (an element-wise loop over pinned host memory is several times slower).
 * Ends that cut the same total alike agree on every part, and two totals
 * differ in some part. */
#define WEFT_SPLIT_BYTES 16
void weft_split(size_t total, int nparts, int c, size_t grain, size_t *off_out, size_t *len_out);
/* The grain, in elements of es bytes, that keeps parts 16-byte aligned. */
static inline size_t weft_split_grain(size_t es) {
  return es > 0 && es < WEFT_SPLIT_BYTES ? WEFT_SPLIT_BYTES / es : 1;
}

/* Step makers: a send, a receive (flags: COPY or REDUCE, maybe POSTOP),
 * a local copy. Fields not named are "none" (peers -1). */
struct weft_step weft_step_send(int peer, uint16_t buf, size_t off, size_t bytes);
struct weft_step weft_step_recv(int peer, uint16_t flags, uint16_t dst_buf, size_t dst_off,
                                uint16_t local_buf, size_t local_off, size_t bytes);
struct weft_step weft_step_local(uint16_t dst_buf, size_t dst_off, uint16_t src_buf, size_t src_off,
                                 size_t bytes, uint16_t extra_flags);
/* Adds a LOCAL copy to a send step (sched/schedule.h: they must touch
 * different bytes, or the copy is in place). */
void weft_step_add_local(struct weft_step *st, uint16_t dst_buf, size_t dst_off, uint16_t src_buf,
                         size_t src_off, size_t bytes);

#endif
