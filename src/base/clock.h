/* Milliseconds on a monotonic clock; deadlines are absolute values of it.
 * Every bounded wait (bootstrap, transports, engines) reads this clock. */
#ifndef WEFT_BASE_CLOCK_H
#define WEFT_BASE_CLOCK_H

#include <stdint.h>

int64_t weft_time_ms(void);
/* The same clock read coarsely (CLOCK_MONOTONIC_COARSE: a few ms behind
 * at most, and a fraction of the cost), for rate limits of tens of ms on
 * a per-call path. */
int64_t weft_time_ms_coarse(void);
/* Nanoseconds on the same clock, for accounting where time went. */
int64_t weft_time_ns(void);
/* now + WEFT_TIMEOUT seconds. */
int64_t weft_deadline_default(void);

#endif
