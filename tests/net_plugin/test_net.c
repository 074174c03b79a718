/* TestNet: an NCCL external net plugin written against the plugin ABI
 * alone (net_plugin_abi.h; no weft internals), built once per ABI version
 * (TESTNET_VERSION picks which ncclNetPlugin_vN it exports). It carries
 * messages over plain TCP on loopback with its own code: one socket per
 * comm pair, every message an 8-byte size then the bytes, posted requests
 * moved in order by whichever isend/irecv/test call comes next, never
 * blocking. Like a verbs network, it moves registered memory only: a send
 * or receive outside its mhandle's region is refused. A closed send comm logs its byte count
 * through the logger it was given, so tests can see the data went through it.
 *
 * TESTNET_FAIL_INIT=1 in the environment makes init fail. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/net/plugin/net_plugin_abi.h"

#ifndef TESTNET_VERSION
#error "TESTNET_VERSION (8..11) picks the ABI version"
#endif

#define TN_MAGIC 0x54657374u
#define TN_EXPORT __attribute__((visibility("default")))

struct tn_handle {
  uint32_t magic;
  struct sockaddr_in addr;
};

struct tn_comm;
struct tn_req {
  struct tn_comm *comm;
  int used, complete;
  char *data;
  size_t size;     /* posted (recv: capacity) */
  uint64_t header; /* the message's size on the wire */
  size_t header_done, done;
};

struct tn_comm {
  int fd, is_send, failed;
  struct tn_req reqs[NET_PLUGIN_MAX_REQUESTS];
  int head, count;
  unsigned long long bytes, messages;
};

/* A registration: isend and irecv refuse memory outside their mhandle's
 * region, as a verbs network would (it could not reach it). */
struct tn_mr {
  uint32_t magic;
  char *base;
  size_t size;
};

static ncclDebugLogger_t tn_log;

static ncclResult_t tn_init(ncclDebugLogger_t log) {
  const char *fail = getenv("TESTNET_FAIL_INIT");
  if (fail != NULL && strcmp(fail, "1") == 0) return ncclSystemError;
  tn_log = log;
  return ncclSuccess;
}

static ncclResult_t tn_devices(int *ndev) {
  *ndev = 1;
  return ncclSuccess;
}

static ncclResult_t tn_listen(void *handle, void **listen_comm) {
  struct tn_handle *h = handle;
  socklen_t len = sizeof(h->addr);
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  memset(h, 0, sizeof(*h));
  h->magic = TN_MAGIC;
  h->addr.sin_family = AF_INET;
  h->addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd, (struct sockaddr *)&h->addr, sizeof(h->addr)) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, (struct sockaddr *)&h->addr, &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  int *l = malloc(sizeof(int));
  if (l == NULL) {
    close(fd);
    return ncclSystemError;
  }
  *l = fd;
  *listen_comm = l;
  return ncclSuccess;
}

static ncclResult_t tn_comm_new(int fd, int is_send, void **out) {
  struct tn_comm *c = calloc(1, sizeof(*c));
  if (c == NULL) return ncclSystemError;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  c->fd = fd;
  c->is_send = is_send;
  *out = c;
  return ncclSuccess;
}

/* A loopback connect to a listening socket completes at once (the
 * kernel's backlog takes it); the listener's accept may come later. */
static ncclResult_t tn_connect(const void *handle, void **send_comm) {
  const struct tn_handle *h = handle;
  *send_comm = NULL;
  if (h->magic != TN_MAGIC) return ncclInvalidUsage;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  if (connect(fd, (const struct sockaddr *)&h->addr, sizeof(h->addr)) != 0) {
    close(fd);
    return errno == ECONNREFUSED || errno == EAGAIN ? ncclSuccess : ncclSystemError;
  }
  return tn_comm_new(fd, 1, send_comm);
}

static ncclResult_t tn_accept(void *listen_comm, void **recv_comm,
                              ncclNetDeviceHandle_v8_t **dev_comm) {
  (void)dev_comm;
  *recv_comm = NULL;
  int fd = accept4(*(int *)listen_comm, NULL, NULL, SOCK_CLOEXEC);
  if (fd < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? ncclSuccess : ncclSystemError;
  return tn_comm_new(fd, 0, recv_comm);
}

static ncclResult_t tn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  (void)comm;
  if (type != NET_PLUGIN_PTR_HOST) return ncclInternalError;
  struct tn_mr *mr = malloc(sizeof(*mr));
  if (mr == NULL) return ncclSystemError;
  mr->magic = TN_MAGIC;
  mr->base = data;
  mr->size = size;
  *mhandle = mr;
  return ncclSuccess;
}

static ncclResult_t tn_dereg_mr(void *comm, void *mhandle) {
  struct tn_mr *mr = mhandle;
  (void)comm;
  if (mr == NULL || mr->magic != TN_MAGIC) return ncclInternalError;
  mr->magic = 0;
  free(mr);
  return ncclSuccess;
}

/* Whether [data, data + size) lies inside mhandle's registration. */
static ncclResult_t tn_check_mr(const void *mhandle, const void *data, size_t size) {
  const struct tn_mr *mr = mhandle;
  const char *p = data;
  if (mr != NULL && mr->magic == TN_MAGIC &&
      (size == 0 || (p >= mr->base && p + size <= mr->base + mr->size)))
    return ncclSuccess;
  if (tn_log != NULL)
    tn_log(NCCL_LOG_WARN, ~0ul, __FILE__, __LINE__,
           "TestNet v%d: %zu bytes at %p are not inside the registration %p", TESTNET_VERSION, size,
           data, mhandle);
  return ncclInternalError;
}

/* Moves bytes [*done, want) of buf; 1 when all moved, 0 when the socket
 * would block, -1 on error or a closed peer. */
static int tn_move(struct tn_comm *c, char *buf, size_t want, size_t *done) {
  while (*done < want) {
    ssize_t n = c->is_send ? send(c->fd, buf + *done, want - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                           : recv(c->fd, buf + *done, want - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0 && errno == EINTR) continue;
    return -1;
  }
  return 1;
}

/* Progresses the comm's requests in posting order. */
static ncclResult_t tn_progress(struct tn_comm *c) {
  if (c->failed) return ncclRemoteError;
  for (int i = 0; i < c->count; i++) {
    struct tn_req *r = &c->reqs[(c->head + i) % NET_PLUGIN_MAX_REQUESTS];
    if (!r->used || r->complete) continue;
    int rc = tn_move(c, (char *)&r->header, sizeof(r->header), &r->header_done);
    if (rc == 1 && !c->is_send && r->header > r->size) rc = -1; /* larger than posted */
    if (rc == 1) rc = tn_move(c, r->data, (size_t)r->header, &r->done);
    if (rc < 0) {
      c->failed = 1;
      return ncclRemoteError;
    }
    if (rc == 0) return ncclSuccess;
    r->complete = 1;
    c->bytes += r->header;
    c->messages++;
  }
  return ncclSuccess;
}

static ncclResult_t tn_post(struct tn_comm *c, void *data, size_t size, void **request) {
  *request = NULL;
  if (c->count == NET_PLUGIN_MAX_REQUESTS) return tn_progress(c);
  struct tn_req *r = &c->reqs[(c->head + c->count) % NET_PLUGIN_MAX_REQUESTS];
  if (r->used) return tn_progress(c);
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->used = 1;
  r->data = data;
  r->size = size;
  if (c->is_send) r->header = size;
  c->count++;
  *request = r;
  return tn_progress(c);
}

static ncclResult_t tn_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request) {
  (void)tag;
  ncclResult_t res = tn_check_mr(mhandle, data, size);
  if (res != ncclSuccess) return res;
  return tn_post(send_comm, data, size, request);
}

static ncclResult_t tn_irecv(void *recv_comm, int n, void **data, size_t size, void **mhandles,
                             void **request) {
  if (n != 1) return ncclInternalError;
  ncclResult_t res = tn_check_mr(mhandles[0], data[0], size);
  if (res != ncclSuccess) return res;
  return tn_post(recv_comm, data[0], size, request);
}

static ncclResult_t tn_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request) {
  (void)recv_comm, (void)n, (void)data, (void)sizes, (void)mhandles;
  *request = NULL;
  return ncclSuccess;
}

static ncclResult_t tn_test(void *request, int *done, int *sizes) {
  struct tn_req *r = request;
  struct tn_comm *c = r->comm;
  *done = 0;
  ncclResult_t res = tn_progress(c);
  if (res != ncclSuccess) return res;
  if (!r->complete) return ncclSuccess;
  *done = 1;
  if (sizes != NULL) sizes[0] = (int)r->header;
  r->used = 0;
  while (c->count > 0 && !c->reqs[c->head].used) {
    c->head = (c->head + 1) % NET_PLUGIN_MAX_REQUESTS;
    c->count--;
  }
  return ncclSuccess;
}

static ncclResult_t tn_close(void *comm) {
  struct tn_comm *c = comm;
  if (c->is_send && tn_log != NULL)
    tn_log(NCCL_LOG_INFO, 16 /* NET */, __FILE__, __LINE__,
           "TestNet v%d: send comm closed after %llu bytes in %llu messages", TESTNET_VERSION,
           c->bytes, c->messages);
  close(c->fd);
  free(c);
  return ncclSuccess;
}

static ncclResult_t tn_close_listen(void *listen_comm) {
  close(*(int *)listen_comm);
  free(listen_comm);
  return ncclSuccess;
}

/* Fills the members every version's props share. */
#define TN_PROPS(p)                          \
  do {                                       \
    memset((p), 0, sizeof(*(p)));            \
    (p)->name = (char *)"lo";                \
    (p)->pciPath = NULL;                     \
    (p)->guid = 0x7465737400000000ull + dev; \
    (p)->ptrSupport = NET_PLUGIN_PTR_HOST;   \
    (p)->speed = 10000;                      \
    (p)->latency = 0;                        \
    (p)->maxComms = 65536;                   \
    (p)->maxRecvs = 1;                       \
  } while (0)

#if TESTNET_VERSION == 8
static ncclResult_t v_props(int dev, ncclNetProperties_v8_t *p) {
  TN_PROPS(p);
  return ncclSuccess;
}
#elif TESTNET_VERSION == 11
static ncclResult_t v_props(int dev, ncclNetProperties_v11_t *p) {
  TN_PROPS(p);
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = (size_t)1 << 31;
  p->maxCollBytes = (size_t)1 << 31;
  p->maxMultiRequestSize = 1;
  return ncclSuccess;
}
#else
static ncclResult_t v_props(int dev, ncclNetProperties_v9_t *p) {
  TN_PROPS(p);
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = (size_t)1 << 31;
  p->maxCollBytes = (size_t)1 << 31;
  return ncclSuccess;
}
#endif

#if TESTNET_VERSION == 8
static ncclResult_t v_init(ncclDebugLogger_t log) {
  return tn_init(log);
}
static ncclResult_t v_listen(int dev, void *handle, void **l) {
  (void)dev;
  return tn_listen(handle, l);
}
static ncclResult_t v_connect(int dev, void *handle, void **s, ncclNetDeviceHandle_v8_t **d) {
  (void)dev, (void)d;
  return tn_connect(handle, s);
}
static ncclResult_t v_isend(void *s, void *data, int size, int tag, void *mh, void **req) {
  if (size < 0) return ncclInternalError;
  return tn_isend(s, data, (size_t)size, tag, mh, req);
}
static ncclResult_t v_irecv(void *r, int n, void **data, int *sizes, int *tags, void **mh,
                            void **req) {
  (void)tags;
  if (sizes[0] < 0) return ncclInternalError;
  return tn_irecv(r, n, data, (size_t)sizes[0], mh, req);
}
#elif TESTNET_VERSION == 9
static ncclResult_t v_init(ncclDebugLogger_t log) {
  return tn_init(log);
}
static ncclResult_t v_listen(int dev, void *handle, void **l) {
  (void)dev;
  return tn_listen(handle, l);
}
static ncclResult_t v_connect(int dev, void *handle, void **s, ncclNetDeviceHandle_v9_t **d) {
  (void)dev, (void)d;
  return tn_connect(handle, s);
}
static ncclResult_t v_isend(void *s, void *data, size_t size, int tag, void *mh, void **req) {
  return tn_isend(s, data, size, tag, mh, req);
}
static ncclResult_t v_irecv(void *r, int n, void **data, size_t *sizes, int *tags, void **mh,
                            void **req) {
  (void)tags;
  return tn_irecv(r, n, data, sizes[0], mh, req);
}
#elif TESTNET_VERSION == 10
static ncclResult_t v_init(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)prof;
  return tn_init(log);
}
static ncclResult_t v_listen(int dev, void *handle, void **l) {
  (void)dev;
  return tn_listen(handle, l);
}
static ncclResult_t v_connect(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **s,
                              ncclNetDeviceHandle_v10_t **d) {
  (void)dev, (void)d;
  if (config == NULL || config->trafficClass != NET_PLUGIN_TRAFFIC_CLASS_UNDEF)
    return ncclInternalError;
  return tn_connect(handle, s);
}
static ncclResult_t v_isend(void *s, void *data, size_t size, int tag, void *mh, void *ph,
                            void **req) {
  (void)ph;
  return tn_isend(s, data, size, tag, mh, req);
}
static ncclResult_t v_irecv(void *r, int n, void **data, size_t *sizes, int *tags, void **mh,
                            void **ph, void **req) {
  (void)tags, (void)ph;
  return tn_irecv(r, n, data, sizes[0], mh, req);
}
#elif TESTNET_VERSION == 11
/* The context init hands out, checked by listen and connect. */
static int tn_ctx;
static ncclResult_t v_init(void **ctx, uint64_t comm_id, ncclNetCommConfig_v11_t *config,
                           ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  (void)comm_id, (void)config, (void)prof;
  *ctx = &tn_ctx;
  return tn_init(log);
}
static ncclResult_t v_listen(void *ctx, int dev, void *handle, void **l) {
  (void)dev;
  if (ctx != &tn_ctx) return ncclInternalError;
  return tn_listen(handle, l);
}
static ncclResult_t v_connect(void *ctx, int dev, void *handle, void **s,
                              ncclNetDeviceHandle_v11_t **d) {
  (void)dev, (void)d;
  if (ctx != &tn_ctx) return ncclInternalError;
  return tn_connect(handle, s);
}
static ncclResult_t v_isend(void *s, void *data, size_t size, int tag, void *mh, void *ph,
                            void **req) {
  (void)ph;
  return tn_isend(s, data, size, tag, mh, req);
}
static ncclResult_t v_irecv(void *r, int n, void **data, size_t *sizes, int *tags, void **mh,
                            void **ph, void **req) {
  (void)tags, (void)ph;
  return tn_irecv(r, n, data, sizes[0], mh, req);
}
static ncclResult_t v_finalize(void *ctx) {
  return ctx == &tn_ctx ? ncclSuccess : ncclInternalError;
}
#endif

#define TN_TABLE_SHARED                                                               \
  .name = "TestNet", .init = v_init, .devices = tn_devices, .getProperties = v_props, \
  .listen = v_listen, .connect = v_connect, .accept = tn_accept, .regMr = tn_reg_mr,  \
  .regMrDmaBuf = NULL, .deregMr = tn_dereg_mr, .isend = v_isend, .irecv = v_irecv,    \
  .iflush = tn_iflush, .test = tn_test, .closeSend = tn_close, .closeRecv = tn_close, \
  .closeListen = tn_close_listen, .getDeviceMr = NULL, .irecvConsumed = NULL

#if TESTNET_VERSION == 8
TN_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {TN_TABLE_SHARED};
#elif TESTNET_VERSION == 9
TN_EXPORT const ncclNet_v9_t ncclNetPlugin_v9 = {TN_TABLE_SHARED, .makeVDevice = NULL};
#elif TESTNET_VERSION == 10
TN_EXPORT const ncclNet_v10_t ncclNetPlugin_v10 = {TN_TABLE_SHARED, .makeVDevice = NULL};
#elif TESTNET_VERSION == 11
TN_EXPORT const ncclNet_v11_t ncclNetPlugin_v11 = {TN_TABLE_SHARED, .makeVDevice = NULL,
                                                   .finalize = v_finalize, .setNetAttr = NULL};
#endif
