/* A collective as data: the steps one rank runs, each a send to a peer, a
 * receive from a peer, and what to do with what arrived. The host engine
 * runs these steps; the CUDA kernels run the same ones. */
#ifndef WEFT_SCHED_SCHEDULE_H
#define WEFT_SCHED_SCHEDULE_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* The collective a rank was asked for, after argument checks. */
enum weft_func {
  WEFT_FUNC_ALLREDUCE,
  WEFT_FUNC_ALLGATHER,
  WEFT_FUNC_REDUCESCATTER,
  WEFT_FUNC_BROADCAST,
  WEFT_FUNC_REDUCE,
  WEFT_FUNC_SEND,
  WEFT_FUNC_RECV,
};

struct weft_coll {
  enum weft_func func;
  const void *sendbuff;
  void *recvbuff;
  size_t count; /* elements, as the caller passed it */
  ncclDataType_t datatype;
  ncclRedOp_t op;
  int root; /* or the peer for send/recv */
};

enum weft_step_flags {
  WEFT_STEP_SEND = 1u << 0,   /* send count elements from send_buf+send_off */
  WEFT_STEP_RECV = 1u << 1,   /* receive count elements from recv_peer */
  WEFT_STEP_REDUCE = 1u << 2, /* out[recv_off] = local_buf[recv_off] op received */
  WEFT_STEP_COPY = 1u << 3,   /* out[recv_off] = received (without REDUCE) */
  WEFT_STEP_POSTOP = 1u << 4, /* the reduction is complete: apply avg's divide */
  WEFT_STEP_LOCAL = 1u << 5,  /* out[recv_off] = in[recv_off], no peer */
};

/* Which user buffer a slice refers to. */
enum weft_buf { WEFT_BUF_IN = 0, WEFT_BUF_OUT = 1 };

struct weft_step {
  uint32_t flags;
  uint8_t send_buf;  /* enum weft_buf: where sent data comes from */
  uint8_t local_buf; /* enum weft_buf: the local operand of a REDUCE */
  int send_peer;
  int recv_peer;
  size_t send_off; /* elements */
  size_t recv_off; /* elements */
  size_t count;    /* elements moved by this step */
};

struct weft_schedule {
  size_t nsteps;
  struct weft_step *steps;
};

/* The ring all-reduce for the rank at ring position `rank` (its neighbours
 * are ring_prev and ring_next) over count elements, pipelined in
 * chunks of at most chunk_elems per rank per step (reduce-scatter, then
 * all-gather, n-1 steps each per chunk round). */
ncclResult_t weft_ring_schedule_allreduce(int rank, int nranks, int ring_prev, int ring_next,
                                          size_t count, size_t chunk_elems,
                                          struct weft_schedule *out);
void weft_schedule_free(struct weft_schedule *s);

#endif
