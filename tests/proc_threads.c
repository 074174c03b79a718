/* See proc_threads.h. */
#include "proc_threads.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

int proc_threads_named(const char *prefix) {
  DIR *d = opendir("/proc/self/task");
  int n = 0;
  struct dirent *e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    char path[300], name[32] = "";
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(name, sizeof name, f) != NULL) n += strncmp(name, prefix, strlen(prefix)) == 0;
    fclose(f);
  }
  if (d != NULL) closedir(d);
  return n;
}

double proc_cpu_s(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
         (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}
