/* net_stream: the GPU proxy's traffic over weft's network table (net.h),
 * without a GPU: two processes (forked before any thread starts), each
 * with NCH send comms to the other and NCH receive comms from it, one
 * thread per process keeping NSLOTS messages of SLOT_KIB in flight on
 * every comm, as the proxy does for its FIFOs (transport/net/net_fifo.c).
 * NCCL_NET_PLUGIN picks the network as for any weft process (none: the
 * built-in Socket network), so the same run through a plugin and through
 * Socket gives the plugin layer's cost. Every message carries its comm
 * and sequence number at both ends, checked on arrival.
 *
 *   net_stream NCH SLOT_KIB NSLOTS MIB
 *   NCCL_NET_PLUGIN=none net_stream 8 128 8 1024
 *   NCCL_NET_PLUGIN=.../libnccl-net-testnet-v11.so net_stream 8 128 8 1024
 *
 * Prints "<network> ...: X GB/s each way" from the first process; exits
 * non-zero when a call fails or a message arrives wrong. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/debug.h"
#include "transport/net/net.h"

#define NS_MAX_COMMS 16
#define NS_MAX_SLOTS 16

struct ns_args {
  int nch, nslots;
  size_t slot, per; /* bytes a message, messages per comm and way */
};

/* One direction of one channel: a comm, its buffer and its requests. */
struct ns_way {
  void *comm, *mh;
  char *buf;
  void *req[NS_MAX_SLOTS];
  size_t posted, done;
};

struct ns_rank {
  const struct weft_net_ops *net;
  void *listen[NS_MAX_COMMS];
  struct ns_way send[NS_MAX_COMMS], recv[NS_MAX_COMMS];
};

static double ns_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Both ends of a message say which comm and which message it is. */
static void ns_stamp(char *m, size_t bytes, int ch, size_t seq) {
  uint64_t v = ((uint64_t)ch << 48) | seq;
  memcpy(m, &v, sizeof(v));
  memcpy(m + bytes - sizeof(v), &v, sizeof(v));
}

static int ns_stamp_ok(const char *m, size_t bytes, int ch, size_t seq) {
  uint64_t v = ((uint64_t)ch << 48) | seq, a, b;
  memcpy(&a, m, sizeof(a));
  memcpy(&b, m + bytes - sizeof(b), sizeof(b));
  return a == v && b == v;
}

/* Listens NCH times, swaps handles with the peer over fd, connects and
 * accepts every comm, registers each buffer once. */
static int ns_connect(struct ns_rank *r, const struct ns_args *a, int fd) {
  static char mine[NS_MAX_COMMS][WEFT_NET_HANDLE_BYTES], peer[NS_MAX_COMMS][WEFT_NET_HANDLE_BYTES];
  for (int c = 0; c < a->nch; c++)
    if (r->net->listen(0, mine[c], &r->listen[c]) != ncclSuccess) return -1;
  if (write(fd, mine, sizeof(mine)) != (ssize_t)sizeof(mine) ||
      read(fd, peer, sizeof(peer)) != (ssize_t)sizeof(peer))
    return -1;
  for (int left = 1; left;) {
    left = 0;
    for (int c = 0; c < a->nch; c++) {
      struct ns_way *s = &r->send[c], *v = &r->recv[c];
      if (s->comm == NULL && r->net->connect(0, peer[c], &s->comm) != ncclSuccess) return -1;
      if (v->comm == NULL && r->net->accept(r->listen[c], &v->comm) != ncclSuccess) return -1;
      left |= s->comm == NULL || v->comm == NULL;
    }
  }
  size_t bytes = a->slot * (size_t)a->nslots;
  for (int c = 0; c < a->nch; c++)
    for (int w = 0; w < 2; w++) {
      struct ns_way *x = w ? &r->send[c] : &r->recv[c];
      if ((x->buf = calloc(1, bytes)) == NULL ||
          r->net->reg_mr(x->comm, x->buf, bytes, WEFT_NET_PTR_HOST, &x->mh) != ncclSuccess)
        return -1;
    }
  return 0;
}

/* One sweep over one channel: post what fits, retire what finished, in
 * order, as net_fifo.c does. Returns -1 on a failed call or a wrong
 * message, else whether the channel still has work. */
static int ns_sweep(struct ns_rank *r, const struct ns_args *a, int c) {
  struct ns_way *s = &r->send[c], *v = &r->recv[c];
  for (void *req = NULL; s->posted < a->per && s->posted < s->done + (size_t)a->nslots;
       req = NULL) {
    char *m = s->buf + (s->posted % (size_t)a->nslots) * a->slot;
    ns_stamp(m, a->slot, c, s->posted);
    if (r->net->isend(s->comm, m, a->slot, 0, s->mh, &req) != ncclSuccess) return -1;
    if (req == NULL) break;
    s->req[s->posted++ % (size_t)a->nslots] = req;
  }
  for (void *req = NULL; v->posted < a->per && v->posted < v->done + (size_t)a->nslots;
       req = NULL) {
    void *m = v->buf + (v->posted % (size_t)a->nslots) * a->slot;
    size_t size = a->slot;
    int tag = 0;
    if (r->net->irecv(v->comm, 1, &m, &size, &tag, &v->mh, &req) != ncclSuccess) return -1;
    if (req == NULL) break;
    v->req[v->posted++ % (size_t)a->nslots] = req;
  }
  for (int fin = 1; fin && s->done < s->posted;) {
    if (r->net->test(s->req[s->done % (size_t)a->nslots], &fin, NULL) != ncclSuccess) return -1;
    s->done += (size_t)fin;
  }
  for (int fin = 1; fin && v->done < v->posted;) {
    size_t got = 0;
    if (r->net->test(v->req[v->done % (size_t)a->nslots], &fin, &got) != ncclSuccess) return -1;
    if (!fin) break;
    const char *m = v->buf + (v->done % (size_t)a->nslots) * a->slot;
    if (got != a->slot || !ns_stamp_ok(m, a->slot, c, v->done)) {
      fprintf(stderr, "net_stream: comm %d message %zu arrived wrong (%zu bytes)\n", c, v->done,
              got);
      return -1;
    }
    v->done++;
  }
  return s->done < a->per || v->done < a->per;
}

static int ns_run(int fd, int first, const struct ns_args *a) {
  static struct ns_rank r;
  char go = 'g';
  if (weft_net_get(&r.net) != ncclSuccess) {
    fprintf(stderr, "net_stream: no network: %s\n", weft_last_error());
    return 2;
  }
  if (ns_connect(&r, a, fd) != 0) return 2;
  if (write(fd, &go, 1) != 1 || read(fd, &go, 1) != 1) return 2;
  double t0 = ns_now();
  for (int busy = 1; busy;) {
    busy = 0;
    for (int c = 0; c < a->nch; c++) {
      int rc = ns_sweep(&r, a, c);
      if (rc < 0) return 3;
      busy |= rc;
    }
  }
  double t = ns_now() - t0, bytes = (double)a->per * (double)a->nch * (double)a->slot;
  if (first)
    printf(
        "%s: %d comms each way, %d x %zu KiB in flight on each: %.2f GB/s each way (%.0f MiB "
        "in %.3f s)\n",
        r.net->name, a->nch, a->nslots, a->slot >> 10, bytes / t / 1e9, bytes / 1048576.0, t);
  /* Neither closes while the other still moves. */
  if (write(fd, &go, 1) != 1 || read(fd, &go, 1) != 1) return 2;
  for (int c = 0; c < a->nch; c++) {
    r.net->close_send(r.send[c].comm);
    r.net->close_recv(r.recv[c].comm);
    r.net->close_listen(r.listen[c]);
  }
  return 0;
}

int main(int argc, char **argv) {
  struct ns_args a;
  long mib = argc == 5 ? atol(argv[4]) : 0, kib = argc == 5 ? atol(argv[2]) : 0;
  a.nch = argc == 5 ? atoi(argv[1]) : 0;
  a.nslots = argc == 5 ? atoi(argv[3]) : 0;
  if (a.nch < 1 || a.nch > NS_MAX_COMMS || kib < 1 || a.nslots < 1 || a.nslots > NS_MAX_SLOTS ||
      mib < 1) {
    fprintf(stderr, "usage: %s NCH(1..%d) SLOT_KIB(>=1) NSLOTS(1..%d) MIB(>=1)\n", argv[0],
            NS_MAX_COMMS, NS_MAX_SLOTS);
    return 1;
  }
  a.slot = (size_t)kib << 10;
  a.per = ((size_t)mib << 20) / (size_t)a.nch / a.slot + 1;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 2;
  pid_t pid = fork();
  if (pid < 0) return 2;
  if (pid == 0) _exit(ns_run(sv[1], 0, &a));
  int rc = ns_run(sv[0], 1, &a), status = 0;
  if (rc != 0) kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  if (rc == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) rc = 4;
  if (rc != 0) fprintf(stderr, "net_stream: failed (%d; the other process: %d)\n", rc, status);
  return rc;
}
