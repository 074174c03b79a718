/* net/ib's async-event thread: one per opened port (its own context),
 * blocked in ibv_get_async_event, so a port that goes down, a QP or a CQ
 * in error, or a failed device fails the connections it concerns at once:
 * their next test() returns the error (ncclRemoteError, ncclSystemError)
 * with a message naming the device, the port and the peer, instead of a
 * wait on completions that never come. What an event fails is
 * weft_ib_async_decide's (ib_rule.c); this file only applies it. The
 * thread lives as long as the process, like the context (NCCL's too). */
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"
#include "transport/net/ib/ib_net.h"

void weft__ib_comm_link(struct weft_ib_comm *c) {
  struct weft_ib_port *p = c->port;
  pthread_mutex_lock(&p->lock);
  c->next = p->comms;
  p->comms = c;
  pthread_mutex_unlock(&p->lock);
}

void weft__ib_comm_unlink(struct weft_ib_comm *c) {
  struct weft_ib_port *p = c->port;
  pthread_mutex_lock(&p->lock);
  for (struct weft_ib_comm **pp = &p->comms; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  pthread_mutex_unlock(&p->lock);
}

/* Whether event e (of scope s) concerns comm c. */
static int concerns(const struct weft_ib_comm *c, enum weft_ib_async_scope s,
                    const struct ibv_async_event *e) {
  switch (s) {
    case WEFT_IB_ASYNC_DEVICE: return 1;
    case WEFT_IB_ASYNC_PORT: return (int)e->element.port_num == c->port->d.port;
    case WEFT_IB_ASYNC_CQ: return e->element.cq == c->cq;
    case WEFT_IB_ASYNC_QP:
      if (e->element.qp == c->flush_qp && c->flush_qp != NULL) return 1;
      for (int i = 0; i < c->nqps; i++)
        if (e->element.qp == c->qps[i]) return 1;
      return 0;
    default: return 0;
  }
}

static void handle_event(struct weft_ib_port *p, const struct ibv_async_event *e) {
  struct weft_ib_async_verdict v;
  const char *name = weft__ib_v.event_type_str(e->event_type);
  weft_ib_async_decide(e->event_type, &v);
  if (v.scope == WEFT_IB_ASYNC_NONE) {
    char msg[256];
    weft_ib_async_message(&v, p->d.name, p->d.port, "", name, msg, sizeof(msg));
    INFO(WEFT_NET, "%s", msg);
    return;
  }
  int failed = 0;
  pthread_mutex_lock(&p->lock);
  for (struct weft_ib_comm *c = p->comms; c != NULL; c = c->next) {
    if (!concerns(c, v.scope, e)) continue;
    failed++;
    /* This thread is the only writer of async_err. The WARN (and the last
     * error it records) comes first, then the error is published: a test()
     * that sees it sees the message too. */
    if (atomic_load(&c->async_err) != ncclSuccess) continue;
    weft_ib_async_message(&v, p->d.name, p->d.port, c->peer, name, c->async_why,
                          sizeof(c->async_why));
    WARN("%s", c->async_why);
    atomic_store(&c->async_err, (int)v.res);
  }
  pthread_mutex_unlock(&p->lock);
  if (failed == 0)
    WARN("NET/IB: %s:%d: %s (async event %s); no open connection was concerned", p->d.name,
         p->d.port, v.what, name);
}

static void *async_main(void *arg) {
  struct weft_ib_port *p = arg;
  weft_log_set_helper();
  for (;;) {
    struct ibv_async_event e;
    if (weft__ib_v.get_async_event(p->ctx, &e) != 0) {
      WARN("NET/IB: %s:%d: ibv_get_async_event failed; async events are no longer watched",
           p->d.name, p->d.port);
      return NULL;
    }
    handle_event(p, &e);
    weft__ib_v.ack_async_event(&e);
  }
}

ncclResult_t weft__ib_async_start(struct weft_ib_port *p) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&p->lock);
  if (!p->async_started) {
    int err = pthread_create(&p->async, NULL, async_main, p);
    if (err == 0) {
      pthread_detach(p->async);
      p->async_started = 1;
    } else {
      WARN("NET/IB: %s:%d: cannot start the async-event thread: %s", p->d.name, p->d.port,
           strerror(err));
      res = ncclSystemError;
    }
  }
  pthread_mutex_unlock(&p->lock);
  return res;
}
