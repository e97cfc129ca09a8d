/*
 * bench_moe_layer.c - loom-bench moe --layer: the whole expert MLP layer
 * (dispatch, gate/up grouped GEMM, SwiGLU, down grouped GEMM, combine) side
 * by side in one run on every rank (each repetition runs every variant; a
 * repetition's time is the slowest rank's; medians):
 *   loom-auto              loom_moe_mlp after loom_moe_mlp_tune on the shape
 *                          (AUTO runs the tuned form and tiles, named in the
 *                          note; the tuning ran in the setup, untimed)
 *   loom-mlp-fused         its fused form with the model's tiles (what AUTO
 *                          runs untuned below 512 tokens): the combine in
 *                          the down GEMM's epilogue (rows stored into the
 *                          tokens' ranks)
 *   loom-mlp-fused-all     its fused-all form with the model's tiles (what
 *                          AUTO runs untuned from 512 tokens on): also the
 *                          dispatch in the gate/up GEMM's prologue (a
 *                          quarter of the SMs' worth of dispatch blocks)
 *   loom-mlp-unfused       its unfused sequence with the model's tiles:
 *                          dispatch, the two grouped GEMMs, combine
 *   loom-grouped-gemms     its two grouped GEMMs alone (the gate/up one with
 *                          its SwiGLU epilogue, on the rows already
 *                          dispatched: no communication): the compute part
 *   loom-dispatch+combine  loom_moe_dispatch + loom_moe_combine alone: the
 *                          communication part
 *   grouped-<bm>x<bn>      the two grouped GEMMs, plain (the gate/up one
 *                          without its SwiGLU: 2F outputs), with each of the
 *                          four tiles forced (which tile the model should
 *                          pick)
 * The peer (bench/peers/moe_torch.py --layer, the same shapes and routings):
 * PyTorch's layer (its dispatch, torch._grouped_mm, silu x up,
 * torch._grouped_mm, its combine) on the three loom_moe_mlp rows and its two grouped
 * GEMMs + SwiGLU on the loom-grouped-gemms row. Weights random (bf16,
 * scaled 1 / sqrt(fan-in)), every rank its own experts; the experts' row
 * counts come from the routing. GEMM TFLOP/s count 6 x rows x H x F per
 * rank (the rows this rank received).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench.h"
#include "moe_models.h"
#include "testing/bench_api.h"

#define LAYER_TRY(call)                  \
  do {                                   \
    const loom_result_t r_ = (call);     \
    if (r_ != LOOM_SUCCESS) return r_;   \
  } while (0)

enum { L_AUTO, L_FUSED, L_ALL, L_MLP, L_GEMMS, L_COMM, L_TILE0, L_COUNT = L_TILE0 + 4 };
static const char *const g_lname[L_COUNT] = {"loom-auto",          "loom-mlp-fused",        "loom-mlp-fused-all",
                                             "loom-mlp-unfused",   "loom-grouped-gemms",    "loom-dispatch+combine",
                                             "grouped-64x128",     "grouped-64x256",        "grouped-128x128",
                                             "grouped-128x256"};
static const int g_form[4] = {LOOM_MOE_MLP_AUTO, LOOM_MOE_MLP_FUSED, LOOM_MOE_MLP_FUSED_ALL, LOOM_MOE_MLP_UNFUSED};
static const int g_tile[4][2] = {{64, 128}, {64, 256}, {128, 128}, {128, 256}};

typedef struct layer_run {
  loom_plan_t plan;
  loom_moe_plan_info_t info;
  int64_t T;
  int H, F, topk;
  int bm, bn; /* the tile the model picked for the gate/up GEMM */
  char choice[32]; /* what AUTO runs for T after the tuning */
  void *x, *out, *gate_up, *down, *act, *y;
  int32_t *ids;
  float *w;
} layer_run_t;

typedef struct layer_var {
  layer_run_t *r;
  int v;
} layer_var_t;

/* One grouped GEMM of the experts over the receive layout: C [R, n] = A x
 * B_l^T, with the tile bm x bn (0, 0: the model's, as loom_moe_mlp runs it). */
static loom_result_t layer_gemm(layer_run_t *r, int64_t n, int64_t k, const void *a, const void *b, void *c, int bm,
                                int bn, int glu, cudaStream_t s) {
  loom_grouped_gemm_desc_t g = LOOM_GROUPED_GEMM_DESC_INIT;
  g.groups = r->info.local_experts, g.max_rows = r->info.max_recv_rows, g.n = n, g.k = k;
  g.rows_hint = r->T * r->topk; /* as loom_moe_mlp's */
  return loom_bench_gemm_grouped_tile(&g, a, b, c, r->info.expert_offsets, bm, bn, glu,
                                      bm || n != 2 * r->F ? NULL : &r->bm, bm || n != 2 * r->F ? NULL : &r->bn, s);
}

static loom_result_t layer_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  const layer_var_t *x = (const layer_var_t *)arg;
  layer_run_t *r = x->r;
  if (x->v <= L_MLP)
    return loom_bench_moe_mlp_form(r->plan, r->x, r->ids, r->w, r->T, r->gate_up, r->down, r->out, g_form[x->v], s);
  if (x->v == L_COMM) {
    LAYER_TRY(loom_moe_dispatch(r->plan, r->x, r->ids, r->T, s));
    return loom_moe_combine(r->plan, r->info.recv, r->w, r->out, s);
  }
  if (r->info.local_experts == 0) return LOOM_SUCCESS;
  /* loom-grouped-gemms: what loom_moe_mlp runs (the SwiGLU epilogue, then
   * the down GEMM); the forced tiles: both plain (act's data read as h: the
   * same FLOPs) */
  const int tile = x->v >= L_TILE0, bm = tile ? g_tile[x->v - L_TILE0][0] : 0, bn = tile ? g_tile[x->v - L_TILE0][1] : 0;
  LAYER_TRY(layer_gemm(r, 2 * (int64_t)r->F, r->H, r->info.recv, r->gate_up, r->act, bm, bn, !tile, s));
  return layer_gemm(r, r->H, r->F, r->act, r->down, r->y, bm, bn, 0, s);
}

/* The plan and every buffer, inputs random; the rows this rank receives
 * checked against the routing's count. */
static loom_result_t layer_setup(layer_run_t *r, loom_comm_t comm, const moe_model_t *mm, const int32_t *ids,
                                 const float *w, int64_t recv_total, int me, cudaStream_t s) {
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = mm->hidden, d.experts = mm->experts, d.topk = mm->topk, d.max_tokens = r->T, d.ffn = mm->ffn;
  loom_result_t rr = loom_plan_moe(comm, &d, &r->plan); /* collective: every rank, whatever happened before */
  r->info = (loom_moe_plan_info_t)LOOM_MOE_PLAN_INFO_INIT;
  LAYER_TRY(rr);
  LAYER_TRY(loom_moe_plan_info(r->plan, &r->info));
  if (!ids || !w) return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "routing"); /* moe_route_draw failed */
  const size_t H = (size_t)mm->hidden, F = (size_t)mm->ffn, n = (size_t)r->info.local_experts, T = (size_t)r->T;
  const size_t R = (size_t)r->info.max_recv_rows, K = (size_t)mm->topk;
  const size_t bytes[8] = {T * H * 2, T * H * 2, n * 2 * F * H * 2 + 16, n * H * F * 2 + 16, R * 2 * F * 2 + 16,
                           R * H * 2 + 16, T * K * 4 + 4, T * K * 4 + 4};
  void **ptr[8] = {&r->x, &r->out, &r->gate_up, &r->down, &r->act, &r->y, (void **)&r->ids, (void **)&r->w};
  for (int i = 0; i < 8; ++i) {
    const cudaError_t e = cudaMalloc(ptr[i], bytes[i] > 0 ? bytes[i] : 16);
    if (e != cudaSuccess) return loom_bench_cuda_fail((int)e, "layer buffers", __FILE__, __LINE__);
  }
  if (cudaMemcpy(r->ids, ids, T * K * 4, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(r->w, w, T * K * 4, cudaMemcpyHostToDevice) != cudaSuccess)
    return loom_bench_fail(LOOM_ERR_CUDA, "routing upload");
  LAYER_TRY(loom_bench_fill_random(r->x, LOOM_BF16, T * H, MOE_SEED + (uint64_t)me, 1.0));
  LAYER_TRY(loom_bench_fill_random(r->gate_up, LOOM_BF16, n * 2 * F * H, MOE_SEED + 11 + (uint64_t)me,
                                        1.0 / sqrt((double)H)));
  LAYER_TRY(loom_bench_fill_random(r->down, LOOM_BF16, n * H * F, MOE_SEED + 13 + (uint64_t)me,
                                        1.0 / sqrt((double)F)));
  LAYER_TRY(loom_moe_mlp(r->plan, r->x, r->ids, r->w, r->T, r->gate_up, r->down, r->out, s));
  LAYER_TRY(loom_moe_mlp_tune(r->plan, r->x, r->ids, r->w, r->T, r->gate_up, r->down, r->out, s));
  LAYER_TRY(loom_bench_moe_mlp_choice(r->plan, r->T, r->choice, sizeof r->choice));
  int64_t got = -1;
  cudaError_t e = cudaMemcpyAsync(&got, r->info.expert_offsets + r->info.local_experts, sizeof got,
                                  cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  if (e != cudaSuccess) return loom_bench_cuda_fail((int)e, "expert_offsets", __FILE__, __LINE__);
  if (r->info.local_experts > 0 && got != recv_total)
    return loom_bench_fail(LOOM_ERR_INTERNAL, "rank %d received %lld rows, the routing says %lld", me, (long long)got,
                           (long long)recv_total);
  return LOOM_SUCCESS;
}

static void layer_free(layer_run_t *r) {
  if (r->plan) (void)loom_plan_destroy(r->plan);
  cudaFree(r->x), cudaFree(r->out), cudaFree(r->gate_up), cudaFree(r->down), cudaFree(r->act), cudaFree(r->y);
  cudaFree(r->ids), cudaFree(r->w);
}

/* Rank 0's rows of one shape. */
static void layer_rows(const moe_args_t *a, loom_bench_table_t *t, const moe_model_t *mm, int64_t T,
                       loom_route_kind_t kind, int W, int64_t rows_here, const layer_run_t *r,
                       const loom_bench_time_t *tm) {
  const double gemm_flops = 6.0 * (double)rows_here * mm->hidden * mm->ffn;
  for (int v = 0; v < L_COUNT; ++v) {
    loom_bench_row_t *row = moe_row(t, "moe_layer", g_lname[v], mm, T, kind, W);
    if (!row) return;
    row->k = mm->ffn;
    row->fused_us = tm[v].median_us, row->min_us = tm[v].min_us, row->max_us = tm[v].max_us;
    row->host_us = tm[v].host_us;
    row->comm_us = tm[L_COMM].median_us;
    snprintf(row->note, sizeof row->note,
             "E %d top-%d H %d F %d; rank 0: %lld rows, GEMMs %.0f TFLOP/s; model tile %dx%d; "
             "unfused/(gemms+comm) %.2f, unfused/fused %.3f, /fused-all %.3f%s%.31s",
             mm->experts, mm->topk, mm->hidden, mm->ffn, (long long)rows_here, gemm_flops / (tm[v].median_us * 1e6),
             r->bm, r->bn, tm[L_MLP].median_us / (tm[L_GEMMS].median_us + tm[L_COMM].median_us),
             tm[L_MLP].median_us / tm[L_FUSED].median_us, tm[L_MLP].median_us / tm[L_ALL].median_us,
             v != L_AUTO ? "" : "; tuned ", v != L_AUTO ? "" : r->choice);
    if (v <= L_GEMMS) {
      loom_bench_shape_t ps;
      moe_pair_shape(mm, T, kind, W, 1, &ps);
      (void)loom_bench_row_pair(row, a->peer_json, v != L_GEMMS ? "layer" : "experts", &ps, 0);
    }
  }
  printf("# moe layer %-30s auto %9.1f (%s) fused %9.1f fused-all %9.1f unfused %9.1f  gemms %9.1f (%dx%d)  dispatch+combine %8.1f  "
         "tiles 64x128 %.1f 64x256 %.1f 128x128 %.1f 128x256 %.1f us\n",
         t->rows[t->n - 1]->shape, tm[L_AUTO].median_us, r->choice,
         tm[L_FUSED].median_us, tm[L_ALL].median_us, tm[L_MLP].median_us, tm[L_GEMMS].median_us, r->bm, r->bn, tm[L_COMM].median_us,
         tm[L_TILE0].median_us, tm[L_TILE0 + 1].median_us, tm[L_TILE0 + 2].median_us, tm[L_TILE0 + 3].median_us);
  fflush(stdout);
}

int moe_layer_shape(moe_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, loom_bench_table_t *t,
                    const moe_model_t *mm, int64_t T, loom_route_kind_t kind) {
  const int W = ctx->size, me = ctx->rank;
  layer_run_t r;
  memset(&r, 0, sizeof r);
  r.T = T, r.H = mm->hidden, r.F = mm->ffn, r.topk = mm->topk;
  moe_route_t rt;
  loom_result_t rr = moe_route_draw(mm, T, kind, W, me, &rt);
  int64_t recv_total = 0, rows0 = 0;
  for (int p = 0; p < W; ++p) recv_total += rt.pair[p][me], rows0 += rt.pair[p][0];
  const loom_result_t sr = layer_setup(&r, comm, mm, rt.ids, rt.w, recv_total, me, s); /* collective plan inside */
  if (rr == LOOM_SUCCESS) rr = sr;
  layer_var_t vars[L_COUNT];
  void *args[L_COUNT];
  for (int v = 0; v < L_COUNT; ++v) vars[v].r = &r, vars[v].v = v, args[v] = &vars[v];
  loom_bench_time_t tm[L_COUNT];
  const int failed = moe_time_side_by_side(ctx, comm, s, a, rr, "moe layer", mm, T, L_COUNT, layer_op, args, tm);
  if (me == 0 && !failed) layer_rows(a, t, mm, T, kind, W, rows0, &r, tm);
  layer_free(&r);
  moe_route_free(&rt);
  return failed ? 1 : 0;
}

int moe_layer_finish(const moe_args_t *a, loom_bench_table_t *t, int world, int failures) {
  loom_bench_note(t, "bf16; time = median of the slowest rank; comm(us) = loom-dispatch+combine; loom-mlp-unfused = "
                     "loom_moe_mlp's unfused sequence (dispatch, grouped GEMM + SwiGLU, grouped GEMM, combine); "
                     "loom-mlp-fused = its fused form (the down GEMM's epilogue stores each row into its token's "
                     "rank; the combine only reduces), both with the model's tiles; loom-auto = loom_moe_mlp after "
                     "loom_moe_mlp_tune on the shape (its note names the tuned form and tiles: path 1 fused, 2 "
                     "unfused; up = the gate/up GEMM's rows per tile; down = the down GEMM's tile)");
  loom_bench_note(t, "loom-grouped-gemms: loom_moe_mlp's two grouped GEMMs alone on the dispatched rows (the SwiGLU "
                     "epilogue's, the down projection's; no communication); grouped-BMxBN: both plain with that tile; "
                     "TFLOP/s = 6 x rows x H x F of rank 0 over the row's time");
  if (a->peer_json[0])
    loom_bench_note(t, "peer(us): PyTorch's layer on the loom_moe_mlp rows, its grouped GEMMs + SwiGLU on loom-grouped-gemms "
                       "(bench/peers/moe_torch.py --layer: all_to_all_single with host split sizes, "
                       "torch._grouped_mm; eager): %.60s", a->peer_json);
  else
    loom_bench_note(t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
  char title[160];
  snprintf(title, sizeof title, "loom-bench moe --layer: the expert MLP layer, world %d, median of %d reps", world,
           a->o.reps);
  return loom_bench_finish("moe_layer", t, &a->o, world, title, failures);
}
