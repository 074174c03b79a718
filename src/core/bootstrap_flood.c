/* What a bootstrap gate logs about connections it drops before they
 * present the secret. Anyone who can reach a listener can open thousands of
 * them; one WARN each would bury the log and make a flood look like a
 * failing job. So drops are counted per source address: the first from a
 * source is WARNed at once with its reason, later ones as a count at most
 * every WEFT_GATE_FLOOD_LOG_MS, and what is left when the gate closes. */
#include <stdio.h>
#include <string.h>

#include "core/bootstrap_internal.h"
#include "base/debug.h"

/* The address without its port: a flood comes from many ports of one host. */
static union weft_sockaddr flood_host(const union weft_sockaddr *from) {
  union weft_sockaddr a = *from;
  if (a.sa.sa_family == AF_INET)
    a.sin.sin_port = 0;
  else if (a.sa.sa_family == AF_INET6)
    a.sin6.sin6_port = 0;
  else
    memset(&a, 0, sizeof(a));
  return a;
}

static int flood_same_host(const union weft_sockaddr *a, const union weft_sockaddr *b) {
  if (a->sa.sa_family != b->sa.sa_family) return 0;
  if (a->sa.sa_family == AF_INET) return a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  if (a->sa.sa_family == AF_INET6)
    return memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr)) == 0;
  return 1;
}

/* "1.2.3.4" (no port), or "other addresses" for the shared last row. */
static const char *flood_host_str(const struct weft_gate_source *s, char *buf, size_t size) {
  if (s->addr.sa.sa_family == 0) return "other addresses";
  weft_sockaddr_str(&s->addr, buf, size);
  char *colon = strrchr(buf, ':');
  if (colon != NULL) *colon = '\0';
  return buf;
}

/* The row of from's host; the last row is shared once the table is full. */
static struct weft_gate_source *flood_row(struct weft_gate_flood *f,
                                          const union weft_sockaddr *from) {
  union weft_sockaddr host = flood_host(from);
  for (int i = 0; i < f->nsrc; i++)
    if (flood_same_host(&f->src[i].addr, &host)) return &f->src[i];
  if (f->nsrc == WEFT_GATE_FLOOD_SOURCES) {
    struct weft_gate_source *last = &f->src[WEFT_GATE_FLOOD_SOURCES - 1];
    memset(&last->addr, 0, sizeof(last->addr));
    return last;
  }
  struct weft_gate_source *s = &f->src[f->nsrc++];
  memset(s, 0, sizeof(*s));
  s->addr = host;
  return s;
}

/* "12 wrong secret, 1100 silent": the kinds a source's drops were. */
static void flood_kinds_str(const struct weft_gate_source *s, char *buf, size_t size) {
  static const char *const names[WEFT_GATE_DROP_KINDS] = {"wrong secret", "closed early", "silent",
                                                          "evicted"};
  size_t n = 0;
  buf[0] = '\0';
  for (int k = 0; k < WEFT_GATE_DROP_KINDS && n < size; k++)
    if (s->by_kind[k] > 0)
      n += (size_t)snprintf(buf + n, size - n, "%s%lld %s", n ? ", " : "", (long long)s->by_kind[k],
                            names[k]);
}

void weft_gate_flood_note(struct weft_gate_flood *f, const char *who,
                          const union weft_sockaddr *from, enum weft_gate_drop kind,
                          const char *reason) {
  char host[INET6_ADDRSTRLEN + 16], full[INET6_ADDRSTRLEN + 16], kinds[160];
  struct weft_gate_source *s = flood_row(f, from);
  int64_t now = weft_time_ms();
  f->dropped++;
  s->dropped++;
  if (s->by_kind[kind]++ == 0) {
    WARN(
        "%s: dropped connection from %s: %s (further drops like it from %s are counted and "
        "logged at most every %d s)",
        who, weft_sockaddr_str(from, full, sizeof(full)), reason,
        flood_host_str(s, host, sizeof(host)), WEFT_GATE_FLOOD_LOG_MS / 1000);
    s->last_log_ms = now;
    return;
  }
  s->unlogged++;
  if (now - s->last_log_ms < WEFT_GATE_FLOOD_LOG_MS) return;
  flood_kinds_str(s, kinds, sizeof(kinds));
  WARN(
      "%s: dropped %lld more connections from %s that did not present the secret (%lld in all: "
      "%s) - a flood from that address, not a failing rank",
      who, (long long)s->unlogged, flood_host_str(s, host, sizeof(host)), (long long)s->dropped,
      kinds);
  s->unlogged = 0;
  s->last_log_ms = now;
}

void weft_gate_flood_flush(struct weft_gate_flood *f, const char *who) {
  char host[INET6_ADDRSTRLEN + 16], kinds[160];
  for (int i = 0; i < f->nsrc; i++) {
    struct weft_gate_source *s = &f->src[i];
    if (s->unlogged == 0) continue;
    flood_kinds_str(s, kinds, sizeof(kinds));
    WARN(
        "%s: dropped %lld more connections from %s that did not present the secret (%lld in all: "
        "%s)",
        who, (long long)s->unlogged, flood_host_str(s, host, sizeof(host)), (long long)s->dropped,
        kinds);
    s->unlogged = 0;
  }
}

void weft_gate_flood_text(const struct weft_gate_flood *f, char *buf, size_t size) {
  char host[INET6_ADDRSTRLEN + 16], kinds[160];
  if (size > 0) buf[0] = '\0';
  if (f->dropped == 0 || size == 0) return;
  const struct weft_gate_source *top = &f->src[0];
  for (int i = 1; i < f->nsrc; i++)
    if (f->src[i].dropped > top->dropped) top = &f->src[i];
  flood_kinds_str(top, kinds, sizeof(kinds));
  snprintf(buf, size,
           "; meanwhile it dropped %lld connection%s that did not present the secret (%lld from "
           "%s: %s)",
           (long long)f->dropped, f->dropped == 1 ? "" : "s", (long long)top->dropped,
           flood_host_str(top, host, sizeof(host)), kinds);
}
