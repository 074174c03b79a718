/* weft-net-bench: weft's socket network alone (transport/net/socket/,
 * through its ops table), between two processes over loopback, with no
 * host engine above it: what the network gives the engine and the proxy
 * (docs/BENCH.md). For each C of --comms, a forked sender connects C
 * comms to the receiver (this process); --span bytes move in --rounds
 * rounds, each round's span cut evenly between the comms and each comm's
 * share sent in --msg messages (by default one: the share), at most
 * --inflight of them in flight a comm. A round ends when every comm's
 * share has arrived, as a host call ends with its slowest channel. The
 * comms' sockets and helper threads are the network's own parameters,
 * NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (printed). The sender's
 * buffer holds a pattern; after the last round the receiver counts the
 * bytes that differ from it (the "wrong" column).
 *
 *   weft-net-bench [--comms 1,16] [--span 64M] [--msg M] [--inflight 4]
 *                  [--rounds 100] [--warmup 5]
 *
 * Both ends test their requests in a loop, yielding the core after a pass
 * that finished nothing. */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "int_list.h"
#include "transport/net/net.h"
#include "transport/net/socket/socket_net.h"

#define MAX_COMMS 64
#define MAX_INFLIGHT WEFT_NS_MAX_REQUESTS
/* A round that moves nothing for this long ends the run. */
#define STALL_MS 60000

struct opts {
  int comms[16];
  int ncomms;
  size_t span, msg;
  int inflight, rounds, warmup;
};

/* One end's comms and their requests in flight. */
struct end {
  int is_send;
  int n;
  void *comm[MAX_COMMS];
  void *req[MAX_COMMS][MAX_INFLIGHT];
  int head[MAX_COMMS], count[MAX_COMMS];
  size_t posted[MAX_COMMS], done[MAX_COMMS];
};

static const struct weft_net_ops *net;

static void usage(void) {
  fprintf(stderr,
          "usage: weft-net-bench [--comms 1,16] [--span 64M] [--msg M] [--inflight 4] "
          "[--rounds 100] [--warmup 5]\n");
  exit(2);
}

static size_t parse_size(const char *flag, const char *s, int zero_ok) {
  char *end;
  double v = strtod(s, &end);
  double mult = 1;
  if (*end == 'K' || *end == 'k')
    mult = 1024, end++;
  else if (*end == 'M' || *end == 'm')
    mult = 1024 * 1024, end++;
  else if (*end == 'G' || *end == 'g')
    mult = 1024.0 * 1024 * 1024, end++;
  if (end == s || *end != '\0' || v < 0 || (v == 0 && !zero_ok) || v * mult > 1e12) {
    fprintf(stderr, "weft-net-bench: %s %s: expected a size such as 64M%s\n", flag, s,
            zero_ok ? " (or 0)" : "");
    exit(2);
  }
  return (size_t)(v * mult);
}

static int parse_int(const char *flag, const char *s, int lo, int hi) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "weft-net-bench: %s %s: expected an integer %d..%d\n", flag, s, lo, hi);
    exit(2);
  }
  return (int)v;
}

static void parse_comms(struct opts *o, const char *s) {
  o->ncomms =
      bench_int_list_arg("weft-net-bench", "--comms", "1,4,16", s, o->comms, 16, 1, MAX_COMMS);
}

static void parse(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.span = 64u << 20, .inflight = 4, .rounds = 100, .warmup = 5};
  parse_comms(o, "1,16");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (v == NULL) usage();
    if (!strcmp(a, "--comms"))
      parse_comms(o, v);
    else if (!strcmp(a, "--span"))
      o->span = parse_size(a, v, 0);
    else if (!strcmp(a, "--msg"))
      o->msg = parse_size(a, v, 1);
    else if (!strcmp(a, "--inflight"))
      o->inflight = parse_int(a, v, 1, MAX_INFLIGHT);
    else if (!strcmp(a, "--rounds"))
      o->rounds = parse_int(a, v, 1, 1000000);
    else if (!strcmp(a, "--warmup"))
      o->warmup = parse_int(a, v, 0, 1000000);
    else
      usage();
    i++;
  }
}

/* Byte i of the pattern the sender's buffer holds. */
static unsigned char pattern_byte(size_t i) {
  return (unsigned char)(((uint32_t)(i >> 3) * 0x9E3779B1u) >> 24 ^ (uint32_t)i);
}

static size_t wrong_bytes(const unsigned char *buf, size_t n) {
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += buf[i] != pattern_byte(i);
  return wrong;
}

/* Comm c's share of the span: [*off, *off + *len). */
static void share(const struct opts *o, int n, int c, size_t *off, size_t *len) {
  size_t base = o->span / (size_t)n, extra = o->span % (size_t)n;
  *off = (size_t)c * base + ((size_t)c < extra ? (size_t)c : extra);
  *len = base + ((size_t)c < extra);
}

/* Posts what comm c may post now; returns 0 on an error (said). */
static int post(struct end *e, const struct opts *o, unsigned char *buf, int c) {
  size_t off, len;
  share(o, e->n, c, &off, &len);
  size_t msg = o->msg == 0 || o->msg > len ? len : o->msg;
  while (e->count[c] < o->inflight && e->posted[c] < len) {
    size_t n = len - e->posted[c] < msg ? len - e->posted[c] : msg;
    void *data = buf + off + e->posted[c], *req = NULL, *mh = NULL;
    int tag = 0;
    ncclResult_t res = e->is_send ? net->isend(e->comm[c], data, n, 0, NULL, &req)
                                  : net->irecv(e->comm[c], 1, &data, &n, &tag, &mh, &req);
    if (res != ncclSuccess) {
      fprintf(stderr, "weft-net-bench: %s on comm %d failed (%d)\n", e->is_send ? "isend" : "irecv",
              c, (int)res);
      return 0;
    }
    if (req == NULL) break;
    e->req[c][(e->head[c] + e->count[c]) % MAX_INFLIGHT] = req;
    e->count[c]++;
    e->posted[c] += n;
  }
  return 1;
}

/* One round: every comm's share moves. Returns 0 on an error (said). */
static int round_run(struct end *e, const struct opts *o, unsigned char *buf) {
  size_t off, len;
  int left = 0; /* comms whose share has not all arrived (a span smaller
                 * than the comm count leaves some with none) */
  for (int c = 0; c < e->n; c++) {
    e->posted[c] = e->done[c] = 0;
    share(o, e->n, c, &off, &len);
    left += len > 0;
  }
  int64_t last = weft_time_ms();
  while (left > 0) {
    int moved = 0;
    for (int c = 0; c < e->n; c++) {
      share(o, e->n, c, &off, &len);
      if (e->done[c] == len) continue;
      if (!post(e, o, buf, c)) return 0;
      while (e->count[c] > 0) {
        int fin = 0;
        size_t got = 0;
        ncclResult_t res = net->test(e->req[c][e->head[c]], &fin, &got);
        if (res != ncclSuccess) {
          fprintf(stderr, "weft-net-bench: test on comm %d failed (%d)\n", c, (int)res);
          return 0;
        }
        if (!fin) break;
        e->head[c] = (e->head[c] + 1) % MAX_INFLIGHT;
        e->count[c]--;
        e->done[c] += got;
        moved = 1;
      }
      if (e->done[c] == len && e->count[c] == 0) left--;
    }
    if (moved) {
      last = weft_time_ms();
    } else if (weft_time_ms() - last > STALL_MS) {
      fprintf(stderr, "weft-net-bench: nothing moved for %d s; the peer is gone or stuck\n",
              STALL_MS / 1000);
      return 0;
    } else {
      sched_yield();
    }
  }
  return 1;
}

static int sender(int fd, const struct opts *o, int n) {
  static struct end e;
  e = (struct end){.is_send = 1, .n = n};
  for (int c = 0; c < n; c++) {
    char handle[WEFT_NET_HANDLE_BYTES];
    if (read(fd, handle, sizeof(handle)) != (ssize_t)sizeof(handle)) return 0;
    int64_t end = weft_time_ms() + STALL_MS;
    while (e.comm[c] == NULL && weft_time_ms() < end) {
      if (net->connect(0, handle, &e.comm[c]) != ncclSuccess) return 0;
      if (e.comm[c] == NULL) sched_yield();
    }
    if (e.comm[c] == NULL) return 0;
  }
  unsigned char *buf = malloc(o->span);
  if (buf == NULL) return 0;
  for (size_t i = 0; i < o->span; i++) buf[i] = pattern_byte(i);
  int ok = 1;
  for (int r = 0; ok && r < o->warmup + o->rounds; r++) ok = round_run(&e, o, buf);
  for (int c = 0; c < n; c++) ok &= net->close_send(e.comm[c]) == ncclSuccess;
  free(buf);
  return ok;
}

/* One row: C comms. Returns 0 on a failure (said). */
static int point(const struct opts *o, int n) {
  int hp[2];
  if (pipe(hp) != 0) {
    perror("weft-net-bench: pipe");
    return 0;
  }
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    perror("weft-net-bench: fork");
    return 0;
  }
  if (pid == 0) {
    close(hp[1]);
    _exit(sender(hp[0], o, n) ? 0 : 1);
  }
  close(hp[0]);
  static struct end e;
  e = (struct end){.is_send = 0, .n = n};
  void *listen[MAX_COMMS] = {0};
  int ok = 1;
  for (int c = 0; ok && c < n; c++) {
    char handle[WEFT_NET_HANDLE_BYTES];
    ok = net->listen(0, handle, &listen[c]) == ncclSuccess &&
         write(hp[1], handle, sizeof(handle)) == (ssize_t)sizeof(handle);
  }
  close(hp[1]);
  int64_t end = weft_time_ms() + STALL_MS;
  for (int c = 0; ok && c < n; c++) {
    while (ok && e.comm[c] == NULL && weft_time_ms() < end) {
      ok = net->accept(listen[c], &e.comm[c]) == ncclSuccess;
      if (ok && e.comm[c] == NULL) sched_yield();
    }
    ok = ok && e.comm[c] != NULL;
  }
  unsigned char *buf = ok ? calloc(1, o->span) : NULL;
  ok = ok && buf != NULL;
  double t0 = 0;
  for (int r = 0; ok && r < o->warmup + o->rounds; r++) {
    if (r == o->warmup) t0 = (double)weft_time_ns();
    ok = round_run(&e, o, buf);
  }
  double s = ((double)weft_time_ns() - t0) * 1e-9;
  if (!ok) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  int threads = 0, socks = 0;
  weft__ns_sock_counts(&threads, &socks);
  if (ok)
    printf("%8d %9d x %-3d %12zu %9d %9.2f %10zu\n", n, threads, socks / threads,
           o->msg ? o->msg : o->span / (size_t)n, o->inflight,
           (double)o->span * o->rounds / s * 1e-9, wrong_bytes(buf, o->span));
  else
    fprintf(stderr, "weft-net-bench: %d comms: the run failed (sender status 0x%x)\n", n, status);
  for (int c = 0; c < n; c++) {
    if (e.comm[c]) net->close_recv(e.comm[c]);
    if (listen[c]) net->close_listen(listen[c]);
  }
  free(buf);
  return ok;
}

int main(int argc, char **argv) {
  struct opts o;
  parse(argc, argv, &o);
  net = &weft_net_socket;
  if (net->init() != ncclSuccess) {
    fprintf(stderr, "weft-net-bench: the socket network did not start (see the WARN above)\n");
    return 1;
  }
  printf("# weft-net-bench: loopback, %zu bytes in %d rounds (%d warm-up), GB/s = 1e9 B/s\n",
         o.span, o.rounds, o.warmup);
  printf("# %6s %15s %12s %9s %9s %10s\n", "comms", "threads x socks", "msg", "inflight", "GB/s",
         "wrong");
  int ok = 1;
  for (int i = 0; i < o.ncomms; i++) ok &= point(&o, o.comms[i]);
  return ok ? 0 : 1;
}
