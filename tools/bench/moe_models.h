/*
 * moe_models.h - what loom-bench's two MoE suites share (moe: dispatch and
 * combine; moe_layer: the whole expert MLP): the model shapes, the tokens
 * per rank, the routing names and every rank's routing (support/
 * moe_routing.h's generator, the same on every rank: the seed).
 */
#ifndef LOOM_BENCH_MOE_MODELS_H
#define LOOM_BENCH_MOE_MODELS_H

#include <stdint.h>

#include "bench.h"
#include "support/moe_routing.h"

#define MOE_SEED 0x6d6f65ull
#define MOE_MAXW 8

typedef struct moe_model {
  const char *name;
  int hidden, experts, topk, ffn; /* ffn: one expert's hidden size */
} moe_model_t;

/* Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3 (its routed experts). */
extern const moe_model_t g_moe_models[];
extern const int g_moe_model_count;
/* Tokens per rank: decode and prefill. */
extern const int64_t g_moe_tokens[2];

const char *moe_route_name(loom_route_kind_t k);

/* Every rank's routing, drawn by every rank (support/moe_routing.h: the
 * seed makes them agree): this rank's ids [T, k] and weights [T, k], its
 * rows per expert counts [E], and the rows of every (source, destination)
 * rank pair. */
typedef struct moe_route {
  int32_t *ids;
  float *w;
  int32_t *counts;
  int64_t pair[MOE_MAXW][MOE_MAXW];
} moe_route_t;
/* Success, or LOOM_ERR_OUT_OF_MEMORY with the arrays NULL; moe_route_free
 * either way. */
loom_result_t moe_route_draw(const moe_model_t *mm, int64_t T, loom_route_kind_t kind, int W, int me, moe_route_t *rt);
void moe_route_free(moe_route_t *rt);

/* The complete shape of a row, as moe_torch.py names it (with_ffn: the
 * layer's rows, which carry the experts' hidden size too). */
void moe_pair_shape(const moe_model_t *mm, int64_t T, loom_route_kind_t kind, int W, int with_ffn,
                    loom_bench_shape_t *s);

/* The options of loom-bench moe. */
typedef struct moe_args {
  loom_bench_opts_t o;
  int model;      /* -1 all */
  int64_t tokens; /* 0 both */
  int peer;       /* 0 with --peer none */
  int list;       /* --list: the shapes and their floors, no GPU */
  int layer;      /* --layer: the whole expert MLP (bench_moe_layer.c) */
  char peer_json[1200]; /* PyTorch's results (bench/peers/moe_torch.py; "" if not run) */
  char peer_note[200];  /* why there is no peer column */
} moe_args_t;

typedef struct moe_shape_sel {
  int model;
  int64_t T;
  loom_route_kind_t kind;
} moe_shape_sel_t;

/* A new row of t for variant impl of the shape (op, impl, shape, dtype
 * bf16, m = T, n = H, world); NULL when the table is full. */
loom_bench_row_t *moe_row(loom_bench_table_t *t, const char *op, const char *impl, const moe_model_t *mm, int64_t T,
                          loom_route_kind_t kind, int W);

/* Every rank: rr (this rank's setup) summed over the ranks, then, if all
 * succeeded, the n variants op(args[v]) timed side by side (tm[n]), the
 * comm's async error checked; a failure printed with `label`. 1 if any
 * rank failed. */
int moe_time_side_by_side(loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, const moe_args_t *a,
                          loom_result_t rr, const char *label, const moe_model_t *mm, int64_t T, int n,
                          loom_bench_op_fn op, void *const *args, loom_bench_time_t *tm);

/* --layer (bench_moe_layer.c): one shape's rows on every rank, 0 or 1
 * failed; rank 0's notes, title and results. */
int moe_layer_shape(moe_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, loom_bench_table_t *t,
                    const moe_model_t *mm, int64_t T, loom_route_kind_t kind);
int moe_layer_finish(const moe_args_t *a, loom_bench_table_t *t, int world, int failures);

#endif /* LOOM_BENCH_MOE_MODELS_H */
