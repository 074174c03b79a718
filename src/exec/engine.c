/* The engine every rank of a communicator uses, chosen once at init from
 * the path exec/cuda_path.c agrees on with the other ranks. */
#include "exec/engine.h"

#include "base/check.h"
#include "exec/cuda.h"
#include "exec/reduce.h"

size_t weft_engine_op_bytes(const struct weft_coll *coll) {
  return coll->count * weft_dtype_size(coll->datatype);
}

ncclResult_t weft_engine_choose(struct ncclComm *comm, const struct weft_engine_ops **out) {
  enum weft_cuda_path path;
  WEFT_CHECK(weft_cuda_engine_choose(comm, &path));
  switch (path) {
    case WEFT_CUDA_PATH_KERNEL: *out = &weft_engine_cuda_ops; break;
    case WEFT_CUDA_PATH_STAGED: *out = &weft_engine_staged_ops; break;
    default: *out = &weft_engine_host_ops; break;
  }
  return ncclSuccess;
}

ncclResult_t weft__engine_no_wait(struct ncclComm *comm) {
  (void)comm;
  return ncclSuccess;
}

void weft__engine_no_stop(struct ncclComm *comm) {
  (void)comm;
}

int weft__engine_never_busy(struct ncclComm *comm) {
  (void)comm;
  return 0;
}

ncclResult_t weft__engine_no_window(struct ncclComm *comm, void *buff, size_t size, void **out) {
  (void)comm, (void)buff, (void)size;
  *out = NULL;
  return ncclSuccess;
}

void weft__engine_no_window_release(struct ncclComm *comm, void *window) {
  (void)comm, (void)window;
}
