/* The adaptors from a plugin's ncclNet_v8..v11 table to weft's struct
 * weft_net_ops (net.h). Most members have one signature in every version
 * and sit at the same place, so they are copied into one set of pointers
 * (plug) at load; the members whose signature changed (init,
 * getProperties, listen, connect, isend, irecv) get one wrapper per
 * version. weft posts one receive per irecv, so every version's test
 * writes at most one size; the adaptor still gives it room for
 * NET_PLUGIN_MAX_RECVS. */
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/debug.h"
#include "transport/net/plugin/net_plugin_abi.h"
#include "transport/net/plugin/plugin.h"

/* The layouts, as compiling NCCL's own ext-net headers (plugins/net/
 * example/nccl/, NCCL master 5067397c) gives them on a 64-bit ABI: every
 * member's offset was compared too; these keep an edit from drifting. */
#if UINTPTR_MAX == 0xffffffffffffffffu
_Static_assert(sizeof(ncclNetProperties_v8_t) == 64, "ncclNetProperties_v8_t layout");
_Static_assert(sizeof(ncclNetProperties_v9_t) == 104, "ncclNetProperties_v9_t layout");
_Static_assert(offsetof(ncclNetProperties_v9_t, maxP2pBytes) == 88, "v9 props layout");
_Static_assert(sizeof(ncclNetProperties_v11_t) == 112, "ncclNetProperties_v11_t layout");
_Static_assert(offsetof(ncclNetProperties_v11_t, maxMultiRequestSize) == 104, "v11 props");
_Static_assert(sizeof(ncclNet_v8_t) == 152, "ncclNet_v8_t layout");
_Static_assert(sizeof(ncclNet_v9_t) == 160, "ncclNet_v9_t layout");
_Static_assert(sizeof(ncclNet_v10_t) == 160, "ncclNet_v10_t layout");
_Static_assert(sizeof(ncclNet_v11_t) == 176, "ncclNet_v11_t layout");
_Static_assert(offsetof(ncclNet_v11_t, test) == 104, "ncclNet_v11_t layout");
#endif

static const ncclNet_v8_t *v8;
static const ncclNet_v9_t *v9;
static const ncclNet_v10_t *v10;
static const ncclNet_v11_t *v11;
static void *v11_ctx;

/* The members every version shares, copied from the table at load. */
static struct {
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v8_t **devComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
} plug;

/* The plugin's log lines go to weft's log, with weft's filters. */
static void plugin_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...) {
  weft_log_init();
  if ((int)level > weft_log_level_now) return;
  if ((int)level >= WEFT_LOG_INFO && !(weft_log_mask_now & flags)) return;
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  weft_log((enum weft_log_level)level, flags, file, line, "%s", text);
}

static void props_common(struct weft_net_props *out, const char *name, const char *pci,
                         uint64_t guid, int ptr, int speed, int port, float latency,
                         int max_comms) {
  memset(out, 0, sizeof(*out));
  snprintf(out->name, sizeof(out->name), "%s", name ? name : "");
  snprintf(out->pci_path, sizeof(out->pci_path), "%s", pci ? pci : "");
  out->guid = guid;
  out->ptr_support = ptr;
  out->speed = speed;
  out->port = port;
  out->latency = latency;
  out->max_comms = max_comms;
  out->max_recvs = 1; /* weft posts one receive per irecv */
}

/* Shared wrappers. */
static ncclResult_t plug_devices(int *ndev) {
  return plug.devices(ndev);
}

static ncclResult_t plug_accept(void *listen_comm, void **recv_comm) {
  return plug.accept(listen_comm, recv_comm, NULL);
}

static ncclResult_t plug_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  return plug.regMr(comm, data, size, type, mhandle);
}

static ncclResult_t plug_dereg_mr(void *comm, void *mhandle) {
  return plug.deregMr(comm, mhandle);
}

static ncclResult_t plug_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                                void **request) {
  *request = NULL;
  if (plug.iflush == NULL) return ncclSuccess;
  return plug.iflush(recv_comm, n, data, sizes, mhandles, request);
}

static ncclResult_t plug_test(void *request, int *done, size_t *sizes) {
  int got[NET_PLUGIN_MAX_RECVS] = {0};
  ncclResult_t res = plug.test(request, done, got);
  if (res == ncclSuccess && *done && sizes != NULL) sizes[0] = got[0] < 0 ? 0 : (size_t)got[0];
  return res;
}

static ncclResult_t plug_close_send(void *c) {
  return plug.closeSend(c);
}
static ncclResult_t plug_close_recv(void *c) {
  return plug.closeRecv(c);
}
static ncclResult_t plug_close_listen(void *c) {
  return plug.closeListen(c);
}

/* One receive per irecv (max_recvs is 1). */
static ncclResult_t plug_one_recv(int n) {
  if (n == 1) return ncclSuccess;
  WARN("net plugin: irecv of %d buffers at once; the plugin adaptor posts one", n);
  return ncclInternalError;
}

/* v8: int sizes. */
static ncclResult_t v8_init(void) {
  return v8->init(plugin_log);
}

static ncclResult_t v8_props(int dev, struct weft_net_props *out) {
  ncclNetProperties_v8_t p;
  memset(&p, 0, sizeof(p));
  ncclResult_t res = v8->getProperties(dev, &p);
  if (res == ncclSuccess)
    props_common(out, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.latency,
                 p.maxComms);
  return res;
}

static ncclResult_t v8_listen(int dev, void *handle, void **listen_comm) {
  return v8->listen(dev, handle, listen_comm);
}

static ncclResult_t v8_connect(int dev, const void *handle, void **send_comm) {
  return v8->connect(dev, (void *)handle, send_comm, NULL);
}

static ncclResult_t v8_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request) {
  if (size > INT_MAX) {
    WARN("net plugin %s (v8): a send of %zu bytes is past the v8 ABI's int sizes", v8->name, size);
    return ncclInternalError;
  }
  return v8->isend(send_comm, data, (int)size, tag, mhandle, request);
}

static ncclResult_t v8_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **request) {
  ncclResult_t res = plug_one_recv(n);
  if (res != ncclSuccess) return res;
  int size = sizes[0] > INT_MAX ? INT_MAX : (int)sizes[0];
  *request = NULL;
  return v8->irecv(recv_comm, 1, data, &size, tags, mhandles, request);
}

/* v9: size_t sizes, vNICs. */
static ncclResult_t v9_init(void) {
  return v9->init(plugin_log);
}

static ncclResult_t v9_props(int dev, struct weft_net_props *out) {
  ncclNetProperties_v9_t p;
  memset(&p, 0, sizeof(p));
  ncclResult_t res = v9->getProperties(dev, &p);
  if (res == ncclSuccess)
    props_common(out, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.latency,
                 p.maxComms);
  return res;
}

static ncclResult_t v9_listen(int dev, void *handle, void **listen_comm) {
  return v9->listen(dev, handle, listen_comm);
}

static ncclResult_t v9_connect(int dev, const void *handle, void **send_comm) {
  return v9->connect(dev, (void *)handle, send_comm, NULL);
}

static ncclResult_t v9_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void **request) {
  return v9->isend(send_comm, data, size, tag, mhandle, request);
}

static ncclResult_t v9_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **request) {
  ncclResult_t res = plug_one_recv(n);
  if (res != ncclSuccess) return res;
  *request = NULL;
  return v9->irecv(recv_comm, 1, data, sizes, tags, mhandles, request);
}

/* v10: a comm config on connect, profiler handles on isend/irecv. */
static ncclResult_t v10_init(void) {
  return v10->init(plugin_log, NULL);
}

static ncclResult_t v10_props(int dev, struct weft_net_props *out) {
  ncclNetProperties_v10_t p;
  memset(&p, 0, sizeof(p));
  ncclResult_t res = v10->getProperties(dev, &p);
  if (res == ncclSuccess)
    props_common(out, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.latency,
                 p.maxComms);
  return res;
}

static ncclResult_t v10_listen(int dev, void *handle, void **listen_comm) {
  return v10->listen(dev, handle, listen_comm);
}

static ncclResult_t v10_connect(int dev, const void *handle, void **send_comm) {
  ncclNetCommConfig_v10_t config = {.trafficClass = NET_PLUGIN_TRAFFIC_CLASS_UNDEF};
  return v10->connect(dev, &config, (void *)handle, send_comm, NULL);
}

static ncclResult_t v10_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request) {
  return v10->isend(send_comm, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t v10_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request) {
  ncclResult_t res = plug_one_recv(n);
  if (res != ncclSuccess) return res;
  void *phandle = NULL;
  *request = NULL;
  return v10->irecv(recv_comm, 1, data, sizes, tags, mhandles, &phandle, request);
}

/* v11: a context from init, passed to listen and connect. One context per
 * process: weft's networks are per process, not per communicator. */
static ncclResult_t v11_init(void) {
  ncclNetCommConfig_v11_t config = {.trafficClass = NET_PLUGIN_TRAFFIC_CLASS_UNDEF};
  return v11->init(&v11_ctx, 0, &config, plugin_log, NULL);
}

static ncclResult_t v11_props(int dev, struct weft_net_props *out) {
  ncclNetProperties_v11_t p;
  memset(&p, 0, sizeof(p));
  ncclResult_t res = v11->getProperties(dev, &p);
  if (res == ncclSuccess)
    props_common(out, p.name, p.pciPath, p.guid, p.ptrSupport, p.speed, p.port, p.latency,
                 p.maxComms);
  return res;
}

static ncclResult_t v11_listen(int dev, void *handle, void **listen_comm) {
  return v11->listen(v11_ctx, dev, handle, listen_comm);
}

static ncclResult_t v11_connect(int dev, const void *handle, void **send_comm) {
  return v11->connect(v11_ctx, dev, (void *)handle, send_comm, NULL);
}

static ncclResult_t v11_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                              void **request) {
  return v11->isend(send_comm, data, size, tag, mhandle, NULL, request);
}

static ncclResult_t v11_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                              void **mhandles, void **request) {
  ncclResult_t res = plug_one_recv(n);
  if (res != ncclSuccess) return res;
  void *phandle = NULL;
  *request = NULL;
  return v11->irecv(recv_comm, 1, data, sizes, tags, mhandles, &phandle, request);
}

/* The table weft_net_get hands out; the version's wrappers are set at
 * load, before anyone reads it. */
static struct weft_net_ops plugin_ops = {
    .devices = plug_devices,
    .accept = plug_accept,
    .reg_mr = plug_reg_mr,
    .dereg_mr = plug_dereg_mr,
    .iflush = plug_iflush,
    .test = plug_test,
    .close_send = plug_close_send,
    .close_recv = plug_close_recv,
    .close_listen = plug_close_listen,
};

/* Copies the shared members of table t (any version: same places). */
#define PLUG_COPY_SHARED(t)              \
  do {                                   \
    plug.devices = (t)->devices;         \
    plug.accept = (t)->accept;           \
    plug.regMr = (t)->regMr;             \
    plug.deregMr = (t)->deregMr;         \
    plug.iflush = (t)->iflush;           \
    plug.test = (t)->test;               \
    plug.closeSend = (t)->closeSend;     \
    plug.closeRecv = (t)->closeRecv;     \
    plug.closeListen = (t)->closeListen; \
  } while (0)

typedef void (*plug_fn)(void);
#define FN(f) ((plug_fn)(f))

/* Whether the members weft calls are all there; the first one missing
 * goes to why. */
static int plug_complete(const char *name, plug_fn init, plug_fn props, plug_fn listen,
                         plug_fn connect, plug_fn isend, plug_fn irecv, char *why, size_t why_len) {
  const struct {
    const char *what;
    plug_fn fn;
  } need[] = {
      {"init", init},
      {"devices", FN(plug.devices)},
      {"getProperties", props},
      {"listen", listen},
      {"connect", connect},
      {"accept", FN(plug.accept)},
      {"regMr", FN(plug.regMr)},
      {"deregMr", FN(plug.deregMr)},
      {"isend", isend},
      {"irecv", irecv},
      {"test", FN(plug.test)},
      {"closeSend", FN(plug.closeSend)},
      {"closeRecv", FN(plug.closeRecv)},
      {"closeListen", FN(plug.closeListen)},
  };
  if (name == NULL) {
    snprintf(why, why_len, "its table has no name");
    return -1;
  }
  for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++)
    if (need[i].fn == NULL) {
      snprintf(why, why_len, "its table has no %s", need[i].what);
      return -1;
    }
  return 0;
}

/* Points plugin_ops at table t's version vN wrappers; rc says whether
 * the table has every member weft calls. */
#define PLUG_SET(t, vN)                                                                   \
  do {                                                                                    \
    PLUG_COPY_SHARED(t);                                                                  \
    plugin_ops.name = (t)->name;                                                          \
    plugin_ops.init = vN##_init;                                                          \
    plugin_ops.get_properties = vN##_props;                                               \
    plugin_ops.listen = vN##_listen;                                                      \
    plugin_ops.connect = vN##_connect;                                                    \
    plugin_ops.isend = vN##_isend;                                                        \
    plugin_ops.irecv = vN##_irecv;                                                        \
    rc = plug_complete((t)->name, FN((t)->init), FN((t)->getProperties), FN((t)->listen), \
                       FN((t)->connect), FN((t)->isend), FN((t)->irecv), why, why_len);   \
  } while (0)

int weft_net_plugin_adapt(const void *table, int version, const struct weft_net_ops **out,
                          char *why, size_t why_len) {
  int rc = -1;
  switch (version) {
    case 8:
      v8 = table;
      PLUG_SET(v8, v8);
      break;
    case 9:
      v9 = table;
      PLUG_SET(v9, v9);
      break;
    case 10:
      v10 = table;
      PLUG_SET(v10, v10);
      break;
    case 11:
      v11 = table;
      PLUG_SET(v11, v11);
      break;
    default:
      snprintf(why, why_len, "ABI version %d is not one weft loads (8..11)", version);
      return -1;
  }
  if (rc == 0) *out = &plugin_ops;
  return rc;
}
