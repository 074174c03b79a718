/* The call check: before a collective moves data, every rank sends a
 * fixed-size record of what it was called with to every other rank (the
 * direct plan with no bytes, run framed), and every rank compares them.
 * A direct collective needs no separate check: its records travel in
 * front of its data, in the same exchange, and what arrived is reduced or
 * copied into the output only when every record agrees.
 * When they differ, every rank WARNs the same sentence naming who called
 * what, the task moves no data and ends in ncclInvalidUsage. The records
 * are the same size whatever the calls, so the links stay in step and the
 * communicator stays usable. WEFT_CHECK_MISMATCH=0 turns the check off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/comm.h"
#include "base/debug.h"
#include "exec/host_internal.h"
#include "exec/reduce.h"

#define DESC_MSG_BYTES 1024


static int func_has_op(int func) {
  return func == WEFT_FUNC_ALLREDUCE || func == WEFT_FUNC_REDUCESCATTER ||
         func == WEFT_FUNC_REDUCE;
}

static int func_has_root(int func) {
  return func == WEFT_FUNC_BROADCAST || func == WEFT_FUNC_REDUCE;
}

static struct weft_host_record desc_of(const struct ncclComm *comm, const struct weft_host_task *task,
                                uint64_t seq, size_t payload) {
  const struct weft_coll *c = &task->coll;
  int op = (task->premul_sum || (unsigned)c->op >= ncclNumOps) ? ncclNumOps : (int)c->op;
  return (struct weft_host_record){.magic = WEFT_HOST_RECORD_MAGIC,
                            .rank = comm->rank,
                            .seq = seq,
                            .count = c->count,
                            .func = (int32_t)c->func,
                            .datatype = (int32_t)c->datatype,
                            .op = func_has_op(c->func) ? op : -1,
                            .root = func_has_root(c->func) ? c->root : -1,
                            .payload = payload};
}

static int desc_same(const struct weft_host_record *a, const struct weft_host_record *b) {
  return a->func == b->func && a->count == b->count && a->datatype == b->datatype &&
         a->op == b->op && a->root == b->root && a->payload == b->payload;
}

/* "AllReduce(count 1024, ncclFloat32, ncclSum)" */
static int desc_text(const struct weft_host_record *d, char *buf, size_t size) {
  const char *op = d->op == ncclNumOps ? "premulsum" : weft_op_name((ncclRedOp_t)d->op);
  int n = snprintf(buf, size, "%s(count %llu, %s", weft_func_name((enum weft_func)d->func),
                   (unsigned long long)d->count, weft_dtype_name((ncclDataType_t)d->datatype));
  if (n >= 0 && (size_t)n < size && d->op >= 0) n += snprintf(buf + n, size - (size_t)n, ", %s", op);
  if (n >= 0 && (size_t)n < size && d->root >= 0)
    n += snprintf(buf + n, size - (size_t)n, ", root %d", d->root);
  if (n >= 0 && (size_t)n < size) n += snprintf(buf + n, size - (size_t)n, ")");
  return n;
}

/* The records' exchange, and the direct reduction's operand list. Made
 * once per communicator. */
static ncclResult_t check_plan(struct weft_host_engine *h) {
  struct weft_host_worker *w = &h->w;
  struct ncclComm *comm = h->comm;
  int n = comm->nranks, me = comm->rank;
  if (w->descs != NULL) return ncclSuccess;
  w->descs = calloc((size_t)n, sizeof(*w->descs));
  w->direct_src = calloc((size_t)n, sizeof(*w->direct_src));
  if (w->descs == NULL || w->direct_src == NULL) {
    WARN("rank %d: out of memory for the call check of %d ranks", me, n);
    free(w->descs), free(w->direct_src);
    w->descs = NULL, w->direct_src = NULL;
    return ncclSystemError;
  }
  ncclResult_t res = weft_direct_plan(me, n, 0, &w->desc_plan);
  if (res != ncclSuccess) {
    free(w->descs), free(w->direct_src);
    w->descs = NULL, w->direct_src = NULL;
  }
  return res;
}

/* "0,1,4-7" */
static void ranks_text(const struct weft_host_record *all, int n, const int *group, int g, char *buf,
                       size_t size, int *count_out) {
  size_t len = 0;
  int count = 0;
  buf[0] = '\0';
  for (int r = 0; r < n; r++) {
    if (group[r] != g) continue;
    int end = r;
    while (end + 1 < n && group[end + 1] == g) end++;
    count += end - r + 1;
    int k = end > r ? snprintf(buf + len, size - len, "%s%d-%d", len ? "," : "", all[r].rank,
                               all[end].rank)
                    : snprintf(buf + len, size - len, "%s%d", len ? "," : "", all[r].rank);
    if (k < 0 || (size_t)k >= size - len) break;
    len += (size_t)k;
    r = end;
  }
  *count_out = count;
}

/* Groups equal records and WARNs who called what, the same on every rank. */
static void check_report(const struct ncclComm *comm, const struct weft_host_record *all, int n) {
  int *group = malloc((size_t)n * sizeof(int));
  char msg[DESC_MSG_BYTES], ranks[256], call[160];
  int ngroups = 0;
  size_t len = 0;
  if (group == NULL) {
    WARN("rank %d: collective #%llu: the ranks called different collectives", comm->rank,
         (unsigned long long)all[0].seq);
    return;
  }
  for (int r = 0; r < n; r++) {
    group[r] = -1;
    for (int q = 0; q < r && group[r] < 0; q++)
      if (desc_same(&all[q], &all[r])) group[r] = group[q];
    if (group[r] < 0) group[r] = ngroups++;
  }
  for (int g = 0; g < ngroups && len + 1 < sizeof(msg); g++) {
    int count;
    ranks_text(all, n, group, g, ranks, sizeof(ranks), &count);
    for (int r = 0; r < n; r++)
      if (group[r] == g) {
        desc_text(&all[r], call, sizeof(call));
        break;
      }
    int k = snprintf(msg + len, sizeof(msg) - len, "%s%s %s called %s",
                     g == 0 ? "" : (g == 1 ? " but " : " and "), count > 1 ? "ranks" : "rank",
                     ranks, call);
    if (k < 0) break;
    len += (size_t)k;
  }
  WARN("collective #%llu mismatch: %s", (unsigned long long)all[0].seq, msg);
  free(group);
}

/* After a framed run: every rank's record is in; do they agree? */
static ncclResult_t check_records(struct ncclComm *comm, const struct weft_host_record *all,
                                  uint64_t seq, int *agree_out) {
  int n = comm->nranks;
  *agree_out = 1;
  for (int i = 0; i < n; i++) {
    if (all[i].magic != WEFT_HOST_RECORD_MAGIC || all[i].rank != i) {
      WARN("rank %d: collective #%llu: rank %d sent no call record (is it in send/recv, or "
           "running another communicator's calls?); the ranks are out of step",
           comm->rank, (unsigned long long)seq, i);
      return ncclInvalidUsage;
    }
    if (!desc_same(&all[i], &all[comm->rank])) *agree_out = 0;
  }
  if (!*agree_out) check_report(comm, all, n);
  return ncclSuccess;
}

ncclResult_t weft__host_check_begin(struct weft_host_engine *h, const struct weft_host_task *task,
                                    uint64_t seq, struct weft_host_run *r) {
  static char *const no_bufs[2] = {NULL, NULL};
  struct weft_host_worker *w = &h->w;
  WEFT_CHECK(check_plan(h));
  w->descs[h->comm->rank] = desc_of(h->comm, task, seq, 0);
  *r = (struct weft_host_run){.h = h,
                              .plan = &w->desc_plan,
                              .slot = r->slot,
                              .bufs = no_bufs,
                              .nbufs = 2,
                              .datatype = ncclUint8,
                              .op = ncclSum,
                              .esize = 1,
                              .records = w->descs,
                              .what = "call check of collective",
                              .seq = seq};
  return ncclSuccess;
}

ncclResult_t weft__host_check_verdict(struct weft_host_engine *h, uint64_t seq, int *agree_out) {
  return check_records(h->comm, h->w.descs, seq, agree_out);
}

ncclResult_t weft__host_check_call(struct weft_host_engine *h, const struct weft_host_task *task,
                                   uint64_t seq, int *agree_out) {
  struct weft_host_run r = {.slot = NULL};
  WEFT_CHECK(weft__host_check_begin(h, task, seq, &r));
  WEFT_CHECK(weft__host_plan_connect(&r));
  WEFT_CHECK(weft__host_plan_run(&r));
  return weft__host_check_verdict(h, seq, agree_out);
}

/* The caller's input, kept aside when the output overwrites it before the
 * reduction reaches this rank's turn (in place, rank 2 and up). */
static ncclResult_t direct_self(struct weft_host_worker *w, const char *in, size_t bytes,
                                int rank, const char **out) {
  if (bytes > w->direct_self_cap) {
    void *p;
    if (posix_memalign(&p, 64, bytes) != 0) {
      WARN("rank %d: out of memory for a %zu-byte copy of the input", rank, bytes);
      return ncclSystemError;
    }
    free(w->direct_self);
    w->direct_self = p;
    w->direct_self_cap = bytes;
  }
  memcpy(w->direct_self, in, bytes);
  *out = w->direct_self;
  return ncclSuccess;
}

/* Reduces the n sources of direct_src in rank order into out. */
static void direct_reduce(struct weft_host_worker *w, const struct weft_host_run *r, char *out,
                          size_t count, int n) {
  weft_reduce_host(out, w->direct_src[0], w->direct_src[1], count, r->datatype, r->op);
  for (int k = 2; k < n; k++)
    weft_reduce_host(out, out, w->direct_src[k], count, r->datatype, r->op);
  if (r->op == ncclAvg) weft_postop_avg_host(out, count, r->datatype, n);
}

/* What arrived, into the output: reduced (AllReduce, ReduceScatter, and
 * Reduce at the root) or copied (AllGather, Broadcast off the root). Own
 * data is read in place; an in-place reduction past rank 1 reads a copy,
 * since the output overwrites it before its turn. */
static ncclResult_t direct_finish(struct weft_host_worker *w, const struct weft_host_task *task,
                                  const struct weft_host_run *r, int me, int n, size_t bytes) {
  const struct weft_coll *c = &task->coll;
  const char *in = r->bufs[WEFT_BUF_IN];
  char *out = r->bufs[WEFT_BUF_OUT];
  for (int i = 0; i < r->plan->nlanes; i++)
    w->direct_src[r->plan->lanes[i].steps[0].recv_peer] = r->lanes[i].scratch;
  switch (c->func) {
    case WEFT_FUNC_ALLGATHER:
      for (int k = 0; k < n; k++) {
        const char *src = k == me ? in : w->direct_src[k];
        if (out + (size_t)k * bytes != src) memcpy(out + (size_t)k * bytes, src, bytes);
      }
      return ncclSuccess;
    case WEFT_FUNC_BROADCAST: {
      const char *src = c->root == me ? in : w->direct_src[c->root];
      if (out != src) memcpy(out, src, bytes);
      return ncclSuccess;
    }
    case WEFT_FUNC_REDUCE:
      if (me != c->root) return ncclSuccess;
      break;
    case WEFT_FUNC_REDUCESCATTER: in += (size_t)me * bytes; break;
    default: break;
  }
  if (in == out && me >= 2) WEFT_CHECK(direct_self(w, in, bytes, me, &in));
  w->direct_src[me] = in;
  direct_reduce(w, r, out, bytes / r->esize, n);
  return ncclSuccess;
}

ncclResult_t weft__host_direct_run(struct weft_host_engine *h, const struct weft_host_task *task,
                                   struct weft_host_run *r, ncclResult_t *usage_out) {
  struct ncclComm *comm = h->comm;
  struct weft_host_worker *w = &h->w;
  int n = comm->nranks, me = comm->rank, agree = 0;
  size_t bytes = task->coll.count * r->esize;
  WEFT_CHECK(check_plan(h));
  w->descs[me] = desc_of(comm, task, r->seq, bytes);
  r->records = w->descs;
  WEFT_CHECK(weft__host_plan_connect(r));
  WEFT_CHECK(weft__host_plan_run(r));
  WEFT_CHECK(check_records(comm, w->descs, r->seq, &agree));
  if (!agree) {
    *usage_out = ncclInvalidUsage; /* what arrived is dropped */
    return ncclSuccess;
  }
  if (bytes == 0) return ncclSuccess;
  return direct_finish(w, task, r, me, n, bytes);
}
