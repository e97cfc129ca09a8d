/*
 * probe.cuh - what the one-GPU world's probes (host_calls_probe.cu,
 * queues_probe.cu) share: the CUDA check that ends a probe, the device's
 * global timer, a one-thread kernel spinning on a flag (bounded) and the
 * flag's one-thread setter.
 */
#ifndef LOOM_DEV_WORLD_PROBE_CUH
#define LOOM_DEV_WORLD_PROBE_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "../common/check.cuh"

static __device__ __forceinline__ unsigned long long now_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Spins until *flag >= want or limit_ns pass: out[0] = 1 when the flag got
 * there, out[1] = ns waited. `started` (may be NULL): set to want at once. */
__global__ void spin_kernel(const volatile unsigned *flag, unsigned want, unsigned long long limit_ns,
                            unsigned long long *out, volatile unsigned *started) {
  if (started) *started = want;
  __threadfence_system();
  const unsigned long long t0 = now_ns();
  unsigned long long t = t0;
  while (*flag < want && (t = now_ns()) - t0 < limit_ns) {
  }
  out[0] = *flag >= want, out[1] = t - t0;
}

__global__ void set_kernel(unsigned *flag, unsigned v) { *(volatile unsigned *)flag = v; }

#endif /* LOOM_DEV_WORLD_PROBE_CUH */
