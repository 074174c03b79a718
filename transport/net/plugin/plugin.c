/* The net plugin loader: NCCL_NET_PLUGIN read as NCCL reads it ("none":
 * no plugin; a value is tried as given, then, unless it is a path or a
 * lib*.so name, as libnccl-net-<value>.so; unset: libnccl-net.so, whose
 * absence is normal and said only at INFO), then the newest table the
 * file exports among the versions weft adapts (adapt.c). A file that
 * cannot be opened, exports none of them, lacks a member, or whose init
 * fails is refused with one WARN naming the file and what it lacked, and
 * the built-in networks are used. A comma list, as NCCL 2.26 reads it, is
 * tried in order and the first entry that loads is used. */
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "base/debug.h"
#include "base/param.h"
#include "transport/net/plugin/plugin.h"

#define PLUGIN_PREFIX "libnccl-net"
#define PLUGIN_DEFAULT PLUGIN_PREFIX ".so"
/* The versions weft adapts, newest first. */
static const int plugin_versions[] = {11, 10, 9, 8};

static int loaded_version;
static char loaded_file[512];

int weft_net_plugin_version(void) {
  return loaded_version;
}
const char *weft_net_plugin_file(void) {
  return loaded_file;
}

static int name_is_plain(const char *v) {
  size_t n = strlen(v);
  int lib_so = strncmp(v, "lib", 3) == 0 && n >= 3 && strcmp(v + n - 3, ".so") == 0;
  return strchr(v, '/') == NULL && !lib_so;
}

/* dlopens spec as NCCL does; the name that opened goes to file. On
 * failure, what each attempt said goes to why. */
static void *plugin_open(const char *spec, char *file, size_t file_len, char *why, size_t why_len) {
  char names[2][256];
  int n = 0;
  snprintf(names[n++], sizeof(names[0]), "%s", spec);
  if (name_is_plain(spec)) snprintf(names[n++], sizeof(names[0]), PLUGIN_PREFIX "-%s.so", spec);
  why[0] = '\0';
  for (int i = 0; i < n; i++) {
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) {
      struct link_map *map = NULL;
      const char *path =
          dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name[0] ? map->l_name : names[i];
      snprintf(file, file_len, "%s", path);
      return h;
    }
    const char *err = dlerror();
    size_t used = strlen(why);
    snprintf(why + used, why_len - used, "%s%s", used ? "; " : "", err ? err : names[i]);
  }
  return NULL;
}

/* The newest adapted table h exports (version to *version_out), or NULL
 * with what it does export instead in why. */
static const void *plugin_table(void *h, int *version_out, char *why, size_t why_len) {
  char sym[32];
  for (size_t i = 0; i < sizeof(plugin_versions) / sizeof(plugin_versions[0]); i++) {
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", plugin_versions[i]);
    const void *t = dlsym(h, sym);
    if (t != NULL) {
      *version_out = plugin_versions[i];
      return t;
    }
  }
  /* Name the versions it has, so the WARN says why none fits. */
  char others[128] = "";
  for (int v = 1; v <= 16; v++) {
    if (v >= 8 && v <= 11) continue;
    snprintf(sym, sizeof(sym), "ncclNetPlugin_v%d", v);
    if (dlsym(h, sym) == NULL) continue;
    size_t used = strlen(others);
    snprintf(others + used, sizeof(others) - used, "%s%s", used ? ", " : "", sym);
  }
  snprintf(why, why_len, "it exports none of ncclNetPlugin_v11, _v10, _v9, _v8%s%s%s",
           others[0] ? " (only " : "", others, others[0] ? ": versions weft does not load)" : "");
  return NULL;
}

/* Adapts and initialises the table; a WARN-worthy reason in why. */
static int plugin_start(const void *table, int version, const struct weft_net_ops **out, char *why,
                        size_t why_len) {
  const struct weft_net_ops *ops;
  if (weft_net_plugin_adapt(table, version, &ops, why, why_len) != 0) return -1;
  ncclResult_t res = ops->init();
  if (res != ncclSuccess) {
    snprintf(why, why_len, "its init failed (error %d)", (int)res);
    return -1;
  }
  int ndev = 0;
  res = ops->devices(&ndev);
  if (res != ncclSuccess || ndev < 1) {
    snprintf(why, why_len, "it reports no device (devices -> %d, %d devices)", (int)res, ndev);
    return -1;
  }
  *out = ops;
  return 0;
}

/* Loads one plugin: spec as NCCL_NET_PLUGIN names it, or NULL for the
 * default. 0 with *out set, or -1 (said at WARN, or INFO for an absent
 * default). */
static int plugin_try(const char *spec, const struct weft_net_ops **out) {
  char file[512], why[1024];
  void *h = plugin_open(spec ? spec : PLUGIN_DEFAULT, file, sizeof(file), why, sizeof(why));
  if (h == NULL) {
    if (spec == NULL)
      INFO(WEFT_NET | WEFT_INIT, "net plugin: no " PLUGIN_DEFAULT " (%s)", why);
    else
      WARN("net plugin: NCCL_NET_PLUGIN=%s: cannot load it (%s); using the built-in networks", spec,
           why);
    return -1;
  }
  int version = 0;
  const void *table = plugin_table(h, &version, why, sizeof(why));
  if (table == NULL || plugin_start(table, version, out, why, sizeof(why)) != 0) {
    WARN("net plugin %s refused: %s; using the built-in networks", file, why);
    *out = NULL;
    dlclose(h);
    return -1;
  }
  loaded_version = version;
  snprintf(loaded_file, sizeof(loaded_file), "%s", file);
  INFO(WEFT_NET | WEFT_INIT, "net plugin: loaded %s from %s (ncclNetPlugin_v%d)", (*out)->name,
       file, version);
  return 0;
}

void weft_net_plugin_load(const struct weft_net_ops **out) {
  *out = NULL;
  const char *spec = weft_param_str(WEFT_PARAM_NET_PLUGIN);
  if (spec == NULL) {
    (void)plugin_try(NULL, out);
    return;
  }
  if (strcasecmp(spec, "none") == 0) {
    INFO(WEFT_NET | WEFT_INIT, "net plugin: NCCL_NET_PLUGIN=none: no external net plugin");
    return;
  }
  /* A comma list (NCCL 2.26 on): the first entry that loads is used. */
  char list[1024];
  snprintf(list, sizeof(list), "%s", spec);
  char *save = NULL;
  for (char *name = strtok_r(list, ",", &save); name != NULL; name = strtok_r(NULL, ",", &save))
    if (plugin_try(name, out) == 0) return;
}
