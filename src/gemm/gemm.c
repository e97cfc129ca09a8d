/*
 * gemm.c - loom_gemm: argument checks, path choice, the configuration (a
 * tuned one, tuning at first use, or the model's) and the launch.
 *
 * Path: the sm90 kernel (gemm_sm90.cu) on compute capability 9.0 when the
 * library carries its sm_90a code; else the portable sm80 kernel
 * (gemm_sm80.cu: cp.async + ldmatrix + mma.sync) on compute capability >= 8.0
 * (A100/L40/RTX, and Hopper/Blackwell where sm90 does not apply); below 8.0
 * cuBLASLt through loom__base_gemm (logged once at INFO). LOOM_GEMM_PATH=
 * cublas forces cuBLASLt (comparisons, bisecting), =sm80 the sm80 kernel on
 * any GPU >= 8.0 (how it is tested on Hopper). Hooked GEMMs take the same
 * path, never cuBLASLt. On both loom paths decode batches may run the
 * small-m kernel (gemm_small_m.cu, config bm 16).
 *
 * Configuration, in this order: an entry of the tuning cache for (path, SM
 * count, shape) (loom_gemm_tune, LOOM_TUNE_FILE); with LOOM_TUNE=1 and none
 * there, loom_gemm_tune runs now (outside a graph capture) and its pick is
 * used and recorded; else the model's pick (gemm_heuristic.c: waves, bytes
 * in flight, tiles per SM), which is what an untuned shape gets.
 *
 * The GPU's properties come from gemm_device.c, read once per device.
 *
 * Stream-K scratch: core/scratch.h (per (device, stream), graph-owned inside
 * a capture).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "baseline/baseline.h"
#include "core/scratch.h"
#include "core/error.h"
#include "core/param.h"
#include "core/log.h"
#include "gemm/gemm.h"
#include "gemm/gemm_tuning.h"
#include "gemm/gemm_heuristic.h"

LOOM_PARAM_DECL_STR(GEMM_PATH) /* gemm_path.c */

loom_result_t loom__gemm_order(const loom_gemm_desc_t *d, const loom_gemm_hooks_t *hooks, int bm, int bn, int group,
                               loom_tile_order_t *order) {
  memset(order, 0, sizeof *order);
  if (hooks) *order = hooks->order;
  else order->kind = LOOM_TILE_ORDER_GROUPED;
  order->tiles_m = (int32_t)loom__ceil_div(d->m, bm);
  order->tiles_n = (int32_t)loom__ceil_div(d->n, bn);
  order->group = group;
  if (order->kind == LOOM_TILE_ORDER_RANK_SHIFTED && (order->row_shift < 0 || order->row_shift >= order->tiles_m))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks row_shift=%d: must be in [0, %d)",
                      order->row_shift, order->tiles_m);
  if (order->kind == LOOM_TILE_ORDER_SCHEDULE && !order->schedule)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks order SCHEDULE with schedule=NULL");
  if (hooks && (hooks->activation < LOOM_ACT_NONE || hooks->activation > LOOM_ACT_GELU_ERF))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks activation=%d: must be a loom_activation_t",
                      hooks->activation);
  if (hooks && hooks->wait_signals && hooks->wait_rows_per_signal < 1)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_gemm: hooks wait_rows_per_signal=%lld: must be >= 1",
                      (long long)hooks->wait_rows_per_signal);
  return LOOM_SUCCESS;
}

__attribute__((constructor)) static void loom__gemm_wait_sites(void) {
  loom__wait_site_register(LOOM_SITE_GEMM_PROLOGUE, "GEMM prologue tile wait");
}

/* ---- stream-K scratch ----------------------------------------------------- */

loom_result_t loom__gemm_sk_workspace(cudaStream_t stream, size_t counter_bytes, size_t partial_bytes,
                                      uint32_t **counters, float **partials, loom_scratch_t *s) {
  *counters = NULL, *partials = NULL;
  LOOM_TRY(loom__scratch_get(LOOM_SCRATCH_GEMM, stream, counter_bytes, partial_bytes, s));
  *counters = (uint32_t *)s->ptr;
  *partials = (float *)s->rest;
  return LOOM_SUCCESS;
}

/* loom_gemm; tune: a shape the tuning cache lacks is tuned first (outside a capture). */
static loom_result_t gemm_run(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                              int tune, cudaStream_t stream) {
  LOOM_TRY(loom__gemm_check_args("loom_gemm", desc, a, b, c, bias));
  loom__gemm_path_t path = LOOM__PATH_BASE;
  LOOM_TRY(loom__gemm_path(desc, &path));
  if (path != LOOM__PATH_BASE) {
    const int sm90 = path == LOOM__PATH_SM90;
    loom__gemm_device_t dev;
    LOOM_TRY(loom__gemm_device(&dev));
    int found = 0;
    loom_gemm_config_t cfg;
    LOOM_TRY(loom__gemm_tuned_config(desc, sm90 ? "sm90" : "sm80", dev.sms, &cfg, &found));
    if (!found && tune) {
      /* tuning at first use: not inside a capture (it launches and
       * synchronizes); there the model's pick runs */
      enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
      LOOM_CUDA(cudaStreamIsCapturing(stream, &cs));
      if (cs == cudaStreamCaptureStatusNone) {
        LOOM_TRY(loom__gemm_tune_checked(desc, a, b, c, bias, sm90, &dev, stream));
        LOOM_TRY(loom__gemm_tuned_config(desc, sm90 ? "sm90" : "sm80", dev.sms, &cfg, &found));
      }
    }
    if (!found) cfg = loom__gemm_choose(desc, &dev, sm90);
    return loom__gemm_launch(sm90, desc, a, b, c, bias, &cfg, stream);
  }
  if (strcmp(loom__param_GEMM_PATH(), "cublas") != 0) {
    static int logged = 0;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      LOOM_INFO("loom_gemm: no loom kernel for this GPU (loom's kernels need compute capability >= 8.0); using cuBLASLt");
  }
  return loom__base_gemm(desc, a, b, c, bias, stream);
}

loom_result_t loom_gemm(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                        cudaStream_t stream) {
  return gemm_run(desc, a, b, c, bias, loom__param_TUNE() == 1, stream);
}

loom_result_t loom__gemm_tuning(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                                cudaStream_t stream) {
  return gemm_run(desc, a, b, c, bias, 1, stream);
}

loom_result_t loom__gemm_hooked(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                const void *bias, const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks,
                                cudaStream_t stream) {
  LOOM_TRY(loom__gemm_validate_hooked("loom_gemm", d, a, b, c, bias, hooks));
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  const int force80 = strcmp(loom__param_GEMM_PATH(), "sm80") == 0;
  if (!force80 && dev.sm90 && loom__gemm_sm90_supported(d, dev.cc_major, dev.cc_minor))
    return loom__gemm_sm90(d, a, b, c, bias, cfg, hooks, stream);
  if (!dev.sm80 || !loom__gemm_sm80_supported(d, dev.cc_major, dev.cc_minor))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_gemm: GEMM hooks need a loom kernel (compute capability >= 8.0); this GPU is %d.%d",
                      dev.cc_major, dev.cc_minor);
  if (hooks && hooks->epilogue == LOOM_EPI_BULK_ADD)
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_gemm: the bulk-add epilogue needs the sm90 kernels (tensor memory accelerator); this "
                      "GEMM runs the sm80 path (GPU %d.%d%s)",
                      dev.cc_major, dev.cc_minor, force80 ? ", LOOM_GEMM_PATH=sm80" : "");
  /* of an sm90 configuration only the tile width and band height apply */
  loom_gemm_config_t c80 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  if (cfg) c80.bn = cfg->bn == 256 ? 256 : 128, c80.group = cfg->group; /* sm80: 128 or 256 */
  return loom__gemm_sm80(d, a, b, c, bias, cfg ? &c80 : NULL, hooks, stream);
}

loom_result_t loom__gemm_hooked_preload(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg, int activation) {
  loom__gemm_path_t path = LOOM__PATH_BASE;
  LOOM_TRY(loom__gemm_path(d, &path));
  if (path == LOOM__PATH_SM90) return loom__gemm_sm90_preload(d, cfg, activation);
  int dev = 0, major = 0;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  if (major < 8)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "loom_gemm: GEMM hooks need a loom kernel (compute capability >= 8.0)");
  return loom__gemm_sm80_preload(d, cfg);
}
