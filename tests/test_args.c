/* Bad arguments through the public API: each returns ncclInvalidArgument
 * with a last-error message naming the call and the argument, and queues
 * nothing, so later valid calls (on every rank) still give correct results.
 *
 * Ranks run as processes: ncclGetLastError keeps one message per process,
 * as NCCL does, and ranks in threads would overwrite each other's. */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "nccl.h"
#include "suite_run.h"

#define NRANKS 2

static const char *last_error(ncclComm_t comm) {
  const char *msg = ncclGetLastError(comm);
  return msg != NULL ? msg : "(null)";
}

/* Case-insensitive substring test. */
static int mentions(const char *msg, const char *word) {
  size_t n = strlen(word);
  for (const char *p = msg; *p; p++)
    if (strncasecmp(p, word, n) == 0) return 1;
  return 0;
}

/* Checks one rejected call: the result, and a last error that names the
 * call and (one of '|'-separated) argument names. */
static int rejected(ncclResult_t res, ncclResult_t want, ncclComm_t comm, const char *text,
                    const char *call, const char *args) {
  HCHECK(res == want, "%s -> %d (%s), expected %d (%s)", text, (int)res, ncclGetErrorString(res),
         (int)want, ncclGetErrorString(want));
  const char *msg = last_error(comm);
  HCHECK(msg[0] != '\0', "%s: ncclGetLastError is empty", text);
  HCHECK(mentions(msg, call), "%s: last error \"%s\" does not name %s", text, msg, call);
  char names[128];
  snprintf(names, sizeof names, "%s", args);
  int found = 0;
  for (char *save = NULL, *w = strtok_r(names, "|", &save); w != NULL && !found;
       w = strtok_r(NULL, "|", &save))
    found = mentions(msg, w);
  HCHECK(found, "%s: last error \"%s\" does not name the argument (%s)", text, msg, args);
  return 0;
}

#define BAD(call, comm, fn, args)                                                     \
  do {                                                                                \
    if (rejected((call), ncclInvalidArgument, (comm), #call, (fn), (args))) return 1; \
  } while (0)

/* A valid all-reduce whose result proves every rank queued the same
 * operations. */
static int good_allreduce(ncclComm_t comm, int rank, int nranks, int salt) {
  int32_t send[9], recv[9 + 2];
  for (int i = 0; i < 9; i++) send[i] = rank * 100 + i + salt;
  recv[9] = recv[10] = 0x7b7b7b7b;
  HNCCL(ncclAllReduce(send, recv, 9, ncclInt32, ncclSum, comm, NULL));
  for (int i = 0; i < 9; i++) {
    int32_t want = 100 * nranks * (nranks - 1) / 2 + nranks * (i + salt);
    HCHECK(recv[i] == want,
           "valid all-reduce after bad calls: [%d] = %d, "
           "expected %d",
           i, (int)recv[i], (int)want);
  }
  HCHECK(recv[9] == 0x7b7b7b7b && recv[10] == 0x7b7b7b7b, "valid all-reduce wrote past count");
  return 0;
}

/* Bad calls to ncclCommInitRank*, made before the real init with the same
 * id: none may join the communicator. */
static int bad_inits(int rank, int nranks, ncclUniqueId id) {
  ncclComm_t comm = NULL;
  BAD(ncclCommInitRank(NULL, nranks, id, rank), NULL, "ncclCommInitRank", "comm");
  BAD(ncclCommInitRank(&comm, nranks, id, nranks), NULL, "ncclCommInitRank", "rank");
  BAD(ncclCommInitRank(&comm, nranks, id, -1), NULL, "ncclCommInitRank", "rank");
  BAD(ncclCommInitRank(&comm, 0, id, 0), NULL, "ncclCommInitRank", "nranks");
  BAD(ncclCommInitRank(&comm, -3, id, 0), NULL, "ncclCommInitRank", "nranks");

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0xdeadbeef;
  BAD(ncclCommInitRankConfig(&comm, nranks, id, rank, &config), NULL, "ncclCommInitRankConfig",
      "magic|config");
  /* Fields NCCL refuses out of range, refused by name; unset (the
   * initializer's NCCL_CONFIG_UNDEF_INT) is the default. */
  static const struct {
    size_t off;
    int value;
    const char *name;
  } bad_fields[] = {
      {offsetof(ncclConfig_t, blocking), 7, "blocking"},
      {offsetof(ncclConfig_t, cgaClusterSize), -2, "cgaClusterSize"},
      {offsetof(ncclConfig_t, minCTAs), 0, "minCTAs"},
      {offsetof(ncclConfig_t, maxCTAs), -1, "maxCTAs"},
      {offsetof(ncclConfig_t, splitShare), 2, "splitShare"},
      {offsetof(ncclConfig_t, collnetEnable), 3, "collnetEnable"},
      {offsetof(ncclConfig_t, CTAPolicy), 9, "CTAPolicy"},
      {offsetof(ncclConfig_t, shrinkShare), -4, "shrinkShare"},
      {offsetof(ncclConfig_t, nvlsCTAs), 0, "nvlsCTAs"},
      {offsetof(ncclConfig_t, nChannelsPerNetPeer), 65, "nChannelsPerNetPeer"},
      {offsetof(ncclConfig_t, nvlinkCentricSched), 2, "nvlinkCentricSched"},
  };
  ncclConfig_t fields;
  for (size_t i = 0; i < sizeof(bad_fields) / sizeof(bad_fields[0]); i++) {
    fields = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    memcpy((char *)&fields + bad_fields[i].off, &bad_fields[i].value, sizeof(int));
    BAD(ncclCommInitRankConfig(&comm, nranks, id, rank, &fields), NULL, "ncclCommInitRankConfig",
        bad_fields[i].name);
  }
  fields = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  fields.minCTAs = 8;
  fields.maxCTAs = 4;
  BAD(ncclCommInitRankConfig(&comm, nranks, id, rank, &fields), NULL, "ncclCommInitRankConfig",
      "minCTAs");

  ncclUniqueId zero;
  memset(&zero, 0, sizeof zero);
  BAD(ncclCommInitRank(&comm, nranks, zero, rank), NULL, "ncclCommInitRank", "commId|uniqueId|id");

  ncclUniqueId ids[2] = {id, zero};
  BAD(ncclCommInitRankScalable(NULL, nranks, rank, 1, ids, NULL), NULL, "ncclCommInitRankScalable",
      "newcomm|comm");
  BAD(ncclCommInitRankScalable(&comm, nranks, nranks, 1, ids, NULL), NULL,
      "ncclCommInitRankScalable", "rank");
  BAD(ncclCommInitRankScalable(&comm, nranks, rank, 0, ids, NULL), NULL, "ncclCommInitRankScalable",
      "nId");
  BAD(ncclCommInitRankScalable(&comm, nranks, rank, nranks + 1, ids, NULL), NULL,
      "ncclCommInitRankScalable", "nId");
  BAD(ncclCommInitRankScalable(&comm, nranks, rank, 1, NULL, NULL), NULL,
      "ncclCommInitRankScalable", "commIds");
  if (nranks >= 2)
    BAD(ncclCommInitRankScalable(&comm, nranks, rank, 2, ids, NULL), NULL,
        "ncclCommInitRankScalable", "commIds[1]");
  BAD(ncclCommInitRankScalable(&comm, nranks, rank, 1, ids, &config), NULL,
      "ncclCommInitRankScalable", "magic|config");
  BAD(ncclGetUniqueId(NULL), NULL, "ncclGetUniqueId", "uniqueId");
  return 0;
}

/* Bad arguments to the collectives other than AllReduce. */
static int bad_collectives(ncclComm_t comm, int rank, int nranks) {
  float buf[8] = {0};
  const size_t half = SIZE_MAX / 2 + 1; /* times 2 or more ranks overflows */
  BAD(ncclAllGather(NULL, buf, 4, ncclFloat32, comm, NULL), comm, "ncclAllGather", "sendbuff");
  BAD(ncclAllGather(buf, NULL, 4, ncclFloat32, comm, NULL), comm, "ncclAllGather", "recvbuff");
  BAD(ncclAllGather(buf, buf, 4, ncclNumTypes, comm, NULL), comm, "ncclAllGather", "datatype");
  BAD(ncclAllGather(buf, buf, half, ncclInt8, comm, NULL), comm, "ncclAllGather",
      "sendcount|count");
  BAD(ncclReduceScatter(NULL, buf, 4, ncclFloat32, ncclSum, comm, NULL), comm,
      "ncclReduceScatter", "sendbuff");
  BAD(ncclReduceScatter(buf, NULL, 4, ncclFloat32, ncclSum, comm, NULL), comm,
      "ncclReduceScatter", "recvbuff");
  BAD(ncclReduceScatter(buf, buf, 4, ncclFloat32, ncclNumOps, comm, NULL), comm,
      "ncclReduceScatter", "op");
  BAD(ncclReduceScatter(buf, buf, half, ncclInt8, ncclSum, comm, NULL), comm,
      "ncclReduceScatter", "recvcount|count");
  BAD(ncclBroadcast(buf, buf, 4, ncclFloat32, -1, comm, NULL), comm, "ncclBroadcast", "root");
  BAD(ncclBroadcast(buf, buf, 4, ncclFloat32, nranks, comm, NULL), comm, "ncclBroadcast", "root");
  BAD(ncclBroadcast(buf, NULL, 4, ncclFloat32, 0, comm, NULL), comm, "ncclBroadcast", "recvbuff");
  BAD(ncclBroadcast(NULL, buf, 4, ncclFloat32, rank, comm, NULL), comm, "ncclBroadcast",
      "sendbuff");
  BAD(ncclBroadcast(buf, buf, 4, (ncclDataType_t)-2, 0, comm, NULL), comm, "ncclBroadcast",
      "datatype");
  BAD(ncclBcast(NULL, 4, ncclFloat32, 0, comm, NULL), comm, "ncclBcast", "buff");
  BAD(ncclBcast(buf, 4, ncclFloat32, nranks + 5, comm, NULL), comm, "ncclBcast", "root");
  BAD(ncclReduce(buf, buf, 4, ncclFloat32, ncclSum, -1, comm, NULL), comm, "ncclReduce", "root");
  BAD(ncclReduce(NULL, buf, 4, ncclFloat32, ncclSum, 0, comm, NULL), comm, "ncclReduce",
      "sendbuff");
  BAD(ncclReduce(buf, NULL, 4, ncclFloat32, ncclSum, rank, comm, NULL), comm, "ncclReduce",
      "recvbuff");
  BAD(ncclReduce(buf, buf, 4, ncclFloat32, (ncclRedOp_t)77, 0, comm, NULL), comm, "ncclReduce",
      "op");
  /* Buffers that overlap without being in place: the call would read what
   * it already wrote. */
  float big[64] = {0};
  size_t own = (size_t)rank * 4;
  BAD(ncclAllReduce(big, big + 1, 4, ncclFloat32, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "overlap");
  BAD(ncclAllGather(big + own + 1, big, 4, ncclFloat32, comm, NULL), comm, "ncclAllGather",
      "overlap");
  BAD(ncclReduceScatter(big, big + own + 2, 4, ncclFloat32, ncclSum, comm, NULL), comm,
      "ncclReduceScatter", "overlap");
  BAD(ncclBroadcast(big + 3, big, 4, ncclFloat32, rank, comm, NULL), comm, "ncclBroadcast",
      "overlap");
  BAD(ncclReduce(big, big + 2, 4, ncclFloat32, ncclSum, rank, comm, NULL), comm, "ncclReduce",
      "overlap");
  return 0;
}

/* Bad arguments to send/recv and the calls built from them. */
static int bad_p2p(ncclComm_t comm, int rank, int nranks) {
  float buf[16] = {0};
  BAD(ncclSend(buf, 4, ncclFloat32, -1, comm, NULL), comm, "ncclSend", "peer");
  BAD(ncclSend(buf, 4, ncclFloat32, nranks, comm, NULL), comm, "ncclSend", "peer");
  BAD(ncclSend(NULL, 4, ncclFloat32, 0, comm, NULL), comm, "ncclSend", "sendbuff");
  BAD(ncclSend(buf, 4, ncclNumTypes, 0, comm, NULL), comm, "ncclSend", "datatype");
  BAD(ncclSend(buf, 4, ncclFloat32, 0, NULL, NULL), NULL, "ncclSend", "comm");
  BAD(ncclRecv(buf, 4, ncclFloat32, nranks, comm, NULL), comm, "ncclRecv", "peer");
  BAD(ncclRecv(NULL, 4, ncclFloat32, 0, comm, NULL), comm, "ncclRecv", "recvbuff");
  BAD(ncclAlltoAll(NULL, buf, 2, ncclFloat32, comm, NULL), comm, "ncclAlltoAll", "sendbuff");
  BAD(ncclAlltoAll(buf, NULL, 2, ncclFloat32, comm, NULL), comm, "ncclAlltoAll", "recvbuff");
  BAD(ncclGather(buf, buf, 2, ncclFloat32, nranks, comm, NULL), comm, "ncclGather", "root");
  BAD(ncclGather(NULL, buf, 2, ncclFloat32, 0, comm, NULL), comm, "ncclGather", "sendbuff");
  BAD(ncclGather(buf, NULL, 2, ncclFloat32, rank, comm, NULL), comm, "ncclGather", "recvbuff");
  BAD(ncclScatter(buf, buf, 2, ncclFloat32, -3, comm, NULL), comm, "ncclScatter", "root");
  BAD(ncclScatter(buf, NULL, 2, ncclFloat32, 0, comm, NULL), comm, "ncclScatter", "recvbuff");
  BAD(ncclScatter(NULL, buf, 2, ncclFloat32, rank, comm, NULL), comm, "ncclScatter", "sendbuff");
  return 0;
}

/* PreMulSum operators: bad creation, bad destruction, use after destroy. */
static int bad_redops(ncclComm_t comm) {
  float buf[8] = {0}, scalar = 2.0f;
  ncclRedOp_t op;
  BAD(ncclRedOpCreatePreMulSum(NULL, &scalar, ncclFloat32, ncclScalarHostImmediate, comm), comm,
      "ncclRedOpCreatePreMulSum", "op");
  BAD(ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat32, ncclScalarHostImmediate, comm), comm,
      "ncclRedOpCreatePreMulSum", "scalar");
  BAD(ncclRedOpCreatePreMulSum(&op, &scalar, ncclNumTypes, ncclScalarHostImmediate, comm), comm,
      "ncclRedOpCreatePreMulSum", "datatype");
  BAD(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, (ncclScalarResidence_t)7, comm), comm,
      "ncclRedOpCreatePreMulSum", "residence");
  BAD(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, NULL), NULL,
      "ncclRedOpCreatePreMulSum", "comm");
  BAD(ncclRedOpDestroy(ncclSum, comm), comm, "ncclRedOpDestroy", "op");
  BAD(ncclRedOpDestroy((ncclRedOp_t)(ncclNumOps + 1000), comm), comm, "ncclRedOpDestroy", "op");

  HNCCL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  HCHECK((int)op >= (int)ncclNumOps, "PreMulSum op is %d, expected >= ncclNumOps", (int)op);
  BAD(ncclAllReduce(buf, buf, 8, ncclFloat64, op, comm, NULL), comm, "ncclAllReduce",
      "datatype|op");
  HNCCL(ncclRedOpDestroy(op, comm));
  BAD(ncclAllReduce(buf, buf, 8, ncclFloat32, op, comm, NULL), comm, "ncclAllReduce", "op");
  BAD(ncclReduceScatter(buf, buf, 4, ncclFloat32, op, comm, NULL), comm, "ncclReduceScatter",
      "op");
  BAD(ncclReduce(buf, buf, 8, ncclFloat32, op, 0, comm, NULL), comm, "ncclReduce", "op");
  BAD(ncclRedOpDestroy(op, comm), comm, "ncclRedOpDestroy", "op");
  return 0;
}

/* ncclGroupSimulateEnd: a bad ncclSimInfo_t is refused; inside a group it
 * still ends the group (the next call runs at once), dropping its
 * operations; a good one gets an estimate, and the group's operations are
 * dropped, never run. */
static int simulate(ncclComm_t comm, int nranks) {
  BAD(ncclGroupSimulateEnd(NULL), NULL, "ncclGroupSimulateEnd", "simInfo");
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  info.magic = 0x1234;
  BAD(ncclGroupSimulateEnd(&info), NULL, "ncclGroupSimulateEnd", "magic");
  int32_t send[1024], recv[1024];
  memset(send, 1, sizeof send);
  memset(recv, 0x7b, sizeof recv);
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(send, recv, 1024, ncclInt32, ncclSum, comm, NULL));
  BAD(ncclGroupSimulateEnd(&info), NULL, "ncclGroupSimulateEnd", "magic");
  for (int i = 0; i < 1024; i++)
    HCHECK(recv[i] == 0x7b7b7b7b, "a refused ncclGroupSimulateEnd ran the group (recv[%d])", i);
  HNCCL(ncclAllReduce(send, recv, 1, ncclInt32, ncclSum, comm, NULL));
  HCHECK(recv[0] == nranks * 0x01010101 && recv[1] == 0x7b7b7b7b,
         "after a refused ncclGroupSimulateEnd, an AllReduce of 1 element gave %#x, %#x: the "
         "group was left open",
         (unsigned)recv[0], (unsigned)recv[1]);
  memset(recv, 0x7b, sizeof recv);
  info = (ncclSimInfo_t)NCCL_SIM_INFO_INITIALIZER;
  HNCCL(ncclGroupStart());
  HNCCL(ncclAllReduce(send, recv, 1024, ncclInt32, ncclSum, comm, NULL));
  HNCCL(ncclAllGather(send, recv, 512 / 4, ncclInt32, comm, NULL));
  HNCCL(ncclGroupSimulateEnd(&info));
  HCHECK(info.estimatedTime > 0 && info.estimatedTime < 1e6, "estimatedTime is %g",
         (double)info.estimatedTime);
  for (int i = 0; i < 1024; i++)
    HCHECK(recv[i] == 0x7b7b7b7b, "ncclGroupSimulateEnd ran the group (recv[%d] written)", i);
  return 0;
}

/* Buffers the calls do not use may be NULL: Broadcast's sendbuff off the
 * root, Reduce's recvbuff off the root, count 0 everywhere. */
static int unused_buffers(ncclComm_t comm, int rank, int nranks) {
  int32_t buf[4] = {rank, rank, rank, rank}, out[4] = {0};
  HNCCL(ncclBroadcast(rank == 0 ? buf : NULL, out, 4, ncclInt32, 0, comm, NULL));
  HCHECK(out[3] == 0, "broadcast from root 0 gave %d", (int)out[3]);
  HNCCL(ncclReduce(buf, rank == nranks - 1 ? out : NULL, 4, ncclInt32, ncclSum, nranks - 1, comm,
                   NULL));
  if (rank == nranks - 1)
    HCHECK(out[2] == nranks * (nranks - 1) / 2, "reduce gave %d", (int)out[2]);
  HNCCL(ncclAllGather(NULL, NULL, 0, ncclFloat32, comm, NULL));
  HNCCL(ncclReduceScatter(NULL, NULL, 0, ncclFloat32, ncclMax, comm, NULL));
  HNCCL(ncclBcast(NULL, 0, ncclInt8, 0, comm, NULL));
  HNCCL(ncclSend(NULL, 0, ncclInt8, (rank + 1) % nranks, comm, NULL));
  HNCCL(ncclRecv(NULL, 0, ncclInt8, (rank + nranks - 1) % nranks, comm, NULL));
  return 0;
}

static int args_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  if (bad_inits(rank, nranks, id)) return 1;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (good_allreduce(comm, rank, nranks, 1)) return 1;

  float buf[8] = {0};
  int value = -1;
  const size_t huge = SIZE_MAX / 8 + 1;
  BAD(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclSum, NULL, NULL), NULL, "ncclAllReduce", "comm");
  BAD(ncclCommCount(NULL, &value), NULL, "ncclCommCount", "comm");
  BAD(ncclCommUserRank(NULL, &value), NULL, "ncclCommUserRank", "comm");
  BAD(ncclCommCuDevice(NULL, &value), NULL, "ncclCommCuDevice", "comm");
  BAD(ncclCommCount(comm, NULL), comm, "ncclCommCount", "count");
  BAD(ncclCommUserRank(comm, NULL), comm, "ncclCommUserRank", "rank");
  BAD(ncclGetVersion(NULL), NULL, "ncclGetVersion", "version");
  BAD(ncclAllReduce(NULL, buf, 8, ncclFloat32, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "sendbuff");
  BAD(ncclAllReduce(buf, NULL, 8, ncclFloat32, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "recvbuff");
  BAD(ncclAllReduce(buf, buf, 8, ncclNumTypes, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "datatype");
  BAD(ncclAllReduce(buf, buf, 8, (ncclDataType_t)-1, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "datatype");
  BAD(ncclAllReduce(buf, buf, 8, ncclFloat32, ncclNumOps, comm, NULL), comm, "ncclAllReduce", "op");
  BAD(ncclAllReduce(buf, buf, 8, ncclFloat32, (ncclRedOp_t)99, comm, NULL), comm, "ncclAllReduce",
      "op");
  BAD(ncclAllReduce(buf, buf, huge, ncclFloat64, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "count");
  BAD(ncclAllReduce(buf, buf, SIZE_MAX, ncclInt32, ncclMax, comm, NULL), comm, "ncclAllReduce",
      "count");

  /* Only rank 0 makes these: had any been queued, the ranks' sequences
   * would differ and the next all-reduce would be wrong or fail. */
  if (rank == 0) {
    BAD(ncclAllReduce(NULL, NULL, 3, ncclInt8, ncclSum, comm, NULL), comm, "ncclAllReduce",
        "sendbuff|recvbuff");
    BAD(ncclAllReduce(buf, buf, 4, ncclNumTypes, ncclNumOps, comm, NULL), comm, "ncclAllReduce",
        "datatype|op");
  }
  if (good_allreduce(comm, rank, nranks, 2)) return 1;

  /* Bad calls inside a group are rejected at once, too. NCCL's
   * ncclGroupEnd then reports the group's error; either answer is fine as
   * long as the communicator goes on working. */
  HNCCL(ncclGroupStart());
  BAD(ncclAllReduce(buf, NULL, 8, ncclFloat32, ncclSum, comm, NULL), comm, "ncclAllReduce",
      "recvbuff");
  ncclResult_t res = ncclGroupEnd();
  HCHECK(res == ncclSuccess || res == ncclInvalidArgument,
         "ncclGroupEnd after a rejected call -> %d (%s): %s", (int)res, ncclGetErrorString(res),
         last_error(comm));
  if (good_allreduce(comm, rank, nranks, 3)) return 1;

  /* Count 0 needs no buffers. */
  HNCCL(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL));

  /* Nor peers: a call of 0 elements queues nothing (as in NCCL). Only rank
   * 0 makes these; had one been queued, it would wait for the others (a
   * host rank's call returns when done) or put the ranks out of step. */
  if (rank == 0) {
    HNCCL(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, NULL));
    HNCCL(ncclAllGather(NULL, NULL, 0, ncclInt8, comm, NULL));
    HNCCL(ncclReduceScatter(NULL, NULL, 0, ncclInt8, ncclMax, comm, NULL));
    HNCCL(ncclBroadcast(NULL, NULL, 0, ncclInt8, 1, comm, NULL));
    HNCCL(ncclReduce(NULL, NULL, 0, ncclInt8, ncclSum, 1, comm, NULL));
    HNCCL(ncclAlltoAll(NULL, NULL, 0, ncclInt8, comm, NULL));
    HNCCL(ncclGather(NULL, NULL, 0, ncclInt8, 1, comm, NULL));
    HNCCL(ncclScatter(NULL, NULL, 0, ncclInt8, 1, comm, NULL));
  }
  if (good_allreduce(comm, rank, nranks, 5)) return 1;

  if (bad_collectives(comm, rank, nranks) || bad_p2p(comm, rank, nranks) || bad_redops(comm))
    return 1;
  if (good_allreduce(comm, rank, nranks, 7)) return 1;
  if (simulate(comm, nranks) || good_allreduce(comm, rank, nranks, 8)) return 1;
  if (unused_buffers(comm, rank, nranks) || good_allreduce(comm, rank, nranks, 9)) return 1;

  /* NCCL treats destroying or aborting NULL as a no-op; so must weft. */
  HNCCL(ncclCommDestroy(NULL));
  HNCCL(ncclCommAbort(NULL));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_bad_arguments) {
  char why[8192];
  int rc = harness_procs(NRANKS, 60, args_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* A caller built against an older nccl.h passes a shorter ncclConfig_t.
 * The struct is placed to end at a page the process may not touch, so a
 * library reading past config->size crashes the rank. */
static int old_config_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  char *mem = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  HCHECK(mem != MAP_FAILED, "mmap failed");
  HCHECK(mprotect(mem + page, page, PROT_NONE) == 0, "mprotect failed");
  size_t old_size = offsetof(ncclConfig_t, commName);
  ncclConfig_t full = NCCL_CONFIG_INITIALIZER;
  full.size = old_size;
  full.version = NCCL_VERSION(2, 17, 1);
  full.blocking = 1;
  char *at = mem + page - old_size;
  memcpy(at, &full, old_size);

  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRankConfig(&comm, nranks, id, rank, (ncclConfig_t *)at));
  HCHECK(comm != NULL, "no communicator");
  if (good_allreduce(comm, rank, nranks, 4)) return 1;
  HNCCL(ncclCommDestroy(comm));
  munmap(mem, 2 * page);
  return 0;
}

START_TEST(test_old_config_size) {
  char why[8192];
  int rc = harness_procs(NRANKS, 60, old_config_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* A NULL config is allowed and means the defaults; a config whose hints
 * NCCL accepts (weft ignores them) makes a working child of a split. */
static int null_config_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL, child = NULL;
  HNCCL(ncclCommInitRankConfig(&comm, nranks, id, rank, NULL));
  if (good_allreduce(comm, rank, nranks, 5)) return 1;
  ncclConfig_t hints = NCCL_CONFIG_INITIALIZER;
  hints.cgaClusterSize = 4;
  hints.minCTAs = 2;
  hints.maxCTAs = 2;
  hints.splitShare = 1;
  hints.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO;
  hints.nvlsCTAs = 16;
  hints.nChannelsPerNetPeer = 64;
  hints.nvlinkCentricSched = 0;
  HNCCL(ncclCommSplit(comm, 0, rank, &child, &hints));
  if (good_allreduce(child, rank, nranks, 6)) return 1;
  HNCCL(ncclCommDestroy(child));
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_null_config) {
  char why[8192];
  int rc = harness_procs(NRANKS, 60, null_config_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* NCCL 2.28's device API, which nccl.h does not declare (src/api/unsupported.c). */
struct ncclDevComm;
struct ncclDevCommRequirements;
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const struct ncclDevCommRequirements *reqs,
                               struct ncclDevComm *outDevComm);

/* A call weft does not implement says so (ncclInvalidUsage, named in the
 * last error) and leaves the communicator working. */
static int unsupported_rank(int rank, int nranks, ncclUniqueId id, void *arg) {
  (void)arg;
  ncclComm_t comm = NULL;
  HNCCL(ncclCommInitRank(&comm, nranks, id, rank));
  if (rejected(ncclDevCommCreate(comm, NULL, NULL), ncclInvalidUsage, comm,
               "ncclDevCommCreate(...)", "ncclDevCommCreate", "device API"))
    return 1;
  if (good_allreduce(comm, rank, nranks, 6)) return 1;
  HNCCL(ncclCommDestroy(comm));
  return 0;
}

START_TEST(test_unsupported_call) {
  char why[8192];
  int rc = harness_procs(NRANKS, 60, unsupported_rank, NULL, why, sizeof why);
  ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

int main(void) {
  harness_env_defaults();
  Suite *s = suite_create("args");
  TCase *tc = tcase_create("args");
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_bad_arguments);
  tcase_add_test(tc, test_old_config_size);
  tcase_add_test(tc, test_null_config);
  tcase_add_test(tc, test_unsupported_call);
  suite_add_tcase(s, tc);

  return suite_run(s);
}
