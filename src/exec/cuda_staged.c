/* The staged path (see exec/cuda_staged.h).
 *
 * Ordering. Every task of a communicator gets the next sequence number.
 * Its stream runs: the input copies (device to pinned host), a write of the
 * sequence to the slot's LANDED word, a wait until the communicator's done
 * word reaches the sequence (cuStreamWaitValue32, a cyclic >=), the output
 * copies, and a write of the sequence to the slot's RELEASED word. The task
 * is queued on the host engine right after the input copies; whichever
 * thread runs it polls LANDED first, so it starts only once its input is in
 * host memory, and it never needs another rank's thread or a CUDA callback
 * to run first (host functions of different streams may be serialized, and
 * one thread may drive every rank of a group). Tasks of a communicator end
 * in order, so the done hook writes done = sequence; a failed or dropped
 * task writes it too, after setting the communicator's error, so no stream
 * waits forever and a bad result never passes silently.
 *
 * Memory. A slot is pinned staging memory and its two host-mapped words;
 * it is free again once RELEASED holds its last sequence, which the stream
 * writes after the output copy. Slots are reused, grown to a power of two
 * when too small, and freed only at destroy: cudaFreeHost waits for the
 * work of every stream (measured: docs/CUDA.md, "The staged path"), which
 * on the launch path or on the worker could be a stream that waits for a
 * task this very thread has yet to queue or run. Outgrown buffers wait for
 * destroy too (they total less than live ones). Allocating does not wait
 * (cudaHostAlloc returned in milliseconds while another stream waited), so
 * a slot may grow on the launch path; slots of STAGED_INIT_BYTES are made
 * at init anyway so common sizes never allocate there, and growth past
 * them says so at INFO.
 *
 * Buffers in host memory (page-locked, or pageable where the GPU reads it,
 * which the argument checks accept) are not copied by the stream:
 * cudaMemcpyAsync between two host buffers runs at once, out of stream
 * order. The worker copies them with memcpy instead, the inputs once
 * LANDED shows the stream got there, the outputs before it writes done.
 *
 * CUDA graph capture is refused: a captured wait would replay against a
 * sequence that no task would ever write again. */
#include "exec/cuda_staged.h"

#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "core/comm.h"
#include "base/param.h"
#include "exec/cuda.h"
#include "exec/reduce.h"
#include "transport/socket.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#define STAGED_ALIGN 256
#define STAGED_MIN_BYTES ((size_t)64 << 10)
/* Slots made at init, so common sizes never allocate on the launch path
 * (see "Memory" above). */
#define STAGED_INIT_SLOTS 2
#define STAGED_INIT_BYTES ((size_t)4 << 20)
#define STAGED_ABORT_DRAIN_MS 2000

enum { W_LANDED = 0, W_RELEASED = 1 };

/* A copy around a task: into staging before it (in) or out after it. */
struct staged_copy {
  void *dst;
  const void *src;
  size_t bytes;
  int out;
};

struct staged_slot {
  struct ncclComm *comm;
  struct weft_cuda_staged *st;
  char *mem; /* pinned staging, cap bytes (NULL while cap is 0) */
  size_t cap;
  uint32_t *words; /* pinned, host-mapped: W_LANDED, W_RELEASED */
  CUdeviceptr words_dev;
  uint32_t seq;     /* the task that used it last; 0: never used */
  int lost;         /* a stream operation failed half-way: never reused */
  const char *what; /* the call, for messages */
  /* Recorded on the task's stream before its input copy and after its
   * landed write: a timed-out wait says which the stream passed. */
  cudaEvent_t marks[2];
  /* Copies of host-memory buffers, made by the worker (see above). */
  struct staged_copy *host;
  int nhost, host_cap;
};

struct weft_cuda_staged {
  int dev;
  PFN_cuStreamWaitValue32_v11070 wait32;
  PFN_cuStreamWriteValue32_v11070 write32;
  PFN_cuGetErrorString_v6000 errstr;
  uint32_t *done; /* pinned, host-mapped: the sequence of the last task ended */
  CUdeviceptr done_dev;
  uint32_t seq; /* tasks issued */
  cudaEvent_t join;
  struct staged_slot **slots;
  int nslots, next;
  void **retired; /* outgrown staging buffers, freed at destroy */
  int nretired;
};

static const char *cu_str(const struct weft_cuda_staged *st, CUresult r) {
  const char *s = NULL;
  if (st->errstr == NULL || st->errstr(r, &s) != CUDA_SUCCESS || s == NULL) return "unknown";
  return s;
}

static size_t align_up(size_t x) {
  return (x + STAGED_ALIGN - 1) & ~(size_t)(STAGED_ALIGN - 1);
}

static char *slot_at(const struct staged_slot *slot, size_t off) {
  return slot->mem != NULL ? slot->mem + off : NULL;
}

static ncclResult_t cuda_fail(const struct ncclComm *comm, const char *what, const char *call,
                              cudaError_t err) {
  WARN("rank %d: %s on the staged path: %s: %s", comm->rank, what, call, cudaGetErrorString(err));
  return ncclUnhandledCudaError;
}

/* ---- Words ------------------------------------------------------------------ */

static ncclResult_t words_alloc(struct ncclComm *comm, uint32_t **host_out, CUdeviceptr *dev_out) {
  void *p = NULL, *d = NULL;
  cudaError_t err = cudaHostAlloc(&p, 64, cudaHostAllocMapped | cudaHostAllocPortable);
  if (err == cudaSuccess) {
    memset(p, 0, 64);
    err = cudaHostGetDevicePointer(&d, p, 0);
    if (err != cudaSuccess) cudaFreeHost(p);
  }
  if (err != cudaSuccess) {
    WARN("rank %d: staged path: host-mapped flag words: %s", comm->rank, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  *host_out = p;
  *dev_out = (CUdeviceptr)(uintptr_t)d;
  return ncclSuccess;
}

static uint32_t word_load(const uint32_t *w) {
  return __atomic_load_n(w, __ATOMIC_ACQUIRE);
}

/* Cyclic a >= b, as the stream's wait compares. */
static int seq_reached(uint32_t a, uint32_t b) {
  return (int32_t)(a - b) >= 0;
}

/* Raises the done word to seq (never lowers it: an abort may have released
 * every wait already, and a task that ends after must not take it back). */
static void done_raise(struct weft_cuda_staged *st, uint32_t seq) {
  uint32_t cur = __atomic_load_n(st->done, __ATOMIC_ACQUIRE);
  while (!seq_reached(cur, seq) &&
         !__atomic_compare_exchange_n(st->done, &cur, seq, 0, __ATOMIC_RELEASE, __ATOMIC_ACQUIRE)) {
  }
}

/* ---- The worker's hooks ------------------------------------------------------ */

/* Sleeps, 10 us at first, doubling up to about 0.3 ms: a wait past the
 * spin costs little CPU and adds little to the time slices it waits for. */
static void nap(int64_t *ns) {
  struct timespec ts = {0, (long)*ns};
  nanosleep(&ts, NULL);
  if (*ns < 160000) *ns *= 2;
}

/* The worker's copies of one direction (see the file comment). */
static void host_copies(const struct staged_slot *slot, int out) {
  for (int i = 0; i < slot->nhost; i++)
    if (slot->host[i].out == out) memcpy(slot->host[i].dst, slot->host[i].src, slot->host[i].bytes);
}

/* Where the task's stream stands, from its marks (see struct staged_slot). */
static const char *stream_stand(const struct staged_slot *slot) {
  if (cudaEventQuery(slot->marks[0]) == cudaErrorNotReady)
    return "the stream has not reached the call (work queued before it is unfinished)";
  if (cudaEventQuery(slot->marks[1]) == cudaErrorNotReady)
    return "the stream reached the call but has not finished its input copy and landed write";
  return "the stream wrote the landed word, yet it does not show here";
}

/* Waits for the stream to land the task's input. Bounded like every wait:
 * WEFT_TIMEOUT, or at once on abort. */
static ncclResult_t landed_wait(const struct staged_slot *slot) {
  struct ncclComm *comm = slot->comm;
  uint32_t seq = slot->seq;
  int64_t spin = weft_param_int(WEFT_PARAM_SPIN), deadline = -1, ns = 10000;
  for (int64_t i = 0;; i++) {
    if (seq_reached(word_load(&slot->words[W_LANDED]), seq)) return ncclSuccess;
    if (i < spin) {
      if (i >= 64) sched_yield();
      continue;
    }
    if (atomic_load(&comm->abort_flag)) {
      INFO(WEFT_COLL, "rank %d: %s (staged task %u): aborted before its input landed", comm->rank,
           slot->what, seq);
      return ncclInternalError;
    }
    int64_t now = weft_time_ms();
    if (deadline < 0) deadline = now + weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
    if (now >= deadline) {
      WARN(
          "rank %d: %s (staged task %u): its input, copied to host memory on the caller's "
          "stream, has not landed after %lld s: %s (the slot's landed word holds task %u)",
          comm->rank, slot->what, seq, (long long)weft_param_int(WEFT_PARAM_TIMEOUT),
          stream_stand(slot), word_load(&slot->words[W_LANDED]));
      return ncclSystemError;
    }
    nap(&ns);
  }
}

/* Start hook: the input is in host memory once LANDED holds the task. */
static ncclResult_t staged_task_start(void *ctx) {
  struct staged_slot *slot = ctx;
  WEFT_CHECK(landed_wait(slot));
  host_copies(slot, 0);
  return ncclSuccess;
}

/* Done hook: the communicator's error first (so a caller that sees the
 * stream pass also sees the error), then the stream goes on. A misuse the
 * host engine would only report leaves recvbuff unwritten here, where
 * nobody waits to be told: it fails the communicator. */
static void staged_task_done(void *ctx, ncclResult_t res, ncclResult_t usage) {
  struct staged_slot *slot = ctx;
  struct ncclComm *comm = slot->comm;
  uint32_t seq = slot->seq; /* read before the slot can be reused */
  if (res == ncclSuccess && usage != ncclSuccess) {
    WARN(
        "rank %d: %s (staged task %u): the ranks' calls did not match, so recvbuff holds no "
        "result; the communicator has failed",
        comm->rank, slot->what, seq);
    res = usage;
  }
  if (res == ncclSuccess) host_copies(slot, 1);
  if (res != ncclSuccess) weft_comm_set_error(comm, res);
  done_raise(slot->st, seq);
}

/* ---- Slots ------------------------------------------------------------------- */

static int slot_free(const struct staged_slot *s) {
  return !s->lost && (s->seq == 0 || word_load(&s->words[W_RELEASED]) == s->seq);
}

/* A slot's words, marks and lists; its staging memory is the caller's. */
static void slot_drop(struct staged_slot *s, int free_pinned) {
  if (free_pinned && s->words != NULL) cudaFreeHost(s->words);
  for (int i = 0; i < 2; i++)
    if (s->marks[i] != NULL) cudaEventDestroy(s->marks[i]);
  free(s->host);
  free(s);
}

static ncclResult_t slot_new(struct ncclComm *comm, struct weft_cuda_staged *st,
                             struct staged_slot **out) {
  struct staged_slot **grown = realloc(st->slots, (size_t)(st->nslots + 1) * sizeof(*grown));
  struct staged_slot *s = calloc(1, sizeof(*s));
  if (grown != NULL) st->slots = grown;
  if (grown == NULL || s == NULL) {
    WARN("rank %d: staged path: out of memory for staging slot %d", comm->rank, st->nslots);
    free(s);
    return ncclSystemError;
  }
  s->comm = comm;
  s->st = st;
  ncclResult_t res = words_alloc(comm, &s->words, &s->words_dev);
  for (int i = 0; i < 2 && res == ncclSuccess; i++) {
    cudaError_t err = cudaEventCreateWithFlags(&s->marks[i], cudaEventDisableTiming);
    if (err != cudaSuccess) res = cuda_fail(comm, "init", "cudaEventCreateWithFlags", err);
  }
  if (res != ncclSuccess) {
    slot_drop(s, 1);
    return res;
  }
  st->slots[st->nslots++] = s;
  *out = s;
  return ncclSuccess;
}

/* Gives a free slot a buffer of at least `bytes` (a power of two); the
 * old one waits for destroy (see the file comment). */
static ncclResult_t slot_grow(struct ncclComm *comm, struct weft_cuda_staged *st,
                              struct staged_slot *slot, size_t bytes) {
  size_t cap = STAGED_MIN_BYTES;
  while (cap < bytes) cap *= 2;
  void **ret = realloc(st->retired, (size_t)(st->nretired + 1) * sizeof(*ret));
  if (ret == NULL) {
    WARN("rank %d: staged path: out of memory", comm->rank);
    return ncclSystemError;
  }
  st->retired = ret;
  if (slot->cap >= STAGED_INIT_BYTES || st->nslots > STAGED_INIT_SLOTS)
    INFO(WEFT_INIT, "rank %d: staged path: %zu bytes more of page-locked staging memory",
         comm->rank, cap);
  void *mem = NULL;
  cudaError_t err = cudaHostAlloc(&mem, cap, cudaHostAllocPortable);
  if (err != cudaSuccess) {
    WARN("rank %d: staged path: cudaHostAlloc of %zu bytes of staging memory: %s", comm->rank, cap,
         cudaGetErrorString(err));
    return ncclSystemError;
  }
  if (slot->mem != NULL) st->retired[st->nretired++] = slot->mem;
  slot->mem = mem;
  slot->cap = cap;
  return ncclSuccess;
}

/* Room for n worker copies in slot. */
static ncclResult_t slot_reserve(struct ncclComm *comm, struct staged_slot *slot, int n) {
  if (n <= slot->host_cap) return ncclSuccess;
  struct staged_copy *grown = realloc(slot->host, (size_t)n * sizeof(*grown));
  if (grown == NULL) {
    WARN("rank %d: staged path: out of memory for %d copies", comm->rank, n);
    return ncclSystemError;
  }
  slot->host = grown;
  slot->host_cap = n;
  return ncclSuccess;
}

/* A free slot of at least `bytes`: the next free one that fits, else a
 * free one grown (its old buffer kept until destroy), else a new one. */
static ncclResult_t slot_get(struct ncclComm *comm, struct weft_cuda_staged *st, size_t bytes,
                             struct staged_slot **out) {
  struct staged_slot *fit = NULL, *small = NULL;
  int at = -1;
  for (int k = 0; k < st->nslots && fit == NULL; k++) {
    int i = (st->next + k) % st->nslots;
    struct staged_slot *s = st->slots[i];
    if (!slot_free(s)) continue;
    if (s->cap < bytes && small != NULL) continue;
    at = i;
    if (s->cap >= bytes)
      fit = s;
    else
      small = s;
  }
  if (fit == NULL && small == NULL) {
    WEFT_CHECK(slot_new(comm, st, &small));
    at = st->nslots - 1;
  }
  if (fit == NULL) {
    if (small->cap < bytes) WEFT_CHECK(slot_grow(comm, st, small, bytes));
    fit = small;
  }
  st->next = (at + 1) % st->nslots;
  fit->nhost = 0;
  *out = fit;
  return ncclSuccess;
}

/* ---- The stream side ---------------------------------------------------------- */

static ncclResult_t cu_fail(const struct ncclComm *comm, const struct weft_cuda_staged *st,
                            const char *what, const char *call, CUresult r) {
  WARN("rank %d: %s on the staged path: %s: %s", comm->rank, what, call, cu_str(st, r));
  return ncclUnhandledCudaError;
}

/* Calls run on the communicator's device; the caller's current device is
 * given back after. */
static int device_enter(const struct weft_cuda_staged *st) {
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (prev != st->dev) cudaSetDevice(st->dev);
  return prev;
}

static void device_leave(const struct weft_cuda_staged *st, int prev) {
  if (prev >= 0 && prev != st->dev) cudaSetDevice(prev);
}

static ncclResult_t check_capture(const struct ncclComm *comm, const char *what, cudaStream_t s) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t err = cudaStreamIsCapturing(s, &cs);
  if (err != cudaSuccess) return cuda_fail(comm, what, "cudaStreamIsCapturing", err);
  if (cs == cudaStreamCaptureStatusNone) return ncclSuccess;
  WARN(
      "rank %d: %s: CUDA graph capture is not supported where device buffers are staged "
      "through host memory (ranks of different processes on one GPU without MPS, GPUs without "
      "peer access, or NCCL_P2P_DISABLE=1); start MPS (nvidia-cuda-mps-control -d) or let the "
      "GPUs reach each other for the kernel path, or issue this call outside the capture",
      comm->rank, what);
  return ncclInvalidUsage;
}

/* The address the CPU reaches p at when p is host memory (page-locked, or
 * pageable where the GPU reads it), else NULL: device or managed memory,
 * which the stream copies. */
static void *host_address(const void *p) {
  struct cudaPointerAttributes a;
  memset(&a, 0, sizeof(a));
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError(); /* CUDA before 11 said so for unregistered memory */
    return (void *)(uintptr_t)p;
  }
  if (a.type == cudaMemoryTypeUnregistered) return (void *)(uintptr_t)p;
  if (a.type == cudaMemoryTypeHost)
    return a.hostPointer != NULL ? a.hostPointer : (void *)(uintptr_t)p;
  return NULL;
}

/* Adds a copy to the stream's list, or, when the caller's side is host
 * memory, to the slot's list for the worker (slot_reserve made room). */
static void copy_add(struct staged_slot *slot, struct staged_copy *stream, int *nstream,
                     struct staged_copy c) {
  if (c.bytes == 0) return;
  void *h = host_address(c.out ? c.dst : c.src);
  if (h == NULL) {
    stream[(*nstream)++] = c;
    return;
  }
  if (c.out)
    c.dst = h;
  else
    c.src = h;
  slot->host[slot->nhost++] = c;
}

static ncclResult_t copies_issue(const struct ncclComm *comm, const char *what,
                                 const struct staged_copy *c, int n, int out, cudaStream_t s) {
  for (int i = 0; i < n; i++) {
    if (c[i].bytes == 0 || c[i].out != out) continue;
    cudaError_t err = cudaMemcpyAsync(c[i].dst, c[i].src, c[i].bytes, cudaMemcpyDefault, s);
    if (err != cudaSuccess) return cuda_fail(comm, what, "cudaMemcpyAsync", err);
  }
  return ncclSuccess;
}

static ncclResult_t word_write(const struct ncclComm *comm, const struct staged_slot *slot,
                               int word, cudaStream_t s) {
  CUdeviceptr at = slot->words_dev + (CUdeviceptr)word * sizeof(uint32_t);
  CUresult r = slot->st->write32((CUstream)s, at, slot->seq, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS) return cu_fail(comm, slot->st, slot->what, "cuStreamWriteValue32", r);
  return ncclSuccess;
}

static ncclResult_t mark(const struct ncclComm *comm, const struct staged_slot *slot, int which,
                         cudaStream_t s) {
  cudaError_t err = cudaEventRecord(slot->marks[which], s);
  return err == cudaSuccess ? ncclSuccess : cuda_fail(comm, slot->what, "cudaEventRecord", err);
}

/* One task's work on one stream: its copies in, then out. */
struct staged_issue {
  struct staged_slot *slot;
  cudaStream_t s;
  const struct staged_copy *copies;
  int ncopies;
};

/* Queues the stream's part of a task around the task's enqueue (see the
 * file comment); takes the task. Once the first stream operation is in,
 * a failure fails the communicator: this rank's task is then missing, or
 * its result lost, while its peers run theirs. */
static ncclResult_t staged_issue(struct ncclComm *comm, struct weft_host_task *task,
                                 const struct staged_issue *is) {
  struct weft_cuda_staged *st = comm->staged_state;
  struct staged_slot *slot = is->slot;
  if (++st->seq == 0) st->seq = 1; /* 0 marks a slot never used */
  slot->seq = st->seq;
  task->hooks = (struct weft_host_hooks){staged_task_start, staged_task_done, slot};
  ncclResult_t res = mark(comm, slot, 0, is->s);
  if (res == ncclSuccess) res = copies_issue(comm, slot->what, is->copies, is->ncopies, 0, is->s);
  if (res == ncclSuccess) res = word_write(comm, slot, W_LANDED, is->s);
  if (res == ncclSuccess) res = mark(comm, slot, 1, is->s);
  if (res != ncclSuccess) {
    weft_host_task_free(task);
    goto fail;
  }
  res = weft_host_engine_enqueue(comm, task);
  if (res != ncclSuccess) {
    /* Not queued: nothing waits; the slot frees once the input is in. */
    if (word_write(comm, slot, W_RELEASED, is->s) != ncclSuccess) slot->lost = 1;
    weft_comm_set_error(comm, res);
    return res;
  }
  CUresult r = st->wait32((CUstream)is->s, st->done_dev, slot->seq, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    res = cu_fail(comm, st, slot->what, "cuStreamWaitValue32", r);
    goto fail;
  }
  res = copies_issue(comm, slot->what, is->copies, is->ncopies, 1, is->s);
  if (res == ncclSuccess) res = word_write(comm, slot, W_RELEASED, is->s);
  if (res == ncclSuccess) return ncclSuccess;
fail:
  slot->lost = 1;
  weft_comm_set_error(comm, res);
  return res;
}

/* ---- Collectives ----------------------------------------------------------------- */

/* Where a collective's buffers sit in its slot, and what the stream copies:
 * in_bytes from sendbuff to in_at, out_bytes from out_at to recvbuff. Only
 * what this rank's engine reads or writes moves (a Broadcast's non-roots
 * read no input, a Reduce's write no output), and in place stays in place,
 * so the engine sees the same overlap the caller's buffers have. */
struct coll_layout {
  size_t bytes;
  size_t in_at, out_at;
  int has_in, has_out;
  size_t in_bytes, out_bytes;
};

static void coll_layout(const struct ncclComm *comm, const struct weft_coll *c, size_t base,
                        struct coll_layout *l) {
  size_t blk = c->count * weft_dtype_size(c->datatype), n = (size_t)comm->nranks;
  size_t own = (size_t)comm->rank * blk;
  uintptr_t send = (uintptr_t)c->sendbuff, recv = (uintptr_t)c->recvbuff;
  size_t in_len = c->func == WEFT_FUNC_REDUCESCATTER ? n * blk : blk;
  size_t out_len = c->func == WEFT_FUNC_ALLGATHER ? n * blk : blk;
  memset(l, 0, sizeof(*l));
  l->has_in = !(c->func == WEFT_FUNC_BROADCAST && comm->rank != c->root);
  l->has_out = !(c->func == WEFT_FUNC_REDUCE && comm->rank != c->root);
  l->in_bytes = l->has_in ? in_len : 0;
  l->out_bytes = l->has_out ? out_len : 0;
  l->in_at = l->out_at = base;
  int both = l->has_in && l->has_out && blk > 0;
  if (both && c->func == WEFT_FUNC_ALLGATHER && send == recv + own) {
    l->in_at = base + own; /* the input is the rank's own block of the output */
    l->bytes = base + out_len;
  } else if (both && c->func == WEFT_FUNC_REDUCESCATTER && recv == send + own) {
    l->out_at = base + own;
    l->bytes = base + in_len;
  } else if (both && in_len == out_len && send == recv) {
    l->bytes = base + in_len;
  } else {
    l->out_at = align_up(base + l->in_bytes);
    l->bytes = l->out_at + l->out_bytes;
  }
}

/* Points the task at its slot: the engine's buffers, and the PreMulSum
 * scalar (at the slot's start, copied now or with the input); fills the
 * stream's copies (room for 3) and returns how many there are. */
static int coll_bind(struct weft_host_task *task, struct staged_slot *slot,
                     const struct coll_layout *l, int scalar_on_device, struct staged_copy *cp) {
  const struct weft_coll *c = &task->coll;
  size_t es = weft_dtype_size(c->datatype);
  int n = 0;
  copy_add(slot, cp, &n,
           (struct staged_copy){slot_at(slot, l->in_at), c->sendbuff, l->in_bytes, 0});
  if (task->premul_sum && scalar_on_device)
    copy_add(slot, cp, &n, (struct staged_copy){slot->mem, task->premul_scalar, es, 0});
  else if (task->premul_sum)
    memcpy(slot->mem, task->premul_scalar, es); /* the caller's copy dies with the group */
  if (task->premul_sum) task->premul_scalar = slot->mem;
  copy_add(slot, cp, &n,
           (struct staged_copy){c->recvbuff, slot_at(slot, l->out_at), l->out_bytes, 1});
  task->bufs[WEFT_BUF_IN] = l->has_in ? slot_at(slot, l->in_at) : NULL;
  task->bufs[WEFT_BUF_OUT] = l->has_out ? slot_at(slot, l->out_at) : NULL;
  return n;
}

ncclResult_t weft_cuda_staged_coll(struct ncclComm *comm, struct weft_host_task *task,
                                   int scalar_on_device, void *stream) {
  struct weft_cuda_staged *st = comm->staged_state;
  const char *what = weft_func_name(task->coll.func);
  cudaStream_t s = stream;
  struct coll_layout l;
  coll_layout(comm, &task->coll, task->premul_sum ? STAGED_ALIGN : 0, &l);
  int prev = device_enter(st);
  struct staged_slot *slot = NULL;
  ncclResult_t res = check_capture(comm, what, s);
  if (res == ncclSuccess) res = slot_get(comm, st, l.bytes, &slot);
  if (res == ncclSuccess) res = slot_reserve(comm, slot, 3);
  if (res != ncclSuccess) {
    /* Refused capture is every rank's misuse; anything else leaves this
     * rank out of step with its peers. */
    if (res != ncclInvalidUsage) weft_comm_set_error(comm, res);
    weft_host_task_free(task);
    device_leave(st, prev);
    return res;
  }
  slot->what = what;
  struct staged_copy cp[3];
  int n = coll_bind(task, slot, &l, scalar_on_device, cp);
  struct staged_issue is = {slot, s, cp, n};
  res = staged_issue(comm, task, &is);
  device_leave(st, prev);
  return res;
}

/* ---- Send/receive ---------------------------------------------------------------- */

static int stream_seen(void *const *streams, int k) {
  for (int j = 0; j < k; j++)
    if (streams[j] == streams[k]) return 1;
  return 0;
}

/* Before the task (after == 0) streams[0] waits for the group's other
 * streams; after it, they wait for streams[0]. One event serves: a wait
 * takes the event's state when it is queued. */
static ncclResult_t streams_join(const struct ncclComm *comm, struct weft_cuda_staged *st,
                                 void *const *streams, int n, int after) {
  cudaStream_t lead = streams[0];
  int recorded = 0;
  for (int k = 1; k < n; k++) {
    cudaStream_t s = streams[k];
    if (s == lead || stream_seen(streams, k)) continue;
    cudaError_t err = cudaSuccess;
    if (!after) {
      err = cudaEventRecord(st->join, s);
      if (err == cudaSuccess) err = cudaStreamWaitEvent(lead, st->join, 0);
    } else {
      if (!recorded) err = cudaEventRecord(st->join, lead);
      recorded = 1;
      if (err == cudaSuccess) err = cudaStreamWaitEvent(s, st->join, 0);
    }
    if (err != cudaSuccess)
      return cuda_fail(comm, "send/recv",
                       after ? "releasing the group's streams" : "joining the group's streams",
                       err);
  }
  return ncclSuccess;
}

static ncclResult_t streams_check(const struct ncclComm *comm, void *const *streams, int n) {
  for (int k = 0; k < n; k++)
    if (!stream_seen(streams, k)) WEFT_CHECK(check_capture(comm, "send/recv", streams[k]));
  return ncclSuccess;
}

/* Each op gets its own region of the slot (so an in-place AlltoAll reads
 * its sends before any receive lands); sends are copied in, receives out.
 * Fills the stream's copies (room for nbufs) and returns how many. */
static int p2p_bind(struct weft_host_task *task, struct staged_slot *slot, struct staged_copy *cp) {
  int n = 0;
  size_t off = 0;
  for (int k = 0; k < task->nbufs; k++) {
    size_t bytes = task->p2p[k].bytes;
    char *at = slot_at(slot, off);
    if (task->p2p[k].is_send)
      copy_add(slot, cp, &n, (struct staged_copy){at, task->bufs[k], bytes, 0});
    else
      copy_add(slot, cp, &n, (struct staged_copy){task->bufs[k], at, bytes, 1});
    task->bufs[k] = at;
    off = align_up(off + bytes);
  }
  return n;
}

ncclResult_t weft_cuda_staged_p2p(struct ncclComm *comm, struct weft_host_task *task,
                                  void *const *streams) {
  struct weft_cuda_staged *st = comm->staged_state;
  int n = task->nbufs;
  size_t bytes = 0;
  for (int k = 0; k < n; k++) bytes = align_up(bytes + task->p2p[k].bytes);
  struct staged_copy *cp = malloc((size_t)(n > 0 ? n : 1) * sizeof(*cp));
  if (cp == NULL) {
    WARN("rank %d: send/recv on the staged path: out of memory for %d copies", comm->rank, n);
    weft_comm_set_error(comm, ncclSystemError);
    weft_host_task_free(task);
    return ncclSystemError;
  }
  int prev = device_enter(st);
  struct staged_slot *slot = NULL;
  ncclResult_t res = streams_check(comm, streams, n);
  if (res == ncclSuccess) res = slot_get(comm, st, bytes, &slot);
  if (res == ncclSuccess) res = slot_reserve(comm, slot, n);
  if (res == ncclSuccess) res = streams_join(comm, st, streams, n, 0);
  if (res != ncclSuccess) {
    if (res != ncclInvalidUsage) weft_comm_set_error(comm, res);
    weft_host_task_free(task);
  } else {
    slot->what = "send/recv";
    int ncp = p2p_bind(task, slot, cp);
    struct staged_issue is = {slot, streams[0], cp, ncp};
    res = staged_issue(comm, task, &is);
    if (res == ncclSuccess) res = streams_join(comm, st, streams, n, 1);
    if (res != ncclSuccess) weft_comm_set_error(comm, res);
  }
  device_leave(st, prev);
  free(cp);
  return res;
}

/* ---- Life ------------------------------------------------------------------------- */

/* The stream memory operations once, on a private stream: a driver that
 * refuses them fails init with the reason instead of the first call. */
static ncclResult_t staged_probe(const struct ncclComm *comm, const struct weft_cuda_staged *st) {
  cudaStream_t s;
  cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (err != cudaSuccess) return cuda_fail(comm, "init", "cudaStreamCreateWithFlags", err);
  CUresult r = st->write32((CUstream)s, st->done_dev, 0, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r == CUDA_SUCCESS) r = st->wait32((CUstream)s, st->done_dev, 0, CU_STREAM_WAIT_VALUE_GEQ);
  err = cudaStreamSynchronize(s);
  cudaStreamDestroy(s);
  if (r != CUDA_SUCCESS) {
    WARN(
        "rank %d: staged path: stream memory operations on host-mapped memory "
        "(cuStreamWriteValue32, cuStreamWaitValue32) are not available: %s",
        comm->rank, cu_str(st, r));
    return ncclSystemError;
  }
  if (err != cudaSuccess) return cuda_fail(comm, "init", "cudaStreamSynchronize", err);
  return ncclSuccess;
}

/* free_pinned == 0: a stream may still use the pinned memory; it stays. */
static void staged_free(struct weft_cuda_staged *st, int free_pinned) {
  for (int i = 0; i < st->nslots; i++) {
    if (free_pinned && st->slots[i]->mem != NULL) cudaFreeHost(st->slots[i]->mem);
    slot_drop(st->slots[i], free_pinned);
  }
  for (int i = 0; i < st->nretired && free_pinned; i++) cudaFreeHost(st->retired[i]);
  if (free_pinned && st->done != NULL) cudaFreeHost(st->done);
  if (st->join != NULL) cudaEventDestroy(st->join);
  free(st->slots);
  free(st->retired);
  free(st);
}

ncclResult_t weft_cuda_staged_create(struct ncclComm *comm) {
  struct weft_cuda_staged *st = calloc(1, sizeof(*st));
  if (st == NULL) {
    WARN("rank %d: out of memory for the staged path", comm->rank);
    return ncclSystemError;
  }
  st->dev = comm->cuda_dev;
  int prev = device_enter(st);
  ncclResult_t res = weft_cuda_driver_fn(comm, "staged path", "cuStreamWaitValue32", &st->wait32,
                                         sizeof(st->wait32));
  if (res == ncclSuccess)
    res = weft_cuda_driver_fn(comm, "staged path", "cuStreamWriteValue32", &st->write32,
                              sizeof(st->write32));
  if (res == ncclSuccess)
    res = weft_cuda_driver_fn(comm, "staged path", "cuGetErrorString", &st->errstr,
                              sizeof(st->errstr));
  if (res == ncclSuccess) res = words_alloc(comm, &st->done, &st->done_dev);
  if (res == ncclSuccess) {
    cudaError_t err = cudaEventCreateWithFlags(&st->join, cudaEventDisableTiming);
    if (err != cudaSuccess) res = cuda_fail(comm, "init", "cudaEventCreateWithFlags", err);
  }
  if (res == ncclSuccess) res = staged_probe(comm, st);
  for (int i = 0; i < STAGED_INIT_SLOTS && res == ncclSuccess; i++) {
    struct staged_slot *slot = NULL;
    res = slot_new(comm, st, &slot);
    if (res == ncclSuccess) res = slot_grow(comm, st, slot, STAGED_INIT_BYTES);
  }
  device_leave(st, prev);
  if (res != ncclSuccess) {
    staged_free(st, 1);
    return res;
  }
  comm->staged_state = st;
  return ncclSuccess;
}

void weft_cuda_staged_abort(struct ncclComm *comm) {
  struct weft_cuda_staged *st = comm->staged_state;
  if (st != NULL) done_raise(st, __atomic_load_n(&st->seq, __ATOMIC_ACQUIRE));
}

/* Whether every used slot's copies finished within window_ms. */
static int slots_drain(const struct weft_cuda_staged *st, int64_t window_ms) {
  int64_t deadline = weft_time_ms() + window_ms, ns = 10000;
  for (int i = 0; i < st->nslots; i++) {
    const struct staged_slot *s = st->slots[i];
    while (!s->lost && !slot_free(s)) {
      if (weft_time_ms() >= deadline) return 0;
      nap(&ns);
    }
  }
  return 1;
}

void weft_cuda_staged_destroy(struct ncclComm *comm, int abort) {
  struct weft_cuda_staged *st = comm->staged_state;
  if (st == NULL) return;
  comm->staged_state = NULL;
  int prev = device_enter(st);
  /* Every task has ended (the host engine is gone); a wait queued for a
   * task that never was is released here too. */
  done_raise(st, st->seq);
  int64_t window = abort ? STAGED_ABORT_DRAIN_MS : weft_param_int(WEFT_PARAM_TIMEOUT) * 1000;
  int drained = slots_drain(st, window);
  if (!drained)
    WARN(
        "rank %d: a stream still had copies through host memory queued %lld ms after the "
        "communicator was %s; their pinned staging memory is left allocated",
        comm->rank, (long long)window, abort ? "aborted" : "destroyed");
  int dev = st->dev;
  staged_free(st, drained);
  if (prev >= 0 && prev != dev) cudaSetDevice(prev);
}

#else /* no CUDA in this build: no rank has a device, so nothing is staged */

ncclResult_t weft_cuda_staged_create(struct ncclComm *comm) {
  WARN("rank %d: staging device buffers needs CUDA, which is not in this build", comm->rank);
  return ncclInvalidUsage;
}

void weft_cuda_staged_abort(struct ncclComm *comm) {
  (void)comm;
}

void weft_cuda_staged_destroy(struct ncclComm *comm, int abort) {
  (void)comm;
  (void)abort;
}

ncclResult_t weft_cuda_staged_coll(struct ncclComm *comm, struct weft_host_task *task,
                                   int scalar_on_device, void *stream) {
  (void)scalar_on_device;
  (void)stream;
  weft_host_task_free(task);
  return weft_cuda_staged_create(comm);
}

ncclResult_t weft_cuda_staged_p2p(struct ncclComm *comm, struct weft_host_task *task,
                                  void *const *streams) {
  (void)streams;
  weft_host_task_free(task);
  return weft_cuda_staged_create(comm);
}

#endif
