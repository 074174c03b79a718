/* Starting the ranks' processes and handing each the unique id.
 *
 * -np N (the default, N = 2): the parent forks N children first, then calls
 * ncclGetUniqueId and writes the id down a pipe to each. Forking before the
 * library is touched means no child inherits its threads or locks half-way;
 * the parent stays alive (its root listener serves the bootstrap) and waits.
 * -np 1: no fork; this process is the only one.
 * Under mpirun (built with MPI): MPI rank 0 makes the id and broadcasts it. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef WEFT_BENCH_MPI
#define WEFT_BENCH_MPI 0
#endif
#if WEFT_BENCH_MPI
#include <mpi.h>
#endif

#include "bench_weft.h"

/* How long the other ranks get to finish after one has failed, before the
 * parent kills them: weft's own timeouts end a hang, but they are long. */
#define BENCH_FAIL_GRACE_S 10.0

static int get_id(ncclUniqueId *id) {
  ncclResult_t res = ncclGetUniqueId(id);

  if (res != ncclSuccess) {
    const char *last = ncclGetLastError(NULL);
    fprintf(stderr, "weft-bench: ncclGetUniqueId failed: %s%s%s\n", ncclGetErrorString(res),
            last && *last ? ": " : "", last ? last : "");
    return -1;
  }
  return 0;
}

/* ---- Forked ranks ---------------------------------------------------------- */

static int read_full(int fd, void *buf, size_t len) {
  char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

static int write_full(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    p += n;
    len -= (size_t)n;
  }
  return 0;
}

/* The child's side: wait for the id (EOF: the parent gave up), run. */
static void child_main(const struct bench_args *a, bench_proc_fn fn, int fd, int proc) {
  ncclUniqueId id;
  int rc = BENCH_EXIT_ERROR;

  /* WEFT_BENCH_HOSTS=1: each process is a host of its own (NCCL_HOSTID
   * "<NCCL_HOSTID or weft-bench>-<process>", set before weft reads it), so
   * ranks of different processes talk over the network, as across hosts. */
  const char *hosts = getenv("WEFT_BENCH_HOSTS");
  if (hosts != NULL && strcmp(hosts, "1") == 0) {
    const char *base = getenv("NCCL_HOSTID");
    char host[256];
    snprintf(host, sizeof(host), "%s-%d", base != NULL ? base : "weft-bench", proc);
    setenv("NCCL_HOSTID", host, 1);
  }
  if (read_full(fd, &id, sizeof(id)) == 0) rc = fn(a, &id, proc, a->nprocs, proc);
  close(fd);
  exit(rc);
}

/* A child's exit status as an enum bench_exit, reporting deaths by signal. */
static int child_status(int proc, pid_t pid, int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status))
    fprintf(stderr, "weft-bench: process %d (pid %d) died of signal %d (%s)\n", proc, (int)pid,
            WTERMSIG(status), strsignal(WTERMSIG(status)));
  return BENCH_EXIT_ERROR;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
    ;
}

/* Waits for every child; once one fails, the rest get a grace period and
 * are then killed, so one broken rank never leaves the run hanging. */
static int wait_children(pid_t *pids, int n) {
  int left = n, rc = 0;
  double deadline = 0;

  while (left > 0) {
    for (int p = 0; p < n; p++) {
      int status;
      if (pids[p] <= 0 || waitpid(pids[p], &status, WNOHANG) != pids[p]) continue;
      int code = child_status(p, pids[p], status);
      pids[p] = 0;
      left--;
      rc = code > rc ? code : rc;
      if (code != 0 && deadline == 0) deadline = bench_now() + BENCH_FAIL_GRACE_S;
    }
    if (left > 0 && deadline > 0 && bench_now() > deadline) {
      for (int p = 0; p < n; p++)
        if (pids[p] > 0) {
          fprintf(stderr,
                  "weft-bench: killing process %d (pid %d): still "
                  "running %.0f s after another one failed\n",
                  p, (int)pids[p], BENCH_FAIL_GRACE_S);
          kill(pids[p], SIGKILL);
        }
      deadline = bench_now() + 1e9; /* kill once; then just reap */
    }
    if (left > 0) sleep_ms(20);
  }
  return rc;
}

static int launch_fork(const struct bench_args *a, bench_proc_fn fn) {
  const int n = a->nprocs;
  pid_t *pids = calloc((size_t)n, sizeof(*pids));
  int *fds = calloc((size_t)n, sizeof(*fds));
  ncclUniqueId id;
  int started = 0, rc;

  if (!pids || !fds) {
    fprintf(stderr, "weft-bench: out of memory\n");
    exit(BENCH_EXIT_ERROR);
  }
  signal(SIGPIPE, SIG_IGN); /* a child that died must not kill the parent */
  fflush(NULL);             /* nothing buffered is printed twice */
  for (; started < n; started++) {
    int fd[2];
    if (pipe(fd) != 0) {
      perror("weft-bench: pipe");
      break;
    }
    pid_t pid = fork();
    if (pid == 0) {
      for (int p = 0; p < started; p++) close(fds[p]); /* other children's pipes */
      close(fd[1]);
      child_main(a, fn, fd[0], started);
    }
    close(fd[0]);
    if (pid < 0) {
      perror("weft-bench: fork");
      close(fd[1]);
      break;
    }
    pids[started] = pid;
    fds[started] = fd[1];
  }
  /* Every child gets the id or, if anything failed, EOF. */
  int ok = started == n && get_id(&id) == 0;
  for (int p = 0; p < started; p++) {
    if (ok && write_full(fds[p], &id, sizeof(id)) != 0)
      fprintf(stderr, "weft-bench: cannot hand the id to process %d\n", p);
    close(fds[p]);
  }
  rc = wait_children(pids, started);
  free(pids);
  free(fds);
  return ok ? rc : BENCH_EXIT_ERROR;
}

/* ---- MPI ----------------------------------------------------------------- */

/* Environment that MPI launchers (Open MPI, MPICH/Hydra and Slurm's PMI,
 * MVAPICH) set in the processes they start. */
static int under_mpi(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (getenv(vars[i])) return 1;
  return 0;
}

int bench_ranks_have_mpi(void) {
  return WEFT_BENCH_MPI;
}

#if WEFT_BENCH_MPI
static int launch_mpi(const struct bench_args *a, bench_proc_fn fn) {
  ncclUniqueId id;
  int rank, size, local, ok = 1, rc = BENCH_EXIT_ERROR;
  MPI_Comm node;

  MPI_Init(NULL, NULL);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  if (rank == 0 && a->nprocs_given)
    fprintf(stderr, "weft-bench: -np ignored under mpirun: %d processes\n", size);
  if (rank == 0) ok = get_id(&id) == 0;
  MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (ok) {
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    rc = fn(a, &id, rank, size, local);
  }
  MPI_Finalize();
  return rc;
}
#endif

int bench_ranks_launch(const struct bench_args *a, bench_proc_fn fn) {
  ncclUniqueId id;

  if (under_mpi()) {
#if WEFT_BENCH_MPI
    return launch_mpi(a, fn);
#else
    fprintf(stderr,
            "weft-bench: started by an MPI launcher, but built "
            "without MPI (meson -Dmpi=enabled); run it without "
            "mpirun, with -np N\n");
    return BENCH_EXIT_ERROR;
#endif
  }
  if (a->nprocs > 1) return launch_fork(a, fn);
  if (get_id(&id) != 0) return BENCH_EXIT_ERROR;
  return fn(a, &id, 0, 1, 0);
}
