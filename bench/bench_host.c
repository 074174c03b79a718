/* Facts about the host a rank runs on, and the clock that times it. */
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

void bench_rank_info_host(struct bench_rank_info *info) {
  memset(info, 0, sizeof(*info));
  info->pid = (int32_t)getpid();
  info->device = -1;
  if (gethostname(info->host, sizeof(info->host) - 1) != 0) strcpy(info->host, "unknown");
  info->host[sizeof(info->host) - 1] = '\0';
  strcpy(info->label, "cpu");
  strcpy(info->devname, "host");
}

double bench_now(void) {
  struct timespec ts;

  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
