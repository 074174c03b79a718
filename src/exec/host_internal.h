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

/* What a lane's receive does with the bytes of the current step. */
enum weft_host_rx {
  WEFT_HOST_RX_NONE,
  WEFT_HOST_RX_COPY,   /* straight into dst */
  WEFT_HOST_RX_REDUCE, /* a piece at a time into `piece`, then reduced into dst */
  WEFT_HOST_RX_HDR,    /* a send/recv header, before the data */
  WEFT_HOST_RX_DRAIN,  /* a mismatched send's bytes, discarded */
  WEFT_HOST_RX_RECORD, /* a call record, before the data (framed runs) */
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
  /* Send: a send/recv header (tx_hdr) goes before the data. */
  struct weft_xfer tx;
  int tx_hdr;
  uint64_t tx_hdr_val;
  char *tx_data;
  size_t tx_bytes;
  /* Receive. */
  struct weft_xfer rx;
  enum weft_host_rx rx_mode;
  char *rx_dst;
  const char *rx_local;
  size_t rx_total; /* bytes of the step (or of the drain) */
  size_t rx_off;   /* bytes already landed and reduced or drained */
  uint64_t rx_hdr_val;
  int skip_buf; /* p2p: later receives of this op are skipped (-1: none) */
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
  char *scratch;
  size_t scratch_cap;
};

/* A plan being run, and what it needs to know of its task. */
struct weft_host_run {
  struct weft_host_engine *h;
  const struct weft_plan *plan;
  char *const *bufs;
  int nbufs;
  int is_p2p;
  const struct weft_p2p *p2p; /* p2p: the ops, indexed like bufs */
  ncclDataType_t datatype;
  ncclRedOp_t op; /* the op reductions use (a PreMulSum runs as ncclSum) */
  size_t esize;
  struct weft_host_record *records; /* framed run: records[r] is rank r's (else NULL) */
  const char *what;   /* "AllReduce", "send/recv", "call check": for messages */
  uint64_t seq;
  ncclResult_t usage; /* a mismatched send/recv: reported, not fatal */
  /* The largest message a send on a net link may be (weft_conn's
   * send_msg_max): WEFT_HOST_PIECE_BYTES for a reducing collective, whose
   * peers receive in pieces of that size, else 0 (the transport's). */
  size_t msg_max;
  int reduces; /* a reducing collective (AllReduce, ReduceScatter, Reduce) */
};

/* The worker's own state. */
struct weft_host_worker {
  uint64_t coll_seq; /* collectives run, for messages */
  uint64_t p2p_seq;
  uint64_t run_seq;  /* plans run, to tag which lane uses a conn */
  struct weft_host_lane *lanes;
  int lanes_cap;
  struct weft_xfer **pending;
  int pending_cap;
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
/* Frees the worker's buffers (host_run.c). */
void weft__host_worker_free(struct weft_host_worker *w);

#endif
