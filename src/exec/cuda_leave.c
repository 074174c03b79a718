/* Ranks of a communicator that are threads of one process leave it in step.
 *
 * The CUDA engine's destroy frees device memory and pinned host memory
 * (cudaFree, cudaFreeHost). Those calls wait for every kernel issued on the
 * GPU before them, and a kernel issued after them by another thread starts
 * only once they have returned. A rank-thread whose last collective ended
 * early (the root of a broadcast hands its data to the FIFOs and is done)
 * could free while a peer thread had not launched that collective yet: the
 * peers already running spin on it, the free waits for them, and the late
 * launch waits for the free. That hang (a ring broadcast of 8 rank-threads
 * on one H200, the last call of a test job, 2026-12-04) is why each rank's
 * destroy first waits here, after its own last launch has ended, until
 * every rank of the communicator in this process has issued as many
 * collectives as it has, and its side of every send and receive it made
 * with this rank, or is leaving too. One thread that drives every
 * rank (ncclCommInitAll) issued them all before its first destroy, so it
 * never waits. Abort does not wait (its kernels end within a poll). */
#include "exec/cuda_leave.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/check.h"
#include "core/bootstrap.h"

/* One cache line each: every rank stores its count after every launch. */
struct issued {
  _Atomic uint64_t n;
  char pad[64 - sizeof(uint64_t)];
};

struct weft_cuda_leave {
  atomic_int refs;
  int nlocal;            /* ranks of the communicator in this process */
  int *ranks;            /* [nlocal]: their ranks */
  struct issued *issued; /* [nlocal]: collectives each has launched */
  atomic_uchar *leaving; /* [nlocal]: in its destroy, last launch ended */
  /* [nlocal][stride]: sends and receives rank i has launched with rank j
   * (row i written by rank i alone; rows of whole cache lines). */
  _Atomic uint64_t *pairs;
  int stride;
};

static int same_process(const struct ncclComm *comm, int p) {
  const struct weft_peer_info *me = &comm->peers[comm->rank];
  return comm->peers[p].pid == me->pid && comm->peers[p].host_hash == me->host_hash;
}

static void leave_free(struct weft_cuda_leave *l) {
  free(l->ranks);
  free(l->issued);
  free((void *)l->leaving); /* the casts drop _Atomic */
  free((void *)l->pairs);
  free(l);
}

struct weft_cuda_leave *weft_cuda_leave_new(int nlocal, const int *ranks) {
  struct weft_cuda_leave *l = nlocal > 0 ? calloc(1, sizeof(*l)) : NULL;
  if (l == NULL) return NULL;
  l->ranks = calloc((size_t)nlocal, sizeof(*l->ranks));
  l->issued = calloc((size_t)nlocal, sizeof(*l->issued));
  l->leaving = calloc((size_t)nlocal, sizeof(*l->leaving));
  l->stride = (nlocal + 7) / 8 * 8;
  l->pairs = calloc((size_t)nlocal * (size_t)l->stride, sizeof(*l->pairs));
  if (l->ranks == NULL || l->issued == NULL || l->leaving == NULL || l->pairs == NULL) {
    leave_free(l);
    return NULL;
  }
  memcpy(l->ranks, ranks, (size_t)nlocal * sizeof(*ranks));
  l->nlocal = nlocal;
  atomic_init(&l->refs, nlocal);
  return l;
}

ncclResult_t weft_cuda_leave_join(struct ncclComm *comm, struct weft_cuda_leave **out, int *index) {
  *out = NULL;
  *index = 0;
  int nlocal = 0, first = -1;
  for (int p = 0; p < comm->nranks; p++)
    if (same_process(comm, p)) {
      if (first < 0) first = p;
      if (p == comm->rank) *index = nlocal;
      nlocal++;
    }
  /* Every rank takes part in the all-gather, alone in its process or not. */
  uintptr_t *all = comm->nranks > 0 ? calloc((size_t)comm->nranks, sizeof(*all)) : NULL;
  if (all == NULL) {
    WARN("rank %d: out of memory joining the rank-threads of this process", comm->rank);
    return ncclSystemError;
  }
  struct weft_cuda_leave *mine = NULL;
  if (nlocal > 1 && first == comm->rank) {
    int *ranks = calloc((size_t)nlocal, sizeof(*ranks));
    for (int p = 0, i = 0; ranks != NULL && p < comm->nranks; p++)
      if (same_process(comm, p)) ranks[i++] = p;
    mine = ranks != NULL ? weft_cuda_leave_new(nlocal, ranks) : NULL;
    free(ranks);
    if (mine == NULL)
      WARN("rank %d: out of memory for the record of this process's %d ranks", comm->rank, nlocal);
  }
  all[comm->rank] = (uintptr_t)mine;
  ncclResult_t res = weft_bootstrap_allgather(comm->bootstrap, all, sizeof(*all));
  if (res == ncclSuccess && nlocal > 1) *out = (struct weft_cuda_leave *)all[first];
  free(all);
  if (res != ncclSuccess) {
    if (mine != NULL) leave_free(mine); /* no peer took it */
    *out = NULL;
    return res;
  }
  /* The first rank could not make the record: its init fails here, and
   * the others, given none, never wait. */
  return mine == NULL && first == comm->rank && nlocal > 1 ? ncclSystemError : ncclSuccess;
}

void weft_cuda_leave_issued(struct weft_cuda_leave *l, int index, uint64_t ncolls) {
  if (l != NULL) atomic_store_explicit(&l->issued[index].n, ncolls, memory_order_release);
}

void weft_cuda_leave_p2p(struct weft_cuda_leave *l, int index, int peer) {
  if (l == NULL) return;
  for (int j = 0; j < l->nlocal; j++) {
    if (l->ranks[j] != peer || j == index) continue;
    _Atomic uint64_t *n = &l->pairs[(size_t)index * (size_t)l->stride + (size_t)j];
    atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1,
                          memory_order_release);
    return;
  }
}

/* Whether local rank i has launched its side of every send and receive
 * local rank me launched with it (each pair counts the same ops). */
static int pairs_met(const struct weft_cuda_leave *l, int me, int i) {
  uint64_t mine = atomic_load_explicit(&l->pairs[(size_t)me * (size_t)l->stride + (size_t)i],
                                       memory_order_relaxed);
  return atomic_load_explicit(&l->pairs[(size_t)i * (size_t)l->stride + (size_t)me],
                              memory_order_acquire) >= mine;
}

/* The ranks still to launch a collective, or their side of a send or
 * receive, that this rank has launched, as "3, 5" in buf; 0 when there
 * are none. */
static int behind(const struct weft_cuda_leave *l, int index, uint64_t ncolls, char *buf,
                  size_t len) {
  int n = 0;
  size_t at = 0;
  if (len > 0) buf[0] = '\0';
  for (int i = 0; i < l->nlocal; i++) {
    if (i == index || atomic_load_explicit(&l->leaving[i], memory_order_acquire) ||
        (atomic_load_explicit(&l->issued[i].n, memory_order_acquire) >= ncolls &&
         pairs_met(l, index, i)))
      continue;
    n++;
    if (at < len) {
      int k = snprintf(buf + at, len - at, "%s%d", at > 0 ? ", " : "", l->ranks[i]);
      if (k > 0) at += (size_t)k;
    }
  }
  return n;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (double)(now.tv_sec - t0->tv_sec) + 1e-9 * (double)(now.tv_nsec - t0->tv_nsec);
}

void weft_cuda_leave_wait(struct weft_cuda_leave *l, int index, uint64_t ncolls, int abort,
                          double timeout_s) {
  if (l == NULL) return;
  atomic_store_explicit(&l->leaving[index], 1, memory_order_release);
  if (abort) return;
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int said = 0;
  long nap_ns = 1000;
  char who[256];
  while (behind(l, index, ncolls, who, sizeof who) > 0) {
    double waited = seconds_since(&t0);
    if (waited >= timeout_s) {
      WARN(
          "rank %d: ncclCommDestroy waited %.0f s (WEFT_TIMEOUT) for rank(s) %s of this process to "
          "launch the communicator's last collective (%llu) or their side of this rank's sends "
          "and receives; freeing now, which can hang their kernels",
          l->ranks[index], waited, who, (unsigned long long)ncolls);
      return;
    }
    if (!said && waited >= 5.0) {
      WARN(
          "rank %d: ncclCommDestroy is waiting for rank(s) %s of this process to launch the "
          "communicator's last collective (%llu) or their side of this rank's sends and "
          "receives: freeing before they have would hang them (docs/CUDA.md, \"Rank-threads and "
          "device-wide CUDA calls\")",
          l->ranks[index], who, (unsigned long long)ncolls);
      said = 1;
    }
    /* Spin briefly, then sleep longer each round, up to a millisecond. */
    struct timespec nap = {0, nap_ns};
    nanosleep(&nap, NULL);
    if (nap_ns < 1000000) nap_ns *= 2;
  }
}

void weft_cuda_leave_release(struct weft_cuda_leave *l, int index) {
  if (l == NULL) return;
  atomic_store_explicit(&l->leaving[index], 1, memory_order_release);
  if (atomic_fetch_sub_explicit(&l->refs, 1, memory_order_acq_rel) == 1) leave_free(l);
}
