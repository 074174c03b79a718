/* Which network this process uses, chosen and initialised once on first
 * use: NCCL_NET by name among the loaded external plugin (plugin/) and
 * the built-in Socket network; without it a loaded plugin wins, as in
 * NCCL. */
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

/* The network NCCL_NET names, or NULL with the WARN said. */
static const struct weft_net_ops *net_pick(const struct weft_net_ops *plugin) {
  const char *want = weft_param_str(WEFT_PARAM_NET);
  if (want == NULL) return plugin != NULL ? plugin : &weft_net_socket;
  if (plugin != NULL && strcasecmp(want, plugin->name) == 0) return plugin;
  if (strcasecmp(want, weft_net_socket.name) == 0) return &weft_net_socket;
  snprintf(net_why, sizeof(net_why),
           "NCCL_NET=%s matches no network (networks here: %s%s%s; NCCL_NET_PLUGIN loads a "
           "plugin)",
           want, weft_net_socket.name, plugin ? ", " : "", plugin ? plugin->name : "");
  WARN("net: %s", net_why);
  net_init_result = ncclInvalidArgument;
  return NULL;
}

static void net_init(void) {
  const struct weft_net_ops *plugin = NULL;
  weft_net_plugin_load(&plugin);
  const struct weft_net_ops *net = net_pick(plugin);
  if (net == NULL) return;
  /* A plugin was initialised by its loader; the socket network starts here. */
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
