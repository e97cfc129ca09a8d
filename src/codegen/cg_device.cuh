/*
 * cg_device.cuh - what every generated kernel includes (the root of the
 * headers embedded for NVRTC: codegen/rtc.h): loom's signals with their
 * bounded waits (core/signal.cuh), element access of every dtype
 * (core/vec8.cuh), the dropout mask (core/pointwise.h), the collectives'
 * block sum (ops/common/coll_device.cuh), and the steps every generated
 * kernel is made of (emit.c writes the rest):
 *
 *   loom__cg_arrive     the start: this rank's inputs of the unit are
 *                       readable (each block, after a system fence)
 *   loom__cg_wait       a whole block waits for a signal of a range of
 *                       ranks (one thread per rank; bounded, with its site)
 *   loom__cg_step_end   a step's end: every block counts in, the last one
 *                       of the grid sets the step's ready signal
 *   loom__cg_last_block the end: the last block to finish (it then sets
 *                       done, waits for the peers' done and publishes the
 *                       epoch)
 *   loom__cg_loadv / _storev  a vector body instance's 16 bytes of
 *                       elements (8 of any dtype, 4 of FP32)
 */
#ifndef LOOM_CODEGEN_CG_DEVICE_CUH
#define LOOM_CODEGEN_CG_DEVICE_CUH

#include "codegen/cg_args.h"
#include "core/pointwise.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"
#include "ops/common/coll_device.cuh"

#define LOOM_CG_MIN(a, b) ((a) < (b) ? (a) : (b))

/* Word `w` of the unit's words in rank p's workspace (p: this rank for dc.ws). */
static __device__ __forceinline__ uint32_t *loom__cg_word(const loom_cg_args_t &a, int p, uint32_t w) {
  return (uint32_t *)(a.dc.peer_ws[p] + a.sig_off) + w;
}
static __device__ __forceinline__ uint32_t *loom__cg_own(const loom_cg_args_t &a, uint32_t w) {
  return (uint32_t *)(a.dc.ws + a.sig_off) + w;
}

static __device__ __forceinline__ void loom__cg_arrive(const loom_cg_args_t &a, uint32_t e) {
  if (threadIdx.x == 0) {
    __threadfence_system(); /* what earlier kernels and copies stored into this rank's inputs, first */
    loom__signal_store_release(loom__cg_own(a, LOOM_CG_WORDS0 + 0), e);
  }
}

/* Whole block: waits until signal `slot` of ranks lo .. lo + n - 1 (but `skip`) reached e. 0 when a wait
 * expired (recorded with `site` and the word's index in the workspace): the caller returns. */
static __device__ int loom__cg_wait(const loom_cg_args_t &a, uint32_t slot, uint32_t e, int lo, int n, int skip,
                                    uint32_t site) {
  const uint32_t w = LOOM_CG_WORDS0 + slot, index = (uint32_t)(a.sig_off / 4) + w;
  int good = 1;
  for (int t = (int)threadIdx.x; t < n; t += (int)blockDim.x)
    if (lo + t != skip && good && !loom__signal_wait(&a.dc, loom__cg_word(a, lo + t, w), e, lo + t, index, site))
      good = 0;
  return __syncthreads_and(good);
}

/* Every thread at the end of a step: the block's stores are performed; the last block of the grid to
 * count in at word `counter` sets signal `slot` to e where `set`. */
static __device__ __forceinline__ void loom__cg_step_end(const loom_cg_args_t &a, uint32_t counter, uint32_t slot,
                                                        int set, uint32_t e) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && loom__last_arrival(loom__cg_own(a, counter), gridDim.x) && set)
    loom__signal_store_release(loom__cg_own(a, LOOM_CG_WORDS0 + slot), e);
}

/* Every thread at the end: 1 in thread 0 of the last block to finish (every block's loads and stores are
 * performed before what it does next), 0 elsewhere. */
static __device__ __forceinline__ int loom__cg_last_block(const loom_cg_args_t &a) {
  __threadfence_system();
  __syncthreads();
  return threadIdx.x == 0 && loom__last_arrival(&((loom_dev_epoch_t *)(a.dc.ws + a.sig_off))->blocks_done, gridDim.x);
}

/* One thread: waits until signal `slot` of rank p reached e (bounded); 0 when it expired. */
static __device__ __forceinline__ int loom__cg_wait_one(const loom_cg_args_t &a, uint32_t slot, uint32_t e, int p,
                                                       uint32_t site) {
  const uint32_t w = LOOM_CG_WORDS0 + slot;
  return loom__signal_wait(&a.dc, loom__cg_word(a, p, w), e, p, (uint32_t)(a.sig_off / 4) + w, site);
}

/* N consecutive elements i .. i + N - 1 of a dtype-T buffer as floats (N = 8: core/vec8.cuh's 16-byte vectors,
 * two for FP32; N = 4: one 16-byte vector of FP32), and back; i a multiple of N, the buffer 16-byte aligned
 * (the generated code's names for loom__loadv / loom__storev). */
template <int T, int N>
static __device__ __forceinline__ void loom__cg_loadv(const void *base, int64_t i, float *v) {
  loom__loadv<T, N>(base, i, v);
}
template <int T, int N>
static __device__ __forceinline__ void loom__cg_storev(void *base, int64_t i, const float *v) {
  static_assert(N == 8 || (N == 4 && T == LOOM_FP32), "vectors: 8 of any dtype or 4 of FP32");
  loom__storev<T, N>(base, i, v);
}

/* x rounded to a 16-bit type and back (Cast). */
static __device__ __forceinline__ float loom__cg_round_fp16(float x) { return __half2float(__float2half_rn(x)); }
static __device__ __forceinline__ float loom__cg_round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

#endif /* LOOM_CODEGEN_CG_DEVICE_CUH */
