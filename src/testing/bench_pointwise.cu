/*
 * bench_pointwise.cu - the separate pointwise kernel of an unfused baseline
 * (loom_bench_pointwise_run, bench_api.h): `loom-bench gemm_ar` compares
 * loom_gemm_ar with cuBLASLt, an NCCL AllReduce, then y = epilogue(x) (for
 * the benchmark dropout(x + bias) + residual) as one elementwise kernel over
 * [rows, cols], 8 elements per thread, fp32 arithmetic. It draws the dropout
 * mask with loom's own functions (core/pointwise.h through coll_device.cuh),
 * so its output is comparable element by element with loom's; what it costs
 * is what a framework's (fused) bias-dropout-add kernel costs: one read of x
 * and the residual, one write of y.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/pointwise.h"
#include "ops/common/coll_device.cuh"

template <int T>
__global__ void __launch_bounds__(256) loom_bench_pointwise_kernel(const char *x, char *y, int64_t nvec,
                                                                    const loom_pointwise_t pw) {
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += (int64_t)gridDim.x * blockDim.x) {
    float f[8];
    loom__load8<T>(x, v * 8, f);
    loom__coll_pointwise8<T>(pw, v * 8, f);
    loom__store8<T>(y, v * 8, f);
  }
}

/* y [count] = epilogue(x [count]) of the epilogue's output dtype (count a
 * multiple of 8; y may be x). 0, or the CUDA error of the launch. */
extern "C" int loom__bench_pointwise_launch(const void *x, void *y, int64_t count, const loom_pointwise_t *pw,
                                            cudaStream_t s) {
  const int64_t nvec = count / 8;
  int dev = 0, sms = 132;
  (void)cudaGetDevice(&dev);
  (void)cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  int64_t blocks = (nvec + 255) / 256;
  if (blocks > (int64_t)sms * 8) blocks = (int64_t)sms * 8;
  if (blocks < 1) blocks = 1;
  if (pw->type == LOOM_FP16)
    loom_bench_pointwise_kernel<LOOM_FP16><<<(unsigned)blocks, 256, 0, s>>>((const char *)x, (char *)y, nvec, *pw);
  else if (pw->type == LOOM_BF16)
    loom_bench_pointwise_kernel<LOOM_BF16><<<(unsigned)blocks, 256, 0, s>>>((const char *)x, (char *)y, nvec, *pw);
  else
    loom_bench_pointwise_kernel<LOOM_FP32><<<(unsigned)blocks, 256, 0, s>>>((const char *)x, (char *)y, nvec, *pw);
  return (int)cudaGetLastError();
}
