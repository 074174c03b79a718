/* Logging in NCCL's format (debug.c says it exactly): NCCL_DEBUG levels,
 * NCCL_DEBUG_SUBSYS masks, NCCL_DEBUG_FILE, and the last-error message that
 * ncclGetLastError returns. */
#ifndef WEFT_BASE_DEBUG_H
#define WEFT_BASE_DEBUG_H

#include <stdarg.h>

enum weft_log_level {
  WEFT_LOG_NONE = 0,
  WEFT_LOG_VERSION = 1,
  WEFT_LOG_WARN = 2,
  WEFT_LOG_INFO = 3,
  WEFT_LOG_ABORT = 4,
  WEFT_LOG_TRACE = 5,
};

/* Subsystem bits, with NCCL's names so NCCL_DEBUG_SUBSYS reads the same. */
enum weft_subsys {
  WEFT_INIT = 0x1,
  WEFT_COLL = 0x2,
  WEFT_P2P = 0x4,
  WEFT_SHM = 0x8,
  WEFT_NET = 0x10,
  WEFT_GRAPH = 0x20,
  WEFT_TUNING = 0x40,
  WEFT_ENV = 0x80,
  WEFT_ALLOC = 0x100,
  WEFT_CALL = 0x200,
  WEFT_PROXY = 0x400,
  WEFT_NVLS = 0x800,
  WEFT_BOOTSTRAP = 0x1000,
  WEFT_REG = 0x2000,
  WEFT_PROFILE = 0x4000,
  WEFT_RAS = 0x8000,
  WEFT_ALL = ~0,
};

void weft_log(enum weft_log_level level, unsigned long subsys, const char *file, int line,
              const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Current level and mask; cheap to test before formatting a message. */
extern int weft_log_level_now;
extern unsigned long weft_log_mask_now;
void weft_log_init(void);
/* Reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE again (ncclResetDebugInit). */
void weft_log_reset(void);

/* "NCCL version 2.27.7+cudaX.Y (weft 0.1.0)", once per process: a plain
 * line at NCCL_DEBUG=VERSION or WARN, an INFO line above, as NCCL. */
void weft_log_version(void);

/* The rank shown in log lines from this thread (-1: none). */
void weft_log_set_rank(int rank);

#define WARN(...) weft_log(WEFT_LOG_WARN, WEFT_ALL, __FILE__, __LINE__, __VA_ARGS__)
#define INFO(subsys, ...)                                                      \
  do {                                                                         \
    weft_log_init();                                                           \
    if (weft_log_level_now >= WEFT_LOG_INFO && (weft_log_mask_now & (subsys))) \
      weft_log(WEFT_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__);      \
  } while (0)
#define TRACE(subsys, ...)                                                      \
  do {                                                                          \
    weft_log_init();                                                            \
    if (weft_log_level_now >= WEFT_LOG_TRACE && (weft_log_mask_now & (subsys))) \
      weft_log(WEFT_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__);      \
  } while (0)

/* Records msg as the last error without printing (WARN records too). */
void weft_set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Records a communicator's failure, as a call returns it, as the last
 * error, pinned: WARNs from helper threads (weft_log_set_helper) leave it
 * in place until a WARN from another thread or weft_set_last_error
 * replaces it. A helper's WARN after a failure (a socket thread that finds
 * the dead peer's connection closed) follows from it, and would otherwise
 * hide the failure's cause from ncclGetLastError. */
void weft_pin_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Marks this thread a helper: a thread that moves bytes or watches for
 * events for the threads that run calls (socket helpers, lane and copy
 * threads, the failure watcher, the IB event thread). */
void weft_log_set_helper(void);
const char *weft_last_error(void);

#endif
