/*
 * coll_kernels.cu - the kernel of loom's collectives (loom_allreduce one-shot
 * and two-shot, loom_reduce_scatter, loom_all_gather): one kernel per call,
 * composed of the building blocks of coll_device.cuh in the steps that
 * coll.h lists (arrival, staging free, reduction with the epilogue, gather,
 * done, hand-back). Instantiated for every (input, output) dtype pair;
 * reached through loom__coll_launch. Any architecture >= sm_80.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "core/error.h"
#include "ops/coll.h"
#include "ops/coll_device.cuh"
#include "ops/coll_schedule.h"

/* The chunks of the reduction step: the whole vector (one-shot) or this
 * rank's slice; block b takes items b, b + G, ... */
static __device__ __forceinline__ void loom_coll_reduce_span(const loom_coll_args_t &a, int64_t mb, int64_t ml,
                                                             int64_t *rb, int64_t *rl) {
  const int one = a.kind == LOOM__CK_ONE_SHOT;
  *rb = one ? 0 : mb;
  *rl = one ? a.count : ml;
}

template <int TI, int TO>
__global__ void __launch_bounds__(LOOM_COLL_THREADS) loom_coll_kernel(const __grid_constant__ loom_coll_args_t a) {
  extern __shared__ float loom_coll_xs[]; /* a row in fp32 (row-wise epilogue) */
  __shared__ float red[33];
  const loom_dev_comm_t &dc = a.dc;
  const int W = dc.size, r = dc.rank;
  loom_dev_epoch_t *ep = (loom_dev_epoch_t *)(dc.ws + a.epoch_off);
  const uint32_t e = loom_epoch_begin(ep);
  uint32_t *own = (uint32_t *)(dc.ws + a.sig_off);

  /* 1. this rank's input is readable (the caller's writes to it are
   *    performed first); every block says so, so no block depends on
   *    another being scheduled */
  if (threadIdx.x == 0) {
    __threadfence_system();
    loom_signal_store_release(own + LOOM_COLL_SIG_ARRIVED, e);
  }
  int64_t mb, ml;
  loom_coll_slice(a.count, W, r, a.unit, &mb, &ml);

  /* 2. reduction with the epilogue, once every rank's call has started (its
   *    input is ready, and its previous call, the last reader of this rank's
   *    staging, has completed) */
  if (a.kind != LOOM__CK_AG) {
    if (!loom_coll_wait_all(dc, a.sig_off, LOOM_COLL_SIG_ARRIVED, e, LOOM_SITE_COLL_ARRIVED)) return;
    int64_t rb, rl;
    loom_coll_reduce_span(a, mb, ml, &rb, &rl);
    char *d0 = a.out, *d1 = NULL;
    int64_t o0 = 0, o1 = 0;
    /* staging only where peers read it (two-shot) or read `in` (one-shot in
     * place); at W = 1 the result goes straight to out, in place or not */
    if (a.kind == LOOM__CK_ONE_SHOT && a.in_place && W > 1) d0 = a.stg_own;
    if (a.kind == LOOM__CK_TWO_SHOT && W > 1) d1 = a.stg_own, o1 = mb;
    if (a.kind == LOOM__CK_RS) o0 = mb;
    const int64_t nch = loom_coll_chunks(rl, a.chunk);
    for (int64_t q = blockIdx.x; q < nch; q += gridDim.x) {
      const int64_t j = a.kind == LOOM__CK_ONE_SHOT ? loom_coll_one_shot_chunk(r, W, nch, q) : q;
      int64_t cb, cl;
      loom_coll_chunk(rb, rl, a.chunk, j, &cb, &cl);
      if (a.norm != LOOM_NORM_NONE) {
        for (int64_t row = cb / a.cols; row < (cb + cl) / a.cols; ++row)
          loom_coll_reduce_row<TI, TO>(a.src, W, row, a.cols, a.pw, a.norm, a.eps, a.norm_w, a.norm_b, loom_coll_xs,
                                       red, d0, o0, d1, o1);
      } else {
        loom_coll_reduce_range<TI, TO>(a.src, W, cb, cl, d0, o0, d1, o1, a.pw);
      }
      if (a.kind == LOOM__CK_TWO_SHOT) loom_coll_signal_own(dc, a.sig_off, LOOM_COLL_SIG_REDUCED + (uint32_t)j, e);
    }
  }

  /* 3. gather: the peers' slices, peer by peer in rank-shifted order */
  if (a.kind == LOOM__CK_TWO_SHOT || a.kind == LOOM__CK_AG) {
    const int steps = a.kind == LOOM__CK_AG ? W : W - 1;
    const int64_t items = (int64_t)steps * a.nch;
    for (int64_t t = blockIdx.x; t < items; t += gridDim.x) {
      int32_t i;
      int64_t j;
      loom_coll_gather_item(t, a.nch, &i, &j);
      const int q = loom_coll_peer_at(r, W, i);
      int64_t qb, ql, cb, cl;
      loom_coll_slice(a.count, W, q, a.unit, &qb, &ql);
      loom_coll_chunk(qb, ql, a.chunk, j, &cb, &cl);
      if (cl == 0) continue;
      if (a.kind == LOOM__CK_AG) {
        if (q == r) {
          if (!a.in_place) loom_coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.src[r], qb, a.out, 0, cb, cl);
          continue;
        }
        if (!loom_coll_wait_one(dc, q, a.sig_off, LOOM_COLL_SIG_ARRIVED, e, LOOM_SITE_COLL_ARRIVED)) return;
        loom_coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.src[q], qb, a.out, 0, cb, cl);
      } else {
        if (!loom_coll_wait_one(dc, q, a.sig_off, LOOM_COLL_SIG_REDUCED + (uint32_t)j, e, LOOM_SITE_COLL_REDUCED))
          return;
        loom_coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.stg[q], qb, a.out, 0, cb, cl);
      }
    }
  }

  /* 4. the last block: this rank is done reading every peer's buffers (and,
   *    one-shot in place, its staging stores are performed) */
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    if (loom_last_arrival(&ep->blocks_done, gridDim.x)) {
      loom_signal_store_release(own + LOOM_COLL_SIG_DONE, e);
      *(volatile uint32_t *)&ep->epoch = e;
    }
  }

  /* 5. peers read this rank's `in` until they are done: the call completes after that */
  if (a.kind != LOOM__CK_TWO_SHOT) {
    if (!loom_coll_wait_all(dc, a.sig_off, LOOM_COLL_SIG_DONE, e, LOOM_SITE_COLL_DONE)) return;
    if (a.kind == LOOM__CK_ONE_SHOT && a.in_place && W > 1) {
      const int64_t nch = loom_coll_chunks(a.count, a.chunk);
      for (int64_t q = blockIdx.x; q < nch; q += gridDim.x) {
        int64_t cb, cl;
        loom_coll_chunk(0, a.count, a.chunk, loom_coll_one_shot_chunk(r, W, nch, q), &cb, &cl);
        /* this block's own stores of step 2: visible to it without a fence */
        loom_coll_copy_range<TO == LOOM_FP32 ? 4 : 2>(a.stg_own, 0, a.out, 0, cb, cl);
      }
    }
  }
}

typedef void (*loom_coll_kernel_fn)(loom_coll_args_t);

static loom_coll_kernel_fn loom_coll_pick(int ti, int to) {
#define LOOM_COLL_K(I, O) \
  if (ti == I && to == O) return loom_coll_kernel<I, O>;
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

extern "C" loom_result_t loom__coll_launch(const loom_coll_args_t *a, int blocks, size_t smem, cudaStream_t stream) {
  loom_coll_kernel_fn k = loom_coll_pick(a->in_type, a->out_type);
  if (!k) return loom__fail(LOOM_ERR_INTERNAL, "collective kernel for dtypes %d -> %d missing", a->in_type, a->out_type);
  k<<<blocks, LOOM_COLL_THREADS, smem, stream>>>(*a);
  LOOM_CUDA_LAUNCHED("loom_coll_kernel");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__coll_prepare(int in_type, int out_type, size_t smem) {
  loom_coll_kernel_fn k = loom_coll_pick(in_type, out_type);
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
