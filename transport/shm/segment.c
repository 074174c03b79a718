/* The shm transport's segments in /dev/shm: their names, creating them with
 * their space reserved, mapping them, and reclaiming those that killed jobs
 * left behind. A segment lives in /dev/shm only between the receiver's
 * setup and the moment the sender has mapped it (see shm.c), so only a
 * process killed inside that window leaves one. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/debug.h"
#include "base/param.h"
#include "transport/shm/shm.h"

#define SHM_PREFIX "/weft-"
/* Scans of /dev/shm are at most this often per process: a job setting up
 * thousands of connections must not read the directory thousands of times. */
#define SHM_RECLAIM_PERIOD_MS 1000

int64_t weft__shm_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t shm_pidns_value;
static pthread_once_t shm_pidns_once = PTHREAD_ONCE_INIT;

static void shm_pidns_read(void) {
  struct stat sb;
  if (stat("/proc/self/ns/pid", &sb) == 0) shm_pidns_value = (uint64_t)sb.st_ino;
}

uint64_t weft__shm_pidns(void) {
  pthread_once(&shm_pidns_once, shm_pidns_read);
  return shm_pidns_value;
}

/* Reserves the segment's pages now. ftruncate alone would give a sparse
 * file, and the first store to a page /dev/shm cannot back would kill the
 * process with SIGBUS in the middle of a collective; fallocate fails here
 * instead, where the caller can still choose another transport. */
static ncclResult_t shm_reserve(int fd, const struct weft_conn *conn, const char *name,
                                uint64_t bytes) {
  int rc;
  do {
    rc = posix_fallocate(fd, 0, (off_t)bytes);
  } while (rc == EINTR);
  if (rc == 0) return ncclSuccess;
  if (rc == ENOSPC) {
    struct statvfs vfs;
    uint64_t avail = 0, total = 0;
    if (statvfs(WEFT_SHM_DIR, &vfs) == 0) {
      avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
      total = (uint64_t)vfs.f_blocks * vfs.f_frsize;
    }
    WARN("shm: rank %d needs %" PRIu64 " bytes (%.1f MiB) in " WEFT_SHM_DIR
         " for its connection from rank %d (channel %d), but " WEFT_SHM_DIR " has %" PRIu64
         " bytes (%.1f MiB) free of %" PRIu64
         " (%.1f MiB): %s. Enlarge it (docker --shm-size), "
         "lower NCCL_BUFFSIZE or WEFT_SHM_SLOTS, or set NCCL_SHM_DISABLE=1",
         conn->rank, bytes, bytes / 1048576.0, conn->peer, conn->channel, avail, avail / 1048576.0,
         total, total / 1048576.0, strerror(rc));
  } else {
    WARN("shm: rank %d: posix_fallocate of %s (%" PRIu64 " bytes, from rank %d channel %d): %s",
         conn->rank, name, bytes, conn->peer, conn->channel, strerror(rc));
  }
  errno = rc;
  return ncclSystemError;
}

/* MAP_POPULATE: the page faults happen here, not in the first transfers. */
static ncclResult_t shm_map(int fd, const struct weft_conn *conn, const char *name,
                            struct weft_shm_segment *seg) {
  void *p = mmap(NULL, seg->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    WARN("shm: rank %d: mmap of %s (%zu bytes, peer rank %d channel %d): %s", conn->rank, name,
         seg->map_bytes, conn->peer, conn->channel, strerror(errno));
    return ncclSystemError;
  }
  seg->hdr = p;
  seg->ring = (char *)p + WEFT_SHM_HEADER_BYTES;
  return ncclSuccess;
}

static void shm_header_init(struct weft_shm_header *h, const struct weft_conn *conn,
                            uint64_t slot_bytes, uint64_t ring_bytes) {
  h->magic = WEFT_SHM_MAGIC;
  h->version = WEFT_SHM_VERSION;
  h->slot_bytes = slot_bytes;
  h->ring_bytes = ring_bytes;
  h->recv_pid = (int32_t)getpid();
  h->recv_rank = conn->rank;
  h->recv_pidns = weft__shm_pidns();
  h->recv_map = (uint64_t)(uintptr_t)h;
  h->send_pidns = 0;
  atomic_init(&h->send_pid, 0);
  atomic_init(&h->closed, 0);
  atomic_init(&h->tail, 0);
  atomic_init(&h->head, 0);
}

ncclResult_t weft__shm_segment_create(const struct weft_conn *conn, uint64_t slot_bytes,
                                      uint64_t ring_bytes, struct weft_shm_segment *out) {
  struct weft_shm_segment seg = {.map_bytes = WEFT_SHM_HEADER_BYTES + ring_bytes};
  ncclResult_t res;
  int saved_errno;
  /* The sender is the peer, the receiver (and creator) is this rank. */
  snprintf(seg.name, sizeof(seg.name), SHM_PREFIX "%016" PRIx64 "-%d-%d-%d-%d", conn->comm_hash,
           conn->peer, conn->rank, conn->channel, (int)getpid());
  int fd = shm_open(seg.name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    WARN("shm: rank %d cannot create %s for rank %d channel %d: %s", conn->rank, seg.name,
         conn->peer, conn->channel, strerror(errno));
    return ncclSystemError;
  }
  res = shm_reserve(fd, conn, seg.name, seg.map_bytes);
  if (res != ncclSuccess) goto err_unlink;
  res = shm_map(fd, conn, seg.name, &seg);
  if (res != ncclSuccess) goto err_unlink;
  close(fd);
  shm_header_init(seg.hdr, conn, slot_bytes, ring_bytes);
  *out = seg;
  return ncclSuccess;

err_unlink:
  saved_errno = errno; /* the caller reads ENOSPC from errno */
  close(fd);
  shm_unlink(seg.name);
  errno = saved_errno;
  return res;
}

static ncclResult_t shm_header_check(const struct weft_conn *conn,
                                     const struct weft_shm_segment *seg) {
  const struct weft_shm_header *h = seg->hdr;
  if (h->magic != WEFT_SHM_MAGIC || h->version != WEFT_SHM_VERSION || h->slot_bytes == 0 ||
      h->ring_bytes % h->slot_bytes != 0 ||
      h->ring_bytes + WEFT_SHM_HEADER_BYTES != seg->map_bytes) {
    WARN(
        "shm: rank %d: segment %s from rank %d (channel %d) has a bad header (magic %#x "
        "version %u); mixed weft versions?",
        conn->rank, seg->name, conn->peer, conn->channel, h->magic, h->version);
    return ncclInternalError;
  }
  return ncclSuccess;
}

ncclResult_t weft__shm_segment_open(const struct weft_conn *conn, const char *name,
                                    size_t map_bytes, struct weft_shm_segment *out) {
  struct weft_shm_segment seg = {.map_bytes = map_bytes};
  ncclResult_t res = ncclInternalError;
  if (strnlen(name, sizeof(seg.name)) == sizeof(seg.name) ||
      strncmp(name, SHM_PREFIX, strlen(SHM_PREFIX)) != 0 || map_bytes <= WEFT_SHM_HEADER_BYTES) {
    WARN("shm: rank %d got a malformed handle from rank %d (channel %d)", conn->rank, conn->peer,
         conn->channel);
    return ncclInternalError;
  }
  strcpy(seg.name, name);
  int fd = shm_open(seg.name, O_RDWR, 0);
  if (fd < 0) {
    int err = errno;
    WARN("shm: rank %d cannot open %s of rank %d (channel %d): %s%s", conn->rank, seg.name,
         conn->peer, conn->channel, strerror(err),
         err == ENOENT ? " (the receiver closed or exited before the sender mapped it)" : "");
    return err == ENOENT ? ncclRemoteError : ncclSystemError;
  }
  struct stat sb;
  if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != map_bytes) {
    WARN("shm: rank %d: %s of rank %d (channel %d) is %lld bytes, the handle says %zu", conn->rank,
         seg.name, conn->peer, conn->channel, (long long)sb.st_size, map_bytes);
    goto err_close;
  }
  res = shm_map(fd, conn, seg.name, &seg);
  if (res != ncclSuccess) goto err_close;
  close(fd);
  res = shm_header_check(conn, &seg);
  if (res != ncclSuccess) {
    weft__shm_segment_unmap(&seg);
    return res;
  }
  *out = seg;
  return ncclSuccess;

err_close:
  close(fd);
  return res;
}

void weft__shm_segment_unlink(const struct weft_shm_segment *seg) {
  if (seg->name[0] != '\0' && shm_unlink(seg->name) != 0 && errno != ENOENT)
    WARN("shm: cannot remove %s: %s; remove it by hand", seg->name, strerror(errno));
}

void weft__shm_segment_unmap(struct weft_shm_segment *seg) {
  if (seg->hdr != NULL) munmap(seg->hdr, seg->map_bytes);
  seg->hdr = NULL;
  seg->ring = NULL;
}

/* The creator's pid from a directory entry named like our segments
 * ("weft-<hash>-<sender>-<receiver>-<channel>-<pid>"); -1 for any other. */
static int shm_name_pid(const char *entry) {
  uint64_t hash;
  int sender, receiver, channel, pid, end = -1;
  if (sscanf(entry, "weft-%" SCNx64 "-%d-%d-%d-%d%n", &hash, &sender, &receiver, &channel, &pid,
             &end) != 5)
    return -1;
  if (end < 0 || entry[end] != '\0' || pid <= 0) return -1;
  return pid;
}

/* Whether a segment whose creator pid is not running here is an orphan. If
 * its header says the creator lived in our pid namespace, yes. Otherwise the
 * creator may live in another namespace that shares /dev/shm (containers
 * with --ipc=host), where its pid means nothing to kill(): such a creator
 * unlinks its segment within its connect deadline (WEFT_TIMEOUT) of making
 * it, so one untouched for twice that is garbage whoever made it. */
static int shm_orphan_certain(int dir_fd, const char *entry, int pid) {
  struct weft_shm_header h;
  struct stat sb;
  int fd = openat(dir_fd, entry, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return 0;
  memset(&h, 0, sizeof(h));
  int ok = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
  ssize_t got = ok ? pread(fd, &h, sizeof(h), 0) : -1;
  close(fd);
  if (!ok) return 0;
  uint64_t ns = weft__shm_pidns();
  if (got == (ssize_t)sizeof(h) && h.magic == WEFT_SHM_MAGIC && h.recv_pid == pid && ns != 0 &&
      h.recv_pidns == ns)
    return 1;
  int64_t age_s = (int64_t)time(NULL) - (int64_t)sb.st_mtime;
  return age_s > 2 * weft_param_int(WEFT_PARAM_TIMEOUT);
}

static void shm_reclaim_one(int dir_fd, const char *entry) {
  int pid = shm_name_pid(entry);
  if (pid <= 0) return;
  /* Alive, or another user's (EPERM): not ours to judge. */
  if (kill(pid, 0) == 0 || errno != ESRCH) return;
  if (!shm_orphan_certain(dir_fd, entry, pid)) return;
  if (unlinkat(dir_fd, entry, 0) == 0)
    INFO(WEFT_SHM | WEFT_INIT, "shm: removed " WEFT_SHM_DIR "/%s left by exited pid %d", entry,
         pid);
  else if (errno != ENOENT)
    INFO(WEFT_SHM | WEFT_INIT, "shm: cannot remove " WEFT_SHM_DIR "/%s left by pid %d: %s", entry,
         pid, strerror(errno));
}

void weft__shm_reclaim_stale(void) {
  static _Atomic int64_t last_scan_ms;
  int64_t now = weft__shm_now_ms();
  int64_t last = atomic_load(&last_scan_ms);
  if (last != 0 && now - last < SHM_RECLAIM_PERIOD_MS) return;
  if (!atomic_compare_exchange_strong(&last_scan_ms, &last, now)) return; /* another thread */
  DIR *dir = opendir(WEFT_SHM_DIR);
  if (dir == NULL) {
    INFO(WEFT_SHM, "shm: cannot scan " WEFT_SHM_DIR " for stale segments: %s", strerror(errno));
    return;
  }
  struct dirent *e;
  while ((e = readdir(dir)) != NULL) shm_reclaim_one(dirfd(dir), e->d_name);
  closedir(dir);
}
