/* Simulated hosts for test_netns: the namespaces, their links, their removal
 * and rank processes started inside them (netns_hosts.h). */
#include "netns_hosts.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static char ns_name[NETNS_HOSTS][64];
static pid_t owner_pid = -1; /* the process that made the namespaces */
static int created;

/* Runs argv (argv[0] looked up in PATH), output to /dev/null when quiet;
 * returns its exit status, or -1. */
static int run_argv(char *const argv[], int quiet) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    if (quiet) {
      int fd = open("/dev/null", O_WRONLY);
      if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    }
    execvp(argv[0], argv);
    _exit(127);
  }
  int status;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs a command line split on spaces (no quoting needed in this file). */
static int run_line(const char *line, int quiet) {
  char buf[512];
  char *argv[32];
  int n = 0;
  snprintf(buf, sizeof(buf), "%s", line);
  for (char *tok = strtok(buf, " "); tok != NULL && n < 31; tok = strtok(NULL, " "))
    argv[n++] = tok;
  argv[n] = NULL;
  return run_argv(argv, quiet);
}

int netns_hosts_ip(int host, const char *args) {
  char line[512];
  snprintf(line, sizeof(line), "ip -n %s %s", ns_name[host], args);
  return run_line(line, 0);
}

void netns_hosts_destroy(void) {
  if (!created || getpid() != owner_pid) return;
  created = 0;
  char line[512];
  for (int h = 0; h < NETNS_HOSTS; h++) {
    snprintf(line, sizeof(line), "ip netns del %s", ns_name[h]);
    run_line(line, 1);
  }
}

static void on_signal(int sig) {
  netns_hosts_destroy();
  signal(sig, SIG_DFL);
  raise(sig);
}

static void name_hosts(void) {
  for (int h = 0; h < NETNS_HOSTS; h++)
    snprintf(ns_name[h], sizeof(ns_name[h]), "weft-h%d-%d", h, (int)getpid());
}

int netns_hosts_check(char *why, size_t len) {
  if (geteuid() != 0) {
    snprintf(why, len, "not root (euid %d): cannot make network namespaces", (int)geteuid());
    return -1;
  }
  if (run_line("ip -V", 1) != 0) {
    snprintf(why, len, "the `ip` command (iproute2) is not installed");
    return -1;
  }
  char line[128];
  snprintf(line, sizeof(line), "ip netns add weft-probe-%d", (int)getpid());
  if (run_line(line, 1) != 0) {
    snprintf(why, len, "`%s` failed (no CAP_SYS_ADMIN, or no netns support)", line);
    return -1;
  }
  snprintf(line, sizeof(line), "ip netns del weft-probe-%d", (int)getpid());
  run_line(line, 1);
  return 0;
}

/* Each host gets lo, a decoy veth pair made first (so it comes first in
 * getifaddrs: weft's default interface choice takes it, and its address
 * reaches nothing, which only NCCL_SOCKET_IFNAME=weft avoids), and its end
 * of the link between the hosts. */
static const char *host_setup[] = {
    "link set lo up",
    "link add decoy%d type veth peer name decoyp%d",
    "addr add 169.254.77.%d/24 dev decoy%d",
    "link set decoy%d up",
    "link set decoyp%d up",
    NULL, /* here the link between the hosts is made: after the decoys */
    "addr add 192.0.2.%d/24 dev weft%d",
    "link set weft%d up",
};

int netns_hosts_create(char *why, size_t len) {
  char line[512];
  name_hosts();
  owner_pid = getpid();
  for (int h = 0; h < NETNS_HOSTS; h++) {
    snprintf(line, sizeof(line), "ip netns add %s", ns_name[h]);
    if (run_line(line, 0) != 0) goto err;
    created = 1;
  }
  atexit(netns_hosts_destroy);
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  for (size_t i = 0; i < sizeof(host_setup) / sizeof(host_setup[0]); i++) {
    if (host_setup[i] == NULL) {
      snprintf(line, sizeof(line), "ip -n %s link add weft0 type veth peer name weft1 netns %s",
               ns_name[0], ns_name[1]);
      if (run_line(line, 0) != 0) goto err;
      continue;
    }
    for (int h = 0; h < NETNS_HOSTS; h++) {
      char args[96];
      int a = strstr(host_setup[i], "192.0.2") || strstr(host_setup[i], "169.254") ? h + 1 : h;
      snprintf(args, sizeof(args), host_setup[i], a, h);
      snprintf(line, sizeof(line), "ip -n %s %s", ns_name[h], args);
      if (run_line(line, 0) != 0) goto err;
    }
  }
  return 0;
err:
  snprintf(why, len, "`%s` failed", line);
  netns_hosts_destroy();
  return -1;
}

int netns_hosts_spawn(int host, char *const argv[], char *const env[]) {
  char path[128];
  snprintf(path, sizeof(path), "/run/netns/%s", ns_name[host]);
  pid_t pid = fork();
  if (pid != 0) return (int)pid;
  /* A rank outlives nothing: if the test dies, its ranks die with it. */
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0 || unshare(CLONE_NEWUTS) != 0) {
    perror("netns_hosts_spawn: joining the namespace");
    _exit(126);
  }
  char host_name[32];
  snprintf(host_name, sizeof(host_name), "weft-host%d", host);
  if (sethostname(host_name, strlen(host_name)) != 0) {
    perror("netns_hosts_spawn: sethostname");
    _exit(126);
  }
  for (int i = 0; env != NULL && env[i] != NULL; i++) putenv(env[i]);
  execv(argv[0], argv);
  perror("netns_hosts_spawn: execv");
  _exit(127);
}
