/* Milliseconds on a monotonic clock; deadlines are absolute values of it.
 * Every bounded wait (bootstrap, transports, engines) reads this clock. */
#ifndef WEFT_BASE_CLOCK_H
#define WEFT_BASE_CLOCK_H

#include <stdint.h>

int64_t weft_time_ms(void);
/* Nanoseconds on the same clock, for accounting where time went. */
int64_t weft_time_ns(void);
/* now + WEFT_TIMEOUT seconds. */
int64_t weft_deadline_default(void);

#endif
