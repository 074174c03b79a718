/* weft beside NVIDIA's libnccl in one process, as under PyTorch, whose wheel
 * brings NVIDIA's copy. NVIDIA's library is loaded first and RTLD_GLOBAL
 * (the worst order for weft), weft's after it RTLD_LOCAL; then:
 *   - both load as separate copies, each answering for itself;
 *   - weft's own internal calls stay in weft: ncclAlltoAll opens a group
 *     with ncclGroupStart, and if that call went to NVIDIA's copy the
 *     ranks' sends would run one by one and deadlock (time out);
 *   - NVIDIA's library used in between (a unique id, its root thread)
 *     changes nothing for weft.
 *
 * Usage: test_coexist [WEFT_LIBNCCL [NVIDIA_LIBNCCL]]; else $WEFT_LIBNCCL
 * and $WEFT_REF_LIBNCCL. Without NVIDIA's library: exit 77 (skip). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr */
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

#define NRANKS 2
#define COUNT 1024

typedef ncclResult_t (*version_fn)(int *);
typedef const char *(*errstr_fn)(ncclResult_t);
typedef ncclResult_t (*uid_fn)(ncclUniqueId *);
typedef ncclResult_t (*init_fn)(ncclComm_t *, int, ncclUniqueId, int);
typedef ncclResult_t (*a2a_fn)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
typedef ncclResult_t (*destroy_fn)(ncclComm_t);

static struct {
  uid_fn get_id;
  init_fn init;
  a2a_fn alltoall;
  destroy_fn destroy;
} weft;

struct rank_job {
  int rank;
  ncclUniqueId id;
  int ok;
  char why[256];
};

static void *rank_main(void *arg) {
  struct rank_job *j = arg;
  ncclComm_t comm = NULL;
  ncclResult_t res = weft.init(&comm, NRANKS, j->id, j->rank);
  if (res != ncclSuccess) {
    snprintf(j->why, sizeof j->why, "rank %d: weft's ncclCommInitRank -> %d", j->rank, (int)res);
    return NULL;
  }
  int32_t *send = malloc(NRANKS * COUNT * sizeof(int32_t));
  int32_t *recv = malloc(NRANKS * COUNT * sizeof(int32_t));
  for (int p = 0; p < NRANKS; p++)
    for (int i = 0; i < COUNT; i++) send[p * COUNT + i] = j->rank * 1000 + p;
  res = weft.alltoall(send, recv, COUNT, ncclInt32, comm, NULL);
  int good = res == ncclSuccess;
  for (int p = 0; good && p < NRANKS; p++)
    for (int i = 0; good && i < COUNT; i++) good = recv[p * COUNT + i] == p * 1000 + j->rank;
  if (res != ncclSuccess)
    snprintf(j->why, sizeof j->why, "rank %d: weft's ncclAlltoAll -> %d", j->rank, (int)res);
  else if (!good)
    snprintf(j->why, sizeof j->why, "rank %d: weft's ncclAlltoAll gave wrong data", j->rank);
  j->ok = good && weft.destroy(comm) == ncclSuccess;
  free(send);
  free(recv);
  return NULL;
}

static int run_weft_alltoall(void) {
  struct rank_job jobs[NRANKS];
  pthread_t t[NRANKS];
  ncclUniqueId id;
  if (weft.get_id(&id) != ncclSuccess) {
    printf("FAIL: weft's ncclGetUniqueId\n");
    return 1;
  }
  for (int r = 0; r < NRANKS; r++) {
    jobs[r] = (struct rank_job){.rank = r, .id = id};
    pthread_create(&t[r], NULL, rank_main, &jobs[r]);
  }
  int failed = 0;
  for (int r = 0; r < NRANKS; r++) {
    pthread_join(t[r], NULL);
    if (!jobs[r].ok) printf("FAIL: %s\n", jobs[r].why), failed = 1;
  }
  return failed;
}

/* Sets the function pointer *fn_out to name in lib (memcpy: ISO C has no
 * cast between object and function pointers); says if it was found. */
static int load(void *lib, const char *name, void *fn_out) {
  void *p = dlsym(lib, name);
  if (p == NULL) printf("FAIL: %s not found: %s\n", name, dlerror());
  memcpy(fn_out, &p, sizeof(p));
  return p != NULL;
}

/* Which file defines the function at *fn, as the loader sees it. */
static const char *owner(const void *fn) {
  void *p;
  memcpy(&p, fn, sizeof(p));
  Dl_info info;
  return dladdr(p, &info) && info.dli_fname ? info.dli_fname : "?";
}

int main(int argc, char **argv) {
  const char *weft_path = argc > 1 ? argv[1] : getenv("WEFT_LIBNCCL");
  const char *ref_path = argc > 2 ? argv[2] : getenv("WEFT_REF_LIBNCCL");
  setenv("WEFT_DEVICE", "cpu", 0);
  setenv("WEFT_TIMEOUT", "10", 0);
  if (ref_path == NULL || access(ref_path, R_OK) != 0) {
    printf("SKIP: NVIDIA's libnccl.so.2 not found (%s)\n", ref_path ? ref_path : "unset");
    return 77;
  }
  if (weft_path == NULL) {
    printf("FAIL: no weft library given (argument or WEFT_LIBNCCL)\n");
    return 1;
  }
  void *nv = dlopen(ref_path, RTLD_NOW | RTLD_GLOBAL);
  if (nv == NULL) {
    printf("SKIP: NVIDIA's library does not load here: %s\n", dlerror());
    return 77;
  }
  void *wf = dlopen(weft_path, RTLD_NOW | RTLD_LOCAL);
  if (wf == NULL || wf == nv) {
    printf("FAIL: weft's library did not load as its own copy: %s\n",
           wf ? "same handle" : dlerror());
    return 1;
  }
  version_fn nv_version, wf_version;
  errstr_fn nv_err, wf_err;
  uid_fn nv_get_id;
  if (!load(nv, "ncclGetVersion", &nv_version) || !load(wf, "ncclGetVersion", &wf_version) ||
      !load(nv, "ncclGetErrorString", &nv_err) || !load(wf, "ncclGetErrorString", &wf_err) ||
      !load(nv, "ncclGetUniqueId", &nv_get_id) || !load(wf, "ncclGetUniqueId", &weft.get_id) ||
      !load(wf, "ncclCommInitRank", &weft.init) || !load(wf, "ncclAlltoAll", &weft.alltoall) ||
      !load(wf, "ncclCommDestroy", &weft.destroy))
    return 1;

  int failed = 0, vn = 0, vw = 0;
  nv_version(&vn);
  wf_version(&vw);
  const char *nv_file = owner(&nv_version), *wf_file = owner(&wf_version);
  printf("NVIDIA's ncclGetVersion: %d (%s)\nweft's   ncclGetVersion: %d (%s)\n", vn, nv_file, vw,
         wf_file);
  if (strcmp(nv_file, wf_file) == 0) {
    printf("FAIL: both names resolve to one library\n");
    failed = 1;
  }
  if (strstr(wf_err(ncclInternalError), "weft") == NULL) {
    printf("FAIL: weft's ncclGetErrorString is not weft's: \"%s\"\n", wf_err(ncclInternalError));
    failed = 1;
  }
  printf("internal error text: NVIDIA \"%s\", weft \"%s\"\n", nv_err(ncclInternalError),
         wf_err(ncclInternalError));

  failed |= run_weft_alltoall();
  ncclUniqueId nv_id;
  ncclResult_t res = nv_get_id(&nv_id);
  printf("NVIDIA's ncclGetUniqueId -> %d (informative only)\n", (int)res);
  failed |= run_weft_alltoall();
  printf("%s\n", failed ? "FAIL" : "PASS: weft and NVIDIA's libnccl coexist");
  return failed;
}
