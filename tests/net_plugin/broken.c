/* Plugins weft must refuse, one per BROKEN_KIND, written against the
 * plugin ABI alone (net_plugin_abi.h):
 *   1: exports no ncclNetPlugin_vN symbol at all (missing symbols);
 *   2: exports only ncclNetPlugin_v7, a version weft does not load;
 *   3: exports ncclNetPlugin_v8 whose table has init and devices only. */
#include "transport/net/plugin/net_plugin_abi.h"

#define BROKEN_EXPORT __attribute__((visibility("default")))

#if BROKEN_KIND == 1
BROKEN_EXPORT const char *brokenNetPluginName = "Broken";
#elif BROKEN_KIND == 2
/* Only its name is read (never: weft refuses the version first). */
BROKEN_EXPORT const struct { const char *name; } ncclNetPlugin_v7 = {"BrokenV7"};
#elif BROKEN_KIND == 3
static ncclResult_t broken_init(ncclDebugLogger_t log) {
  (void)log;
  return ncclSuccess;
}
static ncclResult_t broken_devices(int *ndev) {
  *ndev = 1;
  return ncclSuccess;
}
BROKEN_EXPORT const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = "BrokenPartial", .init = broken_init, .devices = broken_devices};
#else
#error "BROKEN_KIND (1..3) picks what is broken"
#endif
