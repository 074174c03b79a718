/* Private to the host engine (host.c: queue and worker; host_run.c: running
 * a plan's lanes; host_check.c: checking that ranks agree on a call). */
#ifndef WEFT_EXEC_HOST_INTERNAL_H
#define WEFT_EXEC_HOST_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/connect.h"
#include "exec/host.h"
#include "exec/host_copy.h"
#include "exec/host_team.h"
#include "transport/transport.h"

/* A reducing receive lands in pieces of this size (a multiple of every
 * element size), small enough to stay in cache until reduced. The
 * reducing collectives' sends are cut into messages no larger (msg_max
 * below), so a piece takes whole messages. */
#define WEFT_HOST_PIECE_BYTES (256u * 1024u)
/* A guarded receive (weft_host_task.rx_guard) lands through a bounce
 * buffer of this size, a network message whole (net_conn.c's largest);
 * a swap (host_run.c) moves its pieces through the same buffer. */
#ifndef WEFT_HOST_GUARD_BYTES
#define WEFT_HOST_GUARD_BYTES (1024u * 1024u)
#endif

/* What a lane's receive does with the bytes of the current step. */
enum weft_host_rx {
  WEFT_HOST_RX_NONE,
  WEFT_HOST_RX_COPY,    /* straight into dst */
  WEFT_HOST_RX_REDUCE,  /* a piece at a time into `piece`, then reduced into dst */
  WEFT_HOST_RX_HDR,     /* a send/recv header, before the data */
  WEFT_HOST_RX_DRAIN,   /* a mismatched send's bytes, discarded */
  WEFT_HOST_RX_RECORD,  /* a call record, before the data (framed runs) */
  WEFT_HOST_RX_GUARD,   /* a piece at a time into `guard`, copied to dst once the
                           step's send (same start) has read past it */
  WEFT_HOST_RX_SWAP,    /* a swap with the peer: this side's half, a piece at a time */
  WEFT_HOST_RX_SWAPPED, /* the peer's word that its half is done */
};

/* What a rank was called with (host_check.c). Framed runs (the call check,
 * direct plans) send it before every send's bytes; payload is the direct
 * plan's block (0 for the call check), and what follows it on a link is
 * weft_direct_sends of it (sched/schedule.h), so a receiver that expected
 * another size drains exactly those bytes and the link stays in step. */
#define WEFT_HOST_RECORD_MAGIC 0x43534457u /* "WDSC" */

struct weft_host_record {
  uint32_t magic;
  int32_t rank;
  uint64_t seq;
  uint64_t count;
  int32_t func;
  int32_t datatype;
  int32_t op;   /* -1 where the call has none; ncclNumOps: a PreMulSum */
  int32_t root; /* -1 where the call has none */
  uint64_t payload;
};

/* One lane in flight: its position in the plan and its two transfers. The
 * buffers at the end belong to the engine and are kept across tasks. */
struct weft_host_lane {
  const struct weft_lane *lane;
  size_t step;  /* the step in progress, or nsteps when done */
  int started;  /* the step's transfers are set up */
  /* Send: a send/recv header (tx_hdr) goes before the data; after a
   * header that offers a swap (host_run.c), the data waits (tx_hold) for
   * the peer's header. */
  struct weft_xfer tx;
  int tx_hdr;
  int tx_hold;
  uint64_t tx_hdr_val[2];
  char *tx_data;
  size_t tx_bytes;
  /* The step's LOCAL copy rides its send: the link writes the bytes it
   * sends here too (weft_xfer_send_mirror); NULL: none. */
  char *tx_mirror;
  /* Receive. */
  struct weft_xfer rx;
  enum weft_host_rx rx_mode;
  char *rx_dst;
  const char *rx_local;
  size_t rx_total; /* bytes of the step (or of the drain) */
  size_t rx_off;   /* bytes already landed and reduced or drained */
  uint64_t rx_hdr_val[2];
  int skip_buf; /* p2p: later receives of this op are skipped (-1: none) */
  /* A swap: the peer's buffer, this side's half [swap_off, swap_end) and
   * the words that say a half is done. */
  uint64_t swap_peer;
  size_t swap_off, swap_end;
  uint64_t swap_done_tx, swap_done_rx;
  /* A LOCAL copy beside a send, made a piece at a time between the
   * other lanes' turns (cp_left bytes still to copy); or, when the copy
   * pool takes it (cp_pooled), posted there as cp_job. */
  char *cp_dst;
  const char *cp_src;
  size_t cp_left;
  int cp_pooled;
  struct weft_host_copy cp_job;
  /* Engine-owned. */
  char *piece;
  char *guard; /* WEFT_HOST_GUARD_BYTES, once a guarded receive or a swap needs it */
  char *scratch;
  size_t scratch_cap;
};

/* The lanes of one plan in flight, and room to list their stalled
 * transfers (2 per lane). Slot 0 runs one task at a time; a window of
 * tasks in flight together (host_window.c) takes one slot per task. */
struct weft_host_slot {
  struct weft_host_lane *lanes;
  int cap;
  struct weft_xfer **pending;
};

/* Tasks a window may hold (WEFT_HOST_WINDOW's ceiling). */
#define WEFT_HOST_WINDOW_MAX 4

/* A plan being run, and what it needs to know of its task. */
struct weft_host_run {
  struct weft_host_engine *h;
  const struct weft_plan *plan;
  struct weft_host_slot *slot;  /* NULL: slot 0; set by weft__host_run_prepare */
  struct weft_host_lane *lanes; /* slot->lanes, one per plan lane, once prepared */
  char *const *bufs;
  int nbufs;
  int is_p2p;
  const struct weft_p2p *p2p; /* p2p: the ops, indexed like bufs */
  const unsigned char *rx_guard; /* p2p: the task's (NULL: no receive is guarded) */
  ncclDataType_t datatype;
  ncclRedOp_t op; /* the op reductions use (a PreMulSum runs as ncclSum) */
  size_t esize;
  struct weft_host_record *records; /* framed run: records[r] is rank r's (else NULL) */
  const char *what;   /* "AllReduce", "send/recv", "call check": for messages */
  uint64_t seq;
  ncclResult_t usage; /* a mismatched send/recv: reported, not fatal */
  /* The largest message a send on a net link may be (weft_conn's
   * send_msg_max): WEFT_HOST_PIECE_BYTES for a reducing collective, whose
   * peers receive in pieces of that size; WEFT_CONN_WIDE_MSG for a call on
   * the wide link, whose peer receives its one step whole; else 0 (the
   * transport's). */
  size_t msg_max;
  int reduces; /* a reducing collective (AllReduce, ReduceScatter, Reduce) */
  /* This call's LOCAL copies by the pool or beside a send go past the
   * cache: a collective that does not reduce (no later step reads what a
   * copy wrote) on blocks of at least WEFT_HOST_COPY_STREAM_MIN bytes. */
  int stream_copies;
};

/* The worker's own state. */
struct weft_host_worker {
  uint64_t coll_seq; /* collectives run, for messages */
  uint64_t p2p_seq;
  uint64_t run_seq;  /* plans run, to tag which lane uses a conn */
  struct weft_host_slot slots[WEFT_HOST_WINDOW_MAX];
  struct weft_xfer **win_pending; /* a window's stalled transfers (host_window.c) */
  size_t win_pending_cap;
  struct weft_conn_need *needs;
  int needs_cap;
  void *premul;
  size_t premul_cap;
  /* The call check: every rank's record, the record-only direct plan, and
   * the direct reduction's operands in rank order. */
  struct weft_host_record *descs;
  struct weft_plan desc_plan;
  const char **direct_src;
  void *direct_self;
  size_t direct_self_cap;
};

struct weft_host_engine {
  struct ncclComm *comm;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work_cv; /* the worker sleeps here for work or stop */
  pthread_cond_t idle_cv; /* waiters sleep here for their tasks to finish */

  /* Under lock. */
  struct weft_host_task *queue; /* circular: count items from head */
  size_t cap, head, count;
  int stop;
  int worker_sleeping;
  int waiters; /* threads asleep on idle_cv */
  int inside;  /* threads inside wait (destroy waits for them to leave) */
  ncclResult_t error; /* the first failure; sticky */
  ncclResult_t usage; /* the first misuse since the last wait */

  /* Written under lock, read without it by spinning waits. */
  _Atomic uint64_t queued;   /* tasks ever queued */
  _Atomic uint64_t finished; /* tasks ever finished */
  _Atomic int running;       /* a thread (worker or waiter) is running tasks */
  uint64_t taken;            /* tasks ever taken off the queue (by the runner, under lock) */

  int64_t spin_pure; /* polls before a wait yields (weft_spin_pure) */
  struct weft_host_copy_pool copy; /* large local copies (host_copy.h) */
  struct weft_host_team team;      /* a large plan's lanes on several threads (host_team.h) */
  struct weft_host_worker w;
};

/* Runs one task on the worker (host_run.c). Misuse that leaves the
 * communicator usable goes to *usage_out; the result is fatal. */
ncclResult_t weft__host_task_run(struct weft_host_engine *h, struct weft_host_task *task,
                                 ncclResult_t *usage_out);
/* Runs a plan's lanes to completion (host_run.c). */
ncclResult_t weft__host_plan_run(struct weft_host_run *r);
/* Makes sure every link the plan uses is connected (host_run.c). */
ncclResult_t weft__host_plan_connect(struct weft_host_run *r);
/* The call check before a collective (host_check.c): every rank learns
 * every rank's call; *agree_out is 0 when they differ (WARNed). */
ncclResult_t weft__host_check_call(struct weft_host_engine *h, const struct weft_host_task *task,
                                   uint64_t seq, int *agree_out);
/* A direct AllReduce (host_check.c): the plan's exchange carries the call
 * records, then the arrivals are reduced in rank order into the output. */
ncclResult_t weft__host_direct_run(struct weft_host_engine *h, const struct weft_host_task *task,
                                   struct weft_host_run *r, ncclResult_t *usage_out);
/* The run of a collective's plan (host_task.c); op is what its
 * reductions use (a PreMulSum runs as ncclSum). r->slot is kept. */
void weft__host_coll_run_init(struct weft_host_engine *h, const struct weft_host_task *task,
                              uint64_t seq, ncclRedOp_t op, struct weft_host_run *r);
/* The INFO line of a collective that failed (host_task.c). */
void weft__host_coll_failed(const struct weft_host_engine *h, const struct weft_host_task *task,
                            uint64_t seq, ncclResult_t res);
/* The call check in two halves (host_check.c), for a window that runs it
 * beside other tasks: begin sets up the records' exchange as a run
 * (r->slot is kept; its links are the check plan's), verdict compares the
 * records once that run has finished. */
ncclResult_t weft__host_check_begin(struct weft_host_engine *h, const struct weft_host_task *task,
                                    uint64_t seq, struct weft_host_run *r);
ncclResult_t weft__host_check_verdict(struct weft_host_engine *h, uint64_t seq, int *agree_out);
/* Lanes and running them (host_run.c): prepare takes r's slot (slot 0
 * when NULL) and resets a lane per plan lane; lane_progress moves one lane
 * as far as it goes without waiting (*done when it has finished);
 * copy_cancel makes sure no copy-pool thread still writes for r's lanes;
 * run_members is how many lane-team threads would run r (1: this one). */
ncclResult_t weft__host_run_prepare(struct weft_host_run *r);
ncclResult_t weft__host_lane_progress(struct weft_host_run *r, struct weft_host_lane *l, int *moved,
                                      int *done);
void weft__host_run_copy_cancel(struct weft_host_run *r);
int weft__host_run_members(const struct weft_host_run *r);
/* "AllReduce #12", for a stall's WARN (ctx: a struct weft_host_run). */
void weft__host_run_describe(void *ctx, char *buf, size_t size);
/* The queue (host.c), for a window: take_if takes the queue's head into
 * *out when ok (called under the engine's lock) accepts it (1), says
 * when nothing is queued (0) or ok refused the head (-1); retire ends a
 * taken task as a lone one ends (a failure is told to the peers unless
 * the engine was poisoned before, the result and misuse recorded, the task
 * counted finished). */
int weft__host_take_if(struct weft_host_engine *h,
                       int (*ok)(void *ctx, const struct weft_host_task *task), void *ctx,
                       struct weft_host_task *out);
void weft__host_retire(struct weft_host_engine *h, ncclResult_t res, ncclResult_t poisoned,
                       ncclResult_t usage);
/* The window (host_window.c): whether a task just taken should start one,
 * and running it: the task, and what joins it, to the end. */
int weft__host_window_wants(const struct weft_host_engine *h, const struct weft_host_task *t);
/* Whether collective t may run beside the earlier e of a window on
 * nranks ranks: t writes nothing e reads or writes and reads nothing e
 * writes, or t is e's call again (same function, buffers, count, type,
 * op, root and plan). */
int weft__host_window_clear(int nranks, const struct weft_host_task *t,
                            const struct weft_host_task *e);
void weft__host_window_run(struct weft_host_engine *h, struct weft_host_task *first);
/* Frees the worker's buffers (host_run.c). */
void weft__host_worker_free(struct weft_host_worker *w);

#endif
