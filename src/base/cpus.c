/* See base/cpus.h. */
#include "base/cpus.h"

#include <sched.h>

int weft_cpus_usable(void) {
  cpu_set_t set;
  int n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 0;
  return n > 0 ? n : 1;
}
