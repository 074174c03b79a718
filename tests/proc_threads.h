/* Threads of the calling process by name, for tests that check which
 * helper threads the library started. */
#ifndef WEFT_TESTS_PROC_THREADS_H
#define WEFT_TESTS_PROC_THREADS_H

/* Threads whose name (/proc/self/task/N/comm) starts with prefix. */
int proc_threads_named(const char *prefix);

#endif
