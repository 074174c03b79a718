/* The error macros: check, check-goto, syscall check (retrying EINTR),
 * pthread check. The function that first sees a failure WARNs; callers only
 * pass it up, leaving a "-> %d" trail at INFO. */
#ifndef WEFT_BASE_CHECK_H
#define WEFT_BASE_CHECK_H

#include <errno.h>
#include <string.h>

#include "nccl.h"
#include "base/debug.h"

#define WEFT_CHECK(call)                                                   \
  do {                                                                     \
    ncclResult_t weft_r_ = (call);                                         \
    if (weft_r_ != ncclSuccess && weft_r_ != ncclInProgress) {             \
      INFO(WEFT_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)weft_r_);      \
      return weft_r_;                                                      \
    }                                                                      \
  } while (0)

#define WEFT_CHECK_GOTO(call, res, label)                                  \
  do {                                                                     \
    (res) = (call);                                                        \
    if ((res) != ncclSuccess && (res) != ncclInProgress) {                 \
      INFO(WEFT_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res));        \
      goto label;                                                          \
    }                                                                      \
  } while (0)

/* Runs a call returning -1/errno, retrying EINTR; WARNs and returns
 * ncclSystemError on failure. */
#define WEFT_SYSCHECK(call, what)                                          \
  do {                                                                     \
    int weft_s_;                                                           \
    do {                                                                   \
      weft_s_ = (int)(call);                                               \
    } while (weft_s_ == -1 && errno == EINTR);                             \
    if (weft_s_ == -1) {                                                   \
      WARN("%s failed: %s", (what), strerror(errno));                      \
      return ncclSystemError;                                              \
    }                                                                      \
  } while (0)

#define WEFT_PTHREAD_CHECK(call, what)                                     \
  do {                                                                     \
    int weft_p_ = (call);                                                  \
    if (weft_p_ != 0) {                                                    \
      WARN("%s failed: %s", (what), strerror(weft_p_));                    \
      return ncclSystemError;                                              \
    }                                                                      \
  } while (0)

#endif
