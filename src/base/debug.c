/* Logging in NCCL's exact format, so tools and people that read NCCL's logs
 * read weft's: "host:pid:tid [rank] NCCL INFO message", WARN lines after a
 * blank line with a timestamp and file:line ("[2026-12-02 04:59:47]
 * host:pid:tid [rank] core/comm.c:120 NCCL WARN message"), and the version
 * line "NCCL version 2.27.7+cuda12.8 (weft 0.1.0)". NCCL_DEBUG,
 * NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE come from the parameter table,
 * read once per process. */
#include "base/debug.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/param.h"
#include "nccl.h"
#include "weft_config.h"
#if WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

int weft_log_level_now = WEFT_LOG_NONE;
unsigned long weft_log_mask_now = WEFT_INIT | WEFT_BOOTSTRAP | WEFT_ENV;

static FILE *log_file;
static char host_name[64];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int log_rank = -1;

static pthread_mutex_t last_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];
/* Under last_error_lock: last_error is a communicator's failure as its
 * call returned it (weft_pin_last_error); a helper thread's WARN, which
 * follows from that failure, does not replace it. */
static int last_error_pinned;
/* This thread is a helper (weft_log_set_helper). */
static _Thread_local int log_helper;

/* NCCL_DEBUG_SUBSYS's names are the table's, in the order of the
 * enum weft_subsys bits; the names after RAS (NCCL's ALLOC_HOST and
 * DESTROY) have no messages in weft. */
#define SUBSYS_BITS 16
#define SUBSYS_DEFAULT (WEFT_INIT | WEFT_BOOTSTRAP | WEFT_ENV)

static unsigned long parse_subsys(const char *spec) {
  unsigned mask = 0;
  if (weft_param_list_of(WEFT_PARAM_DEBUG_SUBSYS, spec, &mask, 1) != 0) return SUBSYS_DEFAULT;
  return mask & ((1u << SUBSYS_BITS) - 1);
}

/* Expands %h (host) and %p (pid) in NCCL_DEBUG_FILE, as NCCL does. */
static void open_log_file(const char *pattern) {
  char path[512];
  size_t n = 0;
  for (const char *p = pattern; *p && n + 32 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      n += (size_t)snprintf(path + n, sizeof(path) - n, "%s", host_name);
      p++;
    } else if (p[0] == '%' && p[1] == '%') {
      path[n++] = '%';
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      n += (size_t)snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
      p++;
    } else {
      path[n++] = *p;
    }
  }
  path[n] = '\0';
  FILE *f = fopen(path, "a");
  if (f == NULL) {
    fprintf(stdout,
            "%s:%d:%d [0] NCCL INFO NCCL_DEBUG_FILE=%s cannot be opened; logging to stdout\n",
            host_name, (int)getpid(), (int)syscall(SYS_gettid), path);
    return;
  }
  setvbuf(f, NULL, _IOLBF, 0);
  log_file = f;
}

static void configure(const char *level, const char *subsys, const char *file) {
  /* The table's names are VERSION, WARN, INFO, ABORT, TRACE: levels 1..5. */
  int64_t index = -1;
  char why[160];
  int lvl = WEFT_LOG_NONE;
  if (level != NULL &&
      weft_param_parse(&weft_param_rows[WEFT_PARAM_DEBUG], level, &index, why, sizeof(why)) == 0)
    lvl = (int)index + WEFT_LOG_VERSION;
  weft_log_mask_now = subsys ? parse_subsys(subsys) : SUBSYS_DEFAULT;
  if (log_file != NULL) {
    fclose(log_file);
    log_file = NULL;
  }
  if (file && lvl > WEFT_LOG_NONE) open_log_file(file);
  weft_log_level_now = lvl;
}

static void init_logging(void) {
  gethostname(host_name, sizeof(host_name) - 1);
  char *dot = strchr(host_name, '.');
  if (dot) *dot = '\0';
  configure(weft_param_str_quiet(WEFT_PARAM_DEBUG), weft_param_str_quiet(WEFT_PARAM_DEBUG_SUBSYS),
            weft_param_str_quiet(WEFT_PARAM_DEBUG_FILE));
}

void weft_log_reset(void) {
  weft_log_init();
  pthread_mutex_lock(&log_lock);
  configure(weft_param_str_fresh(WEFT_PARAM_DEBUG), weft_param_str_fresh(WEFT_PARAM_DEBUG_SUBSYS),
            weft_param_str_fresh(WEFT_PARAM_DEBUG_FILE));
  pthread_mutex_unlock(&log_lock);
}

void weft_log_init(void) {
  pthread_once(&init_once, init_logging);
}

void weft_log_set_rank(int rank) {
  log_rank = rank;
}

/* "core/comm.c" for ".../src/core/comm.c", "transport/shm/shm.c" for
 * ".../transport/shm/shm.c": NCCL's WARN lines name the file relative to
 * its source tree, and __FILE__ here is relative to the build directory. */
static const char *short_file(const char *file) {
  static const char *const roots[] = {"src/", "transport/", "topo/"};
  const char *best = file;
  for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++) {
    size_t n = strlen(roots[i]);
    for (const char *p = file; (p = strstr(p, roots[i])) != NULL; p += n) {
      if (p != file && p[-1] != '/') continue;
      const char *rest = i == 0 ? p + n : p;
      if (rest > best) best = rest;
    }
  }
  return best;
}

static double ms_since_start(void) {
  static struct timespec start;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  if (start.tv_sec == 0) start = now;
  return (double)(now.tv_sec - start.tv_sec) * 1e3 + (double)(now.tv_nsec - start.tv_nsec) / 1e6;
}

/* Writes one line as NCCL does for level (the caller holds log_lock). */
static void write_line(FILE *out, enum weft_log_level level, const char *file, int line,
                       const char *msg) {
  char head[192];
  /* NCCL puts the CUDA device in brackets; weft the rank the thread works
   * for (host ranks have no device), 0 outside any communicator as NCCL. */
  snprintf(head, sizeof(head), "%s:%d:%d [%d]", host_name, (int)getpid(), (int)syscall(SYS_gettid),
           log_rank >= 0 ? log_rank : 0);
  if (level == WEFT_LOG_WARN) {
    char stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof(stamp), "[%F %T]", &tm);
    fprintf(out, "\n%s %s %s:%d NCCL WARN %s\n", stamp, head, short_file(file), line, msg);
  } else if (level == WEFT_LOG_TRACE) {
    fprintf(out, "%s %f %s:%d NCCL TRACE %s\n", head, ms_since_start(), short_file(file), line,
            msg);
  } else if (level == WEFT_LOG_VERSION && weft_log_level_now < WEFT_LOG_INFO) {
    fprintf(out, "%s\n", msg);
  } else {
    fprintf(out, "%s NCCL INFO %s\n", head, msg);
  }
}

void weft_log(enum weft_log_level level, unsigned long subsys, const char *file, int line,
              const char *fmt, ...) {
  weft_log_init();
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == WEFT_LOG_WARN) {
    pthread_mutex_lock(&last_error_lock);
    if (!(log_helper && last_error_pinned)) {
      snprintf(last_error, sizeof(last_error), "%s", msg);
      last_error_pinned = 0;
    }
    pthread_mutex_unlock(&last_error_lock);
  }
  if (weft_log_level_now < (int)level || !(weft_log_mask_now & subsys)) return;
  pthread_mutex_lock(&log_lock);
  FILE *out = log_file ? log_file : stdout; /* as NCCL: logs go to stdout unless NCCL_DEBUG_FILE */
  write_line(out, level, file, line, msg);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}

void weft_log_version(void) {
  static _Atomic int printed;
  if (atomic_exchange(&printed, 1)) return;
#if WEFT_HAVE_CUDA
  weft_log(WEFT_LOG_VERSION, WEFT_ALL, __FILE__, __LINE__,
           "NCCL version %d.%d.%d+cuda%d.%d (weft %s)", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH,
           CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10, WEFT_VERSION);
#else
  weft_log(WEFT_LOG_VERSION, WEFT_ALL, __FILE__, __LINE__, "NCCL version %d.%d.%d (weft %s)",
           NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, WEFT_VERSION);
#endif
}

static void set_last_error(int pin, const char *fmt, va_list ap) {
  pthread_mutex_lock(&last_error_lock);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  last_error_pinned = pin;
  pthread_mutex_unlock(&last_error_lock);
}

void weft_set_last_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_last_error(0, fmt, ap);
  va_end(ap);
}

void weft_pin_last_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  set_last_error(1, fmt, ap);
  va_end(ap);
}

void weft_log_set_helper(void) {
  log_helper = 1;
}

const char *weft_last_error(void) {
  /* The buffer is only ever overwritten whole; callers get a stable pointer
   * to a NUL-terminated string, as NCCL's ncclGetLastError does. */
  return last_error;
}
