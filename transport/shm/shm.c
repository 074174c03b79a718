/* The shared-memory transport: between two ranks of one host, a connection
 * is a byte FIFO in a /dev/shm segment that the receiver creates and both
 * processes map (segment.c). The sender copies into free space and
 * publishes tail; the receiver copies out and publishes head. Copies go at
 * most a slot at a time, so the receiver drains one slot while the sender
 * fills the next. A send or recv of B bytes is a stream: slot boundaries
 * never show to the caller, and both sides may move any part of it per call.
 *
 * A segment's name lives only until both sides have it mapped: the sender
 * unlinks it right after mapping it and so does the receiver's connect,
 * which waits for the sender's "mapped" flag. After connect, a kill -9 of
 * either process leaves nothing in /dev/shm. close unlinks it too when
 * connect never completed (an error or an abort).
 *
 * Single copy (CMA): a send of at least WEFT_SHM_CMA_MIN bytes is not
 * copied. The sender publishes a descriptor (the tail it follows, the
 * address and length of its buffer) and the receiver, once it has read the
 * ring bytes before it, reads the buffer straight into its own with
 * process_vm_readv, in whatever pieces its recv calls ask for, publishing
 * the bytes read (cma_read). The sender's send reports done only as far as
 * they were read, so its buffer stays untouched until then; it writes no
 * ring bytes while a descriptor is outstanding, so the stream keeps its
 * order. The receiver's connect probes process_vm_readv on a word of the
 * sender's; where the kernel refuses (ptrace restrictions, other pid
 * namespaces) the connection copies, as it does before the probe is in.
 * The probe also writes the word back unchanged (process_vm_writev): where
 * both work, the receive side offers the peer's memory to the engine
 * (peer_mem, transport.h), which swaps in-place exchanges through it.
 *
 * For callers (src/core/connect.c):
 * - The sender's connect never waits; the receiver's waits for its
 *   sender's. A rank must connect its send sides before it connects its
 *   receive sides, or two ranks receiving from each other would each wait
 *   for the other until the deadline.
 * - setup returning ncclSystemError with errno ENOSPC means /dev/shm has no
 *   room for the segment (WARNed with the sizes): fall back to the socket
 *   transport for this peer. Nothing is left behind in that case. */
#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/fail_note.h"
#include "base/param.h"
#include "transport/shm/shm.h"
#include "transport/transport.h"

#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#endif

#define SHM_PAGE 4096
#define SHM_MAX_SLOTS 4096
/* Whole segments above this are a typo in the environment, not a plan. */
#define SHM_MAX_RING_BYTES (UINT64_C(1) << 46)
/* A peer's liveness is checked at most this often while a side is stalled. */
#define SHM_PEER_CHECK_MS 100
#define SHM_PEER_CHECK_POLLS 64
#define SHM_SLEEP_MAX_NS 1000000L
#define SHM_CMA_PROBE UINT64_C(0x57454654434d4131) /* "WEFTCMA1" */

/* The word a receiver's probe reads from the sender's address space. */
/* Not const: the receiver's probe writes it back as it found it, to learn
 * whether it may write this process's memory too (peer_mem). */
static uint64_t shm_cma_probe_word = SHM_CMA_PROBE;

struct shm_handle {
  uint32_t magic;
  uint32_t version;
  uint64_t map_bytes;
  char name[WEFT_SHM_NAME_MAX];
};
_Static_assert(sizeof(struct shm_handle) <= WEFT_CONN_HANDLE_BYTES,
               "the shm handle must fit in a connection handle");

/* One end of a connection, private to this process. */
struct shm_conn {
  struct weft_shm_segment seg;
  uint64_t ring_bytes;
  uint64_t slot_bytes;
  uint64_t pos;      /* ours: tail for the sender, head for the receiver */
  uint64_t peer_pos; /* the other side's counter, as last read */
  int peer_pid;      /* for messages */
  int peer_watch;    /* peer_pid is another process of our pid namespace */
  int peer_pidfd;    /* polls readable once the peer exited, reaped or not; -1: none */
  int unlinked;
  uint32_t idle; /* calls in a row that moved nothing */
  int64_t next_check_ms;
  /* Single copy. Both sides: descriptors and their bytes so far. */
  uint64_t cma_seq;   /* sender: published; receiver: read to the end */
  uint64_t cma_total; /* bytes of those descriptors */
  uint64_t cma_min;   /* sender: smallest send that goes single-copy; 0: never */
  int cma_on;         /* sender: the receiver's probe succeeded */
  int peer_rw;        /* receiver: the probe read and wrote the sender's memory */
  void *tsan_key;     /* both ends in this process: the receiver's header mapping */
  int cma_active;     /* sender: a descriptor is out; receiver: one is being read */
  size_t cma_done0;   /* sender: *done when the descriptor went out */
  uint64_t cma_ring_pos, cma_addr, cma_bytes, cma_cursor; /* receiver: the one being read */
};

static void shm_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static ncclResult_t shm_can_connect(const struct weft_transport_peer *self,
                                    const struct weft_transport_peer *peer, int *out) {
  *out = weft_param_int(WEFT_PARAM_SHM_DISABLE) == 0 && self->host_hash == peer->host_hash;
  return ncclSuccess;
}

/* Slot size and count from the parameters: WEFT_SHM_SLOT_BYTES, or
 * NCCL_BUFFSIZE split over WEFT_SHM_SLOTS slots, in whole pages. */
static ncclResult_t shm_sizes(const struct weft_conn *conn, uint64_t *slot_out,
                              uint64_t *ring_out) {
  int64_t slots = weft_param_int(WEFT_PARAM_SHM_SLOTS);
  int64_t slot = weft_param_int(WEFT_PARAM_SHM_SLOT_BYTES);
  if (slots < 1 || slots > SHM_MAX_SLOTS) {
    WARN("shm: rank %d: WEFT_SHM_SLOTS=%" PRId64 " is outside [1, %d]", conn->rank, slots,
         SHM_MAX_SLOTS);
    return ncclInvalidUsage;
  }
  if (slot == 0) slot = weft_param_int(WEFT_PARAM_BUFFSIZE) / slots;
  if (slot < 0 || (uint64_t)slot > SHM_MAX_RING_BYTES / (uint64_t)slots) {
    WARN("shm: rank %d: %" PRId64 " slots of %" PRId64
         " bytes is out of range "
         "(WEFT_SHM_SLOT_BYTES, NCCL_BUFFSIZE)",
         conn->rank, slots, slot);
    return ncclInvalidUsage;
  }
  uint64_t bytes = ((uint64_t)slot + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
  if (bytes == 0) bytes = SHM_PAGE;
  *slot_out = bytes;
  *ring_out = bytes * (uint64_t)slots;
  return ncclSuccess;
}

static void shm_conn_adopt(struct shm_conn *st) {
  st->ring_bytes = st->seg.hdr->ring_bytes;
  st->slot_bytes = st->seg.hdr->slot_bytes;
  st->pos = 0;
  st->peer_pos = 0;
  st->tsan_key =
      st->seg.hdr->recv_pid == (int32_t)getpid() ? (void *)(uintptr_t)st->seg.hdr->recv_map : NULL;
}

/* Ranks that are threads of one process read each other's buffers
 * (single copy, peer_mem) in an order the counters below publish; each
 * thread maps the segment at its own address, so a thread sanitizer sees
 * the release and the acquire on different words and no order. Under one,
 * both ends also release and acquire on one address of the process (the
 * receiver's mapping of the header). */
static void shm_tsan_release(const struct shm_conn *st) {
#if defined(__SANITIZE_THREAD__)
  if (st->tsan_key != NULL) __tsan_release(st->tsan_key);
#else
  (void)st;
#endif
}

static void shm_tsan_acquire(const struct shm_conn *st) {
#if defined(__SANITIZE_THREAD__)
  if (st->tsan_key != NULL) __tsan_acquire(st->tsan_key);
#else
  (void)st;
#endif
}

/* Liveness checks only mean something when the peer is another process of
 * our pid namespace. */
static void shm_conn_watch(struct shm_conn *st, int pid, uint64_t pidns) {
  uint64_t ns = weft__shm_pidns();
  st->peer_pid = pid;
  st->peer_watch = pid > 0 && pid != (int)getpid() && ns != 0 && pidns == ns;
  st->peer_pidfd = -1;
#ifdef SYS_pidfd_open
  /* Opened while the peer is known alive (it just mapped or created the
   * segment), so the descriptor names that process even if its pid is
   * reused later. */
  if (st->peer_watch) st->peer_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
}

/* Whether the peer's process has exited. kill(pid, 0) is not enough: it
 * succeeds on a zombie, which a parent that does not reap leaves for as
 * long as it likes. A pidfd polls readable at exit, reaped or not; without
 * one (kernels before 5.3), /proc says 'Z' for a zombie. */
static int shm_peer_exited(const struct shm_conn *st) {
  if (st->peer_pidfd >= 0) {
    struct pollfd p = {.fd = st->peer_pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
  }
  if (kill(st->peer_pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", st->peer_pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *paren = strrchr(buf, ')'); /* the name may hold spaces and ')' */
  return paren != NULL && paren[1] == ' ' && (paren[2] == 'Z' || paren[2] == 'X');
}

static ncclResult_t shm_setup(struct weft_conn *conn, void *handle_out) {
  ncclResult_t res;
  int saved_errno;
  uint64_t slot_bytes, ring_bytes;
  struct shm_conn *st = calloc(1, sizeof(*st));
  if (st == NULL) {
    WARN("shm: rank %d: out of memory for a connection with rank %d", conn->rank, conn->peer);
    return ncclSystemError;
  }
  /* The sender's end is made in connect, from the receiver's handle. */
  if (conn->dir == WEFT_CONN_SEND) {
    conn->priv = st;
    return ncclSuccess;
  }
  if (handle_out == NULL) {
    WARN("shm: rank %d: receiver setup for rank %d without a handle buffer", conn->rank,
         conn->peer);
    free(st);
    return ncclInternalError;
  }
  weft__shm_reclaim_stale();
  WEFT_CHECK_GOTO(shm_sizes(conn, &slot_bytes, &ring_bytes), res, err_free);
  WEFT_CHECK_GOTO(weft__shm_segment_create(conn, slot_bytes, ring_bytes, &st->seg), res, err_free);
  shm_conn_adopt(st);
  struct shm_handle h = {
      .magic = WEFT_SHM_MAGIC, .version = WEFT_SHM_VERSION, .map_bytes = st->seg.map_bytes};
  memcpy(h.name, st->seg.name, sizeof(h.name));
  memset(handle_out, 0, WEFT_CONN_HANDLE_BYTES);
  memcpy(handle_out, &h, sizeof(h));
  conn->priv = st;
  return ncclSuccess;

err_free:
  saved_errno = errno; /* ENOSPC tells the caller to fall back */
  free(st);
  errno = saved_errno;
  return res;
}

static ncclResult_t shm_connect_send(struct weft_conn *conn, struct shm_conn *st,
                                     const void *peer_handle) {
  struct shm_handle h;
  if (peer_handle == NULL) {
    WARN("shm: rank %d: no handle from rank %d (channel %d)", conn->rank, conn->peer,
         conn->channel);
    return ncclInternalError;
  }
  memcpy(&h, peer_handle, sizeof(h));
  if (h.magic != WEFT_SHM_MAGIC || h.version != WEFT_SHM_VERSION) {
    WARN("shm: rank %d: handle from rank %d (channel %d) is not an shm handle (magic %#x)",
         conn->rank, conn->peer, conn->channel, h.magic);
    return ncclInternalError;
  }
  WEFT_CHECK(weft__shm_segment_open(conn, h.name, h.map_bytes, &st->seg));
  struct weft_shm_header *hdr = st->seg.hdr;
  hdr->send_pidns = weft__shm_pidns();
  hdr->cma_probe_addr = (uint64_t)(uintptr_t)&shm_cma_probe_word;
  int64_t cma_min = weft_param_int(WEFT_PARAM_SHM_CMA_MIN);
  if (weft_param_int(WEFT_PARAM_SHM_CMA) != 0 && cma_min >= 0)
    st->cma_min = cma_min > 0 ? (uint64_t)cma_min : 1;
  atomic_store_explicit(&hdr->send_pid, (int32_t)getpid(), memory_order_release);
  /* Both ends are mapped now; the name has done its job. */
  weft__shm_segment_unlink(&st->seg);
  shm_conn_adopt(st);
  shm_conn_watch(st, hdr->recv_pid, hdr->recv_pidns);
  INFO(WEFT_SHM | WEFT_INIT, "shm: channel %d rank %d -> rank %d (pid %d) via %s", conn->channel,
       conn->rank, conn->peer, st->peer_pid, st->seg.name);
  return ncclSuccess;
}

/* Waits for the sender's "mapped" flag: spins briefly, yields, then sleeps
 * in growing steps up to 1 ms, until the deadline or an abort. */
static ncclResult_t shm_wait_mapped(struct weft_conn *conn, struct shm_conn *st,
                                    int64_t deadline_ms) {
  int64_t spins = weft_param_int(WEFT_PARAM_SPIN);
  long sleep_ns = 1000;
  for (int64_t i = 0;; i++) {
    if (atomic_load_explicit(&st->seg.hdr->send_pid, memory_order_acquire) != 0) return ncclSuccess;
    if (conn->abort_flag != NULL && atomic_load(conn->abort_flag) != 0) {
      INFO(WEFT_SHM, "shm: rank %d: wait for rank %d (channel %d) aborted", conn->rank, conn->peer,
           conn->channel);
      return ncclInternalError;
    }
    if (i < spins) {
      shm_cpu_relax();
      continue;
    }
    if (weft__shm_now_ms() >= deadline_ms) {
      WARN("shm: rank %d: rank %d (sender, channel %d) did not map %s before the deadline",
           conn->rank, conn->peer, conn->channel, st->seg.name);
      return ncclSystemError;
    }
    if (i < spins + 64) {
      sched_yield();
    } else {
      struct timespec ts = {0, sleep_ns};
      nanosleep(&ts, NULL);
      if (sleep_ns < SHM_SLEEP_MAX_NS) sleep_ns *= 2;
    }
  }
}

/* Receiver side, once the sender has mapped: can we read its memory? The
 * verdict goes to cma_state, where the sender looks before a large send. */
static void shm_cma_probe(struct weft_conn *conn, struct shm_conn *st) {
  struct weft_shm_header *hdr = st->seg.hdr;
  int64_t mode = weft_param_int(WEFT_PARAM_SHM_CMA);
  uint64_t ns = weft__shm_pidns(), word = 0;
  int32_t state = WEFT_SHM_CMA_OFF;
  const char *why = NULL;
  if (mode == 0) {
    why = NULL; /* off on purpose: nothing to say */
  } else if (ns == 0 || hdr->send_pidns != ns || st->peer_pid <= 0) {
    why = "the sender is in another pid namespace";
  } else {
    void *addr = mode < 0 ? NULL : (void *)(uintptr_t)hdr->cma_probe_addr;
    struct iovec local = {&word, sizeof(word)}, remote = {addr, sizeof(word)};
    ssize_t n = process_vm_readv(st->peer_pid, &local, 1, &remote, 1, 0);
    if (n == (ssize_t)sizeof(word) && word == SHM_CMA_PROBE)
      state = WEFT_SHM_CMA_ON;
    else
      why = n < 0 ? strerror(errno) : "the probe read the wrong bytes";
    /* The same word written back unchanged: may peer_mem write there? */
    st->peer_rw = state == WEFT_SHM_CMA_ON && process_vm_writev(st->peer_pid, &local, 1, &remote, 1,
                                                                0) == (ssize_t)sizeof(word);
  }
  if (why != NULL)
    INFO(WEFT_SHM | WEFT_INIT,
         "shm: channel %d rank %d <- rank %d (pid %d): no single-copy reads "
         "(process_vm_readv: %s); copying through the segment",
         conn->channel, conn->rank, conn->peer, st->peer_pid, why);
  atomic_store_explicit(&hdr->cma_state, state, memory_order_release);
}

static ncclResult_t shm_connect_recv(struct weft_conn *conn, struct shm_conn *st,
                                     int64_t deadline_ms) {
  if (deadline_ms <= 0)
    deadline_ms = weft__shm_now_ms() + weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
  WEFT_CHECK(shm_wait_mapped(conn, st, deadline_ms));
  weft__shm_segment_unlink(&st->seg);
  st->unlinked = 1;
  struct weft_shm_header *hdr = st->seg.hdr;
  shm_conn_watch(st, atomic_load_explicit(&hdr->send_pid, memory_order_acquire), hdr->send_pidns);
  shm_cma_probe(conn, st);
  INFO(WEFT_SHM | WEFT_INIT,
       "shm: channel %d rank %d <- rank %d (pid %d): %" PRIu64 " slots of %" PRIu64 " bytes%s",
       conn->channel, conn->rank, conn->peer, st->peer_pid, st->ring_bytes / st->slot_bytes,
       st->slot_bytes,
       atomic_load_explicit(&hdr->cma_state, memory_order_relaxed) == WEFT_SHM_CMA_ON
           ? ", single-copy reads"
           : "");
  return ncclSuccess;
}

static ncclResult_t shm_connect(struct weft_conn *conn, const void *peer_handle,
                                int64_t deadline_ms) {
  struct shm_conn *st = conn->priv;
  if (st == NULL && conn->dir == WEFT_CONN_SEND) {
    st = calloc(1, sizeof(*st));
    if (st == NULL) {
      WARN("shm: rank %d: out of memory for a connection with rank %d", conn->rank, conn->peer);
      return ncclSystemError;
    }
    conn->priv = st;
  }
  if (st == NULL || (conn->dir == WEFT_CONN_SEND && st->seg.hdr != NULL)) {
    WARN("shm: rank %d: connect to rank %d (channel %d) without setup, or twice", conn->rank,
         conn->peer, conn->channel);
    return ncclInternalError;
  }
  if (conn->dir == WEFT_CONN_SEND) return shm_connect_send(conn, st, peer_handle);
  return shm_connect_recv(conn, st, deadline_ms);
}

/* Called when a send or recv moved nothing: reports a peer that closed its
 * end or exited, once nothing more can come from it. `peer_counter` is the
 * counter the peer writes; one it moved just before it went still counts. */
static ncclResult_t shm_stalled(struct weft_conn *conn, struct shm_conn *st,
                                _Atomic uint64_t *peer_counter) {
  int peer_bit = conn->dir == WEFT_CONN_SEND ? WEFT_SHM_CLOSED_RECV : WEFT_SHM_CLOSED_SEND;
  const char *why = NULL;
  if (atomic_load_explicit(&st->seg.hdr->closed, memory_order_acquire) & peer_bit) {
    why = "closed the connection";
  } else if (st->peer_watch && (++st->idle % SHM_PEER_CHECK_POLLS) == 0) {
    int64_t now = weft__shm_now_ms();
    if (now >= st->next_check_ms) {
      st->next_check_ms = now + SHM_PEER_CHECK_MS;
      if (shm_peer_exited(st)) why = "exited";
    }
  }
  if (why == NULL) return ncclSuccess;
  if (conn->dir == WEFT_CONN_RECV &&
      (atomic_load_explicit(peer_counter, memory_order_acquire) != st->peer_pos ||
       atomic_load_explicit(&st->seg.hdr->desc_seq, memory_order_acquire) != st->cma_seq))
    return ncclSuccess;
  WARN("shm: rank %d (pid %d) %s; rank %d cannot %s it on channel %d", conn->peer, st->peer_pid,
       why, conn->rank, conn->dir == WEFT_CONN_SEND ? "send to" : "receive from", conn->channel);
  weft_failure_note(conn->peer, why[0] == 'e' ? WEFT_FAIL_DIED : WEFT_FAIL_ABORTED,
                    "its process %d %s (shm, channel %d)", st->peer_pid, why, conn->channel);
  return ncclRemoteError;
}

/* Sender: is the rest of this send to go single-copy? Not before the
 * receiver's probe is in (the send copies meanwhile). */
static int shm_cma_wanted(struct shm_conn *st, size_t rest) {
  if (st->cma_min == 0 || rest < st->cma_min) return 0;
  if (!st->cma_on) {
    int32_t state = atomic_load_explicit(&st->seg.hdr->cma_state, memory_order_acquire);
    if (state == WEFT_SHM_CMA_OFF) st->cma_min = 0;
    st->cma_on = state == WEFT_SHM_CMA_ON;
  }
  return st->cma_on;
}

/* Sender: publishes the rest of buf as a descriptor, or reports how much of
 * the outstanding one the receiver has read. */
static size_t shm_send_cma(struct shm_conn *st, const void *buf, size_t bytes, size_t *done) {
  struct weft_shm_header *hdr = st->seg.hdr;
  if (!st->cma_active) {
    hdr->desc_ring_pos = st->pos;
    hdr->desc_addr = (uint64_t)(uintptr_t)((const char *)buf + *done);
    hdr->desc_bytes = bytes - *done;
    st->cma_active = 1;
    st->cma_done0 = *done;
    shm_tsan_release(st);
    atomic_store_explicit(&hdr->desc_seq, ++st->cma_seq, memory_order_release);
  }
  uint64_t read = atomic_load_explicit(&hdr->cma_read, memory_order_acquire) - st->cma_total;
  shm_tsan_acquire(st);
  size_t now = st->cma_done0 + (size_t)read, moved = now - *done;
  *done = now;
  if (read == hdr->desc_bytes) {
    st->cma_total += read;
    st->cma_active = 0;
  }
  return moved;
}

static ncclResult_t shm_send(struct weft_conn *conn, const void *buf, size_t bytes, size_t *done) {
  struct shm_conn *st = conn->priv;
  size_t moved = 0;
  if (*done >= bytes) return ncclSuccess;
  if (st->cma_active || shm_cma_wanted(st, bytes - *done)) {
    moved = shm_send_cma(st, buf, bytes, done);
    if (moved > 0) {
      st->idle = 0;
      return ncclSuccess;
    }
    return shm_stalled(conn, st, &st->seg.hdr->head);
  }
  while (*done < bytes) {
    uint64_t off = st->pos % st->ring_bytes;
    uint64_t n = st->slot_bytes - off % st->slot_bytes;
    if (n > bytes - *done) n = bytes - *done;
    uint64_t space = st->ring_bytes - (st->pos - st->peer_pos);
    if (space < n) {
      st->peer_pos = atomic_load_explicit(&st->seg.hdr->head, memory_order_acquire);
      shm_tsan_acquire(st);
      space = st->ring_bytes - (st->pos - st->peer_pos);
      if (space == 0) break;
      if (n > space) n = space;
    }
    memcpy(st->seg.ring + off, (const char *)buf + *done, n);
    st->pos += n;
    shm_tsan_release(st);
    atomic_store_explicit(&st->seg.hdr->tail, st->pos, memory_order_release);
    *done += n;
    moved += n;
  }
  if (moved > 0) {
    st->idle = 0;
    return ncclSuccess;
  }
  return shm_stalled(conn, st, &st->seg.hdr->head);
}

/* Copies up to n bytes between local and the peer's address remote (into
 * the peer's memory when `write` is set); *got: how many (at least 1). */
static ncclResult_t shm_peer_copy(struct weft_conn *conn, const struct shm_conn *st, void *local,
                                  uint64_t remote, size_t n, int write, size_t *got) {
  void *far = (void *)(uintptr_t)remote;
  ssize_t k;
  if (st->peer_pid == (int)getpid()) {
    memcpy(write ? far : local, write ? local : far, n); /* ranks as threads of one process */
    k = (ssize_t)n;
  } else {
    struct iovec mine = {local, n}, theirs = {far, n};
    do {
      k = write ? process_vm_writev(st->peer_pid, &mine, 1, &theirs, 1, 0)
                : process_vm_readv(st->peer_pid, &mine, 1, &theirs, 1, 0);
    } while (k < 0 && errno == EINTR);
  }
  if (k <= 0) {
    int err = k < 0 ? errno : EFAULT;
    if (err == ESRCH) {
      WARN("shm: rank %d (pid %d) exited; rank %d cannot exchange with it on channel %d",
           conn->peer, st->peer_pid, conn->rank, conn->channel);
      weft_failure_note(conn->peer, WEFT_FAIL_DIED, "its process %d exited (shm, channel %d)",
                        st->peer_pid, conn->channel);
      return ncclRemoteError;
    }
    WARN("shm: rank %d: %s %zu bytes %s rank %d (pid %d, channel %d) failed: %s", conn->rank,
         write ? "writing" : "reading", n, write ? "to" : "from", conn->peer, st->peer_pid,
         conn->channel, strerror(err));
    return ncclSystemError;
  }
  *got = (size_t)k;
  return ncclSuccess;
}

/* Receiver, with no ring bytes to read: reads up to `want` bytes of the
 * sender's descriptor into dst, once the ring bytes before it are read.
 * A pending descriptor always follows every ring byte published so far
 * (the sender writes none while one is out). */
static ncclResult_t shm_recv_cma(struct weft_conn *conn, struct shm_conn *st, char *dst,
                                 size_t want, size_t *moved_out) {
  struct weft_shm_header *hdr = st->seg.hdr;
  *moved_out = 0;
  if (!st->cma_active) {
    if (atomic_load_explicit(&hdr->desc_seq, memory_order_acquire) == st->cma_seq)
      return ncclSuccess;
    shm_tsan_acquire(st);
    st->cma_ring_pos = hdr->desc_ring_pos;
    st->cma_addr = hdr->desc_addr;
    st->cma_bytes = hdr->desc_bytes;
    st->cma_cursor = 0;
    st->cma_active = 1;
  }
  if (st->cma_ring_pos != st->pos) return ncclSuccess; /* ring bytes come first */
  uint64_t n = st->cma_bytes - st->cma_cursor;
  if (n > want) n = want;
  size_t got;
  WEFT_CHECK(shm_peer_copy(conn, st, dst, st->cma_addr + st->cma_cursor, n, 0, &got));
  st->cma_cursor += (uint64_t)got;
  st->cma_total += (uint64_t)got;
  if (st->cma_cursor == st->cma_bytes) {
    st->cma_active = 0;
    st->cma_seq++;
  }
  shm_tsan_release(st);
  atomic_store_explicit(&hdr->cma_read, st->cma_total, memory_order_release);
  *moved_out = (size_t)got;
  return ncclSuccess;
}

static ncclResult_t shm_recv(struct weft_conn *conn, void *buf, size_t bytes, size_t *done) {
  struct shm_conn *st = conn->priv;
  size_t moved = 0;
  if (*done >= bytes) return ncclSuccess;
  while (*done < bytes) {
    uint64_t off = st->pos % st->ring_bytes;
    uint64_t n = st->slot_bytes - off % st->slot_bytes;
    if (n > bytes - *done) n = bytes - *done;
    uint64_t avail = st->peer_pos - st->pos;
    if (avail < n) {
      st->peer_pos = atomic_load_explicit(&st->seg.hdr->tail, memory_order_acquire);
      shm_tsan_acquire(st);
      avail = st->peer_pos - st->pos;
      if (avail == 0) {
        size_t got;
        WEFT_CHECK(shm_recv_cma(conn, st, (char *)buf + *done, bytes - *done, &got));
        if (got == 0) break;
        *done += got;
        moved += got;
        continue;
      }
      if (n > avail) n = avail;
    }
    memcpy((char *)buf + *done, st->seg.ring + off, n);
    st->pos += n;
    shm_tsan_release(st);
    atomic_store_explicit(&st->seg.hdr->head, st->pos, memory_order_release);
    *done += n;
    moved += n;
  }
  if (moved > 0) {
    st->idle = 0;
    return ncclSuccess;
  }
  return shm_stalled(conn, st, &st->seg.hdr->tail);
}

/* The peer's memory (transport.h), where the probe could read and write
 * it: from WEFT_SHM_CMA_MIN bytes, like single-copy sends. */
static size_t shm_peer_mem_min(const struct weft_conn *conn) {
  const struct shm_conn *st = conn->priv;
  if (conn->dir != WEFT_CONN_RECV || st == NULL || !st->peer_rw) return 0;
  int64_t min = weft_param_int(WEFT_PARAM_SHM_CMA_MIN);
  if (weft_param_int(WEFT_PARAM_SHM_CMA) == 0 || min < 0) return 0;
  return min > 0 ? (size_t)min : 1;
}

static ncclResult_t shm_peer_mem(struct weft_conn *conn, void *local, uint64_t remote, size_t n,
                                 int write) {
  const struct shm_conn *st = conn->priv;
  for (size_t done = 0, got; done < n; done += got)
    WEFT_CHECK(shm_peer_copy(conn, st, (char *)local + done, remote + done, n - done, write, &got));
  return ncclSuccess;
}

static int shm_wait_fd(const struct weft_conn *conn) {
  (void)conn;
  return -1;
}

static ncclResult_t shm_close(struct weft_conn *conn) {
  struct shm_conn *st = conn->priv;
  if (st == NULL) return ncclSuccess;
  if (st->seg.hdr != NULL) {
    int bit = conn->dir == WEFT_CONN_SEND ? WEFT_SHM_CLOSED_SEND : WEFT_SHM_CLOSED_RECV;
    atomic_fetch_or_explicit(&st->seg.hdr->closed, bit, memory_order_release);
  }
  /* Only the creator removes a name it may still hold: connect never
   * completed, by error or abort. */
  if (conn->dir == WEFT_CONN_RECV && !st->unlinked) weft__shm_segment_unlink(&st->seg);
  weft__shm_segment_unmap(&st->seg);
  if (st->peer_watch && st->peer_pidfd >= 0) close(st->peer_pidfd); /* set together */
  free(st);
  conn->priv = NULL;
  return ncclSuccess;
}

const struct weft_transport_ops weft_shm_ops = {
    .size = sizeof(struct weft_transport_ops),
    .name = "shm",
    .can_connect = shm_can_connect,
    .setup = shm_setup,
    .connect = shm_connect,
    .send = shm_send,
    .recv = shm_recv,
    .wait_fd = shm_wait_fd,
    .close = shm_close,
    .peer_mem_min = shm_peer_mem_min,
    .peer_mem = shm_peer_mem,
};
