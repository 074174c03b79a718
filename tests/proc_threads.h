/* The calling process's threads and CPU time, for tests that check which
 * helper threads the library started and that they sleep when idle. */
#ifndef WEFT_TESTS_PROC_THREADS_H
#define WEFT_TESTS_PROC_THREADS_H

/* Threads whose name (/proc/self/task/N/comm) starts with prefix. */
int proc_threads_named(const char *prefix);

/* CPU seconds the process has used so far, user and system, all threads. */
double proc_cpu_s(void);

#endif
