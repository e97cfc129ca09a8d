/*
 * embedding_a2a.cuh - device helpers of the fused embedding-bag + All-to-All,
 * shared by its kernels (embedding_a2a.cu, embedding_a2a_sorted.cu,
 * embedding_a2a_gin.cu) and by the row-loop study in dev/embedding:
 *  - dtype helpers: 16-byte chunks of fp32/fp16/bf16 <-> floats, loads from
 *    (possibly peer) memory through L2 only, atomic adds;
 *  - the host-mapped record of bad input (first error wins);
 *  - the task loop: a warp takes one task (dest q, slice j, table t, part p;
 *    embedding_schedule.h) at a time from the call's counter (or a static
 *    stride), claimed one ahead, after a bounded wait for q's ready word;
 *  - a warp's bags of a task: bounds, index chunks (32 at a time, the next
 *    bag's first chunk in flight while the current bag's rows are), the row
 *    loop (EMB_ROWS_FLAT), fp32 accumulation, the store of a pooled bag; the
 *    atomic scatter of the backward;
 *  - the end of a call (fetch counter reset, epoch published).
 * Lane chunks: lane `lane` owns 16-byte chunks c = lane + 32 m (m < NV) of
 * VE elements of the table dtype; NV = 1, 2, 4 or 8 covers D up to 1024.
 */
#ifndef LOOM_OPS_EMBEDDING_A2A_CUH
#define LOOM_OPS_EMBEDDING_A2A_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#include "core/signal.cuh"
#include "ops/embedding/embedding_a2a.h"

#define EMB_FULL_MASK 0xffffffffu

/* ---- dtype helpers ------------------------------------------------------ */

template <typename T> struct emb_ty;
template <> struct emb_ty<float> { static constexpr int VE = 4; };          /* elements per 16 bytes */
template <> struct emb_ty<__half> { static constexpr int VE = 8; };
template <> struct emb_ty<__nv_bfloat16> { static constexpr int VE = 8; };

template <typename T> __device__ __forceinline__ float emb_to_f(T x);
template <> __device__ __forceinline__ float emb_to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float emb_to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float emb_to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T emb_from_f(float x);
template <> __device__ __forceinline__ float emb_from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half emb_from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 emb_from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* 16 bytes of T -> VE floats. */
template <typename T>
__device__ __forceinline__ void emb_unpack16(const uint4 &v, float *f) {
  const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
  for (int i = 0; i < emb_ty<T>::VE; ++i) f[i] = emb_to_f<T>(e[i]);
}

/* N elements of T (N * sizeof(T) a multiple of 8) from floats; 8/16-byte stores. */
template <typename T, int N>
__device__ __forceinline__ void emb_store_n(T *dst, const float *f) {
  constexpr int BYTES = N * (int)sizeof(T);
  static_assert(BYTES % 8 == 0, "store granularity");
  __align__(16) T tmp[N];
#pragma unroll
  for (int i = 0; i < N; ++i) tmp[i] = emb_from_f<T>(f[i]);
  if (BYTES % 16 == 0) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; ++k) reinterpret_cast<uint4 *>(dst)[k] = reinterpret_cast<const uint4 *>(tmp)[k];
  } else {
#pragma unroll
    for (int k = 0; k < BYTES / 8; ++k) reinterpret_cast<uint2 *>(dst)[k] = reinterpret_cast<const uint2 *>(tmp)[k];
  }
}

/* Raw words of N elements of T (8, 16 or 32 bytes), loaded from (possibly
 * peer) memory through L2 only (never .nc), unpacked later so that the
 * loads of a group are all in flight first. */
template <int BYTES> struct emb_words;
template <> struct emb_words<8> { uint2 w[1]; };
template <> struct emb_words<16> { uint4 w[1]; };
template <> struct emb_words<32> { uint4 w[2]; };
template <typename T, int N> struct emb_raw : emb_words<N * (int)sizeof(T)> {};

template <typename T, int N>
__device__ __forceinline__ void emb_load_raw(const T *src, emb_raw<T, N> &r) {
  if constexpr (N * sizeof(T) == 8) {
    r.w[0] = __ldcg(reinterpret_cast<const uint2 *>(src));
  } else {
#pragma unroll
    for (int k = 0; k < (int)(N * sizeof(T) / 16); ++k) r.w[k] = __ldcg(reinterpret_cast<const uint4 *>(src) + k);
  }
}
template <typename T, int N>
__device__ __forceinline__ void emb_unpack_raw(const emb_raw<T, N> &r, float *f) {
  const T *e = reinterpret_cast<const T *>(r.w);
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = emb_to_f<T>(e[i]);
}
template <typename T, int N>
__device__ __forceinline__ void emb_load_n(const T *src, float *f) {
  emb_raw<T, N> r;
  emb_load_raw<T, N>(src, r);
  emb_unpack_raw<T, N>(r, f);
}

/* dst[0..N) += f with fp32 atomics (fp32 tables only: 16-byte vector atomics on sm_90). */
template <int N> __device__ __forceinline__ void emb_atomic_add_f32(float *dst, const float *f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
  for (int i = 0; i < N; i += 4) atomicAdd(reinterpret_cast<float4 *>(dst + i), make_float4(f[i], f[i + 1], f[i + 2], f[i + 3]));
#else
#pragma unroll
  for (int i = 0; i < N; ++i) atomicAdd(dst + i, f[i]);
#endif
}

/* 16-byte chunks per lane (NV) for a row of `dim` elements of `tt`: 1, 2, 4
 * or 8, the template argument the launchers pick kernels by. */
static inline int emb_chunks_per_lane(loom_dtype_t tt, int dim) {
  const int ve = tt == LOOM_FP32 ? 4 : 8;
  const int chunks = (dim / ve + 31) / 32;
  return chunks <= 1 ? 1 : chunks <= 2 ? 2 : chunks <= 4 ? 4 : 8;
}

/* ---- error record -------------------------------------------------------- */

static __device__ __noinline__ void emb_record(loom_emb_err_t *e, uint32_t kind, int table, int64_t sample,
                                               int64_t position, int64_t value, int64_t limit) {
  if (*(volatile uint32_t *)&e->claimed || !loom__record_claim(&e->claimed)) return;
  volatile loom_emb_err_t *r = e;
  r->kind = kind;
  r->table = table;
  r->sample = sample;
  r->position = position;
  r->value = value;
  r->limit = limit;
  loom__record_publish(&e->valid);
}

/* ---- the task loop --------------------------------------------------------
 * Each warp of a block is a worker: its lane 0 claims task indices (from the
 * call's counter, or a static stride for pooling alone), one task ahead so
 * that the claim's latency hides behind the current task, waits (bounded)
 * for the task's destination to be ready before its first task for it, and
 * hands the index to the warp. */

typedef struct emb_fetch {
  uint32_t *counter;      /* the call's task counter; NULL: static stride */
  int64_t next, stride;   /* static: this warp's next task, and the stride */
  int64_t pref;           /* lane 0: the task claimed one ahead (-1: none) */
  const uint32_t *ready;  /* ready[q]: rank q may be written/read this call (NULL: no wait) */
  uint32_t sig0, site, epoch;
} emb_fetch_t;

static __device__ __forceinline__ emb_fetch_t emb_fetch_init(uint32_t *counter, const uint32_t *ready, uint32_t sig0,
                                                             uint32_t site, uint32_t epoch) {
  emb_fetch_t f;
  const int nwarps = (int)(blockDim.x >> 5), warp = (int)(threadIdx.x >> 5);
  f.counter = counter;
  f.next = (int64_t)blockIdx.x * nwarps + warp;
  f.stride = (int64_t)gridDim.x * nwarps;
  f.pref = -1;
  f.ready = ready;
  f.sig0 = sig0;
  f.site = site;
  f.epoch = epoch;
  return f;
}

static __device__ __forceinline__ int64_t emb_claim(emb_fetch_t &f) {
  if (f.counter) return (int64_t)atomicAdd(f.counter, 1u);
  const int64_t k = f.next;
  f.next += f.stride;
  return k;
}

/* The warp's next task (>= ntasks: none left; -1: a wait expired in this
 * block, stop). Every lane calls it; the warp's read of s_task[warp] comes
 * before the next call's write (the __syncwarp after each task). */
static __device__ __forceinline__ int64_t emb_next_task(const loom_emb_kargs_t &a, emb_fetch_t &f, int64_t ntasks,
                                                        int64_t *s_task, unsigned char *s_ready, volatile int *s_abort) {
  const int warp = (int)(threadIdx.x >> 5);
  if ((threadIdx.x & 31) == 0) {
    int64_t k = f.pref >= 0 ? f.pref : emb_claim(f);
    f.pref = k < ntasks ? emb_claim(f) : -1;
    if (k < ntasks && f.ready) {
      const int q = loom__emb_task_decode(&a.s, k).dest;
      if (!s_ready[q]) {
        if (loom__signal_wait(&a.dc, f.ready + q, f.epoch, q, f.sig0 + (uint32_t)q, f.site)) s_ready[q] = 1;
        else *s_abort = 1;
      }
    }
    if (*s_abort) k = -1;
    s_task[warp] = k;
  }
  __syncwarp();
  return s_task[warp];
}

/* ---- bags of a task (one warp) ---------------------------------------------- */

/* [lo, hi) of bag (t, b) (global sample b) if its offsets are valid; else a
 * recorded error and an empty bag. */
static __device__ __forceinline__ void emb_bag_range(const loom_emb_kargs_t &a, int t, int64_t b, int64_t &lo,
                                                     int64_t &hi) {
  const int64_t ob = (int64_t)t * a.s.batch + b;
  const int64_t s0 = a.offsets[ob], e0 = a.offsets[ob + 1];
  lo = 0;
  hi = 0;
  if (s0 >= 0 && s0 <= e0 && e0 <= a.num_indices) {
    lo = s0;
    hi = e0;
  } else {
    const int64_t pos = (s0 < 0 || s0 > a.num_indices) ? ob : ob + 1;
    emb_record(a.err, 2u, t, b, pos, pos == ob ? s0 : e0, a.num_indices);
  }
}

/* Bounds of a warp's bags of a task: lane j gets [lo, hi) of bag b0 + j (j < nb). */
static __device__ __forceinline__ void emb_bag_bounds(const loom_emb_kargs_t &a, int t, int64_t b0, int nb, int lane,
                                                      int64_t &lo, int64_t &hi) {
  lo = 0;
  hi = 0;
  if (lane < nb) emb_bag_range(a, t, b0 + lane, lo, hi);
}

/* Issues the loads of a chunk of up to 32 indices (lane < n: indices[base +
 * lane] and its weight); emb_chunk_check validates them later, so the loads
 * stay in flight meanwhile. */
static __device__ __forceinline__ void emb_chunk_issue(const loom_emb_kargs_t &a, int64_t base, int n, int lane,
                                                       int64_t &raw, float &w) {
  raw = -1;
  w = 0.f;
  if (lane < n) {
    raw = a.indices[base + lane];
    w = a.weighted ? a.weights[base + lane] : 1.f;
  }
}

/* ix = raw if it is a row of the table (else -1, the error recorded, weight 0). */
static __device__ __forceinline__ void emb_chunk_check(const loom_emb_kargs_t &a, int t, int64_t rows_t, int64_t b,
                                                       int64_t base, int n, int lane, int64_t raw, float w,
                                                       int64_t &ix, float &wt) {
  ix = -1;
  wt = 0.f;
  if (lane < n) {
    if (raw >= 0 && raw < rows_t) {
      ix = raw;
      wt = w;
    } else {
      emb_record(a.err, 1u, t, b, base + lane, raw, rows_t);
    }
  }
}

/* ---- the row loop ----------------------------------------------------------
 * Adds rows u = 0 .. n-1 of a chunk of indices to acc: row my@u (the index
 * held by lane u; -1: invalid) times weight mw@u, in index order, one fmaf
 * per element. FLAT: per group of U rows every slot issues its loads (a
 * dead slot reads row 0 of its table, which exists: rows >= 1; chunks past
 * the row read its last chunk: those lanes' sums are never stored), then the
 * live slots' FMAs are kept: one wave of U x NV loads per group (a `live ?
 * load : 0` makes ptxas issue them in dependent waves; dev/embedding has
 * that loop and others, measured). A row loop is a type with
 *   template <typename TT, int NV, int U> static void add(tab, rows_t, D,
 *   nvec, lane, n, my, mw, acc)
 * so that emb_pool_bags takes it as a parameter. */

template <typename TT, int NV, int U>
__device__ __forceinline__ void emb_group_issue(const TT *tab, int D, int nvec, int lane, int u0, int n, int64_t my,
                                                float mw, uint4 (&v)[U][NV], float (&w)[U], bool (&live)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int src = u0 + u;
    const int64_t ix = __shfl_sync(EMB_FULL_MASK, my, src & 31);
    w[u] = __shfl_sync(EMB_FULL_MASK, mw, src & 31);
    live[u] = src < n && ix >= 0;
    const uint4 *row = reinterpret_cast<const uint4 *>(tab + (live[u] ? ix : 0) * (int64_t)D);
#pragma unroll
    for (int m = 0; m < NV; ++m) v[u][m] = __ldg(row + min(lane + 32 * m, nvec - 1));
  }
}

template <typename TT, int NV, int U>
__device__ __forceinline__ void emb_group_sum(const uint4 (&v)[U][NV], const float (&w)[U], const bool (&live)[U],
                                              float (&acc)[NV][emb_ty<TT>::VE]) {
  constexpr int VE = emb_ty<TT>::VE;
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      float f[VE];
      emb_unpack16<TT>(v[u][m], f);
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float r = fmaf(w[u], f[e], acc[m][e]);
        acc[m][e] = live[u] ? r : acc[m][e];
      }
    }
}

struct EMB_ROWS_FLAT {
  template <typename TT, int NV, int U>
  static __device__ __forceinline__ void add(const TT *tab, int64_t rows_t, int D, int nvec, int lane, int n,
                                             int64_t my, float mw, float (&acc)[NV][emb_ty<TT>::VE]) {
    if (rows_t <= 0) return; /* no index is valid */
    for (int u0 = 0; u0 < n; u0 += U) {
      uint4 v[U][NV];
      float w[U];
      bool live[U];
      emb_group_issue<TT, NV, U>(tab, D, nvec, lane, u0, n, my, mw, v, w, live);
      emb_group_sum<TT, NV, U>(v, w, live, acc);
    }
  }
};

/* A pooled bag from a warp's accumulators (lane's chunks lane + 32 m) to
 * dst: scaled by 1 / mean_len when mean_len > 0 (mean pooling; an empty bag
 * stays zero). */
template <typename OT, int NV, int VE>
__device__ __forceinline__ void emb_store_bag(const float (&acc)[NV][VE], int64_t mean_len, OT *dst, int lane,
                                              int nvec) {
  const float sc = mean_len > 0 ? 1.f / (float)mean_len : 1.f;
#pragma unroll
  for (int m = 0; m < NV; ++m) {
    const int c = lane + 32 * m;
    if (c < nvec) {
      float f[VE];
#pragma unroll
      for (int e = 0; e < VE; ++e) f[e] = acc[m][e] * sc;
      emb_store_n<OT, VE>(dst + c * VE, f);
    }
  }
}

/* Pools a warp's task tk (bags b = tk.sample0 .. + tk.count - 1 of local table
 * tk.table) and stores bag b's vector at dst0 + (b - row0) * stride. UR
 * 16-byte row chunks in flight per lane (UR / NV rows per group); fp32
 * accumulation with the row loop ROWS. The next bag's first 32 indices load
 * while this bag's rows are in flight. */
template <typename TT, typename OT, int NV, int UR, typename ROWS>
__device__ __forceinline__ void emb_pool_bags(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int lane, OT *dst0,
                                              int64_t row0, int64_t stride) {
  constexpr int VE = emb_ty<TT>::VE;
  constexpr int U = UR / NV >= 1 ? UR / NV : 1;
  const int nb = tk.count;
  if (nb <= 0) return;
  const int D = a.dim, nvec = D / VE, t = tk.table;
  const int64_t rows_t = a.rows[t];
  const TT *tab = reinterpret_cast<const TT *>(a.tables) + a.row_off[t] * (int64_t)D;
  const int64_t b0 = tk.sample0;
  int64_t lo, hi;
  emb_bag_bounds(a, t, b0, nb, lane, lo, hi);
  int64_t my;
  float mw;
  {
    const int64_t s0 = __shfl_sync(EMB_FULL_MASK, lo, 0), e0 = __shfl_sync(EMB_FULL_MASK, hi, 0);
    const int n0 = e0 - s0 < 32 ? (int)(e0 - s0) : 32;
    int64_t raw;
    float w;
    emb_chunk_issue(a, s0, n0, lane, raw, w);
    emb_chunk_check(a, t, rows_t, b0, s0, n0, lane, raw, w, my, mw);
  }
  for (int j = 0; j < nb; ++j) {
    const int64_t b = b0 + j;
    const int64_t start = __shfl_sync(EMB_FULL_MASK, lo, j), end = __shfl_sync(EMB_FULL_MASK, hi, j);
    /* the next bag's first chunk: in flight during this bag */
    int64_t nraw = -1, nbase = 0;
    float nw = 0.f;
    int nn = 0;
    if (j + 1 < nb) {
      nbase = __shfl_sync(EMB_FULL_MASK, lo, j + 1);
      const int64_t ne = __shfl_sync(EMB_FULL_MASK, hi, j + 1);
      nn = ne - nbase < 32 ? (int)(ne - nbase) : 32;
      emb_chunk_issue(a, nbase, nn, lane, nraw, nw);
    }
    float acc[NV][VE];
#pragma unroll
    for (int m = 0; m < NV; ++m)
#pragma unroll
      for (int e = 0; e < VE; ++e) acc[m][e] = 0.f;
    for (int64_t base = start; base < end; base += 32) {
      const int n = end - base < 32 ? (int)(end - base) : 32;
      if (base != start) { /* bags longer than 32 */
        int64_t raw;
        float w;
        emb_chunk_issue(a, base, n, lane, raw, w);
        emb_chunk_check(a, t, rows_t, b, base, n, lane, raw, w, my, mw);
      }
      ROWS::template add<TT, NV, U>(tab, rows_t, D, nvec, lane, n, my, mw, acc);
    }
    emb_store_bag<OT, NV, VE>(acc, a.pooling == LOOM_POOL_MEAN ? end - start : 0, dst0 + (b - row0) * stride, lane,
                              nvec);
    if (j + 1 < nb) emb_chunk_check(a, t, rows_t, b + 1, nbase, nn, lane, nraw, nw, my, mw);
  }
}

/* ---- the atomic backward's bags ---------------------------------------------
 * Scatter-adds a warp's task tk (fp32 tables): for each bag b and each index
 * ix of it, table_grad[ix] += scale * w * (mean ? 1/len : 1) * grad row of b,
 * the grad row at g0 + (b - row0) * stride. */
template <typename OT, int NV>
__device__ __forceinline__ void emb_scatter_bags(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int lane,
                                                 const OT *g0, int64_t row0, int64_t stride) {
  constexpr int VE = emb_ty<float>::VE;
  const int nb = tk.count;
  if (nb <= 0) return;
  const int D = a.dim, nvec = D / VE, t = tk.table;
  const int64_t rows_t = a.rows[t];
  float *tab = reinterpret_cast<float *>(a.table_grad) + a.row_off[t] * (int64_t)D;
  const int64_t b0 = tk.sample0;
  int64_t lo, hi;
  emb_bag_bounds(a, t, b0, nb, lane, lo, hi);
  for (int j = 0; j < nb; ++j) {
    const int64_t b = b0 + j;
    const int64_t start = __shfl_sync(EMB_FULL_MASK, lo, j), end = __shfl_sync(EMB_FULL_MASK, hi, j);
    if (end == start) continue;
    float gv[NV][VE];
    const float sc = a.scale * ((a.pooling == LOOM_POOL_MEAN) ? 1.f / (float)(end - start) : 1.f);
    const OT *grow = g0 + (b - row0) * stride;
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      const int c = lane + 32 * m;
      if (c < nvec) {
        emb_load_n<OT, VE>(grow + c * VE, gv[m]);
#pragma unroll
        for (int e = 0; e < VE; ++e) gv[m][e] *= sc;
      }
    }
    for (int64_t base = start; base < end; base += 32) {
      const int n = end - base < 32 ? (int)(end - base) : 32;
      int64_t raw, my;
      float w, mw;
      emb_chunk_issue(a, base, n, lane, raw, w);
      emb_chunk_check(a, t, rows_t, b, base, n, lane, raw, w, my, mw);
      for (int u = 0; u < n; ++u) {
        const int64_t ix = __shfl_sync(EMB_FULL_MASK, my, u);
        const float wu = __shfl_sync(EMB_FULL_MASK, mw, u);
        if (ix < 0) continue;
        float *row = tab + ix * (int64_t)D;
#pragma unroll
        for (int m = 0; m < NV; ++m) {
          const int c = lane + 32 * m;
          if (c < nvec) {
            float f[VE];
#pragma unroll
            for (int e = 0; e < VE; ++e) f[e] = wu * gv[m][e];
            emb_atomic_add_f32<VE>(row + c * VE, f);
          }
        }
      }
    }
  }
}

/* ---- end of a call -------------------------------------------------------- */

/* Thread 0 of each block that completed the call: the last block resets the
 * fetch counter misc[which] and the blocks-done count misc[2]; then, if
 * `epoch` is not 0, every block reports to the plan's epoch record (whose
 * last block publishes the epoch). All fetches of this call happened before
 * their block got here. */
static __device__ __forceinline__ void emb_block_done(const loom_emb_kargs_t &a, uint32_t epoch, int which) {
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  __threadfence();
  if (atomicAdd(misc + 2, 1u) + 1u == gridDim.x) {
    misc[which] = 0u;
    misc[2] = 0u;
    __threadfence();
  }
  if (epoch) loom__epoch_block_done((loom_dev_epoch_t *)(a.dc.ws + a.epoch_off), epoch);
}

/* Signal index of word `off` (a byte offset in the workspace) for error
 * records: its place among the plan's signal words. */
static __device__ __forceinline__ uint32_t emb_sig_index(const loom_emb_kargs_t &a, size_t off) {
  return (uint32_t)((off - a.flags_off) / 4);
}

/* Each block: thread p waits for words[p] >= epoch on this rank for peers p =
 * blockIdx.x + gridDim.x * threadIdx.x, ... (a partition of the W words over
 * the grid when every block calls it; `all` 1: every block waits on every
 * word). Returns 0 in every thread if a wait expired in this block. */
static __device__ __forceinline__ int emb_wait_peers(const loom_emb_kargs_t &a, size_t off, uint32_t epoch, uint32_t site,
                                                     int all) {
  const uint32_t *words = (const uint32_t *)(a.dc.ws + off);
  const uint32_t sig0 = emb_sig_index(a, off);
  int ok = 1;
  const int first = all ? (int)threadIdx.x : (int)(blockIdx.x + gridDim.x * threadIdx.x);
  const int step = all ? (int)blockDim.x : (int)(gridDim.x * blockDim.x);
  for (int p = first; p < a.s.world; p += step)
    if (!loom__signal_wait(&a.dc, words + p, epoch, p, sig0 + (uint32_t)p, site)) { ok = 0; break; }
  return __syncthreads_and(ok);
}

#endif /* LOOM_OPS_EMBEDDING_A2A_CUH */
