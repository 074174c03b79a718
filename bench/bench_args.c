/* Command-line flags: nccl-tests' flags with their defaults (except the
 * size range, 8 B to 32 MiB here), plus weft-bench's own -np, --json,
 * --plot, --cpu and --gpu. weft-mpi-ref takes the subset an MPI program can
 * honour. A bad flag is reported with the flag and what it expects. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
    {"b", "minbytes", ARG_SIZE, FIELD(min_bytes), FOR_ALL,
     "smallest size (default 8; K/M/G suffixes)"},
    {"e", "maxbytes", ARG_SIZE, FIELD(max_bytes), FOR_ALL, "largest size (default 32M)"},
    {"i", "stepbytes", ARG_SIZE, FIELD(step_bytes), FOR_ALL,
     "grow sizes by adding this many bytes"},
    {"f", "stepfactor", ARG_LONG, FIELD(step_factor), FOR_ALL,
     "grow sizes by this factor (default 2)"},
    {"n", "iters", ARG_INT, FIELD(iters), FOR_ALL, "timed iterations per size (default 20)"},
    {"w", "warmup_iters", ARG_INT, FIELD(warmup), FOR_ALL, "warmup iterations (default 5)"},
    {"m", "agg_iters", ARG_INT, FIELD(agg_iters), FOR_WEFT,
     "calls grouped into one iteration (default 1)"},
    {"c", "check", ARG_INT, FIELD(check), FOR_ALL, "check results: 0 or 1 (default 1)"},
    {"o", "op", ARG_OP, FIELD(op), FOR_ALL, "sum, prod, min, max, avg or all (default sum)"},
    {"d", "datatype", ARG_TYPE, FIELD(dtype), FOR_ALL,
     "int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2, or all "
     "(default float)"},
    {"g", "ngpus", ARG_INT, FIELD(ngpus), FOR_WEFT, "ranks driven by each thread (default 1)"},
    {"t", "nthreads", ARG_INT, FIELD(nthreads), FOR_WEFT, "threads per process (default 1)"},
    {"r", "root", ARG_INT, FIELD(root), FOR_ALL, "root rank of broadcast and reduce (default 0)"},
    {"a", "average", ARG_INT, FIELD(average), FOR_ALL,
     "time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)"},
    {"z", "blocking", ARG_INT, FIELD(blocking), FOR_WEFT,
     "complete each call, then barrier (default 0)"},
    {"G", "cudagraph", ARG_INT, FIELD(cudagraph), FOR_WEFT,
     "accepted and ignored: weft-bench captures no CUDA graphs"},
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
    [ARG_OP] = "sum, prod, max, min, avg or all",
    [ARG_TYPE] =
        "int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, "
        "f8e4m3, f8e5m2 or all",
    [ARG_PATH] = "a file name",
    [ARG_NONE] = "no value",
};

static void args_defaults(struct bench_args *a) {
  memset(a, 0, sizeof(*a));
  a->coll = BENCH_ALLREDUCE;
  a->min_bytes = 8;
  a->max_bytes = 32u << 20;
  a->step_bytes = 1u << 20;
  a->step_factor = 2;
  a->iters = 20;
  a->warmup = 5;
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
          "COLLECTIVE: allreduce (default), allgather, reducescatter, "
          "broadcast, reduce, sendrecv, alltoall\n",
          prog);
  for (size_t i = 0; i < NSPECS; i++) {
    if (!(specs[i].programs & (1 << set))) continue;
    const char *value = specs[i].kind == ARG_PATH ? " FILE" : "";
    char names[48];
    if (specs[i].shortname)
      snprintf(names, sizeof(names), "-%s, --%s%s", specs[i].shortname, specs[i].longname, value);
    else
      snprintf(names, sizeof(names), "--%s%s", specs[i].longname, value);
    fprintf(f, "  %-24s %s\n", names, specs[i].help);
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

/* Checks the values that need no rank count; names the flag and what it
 * expects. */
static int args_validate(const struct bench_args *a, const char *prog) {
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
    fprintf(stderr, "%s: -c %d: expected 0 (no checks) or 1\n", prog, a->check);
  else if (a->force_cpu && a->force_gpu)
    fprintf(stderr, "%s: --cpu and --gpu both given: expected at most one of them\n", prog);
  else
    return 0;
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
      if (a->coll < 0 || coll_given++) {
        fprintf(stderr, "%s: unknown or second collective '%s'\n", argv[0], argv[i]);
        return -1;
      }
      continue;
    }
    int rc = args_one(a, argc, argv, &i, set);
    if (rc > 0) args_usage(stdout, argv[0], set);
    if (rc != 0) return rc;
  }
  return args_validate(a, argv[0]);
}

int bench_args_check_ranks(const struct bench_args *a, const char *prog, int nranks, int verbose) {
  if (bench_colls[a->coll].has_root && (a->root < 0 || a->root >= nranks)) {
    if (verbose) fprintf(stderr, "%s: root %d is not a rank (0..%d)\n", prog, a->root, nranks - 1);
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
