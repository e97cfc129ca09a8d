/*
 * test_gemm_heuristic.c - host tests of the configuration model
 * (src/gemm/gemm_heuristic.c) on devices made up on the host:
 *   - over every shape of the set (gemm_shapes.h), both paths and GPU sizes
 *     from 2 to 132 SMs: every candidate is a configuration its kernel takes,
 *     candidates are distinct, predictions are finite and never below the
 *     floors (FLOPs at the tensor peak, the weight at the DRAM peak), and the
 *     pick is the candidate of least predicted time;
 *   - decode batches (m <= 16) run the small-m kernel on both paths, whose
 *     split count gives every block slot work;
 *   - wave quantization: at m = 1000, n = 4608, k = 12288 (GPT-3 QKV at
 *     TP 8: 192 tiles of 128 x 192 on 132 SMs, 1.45 waves) the model splits
 *     the k-loop of the last partial wave, and wherever it splits, its pick
 *     is predicted to beat whole tiles by the margin;
 *   - the choices measured on H200 for the TP=2 families of the fitting
 *     half (docs/perf/gemm.md, "Choices pinned from the TP=2 measurements") stay as they were;
 *   - split-K reduced apart where it was measured to win (narrow slices at
 *     m = 64), for hooked GEMMs only where their hooks allow it;
 *   - the sm80 rule takes the device's own blocks per SM.
 * Runs on any machine.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "gemm/gemm_shapes.h"
#include "gemm/sm80_layout.h"
#include "gemm/small_m_layout.h"

/* A configuration its kernel accepts on path sm90 (1) / sm80 (0). */
static int cfg_valid(const loom_gemm_config_t *c, const loom_gemm_desc_t *d, int sm90) {
  if (c->sk_reduce && (!sm90 || c->bm == 16 || c->sk_splits < 2 || c->sk_tiles == 0)) return 0;
  if (c->bm == 16)
    return c->bn == 0 && d->m <= LOOM_SMALLM_MAX_M && c->sk_splits >= 0 && c->sk_splits <= LOOM_SMALLM_MAX_SPLITS &&
           c->cluster == 0 && c->stages == 0;
  if (!sm90)
    return (c->bn == 128 || c->bn == 256) && c->bm == 0 && c->cluster == 0 &&
           (c->sk_splits <= 1 || (c->bn == 128 && c->sk_tiles == -1));
  if (c->bm == 64) return (c->bn == 128 || c->bn == 256) && c->cluster == 0;
  return c->bm == 0 && (c->bn == 128 || c->bn == 192 || c->bn == 224 || c->bn == 256) &&
         (c->cluster == 0 || c->cluster == 2) && (c->cluster != 2 || c->bn == 128 || c->bn == 256) &&
         c->sk_tiles >= -1 && c->sk_splits >= 0;
}

LOOM_TEST(gemm_heuristic_candidates_and_predictions_over_the_shape_set) {
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(-1, w, 256);
  CHECK(nw > 100 && nw < 256);
  const int sms_list[] = {2, 3, 8, 16, 64, 132};
  long checked = 0, bad_valid = 0, bad_floor = 0, bad_pick = 0, dups = 0;
  for (int si = 0; si < 6; ++si)
    for (int sm90 = 0; sm90 <= 1; ++sm90) {
      const loom__gemm_device_t dev = loom__gemm_device_model(sms_list[si], sm90);
      const double flop_s = dev.sms * 1.98e9 * 4096.0, bw = dev.dram_bps;
      for (int i = 0; i < nw; ++i)
        for (int j = 0; j < LOOM_GEMM_SHAPE_NMS; ++j) {
          if (si < 5 && (i + j) % 7) continue; /* small GPUs: a sample */
          const loom_gemm_desc_t d = loom__gemm_shape_variant(loom_gemm_shape_ms[j], w[i].n, w[i].k);
          loom_gemm_config_t c[LOOM_GEMM_MAX_CANDIDATES];
          const int n = loom__gemm_candidates(&d, &dev, sm90, c, LOOM_GEMM_MAX_CANDIDATES);
          CHECK(n >= 1 && n < LOOM_GEMM_MAX_CANDIDATES);
          const loom_gemm_config_t pick = loom__gemm_choose(&d, &dev, sm90);
          const double floor_us =
              1e6 * fmax(2.0 * d.m * d.n * d.k / flop_s, (double)d.n * d.k * 2 / bw);
          int found = 0;
          double best = 1e300;
          for (int a = 0; a < n; ++a) {
            bad_valid += !cfg_valid(&c[a], &d, sm90);
            for (int b = a + 1; b < n; ++b) dups += !memcmp(&c[a], &c[b], sizeof c[a]);
            const double us = loom__gemm_predict_us(&d, &dev, &c[a], sm90);
            bad_floor += !(us >= floor_us && us < 1e9);
            found |= !memcmp(&c[a], &pick, sizeof pick);
            if (us < best && c[a].bm != 16) best = us;
          }
          /* the pick: the small-m kernel for m <= 16 under 128 MB of
           * weight (its rule), else (sm90) a tile-kernel candidate within
           * the split margin of the fastest tile-kernel prediction, or
           * (sm80) its own rule */
          const double pick_us = loom__gemm_predict_us(&d, &dev, &pick, sm90);
          const int small = d.m <= 16 && (double)d.n * d.k * 2 < 128.0 * (1 << 20);
          bad_pick += !cfg_valid(&pick, &d, sm90) || (pick.bm == 16) != small;
          if (!small && sm90) bad_pick += !found || !(pick_us <= best * 1.05 + 1e-9);
          /* a path's own heuristic never returns the small-m kernel */
          const loom_gemm_config_t own = sm90 ? loom__gemm_sm90_heuristic(&d, &dev) : loom__gemm_sm80_heuristic(&d, &dev);
          bad_pick += own.bm == 16;
          ++checked;
        }
    }
  printf("    %ld (shape, GPU size, path) cases\n", checked);
  CHECK(checked > 5000);
  CHECK_EQ_INT(bad_valid, 0);
  CHECK_EQ_INT(dups, 0);
  CHECK_EQ_INT(bad_floor, 0);
  CHECK_EQ_INT(bad_pick, 0);
}

LOOM_TEST(gemm_heuristic_decode_runs_the_small_m_kernel) {
  const loom__gemm_device_t dev = loom__gemm_device_model(132, 1);
  const int64_t ms[] = {1, 2, 4, 8, 16};
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(0, w, 256); /* the fitting half */
  int small = 0, total = 0;
  for (int i = 0; i < nw; ++i)
    for (int j = 0; j < 5; ++j) {
      const loom_gemm_desc_t d = loom__gemm_shape_variant(ms[j], w[i].n, w[i].k);
      const double wbytes = (double)d.n * d.k * 2;
      const loom_gemm_config_t c = loom__gemm_choose(&d, &dev, 1);
      /* the small-m kernel exactly where the weight is under 128 MB */
      CHECK((c.bm == 16) == (wbytes < 128.0 * (1 << 20)));
      small += c.bm == 16;
      ++total;
      /* its split count: units up to the SMs where the k-loop allows, each
       * k range 256+ long and every warp a share of 4+ chunks */
      const loom_gemm_config_t h = loom__gemm_small_m_heuristic(&d, &dev);
      const int s = h.sk_splits > 1 ? h.sk_splits : 1;
      const int64_t tiles = (d.n + LOOM_SMALLM_BN - 1) / LOOM_SMALLM_BN;
      const loom_smallm_work_t sw = loom__smallm_work(d.n, d.k, h.sk_splits, d.b_layout == LOOM_B_KN);
      CHECK(h.bm == 16);
      CHECK(sw.splits == 1 || sw.chunks / sw.splits >= 4 * LOOM_SMALLM_WK);
      CHECK(s == 1 || d.k / s >= 256);
      CHECK(tiles * s >= dev.sms || d.k / (2 * s) < 256 || 2 * s > LOOM_SMALLM_MAX_SPLITS ||
            sw.chunks / (2 * s) < 4 * LOOM_SMALLM_WK);
    }
  printf("    small-m kernel picked for %d of %d decode GEMMs (m <= 16)\n", small, total);
  CHECK(total > 100);
  CHECK(small > 0 && small < total);
  /* the example: m = 1, n = 12288, k = 1536, both paths */
  const loom_gemm_desc_t e = LOOM_GEMM_DESC(1, 12288, 1536, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  CHECK_EQ_INT(loom__gemm_choose(&e, &dev, 1).bm, 16);
  const loom__gemm_device_t a100 = loom__gemm_device_model(108, 0);
  CHECK_EQ_INT(loom__gemm_choose(&e, &a100, 0).bm, 16);
  /* a tiny weight's k-loop is not split below 4 chunks per warp */
  const loom_gemm_desc_t t = LOOM_GEMM_DESC(4, 2048, 96, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  CHECK(loom__gemm_small_m_heuristic(&t, &dev).sk_splits <= 1);
}

LOOM_TEST(gemm_heuristic_splits_the_last_partial_wave) {
  const loom__gemm_device_t dev = loom__gemm_device_model(132, 1);
  const loom_gemm_desc_t d = LOOM_GEMM_DESC(1000, 4608, 12288, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  const loom_gemm_config_t c = loom__gemm_choose(&d, &dev, 1);
  const loom_gemm_config_t dp = {192, 0, 16, 0, 0, 0, 0, 0, 0, 0};
  const double us = loom__gemm_predict_us(&d, &dev, &c, 1), us_dp = loom__gemm_predict_us(&d, &dev, &dp, 1);
  printf("    m=1000 n=4608 k=12288: bn %d sk_tiles %d splits %d: %.1f us (whole 128 x 192 tiles: %.1f us)\n", c.bn,
         c.sk_tiles, c.sk_splits, us, us_dp);
  CHECK(c.bm == 0 && c.sk_tiles != 0 && c.sk_splits >= 2);
  CHECK(us < 0.85 * us_dp);
  /* everywhere the model splits a 128-row kernel, it predicts a win of at
   * least the margin over its best whole-tile candidate */
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(0, w, 256);
  int splits = 0;
  for (int i = 0; i < nw; ++i)
    for (int j = 0; j < LOOM_GEMM_SHAPE_NMS; ++j) {
      const loom_gemm_desc_t e = loom__gemm_shape_variant(loom_gemm_shape_ms[j], w[i].n, w[i].k);
      const loom_gemm_config_t p = loom__gemm_choose(&e, &dev, 1);
      if (p.bm != 0 || p.sk_tiles == 0) continue;
      ++splits;
      loom_gemm_config_t cand[64];
      const int n = loom__gemm_candidates(&e, &dev, 1, cand, 64);
      double best_whole = 1e300;
      for (int a = 0; a < n; ++a)
        if (cand[a].bm == 0 && cand[a].sk_tiles == 0) best_whole = fmin(best_whole, loom__gemm_predict_us(&e, &dev, &cand[a], 1));
      CHECK(loom__gemm_predict_us(&e, &dev, &p, 1) * 1.04 <= best_whole * (1 + 1e-9));
    }
  printf("    the model splits the k-loop of %d fitting-half GEMMs\n", splits);
}

LOOM_TEST(gemm_heuristic_keeps_the_measured_tp2_choices) {
  /* H200, the TP=2 families measured in docs/perf/gemm.md, "Choices pinned from the TP=2 measurements", at
   * 0.98-1.10 of cuBLASLt: Flux AG, Flux RS, Llama-3-70B up and down */
  const loom__gemm_device_t dev = loom__gemm_device_model(132, 1);
  const struct { int64_t m, n, k; int bn, cluster; } want[] = {
      {256, 24576, 12288, 192, 0}, {512, 24576, 12288, 256, 2}, {1024, 24576, 12288, 256, 2},
      {2048, 24576, 12288, 256, 2}, {8192, 24576, 12288, 256, 2}, {256, 12288, 24576, 192, 0},
      {512, 12288, 24576, 192, 0}, {1024, 12288, 24576, 256, 2}, {4096, 12288, 24576, 256, 2},
      {256, 14336, 8192, 224, 0},  {512, 14336, 8192, 224, 0},   {1024, 14336, 8192, 224, 0},
      {2048, 14336, 8192, 256, 2}, {8192, 14336, 8192, 256, 2},  {256, 8192, 14336, 128, 2},
      {512, 8192, 14336, 256, 2},  {4096, 8192, 14336, 256, 2}};
  for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i) {
    for (int lay = 0; lay < 2; ++lay) {
      const loom_gemm_desc_t d =
          LOOM_GEMM_DESC(want[i].m, want[i].n, want[i].k, LOOM_BF16, LOOM_BF16, lay ? LOOM_B_KN : LOOM_B_NK, 0);
      const loom_gemm_config_t c = loom__gemm_choose(&d, &dev, 1);
      if (c.bn != want[i].bn || c.cluster != want[i].cluster || c.sk_tiles != 0 || c.bm != 0)
        printf("    m=%lld n=%lld k=%lld: bm %d bn %d cluster %d sk_tiles %d, measured choice bn %d cluster %d\n",
               (long long)d.m, (long long)d.n, (long long)d.k, c.bm, c.bn, c.cluster, c.sk_tiles, want[i].bn,
               want[i].cluster);
      CHECK(c.bm == 0 && c.bn == want[i].bn && c.cluster == want[i].cluster && c.sk_tiles == 0);
    }
  }
}

/* Split-K reduced apart (split_reduce.h): measured on H200 (docs/perf/gemm.md,
 * "Split-K reduced apart"), it beat the best in-kernel split by 8-25% at m = 64
 * on narrow TP = 8 slices; the model picks it there; a hooked GEMM's
 * configuration has it only where the hooks allow it (wait-only); the
 * text of a tuning value keeps it. */
LOOM_TEST(gemm_heuristic_reduces_narrow_splits_apart) {
  const loom__gemm_device_t dev = loom__gemm_device_model(132, 1);
  const int64_t apart[][3] = {{64, 768, 4096}, {64, 1280, 8192}, {64, 1280, 4096}};
  for (size_t i = 0; i < sizeof apart / sizeof apart[0]; ++i) {
    const loom_gemm_desc_t d = LOOM_GEMM_DESC(apart[i][0], apart[i][1], apart[i][2], LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    const loom_gemm_config_t c = loom__gemm_choose(&d, &dev, 1);
    printf("    m=%lld n=%lld k=%lld: bm %d bn %d splits %d reduce %d\n", (long long)d.m, (long long)d.n,
           (long long)d.k, c.bm, c.bn, c.sk_splits, c.sk_reduce);
    CHECK(c.sk_reduce == 1 && c.sk_splits >= 2);
  }
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(-1, w, 256);
  int refused_apart = 0, wait_only_apart = 0, plain_apart = 0;
  for (int i = 0; i < nw; ++i)
    for (int j = 0; j < LOOM_GEMM_SHAPE_NMS; ++j) {
      const loom_gemm_desc_t d = loom__gemm_shape_variant(loom_gemm_shape_ms[j], w[i].n, w[i].k);
      refused_apart += loom__gemm_sm90_hooked_config(&d, &dev, LOOM__HOOKED_NO_APART).sk_reduce != 0;
      wait_only_apart += loom__gemm_sm90_hooked_config(&d, &dev, 0).sk_reduce != 0;
      plain_apart += loom__gemm_choose(&d, &dev, 1).sk_reduce != 0;
    }
  printf("    shape set: %d picks reduced apart, %d of wait-only hooked GEMMs, %d where refused\n", plain_apart,
         wait_only_apart, refused_apart);
  CHECK(plain_apart > 0 && wait_only_apart > 0);
  CHECK_EQ_INT(refused_apart, 0);
  const loom_gemm_config_t c = {128, 0, 16, 0, -1, 0, 5, 0, 64, 1};
  char text[160];
  loom__gemm_config_format(&c, text, sizeof text);
  loom_gemm_config_t back;
  CHECK_RESULT(loom__gemm_config_parse(text, &back), LOOM_SUCCESS);
  CHECK(!memcmp(&back, &c, sizeof c) && strstr(text, "reduce=1") != NULL);
}

LOOM_TEST(gemm_heuristic_sm80_rule_takes_the_device_block_count) {
  /* Llama-3-70B up at m = 512 on 132 SMs: with two 128-wide blocks per SM
   * 128 x 128 tiles run two to an SM; with one, 256-wide tiles win */
  loom__gemm_device_t two = loom__gemm_device_model(132, 0), one = two;
  one.sm80_blocks_128 = 1;
  int differ = 0;
  loom_gemm_weight_t w[256];
  const int nw = loom__gemm_weights(0, w, 256);
  for (int i = 0; i < nw; ++i)
    for (int j = 7; j < LOOM_GEMM_SHAPE_NMS; ++j) {
      const loom_gemm_desc_t d = LOOM_GEMM_DESC(loom_gemm_shape_ms[j], w[i].n, w[i].k, LOOM_BF16, LOOM_BF16,
                                                LOOM_B_NK, 0);
      const loom_gemm_config_t a = loom__gemm_sm80_heuristic(&d, &two), b = loom__gemm_sm80_heuristic(&d, &one);
      CHECK(a.bn == loom__sm80_pick_bn(d.m, d.n, 132, 2) || a.sk_splits > 1);
      CHECK(b.bn == loom__sm80_pick_bn(d.m, d.n, 132, 1) || b.sk_splits > 1);
      differ += a.bn != b.bn || a.sk_splits != b.sk_splits;
    }
  CHECK(differ > 0);
}

LOOM_TEST(gemm_heuristic_wave_fill_and_split_count) {
  CHECK(fabs(loom__gemm_wave_fill(132, 132) - 1.0) < 1e-12);
  CHECK(fabs(loom__gemm_wave_fill(192, 132) - 192.0 / 264.0) < 1e-12);
  CHECK(fabs(loom__gemm_wave_fill(1, 132) - 1.0 / 132.0) < 1e-12);
  /* 32 tiles, 224 k-blocks on 132 SMs: 4 splits fill 128 of 132 */
  CHECK_EQ_INT(loom__gemm_split_count(32, 224, 132), 4);
  /* never a split under 8 k-blocks per range; one tile row of a full wave: none */
  CHECK_EQ_INT(loom__gemm_split_count(16, 8, 132), 1);
  CHECK_EQ_INT(loom__gemm_split_count(132, 512, 132), 1);
}
