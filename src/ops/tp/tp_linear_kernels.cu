/*
 * tp_linear_kernels.cu - the kernels of the tensor-parallel ops (protocol and
 * invariants in tp_linear.h, row ownership and orders in tp_schedule.h):
 *
 *   loom__tp_begin_kernel     one warp: publishes the call's epoch; AG: tells
 *                            every peer that this rank's a_full is writable
 *   loom__ag_copy_kernel      `blocks` blocks push this rank's shard into every
 *                            rank's a_full, chunk by chunk (16-byte vectors,
 *                            LOOM_TP_UNROLL loads in flight per thread), each
 *                            chunk followed by its release signal
 *   loom__ag_wait_kernel /
 *   loom__ag_signal_kernel    one thread each, around the copy engine's copies
 *   loom__ag_wait_shard_kernel one warp: a shard's chunk signals, before the
 *                            GEMM of its rows (LOOM_TP_CE_SHARD_GEMMS)
 *   loom__rs_reduce_kernel    the owner's side of GEMM + ReduceScatter and
 *                            GEMM + AllReduce: for each of its output tiles,
 *                            waits for the W partials' signals, reads them
 *                            from the sources' buffers (NVLink loads), sums
 *                            them in fp32 in rank order, applies the
 *                            epilogue (RS: the bias), rounds once into
 *                            c_shard (RS) or every rank's out (AR, then the
 *                            tile's gathered signal on every peer); then
 *                            tells the sources their buffers are free; AR's
 *                            tail launch then waits for the other owners'
 *                            tiles of this rank's out
 *   loom__rs_bulk_pass_kernel BULK_REDUCE's owner pass, one launch after the
 *                            GEMM whose epilogue added into the owners' sum
 *                            buffers: waits once for every peer's "pushed"
 *                            word, then rounds the sum (+ bias) into c_shard
 *                            and zeroes what it read
 * Any architecture >= sm_80 (no tensor cores here).
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "core/error.h"
#include "core/pointwise.h"
#include "core/signal.cuh"
#include "core/vec8.cuh"
#include "ops/common/coll_device.cuh"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

#define LOOM_TP_UNROLL 8    /* 16-byte loads in flight per thread in the copy loop */
#define LOOM_TP_RS_UNROLL 4 /* vectors of 8 outputs per thread at a time in the reduction */

static __device__ __forceinline__ uint32_t loom__tp_epoch(const loom_dev_comm_t &dc, size_t epoch_off) {
  const loom_dev_epoch_t *ep = (const loom_dev_epoch_t *)(dc.ws + epoch_off);
  return *(const volatile uint32_t *)&ep->epoch;
}

__global__ void loom__tp_begin_kernel(loom_dev_comm_t dc, size_t epoch_off, size_t ready_off, size_t done_off) {
  loom_dev_epoch_t *ep = (loom_dev_epoch_t *)(dc.ws + epoch_off);
  const uint32_t e = *(volatile uint32_t *)&ep->epoch + 1u;
  if (done_off != (size_t)-1) {
    /* every peer finished reading this rank's partial of the previous call */
    for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
      if (p != dc.rank) {
        const uint32_t *w = (const uint32_t *)(dc.ws + done_off) + p;
        (void)loom__signal_wait(&dc, w, e - 1u, p, (uint32_t)p, LOOM_SITE_RS_DONE);
      }
    /* on expiry the GEMM still runs (the comm is in error; its result is not used) */
  }
  __syncwarp();
  if (threadIdx.x == 0) *(volatile uint32_t *)&ep->epoch = e;
  if (ready_off != (size_t)-1) {
    for (int p = (int)threadIdx.x; p < dc.size; p += (int)blockDim.x)
      if (p != dc.rank) loom__signal_store_release(loom_signal_addr(&dc, p, ready_off, (uint32_t)dc.rank), e);
  }
}

extern "C" loom_result_t loom__tp_begin(loom_dev_comm_t dc, size_t epoch_off, size_t ready_off, size_t done_off,
                                        cudaStream_t stream) {
  loom__tp_begin_kernel<<<1, 32, 0, stream>>>(dc, epoch_off, ready_off, done_off);
  LOOM_CUDA_LAUNCHED("loom__tp_begin_kernel");
  return LOOM_SUCCESS;
}

/* Items: step-major (step 0: the local shard; step i >= 1: the push of step
 * i - 1 in loom__ag_push_dest's order), chunk-minor; block b takes items
 * b, b + grid, ... */
__global__ void __launch_bounds__(LOOM_TP_THREADS) loom__ag_copy_kernel(const __grid_constant__ loom_ag_copy_args_t a) {
  __shared__ int ok;
  const loom_dev_comm_t &dc = a.dc;
  const int W = dc.size, r = dc.rank;
  const uint32_t e = loom__tp_epoch(dc, a.epoch_off);
  const int64_t nch = loom__ag_shard_chunks(a.m, W, r, a.chunk_rows);
  const int64_t begin = loom__tp_shard_begin(a.m, W, r);
  const int64_t row_bytes = a.k * a.esize;
  int last_dest = -1;
  for (int64_t q = blockIdx.x; q < (int64_t)(W - a.first_step) * nch; q += gridDim.x) {
    int32_t step;
    int64_t j;
    loom__ag_copy_item(q, nch, a.first_step, &step, &j);
    const int dest = step == 0 ? r : loom__ag_push_dest(r, W, step - 1);
    if (dest != r && dest != last_dest) {
      /* the peer's call has started: its a_full is free */
      if (threadIdx.x == 0) {
        const uint32_t *w = (const uint32_t *)(dc.ws + a.ready_off) + dest;
        ok = loom__signal_wait(&dc, w, e, dest, (uint32_t)dest, LOOM_SITE_AG_READY);
      }
      __syncthreads();
      if (!ok) return;
      last_dest = dest;
    }
    int64_t r0, r1;
    loom__ag_chunk(a.m, W, r, a.chunk_rows, j, &r0, &r1);
    if (dest != r || a.copy_local)
      /* the shard was written before this kernel: streaming loads (a multiple of 16 bytes, aligned) */
      loom__copy16<LOOM_TP_UNROLL, true>((int4 *)(a.dst[dest] + r0 * row_bytes),
                                        (const int4 *)(a.a_shard + (r0 - begin) * row_bytes), (r1 - r0) * row_bytes / 16);
    __threadfence_system();
    __syncthreads();
    if (threadIdx.x == 0)
      loom__signal_store_release(loom_signal_addr(&dc, dest, a.chunk_off, (uint32_t)(r * a.chunks_per_shard + j)), e);
  }
}

extern "C" loom_result_t loom__ag_copy_launch(const loom_ag_copy_args_t *a, int blocks, cudaStream_t stream) {
  loom__ag_copy_kernel<<<blocks, LOOM_TP_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__ag_copy_kernel");
  return LOOM_SUCCESS;
}

/* go[dest] (local) afterwards: e where the wait was met and no other wait
 * of the comm has expired, e - 1 (not reached) otherwise; the copy engine
 * copies it into the peer's chunk signals after each chunk. */
__global__ void loom__ag_wait_kernel(loom_dev_comm_t dc, size_t epoch_off, size_t ready_off, size_t go_off, int dest) {
  const uint32_t e = loom__tp_epoch(dc, epoch_off);
  const uint32_t *w = (const uint32_t *)(dc.ws + ready_off) + dest;
  const int ok = loom__signal_wait(&dc, w, e, dest, (uint32_t)dest, LOOM_SITE_AG_READY) &&
                 !*(volatile uint32_t *)dc.abort_flag;
  *((volatile uint32_t *)(dc.ws + go_off) + dest) = ok ? e : e - 1u;
}

extern "C" loom_result_t loom__ag_wait_ready(const loom_ag_copy_args_t *a, int dest, cudaStream_t stream) {
  loom__ag_wait_kernel<<<1, 1, 0, stream>>>(a->dc, a->epoch_off, a->ready_off, a->go_off, dest);
  LOOM_CUDA_LAUNCHED("loom__ag_wait_kernel");
  return LOOM_SUCCESS;
}

__global__ void loom__ag_signal_kernel(loom_dev_comm_t dc, size_t epoch_off, size_t chunk_off, int dest, uint32_t first,
                                      uint32_t count) {
  const uint32_t e = loom__tp_epoch(dc, epoch_off);
  if (*(volatile uint32_t *)dc.abort_flag) return; /* a wait expired: the copies may not have been allowed */
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x)
    loom__signal_store_release(loom_signal_addr(&dc, dest, chunk_off, first + i), e);
}

extern "C" loom_result_t loom__ag_signal_chunks(const loom_ag_copy_args_t *a, int dest, int64_t j0, int64_t j1,
                                                cudaStream_t stream) {
  if (j1 <= j0) return LOOM_SUCCESS;
  const uint32_t first = (uint32_t)(a->dc.rank * a->chunks_per_shard + j0);
  loom__ag_signal_kernel<<<1, 32, 0, stream>>>(a->dc, a->epoch_off, a->chunk_off, dest, first, (uint32_t)(j1 - j0));
  LOOM_CUDA_LAUNCHED("loom__ag_signal_kernel");
  return LOOM_SUCCESS;
}

__global__ void loom__ag_wait_shard_kernel(loom_dev_comm_t dc, size_t epoch_off, size_t chunk_off, int src,
                                           uint32_t first, uint32_t count) {
  const uint32_t e = loom__tp_epoch(dc, epoch_off);
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t *w = (const uint32_t *)(dc.ws + chunk_off) + first + i;
    if (!loom__signal_wait(&dc, w, e, src, first + i, LOOM_SITE_AG_SHARD)) return;
  }
}

extern "C" loom_result_t loom__ag_wait_shard(const loom_ag_copy_args_t *a, int src, cudaStream_t stream) {
  const int64_t n = loom__ag_shard_chunks(a->m, a->dc.size, src, a->chunk_rows);
  if (n <= 0) return LOOM_SUCCESS;
  const uint32_t first = (uint32_t)((int64_t)src * a->chunks_per_shard);
  loom__ag_wait_shard_kernel<<<1, 32, 0, stream>>>(a->dc, a->epoch_off, a->chunk_off, src, first, (uint32_t)n);
  LOOM_CUDA_LAUNCHED("loom__ag_wait_shard_kernel");
  return LOOM_SUCCESS;
}

/* BULK_REDUCE, at the start of every block of the one launch after this
 * rank's GEMM (whose bulk adds into the owners are complete: the kernel
 * boundary): tell every peer (its "pushed" word of this rank, a release
 * after a system fence), then wait for every peer's word. Every block tells
 * (the same value, idempotent) so that none waits on a block not yet
 * resident. 0 when a wait expired. */
static __device__ int loom__rs_pushed(const loom_rs_reduce_args_t &a, uint32_t e) {
  __shared__ int ok;
  const loom_dev_comm_t &dc = a.dc;
  if ((int)threadIdx.x < dc.size && (int)threadIdx.x != dc.rank) {
    __threadfence_system();
    loom__signal_store_release(loom_signal_addr(&dc, (int)threadIdx.x, a.tile_off, (uint32_t)dc.rank), e);
  }
  if (threadIdx.x == 0) {
    int good = 1;
    for (int s = 0; s < dc.size && good; ++s)
      if (s != dc.rank)
        good = loom__signal_wait(&dc, (const uint32_t *)(dc.ws + a.tile_off) + s, e, s, (uint32_t)s,
                                 LOOM_SITE_RS_PUSHED);
    ok = good;
  }
  __syncthreads();
  return ok;
}

__global__ void __launch_bounds__(LOOM_TP_RS_THREADS) loom__rs_reduce_kernel(const __grid_constant__ loom_rs_reduce_args_t a) {
  __shared__ int ok;
  const loom_dev_comm_t &dc = a.dc;
  const int W = dc.size;
  const uint32_t e = loom__tp_epoch(dc, a.epoch_off);
  const int ses = a.src_type == LOOM_FP32 ? 4 : 2;
  int32_t t0, t1;
  loom__rs_owner_tile_rows(a.m, W, dc.rank, a.bm, &t0, &t1);
  const int64_t items = a.rows > 0 ? (int64_t)(t1 - t0 + 1) * a.tiles_n : 0;
  const int64_t tiles = (int64_t)a.tiles_m * a.tiles_n;
  __shared__ uint32_t claimed;
  uint32_t *claim = (uint32_t *)(dc.ws + a.count_off) + 1;
  for (;;) {
    /* tiles are claimed one by one (a counter), so that the tail launch
     * after the GEMM takes what the side launch has not reached */
    if (threadIdx.x == 0) claimed = atomicAdd(claim, 1u);
    __syncthreads();
    const int64_t q = claimed;
    __syncthreads(); /* every thread has read it before it is claimed again */
    if (q >= items) break;
    /* the GEMMs' grouped order over the owner's tile rows */
    const int32_t tg = loom__tile_grouped((int32_t)q, t1 - t0 + 1, a.tiles_n, a.group);
    const int tm = t0 + tg / a.tiles_n, tn = tg % a.tiles_n;
    const int64_t t = (int64_t)tm * a.tiles_n + tn;
    if (threadIdx.x == 0) {
      int good = 1;
      for (int s = 0; s < W && good; ++s) {
        const uint32_t *w = (const uint32_t *)(dc.ws + a.tile_off) + (size_t)s * tiles + t;
        good = loom__signal_wait(&dc, w, e, s, (uint32_t)((size_t)s * tiles + t), LOOM_SITE_RS_TILE);
      }
      ok = good;
    }
    __syncthreads();
    if (!ok) return; /* expired: done is never told, the peers' next calls time out too */
    LOOM__MUTANT_SLOW_PUSH(&dc); /* mutant builds only (core/signal.cuh) */
    int64_t r0, r1;
    loom__rs_tile_rows(a.m, W, dc.rank, a.bm, tm, &r0, &r1);
    const int64_t c0 = (int64_t)tn * a.bn;
    int64_t c1 = c0 + a.bn;
    if (c1 > a.n) c1 = a.n;
    const int64_t vec_per_row = (c1 - c0) / 8, nv = (r1 - r0) * vec_per_row;
    /* LOOM_TP_RS_UNROLL vectors of 8 per thread at a time, every source's
     * loads of them issued before the adds (L2-coherent loads: the data
     * was written by other kernels, of this GPU or a peer, after this
     * kernel started) */
    for (int64_t v0 = threadIdx.x; v0 < nv; v0 += (int64_t)blockDim.x * LOOM_TP_RS_UNROLL) {
      float acc[LOOM_TP_RS_UNROLL][8];
      size_t off[LOOM_TP_RS_UNROLL];
      int64_t colv[LOOM_TP_RS_UNROLL];
#pragma unroll
      for (int u = 0; u < LOOM_TP_RS_UNROLL; ++u) {
        int64_t v = v0 + (int64_t)u * blockDim.x;
        if (v >= nv) v = nv - 1; /* a repeat of the last vector: loaded, not stored */
        const int64_t row = r0 + v / vec_per_row;
        colv[u] = c0 + (v % vec_per_row) * 8;
        off[u] = ((size_t)(row - a.src_row_base) * (size_t)a.n + (size_t)colv[u]) * (size_t)ses;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[u][i] = 0.f;
      }
      for (int s = 0; s < a.nsrc; ++s) {
        float x[LOOM_TP_RS_UNROLL][8];
#pragma unroll
        for (int u = 0; u < LOOM_TP_RS_UNROLL; ++u) loom__load8_as<-1>(a.src[s] + off[u], 0, a.src_type, x[u]);
#pragma unroll
        for (int u = 0; u < LOOM_TP_RS_UNROLL; ++u)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[u][i] += x[u][i];
      }
#pragma unroll
      for (int u = 0; u < LOOM_TP_RS_UNROLL; ++u) {
        const int64_t v = v0 + (int64_t)u * blockDim.x;
        if (v >= nv) break;
        const int64_t row = r0 + v / vec_per_row;
        /* the epilogue in fp32 (RS: + bias, the same fp32 addition as
         * before the epilogue existed), element index row x n + col */
        if (a.pw.flags) loom__coll_pointwise8<-1>(a.pw, row * a.n + colv[u], acc[u]);
        /* every destination; AR starts at this rank + 1 so that the
         * owners' stores spread over the links */
        for (int q = 0; q < a.nout; ++q) {
          int d = dc.rank + 1 + q;
          while (d >= a.nout) d -= a.nout;
          loom__store8_as(a.dst[d], (row - a.dst_row_base) * a.n + colv[u], a.c_type, acc[u]);
        }
        if (a.zero_src) { /* ready for the next call's additions */
          const float z[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
          loom__store8_as((void *)a.src[0], (int64_t)(off[u] / (size_t)ses), a.src_type, z);
        }
      }
    }
    if (a.gath_off != (size_t)-1) {
      /* the tile's rows are in every rank's out: tell the peers (every
       * thread's stores, then a system fence, before the flags) */
      __threadfence_system();
      __syncthreads();
      for (int p = (int)threadIdx.x; p < W; p += (int)blockDim.x)
        if (p != dc.rank)
          loom__signal_store_release(loom_signal_addr(&dc, p, a.gath_off, loom__ar_gathered_signal(dc.rank, tiles, t)),
                                    e);
    }
    __syncthreads(); /* `ok` is rewritten for the next tile */
  }
  /* the last block to finish tells every source its partial is free again */
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    uint32_t *count = (uint32_t *)(dc.ws + a.count_off);
    if (loom__last_arrival(count, (uint32_t)a.total_blocks)) {
      *claim = 0u;
      for (int p = 0; p < W; ++p)
        if (p != dc.rank) loom__signal_store_release(loom_signal_addr(&dc, p, a.done_off, (uint32_t)dc.rank), e);
    }
  }
  if (!a.wait_gathered) return;
  /* AR tail: this rank's out is complete when every other owner's rows of
   * every tile have arrived; the threads of the launch share the tiles (the
   * last step of the kernel: a thread whose wait expires just returns) */
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < tiles; t += stride) {
    int32_t p0, p1;
    loom__ar_tile_owners(a.m, W, a.bm, (int32_t)(t / a.tiles_n), &p0, &p1);
    for (int32_t o = p0; o <= p1; ++o) {
      if (o == dc.rank) continue;
      const uint32_t sig = loom__ar_gathered_signal(o, tiles, t);
      if (!loom__signal_wait(&dc, (const uint32_t *)(dc.ws + a.gath_off) + sig, e, o, sig, LOOM_SITE_AR_GATHERED))
        return;
    }
  }
}

#define LOOM_TP_PASS_UNROLL 8 /* 16-byte vectors in flight per thread in the bulk owner pass */

/* BULK_REDUCE's owner pass, one launch after this rank's GEMM: tell the
 * peers and wait for theirs (loom__rs_pushed), then stream the sum buffer
 * [rows, n]: c_shard = round(sum + bias), the sum zeroed for the next
 * call's adds; the last block tells the peers the buffer is free. A flat
 * grid-stride loop of 16-byte vectors, LOOM_TP_PASS_UNROLL loads in flight
 * per thread (the tile-claiming reduction kernel ran this pass at 1.4-1.8
 * TB/s: 39 us for 48 MiB). */
__global__ void __launch_bounds__(LOOM_TP_RS_THREADS) loom__rs_bulk_pass_kernel(const __grid_constant__ loom_rs_reduce_args_t a) {
  const loom_dev_comm_t &dc = a.dc;
  const uint32_t e = loom__tp_epoch(dc, a.epoch_off);
  if (!loom__rs_pushed(a, e)) return; /* expired: done is never told, the peers' next calls time out too */
  char *sum = (char *)a.src[0];
  const int es = a.src_type == LOOM_FP32 ? 4 : 2;
  const int64_t nv = a.rows * a.n / 8, stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v0 < nv; v0 += stride * LOOM_TP_PASS_UNROLL) {
    float x[LOOM_TP_PASS_UNROLL][8];
#pragma unroll
    for (int u = 0; u < LOOM_TP_PASS_UNROLL; ++u)
      if (v0 + u * stride < nv) loom__load8_as<-1>(sum, (v0 + u * stride) * 8, a.src_type, x[u]);
#pragma unroll
    for (int u = 0; u < LOOM_TP_PASS_UNROLL; ++u) {
      const int64_t i = (v0 + u * stride) * 8; /* element of the shard; of the output: row0 x n + i */
      if (i >= nv * 8) break;
      if (a.pw.flags) loom__coll_pointwise8<-1>(a.pw, a.row0 * a.n + i, x[u]);
      loom__store8_as(a.dst[0], i, a.c_type, x[u]);
      for (int b = 0; b < 8 * es; b += 16) *(int4 *)(sum + i * es + b) = make_int4(0, 0, 0, 0);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (loom__last_arrival((uint32_t *)(dc.ws + a.count_off), (uint32_t)a.total_blocks))
      for (int p = 0; p < dc.size; ++p)
        if (p != dc.rank) loom__signal_store_release(loom_signal_addr(&dc, p, a.done_off, (uint32_t)dc.rank), e);
  }
}

extern "C" loom_result_t loom__rs_bulk_pass_launch(const loom_rs_reduce_args_t *a, int blocks, cudaStream_t stream) {
  loom__rs_bulk_pass_kernel<<<blocks, LOOM_TP_RS_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__rs_bulk_pass_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__rs_reduce_launch(const loom_rs_reduce_args_t *a, int blocks, cudaStream_t stream) {
  loom__rs_reduce_kernel<<<blocks, LOOM_TP_RS_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__rs_reduce_kernel");
  return LOOM_SUCCESS;
}

__global__ void loom__tp_activation_kernel(void *x, size_t n, int t, int act) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    if (t == LOOM_FP32) {
      float *p = (float *)x + i;
      *p = loom__activation_f32(act, *p);
    } else if (t == LOOM_BF16) {
      __nv_bfloat16 *p = (__nv_bfloat16 *)x + i;
      *p = __float2bfloat16_rn(loom__activation_f32(act, __bfloat162float(*p)));
    } else {
      __half *p = (__half *)x + i;
      *p = __float2half_rn(loom__activation_f32(act, __half2float(*p)));
    }
  }
}

extern "C" loom_result_t loom__tp_activation(void *x, size_t n, loom_dtype_t t, int act, cudaStream_t stream) {
  if (n == 0) return LOOM_SUCCESS;
  size_t blocks = (n + 255) / 256;
  if (blocks > 4096) blocks = 4096;
  loom__tp_activation_kernel<<<(unsigned)blocks, 256, 0, stream>>>(x, n, (int)t, act);
  LOOM_CUDA_LAUNCHED("loom__tp_activation_kernel");
  return LOOM_SUCCESS;
}

/* out = x + y over n elements of dtype T, in fp32, rounded once (out may
 * be x); 8 elements a vector where vec (every pointer 16-byte aligned). */
template <int T>
__global__ void loom__tp_add_kernel(void *out, const void *x, const void *y, int64_t n, int vec) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t nv = vec ? n / 8 : 0;
  for (int64_t v = i; v < nv; v += stride) {
    float a[8], b[8];
    loom__load8<T>(x, v * 8, a);
    loom__load8<T>(y, v * 8, b);
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] += b[k];
    loom__store8<T>(out, v * 8, a);
  }
  for (int64_t e = nv * 8 + i; e < n; e += stride) loom__store1<T>(out, e, loom__load1<T>(x, e) + loom__load1<T>(y, e));
}

extern "C" loom_result_t loom__tp_add(void *out, const void *x, const void *y, size_t n, loom_dtype_t t,
                                      cudaStream_t stream) {
  if (n == 0) return LOOM_SUCCESS;
  const int vec = ((uintptr_t)out | (uintptr_t)x | (uintptr_t)y) % 16 == 0;
  size_t blocks = (n / (vec ? 8 : 1) + 255) / 256;
  if (blocks < 1) blocks = 1;
  if (blocks > 4096) blocks = 4096;
  if (t == LOOM_FP32) loom__tp_add_kernel<LOOM_FP32><<<(unsigned)blocks, 256, 0, stream>>>(out, x, y, (int64_t)n, vec);
  else if (t == LOOM_BF16) loom__tp_add_kernel<LOOM_BF16><<<(unsigned)blocks, 256, 0, stream>>>(out, x, y, (int64_t)n, vec);
  else loom__tp_add_kernel<LOOM_FP16><<<(unsigned)blocks, 256, 0, stream>>>(out, x, y, (int64_t)n, vec);
  LOOM_CUDA_LAUNCHED("loom__tp_add_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__tp_preload_kernels(void) {
  const void *fns[] = {(const void *)loom__tp_begin_kernel, (const void *)loom__ag_copy_kernel,
                       (const void *)loom__ag_wait_kernel,  (const void *)loom__ag_signal_kernel,
                       (const void *)loom__ag_wait_shard_kernel,
                       (const void *)loom__rs_reduce_kernel, (const void *)loom__rs_bulk_pass_kernel,
                       (const void *)loom__tp_activation_kernel, (const void *)loom__tp_add_kernel<LOOM_FP32>,
                       (const void *)loom__tp_add_kernel<LOOM_BF16>, (const void *)loom__tp_add_kernel<LOOM_FP16>};
  for (size_t i = 0; i < sizeof fns / sizeof *fns; ++i) {
    cudaFuncAttributes fa;
    LOOM_CUDA(cudaFuncGetAttributes(&fa, fns[i]));
  }
  return LOOM_SUCCESS;
}
