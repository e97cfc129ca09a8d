/*
 * moe_tune.c - loom_moe_mlp_tune: times loom_moe_mlp's three forms (the
 * combine fused into the down GEMM's epilogue, the unfused sequence, and
 * the dispatch fused into the gate/up GEMM's prologue as well), each with
 * tiles of its two grouped GEMMs (the gate/up GEMM's 64 or 128 rows per
 * tile; the down GEMM's 64 / 128 x 128 / 256; fused-all: the dispatch's
 * blocks beside the GEMM), on the
 * caller's arguments, and records the fastest in the tuning cache
 * (core/tune.h, LOOM_TUNE_FILE), which AUTO calls of the same shape and
 * tokens' bucket then run (moe_mlp.c, moe_mlp_resolve).
 *
 * The default (loom__moe_mlp_default) and the 22 candidates race by the
 * one tuning rule (core/tune_rule.h: rounds over all of them in turn, each
 * candidate's median round, the largest over the ranks, a margin before
 * another replaces the default). Measured before that rule (2x H200,
 * docs/perf/moe.md): with one pass of 5 calls each the candidates timed
 * first won, and with the best of 3 rounds the winner at DeepSeek-V3's
 * prefill ran 2% slower than the default in the benchmark after: the
 * candidates there lie within the run's noise.
 *
 * Key: "moe mlp W<W> <sms>sm H<H> F<F> E<E> k<k> <dtype> cap<capacity>
 * t<bucket>" (bucket: the next power of two of the tokens); value:
 * "path=<1 fused | 2 unfused | 3 fused all> up=<bm> down=<bm>x<bn>[ disp=<blocks>]".
 */
#include <stdio.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/plan.h"
#include "core/tune.h"
#include "core/tune_rule.h"
#include "core/world.h"
#include "ops/moe/moe.h"

#define MOE_TUNE_CANDIDATES 23

typedef struct {
  const void *x, *gate_up, *down;
  const int32_t *ids;
  const float *weights;
  int64_t tokens;
  void *out;
} moe_tune_args_t;

/* The race's candidates on one call's arguments. */
typedef struct {
  loom_plan_t plan;
  const moe_tune_args_t *a;
  const loom_moe_mlp_choice_t *cand;
} moe_tune_race_t;

/* One call of candidate i (the race times it). */
static loom_result_t moe_tune_call(void *ctx, int i, cudaStream_t stream) {
  const moe_tune_race_t *k = (const moe_tune_race_t *)ctx;
  const moe_tune_args_t *a = k->a;
  return loom__moe_mlp_run(k->plan, "loom_moe_mlp_tune", a->x, a->ids, a->weights, a->tokens, a->gate_up, a->down,
                           a->out, &k->cand[i], stream);
}

/* The winner into the tuning cache (and rank 0's LOOM_TUNE_FILE). */
static loom_result_t moe_tune_record(loom_plan_t plan, const loom_moe_state_t *st, int64_t tokens,
                                     const loom_moe_mlp_choice_t *won, float ms) {
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__moe_mlp_tune_key(&st->desc, st->world, plan->comm->sm_count, tokens, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "loom_moe_mlp_tune: tuning key too long");
  loom__moe_mlp_tune_format(won, value, sizeof value);
  return loom__tune_record("loom_moe_mlp_tune", key, value, ms, plan->comm->rank == 0);
}

/* The candidates: the untuned default (loom__moe_mlp_default) first, then the
 * fused and unfused forms with each gate/up rows per tile and each down
 * tile (16), then the fused-all form with each gate/up rows per tile and an
 * eighth, a quarter or half of the SMs' worth of dispatch blocks (6; the
 * model's down tile): 23. */
static int moe_tune_candidates(loom_moe_mlp_choice_t *c, int sms, int64_t tokens) {
  static const int tiles[4][2] = {{64, 128}, {64, 256}, {128, 128}, {128, 256}};
  int n = 0;
  c[n++] = loom__moe_mlp_default(tokens);
  for (int f = 0; f < 2; ++f)
    for (int up = 64; up <= 128; up += 64)
      for (int t = 0; t < 4; ++t)
        c[n++] = (loom_moe_mlp_choice_t){f == 0 ? LOOM_MOE_MLP_FUSED : LOOM_MOE_MLP_UNFUSED, up, tiles[t][0],
                                         tiles[t][1], 0};
  for (int up = 64; up <= 128; up += 64)
    for (int part = 8; part >= 2; part /= 2)
      c[n++] = (loom_moe_mlp_choice_t){LOOM_MOE_MLP_FUSED_ALL, up, 0, 0, sms / part > 0 ? sms / part : 1};
  return n;
}

loom_result_t loom_moe_mlp_tune(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights,
                                int64_t tokens, const void *gate_up, const void *down, void *out,
                                cudaStream_t stream) {
  const char *fn = "loom_moe_mlp_tune";
  loom_moe_state_t *st;
  LOOM_TRY(loom__moe_state(plan, fn, &st));
  if (plan->comm->world) return loom__world_unsupported(plan->comm, fn, "tuning", LOOM_WORLD_NO_TIMING);
  LOOM_TRY(loom__stream_not_capturing(fn, stream));
  const moe_tune_args_t a = {x, gate_up, down, ids, weights, tokens, out};
  loom_moe_mlp_choice_t cand[MOE_TUNE_CANDIDATES];
  const int nc = moe_tune_candidates(cand, plan->comm->sm_count, tokens);
  moe_tune_race_t ctx = {plan, &a, cand};
  const loom_tune_race_t race = {fn, nc, &ctx, NULL, moe_tune_call, NULL, plan->comm};
  int best = 0;
  float best_ms = 0.f, med[MOE_TUNE_CANDIDATES];
  LOOM_TRY(loom__tune_race(&race, stream, &best, &best_ms, med));
  for (int i = 0; i < nc; ++i) {
    char v[LOOM_TUNE_TEXT_BYTES];
    loom__moe_mlp_tune_format(&cand[i], v, sizeof v);
    LOOM_INFO("%s: %s: %.4f ms (the median of its rounds)", fn, v, (double)med[i]);
  }
  /* the last calls ran another candidate: the winner once more, so that out holds its answer */
  LOOM_TRY(loom__moe_mlp_run(plan, fn, x, ids, weights, tokens, gate_up, down, out, &cand[best], stream));
  return moe_tune_record(plan, st, tokens, &cand[best], best_ms);
}
