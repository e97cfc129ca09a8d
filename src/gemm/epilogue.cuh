/*
 * epilogue.cuh - the output element helpers both GEMM kernels use when they
 * store C straight from registers (gemm_sm80.cu; gemm_sm90.cu's hooked
 * kernels): a pair of adjacent outputs stored or atomically added
 * (red.global.add: f32, bf16x2, f16x2), and one C/bias element read as float.
 * Any architecture >= sm_80.
 */
#ifndef LOOM_GEMM_EPILOGUE_CUH
#define LOOM_GEMM_EPILOGUE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "loom.h"
#include "gemm/gemm.h"

/* Stores (or, reduce != 0, atomically adds) outputs v0, v1 at element
 * offsets off, off + 1 of a C buffer of dtype ct (LOOM_FP32, LOOM_BF16 or
 * LOOM_FP16); off is even, so the pair is 4/8-byte aligned. */
static __device__ __forceinline__ void loom_gemm_store2(void *base, int64_t off, int ct, float v0, float v1,
                                                        int reduce) {
  if (ct == LOOM_FP32) {
    float *p = (float *)base + off;
    if (reduce) {
      atomicAdd(p, v0);
      atomicAdd(p + 1, v1);
    } else {
      *(float2 *)p = make_float2(v0, v1);
    }
  } else if (ct == LOOM_BF16) {
    __nv_bfloat162 *p = (__nv_bfloat162 *)((__nv_bfloat16 *)base + off);
    const __nv_bfloat162 v = __floats2bfloat162_rn(v0, v1);
    if (reduce) atomicAdd(p, v);
    else *p = v;
  } else {
    __half2 *p = (__half2 *)((__half *)base + off);
    const __half2 v = __floats2half2_rn(v0, v1);
    if (reduce) atomicAdd(p, v);
    else *p = v;
  }
}

/* Element i of a C-typed buffer (C or bias) as float. */
static __device__ __forceinline__ float loom_gemm_load_c(const void *base, int64_t i, int ct) {
  if (ct == LOOM_FP32) return ((const float *)base)[i];
  if (ct == LOOM_BF16) return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
  return __half2float(((const __half *)base)[i]);
}

/* The bias of columns col, col + 1 (0 without bias). */
static __device__ __forceinline__ void loom_gemm_bias2(const void *bias, int64_t col, int ct, float *b0, float *b1) {
  *b0 = 0.f, *b1 = 0.f;
  if (bias) {
    *b0 = loom_gemm_load_c(bias, col, ct);
    *b1 = loom_gemm_load_c(bias, col + 1, ct);
  }
}

/* Where output row `row` of an m-row C goes: C itself, or with HOOKS and a
 * row routing table, row_dst[row / rows_per_dst] (rows_per_dst 0: all rows
 * in entry 0); *r is the row within that buffer. */
template <bool HOOKS>
static __device__ __forceinline__ void *loom_gemm_row_dst(void *c, const loom_gemm_hooks_t &h, int32_t m, int row,
                                                          int64_t *r) {
  *r = row;
  if (!HOOKS || !h.row_dst) return c;
  const int64_t rp = h.rows_per_dst > 0 ? h.rows_per_dst : (int64_t)m;
  *r = row % rp;
  return h.row_dst[row / rp];
}

#endif /* LOOM_GEMM_EPILOGUE_CUH */
