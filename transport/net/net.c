/* Which network this process uses: today the socket network, initialised
 * once on first use. */
#include <pthread.h>

#include "base/check.h"
#include "base/debug.h"
#include "transport/net/net.h"

static pthread_once_t net_once = PTHREAD_ONCE_INIT;
static ncclResult_t net_init_result;

static void net_init(void) {
  net_init_result = weft_net_socket.init();
  if (net_init_result != ncclSuccess)
    WARN("net: the %s network could not start (error %d)", weft_net_socket.name,
         (int)net_init_result);
  else
    INFO(WEFT_NET | WEFT_INIT, "net: using the %s network", weft_net_socket.name);
}

ncclResult_t weft_net_get(const struct weft_net_ops **out) {
  pthread_once(&net_once, net_init);
  if (net_init_result != ncclSuccess) return ncclSystemError;
  *out = &weft_net_socket;
  return ncclSuccess;
}
