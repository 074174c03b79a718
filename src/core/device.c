/* CUDA device queries, in one place so the rest of the host code needs no
 * CUDA headers. Every query degrades to "no device" instead of failing. */
#include "core/device.h"

#include <pthread.h>
#include <string.h>
#include <strings.h>

#include "base/debug.h"
#include "base/param.h"
#include "weft_config.h"

#if WEFT_HAVE_CUDA
#include <cuda.h>
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

void *weft_device_driver_symbol(const char *name, const char **why) {
#if WEFT_HAVE_CUDA
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion(name, &fn, 11070, cudaEnableDefault, &q);
#else
  cudaError_t err = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
  if (err == cudaSuccess && fn != NULL && q == cudaDriverEntryPointSuccess) return fn;
  if (err != cudaSuccess) cudaGetLastError();
  *why = err != cudaSuccess ? cudaGetErrorString(err) : "symbol not found";
  return NULL;
#else
  (void)name;
  *why = "no CUDA in this build";
  return NULL;
#endif
}

#if WEFT_HAVE_CUDA
typedef CUresult (*get_range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
typedef CUresult (*get_attrs_fn)(unsigned n, CUpointer_attribute *attrs, void **data,
                                 CUdeviceptr ptr);
/* The driver's entry points for buffers, looked up once. */
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static get_range_fn get_range;
static get_attrs_fn get_attrs;

static void *driver_entry(const char *name) {
  const char *why;
  void *fn = weft_device_driver_symbol(name, &why);
  if (fn == NULL) INFO(WEFT_INIT, "the CUDA driver has no %s (%s)", name, why);
  return fn;
}

static void driver_find(void) {
  void *fn = driver_entry("cuMemGetAddressRange");
  memcpy(&get_range, &fn, sizeof(get_range));
  fn = driver_entry("cuPointerGetAttributes");
  memcpy(&get_attrs, &fn, sizeof(get_attrs));
}

/* 1, with [*lo, *hi) the allocation, when [base, base + size) holds p. */
static int range_holds(const void *p, CUdeviceptr base, size_t size, uintptr_t *lo, uintptr_t *hi) {
  if ((uintptr_t)p < (uintptr_t)base || (uintptr_t)p - (uintptr_t)base >= size) return 0;
  *lo = (uintptr_t)base;
  *hi = (uintptr_t)base + size;
  return 1;
}
#endif

int weft_device_alloc_range(const void *p, uintptr_t *lo, uintptr_t *hi) {
#if WEFT_HAVE_CUDA
  pthread_once(&driver_once, driver_find);
  CUdeviceptr base = 0;
  size_t size = 0;
  if (get_range == NULL || get_range(&base, &size, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS)
    return 0;
  return range_holds(p, base, size, lo, hi);
#else
  (void)p, (void)lo, (void)hi;
  return 0;
#endif
}

int weft_device_own_alloc(const void *p, int dev, uintptr_t *lo, uintptr_t *hi) {
#if WEFT_HAVE_CUDA
  pthread_once(&driver_once, driver_find);
  if (get_attrs == NULL || p == NULL) return 0;
  unsigned type = 0, managed = 0;
  int ordinal = -1;
  CUdeviceptr base = 0;
  size_t size = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void *data[] = {&type, &managed, &ordinal, &base, &size};
  /* Memory CUDA does not know comes back as zeros, not as an error. */
  if (get_attrs(5, attrs, data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) return 0;
  if (type != CU_MEMORYTYPE_DEVICE || managed || ordinal != dev) return 0;
  return range_holds(p, base, size, lo, hi);
#else
  (void)p, (void)dev, (void)lo, (void)hi;
  return 0;
#endif
}
