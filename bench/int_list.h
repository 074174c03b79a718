/* A comma list of counts on a bench tool's command line ("1,4,16"), shared
 * by weft-tcp-streams and weft-net-bench. Header-only: weft-tcp-streams
 * links no weft code. */
#ifndef WEFT_BENCH_INT_LIST_H
#define WEFT_BENCH_INT_LIST_H

#include <stdio.h>
#include <stdlib.h>

/* Parses s, the value of the tool's flag, into out: integers lo..hi
 * separated by commas, at most cap of them; returns how many. Anything
 * else is a usage error (exit 2) naming the tool, the flag and an example
 * list. */
static inline int bench_int_list_arg(const char *tool, const char *flag, const char *example,
                                     const char *s, int *out, int cap, long lo, long hi) {
  int n = 0;
  for (const char *p = s; *p;) {
    char *end;
    long k = strtol(p, &end, 10);
    if (end == p || k < lo || k > hi || (*end && *end != ',') || n == cap) {
      fprintf(stderr, "%s: %s %s: expected a list such as %s (each %ld..%ld, at most %d of them)\n",
              tool, flag, s, example, lo, hi, cap);
      exit(2);
    }
    out[n++] = (int)k;
    p = *end ? end + 1 : end;
  }
  return n;
}

#endif
