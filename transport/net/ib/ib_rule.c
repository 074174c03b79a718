/* net/ib's decisions (ib_rule.h): async events, failed completions and the
 * way a buffer is registered, as tables and small rules. */
#include <stdio.h>

#include "transport/net/ib/ib_rule.h"
#include "transport/net/net.h"

void weft_ib_async_decide(enum ibv_event_type type, struct weft_ib_async_verdict *out) {
  switch (type) {
    case IBV_EVENT_PORT_ERR:
      *out =
          (struct weft_ib_async_verdict){WEFT_IB_ASYNC_PORT, ncclRemoteError, "the port went down"};
      return;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      *out = (struct weft_ib_async_verdict){WEFT_IB_ASYNC_QP, ncclSystemError,
                                            "a queue pair went into the error state"};
      return;
    case IBV_EVENT_CQ_ERR:
      *out = (struct weft_ib_async_verdict){WEFT_IB_ASYNC_CQ, ncclSystemError,
                                            "a completion queue overran or failed"};
      return;
    case IBV_EVENT_DEVICE_FATAL:
      *out = (struct weft_ib_async_verdict){WEFT_IB_ASYNC_DEVICE, ncclSystemError,
                                            "the device failed"};
      return;
    default:
      /* PORT_ACTIVE, LID/PKEY/GID/SM changes, COMM_EST, SQ_DRAINED, ...:
       * nothing a connection must stop for. */
      *out = (struct weft_ib_async_verdict){WEFT_IB_ASYNC_NONE, ncclSuccess, "no action needed"};
      return;
  }
}

void weft_ib_async_message(const struct weft_ib_async_verdict *v, const char *dev, int port,
                           const char *peer, const char *event, char *out, size_t len) {
  if (v->scope == WEFT_IB_ASYNC_NONE)
    snprintf(out, len, "NET/IB: %s:%d: async event %s (%s)", dev, port, event, v->what);
  else
    snprintf(out, len, "NET/IB: %s:%d: %s (async event %s); connection with peer %s failed", dev,
             port, v->what, event, peer);
}

ncclResult_t weft_ib_wc_fail_as(enum ibv_wc_status status) {
  switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_OP_ERR:
    case IBV_WC_REM_ABORT_ERR:
    case IBV_WC_REM_INV_RD_REQ_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_BAD_RESP_ERR: return ncclRemoteError;
    default: return ncclSystemError;
  }
}

enum weft_ib_mr_how weft_ib_mr_choose(int type, int is_send, const struct weft_ib_gdr_caps *caps,
                                      char *why_out, size_t why_len) {
  if (type == WEFT_NET_PTR_HOST) return WEFT_IB_MR_HOST;
  if (is_send && !caps->gdr_read) {
    snprintf(why_out, why_len, "NCCL_NET_GDR_READ=0: sends do not read device memory");
    return WEFT_IB_MR_BOUNCE;
  }
  if (caps->dmabuf) return WEFT_IB_MR_DMABUF;
  if (type == WEFT_NET_PTR_DMABUF) {
    snprintf(why_out, why_len, "a dma-buf registration was asked and this host cannot do one");
    return WEFT_IB_MR_BOUNCE;
  }
  if (caps->peermem) return WEFT_IB_MR_PEERMEM;
  snprintf(why_out, why_len,
           "neither dma-buf registration (ibv_reg_dmabuf_mr with cuMemGetHandleForAddressRange) "
           "nor nvidia-peermem is available");
  return WEFT_IB_MR_BOUNCE;
}
