/* TestNet's helper threads: one per data socket, moving the chunks queued
 * on it in order (tn.h). A thread with no chunk sleeps in poll() on its
 * wake eventfd, one whose socket would block polls the socket too: it
 * never spins. The caller writes the eventfd only when the thread said it
 * is going to sleep, so a busy thread costs the caller no system call. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tests/net_plugin/tn.h"

static void tn_wake(int fd) {
  uint64_t one = 1;
  (void)!write(fd, &one, sizeof(one));
}

/* The first failure wins; every later request of the comm fails. */
static void tn_fail(struct tn_comm *c, struct tn_sock *sk, const char *why) {
  int expected = ncclSuccess;
  if (atomic_compare_exchange_strong(&c->err, &expected, ncclRemoteError))
    TN_WARN("TestNet v%d: data socket %d of a %s comm: %s", tn_version, (int)(sk - c->socks),
            c->is_send ? "send" : "recv", why);
}

/* Moves the chunk at the head as far as the socket takes it: 1 when it is
 * done, 0 when the socket would block, -1 on an error, -2 when the peer
 * closed it. */
static int tn_chunk_move(struct tn_sock *sk, struct tn_task *t) {
  while (t->done < t->size) {
    ssize_t n =
        sk->comm->is_send
            ? send(sk->fd, t->data + t->done, t->size - t->done, MSG_NOSIGNAL | MSG_DONTWAIT)
            : recv(sk->fd, t->data + t->done, t->size - t->done, MSG_DONTWAIT);
    if (n > 0) {
      t->done += (size_t)n;
      sk->bytes += (unsigned long long)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return n == 0 ? -2 : -1;
  }
  return 1;
}

/* Retires the chunks it can. Returns 1 when one waits on the socket, 0
 * when the queue is empty. After a failure chunks are retired unmoved
 * (the comm's error fails their requests). */
static int tn_sock_progress(struct tn_sock *sk) {
  struct tn_comm *c = sk->comm;
  for (;;) {
    unsigned head = atomic_load_explicit(&sk->head, memory_order_relaxed);
    if (head == atomic_load_explicit(&sk->tail, memory_order_acquire)) return 0;
    struct tn_task *t = &sk->tasks[head % TN_NREQ];
    if (atomic_load_explicit(&c->err, memory_order_relaxed) == ncclSuccess) {
      int rc = tn_chunk_move(sk, t);
      if (rc == 0) return 1;
      if (rc < 0) tn_fail(c, sk, rc == -2 ? "closed by the peer" : strerror(errno));
    }
    struct tn_req *r = t->req;
    atomic_store_explicit(&sk->head, head + 1, memory_order_release);
    atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel);
  }
}

static void *tn_thread_main(void *arg) {
  struct tn_sock *sk = arg;
  struct tn_comm *c = sk->comm;
  while (!atomic_load(&c->stop)) {
    struct pollfd p[2] = {{.fd = sk->wake_fd, .events = POLLIN},
                          {.fd = sk->fd, .events = c->is_send ? POLLOUT : POLLIN}};
    nfds_t np = 2;
    if (!tn_sock_progress(sk)) {
      /* Say so before the last look at the queue: a chunk queued after
       * that look finds sleeping set and writes the eventfd. */
      atomic_store(&sk->sleeping, 1);
      if (atomic_load(&sk->tail) != atomic_load(&sk->head) || atomic_load(&c->stop)) {
        atomic_store(&sk->sleeping, 0);
        continue;
      }
      np = 1;
    }
    if (poll(p, np, -1) < 0 && errno != EINTR) tn_fail(c, sk, "poll failed");
    atomic_store(&sk->sleeping, 0);
    if (p[0].revents & POLLIN) {
      uint64_t v;
      (void)!read(sk->wake_fd, &v, sizeof(v));
    }
  }
  return NULL;
}

void tn_sock_push(struct tn_sock *sk, struct tn_req *r, char *data, size_t size) {
  unsigned tail = atomic_load_explicit(&sk->tail, memory_order_relaxed);
  sk->tasks[tail % TN_NREQ] = (struct tn_task){.req = r, .data = data, .size = size, .done = 0};
  atomic_store(&sk->tail, tail + 1);
  if (atomic_load(&sk->sleeping)) tn_wake(sk->wake_fd);
}

ncclResult_t tn_threads_start(struct tn_comm *c) {
  for (int i = 0; i < c->nsocks; i++) {
    struct tn_sock *sk = &c->socks[i];
    sk->comm = c;
    sk->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (sk->wake_fd < 0) {
      TN_WARN("TestNet v%d: eventfd for helper thread %d failed", tn_version, i);
      return ncclSystemError;
    }
    if (pthread_create(&sk->tid, NULL, tn_thread_main, sk) != 0) {
      TN_WARN("TestNet v%d: starting helper thread %d of %d failed", tn_version, i, c->nsocks);
      return ncclSystemError;
    }
    sk->started = 1;
  }
  return ncclSuccess;
}

void tn_threads_stop(struct tn_comm *c) {
  atomic_store(&c->stop, 1);
  for (int i = 0; i < c->nsocks; i++) {
    struct tn_sock *sk = &c->socks[i];
    if (sk->started) {
      tn_wake(sk->wake_fd);
      pthread_join(sk->tid, NULL);
      sk->started = 0;
    }
    if (sk->wake_fd >= 0) close(sk->wake_fd);
    sk->wake_fd = -1;
  }
}
