/*
 * vec8.cuh - element access that every layer's kernels share: 8 consecutive
 * elements of a bf16, fp16 or fp32 buffer as floats, and back (rounded once,
 * round to nearest even), in 16-byte vectors (two for fp32); and single
 * elements for the ragged ends. The GEMM epilogues, the collectives'
 * building blocks, the reduce-scatter tail and the optimizers all use these.
 *
 *   loom__words8<T>(base, i, w)     the raw 4-byte words of elements i .. i+7
 *   loom__unpack8<T>(w, v)          those words as 8 floats
 *   loom__load8<T>(base, i, v)      both: v[k] = base[i + k]
 *   loom__load8_as<T>(base, i, t, v) the same with the dtype t known at run
 *                                   time where T < 0 (else T; branches fold)
 *   loom__load1<T>(base, i)         one element
 *   loom__store8_as(base, i, t, v)  base[i + k] = v[k], dtype t (a constant
 *                                   where the caller has one: branches fold)
 *   loom__store8<T>, loom__store1<T> the same with a compile-time dtype
 *   loom__ld8f / loom__st8f         8 floats of an fp32 array the kernel owns
 *   loom__loadv<T, N>, loom__storev<T, N>  N = 8 (the 8-wide forms) or 4 (one
 *                                   16-byte fp32 vector; stores of 4 16-bit
 *                                   elements too, 8 bytes): loops that take 4
 *                                   fp32 a lane so that a warp's accesses are
 *                                   512 contiguous bytes
 *
 * T and t are loom_dtype_t values; base is the buffer's first element, i an
 * element index (a multiple of 8 for the 8-wide forms, 16-byte aligned).
 * Loads that may see data written by another kernel or another GPU during
 * this kernel's life go through L2 (ld.global.cg), never through L1 or the
 * non-coherent path: every load here but loom__ld8f's does.
 */
#ifndef LOOM_CORE_VEC8_CUH
#define LOOM_CORE_VEC8_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "loom.h"

template <int T>
static __device__ __forceinline__ void loom__words8(const void *base, int64_t i, uint32_t *w) {
  const char *p = (const char *)base + i * (T == LOOM_FP32 ? 4 : 2);
  const uint4 x = __ldcg((const uint4 *)p);
  w[0] = x.x, w[1] = x.y, w[2] = x.z, w[3] = x.w;
  if (T == LOOM_FP32) {
    const uint4 y = __ldcg((const uint4 *)(p + 16));
    w[4] = y.x, w[5] = y.y, w[6] = y.z, w[7] = y.w;
  }
}

/* Little-endian: element 2k of a 16-bit type is word k's low half. */
template <int T>
static __device__ __forceinline__ void loom__unpack8(const uint32_t *w, float *v) {
  if (T == LOOM_FP32) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = __uint_as_float(w[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      float2 f;
      if (T == LOOM_BF16) f = __bfloat1622float2(*(const __nv_bfloat162 *)&w[k]);
      else f = __half22float2(*(const __half2 *)&w[k]);
      v[2 * k] = f.x, v[2 * k + 1] = f.y;
    }
  }
}

template <int T>
static __device__ __forceinline__ void loom__load8(const void *base, int64_t i, float *v) {
  uint32_t w[8];
  loom__words8<T>(base, i, w);
  loom__unpack8<T>(w, v);
}

template <int T>
static __device__ __forceinline__ void loom__load8_as(const void *base, int64_t i, int t, float *v) {
  if (T == LOOM_FP32 || (T < 0 && t == LOOM_FP32)) loom__load8<LOOM_FP32>(base, i, v);
  else if (T == LOOM_BF16 || (T < 0 && t == LOOM_BF16)) loom__load8<LOOM_BF16>(base, i, v);
  else loom__load8<LOOM_FP16>(base, i, v);
}

template <int T>
static __device__ __forceinline__ float loom__load1(const void *base, int64_t i) {
  if (T == LOOM_FP32) return __ldcg((const float *)base + i);
  const unsigned short u = __ldcg((const unsigned short *)base + i);
  if (T == LOOM_BF16) return __bfloat162float(__ushort_as_bfloat16(u));
  return __half2float(__ushort_as_half(u));
}

static __device__ __forceinline__ void loom__store8_as(void *base, int64_t i, int t, const float *v) {
  if (t == LOOM_FP32) {
    float4 *p = (float4 *)((float *)base + i);
    p[0] = make_float4(v[0], v[1], v[2], v[3]);
    p[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (t == LOOM_BF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *(const uint32_t *)&h;
      } else {
        const __half2 h = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *(const uint32_t *)&h;
      }
    }
    *(uint4 *)((uint16_t *)base + i) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

template <int T>
static __device__ __forceinline__ void loom__store8(void *base, int64_t i, const float *v) {
  loom__store8_as(base, i, T, v);
}

template <int T>
static __device__ __forceinline__ void loom__store1(void *base, int64_t i, float v) {
  if (T == LOOM_FP32) ((float *)base)[i] = v;
  else if (T == LOOM_BF16) ((__nv_bfloat16 *)base)[i] = __float2bfloat16_rn(v);
  else ((__half *)base)[i] = __float2half_rn(v);
}

static __device__ __forceinline__ void loom__ld8f(const float *p, float *v) {
  const float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}

static __device__ __forceinline__ void loom__st8f(float *p, const float *v) {
  ((float4 *)p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  ((float4 *)p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/* v[k] = base[i + k], k < N: N = 8 (loom__load8) or 4 (fp32 only: one
 * 16-byte load), through L2. */
template <int T, int N>
static __device__ __forceinline__ void loom__loadv(const void *base, int64_t i, float *v) {
  static_assert(N == 8 || (N == 4 && T == LOOM_FP32), "vector loads: 8 of any dtype or 4 of fp32");
  if (N == 8) {
    loom__load8<T>(base, i, v);
  } else {
    const float4 x = __ldcg((const float4 *)((const float *)base + i));
    v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
  }
}

/* base[i + k] = v[k], k < N: N = 8 (loom__store8) or 4 (16 bytes of fp32,
 * 8 of a 16-bit type). */
template <int T, int N>
static __device__ __forceinline__ void loom__storev(void *base, int64_t i, const float *v) {
  static_assert(N == 8 || N == 4, "vector stores: 8 or 4 elements");
  if (N == 8) {
    loom__store8<T>(base, i, v);
  } else if (T == LOOM_FP32) {
    *(float4 *)((float *)base + i) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    uint32_t w[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (T == LOOM_BF16) {
        const __nv_bfloat162 h = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *(const uint32_t *)&h;
      } else {
        const __half2 h = __floats2half2_rn(v[2 * k], v[2 * k + 1]);
        w[k] = *(const uint32_t *)&h;
      }
    }
    *(uint2 *)((uint16_t *)base + i) = make_uint2(w[0], w[1]);
  }
}

#endif /* LOOM_CORE_VEC8_CUH */
