/* The call check: before a collective moves data, the ranks all-gather a
 * fixed-size record of what each was called with (a ring all-gather on
 * channel 0, run as a plan like any other), and every rank compares them.
 * When they differ, every rank WARNs the same sentence naming who called
 * what, the task moves no data and ends in ncclInvalidUsage. The records
 * are the same size whatever the calls, so the links stay in step and the
 * communicator stays usable. WEFT_CHECK_MISMATCH=0 turns the check off. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/debug.h"
#include "exec/host_internal.h"
#include "exec/reduce.h"

#define DESC_MAGIC 0x43534457u /* "WDSC" */
#define DESC_MSG_BYTES 1024

struct host_desc {
  uint32_t magic;
  int32_t rank;
  uint64_t seq;
  uint64_t count;
  int32_t func;
  int32_t datatype;
  int32_t op;   /* -1 where the call has none; ncclNumOps: a PreMulSum */
  int32_t root; /* -1 where the call has none */
};

static int func_has_op(int func) {
  return func == WEFT_FUNC_ALLREDUCE || func == WEFT_FUNC_REDUCESCATTER ||
         func == WEFT_FUNC_REDUCE;
}

static int func_has_root(int func) {
  return func == WEFT_FUNC_BROADCAST || func == WEFT_FUNC_REDUCE;
}

static struct host_desc desc_of(const struct ncclComm *comm, const struct weft_host_task *task,
                                uint64_t seq) {
  const struct weft_coll *c = &task->coll;
  int op = (task->premul_sum || (unsigned)c->op >= ncclNumOps) ? ncclNumOps : (int)c->op;
  return (struct host_desc){.magic = DESC_MAGIC,
                            .rank = comm->rank,
                            .seq = seq,
                            .count = c->count,
                            .func = (int32_t)c->func,
                            .datatype = (int32_t)c->datatype,
                            .op = func_has_op(c->func) ? op : -1,
                            .root = func_has_root(c->func) ? c->root : -1};
}

static int desc_same(const struct host_desc *a, const struct host_desc *b) {
  return a->func == b->func && a->count == b->count && a->datatype == b->datatype &&
         a->op == b->op && a->root == b->root;
}

/* "AllReduce(count 1024, ncclFloat32, ncclSum)" */
static int desc_text(const struct host_desc *d, char *buf, size_t size) {
  const char *op = d->op == ncclNumOps ? "premulsum" : weft_op_name((ncclRedOp_t)d->op);
  int n = snprintf(buf, size, "%s(count %llu, %s", weft_func_name((enum weft_func)d->func),
                   (unsigned long long)d->count, weft_dtype_name((ncclDataType_t)d->datatype));
  if (n >= 0 && (size_t)n < size && d->op >= 0) n += snprintf(buf + n, size - (size_t)n, ", %s", op);
  if (n >= 0 && (size_t)n < size && d->root >= 0)
    n += snprintf(buf + n, size - (size_t)n, ", root %d", d->root);
  if (n >= 0 && (size_t)n < size) n += snprintf(buf + n, size - (size_t)n, ")");
  return n;
}

/* The ring all-gather of records: step s sends the record of rank me-s to
 * ring next and receives that of rank me-s-1 from ring previous. Built
 * once per communicator. */
static ncclResult_t check_plan(struct weft_host_engine *h) {
  struct weft_host_worker *w = &h->w;
  struct ncclComm *comm = h->comm;
  int n = comm->nranks, me = comm->rank;
  if (w->descs != NULL) return ncclSuccess;
  w->descs = calloc((size_t)n, sizeof(struct host_desc));
  w->desc_lane.steps = calloc((size_t)n - 1, sizeof(struct weft_step));
  if (w->descs == NULL || w->desc_lane.steps == NULL) {
    WARN("rank %d: out of memory for the call check of %d ranks", me, n);
    free(w->descs), free(w->desc_lane.steps);
    w->descs = NULL, w->desc_lane.steps = NULL;
    return ncclSystemError;
  }
  const size_t d = sizeof(struct host_desc);
  for (int s = 0; s < n - 1; s++) {
    w->desc_lane.steps[s] = (struct weft_step){
        .flags = WEFT_STEP_SEND | WEFT_STEP_RECV | WEFT_STEP_COPY,
        .send_buf = 0,
        .dst_buf = 0,
        .send_peer = comm->ring_next,
        .recv_peer = comm->ring_prev,
        .send_off = (size_t)((me - s + n) % n) * d,
        .dst_off = (size_t)((me - s - 1 + 2 * n) % n) * d,
        .send_bytes = d,
        .recv_bytes = d,
    };
  }
  w->desc_lane.nsteps = w->desc_lane.cap = (size_t)n - 1;
  w->desc_plan = (struct weft_plan){1, &w->desc_lane};
  return ncclSuccess;
}

/* "0,1,4-7" */
static void ranks_text(const struct host_desc *all, int n, const int *group, int g, char *buf,
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
static void check_report(const struct ncclComm *comm, const struct host_desc *all, int n) {
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

ncclResult_t weft__host_check_call(struct weft_host_engine *h, const struct weft_host_task *task,
                                   uint64_t seq, int *agree_out) {
  struct ncclComm *comm = h->comm;
  struct weft_host_worker *w = &h->w;
  int n = comm->nranks;
  WEFT_CHECK(check_plan(h));
  struct host_desc *all = w->descs;
  all[comm->rank] = desc_of(comm, task, seq);
  char *bufs[1] = {w->descs};
  struct weft_host_run r = {.h = h,
                            .plan = &w->desc_plan,
                            .bufs = bufs,
                            .nbufs = 1,
                            .datatype = ncclUint8,
                            .op = ncclSum,
                            .esize = 1,
                            .what = "call check of collective",
                            .seq = seq};
  WEFT_CHECK(weft__host_plan_connect(&r));
  WEFT_CHECK(weft__host_plan_run(&r));
  *agree_out = 1;
  for (int i = 0; i < n; i++) {
    if (all[i].magic != DESC_MAGIC || all[i].rank != i) {
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
