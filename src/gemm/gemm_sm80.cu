/*
 * gemm_sm80.cu - the launcher of loom's portable GEMM for compute capability
 * >= 8.0 (the kernel and its description: gemm_sm80.cuh): the
 * configuration's checks, the split-K workspace and the kernel of a
 * configuration, found in the table of instantiation groups below (each
 * group's kernels are compiled in gemm_sm80_<type>.cu).
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_sm80.cuh"
#include "gemm/sm80_layout.h"
#include "gemm/tile_order.h"

/* The instantiation groups (gemm_sm80_<type>.cu): bf16 and fp16 A and B. */
LOOM_SM80_GROUP_DECL(bf16);
LOOM_SM80_GROUP_DECL(fp16);

/* The kernel instantiation for a configuration (bn 256, else 128; split:
 * split-K, plain GEMMs of bn 128 only). */
static loom__sm80_kernel_t loom__sm80_pick(int bn, int type, int tb, int hooks, int split) {
  return type == LOOM_BF16 ? LOOM_SM80_GROUP_FN(bf16)(bn, tb, hooks, split)
                           : LOOM_SM80_GROUP_FN(fp16)(bn, tb, hooks, split);
}

extern "C" const void *loom__gemm_sm80_kernel_for(int bn, int type, int tb, int hooks, int split) {
  return (const void *)loom__sm80_pick(bn, type, tb, hooks, split);
}

extern "C" int loom__gemm_sm80_supported(const loom_gemm_desc_t *d, int cc_major, int cc_minor) {
  (void)cc_minor;
  if (cc_major < 8) return 0;
  if (d->ab_type != LOOM_BF16 && d->ab_type != LOOM_FP16) return 0;
  if (d->m > INT32_MAX / 2 || d->n > INT32_MAX / 2 || d->k > INT32_MAX / 2) return 0;
  /* the loaded binary must carry code for this device (SASS or PTX >= 8.0) */
  static int cache = -1;
  int ptx = 0, bin = 0;
  if (!loom__gemm_code_versions(&cache, (const void *)loom__sm80_pick(128, LOOM_BF16, 0, 0, 0), &ptx, &bin)) return 0;
  return ptx >= 80 || bin >= 80;
}

extern "C" loom_result_t loom__gemm_sm80(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                         const void *bias, const loom_gemm_config_t *cfg,
                                         const loom_gemm_hooks_t *hooks, cudaStream_t stream) {
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  const int optin = dev.smem_optin;
  loom_gemm_config_t conf = cfg ? *cfg : loom__gemm_sm80_heuristic(d, &dev);
  if (conf.bn != 128 && conf.bn != 256)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm (sm80): config bn=%d: must be 128 or 256", conf.bn);
  if (conf.stages != 0 && conf.stages != LOOM_SM80_STAGES)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm (sm80): config stages=%d: the kernel is built with %d",
                      conf.stages, LOOM_SM80_STAGES);
  /* split-K: every tile (sk_tiles -1) cut into sk_splits aligned k ranges;
   * no stream-K, no partial sets of tiles on this path */
  if (conf.sk_splits < 0 || conf.sk_splits > 64 || (conf.sk_splits > 1) != (conf.sk_tiles == -1) ||
      (conf.sk_tiles != 0 && conf.sk_tiles != -1) || conf.sk_blocks != 0)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm (sm80): config sk_tiles=%d sk_blocks=%d sk_splits=%d: the sm80 "
                      "path has split-K of every tile only (sk_tiles -1, sk_blocks 0, sk_splits 2..64) or none (0, 0, 0/1)",
                      conf.sk_tiles, conf.sk_blocks, conf.sk_splits);
  /* a GPU with less shared memory per block (e.g. sm_86/89: 99 KiB) may not
   * fit 256-wide tiles: fall back to 128 unless the caller insisted */
  if ((int)loom__sm80_smem_bytes(conf.bn) > optin && conf.bn == 256 && !cfg) conf.bn = 128;
  const int smem = (int)loom__sm80_smem_bytes(conf.bn);
  if (smem > optin)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm (sm80): bn=%d needs %d bytes of shared memory per block; "
                      "this GPU allows %d", conf.bn, smem, optin);

  loom_sm80_args_t args;
  memset(&args, 0, sizeof args);
  args.a = a, args.b = b, args.c = c;
  args.bias = d->has_bias ? bias : NULL;
  args.m = (int32_t)d->m, args.n = (int32_t)d->n, args.k = (int32_t)d->k;
  args.c_type = (int32_t)d->c_type;
  args.kblocks = (int32_t)loom__ceil_div(d->k, LOOM_SM80_BK);
  if (hooks) args.hooks = *hooks;
  LOOM_TRY(loom__gemm_order(d, hooks, LOOM_SM80_BM, conf.bn, conf.group > 0 ? conf.group : 8, &args.order));
  const int64_t tiles = (int64_t)args.order.tiles_m * args.order.tiles_n;
  int splits = conf.sk_splits > args.kblocks ? args.kblocks : conf.sk_splits;
  if (hooks) splits = 0; /* hooked GEMMs: whole tiles (signals and waits are per tile) */
  if (splits > 1 && tiles * splits > INT32_MAX) splits = 0;
  if (tiles > INT32_MAX)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm (sm80): %lld tiles exceed one launch",
                      (long long)tiles);
  loom_scratch_t scratch = {NULL, NULL, 0, 0};
  if (splits > 1) {
    /* a slot of 128 x bn fp32 per unit, a ticket per tile (shared with the
     * sm90 path's scratch of this stream: both are stream-ordered) */
    LOOM_TRY(loom__gemm_sk_workspace(stream, (size_t)tiles * 4,
                                     (size_t)tiles * (size_t)splits * LOOM_SM80_BM * (size_t)conf.bn * 4,
                                     &args.sk_count, &args.sk_ws, &scratch));
  }
  if (splits > 1 && conf.bn != 128)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm (sm80): config bn=%d with sk_splits=%d: split-K runs 128-wide tiles only",
                      conf.bn, conf.sk_splits);
  const int64_t blocks = splits > 1 ? tiles * splits : tiles;
  if (splits > 1) {
    args.work.tiles = (int32_t)tiles;
    args.work.kblocks = args.kblocks;
    args.work.grid = (int32_t)blocks;
    args.work.dp_tiles = 0;
    args.work.sk_blocks = 0;
    args.work.splits = splits;
  }

  loom__sm80_kernel_t kern =
      loom__sm80_pick(conf.bn, (int)d->ab_type, d->b_layout == LOOM_B_KN, hooks != NULL, splits > 1);
  LOOM_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kern<<<(unsigned)blocks, LOOM_SM80_THREADS, (size_t)smem, stream>>>(args);
  LOOM_CUDA_LAUNCHED("loom__gemm_sm80_kernel");
  return loom__scratch_done(stream, &scratch);
}

extern "C" loom_result_t loom__gemm_sm80_preload(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg) {
  const int bn = cfg && cfg->bn == 256 ? 256 : 128;
  loom__sm80_kernel_t kern = loom__sm80_pick(bn, (int)d->ab_type, d->b_layout == LOOM_B_KN, 1, 0);
  cudaFuncAttributes fa;
  LOOM_CUDA(cudaFuncGetAttributes(&fa, (const void *)kern));
  return LOOM_SUCCESS;
}
