/*
 * cuda_fp16.h for NVRTC - the half type and the conversions loom's device
 * headers use (core/vec8.cuh, core/pointwise.h), so that generated kernels
 * need no CUDA toolkit headers at run time. Layout-compatible with CUDA's
 * __half / __half2 (2 and 4 bytes, the bits in one 16-bit word); the
 * conversions are the PTX cvt instructions (round to nearest even), as CUDA's.
 */
#ifndef LOOM_RTC_CUDA_FP16_H
#define LOOM_RTC_CUDA_FP16_H

struct __align__(2) __half { unsigned short __x; };
struct __align__(4) __half2 { __half x, y; };

static __device__ __forceinline__ __half __ushort_as_half(unsigned short u) {
  __half h;
  h.__x = u;
  return h;
}
static __device__ __forceinline__ float __half2float(__half h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.__x));
  return f;
}
static __device__ __forceinline__ __half __float2half_rn(float f) {
  __half h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.__x) : "f"(f));
  return h;
}
static __device__ __forceinline__ float2 __half22float2(__half2 h) {
  return make_float2(__half2float(h.x), __half2float(h.y));
}
static __device__ __forceinline__ __half2 __floats2half2_rn(float a, float b) {
  __half2 h;
  h.x = __float2half_rn(a), h.y = __float2half_rn(b);
  return h;
}

#endif /* LOOM_RTC_CUDA_FP16_H */
