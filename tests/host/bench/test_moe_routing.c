/*
 * test_moe_routing.c - the synthetic router outputs of the MoE benchmark
 * and GPU tests (support/moe_routing.h): k distinct experts per token, the
 * same ids with or without weights (every rank draws every rank's routing),
 * weights summing to 1, Zipf's hot experts, skew's fixed ones.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/test.h"
#include "support/moe_routing.h"

LOOM_TEST(moe_routing_ids_distinct_and_independent_of_weights) {
  enum { T = 500, E = 64, K = 8 };
  static int32_t a[T * K], b[T * K];
  static float w[T * K];
  const loom_route_kind_t kinds[3] = {LOOM_ROUTE_UNIFORM, LOOM_ROUTE_ZIPF, LOOM_ROUTE_SKEW};
  for (int q = 0; q < 3; ++q) {
    CHECK_EQ_INT(loom_route_make(kinds[q], 42, 1, 3, T, E, K, 1.2, a, w), 0);
    CHECK_EQ_INT(loom_route_make(kinds[q], 42, 1, 3, T, E, K, 1.2, b, NULL), 0);
    CHECK(!memcmp(a, b, sizeof a));
    int bad = 0;
    for (int t = 0; t < T; ++t) {
      double sum = 0;
      for (int j = 0; j < K; ++j) {
        const int32_t e = a[t * K + j];
        bad += e < 0 || e >= E;
        for (int i = 0; i < j; ++i) bad += a[t * K + i] == e;
        bad += !(w[t * K + j] > 0.f && w[t * K + j] <= 1.f);
        sum += w[t * K + j];
        if (kinds[q] == LOOM_ROUTE_SKEW) bad += e != j;
      }
      bad += fabs(sum - 1.0) > 1e-5;
    }
    CHECK_EQ_INT(bad, 0);
  }
  /* another rank or round draws other ids */
  CHECK_EQ_INT(loom_route_make(LOOM_ROUTE_UNIFORM, 42, 0, 3, T, E, K, 1.2, a, NULL), 0);
  CHECK_EQ_INT(loom_route_make(LOOM_ROUTE_UNIFORM, 42, 1, 3, T, E, K, 1.2, b, NULL), 0);
  CHECK(memcmp(a, b, sizeof a) != 0);
}

LOOM_TEST(moe_routing_zipf_is_skewed) {
  enum { T = 4000, E = 128, K = 2 };
  static int32_t ids[T * K];
  int64_t cnt[E] = {0};
  CHECK_EQ_INT(loom_route_make(LOOM_ROUTE_ZIPF, 7, 0, 0, T, E, K, 1.2, ids, NULL), 0);
  for (int i = 0; i < T * K; ++i) cnt[ids[i]]++;
  int64_t tail = 0;
  for (int e = E / 2; e < E; ++e) tail += cnt[e];
  CHECK(cnt[0] > 10 * cnt[E - 1] + 10); /* the hottest expert far above the coldest */
  CHECK(tail < cnt[0] + cnt[1]);        /* the cold half gets less than the two hottest */
}
