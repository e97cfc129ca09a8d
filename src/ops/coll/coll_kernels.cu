/*
 * coll_kernels.cu - the kernels of loom's collectives: loom__coll_kernel
 * (loom_allreduce one-shot and two-shot, loom_reduce_scatter,
 * loom_all_gather; composed of the building blocks of coll_device.cuh in the
 * steps that coll.h lists: arrival, staging free, reduction with the
 * epilogue, gather, done, hand-back), loom__coll_ll_kernel (loom_allreduce
 * LL: push with flags, reduce as the lines arrive) and loom__coll_push_kernel
 * (loom_allreduce PUSH: store chunks into the peers, a flag each, reduce
 * from local memory), loom__coll_ll_slices_kernel (loom_reduce_scatter and
 * loom_all_gather LL: LL's lines for the slices). One kernel per call,
 * instantiated for every (input, output) dtype pair; reached through
 * loom__coll_launch. Any architecture >= sm_80.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/error.h"
#include "core/launch_dependent.cuh"
#include "ops/coll/coll.h"
#include "ops/common/coll_device.cuh"
#include "ops/coll/coll_schedule.h"

/* Programmatic dependent launch (Hopper: the sm_90a code; coll.c launches
 * so nowhere else, since the compute_80 PTX other GPUs run has no wait): a
 * call launched with it may be
 * scheduled while the stream's previous kernel still runs, so that its
 * launch hides under that kernel's tail; everything a call touches (the
 * plan's epoch, the buffers, the peers) waits here, first, for that
 * kernel's completion and its memory. Then the stream's next kernel may be
 * scheduled at once (its own wait holds it until this one completes).
 * Without the launch attribute both are no-ops. */
static __device__ __forceinline__ void loom__coll_pdl_enter(void) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The chunks of the reduction step: the whole vector (one-shot) or this
 * rank's slice; block b takes items b, b + G, ... */
static __device__ __forceinline__ void loom__coll_reduce_span(const loom_coll_args_t &a, int64_t mb, int64_t ml,
                                                             int64_t *rb, int64_t *rl) {
  const int one = a.kind == LOOM__CK_ONE_SHOT;
  *rb = one ? 0 : mb;
  *rl = one ? a.count : ml;
}

template <int TI, int TO>
__global__ void __launch_bounds__(LOOM_COLL_THREADS) loom__coll_kernel(const __grid_constant__ loom_coll_args_t a) {
  loom__coll_pdl_enter();
  extern __shared__ float loom_coll_xs[]; /* a row in fp32 (row-wise epilogue) */
  __shared__ float red[33];
  const loom_dev_comm_t &dc = a.dc;
  const int W = dc.size, r = dc.rank;
  loom_dev_epoch_t *ep = (loom_dev_epoch_t *)(dc.ws + a.epoch_off);
  const uint32_t e = loom__epoch_begin(ep);
  uint32_t *own = (uint32_t *)(dc.ws + a.sig_off);

  /* 1. this rank's input is readable (the caller's writes to it are
   *    performed first); every block says so, so no block depends on
   *    another being scheduled */
  if (threadIdx.x == 0) {
    __threadfence_system();
    loom__signal_store_release(own + LOOM_COLL_SIG_ARRIVED, e);
  }
  int64_t mb, ml;
  loom__coll_slice(a.count, W, r, a.unit, &mb, &ml);

  /* 2. reduction with the epilogue, once every rank's call has started (its
   *    input is ready, and its previous call, the last reader of this rank's
   *    staging, has completed) */
  if (a.kind != LOOM__CK_AG) {
    if (!loom__coll_wait_all(dc, a.sig_off, LOOM_COLL_SIG_ARRIVED, e, LOOM_SITE_COLL_ARRIVED)) return;
    int64_t rb, rl;
    loom__coll_reduce_span(a, mb, ml, &rb, &rl);
    char *d0 = a.out, *d1 = NULL;
    int64_t o0 = 0, o1 = 0;
    /* staging only where peers read it (two-shot) or read `in` (one-shot in
     * place); at W = 1 the result goes straight to out, in place or not */
    if (a.kind == LOOM__CK_ONE_SHOT && a.in_place && W > 1) d0 = a.stg_own;
    if (a.kind == LOOM__CK_TWO_SHOT && W > 1) d1 = a.stg_own, o1 = mb;
    if (a.kind == LOOM__CK_RS && !a.in_place) o0 = mb; /* in place: a.out is `in` itself */
    const int64_t nch = loom__coll_chunks(rl, a.chunk);
    for (int64_t q = blockIdx.x; q < nch; q += gridDim.x) {
      const int64_t j = a.kind == LOOM__CK_ONE_SHOT ? loom__coll_one_shot_chunk(r, W, nch, q) : q;
      int64_t cb, cl;
      loom__coll_chunk(rb, rl, a.chunk, j, &cb, &cl);
      if (a.norm != LOOM_NORM_NONE) {
        for (int64_t row = cb / a.cols; row < (cb + cl) / a.cols; ++row)
          loom__coll_reduce_row<TI, TO>(a.src, W, row, a.cols, a.pw, a.norm, a.eps, a.norm_w, a.norm_b, loom_coll_xs,
                                       red, d0, o0, d1, o1);
      } else {
        loom__coll_reduce_range<TI, TO>(a.src, W, cb, cl, d0, o0, d1, o1, a.pw);
      }
      if (a.kind == LOOM__CK_TWO_SHOT) loom__coll_signal_own(dc, a.sig_off, LOOM_COLL_SIG_REDUCED + (uint32_t)j, e);
    }
  }

  /* 3. gather: the peers' slices, peer by peer in rank-shifted order */
  if (a.kind == LOOM__CK_TWO_SHOT || a.kind == LOOM__CK_AG) {
    const int steps = a.kind == LOOM__CK_AG ? W : W - 1;
    const int64_t items = (int64_t)steps * a.nch;
    for (int64_t t = blockIdx.x; t < items; t += gridDim.x) {
      int32_t i;
      int64_t j;
      loom__coll_gather_item(t, a.nch, &i, &j);
      const int q = loom__coll_peer_at(r, W, i);
      int64_t qb, ql, cb, cl;
      loom__coll_slice(a.count, W, q, a.unit, &qb, &ql);
      loom__coll_chunk(qb, ql, a.chunk, j, &cb, &cl);
      if (cl == 0) continue;
      if (a.kind == LOOM__CK_AG) {
        if (q == r) {
          if (!a.in_place) loom__coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.src[r], qb, a.out, 0, cb, cl);
          continue;
        }
        if (!loom__coll_wait_one(dc, q, a.sig_off, LOOM_COLL_SIG_ARRIVED, e, LOOM_SITE_COLL_ARRIVED)) return;
        loom__coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.src[q], qb, a.out, 0, cb, cl);
      } else {
        if (!loom__coll_wait_one(dc, q, a.sig_off, LOOM_COLL_SIG_REDUCED + (uint32_t)j, e, LOOM_SITE_COLL_REDUCED))
          return;
        loom__coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.stg[q], qb, a.out, 0, cb, cl);
      }
    }
  }

  /* 4. the last block: this rank is done reading every peer's buffers (and,
   *    one-shot in place, its staging stores are performed) */
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (loom__last_arrival(&ep->blocks_done, gridDim.x)) {
      loom__signal_store_release(own + LOOM_COLL_SIG_DONE, e);
      *(volatile uint32_t *)&ep->epoch = e;
    }
  }

  /* 5. peers read this rank's `in` until they are done: the call completes after that */
  if (a.kind != LOOM__CK_TWO_SHOT) {
    if (!loom__coll_wait_all(dc, a.sig_off, LOOM_COLL_SIG_DONE, e, LOOM_SITE_COLL_DONE)) return;
    if (a.kind == LOOM__CK_ONE_SHOT && a.in_place && W > 1) {
      const int64_t nch = loom__coll_chunks(a.count, a.chunk);
      for (int64_t q = blockIdx.x; q < nch; q += gridDim.x) {
        int64_t cb, cl;
        loom__coll_chunk(0, a.count, a.chunk, loom__coll_one_shot_chunk(r, W, nch, q), &cb, &cl);
        /* this block's own stores of step 2: visible to it without a fence */
        loom__coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.stg_own, 0, a.out, 0, cb, cl);
      }
    }
  }
}

/* The calls block b of the LL, slices' LL and PUSH kernels has completed:
 * a word per block of the plan's grid (signals, LOOM_COLL_SIG_BLOCKS + b).
 * A block reads it when it starts (its call's epoch is one more) and stores
 * the epoch when it ends with every wait met. No block counts the others in
 * (no atomic, no fence, no last block on the critical path): the grid is the
 * plan's, the same at every call, so the words advance together, and the
 * next call on the stream starts after this kernel has ended (as a
 * programmatic dependent, in griddepcontrol.wait). After a wait expired the
 * comm refuses every later call, so a word left behind is never used. */
static __device__ __forceinline__ uint32_t *loom__coll_block_epoch(const loom_coll_args_t &a) {
  return (uint32_t *)(a.dc.ws + a.sig_off) + LOOM_COLL_SIG_BLOCKS + blockIdx.x;
}

static __device__ __forceinline__ uint32_t loom__coll_block_begin(const loom_coll_args_t &a) {
  return *(const volatile uint32_t *)loom__coll_block_epoch(a) + 1u;
}

static __device__ __forceinline__ void loom__coll_block_end(const loom_coll_args_t &a, uint32_t e, int good) {
  if (__syncthreads_and(good) && threadIdx.x == 0) *(volatile uint32_t *)loom__coll_block_epoch(a) = e;
}

/* ---- LL: push with flags, reduce what arrives (coll_schedule.h) ---------- */

/* The 2 x size words of group g (elements 8g .. 8g+7) of `in` (count
 * elements of TI; the missing elements of a short last group are zeros). */
template <int TI>
static __device__ __forceinline__ void loom__ll_group_words(const char *in, int64_t count, int64_t g, uint32_t *w) {
  const int64_t i0 = g * LOOM_COLL_VEC;
  if (i0 + LOOM_COLL_VEC <= count) {
    loom__words8<TI>(in, i0, w);
    return;
  }
  /* the short last group: every index a constant (an index known only at
   * run time would put w in local memory for the whole kernel) */
#pragma unroll
  for (int k = 0; k < 8; ++k) w[k] = 0u;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (i0 + k >= count) break;
    if (TI == LOOM_FP32) w[k] = __ldcg((const unsigned int *)in + i0 + k);
    else w[k >> 1] |= (uint32_t)__ldcg((const unsigned short *)in + i0 + k) << (16 * (k & 1));
  }
}

/* Words w of group g into peer q's slot of this call's parity (this rank
 * its sender). */
template <int TI>
static __device__ __forceinline__ void loom__ll_put(const loom_coll_args_t &a, int q, int64_t g, int64_t slot_lines,
                                                   uint32_t e, const uint32_t *w) {
  constexpr int NL = TI == LOOM_FP32 ? 8 : 4; /* loom__coll_ll_group_lines */
  const int W = a.dc.size;
  uint64_t *d = (uint64_t *)a.stg[q] + loom__coll_ll_line0(e, loom__coll_push_slot(a.dc.rank, q, W), W, slot_lines);
#pragma unroll
  for (int k = 0; k < NL; k += 2) loom__ll_store2(d + loom__coll_ll_line(g, k, NL), w[k], w[k + 1], e);
}

/* Sender s's words of group g, from this rank's buffer once its lines carry
 * the epoch. 0 if a wait expired. */
template <int TI>
static __device__ __forceinline__ int loom__ll_get(const loom_coll_args_t &a, int s, int64_t g, int64_t slot_lines,
                                                  uint32_t e, uint32_t *w) {
  constexpr int NL = TI == LOOM_FP32 ? 8 : 4;
  const int W = a.dc.size;
  const uint64_t *l =
      (const uint64_t *)a.stg_own + loom__coll_ll_line0(e, loom__coll_push_slot(s, a.dc.rank, W), W, slot_lines);
#pragma unroll
  for (int k = 0; k < NL; k += 2)
    if (!loom__ll_wait2(a.dc, l + loom__coll_ll_line(g, k, NL), e, w + k, s, (uint32_t)(g * NL + k), LOOM_SITE_COLL_LL))
      return 0;
  return 1;
}

/* acc[0..7] = the sum over ranks s = 0 .. W-1 (in that order, fp32) of
 * group g of a vector of n elements: this rank's from `own` (its part of
 * its input), the peers' from their lines. 0 if a wait expired. */
template <int TI>
static __device__ __forceinline__ int loom__ll_sum_group(const loom_coll_args_t &a, const char *own, int64_t n,
                                                        int64_t g, int64_t slot_lines, uint32_t e, float *acc) {
  const int W = a.dc.size, r = a.dc.rank;
  uint32_t mine[8]; /* loaded before any wait (the sum still runs in rank order) */
  loom__ll_group_words<TI>(own, n, g, mine);
#pragma unroll
  for (int k = 0; k < 8; ++k) acc[k] = 0.f;
  for (int s = 0; s < W; ++s) {
    uint32_t w[8];
    if (s == r) {
#pragma unroll
      for (int k = 0; k < 8; ++k) w[k] = mine[k];
    } else if (!loom__ll_get<TI>(a, s, g, slot_lines, e, w)) {
      return 0;
    }
    float x[8];
    loom__unpack8<TI>(w, x);
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] += x[k];
  }
  return 1;
}

/* Group g of this rank's input, pushed to every peer's slot (peers in
 * rank-shifted order, so the ranks do not all write one peer first). */
template <int TI>
static __device__ __forceinline__ void loom__ll_push_group(const loom_coll_args_t &a, int64_t g, int64_t slot_lines,
                                                          uint32_t e) {
  const int W = a.dc.size, r = a.dc.rank;
  uint32_t w[8];
  loom__ll_group_words<TI>(a.src[r], a.count, g, w);
  for (int i = 1; i < W; ++i) loom__ll_put<TI>(a, (r + i) % W, g, slot_lines, e, w);
}

/* The epilogue's inputs of the group at element i0 when it is whole (i0 + 8
 * <= end), loaded before its lines are awaited; loom__ll_store_group applies
 * them. */
template <int TO>
static __device__ __forceinline__ void loom__ll_pre_group(const loom_coll_args_t &a, int64_t i0, int64_t end,
                                                         loom_coll_pw8_t *p) {
  if (a.pw.flags && i0 + LOOM_COLL_VEC <= end) loom__coll_pw8_load<TO>(a.pw, i0, p);
}

/* The elements i0 .. min(i0 + 8, end) - 1 (vector indices: the epilogue's
 * element i) of acc, with the epilogue (a whole group's inputs from p, by
 * loom__ll_pre_group), stored at out[i - o]. */
template <int TO>
static __device__ __forceinline__ void loom__ll_store_group(const loom_coll_args_t &a, int64_t i0, int64_t end,
                                                           int64_t o, float *acc, const loom_coll_pw8_t &p) {
  const loom_pointwise_t &pw = a.pw;
  if (i0 + LOOM_COLL_VEC <= end) {
    if (pw.flags) loom__coll_pw8_apply<TO>(pw, i0, p, acc);
    loom__store8<TO>(a.out, i0 - o, acc);
    return;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) { /* the short last group (constant indices: acc stays in registers) */
    const int64_t i = i0 + k;
    if (i >= end) break;
    float v = acc[k];
    if (pw.flags) {
      const int64_t row = i / pw.cols;
      v = loom__pointwise_apply(pw, pw.flags, pw.act, v, row, i - row * pw.cols);
    }
    loom__store1<TO>(a.out, i - o, v);
  }
}

/* The raw words w of elements i0 .. min(i0 + 8, end) - 1 of a vector of T
 * stored at base[i] (AllGather: bits as they came). */
template <int T>
static __device__ __forceinline__ void loom__ll_store_words(char *base, int64_t i0, int64_t end, const uint32_t *w) {
  if (i0 + LOOM_COLL_VEC <= end) {
    uint4 *d = (uint4 *)(base + i0 * (T == LOOM_FP32 ? 4 : 2));
    d[0] = make_uint4(w[0], w[1], w[2], w[3]);
    if (T == LOOM_FP32) d[1] = make_uint4(w[4], w[5], w[6], w[7]);
    return;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) { /* the short last group (constant indices) */
    const int64_t i = i0 + k;
    if (i >= end) break;
    if (T == LOOM_FP32) ((uint32_t *)base)[i] = w[k];
    else ((unsigned short *)base)[i] = (unsigned short)(w[k >> 1] >> (16 * (k & 1)));
  }
}

/* AllReduce LL with a row-wise norm, row `row` whose groups are at most
 * LOOM_COLL_LL_ROW_GROUPS per thread: the row stays in registers, and every
 * load that does not wait for a peer (this rank's input, the epilogue's
 * inputs, the norm's weights; not LayerNorm's bias, to stay within the
 * registers) is issued before the row's lines are awaited. Whole block; 0
 * if a wait expired (nothing stored then). */
template <int TI, int TO>
static __device__ int loom__ll_norm_row_regs(const loom_coll_args_t &a, int64_t row, int64_t slot_lines, uint32_t e,
                                             float *red) {
  constexpr int NG = LOOM_COLL_LL_ROW_GROUPS;
  const loom_pointwise_t &pw = a.pw;
  const int64_t gpr = a.cols / LOOM_COLL_VEC, b = row * a.cols;
  float x[NG][8], w[NG][8];
  loom_coll_pw8_t p[NG];
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const int64_t v = threadIdx.x + (int64_t)j * blockDim.x;
    if (v >= gpr) continue;
    if (pw.flags) loom__coll_pw8_load_at<TO>(pw, b + v * 8, v * 8, &p[j]); /* the row starts at column 0 */
    if (((uintptr_t)a.norm_w & 15u) == 0) { /* one 16-byte load (measured: 0.08 us less than eight, one row) */
      loom__load8<TO>(a.norm_w, v * 8, w[j]);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) w[j][k] = loom__pw_load(a.norm_w, v * 8 + k, TO);
    }
  }
  int good = 1;
  float s1 = 0.f;
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const int64_t v = threadIdx.x + (int64_t)j * blockDim.x;
    if (v >= gpr || !good) continue;
    good = loom__ll_sum_group<TI>(a, a.src[a.dc.rank], a.count, row * gpr + v, slot_lines, e, x[j]);
    if (good && pw.flags) loom__coll_pw8_apply<TO>(pw, b + v * 8, p[j], x[j]);
#pragma unroll
    for (int k = 0; k < 8; ++k) s1 += a.norm == LOOM_NORM_RMS ? x[j][k] * x[j][k] : x[j][k];
  }
  if (__syncthreads_or(!good)) return 0;
  const float inv = 1.f / (float)a.cols;
  float mean = 0.f, rstd;
  if (a.norm == LOOM_NORM_RMS) {
    rstd = rsqrtf(loom__coll_block_sum(s1, red) * inv + a.eps);
  } else {
    mean = loom__coll_block_sum(s1, red) * inv;
    float s2 = 0.f;
#pragma unroll
    for (int j = 0; j < NG; ++j)
      if (threadIdx.x + (int64_t)j * blockDim.x < gpr)
#pragma unroll
        for (int k = 0; k < 8; ++k) s2 += (x[j][k] - mean) * (x[j][k] - mean);
    rstd = rsqrtf(loom__coll_block_sum(s2, red) * inv + a.eps);
  }
#pragma unroll
  for (int j = 0; j < NG; ++j) {
    const int64_t v = threadIdx.x + (int64_t)j * blockDim.x;
    if (v >= gpr) continue;
    float y[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      y[k] = (x[j][k] - mean) * rstd * w[j][k];
      if (a.norm_b) y[k] += loom__pw_load(a.norm_b, v * 8 + k, TO); /* LayerNorm's bias: not held across the wait */
    }
    loom__store8<TO>(a.out, b + v * 8, y);
  }
  return 1;
}

/* The same for longer rows: the row in fp32 in shared memory (xs[cols]),
 * then loom__coll_norm_row. Whole block; 0 if a wait expired. */
template <int TI, int TO>
static __device__ int loom__ll_norm_row_smem(const loom_coll_args_t &a, int64_t row, int64_t slot_lines, uint32_t e,
                                             float *red, float *xs) {
  const loom_pointwise_t &pw = a.pw;
  const int64_t gpr = a.cols / LOOM_COLL_VEC;
  float s1 = 0.f;
  int good = 1;
  for (int64_t v = threadIdx.x; good && v < gpr; v += blockDim.x) {
    float acc[8];
    loom_coll_pw8_t p;
    if (pw.flags) loom__coll_pw8_load<TO>(pw, row * a.cols + v * 8, &p);
    good = loom__ll_sum_group<TI>(a, a.src[a.dc.rank], a.count, row * gpr + v, slot_lines, e, acc);
    if (!good) break;
    if (pw.flags) loom__coll_pw8_apply<TO>(pw, row * a.cols + v * 8, p, acc);
#pragma unroll
    for (int k = 0; k < 8; ++k) xs[v * 8 + k] = acc[k], s1 += a.norm == LOOM_NORM_RMS ? acc[k] * acc[k] : acc[k];
  }
  if (__syncthreads_or(!good)) return 0;
  loom__coll_norm_row<TO>(xs, s1, row * a.cols, a.cols, a.norm, a.eps, a.norm_w, a.norm_b, red, 1, a.out, 0, NULL, 0);
  return 1;
}

/* AllReduce LL (NORM: a.norm != LOOM_NORM_NONE, a kernel of its own: each
 * kernel holds only its path's code, which is fetched anew on the SMs of
 * every call): every thread pushes its groups (flat: group g of thread
 * b x blockDim + t, strided by the grid; rows: block b's rows), then reduces
 * them as the peers' lines arrive and applies the epilogue (rows: in shared
 * memory, then the norm). Nothing waits on a peer except the lines
 * themselves; the plan's epoch advances when the last block is done. */
template <int TI, int TO, bool NORM>
__global__ void __launch_bounds__(LOOM_COLL_THREADS) loom__coll_ll_kernel(const __grid_constant__ loom_coll_args_t a) {
  loom__coll_pdl_enter();
  extern __shared__ float loom_coll_xs[];
  __shared__ float red[33];
  const int W = a.dc.size;
  const uint32_t e = loom__coll_block_begin(a);
  const int64_t groups = loom__ceil_div(a.count, LOOM_COLL_VEC);
  const int64_t slot_lines = loom__coll_ll_slot_lines(a.count, TI == LOOM_FP32 ? 4 : 2);
  int good = 1;
  if (!NORM) {
    const int64_t g0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    if (W > 1)
      for (int64_t g = g0; g < groups; g += step) loom__ll_push_group<TI>(a, g, slot_lines, e);
    for (int64_t g = g0; g < groups; g += step) {
      float acc[8];
      loom_coll_pw8_t p;
      loom__ll_pre_group<TO>(a, g * LOOM_COLL_VEC, a.count, &p);
      if (!loom__ll_sum_group<TI>(a, a.src[a.dc.rank], a.count, g, slot_lines, e, acc)) {
        good = 0;
        break;
      }
      loom__ll_store_group<TO>(a, g * LOOM_COLL_VEC, a.count, 0, acc, p);
    }
  } else {
    /* rows of cols, a multiple of 8: a row's groups are its own */
    const int64_t rows = a.count / a.cols, gpr = a.cols / LOOM_COLL_VEC;
    if (W > 1)
      for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
        for (int64_t v = threadIdx.x; v < gpr; v += blockDim.x) loom__ll_push_group<TI>(a, row * gpr + v, slot_lines, e);
    const int in_regs = gpr <= LOOM_COLL_LL_ROW_GROUPS * (int64_t)blockDim.x;
    for (int64_t row = blockIdx.x; good && row < rows; row += gridDim.x)
      good = in_regs ? loom__ll_norm_row_regs<TI, TO>(a, row, slot_lines, e, red)
                     : loom__ll_norm_row_smem<TI, TO>(a, row, slot_lines, e, red, loom_coll_xs);
  }
  loom__coll_block_end(a, e, good); /* the epoch advances only where every wait was met */
}

/* ---- the slices' LL: ReduceScatter and AllGather (coll_schedule.h) ------- */

/* ReduceScatter LL, after the pushes: this thread's groups of the own slice
 * [mb, mb + ml), each summed over the senders as their lines arrive, with
 * the epilogue, stored at out[i - o] (in place: out is `in`, o = 0). 0 if a
 * wait expired. */
template <int TI, int TO>
static __device__ int loom__ll_rs_receive(const loom_coll_args_t &a, int64_t mb, int64_t ml, int64_t g0, int64_t step,
                                         int64_t slot_lines, uint32_t e) {
  constexpr int ES = TI == LOOM_FP32 ? 4 : 2;
  for (int64_t g = g0; g * LOOM_COLL_VEC < ml; g += step) {
    float acc[8];
    loom_coll_pw8_t p;
    loom__ll_pre_group<TO>(a, mb + g * LOOM_COLL_VEC, mb + ml, &p);
    if (!loom__ll_sum_group<TI>(a, a.src[a.dc.rank] + mb * ES, ml, g, slot_lines, e, acc)) return 0;
    loom__ll_store_group<TO>(a, mb + g * LOOM_COLL_VEC, mb + ml, a.in_place ? 0 : mb, acc, p);
  }
  return 1;
}

/* AllGather LL, after the pushes: this thread's group g of every sender's
 * slice (senders in rank order; the own slice from `in` unless in place),
 * stored into out at the sender's slice as the lines arrive. 0 if a wait
 * expired. */
template <int T>
static __device__ int loom__ll_ag_receive(const loom_coll_args_t &a, int64_t g0, int64_t step, int64_t groups,
                                         int64_t slot_lines, uint32_t e) {
  const int W = a.dc.size, r = a.dc.rank;
  for (int64_t g = g0; g < groups; g += step)
    for (int s = 0; s < W; ++s) {
      int64_t sb, sl;
      loom__coll_slice(a.count, W, s, a.unit, &sb, &sl);
      if (g * LOOM_COLL_VEC >= sl || (s == r && a.in_place)) continue;
      uint32_t w[8];
      if (s == r) loom__ll_group_words<T>(a.src[r], sl, g, w);
      else if (!loom__ll_get<T>(a, s, g, slot_lines, e, w)) return 0;
      loom__ll_store_words<T>(a.out, sb + g * LOOM_COLL_VEC, sb + sl, w);
    }
  return 1;
}

/* ReduceScatter and AllGather LL: thread t of the grid takes the groups t,
 * t + grid x threads, ... of a slice. It pushes its groups of every peer's
 * slice of its input (ReduceScatter) or of its own slice (AllGather) into
 * that peer's slot, then receives: its groups of the own slice reduced
 * (ReduceScatter) or of every sender's slice stored (AllGather). Nothing
 * waits on a peer but the lines; the plan's epoch advances when the last
 * block is done. */
template <int TI, int TO>
__global__ void __launch_bounds__(LOOM_COLL_THREADS) loom__coll_ll_slices_kernel(const __grid_constant__ loom_coll_args_t a) {
  loom__coll_pdl_enter();
  constexpr int ES = TI == LOOM_FP32 ? 4 : 2;
  const int W = a.dc.size, r = a.dc.rank, ag = a.kind == LOOM__CK_LL_AG;
  const uint32_t e = loom__coll_block_begin(a);
  const int64_t S = loom__coll_slice_elems(a.count, W, a.unit), slot_lines = loom__coll_ll_slot_lines(S, ES);
  const int64_t g0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
  int64_t mb, ml;
  loom__coll_slice(a.count, W, r, a.unit, &mb, &ml);
  for (int i = 1; i < W; ++i) {
    const int q = (r + i) % W;
    int64_t qb, ql;
    loom__coll_slice(a.count, W, q, a.unit, &qb, &ql);
    const char *from = ag ? a.src[r] : a.src[r] + qb * ES; /* AllGather: src[r] is the own slice */
    const int64_t n = ag ? ml : ql;
    for (int64_t g = g0; g * LOOM_COLL_VEC < n; g += step) {
      uint32_t w[8];
      loom__ll_group_words<TI>(from, n, g, w);
      loom__ll_put<TI>(a, q, g, slot_lines, e, w);
    }
  }
  const int good = ag ? loom__ll_ag_receive<TI>(a, g0, step, loom__ceil_div(S, LOOM_COLL_VEC), slot_lines, e)
                      : loom__ll_rs_receive<TI, TO>(a, mb, ml, g0, step, slot_lines, e);
  loom__coll_block_end(a, e, good);
}

/* ---- PUSH: one-shot by stores (coll_schedule.h) --------------------------- */

/* AllReduce PUSH: block b stores its chunks (b, b + G, ...) of this rank's
 * input into every peer's slot, each chunk then flagged, then reduces the
 * same chunks from its own memory (its input and the peers' slots) as their
 * flags arrive, with the epilogue (rows: whole rows per chunk, normalised
 * in shared memory). Nothing is read across the link; the plan's epoch
 * advances when the last block is done. */
template <int TI, int TO>
__global__ void __launch_bounds__(LOOM_COLL_THREADS) loom__coll_push_kernel(const __grid_constant__ loom_coll_args_t a) {
  loom__coll_pdl_enter();
  extern __shared__ float loom_coll_xs[];
  __shared__ float red[33];
  __shared__ const char *src[LOOM_COLL_MAX_PEERS];
  constexpr int ES = TI == LOOM_FP32 ? 4 : 2;
  const loom_dev_comm_t &dc = a.dc;
  const int W = dc.size, r = dc.rank;
  const uint32_t e = loom__coll_block_begin(a);
  const int64_t slot_bytes = loom__coll_push_slot_bytes(a.count, ES), nch = loom__coll_chunks(a.count, a.chunk);
  /* 1. this block's chunks into every peer, a flag after each */
  for (int64_t q = blockIdx.x; W > 1 && q < nch; q += gridDim.x) {
    int64_t cb, cl;
    loom__coll_chunk(0, a.count, a.chunk, q, &cb, &cl);
    for (int i = 1; i < W; ++i) {
      const int p = (r + i) % W;
      loom__coll_copy_range<ES>(a.src[r], 0, (char *)a.stg[p] + loom__coll_push_data_off(e, loom__coll_push_slot(r, p, W), W, slot_bytes),
                               0, cb, cl);
    }
    __threadfence_system(); /* every thread's stores, before the flags */
    __syncthreads();
    for (int i = 1 + (int)threadIdx.x; i < W; i += (int)blockDim.x) {
      const int p = (r + i) % W;
      loom__signal_store_release(
          (uint32_t *)(a.stg[p] + loom__coll_push_flag_off(e, loom__coll_push_slot(r, p, W), q, W, slot_bytes, nch)), e);
    }
  }
  /* 2. the same chunks reduced from this rank's memory as the peers' flags arrive */
  for (int s = (int)threadIdx.x; s < W; s += (int)blockDim.x)
    src[s] = s == r ? a.src[r] : a.stg_own + loom__coll_push_data_off(e, loom__coll_push_slot(s, r, W), W, slot_bytes);
  __syncthreads();
  int good = 1;
  for (int64_t q = blockIdx.x; q < nch; q += gridDim.x) {
    int ok = 1;
    for (int s = (int)threadIdx.x; s < W; s += (int)blockDim.x)
      if (ok && s != r)
        ok = loom__signal_wait(&dc,
                              (const uint32_t *)(a.stg_own + loom__coll_push_flag_off(e, loom__coll_push_slot(s, r, W), q,
                                                                                     W, slot_bytes, nch)),
                              e, s, (uint32_t)q, LOOM_SITE_COLL_PUSH);
    if (!__syncthreads_and(ok)) {
      good = 0;
      break;
    }
    int64_t cb, cl;
    loom__coll_chunk(0, a.count, a.chunk, q, &cb, &cl);
    if (a.norm != LOOM_NORM_NONE) {
      for (int64_t row = cb / a.cols; row < (cb + cl) / a.cols; ++row)
        loom__coll_reduce_row<TI, TO>(src, W, row, a.cols, a.pw, a.norm, a.eps, a.norm_w, a.norm_b, loom_coll_xs, red,
                                     a.out, 0, NULL, 0);
    } else {
      loom__coll_reduce_range<TI, TO>(src, W, cb, cl, a.out, 0, NULL, 0, a.pw);
    }
  }
  loom__coll_block_end(a, e, good);
}

typedef void (*loom_coll_kernel_fn)(loom_coll_args_t);

/* kind: the kernel kind's loom__coll_kernel_kind_t (LL and PUSH have kernels
 * of their own; LL with a row-wise norm (norm != 0) one more) */
static loom_coll_kernel_fn loom_coll_pick(int ti, int to, int kind, int norm) {
#define LOOM_COLL_K(I, O)                                             \
  if (ti == I && to == O)                                             \
    return kind == LOOM__CK_LL                                 ? (norm ? loom__coll_ll_kernel<I, O, true>         \
                                                                       : loom__coll_ll_kernel<I, O, false>)       \
           : kind == LOOM__CK_PUSH                             ? loom__coll_push_kernel<I, O>      \
           : kind == LOOM__CK_LL_RS || kind == LOOM__CK_LL_AG ? loom__coll_ll_slices_kernel<I, O> \
                                                               : loom__coll_kernel<I, O>;
  LOOM_COLL_K(LOOM_FP32, LOOM_FP32)
  LOOM_COLL_K(LOOM_FP32, LOOM_FP16)
  LOOM_COLL_K(LOOM_FP32, LOOM_BF16)
  LOOM_COLL_K(LOOM_FP16, LOOM_FP32)
  LOOM_COLL_K(LOOM_FP16, LOOM_FP16)
  LOOM_COLL_K(LOOM_FP16, LOOM_BF16)
  LOOM_COLL_K(LOOM_BF16, LOOM_FP32)
  LOOM_COLL_K(LOOM_BF16, LOOM_FP16)
  LOOM_COLL_K(LOOM_BF16, LOOM_BF16)
#undef LOOM_COLL_K
  return NULL;
}

extern "C" loom_result_t loom__coll_launch(const loom_coll_args_t *a, int blocks, size_t smem, int pdl,
                                           cudaStream_t stream) {
  loom_coll_kernel_fn k = loom_coll_pick(a->in_type, a->out_type, a->kind, a->norm != LOOM_NORM_NONE);
  if (!k) return loom__fail(LOOM_ERR_INTERNAL, "collective kernel for dtypes %d -> %d missing", a->in_type, a->out_type);
  if (!pdl) {
    k<<<blocks, LOOM_COLL_THREADS, smem, stream>>>(*a);
  } else {
    LOOM_CUDA(loom__launch_dependent(k, dim3((unsigned)blocks), dim3(LOOM_COLL_THREADS), smem, stream, *a));
  }
  LOOM_CUDA_LAUNCHED("loom__coll_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__coll_prepare(int in_type, int out_type, int kind, int norm, size_t smem) {
  loom_coll_kernel_fn k = loom_coll_pick(in_type, out_type, kind, norm);
  if (!k) return loom__fail(LOOM_ERR_INTERNAL, "collective kernel for dtypes %d -> %d missing", in_type, out_type);
  cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, (const void *)k));
  /* always the largest row any plan may use (a later plan with shorter rows
   * must not lower the limit an earlier plan's launches need) */
  if (smem > 48u * 1024u) {
    int dev = 0, optin = 0;
    LOOM_CUDA(cudaGetDevice(&dev));
    LOOM_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if ((size_t)optin < smem)
      return loom__fail(LOOM_ERR_UNSUPPORTED,
                        "a row-wise norm over rows of %zu elements needs %zu bytes of shared memory per block; this "
                        "GPU allows %d (shorter rows: desc->cols <= %d)",
                        smem / sizeof(float), smem, optin, optin / (int)sizeof(float));
    const int want = (int)(LOOM_COLL_MAX_COLS * sizeof(float));
    LOOM_CUDA(cudaFuncSetAttribute((const void *)k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   want < optin ? want : optin));
  }
  return LOOM_SUCCESS;
}
