/*
 * gemm_grouped_sm90.cu - the launcher of the grouped GEMM on loom's Hopper
 * kernel (gemm_sm90.cuh, its GR instantiation; the kernels are compiled in
 * gemm_sm90_grouped_<type>.cu).
 *
 * What differs from the plain GEMM's launch (gemm_sm90.cu):
 *   A and C  tensor maps over all max_rows rows (a group's rows are a row
 *            range of them; the kernel clips its stores at the group's end)
 *   B        one 3-D map [G, n, k] or [G, k, n]: the group is the third
 *            coordinate, so k and n are zero-filled per group at its edges
 *   grid     persistent, SM count (or fewer where even the worst case has
 *            fewer tiles): the tile count is known only on the device
 *   shared   the plain kernel's, plus the tile prefix (LOOM_SM90_GROUPED_BYTES)
 *   epilogue plain (TMA stores into C), SwiGLU (glu), or scatter: each row
 *            to the row of another buffer its origin names (a combine in
 *            the epilogue; loom__epi_scatter)
 *   arrival  optionally, A's rows arrive while the kernel runs (a dispatch
 *            in the prologue, loom_grouped_arrival_t): launched as a
 *            programmatic dependent of the kernel that sends them
 * The offsets are never read here: no synchronisation, graph-capturable.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include "core/error.h"
#include "core/launch_dependent.cuh"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_sm90.cuh"
#include "gemm/sm90_layout.h"

LOOM_SM90_GROUPED_DECL(bf16);
LOOM_SM90_GROUPED_DECL(fp16);

extern "C" const void *loom__gemm_grouped_kernel_for(int bm, int bn, int type, int tb) {
  if ((bm != 64 && bm != 128) || (bn != 128 && bn != 256)) return NULL;
  if (type == LOOM_BF16) return (const void *)LOOM_SM90_GROUPED_FN(bf16)(bm, bn, tb != 0);
  if (type == LOOM_FP16) return (const void *)LOOM_SM90_GROUPED_FN(fp16)(bm, bn, tb != 0);
  return NULL;
}

/* The kernel's three tensor maps: A [R, k], B stacked per group, C [R, n]
 * (glu: B loaded as 64-row boxes, C [R, n / 2]). */
static loom_result_t loom__grouped_maps(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                        int bm, int bn, int glu, CUtensorMap *ma, CUtensorMap *mb, CUtensorMap *mc) {
  const uint64_t R = (uint64_t)d->max_rows, n = (uint64_t)d->n, k = (uint64_t)d->k, G = (uint64_t)d->groups;
  LOOM_TRY(loom__gemm_tensor_map(ma, a, d->ab_type, k, R, 0, LOOM_SM90_BK, (uint32_t)bm, "A"));
  if (d->b_layout == LOOM_B_NK)
    LOOM_TRY(loom__gemm_tensor_map(mb, b, d->ab_type, k, n, G, LOOM_SM90_BK, glu ? 64u : (uint32_t)bn, "B [G, n, k]"));
  else
    LOOM_TRY(loom__gemm_tensor_map(mb, b, d->ab_type, n, k, G, 64, LOOM_SM90_BK, "B [G, k, n]"));
  return loom__gemm_tensor_map(mc, c, d->c_type, glu ? n / 2 : n, R, 0, d->c_type == LOOM_FP32 ? 32 : 64, 64, "C");
}

/* Either epilogue of a launch: glu (SwiGLU), or rows scattered to
 * origin/dst (both NULL: stored into c). */
static loom_result_t grouped_launch(const loom_grouped_gemm_desc_t *d, const void *a, const void *b, void *c,
                                    const void *bias, const int64_t *offsets, const loom_gemm_config_t *cfg, int glu,
                                    const void *origin, char *const *dst, const loom_grouped_arrival_t *arrive,
                                    cudaStream_t stream) {
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  loom_gemm_config_t conf = cfg ? *cfg : loom__grouped_sm90_config(d, dev.sms);
  if (glu) {
    if (d->b_layout != LOOM_B_NK || d->has_bias || d->c_type != d->ab_type || d->n % 16 != 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "loom_gemm_grouped: the SwiGLU epilogue needs B [G, n, k], no bias, C of A's type and n=%lld "
                        "a multiple of 16",
                        (long long)d->n);
    conf.bn = 256; /* the pairing of gate and up columns is laid out for 256-wide tiles */
  }
  const int bm = conf.bm == 64 ? 64 : 128;
  if ((conf.bm != 0 && conf.bm != 64 && conf.bm != 128) || (conf.bn != 128 && conf.bn != 256))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_gemm_grouped: config bm=%d bn=%d: grouped tiles are bm 64 or 128, bn 128 or 256", conf.bm,
                      conf.bn);
  loom_sm90_args_t args;
  loom__sm90_args_base(&args, d->max_rows, d->n, d->k, (int)d->c_type, c, d->has_bias ? bias : NULL);
  args.epi_tma = 1;
  args.order.kind = LOOM_TILE_ORDER_GROUPED;
  args.order.tiles_n = (int32_t)loom__ceil_div(d->n, conf.bn);
  args.order.tiles_m = (int32_t)loom__ceil_div(d->max_rows, bm);
  args.order.group = conf.group > 0 ? conf.group : 16;
  args.group_off = offsets;
  args.groups = d->groups;
  args.group_band = args.order.group;
  args.work.kblocks = (int32_t)loom__ceil_div(d->k, LOOM_SM90_BK);
  args.glu = glu != 0;
  args.scatter_origin = (const int2 *)origin;
  args.scatter_dst = dst;
  if (arrive) args.arrive = *arrive;

  /* the most tiles a valid table can make: every row in one tile row of
   * its own group plus one short tile row per group */
  const int64_t most = ((int64_t)args.order.tiles_m + d->groups) * args.order.tiles_n;
  const int cap = conf.grid > 0 ? conf.grid : dev.sms;
  const int grid = most < cap ? (int)most : cap;
  args.work.grid = grid;
  args.work.tiles = (int32_t)(most < INT32_MAX ? most : INT32_MAX); /* unused by the kernel (its prefix counts) */
  args.work.dp_tiles = args.work.tiles;

  CUtensorMap ma, mb, mc;
  LOOM_TRY(loom__grouped_maps(d, a, b, c, bm, conf.bn, glu, &ma, &mb, &mc));
  typedef void (*kernel_t)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const loom_sm90_args_t);
  const kernel_t kern = (kernel_t)loom__gemm_grouped_kernel_for(bm, conf.bn, (int)d->ab_type, d->b_layout == LOOM_B_KN);
  if (!kern)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm_grouped: no kernel for bm=%d bn=%d ab_type=%d", bm, conf.bn,
                      (int)d->ab_type);
  const size_t smem = loom__sm90_smem_bytes(bm, conf.bn, LOOM_SM90_STAGES(bm, conf.bn),
                                            LOOM_SM90_EPI_BUFS(bm, conf.bn), 0) +
                      LOOM_SM90_GROUPED_BYTES(d->groups);
  LOOM_CUDA(cudaFuncSetAttribute((const void *)kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  if (!arrive) {
    kern<<<grid, LOOM_SM90_THREADS, smem, stream>>>(ma, mb, mc, args);
  } else { /* a programmatic dependent of the kernel that sends the rows */
    LOOM_CUDA(loom__launch_dependent(kern, dim3((unsigned)grid), dim3(LOOM_SM90_THREADS), smem, stream, ma, mb, mc,
                                     args));
  }
  LOOM_CUDA_LAUNCHED("loom__gemm_sm90_kernel (grouped)");
  return LOOM_SUCCESS;
}

extern "C" loom_result_t loom__gemm_grouped_sm90(const loom_grouped_gemm_desc_t *d, const void *a, const void *b,
                                                 void *c, const void *bias, const int64_t *offsets,
                                                 const loom_gemm_config_t *cfg, int glu, cudaStream_t stream) {
  return grouped_launch(d, a, b, c, bias, offsets, cfg, glu, NULL, NULL, NULL, stream);
}

extern "C" loom_result_t loom__gemm_grouped_sm90_scatter(const loom_grouped_gemm_desc_t *d, const void *a,
                                                         const void *b, void *c, const int64_t *offsets,
                                                         const loom_gemm_config_t *cfg, const void *origin,
                                                         char *const *dst, cudaStream_t stream) {
  if (!origin || !dst || d->has_bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_gemm_grouped (scatter): origin=%p dst=%p has_bias=%d: the scatter epilogue needs both "
                      "tables and no bias",
                      origin, (const void *)dst, d->has_bias);
  return grouped_launch(d, a, b, c, NULL, offsets, cfg, 0, origin, dst, NULL, stream);
}

extern "C" loom_result_t loom__gemm_grouped_sm90_arrival(const loom_grouped_gemm_desc_t *d, const void *a,
                                                         const void *b, void *c, const int64_t *offsets,
                                                         const loom_gemm_config_t *cfg, int glu,
                                                         const loom_grouped_arrival_t *arrive, cudaStream_t stream) {
  if (!arrive || !arrive->epoch || !arrive->next || !arrive->ready || !arrive->arrived || !arrive->rows_from ||
      arrive->sources < 1 ||
      arrive->first < 0 || arrive->stride < arrive->first + d->groups || d->has_bias)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "loom_gemm_grouped (arrival): arrive=%p (sources %d, stride %d, first %d, groups %d), "
                      "has_bias=%d: the arrival wait needs its epoch, tile counter, ready, arrived and rows_from, every group's "
                      "column inside the tables, and no bias",
                      (const void *)arrive, arrive ? arrive->sources : 0, arrive ? arrive->stride : 0,
                      arrive ? arrive->first : 0, d->groups, d->has_bias);
  return grouped_launch(d, a, b, c, NULL, offsets, cfg, glu, NULL, NULL, arrive, stream);
}
