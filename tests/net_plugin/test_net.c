/* TestNet: an NCCL external net plugin written against the plugin ABI
 * alone (net_plugin_abi.h; no weft internals), built once per ABI version
 * (TESTNET_VERSION picks which ncclNetPlugin_vN it exports). It carries
 * messages over TCP on loopback with its own code, made the way a fast
 * socket plugin is (tn.h): per comm a control socket the caller's thread
 * moves without blocking, and data sockets moved by helper threads of the
 * comm's own, large messages cut across them. Like a verbs network, it
 * moves registered memory only: a send or receive outside its mhandle's
 * region is refused. A closed send comm logs its byte count (and each
 * data socket's) through the logger it was given, so tests can see the
 * data went through it.
 *
 * Environment: TESTNET_FAIL_INIT=1 makes init fail; TESTNET_NSOCKS (0..8,
 * default 2) is the data sockets, and helper threads, of each comm this
 * process connects (0: every message on the control socket, no thread);
 * TESTNET_CUDA_PTRS=1 (a build with CUDA only) adds NCCL_PTR_CUDA to
 * ptrSupport: device regions are staged through pinned host copies
 * (tn_cuda.c) and iflush on them is a request of its own, counted (a recv
 * comm logs its count when it closes). */
#include <stdlib.h>
#include <string.h>

#include "tests/net_plugin/tn.h"

#ifndef TESTNET_VERSION
#error "TESTNET_VERSION (8..11) picks the ABI version"
#endif
const int tn_version = TESTNET_VERSION;

#define TN_EXPORT __attribute__((visibility("default")))

ncclDebugLogger_t tn_log;
int tn_nsocks = TN_DEFAULT_SOCKS;
int tn_cuda_ptrs;

/* A registration: isend and irecv refuse memory outside their mhandle's
 * region, as a verbs network would (it could not reach it). A device
 * region has a pinned host copy (stage) that the bytes go through. */
struct tn_mr {
  uint32_t magic;
  char *base;
  size_t size;
  char *stage; /* NULL: host memory */
  void *cuda;
};

static ncclResult_t tn_init(ncclDebugLogger_t log) {
  const char *fail = getenv("TESTNET_FAIL_INIT");
  if (fail != NULL && strcmp(fail, "1") == 0) return ncclSystemError;
  tn_log = log;
  const char *nsocks = getenv("TESTNET_NSOCKS");
  if (nsocks != NULL) {
    char *end;
    long n = strtol(nsocks, &end, 10);
    if (*nsocks == '\0' || *end != '\0' || n < 0 || n > TN_MAX_SOCKS) {
      TN_WARN("TestNet v%d: TESTNET_NSOCKS=%s: expected 0..%d data sockets per comm",
              TESTNET_VERSION, nsocks, TN_MAX_SOCKS);
      return ncclInvalidArgument;
    }
    tn_nsocks = (int)n;
  }
  const char *cuda = getenv("TESTNET_CUDA_PTRS");
  tn_cuda_ptrs = cuda != NULL && strcmp(cuda, "1") == 0 && tn_cuda_built();
  if (cuda != NULL && strcmp(cuda, "1") == 0 && !tn_cuda_ptrs && log != NULL)
    log(NCCL_LOG_INFO, 16 /* NET */, __FILE__, __LINE__,
        "TestNet v%d: TESTNET_CUDA_PTRS=1, but built without CUDA: host memory only",
        TESTNET_VERSION);
  return ncclSuccess;
}

static ncclResult_t tn_devices(int *ndev) {
  *ndev = 1;
  return ncclSuccess;
}

static ncclResult_t tn_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  (void)comm;
  int cuda = type == NET_PLUGIN_PTR_CUDA && tn_cuda_ptrs;
  if (type != NET_PLUGIN_PTR_HOST && !cuda) return ncclInternalError;
  struct tn_mr *mr = calloc(1, sizeof(*mr));
  if (mr == NULL) return ncclSystemError;
  if (cuda) {
    ncclResult_t res = tn_cuda_open(data, size, &mr->stage, &mr->cuda);
    if (res != ncclSuccess) {
      free(mr);
      return res;
    }
  }
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
  tn_cuda_close(mr->cuda, mr->stage);
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

static ncclResult_t tn_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request) {
  (void)tag;
  ncclResult_t res = tn_check_mr(mhandle, data, size);
  if (res != ncclSuccess) return res;
  const struct tn_mr *mr = mhandle;
  if (mr->stage == NULL) return tn_post(send_comm, data, size, request);
  /* Device memory: its bytes go out from the host copy. */
  char *host = mr->stage + ((char *)data - mr->base);
  res = tn_cuda_copy(mr->cuda, host, data, size);
  if (res != ncclSuccess) return res;
  return tn_post(send_comm, host, size, request);
}

static ncclResult_t tn_irecv(void *recv_comm, int n, void **data, size_t size, void **mhandles,
                             void **request) {
  if (n != 1) return ncclInternalError;
  ncclResult_t res = tn_check_mr(mhandles[0], data[0], size);
  if (res != ncclSuccess) return res;
  const struct tn_mr *mr = mhandles[0];
  if (mr->stage == NULL) return tn_post(recv_comm, data[0], size, request);
  /* Device memory: the bytes land in the host copy; test copies them. */
  char *host = mr->stage + ((char *)data[0] - mr->base);
  res = tn_post(recv_comm, host, size, request);
  if (res == ncclSuccess && *request != NULL) {
    struct tn_req *r = *request;
    r->dev_dst = data[0];
    r->cuda = mr->cuda;
  }
  return res;
}

/* Device memory: a request of its own (done at its first test: the copy
 * to the device finished before the receive said done), counted; host
 * memory needs none. */
static ncclResult_t tn_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request) {
  struct tn_comm *c = recv_comm;
  (void)data, (void)sizes;
  *request = NULL;
  if (n != 1) return ncclInternalError;
  const struct tn_mr *mr = mhandles[0];
  if (mr == NULL || mr->magic != TN_MAGIC || mr->stage == NULL) return ncclSuccess;
  c->flushes++;
  c->flush_req.comm = c;
  c->flush_req.flush = 1;
  *request = &c->flush_req;
  return ncclSuccess;
}

/* Fills the members every version's props share. */
#define TN_PROPS(p)                                                                   \
  do {                                                                                \
    memset((p), 0, sizeof(*(p)));                                                     \
    (p)->name = (char *)"lo";                                                         \
    (p)->pciPath = NULL;                                                              \
    (p)->guid = 0x7465737400000000ull + dev;                                          \
    (p)->ptrSupport = NET_PLUGIN_PTR_HOST | (tn_cuda_ptrs ? NET_PLUGIN_PTR_CUDA : 0); \
    (p)->speed = 10000;                                                               \
    (p)->latency = 0;                                                                 \
    (p)->maxComms = 65536;                                                            \
    (p)->maxRecvs = 1;                                                                \
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
