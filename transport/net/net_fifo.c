/* A FIFO direction carried by the network (net_fifo.h): layout, connect
 * and the proxy's progress of one link, flushes of device slots included. */
#include "transport/net/net_fifo.h"

#include <limits.h>
#include <string.h>

#include "base/check.h"
#include "base/debug.h"

/* head and tail on cache lines of their own: the kernel polls one while
 * the proxy writes the other. */
#define FIFO_TAIL_OFF 64
#define FIFO_SIZES_OFF 128
#define FIFO_SLOTS_ALIGN 4096

static size_t slots_off(int nslots) {
  size_t end = FIFO_SIZES_OFF + (size_t)nslots * sizeof(uint32_t);
  return (end + FIFO_SLOTS_ALIGN - 1) & ~(size_t)(FIFO_SLOTS_ALIGN - 1);
}

size_t weft_net_fifo_bytes(int nslots, size_t slot_bytes) {
  return slots_off(nslots) + (size_t)nslots * slot_bytes;
}

size_t weft_net_fifo_ctrl_bytes(int nslots) {
  return slots_off(nslots);
}

ncclResult_t weft_net_fifo_open(const struct weft_net_ops *net, int dev, int is_send, int peer,
                                int channel, int nslots, size_t slot_bytes, void *mem, void *handle,
                                struct weft_net_fifo *out) {
  if (nslots < 1 || nslots > WEFT_NET_FIFO_MAX_SLOTS || slot_bytes == 0 || slot_bytes > INT_MAX) {
    WARN("net link to rank %d: %d slots of %zu bytes: expected 1..%d slots of 1 B..2 GiB", peer,
         nslots, slot_bytes, WEFT_NET_FIFO_MAX_SLOTS);
    return ncclInternalError;
  }
  struct weft_net_fifo f;
  memset(&f, 0, sizeof(f));
  f.is_send = is_send;
  f.peer = peer;
  f.channel = channel;
  f.nslots = nslots;
  f.slot_bytes = slot_bytes;
  f.net = net;
  f.dev = dev;
  memset(mem, 0, slots_off(nslots));
  f.head = (uint64_t *)mem;
  f.tail = (uint64_t *)((char *)mem + FIFO_TAIL_OFF);
  f.sizes = (uint32_t *)((char *)mem + FIFO_SIZES_OFF);
  f.slots = (char *)mem + slots_off(nslots);
  f.slot_type = WEFT_NET_PTR_HOST;
  if (!is_send) {
    ncclResult_t res = net->listen(dev, handle, &f.listen);
    if (res != ncclSuccess) {
      WARN("net link from rank %d (channel %d): listening failed", peer, channel);
      return res;
    }
  }
  *out = f;
  return ncclSuccess;
}

void weft_net_fifo_use_device_slots(struct weft_net_fifo *f, void *dev_slots) {
  f->slots = dev_slots;
  f->slot_type = WEFT_NET_PTR_CUDA;
}

ncclResult_t weft_net_fifo_connect(struct weft_net_fifo *f, const void *handle, int *done_out) {
  ncclResult_t res = ncclSuccess;
  *done_out = 0;
  if (f->comm == NULL) {
    res = f->is_send ? f->net->connect(f->dev, handle, &f->comm)
                     : f->net->accept(f->listen, &f->comm);
    if (res != ncclSuccess) {
      WARN("net link %s rank %d (channel %d): %s failed", f->is_send ? "to" : "from", f->peer,
           f->channel, f->is_send ? "connect" : "accept");
      return res;
    }
    if (f->comm == NULL) return ncclSuccess;
  }
  if (f->mh == NULL) {
    res =
        f->net->reg_mr(f->comm, f->slots, (size_t)f->nslots * f->slot_bytes, f->slot_type, &f->mh);
    if (res != ncclSuccess) {
      WARN("net link %s rank %d (channel %d): registering %zu bytes of slots in %s memory failed",
           f->is_send ? "to" : "from", f->peer, f->channel, (size_t)f->nslots * f->slot_bytes,
           f->slot_type == WEFT_NET_PTR_HOST ? "host" : "device");
      return res;
    }
  }
  if (f->listen != NULL) {
    f->net->close_listen(f->listen);
    f->listen = NULL;
  }
  *done_out = 1;
  return ncclSuccess;
}

/* Asks the network to flush slot s's receive of size bytes into device
 * memory; f->req[s] is then the flush (NULL: nothing to wait for). */
static ncclResult_t fifo_flush(struct weft_net_fifo *f, uint64_t s, size_t size) {
  void *data = f->slots + s * f->slot_bytes, *req = NULL;
  int isize = (int)size; /* <= slot_bytes, checked at open to fit */
  WEFT_CHECK(f->net->iflush(f->comm, 1, &data, &isize, &f->mh, &req));
  f->req[s] = req;
  if (req != NULL) {
    f->flushing |= 1u << s;
    f->flushes++;
  }
  return ncclSuccess;
}

/* Retires the posted requests that finished, in order, and publishes
 * how many to the kernel in *counter (head for a send, tail for a
 * receive), after the data (release). A receive into device slots is
 * published only once its flush finished too. */
static ncclResult_t fifo_complete(struct weft_net_fifo *f, uint64_t *counter, int *moved) {
  const uint64_t ns = (uint64_t)f->nslots;
  while (f->done < f->posted) {
    uint64_t s = f->done % ns;
    int done = 0;
    size_t size = 0;
    WEFT_CHECK(f->net->test(f->req[s], &done, &size));
    if (!done) break;
    f->req[s] = NULL;
    if (f->flushing & (1u << s)) {
      f->flushing &= ~(1u << s);
    } else if (!f->is_send && f->slot_type != WEFT_NET_PTR_HOST && size > 0) {
      WEFT_CHECK(fifo_flush(f, s, size));
      *moved = 1;
      if (f->req[s] != NULL) continue; /* tested next, from the top */
    }
    f->done++;
    __atomic_store_n(counter, f->done, __ATOMIC_RELEASE);
    *moved = 1;
  }
  return ncclSuccess;
}

/* Sends every slot the kernel filled (up to target, nslots in flight);
 * frees each for the kernel once its send completed, in order. */
static ncclResult_t fifo_send(struct weft_net_fifo *f, uint64_t target, int *moved) {
  const uint64_t ns = (uint64_t)f->nslots;
  while (f->posted < target && f->posted < f->done + ns) {
    if (__atomic_load_n(f->tail, __ATOMIC_ACQUIRE) <= f->posted) break;
    uint64_t s = f->posted % ns;
    size_t n = __atomic_load_n(&f->sizes[s], __ATOMIC_RELAXED);
    void *req = NULL;
    WEFT_CHECK(f->net->isend(f->comm, f->slots + s * f->slot_bytes, n, 0, f->mh, &req));
    if (req == NULL) break;
    f->req[s] = req;
    f->posted++;
    *moved = 1;
  }
  /* Each slot is the kernel's again once its send completed. */
  return fifo_complete(f, f->head, moved);
}

/* Receives into every slot the kernel freed (up to target); publishes
 * each, in order, once its data landed. */
static ncclResult_t fifo_recv(struct weft_net_fifo *f, uint64_t target, int *moved) {
  const uint64_t ns = (uint64_t)f->nslots;
  while (f->posted < target && f->posted < __atomic_load_n(f->head, __ATOMIC_ACQUIRE) + ns) {
    uint64_t s = f->posted % ns;
    void *data = f->slots + s * f->slot_bytes, *req = NULL;
    size_t size = f->slot_bytes;
    int tag = 0;
    WEFT_CHECK(f->net->irecv(f->comm, 1, &data, &size, &tag, &f->mh, &req));
    if (req == NULL) break;
    f->req[s] = req;
    f->posted++;
    *moved = 1;
  }
  /* Each slot is the kernel's to read once its data landed. */
  return fifo_complete(f, f->tail, moved);
}

ncclResult_t weft_net_fifo_progress(struct weft_net_fifo *f, uint64_t target, int *moved_out) {
  *moved_out = 0;
  ncclResult_t res = f->is_send ? fifo_send(f, target, moved_out) : fifo_recv(f, target, moved_out);
  if (res != ncclSuccess)
    WARN("net link %s rank %d (channel %d): the network failed at slot %llu",
         f->is_send ? "to" : "from", f->peer, f->channel, (unsigned long long)f->done);
  return res;
}

void weft_net_fifo_close(struct weft_net_fifo *f) {
  if (f->mh != NULL) f->net->dereg_mr(f->comm, f->mh);
  if (f->comm != NULL) {
    if (f->is_send)
      f->net->close_send(f->comm);
    else
      f->net->close_recv(f->comm);
  }
  if (f->listen != NULL) f->net->close_listen(f->listen);
  f->mh = f->comm = f->listen = NULL;
}
