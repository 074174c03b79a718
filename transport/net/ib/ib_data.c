/* net/ib's data path: isend, irecv, test and iflush as thin verbs glue
 * around the state machine of ib_fifo.c, which decides everything (ib_fifo.h
 * has the scheme): irecv RDMA-writes a CTS into the sender's FIFO; isend
 * RDMA-writes-with-immediate its pieces into the receive buffer; test polls
 * the comm's CQ and feeds every completion to the state machine. An error
 * the state machine or the async thread recorded is returned by every
 * later call on the comm, WARNed once. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"
#include "transport/net/ib/ib_net.h"

/* The comm's first error, WARNed once; ncclSuccess when there is none. */
static ncclResult_t comm_err(struct weft_ib_comm *c) {
  int a = atomic_load(&c->async_err);
  if (a != ncclSuccess) return (ncclResult_t)a; /* the async thread WARNed */
  int e = c->is_send ? c->s.err : c->r.err;
  if (e != ncclSuccess && !c->warned) {
    c->warned = 1;
    WARN("%s", c->is_send ? c->s.why : c->r.why);
  }
  return (ncclResult_t)e;
}

static ncclResult_t post_fail(struct weft_ib_comm *c, const char *what, int err) {
  WARN("NET/IB: %s:%d with peer %s: %s failed: %s", c->port->d.name, c->port->d.port, c->peer, what,
       strerror(err));
  c->warned = 1;
  if (c->is_send && c->s.err == ncclSuccess) c->s.err = ncclSystemError;
  if (!c->is_send && c->r.err == ncclSuccess) c->r.err = ncclSystemError;
  return ncclSystemError;
}

/* RDMA moves registered memory only: a buffer without a handle would
 * fail later as a protection error; say it now. */
static ncclResult_t no_mhandle(struct weft_ib_comm *c, const char *call, size_t size) {
  WARN("NET/IB: %s of %zu bytes with peer %s without a memory handle (reg_mr the buffer first)",
       call, size, c->peer);
  return ncclInvalidArgument;
}

/* Posts the pieces of the state machine's plan. */
static int post_plan(struct weft_ib_comm *c, char *data, uint32_t lkey) {
  const struct weft_ib_send_plan *p = &c->s.plan;
  for (int i = 0; i < p->npieces; i++) {
    const struct weft_ib_piece *pc = &p->p[i];
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)(data + pc->offset),
                          .length = (uint32_t)pc->len,
                          .lkey = lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = pc->wr_id;
    wr.sg_list = &sge;
    wr.num_sge = pc->len > 0 ? 1 : 0;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(pc->imm);
    wr.wr.rdma.remote_addr = p->raddr + pc->offset;
    wr.wr.rdma.rkey = p->rkey;
    int err = ibv_post_send(c->qps[pc->qp], &wr, &bad);
    if (err != 0) return err;
  }
  return 0;
}

ncclResult_t weft__ib_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request) {
  struct weft_ib_comm *c = send_comm;
  const struct weft_ib_mh *mh = mhandle;
  (void)tag;
  *request = NULL;
  WEFT_CHECK(comm_err(c));
  if (size > 0 && mh == NULL) return no_mhandle(c, "isend", size);
  int idx;
  ncclResult_t res = weft_ib_send_post(&c->s, c->fifo, size, &idx);
  if (res == ncclInvalidUsage) {
    /* The zero-byte notice, so the receiver fails too; then the error. */
    post_plan(c, data, 0);
    return comm_err(c);
  }
  WEFT_CHECK(comm_err(c));
  if (idx < 0) return ncclSuccess;
  int err = post_plan(c, data, mh != NULL ? mh->mr->lkey : 0);
  if (err != 0) return post_fail(c, "ibv_post_send of a message", err);
  c->reqs[idx] = (struct weft_ib_req){.comm = c, .kind = WEFT_IB_WR_DATA, .idx = idx};
  *request = &c->reqs[idx];
  return ncclSuccess;
}

ncclResult_t weft__ib_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                            void **mhandles, void **request) {
  struct weft_ib_comm *c = recv_comm;
  (void)tags;
  *request = NULL;
  if (n != 1) {
    WARN("NET/IB: irecv of %d buffers at once; this network takes 1 (max_recvs)", n);
    return ncclInvalidArgument;
  }
  WEFT_CHECK(comm_err(c));
  const struct weft_ib_mh *mh = mhandles[0];
  if (sizes[0] > 0 && mh == NULL) return no_mhandle(c, "irecv", sizes[0]);
  int idx;
  WEFT_CHECK(weft_ib_recv_post(&c->r, (uint64_t)(uintptr_t)data[0], sizes[0],
                               mh != NULL ? mh->mr->rkey : 0, &idx));
  if (idx < 0) return ncclSuccess;
  struct ibv_sge sge = {
      .addr = (uint64_t)(uintptr_t)&c->r.cts, .length = sizeof(c->r.cts), .lkey = 0};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = c->r.cts_wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.wr.rdma.remote_addr = c->rfifo_addr + (uint64_t)c->r.cts_slot * sizeof(struct weft_ib_cts);
  wr.wr.rdma.rkey = c->rfifo_rkey;
  int err = ibv_post_send(c->qps[0], &wr, &bad);
  if (err != 0) return post_fail(c, "ibv_post_send of a CTS", err);
  c->reqs[idx] = (struct weft_ib_req){.comm = c, .kind = WEFT_IB_WR_RECV, .idx = idx};
  *request = &c->reqs[idx];
  return ncclSuccess;
}

ncclResult_t weft__ib_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                             void **request) {
  struct weft_ib_comm *c = recv_comm;
  *request = NULL;
  WEFT_CHECK(comm_err(c));
  const struct weft_ib_mh *mh = n > 0 ? mhandles[0] : NULL;
  /* Host memory, an empty receive, or no flush QP: nothing to flush. */
  if (mh == NULL || mh->type == WEFT_NET_PTR_HOST || sizes[0] == 0 || c->flush_qp == NULL)
    return ncclSuccess;
  int idx;
  uint64_t wr_id;
  WEFT_CHECK(weft_ib_flush_post(&c->r, &idx, &wr_id));
  if (idx < 0) return ncclSuccess;
  /* A read of one byte of the buffer: it completes after the NIC's
   * earlier writes into it are visible (NCCL's GPUDirect flush). */
  struct ibv_sge sge = {
      .addr = (uint64_t)(uintptr_t)c->flush_buf, .length = 1, .lkey = c->flush_mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[0];
  wr.wr.rdma.rkey = mh->mr->rkey;
  int err = ibv_post_send(c->flush_qp, &wr, &bad);
  if (err != 0) return post_fail(c, "ibv_post_send of a flush read", err);
  c->flush_reqs[idx] = (struct weft_ib_req){.comm = c, .kind = WEFT_IB_WR_FLUSH, .idx = idx};
  *request = &c->flush_reqs[idx];
  return ncclSuccess;
}

static const char *status_str(enum ibv_wc_status st, char *buf, size_t len) {
  if (weft__ib_v.wc_status_str != NULL) return weft__ib_v.wc_status_str(st);
  snprintf(buf, len, "status %d", (int)st);
  return buf;
}

/* Feeds what the CQ holds to the state machine. */
static ncclResult_t poll_cq(struct weft_ib_comm *c) {
  struct ibv_wc wc[16];
  char buf[32];
  int n = ibv_poll_cq(c->cq, 16, wc);
  if (n < 0) {
    WARN("NET/IB: %s:%d with peer %s: ibv_poll_cq failed (%d)", c->port->d.name, c->port->d.port,
         c->peer, n);
    return post_fail(c, "ibv_poll_cq", EIO);
  }
  for (int i = 0; i < n; i++) {
    int ok = wc[i].status == IBV_WC_SUCCESS;
    ncclResult_t as = ok ? ncclSuccess : weft_ib_wc_fail_as(wc[i].status);
    const char *st = ok ? "" : status_str(wc[i].status, buf, sizeof(buf));
    if (c->is_send) {
      weft_ib_send_complete(&c->s, wc[i].wr_id, ok, as, st);
      continue;
    }
    weft_ib_recv_complete(&c->r, wc[i].wr_id, ntohl(wc[i].imm_data), wc[i].byte_len, ok, as, st);
    if (ok && weft_ib_wr_kind_of(wc[i].wr_id) == WEFT_IB_WR_RECV) {
      int err = weft__ib_comm_repost(c, weft_ib_wr_qp(wc[i].wr_id));
      if (err != 0) return post_fail(c, "ibv_post_recv", err);
    }
  }
  return ncclSuccess;
}

ncclResult_t weft__ib_test(void *request, int *done, size_t *sizes) {
  struct weft_ib_req *q = request;
  struct weft_ib_comm *c = q->comm;
  *done = 0;
  WEFT_CHECK(comm_err(c));
  WEFT_CHECK(poll_cq(c));
  WEFT_CHECK(comm_err(c));
  size_t size = 0;
  if (q->kind == WEFT_IB_WR_DATA)
    WEFT_CHECK(weft_ib_send_test(&c->s, q->idx, done, &size));
  else if (q->kind == WEFT_IB_WR_RECV)
    WEFT_CHECK(weft_ib_recv_test(&c->r, q->idx, done, &size));
  else
    WEFT_CHECK(weft_ib_flush_test(&c->r, q->idx, done));
  if (*done && sizes != NULL) sizes[0] = size;
  return ncclSuccess;
}
