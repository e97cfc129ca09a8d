/*
 * test_pointwise.c - host tests of the pointwise epilogue (core/pointwise.h):
 * Philox4x32-10 against the published known-answer vectors, the dropout
 * mask's statistics and independence of how elements are split, checks of
 * loom_epilogue_t, and the reference's order of steps.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tests/common/test.h"
#include "core/pointwise.h"
#include "ref/ref.h"

LOOM_TEST(philox4x32_10_known_answers) {
  /* Random123's kat_vectors for philox4x32_10 */
  const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                              {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                              {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
  const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                               {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                               {0xd16cfe09u, 0x94fdcceBu, 0x5001e420u, 0x24126ea1u}};
  for (int t = 0; t < 3; ++t) {
    uint32_t out[4];
    loom__philox4x32_10(ctr[t], key[t], out);
    for (int w = 0; w < 4; ++w)
      if (out[w] != want[t][w]) loom_test_fail(__FILE__, __LINE__, "vector %d word %d: %08x != %08x", t, w, out[w], want[t][w]);
  }
}

LOOM_TEST(dropout_mask_keeps_one_minus_p_and_depends_on_seed_and_offset_only) {
  const float ps[] = {0.1f, 0.5f, 0.9f};
  for (int j = 0; j < 3; ++j) {
    const uint32_t th = loom__dropout_threshold(ps[j]);
    const int n = 1 << 20;
    int kept = 0;
    for (int i = 0; i < n; ++i) kept += loom__dropout_keep(1234, 77, (uint64_t)i, th);
    const double frac = (double)kept / n, sd = sqrt(ps[j] * (1 - ps[j]) / n);
    CHECK(fabs(frac - (1 - ps[j])) < 6 * sd);
  }
  CHECK_EQ_INT(loom__dropout_threshold(0.f), 0);
  /* offset q shifts the stream by 4 q elements: a rank or tile that starts
   * at element 4q with offset 0 draws what offset q draws at element 0 */
  const uint32_t th = loom__dropout_threshold(0.3f);
  int same = 1, differs = 0;
  for (uint64_t i = 0; i < 4096; ++i) {
    same &= loom__dropout_keep(9, 5, i, th) == loom__dropout_keep(9, 0, i + 20, th);
    differs |= loom__dropout_keep(9, 0, i, th) != loom__dropout_keep(10, 0, i, th);
  }
  CHECK(same);
  CHECK(differs);
}

/* One Philox call for 4 aligned elements gives each element's own decision. */
LOOM_TEST(dropout_keep4_equals_four_single_decisions) {
  const uint32_t th[3] = {loom__dropout_threshold(0.1f), loom__dropout_threshold(0.5f), loom__dropout_threshold(0.9f)};
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int t = 0; t < 3000; ++t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const uint64_t i4 = (x % (1ull << 40)) & ~3ull, seed = x * 31u, offset = (x >> 20) % 100000;
    int keep[4];
    loom__dropout_keep4(seed, offset, i4, th[t % 3], keep);
    for (int j = 0; j < 4; ++j) CHECK(keep[j] == loom__dropout_keep(seed, offset, i4 + (uint64_t)j, th[t % 3]));
  }
}

LOOM_TEST(epilogue_checks_each_field) {
  loom_pointwise_t pw;
  CHECK_RESULT(loom__pointwise_make("op", NULL, LOOM_BF16, 64, &pw), LOOM_SUCCESS);
  CHECK_EQ_INT(pw.flags, 0);
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  CHECK_RESULT(loom__pointwise_make("op", &e, LOOM_BF16, 64, &pw), LOOM_SUCCESS);
  CHECK_EQ_INT(pw.flags, 0);
  e.struct_size = 8;
  CHECK_RESULT(loom__pointwise_make("op", &e, LOOM_BF16, 64, &pw), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("struct_size");
  e.struct_size = sizeof e;
  e.activation = (loom_activation_t)7;
  CHECK_RESULT(loom__pointwise_make("op", &e, LOOM_BF16, 64, &pw), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("activation=7");
  e.activation = LOOM_ACT_GELU_TANH;
  e.dropout_p = 1.0f;
  CHECK_RESULT(loom__pointwise_make("op", &e, LOOM_BF16, 64, &pw), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("dropout_p=1");
  e.dropout_p = 0.25f;
  e.scale = INFINITY;
  CHECK_RESULT(loom__pointwise_make("op", &e, LOOM_BF16, 64, &pw), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("scale");
  e.scale = 2.f;
  e.bias = (const void *)(uintptr_t)0x1000;
  CHECK_RESULT(loom__pointwise_make("op", &e, LOOM_BF16, 64, &pw), LOOM_SUCCESS);
  CHECK_EQ_INT(pw.flags, LOOM_PW_SCALE | LOOM_PW_BIAS | LOOM_PW_ACT | LOOM_PW_DROPOUT);
  CHECK(pw.keep_scale == 1.f / 0.75f);
  CHECK_EQ_INT(pw.drop_threshold, 1073741824u);
}

LOOM_TEST(reference_epilogue_order_of_steps) {
  float bias[4] = {1.f, -2.f, 0.5f, 0.f}, res[8];
  for (int i = 0; i < 8; ++i) res[i] = 0.25f * (float)i;
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  e.scale = 2.f;
  e.bias = bias;
  e.activation = LOOM_ACT_RELU;
  e.residual = res;
  /* row 1, col 1 (element 5): relu(2 * 0.75 - 2) + 1.25 = 1.25 */
  CHECK(fabs(loom_ref_epilogue(&e, LOOM_FP32, 4, 0.75, 1, 1) - 1.25) < 1e-12);
  /* col 0: relu(2 * 0.75 + 1) + 1.0 = 3.5 */
  CHECK(fabs(loom_ref_epilogue(&e, LOOM_FP32, 4, 0.75, 1, 0) - 3.5) < 1e-12);
  e.activation = LOOM_ACT_GELU_ERF;
  e.bias = NULL, e.residual = NULL, e.scale = 1.f;
  CHECK(fabs(loom_ref_epilogue(&e, LOOM_FP32, 4, 1.0, 0, 0) - 0.8413447460685429) < 1e-12);
  CHECK(fabs((double)loom__activation_f32(LOOM_ACT_GELU_ERF, 1.f) - 0.8413447460685429) < 1e-6);
  e.activation = LOOM_ACT_GELU_TANH;
  CHECK(fabs(loom_ref_epilogue(&e, LOOM_FP32, 4, 1.0, 0, 0) - 0.8411919906082768) < 1e-12);
  CHECK(fabs((double)loom__activation_f32(LOOM_ACT_GELU_TANH, 1.f) - 0.8411919906082768) < 1e-6);
  /* dropout: kept elements scaled by 1 / (1 - p), dropped ones 0 */
  e.activation = LOOM_ACT_NONE;
  e.dropout_p = 0.5f;
  e.dropout_seed = 42;
  int zeros = 0, twos = 0;
  for (int i = 0; i < 1000; ++i) {
    const double y = loom_ref_epilogue(&e, LOOM_FP32, 1000, 1.0, 0, i);
    zeros += y == 0.0, twos += y == 2.0;
  }
  CHECK_EQ_INT(zeros + twos, 1000);
  CHECK(zeros > 400 && zeros < 600);
}
