/* Logging in NCCL's shape: "host:pid:tid [rank] weft LEVEL message", with
 * NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE read once per process. */
#include "core/debug.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/param.h"

int weft_log_level_now = WEFT_LOG_NONE;
unsigned long weft_log_mask_now = WEFT_INIT | WEFT_BOOTSTRAP | WEFT_ENV;

static FILE *log_file;
static char host_name[64];
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int log_rank = -1;

static pthread_mutex_t last_error_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_error[1024];

static const struct {
  const char *name;
  unsigned long bit;
} subsys_names[] = {
    {"INIT", WEFT_INIT},   {"COLL", WEFT_COLL},     {"P2P", WEFT_P2P},
    {"SHM", WEFT_SHM},     {"NET", WEFT_NET},       {"GRAPH", WEFT_GRAPH},
    {"TUNING", WEFT_TUNING}, {"ENV", WEFT_ENV},     {"ALLOC", WEFT_ALLOC},
    {"CALL", WEFT_CALL},   {"PROXY", WEFT_PROXY},   {"NVLS", WEFT_NVLS},
    {"BOOTSTRAP", WEFT_BOOTSTRAP}, {"REG", WEFT_REG}, {"PROFILE", WEFT_PROFILE},
    {"RAS", WEFT_RAS},     {"ALL", (unsigned long)WEFT_ALL},
};

static unsigned long parse_subsys(const char *spec) {
  int invert = spec[0] == '^';
  unsigned long mask = invert ? (unsigned long)WEFT_ALL : 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", spec + invert);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++) {
      if (strcasecmp(tok, subsys_names[i].name) != 0) continue;
      if (invert)
        mask &= ~subsys_names[i].bit;
      else
        mask |= subsys_names[i].bit;
    }
  }
  return mask;
}

/* Expands %h (host) and %p (pid) in NCCL_DEBUG_FILE, as NCCL does. */
static void open_log_file(const char *pattern) {
  char path[512];
  size_t n = 0;
  for (const char *p = pattern; *p && n + 32 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'h') {
      n += (size_t)snprintf(path + n, sizeof(path) - n, "%s", host_name);
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
    fprintf(stdout, "%s:%d weft WARN NCCL_DEBUG_FILE=%s cannot be opened; logging to stdout\n",
            host_name, (int)getpid(), path);
    return;
  }
  setvbuf(f, NULL, _IOLBF, 0);
  log_file = f;
}

static void configure(const char *level, const char *subsys, const char *file) {
  int lvl = WEFT_LOG_NONE;
  if (level) {
    if (strcasecmp(level, "VERSION") == 0) lvl = WEFT_LOG_VERSION;
    else if (strcasecmp(level, "WARN") == 0) lvl = WEFT_LOG_WARN;
    else if (strcasecmp(level, "INFO") == 0) lvl = WEFT_LOG_INFO;
    else if (strcasecmp(level, "ABORT") == 0) lvl = WEFT_LOG_ABORT;
    else if (strcasecmp(level, "TRACE") == 0) lvl = WEFT_LOG_TRACE;
  }
  weft_log_mask_now = subsys ? parse_subsys(subsys) : (WEFT_INIT | WEFT_BOOTSTRAP | WEFT_ENV);
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
  configure(weft_param_str(WEFT_PARAM_DEBUG), weft_param_str(WEFT_PARAM_DEBUG_SUBSYS),
            weft_param_str(WEFT_PARAM_DEBUG_FILE));
}

void weft_log_reset(void) {
  weft_log_init();
  pthread_mutex_lock(&log_lock);
  configure(getenv("NCCL_DEBUG"), getenv("NCCL_DEBUG_SUBSYS"), getenv("NCCL_DEBUG_FILE"));
  pthread_mutex_unlock(&log_lock);
}

void weft_log_init(void) { pthread_once(&init_once, init_logging); }

void weft_log_set_rank(int rank) { log_rank = rank; }

static const char *level_name(enum weft_log_level level) {
  switch (level) {
  case WEFT_LOG_VERSION: return "VERSION";
  case WEFT_LOG_WARN: return "WARN";
  case WEFT_LOG_INFO: return "INFO";
  case WEFT_LOG_ABORT: return "ABORT";
  case WEFT_LOG_TRACE: return "TRACE";
  default: return "";
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
    snprintf(last_error, sizeof(last_error), "%s", msg);
    pthread_mutex_unlock(&last_error_lock);
  }
  if (weft_log_level_now < (int)level || !(weft_log_mask_now & subsys)) return;
  char head[160];
  int tid = (int)syscall(SYS_gettid);
  if (log_rank >= 0)
    snprintf(head, sizeof(head), "%s:%d:%d [rank %d]", host_name, (int)getpid(), tid, log_rank);
  else
    snprintf(head, sizeof(head), "%s:%d:%d", host_name, (int)getpid(), tid);
  pthread_mutex_lock(&log_lock);
  FILE *out = log_file ? log_file : stdout; /* as NCCL: logs go to stdout unless NCCL_DEBUG_FILE */
  if (level == WEFT_LOG_TRACE)
    fprintf(out, "%s weft TRACE %s:%d %s\n", head, file, line, msg);
  else
    fprintf(out, "%s weft %s %s\n", head, level_name(level), msg);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}

void weft_set_last_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&last_error_lock);
  vsnprintf(last_error, sizeof(last_error), fmt, ap);
  pthread_mutex_unlock(&last_error_lock);
  va_end(ap);
}

const char *weft_last_error(void) {
  /* The buffer is only ever overwritten whole; callers get a stable pointer
   * to a NUL-terminated string, as NCCL's ncclGetLastError does. */
  return last_error;
}

void weft_log_unsupported(const char *function) {
  WARN("%s is not supported by weft yet", function);
}
