/*
 * moe_models.c - the MoE suites' shapes and routings (moe_models.h).
 */
#include <stdlib.h>
#include <string.h>

#include "moe_models.h"
#include "testing/bench_api.h"

const moe_model_t g_moe_models[] = {
    {"Mixtral-8x7B", 4096, 8, 2, 14336},
    {"Qwen3-30B-A3B", 2048, 128, 8, 768},
    {"DeepSeek-V3", 7168, 256, 8, 2048},
};
const int g_moe_model_count = (int)(sizeof g_moe_models / sizeof g_moe_models[0]);
const int64_t g_moe_tokens[2] = {128, 4096};

const char *moe_route_name(loom_route_kind_t k) { return k == LOOM_ROUTE_ZIPF ? "zipf" : "uniform"; }

int moe_routing(const moe_model_t *mm, int64_t T, loom_route_kind_t kind, int W, int me, int32_t *ids_me,
                float *w_me, int64_t pair[MOE_MAXW][MOE_MAXW], int32_t *counts_me) {
  int32_t *ids = (int32_t *)malloc((size_t)T * mm->topk * sizeof(int32_t) + 4);
  if (!ids) return -1;
  memset(pair, 0, sizeof(int64_t) * MOE_MAXW * MOE_MAXW);
  for (int r = 0; r < W; ++r) {
    if (loom_route_make(kind, MOE_SEED, r, 0, T, mm->experts, mm->topk, 1.2, ids, r == me ? w_me : NULL)) {
      free(ids);
      return -1;
    }
    if (r == me) memcpy(ids_me, ids, (size_t)T * mm->topk * sizeof(int32_t));
    for (int64_t i = 0; i < T * mm->topk; ++i) pair[r][loom_bench_moe_expert_rank(mm->experts, W, ids[i])]++;
    if (r == me) {
      memset(counts_me, 0, (size_t)mm->experts * sizeof(int32_t));
      for (int64_t i = 0; i < T * mm->topk; ++i) counts_me[ids[i]]++;
    }
  }
  free(ids);
  return 0;
}

void moe_pair_shape(const moe_model_t *mm, int64_t T, loom_route_kind_t kind, int W, int with_ffn,
                    loom_bench_shape_t *s) {
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", with_ffn ? "moe_layer" : "moe");
  loom_bench_shape_str(s, "model", mm->name);
  loom_bench_shape_int(s, "tokens", T);
  loom_bench_shape_str(s, "routing", moe_route_name(kind));
  loom_bench_shape_int(s, "hidden", mm->hidden);
  loom_bench_shape_int(s, "experts", mm->experts);
  loom_bench_shape_int(s, "topk", mm->topk);
  if (with_ffn) loom_bench_shape_int(s, "ffn", mm->ffn);
  loom_bench_shape_int(s, "world", W);
  loom_bench_shape_str(s, "dtype", "bf16");
}
