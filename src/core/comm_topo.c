/* The communicator's use of the topology. The process reads its graph once
 * (topo/: NCCL_TOPO_FILE or detection) and keeps it until exit. At init
 * every rank sends its GPU's bus id and a hash of its graph with its peer
 * info; after the exchange each rank decides the transport to every peer
 * and the ring. The ring follows the topology only where every rank can
 * compute the same one: all ranks GPU ranks of one host that see the same
 * graph. Otherwise it is the rank order. */
#include "core/comm_topo.h"

#include <ctype.h>
#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "core/device.h"
#include "base/param.h"
#include "base/path_type.h"
#include "topo/topo.h"

static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static struct weft_topo *topo_proc;
static ncclResult_t topo_proc_res;
static _Atomic int topo_fail_seen;
/* comm_hash of the process's first communicator: its rank 0 dumps. */
static _Atomic uint64_t topo_dump_comm;

static void topo_proc_init(void) {
  topo_proc_res = weft_topo_open(&topo_proc);
}

/* The process's topology, read on first use. */
static ncclResult_t topo_get(const struct ncclComm *comm, const struct weft_topo **out) {
  pthread_once(&topo_once, topo_proc_init);
  if (topo_proc_res != ncclSuccess) {
    /* The first failure was WARNed by topo/; later communicators say why they fail. */
    if (atomic_exchange(&topo_fail_seen, 1))
      WARN("rank %d: this process could not read its topology (see the first error)", comm->rank);
    return topo_proc_res;
  }
  *out = topo_proc;
  return ncclSuccess;
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t n) {
  const unsigned char *p = data;
  for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  return h;
}

/* Everything the ring order depends on: the GPUs, their paths, peer access. */
static uint64_t topo_hash(const struct weft_topo *t) {
  uint64_t h = fnv1a(0xcbf29ce484222325ULL, &t->ngpus, sizeof(t->ngpus));
  for (int g = 0; g < t->ngpus; g++) {
    const char *busid = t->nodes[t->gpus[g]].busid;
    h = fnv1a(h, busid, strlen(busid) + 1);
  }
  for (int i = 0; i < t->ngpus * t->ngpus; i++) {
    int type = (int)t->gpu_gpu[i].type, access = t->peer_access[i];
    h = fnv1a(h, &type, sizeof(type));
    h = fnv1a(h, &t->gpu_gpu[i].bw, sizeof(t->gpu_gpu[i].bw));
    h = fnv1a(h, &access, sizeof(access));
  }
  return h;
}

ncclResult_t weft_comm_topo_describe(struct ncclComm *comm, struct weft_peer_info *me) {
  const struct weft_topo *t = NULL;
  WEFT_CHECK(topo_get(comm, &t));
  weft_device_bus_id(comm->cuda_dev, me->busid, (int)sizeof(me->busid));
  me->topo_hash = topo_hash(t);
  return ncclSuccess;
}

/* Rank r's GPU index in this process's graph; -1 for a host rank, a rank of
 * another host, or a GPU the graph lacks. */
static int peer_gpu(const struct ncclComm *comm, const struct weft_topo *t, int r) {
  const struct weft_peer_info *p = &comm->peers[r];
  if (p->cuda_dev < 0 || p->busid[0] == '\0' || p->host_hash != comm->peers[comm->rank].host_hash)
    return -1;
  int g = weft_topo_gpu_by_busid(t, p->busid);
  if (g < 0)
    INFO(WEFT_GRAPH,
         "rank %d: rank %d's GPU %s is not in this process's topology; it counts "
         "as a host rank",
         comm->rank, r, p->busid);
  return g;
}

/* Why choose_transport answered as it did, for the log. */
static void transport_reason(const struct ncclComm *comm, const struct weft_topo *t,
                             const int *gpus, int r, char *buf, size_t len) {
  int me = comm->rank, shm_off = t->policy.shm_disable;
  if (comm->peers[r].host_hash != comm->peers[me].host_hash) {
    snprintf(buf, len, "another host");
  } else if (gpus[me] < 0 || gpus[r] < 0) {
    int both = comm->peers[me].cuda_dev < 0 && comm->peers[r].cuda_dev < 0;
    snprintf(buf, len, "%s on one host%s", both ? "host ranks" : "a rank without a known GPU",
             shm_off ? ", NCCL_SHM_DISABLE=1" : "");
  } else {
    const struct weft_topo_path_info *p = weft_topo_gpu_path(t, gpus[me], gpus[r]);
    snprintf(buf, len, "GPU %d -> GPU %d path %s, P2P level %s%s%s%s", gpus[me], gpus[r],
             weft_topo_path_name(p->type), weft_topo_path_name(t->policy.p2p_level),
             t->policy.p2p_disable ? ", NCCL_P2P_DISABLE=1" : "",
             t->peer_access[gpus[me] * t->ngpus + gpus[r]] == 0 ? ", no peer access" : "",
             shm_off ? ", NCCL_SHM_DISABLE=1" : "");
  }
}

static ncclResult_t decide_transports(struct ncclComm *comm, const struct weft_topo *t,
                                      const int *gpus) {
  int me = comm->rank;
  comm->peer_transport = calloc((size_t)comm->nranks, sizeof(*comm->peer_transport));
  if (comm->peer_transport == NULL) {
    WARN("rank %d: out of memory for the transports of %d peers", me, comm->nranks);
    return ncclSystemError;
  }
  for (int r = 0; r < comm->nranks; r++) {
    enum weft_topo_transport x;
    int same_host = comm->peers[r].host_hash == comm->peers[me].host_hash;
    WEFT_CHECK(weft_topo_choose_transport(t, gpus[me], gpus[r], same_host, &x));
    comm->peer_transport[r] = (uint8_t)x;
    if (r == me) continue;
    char why[160];
    transport_reason(comm, t, gpus, r, why, sizeof(why));
    INFO(WEFT_GRAPH, "rank %d -> rank %d: %s (%s)", me, r, weft_topo_transport_name(x), why);
  }
  return ncclSuccess;
}

/* The tuning model's path type of one pair of GPU ranks. */
static enum weft_tune_path pair_path(const struct ncclComm *comm, const struct weft_topo *t,
                                     const int *gpus, int a, int b) {
  enum weft_topo_transport x;
  int same_host = comm->peers[a].host_hash == comm->peers[b].host_hash;
  if (weft_topo_choose_transport(t, gpus[a], gpus[b], same_host, &x) != ncclSuccess)
    return WEFT_TUNE_LOCAL;
  if (x == WEFT_TRANSPORT_NET) return WEFT_TUNE_NET;
  if (x == WEFT_TRANSPORT_SHM) return WEFT_TUNE_STAGED;
  if (weft_peer_same_gpu(&comm->peers[a], &comm->peers[b])) return WEFT_TUNE_SAME_GPU;
  return weft_topo_gpu_path(t, gpus[a], gpus[b])->type == WEFT_PATH_NVL ? WEFT_TUNE_NVLINK
                                                                        : WEFT_TUNE_PCIE;
}

int weft_comm_gpu_path(const struct ncclComm *comm, const struct weft_topo *t, const int *gpus) {
  static const int rank_of[WEFT_TUNE_PATH_COUNT] = {[WEFT_TUNE_SAME_GPU] = 1,
                                                    [WEFT_TUNE_NVLINK] = 2,
                                                    [WEFT_TUNE_PCIE] = 3,
                                                    [WEFT_TUNE_STAGED] = 4,
                                                    [WEFT_TUNE_NET] = 5};
  if (comm->nranks < 2) return 0;
  for (int a = 0; a < comm->nranks; a++)
    if (comm->peers[a].cuda_dev < 0) return 0;
  for (int a = 0; a < comm->nranks; a++)
    if (comm->peers[a].host_hash != comm->peers[0].host_hash) return WEFT_TUNE_NET;
  enum weft_tune_path worst = WEFT_TUNE_SAME_GPU;
  for (int a = 0; a < comm->nranks; a++)
    for (int b = a + 1; b < comm->nranks; b++) {
      if (gpus[a] < 0 || gpus[b] < 0) return 0;
      enum weft_tune_path p = pair_path(comm, t, gpus, a, b);
      if (p == WEFT_TUNE_LOCAL) return 0;
      if (rank_of[p] > rank_of[worst]) worst = p;
    }
  return (int)worst;
}

/* The host engine's default most channels (comm->host_channels), where
 * sockets carry some link (ranks on two hosts, or NCCL_SHM_DISABLE=1): 16
 * when every rank's host has 8 cores per local rank, 8 with 4; 0 (the
 * tuning's own default, 2) otherwise and wherever no socket is used. Each
 * channel's link has one helper thread, so a rank may run two helper
 * threads per core it has: on 16 cores with 2 ranks (2026-12-04,
 * docs/PERFORMANCE.md "Fifth pass", two calls) 16 channels moved a 64 MiB
 * Broadcast 7-29% faster than 8 and a 64 MiB AllReduce 0-37% (at 16 MiB
 * both -17% to +19%, mostly faster), the other collectives within the
 * spread; with 4 ranks 8 channels moved Broadcast 6-30% faster than 4 and
 * AllReduce -13% to +20%. A rank's lanes run on one thread (two
 * with the lane team), and a channel's helper sleeps while its lane waits
 * on the others, so the threads seldom all run at once. On 2 cores,
 * without helper threads, 4 channels cost a fifth of AllReduce's busbw.
 * Every input is all-gathered, so every rank agrees. */
int weft_comm_host_channels(const struct weft_peer_info *peers, int nranks, int shm_disable) {
  int sockets = nranks > 1 && shm_disable;
  int cores = 1 << 30; /* the fewest cores per local rank of any host */
  for (int r = 0; r < nranks; r++) {
    int local = 0;
    for (int q = 0; q < nranks; q++) local += peers[q].host_hash == peers[r].host_hash;
    if (local < nranks) sockets = 1;
    if (peers[r].cpus / local < cores) cores = peers[r].cpus / local;
  }
  if (!sockets || cores < 4) return 0;
  return cores >= 8 ? 16 : 8;
}

int weft_comm_host_link_threads(int host_channels, int wide) {
  if (host_channels < 8) return 0;
  return wide ? host_channels : 1;
}

/* NULL when the topology may order the ring, else why not. The answer
 * depends only on the all-gathered peer info, so every rank agrees. */
static const char *ring_topo_blocker(const struct ncclComm *comm, const int *gpus) {
  const struct weft_peer_info *p0 = &comm->peers[0];
  for (int r = 0; r < comm->nranks; r++) {
    const struct weft_peer_info *p = &comm->peers[r];
    if (p->cuda_dev < 0) return "host ranks";
    if (p->host_hash != p0->host_hash) return "ranks on several hosts";
    if (p->topo_hash != p0->topo_hash) return "ranks see different topologies";
    if (gpus[r] < 0) return "a GPU not in the topology";
  }
  return NULL;
}

/* ring[] from the GPU order: the first rank not yet placed on each GPU. */
static ncclResult_t ring_from_topo(const struct ncclComm *comm, const struct weft_topo *t,
                                   const int *gpus, int *ring) {
  int n = comm->nranks;
  int *order = calloc((size_t)n, sizeof(*order));
  char *placed = calloc((size_t)n, 1);
  ncclResult_t res = ncclSuccess;
  if (order == NULL || placed == NULL) {
    WARN("rank %d: out of memory ordering a ring of %d ranks", comm->rank, n);
    res = ncclSystemError;
    goto out;
  }
  WEFT_CHECK_GOTO(weft_topo_ring_order(t, gpus, n, order), res, out);
  for (int k = 0; k < n; k++) {
    int r = 0;
    while (r < n && (placed[r] || gpus[r] != order[k])) r++;
    placed[r] = 1; /* order[] is a permutation of gpus[], so r < n */
    ring[k] = r;
  }
out:
  free(order);
  free(placed);
  return res;
}

static void log_ring(const struct ncclComm *comm, const char *how) {
  char line[512] = "";
  for (int i = 0; i < comm->nranks; i++) {
    size_t l = strlen(line);
    if (l + 16 >= sizeof(line)) {
      snprintf(line + l, sizeof(line) - l, " ...");
      break;
    }
    snprintf(line + l, sizeof(line) - l, " %d", comm->ring_order[i]);
  }
  INFO(WEFT_GRAPH, "rank %d: ring order (%s):%s", comm->rank, how, line);
}

static ncclResult_t decide_ring(struct ncclComm *comm, const struct weft_topo *t, const int *gpus) {
  int n = comm->nranks;
  int *ring = malloc((size_t)n * sizeof(*ring));
  if (ring == NULL) {
    WARN("rank %d: out of memory for the ring order of %d ranks", comm->rank, n);
    return ncclSystemError;
  }
  for (int i = 0; i < n; i++) ring[i] = i;
  const char *blocker = ring_topo_blocker(comm, gpus);
  if (blocker == NULL) {
    ncclResult_t res = ring_from_topo(comm, t, gpus, ring);
    if (res != ncclSuccess) {
      free(ring);
      return res;
    }
  }
  comm->ring_order = ring;
  int pos = 0;
  while (ring[pos] != comm->rank) pos++;
  comm->ring_next = ring[(pos + 1) % n];
  comm->ring_prev = ring[(pos + n - 1) % n];
  char how[96];
  snprintf(how, sizeof(how), "%s%s", blocker ? "rank order: " : "topology: GPU ranks of one host",
           blocker ? blocker : "");
  log_ring(comm, how);
  return ncclSuccess;
}

/* NCCL_TOPO_DUMP_FILE, by rank 0 of the process's first communicator. */
static ncclResult_t topo_dump(const struct ncclComm *comm, const struct weft_topo *t) {
  static _Atomic int dumped;
  const char *path = weft_param_str(WEFT_PARAM_TOPO_DUMP_FILE);
  if (path == NULL) return ncclSuccess;
  uint64_t none = 0;
  atomic_compare_exchange_strong(&topo_dump_comm, &none, comm->comm_hash);
  if (comm->rank != 0 || atomic_load(&topo_dump_comm) != comm->comm_hash) return ncclSuccess;
  if (atomic_exchange(&dumped, 1)) return ncclSuccess;
  return weft_topo_dump_xml(t, path); /* which logs the write */
}

/* The NUMA node of the CPU this thread runs on (sysfs), -1 unknown. */
static int cpu_numa_node(void) {
  int cpu = sched_getcpu();
  char path[64];
  snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d", cpu);
  DIR *d = cpu >= 0 ? opendir(path) : NULL;
  if (d == NULL) return -1;
  int node = -1;
  for (struct dirent *e = readdir(d); e != NULL && node < 0; e = readdir(d))
    if (strncmp(e->d_name, "node", 4) == 0 && isdigit((unsigned char)e->d_name[4]))
      node = atoi(e->d_name + 4);
  closedir(d);
  return node;
}

/* A host rank's comm->net_nic: the NIC nearest its CPU (weft_topo_cpu_nic),
 * spread over the ranks of its host; none (device 0) without a NIC. */
static ncclResult_t choose_host_nic(struct ncclComm *comm, const struct weft_topo *t) {
  int numa = cpu_numa_node(), nic = -1, local = 0, spread = 0;
  for (int r = 0; r < comm->rank; r++)
    spread += comm->peers[r].host_hash == comm->peers[comm->rank].host_hash;
  WEFT_CHECK(weft_topo_cpu_nic(t, numa, spread, &nic, &local));
  if (nic < 0) {
    INFO(WEFT_INIT | WEFT_NET, "rank %d: host rank: the topology knows no NIC; net device 0",
         comm->rank);
    return ncclSuccess;
  }
  const struct weft_topo_node *n = &t->nodes[t->nics[nic]];
  snprintf(comm->net_nic, sizeof(comm->net_nic), "%s", n->name);
  comm->net_nic_port = n->port;
  INFO(WEFT_INIT | WEFT_NET, "rank %d: host rank on NUMA node %d: NIC %s port %d (%s)", comm->rank,
       numa, n->name[0] ? n->name : "(unnamed)", n->port,
       local ? "on its NUMA node" : "no NIC on its NUMA node: the fastest of any");
  return ncclSuccess;
}

/* comm->net_nic*: the NIC nearest this rank's GPU (g: its topology GPU,
 * -1 none), logged with the path and the GPUDirect RDMA verdict, and the
 * verdict for a network device the topology cannot place; for a host rank
 * the NIC nearest its CPU. */
static ncclResult_t choose_nic(struct ncclComm *comm, const struct weft_topo *t, int g) {
  comm->net_nic[0] = '\0';
  comm->net_nic_gdr = 0;
  if (comm->peers[comm->rank].cuda_dev < 0) return choose_host_nic(comm, t);
  const char *level = weft_topo_path_name(t->policy.gdr_level);
  int gpu_off = g >= 0 && t->nodes[t->gpus[g]].gdr == 0;
  comm->net_unplaced_gdr = weft_topo_unplaced_nic_gdr(t, g);
  snprintf(comm->net_unplaced_gdr_why, sizeof(comm->net_unplaced_gdr_why),
           "a device the topology cannot place counts as SYS, NCCL_NET_GDR_LEVEL=%s%s", level,
           gpu_off ? ", the GPU says gdr=0" : "");
  if (g < 0 || t->nnics == 0) return ncclSuccess;
  int nic = -1, gdr = 0;
  enum weft_topo_path path;
  WEFT_CHECK(weft_topo_gpu_nic(t, g, &nic, &path));
  if (nic < 0) return ncclSuccess;
  WEFT_CHECK(weft_topo_gpu_nic_gdr(t, g, nic, &gdr));
  const struct weft_topo_node *n = &t->nodes[t->nics[nic]];
  snprintf(comm->net_nic, sizeof(comm->net_nic), "%s", n->name);
  comm->net_nic_port = n->port;
  comm->net_nic_path = (int)path;
  comm->net_nic_gdr = gdr;
  snprintf(comm->net_nic_gdr_why, sizeof(comm->net_nic_gdr_why),
           "GPU-NIC path %s, NCCL_NET_GDR_LEVEL=%s%s", weft_topo_path_name(path), level,
           gpu_off || n->gdr == 0 ? ", the topology says gdr=0" : "");
  INFO(WEFT_INIT | WEFT_NET,
       "rank %d: GPU %s's nearest NIC is %s port %d (path %s); GPUDirect RDMA %s there "
       "(NCCL_NET_GDR_LEVEL=%s)",
       comm->rank, comm->peers[comm->rank].busid, n->name[0] ? n->name : "(unnamed)", n->port,
       weft_topo_path_name(path), gdr ? "allowed" : "not allowed", level);
  return ncclSuccess;
}

ncclResult_t weft_comm_topo_decide(struct ncclComm *comm) {
  const struct weft_topo *t = NULL;
  ncclResult_t res = ncclSuccess;
  WEFT_CHECK(topo_get(comm, &t));
  int *gpus = malloc((size_t)comm->nranks * sizeof(*gpus));
  if (gpus == NULL) {
    WARN("rank %d: out of memory for the GPUs of %d ranks", comm->rank, comm->nranks);
    return ncclSystemError;
  }
  for (int r = 0; r < comm->nranks; r++) {
    comm->peers[r].busid[sizeof(comm->peers[r].busid) - 1] = '\0';
    gpus[r] = peer_gpu(comm, t, r);
  }
  WEFT_CHECK_GOTO(decide_transports(comm, t, gpus), res, out);
  comm->gpu_path = weft_comm_gpu_path(comm, t, gpus);
  comm->gpu_shared = 0;
  for (int a = 0; a < comm->nranks; a++)
    for (int b = a + 1; b < comm->nranks; b++)
      comm->gpu_shared |= weft_peer_same_gpu(&comm->peers[a], &comm->peers[b]);
  WEFT_CHECK_GOTO(choose_nic(comm, t, gpus[comm->rank]), res, out);
  comm->host_channels = weft_comm_host_channels(comm->peers, comm->nranks, t->policy.shm_disable);
  WEFT_CHECK_GOTO(decide_ring(comm, t, gpus), res, out);
  /* A dump that cannot be written has been WARNed; like NCCL, init goes on. */
  (void)topo_dump(comm, t);
out:
  free(gpus);
  return res;
}
