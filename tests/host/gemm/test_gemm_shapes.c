/*
 * test_gemm_shapes.c - host tests of the GEMM shape set (src/gemm/
 * gemm_shapes.h): twelve families in two halves of six and eleven new
 * families after them, hidden sizes 2048..16384, dense and MoE in every
 * group, every weight a multiple of 8 in n and k and listed once, the groups
 * disjoint (a weight that an earlier family also has belongs to that
 * family's group), the two examples in the fitting half, the halves
 * exactly as they were before the new families came (counts and a
 * fingerprint of each list: the model was fitted on them), at least 40 new
 * weights, and the per-GEMM variant (dtype, layout, bias) deterministic and
 * spread over all eight combinations in each group.
 * Runs on any machine.
 */
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "gemm/gemm_shapes.h"

LOOM_TEST(gemm_shapes_table_and_halves) {
  int fams[3] = {0, 0, 0}, moe[3] = {0, 0, 0};
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f) {
    const loom_gemm_family_t *F = &loom_gemm_families[f];
    CHECK(F->hidden >= 2048 && F->hidden <= 16384);
    CHECK(F->source && strlen(F->source) > 10);
    CHECK(F->held_out >= 0 && F->held_out <= 2);
    fams[F->held_out]++;
    moe[F->held_out] += F->moe;
    if (f > 0) CHECK(F->held_out >= loom_gemm_families[f - 1].held_out); /* fitting, held out, new */
  }
  CHECK_EQ_INT(LOOM_GEMM_NFAMILIES, 23);
  CHECK(fams[0] == 6 && fams[1] == 6 && fams[2] == 11);
  CHECK(moe[0] >= 2 && moe[1] >= 2 && moe[2] >= 2);
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

/* A fingerprint of a list of weights: its length, then each weight's n, k,
 * family, TP, group and layer name, in order (splitmix64 chained). */
static uint64_t weights_fingerprint(const loom_gemm_weight_t *w, int n) {
  uint64_t h = (uint64_t)n;
  for (int i = 0; i < n; ++i) {
    h = loom__gemm_shape_hash(h ^ (uint64_t)w[i].n);
    h = loom__gemm_shape_hash(h ^ (uint64_t)w[i].k);
    h = loom__gemm_shape_hash(h ^ (uint64_t)(w[i].family * 64 + w[i].tp * 4 + w[i].held_out));
    for (const char *c = w[i].layer; *c; ++c) h = loom__gemm_shape_hash(h ^ (uint64_t)(unsigned char)*c);
  }
  return h;
}

LOOM_TEST(gemm_shapes_new_families_leave_the_halves_alone) {
  /* The halves as they were when the model was fitted (commit aee90af, before
   * the new families): 100 fitting and 66 held-out weights, these lists. */
  loom_gemm_weight_t fit[256], held[256], both[256], nw[256], all_[512];
  const int nf = loom__gemm_weights(0, fit, 256), nh = loom__gemm_weights(1, held, 256);
  const int nb = loom__gemm_weights(-1, both, 256), nn = loom__gemm_weights(2, nw, 256);
  printf("    %d fitting, %d held out, %d new-family weights (%d GEMMs)\n", nf, nh, nn, nn * LOOM_GEMM_SHAPE_NMS);
  CHECK_EQ_INT(nf, 100);
  CHECK_EQ_INT(nh, 66);
  CHECK_EQ_INT(nb, 166); /* -1: both halves, the new families not in it */
  CHECK(weights_fingerprint(fit, nf) == 0x35177faafb56c33bull);
  CHECK(weights_fingerprint(held, nh) == 0x69a8f6e9575e7bacull);
  CHECK(weights_fingerprint(both, nb) == 0xb02dba7440cce76full);
  /* the new group: at least 40 distinct weights, each its own (no weight of
   * either half), named by a family of the group */
  CHECK(nn >= 40);
  CHECK_EQ_INT(loom__gemm_weights(2, NULL, 0), nn);
  for (int i = 0; i < nn; ++i) {
    CHECK(nw[i].held_out == 2 && loom_gemm_families[nw[i].family].held_out == 2);
    CHECK(nw[i].n % 8 == 0 && nw[i].k % 8 == 0 && nw[i].n > 0 && nw[i].k > 0);
    for (int j = 0; j < nb; ++j) CHECK(!(nw[i].n == both[j].n && nw[i].k == both[j].k));
    for (int j = i + 1; j < nn; ++j) CHECK(!(nw[i].n == nw[j].n && nw[i].k == nw[j].k));
  }
  /* the whole table's weights are the two halves and the new group, in order */
  int na = 0;
  for (int i = 0; i < nb; ++i) all_[na++] = both[i];
  for (int i = 0; i < nn; ++i) all_[na++] = nw[i];
  for (int i = 1; i < na; ++i) CHECK(all_[i].family >= all_[i - 1].family);
  /* Mixtral-8x7B's layers are all Llama-3-8B's (held out): none is new */
  int mixtral = -1;
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f)
    if (!strcmp(loom_gemm_families[f].name, "Mixtral-8x7B")) mixtral = f;
  CHECK(mixtral >= 0);
  for (int i = 0; i < nn; ++i) CHECK(nw[i].family != mixtral);
  /* a KV split that does not divide: Phi-3-medium (10 KV heads) has
   * attention at TP 1 and 2, none at 4 and 8 */
  int phi = -1;
  for (int f = 0; f < LOOM_GEMM_NFAMILIES; ++f)
    if (!strcmp(loom_gemm_families[f].name, "Phi-3-medium")) phi = f;
  CHECK(phi >= 0);
  loom_gemm_weight_t l[16];
  CHECK_EQ_INT(loom__gemm_family_layers(phi, 2, l, 16), 4);
  CHECK_EQ_INT(loom__gemm_family_layers(phi, 4, l, 16), 2);
  CHECK(!strcmp(l[0].layer, "ffn_up") && l[0].n == 2 * 17920 / 4);
}

LOOM_TEST(gemm_shapes_variants_are_deterministic_and_spread) {
  for (int half = 0; half <= 2; ++half) {
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
