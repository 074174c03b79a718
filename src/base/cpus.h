/* How many CPUs this process may run on (its affinity mask, as taskset or
 * a container limits it): what spin-or-sleep decisions and helper-thread
 * counts size themselves by. */
#ifndef WEFT_BASE_CPUS_H
#define WEFT_BASE_CPUS_H

/* At least 1. */
int weft_cpus_usable(void);

#endif
