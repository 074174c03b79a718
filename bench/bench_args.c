/* Command-line flags: every flag of nccl-tests 2.19 (its src/common.cu),
 * long and short, with its meaning and default, plus weft-bench's own -np,
 * --passes, --json, --plot, --cpu and --gpu. Where a flag cannot apply (NCCL 2.28's
 * device API, a CUDA graph on host ranks) the run says why. weft-mpi-ref takes the subset an MPI
 * program can honour. A bad flag is reported with the flag and what it expects. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"

enum arg_kind { ARG_SIZE, ARG_INT, ARG_LONG, ARG_OP, ARG_TYPE, ARG_PATH, ARG_NONE };

/* Programs that take a flag. */
#define FOR_WEFT (1 << BENCH_ARGS_WEFT)
#define FOR_MPI (1 << BENCH_ARGS_MPI)
#define FOR_ALL (FOR_WEFT | FOR_MPI)

struct arg_spec {
  const char *shortname; /* without the dash: "b", "np" */
  const char *longname;  /* without the dashes */
  enum arg_kind kind;
  size_t offset; /* of the field in struct bench_args */
  int programs;
  const char *help;
};

#define FIELD(f) offsetof(struct bench_args, f)

static const struct arg_spec specs[] = {
    {"t", "nthreads", ARG_INT, FIELD(nthreads), FOR_WEFT, "threads per process (default 1)"},
    {"g", "ngpus", ARG_INT, FIELD(ngpus), FOR_WEFT, "ranks driven by each thread (default 1)"},
    {"b", "minbytes", ARG_SIZE, FIELD(min_bytes), FOR_ALL,
     "smallest size (default 32M; K/M/G/T suffixes)"},
    {"e", "maxbytes", ARG_SIZE, FIELD(max_bytes), FOR_ALL, "largest size (default 32M)"},
    {"i", "stepbytes", ARG_SIZE, FIELD(step_bytes), FOR_ALL,
     "grow sizes by adding this many bytes (default 1M)"},
    {"f", "stepfactor", ARG_LONG, FIELD(step_factor), FOR_ALL,
     "grow sizes by this factor; 1 adds -i instead (default 1)"},
    {"n", "iters", ARG_INT, FIELD(iters), FOR_ALL, "timed iterations per size (default 20)"},
    {"m", "agg_iters", ARG_INT, FIELD(agg_iters), FOR_WEFT,
     "calls grouped into one iteration (default 1)"},
    {"w", "warmup_iters", ARG_INT, FIELD(warmup), FOR_ALL, "warmup iterations (default 1)"},
    {"N", "run_cycles", ARG_INT, FIELD(run_cycles), FOR_WEFT,
     "sweeps of the sizes, each printed; 0 runs until stopped (default 1)"},
    {NULL, "passes", ARG_INT, FIELD(passes), FOR_WEFT,
     "sweeps of the sizes, each printed, then per size the median time and busbw of the "
     "sweeps with their min-max (weft's own; default 1)"},
    {"p", "parallel_init", ARG_INT, FIELD(parallel_init), FOR_WEFT,
     "0: the process's first thread creates every communicator; 1: each thread its own "
     "(default 0)"},
    {"c", "check", ARG_INT, FIELD(check), FOR_ALL, "checked runs per size, 0 for none (default 1)"},
    {"o", "op", ARG_OP, FIELD(op), FOR_ALL,
     "sum, prod, min, max, avg, mulsum or all (default sum)"},
    {"d", "datatype", ARG_TYPE, FIELD(dtype), FOR_ALL,
     "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2, or all "
     "(default float)"},
    {"r", "root", ARG_INT, FIELD(root), FOR_ALL,
     "root rank of broadcast, reduce, gather and scatter; -1 each in turn (default 0)"},
    {"z", "blocking", ARG_INT, FIELD(blocking), FOR_WEFT,
     "0: none; 1: wait for each call, then a barrier; 2: wait, no barrier; 3: wait, then an "
     "untimed barrier (default 0)"},
    {"y", "stream_null", ARG_INT, FIELD(stream_null), FOR_WEFT,
     "1: GPU ranks use the default (NULL) stream (default 0)"},
    {"T", "timeout", ARG_INT, FIELD(timeout), FOR_WEFT,
     "seconds a call may take before the run fails; 0 for no limit (default 0)"},
    {"G", "cudagraph", ARG_INT, FIELD(cudagraph), FOR_WEFT,
     "GPU ranks: capture the -n iterations in a CUDA graph and launch it this many times "
     "(default 0)"},
    {"C", "report_cputime", ARG_INT, FIELD(report_cputime), FOR_WEFT,
     "1: report the time to issue the calls, not to complete them (default 0)"},
    {"S", "report_timestamps", ARG_INT, FIELD(report_timestamps), FOR_WEFT,
     "1: a timestamp column (default 0)"},
    {"J", "output_file", ARG_PATH, FIELD(output_file), FOR_ALL,
     "also write the results to FILE; the name must end in .json"},
    {"a", "average", ARG_INT, FIELD(average), FOR_ALL,
     "time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)"},
    {"R", "local_register", ARG_INT, FIELD(local_register), FOR_WEFT,
     "register buffers: 0 no, 1 ncclCommRegister, 2 ncclCommWindowRegister (default 0)"},
    {"x", "cta_policy", ARG_INT, FIELD(cta_policy), FOR_WEFT,
     "ncclConfig_t.CTAPolicy: 0 default, 1 efficiency (default: not set)"},
    {"D", "device_implementation", ARG_INT, FIELD(device_impl), FOR_WEFT,
     "0 only: NCCL 2.28's device API is not in weft (NCCL 2.27)"},
    {"V", "device_cta_count", ARG_INT, FIELD(device_ctas), FOR_WEFT,
     "refused: goes with -D, which needs NCCL 2.28"},
    {"M", "memory", ARG_INT, FIELD(memory_report), FOR_WEFT,
     "1: report memory use at the end (default 0)"},
    {"u", "unalign", ARG_INT, FIELD(unalign), FOR_WEFT,
     "shift send and receive buffers by this many elements (default 0)"},
    {"I", "per_iter_timing", ARG_INT, FIELD(per_iter), FOR_WEFT,
     "1: time each iteration; adds min, max, p99 and cv% columns (default 0)"},
    {"K", "per_iter_skip", ARG_INT, FIELD(per_iter_skip), FOR_WEFT,
     "leave this many first iterations out of -I's columns (default 0)"},
    {"np", "np", ARG_INT, FIELD(nprocs), FOR_WEFT,
     "processes to fork, each running -t x -g ranks (default 2)"},
    {NULL, "json", ARG_PATH, FIELD(json_path), FOR_WEFT, "also write the results as JSON to FILE"},
    {NULL, "plot", ARG_PATH, FIELD(plot_path), FOR_WEFT,
     "also draw busbw against size into FILE (PNG; gnuplot, or python3 with matplotlib)"},
    {NULL, "gpu", ARG_NONE, FIELD(force_gpu), FOR_WEFT,
     "device buffers on the ranks' GPUs; an error where there is none (default: when found)"},
    {NULL, "cpu", ARG_NONE, FIELD(force_cpu), FOR_WEFT,
     "host ranks on host buffers (sets WEFT_DEVICE=cpu), even where there is a GPU"},
    {NULL, "version", ARG_NONE, FIELD(show_version), FOR_ALL,
     "print the version and built-in features"},
    {"h", "help", ARG_NONE, 0, FOR_ALL, "this text"},
};

#define NSPECS (sizeof(specs) / sizeof(specs[0]))

/* What a flag of each kind expects, for error messages. */
static const char *const kind_expects[] = {
    [ARG_SIZE] =
        "a size in bytes: a whole number, optionally with K, M, G or T (powers of "
        "1024), like 8, 64K or 4G",
    [ARG_INT] = "a whole number",
    [ARG_LONG] = "a whole number",
    [ARG_OP] = "sum, prod, max, min, avg, mulsum or all",
    [ARG_TYPE] =
        "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, "
        "f8e4m3, f8e5m2 or all",
    [ARG_PATH] = "a file name",
    [ARG_NONE] = "no value",
};

static void args_defaults(struct bench_args *a) {
  memset(a, 0, sizeof(*a));
  a->coll = BENCH_ALLREDUCE;
  /* nccl-tests' defaults: one size, 32 MiB. */
  a->min_bytes = 32u << 20;
  a->max_bytes = 32u << 20;
  a->step_bytes = 1u << 20;
  a->step_factor = 1;
  a->iters = 20;
  a->warmup = 1;
  a->run_cycles = 1;
  a->passes = 1;
  a->cta_policy = -1;
  a->agg_iters = 1;
  a->check = 1;
  a->op = ncclSum;
  a->dtype = ncclFloat32;
  a->ngpus = 1;
  a->nthreads = 1;
  a->nprocs = 2;
  a->average = 1;
}

static void args_usage(FILE *f, const char *prog, enum bench_args_set set) {
  fprintf(f,
          "usage: %s [COLLECTIVE] [flags]\n"
          "COLLECTIVE (default allreduce): %s\n",
          prog, bench_coll_names());
  for (size_t i = 0; i < NSPECS; i++) {
    if (!(specs[i].programs & (1 << set))) continue;
    const char *value = specs[i].kind == ARG_PATH ? " FILE" : "";
    char names[48];
    if (specs[i].shortname)
      snprintf(names, sizeof(names), "-%s, --%s%s", specs[i].shortname, specs[i].longname, value);
    else
      snprintf(names, sizeof(names), "--%s%s", specs[i].longname, value);
    fprintf(f, "  %-32s %s\n", names, specs[i].help);
  }
}

/* "32M" -> 33554432: K, M, G and T are powers of 1024, as in nccl-tests. */
static int parse_size(const char *s, size_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  unsigned shift = 0;

  if (errno || end == s || *s == '-') return -1;
  switch (*end) {
    case 'K':
    case 'k':
      shift = 10;
      end++;
      break;
    case 'M':
    case 'm':
      shift = 20;
      end++;
      break;
    case 'G':
    case 'g':
      shift = 30;
      end++;
      break;
    case 'T':
    case 't':
      shift = 40;
      end++;
      break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') end++;
  if (*end || (shift && v > (~0ull >> shift))) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int parse_long(const char *s, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || end == s || *end) return -1;
  *out = v;
  return 0;
}

/* Stores value into the field spec names; -1 when value is not valid. */
static int args_store(struct bench_args *a, const struct arg_spec *spec, const char *value) {
  char *field = (char *)a + spec->offset;
  long v;
  int idx;

  switch (spec->kind) {
    case ARG_SIZE: return parse_size(value, (size_t *)(void *)field);
    case ARG_LONG: return parse_long(value, (long *)(void *)field);
    case ARG_INT:
      if (parse_long(value, &v) || v < -1000000000L || v > 1000000000L) return -1;
      *(int *)(void *)field = (int)v;
      return 0;
    case ARG_OP:
    case ARG_TYPE:
      idx = strcmp(value, "all") == 0 ? -1
            : spec->kind == ARG_OP    ? bench_op_find(value)
                                      : bench_type_find(value);
      if (idx < 0 && strcmp(value, "all") != 0) return -1;
      *(int *)(void *)field = idx;
      return 0;
    case ARG_PATH:
      if (*value == '\0') return -1;
      *(const char **)(void *)field = value;
      return 0;
    case ARG_NONE: *(int *)(void *)field = 1; return 0;
  }
  return -1;
}

/* Finds the spec for argument arg ("-b", "-b8", "--minbytes=8"); sets
 * *inline_value when the value is glued to the name. */
static const struct arg_spec *args_match(const char *arg, const char **inline_value) {
  *inline_value = NULL;
  if (arg[0] != '-' || arg[1] == '\0') return NULL;
  if (arg[1] == '-') {
    const char *name = arg + 2;
    size_t len = strcspn(name, "=");
    for (size_t i = 0; i < NSPECS; i++)
      if (strlen(specs[i].longname) == len && strncmp(specs[i].longname, name, len) == 0) {
        *inline_value = name[len] == '=' ? name + len + 1 : NULL;
        return &specs[i];
      }
    return NULL;
  }
  for (size_t i = 0; i < NSPECS; i++) /* whole words first: -np */
    if (specs[i].shortname && strcmp(arg + 1, specs[i].shortname) == 0) return &specs[i];
  for (size_t i = 0; i < NSPECS; i++) /* then long names with one dash: -gpu */
    if (strcmp(arg + 1, specs[i].longname) == 0) return &specs[i];
  for (size_t i = 0; i < NSPECS; i++)
    if (specs[i].shortname && specs[i].shortname[1] == '\0' && arg[1] == specs[i].shortname[0] &&
        specs[i].kind != ARG_NONE) {
      *inline_value = arg + 2;
      return &specs[i];
    }
  return NULL;
}

/* Checks the sizes, counts and modes; names the flag and what it expects. */
static int args_validate_counts(const struct bench_args *a, const char *prog) {
  const long long per_proc = (long long)a->ngpus * a->nthreads;

  if (a->min_bytes > a->max_bytes)
    fprintf(stderr, "%s: -b %zu is larger than -e %zu: expected -b <= -e\n", prog, a->min_bytes,
            a->max_bytes);
  else if (a->iters < 1)
    fprintf(stderr, "%s: -n %d: expected at least 1 iteration\n", prog, a->iters);
  else if (a->agg_iters < 1)
    fprintf(stderr, "%s: -m %d: expected at least 1 call per iteration\n", prog, a->agg_iters);
  else if (a->warmup < 0)
    fprintf(stderr, "%s: -w %d: expected 0 or more warmup iterations\n", prog, a->warmup);
  else if (a->step_factor <= 1 && a->step_bytes == 0)
    fprintf(stderr, "%s: -i 0 with -f 1 never grows the size: expected -i of 1 or more\n", prog);
  else if (a->ngpus < 1 || a->nthreads < 1 || a->nprocs < 1)
    fprintf(stderr, "%s: -g %d -t %d -np %d: expected each to be at least 1\n", prog, a->ngpus,
            a->nthreads, a->nprocs);
  else if (per_proc * a->nprocs > 65536)
    fprintf(stderr, "%s: -np %d x -t %d x -g %d is %lld ranks: expected at most 65536\n", prog,
            a->nprocs, a->nthreads, a->ngpus, per_proc * a->nprocs);
  else if (a->average < 0 || a->average > 3)
    fprintf(stderr, "%s: -a %d: expected 0 (rank 0), 1 (mean), 2 (min) or 3 (max)\n", prog,
            a->average);
  else if (a->check < 0)
    fprintf(stderr, "%s: -c %d: expected 0 (no checks) or a count of checked runs\n", prog,
            a->check);
  else if (a->run_cycles < 0)
    fprintf(stderr, "%s: -N %d: expected 0 (until stopped) or a count of sweeps\n", prog,
            a->run_cycles);
  else if (a->passes < 1 || a->passes > 1000)
    fprintf(stderr, "%s: --passes %d: expected 1 to 1000 sweeps\n", prog, a->passes);
  else if (a->passes > 1 && a->run_cycles != 1)
    fprintf(stderr,
            "%s: --passes %d with -N %d: both repeat the sweep; expected one of them (--passes "
            "adds the per-size median)\n",
            prog, a->passes, a->run_cycles);
  else if (a->blocking < 0 || a->blocking > 3)
    fprintf(stderr, "%s: -z %d: expected 0, 1, 2 or 3\n", prog, a->blocking);
  else if (a->timeout < 0 || a->cudagraph < 0 || a->unalign < 0 || a->unalign > (1 << 20))
    fprintf(stderr, "%s: -T %d -G %d -u %d: expected -T, -G >= 0 and 0 <= -u <= 1048576\n", prog,
            a->timeout, a->cudagraph, a->unalign);
  else if (a->root < -1)
    fprintf(stderr, "%s: -r %d: expected a rank, or -1 for every rank in turn\n", prog, a->root);
  else
    return 0;
  return -1;
}

/* Checks the flags that only go together, or not at all in weft. */
static int args_validate_modes(struct bench_args *a, const char *prog) {
  const char *ext = a->output_file ? strrchr(a->output_file, '.') : NULL;

  if (a->force_cpu && a->force_gpu)
    fprintf(stderr, "%s: --cpu and --gpu both given: expected at most one of them\n", prog);
  else if (a->per_iter != 0 && a->per_iter != 1)
    fprintf(stderr, "%s: -I %d: expected 0 (off) or 1 (per-iteration timing)\n", prog, a->per_iter);
  else if (a->per_iter && a->cudagraph)
    fprintf(stderr, "%s: -I 1 with -G %d: a graph's iterations cannot be timed one by one\n", prog,
            a->cudagraph);
  else if (a->blocking == 3 && a->cudagraph)
    fprintf(stderr, "%s: -z 3 with -G %d: a graph cannot wait between its iterations\n", prog,
            a->cudagraph);
  else if (a->per_iter_skip < 0 || a->per_iter_skip >= a->iters ||
           (a->per_iter_skip && !a->per_iter))
    fprintf(stderr, "%s: -K %d: expected 0 <= -K < -n (%d), and -I 1 with it\n", prog,
            a->per_iter_skip, a->iters);
  else if (a->local_register < 0 || a->local_register > 2)
    fprintf(stderr, "%s: -R %d: expected 0 (none), 1 (local) or 2 (symmetric window)\n", prog,
            a->local_register);
  else if (a->cta_policy < -1 || a->cta_policy > 2)
    fprintf(stderr, "%s: -x %d: expected 0 (default) or 1 (efficiency)\n", prog, a->cta_policy);
  else if (a->device_impl != 0 || a->device_ctas != 0)
    fprintf(stderr,
            "%s: -D %d -V %d: NCCL 2.28's device API is not part of weft (it implements NCCL "
            "%d.%d): expected -D 0 and no -V\n",
            prog, a->device_impl, a->device_ctas, NCCL_MAJOR, NCCL_MINOR);
  else if (a->output_file && (!ext || strchr(ext, '/') || strcasecmp(ext, ".json") != 0))
    fprintf(stderr, "%s: -J %s: only JSON output is written: expected a name ending in .json\n",
            prog, a->output_file);
  else if (a->output_file && a->json_path && strcmp(a->output_file, a->json_path) != 0)
    fprintf(stderr, "%s: -J %s and --json %s: expected one JSON file\n", prog, a->output_file,
            a->json_path);
  else {
    if (a->cta_policy == 2) {
      /* nccl-tests ignores it below NCCL 2.28 the same way. */
      fprintf(stderr,
              "%s: -x 2 (NCCL_CTA_POLICY_ZERO) needs NCCL 2.28; weft implements %d.%d: "
              "ignoring it\n",
              prog, NCCL_MAJOR, NCCL_MINOR);
      a->cta_policy = -1;
    }
    if (a->output_file) a->json_path = a->output_file;
    return 0;
  }
  return -1;
}

/* The flag as the user may know it: "-b (--minbytes)" or "--json". */
static void flag_name(const struct arg_spec *spec, char *buf, size_t len) {
  if (spec->shortname)
    snprintf(buf, len, "-%s (--%s)", spec->shortname, spec->longname);
  else
    snprintf(buf, len, "--%s", spec->longname);
}

/* Takes the flag at argv[*i] (and its value); -1 when it is bad, 1 when it
 * asks for help. */
static int args_one(struct bench_args *a, int argc, char **argv, int *i, enum bench_args_set set) {
  const char *value;
  const struct arg_spec *spec = args_match(argv[*i], &value);
  char name[48];

  if (!spec || !(spec->programs & (1 << set))) {
    fprintf(stderr, "%s: unknown flag %s (see --help)\n", argv[0], argv[*i]);
    return -1;
  }
  if (strcmp(spec->longname, "help") == 0) return 1;
  flag_name(spec, name, sizeof(name));
  if (spec->kind == ARG_NONE && value) {
    fprintf(stderr, "%s: %s takes no value, got '%s'\n", argv[0], name, value);
    return -1;
  }
  if (spec->kind != ARG_NONE && !value) {
    /* "--plot -b 8" would take -b as the file: a flag is never a value. */
    if (*i + 1 >= argc) {
      fprintf(stderr, "%s: %s needs a value: %s\n", argv[0], name, kind_expects[spec->kind]);
      return -1;
    }
    if (spec->kind == ARG_PATH && argv[*i + 1][0] == '-') {
      fprintf(stderr, "%s: %s needs a value (%s), but the next argument is the flag %s\n", argv[0],
              name, kind_expects[spec->kind], argv[*i + 1]);
      return -1;
    }
    value = argv[++*i];
  }
  if (args_store(a, spec, value ? value : "") != 0) {
    fprintf(stderr, "%s: bad value '%s' for %s: expected %s\n", argv[0], value, name,
            kind_expects[spec->kind]);
    return -1;
  }
  if (strcmp(spec->longname, "stepbytes") == 0) a->step_factor = 1; /* the last of -i and -f wins */
  if (strcmp(spec->longname, "np") == 0) a->nprocs_given = 1;
  return 0;
}

int bench_args_parse(struct bench_args *a, int argc, char **argv, enum bench_args_set set) {
  int coll_given = 0;

  args_defaults(a);
  for (int i = 1; i < argc; i++) {
    if (argv[i][0] != '-') {
      a->coll = bench_coll_find(argv[i]);
      if (a->coll < 0) {
        fprintf(stderr, "%s: unknown collective '%s': expected one of %s\n", argv[0], argv[i],
                bench_coll_names());
        return -1;
      }
      if (coll_given++) {
        fprintf(stderr, "%s: a second collective '%s': expected one per run\n", argv[0], argv[i]);
        return -1;
      }
      continue;
    }
    int rc = args_one(a, argc, argv, &i, set);
    if (rc > 0) args_usage(stdout, argv[0], set);
    if (rc != 0) return rc;
  }
  if (args_validate_counts(a, argv[0]) != 0) return -1;
  return args_validate_modes(a, argv[0]);
}

int bench_args_check_ranks(const struct bench_args *a, const char *prog, int nranks, int verbose) {
  if (bench_colls[a->coll].has_root && a->root >= nranks) {
    if (verbose)
      fprintf(stderr, "%s: -r %d is not a rank: expected 0..%d, or -1 for each in turn\n", prog,
              a->root, nranks - 1);
    return -1;
  }
  if (a->coll == BENCH_HYPERCUBE && (nranks & (nranks - 1)) != 0) {
    if (verbose)
      fprintf(stderr, "%s: hypercube needs a power-of-two number of ranks, not %d\n", prog, nranks);
    return -1;
  }
  return 0;
}

size_t bench_args_next_size(const struct bench_args *a, size_t bytes) {
  size_t next = a->step_factor > 1 ? bytes * (size_t)a->step_factor : bytes + a->step_bytes;
  /* Size 0 times a factor stays 0: step on to 1 byte then. */
  if (next <= bytes) next = bytes + 1;
  return next;
}
