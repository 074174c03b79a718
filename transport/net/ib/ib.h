/* net/ib's pure parts, the ones that need no RDMA device (issue 17): the
 * NCCL_IB_HCA filter (ib_hca.c), the GID choice from a GID table
 * (ib_gid.c), MTU and link-speed mapping (ib_port.c). Each is a function of
 * its arguments, so tests drive it with tables; the device path
 * (ib_dev.c, with libibverbs loaded by ib_verbs.c) feeds it what a port
 * reports. Private to transport/net/ib/ (and its tests). */
#ifndef WEFT_TRANSPORT_NET_IB_IB_H
#define WEFT_TRANSPORT_NET_IB_IB_H

#include <stddef.h>
#include <stdint.h>

/* ---- NCCL_IB_HCA (ib_hca.c) ---- */

/* NCCL's MAX_IB_DEVS: entries in one NCCL_IB_HCA value. */
#define WEFT_IB_HCA_MAX 32
#define WEFT_IB_NAME_LEN 64

struct weft_ib_hca_entry {
  char name[WEFT_IB_NAME_LEN];
  int port; /* -1: every port */
};

/* A parsed NCCL_IB_HCA: "mlx5_0:1,mlx5_1" (name prefixes), "^..." (all but
 * those), "=..." (exact names), "^=..." (all but those exact names). */
struct weft_ib_hca_filter {
  int exclude; /* '^' */
  int exact;   /* '=' */
  int n;       /* entries; 0 (no value): every port is kept */
  struct weft_ib_hca_entry e[WEFT_IB_HCA_MAX];
};

/* Parses value (NULL or "": keep everything). 0 when valid; -1 with what
 * was wrong and what was expected in why_out. */
int weft_ib_hca_parse(const char *value, struct weft_ib_hca_filter *out, char *why_out,
                      size_t why_len);
/* Whether port `port` of device `dev` passes the filter. */
int weft_ib_hca_keeps(const struct weft_ib_hca_filter *f, const char *dev, int port);

/* ---- GID choice (ib_gid.c) ---- */

enum weft_ib_gid_type {
  WEFT_IB_GID_UNKNOWN = 0, /* no type (an empty entry) */
  WEFT_IB_GID_IB = 1,      /* sysfs "IB/RoCE v1" on an InfiniBand port */
  WEFT_IB_GID_ROCE_V1 = 2, /* "IB/RoCE v1" on an Ethernet port */
  WEFT_IB_GID_ROCE_V2 = 3, /* "RoCE v2" */
};

struct weft_ib_gid {
  int index;
  enum weft_ib_gid_type type;
  uint8_t raw[16];
};

enum weft_ib_link { WEFT_IB_LINK_IB = 1, WEFT_IB_LINK_ETH = 2 };

/* The GID index a port's QPs use. gid_index_param: NCCL_IB_GID_INDEX (-1:
 * not set). -1 with why_out when no entry is usable (or the index set is
 * not in the table). */
int weft_ib_gid_choose(enum weft_ib_link link, const struct weft_ib_gid *table, int n,
                       int gid_index_param, int *index_out, char *why_out, size_t why_len);
/* Reads port p of device dev's GID table from sysfs (root: "/sys", or a
 * test's copy): every gids/<i> whose value is set, with
 * gid_attrs/types/<i>. Returns the entries read (at most max); -1 when
 * the port has no gids folder. */
int weft_ib_gid_read_sysfs(const char *root, const char *dev, int port, enum weft_ib_link link,
                           struct weft_ib_gid *table, int max);
/* "fe80::1" style text of a GID (out: 46 bytes). */
void weft_ib_gid_str(const uint8_t raw[16], char *out, size_t len);

/* ---- MTU and speed (ib_port.c) ---- */

/* enum ibv_mtu (1..5: 256..4096 bytes) to bytes; 0 for other values. */
int weft_ib_mtu_bytes(int ibv_mtu);
/* Bytes (256, 512, ..., 4096) to enum ibv_mtu; 0 for other values. */
int weft_ib_mtu_from_bytes(int bytes);
/* Mb/s of a port: the lane rate of active_speed (SDR 2.5 Gb/s .. XDR
 * 200 Gb/s, NCCL's table) times the lanes of active_width (1x, 4x, 8x, 12x,
 * 2x). 0 when either code is not one NCCL knows. */
int weft_ib_port_speed(unsigned active_speed, unsigned active_width);

/* ---- The ports net/ib uses (ib_dev.c; built where <infiniband/verbs.h>
 * is, WEFT_HAVE_IB_NET) ---- */

#define WEFT_IB_DEV_MAX 32

struct weft_ib_dev {
  char name[WEFT_IB_NAME_LEN]; /* "mlx5_0" */
  int port;
  enum weft_ib_link link;
  int speed;     /* Mb/s; 0: unknown */
  int mtu;       /* enum ibv_mtu of the port */
  int gid_index; /* weft_ib_gid_choose's */
  uint64_t guid; /* host byte order */
};

/* Every active port of every HCA that NCCL_IB_DISABLE and NCCL_IB_HCA let
 * net/ib use, in NCCL's order (device list order, then port), through the
 * library lib (NULL: WEFT_IB_VERBS_LIB). Returns how many (at most max);
 * with 0, why_out says why (no library, NCCL_IB_DISABLE, a bad NCCL_IB_HCA,
 * no device), also logged: INFO for an absent library or device, WARN for
 * a broken library or a bad value. */
int weft_ib_devices_find(const char *lib, struct weft_ib_dev *out, int max, char *why_out,
                         size_t why_len);

#endif
