/* The host engine's lane team: threads of a rank that run a large plan's
 * lanes beside the thread that runs the task, each its own share of the
 * lanes (host_run.c), so one thread's polling, per-message work and
 * reductions no longer bound a collective over many channels.
 *
 * A job is a function called once per member: member 0 on the caller,
 * members 1..n-1 on the team's threads; weft_host_team_run returns when
 * every member has returned. Between jobs the threads sleep on a condition
 * variable (no thread spins). They start with the first job (the engine's
 * worker is running by then, so forked test ranks are long forked) and
 * stop at weft_host_team_stop. */
#ifndef WEFT_EXEC_HOST_TEAM_H
#define WEFT_EXEC_HOST_TEAM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*weft_host_team_fn)(void *ctx, int member);

struct weft_host_team {
  int nthreads;  /* threads wanted beside the caller; 0: no team */
  int all_colls; /* the team runs every collective, not only the reducing ones */
  int inited;   /* the lock and condition variables exist */
  int started;  /* threads running */
  int rank;     /* for messages */
  pthread_t *threads;
  pthread_mutex_t lock;
  pthread_cond_t work_cv; /* the threads sleep here between jobs */
  pthread_cond_t done_cv; /* the caller sleeps here for the job's end */
  /* Under lock. */
  uint64_t job;    /* jobs posted, ever */
  int job_threads; /* threads taking part in the current job */
  int left;        /* of those, still running it */
  weft_host_team_fn fn;
  void *ctx;
  int stop;
};

/* Members of a rank's team (1: the caller alone), for a communicator of
 * host_channels channels on socket links (comm->host_channels; 0: none),
 * given forced = WEFT_HOST_LANE_THREADS: forced when >= 1, for every
 * collective (*all_colls = 1); else
 * WEFT_HOST_TEAM_AUTO with 16 such channels (8 cores per local rank on every
 * host), for the reducing collectives only (*all_colls = 0), and 1 below
 * that (docs/NETWORK.md, "Lane threads"). */
#define WEFT_HOST_TEAM_AUTO 2
int weft_host_team_members(int host_channels, int64_t forced, int *all_colls);

/* Sets the team up with members - 1 threads; starts nothing. */
void weft_host_team_init(struct weft_host_team *t, int members, int all_colls, int rank);
/* Members a job may have now (1 + the threads that run or can start);
 * starts the threads the first time. A thread that cannot start is a
 * WARN, and the team goes on with those that did. */
int weft_host_team_size(struct weft_host_team *t);
/* Runs fn(ctx, m) for m in 0..members-1 (members <= weft_host_team_size),
 * member 0 on the calling thread; returns when all have returned. */
void weft_host_team_run(struct weft_host_team *t, int members, weft_host_team_fn fn, void *ctx);
/* Stops and joins the threads. No job may be running. */
void weft_host_team_stop(struct weft_host_team *t);

#endif
