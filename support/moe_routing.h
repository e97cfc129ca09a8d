/*
 * moe_routing.h - synthetic router outputs for the MoE benchmark and GPU
 * tests: for each token, k distinct expert ids and k weights, as a top-k
 * router produces them.
 *   uniform  each token's experts drawn uniformly without repetition
 *   zipf     expert e (popularity rank e) drawn with weight 1 / (e+1)^s,
 *            without repetition within a token: a few hot experts, a long
 *            cold tail (what real routers show before load balancing)
 *   skew     every token to experts 0 .. k-1 (the worst case: their ranks
 *            receive everything, the others nothing)
 * Weights in (0, 1], a token's k weights summing to 1 (a softmax's top-k,
 * renormalised). Deterministic for (seed, rank, round), and the ids the
 * same whether weights are asked for or not (every rank can draw every
 * rank's routing). Plain C, header-only.
 */
#ifndef LOOM_SUPPORT_MOE_ROUTING_H
#define LOOM_SUPPORT_MOE_ROUTING_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef enum { LOOM_ROUTE_UNIFORM = 0, LOOM_ROUTE_ZIPF = 1, LOOM_ROUTE_SKEW = 2 } loom_route_kind_t;

static inline uint64_t loom_route_mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ids [T, k] and weights [T, k] (weights may be NULL) of one rank's tokens
 * for one round. zipf_s: the exponent (kind ZIPF only). 0, or -1 when out
 * of memory (zipf's table). */
static inline int loom_route_make(loom_route_kind_t kind, uint64_t seed, int rank, int round, int64_t T, int E, int k,
                                  double zipf_s, int32_t *ids, float *weights) {
  double *cdf = NULL;
  if (kind == LOOM_ROUTE_ZIPF) {
    cdf = (double *)malloc((size_t)E * sizeof(double));
    if (!cdf) return -1;
    double acc = 0;
    for (int e = 0; e < E; ++e) cdf[e] = acc += pow((double)(e + 1), -zipf_s);
    for (int e = 0; e < E; ++e) cdf[e] /= acc;
  }
  for (int64_t t = 0; t < T; ++t) {
    uint64_t s = loom_route_mix(seed ^ ((uint64_t)rank << 44) ^ ((uint64_t)round << 32) ^ (uint64_t)t);
    double wsum = 0;
    for (int j = 0; j < k; ++j) {
      int32_t e = j;
      if (kind != LOOM_ROUTE_SKEW)
        for (;;) {
          s = loom_route_mix(s);
          if (kind == LOOM_ROUTE_UNIFORM) {
            e = (int32_t)(s % (uint64_t)E);
          } else {
            const double u = (double)(s >> 11) * 0x1.0p-53;
            int lo = 0, hi = E - 1;
            while (lo < hi) {
              const int mid = (lo + hi) / 2;
              if (cdf[mid] < u) lo = mid + 1;
              else hi = mid;
            }
            e = lo;
          }
          int dup = 0;
          for (int q = 0; q < j; ++q) dup |= ids[t * k + q] == e;
          if (!dup) break;
        }
      ids[t * k + j] = e;
      s = loom_route_mix(s); /* drawn with or without weights: the ids never depend on it */
      if (weights) {
        weights[t * k + j] = (float)((double)((s >> 40) + 1) / (double)(1u << 24));
        wsum += weights[t * k + j];
      }
    }
    if (weights)
      for (int j = 0; j < k; ++j) weights[t * k + j] = (float)(weights[t * k + j] / wsum);
  }
  free(cdf);
  return 0;
}

#endif /* LOOM_SUPPORT_MOE_ROUTING_H */
