/* The arithmetic of each collective: how a byte count becomes element
 * counts, and how a time becomes algorithm and bus bandwidth. Both follow
 * nccl-tests exactly (its *GetCollByteCount and *GetBw functions), so a
 * row here reads like the same row of nccl-tests. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"

const struct bench_coll bench_colls[BENCH_NCOLLS] = {
    [BENCH_ALLREDUCE] = {"allreduce", "ncclAllReduce", 1, 0},
    [BENCH_ALLGATHER] = {"allgather", "ncclAllGather", 0, 0},
    [BENCH_REDUCESCATTER] = {"reducescatter", "ncclReduceScatter", 1, 0},
    [BENCH_BROADCAST] = {"broadcast", "ncclBroadcast", 0, 1},
    [BENCH_REDUCE] = {"reduce", "ncclReduce", 1, 1},
    [BENCH_SENDRECV] = {"sendrecv", "ncclSend/ncclRecv", 0, 0},
    [BENCH_ALLTOALL] = {"alltoall", "ncclAlltoAll", 0, 0},
    [BENCH_GATHER] = {"gather", "ncclGather", 0, 1},
    [BENCH_SCATTER] = {"scatter", "ncclScatter", 0, 1},
    [BENCH_HYPERCUBE] = {"hypercube", "ncclSend/ncclRecv", 0, 0},
};

const char *bench_coll_names(void) {
  static char names[256];

  if (!names[0])
    for (int c = 0; c < BENCH_NCOLLS; c++) {
      size_t len = strlen(names);
      snprintf(names + len, sizeof(names) - len, "%s%s", c ? ", " : "", bench_colls[c].name);
    }
  return names;
}

/* Accepts nccl-tests' binary names too: "all_reduce_perf" is allreduce. */
int bench_coll_find(const char *name) {
  char norm[64];
  size_t n = 0;

  for (const char *p = name; *p && n + 1 < sizeof(norm); p++)
    if (*p != '_' && *p != '-') norm[n++] = (char)tolower((unsigned char)*p);
  norm[n] = '\0';
  if (n > 4 && strcmp(norm + n - 4, "perf") == 0) norm[n - 4] = '\0';
  if (strcmp(norm, "bcast") == 0) return BENCH_BROADCAST;
  for (int c = 0; c < BENCH_NCOLLS; c++)
    if (strcmp(norm, bench_colls[c].name) == 0) return c;
  return -1;
}

void bench_case_size(struct bench_case *c, size_t bytes) {
  const size_t ts = bench_types[c->type].size;
  const size_t count = bytes / ts;
  const size_t n = (size_t)c->nranks;
  const size_t block = count / n;
  /* gather, scatter and hypercube: whole 16-byte blocks, as nccl-tests. */
  const size_t block16 = block & ~(16 / ts - 1);

  c->send_off = 0;
  c->recv_off = 0;
  switch (c->coll) {
    case BENCH_ALLGATHER:
      c->send_count = block;
      c->recv_count = block * n;
      c->param_count = block;
      c->send_off = block;
      break;
    case BENCH_REDUCESCATTER:
      c->send_count = block * n;
      c->recv_count = block;
      c->param_count = block;
      c->recv_off = block;
      break;
    case BENCH_ALLTOALL:
      c->send_count = block * n;
      c->recv_count = block * n;
      c->param_count = block;
      break;
    case BENCH_GATHER:
    case BENCH_HYPERCUBE:
      c->send_count = block16;
      c->recv_count = block16 * n;
      c->param_count = block16;
      c->send_off = block16;
      break;
    case BENCH_SCATTER:
      c->send_count = block16 * n;
      c->recv_count = block16;
      c->param_count = block16;
      c->recv_off = block16;
      break;
    default: /* allreduce, broadcast, reduce, sendrecv */
      c->send_count = count;
      c->recv_count = count;
      c->param_count = count;
      break;
  }
}

size_t bench_case_bytes(const struct bench_case *c) {
  size_t n = c->send_count > c->recv_count ? c->send_count : c->recv_count;
  return n * bench_types[c->type].size;
}

/* algbw is the bytes one rank's call moves per second, as nccl-tests counts
 * them; busbw scales it to what each link carries under the best algorithm,
 * so busbw is comparable across collectives and rank counts:
 *   allreduce 2(n-1)/n; allgather, reducescatter, alltoall, gather and
 *   scatter (n-1)/n; broadcast, reduce, sendrecv and hypercube 1 (the
 *   hypercube's algbw counts the n-1 blocks each rank receives). */
void bench_case_bw(const struct bench_case *c, double sec, double *algbw_out, double *busbw_out) {
  const double n = c->nranks;
  double bytes = (double)c->param_count * (double)bench_types[c->type].size;
  double factor = 1.0;

  switch (c->coll) {
    case BENCH_ALLREDUCE: factor = 2.0 * (n - 1) / n; break;
    case BENCH_ALLGATHER:
    case BENCH_REDUCESCATTER:
    case BENCH_ALLTOALL:
    case BENCH_GATHER:
    case BENCH_SCATTER:
      bytes *= n;
      factor = (n - 1) / n;
      break;
    case BENCH_HYPERCUBE: bytes *= n - 1; break;
    default: break;
  }
  *algbw_out = sec > 0 ? bytes / 1.0e9 / sec : 0.0;
  *busbw_out = *algbw_out * factor;
}
