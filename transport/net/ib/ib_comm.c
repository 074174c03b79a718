/* A net/ib comm's verbs objects: its completion queue, its RC queue pairs
 * (NCCL_IB_QPS_PER_CONNECTION), taken INIT -> RTR -> RTS with the
 * attributes ib_qp_attr.c builds from what the peer sent, the sender's CTS
 * FIFO, the receiver's posted receives and its flush QP (connected to
 * itself, for iflush's RDMA read); and their teardown. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/ib/ib_net.h"

static struct ibv_qp *qp_create(struct weft_ib_comm *c) {
  struct ibv_qp_init_attr a;
  memset(&a, 0, sizeof(a));
  a.send_cq = c->cq;
  a.recv_cq = c->cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = WEFT_IB_SQ_DEPTH;
  a.cap.max_recv_wr = WEFT_IB_RQ_DEPTH;
  a.cap.max_send_sge = 1;
  a.cap.max_recv_sge = 1;
  a.cap.max_inline_data = sizeof(struct weft_ib_cts);
  struct ibv_qp *qp = weft__ib_v.create_qp(c->port->pd, &a);
  if (qp == NULL) return NULL;
  struct ibv_qp_attr init;
  memset(&init, 0, sizeof(init));
  init.qp_state = IBV_QPS_INIT;
  init.pkey_index = 0;
  init.port_num = (uint8_t)c->port->d.port;
  init.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (weft__ib_v.modify_qp(
          qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    weft__ib_v.destroy_qp(qp);
    return NULL;
  }
  return qp;
}

/* This side's half of the handshake. */
void weft__ib_comm_wire(const struct weft_ib_comm *c, uint64_t nonce, struct weft_ib_wire *w) {
  memset(w, 0, sizeof(*w));
  w->magic = WEFT_IB_MAGIC;
  w->nonce = nonce;
  w->nqps = (uint32_t)c->nqps;
  w->lid = c->port->lid;
  w->link = (uint32_t)c->port->d.link;
  w->mtu = (uint32_t)c->port->d.mtu;
  w->psn = c->psn;
  memcpy(w->gid, c->port->gid, sizeof(w->gid));
  if (c->fifo_mr != NULL) {
    w->fifo_addr = (uint64_t)(uintptr_t)c->fifo;
    w->fifo_rkey = c->fifo_mr->rkey;
  }
  for (int i = 0; i < c->nqps; i++) w->qpn[i] = c->qps[i]->qp_num;
}

ncclResult_t weft__ib_comm_create(struct weft_ib_port *p, int is_send, int nqps, const char *peer,
                                  struct weft_ib_comm **out) {
  struct weft_ib_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    WARN("NET/IB: out of memory for a comm with %s", peer);
    return ncclSystemError;
  }
  c->is_send = is_send;
  c->port = p;
  c->nqps = nqps;
  snprintf(c->peer, sizeof(c->peer), "%s", peer);
  char name[192];
  snprintf(name, sizeof(name), "%s:%d with peer %s", p->d.name, p->d.port, peer);
  weft_ib_sender_init(&c->s, nqps, 0, name);
  weft_ib_receiver_init(&c->r, nqps, 0, name);
  if (getrandom(&c->psn, sizeof(c->psn), 0) != (ssize_t)sizeof(c->psn)) c->psn = 0;
  c->psn &= 0xffffff;
  const char *failed = NULL;
  c->cq =
      weft__ib_v.create_cq(p->ctx, nqps * (WEFT_IB_SQ_DEPTH + WEFT_IB_RQ_DEPTH) + 1, NULL, NULL, 0);
  if (c->cq == NULL) failed = "ibv_create_cq";
  for (int i = 0; failed == NULL && i < nqps; i++)
    if ((c->qps[i] = qp_create(c)) == NULL) failed = "ibv_create_qp / INIT";
  if (failed == NULL && is_send) {
    /* Page-aligned, so the registration covers whole pages of its own. */
    if (posix_memalign((void **)&c->fifo, 4096, 4096) != 0) c->fifo = NULL;
    if (c->fifo != NULL) memset(c->fifo, 0, 4096);
    if (c->fifo == NULL || (c->fifo_mr = weft__ib_reg_host(p, c->fifo, 4096)) == NULL)
      failed = "registering the CTS FIFO";
  }
  if (failed != NULL) {
    WARN("NET/IB: %s:%d: %s failed for a connection with %s", p->d.name, p->d.port, failed, peer);
    weft__ib_comm_destroy(c);
    return ncclSystemError;
  }
  *out = c;
  return ncclSuccess;
}

static int qp_connect(struct weft_ib_comm *c, struct ibv_qp *qp, const struct weft_ib_wire *w,
                      uint32_t qpn) {
  struct weft_ib_qp_conf conf;
  struct weft_ib_qp_peer rem = {
      .qpn = qpn, .lid = (uint16_t)w->lid, .link = (enum weft_ib_link)w->link, .mtu = (int)w->mtu};
  memcpy(rem.gid, w->gid, sizeof(rem.gid));
  weft_ib_qp_conf_get(&conf);
  struct ibv_qp_attr a;
  int mask = weft_ib_qp_rtr_attr(&conf, &c->port->d, &rem, &a);
  a.rq_psn = w->psn;
  if (weft__ib_v.modify_qp(qp, &a, mask) != 0) return -1;
  mask = weft_ib_qp_rts_attr(&conf, &a);
  a.sq_psn = c->psn;
  return weft__ib_v.modify_qp(qp, &a, mask);
}

static int post_recv(struct weft_ib_comm *c, int q) {
  struct ibv_recv_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = weft_ib_wr_id(WEFT_IB_WR_RECV, q, 0);
  return ibv_post_recv(c->qps[q], &wr, &bad);
}

int weft__ib_comm_repost(struct weft_ib_comm *c, int q) {
  return post_recv(c, q);
}

/* The receiver's flush QP, connected to itself, and the byte it reads into. */
static const char *flush_setup(struct weft_ib_comm *c) {
  if (!c->port->gdr.dmabuf && !c->port->gdr.peermem) return NULL; /* no device memory: no flush */
  if ((c->flush_qp = qp_create(c)) == NULL) return "creating the flush QP";
  if (posix_memalign((void **)&c->flush_buf, 64, 64) != 0) c->flush_buf = NULL;
  if (c->flush_buf == NULL || (c->flush_mr = weft__ib_reg_host(c->port, c->flush_buf, 64)) == NULL)
    return "registering the flush buffer";
  struct weft_ib_wire self;
  weft__ib_comm_wire(c, 0, &self);
  self.psn = c->psn;
  if (qp_connect(c, c->flush_qp, &self, c->flush_qp->qp_num) != 0)
    return "connecting the flush QP to itself";
  return NULL;
}

ncclResult_t weft__ib_comm_connect(struct weft_ib_comm *c, const struct weft_ib_wire *w) {
  const char *failed = NULL;
  if ((int)w->nqps != c->nqps) failed = "the peer's QP count differs";
  for (int i = 0; failed == NULL && i < c->nqps; i++)
    if (qp_connect(c, c->qps[i], w, w->qpn[i]) != 0) failed = "ibv_modify_qp to RTR/RTS";
  if (failed == NULL && c->is_send) {
    weft__ib_comm_link(c);
    return ncclSuccess;
  }
  c->rfifo_addr = w->fifo_addr;
  c->rfifo_rkey = w->fifo_rkey;
  for (int i = 0; failed == NULL && i < c->nqps; i++)
    for (int k = 0; failed == NULL && k < WEFT_IB_RQ_DEPTH; k++)
      if (post_recv(c, i) != 0) failed = "ibv_post_recv";
  if (failed == NULL) failed = flush_setup(c);
  if (failed != NULL) {
    WARN("NET/IB: %s:%d: connection with %s: %s failed (%d QPs here, %u there)", c->port->d.name,
         c->port->d.port, c->peer, failed, c->nqps, w->nqps);
    return ncclSystemError;
  }
  weft__ib_comm_link(c);
  return ncclSuccess;
}

void weft__ib_comm_destroy(struct weft_ib_comm *c) {
  if (c == NULL) return;
  weft__ib_comm_unlink(c);
  const struct weft_ib_verbs *v = &weft__ib_v;
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i] != NULL) v->destroy_qp(c->qps[i]);
  if (c->flush_qp != NULL) v->destroy_qp(c->flush_qp);
  if (c->cq != NULL) v->destroy_cq(c->cq);
  if (c->fifo_mr != NULL) v->dereg_mr(c->fifo_mr);
  if (c->flush_mr != NULL) v->dereg_mr(c->flush_mr);
  free(c->fifo);
  free(c->flush_buf);
  free(c);
}

ncclResult_t weft__ib_close(void *comm) {
  weft__ib_comm_destroy(comm);
  return ncclSuccess;
}
