/* The host engine's copy pool: large local copies (a broadcast root's
 * input to its own output, a single rank's out-of-place result, send/recv
 * to self) split into pieces that a few threads of the rank copy at once,
 * so one core's memcpy rate no longer bounds them.
 *
 * The engine posts a copy and keeps running its lanes; the pool's threads
 * take the pieces. The engine itself copies a piece only when it has
 * nothing else to do (weft_host_copy_help), and waits for the pieces in
 * flight when that is all that is left (weft_host_copy_wait). Idle pool
 * threads sleep on a condition variable: no thread spins.
 *
 * The threads start with the first post (the engine's worker is running
 * by then, so forked test ranks are long forked) and stop at
 * weft_host_copy_pool_stop. */
#ifndef WEFT_EXEC_HOST_COPY_H
#define WEFT_EXEC_HOST_COPY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "nccl.h"

/* Bytes a pool thread copies at a time: a 512 KiB pipeline chunk is four
 * pieces, so even one step's copy spreads over several threads. */
#define WEFT_HOST_COPY_PIECE (128u * 1024u)

/* A collective that does not reduce has its copies made past the cache
 * (weft_copy_stream) from blocks of this many bytes a rank (a Broadcast's
 * buffer, an AllGather's part): smaller, a call's input and output fit a
 * server's last-level cache together, where plain stores kept up (the
 * 16 MiB socket Broadcast -31% to +34% in the same rounds); at 256 MiB
 * a socket AllGather moved 12-35% more (docs/PERFORMANCE.md, twenty-third
 * pass). */
#define WEFT_HOST_COPY_STREAM_MIN ((size_t)64 << 20)

/* Most copy threads a rank starts by default. */
#define WEFT_HOST_COPY_MAX_AUTO 4

/* One posted copy. The poster owns it; it may be reused or freed once
 * weft_host_copy_finished says so, or after weft_host_copy_cancel. */
struct weft_host_copy {
  char *dst;
  const char *src;
  size_t bytes;
  int stream;          /* copied past the cache (weft_copy_stream) */
  size_t claimed;      /* under the pool's lock: bytes some thread took */
  _Atomic size_t done; /* bytes copied; written under the lock */
  int linked;          /* under the lock: on the pool's list */
  struct weft_host_copy *next;
  size_t pool_bytes; /* under the lock: bytes the pool's threads copied */
};

struct weft_host_copy_pool {
  int nthreads; /* threads wanted; 0: no pool (callers copy themselves) */
  int inited;   /* the lock and condition variables exist */
  int started;  /* threads running */
  int rank;     /* for messages */
  pthread_t *threads;
  pthread_mutex_t lock;
  pthread_cond_t work_cv; /* idle threads sleep here */
  pthread_cond_t done_cv; /* waiters for pieces in flight sleep here */
  /* Under lock. */
  struct weft_host_copy *head, *tail; /* copies with pieces nobody took */
  int stop;
  int sleeping;
  int waiters;
  int inflight;         /* pieces being copied now */
  unsigned long pieces; /* pieces finished, ever: what waiters watch */
};

/* Copy threads for a rank: WEFT_HOST_COPY_THREADS when set (>= 0), else
 * none below 4 cores per local rank (the cores go to the ranks and their
 * socket helper threads), half the cores per local rank from there, at
 * most WEFT_HOST_COPY_MAX_AUTO. */
int weft_host_copy_threads(int cpus, int local_ranks);

/* Sets the pool up with nthreads (0: none); starts nothing. */
void weft_host_copy_pool_init(struct weft_host_copy_pool *p, int nthreads, int rank);
/* Stops and joins the threads. No copy may be posted or in flight. */
void weft_host_copy_pool_stop(struct weft_host_copy_pool *p);

/* Whether a copy of bytes goes to the pool (else the caller copies it). */
int weft_host_copy_wants(const struct weft_host_copy_pool *p, size_t bytes);

/* Posts c (dst, src, bytes) to the pool; starts the threads the first
 * time. With stream, the pieces are copied past the cache
 * (weft_copy_stream in base/copy.h: for an output nothing reads soon),
 * else with memcpy. Threads that cannot start are a WARN, and the pool
 * makes no more posts (weft_host_copy_wants); a copy posted with no thread
 * running is still finished by the poster's weft_host_copy_help. */
void weft_host_copy_post(struct weft_host_copy_pool *p, struct weft_host_copy *c, char *dst,
                         const char *src, size_t bytes, int stream);

/* Every byte of c copied (and visible to the caller). */
static inline int weft_host_copy_finished(struct weft_host_copy *c) {
  return atomic_load_explicit(&c->done, memory_order_acquire) == c->bytes;
}

/* Copies one piece of any posted copy on the calling thread; 1 when it
 * did, 0 when no piece was left to take. */
int weft_host_copy_help(struct weft_host_copy_pool *p);

/* Waits until a piece finishes (returns at once when none is in flight
 * and no thread is there to take the pieces left): for an engine with
 * nothing left to do but the pool's pieces. */
void weft_host_copy_wait(struct weft_host_copy_pool *p);

/* Takes c off the pool: pieces nobody took are dropped, pieces in flight
 * are waited for. Afterwards no thread touches c or its buffers. */
void weft_host_copy_cancel(struct weft_host_copy_pool *p, struct weft_host_copy *c);

#endif
