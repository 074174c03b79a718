/* Pairwise schedules: grouped send/recv, and the direct exchange (every
 * rank with every other rank at once; weft_direct_plan at the end).
 *
 * Grouped send/recv as a plan: one lane per peer on channel 0 (each peer
 * has its own connections, so lanes never share one), or `parts` lanes per
 * peer on channels 0..parts-1, lane c moving part c of every op (the CUDA
 * engine: a CTA per lane, so a peer's bytes move on several SMs). Both ends
 * cut an op alike (weft_split of its byte count), so a part's size is
 * checked against the part posted; ops whose sizes differ differ in some
 * part, so a mismatch is still caught. On a lane, the k-th
 * send to the peer and the k-th receive from it form one step: when two
 * ranks send to each other, each posts its send and its receive together
 * and neither waits for the other to finish first. The rest of the sends
 * (or receives) become one-sided steps, in order. Both ends agree on the
 * order of transfers on a connection because both number them by op order.
 *
 * A receive is posted with its own size; a size mismatch with the sender
 * is the engine's to detect (it has the ops). A send to self and a receive
 * from self pair into a LOCAL copy of the smaller size; an unpaired one
 * could never complete, so it is refused here. */
#include <stdlib.h>

#include "base/check.h"
#include "base/debug.h"
#include "sched/plan.h"
#include "sched/schedule.h"

/* Index of the k-th op with this peer and direction, or -1. */
static int p2p_nth(const struct weft_p2p *ops, int nops, int peer, int is_send, int k) {
  for (int i = 0; i < nops; i++)
    if (ops[i].peer == peer && !ops[i].is_send == !is_send && k-- == 0) return i;
  return -1;
}

static ncclResult_t p2p_self_lane(int rank, const struct weft_p2p *ops, int nops, int part,
                                  int parts, struct weft_lane *lane) {
  for (int k = 0;; k++) {
    int s = p2p_nth(ops, nops, rank, 1, k), r = p2p_nth(ops, nops, rank, 0, k);
    if (s < 0 && r < 0) return ncclSuccess;
    if (s < 0 || r < 0) {
      WARN("rank %d: ncclSend/ncclRecv to itself: op %d has no matching %s in the group", rank,
           s < 0 ? r : s, s < 0 ? "ncclSend" : "ncclRecv");
      return ncclInvalidUsage;
    }
    size_t bytes = ops[s].bytes < ops[r].bytes ? ops[s].bytes : ops[r].bytes, off, len;
    weft_split(bytes, parts, part, WEFT_SPLIT_BYTES, &off, &len);
    struct weft_step st = weft_step_local((uint16_t)r, off, (uint16_t)s, off, len, 0);
    WEFT_CHECK(weft_lane_push(lane, &st));
  }
}

static ncclResult_t p2p_peer_lane(int peer, const struct weft_p2p *ops, int nops, int part,
                                  int parts, struct weft_lane *lane) {
  for (int k = 0;; k++) {
    int s = p2p_nth(ops, nops, peer, 1, k), r = p2p_nth(ops, nops, peer, 0, k);
    if (s < 0 && r < 0) return ncclSuccess;
    struct weft_step st = {.send_peer = -1, .recv_peer = -1};
    size_t off, len;
    if (r >= 0) {
      weft_split(ops[r].bytes, parts, part, WEFT_SPLIT_BYTES, &off, &len);
      st = weft_step_recv(peer, WEFT_STEP_COPY, (uint16_t)r, off, 0, 0, len);
    }
    if (s >= 0) {
      weft_split(ops[s].bytes, parts, part, WEFT_SPLIT_BYTES, &off, &len);
      st.flags |= WEFT_STEP_SEND;
      st.send_buf = (uint16_t)s;
      st.send_peer = peer;
      st.send_off = off;
      st.send_bytes = len;
    }
    WEFT_CHECK(weft_lane_push(lane, &st));
  }
}

ncclResult_t weft_p2p_plan(int rank, const struct weft_p2p *ops, int nops, struct weft_plan *out) {
  return weft_p2p_plan_parts(rank, ops, nops, 1, out);
}

ncclResult_t weft_p2p_plan_parts(int rank, const struct weft_p2p *ops, int nops, int parts,
                                 struct weft_plan *out) {
  ncclResult_t res = ncclSuccess;
  struct weft_plan plan = {0, NULL};
  if (nops < 0 || nops >= WEFT_BUF_SCRATCH || (nops > 0 && ops == NULL) || parts < 1) {
    WARN("rank %d: %d send/recv ops in %d parts in one group; at most %d ops fit a plan", rank,
         nops, parts, WEFT_BUF_SCRATCH - 1);
    return ncclInvalidUsage;
  }
  /* Peers in order of first appearance: lanes [i * parts, (i + 1) * parts)
   * serve peers[i], part c on channel c. */
  int *peers = malloc((size_t)(nops > 0 ? nops : 1) * sizeof(*peers));
  if (peers == NULL) {
    WARN("rank %d: out of memory planning %d send/recv ops", rank, nops);
    return ncclSystemError;
  }
  int npeers = 0;
  for (int i = 0; i < nops; i++) {
    int seen = 0;
    for (int j = 0; j < npeers && !seen; j++) seen = peers[j] == ops[i].peer;
    if (!seen) peers[npeers++] = ops[i].peer;
  }
  WEFT_CHECK_GOTO(weft_plan_alloc(&plan, npeers * parts), res, out_free);
  for (int i = 0; i < npeers; i++)
    for (int c = 0; c < parts; c++) {
      struct weft_lane *lane = &plan.lanes[i * parts + c];
      lane->channel = c;
      if (peers[i] == rank)
        WEFT_CHECK_GOTO(p2p_self_lane(rank, ops, nops, c, parts, lane), res, out_free);
      else
        WEFT_CHECK_GOTO(p2p_peer_lane(peers[i], ops, nops, c, parts, lane), res, out_free);
    }
  *out = plan;
  plan = (struct weft_plan){0, NULL};
out_free:
  weft_plan_free(&plan);
  free(peers);
  return res;
}

/* Lane i talks to rank me+1+i, so lane k of rank a and the lane of rank b
 * that names a use the two ends of the same channel-0 links. */
ncclResult_t weft_direct_coll_plan(enum weft_func func, int rank, int nranks, int root,
                                   size_t bytes, struct weft_plan *out) {
  WEFT_CHECK(weft_plan_alloc(out, nranks - 1));
  for (int i = 0; i < nranks - 1; i++) {
    int peer = (rank + 1 + i) % nranks;
    struct weft_lane *lane = &out->lanes[i];
    size_t in = weft_direct_sends(func, peer, rank, root, bytes);
    lane->channel = 0;
    lane->scratch_bytes = in;
    struct weft_step st = {.flags = WEFT_STEP_SEND | WEFT_STEP_RECV | WEFT_STEP_COPY,
                           .send_buf = WEFT_BUF_IN,
                           .send_off = func == WEFT_FUNC_REDUCESCATTER ? (size_t)peer * bytes : 0,
                           .dst_buf = WEFT_BUF_SCRATCH,
                           .send_peer = peer,
                           .recv_peer = peer,
                           .send_bytes = weft_direct_sends(func, rank, peer, root, bytes),
                           .recv_bytes = in};
    ncclResult_t res = weft_lane_push(lane, &st);
    if (res != ncclSuccess) {
      weft_plan_free(out);
      return res;
    }
  }
  return ncclSuccess;
}

ncclResult_t weft_direct_plan(int rank, int nranks, size_t bytes, struct weft_plan *out) {
  return weft_direct_coll_plan(WEFT_FUNC_ALLREDUCE, rank, nranks, -1, bytes, out);
}
