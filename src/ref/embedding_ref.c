/*
 * embedding_ref.c - see embedding_ref.h. Straight loops in double; element
 * loads through loom_ref_load so every dtype reads the exact stored bits.
 */
#include "ref/embedding_ref.h"
#include "ref/ref.h"

#include <math.h>
#include <string.h>

void loom_ref_embedding_pool(const void *tables, loom_dtype_t tt, const int64_t *rows, int T, int D, int64_t B,
                             const int64_t *offsets, const int64_t *indices, const float *weights, int mean,
                             double *pooled, double *mag) {
  int64_t row0 = 0;
  for (int t = 0; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      double *o = pooled + (size_t)b * (size_t)T * (size_t)D + (size_t)t * (size_t)D;
      double *m = mag ? mag + (size_t)b * (size_t)T * (size_t)D + (size_t)t * (size_t)D : NULL;
      for (int d = 0; d < D; ++d) {
        o[d] = 0.0;
        if (m) m[d] = 0.0;
      }
      int64_t s = offsets[(size_t)t * (size_t)B + (size_t)b], e = offsets[(size_t)t * (size_t)B + (size_t)b + 1];
      if (s < 0 || e < s) continue;
      for (int64_t p = s; p < e; ++p) {
        int64_t ix = indices[p];
        if (ix < 0 || ix >= rows[t]) continue;
        double w = weights ? (double)weights[p] : 1.0;
        for (int d = 0; d < D; ++d) {
          double v = w * loom_ref_load(tt, tables, (size_t)(row0 + ix) * (size_t)D + (size_t)d);
          o[d] += v;
          if (m) m[d] += fabs(v);
        }
      }
      if (mean && e > s)
        for (int d = 0; d < D; ++d) {
          o[d] /= (double)(e - s);
          if (m) m[d] /= (double)(e - s);
        }
    }
    row0 += rows[t];
  }
}

void loom_ref_embedding_place(const double *pooled, int T_src, int table_base, int T_total, int D, int64_t B, int W,
                              int q, double *out) {
  int64_t Bl = B / W;
  for (int64_t i = 0; i < Bl; ++i)
    memcpy(out + (size_t)i * (size_t)T_total * (size_t)D + (size_t)table_base * (size_t)D,
           pooled + (size_t)(q * Bl + i) * (size_t)T_src * (size_t)D, (size_t)T_src * (size_t)D * sizeof(double));
}

void loom_ref_embedding_backward(const double *grad, const int64_t *rows, int T, int D, int64_t B,
                                 const int64_t *offsets, const int64_t *indices, const float *weights, int mean,
                                 double scale, double *table_grad) {
  int64_t row0 = 0;
  for (int t = 0; t < T; ++t) {
    for (int64_t b = 0; b < B; ++b) {
      int64_t s = offsets[(size_t)t * (size_t)B + (size_t)b], e = offsets[(size_t)t * (size_t)B + (size_t)b + 1];
      if (s < 0 || e <= s) continue;
      const double *g = grad + (size_t)b * (size_t)T * (size_t)D + (size_t)t * (size_t)D;
      double sc = scale / (mean ? (double)(e - s) : 1.0);
      for (int64_t p = s; p < e; ++p) {
        int64_t ix = indices[p];
        if (ix < 0 || ix >= rows[t]) continue;
        double w = weights ? (double)weights[p] : 1.0;
        double *tg = table_grad + (size_t)(row0 + ix) * (size_t)D;
        for (int d = 0; d < D; ++d) tg[d] += sc * w * g[d];
      }
    }
    row0 += rows[t];
  }
}
