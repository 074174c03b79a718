/* NCCL's external net plugins (docs/NETWORK.md, "External net plugins"):
 * the loader (plugin.c) finds and opens the shared object NCCL_NET_PLUGIN
 * names, and one adaptor per ABI version (adapt.c) presents the plugin's
 * table (net_plugin_abi.h) as a struct weft_net_ops. One plugin per
 * process, loaded once, by weft_net_get (net.c). */
#ifndef WEFT_TRANSPORT_NET_PLUGIN_PLUGIN_H
#define WEFT_TRANSPORT_NET_PLUGIN_PLUGIN_H

#include <stddef.h>

#include "transport/net/net.h"

/* Opens, checks and initialises the plugin: *out is its table, or NULL
 * when there is none (NCCL_NET_PLUGIN=none, no libnccl-net.so) or it was
 * refused (one WARN naming the file and what it lacked; the built-in
 * networks are then used). */
void weft_net_plugin_load(const struct weft_net_ops **out);

/* The loaded plugin's ABI version (8..11) and file, for logs and tests;
 * 0 and "" when none is loaded. */
int weft_net_plugin_version(void);
const char *weft_net_plugin_file(void);

/* The adaptor of version (8..11) over table (a ncclNet_vN_t): checks that
 * the members weft calls are there. 0 and *out set, or -1 with the first
 * missing member's name in why. Keeps table for the process's life. */
int weft_net_plugin_adapt(const void *table, int version, const struct weft_net_ops **out,
                          char *why, size_t why_len);

#endif
