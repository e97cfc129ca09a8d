/*
 * ptr_check.c - see ptr_check.h.
 */
#include "ptr_check.h"
#include "comm.h"
#include "error.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

typedef CUresult (*loom__ptr_attrs_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);

/* cuPointerGetAttributes from the driver (loom does not link libcuda): one
 * call answers type, device and allocation range; it reports an unknown
 * pointer (host memory, freed memory) as memory type 0 instead of failing.
 * NULL if the driver lacks it. */
static loom__ptr_attrs_fn loom__ptr_attrs(void) {
  static loom__ptr_attrs_fn fn;
  static int looked;
  if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
    void *p = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      p = NULL;
    (void)cudaGetLastError();
    __atomic_store_n(&fn, (loom__ptr_attrs_fn)p, __ATOMIC_RELAXED);
    __atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(&fn, __ATOMIC_RELAXED);
}

static loom_result_t loom__refuse_host(const char *fn, const char *arg, const void *p, int dev) {
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                    "%s: %s=%p is host memory the GPU cannot reach, or memory already freed: pass device memory of "
                    "device %d",
                    fn, arg, p, dev);
}

static loom_result_t loom__refuse_other_device(const char *fn, const char *arg, const void *p, int owner, int dev) {
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                    "%s: %s=%p is memory of device %d, but the current device is %d (call cudaSetDevice, or pass this "
                    "device's memory)",
                    fn, arg, p, owner, dev);
}

loom_ptr_oracle_fn loom__ptr_oracle;

static loom_result_t loom__check_range(const char *fn, const char *arg, const void *p, size_t bytes, uintptr_t start,
                                       size_t size) {
  const size_t left = (uintptr_t)p < start || (uintptr_t)p >= start + size ? 0 : (size_t)(start + size - (uintptr_t)p);
  if (bytes > left)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: %s=%p: the op reaches %zu bytes from there but its allocation ends after %zu", fn, arg, p,
                      bytes, left);
  return LOOM_SUCCESS;
}

/* The test oracle's answer (no driver involved). */
static loom_result_t loom__check_by_oracle(const char *fn, const char *arg, const void *p, size_t bytes) {
  uintptr_t base = 0;
  size_t size = 0;
  if (!loom__ptr_oracle(p, &base, &size))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: %s=%p is host memory the GPU cannot reach, or memory already freed: pass device memory", fn,
                      arg, p);
  return bytes > 0 ? loom__check_range(fn, arg, p, bytes, base, size) : LOOM_SUCCESS;
}

loom_result_t loom__check_device_ptr(const char *fn, const char *arg, const void *p, size_t bytes) {
  if (!p) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL must be a device pointer", fn, arg);
  if (loom__ptr_oracle) return loom__check_by_oracle(fn, arg, p, bytes);
  int dev = -1;
  LOOM_CUDA(cudaGetDevice(&dev));
  loom__ptr_attrs_fn attrs = loom__ptr_attrs();
  if (attrs) {
    /* one driver call: every loom op checks several pointers per call */
    unsigned int type = 0;
    int ordinal = -1;
    CUdeviceptr start = 0;
    size_t size = 0;
    CUpointer_attribute what[4] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                   CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE};
    void *out[4] = {&type, &ordinal, &start, &size};
    const CUresult r = attrs(4, what, out, (CUdeviceptr)(uintptr_t)p);
    if (r != CUDA_SUCCESS)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is not memory the CUDA driver knows (CUresult %d)", fn,
                        arg, p, (int)r);
    if (type == 0) return loom__refuse_host(fn, arg, p, dev);
    if (type == CU_MEMORYTYPE_HOST) return LOOM_SUCCESS; /* pinned, mapped: reachable (slowly) */
    if (type == CU_MEMORYTYPE_DEVICE && ordinal >= 0 && ordinal != dev)
      return loom__refuse_other_device(fn, arg, p, ordinal, dev);
    if (type == CU_MEMORYTYPE_DEVICE && bytes > 0 && size > 0)
      return loom__check_range(fn, arg, p, bytes, (uintptr_t)start, size);
    return LOOM_SUCCESS; /* device memory of this device, or managed */
  }
  /* no driver entry point: the runtime's view, without the range check */
  struct cudaPointerAttributes at;
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is not memory the CUDA runtime knows (%s)", fn, arg, p,
                      cudaGetErrorString(e));
  }
  if ((int)at.type == cudaMemoryTypeUnregistered) return loom__refuse_host(fn, arg, p, dev);
  if ((int)at.type == cudaMemoryTypeDevice && at.device != dev) return loom__refuse_other_device(fn, arg, p, at.device, dev);
  return LOOM_SUCCESS;
}

loom_result_t loom__check_buf(const char *fn, loom_comm_t comm, const loom_buf_t *b) {
  if (!b->p) {
    if (b->flags & LOOM_BUF_OPTIONAL) return LOOM_SUCCESS;
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=NULL must point to %zu bytes of device memory", fn, b->name,
                      b->bytes);
  }
  if ((b->flags & LOOM_BUF_ALIGN16) && (uintptr_t)b->p % 16 != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p is not 16-byte aligned", fn, b->name, b->p);
  LOOM_TRY(loom__check_device_ptr(fn, b->name, b->p, b->bytes));
  /* inside a loom_malloc allocation: every byte inside it (the driver's
   * range is the mapping's, which may be longer than what was asked for) */
  const loom_alloc_t *home = comm ? loom__find_alloc(comm, b->p, 1) : NULL;
  if (home && b->bytes > home->bytes - (size_t)((const char *)b->p - (const char *)home->ptr))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: %s=%p: the op reaches %zu bytes from there but its loom_malloc allocation ends after %zu",
                      fn, b->name, b->p, b->bytes, home->bytes - (size_t)((const char *)b->p - (const char *)home->ptr));
  if ((b->flags & LOOM_BUF_SYMMETRIC) && !home)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s=%p (%zu bytes) is not inside memory from loom_malloc on this comm: %s",
                      fn, b->name, b->p, b->bytes, b->why ? b->why : "peers reach it");
  return LOOM_SUCCESS;
}

loom_result_t loom__check_bufs(const char *fn, loom_comm_t comm, const loom_buf_t *b, int n) {
  for (int i = 0; i < n; ++i) LOOM_TRY(loom__check_buf(fn, comm, &b[i]));
  return LOOM_SUCCESS;
}
