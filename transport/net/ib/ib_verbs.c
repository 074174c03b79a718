/* libibverbs through dlopen (ib_verbs.h): one table of symbol names and
 * where each pointer goes, so a library that lacks one is named with the
 * function it lacks. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "transport/net/ib/ib_verbs.h"

#define SYM(field, required) \
  { "ibv_" #field, offsetof(struct weft_ib_verbs, field), required }

static const struct {
  const char *name;
  size_t offset;
  int required;
} syms[] = {
    SYM(get_device_list, 1), SYM(free_device_list, 1), SYM(get_device_name, 1),
    SYM(get_device_guid, 1), SYM(open_device, 1),      SYM(close_device, 1),
    SYM(query_device, 1),    SYM(query_port, 1),       SYM(query_gid, 1),
    SYM(alloc_pd, 1),        SYM(dealloc_pd, 1),       SYM(reg_mr, 1),
    SYM(dereg_mr, 1),        SYM(create_cq, 1),        SYM(destroy_cq, 1),
    SYM(create_qp, 1),       SYM(modify_qp, 1),        SYM(destroy_qp, 1),
    SYM(get_async_event, 1), SYM(ack_async_event, 1),  SYM(event_type_str, 1),
    SYM(reg_dmabuf_mr, 0),   SYM(reg_mr_iova2, 0),     SYM(wc_status_str, 0),
};

int weft_ib_verbs_open(const char *path, struct weft_ib_verbs *v, char *why_out, size_t why_len) {
  struct weft_ib_verbs t;
  memset(&t, 0, sizeof(t));
  t.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (t.lib == NULL) {
    const char *e = dlerror();
    snprintf(why_out, why_len, "dlopen %s: %s", path, e ? e : "failed");
    return -1;
  }
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    void *p = dlsym(t.lib, syms[i].name);
    if (p == NULL && syms[i].required) {
      snprintf(why_out, why_len, "%s has no %s (not libibverbs, or too old)", path, syms[i].name);
      dlclose(t.lib);
      return -1;
    }
    /* ISO C has no cast from void * to a function pointer: copy it. */
    memcpy((char *)&t + syms[i].offset, &p, sizeof(p));
  }
  *v = t;
  return 0;
}

void weft_ib_verbs_close(struct weft_ib_verbs *v) {
  if (v->lib != NULL) dlclose(v->lib);
  memset(v, 0, sizeof(*v));
}
