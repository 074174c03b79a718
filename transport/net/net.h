/* The network interface: how the proxy (src/proxy/) and the host engine's
 * net transport move bytes between hosts, in the shape of NCCL's net API
 * (ncclNet_v8..v11), so that RDMA (net/ib) and NCCL's external net plugins
 * plug in behind the same table without touching the proxy.
 *
 * Every call is non-blocking except init, devices and get_properties:
 *   - connect and accept may return ncclSuccess with *comm == NULL: call
 *     again later (the peer has not answered yet);
 *   - isend and irecv may return ncclSuccess with *request == NULL: the
 *     network cannot take the operation now, try again later;
 *   - test says whether a request finished; a finished request is freed by
 *     the network and must not be tested again.
 * Sends and receives on one send/recv comm pair match in the order they
 * were posted; a receive of `size` bytes takes a send of at most `size`
 * bytes and test reports the size that arrived. Buffers stay untouched by
 * the caller until their request finished. Errors (a peer that closed, a
 * reset connection) are returned by the call that sees them, with one WARN
 * naming the peer's address; after one, the comm only accepts close. */
#ifndef WEFT_TRANSPORT_NET_NET_H
#define WEFT_TRANSPORT_NET_NET_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* Bytes of the handle listen writes and connect reads (NCCL's
 * NCCL_NET_HANDLE_MAXSIZE); carried between ranks by the bootstrap. */
#define WEFT_NET_HANDLE_BYTES 128

/* Memory a network can send from and receive into (ptr_support bits, and
 * reg_mr's type). */
enum {
  WEFT_NET_PTR_HOST = 0x1,   /* host memory (pinned or not) */
  WEFT_NET_PTR_CUDA = 0x2,   /* device memory (GPUDirect RDMA) */
  WEFT_NET_PTR_DMABUF = 0x4, /* device memory registered through a dma-buf */
};

/* What a network device is (NCCL's ncclNetProperties). */
struct weft_net_props {
  char name[64];      /* interface or HCA name: "eth0", "mlx5_0" */
  char pci_path[256]; /* sysfs path of its PCI device; "" when virtual */
  uint64_t guid;
  int ptr_support; /* WEFT_NET_PTR_* bits */
  int speed;       /* Mb/s; 0: unknown */
  int port;
  float latency; /* microseconds; 0: unknown */
  int max_comms;
  int max_recvs; /* receives one irecv may group (1 for sockets) */
};

/* A network implementation. Comms and requests are the network's own
 * opaque objects. */
struct weft_net_ops {
  const char *name; /* "Socket", "IB", a plugin's name */
  /* Once per process before anything else; idempotent. */
  ncclResult_t (*init)(void);
  ncclResult_t (*devices)(int *ndev);
  ncclResult_t (*get_properties)(int dev, struct weft_net_props *props);
  /* Starts listening on dev; handle (WEFT_NET_HANDLE_BYTES) is what a
   * connecting peer needs. */
  ncclResult_t (*listen)(int dev, void *handle, void **listen_comm);
  /* Connects to a peer's handle; *send_comm stays NULL until done. */
  ncclResult_t (*connect)(int dev, const void *handle, void **send_comm);
  /* Accepts one connection; *recv_comm stays NULL until one arrived. */
  ncclResult_t (*accept)(void *listen_comm, void **recv_comm);
  /* Registers [data, data + size) of memory type (WEFT_NET_PTR_*) for
   * isend/irecv on comm (a send or recv comm). */
  ncclResult_t (*reg_mr)(void *comm, void *data, size_t size, int type, void **mhandle);
  ncclResult_t (*dereg_mr)(void *comm, void *mhandle);
  ncclResult_t (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                        void **request);
  /* n receives at once (n <= max_recvs), completed together. */
  ncclResult_t (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                        void **mhandles, void **request);
  /* Makes data received into device memory visible to the GPU (GPUDirect
   * RDMA); *request NULL when nothing is needed. */
  ncclResult_t (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                         void **request);
  /* *done set when finished; sizes (n of them for an irecv; may be NULL)
   * get the bytes that moved. */
  ncclResult_t (*test)(void *request, int *done, size_t *sizes);
  ncclResult_t (*close_send)(void *send_comm);
  ncclResult_t (*close_recv)(void *recv_comm);
  ncclResult_t (*close_listen)(void *listen_comm);
};

/* The built-in networks. weft_net_ib (transport/net/ib/, RDMA over
 * libibverbs) has 0 devices where the host has no usable IB/RoCE port or
 * weft was built without rdma-core's header. */
extern const struct weft_net_ops weft_net_socket;
extern const struct weft_net_ops weft_net_ib;

/* Whether net/ib would refuse to register memory of type (WEFT_NET_PTR_*)
 * on comm (a send or recv comm of weft_net_ib): device memory it cannot
 * reach (no dma-buf, no nvidia-peermem; or NCCL_NET_GDR_READ=0 on a send
 * comm). Then why_out says why, and the caller stages the buffer through
 * host memory. */
int weft_net_ib_mr_bounce(void *comm, int type, char *why_out, size_t why_len);

/* The network this process uses, initialised on first use: NCCL_NET picks
 * by name (any case) among IB, Socket and the external plugin
 * NCCL_NET_PLUGIN loaded (plugin/plugin.h); without NCCL_NET a loaded
 * plugin wins, then IB when it has a port, then Socket. ncclSystemError with a WARN when it cannot
 * start, ncclInvalidArgument when NCCL_NET names no network. */
ncclResult_t weft_net_get(const struct weft_net_ops **out);

/* The device of net named name (as its properties name it: "mlx5_0",
 * "eth0") and, where port > 0 and the device has ports, on that port; -1
 * when net has none. How the topology's NIC nearest a GPU becomes the
 * device its rank's links use. */
int weft_net_dev_by_name(const struct weft_net_ops *net, const char *name, int port);

#endif
