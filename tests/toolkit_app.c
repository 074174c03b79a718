/* A program written only against NVIDIA's nccl.h (the CUDA toolkit's), linked
 * to weft's libnccl.so.2: 4 host ranks in 4 processes all-reduce and check
 * the result. It proves the drop-in promise: the same source and header a
 * NCCL user has, weft underneath. Exit 0 on success. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#ifdef WEFT_NCCL_H
#error "this program must be compiled against the CUDA toolkit's nccl.h, not weft's"
#endif

#define NRANKS 4
#define COUNT 1000003

static int run_rank(ncclUniqueId id, int rank) {
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, NRANKS, id, rank) != ncclSuccess) return 2;
  float *buf = malloc(COUNT * sizeof(float));
  for (size_t i = 0; i < COUNT; i++) buf[i] = (float)(rank + 1) * (float)(i % 7);
  ncclResult_t r = ncclAllReduce(buf, buf, COUNT, ncclFloat, ncclSum, comm, NULL);
  int bad = r != ncclSuccess;
  for (size_t i = 0; i < COUNT && !bad; i++)
    bad = buf[i] != 10.0f * (float)(i % 7); /* 1+2+3+4 */
  if (bad) fprintf(stderr, "rank %d: %s\n", rank, r ? ncclGetErrorString(r) : "wrong result");
  free(buf);
  ncclCommDestroy(comm);
  return bad;
}

int main(void) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  pid_t pids[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(run_rank(id, r));
  }
  int failed = 0;
  for (int r = 0; r < NRANKS; r++) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  printf("toolkit-header program: 4-rank all-reduce %s\n", failed ? "FAILED" : "ok");
  return failed;
}
