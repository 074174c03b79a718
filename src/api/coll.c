/* Collective calls of the NCCL API: every argument is checked here, with an
 * error naming the call and the argument, before anything is queued. Host
 * ranks ignore the stream (a call returns when its result is in recvbuff);
 * CUDA-engine ranks (opt-in) launch on it. */
#include <stdint.h>

#include "api/alias.h"
#include "api/check.h"
#include "api/group.h"
#include "api/redop.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "base/dtype.h"

/* count * nranks elements (AllGather's recvbuff, ReduceScatter's sendbuff),
 * or an error when that overflows. */
static ncclResult_t check_total(const char *caller, const char *count_name, size_t count,
                                const struct ncclComm *comm, size_t *total_out) {
  if (count > SIZE_MAX / (size_t)comm->nranks) {
    WARN("%s: %s %zu times %d ranks overflows the address space", caller, count_name, count,
         comm->nranks);
    return ncclInvalidArgument;
  }
  *total_out = count * (size_t)comm->nranks;
  return ncclSuccess;
}

static ncclResult_t coll_submit(struct ncclComm *comm, const struct weft_coll *coll,
                                const struct weft_redop_use *use, cudaStream_t stream) {
  TRACE(WEFT_COLL, "%s: rank %d opCount %llu count %zu %s op %d root %d sendbuff %p recvbuff %p",
        weft_func_name(coll->func), comm->rank, (unsigned long long)comm->op_seq, coll->count,
        weft_dtype_name(coll->datatype), (int)coll->op, coll->root, coll->sendbuff, coll->recvbuff);
  /* Nothing to move: once its arguments pass, a call of 0 elements queues
   * nothing and needs no peer, as in NCCL. */
  if (coll->count == 0) return ncclSuccess;
  return weft_group_add_on(comm, coll, use, (void *)stream);
}

WEFT_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream) {
  static const char caller[] = "ncclAllReduce";
  struct weft_redop_use use;
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  WEFT_CHECK(weft_redop_check(comm, caller, datatype, op, &use));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, datatype, use.premul_sum, 0));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff", sendbuff, count, datatype, 1));
  WEFT_CHECK(weft_check_comm_buffer_after(comm, caller, "recvbuff", recvbuff, count, datatype, 1,
                                          sendbuff));
  size_t bytes = count * weft_dtype_size(datatype);
  WEFT_CHECK(
      weft_check_overlap(caller, sendbuff, bytes, recvbuff, bytes, 0, "sendbuff == recvbuff"));
  struct weft_coll coll = {WEFT_FUNC_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, 0};
  return coll_submit(comm, &coll, &use, stream);
}
WEFT_ALIAS(ncclAllReduce)

WEFT_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  static const char caller[] = "ncclAllGather";
  size_t total;
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, datatype, 0, 0));
  WEFT_CHECK(check_total(caller, "sendcount", sendcount, comm, &total));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff", sendbuff, sendcount, datatype, 1));
  WEFT_CHECK(weft_check_comm_buffer_after(comm, caller, "recvbuff (sendcount * nranks elements)",
                                          recvbuff, total, datatype, 1, sendbuff));
  size_t es = weft_dtype_size(datatype);
  WEFT_CHECK(weft_check_overlap(caller, sendbuff, sendcount * es, recvbuff, total * es,
                                (ptrdiff_t)((size_t)comm->rank * sendcount * es),
                                "sendbuff == recvbuff + rank * sendcount elements"));
  struct weft_coll coll = {
      WEFT_FUNC_ALLGATHER, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0};
  return coll_submit(comm, &coll, NULL, stream);
}
WEFT_ALIAS(ncclAllGather)

WEFT_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  static const char caller[] = "ncclReduceScatter";
  struct weft_redop_use use;
  size_t total;
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  WEFT_CHECK(weft_redop_check(comm, caller, datatype, op, &use));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, datatype, use.premul_sum, 0));
  WEFT_CHECK(check_total(caller, "recvcount", recvcount, comm, &total));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff (recvcount * nranks elements)",
                                    sendbuff, total, datatype, 1));
  WEFT_CHECK(weft_check_comm_buffer_after(comm, caller, "recvbuff", recvbuff, recvcount, datatype,
                                          1, sendbuff));
  size_t es = weft_dtype_size(datatype);
  WEFT_CHECK(weft_check_overlap(caller, sendbuff, total * es, recvbuff, recvcount * es,
                                -(ptrdiff_t)((size_t)comm->rank * recvcount * es),
                                "recvbuff == sendbuff + rank * recvcount elements"));
  struct weft_coll coll = {WEFT_FUNC_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0};
  return coll_submit(comm, &coll, &use, stream);
}
WEFT_ALIAS(ncclReduceScatter)

/* Broadcast: sendbuff is read only at the root. */
WEFT_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream) {
  static const char caller[] = "ncclBroadcast";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, datatype, 0, 0));
  WEFT_CHECK(weft_check_rank_arg(caller, "root", root, comm));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "recvbuff", recvbuff, count, datatype, 1));
  if (comm->rank == root) {
    WEFT_CHECK(weft_check_comm_buffer_after(comm, caller, "sendbuff (at the root)", sendbuff, count,
                                            datatype, 1, recvbuff));
    size_t bytes = count * weft_dtype_size(datatype);
    WEFT_CHECK(
        weft_check_overlap(caller, sendbuff, bytes, recvbuff, bytes, 0, "sendbuff == recvbuff"));
  }
  struct weft_coll coll = {WEFT_FUNC_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum, root};
  return coll_submit(comm, &coll, NULL, stream);
}
WEFT_ALIAS(ncclBroadcast)

/* The in-place broadcast of NCCL 1. */
WEFT_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                ncclComm_t comm, cudaStream_t stream) {
  static const char caller[] = "ncclBcast";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, datatype, 0, 0));
  WEFT_CHECK(weft_check_rank_arg(caller, "root", root, comm));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "buff", buff, count, datatype, 1));
  struct weft_coll coll = {WEFT_FUNC_BROADCAST, buff, buff, count, datatype, ncclSum, root};
  return coll_submit(comm, &coll, NULL, stream);
}
WEFT_ALIAS(ncclBcast)

/* Reduce: recvbuff is written only at the root. */
WEFT_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  static const char caller[] = "ncclReduce";
  struct weft_redop_use use;
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  WEFT_CHECK(weft_redop_check(comm, caller, datatype, op, &use));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, datatype, use.premul_sum, 0));
  WEFT_CHECK(weft_check_rank_arg(caller, "root", root, comm));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff", sendbuff, count, datatype, 1));
  if (comm->rank == root) {
    WEFT_CHECK(weft_check_comm_buffer_after(comm, caller, "recvbuff (at the root)", recvbuff, count,
                                            datatype, 1, sendbuff));
    size_t bytes = count * weft_dtype_size(datatype);
    WEFT_CHECK(
        weft_check_overlap(caller, sendbuff, bytes, recvbuff, bytes, 0, "sendbuff == recvbuff"));
  }
  struct weft_coll coll = {WEFT_FUNC_REDUCE, sendbuff, recvbuff, count, datatype, op, root};
  return coll_submit(comm, &coll, &use, stream);
}
WEFT_ALIAS(ncclReduce)
