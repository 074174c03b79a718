/* CUDA device queries, in one place so the rest of the host code needs no
 * CUDA headers. Every query degrades to "no device" instead of failing. */
#include "core/device.h"

#include <string.h>
#include <strings.h>

#include "base/debug.h"
#include "base/param.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

#if WEFT_HAVE_CUDA
static int cpu_forced(void) {
  const char *d = weft_param_str(WEFT_PARAM_DEVICE);
  return d != NULL && strcasecmp(d, "cpu") == 0;
}
#endif

int weft_device_current(void) {
#if WEFT_HAVE_CUDA
  if (cpu_forced()) return -1;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError(); /* clear the sticky "no device" status */
    return -1;
  }
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) return -1;
  return dev;
#else
  return -1;
#endif
}

int weft_device_is_device_ptr(const void *p) {
#if WEFT_HAVE_CUDA
  /* Asked even of host ranks (WEFT_DEVICE=cpu): a device pointer handed to
   * the host engine must be refused, not dereferenced. */
  if (p == NULL) return 0;
  struct cudaPointerAttributes attr;
  memset(&attr, 0, sizeof(attr));
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return attr.type == cudaMemoryTypeDevice;
#else
  (void)p;
  return 0;
#endif
}

void weft_device_select(int dev) {
#if WEFT_HAVE_CUDA
  if (dev >= 0 && !cpu_forced() && cudaSetDevice(dev) != cudaSuccess) {
    cudaGetLastError();
    INFO(WEFT_INIT, "cudaSetDevice(%d) failed; the rank runs on host buffers", dev);
  }
#else
  (void)dev;
#endif
}

void weft_device_bus_id(int dev, char *buf, int len) {
  if (len <= 0) return;
  buf[0] = '\0';
#if WEFT_HAVE_CUDA
  if (dev >= 0 && cudaDeviceGetPCIBusId(buf, len, dev) != cudaSuccess) {
    cudaGetLastError();
    buf[0] = '\0';
    INFO(WEFT_INIT,
         "cudaDeviceGetPCIBusId(%d) failed; the rank's GPU is not placed in the topology", dev);
  }
#else
  (void)dev;
#endif
}
