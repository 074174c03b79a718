/* The multi-rank test harness: runs one callback as every rank of a
 * communicator, either as N forked processes or as N threads of this
 * process, on one unique id made here, by the parent (for processes: after
 * they are forked, since ncclGetUniqueId starts threads, and handed over
 * through a pipe; so set the environment before calling the harness).
 *
 * Nothing here may hang a test: every run has a deadline, after which the
 * ranks still running are killed (processes) or abandoned (threads; the
 * harness then reports the failure and the test process exits). A failing
 * rank says why through harness_fail(), and the run's report names it.
 *
 * The harness uses only the public NCCL API. */
#ifndef WEFT_TESTS_HARNESS_H
#define WEFT_TESTS_HARNESS_H

#include <stddef.h>

#include "nccl.h"

/* What a rank runs. Return 0 on success; on failure return non-zero after
 * saying why with harness_fail() (HCHECK and HNCCL do both). */
typedef int (*harness_rank_fn)(int rank, int nranks, ncclUniqueId id, void *arg);

enum harness_mode {
  HARNESS_PROCS = 0,   /* one forked process per rank */
  HARNESS_THREADS = 1, /* one thread per rank, in this process */
};

struct harness_opts {
  enum harness_mode mode;
  int nranks;    /* ranks in the communicator */
  int nstart;    /* ranks actually started, 0..nstart-1 (0: all of them) */
  int timeout_s; /* deadline for the whole run (0: 60 s) */
  int no_id;     /* 1: skip ncclGetUniqueId; ranks get a zeroed id */
};

/* Gets a unique id, starts the ranks and waits for them. Returns 0 when
 * every started rank returned 0; otherwise non-zero, with a report naming
 * each failed rank and its message in why (always NUL-terminated). */
int harness_run(const struct harness_opts *opts, harness_rank_fn fn, void *arg, char *why,
                size_t why_len);

/* Shorthands: processes or threads, all ranks, one deadline. */
int harness_procs(int nranks, int timeout_s, harness_rank_fn fn, void *arg, char *why,
                  size_t why_len);
int harness_threads(int nranks, int timeout_s, harness_rank_fn fn, void *arg, char *why,
                    size_t why_len);

/* Runs fn(0, 1, zeroed id, arg) on one thread, without getting an id: for
 * tests where one thread drives everything (ncclCommInitAll) but failures
 * should still be reported through harness_fail and a deadline. */
int harness_solo(int timeout_s, harness_rank_fn fn, void *arg, char *why, size_t why_len);

/* Records why the calling rank failed (first message per rank is kept) and
 * prints it to stderr. Always returns 1, for `return harness_fail(...)`. */
int harness_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends printf output to buf (length len), never overflowing: how the
 * harnesses build their reports. */
void harness_append(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The rank the calling thread runs as (-1 outside the harness). */
int harness_rank(void);

/* Fails the current rank function unless cond holds. */
#define HCHECK(cond, ...)                                              \
  do {                                                                 \
    if (!(cond)) return harness_fail(__FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* Fails the current rank function unless call returns ncclSuccess. */
#define HNCCL(call)                                                                        \
  do {                                                                                     \
    ncclResult_t hnccl_res_ = (call);                                                      \
    if (hnccl_res_ != ncclSuccess)                                                         \
      return harness_fail(__FILE__, __LINE__, "%s -> %d (%s): %s", #call, (int)hnccl_res_, \
                          ncclGetErrorString(hnccl_res_), ncclGetLastError(NULL));         \
  } while (0)

/* A one-float sum all-reduce on comm (blocking) that must give nranks.
 * Returns 0, or non-zero after harness_fail(), like a rank function. */
int harness_allreduce_ok(ncclComm_t comm, int nranks);

/* Starts a non-blocking (config.blocking = 0) ncclCommInitRankConfig and
 * returns what it returned, for the caller to check. */
ncclResult_t harness_init_nonblocking(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);

/* Polls ncclCommGetAsyncError on comm until *state leaves ncclInProgress or
 * timeout_s seconds pass (it is then still ncclInProgress). Returns
 * ncclSuccess, or the first error ncclCommGetAsyncError itself returned. */
ncclResult_t harness_poll_async(ncclComm_t comm, double timeout_s, ncclResult_t *state);

/* Waits (30 s at most) for comm's state to leave ncclInProgress. Returns
 * that state, or the error ncclCommGetAsyncError returned, or
 * ncclInProgress on timeout: ncclSuccess only when comm is ready. */
ncclResult_t harness_wait_ready(ncclComm_t comm);

/* Sets the environment every weft test wants (host ranks, short waits)
 * unless the caller's environment says otherwise. Call first in main(),
 * before any NCCL call: weft reads its parameters once per process. */
void harness_env_defaults(void);

/* Runs this test binary again as a fresh process: argv is passed as is
 * (argv[0] is replaced by the binary's path), env lists "NAME=value" to set
 * and "NAME" to unset (NULL-terminated; may be NULL). The child's stdout and
 * stderr go to the files out_path and err_path (NULL: inherited). Waits at
 * most timeout_s seconds, then kills it. Returns the child's wait status, or
 * -1 if it could not be started or had to be killed; *pid_out (may be NULL)
 * gets the child's pid. */
int harness_exec_self(char *const argv[], const char *const env[], const char *out_path,
                      const char *err_path, int timeout_s, int *pid_out);

/* Reads a whole file into a NUL-terminated malloc'd buffer (NULL if it
 * cannot be read). */
char *harness_read_file(const char *path);

/* Monotonic seconds, for deadlines in polling loops. */
double harness_now(void);

/* Sleeps ms milliseconds (through signals). */
void harness_sleep_ms(int ms);

/* NCCL_DEBUG=INFO with subsystems `subsys`, one log file per process
 * (log.<pid>) in a fresh directory whose path goes to dir. */
void harness_log_to_dir(char *dir, size_t size, const char *subsys);
/* Every log.* file of dir, concatenated (malloc'd); removes those files (the
 * directory stays, for the caller to reuse or rmdir). */
char *harness_logs_take(const char *dir);
/* Whether logs (NCCL_DEBUG_SUBSYS=INIT) say that channel 0 between ranks 0
 * and 1 runs over transport `via` ("shm", "net_socket") both ways. */
int harness_links_via(const char *logs, const char *via);
/* harness_procs with the ranks logging at INFO for subsys (as
 * harness_log_to_dir): what they logged goes to *logs_out (malloc'd), the
 * log directory is removed. */
int harness_procs_logged(int nranks, int timeout_s, const char *subsys, harness_rank_fn fn,
                         void *arg, char **logs_out, char *why, size_t why_len);

#endif
