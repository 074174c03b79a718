/* The binary interface of NCCL's external net plugins, versions 8 to 11,
 * as weft reads it: a plugin is a shared object that exports one function
 * table named ncclNetPlugin_vN (N the version), and the loader
 * (plugin.c) calls it through these structs. The layouts must match what
 * NCCL's plugins are compiled against, member for member and type for
 * type: a real plugin's table and property structs are read through them.
 * The type names are the ones plugin authors use; everything else here is
 * weft's own text.
 *
 * Only nccl.h (public) is included, so a plugin can be built against this
 * header alone (tests/net_plugin/ is).
 *
 * What every version shares:
 *   - init runs once before anything else; devices counts NICs (0..n-1);
 *     getProperties fills a props struct whose strings stay the plugin's.
 *   - listen writes a handle of at most NET_PLUGIN_HANDLE_BYTES, which the
 *     caller carries to the peer; the peer's connect reads it.
 *   - connect and accept never block: they return ncclSuccess with a NULL
 *     comm until the link is up, and are called again. The device-handle
 *     argument is NULL when the caller wants no device offload (weft never
 *     does).
 *   - isend/irecv may return a NULL request (cannot take one now: post
 *     again); at most NET_PLUGIN_MAX_REQUESTS per comm are in flight.
 *     irecv posts n receives (n <= maxRecvs) completed together; test
 *     writes n sizes (ints) for it, one for a send.
 *   - sends and receives of one comm pair match in posting order, by tag.
 *   - regMr's type is one of NET_PLUGIN_PTR_*; mhandles are the plugin's.
 * What changed between versions:
 *   - v8: sizes are int in isend/irecv.
 *   - v9: size_t sizes in isend/irecv, props gain forceFlush, virtual NICs
 *     (vProps) and per-operation byte limits, makeVDevice.
 *   - v10: init takes a profiler callback, connect a comm config (traffic
 *     class), isend/irecv a profiler handle each.
 *   - v11: init takes a context out-pointer, a communicator id and the
 *     config; listen and connect take that context; finalize and
 *     setNetAttr are added; props gain maxMultiRequestSize. */
#ifndef WEFT_TRANSPORT_NET_PLUGIN_NET_PLUGIN_ABI_H
#define WEFT_TRANSPORT_NET_PLUGIN_NET_PLUGIN_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* Bytes of the connection handle (NCCL_NET_HANDLE_MAXSIZE). */
#define NET_PLUGIN_HANDLE_BYTES 128
/* Requests in flight per comm a plugin must accept (NCCL_NET_MAX_REQUESTS). */
#define NET_PLUGIN_MAX_REQUESTS 32
/* Sizes one test may write, as weft allows for it: weft posts single
 * receives, and reports maxRecvs 1 whatever the plugin says. */
#define NET_PLUGIN_MAX_RECVS 8
/* Physical NICs one virtual NIC may merge (v9..v11). */
#define NET_PLUGIN_MAX_DEVS_PER_NIC 4
/* Memory types (ptrSupport bits, regMr's type). */
#define NET_PLUGIN_PTR_HOST 0x1
#define NET_PLUGIN_PTR_CUDA 0x2
#define NET_PLUGIN_PTR_DMABUF 0x4
/* ncclNetCommConfig's trafficClass when the caller has none. */
#define NET_PLUGIN_TRAFFIC_CLASS_UNDEF (-1)

/* Log levels and subsystem bits a plugin's logger receives (NCCL's
 * values). */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char *file,
                                  int line, const char *fmt, ...);
/* The profiler callback (v10+); weft passes NULL: no profiler plugin. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void **eHandle, int type, void *phandle,
                                               int64_t pluginId, void *extData);

/* Device offload (only NCCL_NET_DEVICE_HOST, none, is used by weft). */
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
} ncclNetDeviceType;

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void *handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;

/* A virtual NIC: the physical devices it merges. */
typedef struct {
  int ndevs;
  int devs[NET_PLUGIN_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;

typedef struct {
  int trafficClass; /* plugin-defined; NET_PLUGIN_TRAFFIC_CLASS_UNDEF: none */
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;

/* Device properties. The first members are common to all versions. */
typedef struct {
  char *name;     /* for logs: "eth0", "mlx5_0" */
  char *pciPath;  /* the device's sysfs path */
  uint64_t guid;  /* one per NIC chip (shared by its PCI functions) */
  int ptrSupport; /* NET_PLUGIN_PTR_* bits */
  int regIsGlobal;
  int speed; /* Mb/s */
  int port;
  float latency; /* microseconds */
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush; /* the caller must flush every receive */
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;  /* largest send/recv message */
  size_t maxCollBytes; /* largest collective-network message */
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t;

typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} ncclNetProperties_v11_t;

/* v11's hints about the traffic to come (setNetAttr). */
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;

typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;

/* The function tables. Members in the order the ABI fixes. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v8_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v8_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, int size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, int *sizes, int *tags, void **mhandles,
                        void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
} ncclNet_v8_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v9_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm, ncclNetDeviceHandle_v9_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v9_t *props);
} ncclNet_v9_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t *props);
  ncclResult_t (*listen)(int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t *config, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v10_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v10_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v10_t *props);
} ncclNet_v10_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, ncclNetCommConfig_v11_t *config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t *props);
  ncclResult_t (*listen)(void *ctx, int dev, void *handle, void **listenComm);
  ncclResult_t (*connect)(void *ctx, int dev, void *handle, void **sendComm,
                          ncclNetDeviceHandle_v11_t **sendDevComm);
  ncclResult_t (*accept)(void *listenComm, void **recvComm,
                         ncclNetDeviceHandle_v11_t **recvDevComm);
  ncclResult_t (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,
                              int fd, void **mhandle);
  ncclResult_t (*deregMr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                        void *phandle, void **request);
  ncclResult_t (*irecv)(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **phandles, void **request);
  ncclResult_t (*iflush)(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  ncclResult_t (*test)(void *request, int *done, int *sizes);
  ncclResult_t (*closeSend)(void *sendComm);
  ncclResult_t (*closeRecv)(void *recvComm);
  ncclResult_t (*closeListen)(void *listenComm);
  ncclResult_t (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void *recvComm, int n, void *request);
  ncclResult_t (*makeVDevice)(int *d, ncclNetVDeviceProps_v11_t *props);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*setNetAttr)(void *ctx, ncclNetAttr_v11_t *netAttr);
} ncclNet_v11_t;

#endif
