/* Which network this process uses, chosen and initialised once on first
 * use: NCCL_NET by name among the loaded external plugin (plugin/) and
 * the built-in IB and Socket networks; without it a loaded plugin wins,
 * then IB where it has a port, then sockets, as in NCCL. */
#include <pthread.h>
#include <stdio.h>
#include <strings.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/net.h"
#include "transport/net/plugin/plugin.h"

static pthread_once_t net_once = PTHREAD_ONCE_INIT;
static ncclResult_t net_init_result;
static const struct weft_net_ops *net_chosen;
/* Why the network could not start, recorded again for every caller (the
 * WARN went to the thread that tried first). */
static char net_why[512];

/* Whether net/ib has a port (it is initialised for that: NCCL's order). */
static int ib_usable(void) {
  int n = 0;
  return weft_net_ib.init() == ncclSuccess && weft_net_ib.devices(&n) == ncclSuccess && n > 0;
}

/* The network NCCL_NET names, or NULL with the WARN said. Unset: a loaded
 * plugin, else IB when it has a port, else sockets (NCCL_IB_DISABLE=1
 * leaves IB without ports). */
static const struct weft_net_ops *net_pick(const struct weft_net_ops *plugin) {
  const char *want = weft_param_str(WEFT_PARAM_NET);
  if (want == NULL) return plugin != NULL ? plugin : ib_usable() ? &weft_net_ib : &weft_net_socket;
  if (plugin != NULL && strcasecmp(want, plugin->name) == 0) return plugin;
  if (strcasecmp(want, weft_net_socket.name) == 0) return &weft_net_socket;
  if (strcasecmp(want, weft_net_ib.name) == 0) {
    if (ib_usable()) return &weft_net_ib;
    snprintf(net_why, sizeof(net_why),
             "NCCL_NET=%s, but the IB network has no usable port (NCCL_DEBUG=INFO "
             "NCCL_DEBUG_SUBSYS=NET says why: no libibverbs, no device, NCCL_IB_DISABLE, "
             "NCCL_IB_HCA)",
             want);
    WARN("net: %s", net_why);
    net_init_result = ncclSystemError;
    return NULL;
  }
  snprintf(net_why, sizeof(net_why),
           "NCCL_NET=%s matches no network (networks here: %s, %s%s%s; NCCL_NET_PLUGIN loads a "
           "plugin)",
           want, weft_net_ib.name, weft_net_socket.name, plugin ? ", " : "",
           plugin ? plugin->name : "");
  WARN("net: %s", net_why);
  net_init_result = ncclInvalidArgument;
  return NULL;
}

static void net_init(void) {
  const struct weft_net_ops *plugin = NULL;
  weft_net_plugin_load(&plugin);
  const struct weft_net_ops *net = net_pick(plugin);
  if (net == NULL) return;
  /* A plugin was initialised by its loader, IB by net_pick; sockets start here. */
  if (net == &weft_net_socket) net_init_result = weft_net_socket.init();
  if (net_init_result != ncclSuccess) {
    snprintf(net_why, sizeof(net_why), "the %s network could not start (error %d)", net->name,
             (int)net_init_result);
    WARN("net: %s", net_why);
    return;
  }
  net_chosen = net;
  if (net == plugin)
    INFO(WEFT_NET | WEFT_INIT, "net: using the %s network (plugin %s, ncclNetPlugin_v%d)",
         net->name, weft_net_plugin_file(), weft_net_plugin_version());
  else
    INFO(WEFT_NET | WEFT_INIT, "net: using the %s network", net->name);
}

ncclResult_t weft_net_get(const struct weft_net_ops **out) {
  pthread_once(&net_once, net_init);
  if (net_init_result != ncclSuccess) {
    weft_set_last_error("net: %s", net_why);
    return net_init_result;
  }
  *out = net_chosen;
  return ncclSuccess;
}

int weft_net_dev_by_name(const struct weft_net_ops *net, const char *name, int port) {
  int ndev = 0;
  if (name == NULL || name[0] == '\0' || net->devices(&ndev) != ncclSuccess) return -1;
  for (int d = 0; d < ndev; d++) {
    struct weft_net_props props;
    memset(&props, 0, sizeof(props));
    if (net->get_properties(d, &props) != ncclSuccess) continue;
    if (strcmp(props.name, name) != 0) continue;
    if (port > 0 && props.port > 0 && props.port != port) continue;
    return d;
  }
  return -1;
}
