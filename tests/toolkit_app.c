/* A program written only against NVIDIA's nccl.h (the CUDA toolkit's), linked
 * to weft's libnccl.so.2: 4 host ranks in 4 processes all-reduce and check
 * the result. It proves the drop-in promise: the same source and header a
 * NCCL user has, weft underneath. Exit 0 on success.
 *
 * The ranks are forked before ncclGetUniqueId, which starts a thread (the
 * bootstrap root): a child forked from a threaded process may inherit a
 * lock that thread held and hang. The id reaches them through pipes, as an
 * MPI program would broadcast it. */
#include <errno.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef WEFT_NCCL_H
#error "this program must be compiled against the CUDA toolkit's nccl.h, not weft's"
#endif

#define NRANKS 4
#define COUNT 1000003
/* Far more than the run needs, even under a sanitizer; a hang still ends. */
#define DEADLINE_S 90

static int run_rank(ncclUniqueId id, int rank) {
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, NRANKS, id, rank) != ncclSuccess) return 2;
  float *buf = malloc(COUNT * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1) * (float)(i % 7);
  ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL);
  int bad = r != ncclSuccess;
  for (size_t i = 0; i < COUNT && !bad; i++) bad = buf[i] != 10.0f * (float)(i % 7); /* 1+2+3+4 */
  if (bad) fprintf(stderr, "rank %d: %s\n", rank, r ? ncclGetErrorString(r) : "wrong result");
  free(buf);
  ncclCommDestroy(comm);
  return bad;
}

/* The child: waits for the id on fd, then runs its rank. */
static int rank_main(int fd, int rank) {
  ncclUniqueId id;
  size_t got = 0;
  while (got < sizeof(id)) {
    ssize_t n = read(fd, (char *)&id + got, sizeof(id) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return 3; /* the parent gave up */
    got += (size_t)n;
  }
  close(fd);
  return run_rank(id, rank);
}

/* Waits for every rank until the deadline, then kills the ones left.
 * Returns non-zero if any failed or hung. */
static int reap(pid_t *pids) {
  int failed = 0, left = NRANKS;
  time_t deadline = time(NULL) + DEADLINE_S;
  while (left > 0 && time(NULL) < deadline) {
    for (int r = 0; r < NRANKS; r++) {
      int status = 0;
      if (pids[r] <= 0 || waitpid(pids[r], &status, WNOHANG) != pids[r]) continue;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "rank %d failed (wait status 0x%x)\n", r, status);
        failed = 1;
      }
      pids[r] = 0;
      left--;
    }
    struct timespec ts = {0, 10000000L};
    nanosleep(&ts, NULL);
  }
  for (int r = 0; r < NRANKS; r++) {
    if (pids[r] <= 0) continue;
    fprintf(stderr, "rank %d still running after %d s: killed\n", r, DEADLINE_S);
    kill(pids[r], SIGKILL);
    waitpid(pids[r], NULL, 0);
    failed = 1;
  }
  return failed;
}

int main(void) {
  pid_t pids[NRANKS], parent = getpid();
  int pipes[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    int fds[2];
    if (pipe(fds) != 0 || (pids[r] = fork()) < 0) {
      perror("toolkit-header program: pipe or fork");
      return 1; /* the ranks started read EOF and exit */
    }
    if (pids[r] == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(99);
      for (int k = 0; k < r; k++) close(pipes[k]);
      close(fds[1]);
      _exit(rank_main(fds[0], r));
    }
    close(fds[0]);
    pipes[r] = fds[1];
  }
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetErrorString(res));
  for (int r = 0; r < NRANKS; r++) {
    /* On failure nothing is sent: each rank reads EOF and exits. */
    if (res == ncclSuccess && write(pipes[r], &id, sizeof(id)) != (ssize_t)sizeof(id))
      perror("toolkit-header program: sending the id");
    close(pipes[r]);
  }
  int failed = reap(pids) || res != ncclSuccess;
  printf("toolkit-header program: 4-rank all-reduce %s\n", failed ? "FAILED" : "ok");
  return failed;
}
