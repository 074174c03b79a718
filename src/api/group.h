/* The calling thread's group of pending operations. */
#ifndef WEFT_API_GROUP_H
#define WEFT_API_GROUP_H

#include "nccl.h"
#include "api/redop.h"
#include "sched/schedule.h"

struct ncclComm;

/* Adds one checked operation (a collective, or a send/recv with the peer in
 * coll->root); use is its operator (NULL: a built-in one or none). Outside
 * a group it runs at once and this returns when it has finished. */
ncclResult_t weft_group_add(struct ncclComm *comm, const struct weft_coll *coll,
                            const struct weft_redop_use *use);
/* The same, with the call's cudaStream_t: a CUDA-engine communicator
 * launches the operation on it and does not wait for it. */
ncclResult_t weft_group_add_on(struct ncclComm *comm, const struct weft_coll *coll,
                               const struct weft_redop_use *use, void *stream);

/* Nesting depth of ncclGroupStart in the calling thread. */
int weft_group_depth(void);
/* A communicator created inside the group; ncclGroupEnd waits for its init
 * when its config is blocking. */
ncclResult_t weft_group_add_init(struct ncclComm *comm);
/* A collective step of comm that cannot run inside the group (one thread
 * may drive several of its ranks: ncclCommWindowRegister): ncclGroupEnd
 * runs fn(arg), a communicator's steps in call order, different
 * communicators' at once, each on a thread of its own, before the
 * group's operations; the first failure is what ncclGroupEnd returns. */
ncclResult_t weft_group_add_step(struct ncclComm *comm, ncclResult_t (*fn)(void *arg), void *arg);
/* Drops everything the calling thread's open group holds for comm, which is
 * being destroyed, aborted or revoked, and says how many operations were
 * dropped, naming `caller`: a WARN, or an INFO where the caller asked to
 * stop (quiet: abort, revoke). */
void weft_group_forget(const char *caller, const struct ncclComm *comm, int quiet);

#endif
