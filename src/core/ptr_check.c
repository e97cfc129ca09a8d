/*
 * ptr_check.c - see ptr_check.h.
 */
#include "ptr_check.h"
#include "error.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

typedef CUresult (*loom__addr_range_fn)(CUdeviceptr *, size_t *, CUdeviceptr);

/* cuMemGetAddressRange from the driver (loom does not link libcuda); NULL
 * if the driver lacks it (the range check is then skipped). */
static loom__addr_range_fn loom__addr_range(void) {
  static loom__addr_range_fn fn;
  static int looked;
  if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
    void *p = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = NULL;
    (void)cudaGetLastError();
    __atomic_store_n(&fn, (loom__addr_range_fn)p, __ATOMIC_RELAXED);
    __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&fn, __ATOMIC_RELAXED);
}

loom_result_t loom__check_device_ptr(const char *fn, const char *arg, const void *p, size_t bytes) {
  if (!p) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL must be a device pointer", fn, arg);
  int dev = -1;
  LOOM_CUDA(cudaGetDevice(&dev));
  struct cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is not memory the CUDA runtime knows (%s)", fn, arg, p,
                      cudaGetErrorString(e));
  }
  switch ((int)at.type) {
    case cudaMemoryTypeUnregistered:
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "%s: %s=%p is host memory the GPU cannot reach, or memory already freed: pass device "
                        "memory of device %d",
                        fn, arg, p, dev);
    case cudaMemoryTypeHost:
      if (!at.devicePointer)
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is pinned host memory not mapped for device %d", fn,
                          arg, p, dev);
      return LOOM_SUCCESS; /* pinned, mapped: reachable (slowly) */
    case cudaMemoryTypeManaged: return LOOM_SUCCESS;
    case cudaMemoryTypeDevice:
    default: break;
  }
  if (at.device != dev)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: %s=%p is memory of device %d, but the current device is %d (call cudaSetDevice, or pass "
                      "this device's memory)",
                      fn, arg, p, at.device, dev);
  loom__addr_range_fn range = loom__addr_range();
  if (range && bytes > 0) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (range(&base, &size, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS && size > 0) {
      const size_t left = (size_t)((uintptr_t)base + size - (uintptr_t)p);
      if (bytes > left)
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                          "%s: %s=%p: the op reaches %zu bytes from there but its allocation ends after %zu", fn, arg,
                          p, bytes, left);
    }
  }
  return LOOM_SUCCESS;
}
