/* Host ranks on simulated hosts (issue 15): two network namespaces joined by
 * a veth pair, two ranks in each, each namespace with its own host name, so
 * ranks on different "hosts" talk over sockets through the veth
 * (NCCL_SOCKET_IFNAME=weft picks it over a decoy interface). Every
 * collective and send/recv must be correct; then a link taken down in the
 * middle of an all-reduce loop must make every rank return an error within
 * WEFT_TIMEOUT plus a margin. Needs root and iproute2; skips (77) with the
 * reason otherwise. The ranks are this binary exec'd again with --rank
 * (netns_rank.c), so no rank inherits a thread. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "netns_hosts.h"
#include "netns_rank.h"
#include "suite_run.h"

/* The link-down phase's WEFT_TIMEOUT, and how much longer than it a rank
 * may take to return its error (sanitizer builds are slow; a hang is not). */
#define LINKDOWN_TIMEOUT_S 5
#define LINKDOWN_MARGIN_S 20

static char self_exe[4096];
static char secret[64];

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Starts the 4 ranks, rank r on host r / 2; ready_fd (or -1) goes to them
 * as WEFT_NETNS_READY_FD. */
static void start_ranks(const char *phase, int timeout_s, int ready_fd, pid_t *pids) {
  for (int r = 0; r < NETNS_NRANKS; r++) {
    int host = r / (NETNS_NRANKS / NETNS_HOSTS);
    static char env[8][128];
    char rank_text[8];
    snprintf(rank_text, sizeof(rank_text), "%d", r);
    snprintf(env[0], sizeof(env[0]), "NCCL_COMM_ID=%s:29500", NETNS_ROOT_ADDR);
    snprintf(env[1], sizeof(env[1]), "WEFT_COMM_SECRET=%s", secret);
    snprintf(env[2], sizeof(env[2]), "NCCL_SOCKET_IFNAME=%s", NETNS_IFPREFIX);
    snprintf(env[3], sizeof(env[3]), "WEFT_TIMEOUT=%d", timeout_s);
    snprintf(env[4], sizeof(env[4]), "WEFT_NETNS_IFACE=%s%d", NETNS_IFPREFIX, host);
    snprintf(env[5], sizeof(env[5]), "WEFT_NETNS_READY_FD=%d", ready_fd);
    snprintf(env[6], sizeof(env[6]), "WEFT_DEVICE=cpu");
    char *envp[] = {env[0], env[1], env[2], env[3], env[4], env[5], env[6], NULL};
    char *argv[] = {self_exe, "--rank", rank_text, (char *)phase, NULL};
    pids[r] = netns_hosts_spawn(host, argv, envp);
    ck_assert_msg(pids[r] > 0, "cannot start rank %d: %s", r, strerror(errno));
  }
}

/* Waits for every rank until deadline (monotonic s); kills those still
 * running then. status[r] gets the exit status (-1: killed or signalled),
 * done_at[r] the time it was reaped. */
static void wait_ranks(const pid_t *pids, double deadline, int *status, double *done_at) {
  int left = NETNS_NRANKS;
  for (int r = 0; r < NETNS_NRANKS; r++) status[r] = -2;
  while (left > 0) {
    for (int r = 0; r < NETNS_NRANKS; r++) {
      int st;
      if (status[r] != -2 || waitpid(pids[r], &st, WNOHANG) != pids[r]) continue;
      status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      done_at[r] = now_s();
      left--;
    }
    if (left > 0 && now_s() > deadline) {
      for (int r = 0; r < NETNS_NRANKS; r++)
        if (status[r] == -2) kill(pids[r], SIGKILL);
      deadline = now_s() + 3600;
    }
    if (left > 0) usleep(20 * 1000);
  }
}

START_TEST(test_collectives) {
  pid_t pids[NETNS_NRANKS];
  int status[NETNS_NRANKS];
  double done_at[NETNS_NRANKS];
  start_ranks("colls", 10, -1, pids);
  wait_ranks(pids, now_s() + 120, status, done_at);
  for (int r = 0; r < NETNS_NRANKS; r++)
    ck_assert_msg(status[r] == NETNS_RANK_OK,
                  "rank %d (host %d) exited with %d (-1: killed at the deadline or signalled; its "
                  "stderr says why)",
                  r, r / 2, status[r]);
}
END_TEST

/* Reads one byte per rank from fd, for at most timeout_s seconds. */
static int wait_ready(int fd, int timeout_s) {
  int got = 0;
  double deadline = now_s() + timeout_s;
  while (got < NETNS_NRANKS && now_s() < deadline) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char c[NETNS_NRANKS];
    if (poll(&p, 1, 100) <= 0) continue;
    ssize_t n = read(fd, c, sizeof(c));
    if (n <= 0) break;
    got += (int)n;
  }
  return got;
}

START_TEST(test_link_down) {
  pid_t pids[NETNS_NRANKS];
  int status[NETNS_NRANKS];
  double done_at[NETNS_NRANKS];
  int fds[2];
  /* Only the write end goes to the ranks. */
  ck_assert_int_eq(pipe2(fds, O_CLOEXEC), 0);
  ck_assert_int_eq(fcntl(fds[1], F_SETFD, 0), 0);
  start_ranks("linkdown", LINKDOWN_TIMEOUT_S, fds[1], pids);
  close(fds[1]);
  int ready = wait_ready(fds[0], 60);
  close(fds[0]);
  double down_at = now_s();
  int ip_rc = ready == NETNS_NRANKS ? netns_hosts_ip(1, "link set weft1 down") : -1;
  wait_ranks(pids, down_at + LINKDOWN_TIMEOUT_S + LINKDOWN_MARGIN_S, status, done_at);
  netns_hosts_ip(1, "link set weft1 up");
  ck_assert_msg(ready == NETNS_NRANKS, "only %d of %d ranks ran their all-reduce loop", ready,
                NETNS_NRANKS);
  ck_assert_msg(ip_rc == 0, "`ip link set weft1 down` failed (%d)", ip_rc);
  for (int r = 0; r < NETNS_NRANKS; r++) {
    ck_assert_msg(status[r] == NETNS_RANK_OK,
                  "rank %d (host %d) after the link went down: exit %d (%d: no error for 60 s; "
                  "-1: hung and killed %d s after, or signalled)",
                  r, r / 2, status[r], NETNS_RANK_NO_ERROR, LINKDOWN_TIMEOUT_S + LINKDOWN_MARGIN_S);
    fprintf(stderr, "rank %d returned its error %.1f s after the link went down\n", r,
            done_at[r] - down_at);
    ck_assert_msg(done_at[r] - down_at <= LINKDOWN_TIMEOUT_S + LINKDOWN_MARGIN_S,
                  "rank %d took %.1f s", r, done_at[r] - down_at);
  }
}
END_TEST

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "--rank") == 0) return netns_rank_main(atoi(argv[2]), argv[3]);
  char why[256];
  if (netns_hosts_check(why, sizeof(why)) != 0) {
    printf("SKIP netns: %s\n", why);
    return 77;
  }
  ssize_t n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
  if (n <= 0) {
    perror("readlink /proc/self/exe");
    return 1;
  }
  self_exe[n] = '\0';
  snprintf(secret, sizeof(secret), "weft-netns-%d-%ld", (int)getpid(), (long)time(NULL));
  if (netns_hosts_create(why, sizeof(why)) != 0) {
    fprintf(stderr, "netns: cannot make the simulated hosts: %s\n", why);
    return 1;
  }
  Suite *s = suite_create("netns");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 150);
  tcase_add_test(tc, test_collectives);
  tcase_add_test(tc, test_link_down);
  suite_add_tcase(s, tc);
  int rc = suite_run_with(s, CK_FORK, CK_NORMAL);
  netns_hosts_destroy();
  return rc;
}
