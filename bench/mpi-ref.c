/* weft-mpi-ref: the same sweep as weft-bench, measured with MPI's own
 * collectives, printed in the same table, so the two read side by side
 * (bench/compare-mpi.sh runs both).
 *
 *   mpirun -np N weft-mpi-ref [COLLECTIVE] [-b -e -f -i -n -w -c -d -o -r -a]
 *
 * Sizes, counts, bandwidth formulas, inputs and checks come from the same
 * code weft-bench uses (bench_coll.c, bench_check.c). MPI has no 16- or
 * 8-bit floats and no average operator; asking for them is an error, and
 * "-d all" / "-o all" skip them. Gather, scatter and hypercube have no
 * reference here: asking for them is an error. In-place runs use MPI_IN_PLACE, whose
 * layout matches nccl-tests' except for Reduce_scatter_block, which leaves
 * its block at the start of the buffer. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "bench.h"

struct mpi_bench {
  const struct bench_args *args;
  int rank;
  int nranks;
  char *send;
  char *recv;
  double wrong;
  struct bench_report report;
};

/* The MPI call measured for each collective. */
static const char *const mpi_fn[BENCH_NCOLLS] = {
    [BENCH_ALLREDUCE] = "MPI_Allreduce",
    [BENCH_ALLGATHER] = "MPI_Allgather",
    [BENCH_REDUCESCATTER] = "MPI_Reduce_scatter_block",
    [BENCH_BROADCAST] = "MPI_Bcast",
    [BENCH_REDUCE] = "MPI_Reduce",
    [BENCH_SENDRECV] = "MPI_Sendrecv",
    [BENCH_ALLTOALL] = "MPI_Alltoall",
};

static MPI_Datatype mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclFloat64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
  }
}

/* The MPI call for c; in place with MPI_IN_PLACE where MPI has it. */
static void mpi_issue(struct mpi_bench *b, const struct bench_case *c, int in_place) {
  const MPI_Datatype dt = mpi_type(c->type);
  const MPI_Op op = mpi_op(c->op);
  const int n = (int)c->param_count;
  const int next = (b->rank + 1) % b->nranks;
  const int prev = (b->rank + b->nranks - 1) % b->nranks;
  const MPI_Comm w = MPI_COMM_WORLD;
  void *sb = in_place ? MPI_IN_PLACE : b->send;
  char *rb = b->recv;

  switch (c->coll) {
    case BENCH_ALLREDUCE: MPI_Allreduce(sb, rb, n, dt, op, w); break;
    case BENCH_ALLGATHER: MPI_Allgather(sb, n, dt, rb, n, dt, w); break;
    case BENCH_REDUCESCATTER: MPI_Reduce_scatter_block(sb, rb, n, dt, op, w); break;
    case BENCH_ALLTOALL: MPI_Alltoall(sb, n, dt, rb, n, dt, w); break;
    case BENCH_BROADCAST:
      /* Out of place, the root's copy into its own output is part of it. */
      if (!in_place && b->rank == c->root)
        memcpy(rb, b->send, c->param_count * bench_types[c->type].size);
      MPI_Bcast(rb, n, dt, c->root, w);
      break;
    case BENCH_REDUCE:
      if (in_place && b->rank != c->root) sb = rb; /* only the root may pass MPI_IN_PLACE */
      MPI_Reduce(sb, rb, n, dt, op, c->root, w);
      break;
    case BENCH_SENDRECV:
      if (in_place)
        MPI_Sendrecv_replace(rb, n, dt, next, 0, prev, 0, w, MPI_STATUS_IGNORE);
      else
        MPI_Sendrecv(b->send, n, dt, next, 0, rb, n, dt, prev, 0, w, MPI_STATUS_IGNORE);
      break;
    default: break;
  }
}

/* One checked call on fresh inputs; returns the wrong count of all ranks. */
static double mpi_check(struct mpi_bench *b, const struct bench_case *c, int in_place) {
  double wrong;

  bench_check_poison(c->type, b->recv, bench_case_bytes(c) / bench_types[c->type].size);
  if (in_place)
    bench_check_fill(c, b->rank, b->recv, c->send_off * (size_t)b->rank);
  else
    bench_check_fill(c, b->rank, b->send, 0);
  mpi_issue(b, c, in_place);
  /* Every output starts at the buffer's beginning under MPI (see top). */
  wrong = (double)bench_check_count(c, b->rank, b->recv);
  MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return wrong;
}

static void mpi_time(struct mpi_bench *b, const struct bench_case *c, int in_place,
                     struct bench_result *res) {
  static const MPI_Op avg_ops[4] = {MPI_SUM, MPI_SUM, MPI_MIN, MPI_MAX};
  const struct bench_args *a = b->args;
  double start, sec;

  MPI_Barrier(MPI_COMM_WORLD);
  start = MPI_Wtime();
  for (int it = 0; it < a->iters; it++) mpi_issue(b, c, in_place);
  sec = (MPI_Wtime() - start) / a->iters;
  if (a->average != 0)
    MPI_Allreduce(MPI_IN_PLACE, &sec, 1, MPI_DOUBLE, avg_ops[a->average], MPI_COMM_WORLD);
  if (a->average == 1) sec /= b->nranks;
  res->time_us = sec * 1e6;
  bench_case_bw(c, sec, &res->algbw, &res->busbw);
  res->wrong = a->check ? mpi_check(b, c, in_place) : -1;
  if (res->wrong > 0) b->wrong += res->wrong;
}

static void mpi_sweep(struct mpi_bench *b, ncclDataType_t type, ncclRedOp_t op, int root) {
  const struct bench_args *a = b->args;
  struct bench_case c = {
      .coll = a->coll, .type = type, .op = op, .root = root, .nranks = b->nranks};
  const size_t warm[2] = {a->max_bytes, a->min_bytes};

  for (int w = 0; w < 2; w++) {
    bench_case_size(&c, warm[w]);
    for (int it = 0; it < a->warmup; it++) mpi_issue(b, &c, 0);
  }
  for (size_t bytes = a->min_bytes; bytes <= a->max_bytes; bytes = bench_args_next_size(a, bytes)) {
    struct bench_result res[2];
    bench_case_size(&c, bytes);
    for (int ip = 0; ip < 2; ip++) mpi_time(b, &c, ip, &res[ip]);
    if (b->rank == 0) bench_report_row(&b->report, &c, res);
  }
}

/* Types and operators to run; what MPI lacks is an error when asked for by
 * name and skipped under "all". */
static int mpi_run_all(struct mpi_bench *b) {
  const struct bench_args *a = b->args;
  const int has_op = bench_colls[a->coll].has_op;
  const int t0 = a->dtype < 0 ? 0 : a->dtype;
  const int t1 = a->dtype < 0 ? ncclNumTypes : a->dtype + 1;
  const int o0 = !has_op ? ncclSum : a->op < 0 ? 0 : a->op;
  const int o1 = !has_op ? ncclSum + 1 : a->op < 0 ? BENCH_NOPS : a->op + 1;

  if (a->dtype >= 0 && mpi_type((ncclDataType_t)a->dtype) == MPI_DATATYPE_NULL) {
    fprintf(stderr, "weft-mpi-ref: MPI has no type for %s\n", bench_types[a->dtype].name);
    return -1;
  }
  if (has_op && a->op >= 0 && mpi_op((ncclRedOp_t)a->op) == MPI_OP_NULL) {
    fprintf(stderr, "weft-mpi-ref: MPI has no %s operator\n", bench_op_names[a->op]);
    return -1;
  }
  /* -r -1: every rank is the root in turn. */
  const int r0 = bench_colls[a->coll].has_root && a->root < 0 ? 0 : a->root;
  const int r1 = bench_colls[a->coll].has_root && a->root < 0 ? b->nranks : r0 + 1;

  for (int t = t0; t < t1; t++)
    for (int op = o0; op < o1; op++)
      for (int root = r0; root < r1; root++)
        if (mpi_type((ncclDataType_t)t) != MPI_DATATYPE_NULL &&
            (!has_op || mpi_op((ncclRedOp_t)op) != MPI_OP_NULL))
          mpi_sweep(b, (ncclDataType_t)t, (ncclRedOp_t)op, root);
  return 0;
}

/* The rank lines: every rank's host and pid, gathered on rank 0. */
static void mpi_ranks(struct mpi_bench *b) {
  struct bench_rank_info mine, *all = NULL;
  const int sz = (int)sizeof(mine);

  bench_rank_info_host(&mine);
  if (b->rank == 0) all = calloc((size_t)b->nranks, sizeof(*all));
  MPI_Gather(&mine, sz, MPI_BYTE, all, sz, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (b->rank == 0 && all) bench_report_ranks(&b->report, all);
  free(all);
}

static void mpi_library(char *buf, size_t len) {
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int n = 0;

  MPI_Get_library_version(version, &n);
  version[strcspn(version, ",\n")] = '\0'; /* "Open MPI v4.1.4" */
  snprintf(buf, len, "library %s", version);
}

static int mpi_bench_run(struct mpi_bench *b) {
  const struct bench_args *a = b->args;
  const size_t bytes = (a->max_bytes + 63) & ~(size_t)63;
  char library[MPI_MAX_LIBRARY_VERSION_STRING + 16];
  int rc = 0;

  b->send = malloc(bytes ? bytes : 64);
  b->recv = malloc(bytes ? bytes : 64);
  if (!b->send || !b->recv) {
    fprintf(stderr, "weft-mpi-ref: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  mpi_library(library, sizeof(library));
  if (b->rank == 0) {
    if (bench_report_open(&b->report, a, "weft-mpi-ref", library, mpi_fn[a->coll], b->nranks))
      MPI_Abort(MPI_COMM_WORLD, 2);
    bench_report_header(&b->report);
  }
  mpi_ranks(b);
  if (b->rank == 0) bench_report_columns(&b->report);
  if (mpi_run_all(b) != 0)
    rc = 2;
  else if (b->rank == 0)
    bench_report_close(&b->report);
  free(b->send);
  free(b->recv);
  return rc ? rc : b->wrong > 0 ? 1 : 0;
}

int main(int argc, char **argv) {
  struct bench_args a;
  struct mpi_bench b = {.args = &a};
  int rc = bench_args_parse(&a, argc, argv, BENCH_ARGS_MPI);

  if (rc != 0) return rc < 0 ? 2 : 0;
  if (a.show_version) {
    char library[MPI_MAX_LIBRARY_VERSION_STRING + 16];
    mpi_library(library, sizeof(library));
    printf("weft-mpi-ref (%s)\n", library);
    return 0;
  }
  if (a.max_bytes > (size_t)INT_MAX) {
    fprintf(stderr, "weft-mpi-ref: -e above %d bytes: MPI counts are int\n", INT_MAX);
    return 2;
  }
  if (!mpi_fn[a.coll]) {
    fprintf(stderr, "weft-mpi-ref: %s has no MPI reference here (weft-bench runs it)\n",
            bench_colls[a.coll].name);
    return 2;
  }
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &b.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &b.nranks);
  if (bench_args_check_ranks(&a, "weft-mpi-ref", b.nranks, b.rank == 0) != 0)
    rc = 2;
  else
    rc = mpi_bench_run(&b);
  MPI_Finalize();
  return rc;
}
