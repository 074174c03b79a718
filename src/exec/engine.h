/* A group's operations as the engines take them (struct weft_engine_op),
 * for api/ and the engines; the engine table itself is core/engine.h's
 * (core/ owns the interface, exec/ implements it). This is the one exec/
 * header api/ includes (docs/ARCHITECTURE.md). */
#ifndef WEFT_EXEC_ENGINE_H
#define WEFT_EXEC_ENGINE_H

#include <stddef.h>

#include "core/engine.h"
#include "nccl.h"
#include "sched/schedule.h"

struct ncclComm;

/* One operation of a group as api/ checked it: a collective, or a send or
 * receive with the peer in coll.root. */
struct weft_engine_op {
  struct weft_coll coll;
  struct weft_redop_use redop; /* PreMulSum's scalar; premul_sum 0: a built-in op */
  void *stream;                /* the call's cudaStream_t (engines with streams) */
};

static inline int weft_engine_op_is_p2p(const struct weft_engine_op *op) {
  return op->coll.func == WEFT_FUNC_SEND || op->coll.func == WEFT_FUNC_RECV;
}
/* Bytes the caller's buffer of coll holds: count elements of its datatype
 * (per rank for AllGather and ReduceScatter). */
size_t weft_engine_op_bytes(const struct weft_coll *coll);

/* The engines' slots for what an engine has nothing to do (exec/engine.c):
 * a wait or check that returns ncclSuccess at once, a stop with nothing to
 * stop, and never busy. */
ncclResult_t weft__engine_no_wait(struct ncclComm *comm);
void weft__engine_no_stop(struct ncclComm *comm);
int weft__engine_never_busy(struct ncclComm *comm);
ncclResult_t weft__engine_no_window(struct ncclComm *comm, void *buff, size_t size, void **out);
void weft__engine_no_window_release(struct ncclComm *comm, void *window);

#endif
