/*
 * moe_mlp.c - loom_moe_mlp: the expert MLP layer as loom's unfused
 * sequence, each step a launch on the caller's stream and none of them
 * waiting for the host (graph-capturable):
 *   1 loom_moe_dispatch                 rows into the receive buffer, grouped by
 *                                       local expert; expert_offsets on the device
 *   2 grouped GEMM, SwiGLU epilogue     h [R, F] = silu(recv_l Wgate_l^T) x (recv_l Wup_l^T):
 *                                       both projections in one tile (gate_up_l's rows
 *                                       [0, F) and [F, 2F) side by side), fp32, rounded once
 *   3 grouped GEMM (down)               y = h_l x down_l^T into the receive buffer
 *   4 loom_moe_combine(y = recv)        rows back, weighted sums
 * or fused (loom_moe_mlp_path): step 3's epilogue stores each row into its
 * token's rank (the combine buffer slot its origin names) and step 4 only
 * signals and reduces (moe.h: why it needs no combine-ready handshake);
 * or fused all (FUSED_ALL): that, and step 2 starts beside step 1 (a
 * programmatic dependent launch on the SMs the dispatch leaves free) and
 * each of its tiles waits for the sources of its rows, which send expert by
 * expert and signal each expert's rows complete (moe.h, the arrival form).
 * Steps 2-3 read the rows' count from expert_offsets on the device (the
 * grouped GEMM's tile prefix), so only the rows that arrived are computed;
 * a rank without experts runs 1 and 4. h is the plan's (worst-case rows R,
 * allocated with the plan).
 */
#include <stdio.h>
#include <string.h>

#include "core/comm.h"
#include "core/error.h"
#include "core/log.h"
#include "core/op.h"
#include "core/tune.h"
#include "core/plan.h"
#include "core/trace.h"
#include "core/ptr_check.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ops/moe/moe.h"

/* A grouped GEMM's configuration: the model's, with the tile bm x bn where
 * given (0: the model's), a persistent block per SM of the comm's (in a
 * world, the rank's share: the arrival GEMM's blocks wait for peers). */
static loom_gemm_config_t moe_tile(const loom_grouped_gemm_desc_t *g, int sms, int bm, int bn) {
  loom_gemm_config_t c = loom__grouped_sm90_config(g, sms);
  c.grid = sms;
  if (bm) c.bm = bm;
  if (bn) c.bn = bn;
  return c;
}

/* The arrival wait of the gate/up GEMM (FUSED_ALL): every source's rows
 * of this rank's experts, as the dispatch's layout counted them. */
static loom_grouped_arrival_t moe_arrival(const loom_moe_state_t *st) {
  const loom_moe_kargs_t *k = &st->k;
  loom_grouped_arrival_t w;
  memset(&w, 0, sizeof w);
  w.epoch = (loom_dev_epoch_t *)(k->dc.ws + k->epoch_off);
  w.next = k->gemm_next;
  w.ready = k->ready;
  w.arrived = (const uint32_t *)(k->dc.ws + k->arrived_off);
  w.rows_from = k->kept;
  w.sources = st->world, w.stride = st->desc.experts, w.first = st->first_local;
  w.site_ready = LOOM_SITE_MOE_LAYOUT, w.site_arrived = LOOM_SITE_MOE_ARRIVED;
  w.comm = k->dc;
  return w;
}

/* Steps 2-3 on the rows dispatched into the receive buffer; fused: the
 * down GEMM's rows scattered into their sources' combine buffers; fused
 * all: the gate/up GEMM on arriving rows too (its blocks take their tiles
 * as they start: those on the SMs the dispatch holds start late and take
 * what is left). */
static loom_result_t moe_experts(loom_moe_state_t *st, int sms, const void *gate_up, const void *down, int64_t tokens,
                                 const loom_moe_mlp_choice_t *c, cudaStream_t stream) {
  const loom_moe_desc_t *d = &st->desc;
  const int64_t F = d->ffn, H = d->hidden;
  const int64_t *off = st->k.expert_off;
  const int64_t hint = tokens * d->topk; /* this rank's rows, as many as it receives at uniform routing */
  const loom_grouped_gemm_desc_t g1 = loom__moe_gemm_desc(st, 2 * F, H, hint), g2 = loom__moe_gemm_desc(st, H, F, hint);
  const loom_gemm_config_t c1 = moe_tile(&g1, sms, c->up_bm, 256), c2 = moe_tile(&g2, sms, c->down_bm, c->down_bn);
  if (c->path == LOOM_MOE_MLP_FUSED_ALL) {
    const loom_grouped_arrival_t w = moe_arrival(st);
    LOOM_TRY(loom__gemm_grouped_sm90_arrival(&g1, st->recv, gate_up, st->h, off, &c1, 1, &w, stream));
  } else {
    LOOM_TRY(loom__gemm_grouped_sm90(&g1, st->recv, gate_up, st->h, NULL, off, &c1, 1, stream));
  }
  if (c->path != LOOM_MOE_MLP_UNFUSED)
    return loom__gemm_grouped_sm90_scatter(&g2, st->h, down, st->recv, off, &c2, st->origin, st->k.combine, stream);
  return loom__gemm_grouped_sm90(&g2, st->h, down, st->recv, NULL, off, &c2, 0, stream);
}

int loom__moe_tokens_bucket(int64_t tokens) {
  int b = 0;
  while (b < 62 && ((int64_t)1 << b) < tokens) ++b;
  return b;
}

int loom__moe_mlp_tune_key(const loom_moe_desc_t *d, int world, int sms, int64_t tokens, char *key, size_t size) {
  const int n = snprintf(key, size, "moe mlp W%d %dsm H%d F%d E%d k%d %s cap%lld t%lld", world, sms, d->hidden, d->ffn,
                         d->experts, d->topk, loom__dtype_name(d->dtype), (long long)d->capacity,
                         (long long)((int64_t)1 << loom__moe_tokens_bucket(tokens)));
  return n > 0 && (size_t)n < size;
}

void loom__moe_mlp_tune_format(const loom_moe_mlp_choice_t *c, char *out, size_t size) {
  const int n = snprintf(out, size, "path=%d up=%d down=%dx%d", (int)c->path, c->up_bm, c->down_bm, c->down_bn);
  if (c->disp > 0 && n > 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, " disp=%d", c->disp);
}

loom_result_t loom__moe_mlp_tune_parse(const char *text, loom_moe_mlp_choice_t *c) {
  int p = -1, up = -1, dm = -1, dn = -1, disp = 0, used = 0, more = 0;
  int ok = text && sscanf(text, "path=%d up=%d down=%dx%d%n", &p, &up, &dm, &dn, &used) == 4;
  if (ok && text[used] != 0) ok = sscanf(text + used, " disp=%d%n", &disp, &more) == 1 && text[used + more] == 0;
  if (!ok || p < LOOM_MOE_MLP_FUSED || p > LOOM_MOE_MLP_FUSED_ALL || (up != 0 && up != 64 && up != 128) ||
      (dm != 0 && dm != 64 && dm != 128) || (dn != 0 && dn != 128 && dn != 256) || disp < 0 || disp > 65536)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "tuning entry \"%s\": expected \"path=<1 fused | 2 unfused | 3 fused all> up=<0|64|128> "
                      "down=<0|64|128>x<0|128|256>[ disp=<0..65536>]\"",
                      text ? text : "(null)");
  c->path = (loom_moe_mlp_path_t)p, c->up_bm = up, c->down_bm = dm, c->down_bn = dn, c->disp = disp;
  return LOOM_SUCCESS;
}

loom_moe_mlp_choice_t loom__moe_mlp_default(int64_t tokens) {
  const loom_moe_mlp_choice_t c = {tokens >= LOOM_MOE_ALL_TOKENS ? LOOM_MOE_MLP_FUSED_ALL : LOOM_MOE_MLP_FUSED, 0, 0,
                                   0, 0};
  return c;
}

/* The choice for a call of `tokens` (loom_moe_mlp_path): desc->mlp_path
 * forced with the model's tiles, or the tuning cache's entry, or the
 * default (loom__moe_mlp_default). A malformed entry is reported and the
 * default taken. */
static loom_moe_mlp_choice_t moe_mlp_resolve(const loom_plan_t plan, const loom_moe_state_t *st, int64_t tokens) {
  loom_moe_mlp_choice_t c = {LOOM_MOE_MLP_FUSED, 0, 0, 0, 0};
  if (st->desc.mlp_path != LOOM_MOE_MLP_AUTO) {
    c.path = (loom_moe_mlp_path_t)st->desc.mlp_path;
    return c;
  }
  c = loom__moe_mlp_default(tokens);
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  if (loom__moe_mlp_tune_key(&st->desc, st->world, plan->comm->sm_count, tokens, key, sizeof key) &&
      loom__tune_get(key, value, sizeof value) && loom__moe_mlp_tune_parse(value, &c) != LOOM_SUCCESS) {
    LOOM_WARN("loom_moe_mlp: tuned entry \"%s\" = \"%s\" is malformed: the default form, the model's tiles", key,
              value);
    c = loom__moe_mlp_default(tokens);
  }
  return c;
}

loom_result_t loom__moe_mlp_choice(loom_plan_t plan, int64_t tokens, loom_moe_mlp_choice_t *c) {
  loom_moe_state_t *st;
  LOOM_TRY(loom__moe_state(plan, "loom_moe_mlp_path", &st));
  *c = moe_mlp_resolve(plan, st, tokens);
  return LOOM_SUCCESS;
}

loom_result_t loom_moe_mlp_path(loom_plan_t plan, int64_t tokens, loom_moe_mlp_path_t *path) {
  if (!path) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "loom_moe_mlp_path: path=NULL");
  loom_moe_mlp_choice_t c;
  LOOM_TRY(loom__moe_mlp_choice(plan, tokens, &c));
  *path = c.path;
  return LOOM_SUCCESS;
}

loom_result_t loom__moe_mlp_run(loom_plan_t plan, const char *fn, const void *x, const int32_t *ids,
                                const float *weights, int64_t tokens, const void *gate_up, const void *down, void *out,
                                const loom_moe_mlp_choice_t *choice, cudaStream_t stream) {
  loom_moe_state_t *st;
  LOOM_TRY(loom__moe_enter(plan, fn, stream, &st));
  const loom_moe_desc_t *d = &st->desc;
  if (d->ffn <= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                      "%s: plan=%p was made with desc->ffn=0: set ffn (the experts' hidden size) to run the MLP", fn,
                      (void *)plan);
  const size_t es = loom_dtype_size(d->dtype);
  const size_t per = (size_t)d->hidden * (size_t)d->ffn * es; /* one expert's projection */
  const unsigned need = st->n_local > 0 ? LOOM_BUF_ALIGN16 : LOOM_BUF_OPTIONAL;
  const loom_buf_t w[2] = {{"gate_up", gate_up, 2 * per * (size_t)st->n_local, need, NULL},
                           {"down", down, per * (size_t)st->n_local, need, NULL}};
  LOOM_TRY(loom__check_bufs(fn, plan->comm, w, 2));
  if (tokens > 0 && tokens <= d->max_tokens) {
    /* the combine's arguments too, before the dispatch starts the peers
     * (a refusal after it would leave them waiting until the timeout);
     * x, ids and tokens are the dispatch's own first checks */
    const loom_buf_t io[2] = {{"weights", weights, (size_t)tokens * (size_t)d->topk * sizeof(float), 0, NULL},
                              {"out", out, (size_t)tokens * (size_t)d->hidden * es, LOOM_BUF_ALIGN16, NULL}};
    LOOM_TRY(loom__check_bufs(fn, plan->comm, io, 2));
  }
  const loom_moe_mlp_choice_t c = choice->path == LOOM_MOE_MLP_AUTO ? moe_mlp_resolve(plan, st, tokens) : *choice;
  const int all = c.path == LOOM_MOE_MLP_FUSED_ALL, sms = plan->comm->sm_count;
  const int blocks = !all ? 0 : c.disp > 0 ? c.disp : sms / 4 > 0 ? sms / 4 : 1;
  LOOM_TRY(loom__moe_dispatch_body(plan, st, "loom_moe_dispatch", x, ids, tokens, all, blocks, stream));
  /* (the arrival form: the gate/up GEMM must be the next work on the
   * stream, or it would not start beside the dispatch: no mark between) */
  if (!all) loom__trace_mark(plan, "dispatch", stream);
  if (st->n_local > 0) LOOM_TRY(moe_experts(st, sms, gate_up, down, tokens, &c, stream));
  loom__trace_mark(plan, "experts", stream);
  LOOM_TRY(loom__moe_combine_body(plan, st, fn, st->recv, weights, out, c.path != LOOM_MOE_MLP_UNFUSED, stream));
  return loom__call_exit(plan, stream, NULL);
}

loom_result_t loom_moe_mlp(loom_plan_t plan, const void *x, const int32_t *ids, const float *weights, int64_t tokens,
                           const void *gate_up, const void *down, void *out, cudaStream_t stream) {
  static const loom_moe_mlp_choice_t autoc = {LOOM_MOE_MLP_AUTO, 0, 0, 0, 0};
  return loom__moe_mlp_run(plan, "loom_moe_mlp", x, ids, weights, tokens, gate_up, down, out, &autoc, stream);
}
