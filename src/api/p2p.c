/* Point-to-point calls: ncclSend and ncclRecv, and NCCL 2.28's AlltoAll,
 * Gather and Scatter, which are grouped sends and receives (as NCCL itself
 * builds them): an implicit ncclGroupStart/End around them, or, inside the
 * caller's group, simply more of its operations. Every argument is checked
 * before the first operation is added, so a rejected call adds nothing. */
#include <stdint.h>

#include "api/alias.h"
#include "api/check.h"
#include "api/group.h"
#include "api/redop.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/device.h"
#include "base/dtype.h"

/* Adds one send or receive (already checked) to the calling thread's group;
 * device-buffer ranks run it on stream (host ranks ignore it). */
static ncclResult_t p2p_add(struct ncclComm *comm, enum weft_func func, const void *buf,
                            size_t count, ncclDataType_t datatype, int peer, cudaStream_t stream) {
  struct weft_coll coll = {
      .func = func,
      .sendbuff = func == WEFT_FUNC_SEND ? buf : NULL,
      .recvbuff = func == WEFT_FUNC_RECV ? (void *)(uintptr_t)buf : NULL,
      .count = count,
      .datatype = datatype,
      .op = ncclSum,
      .root = peer,
  };
  TRACE(WEFT_P2P, "%s: rank %d peer %d count %zu %s buff %p",
        func == WEFT_FUNC_SEND ? "ncclSend" : "ncclRecv", comm->rank, peer, count,
        weft_dtype_name(datatype), buf);
  return weft_group_add_on(comm, &coll, NULL, (void *)stream);
}

static ncclResult_t p2p_call(const char *caller, enum weft_func func, const void *buf, size_t count,
                             ncclDataType_t datatype, int peer, struct ncclComm *comm,
                             cudaStream_t stream) {
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, ncclInt8, 0, 1));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  WEFT_CHECK(weft_check_rank_arg(caller, "peer", peer, comm));
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, func == WEFT_FUNC_SEND ? "sendbuff" : "recvbuff",
                                    buf, count, datatype, 1));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  return p2p_add(comm, func, buf, count, datatype, peer, stream);
}

WEFT_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                               int peer, ncclComm_t comm, cudaStream_t stream) {
  /* Host ranks: returns when sent (in a group: at ncclGroupEnd). */
  return p2p_call("ncclSend", WEFT_FUNC_SEND, sendbuff, count, datatype, peer, comm, stream);
}
WEFT_ALIAS(ncclSend)

WEFT_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream) {
  return p2p_call("ncclRecv", WEFT_FUNC_RECV, recvbuff, count, datatype, peer, comm, stream);
}
WEFT_ALIAS(ncclRecv)

/* A block of `count` elements at index i of a buffer. */
static const char *block(const void *base, size_t i, size_t count, ncclDataType_t datatype) {
  return (const char *)base + i * count * weft_dtype_size(datatype);
}

/* Closes the implicit group the calls below open; on an error in the middle
 * the group still ends, so the thread is not left inside it. */
static ncclResult_t implicit_group_end(ncclResult_t res) {
  ncclResult_t r = ncclGroupEnd();
  return res != ncclSuccess ? res : r;
}

WEFT_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  static const char caller[] = "ncclAlltoAll";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, ncclInt8, 0, 1));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  int n = comm->nranks;
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff", sendbuff, count, datatype, n));
  WEFT_CHECK(weft_check_comm_buffer_after(comm, caller, "recvbuff", recvbuff, count, datatype, n,
                                          sendbuff));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  if (count == 0) return ncclSuccess; /* as a collective of 0 elements (api/coll.c) */
  ncclResult_t res = ncclSuccess;
  ncclGroupStart();
  for (int p = 0; p < n && res == ncclSuccess; p++) {
    /* The rank's own block, in place: nothing to move (as in Gather and
     * Scatter below), and no send and receive for the group to pair. */
    if (p == comm->rank &&
        block(sendbuff, (size_t)p, count, datatype) == block(recvbuff, (size_t)p, count, datatype))
      continue;
    res = p2p_add(comm, WEFT_FUNC_SEND, block(sendbuff, (size_t)p, count, datatype), count,
                  datatype, p, stream);
    if (res == ncclSuccess)
      res = p2p_add(comm, WEFT_FUNC_RECV, block(recvbuff, (size_t)p, count, datatype), count,
                    datatype, p, stream);
  }
  return implicit_group_end(res);
}
WEFT_ALIAS(ncclAlltoAll)

/* Gather and Scatter: the root moves one block per rank between `blocks`
 * (count elements per rank, in rank order) and every rank's own buffer;
 * `blocks_func` is what the root does with the blocks (RECV: gather, SEND:
 * scatter). In place (the own buffer is the root's block) the root copies
 * nothing. */
static ncclResult_t rooted_blocks(struct ncclComm *comm, enum weft_func blocks_func,
                                  const void *blocks, const void *own, size_t count,
                                  ncclDataType_t datatype, int root, cudaStream_t stream) {
  enum weft_func own_func = blocks_func == WEFT_FUNC_RECV ? WEFT_FUNC_SEND : WEFT_FUNC_RECV;
  if (count == 0) return ncclSuccess; /* as a collective of 0 elements (api/coll.c) */
  ncclResult_t res = ncclSuccess;
  ncclGroupStart();
  if (comm->rank != root) {
    res = p2p_add(comm, own_func, own, count, datatype, root, stream);
    return implicit_group_end(res);
  }
  int in_place = own == block(blocks, (size_t)root, count, datatype);
  for (int p = 0; p < comm->nranks && res == ncclSuccess; p++) {
    if (p == root && in_place) continue;
    if (p == root) res = p2p_add(comm, own_func, own, count, datatype, root, stream);
    if (res == ncclSuccess)
      res = p2p_add(comm, blocks_func, block(blocks, (size_t)p, count, datatype), count, datatype,
                    p, stream);
  }
  return implicit_group_end(res);
}

/* Gather: at the root, rank i's count elements land at recvbuff + i*count;
 * in place (sendbuff is the root's own block) the root copies nothing. */
WEFT_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream) {
  static const char caller[] = "ncclGather";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, ncclInt8, 0, 1));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  WEFT_CHECK(weft_check_rank_arg(caller, "root", root, comm));
  int n = comm->nranks, me = comm->rank;
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff", sendbuff, count, datatype, 1));
  if (me == root)
    WEFT_CHECK(weft_check_comm_buffer(comm, caller, "recvbuff (at the root)", recvbuff, count,
                                      datatype, n));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  return rooted_blocks(comm, WEFT_FUNC_RECV, recvbuff, sendbuff, count, datatype, root, stream);
}
WEFT_ALIAS(ncclGather)

/* Scatter: the root sends sendbuff + i*count to rank i; in place (recvbuff
 * is the root's own block) the root copies nothing. */
WEFT_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  static const char caller[] = "ncclScatter";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(weft_check_engine_supports(comm, caller, ncclInt8, 0, 1));
  WEFT_CHECK(weft_dtype_check(caller, datatype));
  WEFT_CHECK(weft_check_rank_arg(caller, "root", root, comm));
  int n = comm->nranks, me = comm->rank;
  WEFT_CHECK(weft_check_comm_buffer(comm, caller, "recvbuff", recvbuff, count, datatype, 1));
  if (me == root)
    WEFT_CHECK(weft_check_comm_buffer(comm, caller, "sendbuff (at the root)", sendbuff, count,
                                      datatype, n));
  WEFT_CHECK(weft_check_comm_stream(comm, caller, stream));
  return rooted_blocks(comm, WEFT_FUNC_SEND, sendbuff, recvbuff, count, datatype, root, stream);
}
WEFT_ALIAS(ncclScatter)
