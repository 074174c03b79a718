/* weft-fit's JSON reader: just enough JSON to walk weft-bench's files
 * (bench/bench_json.c) and take from them the collective, the rank count
 * and, from every object with a "size" and an "out_of_place" (or
 * "in_place") object holding "time_us", one sample. Everything else is
 * parsed and skipped, so extra fields and extra nesting (several passes)
 * are tolerated. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fit.h"

#define MAX_DEPTH 32

struct parser {
  const char *p;
  int in_place;
  struct fit_series *out;
  char *err;
  size_t errlen;
  const char *text;
};

/* What an object holds that matters here. */
struct object {
  int has_size, has_time, has_oop, has_ip;
  double size, time, oop, ip;
};

static int fail(struct parser *j, const char *fmt, ...) {
  char what[160];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  snprintf(j->err, j->errlen, "%s at byte %ld", what, (long)(j->p - j->text));
  return -1;
}

static void skip_ws(struct parser *j) {
  while (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r') j->p++;
}

/* A string into buf (escapes other than \" and \\ kept as they are:
 * the keys and values read here have none). */
static int parse_string(struct parser *j, char *buf, size_t len) {
  size_t k = 0;
  j->p++; /* the opening quote */
  while (*j->p != '"') {
    if (*j->p == '\0') return fail(j, "unterminated string");
    if (*j->p == '\\' && j->p[1] != '\0') j->p++;
    if (k + 1 < len) buf[k++] = *j->p;
    j->p++;
  }
  j->p++;
  buf[k] = '\0';
  return 0;
}

static int add_sample(struct parser *j, double bytes, double t) {
  struct fit_series *s = j->out;
  for (int i = 0; i < s->n; i++)
    if (s->bytes[i] == bytes) {
      if (t < s->time_us[i]) s->time_us[i] = t;
      return 0;
    }
  if (s->n == FIT_MAX_SIZES) return fail(j, "more than %d message sizes", FIT_MAX_SIZES);
  s->bytes[s->n] = bytes;
  s->time_us[s->n++] = t;
  return 0;
}

static int parse_value(struct parser *j, int depth, const char *key, struct object *parent);

/* The members of an object, after its '{', into o. */
static int parse_members(struct parser *j, int depth, struct object *o) {
  char name[64];
  skip_ws(j);
  if (*j->p == '}') {
    j->p++;
    return 0;
  }
  for (;;) {
    skip_ws(j);
    if (*j->p != '"') return fail(j, "expected a key");
    if (parse_string(j, name, sizeof(name)) != 0) return -1;
    skip_ws(j);
    if (*j->p++ != ':') return fail(j, "expected ':' after \"%s\"", name);
    if (parse_value(j, depth + 1, name, o) != 0) return -1;
    skip_ws(j);
    if (*j->p == ',') {
      j->p++;
      continue;
    }
    if (*j->p++ != '}') return fail(j, "expected ',' or '}'");
    return 0;
  }
}

/* An object; one with a size and the chosen placement's time is a sample. */
static int parse_object(struct parser *j, int depth, const char *key, struct object *parent) {
  struct object o = {0};
  j->p++;
  if (parse_members(j, depth, &o) != 0) return -1;
  if (parent != NULL && key != NULL && o.has_time) {
    if (strcmp(key, "out_of_place") == 0) parent->has_oop = 1, parent->oop = o.time;
    if (strcmp(key, "in_place") == 0) parent->has_ip = 1, parent->ip = o.time;
  }
  int has = j->in_place ? o.has_ip : o.has_oop;
  if (o.has_size && has) return add_sample(j, o.size, j->in_place ? o.ip : o.oop);
  return 0;
}

static int parse_array(struct parser *j, int depth) {
  j->p++;
  skip_ws(j);
  if (*j->p == ']') {
    j->p++;
    return 0;
  }
  for (;;) {
    if (parse_value(j, depth + 1, NULL, NULL) != 0) return -1;
    skip_ws(j);
    if (*j->p == ',') {
      j->p++;
      continue;
    }
    if (*j->p++ != ']') return fail(j, "expected ',' or ']'");
    return 0;
  }
}

static int parse_scalar(struct parser *j, int depth, const char *key, struct object *parent) {
  static const char *const words[] = {"null", "true", "false"};
  for (size_t w = 0; w < sizeof(words) / sizeof(words[0]); w++)
    if (strncmp(j->p, words[w], strlen(words[w])) == 0) {
      j->p += strlen(words[w]);
      return 0; /* a null time is a size not measured: no sample */
    }
  char *end;
  errno = 0;
  double v = strtod(j->p, &end);
  if (end == j->p || errno != 0) return fail(j, "expected a value");
  j->p = end;
  if (parent == NULL || key == NULL) return 0;
  if (strcmp(key, "size") == 0) parent->has_size = 1, parent->size = v;
  if (strcmp(key, "time_us") == 0) parent->has_time = 1, parent->time = v;
  if (depth == 1 && strcmp(key, "nranks") == 0) j->out->nranks = (int)v;
  return 0;
}

static int parse_value(struct parser *j, int depth, const char *key, struct object *parent) {
  skip_ws(j);
  if (depth > MAX_DEPTH) return fail(j, "nested deeper than %d", MAX_DEPTH);
  if (*j->p == '{') return parse_object(j, depth, key, parent);
  if (*j->p == '[') return parse_array(j, depth);
  if (*j->p == '"') {
    char buf[sizeof(j->out->collective)];
    if (parse_string(j, buf, sizeof(buf)) != 0) return -1;
    if (depth == 1 && key != NULL && strcmp(key, "collective") == 0)
      memcpy(j->out->collective, buf, sizeof(buf));
    return 0;
  }
  return parse_scalar(j, depth, key, parent);
}

static void sort_sizes(struct fit_series *s) {
  for (int i = 1; i < s->n; i++)
    for (int k = i; k > 0 && s->bytes[k - 1] > s->bytes[k]; k--) {
      double b = s->bytes[k], t = s->time_us[k];
      s->bytes[k] = s->bytes[k - 1], s->time_us[k] = s->time_us[k - 1];
      s->bytes[k - 1] = b, s->time_us[k - 1] = t;
    }
}

int fit_json_parse(const char *text, int in_place, struct fit_series *out, char *err,
                   size_t errlen) {
  struct parser j = {text, in_place, out, err, errlen, text};
  memset(out, 0, sizeof(*out));
  skip_ws(&j);
  if (*j.p != '{') return fail(&j, "expected a JSON object (weft-bench --json's output)");
  if (parse_value(&j, 0, NULL, NULL) != 0) return -1;
  if (out->collective[0] == '\0' || out->nranks < 1)
    return fail(&j, "no \"collective\" or \"nranks\": not weft-bench --json's output");
  if (out->n == 0)
    return fail(&j, "no row with a size and a %s time", in_place ? "in-place" : "out-of-place");
  sort_sizes(out);
  return 0;
}

int fit_json_read(const char *path, int in_place, struct fit_series *out, char *err,
                  size_t errlen) {
  FILE *f = fopen(path, "r");
  if (f == NULL) {
    snprintf(err, errlen, "cannot open: %s", strerror(errno));
    return -1;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    len += fread(buf + len, 1, cap - len - 1, f);
    if (len < cap - 1) break;
    char *more = realloc(buf, cap * 2);
    if (more == NULL) free(buf);
    buf = more;
    cap *= 2;
  }
  int rerr = ferror(f);
  fclose(f);
  if (buf == NULL || rerr) {
    snprintf(err, errlen, "%s", buf == NULL ? "out of memory" : "read error");
    free(buf);
    return -1;
  }
  buf[len] = '\0';
  int rc = fit_json_parse(buf, in_place, out, err, errlen);
  free(buf);
  return rc;
}
