/* ncclConfig_t as callers pass it: from NCCL headers older or newer than
 * ours. The caller's struct is copied up to its own size, and the fields a
 * caller's version did not have (those past its size) keep their defaults.
 * Size, not the version number, decides: weft's header reports 2.27 but has
 * 2.28's layout. A struct not made by NCCL_CONFIG_INITIALIZER is refused,
 * and so is a field NCCL would refuse (config_check). */
#include "api/config.h"

#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"

#define WEFT_CONFIG_MAGIC 0xcafebeefu

static const ncclConfig_t config_defaults = NCCL_CONFIG_INITIALIZER;

/* The integer fields NCCL checks, with the range it accepts where set
 * (NCCL_CONFIG_UNDEF_INT: unset). weft uses blocking; the others are hints
 * to NCCL's kernels and resources that it accepts and ignores, but a value
 * NCCL would refuse is refused here too, so a program that runs on weft
 * does not fail on NCCL. */
struct config_rule {
  const char *name;
  size_t off;
  int lo, hi;
  const char *expected;
};

#define RULE(field, lo, hi, expected) \
  { #field, offsetof(ncclConfig_t, field), lo, hi, expected }
static const struct config_rule config_rules[] = {
    RULE(blocking, 0, 1, "0 or 1"),
    RULE(cgaClusterSize, 0, INT_MAX, "at least 0"),
    RULE(minCTAs, 1, INT_MAX, "at least 1"),
    RULE(maxCTAs, 1, INT_MAX, "at least 1"),
    RULE(splitShare, 0, 1, "0 or 1"),
    RULE(collnetEnable, 0, 1, "0 or 1"),
    RULE(CTAPolicy, 0, NCCL_CTA_POLICY_DEFAULT | NCCL_CTA_POLICY_EFFICIENCY | NCCL_CTA_POLICY_ZERO,
         "NCCL_CTA_POLICY_DEFAULT (0), NCCL_CTA_POLICY_EFFICIENCY (1), NCCL_CTA_POLICY_ZERO "
         "(2) or an OR of them"),
    RULE(shrinkShare, 0, 1, "0 or 1"),
    RULE(nvlsCTAs, 1, INT_MAX, "at least 1"),
    RULE(nChannelsPerNetPeer, 1, 64, "1..64"),
    RULE(nvlinkCentricSched, 0, 1, "0 or 1"),
};
#undef RULE

static int config_int(const ncclConfig_t *cfg, size_t off) {
  int v;
  memcpy(&v, (const char *)cfg + off, sizeof(v));
  return v;
}

static ncclResult_t config_check(const char *caller, const ncclConfig_t *cfg) {
  for (size_t i = 0; i < sizeof(config_rules) / sizeof(config_rules[0]); i++) {
    const struct config_rule *r = &config_rules[i];
    int v = config_int(cfg, r->off);
    if (v == NCCL_CONFIG_UNDEF_INT || (v >= r->lo && v <= r->hi)) continue;
    WARN("%s: config->%s is %d, expected %s (or NCCL_CONFIG_UNDEF_INT: unset)", caller, r->name, v,
         r->expected);
    return ncclInvalidArgument;
  }
  if (cfg->minCTAs != NCCL_CONFIG_UNDEF_INT && cfg->maxCTAs != NCCL_CONFIG_UNDEF_INT &&
      cfg->minCTAs > cfg->maxCTAs) {
    WARN("%s: config->minCTAs is %d, above config->maxCTAs (%d)", caller, cfg->minCTAs,
         cfg->maxCTAs);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

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
  WEFT_CHECK(config_check(caller, &cfg));
  if (cfg.blocking == NCCL_CONFIG_UNDEF_INT) cfg.blocking = 1;
  if (cfg.splitShare == NCCL_CONFIG_UNDEF_INT) cfg.splitShare = 0;
  if (cfg.shrinkShare == NCCL_CONFIG_UNDEF_INT) cfg.shrinkShare = 0;
  if (cfg.CTAPolicy == NCCL_CONFIG_UNDEF_INT) cfg.CTAPolicy = NCCL_CTA_POLICY_DEFAULT;
  *out = cfg;
  return ncclSuccess;
}
