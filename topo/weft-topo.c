/* weft-topo: what weft sees of this machine (or of an NCCL topology XML):
 * the GPU/NIC matrix as nvidia-smi topo -m prints it, rings, NICs and
 * transports; --json, --dot, --dump-xml; --measure for P2P bandwidth. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"

#include "base/debug.h"
#include "topo/measure.h"
#include "topo/topo.h"

#ifndef WEFT_TOPO_MEASURE
#define WEFT_TOPO_MEASURE 0
#endif
#ifndef WEFT_TOPO_VERSION
#define WEFT_TOPO_VERSION "unknown"
#endif

static void usage(FILE *out) {
  fprintf(out,
          "usage: weft-topo [--json | --dot | --measure] [--topo-file FILE] [--dump-xml FILE]\n"
          "                 [--size BYTES] [--reps N] [--version]\n"
          "  (default)        GPU/NIC matrix, CPU and NUMA affinity, rings, NICs, transports\n"
          "  --json           the same as JSON (gpus, nics, paths.gpu_gpu, paths.gpu_nic, ...)\n"
          "  --dot            the graph for Graphviz (weft-topo --dot | dot -Tsvg > topo.svg)\n"
          "  --measure        P2P copy bandwidth and latency between every GPU pair\n"
          "  --topo-file FILE read an NCCL topology XML instead of detecting (as NCCL_TOPO_FILE)\n"
          "  --dump-xml FILE  write what weft sees in NCCL's XML schema (as NCCL_TOPO_DUMP_FILE)\n"
          "  --size, --reps   bytes per copy (default 64M) and repetitions for --measure\n"
          "  --version        weft's version and the NCCL version it implements\n"
          "Environment: NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE, NCCL_P2P_LEVEL, NCCL_P2P_DISABLE,\n"
          "NCCL_SHM_DISABLE, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=GRAPH.\n");
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
  if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
  return v > 0 ? (size_t)v : 0;
}

static int measure(size_t bytes, int reps) {
#if WEFT_TOPO_MEASURE
  return weft_topo_measure(stdout, bytes, reps);
#else
  (void)bytes, (void)reps;
  fprintf(stderr,
          "weft-topo: --measure needs CUDA, and this weft-topo was built without it "
          "(no CUDA toolkit or nvcc at configure time)\n");
  return 2;
#endif
}

int main(int argc, char **argv) {
  const char *mode = "matrix", *file = NULL, *dump = NULL;
  size_t bytes = 64 << 20;
  int reps = 10;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--json") || !strcmp(a, "--dot") || !strcmp(a, "--measure")) {
      mode = a + 2;
    } else if (!strcmp(a, "--topo-file") && i + 1 < argc) {
      file = argv[++i];
    } else if (!strcmp(a, "--dump-xml") && i + 1 < argc) {
      dump = argv[++i];
    } else if (!strcmp(a, "--size") && i + 1 < argc) {
      bytes = parse_size(argv[++i]);
    } else if (!strcmp(a, "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(a, "--version")) {
      printf("weft-topo %s (implements NCCL %d.%d.%d)\n", WEFT_TOPO_VERSION, NCCL_MAJOR, NCCL_MINOR,
             NCCL_PATCH);
      return 0;
    } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "weft-topo: unknown or incomplete argument '%s'\n", a);
      usage(stderr);
      return 2;
    }
  }
  if (!strcmp(mode, "measure")) {
    if (bytes == 0 || reps <= 0) {
      fprintf(stderr, "weft-topo: --size and --reps must be positive\n");
      return 2;
    }
    return measure(bytes, reps);
  }
  /* Flags beat the environment; both reach the same loader. */
  if (file != NULL) setenv("NCCL_TOPO_FILE", file, 1);
  if (dump != NULL) setenv("NCCL_TOPO_DUMP_FILE", dump, 1);
  struct weft_topo *t = NULL;
  if (weft_topo_create(&t) != ncclSuccess) {
    fprintf(stderr, "weft-topo: no topology: %s\n", weft_last_error());
    return 1;
  }
  if (!strcmp(mode, "json"))
    weft_topo_print_json(t, stdout);
  else if (!strcmp(mode, "dot"))
    weft_topo_print_dot(t, stdout);
  else
    weft_topo_print_matrix(t, stdout);
  weft_topo_free(t);
  return 0;
}
