/*
 * bench_kernels.cu - the harness's own kernels.
 *
 * loom_bench_hold: one thread that spins for a given time, queued before a
 * timed repetition's barrier so that the host has issued the op before the
 * GPU reaches it (bench.c: a repetition then times the GPU's work, not the
 * host's issue; host_us reports that apart).
 *
 * loom_bench_link_copy: what the link itself moves, for the benchmarks whose
 * rows go to other GPUs by kernel stores (loom-bench moe): a plain copy of
 * contiguous bytes into a peer's memory (an LSA pointer: loom_peer_ptr) by
 * 16-byte stores from every SM, no routing, no signals. Timed with every
 * rank storing at once, it is the one-way rate the dispatch's and
 * combine's stores can reach (core.md: 363-364 GB/s on 2x H200 this way).
 * Sizes: multiples of 16 bytes, both ends 16-byte aligned.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "bench.h"
#include "testing/bench_api.h"

__global__ void __launch_bounds__(512) loom_bench_link_copy_kernel(uint4 *dst, const uint4 *src, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  for (; i + 3 * stride < n; i += 4 * stride) { /* four loads in flight before the stores */
    const uint4 a = __ldcg(src + i), b = __ldcg(src + i + stride), c = __ldcg(src + i + 2 * stride),
                d = __ldcg(src + i + 3 * stride);
    dst[i] = a, dst[i + stride] = b, dst[i + 2 * stride] = c, dst[i + 3 * stride] = d;
  }
  for (; i < n; i += stride) dst[i] = __ldcg(src + i);
}

loom_result_t loom_bench_link_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
  if (bytes % 16 || ((uintptr_t)dst | (uintptr_t)src) % 16)
    return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "loom_bench_link_copy: bytes=%zu, dst=%p, src=%p: 16-byte "
                           "multiples and alignment", bytes, dst, src);
  if (!bytes) return LOOM_SUCCESS;
  int dev = 0, sms = 132;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e != cudaSuccess) return loom_bench_cuda_fail((int)e, "cudaDeviceGetAttribute", __FILE__, __LINE__);
  const int64_t n = (int64_t)(bytes / 16);
  int64_t blocks = (n + 511) / 512;
  if (blocks > 4 * (int64_t)sms) blocks = 4 * (int64_t)sms;
  loom_bench_link_copy_kernel<<<(unsigned)blocks, 512, 0, stream>>>((uint4 *)dst, (const uint4 *)src, n);
  e = cudaGetLastError();
  return e == cudaSuccess ? LOOM_SUCCESS : loom_bench_cuda_fail((int)e, "loom_bench_link_copy_kernel", __FILE__, __LINE__);
}

__global__ void loom_bench_hold_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}

loom_result_t loom_bench_hold(cudaStream_t stream, double us) {
  if (!(us > 0)) return LOOM_SUCCESS;
  loom_bench_hold_kernel<<<1, 1, 0, stream>>>((uint64_t)(us * 1e3));
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? LOOM_SUCCESS : loom_bench_cuda_fail((int)e, "loom_bench_hold_kernel", __FILE__, __LINE__);
}
