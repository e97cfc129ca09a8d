/*
 * tp_tune.c - loom_ag_gemm_tune / loom_gemm_rs_tune / loom_gemm_ar_tune: time the tensor-parallel
 * ops' knobs for one description on this comm and record the fastest in the
 * tuning cache (core/tune.h, LOOM_TUNE_FILE), which plans made later with
 * transfer LOOM_TP_AUTO (chunk_rows and comm_blocks 0) take.
 *
 * Candidates: the sequential path with cuBLASLt (where it takes the dtypes:
 * a tuned op is never slower than the baseline it replaces; cuBLASLt's
 * algorithm itself timed among LOOM_TP_TUNE_CUBLASLT_CANDIDATES and recorded,
 * baseline/baseline.h) and with loom_gemm; AG and RS at W > 1: the
 * decomposed path with either GEMM; and where the fused transfers can
 * run, AG: the copy engine with 4, 8, 16 chunks per shard and whole shards,
 * the SM copy kernel on 4, 8, 16 blocks; RS: the reduction on 4, 8, 16
 * blocks and the plan's own choice, and the atomic reduction; AR: the
 * sequential path (loom_gemm + loom_allreduce) and the fused reduction on
 * 4, 8, 16 blocks and the plan's own choice. The default, candidate 0, is
 * the plan AUTO makes untuned (the cache's entry ignored). They race by
 * the one tuning rule (core/tune_rule.h: each round every candidate's plan
 * is made through the door's lower half, loom__plan_build, timed and
 * destroyed; the largest time over the ranks, so every rank picks the
 * same winner; the median round; a margin over the default). Inputs are
 * the tuner's own (a constant pattern: timing does not depend on the
 * values).
 *
 * AR's output is the tuner's own loom_malloc buffer (peers store into it).
 *
 * Key: "tp <op> W<W> <sms>sm m<m> n<n> k<k> <ab>-><c> <nk|kn> bias<0|1>
 * act<a>"; value: "transfer=<t> chunk=<rows> blocks=<n> gemm=<g>" (g: the
 * sequential path's GEMM, loom_tp_gemm_t; 0 for the fused transfers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/param.h"
#include "core/plan.h"
#include "core/tune.h"
#include "core/tune_rule.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"

#define TP_TUNE_MAX 16 /* the default and up to 14 others */

int loom__tp_tune_key(int kind, const loom_tp_desc_t *d, int sms, char *key, size_t size) {
  const int n = snprintf(key, size, "tp %s W%d %dsm m%lld n%lld k%lld %s->%s %s bias%d act%d",
                         loom__tp_kind_op(kind), d->world_size, sms, (long long)d->m,
                         (long long)d->n, (long long)d->k, loom__dtype_name(d->ab_type), loom__dtype_name(d->c_type),
                         d->b_layout == LOOM_B_NK ? "nk" : "kn", d->has_bias ? 1 : 0, (int)d->activation);
  return n > 0 && (size_t)n < size;
}

void loom__tp_tune_format(const loom_tp_choice_t *c, char *out, size_t size) {
  snprintf(out, size, "transfer=%d chunk=%d blocks=%d gemm=%d", (int)c->transfer, c->chunk_rows, c->comm_blocks,
           (int)c->gemm);
}

loom_result_t loom__tp_tune_parse(const char *text, loom_tp_choice_t *out) {
  int tt = -1, c = -1, b = -1, g = 0, used = 0, used2 = 0;
  int ok = text && sscanf(text, "transfer=%d chunk=%d blocks=%d%n", &tt, &c, &b, &used) == 3;
  if (ok && text[used] != 0) /* the GEMM engine (entries of older files have none: AUTO) */
    ok = sscanf(text + used, " gemm=%d%n", &g, &used2) == 1 && text[used + used2] == 0;
  if (!ok || tt < LOOM_TP_SEQUENTIAL || tt > LOOM_TP_DECOMPOSED || c < 0 || b < 0 || g < LOOM_TP_GEMM_AUTO ||
      g > LOOM_TP_GEMM_CUBLASLT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "tuning entry \"%s\": expected \"transfer=<1..6> chunk=<rows >= 0> blocks=<n >= 0> "
                      "[gemm=<0..2>]\"",
                      text ? text : "(null)");
  out->transfer = (loom_tp_transfer_t)tt, out->chunk_rows = c, out->comm_blocks = b, out->gemm = (loom_tp_gemm_t)g;
  return LOOM_SUCCESS;
}

/* The buffers candidates run on: a, b, c (AR: symmetric, made after the
 * agreement), bias. */
typedef struct {
  void *a, *b, *c, *bias;
  size_t c_bytes;
} tune_bufs_t;

/* This rank's buffers (AR's out excepted), filled with 0x3c bytes. */
static loom_result_t tune_alloc(const loom_tp_desc_t *desc, int kind, int W, cudaStream_t stream, tune_bufs_t *t) {
  const int64_t m = desc->m, n = desc->n, k = desc->k, S = loom__tp_shard_rows(m, W);
  const size_t ea = loom_dtype_size(desc->ab_type), ec = loom_dtype_size(desc->c_type);
  const size_t a_bytes = (size_t)(kind == LOOM__TP_AG ? S : m) * (size_t)k * ea;
  t->c_bytes = (size_t)(kind == LOOM__TP_RS ? S : m) * (size_t)n * ec;
  cudaError_t ce = cudaMalloc(&t->a, a_bytes);
  if (ce == cudaSuccess) ce = cudaMalloc(&t->b, (size_t)n * (size_t)k * ea);
  if (ce == cudaSuccess && kind != LOOM__TP_AR) ce = cudaMalloc(&t->c, t->c_bytes);
  if (ce == cudaSuccess) ce = cudaMalloc(&t->bias, (size_t)n * ec);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(t->a, 0x3c, a_bytes, stream);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(t->b, 0x3c, (size_t)n * (size_t)k * ea, stream);
  if (ce == cudaSuccess) ce = cudaMemsetAsync(t->bias, 0x3c, (size_t)n * ec, stream);
  if (ce != cudaSuccess) return loom__cuda_fail((int)ce, "tuning buffers", __FILE__, __LINE__);
  return LOOM_SUCCESS;
}

/* Frees the buffers; r, or AR's loom_free failure where r succeeded. */
static loom_result_t tune_free(loom_comm_t comm, int kind, tune_bufs_t *t, loom_result_t r) {
  cudaFree(t->a), cudaFree(t->b), cudaFree(t->bias);
  if (kind != LOOM__TP_AR) {
    cudaFree(t->c);
    return r;
  }
  if (t->c) {
    const loom_result_t rf = loom__comm_free(comm, t->c);
    if (r == LOOM_SUCCESS) r = rf;
  }
  return r;
}

/* 1 where a BULK_REDUCE plan can be made for desc (its shape, the sm90 GEMM). */
static int tune_bulk_ok(const loom_tp_desc_t *desc, int W) {
  const loom_gemm_desc_t g = loom__tp_gemm_desc(desc);
  return loom__tp_bulk_shape_ok(desc->m, W) && loom__tp_bulk_gemm_runs(&g);
}

/* The candidates after the default: (transfer, chunk_rows, comm_blocks,
 * sequential GEMM); cand[0] is left for the default. */
static int tune_candidates(const loom_tp_desc_t *desc, int kind, int W, int fused_ok, int sm_count,
                           loom_tp_choice_t cand[TP_TUNE_MAX]) {
  const int64_t S = loom__tp_shard_rows(desc->m, W);
  int nc = 1;
  memset(cand, 0, TP_TUNE_MAX * sizeof *cand);
  if (loom__tp_cublaslt_takes(desc->ab_type, desc->c_type))
    cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SEQUENTIAL, .gemm = LOOM_TP_GEMM_CUBLASLT};
  cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SEQUENTIAL, .gemm = LOOM_TP_GEMM_LOOM};
  if (kind != LOOM__TP_AR && W > 1) { /* the chunked GEMMs beside NCCL, with either engine */
    if (loom__tp_cublaslt_takes(desc->ab_type, desc->c_type))
      cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_DECOMPOSED, .gemm = LOOM_TP_GEMM_CUBLASLT};
    cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_DECOMPOSED, .gemm = LOOM_TP_GEMM_LOOM};
  }
  if (!fused_ok) return nc;
  if (kind == LOOM__TP_AG) {
    const int64_t per[4] = {1, 4, 8, 16};
    for (int i = 0; i < 4; ++i) {
      int64_t cr = loom__ceil_div(S, per[i]);
      if (cr < 1) cr = 1;
      int dup = 0;
      for (int j = 1; j < nc; ++j) dup |= cand[j].transfer == LOOM_TP_COPY_ENGINE && cand[j].chunk_rows == (int)cr;
      if (!dup) cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_COPY_ENGINE, .chunk_rows = (int)cr};
    }
  }
  const int blocks[4] = {0, 4, 8, 16};
  for (int i = kind == LOOM__TP_AG ? 1 : 0; i < 4; ++i)
    if (blocks[i] < sm_count) cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SM_COPY, .comm_blocks = blocks[i]};
  if (kind == LOOM__TP_RS) cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_SM_ATOMIC};
  if (kind == LOOM__TP_RS && tune_bulk_ok(desc, W)) cand[nc++] = (loom_tp_choice_t){.transfer = LOOM_TP_BULK_REDUCE};
  return nc;
}

/* The race's candidates: candidate i's plan, made in its open and
 * destroyed in its close, on the tuner's buffers. */
typedef struct {
  loom_comm_t comm;
  const loom_op_t *op;
  const loom_tp_desc_t *desc;
  const loom_tp_choice_t *cand;
  const tune_bufs_t *t;
  loom_plan_t plan;
  int cublas_timed[2];    /* cuBLASLt's algorithms timed and recorded once: [0] the sequential
                             path's GEMM, [1] the decomposed path's chunks */
  loom_tp_choice_t dflt;  /* what the default (candidate 0, AUTO untuned) resolved to */
} tp_race_t;

static loom_result_t tp_race_open(void *ctx, int i, cudaStream_t stream) {
  tp_race_t *k = (tp_race_t *)ctx;
  loom_tp_desc_t d = *k->desc;
  const loom_tp_choice_t *c = &k->cand[i];
  if (i > 0) d.transfer = c->transfer, d.chunk_rows = c->chunk_rows, d.comm_blocks = c->comm_blocks, d.sequential_gemm = c->gemm;
  const loom__tp_args_t a = {&d, 1};
  LOOM_TRY(loom__plan_build(k->comm, k->op, &a, &k->plan));
  /* the sequential and decomposed paths with cuBLASLt: the first
   * (warm-up) call times cuBLASLt's candidates for each of its GEMM shapes
   * and records the winners, which this plan's later calls and every later
   * plan of the shape run (the bench's baseline is timed the same way) */
  loom_tp_state_t *st = (loom_tp_state_t *)k->plan->op_state;
  const int dec = st->transfer == LOOM_TP_DECOMPOSED;
  if (!loom__tp_fused(st->transfer) && st->gemm_engine == LOOM_TP_GEMM_CUBLASLT && !k->cublas_timed[dec])
    st->tune_base_gemm = 1, k->cublas_timed[dec] = 1;
  const int seq = !loom__tp_fused(st->transfer);
  if (i == 0)
    k->dflt = (loom_tp_choice_t){st->transfer, seq ? 0 : st->chunk_rows, st->comm_blocks,
                                 seq ? st->gemm_engine : LOOM_TP_GEMM_AUTO};
  return LOOM_SUCCESS;
}

static loom_result_t tp_race_call(void *ctx, int i, cudaStream_t stream) {
  const tp_race_t *k = (const tp_race_t *)ctx;
  const tune_bufs_t *t = k->t;
  void *bias = k->desc->has_bias ? t->bias : NULL;
  const int kind = k->op->kind;
  return kind == LOOM__TP_AG   ? loom_ag_gemm(k->plan, t->a, t->b, t->c, NULL, bias, stream)
         : kind == LOOM__TP_RS ? loom_gemm_rs(k->plan, t->a, t->b, t->c, bias, stream)
                               : loom_gemm_ar(k->plan, t->a, t->b, t->c, NULL, stream);
}

static void tp_race_close(void *ctx, int i) {
  tp_race_t *k = (tp_race_t *)ctx;
  if (k->plan) (void)loom_plan_destroy(k->plan);
  k->plan = NULL;
}

/* The winner into the tuning cache (and rank 0's LOOM_TUNE_FILE). */
static loom_result_t tune_record(loom_comm_t comm, const char *fn, const loom_tp_desc_t *desc, int kind,
                                 const loom_tp_choice_t *won, float best_ms) {
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (!loom__tp_tune_key(kind, desc, comm->sm_count, key, sizeof key))
    return loom__fail(LOOM_ERR_INTERNAL, "%s: tuning key too long", fn);
  loom__tp_tune_format(won, value, sizeof value);
  return loom__tune_record(fn, key, value, best_ms, comm->rank == 0);
}

const char *loom__tp_tune_fn(int kind) {
  return kind == LOOM__TP_AG ? "loom_ag_gemm_tune" : kind == LOOM__TP_RS ? "loom_gemm_rs_tune" : "loom_gemm_ar_tune";
}

loom_result_t loom__tp_tune(const loom_op_t *op, loom_comm_t comm, const void *args, cudaStream_t stream) {
  const loom_tp_desc_t *desc = ((const loom__tp_args_t *)args)->desc;
  const int kind = op->kind, W = comm->size;
  const char *fn = loom__tp_tune_fn(kind);
  tune_bufs_t t = {0};
  loom_result_t r = tune_alloc(desc, kind, W, stream, &t);
  /* every rank tunes the same description and has its buffers (or every
   * rank learns that one has not) before the first candidate's plan */
  const int64_t f[10] = {kind, desc->m, desc->n, desc->k, desc->ab_type, desc->c_type, desc->b_layout,
                         desc->has_bias, desc->activation, desc->world_size};
  r = r != LOOM_SUCCESS ? loom__comm_refuse(comm, fn, r)
                        : loom__comm_agree(comm, fn, loom__fnv64(LOOM_FNV64_INIT, f, sizeof f), 0,
                                           "every rank must tune the same loom_tp_desc_t");
  /* AR: out in symmetric memory (collective: every rank got here) */
  if (kind == LOOM__TP_AR && r == LOOM_SUCCESS) r = loom__comm_malloc(comm, t.c_bytes, &t.c);
  const loom_gemm_desc_t g = loom__tp_gemm_desc(desc);
  loom__gemm_path_t path = LOOM__PATH_BASE;
  const int hooks_ok = loom__gemm_path(&g, &path) == LOOM_SUCCESS && path != LOOM__PATH_BASE;
  const int fused_ok = W > 1 && comm->ws_all_reachable && hooks_ok && W <= LOOM_TP_MAX_PEERS;
  loom_tp_choice_t cand[TP_TUNE_MAX];
  const int nc = tune_candidates(desc, kind, W, fused_ok, comm->sm_count, cand);
  tp_race_t ctx = {comm, op, desc, cand, &t, NULL, {0, 0}, {LOOM_TP_SEQUENTIAL, 0, 0, LOOM_TP_GEMM_AUTO}};
  const loom_tune_race_t race = {fn, nc, &ctx, tp_race_open, tp_race_call, tp_race_close, comm};
  int best = 0;
  float best_ms = 0.f, med[TP_TUNE_MAX];
  if (r == LOOM_SUCCESS) r = loom__tune_race(&race, stream, &best, &best_ms, med);
  cand[0] = ctx.dflt;
  for (int i = 0; i < nc && r == LOOM_SUCCESS; ++i)
    LOOM_INFO("%s: transfer %d chunk %d blocks %d gemm %d: %.4f ms", fn, (int)cand[i].transfer, cand[i].chunk_rows,
              cand[i].comm_blocks, (int)cand[i].gemm, (double)med[i]);
  LOOM_TRY(tune_free(comm, kind, &t, r));
  return tune_record(comm, fn, desc, kind, &cand[best], best_ms);
}
