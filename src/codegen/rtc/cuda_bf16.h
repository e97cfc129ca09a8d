/*
 * cuda_bf16.h for NVRTC - the bfloat16 type and the conversions loom's
 * device headers use, as cuda_fp16.h here: layout-compatible with CUDA's
 * __nv_bfloat16 / __nv_bfloat162; to float exactly (the bits shifted up),
 * from float by cvt.rn.bf16.f32 (round to nearest even; sm_80 and later).
 */
#ifndef LOOM_RTC_CUDA_BF16_H
#define LOOM_RTC_CUDA_BF16_H

#include "cuda_fp16.h"

struct __align__(2) __nv_bfloat16 { unsigned short __x; };
struct __align__(4) __nv_bfloat162 { __nv_bfloat16 x, y; };

static __device__ __forceinline__ __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
  __nv_bfloat16 h;
  h.__x = u;
  return h;
}
static __device__ __forceinline__ float __bfloat162float(__nv_bfloat16 h) {
  return __uint_as_float((unsigned int)h.__x << 16);
}
static __device__ __forceinline__ __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h.__x) : "f"(f));
  return h;
}
static __device__ __forceinline__ float2 __bfloat1622float2(__nv_bfloat162 h) {
  return make_float2(__bfloat162float(h.x), __bfloat162float(h.y));
}
static __device__ __forceinline__ __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  __nv_bfloat162 h;
  h.x = __float2bfloat16_rn(a), h.y = __float2bfloat16_rn(b);
  return h;
}

#endif /* LOOM_RTC_CUDA_BF16_H */
