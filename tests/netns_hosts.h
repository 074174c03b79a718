/* Simulated hosts for test_netns: network namespaces joined by a veth pair,
 * made and removed by the test (netns_hosts.c), and rank processes started
 * inside them, each with its own host name (UTS namespace) so weft treats
 * ranks in different namespaces as different hosts. */
#ifndef WEFT_TESTS_NETNS_HOSTS_H
#define WEFT_TESTS_NETNS_HOSTS_H

#include <stddef.h>

#define NETNS_HOSTS 2

/* The veth end in host h is "weft<h>" with address 192.0.2.<h+1>/24
 * (TEST-NET-1). Each host also has a decoy veth pair, made first, with
 * 169.254.77.<h+1>/24, that reaches nothing. The namespaces have no route
 * out: nothing outside them is ever reached. */
#define NETNS_IFPREFIX "weft"
#define NETNS_ROOT_ADDR "192.0.2.1"

/* Says why the test cannot make namespaces here (not root, no `ip`, `ip netns
 * add` refused), in why; returns 0 when it can. */
int netns_hosts_check(char *why, size_t len);

/* Makes the namespaces and links; registers their removal at exit and on
 * SIGINT/SIGTERM (in this process only, not in forked children). Returns 0,
 * or -1 with the failed command in why. */
int netns_hosts_create(char *why, size_t len);

/* Removes what netns_hosts_create made (idempotent). */
void netns_hosts_destroy(void);

/* Runs `ip -n <host h's namespace> args...` (args: one string, split on
 * spaces). Returns the command's exit status. */
int netns_hosts_ip(int host, const char *args);

/* Forks a process that joins host h's network namespace, gets a UTS
 * namespace named "weft-host<h>", and execs argv with env (NULL-terminated
 * "NAME=value" lists, env added to this process's environment). Returns its
 * pid, or -1. Call only while this process has one thread. */
int netns_hosts_spawn(int host, char *const argv[], char *const env[]);

#endif
