/* What weft-bench and weft-mpi-ref share: the parsed flags, the tables of
 * data types, operators and collectives, the arithmetic of sizes and
 * bandwidths, result checking and the nccl-tests style report.
 *
 * Nothing declared here calls into a communication library, so the MPI
 * reference links these pieces without weft. nccl.h is included only for
 * its enums (ncclDataType_t, ncclRedOp_t), which name types and operators
 * the same way in both programs. */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "nccl.h"

/* ---- Collectives -------------------------------------------------------- */

enum bench_coll_id {
  BENCH_ALLREDUCE,
  BENCH_ALLGATHER,
  BENCH_REDUCESCATTER,
  BENCH_BROADCAST,
  BENCH_REDUCE,
  BENCH_SENDRECV,
  BENCH_ALLTOALL,
  BENCH_GATHER,
  BENCH_SCATTER,
  BENCH_HYPERCUBE,
  BENCH_NCOLLS
};

struct bench_coll {
  const char *name;    /* as typed on the command line and printed */
  const char *nccl_fn; /* the call it benchmarks, for messages */
  int has_op;          /* takes a reduction operator */
  int has_root;        /* takes a root rank */
};

extern const struct bench_coll bench_colls[BENCH_NCOLLS];

/* One row of the table: a collective at one size, type, operator and root.
 * Counts are in elements; offsets place the in-place buffers as nccl-tests
 * does (send at recv + send_off * rank, recv at recv + recv_off * rank). */
struct bench_case {
  int coll;
  ncclDataType_t type;
  ncclRedOp_t op;
  int root;
  int nranks;
  size_t send_count;
  size_t recv_count;
  size_t param_count; /* the count argument of the call; the "count" column */
  size_t send_off;
  size_t recv_off;
};

/* Fills the counts of c for a request of bytes (c->coll, type, nranks set). */
void bench_case_size(struct bench_case *c, size_t bytes);
/* Bytes the table prints in its "size" column: the larger buffer. */
size_t bench_case_bytes(const struct bench_case *c);
/* algbw and busbw in GB/s (1e9 bytes/s) for a call that took sec seconds. */
void bench_case_bw(const struct bench_case *c, double sec, double *algbw_out, double *busbw_out);

/* ---- Data types and operators ------------------------------------------ */

struct bench_type {
  const char *name; /* nccl-tests' name */
  ncclDataType_t type;
  size_t size;
  int is_float;
  int is_signed;
  int mant_bits; /* stored mantissa bits of a float type */
};

/* Operators: NCCL's built-in ones, then nccl-tests' "mulsum", a PreMulSum
 * (ncclRedOpCreatePreMulSum) made for each call with a scalar per rank
 * (bench_mulsum_scalar). */
#define BENCH_OP_MULSUM ((int)ncclNumOps)
#define BENCH_NOPS (BENCH_OP_MULSUM + 1)

extern const struct bench_type bench_types[ncclNumTypes];
extern const char *const bench_op_names[BENCH_NOPS];
/* The scalar rank multiplies its input by under mulsum: 1 or 2, exact in
 * every type. */
double bench_mulsum_scalar(int rank);

/* Stores x, rounded to nearest even (integers: wrapped), as element i. */
void bench_type_store(ncclDataType_t t, void *buf, size_t i, double x);
/* Reads element i as a double (NaN stays NaN). */
double bench_type_load(ncclDataType_t t, const void *buf, size_t i);
/* x as the type would hold it: bench_type_load(bench_type_store(x)). */
double bench_type_round(ncclDataType_t t, double x);

/* Looks a name up; -1 when unknown. "all" is the caller's business. */
int bench_type_find(const char *name);
int bench_op_find(const char *name);
int bench_coll_find(const char *name);
/* "allreduce, allgather, ..." : every name bench_coll_find takes, for
 * usage text and errors. */
const char *bench_coll_names(void);

/* ---- Flags -------------------------------------------------------------- */

struct bench_args {
  int coll;
  size_t min_bytes;
  size_t max_bytes;
  size_t step_bytes;
  long step_factor; /* > 1: sizes multiply by it; else add step_bytes */
  int iters;
  int warmup;
  int agg_iters;
  int check;    /* checked runs per row (-c); 0: none */
  int op;       /* ncclRedOp_t, or -1 for all */
  int dtype;    /* ncclDataType_t, or -1 for all */
  int ngpus;    /* ranks driven by one thread (-g) */
  int nthreads; /* threads per process (-t) */
  int nprocs;   /* forked processes (-np) */
  int nprocs_given;
  int root;                /* -1: every rank in turn */
  int average;             /* 0: rank 0, 1: mean, 2: min, 3: max across ranks */
  int blocking;            /* -z: 0 none, 1 wait + barrier, 2 wait, 3 wait, untimed barrier */
  int cudagraph;           /* -G: graph launches per row (GPU ranks); 0: none */
  int run_cycles;          /* -N: sweeps of the sizes; 0: until stopped */
  int passes;              /* --passes: sweeps, then per size their median, min, max */
  int parallel_init;       /* -p: each thread creates its own communicators */
  int stream_null;         /* -y: collectives on the default stream */
  int timeout;             /* -T: seconds one wait may take; 0: no limit */
  int report_cputime;      /* -C: report the time to issue, not to complete */
  int report_timestamps;   /* -S: a timestamp column */
  int local_register;      /* -R: 0 none, 1 ncclCommRegister, 2 windows */
  int cta_policy;          /* -x: ncclConfig_t.CTAPolicy; -1: not set */
  int device_impl;         /* -D: refused above 0 (NCCL 2.28 device API) */
  int device_ctas;         /* -V: likewise */
  int memory_report;       /* -M: memory use at the end */
  int unalign;             /* -u: buffers shifted by this many elements */
  int per_iter;            /* -I: per-iteration statistics columns */
  int per_iter_skip;       /* -K: leading iterations left out of them */
  const char *output_file; /* -J: nccl-tests' JSON output (.json only) */
  const char *json_path;
  const char *plot_path; /* --plot: busbw against size as a PNG */
  int force_cpu;         /* --cpu: host ranks even where there is a GPU */
  int force_gpu;         /* --gpu: device buffers, or an error */
  int use_gpu;           /* what the run uses, once decided (weft-bench.c) */
  int show_version;
};

/* Which flags a program takes beyond the ones every program takes. */
enum bench_args_set { BENCH_ARGS_WEFT, BENCH_ARGS_MPI };

/* Parses argv into a; prints the problem and returns -1 on bad input, 1
 * when help was printed, 0 otherwise. */
int bench_args_parse(struct bench_args *a, int argc, char **argv, enum bench_args_set set);
/* Checks what needs the rank count; prints and returns -1 when wrong. */
int bench_args_check_ranks(const struct bench_args *a, const char *prog, int nranks, int verbose);
/* The next size of the sweep after bytes. */
size_t bench_args_next_size(const struct bench_args *a, size_t bytes);

/* ---- Checking ------------------------------------------------------------
 *
 * Inputs are small integers that depend on rank and index and are exact in
 * every type; the expected result is computed in double precision from
 * those same values. Outputs are poisoned first (bench_check_poison) with
 * a pattern no correct run can produce. */

/* Poisons count elements of type at buf. */
void bench_check_poison(ncclDataType_t type, void *buf, size_t count);

/* Writes rank's input for c into buf, at element offset off. */
void bench_check_fill(const struct bench_case *c, int rank, void *buf, size_t off);
/* Counts elements of out (c's output on rank) that are wrong. */
size_t bench_check_count(const struct bench_case *c, int rank, const void *out);

/* ---- Report (printed by rank 0) ----------------------------------------- */

struct bench_rank_info {
  int32_t pid;
  int32_t device; /* -1: host rank */
  char host[64];
  char label[16]; /* "cpu", or a PCI bus id */
  char devname[44];
};

/* Statistics of one row's iterations (-I), in microseconds. */
struct bench_iter_stats {
  double min, max, p99, cv_pct;
};

struct bench_result {
  double time_us;
  double algbw;
  double busbw;
  double wrong;                 /* < 0: not checked */
  struct bench_iter_stats iter; /* -I only */
};

/* The memory roofline of a GPU run: one device's copy bandwidth, counting
 * every byte read and every byte written (bench_mem_cuda.c measures it). */
struct bench_copy_bw {
  size_t bytes; /* size of one copy; 0: not measured (host runs) */
  int device;
  char devname[44];
  double gbps; /* (read + written bytes) / s / 1e9 */
};

/* One plotted point: busbw of both placements of one row. */
struct bench_plot_point {
  int coll;
  int type;
  int op;
  size_t bytes;
  double busbw[2]; /* out-of-place, in-place */
};

/* One row of one pass, kept for the --passes summary (bench_passes.c). */
struct bench_pass_row {
  size_t bytes;
  size_t count;
  double time_us[2]; /* out-of-place, in-place */
  double busbw[2];
};

struct bench_report {
  FILE *out;
  const char *program;
  const char *library; /* name and version of what was measured */
  const char *call;    /* the function measured: ncclAllReduce, MPI_... */
  const struct bench_args *args;
  int nranks;
  double bw_sum;
  long bw_count;
  double wrong_total;
  FILE *json; /* NULL without --json */
  long json_rows;
  const char *buffers;             /* a header line on where buffers live; NULL: host */
  struct bench_copy_bw copy;       /* printed in the header when measured */
  struct bench_plot_point *points; /* kept for --plot */
  size_t npoints;
  size_t points_cap;
  double mem_used[3]; /* -M: bytes after init, after buffers, at the end */
  int pass;           /* --passes: the pass now running, from 0 */
  struct bench_pass_row *pass_rows; /* this sweep's rows of every pass */
  size_t npass_rows;
  size_t pass_rows_cap;
};

/* Starts the report on stdout (and the JSON file, if asked for); -1 when
 * that file cannot be written. */
int bench_report_open(struct bench_report *r, const struct bench_args *a, const char *program,
                      const char *library, const char *call, int nranks);
void bench_report_header(struct bench_report *r);
void bench_report_ranks(struct bench_report *r, const struct bench_rank_info *info);
void bench_report_columns(struct bench_report *r);
void bench_report_row(struct bench_report *r, const struct bench_case *c,
                      const struct bench_result res[2]);
/* -I: the statistics of n iteration times (seconds), past the first skip. */
void bench_iter_stats(const double *sec, int n, int skip, struct bench_iter_stats *out);
/* Prints the footers; returns the number of wrong elements seen. */
double bench_report_close(struct bench_report *r);
/* Draws --plot from the rows reported (bench_plot.c); 0 on success, else
 * prints why and returns -1. Frees the points either way. */
int bench_plot_write(struct bench_report *r, const char *path);

/* --passes (bench_passes.c): keeps a row of the current pass; after the
 * last pass of a sweep, prints per size the median time and busbw of the
 * passes with [min-max] beside them, as '#' lines under the table (tools
 * that read nccl-tests' rows skip them), and forgets the rows. */
void bench_passes_keep(struct bench_report *r, const struct bench_case *c,
                       const struct bench_result res[2]);
void bench_passes_print(struct bench_report *r, const struct bench_case *c);
/* The median of n values (sorted in place); 0 for none. */
double bench_median(double *v, size_t n);

/* The JSON twin of the table (bench_json.c). */
int bench_json_open(struct bench_report *r, const char *path);
void bench_json_row(struct bench_report *r, const struct bench_case *c,
                    const struct bench_result res[2]);
void bench_json_close(struct bench_report *r, double avg_busbw);

/* Fills this process's host name and pid into info (device -1, "cpu"). */
void bench_rank_info_host(struct bench_rank_info *info);

/* Seconds on a monotonic clock. */
double bench_now(void);

#endif
