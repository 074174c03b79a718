/* The unique id: a fresh root with a random secret (ncclGetUniqueId, and
 * the communicators weft makes itself), or, with NCCL_COMM_ID, an id every
 * process builds alike from its environment, whose secret comes from
 * WEFT_COMM_SECRET (docs/BOOTSTRAP.md). */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/bootstrap_internal.h"
#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"

static uint64_t fnv1a(uint64_t h, const char *text) {
  for (const char *p = text; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
  return h;
}

/* splitmix64's finaliser: related texts give unrelated secrets. */
static uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/* With NCCL_COMM_ID every process builds the id from the environment alone,
 * so the secret is made of what they share: WEFT_COMM_SECRET and the
 * address. Without WEFT_COMM_SECRET only the address is shared, and anyone
 * who knows it can register as a rank: said once per process. */
static uint64_t comm_id_secret(const char *comm_id, const union weft_sockaddr *addr) {
  static _Atomic int said;
  char text[INET6_ADDRSTRLEN + 16];
  const char *shared = weft_param_str(WEFT_PARAM_COMM_SECRET);
  uint64_t h = fnv1a(0xcbf29ce484222325ULL, "weft-comm-id:");
  h = fnv1a(h, weft_sockaddr_str(addr, text, sizeof(text)));
  if (shared != NULL) return mix64(fnv1a(fnv1a(h, "|secret:"), shared));
  if (atomic_exchange(&said, 1) == 0)
    INFO(WEFT_INIT | WEFT_BOOTSTRAP,
         "NCCL_COMM_ID=%s: WEFT_COMM_SECRET is not set, so this job runs without a secret: "
         "anyone who can reach %s can register as a rank",
         comm_id, text);
  return mix64(h);
}

ncclResult_t weft_bootstrap_new_id(ncclUniqueId *id_out) {
  struct weft_unique_id id;
  memset(&id, 0, sizeof(id));
  union weft_sockaddr addr;
  WEFT_CHECK(weft_socket_local_addr(&addr));
  WEFT_CHECK(weft_random_u64(&id.secret));
  WEFT_CHECK(weft_bootstrap_root_start(&addr, id.secret, &id.root));
  id.magic = WEFT_ID_MAGIC;
  memset(id_out, 0, sizeof(*id_out));
  memcpy(id_out->internal, &id, sizeof(id));
  return ncclSuccess;
}

ncclResult_t weft_bootstrap_get_unique_id(ncclUniqueId *id_out) {
  const char *comm_id = weft_param_str(WEFT_PARAM_COMM_ID);
  if (comm_id == NULL) return weft_bootstrap_new_id(id_out);
  struct weft_unique_id id;
  memset(&id, 0, sizeof(id));
  if (weft_socket_parse_addr(comm_id, &id.root) != ncclSuccess) {
    WARN(
        "ncclGetUniqueId: NCCL_COMM_ID=%s is not a root address this host can use (expected "
        "host:port, [v6]:port or v4:port)",
        comm_id);
    return ncclInvalidArgument;
  }
  id.magic = WEFT_ID_MAGIC_COMM_ID;
  id.secret = comm_id_secret(comm_id, &id.root);
  memset(id_out, 0, sizeof(*id_out));
  memcpy(id_out->internal, &id, sizeof(id));
  return ncclSuccess;
}
