/* weft-bench: bus bandwidth of one collective over a sweep of sizes, in
 * nccl-tests' table format.
 *
 *   weft-bench [COLLECTIVE] [nccl-tests' flags: -b 32M -e 32M -f 1 -n 20
 *              -w 1 -c 1 -o sum -d float -t 1 -g 1 ...] [-np 2]
 *              [--json FILE] [--plot FILE.png] [--cpu | --gpu]
 *
 * Ranks = processes (-np, or mpirun's) x threads (-t) x ranks per thread
 * (-g). Each process runs its threads here; each thread runs
 * bench_thread_run (bench_loop.c) on its ranks. Whether ranks use GPU or
 * host buffers is decided once, before any rank starts (bench_mem.c).
 * docs/BENCH.md explains the columns and formulas. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench_weft.h"

#ifndef WEFT_BENCH_VERSION
#define WEFT_BENCH_VERSION "unknown"
#endif

/* Which library answered, and the NCCL version it claims: the path tells
 * weft from NVIDIA's NCCL when LD_LIBRARY_PATH or LD_PRELOAD pick one. */
static void library_name(char *buf, size_t len) {
  Dl_info info;
  int version = 0;
  const char *path = "libnccl";
  char *real = NULL;

  if (dladdr((void *)(size_t)ncclGetVersion, &info) && info.dli_fname) {
    real = realpath(info.dli_fname, NULL);
    path = real ? real : info.dli_fname;
  }
  ncclGetVersion(&version);
  snprintf(buf, len, "library %s (NCCL %d.%d.%d)", path, version / 10000, version % 10000 / 100,
           version % 100);
  free(real);
}

static void *thread_main(void *arg) {
  bench_thread_run(arg);
  return NULL;
}

/* Fills thread k of process proc: its ranks, devices and role. */
static int thread_setup(struct bench_thread *t, const struct bench_args *a, const ncclUniqueId *id,
                        int proc, int nprocs, int local_index, int k) {
  const int per_proc = a->nthreads * a->ngpus;

  t->args = a;
  t->mem = bench_mem_get(a);
  t->id = *id;
  t->nranks = nprocs * per_proc;
  t->nlocal = a->ngpus;
  t->printer = proc == 0 && k == 0;
  /* Room for the largest size, -u's shift (up to 8-byte elements), whole
   * cache lines for the in-place shifts. */
  t->buf_bytes = (a->max_bytes + 8 * (size_t)a->unalign + 63) & ~(size_t)63;
  t->ranks = calloc((size_t)t->nlocal, sizeof(*t->ranks));
  t->bufs = calloc((size_t)t->nlocal, sizeof(*t->bufs));
  t->vals = calloc((size_t)t->nlocal, sizeof(*t->vals));
  if (!t->ranks || !t->bufs || !t->vals) {
    fprintf(stderr, "weft-bench: out of memory\n");
    return -1;
  }
  /* nccl-tests' numbering; the local index picks the rank's device. */
  for (int j = 0; j < t->nlocal; j++) {
    t->ranks[j].rank = proc * per_proc + k * a->ngpus + j;
    t->ranks[j].local_index = local_index * per_proc + k * a->ngpus + j;
  }
  return 0;
}

static void thread_free(struct bench_thread *t) {
  free(t->ranks);
  free(t->bufs);
  free(t->vals);
}

/* Runs every thread; the first one in this thread, the others in new ones. */
static int threads_run(struct bench_thread *threads, int n) {
  pthread_t *tids = n > 0 ? calloc((size_t)n, sizeof(*tids)) : NULL;
  int rc = 0, started = 1;

  if (!tids) return BENCH_EXIT_ERROR;
  for (; started < n; started++)
    if (pthread_create(&tids[started], NULL, thread_main, &threads[started])) {
      fprintf(stderr, "weft-bench: cannot start thread %d\n", started);
      rc = BENCH_EXIT_ERROR;
      break;
    }
  if (rc == 0) bench_thread_run(&threads[0]);
  for (int k = 1; k < started; k++) pthread_join(tids[k], NULL);
  free(tids);
  for (int k = 0; k < started; k++) rc = threads[k].rc > rc ? threads[k].rc : rc;
  return rc;
}

/* This process's share of the ranks (bench_proc_fn). */
static int proc_run(const struct bench_args *a, const ncclUniqueId *id, int proc, int nprocs,
                    int local_index) {
  const int nranks = nprocs * a->nthreads * a->ngpus;
  struct bench_thread *threads;
  struct bench_local_sync local = {.nthreads = a->nthreads};
  char library[512];
  int rc = 0;

  if (bench_args_check_ranks(a, "weft-bench", nranks, proc == 0) != 0) return BENCH_EXIT_ERROR;
  threads = calloc((size_t)a->nthreads, sizeof(*threads));
  if (!threads) return BENCH_EXIT_ERROR;
  pthread_mutex_init(&local.mu, NULL);
  pthread_cond_init(&local.cv, NULL);
  for (int k = 0; k < a->nthreads; k++) threads[k].local = &local;
  library_name(library, sizeof(library));
  for (int k = 0; k < a->nthreads && rc == 0; k++)
    if (thread_setup(&threads[k], a, id, proc, nprocs, local_index, k) != 0) rc = BENCH_EXIT_ERROR;
  if (rc == 0 && threads[0].printer &&
      bench_report_open(&threads[0].report, a, "weft-bench", library, bench_colls[a->coll].nccl_fn,
                        nranks) != 0)
    rc = BENCH_EXIT_ERROR;
  if (rc == 0 && threads[0].printer) bench_measure_roofline(&threads[0]);
  /* -p 0 (nccl-tests' default): this thread creates every communicator of
   * the process in one group; -p 1: each thread its own. */
  if (rc == 0 && !a->parallel_init && a->nthreads > 1 &&
      bench_nccl_init_all(threads, a->nthreads) != 0)
    rc = BENCH_EXIT_ERROR;
  if (rc == 0) rc = threads_run(threads, a->nthreads);
  for (int k = 0; k < a->nthreads; k++) thread_free(&threads[k]);
  free(threads);
  pthread_cond_destroy(&local.cv);
  pthread_mutex_destroy(&local.mu);
  return rc;
}

/* --version: what is built in, and the devices a run would find. */
static void print_version(void) {
  char cuda[300] = "no";

#if WEFT_BENCH_CUDA
  char why[256];
  int ndev = bench_mem_cuda_probe(why, sizeof(why));
  if (ndev > 0)
    snprintf(cuda, sizeof(cuda), "yes, %d device%s", ndev, ndev > 1 ? "s" : "");
  else
    snprintf(cuda, sizeof(cuda), "yes, no device: %s", why);
#endif
  printf("weft-bench %s (mpi: %s, cuda: %s)\n", WEFT_BENCH_VERSION,
         bench_ranks_have_mpi() ? "yes" : "no", cuda);
}

int main(int argc, char **argv) {
  struct bench_args a;
  int rc = bench_args_parse(&a, argc, argv, BENCH_ARGS_WEFT);

  if (rc != 0) return rc < 0 ? BENCH_EXIT_ERROR : BENCH_EXIT_OK;
  if (a.show_version) {
    print_version();
    return BENCH_EXIT_OK;
  }
  if (bench_mem_choose(&a) != 0) return BENCH_EXIT_ERROR;
  return bench_ranks_launch(&a, proc_run);
}
