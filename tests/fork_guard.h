/* Fork safety for the tests: a process forked from a threaded one gets a
 * copy of every lock another thread held at that moment (the allocator's, a
 * sanitizer's, the library's) and can hang on it forever; ASan makes that
 * likely. So tests fork rank processes before their first NCCL call (which
 * starts the bootstrap root thread) and hand the id over a pipe, or exec.
 * This header lets them check that they do. */
#ifndef WEFT_TESTS_FORK_GUARD_H
#define WEFT_TESTS_FORK_GUARD_H

/* The threads this process has now (from /proc/self/task), -1 if unknown. */
int fork_guard_threads(void);

/* Waits at most wait_ms for this process to be down to its one thread (a
 * finished communicator's detached bootstrap root ends on its own, a moment
 * after its ranks), so that it may fork. Returns 0 when it may, else the
 * number of threads it still has. Under ThreadSanitizer it returns 0 at
 * once: the sanitizer checks forks itself. */
int fork_guard_wait(int wait_ms);

#endif
