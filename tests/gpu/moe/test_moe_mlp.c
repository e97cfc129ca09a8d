/*
 * test_moe_mlp.c - GPU tests of the whole expert MLP layer (loom_moe_mlp:
 * dispatch, grouped gate/up GEMM, SwiGLU, grouped down GEMM, combine) on W
 * ranks against the CPU reference's layer computed per token in double
 * (loom_ref_moe_layer_direct: no schedule, drops counted in global order).
 *  - routings: uniform, Zipf, every token to the same experts (one rank
 *    receives everything), one expert (ranks that own none), top-1 to top-8,
 *    a rank without tokens, token counts that divide nothing, a capacity;
 *    bf16 and fp16; several rounds per plan with fresh routings and rows;
 *  - bound per element: 0.03 of the row's rms + 1/128 of the value (act, h
 *    and y are rounded to the dtype between the steps; a wrong expert, a
 *    lost row or a wrong weight errs by O(rms));
 *  - the three forms (desc.mlp_path): every call runs the fused form (the
 *    combine in the down GEMM's epilogue) on one plan, again on a second
 *    plan whose ranks run unfused, fused-all, fused, unfused, ... (at W = 1
 *    unfused alone, at W = 2 unfused beside fused-all), and on a third
 *    whose ranks all run fused-all (the dispatch in the gate/up GEMM's
 *    prologue too): the outputs bit-identical;
 *  - a CUDA graph of one call, replayed with alternating routings: each
 *    replay bit-identical to the eager call of its routing (each form);
 *  - loom_moe_mlp_tune: a form recorded, its output the layer's, and the
 *    AUTO call after it the same bits;
 *  - a peer that never calls: the fused-all call returns with
 *    LOOM_ERR_TIMEOUT naming the wait.
 * Weights: every rank draws every expert's (the case's seed) and uploads
 * its own experts in loom's layout ([out, in] per expert, gate rows first).
 * Tests of the layer skip without loom's sm90 GEMM.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "ops/moe/moe_schedule.h"
#include "ref/moe_ref.h"
#include "ref/ref.h"
#include "support/launch.h"
#include "support/moe_routing.h"

#define LAUNCH_TIMEOUT_S 300
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)
#define MAXW 8

typedef struct mlp_case {
  int experts, topk, hidden, ffn;
  int64_t tokens;   /* rank r has tokens - 29 r (at least 0) */
  int64_t capacity;
  loom_dtype_t dtype;
  loom_route_kind_t route;
  int rounds;
  int empty_rank;   /* 1: the last rank passes no tokens */
} mlp_case_t;

/* Every expert's weights in double (the reference's [E, H, F] / [E, F, H])
 * and this rank's experts in loom's layout and dtype. */
typedef struct mlp_weights {
  double *wg, *wu, *wd;
  void *gate_up, *down; /* host, [n, 2F, H] and [n, H, F] */
  size_t gu_bytes, d_bytes;
} mlp_weights_t;

static void weights_free(mlp_weights_t *w) {
  free(w->wg), free(w->wu), free(w->wd), free(w->gate_up), free(w->down);
  memset(w, 0, sizeof *w);
}

/* The weights of every expert, rounded to the dtype; first..first+n in loom's layout. */
static int weights_make(const mlp_case_t *c, int first, int n, mlp_weights_t *w) {
  const size_t E = (size_t)c->experts, H = (size_t)c->hidden, F = (size_t)c->ffn, es = loom_dtype_size(c->dtype);
  memset(w, 0, sizeof *w);
  w->wg = (double *)malloc(E * H * F * sizeof(double)), w->wu = (double *)malloc(E * H * F * sizeof(double));
  w->wd = (double *)malloc(E * F * H * sizeof(double));
  w->gu_bytes = (size_t)n * 2 * F * H * es, w->d_bytes = (size_t)n * H * F * es;
  w->gate_up = malloc(w->gu_bytes + 16), w->down = malloc(w->d_bytes + 16);
  void *tmp = malloc(E * H * F * es);
  if (!w->wg || !w->wu || !w->wd || !w->gate_up || !w->down || !tmp) {
    free(tmp);
    return -1;
  }
  double *dst[3] = {w->wg, w->wu, w->wd};
  const double scale[3] = {1.0 / sqrt((double)H), 1.0 / sqrt((double)H), 1.0 / sqrt((double)F)};
  for (int m = 0; m < 3; ++m) {
    loom_ref_fill_random(c->dtype, tmp, E * H * F, loom_route_mix(loom_test_seed() ^ (0x77ull << (8 * m))) | 1u,
                         scale[m]);
    for (size_t i = 0; i < E * H * F; ++i) dst[m][i] = loom_ref_load(c->dtype, tmp, i);
  }
  free(tmp);
  for (int l = 0; l < n; ++l) {
    const size_t e = (size_t)(first + l);
    for (size_t f = 0; f < F; ++f)
      for (size_t h = 0; h < H; ++h) {
        const size_t gu = (size_t)l * 2 * F * H;
        loom_ref_store(c->dtype, w->gate_up, gu + f * H + h, w->wg[e * H * F + h * F + f]);
        loom_ref_store(c->dtype, w->gate_up, gu + (F + f) * H + h, w->wu[e * H * F + h * F + f]);
        loom_ref_store(c->dtype, w->down, (size_t)l * H * F + h * F + f, w->wd[e * F * H + f * H + h]);
      }
  }
  return 0;
}

typedef struct mlp_inputs {
  int64_t T[MAXW];
  void *x[MAXW];
  double *xd[MAXW], *wd[MAXW], *out[MAXW];
  int32_t *ids[MAXW];
  float *w[MAXW];
} mlp_inputs_t;

static void inputs_free(mlp_inputs_t *in, int W) {
  for (int r = 0; r < W; ++r)
    free(in->x[r]), free(in->xd[r]), free(in->wd[r]), free(in->out[r]), free(in->ids[r]), free(in->w[r]);
  memset(in, 0, sizeof *in);
}

/* Every rank's rows and routing for `round`, and the reference layer's outputs. */
static int inputs_make(const mlp_case_t *c, int W, int round, const mlp_weights_t *wt, mlp_inputs_t *in) {
  memset(in, 0, sizeof *in);
  const size_t es = loom_dtype_size(c->dtype), H = (size_t)c->hidden, K = (size_t)c->topk;
  for (int r = 0; r < W; ++r) {
    int64_t T = c->empty_rank && r == W - 1 ? 0 : c->tokens - 29 * r;
    in->T[r] = T = T > 0 ? T : 0;
    in->x[r] = malloc((size_t)T * H * es + 16), in->xd[r] = (double *)malloc((size_t)T * H * sizeof(double) + 8);
    in->out[r] = (double *)malloc((size_t)T * H * sizeof(double) + 8);
    in->ids[r] = (int32_t *)malloc((size_t)T * K * sizeof(int32_t) + 4);
    in->w[r] = (float *)malloc((size_t)T * K * sizeof(float) + 4), in->wd[r] = (double *)malloc((size_t)T * K * 8 + 8);
    if (!in->x[r] || !in->xd[r] || !in->out[r] || !in->ids[r] || !in->w[r] || !in->wd[r]) return -1;
    loom_ref_fill_random(c->dtype, in->x[r], (size_t)T * H,
                         loom_route_mix(loom_test_seed() + 977 * (uint64_t)round + (uint64_t)r + 5) | 1u, 1.0);
    for (size_t i = 0; i < (size_t)T * H; ++i) in->xd[r][i] = loom_ref_load(c->dtype, in->x[r], i);
    if (loom_route_make(c->route, loom_test_seed() ^ 0x6d6c70ull, r, round, T, c->experts, c->topk, 1.2, in->ids[r],
                        in->w[r]))
      return -1;
    for (size_t i = 0; i < (size_t)T * K; ++i) in->wd[r][i] = in->w[r][i];
  }
  const loom_ref_moe_t m = {W, c->experts, c->topk, c->hidden, c->ffn, c->capacity, in->T,
                            (const double *const *)in->xd, (const int32_t *const *)in->ids,
                            (const double *const *)in->wd, wt->wg, wt->wu, wt->wd};
  return loom_ref_moe_layer_direct(&m, in->out);
}

/* Elements of out [T, H] (dtype) outside the bound around want. */
static int64_t count_far(const mlp_case_t *c, const void *out, const double *want, int64_t T, int me, int round) {
  const int H = c->hidden;
  int64_t far = 0;
  for (int64_t t = 0; t < T; ++t) {
    double ss = 0;
    for (int h = 0; h < H; ++h) ss += want[t * H + h] * want[t * H + h];
    const double rms = sqrt(ss / H);
    for (int h = 0; h < H; ++h) {
      const double got = loom_ref_load(c->dtype, out, (size_t)(t * H + h)), w = want[t * H + h];
      if (!(fabs(got - w) <= 0.03 * rms + fabs(w) / 128)) {
        if (far < 3)
          fprintf(stderr, "rank %d round %d: out[%lld][%d] = %g, reference %g (row rms %g)\n", me, round, (long long)t,
                  h, got, w, rms);
        ++far;
      }
    }
  }
  return far;
}

typedef struct mlp_dev {
  void *x, *out, *gate_up, *down;
  int32_t *ids;
  float *w;
} mlp_dev_t;

static loom_result_t upload(const mlp_case_t *c, const mlp_inputs_t *in, int me, const mlp_dev_t *d, cudaStream_t s) {
  const size_t T = (size_t)in->T[me], K = (size_t)c->topk, row = (size_t)c->hidden * loom_dtype_size(c->dtype);
  if (cudaMemcpyAsync(d->x, in->x[me], T * row, cudaMemcpyHostToDevice, s) != cudaSuccess ||
      cudaMemcpyAsync(d->ids, in->ids[me], T * K * sizeof(int32_t), cudaMemcpyHostToDevice, s) != cudaSuccess ||
      cudaMemcpyAsync(d->w, in->w[me], T * K * sizeof(float), cudaMemcpyHostToDevice, s) != cudaSuccess ||
      cudaMemsetAsync(d->out, 0xff, T * row + 16, s) != cudaSuccess)
    return LOOM_ERR_CUDA;
  return LOOM_SUCCESS;
}

/* Everything a case runs on: the plan (desc from c), its info, a stream,
 * the weights (host) and the device buffers for up to c->tokens tokens. */
typedef struct mlp_env {
  loom_plan_t plan, mixed, all; /* the form asked for; ranks' forms mixed (mlp_open); every rank fused-all */
  loom_moe_plan_info_t info;
  cudaStream_t s;
  mlp_weights_t wt;
  mlp_dev_t dv;
} mlp_env_t;

static void mlp_close(mlp_env_t *e) {
  if (e->s) cudaStreamSynchronize(e->s);
  if (e->plan) CHECK_RESULT(loom_plan_destroy(e->plan), LOOM_SUCCESS);
  if (e->mixed) CHECK_RESULT(loom_plan_destroy(e->mixed), LOOM_SUCCESS);
  if (e->all) CHECK_RESULT(loom_plan_destroy(e->all), LOOM_SUCCESS);
  cudaFree(e->dv.x), cudaFree(e->dv.out), cudaFree(e->dv.ids), cudaFree(e->dv.w), cudaFree(e->dv.gate_up);
  cudaFree(e->dv.down);
  if (e->s) cudaStreamDestroy(e->s);
  weights_free(&e->wt);
  memset(e, 0, sizeof *e);
}

/* 0, or -1 after a failed check (mlp_close cleans up either way). path:
 * the form of e->plan; me >= 0: e->mixed and e->all too (rank me). */
static int mlp_open(loom_comm_t comm, const mlp_case_t *c, loom_moe_mlp_path_t path, int me, mlp_env_t *e) {
  memset(e, 0, sizeof *e);
  const size_t row = (size_t)c->hidden * loom_dtype_size(c->dtype), tmax = (size_t)c->tokens;
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = c->hidden, d.experts = c->experts, d.topk = c->topk, d.max_tokens = c->tokens;
  d.capacity = c->capacity, d.dtype = c->dtype, d.ffn = c->ffn, d.mlp_path = path;
  mlp_dev_t *dv = &e->dv;
  CHECK_LOOM_OR(loom_plan_moe(comm, &d, &e->plan), return -1);
  /* rank r's form in the mixed plan: W = 2 mixes the unfused sequence with
   * the dispatch in the GEMM's prologue, W >= 3 all three */
  static const loom_moe_mlp_path_t mix[3] = {LOOM_MOE_MLP_UNFUSED, LOOM_MOE_MLP_FUSED_ALL, LOOM_MOE_MLP_FUSED};
  d.mlp_path = mix[(me < 0 ? 0 : me) % 3];
  if (me >= 0) CHECK_LOOM_OR(loom_plan_moe(comm, &d, &e->mixed), return -1);
  d.mlp_path = LOOM_MOE_MLP_FUSED_ALL;
  if (me >= 0) CHECK_LOOM_OR(loom_plan_moe(comm, &d, &e->all), return -1);
  e->info = (loom_moe_plan_info_t)LOOM_MOE_PLAN_INFO_INIT;
  CHECK_LOOM_OR(loom_moe_plan_info(e->plan, &e->info), return -1);
  CHECK_CUDA_OR(cudaStreamCreateWithFlags(&e->s, cudaStreamNonBlocking), return -1);
  if (weights_make(c, e->info.first_expert, e->info.local_experts, &e->wt) != 0) {
    CHECK(!"weights: out of host memory");
    return -1;
  }
  CHECK_CUDA_OR(cudaMalloc(&dv->x, tmax * row + 16), return -1);
  CHECK_CUDA_OR(cudaMalloc(&dv->out, tmax * row + 16), return -1);
  CHECK_CUDA_OR(cudaMalloc((void **)&dv->ids, tmax * c->topk * sizeof(int32_t) + 4), return -1);
  CHECK_CUDA_OR(cudaMalloc((void **)&dv->w, tmax * c->topk * sizeof(float) + 4), return -1);
  if (e->info.local_experts == 0) return 0;
  CHECK_CUDA_OR(cudaMalloc(&dv->gate_up, e->wt.gu_bytes), return -1);
  CHECK_CUDA_OR(cudaMalloc(&dv->down, e->wt.d_bytes), return -1);
  /* on the calls' stream, waited for (a pageable cudaMemcpy may return before its data lands, and the legacy
   * stream is not ordered with e->s) */
  CHECK_CUDA_OR(cudaMemcpyAsync(dv->gate_up, e->wt.gate_up, e->wt.gu_bytes, cudaMemcpyHostToDevice, e->s), return -1);
  CHECK_CUDA_OR(cudaMemcpyAsync(dv->down, e->wt.down, e->wt.d_bytes, cudaMemcpyHostToDevice, e->s), return -1);
  CHECK_CUDA_OR(cudaStreamSynchronize(e->s), return -1);
  return 0;
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const mlp_case_t *c) {
  const int fails0 = loom_test_failures, W = ctx->size, me = ctx->rank;
  const size_t row = (size_t)c->hidden * loom_dtype_size(c->dtype);
  mlp_env_t e;
  memset(&e, 0, sizeof e);
  mlp_inputs_t in;
  memset(&in, 0, sizeof in);
  void *hout = malloc((size_t)c->tokens * row + 16), *hmix = malloc((size_t)c->tokens * row + 16);
  CHECK(W <= MAXW && hout && hmix);
  if (!hout || !hmix || mlp_open(comm, c, LOOM_MOE_MLP_FUSED, me, &e) != 0) goto out;
  for (int round = 0; round < c->rounds && loom_test_failures == fails0; ++round) {
    CHECK(inputs_make(c, W, round, &e.wt, &in) == 0);
    const int64_t T = in.T[me];
    LOOM_OK(upload(c, &in, me, &e.dv, e.s));
    CUDA_OK(cudaStreamSynchronize(e.s));
    loom_launch_step_time(me, round, "uploaded");
    CHECK(loom_launch_world_sync(ctx)); /* every rank's (pageable) uploads done before any calls */
    loom_launch_step_time(me, round, "met");
    LOOM_OK(loom_moe_mlp(e.plan, e.dv.x, e.dv.ids, e.dv.w, T, e.dv.gate_up, e.dv.down, e.dv.out, e.s));
    loom_launch_step_time(me, round, "plan queued");
    CUDA_OK(loom_launch_download(hout, e.dv.out, (size_t)T * row, e.s));
    loom_launch_step_time(me, round, "plan downloaded");
    CUDA_OK(cudaMemsetAsync(e.dv.out, 0xff, (size_t)T * row + 16, e.s));
    LOOM_OK(loom_moe_mlp(e.mixed, e.dv.x, e.dv.ids, e.dv.w, T, e.dv.gate_up, e.dv.down, e.dv.out, e.s));
    loom_launch_step_time(me, round, "mixed queued");
    CUDA_OK(loom_launch_download(hmix, e.dv.out, (size_t)T * row, e.s));
    loom_launch_step_time(me, round, "mixed downloaded");
    CHECK_EQ_INT(count_far(c, hout, in.out[me], T, me, round), 0);
    CHECK_EQ_INT(memcmp(hout, hmix, (size_t)T * row), 0);
    CUDA_OK(cudaMemsetAsync(e.dv.out, 0xff, (size_t)T * row + 16, e.s));
    LOOM_OK(loom_moe_mlp(e.all, e.dv.x, e.dv.ids, e.dv.w, T, e.dv.gate_up, e.dv.down, e.dv.out, e.s));
    loom_launch_step_time(me, round, "all queued");
    CUDA_OK(loom_launch_download(hmix, e.dv.out, (size_t)T * row, e.s));
    loom_launch_step_time(me, round, "all downloaded");
    CHECK_EQ_INT(memcmp(hout, hmix, (size_t)T * row), 0);
    inputs_free(&in, W);
  }
  LOOM_OK(loom_comm_get_async_error(comm));
out:
  inputs_free(&in, W);
  mlp_close(&e);
  free(hout), free(hmix);
  return loom_test_failures != fails0;
}

static int run_case_v(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *k) {
  return run_case(ctx, comm, (const mlp_case_t *)k);
}

#define N(a) ((int)(sizeof a / sizeof *a))

/* experts, topk, hidden, ffn, tokens, capacity, dtype, route, rounds, empty_rank */
static const mlp_case_t g_cases[] = {
    {8, 2, 256, 512, 300, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 2, 0},  /* Mixtral-like, scaled down */
    {32, 8, 128, 192, 133, 0, LOOM_BF16, LOOM_ROUTE_ZIPF, 2, 0},    /* top-8, hot experts and empty ones */
    {8, 4, 128, 128, 190, 0, LOOM_BF16, LOOM_ROUTE_SKEW, 2, 0},     /* every token to experts 0..3 */
    {1, 1, 64, 64, 100, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 2, 0},    /* one expert: other ranks own none */
    {16, 1, 128, 256, 129, 0, LOOM_FP16, LOOM_ROUTE_UNIFORM, 2, 1}, /* fp16, top-1, a rank without tokens */
    {8, 2, 128, 256, 300, 50, LOOM_BF16, LOOM_ROUTE_UNIFORM, 2, 0}, /* capacity 50: rows dropped */
};

/* Checked in a child (the parent forks the ranks and stays CUDA-free). */
static int sm90_gemm_or_skip(void) {
  if (loom_launch_gpu_cc() == 90) return 1;
  loom_test_skip("the expert GEMMs need loom's sm90 kernel (compute capability 9.0)");
  return 0;
}

static void run_suite(int W) {
  const loom_case_suite_t su = {g_cases, sizeof *g_cases, N(g_cases), 30000, run_case_v, NULL};
  loom_case_suite_run(W, LAUNCH_TIMEOUT_S, &su);
}

/* A suite of `n` cases as W ranks on one GPU (a loom world). */
static void run_world(int W, loom_case_fn run, const void *cases, size_t stride, int n) {
  const loom_case_suite_t su = {cases, stride, n, 30000, run, NULL};
  if (loom_test_gpus(1) && sm90_gemm_or_skip()) loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}

LOOM_TEST(gpu_moe_mlp_matches_reference_w1) {
  if (loom_test_gpus(1) && sm90_gemm_or_skip()) run_suite(1);
}
LOOM_TEST(gpu_moe_mlp_matches_reference_w2) {
  if (loom_test_gpus(2) && sm90_gemm_or_skip()) run_suite(2);
}
LOOM_WORLD_TESTS(gpu_world_moe_mlp_matches_reference, run_world, run_case_v, g_cases, sizeof *g_cases, N(g_cases))

/* One call captured in a graph, replayed 40 times alternating two routings
 * (inputs copied in before each replay): each replay bit-identical to the
 * eager call of its routing. */
#define GRAPH_ROUTES 2
static int run_graph(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *form) {
  const loom_moe_mlp_path_t path = *(const loom_moe_mlp_path_t *)form;
  const mlp_case_t c = {16, 4, 128, 256, 200, 0, LOOM_BF16, LOOM_ROUTE_ZIPF, GRAPH_ROUTES, 0};
  const int fails0 = loom_test_failures, W = ctx->size, me = ctx->rank;
  const size_t row = (size_t)c.hidden * 2;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  mlp_env_t e;
  memset(&e, 0, sizeof e);
  mlp_inputs_t in[GRAPH_ROUTES];
  memset(in, 0, sizeof in);
  void *eager[GRAPH_ROUTES] = {NULL, NULL}, *got = malloc((size_t)c.tokens * row);
  CHECK(got != NULL);
  if (!got || mlp_open(comm, &c, path, -1, &e) != 0) goto out;
  const mlp_dev_t *dv = &e.dv;
  for (int q = 0; q < GRAPH_ROUTES; ++q) {
    CHECK(inputs_make(&c, W, q, &e.wt, &in[q]) == 0 && (eager[q] = malloc((size_t)c.tokens * row)) != NULL);
    if (!eager[q]) goto out;
    LOOM_OK(upload(&c, &in[q], me, dv, e.s));
    CHECK(loom_launch_world_sync(ctx)); /* every rank's (pageable) uploads done before any calls */
    LOOM_OK(loom_moe_mlp(e.plan, dv->x, dv->ids, dv->w, in[q].T[me], dv->gate_up, dv->down, dv->out, e.s));
    CUDA_OK(loom_launch_download(eager[q], dv->out, (size_t)in[q].T[me] * row, e.s));
    CHECK_EQ_INT(count_far(&c, eager[q], in[q].out[me], in[q].T[me], me, q), 0);
  }
  /* both routings have the same token count: one captured call serves both */
  CUDA_OK(cudaStreamBeginCapture(e.s, cudaStreamCaptureModeThreadLocal));
  {
    const loom_result_t r =
        loom_moe_mlp(e.plan, dv->x, dv->ids, dv->w, in[0].T[me], dv->gate_up, dv->down, dv->out, e.s);
    CUDA_OK(cudaStreamEndCapture(e.s, &graph));
    LOOM_OK(r);
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  int64_t differ = 0;
  for (int i = 0; i < 40; ++i) {
    const int q = i % GRAPH_ROUTES;
    LOOM_OK(upload(&c, &in[q], me, dv, e.s));
    CHECK(loom_launch_world_sync(ctx));
    CUDA_OK(cudaGraphLaunch(exec, e.s));
    CUDA_OK(loom_launch_download(got, dv->out, (size_t)in[q].T[me] * row, e.s));
    differ += memcmp(got, eager[q], (size_t)in[q].T[me] * row) != 0;
  }
  CHECK_EQ_INT(differ, 0);
  LOOM_OK(loom_comm_get_async_error(comm));
out:
  if (e.s) cudaStreamSynchronize(e.s);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  mlp_close(&e);
  for (int q = 0; q < GRAPH_ROUTES; ++q) inputs_free(&in[q], W), free(eager[q]);
  free(got);
  return loom_test_failures != fails0;
}

static const loom_moe_mlp_path_t g_forms[] = {LOOM_MOE_MLP_FUSED, LOOM_MOE_MLP_UNFUSED, LOOM_MOE_MLP_FUSED_ALL};

LOOM_TEST(gpu_moe_mlp_graph_replays_w2) {
  const loom_case_suite_t su = {g_forms, sizeof *g_forms, N(g_forms), 30000, run_graph, NULL};
  if (loom_test_gpus(2) && sm90_gemm_or_skip()) loom_case_suite_run(2, LAUNCH_TIMEOUT_S, &su);
}
LOOM_WORLD_TESTS(gpu_world_moe_mlp_graph_replays, run_world, run_graph, g_forms, sizeof *g_forms, N(g_forms))

/* loom_moe_mlp_tune on a case: it records a form for the call's tokens
 * (loom_moe_mlp_path names it), leaves the layer's output in out, and the
 * AUTO call after it gives the same bits. */
static int run_tune(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *unused) {
  (void)unused;
  const mlp_case_t c = {8, 2, 256, 512, 300, 0, LOOM_BF16, LOOM_ROUTE_ZIPF, 1, 0};
  const int fails0 = loom_test_failures, W = ctx->size, me = ctx->rank;
  const size_t row = (size_t)c.hidden * 2;
  mlp_env_t e;
  memset(&e, 0, sizeof e);
  mlp_inputs_t in;
  memset(&in, 0, sizeof in);
  void *tuned = malloc((size_t)c.tokens * row + 16), *again = malloc((size_t)c.tokens * row + 16);
  CHECK(tuned && again);
  if (!tuned || !again || mlp_open(comm, &c, LOOM_MOE_MLP_AUTO, -1, &e) != 0) goto out;
  CHECK(inputs_make(&c, W, 0, &e.wt, &in) == 0);
  const int64_t T = in.T[me];
  const mlp_dev_t *dv = &e.dv;
  LOOM_OK(upload(&c, &in, me, dv, e.s));
  LOOM_OK(loom_moe_mlp_tune(e.plan, dv->x, dv->ids, dv->w, T, dv->gate_up, dv->down, dv->out, e.s));
  loom_moe_mlp_path_t p = LOOM_MOE_MLP_AUTO;
  LOOM_OK(loom_moe_mlp_path(e.plan, T, &p));
  CHECK(p == LOOM_MOE_MLP_FUSED || p == LOOM_MOE_MLP_UNFUSED || p == LOOM_MOE_MLP_FUSED_ALL);
  fprintf(stderr, "rank %d: tuned form %s for %lld tokens\n", me,
          p == LOOM_MOE_MLP_FUSED ? "fused" : p == LOOM_MOE_MLP_UNFUSED ? "unfused" : "fused-all", (long long)T);
  CUDA_OK(loom_launch_download(tuned, dv->out, (size_t)T * row, e.s));
  CUDA_OK(cudaMemsetAsync(dv->out, 0xff, (size_t)T * row + 16, e.s));
  LOOM_OK(loom_moe_mlp(e.plan, dv->x, dv->ids, dv->w, T, dv->gate_up, dv->down, dv->out, e.s));
  CUDA_OK(loom_launch_download(again, dv->out, (size_t)T * row, e.s));
  CHECK_EQ_INT(count_far(&c, tuned, in.out[me], T, me, 0), 0);
  CHECK_EQ_INT(memcmp(tuned, again, (size_t)T * row), 0);
  LOOM_OK(loom_comm_get_async_error(comm));
out:
  inputs_free(&in, W);
  mlp_close(&e);
  free(tuned), free(again);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_moe_mlp_tune_w2) {
  static const int one = 0;
  const loom_case_suite_t su = {&one, sizeof one, 1, 30000, run_tune, NULL};
  if (loom_test_gpus(2) && sm90_gemm_or_skip()) loom_case_suite_run(2, LAUNCH_TIMEOUT_S, &su);
}

/* Rank 1 never calls: rank 0's fused-all call (the dispatch and the
 * gate/up GEMM beside it, which waits for the dispatch's layout and for
 * each tile's rows) returns, the wait that expired named, and the next
 * call reports it. Nothing hangs. */
static int rank_absent_peer(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const mlp_case_t c = {8, 2, 256, 512, 64, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 1, 0};
  const int fails0 = loom_test_failures, me = ctx->rank;
  loom_comm_t comm = NULL;
  mlp_env_t e;
  memset(&e, 0, sizeof e);
  mlp_inputs_t in;
  memset(&in, 0, sizeof in);
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  if (mlp_open(comm, &c, LOOM_MOE_MLP_FUSED_ALL, -1, &e) != 0) goto out;
  if (me == 0) {
    CHECK(inputs_make(&c, ctx->size, 0, &e.wt, &in) == 0);
    const int64_t T = in.T[me];
    LOOM_OK(upload(&c, &in, me, &e.dv, e.s));
    LOOM_OK(loom_moe_mlp(e.plan, e.dv.x, e.dv.ids, e.dv.w, T, e.dv.gate_up, e.dv.down, e.dv.out, e.s));
    CUDA_OK(cudaStreamSynchronize(e.s)); /* returns: every wait is bounded */
    CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
    CHECK_MSG("MoE dispatch");
    printf("  rank 0: %s\n", loom_last_error());
    CHECK_RESULT(loom_moe_mlp(e.plan, e.dv.x, e.dv.ids, e.dv.w, T, e.dv.gate_up, e.dv.down, e.dv.out, e.s),
                 LOOM_ERR_TIMEOUT);
  } else {
    sleep(2);
  }
out:
  inputs_free(&in, ctx->size);
  mlp_close(&e);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_moe_mlp_absent_peer_times_out_w2) {
  if (loom_test_gpus(2) && sm90_gemm_or_skip())
    CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}
LOOM_TEST(gpu_world_moe_mlp_absent_peer_times_out_w3) {
  if (loom_test_gpus(1) && sm90_gemm_or_skip())
    CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}
