/* net/ib's registration cache: address range -> memory region,
 * refcounted, so that a buffer registered by several comms, or again and
 * again by the same one, is pinned and registered with the HCA once. A
 * pure data structure (the regions are the glue's opaque handles); one
 * per protection domain, locked by its user. Private to transport/net/ib/. */
#ifndef WEFT_TRANSPORT_NET_IB_IB_MR_CACHE_H
#define WEFT_TRANSPORT_NET_IB_IB_MR_CACHE_H

#include <stddef.h>
#include <stdint.h>

struct weft_ib_mr_entry {
  uintptr_t addr; /* page-aligned start */
  size_t len;     /* page-aligned span */
  int type;       /* WEFT_NET_PTR_* */
  int refs;
  void *mr;
};

struct weft_ib_mr_cache {
  struct weft_ib_mr_entry *e;
  int n, cap;
};

/* The pages [*start, *start + *span) that hold [addr, addr + len); page:
 * a power of two. len 0 still spans one page (a region is never empty). */
void weft_ib_mr_cache_range(uintptr_t addr, size_t len, size_t page, uintptr_t *start,
                            size_t *span);
/* The region of an entry of type `type` that covers [addr, addr + len),
 * with one more reference; NULL when none does. */
void *weft_ib_mr_cache_get(struct weft_ib_mr_cache *c, uintptr_t addr, size_t len, int type);
/* Adds region mr for [addr, addr + len) (as weft_ib_mr_cache_range gives
 * it), one reference. 0, or -1 when out of memory. */
int weft_ib_mr_cache_put(struct weft_ib_mr_cache *c, uintptr_t addr, size_t len, int type,
                         void *mr);
/* Drops a reference to mr: 1 when it was the last (the entry is gone: the
 * caller deregisters mr), 0 when others remain, -1 when mr is not here. */
int weft_ib_mr_cache_release(struct weft_ib_mr_cache *c, void *mr);
void weft_ib_mr_cache_free(struct weft_ib_mr_cache *c);

#endif
