/* Reads the parameter table (param_table.c) from the environment once per
 * process: one parser for every row, one WARN for a bad value, then the
 * default; "NCCL_X set by environment to V" at INFO/ENV for those set. */
#include "base/param.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/debug.h"

struct param_state {
  const char *raw; /* the environment's text, NULL when unset */
  int64_t value;
  int set; /* raw was valid */
  char why[320];
};

static struct param_state state[WEFT_PARAM_COUNT];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_once_t report_once = PTHREAD_ONCE_INIT;

/* Index of name[0..len) among the comma-separated names, or -1. */
static int name_index(const char *names, const char *name, size_t len) {
  int i = 0;
  for (const char *p = names; p != NULL && *p != '\0'; i++) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    if (n == len && strncasecmp(p, name, len) == 0) return i;
    p = end ? end + 1 : NULL;
  }
  return -1;
}

static int name_count(const char *names) {
  int n = names != NULL && *names != '\0';
  for (const char *p = names; n > 0 && (p = strchr(p, ',')) != NULL; p++) n++;
  return n;
}

/* s[0..len) without surrounding blanks. */
static void trim(const char **s, size_t *len) {
  while (*len > 0 && (**s == ' ' || **s == '\t')) (*s)++, (*len)--;
  while (*len > 0 && ((*s)[*len - 1] == ' ' || (*s)[*len - 1] == '\t')) (*len)--;
}

/* One list ("a,b" or "^a,b") into a mask of name bits; -1 on an unknown
 * name. "ALL", when a name of the row, means every name. */
static int list_mask(const struct weft_param_row *row, const char *s, size_t len, unsigned *out) {
  int n = name_count(row->names);
  unsigned all = n >= 32 ? ~0u : (1u << n) - 1, mask = 0;
  trim(&s, &len);
  int exclude = len > 0 && s[0] == '^';
  size_t i = exclude ? 1 : 0;
  while (i < len) {
    size_t j = i;
    while (j < len && s[j] != ',') j++;
    const char *w = s + i;
    size_t wl = j - i;
    trim(&w, &wl);
    if (wl > 0) {
      int bit = name_index(row->names, w, wl);
      if (bit < 0) return -1;
      mask |= wl == 3 && strncasecmp(w, "ALL", 3) == 0 ? all : 1u << bit;
    }
    i = j + 1;
  }
  *out = exclude ? all & ~mask : mask;
  return 0;
}

/* A whole LIST value: ';'-separated sections, each a list for every key or
 * "key:list" for one. */
static int list_parse(const struct weft_param_row *row, const char *value, unsigned masks[],
                      int nmasks) {
  for (const char *sec = value; *sec != '\0';) {
    const char *end = strchr(sec, ';');
    size_t len = end ? (size_t)(end - sec) : strlen(sec);
    const char *blank = sec;
    size_t blank_len = len;
    trim(&blank, &blank_len);
    if (blank_len == 0) { /* "Ring;" or ";;": nothing to say for any key */
      sec += len + (end ? 1 : 0);
      continue;
    }
    const char *colon = row->keys ? memchr(sec, ':', len) : NULL;
    int key = -1;
    const char *list = sec;
    if (colon != NULL) {
      const char *k = sec;
      size_t kl = (size_t)(colon - sec);
      trim(&k, &kl);
      key = name_index(row->keys, k, kl);
      if (key < 0) return -1;
      list = colon + 1;
    }
    unsigned mask;
    if (list_mask(row, list, len - (size_t)(list - sec), &mask) != 0) return -1;
    for (int k = 0; k < nmasks; k++)
      if (key < 0 || k == key) masks[k] = mask;
    sec += len + (end ? 1 : 0);
  }
  return 0;
}

static int parse_int(const char *value, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(value, &end, 0);
  while (*end == ' ') end++;
  if (errno != 0 || end == value || *end != '\0') return -1;
  *out = v;
  return 0;
}

int weft_param_parse(const struct weft_param_row *row, const char *value, int64_t *int_out,
                     char *why_out, size_t why_len) {
  int64_t v = 0;
  unsigned masks[16];
  switch (row->kind) {
    case WEFT_PARAM_KIND_INT:
      if (parse_int(value, &v) == 0 && v >= row->min && v <= row->max) break;
      snprintf(why_out, why_len, "an integer in %" PRId64 "..%" PRId64, row->min, row->max);
      return -1;
    case WEFT_PARAM_KIND_NAME:
      v = name_index(row->names, value, strlen(value));
      if (v >= 0) break;
      if (row->min <= row->max && parse_int(value, &v) == 0 && v >= row->min && v <= row->max)
        break;
      if (row->min <= row->max)
        snprintf(why_out, why_len, "one of %s, or %" PRId64 "..%" PRId64, row->names, row->min,
                 row->max);
      else
        snprintf(why_out, why_len, "one of %s", row->names);
      return -1;
    case WEFT_PARAM_KIND_LIST:
      if (list_parse(row, value, masks, 16) == 0) break;
      snprintf(why_out, why_len, "names from %s, comma-separated, ^ to exclude%s%s", row->names,
               row->keys ? "; per collective key:list;key:list with keys " : "",
               row->keys ? row->keys : "");
      return -1;
    case WEFT_PARAM_KIND_STR: break;
  }
  *int_out = v;
  return 0;
}

static void load_all(void) {
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const struct weft_param_row *row = &weft_param_rows[i];
    struct param_state *st = &state[i];
    st->value = row->def;
    const char *s = getenv(row->env);
    if (s == NULL || *s == '\0') continue;
    st->raw = s;
    int64_t v;
    if (weft_param_parse(row, s, &v, st->why, sizeof(st->why)) != 0) continue;
    st->set = 1;
    if (row->kind != WEFT_PARAM_KIND_STR) st->value = v;
  }
}

/* Logged after loading, outside the logger's own start (it reads the
 * debug parameters through weft_param_str_quiet). */
/* The environment's text as logs may show it: a secret never is. */
static const char *shown(int i) {
  return i == WEFT_PARAM_COMM_SECRET ? "(set, not shown)" : state[i].raw;
}

static void report(void) {
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const struct weft_param_row *row = &weft_param_rows[i];
    const struct param_state *st = &state[i];
    if (st->raw == NULL) continue;
    if (!st->set)
      WARN("%s=%s is not valid (expected %s); using the default %s", row->env, shown(i), st->why,
           row->def_doc);
    else if (strncmp(row->env, "NCCL_DEBUG", 10) != 0) /* as NCCL: the logger's own are not */
      INFO(WEFT_ENV, "%s set by environment to %s", row->env, shown(i));
  }
  const struct param_state *lo = &state[WEFT_PARAM_MIN_NCHANNELS];
  const struct param_state *hi = &state[WEFT_PARAM_MAX_NCHANNELS];
  if (lo->set && hi->set && lo->value > hi->value)
    WARN("NCCL_MIN_NCHANNELS=%" PRId64 " is above NCCL_MAX_NCHANNELS=%" PRId64 "; using %" PRId64
         " channels at most and at least",
         lo->value, hi->value, hi->value);
}

static void ensure(void) {
  pthread_once(&load_once, load_all);
  pthread_once(&report_once, report);
}

int64_t weft_param_int(enum weft_param id) {
  ensure();
  /* Min above max: the maximum wins, as both bound the same count. */
  if (id == WEFT_PARAM_MIN_NCHANNELS && state[WEFT_PARAM_MAX_NCHANNELS].set &&
      state[id].value > state[WEFT_PARAM_MAX_NCHANNELS].value)
    return state[WEFT_PARAM_MAX_NCHANNELS].value;
  return state[id].value;
}

int weft_param_is_set(enum weft_param id) {
  ensure();
  return state[id].set;
}

const char *weft_param_str(enum weft_param id) {
  ensure();
  return state[id].set ? state[id].raw : NULL;
}

const char *weft_param_str_quiet(enum weft_param id) {
  pthread_once(&load_once, load_all);
  return state[id].set ? state[id].raw : NULL;
}

const char *weft_param_str_fresh(enum weft_param id) {
  const char *s = getenv(weft_param_rows[id].env);
  int64_t v;
  char why[320];
  if (s == NULL || *s == '\0') return NULL;
  return weft_param_parse(&weft_param_rows[id], s, &v, why, sizeof(why)) == 0 ? s : NULL;
}

int weft_param_list(enum weft_param id, unsigned masks_out[], int nmasks) {
  ensure();
  if (!state[id].set) return 0;
  return list_parse(&weft_param_rows[id], state[id].raw, masks_out, nmasks) == 0;
}

int weft_param_list_of(enum weft_param id, const char *value, unsigned masks_out[], int nmasks) {
  return list_parse(&weft_param_rows[id], value, masks_out, nmasks);
}

static pthread_once_t print_once = PTHREAD_ONCE_INIT;

static void print_all(void) {
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const struct weft_param_row *row = &weft_param_rows[i];
    const struct param_state *st = &state[i];
    char value[64];
    if (row->kind == WEFT_PARAM_KIND_INT)
      snprintf(value, sizeof(value), "%" PRId64, weft_param_int((enum weft_param)i));
    if (st->set)
      INFO(WEFT_ENV, "%s=%s (set by environment to %s; %s)", row->env,
           row->kind == WEFT_PARAM_KIND_INT ? value : shown(i), shown(i), row->help);
    else
      INFO(WEFT_ENV, "%s=%s (default; %s)", row->env,
           row->kind == WEFT_PARAM_KIND_INT ? value : row->def_doc, row->help);
  }
}

void weft_param_print_all(void) {
  ensure();
  /* NCCL's default mask has ENV too; the whole table only when asked. */
  const char *subsys = weft_param_str(WEFT_PARAM_DEBUG_SUBSYS);
  unsigned mask = 0;
  if (subsys == NULL || weft_param_list(WEFT_PARAM_DEBUG_SUBSYS, &mask, 1) == 0) return;
  int env_bit = name_index(weft_param_rows[WEFT_PARAM_DEBUG_SUBSYS].names, "ENV", 3);
  if (mask & (1u << env_bit)) pthread_once(&print_once, print_all);
}
