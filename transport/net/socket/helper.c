/* The socket network's helper threads: each owns some of a comm's data
 * sockets (socket i belongs to thread i % nthreads, as in NCCL). A
 * sender's thread takes the oldest message's next chunk whenever one of
 * its sockets is free and sends it behind its header; a receiver's reads
 * the header and lands the chunk where it says. So the chunks go to
 * whichever socket is free, and a slow socket holds up no more than the
 * chunk on it. A thread with nothing to move, or whose sockets would
 * block, sleeps in poll() on its sockets and its wake eventfd: it never
 * spins between messages.
 *
 * Wake-ups. An eventfd write costs the poster a system call and the woken
 * thread a read, per message; a thread that is moving chunks needs
 * neither, since it looks at its queues again before it sleeps. So a
 * thread says it is going to sleep (sleeping = 1), then looks at its
 * queues once more, and a poster writes wake_fd only if it sees sleeping
 * after publishing its chunks; a seq_cst fence on each side between the
 * write of one flag and the read of the other means one of the two always
 * sees the other's write (the same holds for a finished request and the
 * waiter on done_fd: comm->waiter). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/check.h"
#include "base/clock.h"
#include "base/copy.h"
#include "base/debug.h"
#include "transport/net/socket/socket_net.h"

static void wake(int fd) {
  uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}

void weft__ns_signal_done(struct weft_ns_comm *c) {
  wake(c->done_fd);
  atomic_store_explicit(&c->done_dirty, 1, memory_order_release);
}

void weft__ns_signal_if_waiting(struct weft_ns_comm *c) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&c->waiter, memory_order_relaxed)) weft__ns_signal_done(c);
}

/* Wakes up to n of the threads that sleep; with parked_only, only those
 * holding a header that waits for a message to open. */
static void wake_sleepers(struct weft_ns_comm *c, int n, int parked_only) {
  atomic_thread_fence(memory_order_seq_cst);
  for (int t = 0; t < c->nthreads && n > 0; t++) {
    struct weft_ns_thread *th = &c->threads[t];
    if (parked_only && atomic_load_explicit(&th->parked, memory_order_relaxed) == 0) continue;
    if (atomic_load_explicit(&th->sleeping, memory_order_relaxed)) {
      wake(th->wake_fd);
      n--;
    }
  }
}

void weft__ns_post_chunks(struct weft_ns_comm *c, struct weft_ns_request *r) {
  size_t chunk = (r->size + (size_t)c->nsocks - 1) / (size_t)c->nsocks;
  if (chunk > WEFT_NS_MAX_CHUNK) chunk = WEFT_NS_MAX_CHUNK;
  if (chunk < WEFT_NS_MIN_CHUNK) chunk = WEFT_NS_MIN_CHUNK;
  size_t count = (r->size + chunk - 1) / chunk;
  r->chunk = chunk;
  r->dealt = 0;
  /* Before the first chunk is visible: a thread may finish it at once. */
  atomic_store_explicit(&r->pending, count, memory_order_release);
  uint64_t tail = atomic_load_explicit(&c->deal_tail, memory_order_relaxed);
  c->deal[tail % WEFT_NS_MAX_REQUESTS] = r;
  atomic_store_explicit(&c->deal_tail, tail + 1, memory_order_release);
  wake_sleepers(c, count < (size_t)c->nthreads ? (int)count : c->nthreads, 0);
}

void weft__ns_open_recv(struct weft_ns_comm *c, struct weft_ns_request *r) {
  atomic_store_explicit(&r->pending, r->size, memory_order_relaxed);
  atomic_store_explicit(&r->open, r->seq + 1, memory_order_release);
  wake_sleepers(c, c->nthreads, 1);
}

/* The next chunk of the oldest message that has one left, or NULL. */
static struct weft_ns_request *deal_next(struct weft_ns_comm *c, size_t *off, size_t *len) {
  struct weft_ns_request *r = NULL;
  pthread_mutex_lock(&c->deal_lock);
  uint64_t head = atomic_load_explicit(&c->deal_head, memory_order_relaxed);
  if (head != atomic_load_explicit(&c->deal_tail, memory_order_acquire)) {
    r = c->deal[head % WEFT_NS_MAX_REQUESTS];
    *off = r->dealt;
    *len = r->size - r->dealt < r->chunk ? r->size - r->dealt : r->chunk;
    r->dealt += *len;
    if (r->dealt == r->size) atomic_store_explicit(&c->deal_head, head + 1, memory_order_relaxed);
  }
  pthread_mutex_unlock(&c->deal_lock);
  return r;
}

/* What a data socket waits for after its helper moved what it could. */
enum sock_state {
  SOCK_IDLE,   /* nothing to move (a receiver still listens for a header) */
  SOCK_WAIT,   /* a chunk or header waits on the socket: poll it */
  SOCK_PARKED, /* a receiver's header waits for its message to open */
};

/* Takes chunks and sends each behind its header while the socket takes
 * them. After an error the chunks are dropped, so requests end. */
static enum sock_state send_progress(struct weft_ns_comm *c, struct weft_ns_thread *th,
                                     struct weft_ns_sock *sk) {
  for (;;) {
    if (sk->req == NULL) {
      size_t off, len;
      struct weft_ns_request *r = deal_next(c, &off, &len);
      if (r == NULL) return SOCK_IDLE;
      sk->req = r;
      sk->data = r->data + off;
      /* Streamed past the cache: the copy leaves the source there for the
       * send (reads it next) instead of the copy (nobody reads soon). */
      if (r->mirror != NULL) weft_copy_stream(r->mirror + off, sk->data, len);
      sk->len = len;
      sk->done = 0;
      sk->hdr = (struct weft_ns_chunk){
          .seq = r->seq, .offset = off, .size = (uint32_t)len, .magic = WEFT_NS_CHUNK_MAGIC};
    }
    if (atomic_load(&c->err) == ncclSuccess) {
      struct iovec iov[2] = {{&sk->hdr, sizeof(sk->hdr)}, {sk->data, sk->len}};
      int err = 0;
      size_t before = sk->done;
      ncclResult_t res = weft_socket_move(sk->fd, 1, iov, &sk->done, &err);
      th->bytes += sk->done - before;
      if (res != ncclSuccess)
        weft__ns_comm_fail(c, res, err, "sending");
      else if (sk->done < sizeof(sk->hdr) + sk->len)
        return SOCK_WAIT;
    }
    struct weft_ns_request *r = sk->req;
    sk->req = NULL;
    if (atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1)
      weft__ns_signal_if_waiting(c);
  }
}

/* A receiver's socket failed: the peer closing it between chunks is an
 * orderly end (once all of them are closed, a message still waiting for
 * bytes fails in test: its chunks are on no socket); anything else fails
 * the comm. */
static enum sock_state recv_failed(struct weft_ns_comm *c, struct weft_ns_sock *sk,
                                   ncclResult_t res, int err) {
  if (res == ncclRemoteError && err == 0 && sk->req == NULL && sk->hdr_done == 0) {
    sk->eof = 1;
    /* With every data socket closed, no missing byte can come. */
    if (atomic_fetch_add(&c->data_eof, 1) + 1 == c->nsocks) weft__ns_signal_done(c);
  } else {
    weft__ns_comm_fail(c, res, err, "receiving");
  }
  return SOCK_IDLE;
}

/* Reads chunk headers and lands each chunk where its header says, while
 * the socket has bytes and the chunks' messages are open. */
static enum sock_state recv_progress(struct weft_ns_comm *c, struct weft_ns_thread *th,
                                     struct weft_ns_sock *sk) {
  for (;;) {
    if (sk->eof || atomic_load(&c->err) != ncclSuccess) return SOCK_IDLE;
    int err = 0;
    ncclResult_t res;
    if (sk->req == NULL) {
      if (sk->hdr_done < sizeof(sk->hdr)) {
        struct iovec iov[2] = {{&sk->hdr, sizeof(sk->hdr)}, {NULL, 0}};
        res = weft_socket_move(sk->fd, 0, iov, &sk->hdr_done, &err);
        if (res != ncclSuccess) return recv_failed(c, sk, res, err);
        if (sk->hdr_done < sizeof(sk->hdr)) return SOCK_WAIT;
      }
      const struct weft_ns_chunk *h = &sk->hdr;
      struct weft_ns_request *r = &c->reqs[h->seq % WEFT_NS_MAX_REQUESTS];
      if (h->magic != WEFT_NS_CHUNK_MAGIC) {
        WARN(
            "net/socket: %s sent a chunk header with a bad magic (0x%x): the stream is out of step",
            c->peer, h->magic);
        weft__ns_comm_set_error(c, ncclSystemError);
        return SOCK_IDLE;
      }
      if (atomic_load_explicit(&r->open, memory_order_acquire) != h->seq + 1) return SOCK_PARKED;
      if (h->offset > r->size || h->size > r->size - h->offset) {
        WARN(
            "net/socket: %s sent a chunk of %u bytes at offset %llu of message %llu, which has "
            "%zu: the stream is out of step",
            c->peer, h->size, (unsigned long long)h->offset, (unsigned long long)h->seq, r->size);
        weft__ns_comm_set_error(c, ncclSystemError);
        return SOCK_IDLE;
      }
      sk->req = r;
      sk->data = r->data + h->offset;
      sk->len = h->size;
      sk->done = 0;
      sk->hdr_done = 0;
    }
    /* The chunk's data, and the next header behind it if it is there. */
    struct iovec iov[2] = {{sk->data, sk->len}, {&sk->hdr, sizeof(sk->hdr)}};
    size_t before = sk->done;
    res = weft_socket_move(sk->fd, 0, iov, &sk->done, &err);
    th->bytes += (sk->done < sk->len ? sk->done : sk->len) - before;
    if (sk->done >= sk->len) {
      struct weft_ns_request *r = sk->req;
      size_t len = sk->len;
      sk->req = NULL;
      sk->hdr_done = sk->done - sk->len;
      if (atomic_fetch_sub_explicit(&r->pending, len, memory_order_acq_rel) == len)
        weft__ns_signal_if_waiting(c);
    }
    if (res != ncclSuccess) return recv_failed(c, sk, res, err);
    /* Short of the whole header: the socket is drained for now. */
    if (sk->req != NULL || sk->hdr_done < sizeof(sk->hdr)) return SOCK_WAIT;
  }
}

/* Whether one of the thread's parked sockets has its message open now. */
static int parked_opened(const struct weft_ns_comm *c, const struct weft_ns_thread *th) {
  for (int s = th->index; s < c->nsocks; s += c->nthreads) {
    const struct weft_ns_sock *sk = &c->socks[s];
    if (sk->req != NULL || sk->hdr_done < sizeof(sk->hdr)) continue;
    const struct weft_ns_request *r = &c->reqs[sk->hdr.seq % WEFT_NS_MAX_REQUESTS];
    if (atomic_load_explicit(&r->open, memory_order_acquire) == sk->hdr.seq + 1) return 1;
  }
  return 0;
}

static void *thread_main(void *arg) {
  struct weft_ns_thread *th = arg;
  struct weft_ns_comm *c = th->comm;
  struct pollfd p[WEFT_NS_MAX_SOCKS + 1];
  weft_log_set_helper();
  while (!atomic_load_explicit(&c->stop, memory_order_acquire)) {
    int np = 0, busy = 0, parked = 0, idle = 0;
    p[np++] = (struct pollfd){.fd = th->wake_fd, .events = POLLIN};
    for (int s = th->index; s < c->nsocks; s += c->nthreads) {
      struct weft_ns_sock *sk = &c->socks[s];
      enum sock_state st = c->is_send ? send_progress(c, th, sk) : recv_progress(c, th, sk);
      /* A receiver listens for the next header on an idle socket; after
       * an error nothing is read (the comm only closes). */
      int listen = st == SOCK_IDLE && !c->is_send && !sk->eof && atomic_load(&c->err) == 0;
      if (st == SOCK_WAIT || listen)
        p[np++] = (struct pollfd){.fd = sk->fd, .events = sk->is_send ? POLLOUT : POLLIN};
      busy |= st == SOCK_WAIT && (sk->req != NULL || sk->hdr_done > 0);
      parked += st == SOCK_PARKED;
      idle += st == SOCK_IDLE;
    }
    atomic_store_explicit(&th->parked, parked, memory_order_relaxed);
    /* About to sleep: say so, then look once more for work posted before
     * the flag was seen (such a poster left no wake-up behind). Only a
     * sending socket that found no chunk can take one: a thread whose
     * sockets all hold a chunk the network has no room for sleeps on them
     * however many chunks are queued (it spun in sendmsg before). */
    atomic_store_explicit(&th->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    int more = c->is_send
                   ? idle > 0 && atomic_load_explicit(&c->deal_head, memory_order_relaxed) !=
                                     atomic_load_explicit(&c->deal_tail, memory_order_acquire)
                   : parked > 0 && parked_opened(c, th);
    if (more) {
      atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
      continue;
    }
    int64_t t0 = weft_time_ns();
    int polled = poll(p, (nfds_t)np, -1);
    atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
    *(busy ? &th->sock_ns : &th->idle_ns) += weft_time_ns() - t0;
    if (polled < 0 && errno != EINTR) {
      weft__ns_comm_fail(c, ncclSystemError, errno, "waiting on data sockets");
      /* Nothing can move now; the comm's error ends every request. */
      struct timespec ts = {0, 10 * 1000 * 1000};
      nanosleep(&ts, NULL);
    }
    if (p[0].revents & POLLIN) {
      uint64_t v;
      (void)!read(th->wake_fd, &v, sizeof(v));
    }
  }
  return NULL;
}

ncclResult_t weft__ns_threads_start(struct weft_ns_comm *c) {
  for (int i = 0; i < c->nthreads; i++) {
    struct weft_ns_thread *th = &c->threads[i];
    th->comm = c;
    th->index = i;
    th->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (th->wake_fd < 0) {
      WARN("net/socket: eventfd for a helper thread (comm with %s) failed: %s", c->peer,
           strerror(errno));
      return ncclSystemError;
    }
    int e = pthread_create(&th->tid, NULL, thread_main, th);
    if (e != 0) {
      WARN("net/socket: starting helper thread %d of %d for a comm with %s failed: %s", i,
           c->nthreads, c->peer, strerror(e));
      return ncclSystemError;
    }
    th->started = 1;
    pthread_setname_np(th->tid, "weft-sock");
  }
  return ncclSuccess;
}

/* Where the helper threads' time went, summed over them, as shares of
 * the comm's life: a helper that waits mostly for posts is starved by the
 * caller's thread, one that waits mostly on its sockets by the network. */
static void threads_say(const struct weft_ns_comm *c) {
  int64_t life = weft_time_ns() - c->born_ns, idle = 0, sock = 0;
  uint64_t bytes = 0;
  for (int i = 0; i < c->nthreads; i++) {
    idle += c->threads[i].idle_ns;
    sock += c->threads[i].sock_ns;
    bytes += c->threads[i].bytes;
  }
  if (life <= 0 || c->nthreads == 0 || bytes == 0) return;
  double all = (double)life * c->nthreads;
  INFO(WEFT_NET,
       "net/socket: %s comm with %s closes: its %d helper threads %s %.3f GB in %.3f s; of "
       "their time %.0f%% waiting for chunks to be posted, %.0f%% waiting on the sockets, "
       "%.0f%% awake",
       c->is_send ? "send" : "recv", c->peer, c->nthreads, c->is_send ? "sent" : "received",
       (double)bytes / 1e9, (double)life / 1e9, 100.0 * (double)idle / all,
       100.0 * (double)sock / all, 100.0 * (all - (double)idle - (double)sock) / all);
}

void weft__ns_threads_stop(struct weft_ns_comm *c) {
  atomic_store_explicit(&c->stop, 1, memory_order_release);
  for (int i = 0; i < c->nthreads; i++) {
    struct weft_ns_thread *th = &c->threads[i];
    if (th->started) {
      wake(th->wake_fd);
      pthread_join(th->tid, NULL);
      th->started = 0;
    }
    weft_socket_close(&th->wake_fd);
  }
  threads_say(c);
}
