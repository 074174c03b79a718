/* Host ranks that are threads of one process, exchanging over shared
 * memory at sizes that go single-copy (WEFT_SHM_CMA_MIN, 256 KiB): reads
 * of a peer's send buffer out of place, swaps of halves in place (both
 * ranks of a pair on one buffer), and the guarded receive where only one
 * rank of the pair is in place. The threads read and write each other's
 * buffers directly (memcpy), so this suite is where a thread sanitizer
 * checks the order the shared-memory counters give those copies. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

/* 4-byte elements a message: 1.2 MB, several 1 MiB bounce pieces. */
#define COUNT ((size_t)300007)

static uint32_t value(int rank, size_t i) {
  return (uint32_t)rank << 24 ^ (uint32_t)(i * 2654435761u);
}

static void fill(uint32_t *buf, int rank, size_t from, size_t count) {
  for (size_t i = 0; i < count; i++) buf[i] = value(rank, from + i);
}

/* buf[0..count) holds rank's values from `from`. */
static int check(const char *what, int me, const uint32_t *buf, int rank, size_t from,
                 size_t count) {
  for (size_t i = 0; i < count; i++)
    if (buf[i] != value(rank, from + i))
      return harness_fail(__FILE__, __LINE__,
                          "rank %d, %s: element %zu is %#x, expected %#x (rank %d's element %zu)",
                          me, what, i, buf[i], value(rank, from + i), rank, from + i);
  return 0;
}

#define NC(call)                                                                              \
  do {                                                                                        \
    ncclResult_t res_ = (call);                                                               \
    if (res_ != ncclSuccess)                                                                  \
      return harness_fail(__FILE__, __LINE__, "%s -> %s: %s", #call, ncclGetErrorString(res_), \
                          ncclGetLastError(comm));                                            \
  } while (0)

/* A pair exchange with rank ^ 1: each side on one buffer (inplace 2), only
 * the even rank (1), or neither (0). */
static int pair(ncclComm_t comm, int me, int nranks, int inplace, uint32_t *a, uint32_t *b) {
  int peer = me ^ 1;
  if (peer >= nranks) return 0;
  int mine = inplace == 2 || (inplace == 1 && me % 2 == 0);
  uint32_t *send = mine ? b : a;
  fill(send, me, 0, COUNT);
  NC(ncclGroupStart());
  NC(ncclSend(send, COUNT, ncclUint32, peer, comm, NULL));
  NC(ncclRecv(b, COUNT, ncclUint32, peer, comm, NULL));
  NC(ncclGroupEnd());
  const char *what = inplace == 2 ? "exchange in place" : inplace ? "exchange, even rank in place"
                                                                  : "exchange out of place";
  if (check(what, me, b, peer, 0, COUNT)) return 1;
  return !mine && check(what, me, a, me, 0, COUNT); /* the send buffer is untouched */
}

static int rank_main(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  size_t total = COUNT * (size_t)nranks;
  uint32_t *a = malloc(total * sizeof(*a)), *b = malloc(total * sizeof(*b));
  if (a == NULL || b == NULL) return harness_fail(__FILE__, __LINE__, "out of memory");
  NC(ncclCommInitRank(&comm, nranks, id, rank));
  for (int round = 0; round < 2; round++)
    for (int inplace = 0; inplace <= 2; inplace++)
      if (pair(comm, rank, nranks, inplace, a, b)) return 1;
  /* AlltoAll in place: block p goes to rank p, block p comes from it. */
  for (int p = 0; p < nranks; p++) fill(b + (size_t)p * COUNT, rank, (size_t)p * COUNT, COUNT);
  NC(ncclAlltoAll(b, b, COUNT, ncclUint32, comm, NULL));
  for (int p = 0; p < nranks; p++)
    if (check("AlltoAll in place", rank, b + (size_t)p * COUNT, p, (size_t)rank * COUNT, COUNT))
      return 1;
  NC(ncclCommDestroy(comm));
  free(a);
  free(b);
  return 0;
}

START_TEST(test_threads) {
  int nranks = _i;
  char why[8192];
  int rc = harness_threads(nranks, 120, rank_main, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%d rank-threads: %s", nranks, why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("p2p_threads");
  TCase *tc = tcase_create("shm");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, test_threads, 2, 5);
  suite_add_tcase(s, tc);
  return suite_run(s);
}
