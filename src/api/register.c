/* ncclCommRegister / ncclCommDeregister and ncclCommWindowRegister /
 * ncclCommWindowDeregister.
 *
 * NCCL registers a buffer so its kernels can read and write it in place
 * (NVLink SHARP, IB memory registration, symmetric windows). weft records
 * every registration (the handle is a real object that deregistration
 * checks and frees) and hands a window to the engine, which maps it into
 * every rank's process where the direct collectives need that (ranks in
 * several processes on one GPU); buffers registered with ncclCommRegister
 * are not used by the engines. Live handles are kept in one list, so a
 * handle that was already deregistered, belongs to another communicator,
 * or was never returned by weft is named in a WARN and refused
 * (ncclInvalidArgument) without being dereferenced. A NULL handle, which
 * NCCL itself returns when registration is off, deregisters as a
 * no-op. */
#include "api/register.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "nccl.h"

#include "api/alias.h"
#include "api/group.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/engine.h"

struct weft_registration {
  struct weft_registration *prev, *next;
  const struct ncclComm *comm;
  const void *buff;
  size_t size;
  int window;    /* 1: from ncclCommWindowRegister */
  int win_flags; /* NCCL_WIN_* */
  void *engine;  /* a window: what the engine keeps of it (NULL: nothing) */
  int pending;   /* a window registered inside a group: its engine step waits for ncclGroupEnd */
};

/* ncclWindow_t points to one of these; nccl.h leaves it opaque. */
struct ncclWindow_vidmem {
  struct weft_registration reg;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct weft_registration *reg_head;

/* A communicator whose init has not finished or has failed still takes
 * deregistrations (PyTorch deregisters before it aborts a failed one): only
 * the pointer itself must be sane. */
static ncclResult_t reg_check_comm(const char *caller, const struct ncclComm *comm) {
  return weft_comm_check_live(comm, caller);
}

static ncclResult_t reg_check_buffer(const char *caller, const void *buff, size_t size,
                                     const void *out, const char *out_name) {
  if (out == NULL) {
    WARN("%s: %s (the output handle) is NULL", caller, out_name);
    return ncclInvalidArgument;
  }
  if (buff == NULL && size > 0) {
    WARN("%s: buff is NULL with size %zu", caller, size);
    return ncclInvalidArgument;
  }
  if ((uintptr_t)buff + size < (uintptr_t)buff) {
    WARN("%s: buff %p + size %zu wraps around the address space", caller, buff, size);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static void reg_link(struct weft_registration *r) {
  pthread_mutex_lock(&reg_lock);
  r->prev = NULL;
  r->next = reg_head;
  if (reg_head != NULL) reg_head->prev = r;
  reg_head = r;
  pthread_mutex_unlock(&reg_lock);
}

/* Under reg_lock. */
static void reg_unlink(struct weft_registration *r) {
  if (r->prev != NULL)
    r->prev->next = r->next;
  else
    reg_head = r->next;
  if (r->next != NULL) r->next->prev = r->prev;
}

/* Finds handle in the live list (comparing addresses only), checks that it
 * is of the right kind and belongs to comm, and unlinks and frees it. */
static ncclResult_t reg_release(const char *caller, const struct ncclComm *comm, const void *handle,
                                int window) {
  const char *kind = window ? "window" : "registration handle";
  struct weft_registration *r;
  pthread_mutex_lock(&reg_lock);
  for (r = reg_head; r != NULL && (const void *)r != handle; r = r->next) {
  }
  ncclResult_t res = ncclSuccess;
  if (r == NULL) {
    WARN(
        "%s: %s %p is not live: already deregistered, released when its communicator was "
        "destroyed, or never returned by %s",
        caller, kind, handle, window ? "ncclCommWindowRegister" : "ncclCommRegister");
    res = ncclInvalidArgument;
  } else if (r->window != window) {
    WARN("%s: %p is a %s, not a %s; deregister it with %s", caller, handle,
         r->window ? "window" : "registration handle", kind,
         r->window ? "ncclCommWindowDeregister" : "ncclCommDeregister");
    res = ncclInvalidArgument;
  } else if (r->comm != comm) {
    WARN("%s: %s %p belongs to comm %p, not to comm %p (rank %d)", caller, kind, handle,
         (const void *)r->comm, (const void *)comm, comm->rank);
    res = ncclInvalidArgument;
  } else if (__atomic_load_n(&r->pending, __ATOMIC_ACQUIRE)) {
    WARN(
        "%s: window %p was registered inside a group that has not ended: call ncclGroupEnd "
        "first",
        caller, handle);
    res = ncclInvalidUsage;
  } else {
    reg_unlink(r);
  }
  pthread_mutex_unlock(&reg_lock);
  if (res != ncclSuccess) return res;
  if (r->engine != NULL && comm->engine != NULL)
    comm->engine->window_release((struct ncclComm *)comm, r->engine);
  INFO(WEFT_REG, "%s: rank %d released buffer %p (%zu bytes)", caller, comm->rank, r->buff,
       r->size);
  free(r);
  return ncclSuccess;
}

static ncclResult_t reg_new(const char *caller, const struct ncclComm *comm, const void *buff,
                            size_t size, int window, int win_flags,
                            struct weft_registration **out) {
  /* A window is allocated as its public type so ncclWindow_t is honest. */
  size_t bytes = window ? sizeof(struct ncclWindow_vidmem) : sizeof(struct weft_registration);
  struct weft_registration *r = calloc(1, bytes);
  if (r == NULL) {
    WARN("%s: rank %d: out of memory for a registration", caller, comm->rank);
    return ncclSystemError;
  }
  r->comm = comm;
  r->buff = buff;
  r->size = size;
  r->window = window;
  r->win_flags = win_flags;
  reg_link(r);
  INFO(WEFT_REG, "%s: rank %d recorded buffer %p (%zu bytes%s)", caller, comm->rank, buff, size,
       win_flags & NCCL_WIN_COLL_SYMMETRIC ? ", symmetric" : "");
  *out = r;
  return ncclSuccess;
}

WEFT_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                       void **handle) {
  static const char caller[] = "ncclCommRegister";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(reg_check_buffer(caller, buff, size, handle, "handle"));
  struct weft_registration *r;
  WEFT_CHECK(reg_new(caller, comm, buff, size, 0, 0, &r));
  *handle = r;
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommRegister)

WEFT_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
  static const char caller[] = "ncclCommDeregister";
  WEFT_CHECK(reg_check_comm(caller, comm));
  if (handle == NULL) return ncclSuccess;
  return reg_release(caller, comm, handle, 0);
}
WEFT_ALIAS(ncclCommDeregister)

/* A window's engine step, at the end of the group it was registered in
 * (api/group.h: weft_group_add_step). */
static ncclResult_t window_step(void *arg) {
  struct weft_registration *r = arg;
  struct ncclComm *comm = (struct ncclComm *)r->comm;
  ncclResult_t res = ncclSuccess;
  if (comm->engine != NULL)
    res = comm->engine->window_register(comm, (void *)r->buff, r->size, &r->engine);
  __atomic_store_n(&r->pending, 0, __ATOMIC_RELEASE);
  return res;
}

WEFT_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                             ncclWindow_t *win, int winFlags) {
  static const char caller[] = "ncclCommWindowRegister";
  WEFT_CHECK(weft_comm_check(comm, caller));
  WEFT_CHECK(reg_check_buffer(caller, buff, size, win, "win"));
  const int known = NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC;
  if ((winFlags & ~known) != 0) {
    WARN(
        "%s: winFlags is 0x%x, expected NCCL_WIN_DEFAULT (0x%x) or NCCL_WIN_COLL_SYMMETRIC "
        "(0x%x)",
        caller, (unsigned)winFlags, NCCL_WIN_DEFAULT, NCCL_WIN_COLL_SYMMETRIC);
    return ncclInvalidArgument;
  }
  /* Collective, as NCCL's: the engine may map the window into every
   * rank's process (exec/cuda_direct.c). Inside a group (one thread may
   * hold several ranks) that step waits for ncclGroupEnd. */
  if (weft_group_depth() > 0) {
    struct weft_registration *r;
    WEFT_CHECK(reg_new(caller, comm, buff, size, 1, winFlags, &r));
    r->pending = 1;
    ncclResult_t res = weft_group_add_step(comm, window_step, r);
    if (res != ncclSuccess) {
      r->pending = 0;
      reg_release(caller, comm, r, 1);
      return res;
    }
    *win = (struct ncclWindow_vidmem *)r;
    return ncclSuccess;
  }
  void *engine = NULL;
  if (comm->engine != NULL) WEFT_CHECK(comm->engine->window_register(comm, buff, size, &engine));
  struct weft_registration *r;
  ncclResult_t res = reg_new(caller, comm, buff, size, 1, winFlags, &r);
  if (res != ncclSuccess) {
    if (engine != NULL) comm->engine->window_release(comm, engine);
    return res;
  }
  r->engine = engine;
  *win = (struct ncclWindow_vidmem *)r;
  return ncclSuccess;
}
WEFT_ALIAS(ncclCommWindowRegister)

WEFT_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  static const char caller[] = "ncclCommWindowDeregister";
  WEFT_CHECK(reg_check_comm(caller, comm));
  if (win == NULL) return ncclSuccess;
  return reg_release(caller, comm, win, 1);
}
WEFT_ALIAS(ncclCommWindowDeregister)

void weft_register_release_comm(const struct ncclComm *comm) {
  int n = 0;
  pthread_mutex_lock(&reg_lock);
  struct weft_registration *r = reg_head;
  while (r != NULL) {
    struct weft_registration *next = r->next;
    if (r->comm == comm) {
      reg_unlink(r);
      free(r);
      n++;
    }
    r = next;
  }
  pthread_mutex_unlock(&reg_lock);
  if (n > 0)
    INFO(WEFT_REG, "rank %d: released %d registration(s) left on comm %p", comm->rank, n,
         (const void *)comm);
}
