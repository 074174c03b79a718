/* A software stand-in for libibverbs and one RDMA device, for
 * test_ib_fake only: no machine this was written on has an RDMA device,
 * and this is the only way the verbs glue of transport/net/ib/ (the
 * handshake, QP transitions, posting, CQ polling, registration, the
 * async thread) runs at all here. It is NOT a model of a NIC's timing or
 * ordering: one process, one device "fake_0" with one InfiniBand port;
 * a post moves the bytes at once (memcpy: both ends live in the same
 * process) and queues the completions, checking what a NIC checks (the
 * QP's state, the local key covers the source, the remote key covers the
 * destination and allows the access, a receive is posted for an
 * immediate). fakeverbs_inject() queues an async event; fakeverbs_fail_next()
 * makes the next send work request complete with an error status. Loaded
 * by weft with dlopen (weft__ib_set_lib), never linked. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <infiniband/verbs.h>

#define EXPORT(name) __asm__(name) __attribute__((visibility("default")))
#define MAXOBJ 1024

struct fcq {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  int cap, head, n;
};
struct fqp {
  struct ibv_qp qp;
  uint32_t dest;
  uint64_t rq[4096];
  int rq_head, rq_n;
};
struct fctx {
  struct ibv_context ctx;
  int pipe[2];
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct ibv_device dev = {.name = "fake_0"};
static struct ibv_device *devlist[2] = {&dev, NULL};
static struct ibv_mr *mrs[MAXOBJ];
static struct fqp *qps[MAXOBJ];
static struct fctx *ctxs[MAXOBJ];
static uint32_t next_key = 0x100, next_qpn = 0x40;
static int fail_next_status = -1;

static void add(void **tab, void *p) {
  for (int i = 0; i < MAXOBJ; i++)
    if (tab[i] == NULL) {
      tab[i] = p;
      return;
    }
}
static void del(void **tab, void *p) {
  for (int i = 0; i < MAXOBJ; i++)
    if (tab[i] == p) tab[i] = NULL;
}

/* The registration whose key is key (lkey or rkey) and covers the range. */
static struct ibv_mr *mr_covering(uint32_t key, uint64_t addr, size_t len, int rkey) {
  for (int i = 0; i < MAXOBJ; i++) {
    struct ibv_mr *m = mrs[i];
    if (m == NULL || (rkey ? m->rkey : m->lkey) != key) continue;
    uint64_t a = (uint64_t)(uintptr_t)m->addr;
    if (addr >= a && addr + len <= a + m->length) return m;
  }
  return NULL;
}

static struct fqp *qp_by_num(uint32_t n) {
  for (int i = 0; i < MAXOBJ; i++)
    if (qps[i] != NULL && qps[i]->qp.qp_num == n) return qps[i];
  return NULL;
}

static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc) {
  struct fcq *c = (struct fcq *)cq;
  if (c->n == c->cap) abort(); /* a CQ overrun: the glue sized it wrong */
  c->ring[(c->head + c->n++) % c->cap] = *wc;
}

struct ibv_device **fake_get_device_list(int *n) EXPORT("ibv_get_device_list");
struct ibv_device **fake_get_device_list(int *n) {
  if (n) *n = 1;
  return devlist;
}
void fake_free_device_list(struct ibv_device **l) EXPORT("ibv_free_device_list");
void fake_free_device_list(struct ibv_device **l) {
  (void)l;
}
const char *fake_get_device_name(struct ibv_device *d) EXPORT("ibv_get_device_name");
const char *fake_get_device_name(struct ibv_device *d) {
  return d->name;
}
__be64 fake_get_device_guid(struct ibv_device *d) EXPORT("ibv_get_device_guid");
__be64 fake_get_device_guid(struct ibv_device *d) {
  (void)d;
  return htobe64(0x0002c90300fedcbaULL);
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

struct ibv_context *fake_open_device(struct ibv_device *d) EXPORT("ibv_open_device");
struct ibv_context *fake_open_device(struct ibv_device *d) {
  struct fctx *f = calloc(1, sizeof(*f));
  if (f == NULL || pipe(f->pipe) != 0) return NULL;
  f->ctx.device = d;
  f->ctx.async_fd = f->pipe[0];
  f->ctx.ops.poll_cq = fake_poll_cq;
  f->ctx.ops.post_send = fake_post_send;
  f->ctx.ops.post_recv = fake_post_recv;
  pthread_mutex_lock(&lock);
  add((void **)ctxs, f);
  pthread_mutex_unlock(&lock);
  return &f->ctx;
}
int fake_close_device(struct ibv_context *c) EXPORT("ibv_close_device");
int fake_close_device(struct ibv_context *c) {
  struct fctx *f = (struct fctx *)c;
  pthread_mutex_lock(&lock);
  del((void **)ctxs, f);
  pthread_mutex_unlock(&lock);
  close(f->pipe[0]);
  close(f->pipe[1]);
  free(f);
  return 0;
}
int fake_query_device(struct ibv_context *c, struct ibv_device_attr *a) EXPORT("ibv_query_device");
int fake_query_device(struct ibv_context *c, struct ibv_device_attr *a) {
  (void)c;
  memset(a, 0, sizeof(*a));
  a->phys_port_cnt = 1;
  a->max_qp = MAXOBJ;
  a->max_cqe = 1 << 20;
  return 0;
}
int fake_query_port(struct ibv_context *c, uint8_t p, struct ibv_port_attr *a)
    EXPORT("ibv_query_port");
int fake_query_port(struct ibv_context *c, uint8_t p, struct ibv_port_attr *a) {
  (void)c;
  if (p != 1) return EINVAL;
  memset(a, 0, sizeof(*a)); /* weft passes a whole struct ibv_port_attr */
  a->state = IBV_PORT_ACTIVE;
  a->active_mtu = IBV_MTU_4096;
  a->lid = 7;
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  a->active_speed = 32; /* EDR */
  a->active_width = 2;  /* 4x */
  a->gid_tbl_len = 1;
  return 0;
}
int fake_query_gid(struct ibv_context *c, uint8_t p, int i, union ibv_gid *g)
    EXPORT("ibv_query_gid");
int fake_query_gid(struct ibv_context *c, uint8_t p, int i, union ibv_gid *g) {
  (void)c;
  if (p != 1 || i != 0) return EINVAL;
  memset(g, 0, sizeof(*g));
  g->raw[0] = 0xfe, g->raw[1] = 0x80, g->raw[15] = 0x07;
  g->raw[8] = 0x02, g->raw[9] = 0xc9;
  return 0;
}
struct ibv_pd *fake_alloc_pd(struct ibv_context *c) EXPORT("ibv_alloc_pd");
struct ibv_pd *fake_alloc_pd(struct ibv_context *c) {
  struct ibv_pd *pd = calloc(1, sizeof(*pd));
  if (pd) pd->context = c;
  return pd;
}
int fake_dealloc_pd(struct ibv_pd *pd) EXPORT("ibv_dealloc_pd");
int fake_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}
struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
    EXPORT("ibv_reg_mr");
struct ibv_mr *fake_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  struct ibv_mr *m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->context = pd->context, m->pd = pd, m->addr = addr, m->length = len;
  pthread_mutex_lock(&lock);
  m->lkey = next_key++;
  m->rkey = (access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) ? next_key++ : 0;
  add((void **)mrs, m);
  pthread_mutex_unlock(&lock);
  return m;
}
int fake_dereg_mr(struct ibv_mr *m) EXPORT("ibv_dereg_mr");
int fake_dereg_mr(struct ibv_mr *m) {
  pthread_mutex_lock(&lock);
  del((void **)mrs, m);
  pthread_mutex_unlock(&lock);
  free(m);
  return 0;
}
struct ibv_cq *fake_create_cq(struct ibv_context *c, int cqe, void *x, struct ibv_comp_channel *ch,
                              int v) EXPORT("ibv_create_cq");
struct ibv_cq *fake_create_cq(struct ibv_context *c, int cqe, void *x, struct ibv_comp_channel *ch,
                              int v) {
  (void)x, (void)ch, (void)v;
  struct fcq *f = calloc(1, sizeof(*f));
  if (f == NULL || (f->ring = calloc((size_t)cqe, sizeof(*f->ring))) == NULL) return NULL;
  f->cq.context = c;
  f->cq.cqe = f->cap = cqe;
  return &f->cq;
}
int fake_destroy_cq(struct ibv_cq *cq) EXPORT("ibv_destroy_cq");
int fake_destroy_cq(struct ibv_cq *cq) {
  free(((struct fcq *)cq)->ring);
  free(cq);
  return 0;
}
struct ibv_qp *fake_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
    EXPORT("ibv_create_qp");
struct ibv_qp *fake_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
  if (a->qp_type != IBV_QPT_RC || a->cap.max_recv_wr > 4096) return NULL;
  struct fqp *q = calloc(1, sizeof(*q));
  if (q == NULL) return NULL;
  q->qp.context = pd->context, q->qp.pd = pd;
  q->qp.send_cq = a->send_cq, q->qp.recv_cq = a->recv_cq;
  q->qp.state = IBV_QPS_RESET, q->qp.qp_type = IBV_QPT_RC;
  pthread_mutex_lock(&lock);
  q->qp.qp_num = next_qpn++;
  add((void **)qps, q);
  pthread_mutex_unlock(&lock);
  return &q->qp;
}
int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) EXPORT("ibv_modify_qp");
int fake_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  struct fqp *q = (struct fqp *)qp;
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  /* The order a NIC requires: RESET -> INIT -> RTR -> RTS. */
  if (a->qp_state != qp->state + 1 || a->qp_state > IBV_QPS_RTS) return EINVAL;
  if (a->qp_state == IBV_QPS_RTR) {
    if (!(mask & IBV_QP_DEST_QPN) || !(mask & IBV_QP_AV) || a->ah_attr.dlid != 7) return EINVAL;
    q->dest = a->dest_qp_num;
  }
  qp->state = a->qp_state;
  return 0;
}
int fake_destroy_qp(struct ibv_qp *qp) EXPORT("ibv_destroy_qp");
int fake_destroy_qp(struct ibv_qp *qp) {
  pthread_mutex_lock(&lock);
  del((void **)qps, qp);
  pthread_mutex_unlock(&lock);
  free(qp);
  return 0;
}

/* One send work request, moved at once; the status it completes with. */
static enum ibv_wc_status do_send(struct fqp *q, const struct ibv_send_wr *wr) {
  struct fqp *d = qp_by_num(q->dest);
  size_t len = wr->num_sge > 0 ? wr->sg_list[0].length : 0;
  uint64_t src = wr->num_sge > 0 ? wr->sg_list[0].addr : 0;
  uint64_t raddr = wr->wr.rdma.remote_addr;
  if (q->qp.state != IBV_QPS_RTS) return IBV_WC_WR_FLUSH_ERR;
  if (d == NULL || d->qp.state < IBV_QPS_RTR) return IBV_WC_RETRY_EXC_ERR;
  if (fail_next_status >= 0) {
    enum ibv_wc_status st = (enum ibv_wc_status)fail_next_status;
    fail_next_status = -1;
    return st;
  }
  if (len > 0 && !(wr->send_flags & IBV_SEND_INLINE) &&
      mr_covering(wr->sg_list[0].lkey, src, len, 0) == NULL)
    return IBV_WC_LOC_PROT_ERR;
  if (len > 0 && mr_covering(wr->wr.rdma.rkey, raddr, len, 1) == NULL) return IBV_WC_REM_ACCESS_ERR;
  if (wr->opcode == IBV_WR_RDMA_READ) {
    memcpy((void *)(uintptr_t)src, (void *)(uintptr_t)raddr, len);
    return IBV_WC_SUCCESS;
  }
  if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && d->rq_n == 0) return IBV_WC_RNR_RETRY_EXC_ERR;
  if (len > 0) memcpy((void *)(uintptr_t)raddr, (void *)(uintptr_t)src, len);
  if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
    struct ibv_wc wc = {.wr_id = d->rq[d->rq_head],
                        .status = IBV_WC_SUCCESS,
                        .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
                        .byte_len = (uint32_t)len,
                        .imm_data = wr->imm_data,
                        .qp_num = d->qp.qp_num,
                        .wc_flags = IBV_WC_WITH_IMM};
    d->rq_head = (d->rq_head + 1) % 4096;
    d->rq_n--;
    cq_push(d->qp.recv_cq, &wc);
  }
  return IBV_WC_SUCCESS;
}

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct fqp *q = (struct fqp *)qp;
  pthread_mutex_lock(&lock);
  for (; wr != NULL; wr = wr->next) {
    if (qp->state < IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
      *bad = wr;
      pthread_mutex_unlock(&lock);
      return EINVAL;
    }
    enum ibv_wc_status st = do_send(q, wr);
    if (st != IBV_WC_SUCCESS) qp->state = IBV_QPS_ERR; /* as a NIC: the QP is in error */
    if (st != IBV_WC_SUCCESS || (wr->send_flags & IBV_SEND_SIGNALED)) {
      struct ibv_wc wc = {.wr_id = wr->wr_id, .status = st, .qp_num = qp->qp_num};
      wc.opcode = wr->opcode == IBV_WR_RDMA_READ ? IBV_WC_RDMA_READ : IBV_WC_RDMA_WRITE;
      cq_push(qp->send_cq, &wc);
    }
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  struct fqp *q = (struct fqp *)qp;
  pthread_mutex_lock(&lock);
  for (; wr != NULL; wr = wr->next) {
    if (q->rq_n == 4096 || qp->state == IBV_QPS_RESET) {
      *bad = wr;
      pthread_mutex_unlock(&lock);
      return ENOMEM;
    }
    q->rq[(q->rq_head + q->rq_n++) % 4096] = wr->wr_id;
  }
  pthread_mutex_unlock(&lock);
  return 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc) {
  struct fcq *c = (struct fcq *)cq;
  int n = 0;
  pthread_mutex_lock(&lock);
  while (n < num && c->n > 0) {
    wc[n++] = c->ring[c->head];
    c->head = (c->head + 1) % c->cap;
    c->n--;
  }
  pthread_mutex_unlock(&lock);
  return n;
}

int fake_get_async_event(struct ibv_context *c, struct ibv_async_event *e)
    EXPORT("ibv_get_async_event");
int fake_get_async_event(struct ibv_context *c, struct ibv_async_event *e) {
  ssize_t n;
  do {
    n = read(c->async_fd, e, sizeof(*e));
  } while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof(*e) ? 0 : -1;
}
void fake_ack_async_event(struct ibv_async_event *e) EXPORT("ibv_ack_async_event");
void fake_ack_async_event(struct ibv_async_event *e) {
  (void)e;
}

const char *fake_event_type_str(enum ibv_event_type t) EXPORT("ibv_event_type_str");
const char *fake_event_type_str(enum ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    default: return "unknown";
  }
}
const char *fake_wc_status_str(enum ibv_wc_status s) EXPORT("ibv_wc_status_str");
const char *fake_wc_status_str(enum ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    default: return "other error";
  }
}

/* Test controls. */
__attribute__((visibility("default"))) void fakeverbs_inject(int type, int port, int qpn) {
  struct ibv_async_event e;
  memset(&e, 0, sizeof(e));
  e.event_type = (enum ibv_event_type)type;
  pthread_mutex_lock(&lock);
  if (qpn >= 0) {
    struct fqp *q = qp_by_num((uint32_t)qpn);
    e.element.qp = q != NULL ? &q->qp : NULL;
  } else {
    e.element.port_num = port;
  }
  for (int i = 0; i < MAXOBJ; i++)
    if (ctxs[i] != NULL && write(ctxs[i]->pipe[1], &e, sizeof(e)) != (ssize_t)sizeof(e)) abort();
  pthread_mutex_unlock(&lock);
}

__attribute__((visibility("default"))) void fakeverbs_fail_next(int status) {
  pthread_mutex_lock(&lock);
  fail_next_status = status;
  pthread_mutex_unlock(&lock);
}
