/* One case of the GPU collective matrix (test_gpu_coll.c) on every rank a
 * process drives: its buffers' layout, the poisoned upload, the call (one
 * ncclGroupStart/End over the local ranks when one thread drives several),
 * and the check of what came back against gpu_ref's tables. A rank goes on
 * after a wrong result or a refused call and records why; it stops (fatal)
 * when its communicator or CUDA context has failed. */
#ifndef WEFT_TESTS_GPU_CASE_H
#define WEFT_TESTS_GPU_CASE_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_ref.h"
#include "nccl.h"

#define GCASE_GUARD 16 /* poisoned elements after every output, must stay so */

enum coll {
  C_ALLREDUCE,
  C_ALLGATHER,
  C_REDUCESCATTER,
  C_BROADCAST,
  C_REDUCE,
  C_RING, /* send to the next rank, receive from the previous, one group */
  C_ALLTOALL,
  C_GATHER,
  C_SCATTER,
  C_UNEQUAL, /* a message of its own size to every peer, then a short one */
  C_SELF,    /* send to self */
  C_LONE,    /* ranks 0 and 1: a send and a receive each, outside any group */
  NCOLLS
};
extern const char *const gcase_coll_names[NCOLLS];

struct gcase {
  enum coll k;
  int op;
  size_t count;
  int root;
  int inplace;
};

/* One rank this process drives: its communicator, stream and buffers. */
struct lrank {
  int rank, dev;
  ncclComm_t comm;
  cudaStream_t stream;
  size_t cap;                     /* bytes of each buffer below */
  unsigned char *d_send, *d_recv; /* device */
  unsigned char *h_send;          /* the input as uploaded */
  unsigned char *h_recv;          /* recvbuff as uploaded (poison), then as read back */
  unsigned char *h_back;          /* sendbuff as read back (out of place) */
  void *d_scalar;                 /* a PreMulSum device scalar */
  unsigned char h_scalar[8];
  int nfail; /* failures recorded on this rank */
  char first_fail[640];
};

struct run {
  const char *mode;
  int nranks, nlocal;
  int group; /* 1: each case is one group over every local rank (initall) */
  struct lrank *l;
  struct ref_table *t;
  uint32_t salt;
  int ncases;
  int fatal; /* a communicator or CUDA context failed: stop */
};

/* Sets up l (l->rank, l->dev and l->comm set): a non-blocking stream and
 * device and host buffers of cap bytes each. */
int gcase_rank_open(struct lrank *l, size_t cap);
void gcase_rank_close(struct lrank *l);

/* One rank of a test whose ranks are processes or threads on their own
 * (tag names them in ru.mode and the report): joins id's communicator on
 * GPU rank % count, runs cases on buffers of cap bytes, leaves (aborts
 * after a failure, else destroys), prints "<tag>: rank r of n: k cases,
 * f failures". 0 when every case passed. */
int gcase_comm_rank(const char *tag, int rank, int nranks, ncclUniqueId id, size_t cap,
                    void (*cases)(struct run *ru));

/* Runs one case on every local rank of ru against ru->t; returns non-zero
 * when it failed anywhere (each failure printed as a "FAIL" line). */
int gcase_run(struct run *ru, enum coll k, int op, size_t count, int root, int inplace);

/* Records a failure of case c on rank l; prints the first few per rank. */
void gcase_fail(const struct run *ru, struct lrank *l, const struct gcase *c, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Records nbad bad elements of `of` (first in *bad) as a failure; returns
 * 1 when nbad > 0. */
int gcase_report_bad(const struct run *ru, struct lrank *l, const struct gcase *c, const char *what,
                     size_t nbad, size_t of, const struct ref_bad *bad);

#endif
