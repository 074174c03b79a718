/* libibverbs, loaded at run time (dlopen), so libnccl starts where
 * rdma-core is not installed: the functions net/ib calls, as pointers.
 * Built only where <infiniband/verbs.h> is (rdma-core's headers give the
 * types); ibv_post_send, ibv_post_recv and ibv_poll_cq are inline calls
 * through the context's ops and need no pointer here. ibv_query_port is
 * the exported one, called with struct ibv_port_attr as NCCL does (its
 * compat layout is a prefix of it). Private to transport/net/ib/. */
#ifndef WEFT_TRANSPORT_NET_IB_IB_VERBS_H
#define WEFT_TRANSPORT_NET_IB_IB_VERBS_H

#include <stddef.h>
#include <infiniband/verbs.h>

/* The library net/ib opens by default. */
#define WEFT_IB_VERBS_LIB "libibverbs.so.1"

struct weft_ib_verbs {
  void *lib;
  struct ibv_device **(*get_device_list)(int *num_devices);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
  __be64 (*get_device_guid)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device);
  int (*close_device)(struct ibv_context *context);
  int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
  int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                              struct ibv_comp_channel *channel, int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  int (*get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
  void (*ack_async_event)(struct ibv_async_event *event);
  const char *(*event_type_str)(enum ibv_event_type event);
  /* Optional (NULL when the library is older): dma-buf registration
   * (rdma-core 34+) and registration with relaxed-ordering flags. */
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length, uint64_t iova,
                                  int fd, int access);
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                 unsigned int access);
  /* Optional: a completion status's text, for messages. */
  const char *(*wc_status_str)(enum ibv_wc_status status);
};

/* Opens path (WEFT_IB_VERBS_LIB, or a test's) and fills v. 0 when every
 * required function is there; -1 with why_out ("dlopen libx.so: ...", or
 * "libx.so has no ibv_open_device") and nothing left open otherwise. */
int weft_ib_verbs_open(const char *path, struct weft_ib_verbs *v, char *why_out, size_t why_len);
void weft_ib_verbs_close(struct weft_ib_verbs *v);

#endif
