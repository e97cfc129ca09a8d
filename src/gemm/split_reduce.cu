/*
 * split_reduce.cu - split-K's second kernel (split_reduce.h says what and
 * why): sums the split units' fp32 partials of every shared tile, then the
 * GEMM's epilogue (bias, activation, one rounding, C stores masked at m).
 *
 * One thread per float4 of a slab: thread i of the grid-stride loop reads
 * float4 i of the tile's slab in each split's slot (consecutive threads,
 * consecutive 16 bytes: the reads, splits x 4 bytes per output, are whole
 * 512-byte lines per warp) and writes the four outputs it holds, two pairs
 * of adjacent columns on rows r and r + 8 (a warp covers 8 x 2 rows of 16
 * contiguous bytes each: C is 2 or 4 bytes per output, the smaller stream).
 * Floors (2048 x 768, 128 x 128 tiles, split 2): 12.6 MB read from L2,
 * 3.1 MB written: ~3 us at the L2's ~5 TB/s.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/error.h"
#include "core/launch_dependent.cuh"
#include "core/pointwise.h"
#include "gemm/epilogue.cuh"
#include "gemm/sm90_layout.h"
#include "gemm/split_reduce.h"

__global__ void __launch_bounds__(256) loom__split_reduce_kernel(loom_split_reduce_args_t r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory"); /* the GEMM's partials are complete and visible */
#endif
  if (r.abort_word && *(const volatile uint32_t *)r.abort_word) return; /* a wait expired: no C */
  const int32_t wn = r.bm == 128 ? r.bn : r.bn / 2;
  const int64_t per_slab = 16 * (int64_t)wn; /* float4s: 64 x wn / 4 */
  /* one split's float4s (loom__split_reduce_float4s); split c + 1's slots start c x total further */
  const int64_t total = (int64_t)r.sk_tiles * 2 * per_slab;
  const float4 *ws = (const float4 *)r.ws;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    const int64_t slab = i / per_slab; /* 2 j + cw */
    const int32_t f = (int32_t)(i - slab * per_slab);
    const int32_t j = (int32_t)(slab >> 1), cw = (int32_t)(slab & 1);
    float4 s = __ldcg(ws + i);
    for (int32_t c = 1; c < r.splits; ++c) {
      const float4 v = __ldcg(ws + i + c * total);
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    int32_t tm, tn;
    loom__tile_coords(&r.order, loom__tile_at(&r.order, r.dp_tiles + j), &tm, &tn);
    const loom_sm90_wg_part_t part = loom__sm90_wg_part(r.bm, r.bn, 0, cw);
    const int32_t q = f >> 7, t = f & 127;
    const int32_t row = tm * r.bm + part.row + 16 * (t >> 5) + ((t & 31) >> 2);
    const int32_t col = tn * r.bn + part.col + 8 * q + 2 * (t & 3);
    if (col >= r.n) continue; /* n is a multiple of 8: a pair is whole or out */
    float b0, b1;
    loom__gemm_bias2(r.bias, col, r.c_type, &b0, &b1);
    const float v[4] = {s.x + b0, s.y + b1, s.z + b0, s.w + b1};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (row + 8 * h >= r.m) break;
      float v0 = v[2 * h], v1 = v[2 * h + 1];
      if (r.activation != LOOM_ACT_NONE) {
        v0 = loom__activation_f32(r.activation, v0);
        v1 = loom__activation_f32(r.activation, v1);
      }
      loom__gemm_store2(r.c, (int64_t)(row + 8 * h) * r.n + col, r.c_type, v0, v1, 0);
    }
  }
}

extern "C" loom_result_t loom__gemm_split_reduce_preload(void) {
  static int loaded[16];
  int dev = 0;
  LOOM_CUDA(cudaGetDevice(&dev));
  if (dev >= 0 && dev < 16 && __atomic_load_n(&loaded[dev], __ATOMIC_ACQUIRE)) return LOOM_SUCCESS;
  cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, (const void *)loom__split_reduce_kernel));
  if (dev >= 0 && dev < 16) __atomic_store_n(&loaded[dev], 1, __ATOMIC_RELEASE);
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__gemm_split_reduce(const loom_split_reduce_args_t *r, int sms, cudaStream_t stream) {
  int64_t blocks = (loom__split_reduce_float4s(r) + 255) / 256;
  const int64_t cap = (int64_t)(sms > 0 ? sms : 1) * 8;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  LOOM_CUDA(loom__launch_dependent(loom__split_reduce_kernel, dim3((unsigned)blocks), dim3(256), 0, stream, *r));
  LOOM_CUDA_LAUNCHED("loom__split_reduce_kernel");
  return LOOM_SUCCESS;
}
