/* Failures named everywhere: when one rank of a communicator sees that a
 * peer died, stopped answering, aborted, or that its own call every rank
 * makes failed, it records one failure notice (first failure wins) and
 * sends it out of band to every rank, so each survivor ends its waits at
 * once and reports the same rank and cause (docs/ERRORS.md).
 *
 * Two halves: a per-thread note, which the code that first sees a peer's
 * failure leaves (base/fail_note.h, all that transports include), and the
 * communicator's record with the notice socket and its watcher thread. */
#ifndef WEFT_CORE_FAILURE_H
#define WEFT_CORE_FAILURE_H

#include <stddef.h>

#include "base/fail_note.h" /* the per-thread note, and abort_flag values */
#include "nccl.h"

/* ---- The communicator's record ------------------------------------------- */

struct ncclComm;

/* Opens comm's notice socket, shares the addresses over the bootstrap and
 * starts the watcher thread. */
ncclResult_t weft_failure_start(struct ncclComm *comm);
/* Stops the watcher thread, before the engines it may poke are freed;
 * reports still work (without pings answered). */
void weft_failure_quiet(struct ncclComm *comm);
/* Stops the watcher and closes the socket; fine when never started. */
void weft_failure_stop(struct ncclComm *comm);

/* A fatal result `res` of work on comm: records what this thread's note
 * says (or res and the last WARN as this rank's own error), tells every
 * rank, and ends every wait. A notice already in wins. Returns the result
 * the call should give (docs/ERRORS.md). While comm is being aborted by
 * this process, nothing is sent. */
ncclResult_t weft_failure_report(struct ncclComm *comm, ncclResult_t res);
/* This rank fails a call every rank makes (`code`, e.g. a NULL argument),
 * or aborts (WEFT_FAIL_ABORTED): records it and tells every rank. With
 * nothing of ours in flight the notice is soft (WEFT_ABORT_SOFT): what we
 * sent in earlier calls still arrives, so those finish everywhere; with
 * work in flight, the others fail that work too. */
ncclResult_t weft_failure_raise(struct ncclComm *comm, enum weft_fail_how how, ncclResult_t code,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Reads notices that arrived; returns the result a call that finishes now
 * should give: ncclSuccess unless a failure found in flight is recorded
 * (one a peer raised between calls fails the next call, not this one).
 * Cheap (one non-blocking recv). */
ncclResult_t weft_failure_poll(struct ncclComm *comm);
/* res from a call on comm: with a failure recorded, sets the last error to
 * its message and returns its result; else res. */
ncclResult_t weft_failure_result(const struct ncclComm *comm, ncclResult_t res);
/* From now on notices leave comm's bootstrap alone, and an abort they made
 * is undone: ncclCommShrink talks over a failed parent's bootstrap, with
 * kept ranks only, while notices from excluded ranks may still come. */
void weft_failure_keep_bootstrap(struct ncclComm *comm);
/* The recorded failure as a sentence ("rank 3 died (...)"); 0 if none. */
int weft_failure_describe(const struct ncclComm *comm, char *buf, size_t size);

#endif
