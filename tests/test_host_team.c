/* The host engine's lane team (src/exec/host_team.c): the members rule, a
 * rank without a team, every member of a job called exactly once (member
 * 0 on the caller, the others on the team's threads), jobs of fewer
 * members than the team, a job posted the moment the threads start (a
 * thread that came up after the post once slept through it), and the
 * threads gone after stop. Host ranks' collectives on the team are
 * test_collectives' and the api suites' "(lane threads)" runs. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "exec/host_team.h"
#include "proc_threads.h"
#include "suite_run.h"

#define MAX_MEMBERS 8

struct job {
  atomic_int calls[MAX_MEMBERS];
  atomic_int off_caller[MAX_MEMBERS]; /* calls not on the posting thread */
  pthread_t caller;
};

static void job_fn(void *ctx, int member) {
  struct job *j = ctx;
  ck_assert(member >= 0 && member < MAX_MEMBERS);
  atomic_fetch_add(&j->calls[member], 1);
  if (!pthread_equal(pthread_self(), j->caller)) atomic_fetch_add(&j->off_caller[member], 1);
}

static void job_init(struct job *j) {
  for (int m = 0; m < MAX_MEMBERS; m++) {
    atomic_init(&j->calls[m], 0);
    atomic_init(&j->off_caller[m], 0);
  }
  j->caller = pthread_self();
}

START_TEST(test_members_rule) {
  int all = -1;
  /* WEFT_HOST_LANE_THREADS unset (-1): two members, for the reducing
   * collectives, only where the links are 16 socket channels (8 cores a
   * local rank). */
  ck_assert_int_eq(weft_host_team_members(0, -1, &all), 1);
  ck_assert_int_eq(all, 0);
  ck_assert_int_eq(weft_host_team_members(4, -1, &all), 1);
  ck_assert_int_eq(weft_host_team_members(8, -1, &all), 1);
  ck_assert_int_eq(weft_host_team_members(16, -1, &all), WEFT_HOST_TEAM_AUTO);
  ck_assert_int_eq(all, 0);
  /* Set: that many, for every collective, whatever the links. */
  ck_assert_int_eq(weft_host_team_members(0, 3, &all), 3);
  ck_assert_int_eq(all, 1);
  ck_assert_int_eq(weft_host_team_members(8, 1, &all), 1);
  ck_assert_int_eq(all, 1);
}
END_TEST

START_TEST(test_no_team) {
  struct weft_host_team t;
  struct job j;
  job_init(&j);
  weft_host_team_init(&t, 1, 1, 0);
  ck_assert_int_eq(weft_host_team_size(&t), 1);
  weft_host_team_run(&t, 4, job_fn, &j); /* more than it has: the caller alone */
  ck_assert_int_eq(atomic_load(&j.calls[0]), 1);
  ck_assert_int_eq(atomic_load(&j.off_caller[0]), 0);
  ck_assert_int_eq(atomic_load(&j.calls[1]), 0);
  ck_assert_int_eq(proc_threads_named("weft-lanes"), 0);
  weft_host_team_stop(&t);
}
END_TEST

START_TEST(test_jobs) {
  struct weft_host_team t;
  struct job j;
  job_init(&j);
  weft_host_team_init(&t, 4, 1, 0);
  ck_assert_int_eq(proc_threads_named("weft-lanes"), 0); /* nothing asked yet */
  ck_assert_int_eq(weft_host_team_size(&t), 4);
  ck_assert_int_eq(proc_threads_named("weft-lanes"), 3);
  const int njobs = 2000;
  for (int k = 0; k < njobs; k++) weft_host_team_run(&t, 4, job_fn, &j);
  for (int m = 0; m < 4; m++) ck_assert_int_eq(atomic_load(&j.calls[m]), njobs);
  ck_assert_int_eq(atomic_load(&j.off_caller[0]), 0);
  for (int m = 1; m < 4; m++) ck_assert_int_eq(atomic_load(&j.off_caller[m]), njobs);
  /* Fewer members than the team: the others sit the job out. */
  job_init(&j);
  for (int k = 0; k < 100; k++) weft_host_team_run(&t, 2, job_fn, &j);
  ck_assert_int_eq(atomic_load(&j.calls[0]), 100);
  ck_assert_int_eq(atomic_load(&j.calls[1]), 100);
  ck_assert_int_eq(atomic_load(&j.calls[2]), 0);
  ck_assert_int_eq(atomic_load(&j.calls[3]), 0);
  weft_host_team_stop(&t);
  ck_assert_int_eq(proc_threads_named("weft-lanes"), 0);
}
END_TEST

/* The first job right after the threads start, many times over. */
START_TEST(test_first_job) {
  for (int k = 0; k < 200; k++) {
    struct weft_host_team t;
    struct job j;
    job_init(&j);
    weft_host_team_init(&t, 3, 1, 0);
    ck_assert_int_eq(weft_host_team_size(&t), 3);
    weft_host_team_run(&t, 3, job_fn, &j);
    for (int m = 0; m < 3; m++) ck_assert_int_eq(atomic_load(&j.calls[m]), 1);
    weft_host_team_stop(&t);
  }
  ck_assert_int_eq(proc_threads_named("weft-lanes"), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("host_team");
  TCase *tc = tcase_create("team");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_members_rule);
  tcase_add_test(tc, test_no_team);
  tcase_add_test(tc, test_jobs);
  tcase_add_test(tc, test_first_job);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
