/* The flooder of boot_flood.h: a forked process, like a script that holds
 * connections open to every bootstrap port it can find. It raises its own
 * fd limit to hold them; the ranks keep theirs. */
#include "boot_flood.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FLOOD_TICK_MS 50
#define FLOOD_MAX_INODES 4096

struct flood_target {
  int port;
  int *fds;
  char *said; /* per connection: its byte is sent */
};

struct flood {
  int talk;
  struct flood_target t[FLOOD_MAX_TARGETS];
  struct flood_stats st;
  const pid_t *pids;
  int npids;
};

/* A non-blocking connect to 127.0.0.1:port; -1 if no socket could be had. */
static int flood_connect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

static void flood_add_target(struct flood *f, int port) {
  for (int i = 0; i < f->st.ntargets; i++)
    if (f->t[i].port == port) return;
  if (f->st.ntargets == FLOOD_MAX_TARGETS) return;
  int i = f->st.ntargets++;
  f->t[i].port = port;
  f->st.port[i] = port;
  f->t[i].fds = malloc((size_t)f->st.per_port * sizeof(int));
  f->t[i].said = calloc((size_t)f->st.per_port, 1);
  for (int k = 0; k < f->st.per_port; k++) f->t[i].fds[k] = -1;
}

/* Socket inodes of pid's open fds, into inodes; returns how many. */
static int flood_pid_inodes(pid_t pid, unsigned long *inodes, int n, int max) {
  char path[64], link[64];
  snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL) return n;
  struct dirent *e;
  while ((e = readdir(d)) != NULL && n < max) {
    char fdpath[384];
    snprintf(fdpath, sizeof(fdpath), "%s/%s", path, e->d_name);
    ssize_t len = readlink(fdpath, link, sizeof(link) - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    unsigned long ino;
    if (sscanf(link, "socket:[%lu]", &ino) == 1) inodes[n++] = ino;
  }
  closedir(d);
  return n;
}

/* Adds every TCP port the watched processes listen on (as a scanner would
 * find them). */
static void flood_discover(struct flood *f) {
  static unsigned long inodes[FLOOD_MAX_INODES];
  int n = 0;
  for (int i = 0; i < f->npids; i++) n = flood_pid_inodes(f->pids[i], inodes, n, FLOOD_MAX_INODES);
  FILE *tcp = fopen("/proc/net/tcp", "r");
  if (tcp == NULL) return;
  char line[512];
  while (fgets(line, sizeof(line), tcp) != NULL) {
    unsigned addr, port, state;
    unsigned long ino;
    /* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
    if (sscanf(line, " %*d: %x:%x %*x:%*x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &addr, &port, &state,
               &ino) != 4 ||
        state != 0x0A)
      continue;
    for (int i = 0; i < n; i++)
      if (inodes[i] == ino) flood_add_target(f, (int)port);
  }
  fclose(tcp);
}

/* Closes connections the listener closed (readable: EOF or reset, since a
 * listener never sends to a stranger) and opens new ones. */
static void flood_refill(struct flood *f, struct pollfd *pfd) {
  for (int i = 0; i < f->st.ntargets; i++) {
    struct flood_target *t = &f->t[i];
    int held = 0;
    for (int k = 0; k < f->st.per_port; k++)
      pfd[k] = (struct pollfd){.fd = t->fds[k], .events = POLLIN};
    (void)poll(pfd, (nfds_t)f->st.per_port, 0);
    for (int k = 0; k < f->st.per_port; k++) {
      if (t->fds[k] >= 0 && pfd[k].revents != 0) {
        f->st.closed[i]++;
        close(t->fds[k]);
        t->fds[k] = -1;
      }
      if (t->fds[k] < 0) {
        t->fds[k] = flood_connect(t->port);
        t->said[k] = 0;
        if (t->fds[k] >= 0) f->st.connects[i]++;
      }
      /* Succeeds once the connection is up; until then it is tried again. */
      if (f->talk && t->fds[k] >= 0 && !t->said[k])
        t->said[k] = send(t->fds[k], "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1;
      if (t->fds[k] >= 0) held++;
    }
    if (held > f->st.held_max[i]) f->st.held_max[i] = held;
  }
}

static void flood_raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void flood_main(int root_port, const pid_t *pids, int npids, int per_port, int talk,
                       int stop_fd, int stats_fd) {
  static struct flood f;
  f.talk = talk;
  f.pids = pids;
  f.npids = npids;
  f.st.per_port = per_port;
  flood_raise_fd_limit();
  struct pollfd *pfd = malloc((size_t)per_port * sizeof(*pfd));
  if (root_port > 0) flood_add_target(&f, root_port);
  for (;;) {
    struct pollfd stop = {.fd = stop_fd, .events = POLLIN};
    if (poll(&stop, 1, FLOOD_TICK_MS) != 0) break;
    flood_discover(&f);
    flood_refill(&f, pfd);
  }
  if (write(stats_fd, &f.st, sizeof(f.st)) != (ssize_t)sizeof(f.st)) _exit(1);
  _exit(0);
}

pid_t flood_start(int root_port, const pid_t *pids, int npids, int per_port, int talk,
                  int *stop_fd_out, int *stats_fd_out) {
  int stop[2], stats[2];
  if (pipe(stop) != 0 || pipe(stats) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    close(stop[1]);
    close(stats[0]);
    flood_main(root_port, pids, npids, per_port, talk, stop[0], stats[1]);
  }
  close(stop[0]);
  close(stats[1]);
  *stop_fd_out = stop[1];
  *stats_fd_out = stats[0];
  return pid;
}

int flood_stop(pid_t pid, int stop_fd, int stats_fd, struct flood_stats *out) {
  memset(out, 0, sizeof(*out));
  close(stop_fd); /* the flooder sees its end hang up */
  size_t got = 0;
  while (got < sizeof(*out)) {
    ssize_t n = read(stats_fd, (char *)out + got, sizeof(*out) - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  close(stats_fd);
  int status = 0;
  waitpid(pid, &status, 0);
  return got == sizeof(*out) && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}
