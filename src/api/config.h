/* Reading a caller's ncclConfig_t, whatever header it was built with. */
#ifndef WEFT_API_CONFIG_H
#define WEFT_API_CONFIG_H

#include "nccl.h"

/* Copies user (NULL: defaults) into out with every field defined; refuses a
 * config not made by NCCL_CONFIG_INITIALIZER, naming `caller`. */
ncclResult_t weft_config_normalize(const char *caller, const ncclConfig_t *user,
                                   ncclConfig_t *out);

#endif
