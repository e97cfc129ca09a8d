/*
 * ref.c - see ref.h.
 */
#include "ref.h"

#include <math.h>
#include <stdlib.h>

#include "core/pointwise.h"
#include <string.h>

uint16_t loom_ref_float_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
  return (uint16_t)(u >> 16);
}

float loom_ref_bf16_to_float(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float loom_ref_fp16_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) & 1u, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  float v;
  if (exp == 0) v = ldexpf((float)man, -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = ldexpf((float)(man | 0x400u), (int)exp - 25);
  return sign ? -v : v;
}

uint16_t loom_ref_float_to_fp16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000u;
  float a = fabsf(f);
  if (isnan(f)) return (uint16_t)(sign | 0x7e00u);
  if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00u); /* overflow to inf */
  if (a < ldexpf(1.0f, -14)) { /* subnormal: multiples of 2^-24, round half even */
    float q = a * 16777216.0f; /* / 2^-24 */
    float r = nearbyintf(q);   /* default rounding mode: to nearest even */
    return (uint16_t)(sign | (uint32_t)r);
  }
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  float scaled = ldexpf(m, 11); /* 11 significant bits */
  float r = nearbyintf(scaled);
  if (r >= 2048.0f) { r /= 2.0f; e += 1; }
  uint32_t exp = (uint32_t)(e - 1 + 15);
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  return (uint16_t)(sign | (exp << 10) | ((uint32_t)r & 0x3ffu));
}

double loom_ref_load(loom_dtype_t t, const void *buf, size_t i) {
  switch (t) {
    case LOOM_FP32: return ((const float *)buf)[i];
    case LOOM_BF16: return loom_ref_bf16_to_float(((const uint16_t *)buf)[i]);
    case LOOM_FP16: return loom_ref_fp16_to_float(((const uint16_t *)buf)[i]);
  }
  return NAN;
}

void loom_ref_store(loom_dtype_t t, void *buf, size_t i, double v) {
  switch (t) {
    case LOOM_FP32: ((float *)buf)[i] = (float)v; break;
    case LOOM_BF16: ((uint16_t *)buf)[i] = loom_ref_float_to_bf16((float)v); break;
    case LOOM_FP16: ((uint16_t *)buf)[i] = loom_ref_float_to_fp16((float)v); break;
  }
}

void loom_ref_fill_random(loom_dtype_t t, void *buf, size_t n, uint64_t seed, double scale) {
  uint64_t s = seed ^ 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; ++i) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    double u = (double)(z >> 11) * (1.0 / 9007199254740992.0); /* [0,1) */
    double v = (2.0 * u - 1.0) * scale;
    if (v == 0.0) v = scale * 0.5; /* never zero */
    loom_ref_store(t, buf, i, v);
  }
}

double loom_ref_gemm_element(const loom_gemm_desc_t *d, const void *a, const void *b, const void *bias,
                             int64_t row, int64_t col) {
  double acc = 0.0;
  for (int64_t kk = 0; kk < d->k; ++kk) {
    double x = loom_ref_load(d->ab_type, a, (size_t)(row * d->k + kk));
    size_t bi = d->b_layout == LOOM_B_KN ? (size_t)(kk * d->n + col) : (size_t)(col * d->k + kk);
    acc += x * loom_ref_load(d->ab_type, b, bi);
  }
  if (d->has_bias && bias) acc += loom_ref_load(d->c_type, bias, (size_t)col);
  return acc;
}

int loom_ref_gemm_rows(const loom_gemm_desc_t *d, const void *a, const void *b, int64_t r0, int64_t rows,
                       double *out) {
  const int64_t n = d->n, k = d->k;
  double *ad = (double *)malloc((size_t)(rows * k) * sizeof(double));
  double *bt = (double *)malloc((size_t)(n * k) * sizeof(double)); /* [n, k] */
  if (!ad || !bt) {
    free(ad), free(bt);
    return -1;
  }
  for (int64_t i = 0; i < rows * k; ++i) ad[i] = loom_ref_load(d->ab_type, a, (size_t)(r0 * k + i));
  for (int64_t col = 0; col < n; ++col)
    for (int64_t kk = 0; kk < k; ++kk)
      bt[col * k + kk] =
          loom_ref_load(d->ab_type, b, d->b_layout == LOOM_B_KN ? (size_t)(kk * n + col) : (size_t)(col * k + kk));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t col = 0; col < n; ++col) {
      const double *x = ad + i * k, *y = bt + col * k;
      double acc = 0.0;
      for (int64_t kk = 0; kk < k; ++kk) acc += x[kk] * y[kk];
      out[i * n + col] = acc;
    }
  free(ad), free(bt);
  return 0;
}

double loom_ref_rel_error(const double *x, const double *ref, size_t n) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < n; ++i) {
    if (isnan(x[i])) return NAN;
    double dlt = x[i] - ref[i];
    num += dlt * dlt;
    den += ref[i] * ref[i];
  }
  if (den == 0.0) return num == 0.0 ? 0.0 : INFINITY;
  return sqrt(num / den);
}

double loom_ref_epilogue(const loom_epilogue_t *epi, loom_dtype_t out_type, int64_t cols, double x, int64_t row,
                         int64_t col) {
  if (!epi) return x;
  double v = (double)epi->scale * x;
  if (epi->bias) v += loom_ref_load(out_type, epi->bias, (size_t)col);
  switch (epi->activation) {
    case LOOM_ACT_RELU: v = v > 0 ? v : 0; break;
    case LOOM_ACT_GELU_TANH: v = 0.5 * v * (1.0 + tanh(0.79788456080286535588 * (v + 0.044715 * v * v * v))); break;
    case LOOM_ACT_GELU_ERF: v = 0.5 * v * (1.0 + erf(v / sqrt(2.0))); break;
    default: break;
  }
  const uint64_t i = (uint64_t)row * (uint64_t)cols + (uint64_t)col;
  if (epi->dropout_p > 0.f)
    v = loom__dropout_keep(epi->dropout_seed, epi->dropout_offset, i, loom__dropout_threshold(epi->dropout_p))
            ? v / (1.0 - (double)epi->dropout_p)
            : 0.0;
  if (epi->residual) v += loom_ref_load(out_type, epi->residual, (size_t)i);
  return v;
}
