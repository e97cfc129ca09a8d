/*
 * gemm_sm90.cu - the launcher of loom's Hopper GEMM (the kernel and its
 * description: gemm_sm90.cuh): tensor maps, the configuration's checks, the
 * stream-K / split-K workspace, grid and clusters, and the kernel of a
 * configuration, found in the table of instantiation groups below (each
 * group's kernels are compiled in gemm_sm90_<bm>x<bn>_<type>.cu).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_sm90.cuh"
#include "gemm/sm90_layout.h"
#include "gemm/split_reduce.h"
#include "gemm/tile_order.h"

/* ---- host side -------------------------------------------------------- */

static PFN_cuTensorMapEncodeTiled_v12000 loom__encode_fn;

/* cuTensorMapEncodeTiled from the driver, through the runtime (loom does
 * not link libcuda). */
static loom_result_t loom__get_encode(PFN_cuTensorMapEncodeTiled_v12000 *out) {
  PFN_cuTensorMapEncodeTiled_v12000 fn = __atomic_load_n(&loom__encode_fn, __ATOMIC_ACQUIRE);
  if (!fn) {
    void *p = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    LOOM_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (!p || q != cudaDriverEntryPointSuccess)
      return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: the driver has no cuTensorMapEncodeTiled (query result %d)",
                        (int)q);
    fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    __atomic_store_n(&loom__encode_fn, fn, __ATOMIC_RELEASE);
  }
  *out = fn;
  return LOOM_SUCCESS;
}

/* A row-major tensor [depth, outer, inner] of dtype t (bf16, fp16 or fp32;
 * depth 0: 2-D [outer, inner]), boxes of [1, box_outer, box_inner], 128-byte
 * swizzle, out-of-bounds zero fill on loads (and clipping on stores). */
extern "C" loom_result_t loom__gemm_tensor_map(void *out, const void *ptr, loom_dtype_t t, uint64_t inner,
                                               uint64_t outer, uint64_t depth, uint32_t box_inner,
                                               uint32_t box_outer, const char *what) {
  CUtensorMap *map = (CUtensorMap *)out;
  PFN_cuTensorMapEncodeTiled_v12000 encode = NULL;
  LOOM_TRY(loom__get_encode(&encode));
  const uint64_t es = t == LOOM_FP32 ? 4 : 2;
  const cuuint32_t rank = depth > 0 ? 3 : 2;
  cuuint64_t dims[3] = {inner, outer, depth};
  cuuint64_t strides[2] = {inner * es, inner * outer * es};
  cuuint32_t box[3] = {box_inner, box_outer, 1};
  cuuint32_t estr[3] = {1, 1, 1};
  const CUtensorMapDataType dt = t == LOOM_FP32   ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                 : t == LOOM_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                  : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  CUresult r = encode(map, dt, rank, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return loom__fail(LOOM_ERR_CUDA,
                      "loom_gemm: cuTensorMapEncodeTiled(%s [%llu, %llu, %llu], box [%u, %u]) failed: %d", what,
                      (unsigned long long)depth, (unsigned long long)outer, (unsigned long long)inner, box_outer,
                      box_inner, (int)r);
  return LOOM_SUCCESS;
}

static loom_result_t loom__tensor_map(CUtensorMap *map, const void *ptr, loom_dtype_t t, uint64_t inner,
                                      uint64_t outer, uint32_t box_inner, uint32_t box_outer, const char *what) {
  return loom__gemm_tensor_map(map, ptr, t, inner, outer, 0, box_inner, box_outer, what);
}

extern "C" loom_result_t loom__gemm_epi_map(void *map, const void *base, loom_dtype_t c_type, int64_t rows,
                                            int64_t n) {
  static_assert(sizeof(CUtensorMap) == LOOM_GEMM_EPI_MAP_BYTES, "LOOM_GEMM_EPI_MAP_BYTES is a CUtensorMap");
  if (rows <= 0 || n <= 0 || (n * (c_type == LOOM_FP32 ? 4 : 2)) % 16 != 0 || ((uintptr_t)base & 15u) != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: epilogue map of [%lld, %lld] at %p: rows and n must be "
                      "positive, rows 16-byte multiples, the base 16-byte aligned", (long long)rows, (long long)n, base);
  return loom__tensor_map((CUtensorMap *)map, base, c_type, (uint64_t)n, (uint64_t)rows, c_type == LOOM_FP32 ? 32 : 64,
                          64, "bulk-add destination");
}

static size_t loom__sm90_smem(int bm, int bn, int hooks) {
  (void)hooks; /* hooked kernels hold the TMA epilogue's buffers too */
  return loom__sm90_smem_bytes(bm, bn, LOOM_SM90_STAGES(bm, bn), LOOM_SM90_EPI_BUFS(bm, bn), 0);
}

/* The instantiation groups (gemm_sm90_<bm>x<bn>_<type>.cu): every tile the
 * launcher takes, for bf16 and fp16 A and B. */
LOOM_SM90_GROUP_DECL(64, 128, bf16);
LOOM_SM90_GROUP_DECL(64, 128, fp16);
LOOM_SM90_GROUP_DECL(64, 256, bf16);
LOOM_SM90_GROUP_DECL(64, 256, fp16);
LOOM_SM90_GROUP_DECL(128, 128, bf16);
LOOM_SM90_GROUP_DECL(128, 128, fp16);
LOOM_SM90_GROUP_DECL(128, 192, bf16);
LOOM_SM90_GROUP_DECL(128, 192, fp16);
LOOM_SM90_GROUP_DECL(128, 224, bf16);
LOOM_SM90_GROUP_DECL(128, 224, fp16);
LOOM_SM90_GROUP_DECL(128, 256, bf16);
LOOM_SM90_GROUP_DECL(128, 256, fp16);

typedef loom__sm90_kernel_t (*loom__sm90_group_fn)(int tb, int hooks, int sk, int cl, int act);
static const struct {
  int bm, bn, type;
  loom__sm90_group_fn kernels;
} loom__sm90_groups[] = {
#define G(BM, BN, T) {BM, BN, LOOM_SM90_TYPE_##T, LOOM_SM90_GROUP_FN(BM, BN, T)}
    G(64, 128, bf16),  G(64, 128, fp16),  G(64, 256, bf16),  G(64, 256, fp16),
    G(128, 128, bf16), G(128, 128, fp16), G(128, 192, bf16), G(128, 192, fp16),
    G(128, 224, bf16), G(128, 224, fp16), G(128, 256, bf16), G(128, 256, fp16),
#undef G
};

/* The kernel instantiation for a configuration (bm: 64 or 128; bn: 128,
 * 192, 224 or 256 (bm 64: 128 or 256); sk: any stream-K tiles (hooked:
 * wait-only hooks; at bn 192 / 224 without an activation, else NULL); cl:
 * blocks per cluster; act: the hooks' activation, 0 without hooks). */
static loom__sm90_kernel_t loom__sm90_pick(int bm, int bn, int type, int tb, int hooks, int sk, int cl, int act) {
  bm = bm == 64 ? 64 : 128;
  if (bm == 64) bn = bn == 256 ? 256 : 128;
  else if (bn != 192 && bn != 224 && bn != 256) bn = 128;
  type = type == LOOM_BF16 ? LOOM_BF16 : LOOM_FP16;
  for (size_t i = 0; i < sizeof loom__sm90_groups / sizeof loom__sm90_groups[0]; ++i)
    if (loom__sm90_groups[i].bm == bm && loom__sm90_groups[i].bn == bn && loom__sm90_groups[i].type == type)
      return loom__sm90_groups[i].kernels(tb, hooks, sk, cl, act);
  return NULL;
}

extern "C" const void *loom__gemm_sm90_kernel_for(int bm, int bn, int type, int tb, int hooks, int sk, int cl, int act) {
  return (const void *)loom__sm90_pick(bm, bn, type, tb, hooks, sk, cl, act);
}

/* Launch configuration of `grid` blocks in clusters of 2 along x; `at`
 * holds its attribute. */
static cudaLaunchConfig_t loom__sm90_cluster_launch(int grid, size_t smem, cudaStream_t stream,
                                                    cudaLaunchAttribute *at) {
  cudaLaunchConfig_t lc = {};
  at->id = cudaLaunchAttributeClusterDimension;
  at->val.clusterDim.x = 2, at->val.clusterDim.y = 1, at->val.clusterDim.z = 1;
  lc.gridDim = dim3((unsigned)grid, 1, 1);
  lc.blockDim = dim3(LOOM_SM90_THREADS, 1, 1);
  lc.dynamicSmemBytes = smem;
  lc.stream = stream;
  lc.attrs = at;
  lc.numAttrs = 1;
  return lc;
}

/* Clusters of 2 of kernel `kern` that can be resident at once on the
 * current device (cached per device and tile width). */
static loom_result_t loom__sm90_max_clusters(loom__sm90_kernel_t kern, int bn, size_t smem, int *out) {
  static int cache[16][2];
  int dev;
  LOOM_CUDA(cudaGetDevice(&dev));
  int *slot = dev >= 0 && dev < 16 ? &cache[dev][bn == 256] : NULL;
  if (slot && __atomic_load_n(slot, __ATOMIC_RELAXED) > 0) {
    *out = __atomic_load_n(slot, __ATOMIC_RELAXED);
    return LOOM_SUCCESS;
  }
  cudaLaunchAttribute at;
  const cudaLaunchConfig_t lc = loom__sm90_cluster_launch(2, smem, 0, &at);
  int n = 0;
  LOOM_CUDA(cudaOccupancyMaxActiveClusters(&n, (const void *)kern, &lc));
  if (n < 1) return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: no cluster of 2 blocks fits on this GPU (bn=%d)", bn);
  if (slot) __atomic_store_n(slot, n, __ATOMIC_RELAXED);
  *out = n;
  return LOOM_SUCCESS;
}

extern "C" int loom__gemm_sm90_supported(const loom_gemm_desc_t *d, int cc_major, int cc_minor) {
  if (cc_major != 9 || cc_minor != 0) return 0;
  if (d->ab_type != LOOM_BF16 && d->ab_type != LOOM_FP16) return 0;
  if (d->m > INT32_MAX / 2 || d->n > INT32_MAX / 2 || d->k > INT32_MAX / 2) return 0;
  /* the library must carry sm_90a code for the kernels (not only sm_80 PTX) */
  static int cache = -1;
  int ptx = 0, bin = 0;
  if (!loom__gemm_code_versions(&cache, (const void *)loom__sm90_pick(128, 256, LOOM_BF16, 0, 0, 0, 1, 0), &ptx, &bin))
    return 0;
  return ptx >= 90 && bin == 90;
}

/* Hooks that only wait (prologue waits, plain TMA stores into C, no tile
 * signals) at a tile width and activation the stream-K hooked kernels are
 * built for (bn 192 / 224: no activation). */
static int loom__sm90_hooks_wait_only(const loom_gemm_hooks_t *hooks, int epi_tma, int bn) {
  return epi_tma == 1 && !hooks->tile_signal && !hooks->dst_signal &&
         (bn == 128 || bn == 256 || hooks->activation == LOOM_ACT_NONE);
}

extern "C" loom_result_t loom__gemm_sm90(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                         const void *bias, const loom_gemm_config_t *cfg,
                                         const loom_gemm_hooks_t *hooks, cudaStream_t stream) {
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  const int sms = dev.sms;
  loom_gemm_config_t conf = cfg ? *cfg : loom__gemm_sm90_heuristic(d, &dev);
  if (conf.bn != 128 && conf.bn != 192 && conf.bn != 224 && conf.bn != 256)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bn=%d: must be 128, 192, 224 or 256", conf.bn);
  if (conf.bm != 0 && conf.bm != 64 && conf.bm != 128)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bm=%d: must be 0, 64 or 128", conf.bm);
  if (conf.bm == 64 && conf.bn != 128 && conf.bn != 256)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bm=64 bn=%d: 64-row tiles are built for bn 128 or 256",
                      conf.bn);
  const int bm = conf.bm == 64 ? 64 : 128;
  const int stages = LOOM_SM90_STAGES(bm, conf.bn);
  if (conf.stages != 0 && conf.stages != stages)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: config stages=%d: bm=%d bn=%d is built with %d stages",
                      conf.stages, bm, conf.bn, stages);

  loom_sm90_args_t args;
  loom__sm90_args_base(&args, d->m, d->n, d->k, (int)d->c_type, c, d->has_bias ? bias : NULL);
  if (hooks) args.hooks = *hooks;
  /* hooked GEMMs that store plainly into c take the plain kernel's TMA-store
   * epilogue; routed or reducing stores go from registers */
  args.epi_tma = !hooks || (!hooks->row_dst && hooks->epilogue == LOOM_EPI_STORE);
  if (hooks && hooks->epilogue == LOOM_EPI_BULK_ADD) {
    if (!hooks->dst_maps || hooks->rows_per_dst <= 0 || hooks->rows_per_dst % 64 != 0 || hooks->row_dst)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "loom_gemm: bulk-add hooks need dst_maps, rows_per_dst a positive multiple of 64 (%lld) and "
                        "no row_dst",
                        (long long)hooks->rows_per_dst);
    if (conf.bn == 224 && d->c_type != LOOM_FP32)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "loom_gemm: bulk-add hooks with bn=224: its last 32 columns are stored from registers, which "
                        "cannot add into a destination map; take bn 192 or 256");
    args.epi_tma = 2; /* the TMA epilogue, adding into the destinations' maps */
  }
  LOOM_TRY(loom__gemm_order(d, hooks, bm, conf.bn, conf.group > 0 ? conf.group : 16, &args.order));
  if (conf.cluster < 0 || conf.cluster > 2)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config cluster=%d: must be 0, 1 or 2", conf.cluster);

  CUtensorMap ma, mb;
  LOOM_TRY(loom__tensor_map(&ma, a, d->ab_type, (uint64_t)d->k, (uint64_t)d->m, LOOM_SM90_BK, (uint32_t)bm, "A"));
  /* clusters (data-parallel GEMMs of 128-row tiles with 2+ tile rows):
   * each block of a pair loads half of the B tile, so the B box of [n, k]
   * is bn/2 rows. Hooked GEMMs take them when they only wait (each block
   * waits for its own rows; stores plain into c, no tile signals) and their
   * tile order keeps its meaning over pairs of tile rows */
  const int hooks_cl = !hooks || (args.epi_tma && !hooks->tile_signal && !hooks->dst_signal &&
                                  loom__cluster_order_fits(&args.order, 2));
  const int want_cl = conf.cluster == 2 && hooks_cl && bm == 128 && (conf.bn == 128 || conf.bn == 256) &&
                              conf.sk_tiles == 0 && args.order.tiles_m >= 2
                          ? 2
                          : 1;
  if (d->b_layout == LOOM_B_NK)
    LOOM_TRY(loom__tensor_map(&mb, b, d->ab_type, (uint64_t)d->k, (uint64_t)d->n, LOOM_SM90_BK,
                              (uint32_t)(conf.bn / want_cl), "B"));
  else
    LOOM_TRY(loom__tensor_map(&mb, b, d->ab_type, (uint64_t)d->n, (uint64_t)d->k, 64, LOOM_SM90_BK, "B"));
  /* C for the TMA epilogue: boxes of 64 rows x 128 bytes */
  CUtensorMap mc;
  memset(&mc, 0, sizeof mc);
  if (args.epi_tma)
    LOOM_TRY(loom__tensor_map(&mc, c, d->c_type, (uint64_t)d->n, (uint64_t)d->m, d->c_type == LOOM_FP32 ? 32 : 64,
                              64, "C"));

  const int tiles = args.order.tiles_m * args.order.tiles_n;
  const int kblocks = (int)loom__ceil_div(d->k, LOOM_SM90_BK);
  const int cap = conf.grid > 0 ? conf.grid : sms;
  if (conf.sk_tiles < -1 || conf.sk_blocks < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config sk_tiles=%d sk_blocks=%d: must be >= -1 and >= 0",
                      conf.sk_tiles, conf.sk_blocks);
  if (conf.sk_splits < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config sk_splits=%d: must be >= 0", conf.sk_splits);
  int sk_tiles = conf.sk_tiles < 0 || conf.sk_tiles > tiles ? tiles : conf.sk_tiles;
  /* hooked GEMMs run stream-K / split-K where they only wait (a segment
   * waits for its tile's rows) and tiles are 128 or 256 wide; hooks that
   * route, reduce or signal per tile run data-parallel (gemm_sm90.cuh: that
   * instantiation would serialise the wgmma, C7518) */
  if (hooks && !loom__sm90_hooks_wait_only(hooks, args.epi_tma, conf.bn)) sk_tiles = 0;
  int sk_blocks = 0, splits = conf.sk_splits < kblocks ? conf.sk_splits : kblocks;
  if (splits == 1) sk_tiles = 0, splits = 0; /* one k range: whole tiles */
  loom_scratch_t scratch = {NULL, NULL, 0, 0};
  if (sk_tiles > 0) {
    const int64_t iters = (int64_t)sk_tiles * kblocks;
    sk_blocks = conf.sk_blocks > 0 && conf.sk_blocks < cap ? conf.sk_blocks : cap;
    if (sk_blocks > iters) sk_blocks = (int)iters;
    if (splits > 0) sk_blocks = 0;
    /* partials: a slot of bm x bn fp32 per (block, tile) pair (stream-K) or
     * per unit (split-K); a ticket per tile */
    const size_t slots = splits > 0 ? (size_t)sk_tiles * (size_t)splits : (size_t)sk_blocks + (size_t)sk_tiles - 1;
    const size_t counter_bytes = (size_t)sk_tiles * 4;
    LOOM_TRY(loom__gemm_sk_workspace(stream, counter_bytes, slots * (size_t)bm * (size_t)conf.bn * 4,
                                     &args.sk_count, &args.sk_ws, &scratch));
  }
  if (sk_tiles == 0) splits = 0;
  const int dp_tiles = tiles - sk_tiles;
  int grid = dp_tiles < cap ? dp_tiles : cap;
  if (grid < sk_blocks) grid = sk_blocks;
  if (splits > 0) { /* units round-robin over the grid */
    const int64_t units = (int64_t)sk_tiles * splits;
    if (grid < units) grid = units < cap ? (int)units : cap;
  }
  if (grid < 1) grid = 1;
  args.work.tiles = tiles;
  args.work.kblocks = kblocks;
  args.work.grid = grid;
  args.work.dp_tiles = dp_tiles;
  args.work.sk_blocks = sk_blocks;
  args.work.splits = splits;
  if (splits > 1 && hooks && hooks->wait_signals && hooks->wait_split_bands)
    args.work.split_band = args.order.group * args.order.tiles_n;
  /* split-K reduced apart (hooked GEMMs get here with splits only where
   * they only wait: the reduction stores nothing once a wait expired) */
  args.sk_reduce = conf.sk_reduce && splits > 1;
  const int cl = sk_tiles > 0 ? 1 : want_cl;
  const size_t smem = loom__sm90_smem(bm, conf.bn, hooks != NULL);
  loom__sm90_kernel_t kern =
      loom__sm90_pick(bm, conf.bn, (int)d->ab_type, d->b_layout == LOOM_B_KN, hooks != NULL, sk_tiles > 0, cl,
                      hooks ? hooks->activation : LOOM_ACT_NONE);
  if (!kern)
    return loom__fail(LOOM_ERR_INTERNAL, "loom_gemm: no kernel for bm=%d bn=%d hooks=%d stream-K=%d", bm, conf.bn,
                      hooks != NULL, sk_tiles > 0);
  LOOM_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  if (args.sk_reduce) LOOM_TRY(loom__gemm_split_reduce_preload()); /* before the GEMM that may wait */
  if (cl == 1) {
    kern<<<grid, LOOM_SM90_THREADS, smem, stream>>>(ma, mb, mc, args);
    if (args.sk_reduce) {
      LOOM_CUDA_LAUNCHED("loom__gemm_sm90_kernel");
      loom_split_reduce_args_t r;
      memset(&r, 0, sizeof r);
      r.ws = args.sk_ws, r.order = args.order, r.dp_tiles = dp_tiles, r.sk_tiles = sk_tiles, r.splits = splits;
      r.bm = bm, r.bn = conf.bn, r.m = args.m, r.n = args.n, r.c_type = args.c_type;
      r.activation = hooks ? hooks->activation : LOOM_ACT_NONE, r.c = args.c, r.bias = args.bias;
      r.abort_word = hooks ? hooks->comm.abort_flag : NULL;
      LOOM_TRY(loom__gemm_split_reduce(&r, sms, stream));
    }
  } else {
    /* steps of 2 tiles stacked along m: the order runs over tile-row pairs */
    args.order = loom__cluster_order(args.order, 2);
    const int steps = args.order.tiles_m * args.order.tiles_n;
    int max_cl = 0;
    LOOM_TRY(loom__sm90_max_clusters(kern, conf.bn, smem, &max_cl));
    int ncl = (conf.grid > 0 ? conf.grid : sms) / 2;
    if (ncl > max_cl) ncl = max_cl;
    if (ncl > steps) ncl = steps;
    if (ncl < 1) ncl = 1;
    args.work.tiles = steps;
    args.work.grid = 2 * ncl;
    cudaLaunchAttribute at;
    const cudaLaunchConfig_t lc = loom__sm90_cluster_launch(2 * ncl, smem, stream, &at);
    LOOM_CUDA(cudaLaunchKernelEx(&lc, kern, ma, mb, mc, args));
  }
  LOOM_CUDA_LAUNCHED("loom__gemm_sm90_kernel");
  return loom__scratch_done(stream, &scratch);
}

extern "C" loom_result_t loom__gemm_sm90_preload(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg,
                                                 int activation) {
  const int bm = cfg->bm == 64 ? 64 : 128;
  const int bn = cfg->bn;
  if (bn != 128 && bn != 192 && bn != 224 && bn != 256)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bn=%d: must be 128, 192, 224 or 256", bn);
  if (bm == 64 && bn != 128 && bn != 256)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: config bm=64 bn=%d: 64-row tiles are built for bn 128 or 256",
                      bn);
  /* the kernels a call of cfg may launch: data-parallel (and in a pair of
   * blocks), and stream-K where cfg splits its tiles */
  const int sk = cfg->sk_tiles != 0 && cfg->sk_splits != 1 && (bn == 128 || bn == 256 || activation == LOOM_ACT_NONE);
  for (int v = 0; v < 3; ++v) {
    if ((v == 1 && !(cfg->cluster == 2 && bm == 128)) || (v == 2 && !sk)) continue;
    loom__sm90_kernel_t kern =
        loom__sm90_pick(bm, bn, (int)d->ab_type, d->b_layout == LOOM_B_KN, 1, v == 2, v == 1 ? 2 : 1, activation);
    if (!kern) return loom__fail(LOOM_ERR_INTERNAL, "loom_gemm: no hooked kernel for bm=%d bn=%d", bm, bn);
    LOOM_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)loom__sm90_smem(bm, bn, 1)));
    cudaFuncAttributes fa;
    LOOM_CUDA(cudaFuncGetAttributes(&fa, (const void *)kern));
  }
  if (cfg->sk_reduce && sk) LOOM_TRY(loom__gemm_split_reduce_preload());
  return LOOM_SUCCESS;
}
