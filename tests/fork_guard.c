/* Counts this process's threads before a test forks (see fork_guard.h). */
#include "fork_guard.h"

#include <dirent.h>
#include <errno.h>
#include <time.h>

/* ThreadSanitizer runs background threads of its own (one, and one more
 * after a fork), which /proc cannot tell from others. It checks forks
 * itself: a child forked from a process with other threads that starts a
 * thread is reported and dies (die_after_fork). So under it, this check
 * stands aside. */
#if defined(__SANITIZE_THREAD__)
#define TSAN_CHECKS_FORK 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN_CHECKS_FORK 1
#endif
#endif
#ifndef TSAN_CHECKS_FORK
#define TSAN_CHECKS_FORK 0
#endif

int fork_guard_threads(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int fork_guard_wait(int wait_ms) {
  double deadline = now_s() + wait_ms / 1000.0;
  for (;;) {
    int n = TSAN_CHECKS_FORK ? 1 : fork_guard_threads();
    /* Without /proc there is nothing to check against. */
    if (n <= 1) return 0;
    if (now_s() >= deadline) return n;
    struct timespec ts = {0, 2000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
}
