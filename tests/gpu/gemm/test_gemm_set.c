/*
 * test_gemm_set.c - GPU tests of loom_gemm on the shape set it is measured
 * on (src/gemm/gemm_shapes.h), and of its entry checks, one GPU (two for
 * the other-device pointer).
 *
 *   gemm_set_random_sample / gemm_sm80_set_random_sample: each run draws
 *     fresh GEMMs from the set (weights of both halves, any m of the set,
 *     the set's dtype/layout/bias variant; the run's seed decides, so every
 *     run tries other shapes) and checks loom_gemm's result and one other
 *     candidate configuration's (the tuner could pick it) the usual way:
 *     every element written, sampled rows and columns against fp64, every
 *     element against cuBLASLt. The second test forces the sm80 path.
 *   gemm_pointer_checks: a host pointer, a freed pointer, a too-short
 *     allocation, and memory of another GPU (where there are two) each give
 *     LOOM_ERR_INVALID_ARGUMENT naming the argument, for loom_gemm and
 *     loom_gemm_tune; the process then still runs a correct GEMM.
 *   gemm_tune_at_first_use: LOOM_TUNE=1 makes loom_gemm tune an unknown
 *     shape at its first call and record it; inside a graph capture it does
 *     not tune (the heuristic runs), and the replays are correct.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "tests/common/test.h"
#include "tests/gpu/gemm/gemm_cases.h"
#include "core/tune.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_shapes.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* Launchers of any configuration on either path (bm 16: the small-m kernel). */
static loom_result_t launch_sm90(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                 const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks, cudaStream_t st) {
  (void)hooks;
  return loom__gemm_launch(1, d, a, b, c, bias, cfg, st);
}
static loom_result_t launch_sm80(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                 const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks, cudaStream_t st) {
  (void)hooks;
  return loom__gemm_launch(0, d, a, b, c, bias, cfg, st);
}

/* `count` GEMMs drawn from the set (host reference cost bounds the size:
 * n k <= 48 M, m n <= 64 M), on path sm90 (1) or sm80 (0). */
static void set_sample(int count, int sm90) {
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(-1, w, 256);
  loom__gemm_device_t dev;
  CHECK_RESULT(loom__gemm_device(&dev), LOOM_SUCCESS);
  int done = 0, ok = 0;
  for (int tries = 0; done < count && tries < 1000; ++tries) {
    const uint64_t r = loom__gemm_shape_hash(next_seed());
    const loom_gemm_weight_t *x = &w[r % (uint64_t)nw];
    const int64_t m = loom_gemm_shape_ms[(r >> 20) % LOOM_GEMM_SHAPE_NMS];
    if (x->n * x->k > (int64_t)48 << 20 || m * x->n > (int64_t)64 << 20) continue;
    const loom_gemm_desc_t d = loom__gemm_shape_variant(m, x->n, x->k);
    printf("    %s %s TP=%d (%s half):\n", loom_gemm_families[x->family].name, x->layer, x->tp,
           x->held_out ? "held-out" : "fitting");
    ok += gemm_run_case(&d, NULL, NULL, 1); /* loom_gemm: the model's pick */
    loom_gemm_config_t c[LOOM_GEMM_MAX_CANDIDATES];
    const int n = loom__gemm_candidates(&d, &dev, sm90, c, LOOM_GEMM_MAX_CANDIDATES);
    if (n > 0) ok += gemm_run_case(&d, sm90 ? launch_sm90 : launch_sm80, &c[(r >> 40) % (uint64_t)n], 1);
    done++;
  }
  printf("    %d GEMMs of the set, %d of %d cases matched\n", done, ok, 2 * done);
  CHECK_EQ_INT(done, count);
}

LOOM_TEST(gemm_set_random_sample) {
  if (!gemm_kernel_or_skip(0)) return;
  set_sample(12, 1);
}

LOOM_TEST(gemm_sm80_set_random_sample) {
  if (!gemm_kernel_or_skip(1)) return;
  set_sample(8, 0);
}

LOOM_TEST(gemm_pointer_checks) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    loom_test_skip("no GPU");
    return;
  }
  gcase_t g;
  void *host = NULL, *freed = NULL, *small = NULL, *other = NULL;
  memset(&g, 0, sizeof g);
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(40, 1288, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  host = malloc(g.a_bytes);
  CUDA_OK(cudaMalloc(&freed, g.b_bytes));
  CUDA_OK(cudaFree(freed));
  CUDA_OK(cudaMalloc(&small, 256));
  /* a host pointer: refused, named */
  CHECK_RESULT(loom_gemm(&d, host, g.db, g.dc, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm: a=");
  CHECK_RESULT(loom_gemm(&d, g.da, g.db, g.dc, host, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bias=");
  /* a freed pointer */
  CHECK_RESULT(loom_gemm(&d, g.da, freed, g.dc, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("b=");
  /* C in an allocation too short for m x n */
  CHECK_RESULT(loom_gemm(&d, g.da, g.db, small, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("c=");
  /* the tuner checks the same */
  CHECK_RESULT(loom_gemm_tune(&d, g.da, g.db, host, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm_tune: c=");
  /* memory of another GPU */
  if (ndev >= 2) {
    CUDA_OK(cudaSetDevice(1));
    const cudaError_t e = cudaMalloc(&other, g.a_bytes);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(e);
    CHECK_RESULT(loom_gemm(&d, other, g.db, g.dc, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("a=");
    CHECK_MSG("device 1");
    printf("    other GPU's memory: %s\n", loom_last_error());
  } else {
    printf("    one GPU: the other-device case needs two\n");
  }
  /* nothing was launched, the context is fine: a correct GEMM follows */
  CUDA_OK(cudaDeviceSynchronize());
  CHECK(gemm_run_case(&d, NULL, NULL, 1));
out:
  free(host);
  cudaFree(small);
  if (other) {
    cudaSetDevice(1);
    cudaFree(other);
    cudaSetDevice(0);
  }
  gcase_free(&g);
}

LOOM_TEST(gemm_tune_at_first_use) {
  if (!gemm_kernel_or_skip(0)) return;
  setenv("LOOM_TUNE", "1", 1);
  loom__tune_clear();
  gcase_t g;
  cudaStream_t st = NULL;
  memset(&g, 0, sizeof g);
  loom__gemm_device_t dev;
  LOOM_OK(loom__gemm_device(&dev));
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  {
    /* the first call of an unknown shape tunes it and records it */
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(200, 2056, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
    CHECK(loom__gemm_tune_key(&d, "sm90", dev.sms, key, sizeof key));
    CHECK(!loom__tune_get(key, value, sizeof value));
    CHECK(gemm_run_case(&d, NULL, NULL, 1));
    CHECK(loom__tune_get(key, value, sizeof value));
    printf("    tuned at first use: %s = %s\n", key, value);
    CHECK(gemm_run_case(&d, NULL, NULL, 1)); /* the recorded entry */
  }
  {
    /* inside a capture: no tuning, the heuristic's configuration */
    const loom_gemm_desc_t e = LOOM_GEMM_DESC(8, 3000, 2056, LOOM_FP16, LOOM_FP16, LOOM_B_KN, 0);
    if (!gcase_init(&g, &e)) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      goto out;
    }
    CHECK(loom__gemm_tune_key(&e, "sm90", dev.sms, key, sizeof key));
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    /* the stream's scratch exists before the capture (a split-K pick) */
    const loom_gemm_config_t pick = loom__gemm_choose(&e, &dev, 1);
    LOOM_OK(loom__gemm_launch(1, &e, g.da, g.db, g.dc, NULL, &pick, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CHECK(gemm_capture_check(&g, NULL, NULL, st, 2, "loom_gemm with LOOM_TUNE=1"));
    CHECK(!loom__tune_get(key, value, sizeof value)); /* no tuning inside the capture */
  }
out:
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
  loom__tune_clear();
  unsetenv("LOOM_TUNE");
}
