/* net/ib's memory registration: reg_mr and dereg_mr through the port's
 * registration cache (ib_mr_cache.c), so a buffer is pinned once however
 * many comms register it. How a buffer is registered is ib_rule.c's
 * choice: host memory with ibv_reg_mr; device memory through a dma-buf
 * (cuMemGetHandleForAddressRange, found in libcuda with dlsym at run time:
 * net/ib never links CUDA, + ibv_reg_dmabuf_mr), else plain ibv_reg_mr
 * (nvidia-peermem resolves device addresses), else not at all: reg_mr
 * fails with a message that the buffer needs a host bounce buffer, and
 * weft_net_ib_mr_bounce lets a caller ask first. */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "transport/net/ib/ib_net.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)
/* CUDA's CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD. */
#define CU_DMA_BUF_FD 1

typedef int (*cu_get_handle_fn)(void *handle, unsigned long long dptr, size_t size, int type,
                                unsigned long long flags);

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static cu_get_handle_fn cu_fn;

static void cu_load(void) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void *p = lib != NULL ? dlsym(lib, "cuMemGetHandleForAddressRange") : NULL;
  /* ISO C has no cast from void * to a function pointer: copy it. */
  memcpy(&cu_fn, &p, sizeof(p));
}

/* Whether a file exists (a loaded module's version file). */
static int exists(const char *path) {
  return access(path, F_OK) == 0;
}

void weft__ib_gdr_probe(struct weft_ib_port *p) {
  const struct weft_ib_verbs *v = &weft__ib_v;
  p->gdr.gdr_read = (int)weft_param_int(WEFT_PARAM_NET_GDR_READ);
  p->gdr.peermem = exists("/sys/kernel/mm/memory_peers/nv_mem/version") ||
                   exists("/sys/module/nvidia_peermem/version") ||
                   exists("/sys/module/nv_peer_mem/version");
  /* NCCL's probe: a dma-buf registration of fd -1 fails with EBADF where
   * the kernel and the driver support dma-buf, with EOPNOTSUPP or
   * EPROTONOSUPPORT where they do not. */
  p->gdr.dmabuf = 0;
  if (v->reg_dmabuf_mr != NULL) {
    errno = 0;
    struct ibv_mr *mr = v->reg_dmabuf_mr(p->pd, 0, 0, 0, -1, 0);
    if (mr != NULL) v->dereg_mr(mr);
    p->gdr.dmabuf = mr == NULL && errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
  }
  if (p->gdr.dmabuf) {
    pthread_once(&cu_once, cu_load);
    p->gdr.dmabuf = cu_fn != NULL;
  }
  INFO(WEFT_NET | WEFT_INIT, "NET/IB: %s:%d GPUDirect RDMA: dma-buf %s, nvidia-peermem %s",
       p->d.name, p->d.port, p->gdr.dmabuf ? "yes" : "no", p->gdr.peermem ? "yes" : "no");
}

struct ibv_mr *weft__ib_reg_host(struct weft_ib_port *p, void *data, size_t size) {
  return weft__ib_v.reg_mr(p->pd, data, size, ACCESS);
}

/* Registers [start, start + span) the way `how` says; NULL with why. */
static struct ibv_mr *reg_one(struct weft_ib_port *p, enum weft_ib_mr_how how, uintptr_t start,
                              size_t span, char *why, size_t len) {
  const struct weft_ib_verbs *v = &weft__ib_v;
  struct ibv_mr *mr = NULL;
  if (how == WEFT_IB_MR_DMABUF) {
    int fd = -1;
    int cu = cu_fn(&fd, (unsigned long long)start, span, CU_DMA_BUF_FD, 0);
    if (cu != 0) snprintf(why, len, "cuMemGetHandleForAddressRange failed (CUresult %d)", cu);
    if (cu == 0) {
      mr = v->reg_dmabuf_mr(p->pd, 0, span, (uint64_t)start, fd, ACCESS);
      int err = errno;
      close(fd);
      if (mr == NULL) snprintf(why, len, "ibv_reg_dmabuf_mr failed: %s", strerror(err));
    }
    /* As NCCL: where the dma-buf path fails, nvidia-peermem may still work. */
    if (mr != NULL || !p->gdr.peermem) return mr;
  }
  mr = v->reg_mr(p->pd, (void *)start, span, ACCESS);
  if (mr == NULL) snprintf(why, len, "ibv_reg_mr failed: %s", strerror(errno));
  return mr;
}

ncclResult_t weft__ib_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  struct weft_ib_comm *c = comm;
  struct weft_ib_port *p = c->port;
  char why[256] = "";
  enum weft_ib_mr_how how = weft_ib_mr_choose(type, c->is_send, &p->gdr, why, sizeof(why));
  if (how == WEFT_IB_MR_BOUNCE) {
    WARN(
        "NET/IB: reg_mr of %zu bytes of device memory at %p on %s:%d (peer %s): %s; this "
        "buffer needs a host bounce buffer",
        size, data, p->d.name, p->d.port, c->peer, why);
    return ncclInvalidUsage;
  }
  uintptr_t start;
  size_t span;
  weft_ib_mr_cache_range((uintptr_t)data, size, (size_t)sysconf(_SC_PAGESIZE), &start, &span);
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&p->lock);
  struct weft_ib_mh *mh = weft_ib_mr_cache_get(&p->cache, start, span, type);
  if (mh == NULL) {
    struct ibv_mr *mr = reg_one(p, how, start, span, why, sizeof(why));
    mh = mr != NULL ? calloc(1, sizeof(*mh)) : NULL;
    if (mh != NULL) *mh = (struct weft_ib_mh){.mr = mr, .type = type, .port = p};
    if (mh == NULL || weft_ib_mr_cache_put(&p->cache, start, span, type, mh) != 0) {
      if (mr != NULL) weft__ib_v.dereg_mr(mr);
      free(mh);
      mh = NULL;
      res = ncclSystemError;
    }
  }
  pthread_mutex_unlock(&p->lock);
  if (res != ncclSuccess) {
    WARN("NET/IB: reg_mr of %zu bytes at %p (memory type 0x%x) on %s:%d (peer %s): %s", size, data,
         type, p->d.name, p->d.port, c->peer, why[0] ? why : "out of memory");
    return res;
  }
  *mhandle = mh;
  return ncclSuccess;
}

ncclResult_t weft__ib_dereg_mr(void *comm, void *mhandle) {
  struct weft_ib_comm *c = comm;
  struct weft_ib_mh *mh = mhandle;
  if (mh == NULL) return ncclSuccess;
  /* The comm's port, not mh's: a handle already released must not be read. */
  struct weft_ib_port *p = c->port;
  pthread_mutex_lock(&p->lock);
  int last = weft_ib_mr_cache_release(&p->cache, mh);
  pthread_mutex_unlock(&p->lock);
  if (last < 0) {
    WARN(
        "NET/IB: dereg_mr of a handle %s:%d does not hold (never given out, or released "
        "already; comm with %s)",
        p->d.name, p->d.port, c->peer);
    return ncclInvalidArgument;
  }
  if (last == 1) {
    weft__ib_v.dereg_mr(mh->mr);
    free(mh);
  }
  return ncclSuccess;
}

int weft_net_ib_mr_bounce(void *comm, int type, char *why_out, size_t why_len) {
  const struct weft_ib_comm *c = comm;
  return weft_ib_mr_choose(type, c->is_send, &c->port->gdr, why_out, why_len) == WEFT_IB_MR_BOUNCE;
}
