/* Interface choice as NCCL makes it: NCCL_SOCKET_IFNAME's list syntax and
 * the default order, as pure functions over a list of interface addresses
 * so that tests can feed them synthetic lists. socket.c feeds them
 * getifaddrs(). */
#ifndef WEFT_TRANSPORT_IFNAME_H
#define WEFT_TRANSPORT_IFNAME_H

#include "transport/socket.h"

/* One address of one interface, as getifaddrs() lists it. */
struct weft_ifaddr {
  const char *name;
  union weft_sockaddr addr; /* AF_INET or AF_INET6; other families are never chosen */
  int up;                   /* IFF_UP */
};

/* Whether interface `name` is selected by spec, in NCCL_SOCKET_IFNAME's
 * syntax: a comma list of name prefixes; a leading '^' selects every name
 * the list does not; '=' (first, or right after '^') makes the names exact.
 * A ":suffix" on a list item is ignored, as NCCL's parser drops it (it is
 * a port number for InfiniBand device lists). */
int weft_ifname_match(const char *name, const char *spec);

/* Whether spec names at least one interface ("^", "=", "," do not: NCCL
 * ignores such values and so do we, with a WARN). */
int weft_ifname_spec_valid(const char *spec);

/* The index in ifs of the address to advertise, or -1 when none fits.
 * With spec (the user's NCCL_SOCKET_IFNAME) only interfaces it selects;
 * without, NCCL's order: ib*, then any but docker*, lo*, virbr*, then
 * docker*, then lo. Only up interfaces; family AF_INET or AF_INET6 allows
 * that family alone (NCCL_SOCKET_FAMILY), AF_UNSPEC takes IPv4 first, or
 * IPv6 first when prefer_v6. IPv6 link-local and loopback addresses are
 * taken only when spec selects their interface. */
int weft_ifname_choose(const struct weft_ifaddr *ifs, int n, const char *spec, int family,
                       int prefer_v6);

#endif
