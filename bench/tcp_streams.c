/* weft-tcp-streams: the summed throughput of K parallel TCP streams between
 * two endpoints, the yardstick for the socket network (docs/BENCH.md,
 * docs/NETWORK.md). One line per K: each of K client threads sends
 * --bytes buffers on its own connection for --seconds; the server counts
 * what arrived on each and reports it back when the stream ends.
 *
 * By default every stream sends from its own --bytes buffer and the
 * server receives each into a 4 MiB buffer of its own, front to back and
 * over again, so the received bytes go to memory as a collective's do;
 * --hot lands every read at the buffer's start instead, as iperf3 does,
 * where the bytes stay in the cache (before 2026-12-06 free streams were
 * received that way, which flattered them). With --span S the
 * K streams of a point together send from S bytes and are received into
 * S bytes (each stream S/K of it, on both ends): the memory a 2-rank
 * broadcast of S bytes reads and writes, so its cache behaviour too.
 * --rounds (with --span) moves S in rounds, like a broadcast's back-to-back
 * calls: every stream sends its share, the server answers a byte once the
 * share has arrived, and no stream starts the next round before every
 * stream's share of this one arrived; so a round ends with its slowest
 * stream, as a call ends with its slowest channel. --deal C does the same
 * rounds, but a stream takes the round's next C bytes whenever it is free,
 * so no stream holds a fixed share (what dealing between channels could
 * reach). --ends does the rounds with no word between the ends: the
 * sending streams wait for each other after each round and so do the
 * receiving ones, each side on its own, so a sender may run a round ahead
 * as far as the sockets' buffers let it (a call whose ends do not wait for
 * each other: a broadcast without the call check). --deal C --ends deals
 * the chunks and ends the rounds each side on its own: the receiving
 * streams wait for each other at each stream's end-of-round header.
 *
 *   weft-tcp-streams [--streams 1,2,4,8] [--bytes 64M] [--seconds 2]
 *                    [--span S [--rounds | --deal C] [--ends]] [--hot]
 *       loopback: forks its own server on 127.0.0.1
 *   weft-tcp-streams --server [PORT]        (prints the port; runs until killed)
 *   weft-tcp-streams --client HOST:PORT [--streams ...]
 *
 * Plain POSIX sockets with no weft code, so it measures what the machine
 * gives any program. A last line gives one thread's memcpy rate, the
 * bound of a copy a rank makes on one thread (a broadcast root out of
 * place without the host engine's copy threads). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "int_list.h"

#define MAX_STREAMS 256
#define RECV_BUF (4 * 1024 * 1024)

struct opts {
  int streams[32];
  int nstreams;
  size_t bytes;
  size_t span; /* 0: --bytes per stream, 4 MiB receive buffers */
  int rounds;  /* --rounds: the streams move --span in rounds, each ended by all */
  size_t deal; /* --deal C: in rounds, each stream takes the next C bytes when free */
  int ends;    /* --ends: rounds ended by each side on its own, no acknowledgement */
  int hot;     /* --hot: the server lands every read at its buffer's start */
  double seconds;
  int server;
  int port;
  const char *client; /* HOST:PORT */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what) {
  fprintf(stderr, "weft-tcp-streams: %s: %s\n", what, strerror(errno));
  exit(1);
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  size_t mult = 1;
  if (*end == 'K' || *end == 'k') mult = 1024;
  if (*end == 'M' || *end == 'm') mult = 1024 * 1024;
  if (*end == 'G' || *end == 'g') mult = 1024 * 1024 * 1024;
  if (v <= 0 || (*end && mult == 1)) {
    fprintf(stderr, "weft-tcp-streams: --bytes %s: expected a size such as 64M\n", s);
    exit(2);
  }
  return (size_t)(v * (double)mult);
}

static void parse_streams(struct opts *o, const char *s) {
  o->nstreams = bench_int_list_arg("weft-tcp-streams", "--streams", "1,2,4,8", s, o->streams, 32, 1,
                                   MAX_STREAMS);
}

static void usage(void) {
  fprintf(stderr,
          "usage: weft-tcp-streams [--streams 1,2,4,8] [--bytes 64M] [--seconds 2] [--span S "
          "[--rounds | --deal C] [--ends]] [--hot]\n"
          "       weft-tcp-streams --server [PORT]\n"
          "       weft-tcp-streams --client HOST:PORT [--streams ...] [--bytes ...] "
          "[--seconds ...] [--span S [--rounds | --deal C] [--ends]] [--hot]\n");
  exit(2);
}

static void parse(int argc, char **argv, struct opts *o) {
  *o = (struct opts){.bytes = 64u << 20, .seconds = 2};
  parse_streams(o, "1,2,4,8");
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--streams") && v) {
      parse_streams(o, v), i++;
    } else if (!strcmp(a, "--bytes") && v) {
      o->bytes = parse_size(v), i++;
    } else if (!strcmp(a, "--span") && v) {
      o->span = parse_size(v), i++;
    } else if (!strcmp(a, "--rounds")) {
      o->rounds = 1;
    } else if (!strcmp(a, "--hot")) {
      o->hot = 1;
    } else if (!strcmp(a, "--ends")) {
      o->ends = 1, o->rounds = 1;
    } else if (!strcmp(a, "--deal") && v) {
      o->deal = parse_size(v), o->rounds = 1, i++;
    } else if (!strcmp(a, "--seconds") && v) {
      o->seconds = atof(v), i++;
      if (o->seconds <= 0) usage();
    } else if (!strcmp(a, "--server")) {
      o->server = 1;
      if (v && v[0] != '-') o->port = atoi(v), i++;
    } else if (!strcmp(a, "--client") && v) {
      o->client = v, i++;
    } else {
      usage();
    }
  }
  if (o->rounds && o->span == 0) {
    fprintf(stderr,
            "weft-tcp-streams: --rounds, --deal and --ends need --span S (the bytes of one "
            "round)\n");
    exit(2);
  }
}

/* ---- Server ---------------------------------------------------------------- */

/* The top bits of a stream's first 8 bytes: --rounds, --deal, --ends,
 * --hot. With ENDS_BIT a second 8 bytes follow: the point's id and its
 * streams. */
#define ROUNDS_BIT ((uint64_t)1 << 63)
#define DEAL_BIT ((uint64_t)1 << 62)
#define ENDS_BIT ((uint64_t)1 << 61)
#define HOT_BIT ((uint64_t)1 << 60)

/* --ends: the receiving streams of one point wait for each other at the
 * end of every round. A point's streams all connect before it starts,
 * and the client runs one point at a time. */
struct ends_group {
  uint64_t id;
  int k, arrived, users;
  uint64_t gen;
  struct ends_group *next;
};
static pthread_mutex_t ends_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ends_cond = PTHREAD_COND_INITIALIZER;
static struct ends_group *ends_groups;

static struct ends_group *ends_join(uint64_t id, int k) {
  pthread_mutex_lock(&ends_lock);
  struct ends_group *g = ends_groups;
  while (g != NULL && g->id != id) g = g->next;
  if (g == NULL && (g = calloc(1, sizeof(*g))) != NULL) {
    g->id = id, g->k = k;
    g->next = ends_groups;
    ends_groups = g;
  }
  if (g != NULL) g->users++;
  pthread_mutex_unlock(&ends_lock);
  return g;
}

static void ends_wait(struct ends_group *g) {
  pthread_mutex_lock(&ends_lock);
  uint64_t gen = g->gen;
  if (++g->arrived == g->k) {
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&ends_cond);
  } else {
    while (g->gen == gen) pthread_cond_wait(&ends_cond, &ends_lock);
  }
  pthread_mutex_unlock(&ends_lock);
}

/* A stream that ends (its last round done, or failed) no longer counts
 * in the group's waits, so the others never wait for it. */
static void ends_leave(struct ends_group *g) {
  pthread_mutex_lock(&ends_lock);
  if (--g->k > 0 && g->arrived >= g->k) {
    g->arrived = 0;
    g->gen++;
    pthread_cond_broadcast(&ends_cond);
  }
  if (--g->users == 0) {
    struct ends_group **at = &ends_groups;
    while (*at != g) at = &(*at)->next;
    *at = g->next;
    free(g);
  }
  pthread_mutex_unlock(&ends_lock);
}

/* --deal: chunks behind {offset, size} headers, a size of 0 ending the
 * stream's round (answered with a byte, or with ends a wait for the
 * point's other streams); each lands at its offset, modulo the stream's
 * buffer. */
static uint64_t serve_dealt(int fd, char *buf, size_t len, struct ends_group *ends, int hot) {
  uint64_t total = 0, hdr[2];
  char ack = 0;
  while (recv(fd, hdr, sizeof(hdr), MSG_WAITALL) == sizeof(hdr)) {
    if (hdr[1] == 0) {
      if (ends != NULL)
        ends_wait(ends);
      else if (send(fd, &ack, 1, MSG_NOSIGNAL) != 1)
        break;
      continue;
    }
    if (hdr[1] > len) break; /* the client keeps chunks within a stream's share */
    size_t at = hot ? 0 : (size_t)(hdr[0] % (len - hdr[1] + 1));
    if (recv(fd, buf + at, (size_t)hdr[1], MSG_WAITALL) != (ssize_t)hdr[1]) break;
    total += hdr[1];
  }
  return total;
}

/* A stream's bytes into buf, front to back and over again until EOF;
 * with rounds, a byte back each time buf is full (a round arrived), or
 * with ends (a group), a wait for the point's other streams instead.
 * With hot every read lands at buf's start, as iperf3's do: the bytes
 * then stay in the cache (what the yardstick did before 2026-12-06). */
static uint64_t serve_plain(int fd, char *buf, size_t len, int rounds, struct ends_group *ends,
                            int hot) {
  uint64_t total = 0;
  size_t got = 0;                /* of this pass over buf (a round) */
  int anywhere = hot && !rounds; /* no pass to count: every read may fill buf */
  for (;;) {
    ssize_t n = recv(fd, buf + (hot ? 0 : got), anywhere ? len : len - got, 0);
    if (n > 0) {
      total += (uint64_t)n;
      got = anywhere ? 0 : got + (size_t)n;
      if (got == len) {
        got = 0;
        if (!rounds)
          continue;
        else if (ends != NULL)
          ends_wait(ends);
        else if (send(fd, &got, 1, MSG_NOSIGNAL) != 1)
          break;
      }
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  return total;
}

/* Counts one stream's bytes until EOF, then sends the count back. The
 * stream starts with the size of the buffer to receive into (8 bytes; 0:
 * RECV_BUF), touched before the client's clock starts. With ROUNDS_BIT
 * the client sends that many bytes a round and waits for a byte back
 * once all have arrived. */
static void *server_stream(void *arg) {
  int fd = (int)(intptr_t)arg;
  uint64_t want = 0;
  if (recv(fd, &want, sizeof(want), MSG_WAITALL) != sizeof(want)) want = 0;
  int rounds = (want & ROUNDS_BIT) != 0, dealt = (want & DEAL_BIT) != 0;
  int hot = (want & HOT_BIT) != 0;
  struct ends_group *ends = NULL;
  if (want & ENDS_BIT) {
    uint64_t point = 0;
    if (recv(fd, &point, sizeof(point), MSG_WAITALL) != sizeof(point) ||
        (ends = ends_join(point >> 16, (int)(point & 0xffff))) == NULL) {
      close(fd);
      return NULL;
    }
  }
  want &= ~(ROUNDS_BIT | DEAL_BIT | ENDS_BIT | HOT_BIT);
  size_t len = want > 0 && want < ((uint64_t)1 << 34) ? (size_t)want : RECV_BUF;
  char *buf = malloc(len);
  uint64_t total = 0;
  if (buf == NULL) {
    if (ends != NULL) ends_leave(ends);
    close(fd);
    return NULL;
  }
  memset(buf, 0, len);
  (void)!send(fd, &total, 1, MSG_NOSIGNAL); /* ready */
  total =
      dealt ? serve_dealt(fd, buf, len, ends, hot) : serve_plain(fd, buf, len, rounds, ends, hot);
  if (ends != NULL) ends_leave(ends);
  (void)!send(fd, &total, sizeof(total), MSG_NOSIGNAL);
  close(fd);
  free(buf);
  return NULL;
}

/* Loopback: 127.0.0.1 (IPv6 may be off); else every address, both families. */
static int server_listen(int port, int loopback) {
  int one = 1, zero = 0;
  int fd = socket(loopback ? AF_INET : AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) die("socket");
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  int rc;
  if (loopback) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
  } else {
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    a.sin6_addr = in6addr_any;
    rc = bind(fd, (struct sockaddr *)&a, sizeof(a));
  }
  if (rc != 0 || listen(fd, 1024) != 0) die("bind/listen");
  return fd;
}

static int bound_port(int fd) {
  struct sockaddr_storage a;
  socklen_t len = sizeof(a);
  if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) die("getsockname");
  return ntohs(a.ss_family == AF_INET ? ((struct sockaddr_in *)&a)->sin_port
                                      : ((struct sockaddr_in6 *)&a)->sin6_port);
}

static void server_run(int lfd) {
  for (;;) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR) continue;
      die("accept");
    }
    pthread_t t;
    if (pthread_create(&t, NULL, server_stream, (void *)(intptr_t)fd) != 0) die("pthread_create");
    pthread_detach(t);
  }
}

/* ---- Client ---------------------------------------------------------------- */

/* The streams connect and fill their buffers first (page faults are not
 * network time), then all start together. */
struct start {
  pthread_barrier_t ready, go;
  double end_s;
  /* --rounds: every stream's round ends before the next starts */
  int rounds;
  /* --ends: no acknowledgement; the point's id and streams for the server */
  int ends;
  uint64_t point;
  int hot; /* --hot */
  pthread_barrier_t round;
  int stop; /* set between the round's two barriers */
  /* --deal: the round's bytes (span) dealt from next, deal at a time */
  size_t deal, span;
  _Atomic size_t next;
  const char *src;
};

/* --rounds: waits for every stream's round; 1 while rounds go on. */
static int round_end(struct start *st) {
  if (pthread_barrier_wait(&st->round) == PTHREAD_BARRIER_SERIAL_THREAD) {
    st->stop = now_s() >= st->end_s;
    atomic_store(&st->next, 0);
  }
  pthread_barrier_wait(&st->round);
  return !st->stop;
}

struct stream {
  struct sockaddr_storage addr;
  socklen_t addr_len;
  size_t bytes;
  uint64_t recv_buf; /* the server's receive buffer for this stream (0: its default) */
  struct start *start;
  uint64_t received; /* the server's count */
  int ok;
};

static int send_all(int fd, const char *p, size_t n, int more) {
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL | (more ? MSG_MORE : 0));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    p += k, n -= (size_t)k;
  }
  return 1;
}

/* --deal: the next chunks of the round while any is left, then the end
 * of the round; 0 when the stream failed. */
static int send_dealt(int fd, struct start *st) {
  for (;;) {
    size_t off = atomic_fetch_add(&st->next, st->deal);
    if (off >= st->span) break;
    uint64_t hdr[2] = {off, off + st->deal > st->span ? st->span - off : st->deal};
    if (!send_all(fd, (const char *)hdr, sizeof(hdr), 1) || !send_all(fd, st->src + off, hdr[1], 0))
      return 0;
  }
  uint64_t end[2] = {0, 0};
  return send_all(fd, (const char *)end, sizeof(end), 0);
}

static void *client_stream(void *arg) {
  struct stream *s = arg;
  int fd = socket(s->addr.ss_family, SOCK_STREAM, 0);
  int up = fd >= 0 && connect(fd, (struct sockaddr *)&s->addr, s->addr_len) == 0;
  char ready;
  uint64_t hello = s->recv_buf | (s->start->rounds ? ROUNDS_BIT : 0) |
                   (s->start->deal ? DEAL_BIT : 0) | (s->start->ends ? ENDS_BIT : 0) |
                   (s->start->hot ? HOT_BIT : 0);
  /* --deal's headers and round ends are small writes: no Nagle delay */
  int one = 1;
  if (up && s->start->deal) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  up = up && send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) == sizeof(hello) &&
       (!s->start->ends ||
        send(fd, &s->start->point, sizeof(s->start->point), MSG_NOSIGNAL) == sizeof(uint64_t)) &&
       recv(fd, &ready, 1, MSG_WAITALL) == 1;
  char *buf = malloc(s->bytes);
  if (buf != NULL) memset(buf, 0x5a, s->bytes);
  pthread_barrier_wait(&s->start->ready);
  pthread_barrier_wait(&s->start->go);
  /* A stream that failed still takes part in the rounds' barriers, so
   * the others do not wait for it forever. */
  int failed = !up || buf == NULL;
  for (;;) {
    if (!s->start->rounds && (failed || now_s() >= s->start->end_s)) break;
    if (!failed)
      failed = s->start->deal ? !send_dealt(fd, s->start) : !send_all(fd, buf, s->bytes, 0);
    if (s->start->rounds) {
      if (!failed && !s->start->ends && recv(fd, &ready, 1, MSG_WAITALL) != 1) failed = 1;
      if (!round_end(s->start)) break;
    }
  }
  if (failed) goto out;
  shutdown(fd, SHUT_WR);
  s->ok = recv(fd, &s->received, sizeof(s->received), MSG_WAITALL) == sizeof(s->received);
out:
  close(fd);
  free(buf);
  return NULL;
}

static void resolve(const char *hostport, struct sockaddr_storage *out, socklen_t *len) {
  char host[256];
  const char *colon = strrchr(hostport, ':');
  if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host)) usage();
  size_t hl = (size_t)(colon - hostport);
  if (hostport[0] == '[' && hl >= 2 && hostport[hl - 1] == ']') {
    memcpy(host, hostport + 1, hl - 2);
    host[hl - 2] = '\0';
  } else {
    memcpy(host, hostport, hl);
    host[hl] = '\0';
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
  int rc = getaddrinfo(host, colon + 1, &hints, &res);
  if (rc != 0) {
    fprintf(stderr, "weft-tcp-streams: %s: %s\n", hostport, gai_strerror(rc));
    exit(2);
  }
  memcpy(out, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
}

/* K streams at once; returns the summed GB/s (1e9 bytes/s). */
static double client_run(const struct opts *o, const struct sockaddr_storage *addr, socklen_t len,
                         int k) {
  struct stream s[MAX_STREAMS];
  pthread_t t[MAX_STREAMS];
  struct start st;
  pthread_barrier_init(&st.ready, NULL, (unsigned)k + 1);
  pthread_barrier_init(&st.go, NULL, (unsigned)k + 1);
  pthread_barrier_init(&st.round, NULL, (unsigned)k);
  /* --span: the point's S bytes dealt to its streams, on both ends */
  size_t share = o->span / (size_t)k;
  if (o->span > 0 && share == 0) share = 1;
  st.rounds = o->rounds;
  st.ends = o->ends;
  st.hot = o->hot;
  /* The point's id: the streams' count below a value of the clock. */
  st.point = ((uint64_t)(now_s() * 1e6) << 16) | (uint64_t)k;
  st.stop = 0;
  /* --deal: chunks no larger than a stream's share (the server's buffer) */
  st.span = o->span;
  st.deal = o->deal > share ? share : o->deal;
  atomic_store(&st.next, 0);
  char *src = NULL;
  if (st.deal > 0) {
    if ((src = malloc(o->span)) == NULL) die("malloc");
    memset(src, 0x5a, o->span);
  }
  st.src = src;
  for (int i = 0; i < k; i++) {
    s[i] = (struct stream){.addr = *addr,
                           .addr_len = len,
                           .bytes = o->span > 0 ? share : o->bytes,
                           .recv_buf = o->span > 0 ? share : 0,
                           .start = &st};
    if (pthread_create(&t[i], NULL, client_stream, &s[i]) != 0) die("pthread_create");
  }
  pthread_barrier_wait(&st.ready);
  double start = now_s();
  st.end_s = start + o->seconds;
  pthread_barrier_wait(&st.go);
  uint64_t total = 0;
  int ok = 1;
  for (int i = 0; i < k; i++) {
    pthread_join(t[i], NULL);
    total += s[i].received;
    ok &= s[i].ok;
  }
  double took = now_s() - start;
  pthread_barrier_destroy(&st.ready);
  pthread_barrier_destroy(&st.go);
  pthread_barrier_destroy(&st.round);
  free(src);
  if (!ok) {
    fprintf(stderr, "weft-tcp-streams: a stream failed (server gone?)\n");
    exit(1);
  }
  return (double)total / took / 1e9;
}

/* GB/s of one thread copying `bytes` between two buffers, touched first,
 * for about `seconds`. */
static double memcpy_rate(size_t bytes, double seconds) {
  char *a = malloc(bytes), *b = malloc(bytes);
  if (a == NULL || b == NULL) die("malloc");
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double t0 = now_s(), t;
  size_t n = 0;
  do {
    memcpy(n % 2 ? a : b, n % 2 ? b : a, bytes);
    n++;
  } while ((t = now_s() - t0) < seconds);
  free(a);
  free(b);
  return (double)bytes * (double)n / t / 1e9;
}

int main(int argc, char **argv) {
  struct opts o;
  parse(argc, argv, &o);
  signal(SIGPIPE, SIG_IGN);
  if (o.server) {
    int lfd = server_listen(o.port, 0);
    printf("weft-tcp-streams: server on port %d\n", bound_port(lfd));
    fflush(stdout);
    server_run(lfd);
  }
  struct sockaddr_storage addr;
  socklen_t len;
  pid_t server = -1;
  if (o.client) {
    resolve(o.client, &addr, &len);
  } else {
    /* Loopback: our own server, forked before any thread starts. */
    int lfd = server_listen(0, 1);
    char hp[64];
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", bound_port(lfd));
    server = fork();
    if (server < 0) die("fork");
    if (server == 0) server_run(lfd);
    close(lfd);
    resolve(hp, &addr, &len);
  }
  if (o.span > 0)
    printf(
        "# weft-tcp-streams: %s, the streams of a point send from and receive into %zu "
        "bytes in all (--span)%s%s, %.1f s per point\n",
        o.client ? o.client : "loopback", o.span,
        o.deal && o.ends ? ", in rounds whose bytes go in --deal chunks to whichever stream is "
                           "free, each side ending them on its own (--ends)"
        : o.deal         ? ", in rounds whose bytes go in --deal chunks to whichever stream is free"
        : o.ends   ? ", in rounds each side ends on its own: the senders wait for each other, the "
                     "receivers for each other, no word between them (--ends)"
        : o.rounds ? ", in rounds: each stream its share, then every share's arrival before "
                     "the next (--rounds, a broadcast's calls)"
                   : "",
        o.hot ? ", every read landing at the start of the stream's buffer (--hot)" : "", o.seconds);
  else
    printf(
        "# weft-tcp-streams: %s, %zu-byte sends, received into 4 MiB a stream%s, %.1f s per "
        "point\n",
        o.client ? o.client : "loopback", o.bytes,
        o.hot ? ", every read at its start (--hot)" : " front to back", o.seconds);
  printf("# %7s %10s\n", "streams", "GB/s");
  for (int i = 0; i < o.nstreams; i++) {
    printf("  %7d %10.2f\n", o.streams[i], client_run(&o, &addr, len, o.streams[i]));
    fflush(stdout);
  }
  size_t copied = o.span > 0 ? o.span : o.bytes;
  printf(
      "# one thread's memcpy of %zu bytes: %.2f GB/s (a broadcast root's copy to its own "
      "output out of place runs at most this fast on one thread; WEFT_HOST_COPY_THREADS "
      "shares it)\n",
      copied, memcpy_rate(copied, o.seconds));
  if (server > 0) {
    kill(server, SIGTERM);
    waitpid(server, NULL, 0);
  }
  return 0;
}
