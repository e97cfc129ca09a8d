/*
 * gemm_device.c - the properties of a GPU that the GEMM engine's choices
 * need (gemm_heuristic.h: loom__gemm_device_t), read once per device and
 * cached for the life of the process.
 *
 * Thread safety: the record of a device is filled under a mutex on first
 * use and published with a release store of its `ready` flag; later calls
 * read it after an acquire load, without the mutex. Two threads that meet a
 * new device at once: one reads, the other waits for the mutex and finds it
 * done. Records never change afterwards (a GPU's SM count, clocks and the
 * library's loaded code do not change while the process runs).
 */
#include <pthread.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/sm80_layout.h"
#include "gemm/small_m_layout.h"

#define LOOM__GEMM_MAX_DEVICES 64

typedef struct loom__gemm_device_slot {
  int ready; /* 1 once dev is complete (release / acquire) */
  loom__gemm_device_t dev;
} loom__gemm_device_slot_t;

static loom__gemm_device_slot_t loom__gemm_devices[LOOM__GEMM_MAX_DEVICES];
static pthread_mutex_t loom__gemm_devices_mu = PTHREAD_MUTEX_INITIALIZER;

static loom_result_t loom__gemm_device_read(int index, loom__gemm_device_t *d) {
  memset(d, 0, sizeof *d);
  d->index = index;
  int mem_khz = 0, bus_bits = 0, smem_sm = 0, regs_sm = 0;
  LOOM_CUDA(cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, index));
  LOOM_CUDA(cudaDeviceGetAttribute(&d->cc_major, cudaDevAttrComputeCapabilityMajor, index));
  LOOM_CUDA(cudaDeviceGetAttribute(&d->cc_minor, cudaDevAttrComputeCapabilityMinor, index));
  LOOM_CUDA(cudaDeviceGetAttribute(&d->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, index));
  LOOM_CUDA(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, index));
  LOOM_CUDA(cudaDeviceGetAttribute(&regs_sm, cudaDevAttrMaxRegistersPerMultiprocessor, index));
  /* clocks: not every platform reports them (then H100/H200-like values) */
  if (cudaDeviceGetAttribute(&d->clock_khz, cudaDevAttrClockRate, index) != cudaSuccess || d->clock_khz <= 0)
    d->clock_khz = 1980000;
  if (cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, index) != cudaSuccess ||
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, index) != cudaSuccess || mem_khz <= 0 ||
      bus_bits <= 0)
    d->dram_bps = 4.0e12;
  else
    d->dram_bps = 2.0 * (double)mem_khz * 1e3 * (double)bus_bits / 8.0;
  (void)cudaGetLastError();
  /* which loom kernels run here (a probe description of the types they take) */
  const loom_gemm_desc_t probe = LOOM_GEMM_DESC(64, 64, 64, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  d->sm90 = loom__gemm_sm90_supported(&probe, d->cc_major, d->cc_minor);
  d->sm80 = loom__gemm_sm80_supported(&probe, d->cc_major, d->cc_minor) && loom__gemm_small_m_has_code();
  /* two 128 x 128 sm80 blocks per SM: 2 x (pipeline + 1 KiB reserved) of
   * shared memory and 2 x 256 threads x 128 registers */
  d->sm80_blocks_128 =
      smem_sm >= 2 * ((int)loom__sm80_smem_bytes(128) + 1024) && regs_sm >= 2 * LOOM_SM80_THREADS * 128 ? 2 : 1;
  for (int i = 0; i < 3; ++i) {
    d->small_m_blocks[i] = 1;
    if (d->sm80) LOOM_TRY(loom__gemm_small_m_occupancy(1 << i, &d->small_m_blocks[i]));
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_device(loom__gemm_device_t *out) {
  int index = -1;
  LOOM_CUDA(cudaGetDevice(&index));
  if (index < 0 || index >= LOOM__GEMM_MAX_DEVICES)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: device %d: at most %d devices", index, LOOM__GEMM_MAX_DEVICES);
  loom__gemm_device_slot_t *slot = &loom__gemm_devices[index];
  if (!__atomic_load_n(&slot->ready, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&loom__gemm_devices_mu);
    loom_result_t r = LOOM_SUCCESS;
    if (!__atomic_load_n(&slot->ready, __ATOMIC_RELAXED)) {
      r = loom__gemm_device_read(index, &slot->dev);
      if (r == LOOM_SUCCESS) __atomic_store_n(&slot->ready, 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&loom__gemm_devices_mu);
    LOOM_TRY(r);
  }
  *out = slot->dev;
  return LOOM_SUCCESS;
}

int loom__gemm_code_versions(int *cache, const void *fn, int *ptx, int *bin) {
  int v = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
  if (v < 0) {
    struct cudaFuncAttributes fa;
    if (cudaFuncGetAttributes(&fa, fn) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0; /* not cached: a later call asks again */
    }
    v = fa.ptxVersion * 1000 + fa.binaryVersion;
    __atomic_store_n(cache, v, __ATOMIC_RELEASE);
  }
  *ptx = v / 1000, *bin = v % 1000;
  return 1;
}
