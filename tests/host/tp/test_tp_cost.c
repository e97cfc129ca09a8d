/*
 * test_tp_cost.c - the bytes model of GEMM + ReduceScatter's paths
 * (src/ops/tp/tp_cost.h) at W = 1 .. 64: no NVLink bytes at W = 1; the
 * transfer is the same (W-1)/W of the output for the sequential, pull and
 * bulk-reduce paths and twice that for the fp32 atomics (bf16 output); the
 * fused paths that keep a bf16 partial (pull) or reduce in the output's
 * type (bulk) move the same HBM bytes, (2W + 1) S n cs beyond A and B, the
 * sequential path (4W - 1) S n cs; only the bulk reduction has no tail; the
 * pull's tail grows with the last wave's rows up to the whole shard. No GPU.
 */
#include <math.h>

#include "tests/common/test.h"
#include "ops/tp/tp_cost.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b) + 1.0); }

LOOM_TEST(tp_cost_rs_paths_bytes_at_any_world) {
  const int64_t n = 8192, k = 3584;
  for (int W = 1; W <= 64; W *= 2) {
    const int64_t m = 512 * (int64_t)W; /* W divides m: S = m / W exactly */
    const double S = (double)m / W, ab_bytes = (double)(m * k + k * n) * 2;
    loom__tp_bytes_t b[4];
    for (int p = 0; p < 4; ++p) {
      b[p] = loom__tp_rs_bytes((loom__rs_path_t)p, m, n, k, W, 2, 2, (int64_t)S / 4);
      CHECK(b[p].hbm > 0 && b[p].link >= 0 && b[p].tail >= 0);
      CHECK(near(b[p].flops, 2.0 * m * n * k));
      if (W == 1) CHECK(b[p].link == 0);
    }
    const double out = (double)(W - 1) * S * n * 2; /* (W-1)/W of the output, bf16 */
    CHECK(near(b[LOOM__RS_PATH_SEQUENTIAL].link, out));
    CHECK(near(b[LOOM__RS_PATH_SM_COPY].link, out));
    CHECK(near(b[LOOM__RS_PATH_BULK_REDUCE].link, out));
    CHECK(near(b[LOOM__RS_PATH_SM_ATOMIC].link, 2 * out));
    CHECK(near(b[LOOM__RS_PATH_SM_COPY].hbm - ab_bytes, (2.0 * W + 1) * S * n * 2));
    CHECK(near(b[LOOM__RS_PATH_BULK_REDUCE].hbm - ab_bytes, (2.0 * W + 1) * S * n * 2));
    CHECK(near(b[LOOM__RS_PATH_SEQUENTIAL].hbm - ab_bytes, (4.0 * W - 1) * S * n * 2));
    CHECK(b[LOOM__RS_PATH_BULK_REDUCE].tail == 0);
    CHECK(b[LOOM__RS_PATH_SEQUENTIAL].tail > b[LOOM__RS_PATH_SM_COPY].tail);
  }
}

LOOM_TEST(tp_cost_pull_tail_follows_the_last_wave) {
  const int64_t m = 4096, n = 4096, k = 4096;
  const int W = 4;
  double prev = -1;
  for (int64_t rows = 0; rows <= 2048; rows += 256) {
    const loom__tp_bytes_t b = loom__tp_rs_bytes(LOOM__RS_PATH_SM_COPY, m, n, k, W, 2, 2, rows);
    const double S = (double)m / W, lw = rows < S ? (double)rows : S;
    CHECK(near(b.tail, (W + 1.0) * lw * n * 2)); /* W partials read, the shard written; capped at the shard */
    CHECK(b.tail >= prev);
    prev = b.tail;
  }
  CHECK(loom__tp_rs_bytes(LOOM__RS_PATH_SM_COPY, m, n, k, W, 2, 2, -5).tail == 0);
}
