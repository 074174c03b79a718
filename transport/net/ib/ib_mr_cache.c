/* The registration cache (ib_mr_cache.h): an array of entries, searched
 * linearly. A comm registers a handful of buffers (the proxy's FIFOs, the
 * user buffers of a registered collective), so a scan beats a tree here;
 * when several entries cover a range, the first one (the oldest) serves. */
#include <stdlib.h>
#include <string.h>

#include "transport/net/ib/ib_mr_cache.h"

void weft_ib_mr_cache_range(uintptr_t addr, size_t len, size_t page, uintptr_t *start,
                            size_t *span) {
  uintptr_t s = addr & ~(uintptr_t)(page - 1);
  uintptr_t end = addr + (len ? len : 1);
  uintptr_t e = (end + page - 1) & ~(uintptr_t)(page - 1);
  *start = s;
  *span = (size_t)(e - s);
}

void *weft_ib_mr_cache_get(struct weft_ib_mr_cache *c, uintptr_t addr, size_t len, int type) {
  uintptr_t end = addr + (len ? len : 1);
  for (int i = 0; i < c->n; i++) {
    struct weft_ib_mr_entry *e = &c->e[i];
    if (e->type == type && e->addr <= addr && end <= e->addr + e->len) {
      e->refs++;
      return e->mr;
    }
  }
  return NULL;
}

int weft_ib_mr_cache_put(struct weft_ib_mr_cache *c, uintptr_t addr, size_t len, int type,
                         void *mr) {
  if (c->n == c->cap) {
    int cap = c->cap ? 2 * c->cap : 16;
    struct weft_ib_mr_entry *e = realloc(c->e, (size_t)cap * sizeof(*e));
    if (e == NULL) return -1;
    c->e = e;
    c->cap = cap;
  }
  c->e[c->n++] =
      (struct weft_ib_mr_entry){.addr = addr, .len = len, .type = type, .refs = 1, .mr = mr};
  return 0;
}

int weft_ib_mr_cache_release(struct weft_ib_mr_cache *c, void *mr) {
  for (int i = 0; i < c->n; i++) {
    if (c->e[i].mr != mr) continue;
    if (--c->e[i].refs > 0) return 0;
    /* Keep the order: the oldest entry serves first. */
    memmove(&c->e[i], &c->e[i + 1], (size_t)(c->n - i - 1) * sizeof(c->e[0]));
    c->n--;
    return 1;
  }
  return -1;
}

void weft_ib_mr_cache_free(struct weft_ib_mr_cache *c) {
  free(c->e);
  memset(c, 0, sizeof(*c));
}
