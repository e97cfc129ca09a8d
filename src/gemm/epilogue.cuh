/*
 * epilogue.cuh - the output element helpers both GEMM kernels use when they
 * store C straight from registers (gemm_sm80.cuh; gemm_sm90.cuh's hooked
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
#include "core/pointwise.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"

/* Stores (or, reduce != 0, atomically adds) outputs v0, v1 at element
 * offsets off, off + 1 of a C buffer of dtype ct (LOOM_FP32, LOOM_BF16 or
 * LOOM_FP16); off is even, so the pair is 4/8-byte aligned. */
static __device__ __forceinline__ void loom__gemm_store2(void *base, int64_t off, int ct, float v0, float v1,
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

/* The hooks' activation ACT (loom_activation_t; 0: none) of a pair of
 * outputs, after the bias. A compile-time constant: the epilogues are
 * unrolled over every accumulator, and a runtime activation there put the
 * inlined tanh/erf bodies of every element into the instruction stream of
 * every epilogue (the hooked sm90 kernel grew from 2,000 to 40,000
 * instructions and its epilogue's executed instructions were spread over
 * 260 KB of code). The sm80 kernel dispatches on the runtime value once per
 * tile (LOOM_GEMM_ACT_DISPATCH) around a pass that applies the bias and the
 * activation to the accumulators in place, then runs its one store loop
 * (loom__sm80_bias_act); the hooked sm90 kernels are instantiated per
 * activation (gemm_sm90.cuh; the same pass there cost the hooked kernels
 * 2.6 %: docs/perf/gemm.md). */
template <int ACT>
static __device__ __forceinline__ void loom__gemm_act2(float *v0, float *v1) {
  if (ACT != LOOM_ACT_NONE) {
    *v0 = loom__activation_f32(ACT, *v0);
    *v1 = loom__activation_f32(ACT, *v1);
  }
}

/* Runs the statement(s) given with the constant A bound to the runtime activation `act`
 * (LOOM_ACT_NONE for anything unknown: plans validate it). */
#define LOOM_GEMM_ACT_DISPATCH(act, ...)                           \
  do {                                                             \
    switch (act) {                                                 \
      case LOOM_ACT_RELU: {                                        \
        constexpr int A = LOOM_ACT_RELU;                           \
        __VA_ARGS__;                                               \
      } break;                                                     \
      case LOOM_ACT_GELU_TANH: {                                   \
        constexpr int A = LOOM_ACT_GELU_TANH;                      \
        __VA_ARGS__;                                               \
      } break;                                                     \
      case LOOM_ACT_GELU_ERF: {                                    \
        constexpr int A = LOOM_ACT_GELU_ERF;                       \
        __VA_ARGS__;                                               \
      } break;                                                     \
      default: {                                                   \
        constexpr int A = LOOM_ACT_NONE;                           \
        __VA_ARGS__;                                               \
      } break;                                                     \
    }                                                              \
  } while (0)

/* Element i of a C-typed buffer (C or bias) as float. */
static __device__ __forceinline__ float loom__gemm_load_c(const void *base, int64_t i, int ct) {
  if (ct == LOOM_FP32) return ((const float *)base)[i];
  if (ct == LOOM_BF16) return __bfloat162float(((const __nv_bfloat16 *)base)[i]);
  return __half2float(((const __half *)base)[i]);
}

/* The bias of columns col, col + 1 (0 without bias). */
static __device__ __forceinline__ void loom__gemm_bias2(const void *bias, int64_t col, int ct, float *b0, float *b1) {
  *b0 = 0.f, *b1 = 0.f;
  if (bias) {
    *b0 = loom__gemm_load_c(bias, col, ct);
    *b1 = loom__gemm_load_c(bias, col + 1, ct);
  }
}

/* Where output row `row` of an m-row C goes: C itself, or with HOOKS and a
 * row routing table, row_dst[row / rows_per_dst] (rows_per_dst 0: all rows
 * in entry 0), moved by parity_off bytes (loom__gemm_parity_off); *r is the
 * row within that buffer. */
template <bool HOOKS>
static __device__ __forceinline__ void *loom_gemm_row_dst(void *c, const loom_gemm_hooks_t &h, int32_t m, int row,
                                                          int64_t *r, int64_t parity_off) {
  *r = row;
  if (!HOOKS || !h.row_dst) return c;
  const int64_t rp = h.rows_per_dst > 0 ? h.rows_per_dst : (int64_t)m;
  *r = row % rp;
  return (char *)h.row_dst[row / rp] + parity_off;
}

/* The epoch base of a hooked launch: *epoch_word (0 without one). */
static __device__ __forceinline__ uint32_t loom__gemm_hook_epoch(const loom_gemm_hooks_t &h) {
  return h.epoch_word ? *(const volatile uint32_t *)h.epoch_word : 0u;
}

/* The prologue wait of tile row tm (one thread): every signal of the rows
 * [tm bm, tm bm + bm) reaches the wait epoch. 0 when a wait expired (or
 * another wait of the comm did): the caller stores nothing and signals
 * nothing. */
static __device__ __forceinline__ int loom__gemm_hook_wait(const loom_gemm_hooks_t &h, int32_t m, int tm, int bm) {
  const uint32_t want = loom__gemm_hook_epoch(h) + h.wait_epoch;
  int64_t r1 = (int64_t)tm * bm + bm;
  if (r1 > m) r1 = m;
  for (int64_t row = (int64_t)tm * bm, end = 0; row < r1; row = end) {
    const int32_t j = loom__tile_wait_chunk(row, m, h.wait_rows_per_shard, h.wait_rows_per_signal, &end);
    if (!loom__signal_wait(&h.comm, h.wait_signals + j, want, -1, (uint32_t)j, LOOM_SITE_GEMM_PROLOGUE)) return 0;
  }
  return 1;
}

/* The tile's release signal (one thread, after every thread's stores of
 * tile t in tile row tm are fenced system-wide): tile_signal[t], or
 * dst_signal[d][t] for every destination d of the tile's rows. */
static __device__ __forceinline__ void loom__gemm_hook_signal(const loom_gemm_hooks_t &h, int32_t m, int tm, int bm,
                                                             int32_t t) {
  const uint32_t v = loom__gemm_hook_epoch(h) + h.signal_epoch;
  if (h.dst_signal) {
    int32_t d0, d1;
    loom__tile_dst_range(tm, bm, m, h.rows_per_dst, &d0, &d1);
    for (int32_t d = d0; d <= d1; ++d) loom__signal_store_release(h.dst_signal[d] + t, v);
  } else if (h.tile_signal) {
    loom__signal_store_release(h.tile_signal + t, v);
  }
}

/* Byte offset of this call's destination buffers (dst_parity_bytes). */
template <bool HOOKS>
static __device__ __forceinline__ int64_t loom__gemm_parity_off(const loom_gemm_hooks_t &h) {
  if (!HOOKS || !h.dst_parity_bytes) return 0;
  return (int64_t)((loom__gemm_hook_epoch(h) + h.signal_epoch) & 1u) * h.dst_parity_bytes;
}

/* The dtype stores of row_dst rows take: fp32 partials when dst_fp32. */
template <bool HOOKS>
static __device__ __forceinline__ int loom__gemm_store_type(const loom_gemm_hooks_t &h, int ct) {
  return HOOKS && h.row_dst && h.dst_fp32 ? (int)LOOM_FP32 : ct;
}

#endif /* LOOM_GEMM_EPILOGUE_CUH */
