/*
 * test_gemm.c - GPU tests of the GEMM engine (src/gemm), one GPU.
 *
 * Every case draws fresh random inputs (seed printed once per run), poisons
 * C with 0xFF bytes (NaN in every output dtype) and checks that every element
 * was written, then compares
 *   - with an fp64 CPU reference (loom_ref_gemm_element) on whole sampled rows
 *     and whole sampled columns (first, last and random ones), and
 *   - with cuBLASLt (loom__base_gemm) on every element.
 * Bound per element: |x - ref| <= (eps_out + eps_acc(k)) |ref| + 1e-5 sqrt(k)
 * (inputs are uniform in [-1, 1); eps_out covers the output rounding,
 * eps_acc(k) = (k/16) 2^-24 the tensor cores' fp32 accumulation, the sqrt(k)
 * term the summation order; gemm_cases.c).
 * Shapes: odd m (1, 7, 127, 1000, 3001), n and k not multiples of the tile,
 * both B layouts, bf16/fp16 inputs, bf16/fp16/fp32 outputs, bias, both tile
 * configurations; hooks: a host-set schedule with prologue waits released by
 * the host row block by row block and per-tile signals watched by the host,
 * row-routed stores, atomic reduce, the prologue timeout, graph capture;
 * the decode variant (config bm = 64, tests gemm_decode_*): m = 1..64 and
 * beyond (64-row tile rows), every dtype, bias, split-K, stream-K, small
 * grids, determinism, graph replay, a tuning entry naming it, hooks
 * ignoring it, configuration errors.
 * Tests of loom's own kernel skip without a compute capability 9.0 GPU.
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
#include "core/tune.h"
#include "gemm/gemm.h"
#include "core/tune_rule.h"
#include "gemm/gemm_heuristic.h"
#include "ref/ref.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* 1 if the current GPU runs loom's sm90 kernel, else marks the test skipped. */
static int sm90_or_skip(void) { return gemm_kernel_or_skip(0); }

/* One full case: loom (cfg NULL: loom_gemm; else the sm90 launcher with that
 * configuration) vs fp64 and cuBLASLt. Returns 1 if everything matched. */
static int run_case(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg, int vs_cublas) {
  return gemm_run_case(d, loom__gemm_sm90, cfg, vs_cublas);
}

LOOM_TEST(gemm_odd_shapes_both_layouts) {
  if (!sm90_or_skip()) return;
  const int64_t shapes[][3] = {{1, 256, 512}, {7, 136, 264}, {127, 1000, 520}, {1000, 776, 1032},
                               {3001, 2056, 1000}, {64, 24, 8}, {129, 264, 4104}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int lay = 0; lay < 2; ++lay) {
      loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                            lay ? LOOM_B_KN : LOOM_B_NK, (int)(i & 1));
      run_case(&d, NULL, 1);
    }
}

LOOM_TEST(gemm_dtypes_bias_layouts) {
  if (!sm90_or_skip()) return;
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay)
        for (int bias = 0; bias < 2; ++bias) {
          loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 776, 1032, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, bias);
          run_case(&d, NULL, 1);
        }
}

LOOM_TEST(gemm_both_tile_configs) {
  if (!sm90_or_skip()) return;
  /* 2900 rows: 23 tile rows, so the last cluster pair has a block past m */
  const int64_t shapes[][3] = {{3001, 2056, 1000}, {64, 4096, 4096}, {512, 1280, 2048}, {2900, 776, 1032}};
  const int bns[] = {128, 256};
  for (size_t i = 0; i < 4; ++i)
    for (int b = 0; b < 2; ++b)
      for (int lay = 0; lay < 2; ++lay)
        for (int cl = 1; cl <= 2; ++cl) {
          loom_gemm_config_t cfg = {bns[b], 0, 0, 0, 0, 0, 0, cl, 0, 0};
          loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                                lay ? LOOM_B_KN : LOOM_B_NK, 1);
          run_case(&d, &cfg, 1);
        }
  /* a small grid: every block (cluster) walks many tiles (persistent loop,
   * phases), every output dtype */
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int c = 0; c < 3; ++c)
    for (int cl = 1; cl <= 2; ++cl) {
      loom_gemm_config_t cfg = {256, 0, 3, 5, 0, 0, 0, cl, 0, 0};
      loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 2056, 1032, LOOM_FP16, cs[c], c ? LOOM_B_NK : LOOM_B_KN, 1);
      run_case(&d, &cfg, 1);
    }
}

/* Stream-K and split-K: the k-loop of every tile (or of the last tiles)
 * shared among blocks, partials summed by the last contributor. Odd m, n not a multiple
 * of the tile, k-blocks not a multiple of the blocks (uneven ranges), both
 * layouts, every dtype pair, bias (added once: the fp64 bound would catch a
 * second one). */
LOOM_TEST(gemm_stream_k_shapes_dtypes_layouts) {
  if (!sm90_or_skip()) return;
  /* m, n, k, sk_tiles, sk_blocks, grid, sk_splits (0: stream-K ranges,
   * else aligned split-K) */
  const int64_t cases[][7] = {{1, 256, 512, -1, 5, 0, 0},      {7, 136, 1032, -1, 7, 0, 0},
                              {65, 1000, 4104, -1, 13, 0, 0},  {127, 776, 1032, -1, 132, 0, 0},
                              {200, 2056, 3000, -1, 50, 0, 0}, {1000, 2056, 1032, 9, 0, 0, 0},
                              {3001, 776, 520, 20, 6, 6, 0},   {64, 4096, 4096, -1, 0, 0, 0},
                              {7, 136, 1032, -1, 0, 0, 3},     {65, 1000, 4104, -1, 0, 0, 5},
                              {200, 2056, 3000, -1, 0, 0, 4},  {1000, 2056, 1032, 9, 0, 0, 2},
                              {3001, 776, 520, 20, 0, 6, 7},   {64, 4096, 4096, -1, 0, 0, 16}};
  const int bns[] = {128, 256};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int b = 0; b < 2; ++b)
      for (int lay = 0; lay < 2; ++lay) {
        loom_gemm_config_t cfg = {bns[b], 0, 0, (int)cases[i][5], (int)cases[i][3], (int)cases[i][4], (int)cases[i][6], 0, 0, 0};
        loom_gemm_desc_t d = LOOM_GEMM_DESC(cases[i][0], cases[i][1], cases[i][2], LOOM_BF16, LOOM_BF16,
                              lay ? LOOM_B_KN : LOOM_B_NK, (int)((i + (size_t)lay) & 1));
        run_case(&d, &cfg, 1);
      }
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay) {
        loom_gemm_config_t cfg = {a ? 256 : 128, 0, 0, 0, -1, 11, c == 1 ? 3 : 0, 0, 0, 0};
        loom_gemm_desc_t d = LOOM_GEMM_DESC(97, 520, 2056, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, 1);
        run_case(&d, &cfg, 1);
      }
}

/* The sm90 kernel's own heuristic (what its launcher runs without a
 * configuration, e.g. for hooked GEMMs) takes the decode variant (bm 64)
 * for decode batches, never the small-m kernel; loom_gemm on those (it may
 * take the small-m kernel), twice in a row on one stream (tickets back to 0). */
LOOM_TEST(gemm_heuristic_decode_small_m) {
  if (!sm90_or_skip()) return;
  loom__gemm_device_t dev;
  CHECK_RESULT(loom__gemm_device(&dev), LOOM_SUCCESS);
  const int64_t shapes[][3] = {{64, 8192, 4096}, {1, 4096, 8192}, {17, 2048, 4096}, {48, 3072, 4096}, {33, 1288, 8200}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16, LOOM_B_NK, (int)(i & 1));
    const loom_gemm_config_t h = loom__gemm_sm90_heuristic(&d, &dev), c = loom__gemm_choose(&d, &dev, 1);
    printf("    m=%lld n=%lld k=%lld: sm90 kernel bm %d bn %d sk_tiles %d splits %d; loom_gemm bm %d splits %d\n",
           (long long)d.m, (long long)d.n, (long long)d.k, h.bm, h.bn, h.sk_tiles, h.sk_splits, c.bm, c.sk_splits);
    CHECK_EQ_INT(h.bm, 64);
    CHECK(run_case(&d, &h, 1));
    for (int rep = 0; rep < 2; ++rep) run_case(&d, NULL, 1);
  }
}

/* Same inputs, same configuration, twice: bit-identical (the partials are
 * summed in k order whoever finishes last); and a captured stream-K GEMM
 * replayed twice (the scratch exists before the capture). */
LOOM_TEST(gemm_stream_k_deterministic_and_graph) {
  if (!sm90_or_skip()) return;
  gcase_t g;
  cudaStream_t st = NULL;
  loom_gemm_desc_t d = LOOM_GEMM_DESC(77, 3000, 6152, LOOM_BF16, LOOM_FP32, LOOM_B_KN, 1);
  const loom_gemm_config_t cfg = {128, 0, 0, 0, -1, 0, 0, 0, 0, 0};
  const loom_gemm_config_t split = {256, 0, 0, 0, -1, 0, 6, 0, 0, 0};
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  gemm_case_twice_identical(&g, loom__gemm_sm90, &cfg, st, "stream-K");
  gemm_case_twice_identical(&g, loom__gemm_sm90, &split, st, "split-K x6");
  gemm_case_graph_replays(&g, loom__gemm_sm90, &cfg, st, 2);
out:
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
}

/* Split-K reduced apart (sk_reduce: every unit stores its partial, a second
 * kernel launched as a programmatic dependent sums them): the bits of the
 * in-kernel finisher (same additions in split order, same epilogue), every
 * element written, fp64 bounds; 128- and 64-row tiles, every width, split
 * of all tiles and of the last ones (the rest whole), odd m, n not a
 * multiple of the tile, both layouts, every C type, bias or none; then a
 * captured one replayed (the dependent launch becomes a graph edge) and
 * loom_gemm_tune's value text round trip. */
LOOM_TEST(gemm_split_k_reduced_apart) {
  if (!sm90_or_skip()) return;
  /* m, n, k, bm, bn, splits, sk_tiles, c type (0 bf16, 1 fp16, 2 fp32), B kn, bias */
  static const int cs[][10] = {{512, 768, 4096, 128, 128, 4, -1, 0, 0, 0}, {1000, 776, 2056, 128, 192, 3, -1, 1, 1, 1},
                               {77, 1288, 6152, 64, 128, 6, -1, 2, 0, 1},  {2048, 768, 4096, 128, 256, 2, -1, 0, 1, 0},
                               {3001, 1544, 1032, 128, 224, 2, 7, 0, 0, 1}, {300, 2056, 3000, 64, 256, 5, -1, 1, 0, 0},
                               {129, 136, 8200, 128, 128, 8, -1, 2, 1, 1}};
  const loom_dtype_t ct[] = {LOOM_BF16, LOOM_FP16, LOOM_FP32};
  cudaStream_t st = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) {
    gcase_t g;
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(cs[i][0], cs[i][1], cs[i][2], i % 2 ? LOOM_FP16 : LOOM_BF16, ct[cs[i][7]],
                                              cs[i][8] ? LOOM_B_KN : LOOM_B_NK, cs[i][9]);
    if (!gcase_init(&g, &d)) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      continue;
    }
    loom_gemm_config_t fused;
    memset(&fused, 0, sizeof fused);
    fused.bm = cs[i][3] == 64 ? 64 : 0, fused.bn = cs[i][4], fused.group = 4;
    fused.sk_tiles = cs[i][6], fused.sk_splits = cs[i][5];
    loom_gemm_config_t apart = fused;
    apart.sk_reduce = 1;
    char label[128];
    snprintf(label, sizeof label, "%lld x %lld x %lld, %d x %d split %d%s, reduced apart vs in the kernel",
             (long long)d.m, (long long)d.n, (long long)d.k, cs[i][3], cs[i][4], cs[i][5],
             cs[i][6] > 0 ? " (last tiles)" : "");
    CHECK(gemm_case_configs_identical(&g, loom__gemm_sm90, &apart, &fused, st, label));
    if (i == 0) {
      CHECK(gemm_case_graph_replays(&g, loom__gemm_sm90, &apart, st, 3));
      char text[LOOM_TUNE_TEXT_BYTES];
      loom_gemm_config_t back;
      loom__gemm_config_format(&apart, text, sizeof text);
      CHECK_RESULT(loom__gemm_config_parse(text, &back), LOOM_SUCCESS);
      CHECK(!memcmp(&back, &apart, sizeof back));
    }
    gcase_free(&g);
  }
out:
  if (st) cudaStreamDestroy(st);
}

LOOM_TEST(gemm_invalid_arguments) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    loom_test_skip("no GPU");
    return;
  }
  void *p = NULL;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) {
    loom_test_fail(__FILE__, __LINE__, "cudaMalloc");
    return;
  }
  loom_gemm_desc_t d = LOOM_GEMM_DESC(64, 12, 64, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("n=12");
  d.n = 64, d.k = 20;
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("k=20");
  d.k = 64, d.m = 0;
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("m=0");
  d.m = 64;
  CHECK_RESULT(loom_gemm(&d, NULL, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  d.has_bias = 1;
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  cudaFree(p);
}

LOOM_TEST(gemm_graph_capture) {
  if (sm90_or_skip()) gemm_graph_capture_case();
}

/* loom_gemm_tune records an entry that loom_gemm then uses; forced entries
 * (cluster, split-K) are used and correct; a malformed entry is an error;
 * tuning inside a graph capture is refused. */
LOOM_TEST(gemm_tune_records_an_entry_loom_gemm_uses) {
  if (!sm90_or_skip()) return;
  loom__tune_clear();
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 2056, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
  gcase_t g;
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    return;
  }
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  CHECK(loom__gemm_tune_key(&d, "sm90", sms, key, sizeof key));
  CHECK(!loom__tune_get(key, value, sizeof value));
  CHECK_RESULT(loom_gemm_tune(&d, g.da, g.db, g.dc, g.dbias, 0), LOOM_SUCCESS);
  CHECK(loom__tune_get(key, value, sizeof value));
  printf("    tuned: %s = %s\n", key, value);
  loom_gemm_config_t c;
  CHECK_RESULT(loom__gemm_config_parse(value, &c), LOOM_SUCCESS);
  CHECK(run_case(&d, NULL, 1)); /* loom_gemm with the tuned entry */
  const char *forced[] = {"bn=128 group=16 cluster=2", "bn=256 group=16 sk_tiles=-1 splits=3", "bn=256 grid=7 cluster=2"};
  for (int i = 0; i < 3; ++i) {
    CHECK_RESULT(loom__tune_put(key, forced[i]), LOOM_SUCCESS);
    printf("    forced: %s\n", forced[i]);
    CHECK(run_case(&d, NULL, 1));
  }
  CHECK_RESULT(loom__tune_put(key, "bn=256 tiles=3"), LOOM_SUCCESS);
  CHECK_RESULT(loom_gemm(&d, g.da, g.db, g.dc, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tiles");
  loom__tune_clear();
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  CHECK_RESULT(loom_gemm_tune(&d, g.da, g.db, g.dc, g.dbias, st), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("capturing");
  cudaGraph_t graph = NULL;
  CUDA_OK(cudaStreamEndCapture(st, &graph));
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
out:
  loom__tune_clear();
  gcase_free(&g);
}

/* The tuning rule's noise (core/tune_rule.h): one configuration raced
 * against copies of itself, on three shapes (short, middle, long). Prints
 * each race's spread (the slowest candidate's median over the fastest's)
 * and the winner; with identical candidates the default should win, since
 * the margin exceeds the spread (docs/perf/core.md records the figures).
 * Checks only what the rule guarantees: every candidate timed, a winner in
 * range, the default where no other beats it by the margin. */
typedef struct {
  const loom_gemm_desc_t *d;
  const void *a, *b, *bias;
  void *c;
  loom_gemm_config_t cfg;
} noise_race_t;

static loom_result_t noise_call(void *ctx, int i, cudaStream_t stream) {
  const noise_race_t *k = (const noise_race_t *)ctx;
  (void)i;
  return loom__gemm_launch(1, k->d, k->a, k->b, k->c, k->bias, &k->cfg, stream);
}

LOOM_TEST(gemm_tune_rule_noise_identical_candidates) {
  if (!sm90_or_skip()) return;
  static const int64_t shapes[3][3] = {{64, 1280, 8192}, {1024, 4096, 4096}, {4096, 8192, 8192}};
  for (int s = 0; s < 3; ++s) {
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[s][0], shapes[s][1], shapes[s][2], LOOM_BF16, LOOM_BF16,
                                              LOOM_B_NK, 0);
    gcase_t g;
    if (!gcase_init(&g, &d)) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      gcase_free(&g);
      return;
    }
    loom__gemm_device_t dev;
    LOOM_OK(loom__gemm_device(&dev));
    noise_race_t ctx = {&d, g.da, g.db, NULL, g.dc, loom__gemm_sm90_heuristic(&d, &dev)};
    enum { N = 6 };
    const loom_tune_race_t race = {"noise", N, &ctx, NULL, noise_call, NULL, NULL};
    int best = -1;
    float ms = 0, med[N];
    LOOM_OK(loom__tune_race(&race, 0, &best, &ms, med));
    float lo = med[0], hi = med[0];
    for (int i = 1; i < N; ++i) lo = med[i] < lo ? med[i] : lo, hi = med[i] > hi ? med[i] : hi;
    CHECK(best >= 0 && best < N && lo > 0.f && hi < LOOM_TUNE_LEFT_OUT);
    CHECK(best == 0 || med[best] < med[0] * (1.0f - LOOM_TUNE_MARGIN));
    printf("    %lldx%lldx%lld: %d identical candidates, medians %.4f..%.4f ms, spread %.2f%% (margin %.0f%%), "
           "winner %d\n", (long long)d.m, (long long)d.n, (long long)d.k, N, lo, hi, 100.0 * (hi / lo - 1.0),
           100.0 * LOOM_TUNE_MARGIN, best);
  out:
    gcase_free(&g);
  }
}

/* ---- the decode variant (config bm = 64: 64-row tiles, the consumer
 * warpgroups split the columns, deeper B pipelines) ---------------------- */

/* A config of 64-row tiles: width bn, split-K splits (0 none), stream-K
 * (sk != 0: every tile), persistent grid (0: SMs). */
static loom_gemm_config_t dec_cfg(int bn, int splits, int sk, int grid) {
  loom_gemm_config_t c = {bn, 0, 0, grid, splits > 1 || sk ? -1 : 0, 0, splits > 1 ? splits : 0, 0, 64, 0};
  return c;
}

/* Decode batches (m = 1, 7, 33, 64: one tile row, the A box partly or not
 * at all out of bounds), n and k not multiples of the tile (n = 24: the
 * second warpgroup's columns lie wholly past n), both widths, both layouts,
 * bias on half. */
LOOM_TEST(gemm_decode_small_m_shapes_widths_layouts) {
  if (!sm90_or_skip()) return;
  const int64_t ms[] = {1, 7, 33, 64};
  const int64_t nk[][2] = {{776, 1032}, {24, 8}, {1000, 4104}, {2056, 520}};
  const int bns[] = {128, 256};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 2; ++b)
        for (int lay = 0; lay < 2; ++lay) {
          const loom_gemm_config_t cfg = dec_cfg(bns[b], 0, 0, 0);
          loom_gemm_desc_t d = LOOM_GEMM_DESC(ms[i], nk[j][0], nk[j][1], LOOM_BF16, LOOM_BF16, lay ? LOOM_B_KN : LOOM_B_NK,
                                (i + j + lay) & 1);
          run_case(&d, &cfg, 1);
        }
}

/* Every input and output dtype, both layouts, with and without bias (the
 * TMA epilogue's chunks: 1 or 2 per warpgroup at bn 128, 2 or 4 at bn 256;
 * bn 256 has one epilogue buffer per warpgroup). */
LOOM_TEST(gemm_decode_dtypes_bias_layouts) {
  if (!sm90_or_skip()) return;
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay)
        for (int bias = 0; bias < 2; ++bias) {
          const loom_gemm_config_t cfg = dec_cfg((a + c + bias) & 1 ? 256 : 128, 0, 0, 0);
          loom_gemm_desc_t d = LOOM_GEMM_DESC(33, 520, 2056, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, bias);
          run_case(&d, &cfg, 1);
        }
}

/* More than 64 rows: bm = 64 is not refused there, it runs tile rows of 64
 * (m = 65..128: two tile rows, the second partial; larger m: more rows);
 * checked like any other shape. */
LOOM_TEST(gemm_decode_more_than_64_rows_runs_64_row_tiles) {
  if (!sm90_or_skip()) return;
  const int64_t ms[] = {65, 100, 127, 128, 129, 200, 1000};
  for (size_t i = 0; i < sizeof ms / sizeof ms[0]; ++i)
    for (int b = 0; b < 2; ++b)
      for (int lay = 0; lay < 2; ++lay) {
        const loom_gemm_config_t cfg = dec_cfg(b ? 256 : 128, 0, 0, 0);
        loom_gemm_desc_t d = LOOM_GEMM_DESC(ms[i], 1288, 1032, LOOM_BF16, (i & 1) ? LOOM_FP32 : LOOM_BF16,
                              lay ? LOOM_B_KN : LOOM_B_NK, (int)((i + (size_t)lay) & 1));
        run_case(&d, &cfg, 1);
      }
}

/* Split-K and stream-K over 64-row tiles (partials of 2 warpgroups x 64 x
 * bn/2, summed by the last contributor, bias once), and small persistent
 * grids (every block walks many tiles: barrier phases, the epilogue buffer
 * reused across tiles). */
LOOM_TEST(gemm_decode_split_k_stream_k_and_small_grids) {
  if (!sm90_or_skip()) return;
  /* m, n, k, splits, stream-K, grid */
  const int64_t cases[][6] = {{1, 1000, 4104, 3, 0, 0},   {33, 2056, 3000, 4, 0, 0}, {64, 776, 8200, 16, 0, 0},
                              {100, 1288, 2056, 2, 0, 0}, {7, 1000, 4104, 0, 1, 0},  {64, 2056, 3000, 0, 1, 0},
                              {129, 776, 1032, 0, 1, 0},  {64, 4096, 520, 0, 0, 3},  {33, 2056, 1032, 0, 0, 5},
                              {64, 2056, 2056, 5, 0, 3},  {1, 4096, 1032, 0, 1, 2}};
  const loom_dtype_t cs[] = {LOOM_BF16, LOOM_FP32, LOOM_FP16};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int b = 0; b < 2; ++b)
      for (int lay = 0; lay < 2; ++lay) {
        const loom_gemm_config_t cfg = dec_cfg(b ? 256 : 128, (int)cases[i][3], (int)cases[i][4], (int)cases[i][5]);
        const loom_dtype_t ab = (i + (size_t)b) & 1 ? LOOM_FP16 : LOOM_BF16;
        loom_dtype_t ct = cs[(i + (size_t)lay) % 3];
        if (ct != LOOM_FP32) ct = ab; /* fp16 -> fp16, bf16 -> bf16 so cuBLASLt checks every element */
        loom_gemm_desc_t d = LOOM_GEMM_DESC(cases[i][0], cases[i][1], cases[i][2], ab, ct, lay ? LOOM_B_KN : LOOM_B_NK,
                              (int)((i + (size_t)lay) & 1));
        run_case(&d, &cfg, 1);
      }
}

/* loom__gemm_hooked with an empty set of hooks: the configuration's bm = 64
 * is ignored (hooked GEMMs run 128-row tiles), the result is still right. */
static loom_result_t hooked_plain(const loom_gemm_desc_t *d, const void *a, const void *b, void *c, const void *bias,
                                  const loom_gemm_config_t *cfg, const loom_gemm_hooks_t *hooks, cudaStream_t st) {
  (void)hooks;
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  return loom__gemm_hooked(d, a, b, c, bias, cfg, &h, st);
}

/* Two runs bit-identical (split-K and stream-K), a captured graph replayed,
 * loom_gemm taking bm = 64 from a tuning entry, hooks ignoring bm, and the
 * configuration errors that name the field. */
LOOM_TEST(gemm_decode_deterministic_graph_tuned_entry_and_errors) {
  if (!sm90_or_skip()) return;
  gcase_t g;
  cudaStream_t st = NULL;
  memset(&g, 0, sizeof g);
  loom__tune_clear();
  loom_gemm_desc_t d = LOOM_GEMM_DESC(64, 3000, 6152, LOOM_BF16, LOOM_FP32, LOOM_B_KN, 1);
  const loom_gemm_config_t split = dec_cfg(256, 6, 0, 0), sk = dec_cfg(128, 0, 1, 0), dp = dec_cfg(256, 0, 0, 0);
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  gemm_case_twice_identical(&g, loom__gemm_sm90, &dp, st, "bm 64 data-parallel");
  gemm_case_twice_identical(&g, loom__gemm_sm90, &split, st, "bm 64 split-K x6");
  gemm_case_twice_identical(&g, loom__gemm_sm90, &sk, st, "bm 64 stream-K");
  gemm_case_graph_replays(&g, loom__gemm_sm90, &split, st, 2);
  {
    /* loom_gemm with a tuning entry naming the variant */
    int sms = 0;
    char key[LOOM_TUNE_TEXT_BYTES];
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const loom_gemm_desc_t e = LOOM_GEMM_DESC(48, 5120, 4096, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    CHECK(loom__gemm_tune_key(&e, "sm90", sms, key, sizeof key));
    const char *forced[] = {"bm=64 bn=256", "bm=64 bn=128 sk_tiles=-1 splits=4", "bm=64 bn=256 sk_tiles=-1"};
    for (int i = 0; i < 3; ++i) {
      CHECK_RESULT(loom__tune_put(key, forced[i]), LOOM_SUCCESS);
      printf("    forced: %s\n", forced[i]);
      CHECK(run_case(&e, NULL, 1));
    }
    loom__tune_clear();
  }
  {
    /* hooks: bm ignored, 128-row tiles, still correct */
    const loom_gemm_desc_t h = LOOM_GEMM_DESC(40, 1288, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
    const loom_gemm_config_t c64 = dec_cfg(128, 0, 0, 0);
    CHECK(gemm_run_case(&h, hooked_plain, &c64, 1));
  }
  {
    /* configuration errors name the field */
    loom_gemm_config_t bad = dp;
    bad.bm = 32;
    CHECK_RESULT(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &bad, NULL, st), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("bm=32");
    bad = dp;
    bad.stages = 4; /* bm 64 x bn 256 is built with 5 */
    CHECK_RESULT(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &bad, NULL, st), LOOM_ERR_UNSUPPORTED);
    CHECK_MSG("bm=64 bn=256 is built with 5 stages");
    bad = dp;
    bad.stages = 5;
    CHECK_RESULT(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &bad, NULL, st), LOOM_SUCCESS);
    CUDA_OK(cudaStreamSynchronize(st));
  }
out:
  loom__tune_clear();
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
}

/* The odd tile widths, 128 x 192 and 128 x 224 (wgmma m64n192 / m64n224,
 * 4 stages, no clusters; 224: 4 boxes of B [k, n] of which the last is half
 * past the tile, and in bf16/fp16 a 32-column tail stored from registers):
 * odd shapes, both layouts, every dtype pair with and without bias, a small
 * persistent grid, a cluster request (ignored), split-K and stream-K, two
 * runs bit-identical, the hooked kernel, a tuning entry loom_gemm takes,
 * and bm = 64 with an odd width refused. */
LOOM_TEST(gemm_tile_widths_192_224) {
  if (!sm90_or_skip()) return;
  gcase_t g;
  cudaStream_t st = NULL;
  memset(&g, 0, sizeof g);
  loom__tune_clear();
  const int widths[2] = {192, 224};
  for (int w = 0; w < 2; ++w) {
    const int bn = widths[w];
    printf("    bn %d\n", bn);
    const int64_t shapes[][3] = {{1, 192, 512},      {127, 1000, 520},   {256, 14336, 1032},
                                 {3001, 2056, 1000}, {129, 200, 4104},   {300, 232, 264}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
      for (int lay = 0; lay < 2; ++lay) {
        const loom_gemm_config_t cfg = {bn, 0, 0, 0, 0, 0, 0, (int)(i & 1) + 1, 0, 0};
        loom_gemm_desc_t d = LOOM_GEMM_DESC(shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                              lay ? LOOM_B_KN : LOOM_B_NK, (int)(i & 1));
        run_case(&d, &cfg, 1);
      }
    const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
    const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
    for (int a = 0; a < 2; ++a)
      for (int c = 0; c < 3; ++c)
        for (int lay = 0; lay < 2; ++lay) {
          /* grid 5 on odd (a, c): every block walks many tiles */
          const loom_gemm_config_t cfg = {bn, 0, 3, (a + c) & 1 ? 5 : 0, 0, 0, 0, 0, 0, 0};
          loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 776, 1032, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, (c + lay) & 1);
          run_case(&d, &cfg, 1);
        }
    /* split-K (aligned) and stream-K: sk_tiles, sk_blocks, splits */
    const int64_t sk[][6] = {{65, 1000, 4104, -1, 0, 5}, {200, 2056, 3000, -1, 50, 0}, {3001, 776, 520, 20, 6, 0},
                             {7, 136, 1032, -1, 0, 3}};
    for (size_t i = 0; i < sizeof sk / sizeof sk[0]; ++i)
      for (int lay = 0; lay < 2; ++lay) {
        const loom_gemm_config_t cfg = {bn, 0, 0, 0, (int)sk[i][3], (int)sk[i][4], (int)sk[i][5], 0, 0, 0};
        loom_gemm_desc_t d = LOOM_GEMM_DESC(sk[i][0], sk[i][1], sk[i][2], LOOM_BF16, lay ? LOOM_FP32 : LOOM_BF16,
                              lay ? LOOM_B_KN : LOOM_B_NK, 1);
        run_case(&d, &cfg, 1);
      }
  }
  {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(300, 1544, 2056, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 1);
    if (!gcase_init(&g, &d)) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      goto out;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int w = 0; w < 2; ++w) {
      const loom_gemm_config_t dp = {widths[w], 0, 0, 0, 0, 0, 0, 0, 0, 0}, split = {widths[w], 0, 0, 0, -1, 0, 4, 0, 0, 0};
      gemm_case_twice_identical(&g, loom__gemm_sm90, &dp, st, w ? "bn 224 data-parallel" : "bn 192 data-parallel");
      gemm_case_twice_identical(&g, loom__gemm_sm90, &split, st, w ? "bn 224 split-K x4" : "bn 192 split-K x4");
      /* the hooked kernel of this width (an empty set of hooks) */
      CHECK(gemm_run_case(&d, hooked_plain, &dp, 1));
      /* bm 64 has no odd-width kernels: refused, naming both fields */
      loom_gemm_config_t bad = dp;
      bad.bm = 64;
      CHECK_RESULT(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &bad, NULL, st), LOOM_ERR_INVALID_ARGUMENT);
      CHECK_MSG(w ? "bm=64 bn=224" : "bm=64 bn=192");
    }
    loom_gemm_config_t bad = {160, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK_RESULT(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &bad, NULL, st), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("bn=160");
    /* loom_gemm with tuning entries naming the odd widths */
    int sms = 0;
    char key[LOOM_TUNE_TEXT_BYTES];
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const loom_gemm_desc_t e = LOOM_GEMM_DESC(520, 3000, 1032, LOOM_FP16, LOOM_BF16, LOOM_B_NK, 0);
    CHECK(loom__gemm_tune_key(&e, "sm90", sms, key, sizeof key));
    CHECK_RESULT(loom__tune_put(key, "bn=192 group=8"), LOOM_SUCCESS);
    CHECK(run_case(&e, NULL, 1));
    CHECK_RESULT(loom__tune_put(key, "bn=224 group=4"), LOOM_SUCCESS);
    CHECK(run_case(&e, NULL, 1));
  }
out:
  loom__tune_clear();
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
}

/* ---- hooks (the cases are in gemm_cases.c, shared with the sm80 path) -- */

LOOM_TEST(gemm_hooks_host_schedule_waits_and_tile_signals) {
  if (sm90_or_skip()) gemm_hooks_host_schedule_waits_and_tile_signals_case();
}

LOOM_TEST(gemm_hooks_row_routed_store_and_reduce) {
  if (sm90_or_skip()) gemm_hooks_row_routed_store_and_reduce_case();
}

LOOM_TEST(gemm_hooks_prologue_timeout) {
  if (sm90_or_skip()) gemm_hooks_prologue_timeout_case();
}

LOOM_TEST(gemm_hooks_split_k_stream_k_wait_only) {
  if (sm90_or_skip()) gemm_hooks_split_wait_only_case();
}

LOOM_TEST(gemm_hooks_clusters_wait_and_time_out) {
  if (sm90_or_skip()) gemm_hooks_clusters_wait_and_time_out_case();
}

/* Two graphs that captured split-K GEMMs on one stream, replayed at the
 * same time on two other streams: each owns its tickets and partials
 * (core/scratch.h), so both give the bits of a direct launch every time. */
LOOM_TEST(gemm_split_k_graphs_of_one_stream_replay_concurrently) {
  if (!sm90_or_skip()) return;
  gcase_t g[2];
  memset(g, 0, sizeof g);
  cudaStream_t st = NULL, rs[2] = {NULL, NULL};
  cudaGraph_t graph[2] = {NULL, NULL};
  cudaGraphExec_t exec[2] = {NULL, NULL};
  void *want[2] = {NULL, NULL}, *got = NULL;
  const loom_gemm_desc_t d[2] = {LOOM_GEMM_DESC(96, 2048, 8192, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1),
                                 LOOM_GEMM_DESC(200, 1536, 6144, LOOM_FP16, LOOM_FP32, LOOM_B_KN, 0)};
  const loom_gemm_config_t split = {128, 0, 0, 0, -1, 0, 6, 0, 0, 0};
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) {
    if (!gcase_init(&g[i], &d[i])) {
      loom_test_fail(__FILE__, __LINE__, "allocation");
      goto out;
    }
    CUDA_OK(cudaStreamCreateWithFlags(&rs[i], cudaStreamNonBlocking));
    /* the bits of a direct launch */
    CHECK_LOOM_OR(loom__gemm_sm90(&d[i], g[i].da, g[i].db, g[i].dc, g[i].dbias, &split, NULL, st), goto out);
    CUDA_OK(cudaStreamSynchronize(st));
    want[i] = malloc(g[i].c_bytes);
    CUDA_OK(cudaMemcpy(want[i], g[i].dc, g[i].c_bytes, cudaMemcpyDeviceToHost));
    /* captured on the same stream */
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    loom_result_t r = loom__gemm_sm90(&d[i], g[i].da, g[i].db, g[i].dc, g[i].dbias, &split, NULL, st);
    CUDA_OK(cudaStreamEndCapture(st, &graph[i]));
    CHECK_LOOM_OR(r, goto out);
    CUDA_OK(cudaGraphInstantiate(&exec[i], graph[i], 0));
  }
  for (int rep = 0; rep < 3; ++rep) {
    for (int i = 0; i < 2; ++i) CUDA_OK(cudaMemsetAsync(g[i].dc, 0xff, g[i].c_bytes, rs[i]));
    for (int j = 0; j < 20; ++j)
      for (int i = 0; i < 2; ++i) CUDA_OK(cudaGraphLaunch(exec[i], rs[i]));
    for (int i = 0; i < 2; ++i) CUDA_OK(cudaStreamSynchronize(rs[i]));
    for (int i = 0; i < 2; ++i) {
      got = malloc(g[i].c_bytes);
      CUDA_OK(cudaMemcpy(got, g[i].dc, g[i].c_bytes, cudaMemcpyDeviceToHost));
      if (memcmp(got, want[i], g[i].c_bytes) != 0)
        loom_test_fail(__FILE__, __LINE__, "graph %d, round %d: replays differ from a direct launch", i, rep);
      free(got);
      got = NULL;
    }
  }
  printf("    2 split-K graphs captured on one stream, 3 x 20 concurrent replays each: bit-identical to direct launches\n");
out:
  for (int i = 0; i < 2; ++i) {
    if (exec[i]) cudaGraphExecDestroy(exec[i]);
    if (graph[i]) cudaGraphDestroy(graph[i]);
    if (rs[i]) cudaStreamDestroy(rs[i]);
    free(want[i]);
    gcase_free(&g[i]);
  }
  free(got);
  if (st) cudaStreamDestroy(st);
}

/* Split-K over very long k (GPT-3's down projection at TP = 1: k = 49152),
 * where the dev benchmark flagged a few elements against cuBLASLt: every
 * element against cuBLASLt and sampled rows and columns against fp64 with
 * the bound that grows with k. */
LOOM_TEST(gemm_split_k_long_k) {
  if (!sm90_or_skip()) return;
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(128, 1536, 49152, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
  const loom_gemm_config_t cfgs[3] = {{256, 0, 0, 0, -1, 0, 8, 0, 0, 0}, {128, 0, 0, 0, -1, 0, 4, 0, 0, 0},
                                      {256, 0, 0, 0, -1, 0, 4, 0, 64, 0}};
  for (int i = 0; i < 3; ++i) CHECK(gemm_run_case(&d, loom__gemm_sm90, &cfgs[i], 1));
}
