/* The socket network's helper threads: each owns some of a comm's data
 * sockets (socket i belongs to thread i % nthreads, as in NCCL) and moves
 * the chunks queued on them, in order. A thread with nothing to move, or
 * whose sockets would block, sleeps in poll() on its sockets and its wake
 * eventfd: it never spins between messages.
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

void weft__ns_post_chunks(struct weft_ns_comm *c, struct weft_ns_request *r) {
  size_t chunk = (r->size + (size_t)c->nsocks - 1) / (size_t)c->nsocks;
  if (chunk < WEFT_NS_MIN_CHUNK) chunk = WEFT_NS_MIN_CHUNK;
  int count = (int)((r->size + chunk - 1) / chunk);
  unsigned touched = 0; /* threads to wake (nthreads <= 16) */
  /* Before the first chunk is visible: a thread may finish it at once. */
  atomic_store_explicit(&r->pending, count, memory_order_release);
  for (size_t off = 0; off < r->size; off += chunk) {
    int s = c->next_sock;
    c->next_sock = (s + 1) % c->nsocks;
    struct weft_ns_sock *sk = &c->socks[s];
    uint32_t tail = atomic_load_explicit(&sk->tail, memory_order_relaxed);
    size_t n = r->size - off < chunk ? r->size - off : chunk;
    sk->tasks[tail % WEFT_NS_MAX_REQUESTS] =
        (struct weft_ns_task){.req = r, .data = r->data + off, .size = n, .done = 0};
    atomic_store_explicit(&sk->tail, tail + 1, memory_order_release);
    touched |= 1u << (s % c->nthreads);
  }
  atomic_thread_fence(memory_order_seq_cst);
  for (int t = 0; t < c->nthreads; t++)
    if ((touched & (1u << t)) &&
        atomic_load_explicit(&c->threads[t].sleeping, memory_order_relaxed))
      wake(c->threads[t].wake_fd);
}

/* One chunk finished (or failed: the comm's error is set first). */
static void chunk_done(struct weft_ns_comm *c, struct weft_ns_sock *sk, struct weft_ns_task *t) {
  struct weft_ns_request *r = t->req;
  atomic_store_explicit(&sk->head, atomic_load_explicit(&sk->head, memory_order_relaxed) + 1,
                        memory_order_release);
  if (atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1)
    weft__ns_signal_if_waiting(c);
}

/* Moves socket sk's queued chunks as far as they go. Returns 1 when a chunk
 * is left waiting for the socket (poll it), 0 when the queue is empty. */
static int sock_progress(struct weft_ns_comm *c, struct weft_ns_thread *th,
                         struct weft_ns_sock *sk) {
  for (;;) {
    uint32_t head = atomic_load_explicit(&sk->head, memory_order_relaxed);
    if (head == atomic_load_explicit(&sk->tail, memory_order_acquire)) return 0;
    struct weft_ns_task *t = &sk->tasks[head % WEFT_NS_MAX_REQUESTS];
    if (atomic_load(&c->err) == ncclSuccess) {
      struct iovec iov[2] = {{t->data, t->size}, {NULL, 0}};
      int err = 0;
      size_t before = t->done;
      ncclResult_t res = weft_socket_move(sk->fd, sk->is_send, iov, &t->done, &err);
      th->bytes += t->done - before;
      if (res != ncclSuccess)
        weft__ns_comm_fail(c, res, err, sk->is_send ? "sending" : "receiving");
      else if (t->done < t->size)
        return 1;
    }
    chunk_done(c, sk, t);
  }
}

static void *thread_main(void *arg) {
  struct weft_ns_thread *th = arg;
  struct weft_ns_comm *c = th->comm;
  struct pollfd p[WEFT_NS_MAX_SOCKS + 1];
  while (!atomic_load_explicit(&c->stop, memory_order_acquire)) {
    int np = 0;
    uint64_t idle = 0; /* own sockets with an empty queue, a bit each */
    p[np++] = (struct pollfd){.fd = th->wake_fd, .events = POLLIN};
    for (int s = th->index, i = 0; s < c->nsocks; s += c->nthreads, i++) {
      struct weft_ns_sock *sk = &c->socks[s];
      if (sock_progress(c, th, sk))
        p[np++] = (struct pollfd){.fd = sk->fd, .events = sk->is_send ? POLLOUT : POLLIN};
      else
        idle |= 1ull << i;
    }
    /* About to sleep: say so, then look once more at the queues that were
     * empty (a poster that published before the flag was seen left no
     * wake-up behind). */
    atomic_store_explicit(&th->sleeping, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
    int more = 0;
    for (int s = th->index, i = 0; s < c->nsocks && !more; s += c->nthreads, i++) {
      const struct weft_ns_sock *sk = &c->socks[s];
      more = (idle & (1ull << i)) && atomic_load_explicit(&sk->head, memory_order_relaxed) !=
                                       atomic_load_explicit(&sk->tail, memory_order_acquire);
    }
    if (more) {
      atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
      continue;
    }
    int64_t t0 = weft_time_ns();
    int polled = poll(p, (nfds_t)np, -1);
    atomic_store_explicit(&th->sleeping, 0, memory_order_relaxed);
    *(np > 1 ? &th->sock_ns : &th->idle_ns) += weft_time_ns() - t0;
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
