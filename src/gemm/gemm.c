/*
 * gemm.c - loom_gemm: validation, path choice and the sm90 heuristic.
 *
 * Path: the sm90 kernel (gemm_sm90.cu) on compute capability 9.0 when the
 * library carries its sm_90a code; everywhere else cuBLASLt through
 * loom__base_gemm (logged once at INFO), until the portable sm80 kernel
 * exists. LOOM_GEMM_PATH=cublas forces cuBLASLt (comparisons, bisecting).
 *
 * Heuristic (tiles are 128 rows; bn 256 or 128): the persistent grid runs
 * ceil(tiles / SMs) waves, and the last wave may leave SMs idle. Score each
 * bn by the fraction of SM-waves doing work, times 0.92 for bn = 128 (a
 * 128x128 tile re-reads A and B more per FLOP); take the best. For m <= 64,
 * 256 wherever its tiles cover about a third of the SMs (measured).
 */
#include <stdlib.h>
#include <string.h>

#include "core/baseline.h"
#include "core/error.h"
#include "core/param.h"
#include "core/log.h"
#include "gemm/gemm.h"

loom_gemm_config_t loom__gemm_sm90_heuristic(const loom_gemm_desc_t *d, int sm_count) {
  loom_gemm_config_t best = {256, 0, 0, 0};
  if (sm_count < 1) sm_count = 1;
  const int64_t tiles_m = loom_ceil_div(d->m, 128);
  double best_score = -1.0;
  const int bns[2] = {256, 128};
  for (int i = 0; i < 2; ++i) {
    const int64_t tiles = tiles_m * loom_ceil_div(d->n, bns[i]);
    const int64_t waves = loom_ceil_div(tiles, sm_count);
    double score = (double)tiles / (double)(waves * sm_count);
    if (bns[i] == 128) score *= 0.92;
    if (score > best_score + 1e-9) {
      best_score = score;
      best.bn = bns[i];
    }
  }
  /* m <= 64 (one consumer warpgroup idle, the weight stream is all that
   * matters): 128x256 tiles streamed B faster than twice as many 128x128
   * tiles on H200 (bench/NOTES.md, 2026-11-22) as long as they cover about a
   * third of the SMs */
  if (d->m <= 64 && loom_ceil_div(d->n, 256) * 10 >= (int64_t)sm_count * 3) best.bn = 256;
  /* band height: about sqrt(2 x SMs) tile rows so a wave shares A and B
   * about equally in L2 */
  best.group = 16;
  return best;
}

/* Which path loom_gemm takes on the current device: 1 sm90, 0 cuBLASLt. */
static loom_result_t loom__gemm_path(const loom_gemm_desc_t *d, int *sm90) {
  int dev, major, minor;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  const char *path = loom__param_GEMM_PATH();
  if (strcmp(path, "cublas") == 0) {
    *sm90 = 0;
    return LOOM_SUCCESS;
  }
  if (strcmp(path, "auto") != 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "LOOM_GEMM_PATH=\"%s\": must be auto or cublas", path);
  *sm90 = loom__gemm_sm90_supported(d, major, minor);
  return LOOM_SUCCESS;
}

loom_result_t loom_gemm(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                        cudaStream_t stream) {
  LOOM_TRY(loom__gemm_validate("loom_gemm", desc, a, b, c, bias));
  int sm90 = 0;
  LOOM_TRY(loom__gemm_path(desc, &sm90));
  if (sm90) return loom__gemm_sm90(desc, a, b, c, bias, NULL, NULL, stream);
  {
    static int logged = 0;
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED))
      LOOM_INFO("loom_gemm: no loom kernel for this GPU (the sm90 kernel needs compute capability 9.0); using cuBLASLt");
  }
  return loom__base_gemm(desc, a, b, c, bias, stream);
}

loom_result_t loom__gemm_hooked(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                const void *bias, const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks,
                                cudaStream_t stream) {
  LOOM_TRY(loom__gemm_validate("loom_gemm", d, a, b, c, bias));
  int dev, major, minor;
  LOOM_CUDA(cudaGetDevice(&dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  LOOM_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (!loom__gemm_sm90_supported(d, major, minor))
    return loom__fail(LOOM_ERR_UNSUPPORTED,
                      "loom_gemm: GEMM hooks need the sm90 kernel; this GPU is compute capability %d.%d", major, minor);
  return loom__gemm_sm90(d, a, b, c, bias, cfg, hooks, stream);
}
