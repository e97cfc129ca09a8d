/*
 * queues_probe.cu - do two streams of one process share a hardware work
 * queue, so that a kernel waiting on one stream holds up a launch on the
 * other? The question it answers for the one-GPU world (docs/world.md):
 * CUDA feeds a device through CUDA_DEVICE_MAX_CONNECTIONS work queues
 * (default 8, at most 32) and maps every stream onto one of them. Where a
 * rank's stream holds a kernel spinning on a peer's signal with its next
 * launch queued behind it, that next launch cannot start, and neither can
 * anything queued after it on the same hardware queue: if the peer's
 * signalling kernel is on a stream mapped to that queue, both wait until
 * the spin's bound expires. W ranks with a user stream and a side stream
 * each need 2 W queues.
 *
 *   queues_probe [limit_ms] [streams]   (defaults 200, 40)
 *
 * Creates `streams` non-blocking streams in order, then for every offset d
 * in 1..streams-1: on stream 0 a one-thread kernel spins (bounded by
 * limit_ms of the global timer) until a flag reaches a new value, and a
 * second tiny kernel is queued behind it on stream 0; then the flag's
 * one-thread setter kernel is launched on stream d. A row says whether the
 * spin saw the flag (stream d's launch got through) or expired (stream d
 * shares stream 0's queue). Run it under CUDA_DEVICE_MAX_CONNECTIONS=8 and
 * =32 (read by CUDA at the process's first call; the probe prints it).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

static __device__ __forceinline__ unsigned long long now_ns(void) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* out[0] = 1 when the flag reached `want` within limit_ns, out[1] = ns waited. */
__global__ void spin_kernel(const volatile unsigned *flag, unsigned want, unsigned long long limit_ns,
                            unsigned long long *out) {
  const unsigned long long t0 = now_ns();
  unsigned long long t = t0;
  while (*flag < want && (t = now_ns()) - t0 < limit_ns) {
  }
  out[0] = *flag >= want, out[1] = t - t0;
}

__global__ void next_kernel(unsigned long long *out) { out[2] += 1; }

__global__ void set_kernel(unsigned *flag, unsigned v) { *(volatile unsigned *)flag = v; }

int main(int argc, char **argv) {
  const int limit_ms = argc > 1 ? atoi(argv[1]) : 200;
  const int n = argc > 2 ? atoi(argv[2]) : 40;
  if (limit_ms < 1 || n < 2 || n > 256) {
    fprintf(stderr, "queues_probe: limit_ms=%d must be >= 1 and streams=%d in [2, 256]\n", limit_ms, n);
    return 2;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    fprintf(stderr, "queues_probe: no CUDA device\n");
    return 2;
  }
  const char *conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  CK(cudaSetDevice(0));
  cudaStream_t *s = (cudaStream_t *)malloc(sizeof(cudaStream_t) * (size_t)n);
  for (int i = 0; i < n; ++i) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  unsigned *flag = NULL;
  unsigned long long *out = NULL, h[3];
  CK(cudaMalloc((void **)&flag, sizeof *flag));
  CK(cudaMalloc((void **)&out, 3 * sizeof *out));
  CK(cudaMemset(flag, 0, sizeof *flag));
  CK(cudaMemset(out, 0, 3 * sizeof *out));
  CK(cudaDeviceSynchronize());
  printf("# CUDA_DEVICE_MAX_CONNECTIONS=%s; %d streams; spin limit %d ms\n", conn ? conn : "(unset: 8)", n, limit_ms);
  printf("| offset | setter got through | spin waited ms |\n|---|---|---|\n");
  int shared = 0;
  for (int d = 1; d < n; ++d) {
    spin_kernel<<<1, 1, 0, s[0]>>>(flag, (unsigned)d, (unsigned long long)limit_ms * 1000000ull, out);
    next_kernel<<<1, 1, 0, s[0]>>>(out);
    set_kernel<<<1, 1, 0, s[d]>>>(flag, (unsigned)d);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    shared += !h[0];
    printf("| %d | %s | %.3f |\n", d, h[0] ? "yes" : "no", h[1] / 1e6);
  }
  printf("# %d of %d offsets share stream 0's queue\n", shared, n - 1);
  for (int i = 0; i < n; ++i) CK(cudaStreamDestroy(s[i]));
  CK(cudaFree(flag));
  CK(cudaFree(out));
  free(s);
  return 0;
}
