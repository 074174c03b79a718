/* A program as an NCCL user writes it, built by tests/test_install.sh
 * against the installed nccl.h with `pkg-config nccl` (shared) and against
 * libnccl_static.a: one rank, one host all-reduce, the version. */
#include <nccl.h>
#include <stdio.h>

int main(void) {
  int version = 0;
  ncclUniqueId id;
  ncclComm_t comm;
  float buf[3] = {1, 2, 3};
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) {
    printf("install_app: ncclGetVersion gave %d, the header says %d\n", version, NCCL_VERSION_CODE);
    return 1;
  }
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess ||
      ncclAllReduce(buf, buf, 3, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess ||
      ncclCommDestroy(comm) != ncclSuccess) {
    printf("install_app: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  if (buf[0] != 1 || buf[1] != 2 || buf[2] != 3) {
    printf("install_app: one-rank all-reduce changed the buffer: %g %g %g\n", buf[0], buf[1],
           buf[2]);
    return 1;
  }
  printf("install_app: NCCL %d ok\n", version);
  return 0;
}
