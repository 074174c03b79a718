/* NVML, loaded at run time (libnvidia-ml.so.1 ships with the driver, not
 * the toolkit): every active NVLink of every GPU and the bus id and kind of
 * its far end, GPU or NVSwitch. Links to one target add up to a count. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "topo/detect.h"

/* The few NVML types used, as nvml.h (v11+) lays them out. */
typedef void *weft_nvml_device_t;
struct weft_nvml_pci_info {
  char bus_id_legacy[16];
  unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
};
#define WEFT_NVML_MAX_LINKS 18
#define WEFT_NVML_REMOTE_GPU 0
#define WEFT_NVML_REMOTE_SWITCH 2

struct nvml_api {
  int (*init)(void);
  int (*shutdown)(void);
  int (*by_busid)(const char *, weft_nvml_device_t *);
  int (*link_state)(weft_nvml_device_t, unsigned, int *);
  int (*remote_pci)(weft_nvml_device_t, unsigned, struct weft_nvml_pci_info *);
  int (*remote_type)(weft_nvml_device_t, unsigned, int *); /* optional */
};

/* A function pointer from dlsym, copied because ISO C has no cast from
 * void * to a function pointer. */
static void sym(void *lib, const char *name, void *fn_out) {
  void *p = dlsym(lib, name);
  memcpy(fn_out, &p, sizeof(p));
}

static int nvml_load(void *lib, struct nvml_api *api) {
  sym(lib, "nvmlInit_v2", &api->init);
  sym(lib, "nvmlShutdown", &api->shutdown);
  sym(lib, "nvmlDeviceGetHandleByPciBusId_v2", &api->by_busid);
  sym(lib, "nvmlDeviceGetNvLinkState", &api->link_state);
  sym(lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", &api->remote_pci);
  sym(lib, "nvmlDeviceGetNvLinkRemoteDeviceType", &api->remote_type);
  return api->init && api->shutdown && api->by_busid && api->link_state && api->remote_pci ? 0 : -1;
}

/* Adds one link from GPU node g to target, merging with a listed one. */
static ncclResult_t add_link(struct weft_topo *topo, int g, const char *target, uint32_t tclass) {
  for (int i = 0; i < topo->nnvlinks; i++) {
    struct weft_topo_nvlink *l = &topo->nvlinks[i];
    if (l->from == g && strcmp(l->target, target) == 0) {
      l->count++;
      return ncclSuccess;
    }
  }
  return weft_topo_add_nvlink(topo, g, target, tclass, 1);
}

/* What NVML answered for one GPU's links, for the INFO line that says why
 * links are missing (a VM may hide them, or name far ends by bus ids the
 * guest does not have). */
struct link_census {
  int inactive, state_err, pci_err, unknown_far, hidden_far;
  int first_err; /* the first NVML error code, 0 for none */
};

static void census_err(struct link_census *c, int *count, int err) {
  (*count)++;
  if (c->first_err == 0) c->first_err = err;
}

uint32_t weft_topo_nvml_far(const struct weft_topo *topo, const char *bus_id, int type,
                            char target[WEFT_TOPO_BUSID_LEN]) {
  if (weft_topo_busid_normalize(bus_id, target) != 0) {
    /* A VM that passes GPUs through but not their NVSwitches names every
     * far end FFFFFFFF:FF:FF.0 (seen on a 2-GPU H200 VM, whose links NVML
     * calls active and of an NVSwitch, and between whose GPUs it says
     * NVLink P2P is OK). NCCL joins such links to one NVSwitch node; so
     * does weft: a switch behind links of several GPUs puts them on NVLink
     * paths. A GPU (or unknown kind) without a bus id cannot be placed. */
    if (type != WEFT_NVML_REMOTE_SWITCH) return 0;
    snprintf(target, WEFT_TOPO_BUSID_LEN, "%s", WEFT_TOPO_HIDDEN_NVS);
    return 0x068000;
  }
  int to = weft_topo_find_busid(topo, target);
  /* Without the kind, a target that is not one of our GPUs is taken for
   * an NVSwitch, as NCCL does. */
  int gpu = type == WEFT_NVML_REMOTE_GPU ||
            (type < 0 && to >= 0 && topo->nodes[to].kind == WEFT_TOPO_GPU);
  return gpu ? 0x030200 : type == WEFT_NVML_REMOTE_SWITCH || type < 0 ? 0x068000 : 0x060000;
}

static ncclResult_t gpu_links(struct weft_topo *topo, const struct nvml_api *api, int g,
                              int *links_out) {
  weft_nvml_device_t dev;
  char target[WEFT_TOPO_BUSID_LEN];
  struct link_census c = {0, 0, 0, 0, 0, 0};
  *links_out = 0;
  int err = api->by_busid(topo->nodes[g].busid, &dev);
  if (err != 0) {
    INFO(WEFT_GRAPH, "topology: NVML has no device at bus id %s (NVML error %d)",
         topo->nodes[g].busid, err);
    return ncclSuccess;
  }
  for (unsigned l = 0; l < WEFT_NVML_MAX_LINKS; l++) {
    int active = 0, type = -1;
    struct weft_nvml_pci_info pci;
    memset(&pci, 0, sizeof(pci));
    if ((err = api->link_state(dev, l, &active)) != 0) {
      census_err(&c, &c.state_err, err);
      continue;
    }
    if (!active) {
      c.inactive++;
      continue;
    }
    if ((err = api->remote_pci(dev, l, &pci)) != 0) {
      census_err(&c, &c.pci_err, err);
      continue;
    }
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    if (api->remote_type == NULL || api->remote_type(dev, l, &type) != 0) type = -1;
    uint32_t tclass = weft_topo_nvml_far(topo, pci.bus_id, type, target);
    if (tclass == 0 || strcmp(target, WEFT_TOPO_HIDDEN_NVS) == 0) c.hidden_far++;
    if (tclass == 0) continue;
    if (weft_topo_find_busid(topo, target) < 0) c.unknown_far++;
    WEFT_CHECK(add_link(topo, g, target, tclass));
    (*links_out)++;
  }
  INFO(WEFT_GRAPH,
       "topology: NVML, GPU %s: %d active links (%d to bus ids not in this topology, %d "
       "whose far end has no bus id: an NVSwitch a VM hides, or dropped), %d inactive, %d "
       "whose state NVML refused, %d whose far end NVML refused (first NVML error %d)",
       topo->nodes[g].busid, *links_out, c.unknown_far, c.hidden_far, c.inactive, c.state_err,
       c.pci_err, c.first_err);
  return ncclSuccess;
}

ncclResult_t weft_topo_detect_nvml(struct weft_topo *topo) {
  struct nvml_api api;
  int total = 0;
  void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    INFO(WEFT_GRAPH, "topology: NVML not found (%s); NVLinks are not seen", dlerror());
    return ncclSuccess;
  }
  memset(&api, 0, sizeof(api));
  if (nvml_load(lib, &api) != 0 || api.init() != 0) {
    INFO(WEFT_GRAPH, "topology: NVML would not start; NVLinks are not seen");
    dlclose(lib);
    return ncclSuccess;
  }
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < topo->nnodes && res == ncclSuccess; i++) {
    int links = 0;
    if (topo->nodes[i].kind != WEFT_TOPO_GPU) continue;
    res = gpu_links(topo, &api, i, &links);
    total += links;
  }
  api.shutdown();
  dlclose(lib);
  topo->sources |= WEFT_TOPO_SRC_NVML;
  INFO(WEFT_GRAPH, "topology: NVML found %d active NVLinks", total);
  return res;
}
