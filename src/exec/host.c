/* The host engine: a worker thread per communicator runs the collectives
 * queued on it, in order, over host buffers. enqueue copies the call into a
 * growable queue and returns; wait sleeps until the queue drains. The first
 * failure poisons the engine and the communicator: what is queued after it
 * is dropped, later enqueues fail at once, and every wait returns it.
 *
 * A step of a schedule runs as one weft_conn_sendrecv, so the send to the
 * ring successor and the receive from the predecessor progress together.
 * A reducing receive is cut into pieces that land in a small scratch buffer
 * and are reduced into the output while the next piece is already on its
 * way through the socket buffers; a copying receive lands straight in the
 * output, and sends go straight from the user's buffers (the first
 * reduce-scatter step from the input), so no data is copied twice. */
#include "exec/host.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/comm.h"
#include "core/debug.h"
#include "core/param.h"
#include "exec/reduce.h"
#include "transport/socket.h"
#include "transport/transport.h"

/* A reducing receive lands in pieces of this size (a multiple of every
 * element size), small enough to stay in cache until reduced. */
#define HOST_PIECE_BYTES (256u * 1024u)
/* Slice size per rank when WEFT_CHUNK_SIZE is 0: the message's share, but at
 * least this (fewer, larger steps for small messages) ... */
#define HOST_CHUNK_MIN_BYTES (512u * 1024u)
/* ... and at most this, so a reduced slice is sent on while still warm. */
#define HOST_CHUNK_MAX_BYTES (4u * 1024u * 1024u)

struct weft_host_engine {
  struct ncclComm *comm;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work_cv; /* the worker sleeps here for work or stop */
  pthread_cond_t idle_cv; /* waiters sleep here for the queue to drain */

  /* Under lock. */
  struct weft_coll *queue; /* circular: count items from head */
  size_t cap, head, count;
  int busy; /* the worker is running an item it took off the queue */
  int stop;
  ncclResult_t error; /* the first failure; sticky */

  /* The worker's own. */
  void *tmp;
  uint64_t seq;               /* collectives run, for messages */
  struct weft_schedule sched; /* the last schedule, reused for equal calls */
  size_t sched_count, sched_chunk;
  int sched_valid;
};

/* ---- Running one all-reduce ------------------------------------------------ */

struct host_call {
  struct ncclComm *comm;
  const struct weft_coll *coll;
  char *in, *out;
  size_t esize;
};

static size_t host_chunk_elems(const struct ncclComm *comm, size_t count, size_t esize) {
  int64_t param = weft_param_int(WEFT_PARAM_CHUNK);
  size_t bytes;
  if (param > 0) {
    bytes = (size_t)param;
  } else {
    bytes = count / (size_t)comm->nranks * esize;
    if (bytes < HOST_CHUNK_MIN_BYTES) bytes = HOST_CHUNK_MIN_BYTES;
    if (bytes > HOST_CHUNK_MAX_BYTES) bytes = HOST_CHUNK_MAX_BYTES;
  }
  return bytes / esize ? bytes / esize : 1;
}

static void host_postop(const struct host_call *c, const struct weft_step *st, char *dst,
                        size_t count) {
  if ((st->flags & WEFT_STEP_POSTOP) && c->coll->op == ncclAvg)
    weft_postop_avg_host(dst, count, c->coll->datatype, c->comm->nranks);
}

/* RECV + REDUCE: piece by piece into tmp, then out = local op tmp. */
static ncclResult_t host_step_reduce(struct weft_host_engine *h, const struct host_call *c,
                                     const struct weft_step *st, struct weft_conn *send,
                                     const char *sbuf) {
  size_t bytes = st->count * c->esize;
  char *dst = c->out + st->recv_off * c->esize;
  const char *local = (st->local_buf == WEFT_BUF_IN ? c->in : c->out) + st->recv_off * c->esize;
  for (size_t off = 0; off < bytes; off += HOST_PIECE_BYTES) {
    size_t n = bytes - off < HOST_PIECE_BYTES ? bytes - off : HOST_PIECE_BYTES;
    WEFT_CHECK(weft_conn_sendrecv(send, sbuf ? sbuf + off : NULL, n, c->comm->ring_recv, h->tmp, n,
                                  weft_deadline_default()));
    weft_reduce_host(dst + off, local + off, h->tmp, n / c->esize, c->coll->datatype, c->coll->op);
    host_postop(c, st, dst + off, n / c->esize);
  }
  return ncclSuccess;
}

static ncclResult_t host_run_step(struct weft_host_engine *h, const struct host_call *c,
                                  const struct weft_step *st) {
  struct ncclComm *comm = c->comm;
  size_t bytes = st->count * c->esize;
  if (st->flags & WEFT_STEP_LOCAL) {
    char *dst = c->out + st->recv_off * c->esize;
    if (c->in != c->out) memcpy(dst, c->in + st->recv_off * c->esize, bytes);
    host_postop(c, st, dst, st->count);
    return ncclSuccess;
  }
  if (((st->flags & WEFT_STEP_SEND) && st->send_peer != comm->ring_next) ||
      ((st->flags & WEFT_STEP_RECV) && st->recv_peer != comm->ring_prev)) {
    WARN("rank %d: schedule step names peers %d/%d off the ring %d -> %d -> %d", comm->rank,
         st->recv_peer, st->send_peer, comm->ring_prev, comm->rank, comm->ring_next);
    return ncclInternalError;
  }
  struct weft_conn *send = (st->flags & WEFT_STEP_SEND) ? comm->ring_send : NULL;
  const char *sbuf = NULL;
  if (send) sbuf = (st->send_buf == WEFT_BUF_IN ? c->in : c->out) + st->send_off * c->esize;
  if ((st->flags & WEFT_STEP_RECV) && (st->flags & WEFT_STEP_REDUCE))
    return host_step_reduce(h, c, st, send, sbuf);
  if (st->flags & WEFT_STEP_RECV) {
    char *dst = c->out + st->recv_off * c->esize;
    WEFT_CHECK(weft_conn_sendrecv(send, sbuf, bytes, comm->ring_recv, dst, bytes,
                                  weft_deadline_default()));
    host_postop(c, st, dst, st->count);
    return ncclSuccess;
  }
  return weft_conn_sendrecv(send, sbuf, bytes, NULL, NULL, 0, weft_deadline_default());
}

/* The schedule for count elements: the cached one if the call matches. */
static ncclResult_t host_schedule(struct weft_host_engine *h, size_t count, size_t chunk,
                                  const struct weft_schedule **out) {
  struct ncclComm *comm = h->comm;
  if (!h->sched_valid || h->sched_count != count || h->sched_chunk != chunk) {
    weft_schedule_free(&h->sched);
    h->sched_valid = 0;
    /* The ring is in rank order, so a rank's ring position is its rank. */
    WEFT_CHECK(weft_ring_schedule_allreduce(comm->rank, comm->nranks, comm->ring_prev,
                                            comm->ring_next, count, chunk, &h->sched));
    h->sched_count = count, h->sched_chunk = chunk, h->sched_valid = 1;
  }
  *out = &h->sched;
  return ncclSuccess;
}

static ncclResult_t host_run_allreduce(struct weft_host_engine *h, const struct weft_coll *coll) {
  struct ncclComm *comm = h->comm;
  struct host_call c = {comm, coll, (char *)coll->sendbuff, coll->recvbuff,
                        weft_dtype_size(coll->datatype)};
  if (coll->count == 0) return ncclSuccess;
  if (comm->nranks > 1 && (comm->ring_next != (comm->rank + 1) % comm->nranks ||
                           comm->ring_send == NULL || comm->ring_recv == NULL)) {
    WARN("rank %d: the host engine needs a connected ring in rank order (next %d)", comm->rank,
         comm->ring_next);
    return ncclInternalError;
  }
  const struct weft_schedule *s;
  WEFT_CHECK(host_schedule(h, coll->count, host_chunk_elems(comm, coll->count, c.esize), &s));
  for (size_t i = 0; i < s->nsteps; i++) WEFT_CHECK(host_run_step(h, &c, &s->steps[i]));
  return ncclSuccess;
}

static ncclResult_t host_run(struct weft_host_engine *h, const struct weft_coll *coll) {
  uint64_t seq = ++h->seq;
  ncclResult_t res = host_run_allreduce(h, coll);
  if (res != ncclSuccess)
    INFO(WEFT_COLL, "rank %d: ncclAllReduce #%llu (%zu x %s, %s) failed with error %d",
         h->comm->rank, (unsigned long long)seq, coll->count, weft_dtype_name(coll->datatype),
         weft_op_name(coll->op), (int)res);
  return res;
}

/* ---- The worker and its queue ----------------------------------------------- */

static void *host_worker_main(void *arg) {
  struct weft_host_engine *h = arg;
  weft_log_set_rank(h->comm->rank);
  pthread_mutex_lock(&h->lock);
  for (;;) {
    while (h->count == 0 && !h->stop) pthread_cond_wait(&h->work_cv, &h->lock);
    if (h->count == 0) break; /* stop, and nothing left */
    struct weft_coll coll = h->queue[h->head];
    h->head = (h->head + 1) % h->cap;
    h->count--;
    h->busy = 1;
    ncclResult_t poisoned = h->error;
    pthread_mutex_unlock(&h->lock);
    /* After a failure the peers have given up on this sequence too: drop. */
    ncclResult_t res = poisoned == ncclSuccess ? host_run(h, &coll) : poisoned;
    pthread_mutex_lock(&h->lock);
    h->busy = 0;
    if (res != ncclSuccess && h->error == ncclSuccess) {
      h->error = res;
      weft_comm_set_error(h->comm, res);
    }
    if (h->count == 0) pthread_cond_broadcast(&h->idle_cv);
  }
  pthread_cond_broadcast(&h->idle_cv);
  pthread_mutex_unlock(&h->lock);
  return NULL;
}

/* Makes room for one more item, keeping the queue's order. Under lock. */
static ncclResult_t host_queue_grow(struct weft_host_engine *h) {
  size_t cap = h->cap ? h->cap * 2 : 16;
  struct weft_coll *q = malloc(cap * sizeof(*q));
  if (q == NULL) {
    WARN("rank %d: out of memory queueing %zu host collectives", h->comm->rank, h->count + 1);
    return ncclSystemError;
  }
  for (size_t i = 0; i < h->count; i++) q[i] = h->queue[(h->head + i) % h->cap];
  free(h->queue);
  h->queue = q, h->cap = cap, h->head = 0;
  return ncclSuccess;
}

static ncclResult_t host_check_coll(const struct ncclComm *comm, const struct weft_coll *coll) {
  static const char *const names[] = {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter",
                                      "ncclBroadcast", "ncclReduce",    "ncclSend",
                                      "ncclRecv"};
  if (coll->func != WEFT_FUNC_ALLREDUCE) {
    unsigned f = (unsigned)coll->func;
    WARN("rank %d: %s is not supported by the host engine yet", comm->rank,
         f < sizeof(names) / sizeof(names[0]) ? names[f] : "this collective");
    return ncclInvalidUsage;
  }
  if (weft_dtype_size(coll->datatype) == 0 || (unsigned)coll->op >= ncclNumOps) {
    WARN("rank %d: the host engine cannot reduce datatype %d with op %d (%s)", comm->rank,
         (int)coll->datatype, (int)coll->op, weft_op_name(coll->op));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t host_engine_of(struct ncclComm *comm, struct weft_host_engine **out) {
  if (comm->host == NULL) {
    WARN("rank %d: the communicator has no host engine (init did not finish)", comm->rank);
    return ncclInvalidUsage;
  }
  *out = comm->host;
  return ncclSuccess;
}

ncclResult_t weft_host_engine_enqueue(struct ncclComm *comm, const struct weft_coll *coll) {
  struct weft_host_engine *h;
  WEFT_CHECK(host_engine_of(comm, &h));
  WEFT_CHECK(host_check_coll(comm, coll));
  pthread_mutex_lock(&h->lock);
  ncclResult_t res = h->error;
  if (res != ncclSuccess) {
    INFO(WEFT_COLL, "rank %d: communicator failed earlier (error %d); call not run", comm->rank,
         (int)res);
  } else if (h->stop) {
    WARN("rank %d: collective issued while the communicator is being destroyed", comm->rank);
    res = ncclInvalidUsage;
  } else if (h->count == h->cap && (res = host_queue_grow(h)) != ncclSuccess) {
    /* res holds the failure */
  } else {
    h->queue[(h->head + h->count) % h->cap] = *coll;
    h->count++;
    pthread_cond_signal(&h->work_cv);
  }
  pthread_mutex_unlock(&h->lock);
  return res;
}

/* Bounded because every step the worker runs is: it gives up at
 * WEFT_TIMEOUT without progress, or at once on abort. */
ncclResult_t weft_host_engine_wait(struct ncclComm *comm) {
  struct weft_host_engine *h;
  WEFT_CHECK(host_engine_of(comm, &h));
  pthread_mutex_lock(&h->lock);
  while (h->count > 0 || h->busy) pthread_cond_wait(&h->idle_cv, &h->lock);
  ncclResult_t res = h->error;
  pthread_mutex_unlock(&h->lock);
  return res;
}

ncclResult_t weft_host_engine_create(struct ncclComm *comm) {
  struct weft_host_engine *h = calloc(1, sizeof(*h));
  if (h == NULL || posix_memalign(&h->tmp, 64, HOST_PIECE_BYTES) != 0) {
    WARN("rank %d: out of memory for the host engine", comm->rank);
    free(h);
    return ncclSystemError;
  }
  h->comm = comm;
  pthread_mutex_init(&h->lock, NULL);
  pthread_cond_init(&h->work_cv, NULL);
  pthread_cond_init(&h->idle_cv, NULL);
  int err = pthread_create(&h->thread, NULL, host_worker_main, h);
  if (err != 0) {
    WARN("rank %d: cannot start the host engine thread: %s", comm->rank, strerror(err));
    pthread_cond_destroy(&h->idle_cv);
    pthread_cond_destroy(&h->work_cv);
    pthread_mutex_destroy(&h->lock);
    free(h->tmp);
    free(h);
    return ncclSystemError;
  }
  comm->host = h;
  return ncclSuccess;
}

/* The worker finishes what is queued (each item ends by its deadline, or at
 * once when the communicator is aborted), then exits. */
void weft_host_engine_destroy(struct ncclComm *comm) {
  struct weft_host_engine *h = comm->host;
  if (h == NULL) return;
  pthread_mutex_lock(&h->lock);
  h->stop = 1;
  pthread_cond_signal(&h->work_cv);
  pthread_mutex_unlock(&h->lock);
  pthread_join(h->thread, NULL);
  weft_schedule_free(&h->sched);
  pthread_cond_destroy(&h->idle_cv);
  pthread_cond_destroy(&h->work_cv);
  pthread_mutex_destroy(&h->lock);
  free(h->queue);
  free(h->tmp);
  free(h);
  comm->host = NULL;
}
