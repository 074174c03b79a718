/* The flag parser of weft-bench on its own (no ranks, no library calls):
 * each good flag lands in its field, each bad one is refused, and the size
 * arithmetic holds up to 4 GiB and past 32-bit counts. The refusals print
 * their messages on stderr, where a reader of the test log sees them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

static int passed, failed;

static void expect(int ok, const char *what) {
  if (ok) {
    passed++;
  } else {
    failed++;
    printf("FAILED: %s\n", what);
  }
}

/* Parses the NULL-terminated flags after the program name. */
static int parse(struct bench_args *a, enum bench_args_set set, ...) {
  char *argv[32] = {"weft-bench"};
  int argc = 1;
  va_list ap;

  va_start(ap, set);
  for (char *s; argc < 31 && (s = va_arg(ap, char *)) != NULL;) argv[argc++] = s;
  va_end(ap);
  argv[argc] = NULL;
  return bench_args_parse(a, argc, argv, set);
}

#define WEFT BENCH_ARGS_WEFT

static void test_device_flags(void) {
  struct bench_args a;

  expect(parse(&a, WEFT, NULL) == 0 && !a.force_cpu && !a.force_gpu && !a.plot_path,
         "no flags: neither --cpu nor --gpu, no plot");
  expect(parse(&a, WEFT, "--gpu", NULL) == 0 && a.force_gpu && !a.force_cpu, "--gpu");
  expect(parse(&a, WEFT, "--cpu", NULL) == 0 && a.force_cpu && !a.force_gpu, "--cpu");
  expect(parse(&a, WEFT, "-gpu", NULL) == 0 && a.force_gpu, "-gpu, one dash");
  expect(parse(&a, WEFT, "--gpu", "--cpu", NULL) < 0, "--gpu with --cpu is refused");
  expect(parse(&a, WEFT, "--gpu=1", NULL) < 0, "--gpu=1 is refused: it takes no value");
  expect(parse(&a, BENCH_ARGS_MPI, "--gpu", NULL) < 0, "weft-mpi-ref has no --gpu");
}

static void test_plot_flag(void) {
  struct bench_args a;

  expect(parse(&a, WEFT, "--plot", "/tmp/x.png", NULL) == 0 && a.plot_path &&
             strcmp(a.plot_path, "/tmp/x.png") == 0,
         "--plot FILE");
  expect(parse(&a, WEFT, "--plot=y.png", NULL) == 0 && a.plot_path &&
             strcmp(a.plot_path, "y.png") == 0,
         "--plot=FILE");
  expect(parse(&a, WEFT, "--plot", NULL) < 0, "--plot without a file is refused");
  expect(parse(&a, WEFT, "--plot", "-b", "8", NULL) < 0, "--plot followed by a flag is refused");
  expect(parse(&a, WEFT, "--plot=", NULL) < 0, "--plot= (empty) is refused");
  expect(parse(&a, WEFT, "--json", "--plot", "x.png", NULL) < 0,
         "--json followed by a flag is refused");
}

static void test_rank_flags(void) {
  struct bench_args a;

  expect(parse(&a, WEFT, "-g", "2", "-t", "3", "-np", "4", NULL) == 0 && a.ngpus == 2 &&
             a.nthreads == 3 && a.nprocs == 4 && a.nprocs_given,
         "-g 2 -t 3 -np 4");
  expect(parse(&a, WEFT, "-g2", "-t3", NULL) == 0 && a.ngpus == 2 && a.nthreads == 3,
         "-g2 -t3, values glued");
  expect(
      parse(&a, WEFT, "--ngpus=4", "--nthreads", "2", NULL) == 0 && a.ngpus == 4 && a.nthreads == 2,
      "long forms of -g and -t");
  expect(parse(&a, WEFT, "-g", "0", NULL) < 0, "-g 0 is refused");
  expect(parse(&a, WEFT, "-t", "two", NULL) < 0, "-t two is refused");
  expect(parse(&a, WEFT, "-np", "1000", "-t", "1000", NULL) < 0, "a million ranks are refused");
  expect(parse(&a, WEFT, "-g", NULL) < 0, "-g without a value is refused");
}

static void test_sizes(void) {
  struct bench_args a;
  struct bench_case c = {.coll = BENCH_ALLREDUCE, .type = ncclFloat32, .nranks = 2};

  expect(parse(&a, WEFT, "-b", "8", "-e", "4G", NULL) == 0 && a.min_bytes == 8 &&
             a.max_bytes == (size_t)4 << 30,
         "-b 8 -e 4G");
  expect(parse(&a, WEFT, "-e", "16T", NULL) == 0 && a.max_bytes == (size_t)16 << 40, "-e 16T");
  expect(parse(&a, WEFT, "-b", "2G", "-e", "1G", NULL) < 0, "-b larger than -e is refused");
  expect(parse(&a, WEFT, "-e", "4Q", NULL) < 0, "-e 4Q is refused");
  expect(parse(&a, WEFT, "-e", "-1", NULL) < 0, "-e -1 is refused");
  expect(parse(&a, WEFT, "-e", "99999999999T", NULL) < 0, "a size past 64 bits is refused");
  expect(parse(&a, WEFT, "-d", "float17", NULL) < 0, "-d float17 is refused");
  expect(parse(&a, WEFT, "-o", "xor", NULL) < 0, "-o xor is refused");
  expect(parse(&a, WEFT, "-a", "4", NULL) < 0, "-a 4 is refused");

  /* 4 GiB of int8 is 2^32 elements: past any 32-bit count. */
  parse(&a, WEFT, "-b", "2G", "-e", "4G", "-f", "2", NULL);
  expect(bench_args_next_size(&a, (size_t)2 << 30) == (size_t)4 << 30, "2 GiB steps to 4 GiB");
  c.type = ncclInt8;
  bench_case_size(&c, (size_t)4 << 30);
  expect(c.param_count == (size_t)1 << 32 && bench_case_bytes(&c) == (size_t)4 << 30,
         "allreduce of 4 GiB int8: 2^32 elements");
  c.coll = BENCH_ALLGATHER;
  c.nranks = 3;
  bench_case_size(&c, (size_t)4 << 30);
  expect(c.param_count == ((size_t)1 << 32) / 3 && c.recv_count == c.param_count * 3,
         "allgather of 4 GiB over 3 ranks");
}

/* nccl-tests 2.19's defaults: one size of 32 MiB, step 1 MiB added, one
 * warmup iteration, 20 timed, one check, every mode off. */
static void test_defaults(void) {
  struct bench_args a;

  expect(parse(&a, WEFT, NULL) == 0, "no flags");
  expect(a.min_bytes == (size_t)32 << 20 && a.max_bytes == (size_t)32 << 20 &&
             a.step_bytes == (size_t)1 << 20 && a.step_factor == 1,
         "default sizes: -b 32M -e 32M -i 1M -f 1");
  expect(a.warmup == 1 && a.iters == 20 && a.agg_iters == 1 && a.check == 1 && a.run_cycles == 1,
         "default counts: -w 1 -n 20 -m 1 -c 1 -N 1");
  expect(a.op == ncclSum && a.dtype == ncclFloat32 && a.root == 0 && a.average == 1,
         "default -o sum -d float -r 0 -a 1");
  expect(a.parallel_init == 0 && a.blocking == 0 && a.stream_null == 0 && a.timeout == 0 &&
             a.cudagraph == 0 && a.report_cputime == 0 && a.report_timestamps == 0 &&
             a.local_register == 0 && a.cta_policy == -1 && a.memory_report == 0 &&
             a.unalign == 0 && a.per_iter == 0 && a.per_iter_skip == 0 && !a.output_file,
         "default modes all off (-x not set)");
}

/* Every int flag of nccl-tests 2.19, short and long, lands in its field. */
static const struct {
  const char *shortname, *longname, *value;
  size_t field;
  int want;
} int_flags[] = {
    {"-t", "--nthreads", "3", offsetof(struct bench_args, nthreads), 3},
    {"-g", "--ngpus", "2", offsetof(struct bench_args, ngpus), 2},
    {"-n", "--iters", "7", offsetof(struct bench_args, iters), 7},
    {"-m", "--agg_iters", "4", offsetof(struct bench_args, agg_iters), 4},
    {"-w", "--warmup_iters", "0", offsetof(struct bench_args, warmup), 0},
    {"-N", "--run_cycles", "3", offsetof(struct bench_args, run_cycles), 3},
    {"-p", "--parallel_init", "1", offsetof(struct bench_args, parallel_init), 1},
    {"-c", "--check", "5", offsetof(struct bench_args, check), 5},
    {"-r", "--root", "-1", offsetof(struct bench_args, root), -1},
    {"-z", "--blocking", "3", offsetof(struct bench_args, blocking), 3},
    {"-y", "--stream_null", "1", offsetof(struct bench_args, stream_null), 1},
    {"-T", "--timeout", "9", offsetof(struct bench_args, timeout), 9},
    {"-G", "--cudagraph", "4", offsetof(struct bench_args, cudagraph), 4},
    {"-C", "--report_cputime", "1", offsetof(struct bench_args, report_cputime), 1},
    {"-S", "--report_timestamps", "1", offsetof(struct bench_args, report_timestamps), 1},
    {"-a", "--average", "3", offsetof(struct bench_args, average), 3},
    {"-R", "--local_register", "2", offsetof(struct bench_args, local_register), 2},
    {"-x", "--cta_policy", "1", offsetof(struct bench_args, cta_policy), 1},
    {"-D", "--device_implementation", "0", offsetof(struct bench_args, device_impl), 0},
    {"-M", "--memory", "1", offsetof(struct bench_args, memory_report), 1},
    {"-u", "--unalign", "5", offsetof(struct bench_args, unalign), 5},
    {"-I", "--per_iter_timing", "1", offsetof(struct bench_args, per_iter), 1},
    {"-o", "--op", "max", offsetof(struct bench_args, op), ncclMax},
    {"-d", "--datatype", "bfloat16", offsetof(struct bench_args, dtype), ncclBfloat16},
};

static void test_nccl_tests_flags(void) {
  struct bench_args a;
  char what[96], eq[64];

  for (size_t i = 0; i < sizeof(int_flags) / sizeof(int_flags[0]); i++) {
    const char *v = int_flags[i].value;
    int *field = (int *)(void *)((char *)&a + int_flags[i].field);
    snprintf(eq, sizeof(eq), "%s=%s", int_flags[i].longname, v);
    snprintf(what, sizeof(what), "%s %s", int_flags[i].shortname, v);
    expect(parse(&a, WEFT, int_flags[i].shortname, v, NULL) == 0 && *field == int_flags[i].want,
           what);
    snprintf(what, sizeof(what), "%s %s", int_flags[i].longname, v);
    expect(parse(&a, WEFT, int_flags[i].longname, v, NULL) == 0 && *field == int_flags[i].want,
           what);
    expect(parse(&a, WEFT, eq, NULL) == 0 && *field == int_flags[i].want, eq);
  }
  expect(parse(&a, WEFT, "-o", "mulsum", NULL) == 0 && a.op == BENCH_OP_MULSUM &&
             strcmp(bench_op_names[a.op], "mulsum") == 0,
         "-o mulsum (nccl-tests' PreMulSum)");
  expect(parse(&a, WEFT, "-I", "1", "-K", "2", NULL) == 0 && a.per_iter_skip == 2, "-I 1 -K 2");
  expect(parse(&a, WEFT, "--per_iter_timing", "1", "--per_iter_skip", "3", NULL) == 0 &&
             a.per_iter_skip == 3,
         "--per_iter_skip 3");
  expect(parse(&a, WEFT, "-b", "1K", "--maxbytes", "2M", "-i", "4K", NULL) == 0 &&
             a.min_bytes == 1024 && a.max_bytes == (size_t)2 << 20 && a.step_bytes == 4096,
         "-b 1K --maxbytes 2M -i 4K");
  expect(parse(&a, WEFT, "--minbytes=8", "--stepfactor", "4", NULL) == 0 && a.min_bytes == 8 &&
             a.step_factor == 4,
         "--minbytes=8 --stepfactor 4");
  expect(parse(&a, WEFT, "-J", "out.json", NULL) == 0 && a.output_file && a.json_path &&
             strcmp(a.json_path, "out.json") == 0,
         "-J out.json writes JSON there");
  expect(parse(&a, WEFT, "--output_file", "x/y.JSON", NULL) == 0 && a.json_path,
         "--output_file x/y.JSON");
  expect(parse(&a, BENCH_ARGS_MPI, "-J", "m.json", NULL) == 0 && a.json_path,
         "weft-mpi-ref takes -J too");
}

/* What cannot apply, or does not make sense, is refused with a message. */
static void test_refusals(void) {
  struct bench_args a;

  expect(parse(&a, WEFT, "-D", "1", NULL) < 0, "-D 1 (NCCL 2.28 device API) is refused");
  expect(parse(&a, WEFT, "-V", "16", NULL) < 0, "-V 16 (NCCL 2.28 device API) is refused");
  expect(parse(&a, WEFT, "-x", "2", NULL) == 0 && a.cta_policy == -1,
         "-x 2 (NCCL 2.28) is ignored with a message, as nccl-tests does");
  expect(parse(&a, WEFT, "-x", "3", NULL) < 0, "-x 3 is refused");
  expect(parse(&a, WEFT, "-J", "out.txt", NULL) < 0, "-J out.txt is refused: JSON only");
  expect(parse(&a, WEFT, "-J", "a.json", "--json", "b.json", NULL) < 0, "-J and --json differ");
  expect(parse(&a, WEFT, "-z", "4", NULL) < 0, "-z 4 is refused");
  expect(parse(&a, WEFT, "-I", "2", NULL) < 0, "-I 2 is refused");
  expect(parse(&a, WEFT, "-K", "1", NULL) < 0, "-K without -I is refused");
  expect(parse(&a, WEFT, "-I", "1", "-K", "20", NULL) < 0, "-K as large as -n is refused");
  expect(parse(&a, WEFT, "-I", "1", "-G", "2", NULL) < 0, "-I with -G is refused");
  expect(parse(&a, WEFT, "-z", "3", "-G", "2", NULL) < 0, "-z 3 with -G is refused");
  expect(parse(&a, WEFT, "-R", "3", NULL) < 0, "-R 3 is refused");
  expect(parse(&a, WEFT, "-N", "-1", NULL) < 0, "-N -1 is refused");
  expect(parse(&a, WEFT, "-T", "-1", NULL) < 0, "-T -1 is refused");
  expect(parse(&a, WEFT, "-u", "-1", NULL) < 0, "-u -1 is refused");
  expect(parse(&a, WEFT, "-c", "-1", NULL) < 0, "-c -1 is refused");
  expect(parse(&a, WEFT, "-r", "-2", NULL) < 0, "-r -2 is refused");
  expect(parse(&a, WEFT, "nosuchcoll", NULL) < 0, "an unknown collective is refused");
  expect(parse(&a, BENCH_ARGS_MPI, "-G", "1", NULL) < 0, "weft-mpi-ref has no -G");
}

/* Every collective by name, nccl-tests' binary names too, and the check of
 * the rank count. */
static void test_collectives(void) {
  static const char *const names[] = {"allreduce", "allgather", "reducescatter", "broadcast",
                                      "reduce",    "sendrecv",  "alltoall",      "gather",
                                      "scatter",   "hypercube"};
  struct bench_args a;
  struct bench_case c = {.type = ncclFloat32, .nranks = 4};

  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    expect(parse(&a, WEFT, names[i], NULL) == 0 && a.coll == (int)i &&
               strstr(bench_coll_names(), names[i]),
           names[i]);
  expect(bench_coll_find("gather_perf") == BENCH_GATHER, "gather_perf");
  expect(bench_coll_find("scatter_perf") == BENCH_SCATTER, "scatter_perf");
  expect(bench_coll_find("hypercube_perf") == BENCH_HYPERCUBE, "hypercube_perf");
  parse(&a, WEFT, "hypercube", NULL);
  expect(bench_args_check_ranks(&a, "t", 3, 0) < 0 && bench_args_check_ranks(&a, "t", 4, 0) == 0,
         "hypercube needs a power of two ranks");
  parse(&a, WEFT, "gather", "-r", "-1", NULL);
  expect(bench_args_check_ranks(&a, "t", 4, 0) == 0, "gather -r -1: every root");
  parse(&a, WEFT, "scatter", "-r", "4", NULL);
  expect(bench_args_check_ranks(&a, "t", 4, 0) < 0, "scatter -r 4 over 4 ranks is refused");
  /* nccl-tests' counts: whole 16-byte blocks per rank. */
  c.coll = BENCH_GATHER;
  bench_case_size(&c, 1000);
  expect(c.param_count == 60 && c.recv_count == 240 && c.send_off == 60, "gather of 1000 B");
  c.coll = BENCH_SCATTER;
  bench_case_size(&c, 1000);
  expect(c.param_count == 60 && c.send_count == 240 && c.recv_off == 60, "scatter of 1000 B");
}

/* --passes: weft's own repeat-and-summarise flag, and its median. */
static void test_passes(void) {
  struct bench_args a;
  double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2}, one[] = {7};

  expect(parse(&a, WEFT, NULL) == 0 && a.passes == 1, "--passes defaults to 1");
  expect(parse(&a, WEFT, "--passes", "5", NULL) == 0 && a.passes == 5, "--passes 5");
  expect(parse(&a, WEFT, "--passes=3", NULL) == 0 && a.passes == 3, "--passes=3");
  expect(parse(&a, WEFT, "-passes", "2", NULL) == 0 && a.passes == 2, "-passes 2");
  expect(parse(&a, WEFT, "--passes", "0", NULL) < 0, "--passes 0 is refused");
  expect(parse(&a, WEFT, "--passes", "1001", NULL) < 0, "--passes 1001 is refused");
  expect(parse(&a, WEFT, "--passes", "x", NULL) < 0, "--passes x is refused");
  expect(parse(&a, WEFT, "--passes", "2", "-N", "2", NULL) < 0, "--passes 2 with -N 2 is refused");
  expect(parse(&a, WEFT, "--passes", "2", "-N", "1", NULL) == 0, "--passes 2 with -N 1");
  expect(parse(&a, BENCH_ARGS_MPI, "--passes", "2", NULL) < 0, "weft-mpi-ref has no --passes");
  expect(bench_median(odd, 3) == 3 && odd[0] == 1 && odd[2] == 5, "median of 5 1 3, sorted");
  expect(bench_median(even, 4) == 2.5, "median of 4 1 3 2");
  expect(bench_median(one, 1) == 7 && bench_median(one, 0) == 0, "median of one value, of none");
}

int main(void) {
  test_defaults();
  test_passes();
  test_nccl_tests_flags();
  test_refusals();
  test_collectives();
  test_device_flags();
  test_plot_flag();
  test_rank_flags();
  test_sizes();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
