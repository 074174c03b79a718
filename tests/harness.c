/* The multi-rank test harness: N processes or N threads on one unique id,
 * bounded by a deadline, reporting which rank failed and why. */
#include "harness.h"

#include "fork_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MSG_LEN 1024
/* How long the other ranks may go on after one failed (they often fail
 * with a message worth reading, weft promising errors rather than hangs). */
#define GRACE_S 15.0
/* How long the last run's bootstrap root (a detached thread that ends once
 * its ranks have their ring) may take to go before ranks are forked. */
#define FORK_WAIT_MS 5000

/* One message slot per rank, shared with forked ranks. */
static char *msg_area;
static int msg_nranks;
static _Thread_local int cur_rank = -1;

int harness_rank(void) {
  return cur_rank;
}

double harness_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void harness_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

int harness_fail(const char *file, int line, const char *fmt, ...) {
  char text[MSG_LEN];
  int n = snprintf(text, sizeof text, "%s:%d: ", file, line);
  if (n < 0 || (size_t)n >= sizeof text) n = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text + n, sizeof text - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[harness rank %d] %s\n", cur_rank, text);
  fflush(stderr);
  if (msg_area != NULL && cur_rank >= 0 && cur_rank < msg_nranks) {
    char *slot = msg_area + (size_t)cur_rank * MSG_LEN;
    if (slot[0] == '\0') snprintf(slot, MSG_LEN, "%s", text);
  }
  return 1;
}

void harness_env_defaults(void) {
  setenv("WEFT_DEVICE", "cpu", 0);
  setenv("WEFT_TIMEOUT", "10", 0);
}

void harness_append(char *buf, size_t len, const char *fmt, ...) {
  size_t used = strnlen(buf, len);
  if (used + 1 >= len) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + used, len - used, fmt, ap);
  va_end(ap);
}

enum rank_state { RANK_RUNNING, RANK_OK, RANK_FAILED, RANK_KILLED, RANK_NOT_STARTED };

struct rank_slot {
  enum rank_state state;
  int status; /* wait status (processes) or return value (threads) */
  pid_t pid;
};

static void report(char *why, size_t why_len, const struct rank_slot *slots, int nranks,
                   int nstart) {
  for (int r = 0; r < nranks; r++) {
    const struct rank_slot *s = &slots[r];
    const char *msg = msg_area + (size_t)r * MSG_LEN;
    switch (s->state) {
      case RANK_OK:
      case RANK_NOT_STARTED: continue;
      case RANK_RUNNING:
      case RANK_KILLED:
        harness_append(why, why_len, "rank %d: still running at the deadline, killed", r);
        break;
      case RANK_FAILED:
        if (s->pid > 0 && WIFSIGNALED(s->status))
          harness_append(why, why_len, "rank %d: died of signal %d (%s)", r, WTERMSIG(s->status),
                         strsignal(WTERMSIG(s->status)));
        else if (s->pid > 0)
          harness_append(why, why_len, "rank %d: exited with status %d", r, WEXITSTATUS(s->status));
        else
          harness_append(why, why_len, "rank %d: returned %d", r, s->status);
        break;
    }
    harness_append(why, why_len, "%s%s; ", msg[0] ? ": " : "", msg);
  }
  if (why[0] == '\0')
    harness_append(why, why_len, "every rank of %d (%d started) failed to report", nranks, nstart);
}

/* Reads the id the parent sends; 0 on success. */
static int read_id(int fd, ncclUniqueId *id) {
  size_t got = 0;
  while (got < sizeof *id) {
    ssize_t n = read(fd, (char *)id + got, sizeof *id - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

/* Ranks are forked before the parent calls ncclGetUniqueId, which starts
 * threads: a child forked from a threaded process may inherit a lock some
 * other thread held (the allocator's, the library's) and hang on it. The id
 * then reaches each rank through a pipe. A process that still has threads
 * here (a communicator of its own, threads mode before procs mode) gets a
 * clear failure instead of an occasional hang. */
static int run_procs(int nranks, int nstart, double deadline, harness_rank_fn fn, void *arg,
                     int no_id, struct rank_slot *slots, char *why, size_t why_len) {
  pid_t parent = getpid();
  int threads = fork_guard_wait(FORK_WAIT_MS);
  if (threads != 0) {
    harness_append(why, why_len,
                   "harness: cannot fork %d rank processes: this process has %d threads (a "
                   "communicator, or threads-mode ranks, still running); fork the ranks before "
                   "its first NCCL call, or run them as threads; ",
                   nstart, threads);
    return 1;
  }
  int *pipes = calloc((size_t)nstart, sizeof *pipes);
  if (pipes == NULL) return harness_fail(__FILE__, __LINE__, "out of memory");
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < nstart; r++) {
    int fds[2];
    pid_t pid = -1;
    if (pipe(fds) == 0) {
      pid = fork();
      if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
      }
    }
    if (pid < 0) {
      harness_fail(__FILE__, __LINE__, "pipe or fork for rank %d: %s", r, strerror(errno));
      nstart = r; /* the ones started read EOF below and exit */
      deadline = 0;
      break;
    }
    if (pid == 0) {
      /* A rank must never outlive the test that started it. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      for (int k = 0; k < r; k++) close(pipes[k]);
      close(fds[1]);
      ncclUniqueId id;
      if (read_id(fds[0], &id) != 0) _exit(98); /* the parent gave up */
      close(fds[0]);
      cur_rank = r;
      int rc = fn(r, nranks, id, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc == 0 ? 0 : 1);
    }
    close(fds[0]);
    pipes[r] = fds[1];
    slots[r].pid = pid;
    slots[r].state = RANK_RUNNING;
  }

  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclResult_t res = no_id || nstart == 0 ? ncclSuccess : ncclGetUniqueId(&id);
  if (res != ncclSuccess)
    harness_append(why, why_len, "ncclGetUniqueId -> %d (%s): %s; ", (int)res,
                   ncclGetErrorString(res), ncclGetLastError(NULL));
  for (int r = 0; r < nstart; r++) {
    if (res == ncclSuccess && write(pipes[r], &id, sizeof id) != (ssize_t)sizeof id)
      harness_fail(__FILE__, __LINE__, "sending the id to rank %d: %s", r, strerror(errno));
    close(pipes[r]);
  }
  free(pipes);

  int running = 0;
  for (int r = 0; r < nstart; r++) running += slots[r].state == RANK_RUNNING;
  while (running > 0) {
    for (int r = 0; r < nstart; r++) {
      if (slots[r].state != RANK_RUNNING) continue;
      int st = 0;
      pid_t got = waitpid(slots[r].pid, &st, WNOHANG);
      if (got == slots[r].pid || (got < 0 && errno == ECHILD)) {
        slots[r].status = st;
        slots[r].state =
            got == slots[r].pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? RANK_OK : RANK_FAILED;
        running--;
        if (slots[r].state == RANK_FAILED && deadline > harness_now() + GRACE_S)
          deadline = harness_now() + GRACE_S;
      }
    }
    if (running > 0 && harness_now() > deadline) {
      for (int r = 0; r < nstart; r++) {
        if (slots[r].state != RANK_RUNNING) continue;
        kill(slots[r].pid, SIGKILL);
        waitpid(slots[r].pid, &slots[r].status, 0);
        slots[r].state = RANK_KILLED;
      }
      running = 0;
    }
    if (running > 0) harness_sleep_ms(5);
  }
  return res != ncclSuccess;
}

struct thread_ctx {
  harness_rank_fn fn;
  void *arg;
  ncclUniqueId id;
  int rank;
  int nranks;
  int rc;
  int finished; /* under *lock */
  pthread_mutex_t *lock;
  pthread_cond_t *cond;
  int *done;
};

static void *thread_main(void *p) {
  struct thread_ctx *c = p;
  cur_rank = c->rank;
  c->rc = c->fn(c->rank, c->nranks, c->id, c->arg);
  pthread_mutex_lock(c->lock);
  c->finished = 1;
  (*c->done)++;
  pthread_cond_signal(c->cond);
  pthread_mutex_unlock(c->lock);
  return NULL;
}

static int run_threads(int nranks, int nstart, double deadline, harness_rank_fn fn, void *arg,
                       ncclUniqueId id, struct rank_slot *slots) {
  pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t cond;
  pthread_condattr_t cattr;
  pthread_condattr_init(&cattr);
  pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
  pthread_cond_init(&cond, &cattr);
  pthread_condattr_destroy(&cattr);

  int done = 0, started = 0;
  struct thread_ctx *ctx = calloc((size_t)nstart, sizeof *ctx);
  pthread_t *tids = calloc((size_t)nstart, sizeof *tids);
  if (ctx == NULL || tids == NULL) {
    free(ctx);
    free(tids);
    return harness_fail(__FILE__, __LINE__, "out of memory");
  }
  for (int r = 0; r < nstart; r++) {
    ctx[r] = (struct thread_ctx){fn, arg, id, r, nranks, -1, 0, &lock, &cond, &done};
    int err = pthread_create(&tids[r], NULL, thread_main, &ctx[r]);
    if (err != 0) {
      /* The ranks already started may wait for this one forever. */
      fprintf(stderr, "harness: pthread_create of rank %d: %s\n", r, strerror(err));
      _exit(1);
    }
    started++;
  }

  pthread_mutex_lock(&lock);
  while (done < started) {
    double left = deadline - harness_now();
    if (left <= 0) break;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += (time_t)left;
    ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&cond, &lock, &ts);
  }
  int all_done = done == started;
  pthread_mutex_unlock(&lock);

  if (!all_done) {
    /* Threads cannot be killed, and they may still use the caller's data:
     * say who is stuck and end the test process. */
    char why[4096] = "";
    for (int r = 0; r < nstart; r++) slots[r].state = RANK_RUNNING;
    pthread_mutex_lock(&lock);
    for (int r = 0; r < nstart; r++)
      if (ctx[r].finished) slots[r].state = ctx[r].rc == 0 ? RANK_OK : RANK_FAILED;
    pthread_mutex_unlock(&lock);
    report(why, sizeof why, slots, nranks, nstart);
    fprintf(stderr, "harness: threads did not finish in time: %s\n", why);
    fflush(stderr);
    _exit(1);
  }
  for (int r = 0; r < nstart; r++) {
    pthread_join(tids[r], NULL);
    slots[r].pid = 0;
    slots[r].status = ctx[r].rc;
    slots[r].state = ctx[r].rc == 0 ? RANK_OK : RANK_FAILED;
  }
  pthread_cond_destroy(&cond);
  free(ctx);
  free(tids);
  return 0;
}

int harness_run(const struct harness_opts *opts, harness_rank_fn fn, void *arg, char *why,
                size_t why_len) {
  static char dummy[1];
  if (why == NULL || why_len == 0) {
    why = dummy;
    why_len = sizeof dummy;
  }
  why[0] = '\0';
  int nranks = opts->nranks;
  int nstart = opts->nstart > 0 ? opts->nstart : nranks;
  if (nranks < 1 || nstart > nranks) {
    harness_append(why, why_len, "harness: bad nranks %d / nstart %d", nranks, nstart);
    return 1;
  }
  double deadline = harness_now() + (opts->timeout_s > 0 ? opts->timeout_s : 60);

  size_t area_len = (size_t)nranks * MSG_LEN;
  msg_area = mmap(NULL, area_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (msg_area == MAP_FAILED) {
    msg_area = NULL;
    harness_append(why, why_len, "harness: mmap: %s", strerror(errno));
    return 1;
  }
  msg_nranks = nranks;

  struct rank_slot *slots = calloc((size_t)nranks, sizeof *slots);
  if (slots == NULL) {
    harness_append(why, why_len, "harness: out of memory");
    munmap(msg_area, area_len);
    msg_area = NULL;
    return 1;
  }
  for (int r = 0; r < nranks; r++) slots[r].state = RANK_NOT_STARTED;

  int failed = 0;
  if (opts->mode == HARNESS_THREADS) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    ncclResult_t res = opts->no_id ? ncclSuccess : ncclGetUniqueId(&id);
    if (res != ncclSuccess) {
      harness_append(why, why_len, "ncclGetUniqueId -> %d (%s): %s", (int)res,
                     ncclGetErrorString(res), ncclGetLastError(NULL));
      failed = 1;
    } else {
      run_threads(nranks, nstart, deadline, fn, arg, id, slots);
    }
  } else {
    failed = run_procs(nranks, nstart, deadline, fn, arg, opts->no_id, slots, why, why_len);
  }
  for (int r = 0; r < nstart; r++) failed |= slots[r].state != RANK_OK;
  if (failed) report(why, why_len, slots, nranks, nstart);
  free(slots);
  munmap(msg_area, area_len);
  msg_area = NULL;
  msg_nranks = 0;
  return failed;
}

int harness_procs(int nranks, int timeout_s, harness_rank_fn fn, void *arg, char *why,
                  size_t why_len) {
  struct harness_opts o = {HARNESS_PROCS, nranks, 0, timeout_s, 0};
  return harness_run(&o, fn, arg, why, why_len);
}

int harness_threads(int nranks, int timeout_s, harness_rank_fn fn, void *arg, char *why,
                    size_t why_len) {
  struct harness_opts o = {HARNESS_THREADS, nranks, 0, timeout_s, 0};
  return harness_run(&o, fn, arg, why, why_len);
}

int harness_solo(int timeout_s, harness_rank_fn fn, void *arg, char *why, size_t why_len) {
  struct harness_opts o = {HARNESS_THREADS, 1, 0, timeout_s, 1};
  return harness_run(&o, fn, arg, why, why_len);
}

extern char **environ;

/* This process's environment with env's changes ("NAME=value" sets, "NAME"
 * unsets), as a malloc'd array of pointers into both. */
static char **child_environ(const char *const env[]) {
  size_t n = 0, extra = 0;
  while (environ[n] != NULL) n++;
  while (env != NULL && env[extra] != NULL) extra++;
  char **out = calloc(n + extra + 1, sizeof *out);
  if (out == NULL) return NULL;
  size_t len = 0;
  for (size_t i = 0; i < n; i++) out[len++] = environ[i];
  for (size_t i = 0; i < extra; i++) {
    const char *eq = strchr(env[i], '=');
    size_t name = eq != NULL ? (size_t)(eq - env[i]) : strlen(env[i]);
    size_t keep = 0;
    for (size_t k = 0; k < len; k++)
      if (!(strncmp(out[k], env[i], name) == 0 && out[k][name] == '=')) out[keep++] = out[k];
    len = keep;
    if (eq != NULL) out[len++] = (char *)env[i];
  }
  out[len] = NULL;
  return out;
}

/* Opens path for a child's output, close-on-exec (the child dup2s it);
 * NULL path: -2, nothing to redirect. */
static int open_output(const char *path) {
  return path == NULL ? -2 : open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

/* Everything the child needs is prepared before fork: between fork and exec
 * it makes only async-signal-safe calls, since this process may have threads
 * (a CUDA driver's, a communicator's) whose locks the child would inherit
 * held; setenv or malloc there can hang. */
int harness_exec_self(char *const argv[], const char *const env[], const char *out_path,
                      const char *err_path, int timeout_s, int *pid_out) {
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return -1;
  self[n] = '\0';
  size_t argc = 0;
  while (argv[argc] != NULL) argc++;
  char **args = calloc(argc + 1, sizeof *args);
  char **envp = child_environ(env);
  int out_fd = open_output(out_path), err_fd = open_output(err_path);
  pid_t pid = -1;
  if (args != NULL && envp != NULL && out_fd != -1 && err_fd != -1) {
    args[0] = self;
    for (size_t i = 1; i < argc; i++) args[i] = argv[i];
    pid_t parent = getpid();
    fflush(stdout);
    fflush(stderr);
    pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      if ((out_fd >= 0 && dup2(out_fd, STDOUT_FILENO) < 0) ||
          (err_fd >= 0 && dup2(err_fd, STDERR_FILENO) < 0))
        _exit(126);
      execve(self, args, envp);
      _exit(127);
    }
  }
  if (out_fd >= 0) close(out_fd);
  if (err_fd >= 0) close(err_fd);
  free(args);
  free(envp);
  if (pid < 0) return -1;
  if (pid_out != NULL) *pid_out = pid;

  double deadline = harness_now() + (timeout_s > 0 ? timeout_s : 60);
  for (;;) {
    int st;
    pid_t got = waitpid(pid, &st, WNOHANG);
    if (got == pid) return st;
    if (got < 0 && errno != EINTR) return -1;
    if (harness_now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    harness_sleep_ms(5);
  }
}

char *harness_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 4096, len = 0;
  char *buf = malloc(cap);
  while (buf != NULL) {
    size_t got = fread(buf + len, 1, cap - len - 1, f);
    len += got;
    if (len + 1 < cap) break;
    cap *= 2;
    char *bigger = realloc(buf, cap);
    if (bigger == NULL) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = bigger;
  }
  fclose(f);
  if (buf != NULL) buf[len] = '\0';
  return buf;
}

void harness_log_to_dir(char *dir, size_t size, const char *subsys) {
  snprintf(dir, size, "/tmp/weft-test-logs-XXXXXX");
  if (mkdtemp(dir) == NULL) {
    fprintf(stderr, "harness: mkdtemp failed: %s\n", strerror(errno));
    abort();
  }
  char file[300];
  snprintf(file, sizeof(file), "%s/log.%%p", dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
  setenv("NCCL_DEBUG_FILE", file, 1);
}

char *harness_logs_take(const char *dir) {
  size_t len = 0;
  char *all = calloc(1, 1);
  DIR *d = opendir(dir);
  if (all == NULL || d == NULL) {
    fprintf(stderr, "harness: cannot read logs in %s\n", dir);
    abort();
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "log.", 4) != 0) continue;
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    char *text = harness_read_file(path);
    if (text != NULL) {
      size_t n = strlen(text);
      char *grown = realloc(all, len + n + 1);
      if (grown == NULL) abort();
      all = grown;
      memcpy(all + len, text, n + 1);
      len += n;
      free(text);
    }
    unlink(path);
  }
  closedir(d);
  return all;
}

int harness_procs_logged(int nranks, int timeout_s, const char *subsys, harness_rank_fn fn,
                         void *arg, char **logs_out, char *why, size_t why_len) {
  char dir[64];
  harness_log_to_dir(dir, sizeof(dir), subsys);
  int rc = harness_procs(nranks, timeout_s, fn, arg, why, why_len);
  *logs_out = harness_logs_take(dir);
  rmdir(dir);
  return rc;
}

int harness_links_via(const char *logs, const char *via) {
  char line[2][96];
  snprintf(line[0], sizeof(line[0]), "rank 0 -> rank 1 channel 0 via %s", via);
  snprintf(line[1], sizeof(line[1]), "rank 1 -> rank 0 channel 0 via %s", via);
  return strstr(logs, line[0]) != NULL && strstr(logs, line[1]) != NULL;
}

int harness_allreduce_ok(ncclComm_t comm, int nranks) {
  float x = 1.0f;
  HNCCL(ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, NULL));
  HCHECK(x == (float)nranks, "all-reduce gave %g, expected %d", x, nranks);
  return 0;
}

ncclResult_t harness_init_nonblocking(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return ncclCommInitRankConfig(comm, nranks, id, rank, &config);
}

ncclResult_t harness_poll_async(ncclComm_t comm, double timeout_s, ncclResult_t *state) {
  double until = harness_now() + timeout_s;
  *state = ncclInProgress;
  while (harness_now() < until) {
    ncclResult_t res = ncclCommGetAsyncError(comm, state);
    if (res != ncclSuccess) return res;
    if (*state != ncclInProgress) break;
    harness_sleep_ms(1);
  }
  return ncclSuccess;
}

ncclResult_t harness_wait_ready(ncclComm_t comm) {
  ncclResult_t st = ncclInProgress;
  ncclResult_t res = harness_poll_async(comm, 30, &st);
  return res != ncclSuccess ? res : st;
}
