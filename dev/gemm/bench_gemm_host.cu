/*
 * bench_gemm_host.cu - what a GEMM call costs on the host and what it costs
 * on the GPU, separately, for loom_gemm and for cuBLAS.
 *
 * A decode GEMM runs 8-30 us on the GPU; a call that takes longer than that
 * to enqueue leaves the GPU idle between back-to-back calls, and a benchmark
 * that puts events between calls then times the host, not the kernel. Per
 * shape, for each of loom_gemm (the public call: checks, path, tuning cache,
 * the model's pick, launch), loom__gemm_launch (a fixed configuration: the
 * launcher alone), cuBLASLt (loom__base_gemm, best of its heuristic) and
 * cublasGemmEx (default algorithm):
 *   host us   wall time of N calls / N, the GPU kept busy by a spin kernel
 *             launched first (so no call waits on a full launch queue or
 *             the GPU), measured with a monotonic clock
 *   gpu us    event time of N back-to-back calls enqueued behind a spin
 *             kernel / N: the GPU never waits for the host
 *   b2b us    event time of N back-to-back calls without the spin / N: what
 *             a loop of eager calls gets (the larger of host and GPU)
 *
 *   bench_gemm_host [N [S]]    (N default 200; S: only shape S of the list, for a
 *                              profiler run)
 * Shapes: the issue's two examples, small decode weights of the shape set
 * (m = 1, 8, 16) and the set's shortest GEMMs (5-6 us in cuBLASLt), bf16,
 * B as a Linear weight ([n, k]).
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "baseline/baseline.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "loom.h"

#include "../common/check.cuh"

/* Keeps the GPU busy for `ns` nanoseconds (globaltimer), one thread. */
static __global__ void spin_kernel(uint64_t ns) {
  uint64_t t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
}

static __global__ void fill_kernel(uint16_t *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint64_t z = (i + seed) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    const float f = ((float)(z >> 40) / (float)(1 << 24)) * 2.f - 1.f;
    const uint32_t u = __float_as_uint(f == 0.f ? 0.5f : f);
    p[i] = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
  }
}

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

typedef struct ctx {
  loom_gemm_desc_t d;
  const uint16_t *a, *b;
  uint16_t *c;
  loom_gemm_config_t cfg;
  int sm90;
  cublasHandle_t hb;
} ctx_t;

static void call(const ctx_t *x, int op, cudaStream_t st) {
  if (op == 0) LK(loom_gemm(&x->d, x->a, x->b, x->c, NULL, st));
  else if (op == 1) LK(loom__gemm_launch(x->sm90, &x->d, x->a, x->b, x->c, NULL, &x->cfg, st));
  else if (op == 2) LK(loom__base_gemm(&x->d, x->a, x->b, x->c, NULL, st));
  else {
    const float al = 1.f, be = 0.f;
    if (cublasGemmEx(x->hb, CUBLAS_OP_T, CUBLAS_OP_N, (int)x->d.n, (int)x->d.m, (int)x->d.k, &al, x->b, CUDA_R_16BF,
                     (int)x->d.k, x->a, CUDA_R_16BF, (int)x->d.k, &be, x->c, CUDA_R_16BF, (int)x->d.n,
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
      fprintf(stderr, "cublasGemmEx failed\n");
      exit(1);
    }
  }
}

int main(int argc, char **argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 200;
  const int64_t shapes[][3] = {{1, 12288, 1536}, {8, 12288, 1536}, {1, 4608, 12288}, {16, 4608, 12288},
                               {1, 7168, 2048},  {4, 2048, 7168},  {16, 2560, 8192}, {1, 8192, 14336},
                               {1000, 4608, 12288}, {16, 2048, 384},  {8, 2048, 512},  {256, 2048, 96},
                               {1, 2048, 384},
                               /* few 64-row tiles with k of 1024-1536, where loom-bench gemm's eager times sit
                                * at 19-20 us against cuBLASLt's 10 */
                               {32, 2048, 1024}, {64, 3072, 1536}, {32, 2048, 96}, {64, 4096, 4096}};
  const int nshapes = (int)(sizeof shapes / sizeof shapes[0]);
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  printf("device %s, %d SMs, N = %d calls per measurement\n", prop.name, prop.multiProcessorCount, N);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cublasHandle_t hb;
  if (cublasCreate(&hb) != CUBLAS_STATUS_SUCCESS || cublasSetStream(hb, st) != CUBLAS_STATUS_SUCCESS) return 1;
  loom__gemm_device_t dev;
  LK(loom__gemm_device(&dev));
  const char *names[4] = {"loom_gemm", "launcher", "cuBLASLt", "cublasGemmEx"};
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  printf("%5s %6s %6s | %-12s %8s %8s %8s | config\n", "m", "n", "k", "call", "host us", "gpu us", "b2b us");
  const int only = argc > 2 ? atoi(argv[2]) : -1;
  for (int s = 0; s < nshapes; ++s) {
    if (only >= 0 && s != only) continue;
    ctx_t x;
    x.d = (loom_gemm_desc_t)LOOM_GEMM_DESC(shapes[s][0], shapes[s][1], shapes[s][2], LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    const size_t sa = (size_t)(x.d.m * x.d.k), sb = (size_t)(x.d.n * x.d.k), sc = (size_t)(x.d.m * x.d.n);
    uint16_t *a, *b, *c;
    CK(cudaMalloc(&a, sa * 2));
    CK(cudaMalloc(&b, sb * 2));
    CK(cudaMalloc(&c, sc * 2));
    fill_kernel<<<1024, 256, 0, st>>>(a, sa, 1);
    fill_kernel<<<1024, 256, 0, st>>>(b, sb, 2);
    CK(cudaGetLastError());
    x.a = a, x.b = b, x.c = c, x.hb = hb;
    loom__gemm_path_t path;
    LK(loom__gemm_path(&x.d, &path));
    x.sm90 = path == LOOM__PATH_SM90;
    x.cfg = loom__gemm_choose(&x.d, &dev, x.sm90);
    char cfgs[96];
    loom__gemm_config_format(&x.cfg, cfgs, sizeof cfgs);
    for (int op = 0; op < 4; ++op) {
      for (int w = 0; w < 5; ++w) call(&x, op, st); /* warm-up: plans, heuristics, module loading */
      CK(cudaStreamSynchronize(st));
      /* host: the GPU busy long enough for all N calls to be enqueued */
      spin_kernel<<<1, 1, 0, st>>>((uint64_t)N * 60000);
      CK(cudaGetLastError());
      double t0 = now_us();
      for (int i = 0; i < N; ++i) call(&x, op, st);
      const double host = (now_us() - t0) / N;
      CK(cudaStreamSynchronize(st));
      /* gpu: the calls enqueued behind a spin, events around them */
      spin_kernel<<<1, 1, 0, st>>>((uint64_t)N * 60000);
      CK(cudaEventRecord(e0, st));
      for (int i = 0; i < N; ++i) call(&x, op, st);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      const double gpu = ms * 1e3 / N;
      /* back to back, no spin */
      CK(cudaEventRecord(e0, st));
      for (int i = 0; i < N; ++i) call(&x, op, st);
      CK(cudaEventRecord(e1, st));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms, e0, e1));
      printf("%5lld %6lld %6lld | %-12s %8.2f %8.2f %8.2f | %s\n", (long long)x.d.m, (long long)x.d.n,
             (long long)x.d.k, names[op], host, gpu, ms * 1e3 / N, op < 2 ? cfgs : "");
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c));
  }
  return 0;
}
