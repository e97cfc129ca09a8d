/*
 * test_ref.c - host tests of the CPU reference (src/ref).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "ref/coll_ref.h"
#include "ref/ref.h"

LOOM_TEST(ref_bf16_round_trip_and_rounding) {
  CHECK(loom_ref_bf16_to_float(loom_ref_float_to_bf16(1.0f)) == 1.0f);
  CHECK(loom_ref_bf16_to_float(loom_ref_float_to_bf16(-2.5f)) == -2.5f);
  /* 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1 */
  CHECK(loom_ref_bf16_to_float(loom_ref_float_to_bf16(1.0f + 1.0f / 256)) == 1.0f);
  CHECK(loom_ref_bf16_to_float(loom_ref_float_to_bf16(1.0f + 3.0f / 256)) == 1.0f + 4.0f / 256);
  CHECK(isnan(loom_ref_bf16_to_float(loom_ref_float_to_bf16(NAN))));
}

LOOM_TEST(ref_fp16_round_trip_and_rounding) {
  const float exact[] = {0.0f, 1.0f, -1.0f, 0.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, -3.140625f};
  for (size_t i = 0; i < sizeof exact / sizeof exact[0]; ++i)
    CHECK(loom_ref_fp16_to_float(loom_ref_float_to_fp16(exact[i])) == exact[i]);
  CHECK(loom_ref_fp16_to_float(loom_ref_float_to_fp16(1.0f + 1.0f / 2048)) == 1.0f); /* tie to even */
  CHECK(loom_ref_fp16_to_float(loom_ref_float_to_fp16(1.0f + 3.0f / 2048)) == 1.0f + 2.0f / 1024);
  CHECK(isinf(loom_ref_fp16_to_float(loom_ref_float_to_fp16(1e6f))));
  CHECK(loom_ref_float_to_fp16(1.0f) == 0x3c00);
  CHECK(loom_ref_float_to_fp16(-2.0f) == 0xc000);
}

LOOM_TEST(ref_random_fill_is_nonzero_and_seeded) {
  float a[1000], b[1000], c[1000];
  loom_ref_fill_random(LOOM_FP32, a, 1000, 7, 1.0);
  loom_ref_fill_random(LOOM_FP32, b, 1000, 7, 1.0);
  loom_ref_fill_random(LOOM_FP32, c, 1000, 8, 1.0);
  int same = 1, differ = 0, zeros = 0;
  double mean = 0;
  for (int i = 0; i < 1000; ++i) {
    same &= a[i] == b[i];
    differ += a[i] != c[i];
    zeros += a[i] == 0.0f;
    CHECK(a[i] >= -1.0f && a[i] < 1.0f);
    mean += a[i];
  }
  CHECK(same);
  CHECK(differ > 990);
  CHECK_EQ_INT(zeros, 0);
  CHECK(fabs(mean / 1000) < 0.1);
}

LOOM_TEST(ref_gemm_element_both_layouts) {
  /* A [2,3], B [3,2] (KN) and its transpose (NK) give the same C */
  float a[6] = {1, 2, 3, 4, 5, 6}, bkn[6] = {1, 0, 0, 1, 1, 1}, bnk[6] = {1, 0, 1, 0, 1, 1}, bias[2] = {0.5f, -1};
  loom_gemm_desc_t d = LOOM_GEMM_DESC(2, 2, 3, LOOM_FP32, LOOM_FP32, LOOM_B_KN, 1);
  double c00 = loom_ref_gemm_element(&d, a, bkn, bias, 0, 0), c11 = loom_ref_gemm_element(&d, a, bkn, bias, 1, 1);
  CHECK(c00 == 1 + 3 + 0.5 && c11 == 5 + 6 - 1);
  d.b_layout = LOOM_B_NK;
  CHECK(loom_ref_gemm_element(&d, a, bnk, bias, 0, 0) == c00);
  CHECK(loom_ref_gemm_element(&d, a, bnk, bias, 1, 1) == c11);
  double x[2] = {1.0, 2.0}, r[2] = {1.0, 2.0}, y[2] = {1.0, NAN};
  CHECK(loom_ref_rel_error(x, r, 2) == 0.0);
  CHECK(isnan(loom_ref_rel_error(y, r, 2)));
}

/* loom_ref_gemm_rows: the same bits as loom_ref_gemm_element, both layouts,
 * every dtype, a block of rows not starting at 0. */
LOOM_TEST(ref_gemm_rows_equal_the_element_reference) {
  static const loom_dtype_t types[3] = {LOOM_BF16, LOOM_FP16, LOOM_FP32};
  const int64_t m = 37, n = 29, k = 53, r0 = 5, rows = 23;
  for (int t = 0; t < 3; ++t)
    for (int lay = 0; lay < 2; ++lay) {
      const loom_dtype_t ab = types[t];
      loom_gemm_desc_t d = LOOM_GEMM_DESC(m, n, k, ab, LOOM_FP32, lay ? LOOM_B_KN : LOOM_B_NK, 0);
      void *a = malloc((size_t)(m * k) * loom_dtype_size(ab)), *b = malloc((size_t)(k * n) * loom_dtype_size(ab));
      double *out = (double *)malloc((size_t)(rows * n) * sizeof(double));
      loom_ref_fill_random(ab, a, (size_t)(m * k), 11 + (uint64_t)t, 1.0);
      loom_ref_fill_random(ab, b, (size_t)(k * n), 23 + (uint64_t)lay, 1.0);
      CHECK_EQ_INT(loom_ref_gemm_rows(&d, a, b, r0, rows, out), 0);
      int64_t differ = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < n; ++c) differ += out[i * n + c] != loom_ref_gemm_element(&d, a, b, NULL, r0 + i, c);
      CHECK_EQ_INT((int)differ, 0);
      free(a), free(b), free(out);
    }
}

/* loom_ref_gemm_ar (whole outputs through loom_ref_gemm_rows): each rank's
 * product rounded once to c_type, summed in rank order, then the epilogue;
 * the same bits as that formula element by element, and the magnitudes. */
LOOM_TEST(ref_gemm_ar_equals_its_formula_element_by_element) {
  enum { W = 3 };
  const int64_t m = 13, n = 11, k = 17;
  loom_gemm_desc_t d = LOOM_GEMM_DESC(m, n, k, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
  void *a[W], *b[W];
  for (int p = 0; p < W; ++p) {
    a[p] = malloc((size_t)(m * k) * 2), b[p] = malloc((size_t)(k * n) * 2);
    loom_ref_fill_random(LOOM_BF16, a[p], (size_t)(m * k), 101 + (uint64_t)p, 1.0);
    loom_ref_fill_random(LOOM_BF16, b[p], (size_t)(k * n), 201 + (uint64_t)p, 1.0);
  }
  loom_epilogue_t e;
  memset(&e, 0, sizeof e);
  e.scale = 0.5f;
  double *out = (double *)malloc((size_t)(m * n) * sizeof(double)), *mag = (double *)malloc((size_t)(m * n) * sizeof(double));
  loom_ref_gemm_ar(&d, W, (const void *const *)a, (const void *const *)b, &e, out, mag);
  int64_t differ = 0;
  unsigned char tmp[8];
  for (int64_t row = 0; row < m; ++row)
    for (int64_t col = 0; col < n; ++col) {
      double sum = 0.0, ms = 0.0;
      for (int p = 0; p < W; ++p) {
        loom_ref_store(LOOM_BF16, tmp, 0, loom_ref_gemm_element(&d, a[p], b[p], NULL, row, col));
        const double v = loom_ref_load(LOOM_BF16, tmp, 0);
        sum += v, ms += fabs(v);
      }
      const double want = loom_ref_epilogue(&e, LOOM_BF16, n, sum, row, col);
      differ += out[row * n + col] != want || mag[row * n + col] != ms;
    }
  CHECK_EQ_INT((int)differ, 0);
  loom_ref_gemm_ar(&d, W, (const void *const *)a, (const void *const *)b, &e, out, NULL); /* mag optional */
  for (int p = 0; p < W; ++p) free(a[p]), free(b[p]);
  free(out), free(mag);
}
