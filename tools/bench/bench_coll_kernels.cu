/*
 * bench_coll_kernels.cu - the separate kernel of the unfused baseline that
 * `loom-bench allreduce` compares loom's AllReduce + residual + RMSNorm
 * with: y = RMSNorm(x + residual) * w after an NCCL AllReduce, bf16, one
 * block per row (x, residual [rows, cols], w [cols]), fp32 arithmetic. What
 * a framework runs after a tensor-parallel AllReduce when it is not fused.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

__global__ void loom_bench_rmsnorm_kernel(const __nv_bfloat16 *x, const __nv_bfloat16 *res, const __nv_bfloat16 *w,
                                          __nv_bfloat16 *y, int64_t cols, float eps) {
  __shared__ float red[32];
  const int64_t b = (int64_t)blockIdx.x * cols;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(x[b + c]) + __bfloat162float(res[b + c]);
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (threadIdx.x == 0) red[0] = t;
  }
  __syncthreads();
  const float rstd = rsqrtf(red[0] / (float)cols + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = __bfloat162float(x[b + c]) + __bfloat162float(res[b + c]);
    y[b + c] = __float2bfloat16_rn(v * rstd * __bfloat162float(w[c]));
  }
}

extern "C" int loom_bench_rmsnorm_residual(const void *x, const void *res, const void *w, void *y, int64_t rows,
                                           int64_t cols, float eps, cudaStream_t s) {
  loom_bench_rmsnorm_kernel<<<(unsigned)rows, 256, 0, s>>>((const __nv_bfloat16 *)x, (const __nv_bfloat16 *)res,
                                                           (const __nv_bfloat16 *)w, (__nv_bfloat16 *)y, cols, eps);
  return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
