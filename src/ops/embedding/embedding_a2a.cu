/*
 * embedding_a2a.cu - the forward and the atomic backward of the fused
 * embedding-bag + All-to-All (device helpers in embedding_a2a.cuh; the
 * sorted backward of fp16/bf16 tables in embedding_a2a_sorted.cu; the GIN
 * path in embedding_a2a_gin.cu).
 *
 * Forward (paper 3.2-3.3), one persistent kernel per call:
 *  1. block 0 announces "ready to receive, epoch e" in every peer's ready[me]
 *     (this rank's earlier stream work, e.g. reading the last output, is done);
 *  2. every warp fetches logical tasks (dest q, slice j, table t, part p) from
 *     a counter in remote-first order (embedding_schedule.h); before the first
 *     task for q it waits (bounded) for ready[q] >= e;
 *  3. the warp pools the task's bags one at a time: it loads 32 indices (and
 *     weights) at once, keeps UR = 8 row chunks of 16 bytes per lane in flight
 *     (the FLAT row loop), accumulates in fp32, and stores the pooled vector
 *     straight into q's output through q's LSA address (no staging);
 *  4. after a task, lane 0 fences (system scope) and adds 1 to the slice's
 *     completion counter; the task that completes the slice fences again and
 *     release-stores epoch e into the slice's ready flag on q;
 *  5. when no task is left, block b waits (bounded) on the incoming flags
 *     i with i % G == b, so this rank's output is complete when the kernel
 *     ends. A wait that expires records the timeout and the kernel returns.
 * Pooling alone (pool_only): the same loop over a static task stride, output
 * [B, T*D] in local memory, no flags.
 * Atomic backward (fp32 tables): block 0 announces "grad_out readable"
 * (gready); tasks pull the gradient rows of their slice from q's grad_out
 * (LSA loads, after waiting for gready[q]) and scatter-add scale*w*g into
 * table_grad with fp32 atomics; the last task for source q tells q it is
 * done reading (gdone); each rank waits for every peer's gdone before the
 * kernel ends, so grad_out may be reused after.
 * Index errors are recorded in a host-mapped record (first one wins) and the
 * row skipped; bad offsets make the bag empty.
 */
#include <cuda_runtime.h>

#include "core/error.h"
#include "ops/embedding/embedding_a2a.cuh"

/* Registers are capped for 2 blocks (16 warps) per SM: 128 per thread. */
#define LOOM_EMB_MIN_BLOCKS 2

/* ---- forward ------------------------------------------------------------- */

template <typename TT, typename OT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS, LOOM_EMB_MIN_BLOCKS)
    loom__emb_fwd_kernel(const __grid_constant__ loom_emb_kargs_t a) {
  __shared__ int64_t s_task[LOOM_EMB_THREADS / 32];
  __shared__ int s_abort;
  __shared__ unsigned char s_ready[LOOM_EMB_MAX_LSA];
  const loom_emb_sched_t &s = a.s;
  const int lane = threadIdx.x & 31;
  const int D = a.dim;
  const int comm = !a.pool_only;
  const int64_t ntasks = loom__emb_num_tasks(&s);
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  const uint32_t epoch = comm ? loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off)) : 0u;

  if (threadIdx.x == 0) s_abort = 0;
  for (int p = threadIdx.x; p < LOOM_EMB_MAX_LSA; p += blockDim.x) s_ready[p] = (p == s.rank);
  if (comm && blockIdx.x == 0)
    for (int p = threadIdx.x; p < s.world; p += blockDim.x)
      loom__signal_store_release(loom_signal_addr(&a.dc, p, a.ready_off, (uint32_t)s.rank), epoch);
  __syncthreads();

  if (comm) LOOM__MUTANT_SLOW_PUSH(&a.dc); /* mutant builds only (core/signal.cuh) */
  emb_fetch_t f = emb_fetch_init(comm ? misc : nullptr, comm ? (const uint32_t *)(a.dc.ws + a.ready_off) : nullptr,
                                 emb_sig_index(a, a.ready_off), LOOM_SITE_EMB_OUT_READY, epoch);
  for (;;) {
    const int64_t k = emb_next_task(a, f, ntasks, s_task, s_ready, &s_abort);
    if (k < 0 || k >= ntasks) break;
    const loom_emb_task_t tk = loom__emb_task_decode(&s, k);
    const int t = tk.table;
    /* pooling alone: out [B, T*D] here; fused: q's out [Bl, T_total*D] (one
     * inlined copy of the bag loop for both) */
    OT *dst0 = comm ? reinterpret_cast<OT *>(a.peer[tk.dest]) + (int64_t)(s.table_base + t) * D
                    : reinterpret_cast<OT *>(a.peer[0]) + (int64_t)t * D;
    const int64_t row0 = comm ? (int64_t)tk.dest * s.local_batch : 0;
    const int64_t stride = (int64_t)(comm ? s.t_total : s.t_local) * D;
    emb_pool_bags<TT, OT, NV, LOOM_EMB_UNROLL, EMB_ROWS_FLAT>(a, tk, lane, dst0, row0, stride);
    __syncwarp();
    if (comm && lane == 0) {
      __threadfence_system(); /* the warp's stores (to q) before the count */
      uint32_t *ctr = (uint32_t *)(a.dc.ws + a.counters_off) + loom__emb_counter_index(&s, t, tk.dest, tk.slice);
      if (loom__last_arrival(ctr, loom__emb_counter_target(&s))) /* every counted warp's stores before the flag */
        loom__signal_store_release(
            loom_signal_addr(&a.dc, tk.dest, a.flags_off, loom__emb_flag_index(&s, s.table_base, t, tk.slice)), epoch);
    }
  }
  if (!__syncthreads_and(!s_abort)) return;
  if (!comm) return;
  /* this block's share of the incoming flags */
  int ok = 1;
  const uint32_t nf = loom__emb_num_flags(&s);
  const uint32_t *flags = (const uint32_t *)(a.dc.ws + a.flags_off);
  for (uint32_t i = blockIdx.x + gridDim.x * threadIdx.x; i < nf; i += gridDim.x * blockDim.x)
    if (!loom__signal_wait(&a.dc, flags + i, epoch, -1, i, LOOM_SITE_EMB_SLICE_READY)) { ok = 0; break; }
  if (!__syncthreads_and(ok)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 0);
}

/* ---- atomic backward (fp32 tables) ----------------------------------------- */

/* Fused (pool_only 0): block 0 announces "grad_out readable" (gready);
 * tasks pull their gradient rows from q's grad_out (LSA loads, after the
 * bounded wait for gready[q]) and scatter-add into table_grad; the last task
 * for source q tells q it is done reading (gdone); the kernel ends after
 * every peer's gdone. Local (pool_only 1, the staged path): grad rows from
 * peer[0] laid out [B, T*D] (what NCCL delivered), static stride, no signals. */
template <typename OT, int NV>
__global__ void __launch_bounds__(LOOM_EMB_THREADS, LOOM_EMB_MIN_BLOCKS)
    loom__emb_bwd_atomic_kernel(const __grid_constant__ loom_emb_kargs_t a) {
  __shared__ int64_t s_task[LOOM_EMB_THREADS / 32];
  __shared__ int s_abort;
  __shared__ unsigned char s_ready[LOOM_EMB_MAX_LSA];
  const loom_emb_sched_t &s = a.s;
  const int lane = threadIdx.x & 31;
  const int D = a.dim;
  const int comm = !a.pool_only;
  const int64_t ntasks = loom__emb_num_tasks(&s), per_dest = loom__emb_tasks_per_dest(&s);
  uint32_t *misc = (uint32_t *)(a.dc.ws + a.fetch_off);
  const uint32_t epoch = comm ? loom__epoch_begin((const loom_dev_epoch_t *)(a.dc.ws + a.epoch_off)) : 0u;

  if (threadIdx.x == 0) s_abort = 0;
  for (int p = threadIdx.x; p < LOOM_EMB_MAX_LSA; p += blockDim.x) s_ready[p] = (p == s.rank);
  if (comm && blockIdx.x == 0) {
    __threadfence_system();
    for (int p = threadIdx.x; p < s.world; p += blockDim.x) {
      loom__signal_store_release(loom_signal_addr(&a.dc, p, a.gready_off, (uint32_t)s.rank), epoch);
      if (per_dest == 0) /* nothing to read from anyone: done at once */
        loom__signal_store_release(loom_signal_addr(&a.dc, p, a.gdone_off, (uint32_t)s.rank), epoch);
    }
  }
  __syncthreads();

  emb_fetch_t f = emb_fetch_init(comm ? misc + 1 : nullptr, comm ? (const uint32_t *)(a.dc.ws + a.gready_off) : nullptr,
                                 emb_sig_index(a, a.gready_off), LOOM_SITE_EMB_GRAD_READY, epoch);
  for (;;) {
    const int64_t k = emb_next_task(a, f, ntasks, s_task, s_ready, &s_abort);
    if (k < 0 || k >= ntasks) break;
    const loom_emb_task_t tk = loom__emb_task_decode(&s, k);
    const int t = tk.table;
    if (!comm)
      emb_scatter_bags<OT, NV>(a, tk, lane, reinterpret_cast<const OT *>(a.peer[0]) + (int64_t)t * D, 0,
                               (int64_t)s.t_local * D);
    else
      emb_scatter_bags<OT, NV>(a, tk, lane,
                               reinterpret_cast<const OT *>(a.peer[tk.dest]) + (int64_t)(s.table_base + t) * D,
                               (int64_t)tk.dest * s.local_batch, (int64_t)s.t_total * D);
    __syncwarp();
    if (comm && lane == 0) {
      __threadfence_system(); /* loads from q are done (their values were used) */
      uint32_t *cnt = (uint32_t *)(a.dc.ws + a.bcount_off) + tk.dest;
      if (loom__last_arrival(cnt, (uint32_t)per_dest))
        loom__signal_store_release(loom_signal_addr(&a.dc, tk.dest, a.gdone_off, (uint32_t)s.rank), epoch);
    }
  }
  if (!__syncthreads_and(!s_abort)) return;
  if (!comm) return;
  /* nobody reads this rank's grad_out once every peer said so */
  if (!emb_wait_peers(a, a.gdone_off, epoch, LOOM_SITE_EMB_GRAD_DONE, 0)) return;
  if (threadIdx.x == 0) emb_block_done(a, epoch, 1);
}

/* ---- launchers ----------------------------------------------------------- */

typedef void (*emb_kernel_t)(loom_emb_kargs_t);

template <typename TT, typename OT>
static emb_kernel_t fwd_nv(int nv) {
  switch (nv) {
    case 1: return loom__emb_fwd_kernel<TT, OT, 1>;
    case 2: return loom__emb_fwd_kernel<TT, OT, 2>;
    case 4: return loom__emb_fwd_kernel<TT, OT, 4>;
    default: return loom__emb_fwd_kernel<TT, OT, 8>;
  }
}
template <typename TT>
static emb_kernel_t fwd_ot(loom_dtype_t ot, int nv) {
  switch (ot) {
    case LOOM_FP16: return fwd_nv<TT, __half>(nv);
    case LOOM_BF16: return fwd_nv<TT, __nv_bfloat16>(nv);
    default: return fwd_nv<TT, float>(nv);
  }
}
/* The forward kernel for these dtypes and dim. */
static emb_kernel_t fwd_kernel(loom_dtype_t tt, loom_dtype_t ot, int dim) {
  const int nv = emb_chunks_per_lane(tt, dim);
  switch (tt) {
    case LOOM_FP16: return fwd_ot<__half>(ot, nv);
    case LOOM_BF16: return fwd_ot<__nv_bfloat16>(ot, nv);
    default: return fwd_ot<float>(ot, nv);
  }
}

template <typename OT>
static emb_kernel_t bwd_nv(int nv) {
  switch (nv) {
    case 1: return loom__emb_bwd_atomic_kernel<OT, 1>;
    case 2: return loom__emb_bwd_atomic_kernel<OT, 2>;
    case 4: return loom__emb_bwd_atomic_kernel<OT, 4>;
    default: return loom__emb_bwd_atomic_kernel<OT, 8>;
  }
}
/* The atomic backward kernel (fp32 tables) for this grad dtype and dim. */
static emb_kernel_t bwd_kernel(loom_dtype_t ot, int dim) {
  const int nv = emb_chunks_per_lane(LOOM_FP32, dim);
  switch (ot) {
    case LOOM_FP16: return bwd_nv<__half>(nv);
    case LOOM_BF16: return bwd_nv<__nv_bfloat16>(nv);
    default: return bwd_nv<float>(nv);
  }
}

/* Registers of the sorted backward's run kernel (embedding_a2a_sorted.cu). */
extern "C" loom_result_t loom__emb_sorted_regs(loom_dtype_t tt, loom_dtype_t ot, int dim, int *regs, int *local_bytes);

extern "C" loom_result_t loom__emb_occupancy(loom_dtype_t tt, loom_dtype_t ot, int dim, int *blocks_per_sm) {
  LOOM_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks_per_sm, fwd_kernel(tt, ot, dim), LOOM_EMB_THREADS, 0));
  if (*blocks_per_sm < 1) *blocks_per_sm = 1;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_kernel_regs(loom_dtype_t tt, loom_dtype_t ot, int dim, int which, int *regs,
                                               int *local_bytes) {
  if (which == 2) return loom__emb_sorted_regs(tt, ot, dim, regs, local_bytes);
  struct cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, which == 1 ? bwd_kernel(ot, dim) : fwd_kernel(tt, ot, dim)));
  *regs = fa.numRegs;
  *local_bytes = (int)fa.localSizeBytes;
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_launch_forward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot, int grid,
                                                  cudaStream_t stream) {
  fwd_kernel(tt, ot, a->dim)<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__emb_fwd_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__emb_launch_backward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot, int grid,
                                                   cudaStream_t stream) {
  if (tt != LOOM_FP32)
    return loom__fail(LOOM_ERR_INTERNAL, "loom__emb_launch_backward: the atomic backward takes fp32 tables only");
  bwd_kernel(ot, a->dim)<<<grid, LOOM_EMB_THREADS, 0, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom__emb_bwd_atomic_kernel");
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
