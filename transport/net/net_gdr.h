/* Where a GPU rank's net link keeps its slots (issue 17): in device memory,
 * which the network reads and writes directly (GPUDirect RDMA), or in
 * pinned host memory (the default). As NCCL decides: the network's device
 * must take CUDA pointers and the topology must allow GPUDirect RDMA
 * between the rank's GPU and that device (NCCL_NET_GDR_LEVEL); receives
 * then always land in device memory, sends read it only when
 * NCCL_NET_GDR_READ allows. A pure function, unit-tested without a GPU. */
#ifndef WEFT_TRANSPORT_NET_NET_GDR_H
#define WEFT_TRANSPORT_NET_NET_GDR_H

#include <stddef.h>

struct weft_net_gdr_in {
  const char *net;      /* the network's name, for the reason */
  int ptr_support;      /* its device's WEFT_NET_PTR_* bits */
  int topo_gdr;         /* the topology allows GPUDirect RDMA to that device */
  const char *topo_why; /* the topology's reason, either way ("path PXB, level PXB") */
  int gdr_read;         /* NCCL_NET_GDR_READ */
};

/* 1 when the slots of a link in this direction (is_send: this rank sends
 * from them) go in device memory, 0 for host memory; why_out says why, for
 * the INFO line ("GDR allowed (...), net IB supports CUDA pointers"). */
int weft_net_gdr_device_slots(const struct weft_net_gdr_in *in, int is_send, char *why_out,
                              size_t why_len);

#endif
