/* Which GID of a port the QPs use, from the port's GID table, so that the
 * choice is tested on tables without a device. InfiniBand: index 0 (the
 * port GUID GID). RoCE: the lowest index of the best kind, in NCCL's order
 * of preference (net_ib.cc: ncclIbGetGidIndex, NCCL_IB_ADDR_FAMILY=AF_INET
 * and NCCL_IB_ROCE_VERSION_NUM=2 by default): a RoCE v2 GID holding an
 * IPv4 address (::ffff:a.b.c.d), else a routable RoCE v2 IPv6 GID, else a
 * RoCE v1 GID (an IPv4 one first), else a link-local v2 one; unset
 * entries (::, fe80::) never. NCCL_IB_GID_INDEX, when set,
 * wins. The device path reads the table from sysfs, where the kernel
 * publishes it with each entry's RoCE type. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "transport/net/ib/ib.h"

static const uint8_t zero8[8];

/* NCCL's configuredGid: not ::, and not fe80:: with nothing after. */
static int gid_configured(const uint8_t *raw) {
  static const uint8_t fe80[4] = {0xfe, 0x80, 0, 0};
  int trailer_zero = memcmp(raw + 4, zero8, 8) == 0 && memcmp(raw + 12, zero8, 4) == 0;
  if (trailer_zero && (memcmp(raw, zero8, 4) == 0 || memcmp(raw, fe80, 4) == 0)) return 0;
  return 1;
}

static int gid_link_local(const uint8_t *raw) {
  return raw[0] == 0xfe && raw[1] == 0x80 && memcmp(raw + 2, zero8, 6) == 0;
}

static int gid_ipv4_mapped(const uint8_t *raw) {
  return memcmp(raw, zero8, 8) == 0 && raw[8] == 0 && raw[9] == 0 && raw[10] == 0xff &&
         raw[11] == 0xff;
}

/* Preference of a RoCE GID: higher is better, 0 unusable. */
static int roce_rank(const struct weft_ib_gid *g) {
  if (!gid_configured(g->raw)) return 0;
  if (g->type == WEFT_IB_GID_ROCE_V2) {
    if (gid_ipv4_mapped(g->raw)) return 5;
    return gid_link_local(g->raw) ? 1 : 4;
  }
  /* v1, or a type the kernel did not say: an IPv4 address first, as
   * NCCL's AF_INET default prefers it whatever the version. */
  return gid_ipv4_mapped(g->raw) ? 3 : 2;
}

static const struct weft_ib_gid *find_index(const struct weft_ib_gid *t, int n, int index) {
  for (int i = 0; i < n; i++)
    if (t[i].index == index) return &t[i];
  return NULL;
}

int weft_ib_gid_choose(enum weft_ib_link link, const struct weft_ib_gid *table, int n,
                       int gid_index_param, int *index_out, char *why_out, size_t why_len) {
  if (gid_index_param >= 0) {
    if (find_index(table, n, gid_index_param) == NULL) {
      snprintf(why_out, why_len, "NCCL_IB_GID_INDEX=%d: the port has no GID at that index",
               gid_index_param);
      return -1;
    }
    *index_out = gid_index_param;
    return 0;
  }
  if (link == WEFT_IB_LINK_IB) {
    const struct weft_ib_gid *g = find_index(table, n, 0);
    if (g == NULL || !gid_configured(g->raw)) {
      snprintf(why_out, why_len, "InfiniBand port without a GID at index 0");
      return -1;
    }
    *index_out = 0;
    return 0;
  }
  int best = -1, best_rank = 0;
  for (int i = 0; i < n; i++) {
    int r = roce_rank(&table[i]);
    if (r > best_rank || (r == best_rank && r > 0 && table[i].index < table[best].index))
      best = i, best_rank = r;
  }
  if (best < 0) {
    snprintf(why_out, why_len,
             "RoCE port with no configured GID among %d entries "
             "(no IP address on its interface?)",
             n);
    return -1;
  }
  *index_out = table[best].index;
  return 0;
}

void weft_ib_gid_str(const uint8_t raw[16], char *out, size_t len) {
  snprintf(out, len, "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x",
           raw[0], raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7], raw[8], raw[9], raw[10],
           raw[11], raw[12], raw[13], raw[14], raw[15]);
}

/* Reads a small sysfs file into buf, trailing newline dropped; -1 on error. */
static int read_line(const char *path, char *buf, size_t len) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  int ok = fgets(buf, (int)len, f) != NULL;
  fclose(f);
  if (!ok) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}

/* "fe80:0000:...:0001" (eight groups of four hex digits) to raw bytes. */
static int parse_gid(const char *s, uint8_t raw[16]) {
  unsigned g[8];
  int used = 0;
  if (sscanf(s, "%4x:%4x:%4x:%4x:%4x:%4x:%4x:%4x%n", &g[0], &g[1], &g[2], &g[3], &g[4], &g[5],
             &g[6], &g[7], &used) != 8 ||
      s[used] != '\0')
    return -1;
  for (int i = 0; i < 8; i++) raw[2 * i] = (uint8_t)(g[i] >> 8), raw[2 * i + 1] = (uint8_t)g[i];
  return 0;
}

static enum weft_ib_gid_type sysfs_type(const char *dir, int i, enum weft_ib_link link) {
  char path[512], buf[64];
  snprintf(path, sizeof(path), "%s/gid_attrs/types/%d", dir, i);
  if (read_line(path, buf, sizeof(buf)) != 0) return WEFT_IB_GID_UNKNOWN;
  if (strcmp(buf, "RoCE v2") == 0) return WEFT_IB_GID_ROCE_V2;
  if (strcmp(buf, "IB/RoCE v1") == 0)
    return link == WEFT_IB_LINK_IB ? WEFT_IB_GID_IB : WEFT_IB_GID_ROCE_V1;
  return WEFT_IB_GID_UNKNOWN;
}

int weft_ib_gid_read_sysfs(const char *root, const char *dev, int port, enum weft_ib_link link,
                           struct weft_ib_gid *table, int max) {
  char dir[384], path[512], buf[64];
  int n = 0;
  snprintf(dir, sizeof(dir), "%s/class/infiniband/%s/ports/%d", root, dev, port);
  for (int i = 0; n < max; i++) {
    snprintf(path, sizeof(path), "%s/gids/%d", dir, i);
    if (read_line(path, buf, sizeof(buf)) != 0) {
      /* The first missing index ends the table; none at all: no port. */
      return i == 0 && errno == ENOENT ? -1 : n;
    }
    struct weft_ib_gid g = {.index = i};
    if (parse_gid(buf, g.raw) != 0 || !gid_configured(g.raw)) continue;
    g.type = sysfs_type(dir, i, link);
    table[n++] = g;
  }
  return n;
}
