/* Whether an MPS control daemon is running (mps.h). The CUDA engine asks
 * before it raises CUDA_DEVICE_MAX_CONNECTIONS (exec/cuda_path.c): under MPS
 * the server's queue pool is shared by every client, but a pipe file that
 * a daemon left behind when it quit must not keep the queues at their
 * default, where rank-threads sharing a GPU can wait on each other's
 * kernels. */
#include "base/mps.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static int socket_accepts(const char *path) {
  struct sockaddr_un a;
  if (strlen(path) >= sizeof(a.sun_path)) return 1; /* cannot ask: taken as live */
  memset(&a, 0, sizeof(a));
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path, path, strlen(path) + 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 1;
  int ok = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  int err = errno;
  close(fd);
  return ok || (err != ECONNREFUSED && err != ENOENT);
}

int weft_mps_daemon_live(const char *path) {
  struct stat st;
  if (stat(path, &st) != 0) return 0;
  if (S_ISFIFO(st.st_mode)) {
    /* Opening the write end without blocking fails with ENXIO exactly
     * when no process has the pipe open for reading. */
    int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return errno != ENXIO;
    close(fd);
    return 1;
  }
  if (S_ISSOCK(st.st_mode)) return socket_accepts(path);
  return 1;
}
