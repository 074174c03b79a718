/* The per-thread failure note: the code that first sees a peer fail (a
 * transport, a bootstrap wait) leaves one; the communicator's failure
 * record (core/failure.h) takes it and tells every rank. Also the values
 * of ncclComm.abort_flag that waits read. Transports include this, never
 * core/failure.h. */
#ifndef WEFT_BASE_FAIL_NOTE_H
#define WEFT_BASE_FAIL_NOTE_H

#include <stddef.h>

enum weft_fail_how {
  WEFT_FAIL_NONE = 0,
  WEFT_FAIL_DIED = 1,    /* its process exited (or closed its links mid-call) */
  WEFT_FAIL_STALLED = 2, /* no progress for WEFT_TIMEOUT */
  WEFT_FAIL_ABORTED = 3, /* ncclCommAbort on a healthy communicator */
  WEFT_FAIL_ERROR = 4,   /* an error of its own (argument, system) */
};

/* Values of ncclComm.abort_flag besides 0 (running) and 1 (ncclCommAbort
 * or shrink's abandon): the communicator failed, every wait ends now; or a
 * peer failed between two calls (it aborted, or failed a call every rank
 * makes), and waits end once idle for WEFT_FAIL_SOFT_MS: what the peer
 * sent in its earlier calls still arrives, so those finish. */
#define WEFT_ABORT_FAILED 2
#define WEFT_ABORT_SOFT 3
#define WEFT_FAIL_SOFT_MS 1000

/* Leaves a note that peer failed (`how`), with a detail ("process 42
 * exited"); the first note since the last take is kept. */
void weft_failure_note(int peer, enum weft_fail_how how, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Takes this thread's note: returns its how (WEFT_FAIL_NONE: none). */
enum weft_fail_how weft_failure_note_take(int *peer_out, char *detail, size_t size);
/* Drops this thread's note (before work whose failure it must not name). */
void weft_failure_note_clear(void);

#endif
