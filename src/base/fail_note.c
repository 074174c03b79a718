/* The per-thread failure note (base/fail_note.h). */
#include "base/fail_note.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local struct {
  int how, peer;
  char detail[200]; /* as long as a notice's (core/failure.c, FAIL_DETAIL) */
} note;

void weft_failure_note(int peer, enum weft_fail_how how, const char *fmt, ...) {
  if (note.how != WEFT_FAIL_NONE) return;
  note.how = (int)how;
  note.peer = peer;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note.detail, sizeof(note.detail), fmt, ap);
  va_end(ap);
}

enum weft_fail_how weft_failure_note_take(int *peer_out, char *detail, size_t size) {
  enum weft_fail_how how = (enum weft_fail_how)note.how;
  *peer_out = note.peer;
  if (size > 0) snprintf(detail, size, "%s", note.detail);
  note.how = WEFT_FAIL_NONE;
  return how;
}

void weft_failure_note_clear(void) {
  note.how = WEFT_FAIL_NONE;
}
