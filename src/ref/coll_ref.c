/*
 * coll_ref.c - see coll_ref.h.
 */
#include "coll_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ops/coll/coll_schedule.h"
#include "ref/ref.h"

void loom_ref_coll_reduce(const loom_coll_desc_t *d, const void *const *in, const loom_epilogue_t *epi,
                          const void *norm_w, const void *norm_b, double *out) {
  const int64_t count = d->count, cols = d->cols > 0 ? d->cols : count;
  for (int64_t i = 0; i < count; ++i) {
    double s = 0.0;
    for (int p = 0; p < d->world_size; ++p) s += loom_ref_load(d->dtype, in[p], (size_t)i);
    out[i] = loom_ref_epilogue(epi, d->out_type, cols, s, i / cols, i % cols);
  }
  if (d->norm == LOOM_NORM_NONE || d->cols <= 0) return;
  for (int64_t r = 0; r < count / cols; ++r) {
    double *x = out + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[c];
    mean /= (double)cols;
    if (d->norm == LOOM_NORM_RMS) {
      for (int64_t c = 0; c < cols; ++c) var += x[c] * x[c];
      mean = 0.0;
    } else {
      for (int64_t c = 0; c < cols; ++c) var += (x[c] - mean) * (x[c] - mean);
    }
    const double rstd = 1.0 / sqrt(var / (double)cols + (double)d->norm_eps);
    for (int64_t c = 0; c < cols; ++c) {
      double y = (x[c] - mean) * rstd * loom_ref_load(d->out_type, norm_w, (size_t)c);
      if (norm_b && d->norm == LOOM_NORM_LAYER) y += loom_ref_load(d->out_type, norm_b, (size_t)c);
      x[c] = y;
    }
  }
}

void loom_ref_coll_all_gather(const loom_coll_desc_t *d, const void *const *slices, void *out) {
  const size_t es = loom_dtype_size(d->dtype);
  const int64_t unit = loom__coll_unit(d->cols);
  for (int p = 0; p < d->world_size; ++p) {
    int64_t b, len;
    loom__coll_slice(d->count, d->world_size, p, unit, &b, &len);
    if (len > 0) memcpy((char *)out + (size_t)b * es, slices[p], (size_t)len * es);
  }
}

void loom_ref_gemm_ar(const loom_gemm_desc_t *d, int world, const void *const *a, const void *const *b,
                      const loom_epilogue_t *epi, double *out, double *mag) {
  loom_gemm_desc_t g = *d;
  g.has_bias = 0;
  const size_t mn = (size_t)(g.m * g.n);
  double *part = (double *)malloc((mn ? mn : 1) * sizeof(double)); /* NULL: element by element */
  unsigned char tmp[8];
  for (size_t i = 0; i < mn; ++i) {
    out[i] = 0.0;
    if (mag) mag[i] = 0.0;
  }
  for (int p = 0; p < world; ++p) {
    const int whole = part && loom_ref_gemm_rows(&g, a[p], b[p], 0, g.m, part) == 0;
    for (size_t i = 0; i < mn; ++i) {
      /* each rank's partial as its GEMM stores it: rounded once to c_type */
      loom_ref_store(g.c_type, tmp, 0,
                     whole ? part[i]
                           : loom_ref_gemm_element(&g, a[p], b[p], NULL, (int64_t)i / g.n, (int64_t)i % g.n));
      const double v = loom_ref_load(g.c_type, tmp, 0);
      out[i] += v;
      if (mag) mag[i] += fabs(v);
    }
  }
  for (size_t i = 0; i < mn; ++i)
    out[i] = loom_ref_epilogue(epi, g.c_type, g.n, out[i], (int64_t)i / g.n, (int64_t)i % g.n);
  free(part);
}
