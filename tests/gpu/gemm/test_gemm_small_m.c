/*
 * test_gemm_small_m.c - GPU tests of the small-m kernel (src/gemm/
 * gemm_small_m.cu, config bm = 16), one GPU of compute capability >= 8.0.
 *
 * As the other GEMM tests (gemm_cases.c): fresh random inputs per case,
 * C poisoned (NaN) and every element checked written, whole sampled rows and
 * columns against the fp64 reference and every element against cuBLASLt.
 * Covered: every m from 1 to 64 (1, 2 and 4 tiles of 16 rows, partial tiles),
 * n not a multiple of the 128-column n-tile (n = 8, 24, 136, 1288), k not a
 * multiple of the 32-k chunk (k = 8, 40, 1032) and k-loops shorter than the
 * warps, split counts 1..64 (ranges of one chunk, uneven ranges), both B
 * layouts, bf16/fp16 inputs with bf16/fp16/fp32 outputs, bias, two runs
 * bit-identical (the split sums in split order), graph capture and replay
 * (with scratch, and on a fresh stream without: one split), loom_gemm
 * taking the kernel for decode batches on both paths, and the
 * configurations the kernel refuses, by field.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "tests/common/test.h"
#include "tests/gpu/gemm/gemm_cases.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/small_m_layout.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* 1 if the current GPU runs loom's kernels (compute capability >= 8.0). */
static int small_m_or_skip(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    loom_test_skip("no GPU");
    return 0;
  }
  loom__gemm_device_t dev;
  if (loom__gemm_device(&dev) != LOOM_SUCCESS || !dev.sm80) {
    loom_test_skip("needs a compute capability >= 8.0 GPU (loom's small-m kernel)");
    return 0;
  }
  return 1;
}

static loom_gemm_config_t sm_cfg(int splits) {
  loom_gemm_config_t c = {0, 0, 0, 0, splits > 1 ? -1 : 0, 0, splits > 1 ? splits : 0, 0, 16, 0};
  return c;
}

/* Every way of loading the weight (small_m_layout.h): 1 when all match. */
static int run(const loom_gemm_desc_t *d, int splits) {
  loom_gemm_config_t c = sm_cfg(splits);
  int ok = 1;
  for (int pipe = 1; pipe < LOOM_SMALLM_PIPES; ++pipe) { /* 0 is one of them */
    c.stages = pipe;
    ok &= gemm_run_case(d, loom__gemm_small_m, &c, 1);
  }
  return ok;
}

/* Every m of the kernel's range, splits from the heuristic and forced. */
LOOM_TEST(gemm_small_m_every_m_1_to_64) {
  if (!small_m_or_skip()) return;
  loom__gemm_device_t dev;
  CHECK_RESULT(loom__gemm_device(&dev), LOOM_SUCCESS);
  const loom_dtype_t cs[3] = {LOOM_BF16, LOOM_FP32, LOOM_FP16};
  int ok = 0;
  for (int64_t m = 1; m <= 64; ++m) {
    const loom_dtype_t ab = m % 2 ? LOOM_BF16 : LOOM_FP16;
    loom_dtype_t ct = cs[m % 3];
    if (ct != LOOM_FP32) ct = ab;
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(m, 1288, 1032, ab, ct, m % 4 < 2 ? LOOM_B_NK : LOOM_B_KN, (int)(m % 3 == 0));
    const loom_gemm_config_t h = loom__gemm_small_m_heuristic(&d, &dev);
    ok += gemm_run_case(&d, loom__gemm_small_m, &h, 1);
    ok += run(&d, (int)(m % 7) + 1);
  }
  printf("    %d of 128 cases matched\n", ok);
}

/* Odd n and k, short and long k-loops, many split counts, both layouts. */
LOOM_TEST(gemm_small_m_odd_shapes_and_splits) {
  if (!small_m_or_skip()) return;
  const int64_t ms[] = {1, 5, 16, 17, 48};
  const int64_t nk[][2] = {{8, 8}, {24, 40}, {136, 1032}, {1288, 520}, {4104, 8200}, {256, 96}};
  const int splits[] = {1, 2, 3, 7, 64};
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 6; ++j)
      for (int lay = 0; lay < 2; ++lay) {
        const loom_gemm_desc_t d =
            LOOM_GEMM_DESC(ms[i], nk[j][0], nk[j][1], LOOM_BF16, LOOM_BF16, lay ? LOOM_B_KN : LOOM_B_NK, (i + j) & 1);
        run(&d, splits[(i + j + lay) % 5]);
      }
}

/* Every input and output dtype, both layouts, bias or not. */
LOOM_TEST(gemm_small_m_dtypes_bias_layouts) {
  if (!small_m_or_skip()) return;
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay)
        for (int bias = 0; bias < 2; ++bias) {
          const loom_gemm_desc_t d = LOOM_GEMM_DESC(3 + 20 * c, 2056, 3000, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, bias);
          loom_gemm_config_t cf = sm_cfg(1 + (a + c + lay + bias) % 4);
          cf.stages = 1 + (a + c + lay + bias) % (LOOM_SMALLM_PIPES - 1); /* each way of loading, in turn */
          gemm_run_case(&d, loom__gemm_small_m, &cf, 1);
        }
}

/* Two runs bit-identical, captured graphs replayed (with scratch; on a fresh
 * stream the capture finds none and runs one split, still correct). */
LOOM_TEST(gemm_small_m_deterministic_and_graph) {
  if (!small_m_or_skip()) return;
  gcase_t g;
  cudaStream_t st = NULL, fresh = NULL;
  memset(&g, 0, sizeof g);
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(13, 3000, 6152, LOOM_BF16, LOOM_FP32, LOOM_B_KN, 1);
  const loom_gemm_config_t s1 = sm_cfg(1), s8 = sm_cfg(8), s29 = sm_cfg(29);
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  gemm_case_twice_identical(&g, loom__gemm_small_m, &s1, st, "small-m one split");
  gemm_case_twice_identical(&g, loom__gemm_small_m, &s8, st, "small-m split-K x8");
  gemm_case_twice_identical(&g, loom__gemm_small_m, &s29, st, "small-m split-K x29");
  gemm_case_graph_replays(&g, loom__gemm_small_m, &s8, st, 3);
  /* a fresh stream has no scratch: the capture runs one split */
  CUDA_OK(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking));
  gemm_capture_check(&g, loom__gemm_small_m, &s8, fresh, 2, "small-m split-K x8 captured without scratch");
out:
  if (st) cudaStreamDestroy(st);
  if (fresh) cudaStreamDestroy(fresh);
  gcase_free(&g);
}

/* loom_gemm takes the small-m kernel for decode batches of the issue's
 * shapes on the path the GPU selects; correct either way. */
LOOM_TEST(gemm_small_m_through_loom_gemm) {
  if (!small_m_or_skip()) return;
  loom__gemm_device_t dev;
  CHECK_RESULT(loom__gemm_device(&dev), LOOM_SUCCESS);
  loom__gemm_path_t path = LOOM__PATH_BASE;
  const int64_t shapes[][3] = {{1, 12288, 1536}, {8, 4608, 12288}, {16, 2560, 8192}, {4, 576, 7168}};
  for (int i = 0; i < 4; ++i) {
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                                              i & 1 ? LOOM_B_KN : LOOM_B_NK, i == 2);
    CHECK_RESULT(loom__gemm_path(&d, &path), LOOM_SUCCESS);
    const loom_gemm_config_t c = loom__gemm_choose(&d, &dev, path == LOOM__PATH_SM90);
    printf("    m=%lld n=%lld k=%lld: loom_gemm takes bm %d splits %d\n", (long long)d.m, (long long)d.n,
           (long long)d.k, c.bm, c.sk_splits);
    CHECK(gemm_run_case(&d, NULL, NULL, 1));
  }
}

/* What the kernel refuses, naming the field. */
LOOM_TEST(gemm_small_m_refused_configurations) {
  if (!small_m_or_skip()) return;
  gcase_t g;
  memset(&g, 0, sizeof g);
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(65, 256, 256, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  loom_gemm_config_t c = sm_cfg(1);
  CHECK_RESULT(loom__gemm_small_m(&d, g.da, g.db, g.dc, NULL, &c, NULL, 0), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("m=65");
  const loom_gemm_desc_t e = LOOM_GEMM_DESC(64, 256, 256, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  c.bn = 64;
  CHECK_RESULT(loom__gemm_small_m(&e, g.da, g.db, g.dc, NULL, &c, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bn=64");
  c = sm_cfg(65);
  CHECK_RESULT(loom__gemm_small_m(&e, g.da, g.db, g.dc, NULL, &c, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("splits=65");
  c = sm_cfg(1);
  c.stages = LOOM_SMALLM_PIPES;
  CHECK_RESULT(loom__gemm_small_m(&e, g.da, g.db, g.dc, NULL, &c, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("stages=3");
  c = sm_cfg(1);
  c.bm = 64;
  CHECK_RESULT(loom__gemm_small_m(&e, g.da, g.db, g.dc, NULL, &c, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("bm=64");
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  c = sm_cfg(1);
  CHECK_RESULT(loom__gemm_small_m(&e, g.da, g.db, g.dc, NULL, &c, &h, 0), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("hooks");
  /* the process is still usable */
  CHECK(run(&e, 2));
out:
  gcase_free(&g);
}
