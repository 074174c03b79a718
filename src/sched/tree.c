/* The double binary tree for AllReduce, as NCCL builds it
 * (ncclGetBtree/ncclGetDtree): tree 0 is the in-order binary tree over
 * positions 0..n-1 made by the lowest-set-bit trick; tree 1 is tree 0
 * mirrored (n even) or shifted by one (n odd), so with n even every rank is
 * a leaf in one tree and inner in the other. Positions are ring positions
 * (args->ring), so tree neighbours are ring neighbours where they can be.
 *
 * The data is cut into 2*nchannels parts; part k rides tree k%2 on channel
 * k, so the two trees never share a connection. Each part has two lanes on
 * its channel, which use disjoint connections (a child->parent link belongs
 * to the up lane, parent->child to the down lane):
 *   up:   per chunk, receive from each child and reduce into the output
 *         (the first child with the input), then send to the parent; a
 *         leaf sends its input. The root applies POSTOP on the last reduce
 *         and sends the result to its children from this lane, since only
 *         this lane knows when the chunk is complete.
 *   down: per chunk, receive from the parent into the output and forward
 *         it to the children (empty at the root).
 * A node forwards chunk i-1 while chunk i arrives (weft_lane_defer_send).
 * The down lane overwrites a chunk only after it came back through the
 * root, so after the up lane has sent it: in-place calls are safe. */
#include <stdint.h>
#include <stdlib.h>

#include "base/check.h"
#include "base/debug.h"
#include "sched/plan.h"
#include "sched/schedule.h"

struct tree_node {
  int up;      /* parent rank, -1 at the root */
  int down[2]; /* child ranks */
  int ndown;
};

/* NCCL's in-order binary tree over positions 0..n-1 (-1: none). */
static void tree_btree(int n, int i, int *up, int *d0, int *d1) {
  int bit;
  for (bit = 1; bit < n; bit <<= 1)
    if (bit & i) break;
  if (i == 0) {
    *up = -1;
    *d0 = -1;
    *d1 = n > 1 ? bit >> 1 : -1;
    return;
  }
  *up = (i ^ bit) | (bit << 1);
  if (*up >= n) *up = i ^ bit;
  int low = bit >> 1;
  *d0 = low == 0 ? -1 : i - low;
  *d1 = low == 0 ? -1 : i + low;
  while (*d1 >= n) {
    low >>= 1;
    *d1 = low == 0 ? -1 : i + low;
  }
}

/* Position p's links in tree t, as ranks. */
static struct tree_node tree_node_of(const struct weft_sched_args *a, int p, int t) {
  const int n = a->nranks;
  int v[3]; /* up, d0, d1 as positions */
  if (t == 0) {
    tree_btree(n, p, &v[0], &v[1], &v[2]);
  } else if (n % 2 == 1) {
    tree_btree(n, (p - 1 + n) % n, &v[0], &v[1], &v[2]);
    for (int k = 0; k < 3; k++) v[k] = v[k] < 0 ? -1 : (v[k] + 1) % n;
  } else {
    tree_btree(n, n - 1 - p, &v[0], &v[1], &v[2]);
    for (int k = 0; k < 3; k++) v[k] = v[k] < 0 ? -1 : n - 1 - v[k];
  }
  struct tree_node node = {.up = v[0] < 0 ? -1 : a->ring[v[0]], .down = {-1, -1}};
  for (int k = 1; k < 3; k++)
    if (v[k] >= 0) node.down[node.ndown++] = a->ring[v[k]];
  return node;
}

/* Reduce up; the root also starts the broadcast down. */
static ncclResult_t tree_up(struct weft_lane *lane, const struct tree_node *nd, size_t off,
                            size_t len, size_t chunk, size_t es) {
  struct weft_lane_writer w = {.lane = lane};
  for (size_t co = off; co < off + len; co += chunk) {
    size_t cl = chunk < off + len - co ? chunk : off + len - co;
    if (nd->ndown == 0) {
      struct weft_step s = weft_step_send(nd->up, WEFT_BUF_IN, co * es, cl * es);
      WEFT_CHECK(weft_lane_emit(&w, &s));
      continue;
    }
    for (int k = 0; k < nd->ndown; k++) {
      uint16_t flags = WEFT_STEP_REDUCE;
      if (nd->up < 0 && k == nd->ndown - 1) flags |= WEFT_STEP_POSTOP;
      struct weft_step r = weft_step_recv(nd->down[k], flags, WEFT_BUF_OUT, co * es,
                                          k == 0 ? WEFT_BUF_IN : WEFT_BUF_OUT, co * es, cl * es);
      WEFT_CHECK(weft_lane_emit(&w, &r));
    }
    if (nd->up >= 0) {
      WEFT_CHECK(weft_lane_defer_send(&w, nd->up, WEFT_BUF_OUT, co * es, cl * es));
      continue;
    }
    for (int k = 0; k < nd->ndown; k++)
      WEFT_CHECK(weft_lane_defer_send(&w, nd->down[k], WEFT_BUF_OUT, co * es, cl * es));
  }
  return weft_lane_flush(&w);
}

/* Broadcast down, below the root. */
static ncclResult_t tree_down(struct weft_lane *lane, const struct tree_node *nd, size_t off,
                              size_t len, size_t chunk, size_t es) {
  struct weft_lane_writer w = {.lane = lane};
  if (nd->up < 0) return ncclSuccess;
  for (size_t co = off; co < off + len; co += chunk) {
    size_t cl = chunk < off + len - co ? chunk : off + len - co;
    struct weft_step r =
        weft_step_recv(nd->up, WEFT_STEP_COPY, WEFT_BUF_OUT, co * es, 0, 0, cl * es);
    WEFT_CHECK(weft_lane_emit(&w, &r));
    for (int k = 0; k < nd->ndown; k++)
      WEFT_CHECK(weft_lane_defer_send(&w, nd->down[k], WEFT_BUF_OUT, co * es, cl * es));
  }
  return weft_lane_flush(&w);
}

static int tree_find(const struct weft_sched_args *a) {
  for (int i = 0; i < a->nranks; i++)
    if (a->ring[i] == a->rank) return i;
  return -1;
}

static ncclResult_t tree_part(const struct weft_sched_args *a, int pos, int k, struct weft_lane *up,
                              struct weft_lane *down) {
  const size_t es = a->elem_size;
  size_t chunk = a->chunk_bytes == 0 ? SIZE_MAX : a->chunk_bytes / es;
  size_t off, len;
  weft_split(a->count, 2 * a->nchannels, k, weft_split_grain(es), &off, &len);
  up->channel = down->channel = k;
  if (len == 0) return ncclSuccess;
  if (a->nranks == 1) {
    struct weft_step copy =
        weft_step_local(WEFT_BUF_OUT, off * es, WEFT_BUF_IN, off * es, len * es, WEFT_STEP_POSTOP);
    return weft_lane_push(up, &copy);
  }
  struct tree_node nd = tree_node_of(a, pos, k % 2);
  WEFT_CHECK(tree_up(up, &nd, off, len, chunk ? chunk : 1, es));
  return tree_down(down, &nd, off, len, chunk ? chunk : 1, es);
}

ncclResult_t weft_tree_plan(const struct weft_sched_args *args, struct weft_plan *out) {
  ncclResult_t res = ncclSuccess;
  struct weft_plan plan = {0, NULL};
  int pos = args->ring && args->nranks >= 1 ? tree_find(args) : -1;
  if (args->func != WEFT_FUNC_ALLREDUCE || pos < 0 || args->nchannels < 1 || args->elem_size == 0) {
    WARN("tree schedule: %s on rank %d of %d (%d channels) is not a tree all-reduce",
         weft_func_name(args->func), args->rank, args->nranks, args->nchannels);
    return ncclInternalError;
  }
  if (args->count == 0) {
    *out = plan;
    return ncclSuccess;
  }
  /* Lanes 2k (up) and 2k+1 (down) carry part k on channel k. */
  WEFT_CHECK(weft_plan_alloc(&plan, 4 * args->nchannels));
  for (int k = 0; k < 2 * args->nchannels; k++)
    WEFT_CHECK_GOTO(tree_part(args, pos, k, &plan.lanes[2 * k], &plan.lanes[2 * k + 1]), res,
                    err_build);
  *out = plan;
  return ncclSuccess;
err_build:
  weft_plan_free(&plan);
  return res;
}
