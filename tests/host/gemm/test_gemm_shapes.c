/*
 * test_gemm_shapes.c - host tests of the GEMM shape set (src/gemm/
 * gemm_shapes.h): twelve families in two halves of six, hidden sizes
 * 2048..16384, dense and MoE in both halves, every weight a multiple of 8 in
 * n and k and listed once, the halves disjoint (a held-out weight that a
 * fitting family also has belongs to the fitting half), the two
 * examples in the fitting half, and the per-GEMM variant (dtype, layout,
 * bias) deterministic and spread over all eight combinations in each half.
 * Runs on any machine.
 */
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/gemm_shapes.h"

LOOM_TEST(gemm_shapes_table_and_halves) {
  int fams[2] = {0, 0}, moe[2] = {0, 0};
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f) {
    const loom_gemm_family_t *F = &loom_gemm_families[f];
    CHECK(F->hidden >= 2048 && F->hidden <= 16384);
    CHECK(F->source && strlen(F->source) > 10);
    CHECK(F->held_out == 0 || F->held_out == 1);
    fams[F->held_out]++;
    moe[F->held_out] += F->moe;
    if (f > 0) CHECK(F->held_out >= loom_gemm_families[f - 1].held_out); /* fitting half first */
  }
  CHECK_EQ_INT(LOOM_GEMM_NFAMILIES, 12);
  CHECK(fams[0] == 6 && fams[1] == 6);
  CHECK(moe[0] >= 2 && moe[1] >= 2);
  loom_gemm_weight_t fit[256], held[256], all[512];
  const int nf = loom__gemm_weights(0, fit, 256), nh = loom__gemm_weights(1, held, 256);
  const int na = loom__gemm_weights(-1, all, 512);
  printf("    %d weights: %d fitting, %d held out\n", na, nf, nh);
  CHECK(na == nf + nh);
  CHECK(nf >= 60 && nh >= 40);
  CHECK_EQ_INT(loom__gemm_weights(0, NULL, 0), nf);
  for (int i = 0; i < na; ++i) {
    CHECK(all[i].n % 8 == 0 && all[i].k % 8 == 0 && all[i].n > 0 && all[i].k > 0);
    CHECK(loom_gemm_families[all[i].family].held_out == all[i].held_out);
    for (int j = i + 1; j < na; ++j) CHECK(!(all[i].n == all[j].n && all[i].k == all[j].k));
  }
  for (int i = 0; i < nf; ++i) CHECK(fit[i].held_out == 0);
  for (int i = 0; i < nh; ++i) CHECK(held[i].held_out == 1);
  /* the examples of the issue: m = 1, n = 12288, k = 1536 and m = 1000,
   * n = 4608, k = 12288 (GPT-3 175B at TP 8) */
  int ex = 0;
  for (int i = 0; i < nf; ++i) ex += (fit[i].n == 12288 && fit[i].k == 1536) + (fit[i].n == 4608 && fit[i].k == 12288);
  CHECK_EQ_INT(ex, 2);
  /* a layer of a held-out family that a fitting family has is not held out:
   * Qwen2.5-72B's attention equals Llama-3-70B's */
  loom_gemm_weight_t q[16];
  const int nq = loom__gemm_family_layers(8, 1, q, 16);
  CHECK(!strcmp(loom_gemm_families[8].name, "Qwen2.5-72B") && nq == 4);
  for (int i = 0; i < nh; ++i) CHECK(!(held[i].n == q[0].n && held[i].k == q[0].k));
  CHECK_EQ_INT(LOOM_GEMM_SHAPE_NMS, 15);
}

LOOM_TEST(gemm_shapes_variants_are_deterministic_and_spread) {
  for (int half = 0; half <= 1; ++half) {
    loom_gemm_weight_t w[256];
    const int nw = loom__gemm_weights(half, w, 256);
    int combos[8] = {0};
    for (int i = 0; i < nw; ++i) {
      loom_dtype_t t0 = LOOM_FP32;
      for (int j = 0; j < LOOM_GEMM_SHAPE_NMS; ++j) {
        const loom_gemm_desc_t d = loom__gemm_shape_variant(loom_gemm_shape_ms[j], w[i].n, w[i].k);
        const loom_gemm_desc_t e = loom__gemm_shape_variant(loom_gemm_shape_ms[j], w[i].n, w[i].k);
        CHECK(!memcmp(&d, &e, sizeof d));
        CHECK(d.m == loom_gemm_shape_ms[j] && d.n == w[i].n && d.k == w[i].k && d.c_type == d.ab_type);
        CHECK(d.struct_size == sizeof(loom_gemm_desc_t));
        /* one dtype per weight: every m of it shares the inputs */
        if (j == 0) t0 = d.ab_type;
        CHECK(d.ab_type == t0);
        combos[(d.ab_type == LOOM_FP16) * 4 + (d.b_layout == LOOM_B_KN) * 2 + d.has_bias]++;
      }
    }
    for (int c = 0; c < 8; ++c) CHECK(combos[c] * 16 >= nw * LOOM_GEMM_SHAPE_NMS / 8);
  }
}
