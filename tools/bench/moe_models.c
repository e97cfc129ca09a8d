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

loom_result_t moe_route_draw(const moe_model_t *mm, int64_t T, loom_route_kind_t kind, int W, int me, moe_route_t *rt) {
  memset(rt, 0, sizeof *rt);
  const size_t entries = (size_t)T * (size_t)mm->topk;
  int32_t *ids = (int32_t *)malloc(entries * sizeof(int32_t) + 4);
  rt->ids = (int32_t *)malloc(entries * sizeof(int32_t) + 4);
  rt->w = (float *)malloc(entries * sizeof(float) + 4);
  rt->counts = (int32_t *)calloc((size_t)mm->experts, sizeof(int32_t));
  int bad = !ids || !rt->ids || !rt->w || !rt->counts;
  for (int r = 0; r < W && !bad; ++r) {
    bad = loom_route_make(kind, MOE_SEED, r, 0, T, mm->experts, mm->topk, 1.2, ids, r == me ? rt->w : NULL) != 0;
    for (size_t i = 0; i < entries && !bad; ++i) {
      rt->pair[r][loom_bench_moe_expert_rank(mm->experts, W, ids[i])]++;
      if (r == me) rt->counts[ids[i]]++;
    }
    if (r == me && !bad) memcpy(rt->ids, ids, entries * sizeof(int32_t));
  }
  free(ids);
  if (!bad) return LOOM_SUCCESS;
  moe_route_free(rt);
  return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "routing of %lld tokens", (long long)T);
}

void moe_route_free(moe_route_t *rt) {
  free(rt->ids), free(rt->w), free(rt->counts);
  rt->ids = NULL, rt->w = NULL, rt->counts = NULL;
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

loom_bench_row_t *moe_row(loom_bench_table_t *t, const char *op, const char *impl, const moe_model_t *mm, int64_t T,
                          loom_route_kind_t kind, int W) {
  loom_bench_row_t *row = loom_bench_add(t);
  if (!row) return NULL;
  snprintf(row->op, sizeof row->op, "%s", op);
  snprintf(row->impl, sizeof row->impl, "%s", impl);
  snprintf(row->shape, sizeof row->shape, "%s T=%lld %s", mm->name, (long long)T, moe_route_name(kind));
  snprintf(row->dtype, sizeof row->dtype, "bf16");
  row->m = T, row->n = mm->hidden;
  row->world = W;
  return row;
}
