/*
 * test_gemm_sm80.c - GPU tests of the portable sm80 GEMM path
 * (src/gemm/gemm_sm80.cu), one GPU of compute capability >= 8.0 (on Hopper
 * the path is forced: LOOM_GEMM_PATH=sm80, read at every call, or the
 * launcher loom__gemm_sm80 called directly).
 *
 * As tests/gpu/gemm/test_gemm.c: every case draws fresh random inputs (seed
 * printed once per run), poisons C with 0xFF bytes (NaN in every output
 * dtype) and checks every element was written, then compares with an fp64
 * CPU reference (loom_ref_gemm_element) on whole sampled rows and columns and
 * with cuBLASLt (loom__base_gemm) on every element.
 * Shapes: m = 1, 7, 127, 1000, 3001 and more; n and k not multiples of the
 * 128/256 x 32 tiles (k = 8 and 40: a single, partial k-block); both B
 * layouts; both tile widths and the heuristic; split-K (forced and the
 * heuristic's, deterministic, graph-captured); bf16/fp16 inputs with
 * bf16/fp16/fp32 outputs; bias; graph capture; the path choice
 * (LOOM_GEMM_PATH=sm80 runs this kernel, bit-identical to the launcher);
 * hooks (a host-driven schedule with prologue waits and per-tile signals,
 * row-routed store, atomic reduce, the prologue timeout) through
 * loom__gemm_hooked with the path forced.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "tests/common/test.h"
#include "tests/gpu/gemm/gemm_cases.h"
#include "baseline/baseline.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ref/ref.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* 1 if the current GPU runs loom's sm80 kernel (and forces the path for
 * loom_gemm and loom__gemm_hooked in this test's process), else marks the
 * test skipped. */
static int sm80_or_skip(void) { return gemm_kernel_or_skip(1); }

/* One full case: loom (bn 0: loom_gemm with the path forced to sm80; else
 * loom__gemm_sm80 with that tile width and, splits >= 2, split-K into that
 * many k ranges) vs fp64 and cuBLASLt. Returns 1 if everything matched. */
static int run_case_split(const loom_gemm_desc_t *d, int bn, int splits, int vs_cublas) {
  const loom_gemm_config_t cfg = {bn, 0, 0, 0, splits > 1 ? -1 : 0, 0, splits > 1 ? splits : 0, 0, 0, 0};
  return gemm_run_case(d, loom__gemm_sm80, bn ? &cfg : NULL, vs_cublas);
}

static int run_case(const loom_gemm_desc_t *d, int bn, int vs_cublas) { return run_case_split(d, bn, 0, vs_cublas); }

LOOM_TEST(gemm_sm80_odd_shapes_both_layouts_both_widths) {
  if (!sm80_or_skip()) return;
  const int64_t shapes[][3] = {{1, 256, 512},     {7, 136, 264},     {127, 1000, 520}, {1000, 776, 1032},
                               {3001, 2056, 1000}, {64, 24, 8},       {129, 264, 4104}, {300, 392, 40},
                               {2, 8, 8},          {4096, 4096, 4096}};
  const int bns[] = {0, 128, 256};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int lay = 0; lay < 2; ++lay)
      for (int b = 0; b < 3; ++b) {
        loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                              lay ? LOOM_B_KN : LOOM_B_NK, (int)((i + (size_t)b) & 1));
        run_case(&d, bns[b], 1);
      }
}

LOOM_TEST(gemm_sm80_dtypes_bias_layouts) {
  if (!sm80_or_skip()) return;
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay)
        for (int bias = 0; bias < 2; ++bias) {
          loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 776, 1032, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, bias);
          run_case(&d, (a + c + lay) & 1 ? 256 : 0, 1);
        }
}

/* LOOM_GEMM_PATH=sm80 makes loom_gemm run this kernel: bit-identical to the
 * launcher with the heuristic's configuration; an unknown value is refused
 * naming the value. */
LOOM_TEST(gemm_sm80_path_forced_by_setting) {
  if (!sm80_or_skip()) return;
  gcase_t g;
  loom_gemm_desc_t d = LOOM_GEMM_DESC(777, 1288, 2056, LOOM_FP16, LOOM_FP32, LOOM_B_KN, 1);
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  LOOM_OK(loom_gemm(&d, g.da, g.db, g.dc, g.dbias, 0));
  LOOM_OK(loom__gemm_sm80(&d, g.da, g.db, g.dc2, g.dbias, NULL, NULL, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(g.hc2, g.dc2, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
  CHECK(memcmp(g.hc, g.hc2, g.c_bytes) == 0);
  setenv("LOOM_GEMM_PATH", "sm81", 1);
  CHECK_RESULT(loom_gemm(&d, g.da, g.db, g.dc, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("sm81");
  setenv("LOOM_GEMM_PATH", "sm80", 1);
  {
    /* a configuration the sm80 path does not have is refused, not ignored */
    loom_gemm_config_t bad = {192, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK_RESULT(loom__gemm_sm80(&d, g.da, g.db, g.dc, g.dbias, &bad, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("bn=192");
    loom_gemm_config_t sk = {128, 0, 0, 0, -1, 0, 0, 0, 0, 0};
    CHECK_RESULT(loom__gemm_sm80(&d, g.da, g.db, g.dc, g.dbias, &sk, NULL, 0), LOOM_ERR_UNSUPPORTED);
  }
out:
  gcase_free(&g);
}

/* Split-K: each tile's k-loop cut into aligned ranges, fp32 partials summed
 * in k order by the tile's last unit. Odd m, n not a multiple of the tile,
 * k-blocks not a multiple of the splits, more splits than k-blocks
 * (clamped), both layouts, every dtype pair, bias (added once: the fp64
 * bound would catch a second one). */
LOOM_TEST(gemm_sm80_split_k_shapes_dtypes_layouts) {
  if (!sm80_or_skip()) return;
  const int64_t cases[][4] = {{1, 256, 4104, 3},  {7, 136, 1032, 2},   {65, 1000, 4104, 5}, {200, 2056, 3000, 4},
                              {64, 4096, 4096, 16}, {300, 392, 40, 7}, {129, 264, 8200, 9}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int lay = 0; lay < 2; ++lay) {
      loom_gemm_desc_t d = LOOM_GEMM_DESC(cases[i][0], cases[i][1], cases[i][2], LOOM_BF16, LOOM_BF16, lay ? LOOM_B_KN : LOOM_B_NK,
                            (int)((i + (size_t)lay) & 1));
      run_case_split(&d, 128, (int)cases[i][3], 1);
    }
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay) {
        loom_gemm_desc_t d = LOOM_GEMM_DESC(97, 520, 2056, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, 1);
        run_case_split(&d, 128, 3 + c, 1);
      }
}

/* The heuristic splits decode-sized GEMMs (few tiles, deep k); loom_gemm on
 * those, twice in a row on one stream (tickets back to 0); same inputs
 * twice: bit-identical; a captured split-K GEMM replayed twice (the scratch
 * exists before the capture). */
LOOM_TEST(gemm_sm80_split_k_heuristic_deterministic_graph) {
  if (!sm80_or_skip()) return;
  loom__gemm_device_t dev;
  CHECK_RESULT(loom__gemm_device(&dev), LOOM_SUCCESS);
  const int64_t shapes[][3] = {{64, 8192, 14336}, {1, 4096, 8192}, {17, 2048, 4096}, {128, 12288, 24576}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16, LOOM_B_NK, (int)(i & 1));
    const loom_gemm_config_t h = loom__gemm_sm80_heuristic(&d, &dev);
    printf("    sm80 rule m=%lld n=%lld k=%lld: bn %d splits %d (%d blocks of 128 per SM)\n", (long long)d.m,
           (long long)d.n, (long long)d.k, h.bn, h.sk_splits, dev.sm80_blocks_128);
    CHECK(h.sk_splits > 1 && h.bn == 128);
    /* the sm80 kernel with its rule, then loom_gemm (which may take the
     * small-m kernel for the small m) */
    CHECK(gemm_run_case(&d, loom__gemm_sm80, &h, 1));
    for (int rep = 0; rep < 2; ++rep) run_case(&d, 0, 1);
  }
  gcase_t g;
  cudaStream_t st = NULL;
  loom_gemm_desc_t d = LOOM_GEMM_DESC(77, 3000, 6152, LOOM_BF16, LOOM_FP32, LOOM_B_KN, 1);
  const loom_gemm_config_t cfg = {128, 0, 0, 0, -1, 0, 6, 0, 0, 0};
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  gemm_case_twice_identical(&g, loom__gemm_sm80, &cfg, st, "split-K x6");
  gemm_case_graph_replays(&g, loom__gemm_sm80, &cfg, st, 2);
  {
    /* 256-wide tiles have no split-K instantiation: refused */
    loom_gemm_config_t wide = {256, 0, 0, 0, -1, 0, 4, 0, 0, 0};
    CHECK_RESULT(loom__gemm_sm80(&d, g.da, g.db, g.dc, g.dbias, &wide, NULL, st), LOOM_ERR_UNSUPPORTED);
  }
out:
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
  loom_finalize();
}

LOOM_TEST(gemm_sm80_graph_capture) {
  if (sm80_or_skip()) gemm_graph_capture_case();
}

/* ---- hooks (loom__gemm_hooked with the path forced to sm80; the cases are
 * in gemm_cases.c, shared with the sm90 path) ---------------------------- */

LOOM_TEST(gemm_sm80_hooks_host_schedule_waits_and_tile_signals) {
  if (sm80_or_skip()) gemm_hooks_host_schedule_waits_and_tile_signals_case();
}

LOOM_TEST(gemm_sm80_hooks_row_routed_store_and_reduce) {
  if (sm80_or_skip()) gemm_hooks_row_routed_store_and_reduce_case();
}

LOOM_TEST(gemm_sm80_hooks_prologue_timeout) {
  if (sm80_or_skip()) gemm_hooks_prologue_timeout_case();
}
