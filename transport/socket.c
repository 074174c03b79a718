/* TCP helpers: addresses and interface choice,
 * listen/connect/accept, and whole-buffer or partial send/recv. Every socket
 * made here is non-blocking and close-on-exec; every wait is a poll() that
 * ends at a deadline, so nothing here can hang or raise SIGPIPE. */
#include "transport/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/ifname.h"

#define LISTEN_BACKLOG 16384
#define CONNECT_RETRY_MAX_MS 100

/* Milliseconds left until deadline, clamped to what poll() takes. */
static int ms_left(int64_t deadline_ms) {
  int64_t left = deadline_ms - weft_time_ms();
  if (left < 0) return 0;
  return left > INT_MAX ? INT_MAX : (int)left;
}

static socklen_t sockaddr_len(const union weft_sockaddr *addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

const char *weft_sockaddr_str(const union weft_sockaddr *addr, char *buf, size_t size) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (addr->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
    snprintf(buf, size, "%s:%u", host, (unsigned)ntohs(addr->sin.sin_port));
  } else if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
    snprintf(buf, size, "[%s]:%u", host, (unsigned)ntohs(addr->sin6.sin6_port));
  } else {
    snprintf(buf, size, "(no address)");
  }
  return buf;
}

/* ---- Interface choice ---------------------------------------------------- */

#define MAX_IFADDRS 256

/* NCCL_SOCKET_FAMILY forces a family; else AF_UNSPEC (WEFT_SOCKET_IPV6
 * then only says which family is tried first). */
static int socket_family(void) {
  int64_t f = weft_param_int(WEFT_PARAM_SOCKET_FAMILY);
  return f == 0 ? AF_INET : f == 1 ? AF_INET6 : AF_UNSPEC;
}

/* The user's NCCL_SOCKET_IFNAME, or NULL for the default order. A value
 * that names nothing ("^", "=") is ignored, as NCCL does, with a WARN. */
static const char *user_ifname(void) {
  const char *spec = weft_param_str(WEFT_PARAM_SOCKET_IFNAME);
  if (spec == NULL || weft_ifname_spec_valid(spec)) return spec;
  static atomic_int warned;
  if (atomic_fetch_add(&warned, 1) == 0)
    WARN(
        "NCCL_SOCKET_IFNAME=%s names no interface (expected a comma list of name prefixes, "
        "'^' first to exclude them, '=' for exact names); using the default order",
        spec);
  return NULL;
}

/* "lo, eth0" (names once each) for the WARN when nothing matches. */
static void list_names(const struct weft_ifaddr *ifs, int n, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used + 1 < size; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = strcmp(ifs[i].name, ifs[j].name) == 0;
    if (seen) continue;
    int w = snprintf(buf + used, size - used, "%s%s%s", used ? ", " : "", ifs[i].name,
                     ifs[i].up ? "" : " (down)");
    if (w > 0) used += (size_t)w;
  }
  if (n == 0) snprintf(buf, size, "none");
}

static void no_match_warn(const struct weft_ifaddr *ifs, int n, const char *spec, int family) {
  char names[512];
  list_names(ifs, n, names, sizeof(names));
  const char *fam = family == AF_INET    ? " with NCCL_SOCKET_FAMILY=AF_INET"
                    : family == AF_INET6 ? " with NCCL_SOCKET_FAMILY=AF_INET6"
                                         : "";
  if (spec != NULL)
    WARN(
        "NCCL_SOCKET_IFNAME=%s matches no up interface with an IP address%s (interfaces "
        "here: %s); name one of them or unset the variable",
        spec, fam, names);
  else
    WARN("no up interface with an IP address%s for the bootstrap (interfaces here: %s)", fam,
         names);
}

ncclResult_t weft_socket_local_addr(union weft_sockaddr *out) {
  struct ifaddrs *all = NULL;
  if (getifaddrs(&all) != 0) {
    WARN("getifaddrs failed: %s", strerror(errno));
    return ncclSystemError;
  }
  struct weft_ifaddr ifs[MAX_IFADDRS];
  int n = 0;
  for (struct ifaddrs *ifa = all; ifa != NULL && n < MAX_IFADDRS; ifa = ifa->ifa_next) {
    int fam = ifa->ifa_addr ? ifa->ifa_addr->sa_family : AF_UNSPEC;
    if (fam != AF_INET && fam != AF_INET6) continue;
    memset(&ifs[n], 0, sizeof(ifs[n]));
    ifs[n].name = ifa->ifa_name;
    ifs[n].up = (ifa->ifa_flags & IFF_UP) != 0;
    memcpy(&ifs[n].addr, ifa->ifa_addr,
           fam == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    n++;
  }
  const char *spec = user_ifname();
  int family = socket_family();
  int i =
      weft_ifname_choose(ifs, n, spec, family, weft_param_int(WEFT_PARAM_SOCKET_FAMILY_V6) != 0);
  union weft_sockaddr addr = i >= 0 ? ifs[i].addr : (union weft_sockaddr){0};
  if (i >= 0) {
    char text[INET6_ADDRSTRLEN + 16];
    if (addr.sa.sa_family == AF_INET)
      addr.sin.sin_port = 0;
    else
      addr.sin6.sin6_port = 0;
    INFO(WEFT_INIT | WEFT_NET, "bootstrap interface %s, address %s%s%s", ifs[i].name,
         weft_sockaddr_str(&addr, text, sizeof(text)), spec ? ", NCCL_SOCKET_IFNAME=" : "",
         spec ? spec : "");
  } else {
    no_match_warn(ifs, n, spec, family);
  }
  freeifaddrs(all);
  if (i < 0) return ncclSystemError;
  *out = addr;
  return ncclSuccess;
}

/* ---- Address parsing ------------------------------------------------------ */

static int parse_host(const char *host, union weft_sockaddr *out) {
  memset(out, 0, sizeof(*out));
  if (inet_pton(AF_INET, host, &out->sin.sin_addr) == 1) {
    out->sin.sin_family = AF_INET;
    return 0;
  }
  if (inet_pton(AF_INET6, host, &out->sin6.sin6_addr) == 1) {
    out->sin6.sin6_family = AF_INET6;
    return 0;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  int family = socket_family();
  if (family == AF_UNSPEC)
    family = weft_param_int(WEFT_PARAM_SOCKET_FAMILY_V6) ? AF_INET6 : AF_INET;
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0) {
    hints.ai_family = AF_UNSPEC;
    rc = getaddrinfo(host, NULL, &hints, &res);
  }
  if (rc != 0) return rc;
  memcpy(out, res->ai_addr, res->ai_addrlen < sizeof(*out) ? res->ai_addrlen : sizeof(*out));
  freeaddrinfo(res);
  return 0;
}

ncclResult_t weft_socket_parse_addr(const char *text, union weft_sockaddr *out) {
  char host[256];
  const char *port_text;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (close == NULL || close[1] != ':' || (size_t)(close - text - 1) >= sizeof(host)) goto bad;
    memcpy(host, text + 1, (size_t)(close - text - 1));
    host[close - text - 1] = '\0';
    port_text = close + 2;
  } else {
    const char *colon = strrchr(text, ':');
    if (colon == NULL || (size_t)(colon - text) >= sizeof(host) || colon == text) goto bad;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    port_text = colon + 1;
  }
  char *end;
  long port = strtol(port_text, &end, 10);
  if (*port_text == '\0' || *end != '\0' || port < 1 || port > 65535) goto bad;
  union weft_sockaddr addr;
  int rc = parse_host(host, &addr);
  if (rc != 0) {
    WARN("address '%s': cannot resolve host '%s': %s", text, host, gai_strerror(rc));
    return ncclInvalidArgument;
  }
  if (addr.sa.sa_family == AF_INET)
    addr.sin.sin_port = htons((uint16_t)port);
  else
    addr.sin6.sin6_port = htons((uint16_t)port);
  *out = addr;
  return ncclSuccess;
bad:
  WARN("address '%s' is not host:port, [v6]:port or v4:port (port 1..65535)", text);
  return ncclInvalidArgument;
}

/* ---- Listen, connect, accept ------------------------------------------------ */

static void set_nodelay(int fd) {
  int one = 1;
  /* Bootstrap and data messages are small and latency-bound; a failure here
   * costs only latency, so it is not an error. */
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

ncclResult_t weft_socket_listen(union weft_sockaddr *addr_inout, int *fd_out) {
  char text[INET6_ADDRSTRLEN + 16];
  int fd = socket(addr_inout->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    WARN("socket() for listening on %s failed: %s",
         weft_sockaddr_str(addr_inout, text, sizeof(text)), strerror(errno));
    return ncclSystemError;
  }
  /* A fixed NCCL_COMM_ID port must be reusable while old connections sit in
   * TIME_WAIT. */
  int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  union weft_sockaddr bound = *addr_inout;
  socklen_t len = sizeof(bound);
  if (bind(fd, &addr_inout->sa, sockaddr_len(addr_inout)) != 0 || listen(fd, LISTEN_BACKLOG) != 0 ||
      getsockname(fd, &bound.sa, &len) != 0) {
    WARN("listening on %s failed: %s", weft_sockaddr_str(addr_inout, text, sizeof(text)),
         strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  *addr_inout = bound;
  *fd_out = fd;
  return ncclSuccess;
}

/* Errors after which the peer may still come up: we retry them. */
int weft_socket_connect_retryable(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EAGAIN || err == EINTR;
}

/* One attempt: returns 0 with *fd_out set, or an errno value. */
static int connect_once(const union weft_sockaddr *addr, int64_t deadline_ms, int *fd_out) {
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int err = 0;
  if (connect(fd, &addr->sa, sockaddr_len(addr)) != 0) {
    err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      int n = poll(&p, 1, ms_left(deadline_ms));
      socklen_t len = sizeof(err);
      if (n == 1) {
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      } else {
        err = n == 0 ? ETIMEDOUT : errno;
      }
    }
  }
  if (err != 0) {
    close(fd);
    return err;
  }
  set_nodelay(fd);
  *fd_out = fd;
  return 0;
}

int weft_socket_connect_start(const union weft_sockaddr *addr, int *fd_out) {
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  if (connect(fd, &addr->sa, sockaddr_len(addr)) != 0 && errno != EINPROGRESS && errno != EINTR) {
    int err = errno;
    close(fd);
    return err;
  }
  set_nodelay(fd);
  *fd_out = fd;
  return 0;
}

int weft_socket_connect_poll(int fd) {
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int n = poll(&p, 1, 0);
  if (n < 0) return errno == EINTR ? EINPROGRESS : errno;
  if (n == 0) return EINPROGRESS;
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  return err;
}

ncclResult_t weft_socket_connect(const union weft_sockaddr *addr, int64_t deadline_ms,
                                 int *fd_out) {
  char text[INET6_ADDRSTRLEN + 16];
  int64_t start = weft_time_ms();
  int backoff_ms = 1;
  for (;;) {
    int err = connect_once(addr, deadline_ms, fd_out);
    if (err == 0) return ncclSuccess;
    if (!weft_socket_connect_retryable(err)) {
      WARN("connect to %s failed: %s", weft_sockaddr_str(addr, text, sizeof(text)), strerror(err));
      return ncclSystemError;
    }
    int left = ms_left(deadline_ms);
    if (left == 0) {
      WARN("connect to %s timed out after %d ms (last error: %s)",
           weft_sockaddr_str(addr, text, sizeof(text)), (int)(weft_time_ms() - start),
           strerror(err));
      return ncclSystemError;
    }
    /* The listener may not be up yet: back off so that many ranks retrying
     * on few cores do not spin. */
    int nap = backoff_ms < left ? backoff_ms : left;
    struct timespec ts = {.tv_sec = nap / 1000, .tv_nsec = (long)(nap % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (backoff_ms < CONNECT_RETRY_MAX_MS) backoff_ms *= 2;
  }
}

ncclResult_t weft_socket_accept(int listen_fd, int64_t deadline_ms, int *fd_out) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      set_nodelay(fd);
      *fd_out = fd;
      return ncclSuccess;
    }
    /* ECONNABORTED: a client gave up between SYN and accept; wait for the next. */
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      WARN("accept on listening socket %d failed: %s", listen_fd, strerror(errno));
      return ncclSystemError;
    }
    int left = ms_left(deadline_ms);
    if (left == 0) {
      WARN("accept on listening socket %d timed out", listen_fd);
      return ncclSystemError;
    }
    struct pollfd p = {.fd = listen_fd, .events = POLLIN};
    if (poll(&p, 1, left) < 0 && errno != EINTR) {
      WARN("poll on listening socket %d failed: %s", listen_fd, strerror(errno));
      return ncclSystemError;
    }
  }
}

int weft_socket_try_accept(int listen_fd, int *fd_out) {
  for (;;) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      set_nodelay(fd);
      *fd_out = fd;
      return 0;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return errno == EWOULDBLOCK ? EAGAIN : errno;
  }
}

/* ---- Data ------------------------------------------------------------------- */

/* One direction of transfer: moves what the socket takes now. Returns
 * ncclSuccess (progress or EAGAIN) or an error it has WARNed. */
static ncclResult_t xfer_some(int fd, int is_send, char *buf, size_t size, size_t *done,
                              const char *what) {
  while (*done < size) {
    ssize_t n = is_send ? send(fd, buf + *done, size - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, buf + *done, size - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n == 0) {
      WARN("connection closed by %s", what);
      return ncclRemoteError;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    if (errno == EPIPE || errno == ECONNRESET) {
      WARN("connection closed by %s (%s)", what, strerror(errno));
      return ncclRemoteError;
    }
    WARN("%s to %s failed: %s", is_send ? "send" : "recv", what, strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

static ncclResult_t xfer_all(int fd, int is_send, char *buf, size_t size, int64_t deadline_ms,
                             const char *what) {
  size_t done = 0;
  for (;;) {
    WEFT_CHECK(xfer_some(fd, is_send, buf, size, &done, what));
    if (done == size) return ncclSuccess;
    int left = ms_left(deadline_ms);
    if (left == 0) {
      WARN("%s %s timed out with %zu of %zu bytes moved", is_send ? "send to" : "recv from", what,
           done, size);
      return ncclSystemError;
    }
    struct pollfd p = {.fd = fd, .events = is_send ? POLLOUT : POLLIN};
    if (poll(&p, 1, left) < 0 && errno != EINTR) {
      WARN("poll on connection with %s failed: %s", what, strerror(errno));
      return ncclSystemError;
    }
  }
}

ncclResult_t weft_socket_send_all(int fd, const void *buf, size_t size, int64_t deadline_ms,
                                  const char *what) {
  return xfer_all(fd, 1, (char *)buf, size, deadline_ms, what);
}

ncclResult_t weft_socket_recv_all(int fd, void *buf, size_t size, int64_t deadline_ms,
                                  const char *what) {
  return xfer_all(fd, 0, buf, size, deadline_ms, what);
}

ncclResult_t weft_socket_send_some(int fd, const void *buf, size_t size, size_t *done,
                                   const char *what) {
  return xfer_some(fd, 1, (char *)buf, size, done, what);
}

ncclResult_t weft_socket_recv_some(int fd, void *buf, size_t size, size_t *done, const char *what) {
  return xfer_some(fd, 0, buf, size, done, what);
}

ncclResult_t weft_socket_move(int fd, int is_send, const struct iovec iov[2], size_t *done,
                              int *err_out) {
  size_t total = iov[0].iov_len + iov[1].iov_len;
  while (*done < total) {
    struct iovec v[2];
    int nv = 0;
    size_t skip = *done;
    for (int i = 0; i < 2; i++) {
      if (skip >= iov[i].iov_len) {
        skip -= iov[i].iov_len;
        continue;
      }
      v[nv].iov_base = (char *)iov[i].iov_base + skip;
      v[nv++].iov_len = iov[i].iov_len - skip;
      skip = 0;
    }
    struct msghdr m = {.msg_iov = v, .msg_iovlen = (size_t)nv};
    ssize_t n =
        is_send ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &m, MSG_DONTWAIT);
    if (n > 0) {
      *done += (size_t)n;
      /* Short: the socket had no more (or no more room) just now; another
       * call would most likely cost a syscall for EAGAIN. */
      size_t asked = v[0].iov_len + (nv > 1 ? v[1].iov_len : 0);
      if ((size_t)n < asked) return ncclSuccess;
      continue;
    }
    if (n == 0) {
      *err_out = 0;
      return ncclRemoteError;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    *err_out = errno;
    return errno == EPIPE || errno == ECONNRESET ? ncclRemoteError : ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t weft_socket_set_data_opts(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
    WARN("fcntl on socket %d failed: %s", fd, strerror(errno));
    return ncclSystemError;
  }
  set_nodelay(fd);
  return ncclSuccess;
}

void weft_socket_close(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}
