/* ncclConfig_t as callers pass it: from NCCL headers older or newer than
 * ours. The caller's struct is copied up to its own size, and the fields a
 * caller's version did not have (those past its size) keep their defaults.
 * Size, not the version number, decides: weft's header reports 2.27 but has
 * 2.28's layout. A struct not made by NCCL_CONFIG_INITIALIZER is refused. */
#include "api/config.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "base/debug.h"

#define WEFT_CONFIG_MAGIC 0xcafebeefu

static const ncclConfig_t config_defaults = NCCL_CONFIG_INITIALIZER;

ncclResult_t weft_config_normalize(const char *caller, const ncclConfig_t *user,
                                   ncclConfig_t *out) {
  ncclConfig_t cfg = config_defaults;
  if (user != NULL) {
    if (user->magic != WEFT_CONFIG_MAGIC) {
      WARN("%s: config->magic is 0x%x, expected 0x%x: initialize the config with "
           "NCCL_CONFIG_INITIALIZER",
           caller, user->magic, WEFT_CONFIG_MAGIC);
      return ncclInvalidArgument;
    }
    size_t header = offsetof(ncclConfig_t, blocking);
    if (user->size < header) {
      WARN("%s: config->size is %zu, smaller than any ncclConfig_t (%zu bytes)", caller,
           user->size, header);
      return ncclInvalidArgument;
    }
    size_t n = user->size < sizeof(cfg) ? user->size : sizeof(cfg);
    memcpy(&cfg, user, n);
    cfg.size = sizeof(cfg);
    cfg.version = NCCL_VERSION_CODE;
  }
  if (cfg.blocking == NCCL_CONFIG_UNDEF_INT) cfg.blocking = 1;
  if (cfg.blocking != 0 && cfg.blocking != 1) {
    WARN("%s: config->blocking is %d, expected 0 or 1", caller, cfg.blocking);
    return ncclInvalidArgument;
  }
  if (cfg.splitShare == NCCL_CONFIG_UNDEF_INT) cfg.splitShare = 0;
  if (cfg.shrinkShare == NCCL_CONFIG_UNDEF_INT) cfg.shrinkShare = 0;
  if (cfg.CTAPolicy == NCCL_CONFIG_UNDEF_INT) cfg.CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
  *out = cfg;
  return ncclSuccess;
}
