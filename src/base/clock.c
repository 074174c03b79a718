/* The monotonic clock every wait measures its deadline on (base/clock.h). */
#include "base/clock.h"

#include <time.h>

#include "base/param.h"

int64_t weft_time_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t weft_time_ms(void) {
  return weft_time_ns() / 1000000;
}

int64_t weft_time_ms_coarse(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return weft_time_ms();
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t weft_deadline_default(void) {
  return weft_time_ms() + weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
}
