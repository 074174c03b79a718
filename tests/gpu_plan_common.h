/* What the two files of the plan-kernel GPU suite share (test_gpu_plan.c:
 * plans with Simple and LL; test_gpu_plan_ops.c: fp8, PreMulSum, Direct,
 * fused launches and grouped send/recv): N "ranks" on GPU 0 with their
 * inboxes and link tables, one collective's job run and checked against a
 * host reference, and the host values. Failures are Check assertions. */
#ifndef WEFT_TESTS_GPU_PLAN_COMMON_H
#define WEFT_TESTS_GPU_PLAN_COMMON_H

#include <check.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"
#include "exec/reduce.h"
#include "sched/schedule.h"

#define MAXR 8
#define NCHANNELS 2

#define CUDA_OK(call)                                                          \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    ck_assert_msg(e_ == cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

extern const int rank_counts[4]; /* N of the loops */
extern size_t counts[4];         /* element counts (WEFT_GPU_PLAN_SMALL cuts the last) */
extern int nrank_counts;
extern int small_run; /* WEFT_GPU_PLAN_SMALL */
/* Set by the sys_scope case: every link is built as one between two GPUs
 * (system-scope counters), so that ordering runs on one GPU too. */
extern int links_cross;
/* Nonzero: ranks_open makes inboxes without LL128 slots (as the engine
 * does where LL128 cannot run). */
extern int links_no_ll128;

struct job {
  enum weft_func func;
  int tree;
  ncclDataType_t dt;
  ncclRedOp_t op;
  size_t count; /* per-rank count for AllGather / ReduceScatter */
  int inplace;
  int root;
  size_t chunk_bytes;
  int nchannels;
  int proto; /* enum weft_proto, on every rank */
};

struct ranks {
  int n;
  struct weft_dev_inbox inbox[MAXR];
  struct weft_dev_conns conns[MAXR];
  cudaStream_t streams[MAXR];
  struct weft_dev_wait_diag *diag[MAXR]; /* host-mapped, as the engine's */
};

size_t dt_size(ncclDataType_t dt);
uint16_t half_from_int(int v);
double half_to_double(uint16_t h);
void put(ncclDataType_t dt, void *buf, size_t i, int r);
double get(ncclDataType_t dt, const void *buf, size_t i);
void ranks_open(struct ranks *rs, int n, int nchannels);
void ranks_close(struct ranks *rs);
void sizes(const struct job *j, int n, size_t *in_out, size_t *out_out);
void upload_plan(const struct job *j, int n, int r, int proto, cudaStream_t stream,
                 struct weft_dev_plan *out);
void launch_all(struct ranks *rs, const struct job *j, void *const *in, void *const *out,
                struct weft_dev_plan *plans, int iters);
void wait_all_named(struct ranks *rs, const char *name);
void wait_all(struct ranks *rs, const struct job *j);
double reference(const struct job *j, int n, void *const *hin, size_t k, int r);
void check_output(const struct job *j, int n, void *const *hin, const void *dout, int r, void *hout,
                  const char *what);
void run_job(struct ranks *rs, const struct job *j);
void run_grid(int n, struct job base, const ncclDataType_t *dts, const ncclRedOp_t *ops, int ndt);

/* The cases of test_gpu_plan_ops.c, added to tc. */
void gpu_plan_ops_add(TCase *tc);

#endif
