/* A collective as data. A plan is a set of lanes that progress concurrently
 * (a lane per channel of a collective, a lane per peer of grouped send/recv);
 * a lane is a list of steps run in order; a step sends to one peer and/or
 * receives from one peer, and says what to do with what arrived. The host
 * engine runs plans; the CUDA kernels will run the same ones. Offsets and
 * sizes are in bytes so one plan can mix datatypes (grouped send/recv). */
#ifndef WEFT_SCHED_SCHEDULE_H
#define WEFT_SCHED_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* The operation a rank was asked for, after argument checks. */
enum weft_func {
  WEFT_FUNC_ALLREDUCE,
  WEFT_FUNC_ALLGATHER,
  WEFT_FUNC_REDUCESCATTER,
  WEFT_FUNC_BROADCAST,
  WEFT_FUNC_REDUCE,
  WEFT_FUNC_SEND,
  WEFT_FUNC_RECV,
  WEFT_FUNC_COUNT,
};

const char *weft_func_name(enum weft_func func); /* "AllReduce", ... */

struct weft_coll {
  enum weft_func func;
  const void *sendbuff;
  void *recvbuff;
  size_t count; /* elements, as the caller passed it */
  ncclDataType_t datatype;
  ncclRedOp_t op; /* a built-in op, or a PreMulSum made on this comm */
  int root;       /* broadcast/reduce root, or the peer of send/recv */
};

/* What a collective needs to know about its operator (api/redop.c fills it). */
struct weft_redop_use {
  int premul_sum;         /* 1: scale the input by the scalar, then sum */
  const void *scalar_ptr; /* the caller's pointer, read when the op runs (or NULL) */
  unsigned char value[8]; /* the copied scalar when scalar_ptr is NULL */
};

/* Direct: every rank sends its whole input to every other rank and reduces
 * what arrives locally, in rank order (AllReduce of small messages: one
 * exchange instead of a ring's 2(n-1) steps). */
enum weft_algo { WEFT_ALGO_RING = 0, WEFT_ALGO_TREE = 1, WEFT_ALGO_DIRECT = 2, WEFT_ALGO_COUNT };
enum weft_proto {
  WEFT_PROTO_SIMPLE = 0,
  WEFT_PROTO_LL = 1,
  WEFT_PROTO_LL128 = 2,
  WEFT_PROTO_COUNT
};

/* "Simple", "LL", "LL128": NCCL's names, as NCCL_PROTO spells them. */
static inline const char *weft_proto_name(int proto) {
  static const char *const names[WEFT_PROTO_COUNT] = {"Simple", "LL", "LL128"};
  return proto >= 0 && proto < WEFT_PROTO_COUNT ? names[proto] : "Unknown";
}

enum weft_step_flags {
  WEFT_STEP_SEND = 1u << 0,   /* send send_bytes from send_buf+send_off to send_peer */
  WEFT_STEP_RECV = 1u << 1,   /* receive recv_bytes from recv_peer */
  WEFT_STEP_REDUCE = 1u << 2, /* dst = local op received (with RECV) */
  WEFT_STEP_COPY = 1u << 3,   /* dst = received (with RECV) */
  WEFT_STEP_POSTOP = 1u << 4, /* dst is now fully reduced: apply avg's divide */
  WEFT_STEP_LOCAL = 1u << 5,  /* dst = local, recv_bytes long; never with RECV; with SEND
                               * the copy and the send touch different bytes (or the copy
                               * is in place), so an engine may do either first */
};

/* Buffer indexes a step refers to. For a collective, IN is sendbuff and OUT
 * recvbuff; for grouped send/recv, index i is the i-th op's buffer. SCRATCH
 * is the lane's own scratch space (weft_lane.scratch_bytes), for partial
 * results that have no home in the user's buffers (reduce-scatter, reduce). */
enum { WEFT_BUF_IN = 0, WEFT_BUF_OUT = 1, WEFT_BUF_SCRATCH = 0xffff };

struct weft_step {
  uint16_t flags;
  uint16_t send_buf;
  uint16_t dst_buf;   /* where a RECV/LOCAL result goes */
  uint16_t local_buf; /* the local operand of REDUCE, the source of LOCAL */
  int send_peer;
  int recv_peer;
  size_t send_off;
  size_t dst_off;
  size_t local_off;
  size_t send_bytes;
  size_t recv_bytes; /* also the length of a LOCAL copy */
};

struct weft_lane {
  int channel; /* the lane uses the connections of this channel */
  size_t scratch_bytes;
  size_t nsteps;
  size_t cap;
  struct weft_step *steps;
};

struct weft_plan {
  int nlanes;
  struct weft_lane *lanes;
};

/* What a collective schedule is built from. */
struct weft_sched_args {
  enum weft_func func;
  int rank;
  int nranks;
  int root;
  size_t count;     /* the caller's count (per-rank count for allgather/reducescatter) */
  size_t elem_size; /* bytes per element */
  int nchannels;    /* lanes to spread the data over (>= 1) */
  size_t chunk_bytes; /* pipelining unit per step (a multiple of elem_size) */
  const int *ring;  /* ring[i]: the rank at ring position i (nranks entries) */
};

/* Ring (AllReduce, AllGather, ReduceScatter) and chain (Broadcast, Reduce)
 * schedules. */
ncclResult_t weft_ring_plan(const struct weft_sched_args *args, struct weft_plan *out);
/* The double binary tree for AllReduce: two complementary trees, each
 * carrying half of the data (lanes alternate between them). */
ncclResult_t weft_tree_plan(const struct weft_sched_args *args, struct weft_plan *out);

/* Direct collectives (and, with no bytes, the exchange of call records):
 * one lane per peer on channel 0, one step each that sends the peer what
 * weft_direct_sends says and receives what the peer sends into the lane's
 * scratch. The engine then reduces (in rank order, so every rank computes
 * the same sums in the same order) or copies the arrivals into the
 * output. bytes is a block: the input of AllReduce, AllGather, Broadcast
 * and Reduce, one rank's share of a ReduceScatter. */
ncclResult_t weft_direct_coll_plan(enum weft_func func, int rank, int nranks, int root,
                                   size_t bytes, struct weft_plan *out);
/* Direct AllReduce: weft_direct_coll_plan's AllReduce. */
ncclResult_t weft_direct_plan(int rank, int nranks, size_t bytes, struct weft_plan *out);

/* What rank `from` sends rank `to` in a direct collective of blocks of
 * `bytes`: its input to every peer (AllReduce, AllGather), block `to` of
 * it (ReduceScatter), the root's input to each (Broadcast), each input to
 * the root (Reduce). A receiver reads it off the sender's call record, so
 * it knows what follows even when their calls differ. */
static inline size_t weft_direct_sends(enum weft_func func, int from, int to, int root,
                                       size_t bytes) {
  switch (func) {
    case WEFT_FUNC_BROADCAST: return from == root ? bytes : 0;
    case WEFT_FUNC_REDUCE: return to == root && from != root ? bytes : 0;
    default: return bytes;
  }
}

/* One grouped ncclSend/ncclRecv of this rank; its buffer is index i of the
 * plan when it is ops[i]. */
struct weft_p2p {
  int peer;
  int is_send;
  size_t bytes;
};
/* Grouped send/recv: one lane per peer; the k-th send to a peer pairs with
 * the k-th receive from it in one step, so two ranks that send to each other
 * never wait on each other. A send to self pairs with a receive from self as
 * a LOCAL copy. */
ncclResult_t weft_p2p_plan(int rank, const struct weft_p2p *ops, int nops,
                           struct weft_plan *out);
/* The same with every op cut into `parts` (>= 1) parts, part c on lane
 * (peer index * parts + c), channel c. Every rank must use the same parts
 * with a peer. */
ncclResult_t weft_p2p_plan_parts(int rank, const struct weft_p2p *ops, int nops, int parts,
                                 struct weft_plan *out);

/* Appends a step to a lane (grows it); plan helpers for generators. */
ncclResult_t weft_lane_push(struct weft_lane *lane, const struct weft_step *step);
ncclResult_t weft_plan_alloc(struct weft_plan *plan, int nlanes);
void weft_plan_free(struct weft_plan *plan);

#endif
