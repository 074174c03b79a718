/* A queue pair's settings (NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT, NCCL_IB_SL,
 * NCCL_IB_TC, NCCL_IB_QPS_PER_CONNECTION) and the attributes of its
 * INIT->RTR->RTS transitions, as NCCL sets them (net_ib.cc: ncclIbRtrQp,
 * ncclIbRtsQp), built as data so they are tested without a device; the
 * connection code (a later session) hands them to ibv_modify_qp. Private
 * to transport/net/ib/. */
#ifndef WEFT_TRANSPORT_NET_IB_IB_QP_H
#define WEFT_TRANSPORT_NET_IB_IB_QP_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include "transport/net/ib/ib.h"

struct weft_ib_qp_conf {
  int timeout;   /* 4.096 us x 2^timeout before a retransmission */
  int retry_cnt; /* retransmissions before the QP fails */
  int sl;        /* InfiniBand service level */
  int tc;        /* traffic class (RoCE's GRH) */
  int nqps;      /* QPs per connection */
};

/* What one side of a connection tells the other about its QP and port. */
struct weft_ib_qp_peer {
  uint32_t qpn;
  uint16_t lid;
  enum weft_ib_link link;
  int mtu;         /* enum ibv_mtu of its port */
  uint8_t gid[16]; /* the GID its QP uses (weft_ib_gid_choose) */
};

/* The parameters' values (defaults where unset). */
void weft_ib_qp_conf_get(struct weft_ib_qp_conf *out);

/* INIT -> RTR towards remote, from the local port (number, MTU, GID
 * index): the path MTU is the smaller of the two ports'; RoCE addresses
 * the peer's GID through a GRH, InfiniBand its LID. Returns the
 * ibv_modify_qp mask. */
int weft_ib_qp_rtr_attr(const struct weft_ib_qp_conf *c, const struct weft_ib_dev *local,
                        const struct weft_ib_qp_peer *remote, struct ibv_qp_attr *a);
/* RTR -> RTS: timeout and retries from c. Returns the mask. */
int weft_ib_qp_rts_attr(const struct weft_ib_qp_conf *c, struct ibv_qp_attr *a);

#endif
