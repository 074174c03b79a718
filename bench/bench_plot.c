/* --plot FILE: busbw against message size as a PNG, one line per
 * collective, type, operator and placement, with the device's copy
 * bandwidth as a flat line where it was measured.
 *
 * weft draws nothing itself: it writes the points to a temporary data file
 * and a short script, and runs gnuplot if PATH has it, else python3 with
 * matplotlib. Where neither works it says so, naming both; the table has
 * been printed by then, so nothing measured is lost. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

/* python3's exit status when it cannot import matplotlib. */
#define PLOT_NO_MATPLOTLIB 3

/* Series k gets color k and marker k (cycling separately, so pairs stay
 * distinct past either list); out-of-place is a solid line with filled
 * markers, in-place a dashed one with open markers of the same shape and
 * color. Colors: Okabe and Ito's palette, told apart in color blindness. */
static const char *const plot_colors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                          "#E69F00", "#56B4E9", "#000000", "#999999"};
#define PLOT_NCOLORS (sizeof(plot_colors) / sizeof(plot_colors[0]))
/* gnuplot's filled point types; the open shape is one less. */
static const int plot_gnuplot_points[] = {7, 5, 9, 11, 13, 15};
#define PLOT_NMARKERS (sizeof(plot_gnuplot_points) / sizeof(plot_gnuplot_points[0]))
/* The same shapes in matplotlib. */
static const char plot_mpl_markers[PLOT_NMARKERS + 1] = "os^vDp";

/* A series is one (collective, type, operator) and one placement. */
struct plot_series {
  int coll, type, op;
};

/* The distinct (collective, type, operator) of the points, in order. */
static size_t plot_series_find(const struct bench_report *r, struct plot_series *out) {
  size_t n = 0;

  for (size_t i = 0; i < r->npoints; i++) {
    const struct bench_plot_point *p = &r->points[i];
    size_t k = 0;
    while (k < n && !(out[k].coll == p->coll && out[k].type == p->type && out[k].op == p->op)) k++;
    if (k == n) out[n++] = (struct plot_series){p->coll, p->type, p->op};
  }
  return n;
}

/* "allreduce, out-of-place"; with several types or operators in the run,
 * "allreduce float sum, out-of-place". */
static void plot_title(const struct plot_series *s, int detailed, int ip, char *buf, size_t len) {
  const char *place = ip ? "in-place" : "out-of-place";

  if (!detailed)
    snprintf(buf, len, "%s, %s", bench_colls[s->coll].name, place);
  else
    snprintf(buf, len, "%s %s%s%s, %s", bench_colls[s->coll].name, bench_types[s->type].name,
             s->op >= 0 ? " " : "", s->op >= 0 ? bench_op_names[s->op] : "", place);
}

/* A double-quoted string for gnuplot or Python: both read \" and \\. */
static void put_quoted(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    if ((unsigned char)*s >= 0x20) fputc(*s, f);
  }
  fputc('"', f);
}

/* One block per series, gnuplot's way (two blank lines between blocks);
 * each block opens with "# title", which Python reads and gnuplot skips. */
static void write_data(FILE *f, const struct bench_report *r, const struct plot_series *s,
                       size_t ns) {
  char title[128];

  for (size_t k = 0; k < ns; k++)
    for (int ip = 0; ip < 2; ip++) {
      plot_title(&s[k], ns > 1, ip, title, sizeof(title));
      fprintf(f, "# %s\n", title);
      for (size_t i = 0; i < r->npoints; i++) {
        const struct bench_plot_point *p = &r->points[i];
        if (p->coll != s[k].coll || p->type != s[k].type || p->op != s[k].op) continue;
        if (p->bytes == 0) continue; /* a log axis has no place for 0 */
        fprintf(f, "%zu %.6g\n", p->bytes, p->busbw[ip]);
      }
      fputs("\n\n", f);
    }
}

static void plot_heading(const struct bench_report *r, char *buf, size_t len) {
  snprintf(buf, len, "%s: %s, %d ranks, %s buffers", r->program, bench_colls[r->args->coll].name,
           r->nranks, r->buffers ? "GPU" : "host");
}

/* "8B", "64KiB", "4GiB": a power of two as the size column reads. */
static void size_label(size_t bytes, char *buf, size_t len) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;

  while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    u++;
  }
  snprintf(buf, len, "%zu%s", bytes, units[u]);
}

/* Ticks at powers of two across the sweep, about a dozen at most. */
static void write_xtics(FILE *f, const struct bench_report *r) {
  size_t lo = ~(size_t)0, hi = 0;
  int e0 = 0, e1 = 0, step;
  char label[32];

  for (size_t i = 0; i < r->npoints; i++) {
    size_t b = r->points[i].bytes;
    if (b == 0) continue;
    lo = b < lo ? b : lo;
    hi = b > hi ? b : hi;
  }
  if (hi == 0) return;
  /* One size (nccl-tests' default sweep): an octave either side, rather
   * than gnuplot's "empty x range" warning. */
  if (lo == hi) fprintf(f, "set xrange [%zu:%zu]\n", lo / 2 ? lo / 2 : 1, 2 * hi);
  while (e0 < 62 && ((size_t)1 << (e0 + 1)) <= lo) e0++;
  while (e1 < 62 && ((size_t)1 << e1) < hi) e1++;
  step = (e1 - e0) / 12 + 1;
  fputs("set xtics (", f);
  for (int e = e0; e <= e1; e += step) {
    size_label((size_t)1 << e, label, sizeof(label));
    fprintf(f, "%s\"%s\" %zu", e > e0 ? ", " : "", label, (size_t)1 << e);
  }
  fputs(")\n", f);
}

static void write_gnuplot(FILE *f, const struct bench_report *r, const struct plot_series *s,
                          size_t ns, const char *data, const char *png) {
  char title[128];

  fputs(
      "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
      "  set terminal pngcairo size 1100,650\n"
      "} else {\n"
      "  set terminal png size 1100,650\n"
      "}\n",
      f);
  fputs("set output ", f);
  put_quoted(f, png);
  plot_heading(r, title, sizeof(title));
  fputs("\nset title ", f);
  put_quoted(f, title);
  fputs(
      " noenhanced\nset logscale x 2\nset xlabel \"message size\"\n"
      "set ylabel \"busbw (GB/s)\"\nset yrange [0:*]\nset offsets 0, 0, graph 0.05, 0\n"
      "set grid\n",
      f);
  /* More than a few lines would hide the data under the key. */
  fprintf(f, "set key %s Left reverse noenhanced\n", ns > 2 ? "outside right top" : "top left");
  write_xtics(f, r);
  fputs("plot ", f);
  for (size_t k = 0; k < ns; k++)
    for (int ip = 0; ip < 2; ip++) {
      plot_title(&s[k], ns > 1, ip, title, sizeof(title));
      fprintf(f, "%s", k + ip ? ", \\\n     " : "");
      put_quoted(f, data);
      fprintf(f,
              " index %zu using 1:2 with linespoints linewidth 2 dashtype %d linecolor rgb "
              "\"%s\" pointtype %d pointsize 1.3 title ",
              2 * k + ip, ip ? 2 : 1, plot_colors[k % PLOT_NCOLORS],
              plot_gnuplot_points[k % PLOT_NMARKERS] - ip);
      put_quoted(f, title);
    }
  if (r->copy.bytes) {
    snprintf(title, sizeof(title), "device copy, read + write (%.0f GB/s)", r->copy.gbps);
    fprintf(f, ", \\\n     %.6g with lines linecolor rgb \"#555555\" dashtype 2 title ",
            r->copy.gbps);
    put_quoted(f, title);
  }
  fputs("\n", f);
}

static void write_python(FILE *f, const struct bench_report *r, const char *data, const char *png) {
  char title[128];

  fprintf(f,
          "import sys\n"
          "try:\n"
          "    import matplotlib\n"
          "    matplotlib.use('Agg')\n"
          "    import matplotlib.pyplot as plt\n"
          "    from matplotlib.ticker import FuncFormatter\n"
          "except ImportError:\n"
          "    sys.exit(%d)\n",
          PLOT_NO_MATPLOTLIB);
  fputs("series = []\nfor line in open(", f);
  put_quoted(f, data);
  fputs(
      "):\n"
      "    if line.startswith('# '):\n"
      "        series.append((line[2:].strip(), [], []))\n"
      "    elif line.strip():\n"
      "        x, y = line.split()\n"
      "        series[-1][1].append(int(x))\n"
      "        series[-1][2].append(float(y))\n"
      "def size(x, pos=None):\n"
      "    for unit in ('B', 'KiB', 'MiB', 'GiB', 'TiB'):\n"
      "        if x < 1024:\n"
      "            return '%g%s' % (x, unit)\n"
      "        x /= 1024.0\n"
      "    return '%gPiB' % x\n"
      "fig, ax = plt.subplots(figsize=(11, 6.5))\n",
      f);
  /* The same styles as gnuplot's: color and marker by series, in-place
   * dashed with open markers (the data file has them in pairs). */
  fputs("colors = [", f);
  for (size_t i = 0; i < PLOT_NCOLORS; i++) fprintf(f, "%s'%s'", i ? ", " : "", plot_colors[i]);
  fprintf(f,
          "]\nmarkers = '%s'\n"
          "for j, (title, xs, ys) in enumerate(series):\n"
          "    k, ip = divmod(j, 2)\n"
          "    c = colors[k %% len(colors)]\n"
          "    ax.plot(xs, ys, color=c, linewidth=2, linestyle='--' if ip else '-',\n"
          "            marker=markers[k %% len(markers)], markersize=7,\n"
          "            markerfacecolor='none' if ip else c, label=title)\n",
          plot_mpl_markers);
  if (r->copy.bytes)
    fprintf(f,
            "ax.axhline(%.6g, color='#555555', linestyle='--',\n"
            "           label='device copy, read + write (%.0f GB/s)')\n",
            r->copy.gbps, r->copy.gbps);
  plot_heading(r, title, sizeof(title));
  fputs(
      "try:\n"
      "    ax.set_xscale('log', base=2)\n"
      "except TypeError:\n"
      "    ax.set_xscale('log', basex=2)\n"
      "ax.xaxis.set_major_formatter(FuncFormatter(size))\n"
      "ax.set_ylim(bottom=0)\n"
      "ax.set_xlabel('message size')\n"
      "ax.set_ylabel('busbw (GB/s)')\n"
      "ax.grid(True, which='both', alpha=0.3)\n"
      "if len(series) > 4:\n"
      "    ax.legend(loc='upper left', bbox_to_anchor=(1.01, 1), fontsize='small')\n"
      "else:\n"
      "    ax.legend(loc='upper left')\n"
      "ax.set_title(",
      f);
  put_quoted(f, title);
  fputs(")\nfig.savefig(", f);
  put_quoted(f, png);
  fputs(", dpi=100, bbox_inches='tight')\n", f);
}

/* Whether PATH has an executable name. */
static int in_path(const char *name) {
  const char *path = getenv("PATH");
  char buf[4096];

  if (!path) return 0;
  while (*path) {
    size_t len = strcspn(path, ":");
    snprintf(buf, sizeof(buf), "%.*s/%s", (int)(len ? len : 1), len ? path : ".", name);
    if (access(buf, X_OK) == 0) return 1;
    path += len + (path[len] == ':');
  }
  return 0;
}

/* Runs prog script, its output on our stderr so stdout stays the table;
 * returns its exit status, or -1 when it did not run or died. */
static int run_plotter(const char *prog, const char *script) {
  int status;
  pid_t pid;

  fflush(NULL);
  pid = fork();
  if (pid < 0) {
    perror("weft-bench: --plot: fork");
    return -1;
  }
  if (pid == 0) {
    dup2(2, 1);
    execlp(prog, prog, script, (char *)NULL);
    _exit(127);
  }
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* A temporary file, its name in path (room for 64 bytes past TMPDIR). */
static FILE *temp_file(char *path, size_t len) {
  const char *dir = getenv("TMPDIR");
  int fd;
  FILE *f;

  snprintf(path, len, "%s/weft-bench-plot-XXXXXX", dir && *dir ? dir : "/tmp");
  fd = mkstemp(path);
  if (fd < 0) {
    fprintf(stderr, "weft-bench: --plot: cannot make a temporary file %s: %s\n", path,
            strerror(errno));
    return NULL;
  }
  f = fdopen(fd, "w");
  if (!f) close(fd);
  return f;
}

/* Writes the script for prog and runs it; 0 once the PNG exists. */
static int plot_with(const char *prog, const struct bench_report *r, const struct plot_series *s,
                     size_t ns, const char *data, const char *png) {
  char script[4200];
  struct stat st;
  FILE *f = temp_file(script, sizeof(script));
  int status;

  if (!f) return -1;
  if (strcmp(prog, "gnuplot") == 0)
    write_gnuplot(f, r, s, ns, data, png);
  else
    write_python(f, r, data, png);
  if (fclose(f) != 0) {
    unlink(script);
    return -1;
  }
  unlink(png); /* so a stale picture never passes for this run's */
  status = run_plotter(prog, script);
  unlink(script);
  if (status == 0 && stat(png, &st) == 0 && st.st_size > 0) return 0;
  if (status == PLOT_NO_MATPLOTLIB && strcmp(prog, "python3") == 0) return PLOT_NO_MATPLOTLIB;
  fprintf(stderr, "weft-bench: --plot: %s did not write %s (exit status %d)\n", prog, png, status);
  return -1;
}

static int plot_draw(struct bench_report *r, const char *png, const char *data) {
  struct plot_series *s = calloc(r->npoints ? r->npoints : 1, sizeof(*s));
  const int have_gnuplot = in_path("gnuplot"), have_python = in_path("python3");
  int rc = -1;

  if (!s) return -1;
  size_t ns = plot_series_find(r, s);
  FILE *f = fopen(data, "w");
  if (!f) {
    perror(data);
    free(s);
    return -1;
  }
  write_data(f, r, s, ns);
  if (fclose(f) != 0) perror(data);
  if (have_gnuplot) rc = plot_with("gnuplot", r, s, ns, data, png);
  if (rc != 0 && have_python) rc = plot_with("python3", r, s, ns, data, png);
  if (rc != 0)
    fprintf(stderr,
            "weft-bench: --plot %s: needs gnuplot in PATH (%s) or python3 with matplotlib (%s); "
            "install one (apt-get install gnuplot-nox, or pip install matplotlib). The table "
            "above is complete.\n",
            png, have_gnuplot ? "found, but it failed" : "not found",
            !have_python               ? "python3 not found"
            : rc == PLOT_NO_MATPLOTLIB ? "python3 found, but it cannot import matplotlib"
                                       : "found, but it failed");
  free(s);
  return rc == 0 ? 0 : -1;
}

int bench_plot_write(struct bench_report *r, const char *png) {
  char data[4200];
  FILE *f;
  int rc = -1;

  if (r->npoints == 0) {
    fprintf(stderr, "weft-bench: --plot %s: no rows to plot\n", png);
  } else if ((f = temp_file(data, sizeof(data))) != NULL) {
    fclose(f); /* plot_draw writes it by name */
    rc = plot_draw(r, png, data);
    unlink(data);
  }
  if (rc == 0) fprintf(stderr, "weft-bench: busbw plotted in %s\n", png);
  free(r->points);
  r->points = NULL;
  r->npoints = r->points_cap = 0;
  return rc;
}
