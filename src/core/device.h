/* What weft asks of CUDA on the host side: which device a rank is on and
 * whether a pointer is device memory. Without CUDA every rank is a host rank. */
#ifndef WEFT_CORE_DEVICE_H
#define WEFT_CORE_DEVICE_H

#include <stdint.h>

/* The calling thread's current CUDA device, or -1 when there is none (no CUDA
 * in this build, no driver, no device, or WEFT_DEVICE=cpu). */
int weft_device_current(void);
/* Non-zero if p is device memory (so a host rank must not touch it). */
int weft_device_is_device_ptr(const void *p);
/* Selects device dev for the calling thread; ignored when there is no CUDA. */
void weft_device_select(int dev);
/* Device dev's PCI bus id ("00000000:1a:00.0") in buf; "" when there is none
 * (no CUDA, or the query fails). */
void weft_device_bus_id(int dev, char *buf, int len);
/* The CUDA driver's entry point `name`, in its CUDA 11.7 form, or NULL with
 * the reason in *why (no CUDA in this build, or an older driver). */
void *weft_device_driver_symbol(const char *name, const char **why);
/* The allocation of device memory that holds p, as [*lo, *hi): 1 when the
 * driver says (cuMemGetAddressRange), 0 when it cannot (not device memory,
 * no such entry point, no CUDA). */
int weft_device_alloc_range(const void *p, uintptr_t *lo, uintptr_t *hi);
/* 1 when p is device memory of GPU dev (not managed memory), with its
 * allocation as [*lo, *hi), in one driver call (cuPointerGetAttributes);
 * 0 otherwise: other memory, or no such entry point, or no CUDA. */
int weft_device_own_alloc(const void *p, int dev, uintptr_t *lo, uintptr_t *hi);

#endif
