/*
 * grouped_cases.h - the shapes `loom-bench grouped` times: one MoE layer's
 * expert GEMMs on one GPU. T tokens, each routed to top-k of the E experts
 * (support/moe_routing.h's synthetic router, uniform or Zipf(1.2), rank 0,
 * round 0: the same ids loom-bench moe and bench/peers/moe_torch.py draw),
 * give R = T x k rows grouped by expert (rows per expert from the routing);
 * every expert's weights on this GPU, nn.Linear's layout [E, n, k]:
 *   gate_up   C [R, 2F] = A [R, H] x W1_e^T    (n = 2 x ffn, k = hidden)
 *   down      C [R, H]  = A [R, F] x W2_e^T    (n = hidden,  k = ffn)
 * bf16 in and out, fp32 accumulation.
 *
 * Models: loom-bench moe's three (Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3
 * routed experts: tools/bench/moe_models.c, the same numbers) and four MoE
 * families the GEMM model was never fitted or checked on (Qwen1.5-MoE-A2.7B,
 * OLMoE-1B-7B: only in loom-bench gemm's new-families group;
 * Llama-4-Scout, gpt-oss-120b; routed experts only, no shared expert, no
 * bias). Tokens 1, 8, 64, 512, 1024, 2048, 8192 (--quick: 1, 64, 1024,
 * 8192).
 *
 * Also here, so that the host tests see them: the routing's rows per
 * expert, the rule for how many input sets a timing rotates (the same rule
 * in bench/peers/grouped_torch.py), the complete shape a row pairs on, the
 * peer's argument list, and the run-length estimate of --list.
 *
 * Plain C, no CUDA: linked into loom-bench and the host tests.
 */
#ifndef LOOM_SUPPORT_GROUPED_CASES_H
#define LOOM_SUPPORT_GROUPED_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "support/bench_pair.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_grouped_model {
  const char *name;
  int hidden, experts, topk, ffn; /* ffn: one routed expert's hidden size */
  int in_moe;                     /* 1: one of loom-bench moe's models (moe_models.c has the same numbers) */
  const char *source;             /* where the numbers come from */
} loom_grouped_model_t;

extern const loom_grouped_model_t loom_grouped_models[];
extern const int loom_grouped_model_count;

/* Index of the model called `name`, -1 if none. */
int loom_grouped_model_find(const char *name);

enum { LOOM_GROUPED_GATE_UP = 0, LOOM_GROUPED_DOWN = 1 };
/* "gate_up", "down". */
const char *loom_grouped_gemm_name(int gemm);

/* The timing's graphs hold this many calls (loom's and the peer's), and an
 * input set is rotated among at most this many copies. */
#define LOOM_GROUPED_GRAPH_CALLS 16

typedef struct loom_grouped_case {
  int model;          /* index in loom_grouped_models */
  int gemm;           /* LOOM_GROUPED_GATE_UP or LOOM_GROUPED_DOWN */
  int64_t tokens;     /* T */
  int route;          /* loom_route_kind_t: LOOM_ROUTE_UNIFORM or LOOM_ROUTE_ZIPF */
  int64_t rows, n, k; /* R = T x topk; the GEMM's n and k (above) */
} loom_grouped_case_t;

typedef struct loom_grouped_sel {
  int model;      /* -1 every model */
  int gemm;       /* -1 both */
  int route;      /* -1 both (uniform, then Zipf) */
  int64_t tokens; /* > 0: this T only; else the list (quick or full) */
  int quick;
} loom_grouped_sel_t;

/* A selection of everything (model, gemm, route -1; tokens 0; not quick). */
void loom_grouped_sel_init(loom_grouped_sel_t *s);

/* The selection's cases in run order (model, then gemm, then tokens, then
 * routing: a model's weights serve all its tokens) into out[max]; returns
 * how many the selection has (more than max: only max written), -1 for a
 * selection that makes no sense (an unknown model, gemm or route, tokens
 * < 0). */
int loom_grouped_cases(const loom_grouped_sel_t *s, loom_grouped_case_t *out, int max);

/* The token list of a selection: its count, the values in *tokens. */
int loom_grouped_token_list(const loom_grouped_sel_t *s, const int64_t **tokens);

/* The case's rows per expert: offsets[E + 1] (offsets[0] = 0, offsets[E] =
 * R; int64, as loom_gemm_grouped reads them), from the routing of the
 * case's model, tokens and route drawn with `seed` (rank 0, round 0,
 * Zipf exponent 1.2); *active (may be NULL): experts with rows; *hot (may
 * be NULL): the most rows of one expert. 0, or -1 when out of memory. */
int loom_grouped_offsets(const loom_grouped_case_t *c, uint64_t seed, int64_t *offsets, int *active, int64_t *hot);

/* Bytes one call touches: A and C (R rows) and the weights of the experts
 * with rows (bf16). */
double loom_grouped_touched_bytes(const loom_grouped_case_t *c, int active);
/* Bytes of one input set as the benchmark allocates it: A and every
 * expert's weights (bf16). */
double loom_grouped_set_bytes(const loom_grouped_case_t *c);

/* Input sets a timing rotates among, call after call (loom_bench_rotation's
 * rule on what a call touches): the fewest with sets x touched >= 4 x l2,
 * at most LOOM_GROUPED_GRAPH_CALLS, at most budget / set_bytes, at least 1.
 * bench/peers/grouped_torch.py applies the same rule (rotation_sets). */
int loom_grouped_sets(double touched, double set_bytes, double l2_bytes, double budget_bytes);

/* The complete shape of a case's row as the peer names it: op
 * "grouped_gemm", model, gemm, tokens, routing, experts, topk, rows, n, k,
 * hot (the busiest expert's rows: both sides drew the same routing),
 * dtype bf16. */
void loom_grouped_pair_shape(const loom_grouped_case_t *c, int64_t hot, loom_bench_shape_t *s);

/* The peer's arguments for the selection (grouped_torch.py runs their
 * product, in the same order, and nothing else):
 *   --models NAME:H:E:K:F,... --gemms gate_up,down --tokens 1,8 --routings uniform,zipf
 * into buf[cap]; 0, or -1 where it does not fit or the selection is bad. */
int loom_grouped_peer_args(const loom_grouped_sel_t *s, char *buf, size_t cap);

/* Estimated seconds of one call on an H100/H200-class GPU (700 TFLOP/s,
 * 3.5 TB/s of what it touches, 5 us per launch: bench_gemm's estimate). */
double loom_grouped_est_call_s(const loom_grouped_case_t *c, int active);

#ifdef __cplusplus
}
#endif

#endif /* LOOM_SUPPORT_GROUPED_CASES_H */
