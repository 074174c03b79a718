/* The parameter table: reads NCCL_* and WEFT_* variables once per process. */
#include "core/param.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>

#include "core/debug.h"

struct weft_int_row {
  const char *env;
  int64_t def;
  const char *help;
  int64_t value;
  int set;
};

struct weft_str_row {
  const char *env;
  const char *def;
  const char *help;
  const char *value;
};

#define WEFT_INT_ROW(id, env, def, help) {env, def, help, def, 0},
#define WEFT_STR_ROW(id, env, def, help) {env, def, help, def},
static struct weft_int_row int_rows[] = {WEFT_INT_PARAMS(WEFT_INT_ROW)};
static struct weft_str_row str_rows[] = {WEFT_STR_PARAMS(WEFT_STR_ROW)};
#undef WEFT_INT_ROW
#undef WEFT_STR_ROW

static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_all(void) {
  for (int i = 0; i < WEFT_INT_PARAM_COUNT; i++) {
    const char *s = getenv(int_rows[i].env);
    if (s == NULL || *s == '\0') continue;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    if (errno != 0 || *end != '\0') {
      /* Logged later, when logging is up: here we only keep the default. */
      continue;
    }
    int_rows[i].value = v;
    int_rows[i].set = 1;
  }
  for (int i = 0; i < WEFT_STR_PARAM_COUNT; i++) {
    const char *s = getenv(str_rows[i].env);
    if (s != NULL && *s != '\0') str_rows[i].value = s;
  }
}

int64_t weft_param_int(enum weft_int_param id) {
  pthread_once(&load_once, load_all);
  return int_rows[id].value;
}

int weft_param_is_set(enum weft_int_param id) {
  pthread_once(&load_once, load_all);
  return int_rows[id].set;
}

const char *weft_param_str(enum weft_str_param id) {
  pthread_once(&load_once, load_all);
  return str_rows[id].value;
}

static pthread_once_t print_once = PTHREAD_ONCE_INIT;

static void print_all(void) {
  for (int i = 0; i < WEFT_INT_PARAM_COUNT; i++) {
    const char *s = getenv(int_rows[i].env);
    if (s != NULL && *s != '\0' && !int_rows[i].set)
      WARN("%s=%s is not an integer; using the default %" PRId64, int_rows[i].env, s,
           int_rows[i].def);
    INFO(WEFT_ENV, "%s=%" PRId64 "%s (%s)", int_rows[i].env, int_rows[i].value,
         int_rows[i].set ? "" : " [default]", int_rows[i].help);
  }
  for (int i = 0; i < WEFT_STR_PARAM_COUNT; i++)
    INFO(WEFT_ENV, "%s=%s%s (%s)", str_rows[i].env,
         /* A secret must not reach a log file. */
         i == WEFT_PARAM_COMM_SECRET && str_rows[i].value ? "(set, not shown)"
         : str_rows[i].value                              ? str_rows[i].value
                                                          : "(unset)",
         str_rows[i].value == str_rows[i].def ? " [default]" : "", str_rows[i].help);
}

void weft_param_print_all(void) {
  pthread_once(&load_once, load_all);
  pthread_once(&print_once, print_all);
}
