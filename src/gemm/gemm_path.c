/*
 * gemm_path.c - which kernel path a GEMM takes on the current device
 * (loom__gemm_path: the sm90 kernel, the sm80 kernel, or cuBLASLt;
 * LOOM_GEMM_PATH), and the launch of one configuration on a loom path
 * (loom__gemm_launch). Below loom_gemm (gemm.c) and its tuner
 * (gemm_tune.c), which both take the path and launch through here.
 */
#include <string.h>

#include "core/error.h"
#include "core/param.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"

/* Settings (core/param.h) this file reads, declared where they are used. */
LOOM_PARAM_STR(GEMM_PATH, "auto",
               "loom_gemm: auto (loom's sm90 kernel on compute capability 9.0, "
               "its sm80 kernel on other GPUs >= 8.0, else cuBLASLt), sm80 "
               "(the sm80 kernel on any GPU >= 8.0) or cublas (always cuBLASLt)")

/* Which path loom_gemm takes on the current device. */
loom_result_t loom__gemm_path(const loom_gemm_desc_t *d, loom__gemm_path_t *path_out) {
  loom__gemm_device_t dev;
  LOOM_TRY(loom__gemm_device(&dev));
  const char *path = loom__param_GEMM_PATH();
  *path_out = LOOM__PATH_BASE;
  if (strcmp(path, "cublas") == 0) return LOOM_SUCCESS;
  const int sm80 = dev.sm80 && loom__gemm_sm80_supported(d, dev.cc_major, dev.cc_minor);
  if (strcmp(path, "sm80") == 0) {
    if (!sm80)
      return loom__fail(LOOM_ERR_UNSUPPORTED,
                        "LOOM_GEMM_PATH=sm80: the sm80 kernel needs compute capability >= 8.0 (and a library built "
                        "with code for it); this GPU is %d.%d",
                        dev.cc_major, dev.cc_minor);
    *path_out = LOOM__PATH_SM80;
    return LOOM_SUCCESS;
  }
  if (strcmp(path, "auto") != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "LOOM_GEMM_PATH=\"%s\": must be auto, sm80 or cublas", path);
  if (dev.sm90 && loom__gemm_sm90_supported(d, dev.cc_major, dev.cc_minor)) *path_out = LOOM__PATH_SM90;
  else if (sm80) *path_out = LOOM__PATH_SM80;
  return LOOM_SUCCESS;
}

loom_result_t loom__gemm_launch(int sm90, const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                const void *bias, const loom_gemm_config_t *cfg, cudaStream_t stream) {
  if (cfg && cfg->bm == 16) return loom__gemm_small_m(d, a, b, c, bias, cfg, NULL, stream);
  if (sm90) return loom__gemm_sm90(d, a, b, c, bias, cfg, NULL, stream);
  return loom__gemm_sm80(d, a, b, c, bias, cfg, NULL, stream);
}
