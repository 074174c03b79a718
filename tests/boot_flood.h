/* A stranger flooding bootstrap listeners, for test_boot_attack.c: a
 * process that holds many idle TCP connections (never a byte sent) to a
 * known port and to every port the given processes listen on, opening a
 * new one whenever a listener closes one. It uses no weft code. */
#ifndef WEFT_TESTS_BOOT_FLOOD_H
#define WEFT_TESTS_BOOT_FLOOD_H

#include <sys/types.h>

#define FLOOD_MAX_TARGETS 32
#define FLOOD_MAX_PIDS 8

struct flood_stats {
  int ntargets; /* ports flooded: the root's first */
  int port[FLOOD_MAX_TARGETS];
  long connects[FLOOD_MAX_TARGETS]; /* connections opened per port */
  long closed[FLOOD_MAX_TARGETS];   /* of those, closed by the listener */
  int held_max[FLOOD_MAX_TARGETS];  /* most open at once */
  int per_port;                     /* connections it tries to hold */
};

/* Forks the flooder: `per_port` connections to 127.0.0.1:root_port (retried
 * until something listens there; 0: none) and to each listening TCP port of pids[]
 * (found in /proc every 50 ms). With `talk`, each connection sends one byte
 * once connected (less than any secret), so the kernel hands it to the
 * listener at once instead of holding it back as silent (TCP_DEFER_ACCEPT).
 * It runs until the caller calls flood_stop.
 * Returns the flooder's pid; *stop_fd_out and *stats_fd_out are the
 * caller's ends of its pipes. Call before any thread starts. */
pid_t flood_start(int root_port, const pid_t *pids, int npids, int per_port, int talk,
                  int *stop_fd_out, int *stats_fd_out);

/* Stops the flooder, reads what it did into *out and reaps it. Returns 0 on
 * success. */
int flood_stop(pid_t pid, int stop_fd, int stats_fd, struct flood_stats *out);

#endif
