/* The flag parser of weft-bench on its own (no ranks, no library calls):
 * each good flag lands in its field, each bad one is refused, and the size
 * arithmetic holds up to 4 GiB and past 32-bit counts. The refusals print
 * their messages on stderr, where a reader of the test log sees them. */
#include <stdarg.h>
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
  parse(&a, WEFT, "-b", "2G", "-e", "4G", NULL);
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

int main(void) {
  test_device_flags();
  test_plot_flag();
  test_rank_flags();
  test_sizes();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
