/* weft-fit: the tuning model's rows from weft-bench runs.
 *
 *   weft-fit [--path NAME] [--command CMD] [--machine NAME] [--date DATE]
 *            [--min-bytes N] [--max-bytes N] [--in-place] [--tolerance F]
 *            [--check] CONFIG=FILE.json ...
 *
 * CONFIG is ALGO/PROTO as NCCL_ALGO and NCCL_PROTO name them (the run
 * forced both) or "default" (neither set). Every file is one weft-bench
 * --json run of the same collective on the same ranks. Prints (a) one row
 * of sched/tuning_fit.c's table per forced configuration, in its source
 * format, with the machine, date and command recorded, and (b) the
 * verification table: per size the default's time, the best forced
 * configuration and its time, their ratio and whether the default is
 * within the tolerance (10%: issue 16's criterion), and the same for the
 * configuration the fitted rows would pick. docs/PERFORMANCE.md ("Tuning
 * model") says how tune-sweep.sh runs it. Exit 0; 1 with --check when the
 * default misses at some size; 2 on bad input. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fit.h"

#define MAX_CONFIGS 16

struct opts {
  const char *path, *command, *machine, *date;
  double min_bytes, max_bytes, tolerance;
  int in_place, check;
};

static const char *const path_ids[WEFT_TUNE_PATH_COUNT] = {
    "WEFT_TUNE_LOCAL",  "WEFT_TUNE_SAME_GPU", "WEFT_TUNE_NVLINK", "WEFT_TUNE_PCIE",
    "WEFT_TUNE_STAGED", "WEFT_TUNE_SHM",      "WEFT_TUNE_SOCKET", "WEFT_TUNE_NET"};
static const char *const algo_ids[WEFT_ALGO_COUNT] = {"WEFT_ALGO_RING", "WEFT_ALGO_TREE",
                                                      "WEFT_ALGO_DIRECT"};
static const char *const algo_names[WEFT_ALGO_COUNT] = {"Ring", "Tree", "Direct"};
static const char *const proto_ids[WEFT_PROTO_COUNT] = {"WEFT_PROTO_SIMPLE", "WEFT_PROTO_LL",
                                                        "WEFT_PROTO_LL128"};

/* weft-bench's collective names the model knows, as enum weft_func. */
static const struct {
  const char *bench, *id;
  enum weft_func func;
} funcs[] = {
    {"allreduce", "WEFT_FUNC_ALLREDUCE", WEFT_FUNC_ALLREDUCE},
    {"allgather", "WEFT_FUNC_ALLGATHER", WEFT_FUNC_ALLGATHER},
    {"reducescatter", "WEFT_FUNC_REDUCESCATTER", WEFT_FUNC_REDUCESCATTER},
    {"broadcast", "WEFT_FUNC_BROADCAST", WEFT_FUNC_BROADCAST},
    {"reduce", "WEFT_FUNC_REDUCE", WEFT_FUNC_REDUCE},
};

static int usage(const char *why) {
  fprintf(stderr,
          "weft-fit: %s\nusage: weft-fit [--path NAME] [--command CMD] [--machine NAME] "
          "[--date DATE] [--min-bytes N] [--max-bytes N] [--in-place] [--tolerance F] "
          "[--check] CONFIG=FILE.json ...\n  CONFIG: Ring/Simple, Tree/LL, Direct/Simple, ... "
          "or default; NAME: local, same-gpu, nvlink, pcie, staged, shm, socket, gpu-net\n",
          why);
  return 2;
}

/* "4096", "64K", "4G" (powers of 1024, as weft-bench's -b and -e). */
static int parse_bytes(const char *s, double *out) {
  static const char units[] = "KMGT";
  char *end;
  double v = strtod(s, &end);
  if (end == s || !(v >= 0)) return -1;
  if (*end != '\0') {
    const char *u = strchr(units, toupper((unsigned char)*end));
    if (u == NULL || end[1] != '\0') return -1;
    for (const char *k = units; k <= u; k++) v *= 1024;
  }
  *out = v;
  return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o, int *first) {
  o->min_bytes = 0, o->max_bytes = 1e300, o->tolerance = 0.10;
  int i = 1;
  for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
    const char *f = argv[i];
    if (strcmp(f, "--help") == 0)
      return usage("fits the tuning model's rows") - 1; /* 1: exit 0 */
    else if (strcmp(f, "--in-place") == 0)
      o->in_place = 1;
    else if (strcmp(f, "--check") == 0)
      o->check = 1;
    else if (i + 1 >= argc)
      return usage("a flag without its value");
    else if (strcmp(f, "--path") == 0)
      o->path = argv[++i];
    else if (strcmp(f, "--command") == 0)
      o->command = argv[++i];
    else if (strcmp(f, "--machine") == 0)
      o->machine = argv[++i];
    else if (strcmp(f, "--date") == 0)
      o->date = argv[++i];
    else if (strcmp(f, "--min-bytes") == 0 || strcmp(f, "--max-bytes") == 0) {
      if (parse_bytes(argv[++i], f[2] == 'm' && f[3] == 'i' ? &o->min_bytes : &o->max_bytes))
        return usage("--min-bytes / --max-bytes: expected a size (8, 64K, 4G)");
    } else if (strcmp(f, "--tolerance") == 0)
      o->tolerance = strtod(argv[++i], NULL);
    else
      return usage("unknown flag");
  }
  if (!(o->tolerance >= 0)) return usage("--tolerance: expected a fraction >= 0 (0.10 is 10%)");
  *first = i;
  return i < argc ? 0 : usage("no CONFIG=FILE.json given");
}

static int path_find(const char *name) {
  for (int p = 0; p < WEFT_TUNE_PATH_COUNT; p++)
    if (strcmp(name, weft_tune_path_name((enum weft_tune_path)p)) == 0) return p;
  return -1;
}

static int func_find(const char *collective) {
  for (size_t f = 0; f < sizeof(funcs) / sizeof(funcs[0]); f++)
    if (strcmp(collective, funcs[f].bench) == 0) return (int)f;
  return -1;
}

/* CONFIG=FILE into c; checks every file is the same collective and ranks. */
static int load_config(const char *arg, const struct opts *o, const struct fit_config *first,
                       struct fit_config *c) {
  char name[32], err[200];
  const char *eq = strchr(arg, '=');
  if (eq == NULL || (size_t)(eq - arg) >= sizeof(name)) {
    fprintf(stderr, "weft-fit: %s: expected CONFIG=FILE.json\n", arg);
    return -1;
  }
  memcpy(name, arg, (size_t)(eq - arg));
  name[eq - arg] = '\0';
  if (fit_config_name(name, c) != 0) {
    fprintf(stderr,
            "weft-fit: %s: expected ALGO/PROTO (Ring, Tree or Direct / Simple or LL) or default\n",
            name);
    return -1;
  }
  if (fit_json_read(eq + 1, o->in_place, &c->s, err, sizeof(err)) != 0) {
    fprintf(stderr, "weft-fit: %s: %s\n", eq + 1, err);
    return -1;
  }
  if (func_find(c->s.collective) < 0) {
    fprintf(stderr,
            "weft-fit: %s: collective %s: the model has allreduce, allgather, "
            "reducescatter, broadcast and reduce\n",
            eq + 1, c->s.collective);
    return -1;
  }
  if (first != NULL &&
      (strcmp(first->s.collective, c->s.collective) != 0 || first->s.nranks != c->s.nranks)) {
    fprintf(stderr, "weft-fit: %s: %s on %d ranks, but the first file has %s on %d\n", eq + 1,
            c->s.collective, c->s.nranks, first->s.collective, first->s.nranks);
    return -1;
  }
  return 0;
}

/* A C string literal's body. */
static void put_literal(const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') putchar('\\');
    if ((unsigned char)*s >= 0x20) putchar(*s);
  }
}

static void print_rows(const struct opts *o, struct fit_config *cfg, int ncfg, int f, int path) {
  int n = cfg[0].s.nranks;
  char range[64] = "every size";
  if (o->min_bytes > 0 || o->max_bytes < 1e299)
    snprintf(range, sizeof(range), "sizes %.0f to %.0f B", o->min_bytes, o->max_bytes);
  printf(
      "/* weft-fit: %s on %d ranks, path %s; %s times, least over passes; %s fitted "
      "(least squares on the relative error). Rows for sched/tuning_fit.c: */\n",
      cfg[0].s.collective, n, path >= 0 ? weft_tune_path_name(path) : "(not given)",
      o->in_place ? "in-place" : "out-of-place", range);
  for (int c = 0; c < ncfg; c++) {
    if (cfg[c].is_default) continue;
    if (!cfg[c].fitted) {
      printf("/* %s: fewer than 2 sizes to fit */\n", cfg[c].name);
      continue;
    }
    double ca, cb;
    weft_tune_coef(funcs[f].func, cfg[c].algo, n, &ca, &cb);
    double beta = cfg[c].line.beta > 0 ? cfg[c].line.beta * cb : 1e12;
    printf("    {%s, %s, %s, %s, %d, %.6g, %.6g, 1,\n     \"%s %s: NCCL_ALGO=%s NCCL_PROTO=%s ",
           path >= 0 ? path_ids[path] : "WEFT_TUNE_PATH_NOT_GIVEN", funcs[f].id,
           algo_ids[cfg[c].algo], proto_ids[cfg[c].proto], n, cfg[c].line.alpha_us / ca, beta,
           o->machine, o->date, algo_names[cfg[c].algo], weft_proto_name(cfg[c].proto));
    put_literal(o->command != NULL ? o->command : "(command not given)");
    printf("\"}, /* %.4g us", cfg[c].line.alpha_us);
    if (cfg[c].line.beta > 0)
      printf(" + B / %.4g GB/s", cfg[c].line.beta / 1000);
    else
      printf(", flat: no bandwidth term");
    printf(", %d sizes, rms %.1f%% */\n", cfg[c].line.points, 100 * cfg[c].line.rms_rel);
  }
}

/* (b): returns how many sizes the default missed. */
static int print_verdicts(const struct opts *o, const struct fit_config *cfg, int ncfg,
                          double xscale) {
  struct fit_verdict v[FIT_MAX_SIZES];
  int n = fit_verify(cfg, ncfg, o->tolerance, xscale, v, FIT_MAX_SIZES);
  int pct = (int)(o->tolerance * 100 + 0.5), miss = 0, have = 0, model_ok = 0, model_have = 0;
  printf(
      "\n# verification (times in us): the default against the best forced configuration, "
      "and the fitted rows' pick\n# %12s %10s %14s %10s %6s %4s %14s %10s %6s %4s\n",
      "size", "default", "best forced", "time", "ratio", "ok", "model picks", "time", "ratio",
      "ok");
  for (int i = 0; i < n; i++) {
    printf("  %12.0f ", v[i].bytes);
    if (v[i].default_us > 0)
      printf("%10.2f ", v[i].default_us);
    else
      printf("%10s ", "-");
    if (v[i].best < 0) {
      printf("%14s\n", "-");
      continue;
    }
    printf("%14s %10.2f ", cfg[v[i].best].name, v[i].best_us);
    if (v[i].default_us > 0) {
      printf("%6.2f %4s ", v[i].ratio, v[i].ok ? "yes" : "NO");
      have++, miss += !v[i].ok;
    } else
      printf("%6s %4s ", "-", "-");
    if (v[i].model >= 0) {
      printf("%14s %10.2f %6.2f %4s\n", cfg[v[i].model].name, v[i].model_us, v[i].model_ratio,
             v[i].model_ok ? "yes" : "NO");
      model_have++, model_ok += v[i].model_ok;
    } else
      printf("%14s\n", "-");
  }
  if (have > 0)
    printf("# default within %d%% of the best forced at %d of %d sizes: %s\n", pct, have - miss,
           have, miss ? "FAIL" : "PASS");
  else
    printf("# no default run (default=FILE) to verify\n");
  printf("# the fitted rows' pick within %d%% of the best forced at %d of %d sizes\n", pct,
         model_ok, model_have);
  return miss;
}

int main(int argc, char **argv) {
  struct opts o = {0};
  int first;
  int rc = parse_opts(argc, argv, &o, &first);
  if (rc != 0) return rc == 1 ? 0 : 2; /* 1: --help */
  int path = -1;
  if (o.path != NULL && (path = path_find(o.path)) < 0) return usage("--path: unknown path type");
  char host[64] = "unknown-host", today[16];
  if (o.machine == NULL && gethostname(host, sizeof(host) - 1) == 0) host[sizeof(host) - 1] = '\0';
  if (o.machine == NULL) o.machine = host;
  time_t now = time(NULL);
  strftime(today, sizeof(today), "%Y-%m-%d", gmtime(&now));
  if (o.date == NULL) o.date = today;
  static struct fit_config cfg[MAX_CONFIGS];
  int ncfg = argc - first;
  if (ncfg > MAX_CONFIGS) return usage("more than 16 configurations");
  for (int c = 0; c < ncfg; c++)
    if (load_config(argv[first + c], &o, c > 0 ? &cfg[0] : NULL, &cfg[c]) != 0) return 2;
  int f = func_find(cfg[0].s.collective);
  int n = cfg[0].s.nranks;
  /* The model's bytes are one rank's share for AllGather and ReduceScatter. */
  double xscale = funcs[f].func == WEFT_FUNC_ALLGATHER || funcs[f].func == WEFT_FUNC_REDUCESCATTER
                      ? 1.0 / n
                      : 1.0;
  for (int c = 0; c < ncfg; c++) {
    double x[FIT_MAX_SIZES];
    for (int i = 0; i < cfg[c].s.n; i++) x[i] = cfg[c].s.bytes[i] * xscale;
    cfg[c].fitted =
        !cfg[c].is_default && fit_line_solve(x, cfg[c].s.time_us, cfg[c].s.n, o.min_bytes * xscale,
                                             o.max_bytes * xscale, &cfg[c].line) == 0;
  }
  print_rows(&o, cfg, ncfg, f, path);
  int miss = print_verdicts(&o, cfg, ncfg, xscale);
  return o.check && miss > 0 ? 1 : 0;
}
