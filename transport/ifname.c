/* NCCL_SOCKET_IFNAME matching and the default interface order (see
 * ifname.h). No system calls here: socket.c gathers the addresses. */
#include "transport/ifname.h"

#include <string.h>

/* The name part of the list item at *item: up to ',' or the end, cut at a
 * ':' (NCCL's port suffix). Advances *item past the item and its comma. */
static size_t next_item(const char **item, const char **name_out) {
  const char *p = *item;
  size_t len = strcspn(p, ",");
  size_t name_len = strcspn(p, ",:");
  *name_out = p;
  *item = p + len + (p[len] == ',');
  return name_len < len ? name_len : len;
}

/* Skips the '^' and '=' flags that lead a spec. */
static const char *skip_flags(const char *spec, int *exclude, int *exact) {
  *exclude = *spec == '^';
  if (*exclude) spec++;
  *exact = *spec == '=';
  if (*exact) spec++;
  return spec;
}

int weft_ifname_match(const char *name, const char *spec) {
  int exclude, exact, match = 0;
  const char *item = skip_flags(spec, &exclude, &exact);
  while (*item != '\0' && !match) {
    const char *tok;
    size_t len = next_item(&item, &tok);
    if (len == 0) continue;
    if (exact)
      match = strlen(name) == len && strncmp(name, tok, len) == 0;
    else
      match = strncmp(name, tok, len) == 0;
  }
  return exclude ? !match : match;
}

int weft_ifname_spec_valid(const char *spec) {
  int exclude, exact;
  const char *item = skip_flags(spec, &exclude, &exact);
  while (*item != '\0') {
    const char *tok;
    if (next_item(&item, &tok) > 0) return 1;
  }
  return 0;
}

/* Link-local IPv6 addresses need the right scope on every host and ::1
 * reaches no other host: taken only when the user names the interface. */
static int usable(const struct weft_ifaddr *ifa, int family, int user_spec) {
  if (!ifa->up || ifa->addr.sa.sa_family != family) return 0;
  if (family == AF_INET6 && !user_spec) {
    const struct in6_addr *a = &ifa->addr.sin6.sin6_addr;
    if (IN6_IS_ADDR_LINKLOCAL(a) || IN6_IS_ADDR_LOOPBACK(a)) return 0;
  }
  return 1;
}

static int find(const struct weft_ifaddr *ifs, int n, const char *spec, int user_spec,
                const int families[2]) {
  for (int f = 0; f < 2 && families[f] != AF_UNSPEC; f++)
    for (int i = 0; i < n; i++)
      if (usable(&ifs[i], families[f], user_spec) && weft_ifname_match(ifs[i].name, spec)) return i;
  return -1;
}

int weft_ifname_choose(const struct weft_ifaddr *ifs, int n, const char *spec, int family,
                       int prefer_v6) {
  int families[2] = {prefer_v6 ? AF_INET6 : AF_INET, prefer_v6 ? AF_INET : AF_INET6};
  if (family == AF_INET || family == AF_INET6) families[0] = family, families[1] = AF_UNSPEC;
  if (spec != NULL) return find(ifs, n, spec, 1, families);
  /* NCCL's order: InfiniBand's IP interfaces, the rest, then the bridges
   * of containers and loopback as last resorts. */
  static const char *const order[] = {"ib", "^docker,lo,virbr", "docker", "lo"};
  for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
    int i = find(ifs, n, order[k], 0, families);
    if (i >= 0) return i;
  }
  return -1;
}
