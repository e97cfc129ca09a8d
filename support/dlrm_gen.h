/*
 * dlrm_gen.h - synthetic DLRM embedding inputs (no data set can be
 * downloaded): per-table CSR offsets and indices over a global batch, as
 * PyTorch's EmbeddingBag takes them (table-major: bag (t, b) is
 * indices[offsets[t*B+b] .. offsets[t*B+b+1])).
 *
 *  - pooling: fixed length L, or variable lengths uniform in [0, 2L]
 *    (mean L, some bags empty), or fixed with a fraction of empty bags;
 *  - indices: uniform over the table's rows, or Zipf(alpha) by rank, the
 *    ranks scattered over the table by a bijective multiplicative hash (as
 *    hashed categorical features are), so hot rows are not adjacent.
 * Deterministic for a seed (splitmix64). Header-only C, used by the
 * embedding benchmark and the GPU tests.
 */
#ifndef LOOM_BENCH_DLRM_GEN_H
#define LOOM_BENCH_DLRM_GEN_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct loom_dlrm_gen {
  int tables;            /* T */
  int64_t batch;         /* B (global) */
  const int64_t *rows;   /* [T] */
  int pooling;           /* L: mean bag length */
  int variable;          /* 0: every bag has L; 1: lengths uniform in [0, 2L] */
  double empty_frac;     /* fraction of bags forced empty (0..1) */
  double zipf_alpha;     /* 0: uniform indices; > 0: Zipf exponent (e.g. 1.05) */
  uint64_t seed;
} loom_dlrm_gen_t;

static inline uint64_t loom_dlrm_next(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static inline double loom_dlrm_unit(uint64_t *s) { return (double)(loom_dlrm_next(s) >> 11) * 0x1.0p-53; }

/* Fills offsets [T*B + 1]; returns the number of indices. */
static inline int64_t loom_dlrm_gen_offsets(const loom_dlrm_gen_t *g, int64_t *offsets) {
  uint64_t s = g->seed * 2654435761ull + 17;
  int64_t n = 0;
  offsets[0] = 0;
  for (int64_t i = 0; i < (int64_t)g->tables * g->batch; ++i) {
    int64_t len = g->pooling;
    if (g->variable) len = (int64_t)(loom_dlrm_next(&s) % (uint64_t)(2 * g->pooling + 1));
    if (g->empty_frac > 0 && loom_dlrm_unit(&s) < g->empty_frac) len = 0;
    n += len;
    offsets[i + 1] = n;
  }
  return n;
}

static inline int64_t loom_dlrm_gcd(int64_t a, int64_t b) {
  while (b) { int64_t t = a % b; a = b; b = t; }
  return a;
}

/* Fills indices [offsets[T*B]]. Zipf: inverse CDF by binary search over a
 * per-table cumulative table (built once per distinct row count). */
static inline int loom_dlrm_gen_indices(const loom_dlrm_gen_t *g, const int64_t *offsets, int64_t *indices) {
  uint64_t s = g->seed * 0x632be59bd9b4e019ull + 91;
  double *cdf = NULL;
  int64_t cdf_rows = 0;
  for (int t = 0; t < g->tables; ++t) {
    const int64_t rows = g->rows[t];
    int64_t mult = 2654435761ll % rows;
    while (mult < 1 || loom_dlrm_gcd(mult, rows) != 1) mult = (mult + 1) % rows;
    if (rows == 1) mult = 0;
    if (g->zipf_alpha > 0 && cdf_rows != rows) {
      free(cdf);
      cdf = (double *)malloc((size_t)rows * sizeof(double));
      if (!cdf) return -1;
      double acc = 0;
      for (int64_t k = 0; k < rows; ++k) cdf[k] = (acc += pow((double)(k + 1), -g->zipf_alpha));
      for (int64_t k = 0; k < rows; ++k) cdf[k] /= acc;
      cdf_rows = rows;
    }
    for (int64_t p = offsets[(int64_t)t * g->batch]; p < offsets[(int64_t)(t + 1) * g->batch]; ++p) {
      int64_t r;
      if (g->zipf_alpha > 0) {
        double u = loom_dlrm_unit(&s);
        int64_t lo = 0, hi = rows - 1;
        while (lo < hi) {
          int64_t mid = (lo + hi) / 2;
          if (cdf[mid] < u) lo = mid + 1; else hi = mid;
        }
        r = (int64_t)(((uint64_t)lo * (uint64_t)mult) % (uint64_t)rows); /* scatter hot ranks (rows < 2^32) */
      } else {
        r = (int64_t)(loom_dlrm_next(&s) % (uint64_t)rows);
      }
      indices[p] = r;
    }
  }
  free(cdf);
  return 0;
}

/* Per-sample weights in [0.5, 1.5). */
static inline void loom_dlrm_gen_weights(uint64_t seed, int64_t n, float *w) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 5;
  for (int64_t i = 0; i < n; ++i) w[i] = (float)(0.5 + loom_dlrm_unit(&s));
}

#endif /* LOOM_BENCH_DLRM_GEN_H */
