/* NCCL_IB_HCA as NCCL reads it (net_ib.cc: parseStringList, matchIfList):
 * a comma list of name[:port]; a name is a prefix of a device name unless
 * the value starts with '=' (exact names); a leading '^' keeps every port
 * the list does not match. Where NCCL quietly matches nothing, weft says
 * why: blanks around entries are trimmed, and an entry with no name, a
 * port that is not a number in 1..255, a name too long, too many entries,
 * or '^'/'=' anywhere but first is an error. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/net/ib/ib.h"

static const char *skip_blanks(const char *s, const char *end) {
  while (s < end && isspace((unsigned char)*s)) s++;
  return s;
}

static const char *trim_end(const char *s, const char *end) {
  while (end > s && isspace((unsigned char)end[-1])) end--;
  return end;
}

/* Parses one entry [s, end), already trimmed and not empty. */
static int parse_entry(const char *s, const char *end, int k, struct weft_ib_hca_entry *e,
                       char *why, size_t len) {
  const char *colon = memchr(s, ':', (size_t)(end - s));
  const char *name_end = trim_end(s, colon ? colon : end);
  size_t n = (size_t)(name_end - s);
  int w = (int)(end - s);
  if (n == 0) {
    snprintf(why, len, "entry %d '%.*s' has no device name (expected name[:port])", k, w, s);
    return -1;
  }
  if (memchr(s, '^', n) != NULL || memchr(s, '=', n) != NULL) {
    snprintf(why, len, "entry %d '%.*s': '^' and '=' may only open the whole value", k, w, s);
    return -1;
  }
  if (n >= sizeof(e->name)) {
    snprintf(why, len, "entry %d: device name longer than %d characters", k,
             (int)sizeof(e->name) - 1);
    return -1;
  }
  memcpy(e->name, s, n);
  e->name[n] = '\0';
  e->port = -1;
  if (colon == NULL) return 0;
  const char *p = skip_blanks(colon + 1, end);
  char digits[8] = "";
  size_t pn = (size_t)(end - p);
  char *stop = NULL;
  long port = -1;
  if (pn > 0 && pn < sizeof(digits)) {
    memcpy(digits, p, pn);
    digits[pn] = '\0';
    port = isdigit((unsigned char)digits[0]) ? strtol(digits, &stop, 10) : -1;
  }
  if (port < 1 || port > 255 || stop == NULL || *stop != '\0') {
    snprintf(why, len, "entry %d '%.*s': port '%.*s' is not a number in 1..255", k, w, s, (int)pn,
             p);
    return -1;
  }
  e->port = (int)port;
  return 0;
}

int weft_ib_hca_parse(const char *value, struct weft_ib_hca_filter *out, char *why_out,
                      size_t why_len) {
  struct weft_ib_hca_filter f;
  memset(&f, 0, sizeof(f));
  if (value == NULL) value = "";
  const char *end = value + strlen(value);
  const char *s = skip_blanks(value, end);
  if (s < end && *s == '^') f.exclude = 1, s = skip_blanks(s + 1, end);
  if (s < end && *s == '=') f.exact = 1, s = skip_blanks(s + 1, end);
  for (int k = 1; s < end; k++) {
    const char *comma = memchr(s, ',', (size_t)(end - s));
    const char *e_end = comma ? comma : end;
    const char *b = skip_blanks(s, e_end);
    const char *t = trim_end(b, e_end);
    s = comma ? comma + 1 : end;
    if (b == t) continue; /* an empty entry ("a,,b"), skipped as NCCL does */
    if (f.n == WEFT_IB_HCA_MAX) {
      snprintf(why_out, why_len, "more than %d entries", WEFT_IB_HCA_MAX);
      return -1;
    }
    if (parse_entry(b, t, k, &f.e[f.n], why_out, why_len) != 0) return -1;
    f.n++;
  }
  if (f.n == 0 && (f.exclude || f.exact)) {
    /* NCCL would exclude every port for "^": say so rather than guess. */
    snprintf(why_out, why_len, "'%s' names no device (expected [^][=]name[:port],...)", value);
    return -1;
  }
  *out = f;
  return 0;
}

static int entry_matches(const struct weft_ib_hca_entry *e, int exact, const char *dev, int port) {
  int name_ok = exact ? strcmp(dev, e->name) == 0 : strncmp(dev, e->name, strlen(e->name)) == 0;
  return name_ok && (e->port == -1 || port == -1 || e->port == port);
}

int weft_ib_hca_keeps(const struct weft_ib_hca_filter *f, const char *dev, int port) {
  if (f->n == 0) return 1;
  int matched = 0;
  for (int i = 0; i < f->n && !matched; i++) matched = entry_matches(&f->e[i], f->exact, dev, port);
  return matched != f->exclude;
}
