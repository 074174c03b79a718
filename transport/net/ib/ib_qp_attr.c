/* The attributes of a queue pair's RTR and RTS transitions (ib_qp.h), as
 * NCCL's ncclIbRtrQp and ncclIbRtsQp set them, from the parameter table. */
#include <string.h>

#include "base/param.h"
#include "transport/net/ib/ib_qp.h"

void weft_ib_qp_conf_get(struct weft_ib_qp_conf *out) {
  out->timeout = (int)weft_param_int(WEFT_PARAM_IB_TIMEOUT);
  out->retry_cnt = (int)weft_param_int(WEFT_PARAM_IB_RETRY_CNT);
  out->sl = (int)weft_param_int(WEFT_PARAM_IB_SL);
  out->tc = (int)weft_param_int(WEFT_PARAM_IB_TC);
  out->nqps = (int)weft_param_int(WEFT_PARAM_IB_QPS_PER_CONNECTION);
}

int weft_ib_qp_rtr_attr(const struct weft_ib_qp_conf *c, const struct weft_ib_dev *local,
                        const struct weft_ib_qp_peer *remote, struct ibv_qp_attr *a) {
  memset(a, 0, sizeof(*a));
  a->qp_state = IBV_QPS_RTR;
  a->path_mtu = (enum ibv_mtu)(remote->mtu < local->mtu ? remote->mtu : local->mtu);
  a->dest_qp_num = remote->qpn;
  a->rq_psn = 0;
  a->max_dest_rd_atomic = 1;
  a->min_rnr_timer = 12; /* NCCL's: 0.64 ms */
  if (remote->link == WEFT_IB_LINK_ETH) {
    a->ah_attr.is_global = 1;
    memcpy(a->ah_attr.grh.dgid.raw, remote->gid, sizeof(remote->gid));
    a->ah_attr.grh.flow_label = 0;
    a->ah_attr.grh.sgid_index = (uint8_t)local->gid_index;
    a->ah_attr.grh.hop_limit = 255;
    a->ah_attr.grh.traffic_class = (uint8_t)c->tc;
  } else {
    a->ah_attr.is_global = 0;
    a->ah_attr.dlid = remote->lid;
  }
  a->ah_attr.sl = (uint8_t)c->sl;
  a->ah_attr.src_path_bits = 0;
  a->ah_attr.port_num = (uint8_t)local->port;
  return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

int weft_ib_qp_rts_attr(const struct weft_ib_qp_conf *c, struct ibv_qp_attr *a) {
  memset(a, 0, sizeof(*a));
  a->qp_state = IBV_QPS_RTS;
  a->timeout = (uint8_t)c->timeout;
  a->retry_cnt = (uint8_t)c->retry_cnt;
  a->rnr_retry = 7; /* NCCL's: retry forever on receiver-not-ready */
  a->sq_psn = 0;
  a->max_rd_atomic = 1;
  return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
         IBV_QP_MAX_QP_RD_ATOMIC;
}
