/* One rank on the CUDA engine (docs/CUDA.md, "One rank"): a collective is a
 * device copy or nothing, and sends to itself pair with its receives as
 * device copies. Nothing of the engine is used, so no completion event is
 * recorded for destroy to wait on. */
#include <stdlib.h>
#include <string.h>

#include "base/check.h"
#include "base/dtype.h"
#include "core/comm.h"
#include "core/device.h"
#include "sched/schedule.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA && defined(WEFT_HAVE_DEVICE)
#include "device/device.h"
#include "exec/cuda_one.h"

/* One rank: an out-of-place collective is one device copy and one in
 * place is nothing, as NCCL does (avg divides by 1); PreMulSum scales
 * straight into the output. A copy uses nothing of the engine, so destroy
 * need not wait for it: no completion event is recorded. */
ncclResult_t weft_cuda_one_rank(struct ncclComm *comm, const struct weft_coll *coll,
                                const struct weft_cuda_premul *premul, cudaStream_t s) {
  size_t bytes = coll->count * weft_dtype_size(coll->datatype);
  if (bytes == 0) return ncclSuccess;
  if (premul != NULL) {
    struct weft_dev_scalar scalar = {.ptr = premul->dev_ptr};
    memcpy(scalar.value, premul->value, sizeof(scalar.value));
    WEFT_CHECK(
        weft_dev_scale(coll->recvbuff, coll->sendbuff, coll->count, coll->datatype, &scalar, s));
  } else if (coll->sendbuff != coll->recvbuff) {
    cudaError_t err = weft_dev_copy(coll->recvbuff, coll->sendbuff, bytes, s);
    if (err != cudaSuccess) {
      WARN("rank %d: %s: the one rank's copy of %zu bytes: %s", comm->rank,
           weft_func_name(coll->func), bytes, cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

static int ranges_overlap(const void *a, const void *b, size_t n) {
  const char *x = a, *y = b;
  return n > 0 && x < y + n && y < x + n;
}

/* One rank's group: its k-th send to itself pairs with its k-th receive,
 * as on the kernel path; each pair is one device copy, none where the two
 * buffers are one (NCCL does the same). 1 when done here; 0 leaves the
 * group to the kernel (several streams, unpaired or unequal sizes, which
 * it reports, or a send that another pair's receive overwrites). */
int weft_cuda_one_rank_p2p(struct ncclComm *comm, const struct weft_cuda_p2p *p, cudaStream_t s,
                           int dev, ncclResult_t *res) {
  if (comm->nranks != 1 || p->nstreams != 1) return 0;
  int nsend = 0, nrecv = 0;
  for (int i = 0; i < p->nops; i++) p->ops[i].is_send ? nsend++ : nrecv++;
  if (nsend != nrecv) return 0;
  /* The k-th send is at sends[k], the k-th receive at recvs[k] (indexes). */
  int few[16];
  int *sends = nsend <= 8 ? few : malloc((size_t)nsend * 2 * sizeof(int));
  if (sends == NULL) return 0;
  int *recvs = sends + nsend;
  for (int i = 0, a = 0, b = 0; i < p->nops; i++) {
    if (p->ops[i].is_send)
      sends[a++] = i;
    else
      recvs[b++] = i;
  }
  int ok = 1;
  for (int k = 0; k < nsend && ok; k++) {
    size_t n = p->ops[sends[k]].bytes;
    ok = n == p->ops[recvs[k]].bytes;
    for (int j = 0; j < nsend && ok; j++)
      ok = j == k || !ranges_overlap(p->bufs[sends[k]], p->bufs[recvs[j]], n);
  }
  *res = ncclSuccess;
  int selected = 0; /* in place, a group makes no CUDA call (0.1 us) */
  for (int k = 0; k < nsend && ok && *res == ncclSuccess; k++) {
    void *dst = p->bufs[recvs[k]], *src = p->bufs[sends[k]];
    size_t n = p->ops[sends[k]].bytes;
    if (n == 0 || dst == src) continue;
    if (!selected) weft_device_select(dev);
    selected = 1;
    /* A receive that partly overlaps its own send keeps cudaMemcpyAsync,
     * as before the copy kernel: no new behaviour for buffers NCCL leaves
     * undefined. */
    cudaError_t err = ranges_overlap(dst, src, n)
                          ? cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s)
                          : weft_dev_copy(dst, src, n, s);
    if (err != cudaSuccess) {
      WARN("rank %d: send/recv: the one rank's copy of %zu bytes to itself: %s", comm->rank, n,
           cudaGetErrorString(err));
      *res = ncclUnhandledCudaError;
    }
  }
  if (sends != few) free(sends);
  return ok;
}

#endif
