/*
 * pointwise.h - the pointwise epilogue (loom_epilogue_t in loom.h) as every
 * kernel applies it: one description for the GEMM engine, the fused ops and
 * the collectives.
 *
 *   loom__pointwise_make   host: checks a loom_epilogue_t (each field by name
 *                          and value) and turns it into a loom_pointwise_t,
 *                          the kernel argument (pointwise.c)
 *   loom__pointwise_apply   device: y = epilogue(x) for one fp32 element at
 *                          (row, col); `flags` and `act` are the struct's
 *                          own, or compile-time constants of a specialised
 *                          kernel (the compiler folds the steps away)
 *   loom__philox4x32_10     host and device: the counter-based generator
 *   loom__dropout_keep      host and device: element i's dropout decision, a
 *                          function of (seed, offset, i) alone, so that every
 *                          op, rank split and tile order draws the same mask,
 *                          and so does the CPU reference (src/ref)
 *
 * Mask: element i (= row * cols + col) uses Philox4x32-10 with key
 * {seed lo, seed hi} and counter {q lo, q hi, 0, 0}, q = offset + i / 4; word
 * i % 4 of the output, u; kept iff u >= loom__dropout_threshold(p), the
 * integer floor(p * 2^32) (so P(keep) = 1 - p up to 2^-32).
 *
 * Plain C (host files include it); the device parts are under __CUDACC__.
 */
#ifndef LOOM_CORE_POINTWISE_H
#define LOOM_CORE_POINTWISE_H

#include <math.h>
#include <stdint.h>
#include "loom.h"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define LOOM_PW_HD __host__ __device__ __forceinline__
#else
#define LOOM_PW_HD inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Which steps of the epilogue are on (loom_pointwise_t.flags). */
#define LOOM_PW_SCALE 1u    /* scale != 1 */
#define LOOM_PW_BIAS 2u
#define LOOM_PW_ACT 4u      /* activation != LOOM_ACT_NONE */
#define LOOM_PW_DROPOUT 8u
#define LOOM_PW_RESIDUAL 16u

/* A checked epilogue, as kernels receive it (by value). */
typedef struct loom_pointwise {
  uint32_t flags;          /* LOOM_PW_* */
  int32_t act;             /* loom_activation_t */
  int32_t type;            /* loom_dtype_t of the output, bias and residual */
  float scale;
  float keep_scale;        /* 1 / (1 - dropout_p) */
  uint32_t drop_threshold; /* loom__dropout_threshold(dropout_p) */
  uint64_t seed, offset;
  int64_t cols;            /* row length of the output (residual index = row * cols + col) */
  const void *bias;        /* [cols] */
  const void *residual;    /* [rows, cols] */
} loom_pointwise_t;

/* Checks `epi` (NULL: the identity) for an output of `cols` columns of dtype
 * `out_type` and fills *pw. LOOM_ERR_INVALID_ARGUMENT naming `fn` and the
 * field: struct_size, a non-finite scale, an unknown activation, dropout_p
 * outside [0, 1). Pointers are not dereferenced. */
loom_result_t loom__pointwise_make(const char *fn, const loom_epilogue_t *epi, loom_dtype_t out_type, int64_t cols,
                                   loom_pointwise_t *pw);

/* ---- pure functions, host and device ------------------------------------ */

static LOOM_PW_HD uint32_t loom__dropout_threshold(float p) {
  const double t = (double)p * 4294967296.0;
  return t <= 0.0 ? 0u : t >= 4294967295.0 ? 0xffffffffu : (uint32_t)t;
}

/* Philox4x32-10 (Salmon et al., SC'11): out = the 4 words for counter ctr
 * and key key. */
static LOOM_PW_HD void loom__philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3], k0 = key[0], k1 = key[1];
  for (int r = 0; r < 10; ++r) {
    if (r > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
    const uint64_t p0 = (uint64_t)0xD2511F53u * c0, p1 = (uint64_t)0xCD9E8D57u * c2;
    const uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
    const uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

/* 1 if element i is kept by dropout with this threshold, seed and offset. */
static LOOM_PW_HD int loom__dropout_keep(uint64_t seed, uint64_t offset, uint64_t i, uint32_t threshold) {
  const uint64_t q = offset + (i >> 2);
  const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), 0u, 0u};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t w[4];
  loom__philox4x32_10(ctr, key, w);
  return w[i & 3u] >= threshold;
}

/* The dropout decisions of elements i4 .. i4 + 3 (i4 a multiple of 4) in
 * one Philox call: keep[j] == loom__dropout_keep(seed, offset, i4 + j,
 * threshold) (the 4 words of one counter are 4 consecutive elements'). */
static LOOM_PW_HD void loom__dropout_keep4(uint64_t seed, uint64_t offset, uint64_t i4, uint32_t threshold, int keep[4]) {
  const uint64_t q = offset + (i4 >> 2);
  const uint32_t ctr[4] = {(uint32_t)q, (uint32_t)(q >> 32), 0u, 0u};
  const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
  uint32_t w[4];
  loom__philox4x32_10(ctr, key, w);
  for (int j = 0; j < 4; ++j) keep[j] = w[j] >= threshold;
}

/* The activation in fp32. */
static LOOM_PW_HD float loom__activation_f32(int act, float v) {
  switch (act) {
    case LOOM_ACT_RELU: return v > 0.f ? v : 0.f;
    case LOOM_ACT_GELU_TANH: {
      const float inner = 0.7978845608028654f * (v + 0.044715f * v * v * v);
      return 0.5f * v * (1.f + tanhf(inner));
    }
    case LOOM_ACT_GELU_ERF: return 0.5f * v * (1.f + erff(v * 0.7071067811865476f));
    default: return v;
  }
}

#ifdef __cplusplus
}
#endif

/* ---- device ------------------------------------------------------------- */
#ifdef __CUDACC__

/* Element i of a buffer of the output dtype t, as float. */
static __device__ __forceinline__ float loom__pw_load(const void *base, int64_t i, int t) {
  if (t == LOOM_FP32) return ((const float *)base)[i];
  if (t == LOOM_BF16) return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
  return __half2float(((const __half *)base)[i]);
}

/* y = epilogue(x) at (row, col). Pass pw.flags / pw.act, or compile-time
 * constants where a kernel is specialised for one epilogue. */
/* y = epilogue(x) for element i (= row * cols + col) whose dropout decision
 * is `keep` (loom__dropout_keep / loom__dropout_keep4; ignored without
 * dropout): callers that handle 4 aligned elements draw one Philox for them. */
/* The epilogue's arithmetic, with the element's bias and residual values
 * already loaded (each read only where its flag is set): callers that load
 * 8 of them with one vector access use it directly. */
static __device__ __forceinline__ float loom__pointwise_apply_vals(const loom_pointwise_t &pw, uint32_t flags, int act,
                                                                  float x, float bias, int keep, float residual) {
  float v = x;
  if (flags & LOOM_PW_SCALE) v *= pw.scale;
  if (flags & LOOM_PW_BIAS) v += bias;
  if (flags & LOOM_PW_ACT) v = loom__activation_f32(act, v);
  if (flags & LOOM_PW_DROPOUT) v = keep ? v * pw.keep_scale : 0.f;
  if (flags & LOOM_PW_RESIDUAL) v += residual;
  return v;
}

static __device__ __forceinline__ float loom__pointwise_apply_kept(const loom_pointwise_t &pw, uint32_t flags, int act,
                                                                  float x, int64_t col, uint64_t i, int keep) {
  const float b = (flags & LOOM_PW_BIAS) ? loom__pw_load(pw.bias, col, pw.type) : 0.f;
  const float r = (flags & LOOM_PW_RESIDUAL) ? loom__pw_load(pw.residual, (int64_t)i, pw.type) : 0.f;
  return loom__pointwise_apply_vals(pw, flags, act, x, b, keep, r);
}

static __device__ __forceinline__ float loom__pointwise_apply(const loom_pointwise_t &pw, uint32_t flags, int act,
                                                             float x, int64_t row, int64_t col) {
  const uint64_t i = (uint64_t)row * (uint64_t)pw.cols + (uint64_t)col;
  const int keep = (flags & LOOM_PW_DROPOUT) ? loom__dropout_keep(pw.seed, pw.offset, i, pw.drop_threshold) : 1;
  return loom__pointwise_apply_kept(pw, flags, act, x, col, i, keep);
}

#endif /* __CUDACC__ */
#endif /* LOOM_CORE_POINTWISE_H */
