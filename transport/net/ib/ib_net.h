/* The RDMA network's verbs glue, shared by its files: ib_net.c (the
 * table, devices, properties, opening a port), ib_conn.c (listen, connect,
 * accept: QPs and the TCP handshake), ib_data.c (isend, irecv, test,
 * iflush over the state machine of ib_fifo.c), ib_mr.c (registration and
 * its cache) and ib_async.c (the async-event thread). The glue stays thin:
 * every decision is in the pure files (ib_fifo.c, ib_rule.c,
 * ib_mr_cache.c, ib_qp_attr.c), unit-tested without a device. Private to
 * transport/net/ib/. */
#ifndef WEFT_TRANSPORT_NET_IB_IB_NET_H
#define WEFT_TRANSPORT_NET_IB_IB_NET_H

#include <pthread.h>
#include <stdatomic.h>
#include <infiniband/verbs.h>

#include "nccl.h"
#include "transport/net/ib/ib.h"
#include "transport/net/ib/ib_fifo.h"
#include "transport/net/ib/ib_mr_cache.h"
#include "transport/net/ib/ib_qp.h"
#include "transport/net/ib/ib_rule.h"
#include "transport/net/ib/ib_verbs.h"
#include "transport/net/net.h"

#define WEFT_IB_MAGIC 0x776566744e455449ULL /* "weftNETI" */

struct weft_ib_comm;

/* One port of the list (weft_ib_devices_find), opened on first use: its
 * own context, protection domain, registration cache and async thread. */
struct weft_ib_port {
  struct weft_ib_dev d;
  char pci_path[256];
  pthread_mutex_t lock; /* everything below */
  int opened;
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  uint16_t lid;
  uint8_t gid[16];
  struct weft_ib_gdr_caps gdr; /* gdr_read: NCCL_NET_GDR_READ */
  struct weft_ib_mr_cache cache;
  int async_started;
  pthread_t async;
  struct weft_ib_comm *comms; /* the open comms, for async failures */
};

/* The process's verbs table and ports (ib_net.c). */
extern struct weft_ib_verbs weft__ib_v;
extern struct weft_ib_port weft__ib_ports[WEFT_IB_DEV_MAX];
extern int weft__ib_nports;

/* The verbs library init opens (default WEFT_IB_VERBS_LIB); for tests,
 * called before the first use of the network. */
void weft__ib_set_lib(const char *path);

/* Opens port dev (context, PD, GDR probe) once; ncclSystemError with a
 * WARN naming it when it cannot. */
ncclResult_t weft__ib_port_open(int dev, struct weft_ib_port **out);

/* A memory handle: one registration, shared through the cache. */
struct weft_ib_mh {
  struct ibv_mr *mr;
  int type;
  struct weft_ib_port *port;
};

struct weft_ib_req {
  struct weft_ib_comm *comm;
  int kind; /* WEFT_IB_WR_DATA (a send), _RECV, _FLUSH */
  int idx;
};

/* What each side tells the other over the TCP socket. */
struct weft_ib_wire {
  uint64_t magic, nonce;
  uint32_t nqps, lid, link, mtu;
  uint32_t psn, pad;
  uint8_t gid[16];
  uint64_t fifo_addr; /* the sender's CTS FIFO */
  uint32_t fifo_rkey, pad2;
  uint32_t qpn[WEFT_IB_MAX_QPS];
};

struct weft_ib_comm {
  int is_send;
  struct weft_ib_port *port;
  char peer[64]; /* the peer's TCP address */
  struct ibv_cq *cq;
  int nqps;
  struct ibv_qp *qps[WEFT_IB_MAX_QPS];
  uint32_t psn;
  /* Set by the async thread: the comm's first failure. */
  _Atomic int async_err;
  char async_why[512];
  int warned; /* the state machine's error was WARNed */
  struct weft_ib_comm *next;
  struct weft_ib_sender s;
  struct weft_ib_receiver r;
  /* Sender: the CTS FIFO the peer writes. */
  struct weft_ib_cts *fifo;
  struct ibv_mr *fifo_mr;
  /* Receiver: the peer's FIFO; the flush QP (to itself) and its byte. */
  uint64_t rfifo_addr;
  uint32_t rfifo_rkey;
  struct ibv_qp *flush_qp;
  struct ibv_mr *flush_mr;
  char *flush_buf;
  struct weft_ib_req reqs[WEFT_IB_SLOTS], flush_reqs[WEFT_IB_SLOTS];
};

/* ib_comm.c: a comm's CQ, QPs (INIT), FIFO (sender); connected to the
 * peer's wire (RTR, RTS; the receiver's receives posted, its flush QP). */
ncclResult_t weft__ib_comm_create(struct weft_ib_port *p, int is_send, int nqps, const char *peer,
                                  struct weft_ib_comm **out);
void weft__ib_comm_wire(const struct weft_ib_comm *c, uint64_t nonce, struct weft_ib_wire *w);
ncclResult_t weft__ib_comm_connect(struct weft_ib_comm *c, const struct weft_ib_wire *w);
/* Posts one receive on QP q again (after its completion); 0 or an errno. */
int weft__ib_comm_repost(struct weft_ib_comm *c, int q);
void weft__ib_comm_destroy(struct weft_ib_comm *c);

/* ib_conn.c */
ncclResult_t weft__ib_listen(int dev, void *handle, void **listen_comm);
ncclResult_t weft__ib_connect(int dev, const void *handle, void **send_comm);
ncclResult_t weft__ib_accept(void *listen_comm, void **recv_comm);
ncclResult_t weft__ib_close_listen(void *listen_comm);
ncclResult_t weft__ib_close(void *comm);

/* ib_data.c */
ncclResult_t weft__ib_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                            void **request);
ncclResult_t weft__ib_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                            void **mhandles, void **request);
ncclResult_t weft__ib_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                             void **request);
ncclResult_t weft__ib_test(void *request, int *done, size_t *sizes);

/* ib_mr.c */
ncclResult_t weft__ib_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle);
ncclResult_t weft__ib_dereg_mr(void *comm, void *mhandle);
/* Host memory (the FIFO, the flush byte) registered outside the cache. */
struct ibv_mr *weft__ib_reg_host(struct weft_ib_port *p, void *data, size_t size);
/* The port's GDR capabilities (dma-buf probe, nvidia-peermem). */
void weft__ib_gdr_probe(struct weft_ib_port *p);

/* ib_async.c: the port's async thread, started once. */
ncclResult_t weft__ib_async_start(struct weft_ib_port *p);
/* Adds and removes a comm from its port's list (the thread fails them). */
void weft__ib_comm_link(struct weft_ib_comm *c);
void weft__ib_comm_unlink(struct weft_ib_comm *c);

#endif
