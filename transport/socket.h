/* TCP helpers shared by the bootstrap and the socket transport: addresses,
 * interface choice (NCCL_SOCKET_IFNAME), listen/connect/accept and whole-
 * buffer send/recv, every one bounded by a deadline. */
#ifndef WEFT_TRANSPORT_SOCKET_H
#define WEFT_TRANSPORT_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "base/clock.h" /* weft_time_ms, deadlines: callers of this header use them */
#include "nccl.h"

union weft_sockaddr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* The address this host should advertise, port 0: the interface
 * NCCL_SOCKET_IFNAME selects (a list that matches nothing is
 * ncclSystemError, with a WARN naming the variable and the interfaces
 * there), else NCCL's default order; NCCL_SOCKET_FAMILY limits the family.
 * The rules are in ifname.h. */
ncclResult_t weft_socket_local_addr(union weft_sockaddr *out);
/* Parses "host:port", "[v6]:port" or "v4:port" (NCCL_COMM_ID). */
ncclResult_t weft_socket_parse_addr(const char *text, union weft_sockaddr *out);
/* "1.2.3.4:5678" into buf; returns buf. */
const char *weft_sockaddr_str(const union weft_sockaddr *addr, char *buf, size_t size);

/* Binds and listens on addr (port 0: any); addr_inout gets the bound port. */
ncclResult_t weft_socket_listen(union weft_sockaddr *addr_inout, int *fd_out);
/* Connects, retrying refused/unreachable until the deadline. */
ncclResult_t weft_socket_connect(const union weft_sockaddr *addr, int64_t deadline_ms, int *fd_out);
/* Accepts one connection before the deadline; ncclSystemError with a WARN
 * when it passes. */
ncclResult_t weft_socket_accept(int listen_fd, int64_t deadline_ms, int *fd_out);

/* Sends/receives exactly size bytes before the deadline. `what` names the
 * peer in the WARN ("rank 3"). A closed peer is ncclRemoteError. A deadline
 * that passes is ncclSystemError with a WARN naming `what` and "timed out". */
ncclResult_t weft_socket_send_all(int fd, const void *buf, size_t size, int64_t deadline_ms,
                                  const char *what);
ncclResult_t weft_socket_recv_all(int fd, void *buf, size_t size, int64_t deadline_ms,
                                  const char *what);

/* Non-blocking progress: moves what the socket takes now, adds it to *done.
 * ncclRemoteError if the peer closed. */
ncclResult_t weft_socket_send_some(int fd, const void *buf, size_t size, size_t *done,
                                   const char *what);
ncclResult_t weft_socket_recv_some(int fd, void *buf, size_t size, size_t *done, const char *what);

/* The pieces the network (transport/net/socket/) drives without blocking
 * and without logging: it reports one error per connection itself.
 *
 * Starts a non-blocking connect: 0 with *fd_out (connected or in
 * progress), else an errno value. */
int weft_socket_connect_start(const union weft_sockaddr *addr, int *fd_out);
/* Whether a started connect finished: 0 connected, EINPROGRESS not yet,
 * else its errno value. */
int weft_socket_connect_poll(int fd);
/* Whether the peer may still come up after this connect error (refused,
 * unreachable, reset): worth another attempt. */
int weft_socket_connect_retryable(int err);
/* Accepts one waiting connection: 0 with *fd_out, EAGAIN when none waits,
 * else an errno value. */
int weft_socket_try_accept(int listen_fd, int *fd_out);
/* Moves what the socket takes or gives now of the two-part buffer
 * iov[0..1] (a message header and its data), adding to *done; stops at the
 * first short transfer (the socket is drained or full); no WARN.
 * ncclRemoteError when the peer closed or reset (*err_out: 0 for an orderly
 * close, else the errno), ncclSystemError for a local failure (*err_out:
 * the errno). */
ncclResult_t weft_socket_move(int fd, int is_send, const struct iovec iov[2], size_t *done,
                              int *err_out);

/* Sets O_NONBLOCK, TCP_NODELAY and CLOEXEC as the data path wants. */
ncclResult_t weft_socket_set_data_opts(int fd);

void weft_socket_close(int *fd);

#endif
