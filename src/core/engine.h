/* The engine interface as core/ sees it: the table of what runs a
 * communicator's operations. One table per engine, chosen once when the
 * communicator is created (comm->engine) and never tested by flag
 * afterwards. core/ owns the interface and exec/ implements it, so
 * dependencies point down: exec/ includes this header, core/ includes no
 * exec/ header. What a group's operation looks like (struct
 * weft_engine_op) is exec/engine.h's, for api/ and the engines
 * (docs/ARCHITECTURE.md).
 *
 * Engines: host (a worker thread runs the plans on host buffers), cuda
 * (plans run as kernels on the callers' streams) and staged (device
 * buffers copied through pinned host memory and run by the host engine,
 * for GPU ranks that cannot run kernels against each other). A slot an
 * engine has nothing to do for is a shared stub (exec/engine.c), never
 * NULL. */
#ifndef WEFT_CORE_ENGINE_H
#define WEFT_CORE_ENGINE_H

#include <stddef.h>

#include "nccl.h"

struct ncclComm;
struct weft_engine_op;

struct weft_engine_ops {
  size_t size;
  const char *name; /* "host", "cuda", "staged": the INFO line of init says it */
  /* Calls take device buffers and streams (api/check.c checks pointers so). */
  int device_buffers;
  /* Collective over comm's ranks: makes the engine's state. On failure the
   * communicator is freed through destroy, which copes with a partial one. */
  ncclResult_t (*create)(struct ncclComm *comm);
  /* Runs a group's operations on comm, ops[0..n) in call order: the engine
   * tunes and plans them; collectives in order, then the sends and
   * receives together. Returns once they are queued; ops stays valid
   * until group_wait has returned (a host task reads its PreMulSum scalar
   * there when it starts). */
  ncclResult_t (*enqueue)(struct ncclComm *comm, const struct weft_engine_op *ops, size_t n);
  /* Once per communicator at the end of a group, after every communicator
   * of the group has been enqueued: the host engine waits for the results;
   * engines with stream semantics return at once. */
  ncclResult_t (*group_wait)(struct ncclComm *comm);
  /* Waits until the work queued on the host has finished (ncclCommFinalize,
   * shrink's abandon); engines whose work is ordered on streams return. */
  ncclResult_t (*wait)(struct ncclComm *comm);
  /* The model's time for one operation (ncclGroupSimulateEnd). */
  ncclResult_t (*estimate)(struct ncclComm *comm, const struct weft_engine_op *op, float *us_out);
  /* Whether queued work has not finished (a failure raised now is soft
   * when nothing is in flight). */
  int (*busy)(struct ncclComm *comm);
  /* An asynchronous error found without waiting (a kernel's timeout). */
  ncclResult_t (*check)(struct ncclComm *comm);
  /* A failure was recorded: ends the waits that do not read abort_flag
   * (the kernels' own abort word). */
  void (*fail)(struct ncclComm *comm);
  /* ncclCommAbort's first step: releases everything that waits on the
   * engine now, before the teardown waits on it. */
  void (*abort)(struct ncclComm *comm);
  /* Frees the engine's state (after abort: without waiting for peers). */
  void (*destroy)(struct ncclComm *comm, int abort);
  /* ncclCommWindowRegister, collective over comm's ranks (every rank
   * registers its windows in the same order): what the engine keeps of
   * the window, *out (NULL: nothing). window_release frees it
   * (ncclCommWindowDeregister; the engine's destroy frees those left). */
  ncclResult_t (*window_register)(struct ncclComm *comm, void *buff, size_t size, void **out);
  void (*window_release)(struct ncclComm *comm, void *window);
};

extern const struct weft_engine_ops weft_engine_host_ops;
extern const struct weft_engine_ops weft_engine_cuda_ops;
extern const struct weft_engine_ops weft_engine_staged_ops;

/* Collective over comm's bootstrap: the engine every rank of comm uses,
 * from the ranks' devices and what they can reach (exec/cuda_path.c);
 * one INFO line says which and why. */
ncclResult_t weft_engine_choose(struct ncclComm *comm, const struct weft_engine_ops **out);

#endif
