/*
 * coll_device.cuh - device building blocks of collectives with computation
 * inside (CoCoNet's fused collectives), for loom's collectives
 * (coll_kernels.cu) and the later fused ops (GEMM + AllReduce, optimizers,
 * generated code). Each is a block-wide step; dtypes are compile-time
 * constants (template <int T>, T a loom_dtype_t), everything else runtime.
 *
 *   loom__coll_wait_all      every rank's signal word reached e (thread p
 *                           polls rank p; bounded); 0 if a wait expired
 *   loom__coll_wait_one      one rank's word reached e (bounded)
 *   loom__coll_signal_own    after the block's stores: this rank's word = e
 *                           (system fence, release store)
 *   loom__coll_reduce_range  y[i] = epilogue(sum over sources s = 0..n-1 of
 *                           src[s][i]) for i in [b, b + len): fp32, in
 *                           source (rank) order, 8-element vectors where
 *                           aligned, rounded once into one or two outputs
 *   loom__coll_reduce_row    the same for one row of `cols` elements, then a
 *                           row-wise epilogue: RMSNorm or LayerNorm (weight,
 *                           optional bias, eps) over the row held in shared
 *                           memory in fp32
 *   loom__coll_copy_range    dst[i] = src[i] for i in [b, b + len) (a push or
 *                           pull: either side may be a peer's memory)
 *   loom__copy16             its aligned part: 16-byte vectors, UNROLL loads in
 *                           flight, L2 or streaming loads (also the AllGather +
 *                           GEMM copy kernel's loop)
 * Buffers are addressed by element index i, each with its own base offset
 * (ptr + (i - off) elements), so a slice-sized buffer and a full-sized one
 * mix freely. Loads that may read memory written by another kernel or GPU
 * during this kernel's life go through L2 (ld.global.cg), never through L1
 * or the non-coherent path.
 */
#ifndef LOOM_OPS_COLL_DEVICE_CUH
#define LOOM_OPS_COLL_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "core/pointwise.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"
#include "ops/common/vector.h"

#define LOOM_COLL_UNROLL 4 /* vectors of 8 per thread in flight per source */

/* ---- signals ------------------------------------------------------------ */

static __device__ __forceinline__ int loom__coll_wait_all(const loom_dev_comm_t &dc, size_t off, uint32_t idx,
                                                         uint32_t e, uint32_t site) {
  int good = 1;
  for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
    if (good && !loom__signal_wait(&dc, loom_signal_addr(&dc, p, off, idx), e, p, idx, site)) good = 0;
  return __syncthreads_and(good);
}

static __device__ __forceinline__ int loom__coll_wait_one(const loom_dev_comm_t &dc, int rank, size_t off,
                                                         uint32_t idx, uint32_t e, uint32_t site) {
  int good = 1;
  if (threadIdx.x == 0) good = loom__signal_wait(&dc, loom_signal_addr(&dc, rank, off, idx), e, rank, idx, site);
  return __syncthreads_and(good);
}

static __device__ __forceinline__ void loom__coll_signal_own(const loom_dev_comm_t &dc, size_t off, uint32_t idx,
                                                            uint32_t e) {
  __threadfence_system(); /* every thread's stores, before the flag (as the tp copy kernel) */
  __syncthreads();
  if (threadIdx.x == 0) loom__signal_store_release((uint32_t *)(dc.ws + off) + idx, e);
}

/* ---- the pointwise epilogue (element access: core/vec8.cuh) -------------- */

/* The epilogue's own inputs for 8 elements (their dropout decisions, and
 * the bias and residual values where they come in one vector load each), so
 * that a kernel can issue these loads before it waits for a peer's data. */
typedef struct loom_coll_pw8 {
  float b[8], r[8];
  unsigned keep; /* bit k: element k kept by the dropout (all set without one) */
  int vec;       /* b and r hold the values (else loom__coll_pw8_apply loads them element by element) */
} loom_coll_pw8_t;

/* i % cols (i >= 0, cols > 0), in 32 bits where both fit: a 64-bit remainder
 * is a long software routine, on the path of every load that needs the
 * column. */
static __device__ __forceinline__ int64_t loom__coll_col(int64_t i, int64_t cols) {
  if ((((uint64_t)i | (uint64_t)cols) >> 32) == 0) return (int64_t)((uint32_t)i % (uint32_t)cols);
  return i % cols;
}

/* loom__coll_pw8_load where the caller knows the column of i0 (col = i0 %
 * pw.cols). */
template <int TP>
static __device__ __forceinline__ void loom__coll_pw8_load_at(const loom_pointwise_t &pw, int64_t i0, int64_t col,
                                                             loom_coll_pw8_t *p) {
#pragma unroll
  for (int k = 0; k < 8; ++k) p->b[k] = 0.f, p->r[k] = 0.f;
  p->keep = 0xffu;
  if (pw.flags & LOOM_PW_DROPOUT) {
    int keep[8];
    if ((i0 & 3) == 0) {
      loom__dropout_keep4(pw.seed, pw.offset, (uint64_t)i0, pw.drop_threshold, keep);
      loom__dropout_keep4(pw.seed, pw.offset, (uint64_t)i0 + 4, pw.drop_threshold, keep + 4);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) keep[k] = loom__dropout_keep(pw.seed, pw.offset, (uint64_t)(i0 + k), pw.drop_threshold);
    }
    p->keep = 0u;
#pragma unroll
    for (int k = 0; k < 8; ++k) p->keep |= (keep[k] ? 1u : 0u) << k;
  }
  p->vec = (i0 & 7) == 0 && (col & 7) == 0 && col + 8 <= pw.cols &&
           (((uintptr_t)pw.bias | (uintptr_t)pw.residual) & 15u) == 0;
  if (p->vec) {
    if (pw.flags & LOOM_PW_BIAS) loom__load8_as<TP>((const char *)pw.bias, col, pw.type, p->b);
    if (pw.flags & LOOM_PW_RESIDUAL) loom__load8_as<TP>((const char *)pw.residual, i0, pw.type, p->r);
  }
}

template <int TP>
static __device__ __forceinline__ void loom__coll_pw8_load(const loom_pointwise_t &pw, int64_t i0, loom_coll_pw8_t *p) {
  loom__coll_pw8_load_at<TP>(pw, i0, loom__coll_col(i0, pw.cols), p);
}

/* v[k] = epilogue(v[k]) for the 8 elements at i0 whose inputs p holds
 * (loom__coll_pw8_load of the same i0). */
template <int TP>
static __device__ __forceinline__ void loom__coll_pw8_apply(const loom_pointwise_t &pw, int64_t i0,
                                                           const loom_coll_pw8_t &p, float *v) {
  if (p.vec) {
#pragma unroll
    for (int k = 0; k < 8; ++k)
      v[k] = loom__pointwise_apply_vals(pw, pw.flags, pw.act, v[k], p.b[k], (int)((p.keep >> k) & 1u), p.r[k]);
    return;
  }
  int64_t col = loom__coll_col(i0, pw.cols);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    v[k] = loom__pointwise_apply_kept(pw, pw.flags, pw.act, v[k], col, (uint64_t)(i0 + k), (int)((p.keep >> k) & 1u));
    if (++col == pw.cols) col = 0;
  }
}

/* The pointwise epilogue on 8 consecutive elements starting at element i0
 * (pw.cols: the row length; the row advances across the 8 as needed). The
 * dropout decisions of an aligned i0 come from two Philox calls (one per 4
 * elements) instead of eight; where the 8 elements lie in one row at a
 * multiple of 8 and the buffers are 16-byte aligned, the bias and the
 * residual (of pw.type) come in one vector load each. TP: pw.type where the
 * caller knows it at compile time (the collectives: their output type;
 * measured, the run-time dispatch cost the dropout variant ~8%), -1 where it
 * does not (the tensor-parallel reduction, whose types are all run-time).
 * The loads and the arithmetic apart: loom__coll_pw8_load, _apply. */
template <int TP>
static __device__ __forceinline__ void loom__coll_pointwise8(const loom_pointwise_t &pw, int64_t i0, float *v) {
  loom_coll_pw8_t p;
  loom__coll_pw8_load<TP>(pw, i0, &p);
  loom__coll_pw8_apply<TP>(pw, i0, p, v);
}

/* ---- reduction ---------------------------------------------------------- */

/* For i in [b, b + len): y = epilogue(sum_{s < nsrc} src[s][i]) (fp32, in
 * order s = 0, 1, ...), stored (rounded to TO) at dst0[i - off0] and, if dst1,
 * at dst1[i - off1]. Vectors of 8 where b and b - off are multiples of 8 (the
 * buffers are 16-byte aligned), the rest element by element. fp32 input with
 * no epilogue takes each vector as two quads (loom__coll_quads,
 * ops/common/vector.h): 8 consecutive fp32 a lane would make every warp load
 * touch 1 KiB half-used, and a peer's sectors cross NVLink as twice the
 * requests (docs/perf/coll.md, "fp32: two quads a lane"). Whole block. */
template <int TI, int TO>
static __device__ void loom__coll_reduce_range(const char *const *src, int nsrc, int64_t b, int64_t len,
                                              char *dst0, int64_t off0, char *dst1, int64_t off1,
                                              const loom_pointwise_t &pw) {
  /* vectors where the element and both destinations' positions are multiples of 8 */
  const int vec = (b % LOOM_COLL_VEC) == 0 && ((b - off0) % LOOM_COLL_VEC) == 0 &&
                  (!dst1 || ((b - off1) % LOOM_COLL_VEC) == 0);
  const int64_t nv = vec ? len / LOOM_COLL_VEC : 0;
  const int64_t step = (int64_t)blockDim.x * LOOM_COLL_UNROLL;
  const bool quads = TI == LOOM_FP32 && !pw.flags;
  for (int64_t v0 = threadIdx.x; v0 < nv; v0 += step) {
    float acc[LOOM_COLL_UNROLL][8];
    int64_t idx[LOOM_COLL_UNROLL], idx1[LOOM_COLL_UNROLL];
#pragma unroll
    for (int u = 0; u < LOOM_COLL_UNROLL; ++u) {
      int64_t v = v0 + (int64_t)u * blockDim.x;
      if (v >= nv) v = nv - 1; /* a repeat of the last vector: loaded, not stored */
      if (quads) {
        int64_t q0, q1;
        loom__coll_quads(v, nv, &q0, &q1);
        idx[u] = b + q0 * 4, idx1[u] = b + q1 * 4;
      } else {
        idx[u] = b + v * LOOM_COLL_VEC, idx1[u] = idx[u] + 4;
      }
#pragma unroll
      for (int k = 0; k < 8; ++k) acc[u][k] = 0.f;
    }
    for (int s = 0; s < nsrc; ++s) {
      float x[LOOM_COLL_UNROLL][8];
#pragma unroll
      for (int u = 0; u < LOOM_COLL_UNROLL; ++u) {
        if (quads) {
          loom__loadv<LOOM_FP32, 4>(src[s], idx[u], x[u]);
          loom__loadv<LOOM_FP32, 4>(src[s], idx1[u], x[u] + 4);
        } else {
          loom__load8<TI>(src[s], idx[u], x[u]);
        }
      }
#pragma unroll
      for (int u = 0; u < LOOM_COLL_UNROLL; ++u)
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[u][k] += x[u][k];
    }
#pragma unroll
    for (int u = 0; u < LOOM_COLL_UNROLL; ++u) {
      if (v0 + (int64_t)u * blockDim.x >= nv) break;
      if (quads) {
        loom__storev<TO, 4>(dst0, idx[u] - off0, acc[u]);
        loom__storev<TO, 4>(dst0, idx1[u] - off0, acc[u] + 4);
        if (dst1) {
          loom__storev<TO, 4>(dst1, idx[u] - off1, acc[u]);
          loom__storev<TO, 4>(dst1, idx1[u] - off1, acc[u] + 4);
        }
        continue;
      }
      if (pw.flags) loom__coll_pointwise8<TO>(pw, idx[u], acc[u]);
      loom__store8<TO>(dst0, idx[u] - off0, acc[u]);
      if (dst1) loom__store8<TO>(dst1, idx[u] - off1, acc[u]);
    }
  }
  for (int64_t i = b + nv * LOOM_COLL_VEC + threadIdx.x; i < b + len; i += blockDim.x) {
    float acc = 0.f;
    for (int s = 0; s < nsrc; ++s) acc += loom__load1<TI>(src[s], i);
    if (pw.flags) {
      const int64_t row = i / pw.cols;
      acc = loom__pointwise_apply(pw, pw.flags, pw.act, acc, row, i - row * pw.cols);
    }
    loom__store1<TO>(dst0, i - off0, acc);
    if (dst1) loom__store1<TO>(dst1, i - off1, acc);
  }
}

/* Sum of v over the block; red: 33 floats of shared memory. Every thread
 * gets the result. */
static __device__ __forceinline__ float loom__coll_block_sum(float v, float *red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = (int)threadIdx.x / 32, lane = (int)threadIdx.x % 32, nw = ((int)blockDim.x + 31) / 32;
  __syncthreads(); /* red is free (a previous sum has been read) */
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < nw ? red[lane] : 0.f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
    if (lane == 0) red[32] = t;
  }
  __syncthreads();
  return red[32];
}

/* The row-wise norm of one row held in fp32 in xs[cols] (shared memory;
 * s1: this thread's share of sum(x^2) (RMSNorm) or sum(x) (LayerNorm)):
 *   RMSNorm   y = x / sqrt(mean(x^2) + eps) * w
 *   LayerNorm y = (x - mean) / sqrt(var + eps) * w (+ nb)   (biased variance)
 * with w, nb [cols] of TO (nb may be NULL), stored at element b = row x cols
 * on like loom__coll_reduce_range (vec: 8-element vectors). Whole block. */
template <int TO>
static __device__ void loom__coll_norm_row(const float *xs, float s1, int64_t b, int64_t cols, int norm, float eps,
                                          const void *w, const void *nb, float *red, int vec, char *dst0, int64_t off0,
                                          char *dst1, int64_t off1) {
  const float inv = 1.f / (float)cols;
  float mean = 0.f, rstd;
  if (norm == LOOM_NORM_RMS) {
    rstd = rsqrtf(loom__coll_block_sum(s1, red) * inv + eps);
  } else {
    mean = loom__coll_block_sum(s1, red) * inv;
    float s2 = 0.f;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = xs[c] - mean;
      s2 += d * d;
    }
    rstd = rsqrtf(loom__coll_block_sum(s2, red) * inv + eps);
  }
  /* every thread's xs stores are visible: loom__coll_block_sum synchronised */
  if (vec) {
    for (int64_t v = threadIdx.x; v < cols / LOOM_COLL_VEC; v += blockDim.x) {
      float y[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int64_t c = v * 8 + k;
        y[k] = (xs[c] - mean) * rstd * loom__pw_load(w, c, TO);
        if (nb) y[k] += loom__pw_load(nb, c, TO);
      }
      loom__store8<TO>(dst0, b + v * 8 - off0, y);
      if (dst1) loom__store8<TO>(dst1, b + v * 8 - off1, y);
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float y = (xs[c] - mean) * rstd * loom__pw_load(w, c, TO);
      if (nb) y += loom__pw_load(nb, c, TO);
      loom__store1<TO>(dst0, b + c - off0, y);
      if (dst1) loom__store1<TO>(dst1, b + c - off1, y);
    }
  }
  __syncthreads(); /* xs is rewritten by the next row */
}

/* Row `row` (cols elements, starting at element row x cols): x = pointwise(
 * sum over sources) kept in fp32 in xs[cols] (shared memory), then
 * loom__coll_norm_row. Whole block. */
template <int TI, int TO>
static __device__ void loom__coll_reduce_row(const char *const *src, int nsrc, int64_t row, int64_t cols,
                                            const loom_pointwise_t &pw, int norm, float eps, const void *w,
                                            const void *nb, float *xs, float *red, char *dst0, int64_t off0,
                                            char *dst1, int64_t off1) {
  const int64_t b = row * cols;
  const int vec = (b % LOOM_COLL_VEC) == 0 && (cols % LOOM_COLL_VEC) == 0 && ((b - off0) % LOOM_COLL_VEC) == 0 &&
                  (!dst1 || ((b - off1) % LOOM_COLL_VEC) == 0);
  float s1 = 0.f;
  if (vec) {
    for (int64_t v = threadIdx.x; v < cols / LOOM_COLL_VEC; v += blockDim.x) {
      float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, x[8];
      for (int s = 0; s < nsrc; ++s) {
        loom__load8<TI>(src[s], b + v * 8, x);
#pragma unroll
        for (int k = 0; k < 8; ++k) acc[k] += x[k];
      }
      if (pw.flags) loom__coll_pointwise8<TO>(pw, b + v * 8, acc);
#pragma unroll
      for (int k = 0; k < 8; ++k) xs[v * 8 + k] = acc[k], s1 += norm == LOOM_NORM_RMS ? acc[k] * acc[k] : acc[k];
    }
  } else {
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      float acc = 0.f;
      for (int s = 0; s < nsrc; ++s) acc += loom__load1<TI>(src[s], b + c);
      if (pw.flags) acc = loom__pointwise_apply(pw, pw.flags, pw.act, acc, row, c);
      xs[c] = acc;
      s1 += norm == LOOM_NORM_RMS ? acc * acc : acc;
    }
  }
  loom__coll_norm_row<TO>(xs, s1, b, cols, norm, eps, w, nb, red, vec, dst0, off0, dst1, off1);
}

/* ---- LL lines ----------------------------------------------------------- */

/* Two lines {word, flag} at p (16-byte aligned), each one 8-byte access. */
static __device__ __forceinline__ void loom__ll_store2(uint64_t *p, uint32_t w0, uint32_t w1, uint32_t flag) {
  const uint64_t a = ((uint64_t)flag << 32) | w0, b = ((uint64_t)flag << 32) | w1;
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

/* The two lines at p (one 16-byte load); 1 if both flags are `flag`. */
static __device__ __forceinline__ int loom__ll_load2(const uint64_t *p, uint32_t flag, uint64_t *a, uint64_t *b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];" : "=l"(*a), "=l"(*b) : "l"(p) : "memory");
  return (uint32_t)(*a >> 32) == flag && (uint32_t)(*b >> 32) == flag;
}

/* Polls the two lines at p until both flags are `flag`; their words to w.
 * Bounded like loom__signal_wait (loom__poll_expired: 0 on expiry or when
 * another wait of the comm expired; `peer`, `line` and `site` describe the
 * wait). */
static __device__ __forceinline__ int loom__ll_wait2(const loom_dev_comm_t &dc, const uint64_t *p, uint32_t flag,
                                                    uint32_t *w, int peer, uint32_t line, uint32_t site) {
  uint64_t a, b;
  if (!loom__ll_load2(p, flag, &a, &b) && !LOOM__WAIT_REMOVED(site)) {
    const uint64_t t0 = loom__globaltimer_ns();
    for (uint32_t polls = 1; !loom__ll_load2(p, flag, &a, &b); ++polls) {
      const uint32_t seen = (uint32_t)(a >> 32) != flag ? (uint32_t)(a >> 32) : (uint32_t)(b >> 32);
      if (loom__poll_expired(&dc, polls, t0, peer, line, flag, seen, site)) return 0;
    }
  }
  w[0] = (uint32_t)a, w[1] = (uint32_t)b;
  return 1;
}

/* ---- copy --------------------------------------------------------------- */

/* d[i] = s[i] for the nv 16-byte vectors i < nv, by the whole block, UNROLL
 * loads in flight per thread. Loads through L2 (ld.global.cg: the data may
 * have been written by another kernel or GPU during this kernel's life) or,
 * with EVICT_FIRST, streaming (ld.global.cs: read once, written before the
 * kernel began). */
template <int UNROLL, bool EVICT_FIRST>
static __device__ __forceinline__ void loom__copy16(int4 *d, const int4 *s, int64_t nv) {
  const int64_t step = (int64_t)blockDim.x * UNROLL;
  int64_t i = threadIdx.x;
  for (; i + (UNROLL - 1) * (int64_t)blockDim.x < nv; i += step) {
    int4 v[UNROLL];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v[u] = EVICT_FIRST ? __ldcs(s + i + u * blockDim.x) : __ldcg(s + i + u * blockDim.x);
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) d[i + u * blockDim.x] = v[u];
  }
  for (; i < nv; i += blockDim.x) d[i] = EVICT_FIRST ? __ldcs(s + i) : __ldcg(s + i);
}

/* dst[i - doff] = src[i - soff] for i in [b, b + len), elements of ES bytes:
 * 16-byte vectors where both sides are 16-byte aligned there, else element
 * by element. Whole block. */
template <int ES>
static __device__ void loom__coll_copy_range(const char *src, int64_t soff, char *dst, int64_t doff, int64_t b,
                                            int64_t len) {
  const char *s = src + (b - soff) * ES;
  char *d = dst + (b - doff) * ES;
  const int64_t bytes = len * ES;
  int64_t nv = 0;
  if ((((uintptr_t)s | (uintptr_t)d) & 15u) == 0) {
    nv = bytes / 16;
    loom__copy16<LOOM_COLL_UNROLL, false>((int4 *)d, (const int4 *)s, nv);
  }
  for (int64_t k = nv * 16 / ES + threadIdx.x; k < len; k += blockDim.x) {
    if (ES == 4) ((uint32_t *)d)[k] = __ldcg((const unsigned int *)s + k);
    else ((unsigned short *)d)[k] = __ldcg((const unsigned short *)s + k);
  }
}

#endif /* LOOM_OPS_COLL_DEVICE_CUH */
