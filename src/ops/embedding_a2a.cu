/*
 * embedding_a2a.cu - kernels of the fused embedding-bag + All-to-All.
 *
 * Forward (paper 3.2-3.3), one persistent kernel per call:
 *  1. block 0 announces "ready to receive, epoch e" in every peer's ready[me]
 *     (this rank's earlier stream work, e.g. reading the last output, is done);
 *  2. every block fetches logical tasks (dest q, slice j, table t, part p) from
 *     a counter in remote-first order (embedding_schedule.h); before the first
 *     task for q it waits (bounded) for ready[q] >= e;
 *  3. each warp pools one bag at a time: it loads 32 indices (and weights) at
 *     once, then keeps U rows in flight (16-byte loads, U x NV per lane; how
 *     is the tuning's row loop, LOOM_EMB_LOOP_* in embedding_a2a.h),
 *     accumulates in fp32, and stores the pooled vector straight into q's
 *     output through q's LSA address (no staging);
 *  4. after a task, thread 0 fences (system scope) and adds 1 to the slice's
 *     completion counter; the task that completes the slice fences again and
 *     release-stores epoch e into the slice's ready flag on q;
 *  5. when no task is left, block b waits (bounded) on the incoming flags
 *     i with i % G == b, so this rank's output is complete when the kernel
 *     ends. A wait that expires records the timeout and the kernel returns.
 * Pooling alone (pool_only): the same loop over a static task stride, output
 * [B, T*D] in local memory, no flags.
 * Backward: block 0 announces "grad_out readable" (gready); tasks pull the
 * gradient rows of their slice from q's grad_out (LSA loads, after waiting for
 * gready[q]) and scatter-add scale*w*g into table_grad with atomics; the last
 * task for source q tells q it is done reading (gdone); each rank waits for
 * every peer's gdone before the kernel ends, so grad_out may be reused after.
 * Index errors are recorded in a host-mapped record (first one wins) and the
 * row skipped; bad offsets make the bag empty.
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <nccl.h>

#include "core/error.h"
#include "core/signal.cuh"
#include "ops/embedding_a2a.h"

#if defined(__has_include)
#if __has_include(<nccl_device.h>) && NCCL_VERSION_CODE >= 22809
#include <nccl_device.h>
#define LOOM_EMB_HAVE_GIN 1
#endif
#endif
#ifndef LOOM_EMB_HAVE_GIN
#define LOOM_EMB_HAVE_GIN 0
#endif

#define FULL_MASK 0xffffffffu

/* ---- dtype helpers ------------------------------------------------------ */

template <typename T> struct emb_ty;
template <> struct emb_ty<float> { static constexpr int VE = 4; };          /* elements per 16 bytes */
template <> struct emb_ty<__half> { static constexpr int VE = 8; };
template <> struct emb_ty<__nv_bfloat16> { static constexpr int VE = 8; };

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

/* 16 bytes of T -> VE floats. */
template <typename T>
__device__ __forceinline__ void unpack16(const uint4 &v, float *f) {
  const T *e = reinterpret_cast<const T *>(&v);
#pragma unroll
  for (int i = 0; i < emb_ty<T>::VE; ++i) f[i] = to_f<T>(e[i]);
}

/* N elements of T (N * sizeof(T) a multiple of 8) from floats; 8/16-byte stores. */
template <typename T, int N>
__device__ __forceinline__ void store_n(T *dst, const float *f) {
  constexpr int BYTES = N * (int)sizeof(T);
  static_assert(BYTES % 8 == 0, "store granularity");
  __align__(16) T tmp[N];
#pragma unroll
  for (int i = 0; i < N; ++i) tmp[i] = from_f<T>(f[i]);
  if (BYTES % 16 == 0) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; ++k) reinterpret_cast<uint4 *>(dst)[k] = reinterpret_cast<const uint4 *>(tmp)[k];
  } else {
#pragma unroll
    for (int k = 0; k < BYTES / 8; ++k) reinterpret_cast<uint2 *>(dst)[k] = reinterpret_cast<const uint2 *>(tmp)[k];
  }
}

/* N elements of T from (possibly peer) memory, L2 only (never .nc). */
template <typename T, int N>
__device__ __forceinline__ void load_n(const T *src, float *f) {
  constexpr int BYTES = N * (int)sizeof(T);
  __align__(16) T tmp[N];
  if (BYTES % 16 == 0) {
#pragma unroll
    for (int k = 0; k < BYTES / 16; ++k) reinterpret_cast<uint4 *>(tmp)[k] = __ldcg(reinterpret_cast<const uint4 *>(src) + k);
  } else {
#pragma unroll
    for (int k = 0; k < BYTES / 8; ++k) reinterpret_cast<uint2 *>(tmp)[k] = __ldcg(reinterpret_cast<const uint2 *>(src) + k);
  }
#pragma unroll
  for (int i = 0; i < N; ++i) f[i] = to_f<T>(tmp[i]);
}

/* dst[0..N) += f (atomically). */
template <typename T, int N> __device__ __forceinline__ void atomic_add_n(T *dst, const float *f);
template <int N> __device__ __forceinline__ void atomic_add_f32(float *dst, const float *f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#pragma unroll
  for (int i = 0; i < N; i += 4) atomicAdd(reinterpret_cast<float4 *>(dst + i), make_float4(f[i], f[i + 1], f[i + 2], f[i + 3]));
#else
#pragma unroll
  for (int i = 0; i < N; ++i) atomicAdd(dst + i, f[i]);
#endif
}
template <> __device__ __forceinline__ void atomic_add_n<float, 4>(float *d, const float *f) { atomic_add_f32<4>(d, f); }
template <> __device__ __forceinline__ void atomic_add_n<float, 8>(float *d, const float *f) { atomic_add_f32<8>(d, f); }
template <> __device__ __forceinline__ void atomic_add_n<__half, 8>(__half *d, const float *f) {
#pragma unroll
  for (int i = 0; i < 8; i += 2) atomicAdd(reinterpret_cast<__half2 *>(d + i), __floats2half2_rn(f[i], f[i + 1]));
}
template <> __device__ __forceinline__ void atomic_add_n<__nv_bfloat16, 8>(__nv_bfloat16 *d, const float *f) {
#pragma unroll
  for (int i = 0; i < 8; i += 2) atomicAdd(reinterpret_cast<__nv_bfloat162 *>(d + i), __floats2bfloat162_rn(f[i], f[i + 1]));
}

/* ---- error record -------------------------------------------------------- */

static __device__ __noinline__ void emb_record(loom_emb_err_t *e, uint32_t kind, int table, int64_t sample,
                                               int64_t position, int64_t value, int64_t limit) {
  if (*(volatile uint32_t *)&e->claimed || !loom_record_claim(&e->claimed)) return;
  volatile loom_emb_err_t *r = e;
  r->kind = kind;
  r->table = table;
  r->sample = sample;
  r->position = position;
  r->value = value;
  r->limit = limit;
  loom_record_publish(&e->valid);
}

/* ---- workers and the task loop (forward, backward, GIN) -------------------
 * A worker is `group` warps of a block (1, 2, 4 or 8 = the whole block); it
 * takes one task at a time: its lead thread claims the index (from the call's
 * counter, or a static stride for pooling alone), one task ahead so that the
 * claim's latency hides behind the current task, waits (bounded) for the
 * task's destination to be ready before its first task for it, and hands
 * the index to the worker's warps. Each warp of the worker pools (or
 * scatters) the bags i = wi, wi + group, ... of the task. */

typedef struct emb_worker {
  int g, w, wi, nwarps, lead; /* warps per worker, worker in block, warp in worker, warps per block, lead thread */
} emb_worker_t;

static __device__ __forceinline__ emb_worker_t emb_worker(int group) {
  emb_worker_t k;
  k.nwarps = (int)(blockDim.x >> 5);
  k.g = group;
  const int warp = (int)(threadIdx.x >> 5);
  k.w = warp / group;
  k.wi = warp - k.w * group;
  k.lead = k.wi == 0 && (threadIdx.x & 31) == 0;
  return k;
}

static __device__ __forceinline__ void emb_worker_sync(const emb_worker_t &k) {
  if (k.g == 1) __syncwarp();
  else if (k.g == k.nwarps) __syncthreads();
  else asm volatile("bar.sync %0, %1;" ::"r"(1 + k.w), "r"(k.g * 32) : "memory");
}

typedef struct emb_fetch {
  uint32_t *counter;      /* the call's task counter; NULL: static stride */
  int64_t next, stride;   /* static: this worker's next task, and the stride */
  int64_t pref;           /* lead: the task claimed one ahead (-1: none) */
  int prefetch;           /* claim one ahead */
  const uint32_t *ready;  /* ready[q]: rank q may be written/read this call (NULL: no wait) */
  uint32_t sig0, site, epoch;
} emb_fetch_t;

/* A worker's task source: the shared counter (dynamic) or, when counter is
 * NULL, a static stride over the grid's workers; a ready flag per
 * destination rank (ready[q], signal index sig0 + q) that must reach epoch
 * before the first task for q, when ready is not NULL. */
static __device__ __forceinline__ emb_fetch_t emb_fetch_init(const emb_worker_t &wk, uint32_t *counter, int prefetch,
                                                             const uint32_t *ready, uint32_t sig0, uint32_t epoch) {
  emb_fetch_t f;
  const int nwk = wk.nwarps / wk.g;
  f.counter = counter;
  f.next = (int64_t)blockIdx.x * nwk + wk.w;
  f.stride = (int64_t)gridDim.x * nwk;
  f.pref = -1;
  f.prefetch = prefetch;
  f.ready = ready;
  f.sig0 = sig0;
  f.site = LOOM_SITE_CONSUMED;
  f.epoch = epoch;
  return f;
}

static __device__ __forceinline__ int64_t emb_claim(emb_fetch_t &f) {
  if (f.counter) return (int64_t)atomicAdd(f.counter, 1u);
  const int64_t k = f.next;
  f.next += f.stride;
  return k;
}

/* The worker's next task (>= ntasks: none left; -1: a wait expired in this
 * block, stop). Every thread of the worker calls it; there is a worker sync
 * between a call's read of s_task and the next call's write (the caller's
 * sync after its task). */
static __device__ __forceinline__ int64_t emb_next_task(const loom_emb_kargs_t &a, const emb_worker_t &wk,
                                                        emb_fetch_t &f, int64_t ntasks, int64_t *s_task,
                                                        unsigned char *s_ready, volatile int *s_abort) {
  if (wk.lead) {
    int64_t k = f.pref >= 0 ? f.pref : emb_claim(f);
    f.pref = (f.prefetch && k < ntasks) ? emb_claim(f) : -1;
    if (k < ntasks && f.ready) {
      const int q = loom_emb_task_decode(&a.s, k).dest;
      if (!s_ready[q]) {
        if (loom_signal_wait(&a.dc, f.ready + q, f.epoch, q, f.sig0 + (uint32_t)q, f.site)) s_ready[q] = 1;
        else *s_abort = 1;
      }
    }
    if (*s_abort) k = -1;
    s_task[wk.w] = k;
  }
  emb_worker_sync(wk);
  return s_task[wk.w];
}

/* ---- bags of a task (one warp) ---------------------------------------------- */

/* Bounds of this warp's bags of a task: lane j gets [lo, hi) of its j-th bag,
 * sample b0 + g*j of local table t (j < nb). Bad offsets are recorded and
 * the bag treated as empty. */
static __device__ __forceinline__ void emb_bag_bounds(const loom_emb_kargs_t &a, int t, int64_t b0, int g, int nb,
                                                      int lane, int64_t &lo, int64_t &hi) {
  lo = 0;
  hi = 0;
  if (lane < nb) {
    const int64_t b = b0 + (int64_t)g * lane, ob = (int64_t)t * a.s.batch + b;
    const int64_t s0 = a.offsets[ob], e0 = a.offsets[ob + 1];
    if (s0 >= 0 && s0 <= e0 && e0 <= a.num_indices) {
      lo = s0;
      hi = e0;
    } else {
      const int64_t pos = (s0 < 0 || s0 > a.num_indices) ? ob : ob + 1;
      emb_record(a.err, 2u, t, b, pos, pos == ob ? s0 : e0, a.num_indices);
    }
  }
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

/* ---- row loops (LOOM_EMB_LOOP_*, embedding_a2a.h) --------------------------
 * Each adds rows u = 0 .. n-1 of a chunk to acc: row my@u (the index held by
 * lane u; -1: invalid) times weight mw@u, in order, one fmaf per element.
 * Lane chunks c = lane + 32 m (m < NV) of VE elements; U rows per group. */

/* SELECT: a slot that is not live (u >= n or index -1) loads nothing and adds
 * fmaf(0, 0, acc) = acc. */
template <typename TT, int NV, int U>
__device__ __forceinline__ void emb_rows_select(const TT *tab, int D, int nvec, int lane, int n, int64_t my, float mw,
                                                float (&acc)[NV][emb_ty<TT>::VE]) {
  constexpr int VE = emb_ty<TT>::VE;
  for (int u0 = 0; u0 < n; u0 += U) {
    uint4 v[U][NV];
    float w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int src = u0 + u;
      const int64_t ix = __shfl_sync(FULL_MASK, my, src & 31);
      w[u] = __shfl_sync(FULL_MASK, mw, src & 31);
      const bool live = src < n && ix >= 0;
      if (!live) w[u] = 0.f;
      const uint4 *row = reinterpret_cast<const uint4 *>(tab + (live ? ix : 0) * (int64_t)D);
#pragma unroll
      for (int m = 0; m < NV; ++m) {
        const int c = lane + 32 * m;
        v[u][m] = (live && c < nvec) ? __ldg(row + c) : make_uint4(0u, 0u, 0u, 0u);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int m = 0; m < NV; ++m) {
        float f[VE];
        unpack16<TT>(v[u][m], f);
#pragma unroll
        for (int e = 0; e < VE; ++e) acc[m][e] = fmaf(w[u], f[e], acc[m][e]);
      }
  }
}

/* FLAT / PIPE: issue every load of group u0 (a dead slot reads row 0 of the
 * table; chunks past the row read its last chunk: those lanes' sums are never
 * stored), then add the live slots. */
template <typename TT, int NV, int U>
__device__ __forceinline__ void emb_group_issue(const TT *tab, int D, int nvec, int lane, int u0, int n, int64_t my,
                                                float mw, uint4 (&v)[U][NV], float (&w)[U], bool (&live)[U]) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int src = u0 + u;
    const int64_t ix = __shfl_sync(FULL_MASK, my, src & 31);
    w[u] = __shfl_sync(FULL_MASK, mw, src & 31);
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
      unpack16<TT>(v[u][m], f);
#pragma unroll
      for (int e = 0; e < VE; ++e) {
        const float r = fmaf(w[u], f[e], acc[m][e]);
        acc[m][e] = live[u] ? r : acc[m][e];
      }
    }
}

template <typename TT, int NV, int U>
__device__ __forceinline__ void emb_rows_flat(const TT *tab, int D, int nvec, int lane, int n, int64_t my, float mw,
                                              float (&acc)[NV][emb_ty<TT>::VE]) {
  for (int u0 = 0; u0 < n; u0 += U) {
    uint4 v[U][NV];
    float w[U];
    bool live[U];
    emb_group_issue<TT, NV, U>(tab, D, nvec, lane, u0, n, my, mw, v, w, live);
    emb_group_sum<TT, NV, U>(v, w, live, acc);
  }
}

/* Two groups in turn: group k+1's loads go out before group k is added. */
template <typename TT, int NV, int U>
__device__ __forceinline__ void emb_rows_pipe(const TT *tab, int D, int nvec, int lane, int n, int64_t my, float mw,
                                              float (&acc)[NV][emb_ty<TT>::VE]) {
  if (n <= 0) return;
  uint4 va[U][NV], vb[U][NV];
  float wa[U], wb[U];
  bool la[U], lb[U];
  emb_group_issue<TT, NV, U>(tab, D, nvec, lane, 0, n, my, mw, va, wa, la);
  for (int u0 = 0;; u0 += 2 * U) {
    const bool more_b = u0 + U < n;
    if (more_b) emb_group_issue<TT, NV, U>(tab, D, nvec, lane, u0 + U, n, my, mw, vb, wb, lb);
    emb_group_sum<TT, NV, U>(va, wa, la, acc);
    if (!more_b) break;
    const bool more_a = u0 + 2 * U < n;
    if (more_a) emb_group_issue<TT, NV, U>(tab, D, nvec, lane, u0 + 2 * U, n, my, mw, va, wa, la);
    emb_group_sum<TT, NV, U>(vb, wb, lb, acc);
    if (!more_a) break;
  }
}

template <typename TT, int NV, int U, int LOOP>
__device__ __forceinline__ void emb_rows(const TT *tab, int64_t rows_t, int D, int nvec, int lane, int n, int64_t my,
                                         float mw, float (&acc)[NV][emb_ty<TT>::VE]) {
  if (LOOP == LOOM_EMB_LOOP_FLAT) {
    if (rows_t > 0) emb_rows_flat<TT, NV, U>(tab, D, nvec, lane, n, my, mw, acc); /* else no index is valid */
  } else if (LOOP == LOOM_EMB_LOOP_PIPE) {
    if (rows_t > 0) emb_rows_pipe<TT, NV, U>(tab, D, nvec, lane, n, my, mw, acc);
  } else {
    emb_rows_select<TT, NV, U>(tab, D, nvec, lane, n, my, mw, acc);
  }
}

/* A pooled bag from a warp's accumulators (lane's vectors lane + 32 m) to
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
      store_n<OT, VE>(dst + c * VE, f);
    }
  }
}

/* Pools this warp's bags of task tk (bags i = wi, wi + g, ... < tk.count, of
 * local table tk.table) and stores bag b's vector at dst0 + (b - row0) *
 * stride. Lane c-chunks: c = lane + 32 m (m < NV) of VE elements; UR
 * 16-byte row chunks in flight per lane (UR / NV rows per warp); fp32
 * accumulation, row loop LOOP. The next bag's first 32 indices load while
 * this bag's rows are in flight. */
template <typename TT, typename OT, int NV, int UR, int LOOP>
__device__ __forceinline__ void emb_pool_bags(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int wi, int g,
                                              int lane, OT *dst0, int64_t row0, int64_t stride) {
  constexpr int VE = emb_ty<TT>::VE;
  constexpr int U = UR / NV >= 1 ? UR / NV : 1;
  const int nb = tk.count > wi ? (tk.count - wi + g - 1) / g : 0;
  if (nb == 0) return;
  const int D = a.dim, nvec = D / VE, t = tk.table;
  const int64_t rows_t = a.rows[t];
  const TT *tab = reinterpret_cast<const TT *>(a.tables) + a.row_off[t] * (int64_t)D;
  const int64_t b0 = tk.sample0 + wi;
  int64_t lo, hi;
  emb_bag_bounds(a, t, b0, g, nb, lane, lo, hi);
  int64_t my;
  float mw;
  {
    const int64_t s0 = __shfl_sync(FULL_MASK, lo, 0), e0 = __shfl_sync(FULL_MASK, hi, 0);
    const int n0 = e0 - s0 < 32 ? (int)(e0 - s0) : 32;
    int64_t raw;
    float w;
    emb_chunk_issue(a, s0, n0, lane, raw, w);
    emb_chunk_check(a, t, rows_t, b0, s0, n0, lane, raw, w, my, mw);
  }
  for (int j = 0; j < nb; ++j) {
    const int64_t b = b0 + (int64_t)g * j;
    const int64_t start = __shfl_sync(FULL_MASK, lo, j), end = __shfl_sync(FULL_MASK, hi, j);
    /* the next bag's first chunk: in flight during this bag */
    int64_t nraw = -1, nbase = 0;
    float nw = 0.f;
    int nn = 0;
    if (j + 1 < nb) {
      nbase = __shfl_sync(FULL_MASK, lo, j + 1);
      const int64_t ne = __shfl_sync(FULL_MASK, hi, j + 1);
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
      emb_rows<TT, NV, U, LOOP>(tab, rows_t, D, nvec, lane, n, my, mw, acc);
    }
    emb_store_bag<OT, NV, VE>(acc, a.pooling == LOOM_POOL_MEAN ? end - start : 0, dst0 + (b - row0) * stride, lane,
                              nvec);
    if (j + 1 < nb) emb_chunk_check(a, t, rows_t, b + g, nbase, nn, lane, nraw, nw, my, mw);
  }
}

/* LOOP F07: the bag loop of f07cc73 (= 067e3da) over this warp's bags of
 * task tk: per bag, every lane loads the bag's offsets, then a chunk's
 * indices (and weights), then SELECT rows; nothing of the next bag is in
 * flight meanwhile. Same sums and stores as emb_pool_bags. */
template <typename TT, typename OT, int NV, int UR>
__device__ __forceinline__ void emb_pool_bags_f07(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int wi, int g,
                                                  int lane, OT *dst0, int64_t row0, int64_t stride) {
  constexpr int VE = emb_ty<TT>::VE;
  constexpr int U = UR / NV >= 1 ? UR / NV : 1;
  const int D = a.dim, nvec = D / VE, t = tk.table;
  const int64_t rows_t = a.rows[t];
  const TT *__restrict__ tab = reinterpret_cast<const TT *>(a.tables) + a.row_off[t] * (int64_t)D;
  for (int i = wi; i < tk.count; i += g) {
    const int64_t b = tk.sample0 + i;
    float acc[NV][VE];
#pragma unroll
    for (int m = 0; m < NV; ++m)
#pragma unroll
      for (int e = 0; e < VE; ++e) acc[m][e] = 0.f;
    const int64_t ob = (int64_t)t * a.s.batch + b;
    int64_t start = a.offsets[ob], end = a.offsets[ob + 1];
    if (!(start >= 0 && start <= end && end <= a.num_indices)) {
      if (lane == 0) {
        const int64_t pos = (start < 0 || start > a.num_indices) ? ob : ob + 1;
        emb_record(a.err, 2u, t, b, pos, pos == ob ? start : end, a.num_indices);
      }
      start = end = 0;
    }
    for (int64_t base = start; base < end; base += 32) {
      const int n = end - base < 32 ? (int)(end - base) : 32;
      int64_t raw, my;
      float w, mw;
      emb_chunk_issue(a, base, n, lane, raw, w);
      emb_chunk_check(a, t, rows_t, b, base, n, lane, raw, w, my, mw);
      emb_rows_select<TT, NV, U>(tab, D, nvec, lane, n, my, mw, acc);
    }
    emb_store_bag<OT, NV, VE>(acc, a.pooling == LOOM_POOL_MEAN ? end - start : 0, dst0 + (b - row0) * stride, lane,
                              nvec);
  }
}

/* The forward's bags of a task with the tuning's loop. */
template <typename TT, typename OT, int NV, int UR, int LOOP>
__device__ __forceinline__ void emb_pool_task(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int wi, int g,
                                              int lane, OT *dst0, int64_t row0, int64_t stride) {
  if (LOOP == LOOM_EMB_LOOP_F07) emb_pool_bags_f07<TT, OT, NV, UR>(a, tk, wi, g, lane, dst0, row0, stride);
  else emb_pool_bags<TT, OT, NV, UR, LOOP>(a, tk, wi, g, lane, dst0, row0, stride);
}

/* Scatter-adds this warp's bags of task tk: for each bag b and each index
 * ix of it, table_grad[ix] += scale * w * (mean ? 1/len : 1) * grad row of b,
 * the grad row at g0 + (b - row0) * stride. */
template <typename TT, typename OT, int NV>
__device__ __forceinline__ void emb_scatter_bags(const loom_emb_kargs_t &a, const loom_emb_task_t &tk, int wi, int g,
                                                 int lane, const OT *g0, int64_t row0, int64_t stride) {
  constexpr int VE = emb_ty<TT>::VE;
  const int nb = tk.count > wi ? (tk.count - wi + g - 1) / g : 0;
  if (nb == 0) return;
  const int D = a.dim, nvec = D / VE, t = tk.table;
  const int64_t rows_t = a.rows[t];
  TT *tab = reinterpret_cast<TT *>(a.table_grad) + a.row_off[t] * (int64_t)D;
  const int64_t b0 = tk.sample0 + wi;
  int64_t lo, hi;
  emb_bag_bounds(a, t, b0, g, nb, lane, lo, hi);
  for (int j = 0; j < nb; ++j) {
    const int64_t b = b0 + (int64_t)g * j;
    const int64_t start = __shfl_sync(FULL_MASK, lo, j), end = __shfl_sync(FULL_MASK, hi, j);
    if (end == start) continue;
    float gv[NV][VE];
    const float sc = a.scale * ((a.pooling == LOOM_POOL_MEAN) ? 1.f / (float)(end - start) : 1.f);
    const OT *grow = g0 + (b - row0) * stride;
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      const int c = lane + 32 * m;
      if (c < nvec) {
        load_n<OT, VE>(grow + c * VE, gv[m]);
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
        const int64_t ix = __shfl_sync(FULL_MASK, my, u);
        const float wu = __shfl_sync(FULL_MASK, mw, u);
        if (ix < 0) continue;
        TT *row = tab + ix * (int64_t)D;
#pragma unroll
        for (int m = 0; m < NV; ++m) {
          const int c = lane + 32 * m;
          if (c < nvec) {
            float f[VE];
#pragma unroll
            for (int e = 0; e < VE; ++e) f[e] = wu * gv[m][e];
            atomic_add_n<TT, VE>(row + c * VE, f);
          }
        }
      }
    }
  }
}

/* ---- end of a call -------------------------------------------------------- */

/* Thread 0 of each block that completed the call: the last block resets the
 * fetch counter `which` and the blocks-done count; then, if `epoch` is not
 * 0, every block reports to the plan's epoch record (whose last block
 * publishes the epoch). All fetches of this call happened before their
 * block got here. */
static __device__ __forceinline__ void emb_block_done(const loom_emb_kargs_t &a, uint32_t epoch, int which) {
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  __threadfence();
  if (atomicAdd(misc + 2, 1u) + 1u == gridDim.x) {
    misc[which] = 0u;
    misc[2] = 0u;
    __threadfence();
  }
  if (epoch) loom_epoch_block_done((loom_dev_epoch_t *)(a.dc.ws + a.epoch_off), epoch);
}

/* ---- forward ------------------------------------------------------------- */

/* Registers are capped for 2 blocks (16 warps) per SM (MINB 2: 128 per
 * thread); MINB 1 leaves them to ptxas (V_NOCAP, loop F07). */
#define LOOM_EMB_MIN_BLOCKS 2

template <typename TT, typename OT, int NV, int UR, int LOOP, int MINB>
__global__ void __launch_bounds__(LOOM_EMB_THREADS, MINB)
    loom__emb_fwd_kernel(const __grid_constant__ loom_emb_kargs_t a) {
  __shared__ int64_t s_task[LOOM_EMB_THREADS / 32];
  __shared__ int s_abort;
  __shared__ unsigned char s_ready[LOOM_EMB_MAX_LSA];
  const loom_emb_sched_t &s = a.s;
  const emb_worker_t wk = emb_worker(a.group);
  const int lane = threadIdx.x & 31;
  const int D = a.dim;
  const int comm = !a.pool_only;
  const int count = comm && !(a.variant & LOOM_EMB_V_NOCOUNT);          /* completion counters and flags */
  const int wait_in = count && !(a.variant & LOOM_EMB_V_NOWAIT);        /* exit waits on incoming flags */
  const int dyn = comm || (a.variant & LOOM_EMB_V_DYNFETCH);
  const int64_t ntasks = loom_emb_num_tasks(&s);
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  const uint32_t epoch = comm ? loom_epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off)) : 0u;

  if (threadIdx.x == 0) s_abort = 0;
  for (int p = threadIdx.x; p < LOOM_EMB_MAX_LSA; p += blockDim.x) s_ready[p] = (p == s.rank);
  if (comm && blockIdx.x == 0)
    for (int p = threadIdx.x; p < s.world; p += blockDim.x)
      loom_signal_store_release(loom_signal_addr(&a.dc, p, a.ready_off, (uint32_t)s.rank), epoch);
  __syncthreads();

  emb_fetch_t f = emb_fetch_init(wk, dyn ? misc : nullptr, !(a.variant & LOOM_EMB_V_NOPREFETCH),
                                 comm ? (const uint32_t *)(a.dc.ws + a.ready_off) : nullptr,
                                 (uint32_t)((a.ready_off - a.flags_off) / 4), epoch);
  for (;;) {
    const int64_t k = emb_next_task(a, wk, f, ntasks, s_task, s_ready, &s_abort);
    if (k < 0 || k >= ntasks) break;
    const loom_emb_task_t tk = loom_emb_task_decode(&s, k);
    const int t = tk.table;
    /* pooling alone: out [B, T*D] here; fused: q's out [Bl, T_total*D] (one
     * inlined copy of the bag loop for both) */
    OT *dst0 = comm ? reinterpret_cast<OT *>(a.peer[tk.dest]) + (int64_t)(s.table_base + t) * D
                    : reinterpret_cast<OT *>(a.peer[0]) + (int64_t)t * D;
    const int64_t row0 = comm ? (int64_t)tk.dest * s.local_batch : 0;
    const int64_t stride = (int64_t)(comm ? s.t_total : s.t_local) * D;
    emb_pool_task<TT, OT, NV, UR, LOOP>(a, tk, wk.wi, wk.g, lane, dst0, row0, stride);
    emb_worker_sync(wk);
    if (count && wk.lead) {
      __threadfence_system(); /* the worker's stores (to q) before the count */
      uint32_t *ctr = (uint32_t *)(a.dc.ws + a.counters_off) + loom_emb_counter_index(&s, t, tk.dest, tk.slice);
      if (atomicAdd(ctr, 1u) + 1u == loom_emb_counter_target(&s)) {
        *ctr = 0u;              /* nobody else touches it again in this call */
        __threadfence_system(); /* every counted worker's stores before the flag */
        loom_signal_store_release(
            loom_signal_addr(&a.dc, tk.dest, a.flags_off, loom_emb_flag_index(&s, s.table_base, t, tk.slice)), epoch);
      }
    }
  }
  if (!__syncthreads_and(!s_abort)) return;
  if (!comm) {
    if (dyn && threadIdx.x == 0) emb_block_done(a, 0u, 0);
    return;
  }
  /* this block's share of the incoming flags */
  int ok = 1;
  if (wait_in) {
    const uint32_t nf = loom_emb_num_flags(&s);
    const uint32_t *flags = (const uint32_t *)(a.dc.ws + a.flags_off);
    for (uint32_t i = blockIdx.x + gridDim.x * threadIdx.x; i < nf; i += gridDim.x * blockDim.x)
      if (!loom_signal_wait(&a.dc, flags + i, epoch, -1, i, LOOM_SITE_EMB_SLICE_READY)) { ok = 0; break; }
  }
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 0);
}

/* ---- backward ------------------------------------------------------------ */

/* Fused (pool_only 0): block 0 announces "grad_out readable" (gready);
 * tasks pull their gradient rows from q's grad_out (LSA loads, after the
 * bounded wait for gready[q]) and scatter-add into table_grad; the last task
 * for source q tells q it is done reading (gdone); the kernel ends after
 * every peer's gdone. Local (pool_only 1, the staged path): grad rows from
 * peer[0] laid out [B, T*D] (what NCCL delivered), static stride, no signals. */
template <typename TT, typename OT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS, LOOM_EMB_MIN_BLOCKS) loom__emb_bwd_kernel(const __grid_constant__ loom_emb_kargs_t a) {
  __shared__ int64_t s_task[LOOM_EMB_THREADS / 32];
  __shared__ int s_abort;
  __shared__ unsigned char s_ready[LOOM_EMB_MAX_LSA];
  const loom_emb_sched_t &s = a.s;
  const emb_worker_t wk = emb_worker(a.group);
  const int lane = threadIdx.x & 31;
  const int D = a.dim;
  const int comm = !a.pool_only;
  const int64_t ntasks = loom_emb_num_tasks(&s), per_dest = loom_emb_tasks_per_dest(&s);
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  const uint32_t epoch = comm ? loom_epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off)) : 0u;

  if (threadIdx.x == 0) s_abort = 0;
  for (int p = threadIdx.x; p < LOOM_EMB_MAX_LSA; p += blockDim.x) s_ready[p] = (p == s.rank);
  if (comm && blockIdx.x == 0) {
    __threadfence_system();
    for (int p = threadIdx.x; p < s.world; p += blockDim.x) {
      loom_signal_store_release(loom_signal_addr(&a.dc, p, a.gready_off, (uint32_t)s.rank), epoch);
      if (per_dest == 0) /* nothing to read from anyone: done at once */
        loom_signal_store_release(loom_signal_addr(&a.dc, p, a.gdone_off, (uint32_t)s.rank), epoch);
    }
  }
  __syncthreads();

  emb_fetch_t f = emb_fetch_init(wk, comm ? misc + 1 : nullptr, !(a.variant & LOOM_EMB_V_NOPREFETCH),
                                 comm ? (const uint32_t *)(a.dc.ws + a.gready_off) : nullptr,
                                 (uint32_t)((a.gready_off - a.flags_off) / 4), epoch);
  for (;;) {
    const int64_t k = emb_next_task(a, wk, f, ntasks, s_task, s_ready, &s_abort);
    if (k < 0 || k >= ntasks) break;
    const loom_emb_task_t tk = loom_emb_task_decode(&s, k);
    const int t = tk.table;
    if (!comm)
      emb_scatter_bags<TT, OT, NV>(a, tk, wk.wi, wk.g, lane, reinterpret_cast<const OT *>(a.peer[0]) + (int64_t)t * D,
                                   0, (int64_t)s.t_local * D);
    else
      emb_scatter_bags<TT, OT, NV>(a, tk, wk.wi, wk.g, lane,
                                   reinterpret_cast<const OT *>(a.peer[tk.dest]) + (int64_t)(s.table_base + t) * D,
                                   (int64_t)tk.dest * s.local_batch, (int64_t)s.t_total * D);
    emb_worker_sync(wk);
    if (comm && wk.lead) {
      __threadfence_system(); /* loads from q are done (their values were used) */
      uint32_t *cnt = (uint32_t *)(a.dc.ws + a.bcount_off) + tk.dest;
      if (atomicAdd(cnt, 1u) + 1u == (uint32_t)per_dest) {
        *cnt = 0u;
        loom_signal_store_release(loom_signal_addr(&a.dc, tk.dest, a.gdone_off, (uint32_t)s.rank), epoch);
      }
    }
  }
  if (!__syncthreads_and(!s_abort)) return;
  if (!comm) return;
  /* nobody reads this rank's grad_out once every peer said so */
  const uint32_t done0 = (uint32_t)((a.gdone_off - a.flags_off) / 4);
  const uint32_t *done = (const uint32_t *)(a.dc.ws + a.gdone_off);
  int ok = 1;
  for (int p = blockIdx.x + gridDim.x * threadIdx.x; p < s.world; p += gridDim.x * blockDim.x)
    if (!loom_signal_wait(&a.dc, done + p, epoch, p, done0 + (uint32_t)p, LOOM_SITE_CONSUMED)) { ok = 0; break; }
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 1);
}

/* ---- GIN forward (compiled, never run: no multi-node machine) -------------
 * Slices for ranks outside the NVLink domain are pooled into this rank's
 * staging window ([q][t][Bl][D], embedding_schedule.h) and the worker that
 * completes such a slice puts its rows into q's output window, the last put
 * carrying SignalAdd(+1) on signal flag_index at q. Incoming remote slices
 * are waited for on the GIN signals (bounded by polling readSignal). Ranks
 * inside the NVLink domain are handled zero-copy as in the LSA kernel. */
#if LOOM_EMB_HAVE_GIN
typedef struct loom_emb_gin_args {
  ncclWindow_t out_win, stage_win;
  size_t out_win_off;            /* offset of `out` inside out_win */
  char *stage;                   /* local staging base */
} loom_emb_gin_args_t;

template <typename TT, typename OT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS)
    loom__emb_fwd_gin_kernel(const __grid_constant__ loom_emb_kargs_t a, const __grid_constant__ ncclDevComm dcomm,
                             const __grid_constant__ loom_emb_gin_args_t g) {
  __shared__ int64_t s_task[LOOM_EMB_THREADS / 32];
  __shared__ int s_abort;
  __shared__ unsigned char s_ready[LOOM_EMB_MAX_LSA];
  const loom_emb_sched_t &s = a.s;
  const emb_worker_t wk = emb_worker(a.group);
  const int lane = threadIdx.x & 31;
  const int D = a.dim;
  const int64_t ntasks = loom_emb_num_tasks(&s);
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  const uint32_t epoch = loom_epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off));
  ncclGin gin(dcomm, 0);
  const ncclTeam world = ncclTeamWorld(dcomm);
  if (threadIdx.x == 0) s_abort = 0;
  __syncthreads();
  emb_fetch_t f = emb_fetch_init(wk, misc, 1, nullptr, 0, epoch);
  for (;;) {
    const int64_t k = emb_next_task(a, wk, f, ntasks, s_task, s_ready, &s_abort);
    if (k < 0 || k >= ntasks) break;
    const loom_emb_task_t tk = loom_emb_task_decode(&s, k);
    const int t = tk.table;
    const bool lsa = a.peer[tk.dest] != nullptr;
    const int64_t row0 = (int64_t)tk.dest * s.local_batch;
    if (lsa)
      emb_pool_bags<TT, OT, NV, 8, LOOM_EMB_LOOP_SELECT>(
          a, tk, wk.wi, wk.g, lane, reinterpret_cast<OT *>(a.peer[tk.dest]) + (int64_t)(s.table_base + t) * D, row0,
          (int64_t)s.t_total * D);
    else
      emb_pool_bags<TT, OT, NV, 8, LOOM_EMB_LOOP_SELECT>(
          a, tk, wk.wi, wk.g, lane,
          reinterpret_cast<OT *>(g.stage) + loom_emb_gin_stage_offset(&s, tk.dest, t, row0, D), row0, D);
    emb_worker_sync(wk);
    if (wk.lead) {
      __threadfence_system();
      uint32_t *ctr = (uint32_t *)(a.dc.ws + a.counters_off) + loom_emb_counter_index(&s, t, tk.dest, tk.slice);
      if (atomicAdd(ctr, 1u) + 1u == loom_emb_counter_target(&s)) {
        *ctr = 0u;
        __threadfence_system();
        const uint32_t fi = loom_emb_flag_index(&s, s.table_base, t, tk.slice);
        if (lsa) {
          loom_signal_store_release(loom_signal_addr(&a.dc, tk.dest, a.flags_off, fi), epoch);
        } else {
          const int rows = loom_emb_slice_rows(&s, tk.slice);
          const size_t rb = (size_t)D * sizeof(OT);
          for (int i = 0; i < rows; ++i) {
            const int64_t b = (int64_t)tk.dest * s.local_batch + (int64_t)tk.slice * s.slice + i;
            const size_t dst = g.out_win_off + (size_t)loom_emb_out_offset(&s, s.table_base, t, b, D) * sizeof(OT);
            const size_t src = (size_t)loom_emb_gin_stage_offset(&s, tk.dest, t, b, D) * sizeof(OT);
            if (i + 1 < rows) gin.put(world, tk.dest, g.out_win, dst, g.stage_win, src, rb);
            else gin.put(world, tk.dest, g.out_win, dst, g.stage_win, src, rb, ncclGin_SignalAdd{(ncclGinSignal_t)fi, 1});
          }
        }
      }
    }
  }
  if (!__syncthreads_and(!s_abort)) return;
  /* incoming: LSA sources set flags, network sources GIN signals (both
   * indexed by flag_index); bounded polls */
  const uint32_t nf = loom_emb_num_flags(&s);
  const uint32_t *flags = (const uint32_t *)(a.dc.ws + a.flags_off);
  int ok = 1;
  for (uint32_t i = blockIdx.x + gridDim.x * threadIdx.x; ok && i < nf; i += gridDim.x * blockDim.x) {
    if (loom_epoch_reached(loom_signal_load_acquire(flags + i), epoch)) continue; /* an NVLink source */
    /* a network source: one more put signal than last call */
    uint64_t *shadow = gin.getSignalShadowPtr((ncclGinSignal_t)i);
    const uint64_t target = loom_emb_gin_signal_target(*shadow);
    *shadow = target;
    const uint64_t t0 = loom_globaltimer_ns();
    for (;;) {
      if (gin.readSignal((ncclGinSignal_t)i) >= target) break;
      if (loom_epoch_reached(loom_signal_load_acquire(flags + i), epoch)) break;
      if (*(volatile uint32_t *)a.dc.abort_flag) { ok = 0; break; }
      const uint64_t waited = loom_globaltimer_ns() - t0;
      if (waited > a.dc.timeout_ns) {
        loom_signal_record_timeout(&a.dc, -1, i, epoch, 0, LOOM_SITE_EMB_SLICE_READY, waited);
        ok = 0;
        break;
      }
    }
  }
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 0);
}
#endif

/* ---- launchers ----------------------------------------------------------- */

typedef void (*emb_kernel_t)(loom_emb_kargs_t);

/* Kernel kinds: forward row loop x rows in flight x register cap
 * (FWD_*), and the backward. */
enum {
  FWD_SELECT8,      /* the default: SELECT, unroll 8, capped */
  FWD_SELECT16,     /* SELECT, unroll 16, capped */
  FWD_SELECT8_NOCAP,
  FWD_FLAT8,
  FWD_FLAT16,
  FWD_PIPE8,
  FWD_F07,          /* f07cc73's bag loop, unroll 8, no cap (as f07cc73) */
  BWD
};

template <typename TT, typename OT, int NV>
static emb_kernel_t pick_kind(int kind) {
  switch (kind) {
    case FWD_SELECT8: return loom__emb_fwd_kernel<TT, OT, NV, 8, LOOM_EMB_LOOP_SELECT, LOOM_EMB_MIN_BLOCKS>;
    case FWD_SELECT16: return loom__emb_fwd_kernel<TT, OT, NV, 16, LOOM_EMB_LOOP_SELECT, LOOM_EMB_MIN_BLOCKS>;
    case FWD_SELECT8_NOCAP: return loom__emb_fwd_kernel<TT, OT, NV, 8, LOOM_EMB_LOOP_SELECT, 1>;
    case FWD_FLAT8: return loom__emb_fwd_kernel<TT, OT, NV, 8, LOOM_EMB_LOOP_FLAT, LOOM_EMB_MIN_BLOCKS>;
    case FWD_FLAT16: return loom__emb_fwd_kernel<TT, OT, NV, 16, LOOM_EMB_LOOP_FLAT, LOOM_EMB_MIN_BLOCKS>;
    case FWD_PIPE8: return loom__emb_fwd_kernel<TT, OT, NV, 8, LOOM_EMB_LOOP_PIPE, LOOM_EMB_MIN_BLOCKS>;
    case FWD_F07: return loom__emb_fwd_kernel<TT, OT, NV, 8, LOOM_EMB_LOOP_F07, 1>;
    default: return loom__emb_bwd_kernel<TT, OT, NV>;
  }
}

template <typename TT, typename OT>
static emb_kernel_t pick(int nv, int kind) {
  switch (nv) {
    case 1: return pick_kind<TT, OT, 1>(kind);
    case 2: return pick_kind<TT, OT, 2>(kind);
    case 4: return pick_kind<TT, OT, 4>(kind);
    default: return pick_kind<TT, OT, 8>(kind);
  }
}

template <typename TT>
static emb_kernel_t pick_out(loom_dtype_t ot, int nv, int kind) {
  switch (ot) {
    case LOOM_FP16: return pick<TT, __half>(nv, kind);
    case LOOM_BF16: return pick<TT, __nv_bfloat16>(nv, kind);
    default: return pick<TT, float>(nv, kind);
  }
}

/* The kernel for these dtypes and dim: NV = 16-byte chunks per lane. */
static emb_kernel_t kernel_for(loom_dtype_t tt, loom_dtype_t ot, int dim, int kind) {
  const int ve = tt == LOOM_FP32 ? 4 : 8;
  const int chunks = (dim / ve + 31) / 32;
  const int nv = chunks <= 1 ? 1 : chunks <= 2 ? 2 : chunks <= 4 ? 4 : 8;
  switch (tt) {
    case LOOM_FP16: return pick_out<__half>(ot, nv, kind);
    case LOOM_BF16: return pick_out<__nv_bfloat16>(ot, nv, kind);
    default: return pick_out<float>(ot, nv, kind);
  }
}

/* The forward kind of a tuning (loom__emb_check_tuning admits only these
 * combinations; anything else falls back to the default kind). */
static int fwd_kind(const loom_emb_tuning_t *t) {
  const int u16 = t->unroll >= 16;
  switch (t->loop) {
    case LOOM_EMB_LOOP_FLAT: return u16 ? FWD_FLAT16 : FWD_FLAT8;
    case LOOM_EMB_LOOP_PIPE: return FWD_PIPE8;
    case LOOM_EMB_LOOP_F07: return FWD_F07;
    default:
      if (u16) return FWD_SELECT16;
      return (t->variant & LOOM_EMB_V_NOCAP) ? FWD_SELECT8_NOCAP : FWD_SELECT8;
  }
}

extern "C" loom_result_t loom__emb_occupancy(loom_dtype_t tt, loom_dtype_t ot, int dim, const loom_emb_tuning_t *t,
                                             int *blocks_per_sm) {
  emb_kernel_t k = kernel_for(tt, ot, dim, fwd_kind(t));
  LOOM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, k, LOOM_EMB_THREADS, 0));
  if (*blocks_per_sm < 1) *blocks_per_sm = 1;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_forward_regs(loom_dtype_t tt, loom_dtype_t ot, int dim, const loom_emb_tuning_t *t,
                                                int *regs, int *local_bytes) {
  struct cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, kernel_for(tt, ot, dim, fwd_kind(t))));
  *regs = fa.numRegs;
  *local_bytes = (int)fa.localSizeBytes;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_launch_forward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot,
                                                  const loom_emb_tuning_t *t, int grid, cudaStream_t stream) {
  emb_kernel_t k = kernel_for(tt, ot, a->dim, fwd_kind(t));
  k<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__emb_fwd_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_launch_backward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot, int grid,
                                                   cudaStream_t stream) {
  emb_kernel_t k = kernel_for(tt, ot, a->dim, BWD);
  k<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__emb_bwd_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_launch_reorder(void *recv, void *out, const int *tables_per_rank,
                                                  const int *table_base, int world, int64_t local_batch, int dim,
                                                  size_t elem, int to_out, cudaStream_t stream) {
  const size_t pitch = (size_t)table_base[world] * (size_t)dim * elem;
  size_t roff = 0;
  for (int p = 0; p < world; ++p) {
    const size_t width = (size_t)tables_per_rank[p] * (size_t)dim * elem;
    if (width == 0) continue;
    char *o = (char *)out + (size_t)table_base[p] * (size_t)dim * elem, *r = (char *)recv + roff;
    if (to_out)
      LOOM_CUDA(cudaMemcpy2DAsync(o, pitch, r, width, width, (size_t)local_batch, cudaMemcpyDeviceToDevice, stream));
    else
      LOOM_CUDA(cudaMemcpy2DAsync(r, width, o, pitch, width, (size_t)local_batch, cudaMemcpyDeviceToDevice, stream));
    roff += width * (size_t)local_batch;
  }
  return LOOM_SUCCESS;
}

#if LOOM_EMB_HAVE_GIN
/* Not reached from the host yet (see embedding_a2a.c); referenced here so the
 * GIN kernel is instantiated and compiled for every build. */
extern "C" loom_result_t loom__emb_launch_forward_gin(const loom_emb_kargs_t *a, const void *devcomm,
                                                      ncclWindow_t out_win, size_t out_win_off, ncclWindow_t stage_win,
                                                      void *stage, int grid, cudaStream_t stream) {
  loom_emb_gin_args_t g;
  g.out_win = out_win;
  g.stage_win = stage_win;
  g.out_win_off = out_win_off;
  g.stage = (char *)stage;
  loom__emb_fwd_gin_kernel<float, float, 2><<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a, *(const ncclDevComm *)devcomm, g);
  LOOM_CUDA_LAUNCHED("loom__emb_fwd_gin_kernel");
  return LOOM_SUCCESS;
}
#endif

extern "C" loom_result_t loom__emb_gin_probe(ncclComm_t nccl, int signals, int *supported, void **devcomm) {
  *supported = 0;
  *devcomm = NULL;
#if LOOM_EMB_HAVE_GIN
  ncclDevComm *dc = (ncclDevComm *)calloc(1, sizeof(ncclDevComm));
  if (!dc) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "host allocation of a GIN device comm failed");
  ncclDevCommRequirements_t reqs;
  memset(&reqs, 0, sizeof reqs);
  reqs.lsaMultimem = false; /* never NVLink multicast */
  reqs.ginContextCount = 1;
  reqs.ginSignalCount = signals;
  ncclResult_t n = ncclDevCommCreate(nccl, &reqs, dc);
  if (n == ncclSuccess && dc->ginContextCount > 0) {
    *supported = 1;
    *devcomm = dc;
    return LOOM_SUCCESS;
  }
  if (n == ncclSuccess) ncclDevCommDestroy(nccl, dc);
  free(dc);
#else
  (void)nccl;
  (void)signals;
#endif
  return LOOM_SUCCESS;
}

extern "C" void loom__emb_gin_release(ncclComm_t nccl, void *devcomm) {
#if LOOM_EMB_HAVE_GIN
  if (devcomm) {
    ncclDevCommDestroy(nccl, (ncclDevComm *)devcomm);
    free(devcomm);
  }
#else
  (void)nccl;
  (void)devcomm;
#endif
}
