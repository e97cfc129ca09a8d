/*
 * signal.cu - the comm's own signal kernels: the bounded device barrier
 * between ranks and the bounded stream wait; the copy-engine signal setter.
 *
 * Barrier, call e (from the device call counter, so graph replays advance
 * it; see loom_dev_epoch_t): thread p
 * stores e (release) into slot[rank] of rank p's barrier array, then waits
 * until slot[p] of its own array reaches e. The slots only grow, so a fast
 * rank that enters call e+1 before a slow one has left call e cannot be
 * confused with it: it writes e+1, which also satisfies waits for e.
 */
#include <cuda.h>
#include <cuda_runtime.h>

#include "comm.h"
#include "error.h"
#include "signal.cuh"
#include "world.h"

#include <string.h>

/* ---- wait-site names ----------------------------------------------------- */

static const char *loom__site_names[LOOM_SITE_MAX];
static int loom__site_clashes;

extern "C" int loom__wait_site_register(uint32_t site, const char *name) {
  if (site >= LOOM_SITE_MAX || !name) {
    __atomic_add_fetch(&loom__site_clashes, 1, __ATOMIC_RELAXED);
    return LOOM_ERR_INTERNAL;
  }
  const char *expected = NULL;
  if (__atomic_compare_exchange_n(&loom__site_names[site], &expected, name, 0, __ATOMIC_ACQ_REL,
                                  __ATOMIC_ACQUIRE))
    return LOOM_SUCCESS;
  if (expected == name || strcmp(expected, name) == 0) return LOOM_SUCCESS;
  __atomic_add_fetch(&loom__site_clashes, 1, __ATOMIC_RELAXED);
  return LOOM_ERR_INTERNAL;
}

extern "C" const char *loom__wait_site_name(uint32_t site) {
  const char *n = site < LOOM_SITE_MAX ? __atomic_load_n(&loom__site_names[site], __ATOMIC_ACQUIRE) : NULL;
  return n ? n : "unknown";
}

extern "C" int loom__wait_site_clashes(void) { return __atomic_load_n(&loom__site_clashes, __ATOMIC_RELAXED); }

__attribute__((constructor)) static void loom__core_wait_sites(void) {
  loom__wait_site_register(LOOM_SITE_TEST, "test");
  loom__wait_site_register(LOOM_SITE_BARRIER, "comm barrier");
  loom__wait_site_register(LOOM_SITE_STREAM_WAIT, "stream wait");
  loom__wait_site_register(LOOM_SITE_CONSUMED, "buffer consumed by peer");
}

__global__ void loom__barrier_kernel(loom_dev_comm_t dc, size_t barrier_offset) {
  loom_dev_epoch_t *counter = (loom_dev_epoch_t *)(dc.ws + barrier_offset);
  const size_t slots_offset = barrier_offset + sizeof(loom_dev_epoch_t);
  const uint32_t epoch = loom__epoch_begin(counter);
  /* Stores of earlier kernels on the stream (to peers too) are performed
   * before the slots announce them. */
  __threadfence_system();
  for (int p = threadIdx.x; p < dc.size; p += blockDim.x)
    loom__signal_store_release(loom_signal_addr(&dc, p, slots_offset, (uint32_t)dc.rank), epoch);
  for (int p = threadIdx.x; p < dc.size; p += blockDim.x) {
    uint32_t *mine = (uint32_t *)(dc.ws + slots_offset) + p;
    if (!loom__signal_wait(&dc, mine, epoch, p, (uint32_t)p, LOOM_SITE_BARRIER)) break;
  }
  __syncthreads();
  if (threadIdx.x == 0) loom__epoch_block_done(counter, epoch);
}

__global__ void loom__stream_wait_kernel(loom_dev_comm_t dc, const uint32_t *addr, uint32_t expected,
                                         int peer, uint32_t signal, uint32_t site) {
  loom__signal_wait(&dc, addr, expected, peer, signal, site);
}

extern "C" loom_result_t loom__comm_barrier(loom_comm_t comm, cudaStream_t stream) {
  if (!comm->ws_all_reachable)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom barrier: not every rank is load/store reachable from rank %d "
                      "(multi-node comms need the network path)", comm->rank);
  int threads = comm->size < 1024 ? comm->size : 1024;
  threads = (threads + 31) / 32 * 32;
  loom__barrier_kernel<<<1, threads, 0, stream>>>(loom__comm_dev(comm), comm->barrier_offset);
  LOOM_CUDA_LAUNCHED("loom__barrier_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__stream_wait(loom_comm_t comm, const uint32_t *addr, uint32_t expected,
                                           int peer, uint32_t signal, uint32_t site,
                                           cudaStream_t stream) {
  loom__stream_wait_kernel<<<1, 1, 0, stream>>>(loom__comm_dev(comm), addr, expected, peer, signal, site);
  LOOM_CUDA_LAUNCHED("loom__stream_wait_kernel");
  return LOOM_SUCCESS;
}

typedef CUresult (*loom__write_value32_fn)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

extern "C" loom_result_t loom__signal_write_ce(loom_comm_t comm, uint32_t *addr, uint32_t value,
                                               cudaStream_t stream) {
  (void)comm;
  /* looked up once; threads that race on the first call store the same
   * pointer (atomically) */
  static loom__write_value32_fn cached = NULL;
  loom__write_value32_fn fn = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
  if (!fn) {
    cudaDriverEntryPointQueryResult q;
    void *p = NULL;
    LOOM_CUDA(cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p)
      return loom__fail(LOOM_ERR_UNSUPPORTED, "the CUDA driver has no cuStreamWriteValue32");
    fn = (loom__write_value32_fn)p;
    __atomic_store_n(&cached, fn, __ATOMIC_RELEASE);
  }
  /* The default flags order the write after all earlier work on the stream
   * and make it visible system-wide (a memory barrier precedes it). */
  CUresult r = fn((CUstream)stream, (CUdeviceptr)addr, value, CU_STREAM_WRITE_VALUE_DEFAULT);
  if (r != CUDA_SUCCESS)
    return loom__fail(LOOM_ERR_CUDA, "cuStreamWriteValue32(addr=%p, value=%u) failed: CUresult %d",
                      (void *)addr, value, (int)r);
  return LOOM_SUCCESS;
}

/* ---- a world's skew (world.h) ------------------------------------------------ */

static __global__ void loom__world_delay_kernel(uint64_t ns) { loom__sleep_ns(ns); }

extern "C" loom_result_t loom__world_skew(loom_comm_t comm, cudaStream_t stream) {
  if (!comm->world) return LOOM_SUCCESS;
  const uint64_t ns = loom__world_skew_ns(comm->rank);
  if (ns == 0) return LOOM_SUCCESS;
  loom__world_delay_kernel<<<1, 1, 0, stream>>>(ns);
  LOOM_CUDA_LAUNCHED("loom__world_delay_kernel");
  return LOOM_SUCCESS;
}
