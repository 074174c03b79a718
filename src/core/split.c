/* ncclCommSplit: the parent's ranks agree on colors and keys over the
 * parent's bootstrap, then each color's first rank makes a unique id and
 * hands it to the others, and every member creates its new rank. */
#include <stdlib.h>

#include "core/bootstrap.h"
#include "base/check.h"
#include "core/comm.h"

#define WEFT_SPLIT_TAG 0x53000000

struct split_entry {
  int color;
  int key;
  int rank;
};

static int split_entry_cmp(const void *a, const void *b) {
  const struct split_entry *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Fills members (sorted) with the ranks sharing my color; returns their count. */
static int split_members(const struct split_entry *all, int nranks, int color,
                         struct split_entry *members) {
  int n = 0;
  for (int r = 0; r < nranks; r++)
    if (all[r].color == color) members[n++] = all[r];
  qsort(members, (size_t)n, sizeof(*members), split_entry_cmp);
  return n;
}

static ncclResult_t split_share_id(struct ncclComm *parent, const struct split_entry *members,
                                   int n, int my_index, int tag, ncclUniqueId *id) {
  if (my_index == 0) {
    WEFT_CHECK(weft_bootstrap_new_id(id));
    for (int i = 1; i < n; i++)
      WEFT_CHECK(weft_bootstrap_send(parent->bootstrap, members[i].rank, tag, id, sizeof(*id)));
    return ncclSuccess;
  }
  return weft_bootstrap_recv(parent->bootstrap, members[0].rank, tag, id, sizeof(*id));
}

ncclResult_t weft_comm_split(struct ncclComm *parent, int color, int key,
                             const ncclConfig_t *config, struct ncclComm **out) {
  ncclResult_t res = ncclSuccess;
  int tag = WEFT_SPLIT_TAG | (int)(parent->split_seq++ & 0xffffff);
  struct split_entry *all = calloc((size_t)parent->nranks, sizeof(*all));
  struct split_entry *members = calloc((size_t)parent->nranks, sizeof(*members));
  if (all == NULL || members == NULL) {
    WARN("ncclCommSplit: rank %d: out of memory", parent->rank);
    res = ncclSystemError;
    goto out;
  }
  all[parent->rank] = (struct split_entry){color, key, parent->rank};
  res = weft_bootstrap_allgather(parent->bootstrap, all, sizeof(*all));
  const int timed_out = res == ncclSystemError && weft_bootstrap_timed_out();
  if (timed_out) /* the bootstrap WARNed the wait */
    WARN(
        "ncclCommSplit: rank %d: not every rank of the communicator joined the split within "
        "WEFT_TIMEOUT: every rank must call ncclCommSplit, those that want no new communicator "
        "with NCCL_SPLIT_NOCOLOR",
        parent->rank);
  if (timed_out) res = ncclRemoteError; /* another rank's doing, as a stall */
  if (res != ncclSuccess) goto out;
  *out = NULL;
  if (color == NCCL_SPLIT_NOCOLOR) goto out;
  int n = split_members(all, parent->nranks, color, members);
  int me = 0;
  while (members[me].rank != parent->rank) me++;
  ncclUniqueId id;
  WEFT_CHECK_GOTO(split_share_id(parent, members, n, me, tag, &id), res, out);
  INFO(WEFT_INIT, "ncclCommSplit: rank %d color %d key %d -> rank %d of %d", parent->rank, color,
       key, me, n);
  res = weft_comm_create(&id, 1, n, me, config, !config->blocking, out);
out:
  free(all);
  free(members);
  return res;
}
