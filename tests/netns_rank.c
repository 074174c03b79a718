/* One rank of test_netns, run inside a simulated host (netns_rank.h): every
 * collective and send/recv checked element by element, or an all-reduce
 * loop that must end in an error once the test takes the link down. */
#include "netns_rank.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define SMALL_COUNT 1031
/* 4 MiB of floats; 256 KiB with WEFT_TEST_LARGE=0 (sanitizer builds). */
static size_t large_count = 1u << 20;

static int my_rank = -1;

#define RCHECK(cond, ...)                                \
  do {                                                   \
    if (!(cond)) {                                       \
      fprintf(stderr, "netns rank %d: ", my_rank);       \
      fprintf(stderr, __VA_ARGS__);                      \
      fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__); \
      return NETNS_RANK_FAILED;                          \
    }                                                    \
  } while (0)

#define RNCCL(call)                                                        \
  do {                                                                     \
    ncclResult_t rnccl_ = (call);                                          \
    RCHECK(rnccl_ == ncclSuccess, "%s -> %d (%s): %s", #call, (int)rnccl_, \
           ncclGetErrorString(rnccl_), ncclGetLastError(NULL));            \
  } while (0)

/* Exact in float: sums of NETNS_NRANKS values stay far below 2^24. */
static float val(int rank, size_t i) {
  return (float)((rank + 1) * (int)(i % 251 + 1));
}

static float sum_val(size_t i) {
  float s = 0;
  for (int r = 0; r < NETNS_NRANKS; r++) s += val(r, i);
  return s;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Bytes sent by interface ifname in this network namespace (/proc/net/dev
 * is per namespace), or -1. */
static long long tx_bytes(const char *ifname) {
  FILE *f = fopen("/proc/net/dev", "r");
  char line[512];
  long long tx = -1;
  if (f == NULL) return -1;
  while (fgets(line, sizeof(line), f) != NULL) {
    char *colon = strchr(line, ':');
    char *name = line;
    while (*name == ' ') name++;
    if (colon == NULL || (size_t)(colon - name) != strlen(ifname) ||
        strncmp(name, ifname, strlen(ifname)) != 0)
      continue;
    unsigned long long v[9];
    if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
               &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9)
      tx = (long long)v[8];
  }
  fclose(f);
  return tx;
}

/* First index where got differs from want, or -1. */
static long first_bad(const float *got, const float *want, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (got[i] != want[i]) return (long)i;
  return -1;
}

/* The buffer of expected values: one per process, as large as the largest
 * result. */
static float *want;

/* Fails the rank unless got[i] == want_expr (of i) for every i < n. */
#define EXPECT(what, got, n, want_expr)                                                    \
  do {                                                                                     \
    size_t n_ = (n);                                                                       \
    for (size_t i = 0; i < n_; i++) want[i] = (want_expr);                                 \
    long bad_ = first_bad((got), want, n_);                                                \
    RCHECK(bad_ < 0, "%s of %zu elements: element %ld is %g, expected %g", what, n_, bad_, \
           bad_ < 0 ? 0.0 : (double)(got)[bad_], bad_ < 0 ? 0.0 : (double)want[bad_]);     \
  } while (0)

static int check_reductions(ncclComm_t comm, float *send, float *recv, size_t n, int rank) {
  const char *ifname = getenv("WEFT_NETNS_IFACE");
  long long tx0 = ifname ? tx_bytes(ifname) : -1;
  for (size_t i = 0; i < n; i++) send[i] = val(rank, i);
  RNCCL(ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, NULL));
  EXPECT("AllReduce", recv, n, sum_val(i));
  /* Every host must send the other its part of the sum: at least the
   * buffer's bytes leave through the veth. Ranks that wrongly took each
   * other for one host would use shared memory and send nothing here. */
  long long tx1 = ifname ? tx_bytes(ifname) : -1;
  if (n == large_count)
    RCHECK(tx0 >= 0 && tx1 - tx0 >= (long long)(n * sizeof(float)),
           "AllReduce of %zu bytes sent only %lld bytes through %s: not over the network?",
           n * sizeof(float), tx1 - tx0, ifname ? ifname : "(WEFT_NETNS_IFACE unset)");

  for (size_t i = 0; i < n; i++) recv[i] = -1;
  RNCCL(ncclReduce(send, recv, n, ncclFloat, ncclSum, 3, comm, NULL));
  if (rank == 3) {
    EXPECT("Reduce (root 3)", recv, n, sum_val(i));
  }

  for (size_t i = 0; i < n * NETNS_NRANKS; i++) send[i] = val(rank, i);
  RNCCL(ncclReduceScatter(send, recv, n, ncclFloat, ncclSum, comm, NULL));
  EXPECT("ReduceScatter", recv, n, sum_val((size_t)rank * n + i));
  return 0;
}

static int check_moves(ncclComm_t comm, float *send, float *recv, size_t n, int rank) {
  const size_t all = n * NETNS_NRANKS;
  for (size_t i = 0; i < all; i++) send[i] = val(rank, i);

  RNCCL(ncclAllGather(send, recv, n, ncclFloat, comm, NULL));
  EXPECT("AllGather", recv, all, val((int)(i / n), i % n));

  RNCCL(ncclBroadcast(send, recv, n, ncclFloat, 2, comm, NULL));
  EXPECT("Broadcast (root 2)", recv, n, val(2, i));

  /* Block j of rank r's send is val(r, j*n + i); it lands at block r. */
  RNCCL(ncclAlltoAll(send, recv, n, ncclFloat, comm, NULL));
  EXPECT("AlltoAll", recv, all, val((int)(i / n), (size_t)rank * n + i % n));

  for (size_t i = 0; i < all; i++) recv[i] = -1;
  RNCCL(ncclGather(send, recv, n, ncclFloat, 1, comm, NULL));
  if (rank == 1) {
    EXPECT("Gather (root 1)", recv, all, val((int)(i / n), i % n));
  }

  RNCCL(ncclScatter(send, recv, n, ncclFloat, 2, comm, NULL));
  EXPECT("Scatter (root 2)", recv, n, val(2, (size_t)rank * n + i));
  return 0;
}

/* Each rank sends to the next rank (same host or not) and to the rank two
 * on (always on the other host), in one group. */
static int check_sendrecv(ncclComm_t comm, float *send, float *recv, size_t n, int rank) {
  const int nr = NETNS_NRANKS;
  for (size_t i = 0; i < n; i++) send[i] = val(rank, i);
  RNCCL(ncclGroupStart());
  for (int d = 1; d <= 2; d++) {
    RNCCL(ncclSend(send, n, ncclFloat, (rank + d) % nr, comm, NULL));
    RNCCL(ncclRecv(recv + (size_t)(d - 1) * n, n, ncclFloat, (rank - d + nr) % nr, comm, NULL));
  }
  RNCCL(ncclGroupEnd());
  for (int d = 1; d <= 2; d++) {
    int from = (rank - d + nr) % nr;
    const float *got = recv + (size_t)(d - 1) * n;
    EXPECT(d == 1 ? "Recv from the previous rank" : "Recv from the other host", got, n,
           val(from, i));
  }
  return 0;
}

static int run_colls(ncclComm_t comm, int rank) {
  const size_t counts[] = {SMALL_COUNT, large_count};
  float *send = malloc(large_count * NETNS_NRANKS * sizeof(float));
  float *recv = malloc(large_count * NETNS_NRANKS * sizeof(float));
  int rc = 0;
  want = malloc(large_count * NETNS_NRANKS * sizeof(float));
  RCHECK(send != NULL && recv != NULL && want != NULL, "out of memory");
  for (size_t c = 0; c < 2 && rc == 0; c++) {
    rc = check_reductions(comm, send, recv, counts[c], rank);
    if (rc == 0) rc = check_moves(comm, send, recv, counts[c], rank);
    if (rc == 0) rc = check_sendrecv(comm, send, recv, counts[c], rank);
  }
  free(send);
  free(recv);
  free(want);
  return rc;
}

/* All-reduces until one fails; says on the ready fd when the loop runs. */
static int run_linkdown(ncclComm_t comm, int rank) {
  float *buf = malloc(2 * large_count * sizeof(float));
  RCHECK(buf != NULL, "out of memory");
  for (size_t i = 0; i < large_count; i++) buf[i] = val(rank, i);
  const char *fd_text = getenv("WEFT_NETNS_READY_FD");
  int ready_fd = fd_text ? atoi(fd_text) : -1;
  double start = now_s();
  ncclResult_t res = ncclSuccess;
  for (int it = 0; res == ncclSuccess && now_s() - start < 60; it++) {
    res = ncclAllReduce(buf, buf + large_count, large_count, ncclFloat, ncclSum, comm, NULL);
    if (it == 1 && ready_fd >= 0) {
      RCHECK(write(ready_fd, "r", 1) == 1, "cannot write the ready fd");
      close(ready_fd);
    }
  }
  free(buf);
  if (res == ncclSuccess) {
    fprintf(stderr, "netns rank %d: 60 s of all-reduces and no error\n", rank);
    return NETNS_RANK_NO_ERROR;
  }
  fprintf(stderr, "netns rank %d: all-reduce -> %d (%s): %s\n", rank, (int)res,
          ncclGetErrorString(res), ncclGetLastError(comm));
  ncclCommAbort(comm);
  return NETNS_RANK_OK;
}

int netns_rank_main(int rank, const char *phase) {
  my_rank = rank;
  const char *large = getenv("WEFT_TEST_LARGE");
  if (large != NULL && strcmp(large, "0") == 0) large_count = 1u << 16;
  ncclUniqueId id;
  ncclComm_t comm;
  RNCCL(ncclGetUniqueId(&id));
  RNCCL(ncclCommInitRank(&comm, NETNS_NRANKS, id, rank));
  int rc;
  if (strcmp(phase, "linkdown") == 0) return run_linkdown(comm, rank);
  rc = run_colls(comm, rank);
  if (rc == 0) RNCCL(ncclCommDestroy(comm));
  return rc;
}
