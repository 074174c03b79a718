/* The host-or-device choice for a net link's slots: see net_gdr.h. */
#include "transport/net/net_gdr.h"

#include <stdio.h>

#include "transport/net/net.h"

int weft_net_gdr_device_slots(const struct weft_net_gdr_in *in, int is_send, char *why_out,
                              size_t why_len) {
  const char *net = in->net != NULL ? in->net : "?";
  const char *topo = in->topo_why != NULL ? in->topo_why : "";
  if (!(in->ptr_support & WEFT_NET_PTR_CUDA)) {
    /* The links register their slots as CUDA memory; a network that takes
     * device memory only through a dma-buf (regMrDmaBuf) is not asked. */
    snprintf(why_out, why_len, "net %s %s", net,
             (in->ptr_support & WEFT_NET_PTR_DMABUF)
                 ? "takes device memory only as a dma-buf, which the links do not register"
                 : "does not support CUDA pointers");
    return 0;
  }
  if (!in->topo_gdr) {
    snprintf(why_out, why_len, "GDR not allowed (%s)", topo);
    return 0;
  }
  if (is_send && !in->gdr_read) {
    snprintf(why_out, why_len, "NCCL_NET_GDR_READ=0: sends do not read device memory");
    return 0;
  }
  snprintf(why_out, why_len, "GDR allowed (%s), net %s supports CUDA pointers", topo, net);
  return 1;
}
