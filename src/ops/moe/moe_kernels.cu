/*
 * moe_kernels.cu - the kernels of a mixture-of-experts dispatch and combine
 * (the steps and their signals: moe.h; the layout: moe_schedule.h).
 *
 * Shapes: x [tokens, H] and the receive buffers [R, H] in the plan's dtype
 * (es bytes per element, H es a multiple of 16: rows move as 16-byte
 * vectors), ids [tokens, k] int32, weights [tokens, k] fp32, the combine
 * buffers [T_max k, H], out [tokens, H].
 * Dispatch: 6 launches (count, publish, layout, slots, send, wait), all but
 * send and count one block: the routing is small next to the rows. Combine:
 * 2 launches (send, reduce). Any sm_80+.
 */
#include <cuda_runtime.h>

#include "core/error.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"
#include "ops/moe/moe.h"

/* The call's epoch (moe.h: every kernel of a call reads the same one). */
static __device__ __forceinline__ uint32_t moe_epoch(const loom_moe_kargs_t &a) {
  return loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off));
}

static __device__ __forceinline__ int moe_aborted(const loom_moe_kargs_t &a) {
  return *(volatile uint32_t *)a.dc.abort_flag != 0u;
}

/* Records a bad routing entry (the first one of the call wins). */
static __device__ void moe_record_bad(loom_moe_err_t *err, uint32_t kind, int64_t entry, int32_t value) {
  if (!loom__record_claim(&err->claimed)) return;
  err->kind = kind, err->entry = entry, err->value = value;
  loom__record_publish(&err->valid);
}

/* 0 if entry i = t k + j is a good row, else the kind of fault (moe.h). */
static __device__ __forceinline__ uint32_t moe_bad_entry(const loom_moe_kargs_t &a, int64_t i) {
  const int32_t e = a.ids[i];
  if (e < 0 || e >= a.experts) return 1u;
  const int64_t t0 = i - i % a.topk;
  for (int64_t q = t0; q < i; ++q)
    if (a.ids[q] == e) return 2u;
  return 0u;
}

/* Every thread's stores of this block before the barrier, then one release
 * store of `v` into word `index` of the array at `off` on every rank. */
static __device__ __forceinline__ void moe_tell_all(const loom_moe_kargs_t &a, size_t off, uint32_t index, uint32_t v) {
  __threadfence_system();
  __syncthreads();
  for (int p = (int)threadIdx.x; p < a.world; p += (int)blockDim.x)
    loom__signal_store_release(loom_signal_addr(&a.dc, p, off, index), v);
}

/* Thread 0 waits for word s of the array at `off` (this rank's) to reach e
 * for every rank s; 1 for every thread of the block when all did. */
static __device__ int moe_wait_all(const loom_moe_kargs_t &a, size_t off, uint32_t e, uint32_t site) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    int good = 1;
    for (int s = 0; s < a.world && good; ++s)
      good = loom__signal_wait(&a.dc, (const uint32_t *)(a.dc.ws + off) + s, e, s, (uint32_t)s, site);
    ok = good;
  }
  __syncthreads();
  return ok;
}

/* Copies one row of `bytes` (a multiple of 16, both ends 16-byte aligned)
 * with the lanes of a warp. */
static __device__ __forceinline__ void moe_copy_row(char *dst, const char *src, int64_t bytes, int lane) {
  const uint4 *s = (const uint4 *)src;
  uint4 *d = (uint4 *)dst;
  const int64_t n = bytes / 16;
  int64_t q = lane;
  for (; q + 96 < n; q += 128) { /* four loads in flight per lane before the stores */
    const uint4 v0 = __ldcg(s + q), v1 = __ldcg(s + q + 32), v2 = __ldcg(s + q + 64), v3 = __ldcg(s + q + 96);
    d[q] = v0, d[q + 32] = v1, d[q + 64] = v2, d[q + 96] = v3;
  }
  for (; q < n; q += 32) d[q] = __ldcg(s + q);
}

/* 1: rows per expert of each routing chunk. */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_count_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const int64_t n = a.tokens * a.topk;
  const int64_t i0 = (int64_t)blockIdx.x * a.chunk;
  const int64_t i1 = i0 + a.chunk < n ? i0 + a.chunk : n;
  int32_t *h = a.hist + (int64_t)blockIdx.x * a.experts;
  for (int64_t i = i0 + threadIdx.x; i < i1; i += blockDim.x) {
    const uint32_t bad = moe_bad_entry(a, i);
    if (bad) {
      moe_record_bad(a.err, bad, i, a.ids[i]);
      a.slot[i] = -1;
      continue;
    }
    a.slot[i] = 0; /* a good entry: kernel 4 finds its row */
    atomicAdd(&h[a.ids[i]], 1);
  }
}

/* 2: the chunks' counts into exclusive bases, this source's counts into
 * every rank's table, then counts_ready. */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_publish_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  const int r = a.dc.rank;
  for (int x = (int)threadIdx.x; x < a.experts; x += (int)blockDim.x) {
    int32_t running = 0;
    for (int g = 0; g < a.nchunks; ++g) {
      int32_t *h = a.hist + (int64_t)g * a.experts + x;
      const int32_t v = *h;
      *h = running;
      running += v;
    }
    for (int p = 0; p < a.world; ++p) a.counts[p][(int64_t)r * a.experts + x] = running;
  }
  moe_tell_all(a, a.counts_ready_off, (uint32_t)r, e);
}

/* Exclusive prefix sums of v[0 .. n) in place, v[n] = the total; one
 * block of LOOM_MOE_THREADS threads, each a contiguous range. */
static __device__ void moe_block_scan(int64_t *v, int n) {
  __shared__ int64_t part[LOOM_MOE_THREADS];
  const int per = (n + (int)blockDim.x - 1) / (int)blockDim.x;
  const int lo = (int)threadIdx.x * per, hi = lo + per < n ? lo + per : n;
  int64_t sum = 0;
  for (int x = lo; x < hi; ++x) sum += v[x];
  part[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) { /* blockDim.x partial sums: a few hundred shared-memory adds */
    int64_t run = 0;
    for (int q = 0; q < (int)blockDim.x; ++q) {
      const int64_t c = part[q];
      part[q] = run;
      run += c;
    }
    v[n] = run;
  }
  __syncthreads();
  int64_t run = part[threadIdx.x];
  for (int x = lo; x < hi; ++x) {
    const int64_t c = v[x];
    v[x] = run;
    run += c;
  }
  __syncthreads();
}

/* 3: every rank's counts; the kept matrix, this source's bases, this
 * rank's receive groups. rows(e) are scanned over all experts (P), and an
 * owner's running total is P[e] - P[begin(owner)] (moe_schedule.h:
 * loom__moe_source_bases, loom__moe_recv_offsets). */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_layout_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  if (!moe_wait_all(a, a.counts_ready_off, e, LOOM_SITE_MOE_COUNTS)) return;
  const int W = a.world, E = a.experts, r = a.dc.rank;
  const int32_t *counts = a.counts[r]; /* this rank's table: [W, E] */
  int64_t *P = a.scan;                  /* [E + 1] */
  for (int x = (int)threadIdx.x; x < E; x += (int)blockDim.x) {
    int64_t before = 0, rows = 0, mine_before = 0;
    for (int s = 0; s < W; ++s) {
      const int64_t c = __ldcg(counts + (int64_t)s * E + x);
      int64_t k = c;
      if (a.capacity > 0) {
        k = a.capacity - before;
        k = k < 0 ? 0 : k > c ? c : k;
      }
      a.kept[(int64_t)s * E + x] = (int32_t)k;
      if (s < r) mine_before += k;
      rows += k;
      before += c;
    }
    a.base[x] = mine_before;
    P[x] = rows;
  }
  __syncthreads();
  moe_block_scan(P, E);
  const int e0 = loom__moe_expert_begin(E, W, r), nl = loom__moe_experts_on(E, W, r);
  for (int x = (int)threadIdx.x; x < E; x += (int)blockDim.x) {
    const int b = loom__moe_expert_begin(E, W, loom__moe_expert_rank(E, W, x));
    a.base[x] += P[x] - P[b];
    if (x >= e0 && x < e0 + nl) a.expert_off[x - e0] = P[x] - P[e0];
  }
  if (threadIdx.x == 0) a.expert_off[nl] = P[e0 + nl] - P[e0];
}

/* 4: each good entry's receive row (token order within a chunk, chunks in
 * order), -1 where the capacity drops it; hist's row zeroed after. One warp
 * per chunk. */
__global__ void __launch_bounds__(32) loom__moe_slots_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  if (moe_aborted(a)) return;
  const int lane = (int)threadIdx.x, r = a.dc.rank;
  const int64_t n = a.tokens * a.topk;
  const int64_t i0 = (int64_t)blockIdx.x * a.chunk;
  const int64_t i1 = i0 + a.chunk < n ? i0 + a.chunk : n;
  int32_t *h = a.hist + (int64_t)blockIdx.x * a.experts;
  const int32_t *kept_r = a.kept + (int64_t)r * a.experts;
  for (int64_t b = i0; b < i1; b += 32) {
    const int64_t i = b + lane;
    const int live = i < i1 && a.slot[i] == 0;
    const int32_t x = live ? a.ids[i] : -1 - lane; /* unique keys for the lanes without a row */
    const unsigned group = __match_any_sync(0xffffffffu, x);
    const int before = __popc(group & ((1u << lane) - 1u));
    const int32_t cursor = live ? h[x] : 0;
    __syncwarp();
    if (live) {
      const int64_t m = (int64_t)cursor + before;
      a.slot[i] = m < kept_r[x] ? a.base[x] + m : -1;
      if (before == __popc(group) - 1) h[x] = cursor + __popc(group);
    }
    __syncwarp();
  }
  for (int x = lane; x < a.experts; x += 32) h[x] = 0; /* the next call counts from zero */
}

/* 5: the rows into their owners' receive buffers, origins beside them;
 * the last block tells every rank. A warp per entry. */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_send_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  if (moe_aborted(a)) return;
  const int lane = (int)(threadIdx.x % 32), r = a.dc.rank;
  const int64_t row_bytes = (int64_t)a.hidden * a.es, n = a.tokens * a.topk;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < n; i += warps) {
    const int64_t s = a.slot[i];
    if (s < 0) continue;
    const int p = loom__moe_expert_rank(a.experts, a.world, a.ids[i]);
    moe_copy_row(a.recv[p] + s * row_bytes, a.x + (i / a.topk) * row_bytes, row_bytes, lane);
    if (lane == 0) a.origin[p][s] = make_int2(r, (int)i);
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && loom__last_arrival(a.count, gridDim.x))
    for (int p = 0; p < a.world; ++p)
      loom__signal_store_release(loom_signal_addr(&a.dc, p, a.delivered_off, (uint32_t)r), e);
}

/* 6: every source's rows are here; the call is complete. */
__global__ void __launch_bounds__(32) loom__moe_wait_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  if (!moe_wait_all(a, a.delivered_off, e, LOOM_SITE_MOE_DELIVERED)) return;
  if (threadIdx.x == 0) loom__epoch_block_done((loom_dev_epoch_t *)(a.dc.ws + a.epoch_off), e);
}

/* Blocks for `items` of work, `per_block` per block: as many as the work
 * needs, at most per_sm per SM (grid-stride loops do the rest), at least 1. */
static loom_result_t moe_grid(int64_t items, int64_t per_block, int per_sm, unsigned *blocks) {
  int dev = 0, sms = 132;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int64_t b = (items + per_block - 1) / per_block;
  if (b > (int64_t)per_sm * sms) b = (int64_t)per_sm * sms;
  *blocks = b < 1 ? 1u : (unsigned)b;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__moe_dispatch_launch(const loom_moe_kargs_t *k, cudaStream_t stream) {
  const int64_t n = k->tokens * k->topk;
  loom__moe_count_kernel<<<k->nchunks, LOOM_MOE_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_count_kernel");
  loom__moe_publish_kernel<<<1, LOOM_MOE_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_publish_kernel");
  loom__moe_layout_kernel<<<1, LOOM_MOE_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_layout_kernel");
  loom__moe_slots_kernel<<<k->nchunks, 32, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_slots_kernel");
  unsigned blocks = 1;
  LOOM_TRY(moe_grid(n, LOOM_MOE_THREADS / 32, 2, &blocks)); /* a warp per row */
  loom__moe_send_kernel<<<blocks, LOOM_MOE_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_send_kernel");
  loom__moe_wait_kernel<<<1, 32, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_wait_kernel");
  return LOOM_SUCCESS;
}

/* Combine 1: every rank's combine buffer is free; each received row's
 * expert output into its source's buffer at its origin slot; the last block
 * tells every rank. A warp per received row. */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_comb_send_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  const int r = a.dc.rank;
  for (int p = (int)threadIdx.x; p < a.world; p += (int)blockDim.x)
    loom__signal_store_release(loom_signal_addr(&a.dc, p, a.comb_ready_off, (uint32_t)r), e);
  if (!moe_wait_all(a, a.comb_ready_off, e, LOOM_SITE_MOE_COMB_READY)) return;
  const int lane = (int)(threadIdx.x % 32);
  const int nl = loom__moe_experts_on(a.experts, a.world, r);
  const int64_t total = a.expert_off[nl], row_bytes = (int64_t)a.hidden * a.es;
  const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32);
  for (int64_t i = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; i < total; i += warps) {
    const int2 o = __ldcg(a.origin[r] + i); /* stored by the sources during the dispatch */
    moe_copy_row(a.combine[o.x] + (int64_t)o.y * row_bytes, a.y + i * row_bytes, row_bytes, lane);
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0 && loom__last_arrival(a.count, gridDim.x))
    for (int p = 0; p < a.world; ++p)
      loom__signal_store_release(loom_signal_addr(&a.dc, p, a.comb_done_off, (uint32_t)r), e);
}

/* Combine 2: out[t] = sum over kept j (ascending) of w[t][j] y_j, fp32,
 * each product rounded once. A thread per 8 elements of a token. */
__global__ void __launch_bounds__(LOOM_MOE_THREADS) loom__moe_comb_reduce_kernel(const __grid_constant__ loom_moe_kargs_t a) {
  const uint32_t e = moe_epoch(a);
  if (!moe_wait_all(a, a.comb_done_off, e, LOOM_SITE_MOE_COMB_DONE)) return;
  const int r = a.dc.rank, K = a.topk;
  const int64_t vpr = a.hidden / 8, nv = a.tokens * vpr;
  const char *cb = a.combine[r];
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nv; v += stride) {
    const int64_t t = v / vpr, c = (v % vpr) * 8;
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j = 0; j < K; ++j) {
      if (a.slot[t * K + j] < 0) continue; /* dropped or a bad entry */
      const float w = a.weights[t * K + j];
      float y[8];
      loom__load8_as<-1>(cb, (t * K + j) * a.hidden + c, a.dtype, y);
#pragma unroll
      for (int q = 0; q < 8; ++q) acc[q] = __fadd_rn(acc[q], __fmul_rn(w, y[q]));
    }
    loom__store8_as(a.out, t * a.hidden + c, a.dtype, acc);
  }
  __syncthreads();
  if (threadIdx.x == 0) loom__epoch_block_done((loom_dev_epoch_t *)(a.dc.ws + a.epoch_off), e);
}

extern "C" loom_result_t loom__moe_combine_launch(const loom_moe_kargs_t *k, int64_t max_recv, cudaStream_t stream) {
  unsigned blocks = 1, rb = 1;
  LOOM_TRY(moe_grid(max_recv, LOOM_MOE_THREADS / 32, 2, &blocks)); /* a warp per received row */
  loom__moe_comb_send_kernel<<<blocks, LOOM_MOE_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_comb_send_kernel");
  LOOM_TRY(moe_grid(k->tokens * (k->hidden / 8), LOOM_MOE_THREADS, 4, &rb)); /* a thread per 8 elements */
  loom__moe_comb_reduce_kernel<<<rb, LOOM_MOE_THREADS, 0, stream>>>(*k);
  LOOM_CUDA_LAUNCHED("loom__moe_comb_reduce_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__moe_preload_kernels(void) {
  cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_count_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_publish_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_layout_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_slots_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_send_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_wait_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_comb_send_kernel));
  LOOM_CUDA(cudaFuncGetAttributes(&fa, loom__moe_comb_reduce_kernel));
  return LOOM_SUCCESS;
}
