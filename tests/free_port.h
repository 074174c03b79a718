/* A loopback TCP port nothing listens on now (the kernel's pick, then
 * released), for tests that must name a port up front (NCCL_COMM_ID).
 * Another process may take it before the test binds it; the tests that use
 * it fail with a clear error then, never hang. Returns -1 on failure. */
#ifndef WEFT_TESTS_FREE_PORT_H
#define WEFT_TESTS_FREE_PORT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

static inline int test_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(a);
  int port = -1;
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
      getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

#endif
