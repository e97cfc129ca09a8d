/*
 * embedding_a2a_sorted.cu - the sorted backward of the fused embedding-bag +
 * All-to-All: every table row's gradient summed in fp32 and added to
 * table_grad once, without atomics (the scheme and the run bookkeeping are
 * in embedding_schedule.h, "sorted backward"). The path of fp16/bf16 tables,
 * where atomics in the table's dtype would round at every addition.
 *
 * One call, four steps on the stream (scratch from the plan's memory pool,
 * allocated and freed stream-ordered, so the call can be captured):
 *  keys     warp per bag (t, b) of this rank's tables over the global batch:
 *           keys[p] = row_off[t] + indices[p] (LOOM_EMB_NO_ROW if outside
 *           the table: recorded, skipped), pos[p] = p, meta[p] = where bag
 *           b's gradient row lies (rank q, element offset) and its
 *           coefficient scale * w_p (/ bag length for mean). Fused: block 0
 *           first announces "grad_out readable" (gready) to every peer.
 *  sort     CUB radix sort of (keys, pos) over the bits rows need (stable).
 *  runs     warp per chunk of LOOM_EMB_RUN_CHUNK sorted positions: each run
 *           of one row summed in fp32 (U rows of gradient in flight per
 *           lane, loaded from q's grad_out through its LSA address, or from
 *           the staged buffer); a run inside the chunk is added to
 *           table_grad (one rounding), a run crossing the chunk's edge leaves
 *           a partial. Fused: every block first waits (bounded) for every
 *           peer's gready; the last block to finish tells every peer it is
 *           done reading its grad_out (gdone).
 *  heads    warp per chunk holding a run's head piece: head + the FIRST
 *           partials of the chunks the run reaches, added to table_grad
 *           once. Fused: then every block waits for its share of the
 *           peers' gdone (so grad_out may be reused after the call) and the
 *           last block publishes the call's epoch.
 * Memory per call: n x (4 + 4 keys, 4 + 4 positions, 16 meta) bytes + 2 x D
 * x 4 bytes per chunk of 256 positions + CUB's temporary storage
 * (loom__emb_sorted_scratch_bytes); time: the sort (about 3 passes of
 * 16 bytes per index at 23 key bits) on top of the gradient reads.
 */
#include <cuda_runtime.h>
#include <cub/device/device_radix_sort.cuh>

#include "core/error.h"
#include "core/util.h"
#include "ops/embedding/embedding_a2a.cuh"

/* Per position: where its bag's gradient row lies and its coefficient. */
typedef struct emb_meta {
  int64_t goff;                  /* element offset of the gradient row in peer[q] */
  int32_t q;                     /* rank whose grad_out holds it (0 on the staged path) */
  float coef;                    /* scale x weight (/ bag length for mean) */
} emb_meta_t;

typedef struct emb_sorted {
  uint32_t *keys, *pos;          /* [n]: the keys kernel's output, then the sorted ones */
  emb_meta_t *meta;              /* [n] by position */
  float *partial;                /* [chunks][2][D]: FIRST, LAST pieces */
  int64_t n, nchunks, rows;      /* positions, chunks, rows of this rank's tables */
} emb_sorted_t;

/* ---- keys ------------------------------------------------------------------ */

__global__ void __launch_bounds__(LOOM_EMB_THREADS) loom__emb_bwd_keys_kernel(const __grid_constant__ loom_emb_kargs_t a,
                                                                              const __grid_constant__ emb_sorted_t so) {
  const loom_emb_sched_t &s = a.s;
  const int lane = threadIdx.x & 31, D = a.dim;
  const int comm = !a.pool_only;
  if (comm && blockIdx.x == 0) {
    const uint32_t epoch = loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off));
    __threadfence_system();
    for (int p = threadIdx.x; p < s.world; p += blockDim.x)
      loom__signal_store_release(loom_signal_addr(&a.dc, p, a.gready_off, (uint32_t)s.rank), epoch);
  }
  const int64_t nbags = (int64_t)s.t_local * s.batch;
  const int64_t nwarps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t g = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); g < nbags; g += nwarps) {
    const int t = (int)(g / s.batch);
    const int64_t b = g - (int64_t)t * s.batch;
    int64_t lo = 0, hi = 0;
    if (lane == 0) emb_bag_range(a, t, b, lo, hi);
    lo = __shfl_sync(EMB_FULL_MASK, lo, 0);
    hi = __shfl_sync(EMB_FULL_MASK, hi, 0);
    if (hi == lo) continue;
    const int64_t rows_t = a.rows[t], roff = a.row_off[t];
    emb_meta_t m;
    m.q = comm ? (int32_t)(b / s.local_batch) : 0;
    m.goff = comm ? loom__emb_out_offset(&s, s.table_base, t, b, D) : b * (int64_t)s.t_local * D + (int64_t)t * D;
    const float sc = a.scale * (a.pooling == LOOM_POOL_MEAN ? 1.f / (float)(hi - lo) : 1.f);
    for (int64_t p = lo + lane; p < hi; p += 32) {
      const int64_t ix = a.indices[p];
      uint32_t key = LOOM_EMB_NO_ROW;
      if (ix >= 0 && ix < rows_t) key = (uint32_t)(roff + ix);
      else emb_record(a.err, 1u, t, b, p, ix, rows_t);
      m.coef = sc * (a.weighted ? a.weights[p] : 1.f);
      so.keys[p] = key;
      so.pos[p] = (uint32_t)p;
      so.meta[p] = m;
    }
  }
}

/* ---- runs -------------------------------------------------------------------- */

/* Adds a run's fp32 sum where loom__emb_piece_dest says: table_grad row `key`
 * (one rounding to TT) or one of chunk c's partials. */
template <typename TT, int NV>
__device__ __forceinline__ void emb_run_put(const emb_sorted_t &so, TT *tg, int dest, uint32_t key, int64_t c,
                                            const float (&acc)[NV][emb_ty<TT>::VE], int D, int nvec, int lane) {
  constexpr int VE = emb_ty<TT>::VE;
  if (dest == LOOM_EMB_PIECE_WRITE) {
    TT *row = tg + (int64_t)key * D;
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      const int ch = lane + 32 * m;
      if (ch < nvec) {
        float f[VE];
        emb_unpack16<TT>(*reinterpret_cast<const uint4 *>(row + ch * VE), f);
#pragma unroll
        for (int e = 0; e < VE; ++e) f[e] += acc[m][e];
        emb_store_n<TT, VE>(row + ch * VE, f);
      }
    }
  } else {
    float *p = so.partial + (c * 2 + (dest == LOOM_EMB_PIECE_LAST ? 1 : 0)) * (int64_t)D;
#pragma unroll
    for (int m = 0; m < NV; ++m) {
      const int ch = lane + 32 * m;
      if (ch < nvec) emb_store_n<float, VE>(p + ch * VE, acc[m]);
    }
  }
}

/* U gradient rows in flight per lane: LOOM_EMB_UNROLL 16-byte words per lane. */
template <typename TT, typename OT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS, 2)
    loom__emb_bwd_runs_kernel(const __grid_constant__ loom_emb_kargs_t a, const __grid_constant__ emb_sorted_t so) {
  constexpr int VE = emb_ty<TT>::VE;
  constexpr int W16 = VE * (int)sizeof(OT) >= 32 ? 2 : 1; /* 16-byte words of a lane's gradient chunk */
  constexpr int U = LOOM_EMB_UNROLL / (NV * W16) >= 1 ? LOOM_EMB_UNROLL / (NV * W16) : 1;
  const int lane = threadIdx.x & 31, D = a.dim, nvec = D / VE;
  const int comm = !a.pool_only;
  const uint32_t epoch = comm ? loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off)) : 0u;
  /* every peer's grad_out is readable (its backward started) */
  if (comm && !emb_wait_peers(a, a.gready_off, epoch, LOOM_SITE_EMB_GRAD_READY, 1)) return;
  TT *tg = reinterpret_cast<TT *>(a.table_grad);
  const int64_t nwarps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t c = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); c < so.nchunks; c += nwarps) {
    const loom_emb_chunk_t ch = loom__emb_chunk_info(so.keys, so.n, c, so.rows);
    if (!ch.valid) continue; /* unused positions only (they sort last) */
    float acc[NV][VE];
#pragma unroll
    for (int m = 0; m < NV; ++m)
#pragma unroll
      for (int e = 0; e < VE; ++e) acc[m][e] = 0.f;
    uint32_t cur = so.keys[ch.i0];
    int first = 1;
    for (int64_t base = ch.i0; base < ch.i1; base += 32) {
      const int nb = ch.i1 - base < 32 ? (int)(ch.i1 - base) : 32;
      /* lane j: position base + j (key, gradient row, coefficient) */
      uint32_t key = LOOM_EMB_NO_ROW;
      emb_meta_t md;
      md.goff = 0;
      md.q = 0;
      md.coef = 0.f;
      if (lane < nb) {
        key = so.keys[base + lane];
        if ((int64_t)key < so.rows) md = so.meta[so.pos[base + lane]];
      }
      /* valid positions come first (sorted), so they are lanes 0 .. nv-1 */
      const int nv = __popc(__ballot_sync(EMB_FULL_MASK, lane < nb && (int64_t)key < so.rows));
      for (int u0 = 0; u0 < nv; u0 += U) {
        emb_raw<OT, VE> g[U][NV];
#pragma unroll
        for (int u = 0; u < U; ++u) { /* every slot loads: a dead one the group's first row */
          const int src = u0 + u < nv ? u0 + u : u0;
          const int q = __shfl_sync(EMB_FULL_MASK, md.q, src);
          const int64_t goff = __shfl_sync(EMB_FULL_MASK, md.goff, src);
          const OT *row = reinterpret_cast<const OT *>(a.peer[q]) + goff;
#pragma unroll
          for (int m = 0; m < NV; ++m) emb_load_raw<OT, VE>(row + min(lane + 32 * m, nvec - 1) * VE, g[u][m]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int src = u0 + u;
          const uint32_t k = __shfl_sync(EMB_FULL_MASK, key, src & 31);
          const float cf = __shfl_sync(EMB_FULL_MASK, md.coef, src & 31);
          if (src < nv) {
            if (k != cur) { /* the run of `cur` ends here, not at the chunk's end */
              emb_run_put<TT, NV>(so, tg, loom__emb_piece_dest(&ch, first, 0), cur, c, acc, D, nvec, lane);
              first = 0;
              cur = k;
#pragma unroll
              for (int m = 0; m < NV; ++m)
#pragma unroll
                for (int e = 0; e < VE; ++e) acc[m][e] = 0.f;
            }
#pragma unroll
            for (int m = 0; m < NV; ++m) {
              float f[VE];
              emb_unpack_raw<OT, VE>(g[u][m], f);
#pragma unroll
              for (int e = 0; e < VE; ++e) acc[m][e] = fmaf(cf, f[e], acc[m][e]);
            }
          }
        }
      }
      if (nv < nb) break; /* the rest of the chunk holds unused positions */
    }
    emb_run_put<TT, NV>(so, tg, loom__emb_piece_dest(&ch, first, 1), cur, c, acc, D, nvec, lane);
  }
  if (!comm) return;
  /* the last block done: every peer's grad_out read by this rank */
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
    __threadfence_system(); /* this block's loads from peers are done (their values were used) */
    if (loom__last_arrival(misc + 3, gridDim.x)) {
      for (int p = 0; p < a.s.world; ++p)
        loom__signal_store_release(loom_signal_addr(&a.dc, p, a.gdone_off, (uint32_t)a.s.rank), epoch);
    }
  }
}

/* ---- heads -------------------------------------------------------------------- */

template <typename TT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS)
    loom__emb_bwd_heads_kernel(const __grid_constant__ loom_emb_kargs_t a, const __grid_constant__ emb_sorted_t so) {
  constexpr int VE = emb_ty<TT>::VE;
  constexpr int R = 32 / (NV * VE) >= 1 ? 32 / (NV * VE) : 1; /* partial rows in flight: 32 floats per lane */
  const int lane = threadIdx.x & 31, D = a.dim, nvec = D / VE;
  const int comm = !a.pool_only;
  const uint32_t epoch = comm ? loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off)) : 0u;
  TT *tg = reinterpret_cast<TT *>(a.table_grad);
  const int64_t nwarps = (int64_t)gridDim.x * (blockDim.x >> 5);
  for (int64_t c = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); c < so.nchunks; c += nwarps) {
    const loom_emb_chunk_t ch = loom__emb_chunk_info(so.keys, so.n, c, so.rows);
    if (!loom__emb_chunk_has_head(&ch)) continue;
    const uint32_t key = so.keys[ch.i1 - 1];
    const int64_t last = loom__emb_run_last_chunk(so.keys, so.n, c, key);
    float acc[NV][VE];
    const float *head = so.partial + (c * 2 + 1) * (int64_t)D;
#pragma unroll
    for (int m = 0; m < NV; ++m) emb_load_n<float, VE>(head + min(lane + 32 * m, nvec - 1) * VE, acc[m]);
    for (int64_t c2 = c + 1; c2 <= last; c2 += R) {
      float v[R][NV][VE];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int64_t cc = c2 + r <= last ? c2 + r : c2; /* past the run: load c2 again, not added */
        const float *p = so.partial + cc * 2 * (int64_t)D;
#pragma unroll
        for (int m = 0; m < NV; ++m) emb_load_n<float, VE>(p + min(lane + 32 * m, nvec - 1) * VE, v[r][m]);
      }
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (c2 + r <= last)
#pragma unroll
          for (int m = 0; m < NV; ++m)
#pragma unroll
            for (int e = 0; e < VE; ++e) acc[m][e] += v[r][m][e];
    }
    emb_run_put<TT, NV>(so, tg, LOOM_EMB_PIECE_WRITE, key, c, acc, D, nvec, lane);
  }
  if (!comm) return;
  /* nobody reads this rank's grad_out once every peer said so */
  if (!emb_wait_peers(a, a.gdone_off, epoch, LOOM_SITE_EMB_GRAD_DONE, 0)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 1);
}

/* ---- launcher ------------------------------------------------------------------ */

typedef void (*emb_sorted_kernel_t)(loom_emb_kargs_t, emb_sorted_t);

template <typename TT, typename OT>
static emb_sorted_kernel_t runs_nv(int nv) {
  switch (nv) {
    case 1: return loom__emb_bwd_runs_kernel<TT, OT, 1>;
    case 2: return loom__emb_bwd_runs_kernel<TT, OT, 2>;
    case 4: return loom__emb_bwd_runs_kernel<TT, OT, 4>;
    default: return loom__emb_bwd_runs_kernel<TT, OT, 8>;
  }
}
template <typename TT>
static emb_sorted_kernel_t runs_ot(loom_dtype_t ot, int nv) {
  switch (ot) {
    case LOOM_FP16: return runs_nv<TT, __half>(nv);
    case LOOM_BF16: return runs_nv<TT, __nv_bfloat16>(nv);
    default: return runs_nv<TT, float>(nv);
  }
}
template <typename TT>
static emb_sorted_kernel_t heads_nv(int nv) {
  switch (nv) {
    case 1: return loom__emb_bwd_heads_kernel<TT, 1>;
    case 2: return loom__emb_bwd_heads_kernel<TT, 2>;
    case 4: return loom__emb_bwd_heads_kernel<TT, 4>;
    default: return loom__emb_bwd_heads_kernel<TT, 8>;
  }
}

static emb_sorted_kernel_t runs_kernel(loom_dtype_t tt, loom_dtype_t ot, int dim) {
  const int nv = emb_chunks_per_lane(tt, dim);
  switch (tt) {
    case LOOM_FP16: return runs_ot<__half>(ot, nv);
    case LOOM_BF16: return runs_ot<__nv_bfloat16>(ot, nv);
    default: return runs_ot<float>(ot, nv);
  }
}
static emb_sorted_kernel_t heads_kernel(loom_dtype_t tt, int dim) {
  const int nv = emb_chunks_per_lane(tt, dim);
  switch (tt) {
    case LOOM_FP16: return heads_nv<__half>(nv);
    case LOOM_BF16: return heads_nv<__nv_bfloat16>(nv);
    default: return heads_nv<float>(nv);
  }
}

/* Scratch layout of a call: keys (2 buffers), pos (2 buffers), meta,
 * partials, CUB's temporary storage (off[0..6]); returns the total. */
static size_t sorted_layout(int64_t n, int dim, size_t temp, size_t off[7]) {
  const size_t nn = (size_t)n;
  const size_t sizes[7] = {nn * 4, nn * 4, nn * 4, nn * 4, nn * sizeof(emb_meta_t),
                           (size_t)loom__emb_run_chunks(n) * 2 * (size_t)dim * sizeof(float), temp};
  size_t at = 0;
  for (int i = 0; i < 7; ++i) {
    off[i] = at;
    at += loom__align256(sizes[i] ? sizes[i] : 1);
  }
  return at;
}

static cudaError_t sort_temp_bytes(int64_t n, int bits, size_t *temp) {
  *temp = 0;
  if (n == 0) return cudaSuccess;
  cub::DoubleBuffer<uint32_t> k(nullptr, nullptr);
  cub::DoubleBuffer<uint32_t> v(nullptr, nullptr);
  return cub::DeviceRadixSort::SortPairs(nullptr, *temp, k, v, n, 0, bits);
}

extern "C" size_t loom__emb_sorted_scratch_bytes(int64_t n, int dim) {
  size_t temp = 0, off[7];
  if (sort_temp_bytes(n, 32, &temp) != cudaSuccess) {
    (void)cudaGetLastError();
    temp = 0;
  }
  return sorted_layout(n, dim, temp, off);
}

extern "C" loom_result_t loom__emb_sorted_regs(loom_dtype_t tt, loom_dtype_t ot, int dim, int *regs, int *local_bytes) {
  struct cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, runs_kernel(tt, ot, dim)));
  *regs = fa.numRegs;
  *local_bytes = (int)fa.localSizeBytes;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_launch_backward_sorted(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot,
                                                          int grid, cudaMemPool_t pool, cudaStream_t stream) {
  const int64_t n = a->num_indices;
  if (n > LOOM_EMB_MAX_SORTED_INDICES || a->total_rows > LOOM_EMB_MAX_SORTED_ROWS || a->total_rows < 0)
    return loom__fail(LOOM_ERR_INTERNAL, "loom__emb_launch_backward_sorted: n=%lld rows=%lld past the 32-bit keys",
                      (long long)n, (long long)a->total_rows);
  const int bits = loom__emb_key_bits(a->total_rows);
  size_t temp = 0, off[7];
  {
    cudaError_t e = sort_temp_bytes(n, bits, &temp);
    if (e != cudaSuccess) return loom__cuda_fail((int)e, "cub::DeviceRadixSort::SortPairs (temporary storage size)",
                                                 __FILE__, __LINE__);
  }
  const size_t bytes = sorted_layout(n, a->dim, temp, off);
  char *base = NULL;
  LOOM_CUDA(cudaMallocFromPoolAsync((void **)&base, bytes, pool, stream));
  emb_sorted_t so;
  so.keys = (uint32_t *)(base + off[0]);
  so.pos = (uint32_t *)(base + off[2]);
  so.meta = (emb_meta_t *)(base + off[4]);
  so.partial = (float *)(base + off[5]);
  so.n = n;
  so.nchunks = loom__emb_run_chunks(n);
  so.rows = a->total_rows;
  loom_result_t r = LOOM_SUCCESS;
  cudaError_t e = cudaSuccess;
  /* positions in no bag keep LOOM_EMB_NO_ROW (sorted last, never read) */
  if (n > 0) e = cudaMemsetAsync(so.keys, 0xff, (size_t)n * 4, stream);
  if (e != cudaSuccess) r = loom__cuda_fail((int)e, "cudaMemsetAsync (sorted backward keys)", __FILE__, __LINE__);
  if (r == LOOM_SUCCESS) {
    loom__emb_bwd_keys_kernel<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a, so);
    e = cudaGetLastError();
    if (e != cudaSuccess) r = loom__cuda_fail((int)e, "loom__emb_bwd_keys_kernel launch", __FILE__, __LINE__);
  }
  if (r == LOOM_SUCCESS && n > 0) {
    cub::DoubleBuffer<uint32_t> k((uint32_t *)(base + off[0]), (uint32_t *)(base + off[1]));
    cub::DoubleBuffer<uint32_t> v((uint32_t *)(base + off[2]), (uint32_t *)(base + off[3]));
    e = cub::DeviceRadixSort::SortPairs(base + off[6], temp, k, v, n, 0, bits, stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e != cudaSuccess) r = loom__cuda_fail((int)e, "cub::DeviceRadixSort::SortPairs (sorted backward)", __FILE__, __LINE__);
    so.keys = k.Current();
    so.pos = v.Current();
  }
  if (r == LOOM_SUCCESS) {
    runs_kernel(tt, ot, a->dim)<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a, so);
    e = cudaGetLastError();
    if (e != cudaSuccess) r = loom__cuda_fail((int)e, "loom__emb_bwd_runs_kernel launch", __FILE__, __LINE__);
  }
  if (r == LOOM_SUCCESS) {
    heads_kernel(tt, a->dim)<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a, so);
    e = cudaGetLastError();
    if (e != cudaSuccess) r = loom__cuda_fail((int)e, "loom__emb_bwd_heads_kernel launch", __FILE__, __LINE__);
  }
  e = cudaFreeAsync(base, stream);
  if (e != cudaSuccess && r == LOOM_SUCCESS) r = loom__cuda_fail((int)e, "cudaFreeAsync (sorted backward scratch)", __FILE__, __LINE__);
  return r;
}
