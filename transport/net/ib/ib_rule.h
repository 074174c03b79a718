/* net/ib's decisions as pure functions of what verbs report, so they are
 * unit-tested without a device: what an async event fails (and the
 * message), which error a failed completion is, and how a buffer is
 * registered (host, dma-buf, nvidia-peermem, or not at all: host bounce).
 * Built where <infiniband/verbs.h> is (the enums). Private to
 * transport/net/ib/. */
#ifndef WEFT_TRANSPORT_NET_IB_IB_RULE_H
#define WEFT_TRANSPORT_NET_IB_IB_RULE_H

#include <stddef.h>
#include <infiniband/verbs.h>

#include "nccl.h"

/* Which connections an async event fails. */
enum weft_ib_async_scope {
  WEFT_IB_ASYNC_NONE = 0, /* informational: logged, nothing fails */
  WEFT_IB_ASYNC_PORT,     /* every connection on the event's port */
  WEFT_IB_ASYNC_QP,       /* the connection owning the event's QP */
  WEFT_IB_ASYNC_CQ,       /* the connection owning the event's CQ */
  WEFT_IB_ASYNC_DEVICE,   /* every connection of the device */
};

struct weft_ib_async_verdict {
  enum weft_ib_async_scope scope;
  ncclResult_t res; /* what test() of a failed connection returns */
  const char *what; /* "the port went down" */
};

void weft_ib_async_decide(enum ibv_event_type type, struct weft_ib_async_verdict *out);
/* The message a failed connection reports: "NET/IB: mlx5_0:1: the port
 * went down (IBV_EVENT_PORT_ERR); connection with peer 10.0.0.2:5000
 * failed". event: the event's name (ibv_event_type_str). */
void weft_ib_async_message(const struct weft_ib_async_verdict *v, const char *dev, int port,
                           const char *peer, const char *event, char *out, size_t len);

/* A failed work completion: ncclRemoteError where the peer or the fabric
 * failed it (retries exhausted, the remote side refused), ncclSystemError
 * where this side did (protection, length, a flushed queue). */
ncclResult_t weft_ib_wc_fail_as(enum ibv_wc_status status);

/* How reg_mr registers a buffer. */
enum weft_ib_mr_how {
  WEFT_IB_MR_HOST = 1,    /* ibv_reg_mr of host memory */
  WEFT_IB_MR_DMABUF = 2,  /* device memory: ibv_reg_dmabuf_mr of a CUDA dma-buf */
  WEFT_IB_MR_PEERMEM = 3, /* device memory: ibv_reg_mr through nvidia-peermem */
  WEFT_IB_MR_BOUNCE = 4,  /* device memory net/ib cannot reach: stage it through host memory */
};

/* What the host offers for device memory. */
struct weft_ib_gdr_caps {
  int dmabuf;   /* ibv_reg_dmabuf_mr and cuMemGetHandleForAddressRange both usable */
  int peermem;  /* nvidia-peermem (or nv_peer_mem) loaded */
  int gdr_read; /* NCCL_NET_GDR_READ: sends may read device memory */
};

/* type: WEFT_NET_PTR_*; is_send: the buffer is sent from. why_out: for
 * WEFT_IB_MR_BOUNCE, the reason (for the caller's message). */
enum weft_ib_mr_how weft_ib_mr_choose(int type, int is_send, const struct weft_ib_gdr_caps *caps,
                                      char *why_out, size_t why_len);

#endif
