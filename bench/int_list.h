/* A comma list of counts on a bench tool's command line ("1,4,16"), shared
 * by weft-tcp-streams and weft-net-bench. Header-only: weft-tcp-streams
 * links no weft code. */
#ifndef WEFT_BENCH_INT_LIST_H
#define WEFT_BENCH_INT_LIST_H

#include <stdlib.h>

/* Parses s into out: integers lo..hi separated by commas, at most cap of
 * them. Returns how many, or -1 when s is not such a list. */
static inline int bench_int_list(const char *s, int *out, int cap, long lo, long hi) {
  int n = 0;
  for (const char *p = s; *p;) {
    char *end;
    long k = strtol(p, &end, 10);
    if (end == p || k < lo || k > hi || (*end && *end != ',') || n == cap) return -1;
    out[n++] = (int)k;
    p = *end ? end + 1 : end;
  }
  return n;
}

#endif
