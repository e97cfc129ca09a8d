/*
 * norm_steps_probe.cu - where the ~1.5 us go that AllReduce + residual +
 * RMSNorm (LL, one block per row) spends over the plain AllReduce LL per
 * call in a CUDA graph (docs/perf/coll.md, "Residual + RMSNorm fused":
 * 4.4 against 2.9 us at 4 KiB on 2x H200, and 3.3 against 1.5 at W = 1,
 * where no peer takes part). One GPU, no peers, no loom protocol: each
 * kernel does one more of the norm path's steps than the one before, on R
 * rows of C bf16 (one block of 512 threads per row, one group of 8
 * elements a thread, as the LL kernel holds a row of up to 4096 columns):
 *   copy      y = x (the plain LL's work at W = 1: load a group, store it)
 *   +res      y = x + r (the residual, one 16-byte load before the sum)
 *   +mod      the same, with the residual's column found as the library's
 *             epilogue finds it (i0 % cols in 64 bits) before its load
 *   +sum      y = (x + r) * rsqrt(mean((x + r)^2) + eps): the block sum
 *             (loom__coll_block_sum: shuffles, three barriers)
 *   +w        the norm's weight, eight scalar loads (loom__pw_load)
 *   +w,mod    both: the library's LL norm path's steps
 *   +w16,col  the weight in one 16-byte load and the column known (v x 8),
 *             no remainder
 * Each kernel is timed per launch inside a CUDA graph of 16 launches (median
 * of 50 replays after 5). Every kernel's output is checked first against a
 * double-precision CPU norm of fresh random inputs (never zero) on every
 * element (poisoned before): the +sum and later kernels within 2^-7
 * relative (bf16 output), copy and +res exactly / within bf16 rounding.
 *
 *   build/dev/coll/norm_steps_probe      (one GPU)
 */
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev/common/check.cuh"
#include "ops/common/coll_device.cuh"

#define THREADS 512
#define CALLS 16
#define EPS 1e-5f

enum { S_COPY, S_RES, S_MOD, S_SUM, S_W, S_WMOD, S_W16 };
static const char *const g_name[] = {"copy", "+res", "+mod", "+sum", "+w", "+w,mod", "+w16,col"};
#define NSTEP 7

typedef struct args {
  const __nv_bfloat16 *x, *r, *w;
  __nv_bfloat16 *y;
  int64_t cols;
} args_t;

/* Row blockIdx.x, group threadIdx.x (C <= 8 x THREADS). */
template <int S>
__global__ void __launch_bounds__(THREADS) steps(const __grid_constant__ args_t a) {
  __shared__ float red[33];
  const int64_t gpr = a.cols / 8, v = threadIdx.x, i0 = (int64_t)blockIdx.x * a.cols + v * 8;
  const bool on = v < gpr;
  float x[8], r[8], w[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) r[k] = 0.f, w[k] = 1.f;
  if (on) {
    loom__load8<LOOM_BF16>(a.x, i0, x);
    if (S >= S_RES) {
      int64_t col = v * 8;
      if (S == S_MOD || S == S_WMOD) col = i0 % a.cols; /* as loom__coll_pw8_load */
      if ((col & 7) == 0) loom__load8<LOOM_BF16>(a.r, i0 - (i0 % 8), r);
    }
    if (S == S_W || S == S_WMOD)
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = loom__pw_load(a.w, v * 8 + k, LOOM_BF16);
    if (S == S_W16) loom__load8<LOOM_BF16>(a.w, v * 8, w);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] += r[k];
  }
  if (S >= S_SUM) {
    float s1 = 0.f;
    if (on)
#pragma unroll
      for (int k = 0; k < 8; ++k) s1 += x[k] * x[k];
    if (__syncthreads_or(!on && v < 0)) return; /* the LL path's wait flag barrier (never taken) */
    const float rstd = rsqrtf(loom__coll_block_sum(s1, red) / (float)a.cols + EPS);
#pragma unroll
    for (int k = 0; k < 8; ++k) x[k] = x[k] * rstd * w[k];
  }
  if (on) loom__store8<LOOM_BF16>(a.y, i0, x);
}

typedef void (*kernel_t)(args_t);
static const kernel_t g_k[NSTEP] = {steps<S_COPY>, steps<S_RES>, steps<S_MOD>, steps<S_SUM>,
                                    steps<S_W>,    steps<S_WMOD>, steps<S_W16>};

/* Element i of input d: uniform in [0.25, 1.25) with a random sign (never zero), a fixed hash. */
static float draw(uint64_t d, uint64_t i) {
  uint64_t z = (d * 0x9E3779B97F4A7C15ull) ^ (i + 0x94D049BB133111EBull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = 0.25f + (float)((z >> 40) & 0xffffffu) / (float)(1u << 24);
  return (z & 1u) ? -u : u;
}

static float bf(__nv_bfloat16 h) { return __bfloat162float(h); }

/* Every element of y against the CPU's result of step S; returns the count wrong. */
static int64_t check(int S, const __nv_bfloat16 *hx, const __nv_bfloat16 *hr, const __nv_bfloat16 *hw,
                     const __nv_bfloat16 *hy, int64_t R, int64_t C) {
  int64_t bad = 0;
  for (int64_t row = 0; row < R; ++row) {
    double ss = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double t = (double)bf(hx[row * C + c]) + (S >= S_RES ? (double)bf(hr[row * C + c]) : 0.0);
      ss += t * t;
    }
    const double rstd = 1.0 / sqrt(ss / (double)C + (double)EPS);
    for (int64_t c = 0; c < C; ++c) {
      double t = (double)bf(hx[row * C + c]) + (S >= S_RES ? (double)bf(hr[row * C + c]) : 0.0);
      if (S >= S_SUM) t *= rstd * (S >= S_W ? (double)bf(hw[c]) : 1.0);
      const double got = (double)bf(hy[row * C + c]);
      if (!(fabs(got - t) <= fabs(t) / 128.0 + 1e-6)) ++bad;
    }
  }
  return bad;
}

int main(void) {
  static const int64_t rows[] = {1, 8, 32}, colsv[] = {2048, 4096};
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  printf("%-9s %5s %5s %10s %8s\n", "step", "rows", "cols", "us/call", "#wrong");
  for (int ci = 0; ci < 2; ++ci)
    for (int ri = 0; ri < 3; ++ri) {
      const int64_t R = rows[ri], C = colsv[ci], n = R * C;
      __nv_bfloat16 *hx = (__nv_bfloat16 *)malloc((size_t)n * 2), *hr = (__nv_bfloat16 *)malloc((size_t)n * 2);
      __nv_bfloat16 *hw = (__nv_bfloat16 *)malloc((size_t)C * 2), *hy = (__nv_bfloat16 *)malloc((size_t)n * 2);
      for (int64_t i = 0; i < n; ++i) hx[i] = __float2bfloat16(draw(1, i)), hr[i] = __float2bfloat16(draw(2, i));
      for (int64_t c = 0; c < C; ++c) hw[c] = __float2bfloat16(draw(3, c));
      args_t a;
      CK(cudaMalloc((void **)&a.x, (size_t)n * 2));
      CK(cudaMalloc((void **)&a.r, (size_t)n * 2));
      CK(cudaMalloc((void **)&a.w, (size_t)C * 2));
      CK(cudaMalloc((void **)&a.y, (size_t)n * 2));
      CK(cudaMemcpy((void *)a.x, hx, (size_t)n * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy((void *)a.r, hr, (size_t)n * 2, cudaMemcpyHostToDevice));
      CK(cudaMemcpy((void *)a.w, hw, (size_t)C * 2, cudaMemcpyHostToDevice));
      a.cols = C;
      for (int S = 0; S < NSTEP; ++S) {
        CK(cudaMemset(a.y, 0xff, (size_t)n * 2)); /* poison: NaN */
        g_k[S]<<<(unsigned)R, THREADS, 0, s>>>(a);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(s));
        CK(cudaMemcpy(hy, a.y, (size_t)n * 2, cudaMemcpyDeviceToHost));
        const int64_t wrong = check(S, hx, hr, hw, hy, R, C);
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int k = 0; k < CALLS; ++k) g_k[S]<<<(unsigned)R, THREADS, 0, s>>>(a);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        float t[50];
        for (int rep = -5; rep < 50; ++rep) {
          CK(cudaEventRecord(e0, s));
          CK(cudaGraphLaunch(ge, s));
          CK(cudaEventRecord(e1, s));
          CK(cudaEventSynchronize(e1));
          if (rep >= 0) CK(cudaEventElapsedTime(&t[rep], e0, e1));
        }
        for (int i = 1; i < 50; ++i) /* insertion sort: the median */
          for (int j = i; j > 0 && t[j] < t[j - 1]; --j) {
            const float z = t[j];
            t[j] = t[j - 1], t[j - 1] = z;
          }
        printf("%-9s %5lld %5lld %10.2f %8lld\n", g_name[S], (long long)R, (long long)C, 1000.0 * t[25] / CALLS,
               (long long)wrong);
        CK(cudaEventDestroy(e0));
        CK(cudaEventDestroy(e1));
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        if (wrong) return 1;
      }
      CK(cudaFree((void *)a.x));
      CK(cudaFree((void *)a.r));
      CK(cudaFree((void *)a.w));
      CK(cudaFree(a.y));
      free(hx), free(hr), free(hw), free(hy);
    }
  return 0;
}
