/*
 * moe_models.c - the MoE suites' shapes and routings (moe_models.h).
 */
#include <stdio.h>
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

int moe_time_side_by_side(loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, const moe_args_t *a,
                          loom_result_t rr, const char *label, const moe_model_t *mm, int64_t T, int n,
                          loom_bench_op_fn op, void *const *args, loom_bench_time_t *tm) {
  memset(tm, 0, sizeof *tm * (size_t)n);
  int64_t failed = rr != LOOM_SUCCESS;
  if (failed) fprintf(stderr, "rank %d: %s %s T=%lld: %s\n", ctx->rank, label, mm->name, (long long)T, loom_last_error());
  if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
  if (failed || n > 16) return 1;
  loom_bench_op_fn ops[16];
  for (int v = 0; v < n; ++v) ops[v] = op;
  rr = loom_bench_time_ranks_side_by_side(ctx->nccl, s, a->o.warmup, a->o.reps, n, ops, (void **)args, tm);
  if (rr == LOOM_SUCCESS) rr = loom_comm_get_async_error(comm);
  if (rr != LOOM_SUCCESS)
    fprintf(stderr, "rank %d: %s %s T=%lld: %s\n", ctx->rank, label, mm->name, (long long)T, loom_last_error());
  return rr != LOOM_SUCCESS;
}
