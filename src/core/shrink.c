/* ncclCommShrink: the ranks the parent keeps form a new communicator, in
 * parent order; the excluded ranks take no part (they do not call Shrink,
 * and may be dead).
 *
 * Nothing may wait on an excluded rank, so the parent's bootstrap
 * collectives (a ring through every rank) are out; its point-to-point
 * messages are not, since each goes over a connection between two ranks
 * alone. The lowest kept rank leads: every other kept rank sends it the
 * kept set it computed; the leader checks that they agree, makes a fresh
 * unique id (its process hosts the new root) and sends it back; then each
 * kept rank creates its rank of the new communicator on that id, so the
 * new bootstrap connects the kept ranks only. (An id derived from the
 * parent's alone would need a root port known in advance, which another
 * program may hold; a fresh id binds whatever port is free.)
 *
 * NCCL_SHRINK_ABORT first abandons the parent's work in flight, whose waits
 * on a dead rank would otherwise last until WEFT_TIMEOUT: as in NCCL, the
 * parent's abort flag is raised until its engine is idle, then lowered.
 * Work so abandoned fails the parent, which the program then aborts.
 *
 * ncclCommRevoke abandons the work in flight the same way and then marks
 * the communicator revoked: it takes no new work, and ncclCommSplit,
 * ncclCommShrink, ncclCommDestroy and ncclCommAbort may follow. */
#include "core/shrink.h"

#include <stdint.h>
#include <stdlib.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/failure.h"
#include "core/engine.h"

/* Bootstrap tags, apart from split's (0x53xxxxxx) and links' (0x434fxxxx).
 * A pair of ranks exchanges these in order, so no sequence number is
 * needed to tell one shrink of a parent from the next. */
#define SHRINK_TAG_ASK 0x72000001
#define SHRINK_TAG_ID 0x72000002
#define SHRINK_MAGIC 0x7765667453687231ULL /* "weftShr1" */

enum shrink_status {
  SHRINK_OK = 0,
  SHRINK_DISAGREE = 1,  /* culprit computed another kept set */
  SHRINK_NO_ANSWER = 2, /* culprit did not call ncclCommShrink in time */
  SHRINK_NO_ID = 3,     /* the leader could not make an id */
};

struct shrink_ask { /* kept rank -> leader */
  uint64_t magic;
  uint64_t comm_hash; /* the parent, as the sender knows it */
  uint64_t kept_hash; /* the kept set, as the sender computed it */
  int32_t nkept;
  int32_t rank; /* the sender's parent rank */
};

struct shrink_answer { /* leader -> kept rank */
  int32_t status;
  int32_t culprit; /* the parent rank the status is about */
  ncclUniqueId id;
};

struct shrink_plan {
  int *kept; /* parent ranks kept, ascending: kept[i] becomes rank i */
  int nkept;
  int me; /* this rank's index in kept */
  uint64_t kept_hash;
};

static uint64_t fnv1a_int(uint64_t h, int v) {
  for (int i = 0; i < 4; i++) h = (h ^ ((uint32_t)v >> (8 * i) & 0xff)) * 0x100000001b3ULL;
  return h;
}

static ncclResult_t shrink_plan_make(const struct ncclComm *parent, const int *exclude,
                                     int nexclude, struct shrink_plan *p) {
  char *gone = calloc((size_t)parent->nranks, 1);
  p->kept = malloc((size_t)parent->nranks * sizeof(*p->kept));
  if (gone == NULL || p->kept == NULL) {
    WARN("ncclCommShrink: rank %d: out of memory for %d ranks", parent->rank, parent->nranks);
    free(gone);
    free(p->kept);
    return ncclSystemError;
  }
  for (int i = 0; i < nexclude; i++) gone[exclude[i]] = 1;
  p->nkept = 0;
  p->me = -1;
  p->kept_hash = fnv1a_int(0xcbf29ce484222325ULL, parent->nranks);
  for (int r = 0; r < parent->nranks; r++) {
    if (gone[r]) continue;
    if (r == parent->rank) p->me = p->nkept;
    p->kept[p->nkept++] = r;
    p->kept_hash = fnv1a_int(p->kept_hash, r);
  }
  free(gone);
  return ncclSuccess;
}

/* Makes every wait of comm's work give up, waits until its engine is
 * idle, then lowers the flag again (the CUDA engine's abort word stays). */
static void stop_work(struct ncclComm *comm, const char *caller) {
  INFO(WEFT_INIT, "%s: rank %d: abandoning the communicator's work in flight", caller, comm->rank);
  atomic_store(&comm->abort_flag, 1);
  comm->engine->fail(comm);
  ncclResult_t res = comm->engine->wait(comm);
  if (res != ncclSuccess)
    INFO(WEFT_INIT, "%s: rank %d: the abandoned work ended with %d", caller, comm->rank, (int)res);
  atomic_store(&comm->abort_flag, 0);
}

/* The leader: hears every other kept rank, then answers each. */
static ncclResult_t shrink_lead(struct ncclComm *parent, const struct shrink_plan *p,
                                ncclUniqueId *id_out) {
  struct shrink_answer ans = {.status = SHRINK_OK, .culprit = -1};
  ncclResult_t res = ncclSuccess;
  for (int i = 1; i < p->nkept && ans.status == SHRINK_OK; i++) {
    struct shrink_ask ask;
    res = weft_bootstrap_recv(parent->bootstrap, p->kept[i], SHRINK_TAG_ASK, &ask, sizeof(ask));
    if (res != ncclSuccess) {
      ans = (struct shrink_answer){.status = SHRINK_NO_ANSWER, .culprit = p->kept[i]};
    } else if (ask.magic != SHRINK_MAGIC || ask.comm_hash != parent->comm_hash ||
               ask.kept_hash != p->kept_hash || ask.nkept != p->nkept) {
      WARN(
          "ncclCommShrink: rank %d: rank %d passed another excludeRanksList (it keeps %d "
          "ranks, this rank keeps %d); every kept rank must pass the same list",
          parent->rank, p->kept[i], (int)ask.nkept, p->nkept);
      ans = (struct shrink_answer){.status = SHRINK_DISAGREE, .culprit = p->kept[i]};
      res = ncclInvalidUsage;
    }
  }
  if (ans.status == SHRINK_OK) {
    res = weft_bootstrap_new_id(&ans.id);
    if (res != ncclSuccess) ans.status = SHRINK_NO_ID, ans.culprit = parent->rank;
  }
  /* Everyone but a rank that did not answer hears the verdict, so a failure
   * costs the others no second timeout. A failed send is left to the new
   * communicator's init, which will name the rank it misses. */
  for (int i = 1; i < p->nkept; i++)
    if (p->kept[i] != ans.culprit || ans.status != SHRINK_NO_ANSWER)
      (void)weft_bootstrap_send(parent->bootstrap, p->kept[i], SHRINK_TAG_ID, &ans, sizeof(ans));
  if (res == ncclSuccess) *id_out = ans.id;
  return res;
}

/* Any kept rank but the leader: asks, then takes the leader's verdict. */
static ncclResult_t shrink_follow(struct ncclComm *parent, const struct shrink_plan *p,
                                  ncclUniqueId *id_out) {
  int leader = p->kept[0];
  struct shrink_ask ask = {.magic = SHRINK_MAGIC,
                           .comm_hash = parent->comm_hash,
                           .kept_hash = p->kept_hash,
                           .nkept = p->nkept,
                           .rank = parent->rank};
  struct shrink_answer ans;
  WEFT_CHECK(weft_bootstrap_send(parent->bootstrap, leader, SHRINK_TAG_ASK, &ask, sizeof(ask)));
  ncclResult_t res =
      weft_bootstrap_recv(parent->bootstrap, leader, SHRINK_TAG_ID, &ans, sizeof(ans));
  if (res == ncclSystemError && weft_bootstrap_timed_out()) { /* the bootstrap WARNed the wait */
    WARN(
        "ncclCommShrink: rank %d: rank %d (the lowest rank this shrink keeps) did not answer "
        "within WEFT_TIMEOUT: did it call ncclCommShrink, with the same excludeRanksList (its "
        "list may exclude this rank)?",
        parent->rank, leader);
    return ncclRemoteError; /* another rank's doing, as a stall */
  }
  WEFT_CHECK(res);
  switch (ans.status) {
    case SHRINK_OK: *id_out = ans.id; return ncclSuccess;
    case SHRINK_DISAGREE:
      WARN(
          "ncclCommShrink: rank %d: rank %d passed another excludeRanksList than rank %d (the "
          "lowest kept rank); every kept rank must pass the same list",
          parent->rank, (int)ans.culprit, leader);
      return ncclInvalidUsage;
    case SHRINK_NO_ANSWER:
      WARN(
          "ncclCommShrink: rank %d: rank %d, which the shrink keeps, did not call "
          "ncclCommShrink within WEFT_TIMEOUT (rank %d waited for it)",
          parent->rank, (int)ans.culprit, leader);
      return ncclRemoteError;
    default:
      WARN(
          "ncclCommShrink: rank %d: rank %d (the lowest kept rank) could not make the new "
          "communicator's unique id (status %d)",
          parent->rank, leader, (int)ans.status);
      return ncclRemoteError;
  }
}

ncclResult_t weft_comm_shrink(struct ncclComm *parent, const int *exclude, int nexclude, int flags,
                              const ncclConfig_t *config, int async, struct ncclComm **out) {
  if (parent->bootstrap == NULL) {
    WARN("ncclCommShrink: comm %p (rank %d) never finished its init; it can only be destroyed",
         (void *)parent, parent->rank);
    return ncclInvalidUsage;
  }
  struct shrink_plan p;
  WEFT_CHECK(shrink_plan_make(parent, exclude, nexclude, &p));
  if (flags & NCCL_SHRINK_ABORT) stop_work(parent, "ncclCommShrink (NCCL_SHRINK_ABORT)");
  /* Failure notices (core/failure.h) stop the parent's bootstrap; its
   * point-to-point messages between kept ranks still work. */
  weft_failure_keep_bootstrap(parent);
  ncclUniqueId id;
  ncclResult_t res = p.me == 0 ? shrink_lead(parent, &p, &id) : shrink_follow(parent, &p, &id);
  if (res == ncclSuccess) {
    INFO(WEFT_INIT, "ncclCommShrink: rank %d -> rank %d of %d (%d excluded)", parent->rank, p.me,
         p.nkept, nexclude);
    res = weft_comm_create(&id, 1, p.nkept, p.me, config, async, out);
  }
  free(p.kept);
  return res;
}

void weft_comm_revoke(struct ncclComm *comm) {
  /* A split or shrink may follow over the bootstrap, whatever failure
   * notices the abandoned work brings from the peers. */
  if (comm->bootstrap != NULL) weft_failure_keep_bootstrap(comm);
  stop_work(comm, "ncclCommRevoke");
  atomic_store(&comm->revoked, 1);
}
