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
 * Two patterns, each with fresh non-blocking streams:
 *  - pairs: for every offset d in 1..streams-1, on stream 0 a one-thread
 *    kernel spins (bounded by limit_ms of the global timer) until a flag
 *    reaches a new value, with a tiny kernel queued behind it; then the
 *    flag's setter is launched on stream d (is the mapping of streams to
 *    queues by creation order?);
 *  - busy: for K = 1..streams/2, K streams each hold a spinning kernel with
 *    one queued behind it, then K more streams each launch the setter of
 *    one of them (do K busy streams leave a queue free for the setters?).
 * A row says how many spins saw their flag (the setter's launch got
 * through) and how long the slowest waited. Run it under
 * CUDA_DEVICE_MAX_CONNECTIONS=8 and =32 (read by CUDA at the process's
 * first call; the probe prints it).
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "probe.cuh"

__global__ void next_kernel(unsigned long long *out) { out[2] += 1; }

/* K spinning streams, each with a kernel queued behind, then K setter streams;
 * returns how many spins saw their flag, *worst the longest wait in ms. */
static int busy_round(int K, unsigned round, int limit_ms, unsigned *flags, unsigned long long *out, double *worst) {
  cudaStream_t *s = (cudaStream_t *)malloc(sizeof(cudaStream_t) * (size_t)(2 * K));
  for (int i = 0; i < 2 * K; ++i) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  for (int i = 0; i < K; ++i) {
    spin_kernel<<<1, 1, 0, s[i]>>>(flags + i, round, (unsigned long long)limit_ms * 1000000ull, out + 3 * i, NULL);
    next_kernel<<<1, 1, 0, s[i]>>>(out + 3 * i);
  }
  for (int i = 0; i < K; ++i) set_kernel<<<1, 1, 0, s[K + i]>>>(flags + i, round);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  unsigned long long *h = (unsigned long long *)malloc(sizeof *h * 3 * (size_t)K);
  CK(cudaMemcpy(h, out, sizeof *h * 3 * (size_t)K, cudaMemcpyDeviceToHost));
  int seen = 0;
  *worst = 0;
  for (int i = 0; i < K; ++i) {
    seen += h[3 * i] != 0;
    if (h[3 * i + 1] / 1e6 > *worst) *worst = h[3 * i + 1] / 1e6;
  }
  for (int i = 0; i < 2 * K; ++i) CK(cudaStreamDestroy(s[i]));
  free(h), free(s);
  return seen;
}

int main(int argc, char **argv) {
  setenv("CUDA_MODULE_LOADING", "EAGER", 1); /* as a loom world requires (a lazy first launch waits for the device) */
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
  unsigned *flags = NULL;
  unsigned long long *out = NULL, h[3];
  CK(cudaMalloc((void **)&flags, sizeof *flags * 256));
  CK(cudaMalloc((void **)&out, 3 * 256 * sizeof *out));
  CK(cudaMemset(flags, 0, sizeof *flags * 256));
  CK(cudaMemset(out, 0, 3 * 256 * sizeof *out));
  CK(cudaDeviceSynchronize());
  printf("# CUDA_DEVICE_MAX_CONNECTIONS=%s; %d streams; spin limit %d ms\n", conn ? conn : "(unset: 8)", n, limit_ms);
  cudaStream_t *s = (cudaStream_t *)malloc(sizeof(cudaStream_t) * (size_t)n);
  for (int i = 0; i < n; ++i) CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  int shared = 0;
  unsigned round = 0;
  printf("pairs: offsets whose setter did not get through:");
  for (int d = 1; d < n; ++d) {
    ++round;
    spin_kernel<<<1, 1, 0, s[0]>>>(flags, round, (unsigned long long)limit_ms * 1000000ull, out, NULL);
    next_kernel<<<1, 1, 0, s[0]>>>(out);
    set_kernel<<<1, 1, 0, s[d]>>>(flags, round);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, out, sizeof h, cudaMemcpyDeviceToHost));
    if (!h[0]) printf(" %d", d), ++shared;
  }
  printf(" (%d of %d)\n", shared, n - 1);
  for (int i = 0; i < n; ++i) CK(cudaStreamDestroy(s[i]));
  free(s);
  printf("| busy streams K | spins that saw their flag | longest wait ms |\n|---|---|---|\n");
  for (int K = 1; K <= n / 2 && K <= 256; ++K) {
    double worst = 0;
    const int seen = busy_round(K, ++round, limit_ms, flags, out, &worst);
    printf("| %d | %d of %d | %.3f |\n", K, seen, K, worst);
    fflush(stdout);
  }
  CK(cudaFree(flags));
  CK(cudaFree(out));
  return 0;
}
