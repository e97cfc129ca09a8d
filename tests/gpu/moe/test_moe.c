/*
 * test_moe.c - GPU tests of the mixture-of-experts dispatch and combine
 * (loom_moe_dispatch, loom_moe_combine) on W ranks, against the CPU
 * reference's layout and combine (src/ref/moe_ref.c, double precision):
 *  - routings: uniform (distinct random experts per token), every token to
 *    the same k experts (heavy skew: one rank receives everything, the
 *    others nothing), fewer experts than ranks (ranks that own none), top-k
 *    1 and 8, token counts that differ per rank and divide nothing, a rank
 *    with no tokens, a capacity that drops rows;
 *  - bf16, fp16, fp32 rows; several rounds per plan, each with a fresh
 *    routing, fresh rows and fresh expert outputs;
 *  - after each dispatch: every received row bit-exact, the expert offsets
 *    equal to the reference's; after each combine: every output element
 *    within one rounding of the reference (fp32 sums of rounded products);
 *  - a bad routing entry (an id out of range) is reported by the next call,
 *    naming the entry.
 * Every rank draws every rank's inputs from the case's seed, so that each
 * can compute the reference for all.
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


typedef struct moe_case {
  int experts, topk, hidden;
  int64_t tokens;      /* rank r has tokens - 37 r (at least 0) */
  int64_t capacity;
  loom_dtype_t dtype;
  loom_route_kind_t route;
  int rounds;
  int empty_rank;      /* 1: the last rank passes no tokens */
} moe_case_t;


static int64_t tokens_of(const moe_case_t *c, int W, int r) {
  if (c->empty_rank && r == W - 1) return 0;
  const int64_t t = c->tokens - 37 * r;
  return t > 0 ? t : 0;
}

typedef struct world_data {
  int W;
  int64_t T[MAXW];
  void *x[MAXW];       /* dtype [T, H] */
  double *xd[MAXW];    /* the same values */
  int32_t *ids[MAXW];
  float *w[MAXW];
  double *wd[MAXW];
} world_data_t;

static void world_free(world_data_t *d) {
  for (int r = 0; r < d->W; ++r) free(d->x[r]), free(d->xd[r]), free(d->ids[r]), free(d->w[r]), free(d->wd[r]);
  memset(d, 0, sizeof *d);
}

static int world_make(const moe_case_t *c, int W, int round, world_data_t *d) {
  memset(d, 0, sizeof *d);
  d->W = W;
  const size_t es = loom_dtype_size(c->dtype);
  for (int r = 0; r < W; ++r) {
    const int64_t T = d->T[r] = tokens_of(c, W, r);
    const size_t rows = (size_t)T * (size_t)c->hidden;
    d->x[r] = malloc(rows * es + 16), d->xd[r] = malloc(rows * sizeof(double) + 8);
    d->ids[r] = malloc((size_t)T * c->topk * sizeof(int32_t) + 4);
    d->w[r] = malloc((size_t)T * c->topk * sizeof(float) + 4);
    d->wd[r] = malloc((size_t)T * c->topk * sizeof(double) + 8);
    if (!d->x[r] || !d->xd[r] || !d->ids[r] || !d->w[r] || !d->wd[r]) return -1;
    loom_ref_fill_random(c->dtype, d->x[r], rows, loom_route_mix(loom_test_seed() + 1000 * (uint64_t)round + (uint64_t)r + 1), 1.0);
    for (size_t i = 0; i < rows; ++i) d->xd[r][i] = loom_ref_load(c->dtype, d->x[r], i);
    if (loom_route_make(c->route, loom_test_seed(), r, round, T, c->experts, c->topk, 1.2, d->ids[r], d->w[r]))
      return -1;
    for (int64_t i = 0; i < T * c->topk; ++i) d->wd[r][i] = d->w[r][i];
  }
  return 0;
}

/* Expert outputs of rank p (round `round`): rows [total, H] of random values. */
static void expert_outputs(const moe_case_t *c, int p, int round, int64_t total, void *y) {
  loom_ref_fill_random(c->dtype, y, (size_t)total * (size_t)c->hidden,
                       loom_route_mix(loom_test_seed() ^ 0x5eedull ^ ((uint64_t)p << 40) ^ (uint64_t)round) | 1u, 1.0);
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const moe_case_t *c) {
  const int fails0 = loom_test_failures, W = ctx->size, me = ctx->rank;
  const size_t es = loom_dtype_size(c->dtype), row = (size_t)c->hidden * es;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  void *dx = NULL, *dy = NULL, *dout = NULL, *hrecv = NULL, *hy = NULL, *hout = NULL;
  int32_t *dids = NULL;
  float *dw = NULL;
  int64_t *hoff = NULL;
  double **yd = NULL, **outd = NULL;
  world_data_t wd;
  memset(&wd, 0, sizeof wd);
  loom_ref_moe_recv_t rv;
  memset(&rv, 0, sizeof rv);
  int have_rv = 0;
  CHECK(W <= MAXW);
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = c->hidden, d.experts = c->experts, d.topk = c->topk, d.max_tokens = c->tokens;
  d.capacity = c->capacity, d.dtype = c->dtype;
  LOOM_OK(loom_plan_moe(comm, &d, &plan));
  loom_moe_plan_info_t info = LOOM_MOE_PLAN_INFO_INIT;
  LOOM_OK(loom_moe_plan_info(plan, &info));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t tmax = (size_t)c->tokens;
  CUDA_OK(cudaMalloc(&dx, tmax * row + 16));
  CUDA_OK(cudaMalloc((void **)&dids, tmax * c->topk * sizeof(int32_t) + 4));
  CUDA_OK(cudaMalloc((void **)&dw, tmax * c->topk * sizeof(float) + 4));
  CUDA_OK(cudaMalloc(&dy, (size_t)info.max_recv_rows * row + 16));
  CUDA_OK(cudaMalloc(&dout, tmax * row + 16));
  hrecv = malloc((size_t)info.max_recv_rows * row + 16), hy = malloc((size_t)info.max_recv_rows * row + 16);
  hout = malloc(tmax * row + 16);
  hoff = (int64_t *)malloc(((size_t)info.local_experts + 1) * sizeof(int64_t));
  yd = (double **)calloc((size_t)W, sizeof *yd), outd = (double **)calloc((size_t)W, sizeof *outd);
  CHECK(hrecv && hy && hout && hoff && yd && outd);
  if (!(hrecv && hy && hout && hoff && yd && outd)) goto out;
  for (int round = 0; round < c->rounds; ++round) {
    CHECK(world_make(c, W, round, &wd) == 0);
    const int64_t T = wd.T[me];
    /* uploads and the poison on the call's stream (the legacy stream is
     * not ordered with it, and a pageable cudaMemcpy may return before its
     * data lands), done on every rank before any rank's call: a peer's
     * dispatch stores into this rank's receive buffer */
    CUDA_OK(cudaMemcpyAsync(dx, wd.x[me], (size_t)T * row, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dids, wd.ids[me], (size_t)T * c->topk * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dw, wd.w[me], (size_t)T * c->topk * sizeof(float), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemsetAsync(info.recv, 0xff, (size_t)info.max_recv_rows * row, s)); /* poison */
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(loom_launch_world_sync(ctx));
    LOOM_OK(loom_moe_dispatch(plan, dx, dids, T, s));
    /* read as soon as this rank's call is over (before the reference is
     * computed): rows that arrive after the call's end (a wait missing) are
     * still the poison here */
    CUDA_OK(loom_launch_download(hoff, info.expert_offsets, ((size_t)info.local_experts + 1) * sizeof(int64_t), s));
    CUDA_OK(loom_launch_download(hrecv, info.recv, (size_t)info.max_recv_rows * row, s));
    /* the reference layout */
    const loom_ref_moe_t m = {W, c->experts, c->topk, c->hidden, 1, c->capacity, wd.T,
                              (const double *const *)wd.xd, (const int32_t *const *)wd.ids,
                              (const double *const *)wd.wd, NULL, NULL, NULL};
    CHECK(loom_ref_moe_dispatch(&m, &rv) == 0);
    have_rv = 1;
    const int64_t total = rv.total[me];
    for (int l = 0; l <= info.local_experts; ++l)
      CHECK_EQ_INT(hoff[l], rv.off[me][(int64_t)l * W]);
    int64_t bad = 0;
    for (int64_t i = 0; i < total * c->hidden; ++i)
      bad += loom_ref_load(c->dtype, hrecv, (size_t)i) != rv.rows[me][i];
    CHECK_EQ_INT(bad, 0);
    /* combine: every rank's expert outputs, the reference's sums */
    for (int p = 0; p < W; ++p) {
      const int64_t tp = rv.total[p];
      void *yp = malloc((size_t)tp * row + 16);
      yd[p] = (double *)malloc((size_t)tp * c->hidden * sizeof(double) + 8);
      outd[p] = (double *)malloc((size_t)wd.T[p] * c->hidden * sizeof(double) + 8);
      CHECK(yp && yd[p] && outd[p]);
      if (!yp || !yd[p] || !outd[p]) { free(yp); goto out; }
      expert_outputs(c, p, round, tp, yp);
      for (int64_t i = 0; i < tp * c->hidden; ++i) yd[p][i] = loom_ref_load(c->dtype, yp, (size_t)i);
      if (p == me) memcpy(hy, yp, (size_t)tp * row);
      free(yp);
    }
    CHECK(loom_ref_moe_combine(&m, &rv, (const double *const *)yd, outd) == 0);
    CUDA_OK(cudaMemcpyAsync(dy, hy, (size_t)total * row, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemsetAsync(dout, 0xff, (size_t)T * row + 16, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(loom_launch_world_sync(ctx));
    LOOM_OK(loom_moe_combine(plan, dy, dw, dout, s));
    CUDA_OK(loom_launch_download(hout, dout, (size_t)T * row, s));
    const double rel = c->dtype == LOOM_FP32 ? 1e-5 : c->dtype == LOOM_BF16 ? 1.0 / 128 : 1.0 / 1024;
    int64_t far = 0;
    for (int64_t i = 0; i < T * c->hidden; ++i) {
      const double got = loom_ref_load(c->dtype, hout, (size_t)i), want = outd[me][i];
      if (!(fabs(got - want) <= rel * (fabs(want) + 0.05))) {
        if (far < 3)
          fprintf(stderr, "rank %d round %d: out[%lld] = %g, reference %g\n", me, round, (long long)i, got, want);
        ++far;
      }
    }
    CHECK_EQ_INT(far, 0);
    for (int p = 0; p < W; ++p) free(yd[p]), free(outd[p]), yd[p] = outd[p] = NULL;
    loom_ref_moe_recv_free(&m, &rv);
    have_rv = 0;
    world_free(&wd);
    if (loom_test_failures != fails0) break;
  }
out:
  if (have_rv) {
    const loom_ref_moe_t m0 = {W, c->experts, c->topk, c->hidden, 1, c->capacity, wd.T, NULL, NULL, NULL, NULL, NULL, NULL};
    loom_ref_moe_recv_free(&m0, &rv);
  }
  if (yd && outd)
    for (int p = 0; p < W; ++p) free(yd[p]), free(outd[p]);
  free(yd), free(outd);
  world_free(&wd);
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  cudaFree(dx), cudaFree(dids), cudaFree(dw), cudaFree(dy), cudaFree(dout);
  if (s) cudaStreamDestroy(s);
  free(hrecv), free(hy), free(hout), free(hoff);
  return loom_test_failures != fails0;
}

static int run_case_v(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *k) {
  return run_case(ctx, comm, (const moe_case_t *)k);
}

#define N(a) ((int)(sizeof a / sizeof *a))

/* experts, topk, hidden, tokens, capacity, dtype, route, rounds, empty_rank */
static const moe_case_t g_cases[] = {
    {8, 2, 256, 300, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 3, 0},    /* Mixtral-like, scaled down */
    {128, 8, 128, 257, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 3, 0},  /* Qwen3-like: top-8 of 128 */
    {16, 1, 64, 129, 0, LOOM_FP16, LOOM_ROUTE_UNIFORM, 2, 0},    /* top-1 */
    {8, 2, 32, 200, 0, LOOM_FP32, LOOM_ROUTE_UNIFORM, 2, 1},     /* fp32, a rank with no tokens */
    {8, 4, 128, 190, 0, LOOM_BF16, LOOM_ROUTE_SKEW, 2, 0},       /* every token to experts 0..3 */
    {1, 1, 64, 100, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 2, 0},     /* one expert: other ranks own none */
    {8, 2, 128, 300, 50, LOOM_BF16, LOOM_ROUTE_UNIFORM, 2, 0},   /* capacity 50: rows dropped */
    {6, 3, 64, 101, 0, LOOM_BF16, LOOM_ROUTE_UNIFORM, 20, 0},    /* 6 experts over the ranks, 20 routings */
    {64, 6, 128, 333, 0, LOOM_BF16, LOOM_ROUTE_ZIPF, 3, 0},      /* Zipf: hot experts, cold tail */
};

static void run_suite(int W) {
  const loom_case_suite_t su = {g_cases, sizeof *g_cases, N(g_cases), 30000, run_case_v, NULL};
  loom_case_suite_run(W, LAUNCH_TIMEOUT_S, &su);
}

/* A suite of `n` cases as W ranks on one GPU (a loom world). */
static void run_world(int W, loom_case_fn run, const void *cases, size_t stride, int n) {
  const loom_case_suite_t su = {cases, stride, n, 30000, run, NULL};
  if (loom_test_gpus(1)) loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}

LOOM_TEST(gpu_moe_dispatch_combine_match_reference_w1) {
  if (loom_test_gpus(1)) run_suite(1);
}
LOOM_TEST(gpu_moe_dispatch_combine_match_reference_w2) {
  if (loom_test_gpus(2)) run_suite(2);
}
LOOM_WORLD_TESTS(gpu_world_moe_dispatch_combine_match_reference, run_world, run_case_v, g_cases, sizeof *g_cases,
                 N(g_cases))

/* A bad id is left out and reported by the next call. */
static int run_bad(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *unused) {
  (void)unused;
  const int fails0 = loom_test_failures;
  loom_plan_t plan = NULL;
  void *dx = NULL;
  int32_t *dids = NULL;
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = 64, d.experts = 4, d.topk = 2, d.max_tokens = 16;
  LOOM_OK(loom_plan_moe(comm, &d, &plan));
  CUDA_OK(cudaMalloc(&dx, 16 * 64 * 2));
  CUDA_OK(cudaMemset(dx, 0, 16 * 64 * 2));
  int32_t ids[32];
  for (int i = 0; i < 32; ++i) ids[i] = i % 2 ? 1 : 0;
  if (ctx->rank == 0) ids[13] = 9; /* token 6, j 1: not an expert */
  CUDA_OK(cudaMalloc((void **)&dids, sizeof ids));
  CUDA_OK(cudaMemcpy(dids, ids, sizeof ids, cudaMemcpyHostToDevice));
  LOOM_OK(loom_moe_dispatch(plan, dx, dids, 16, 0));
  CUDA_OK(cudaDeviceSynchronize());
  {
    const loom_result_t r = loom_moe_dispatch(plan, dx, dids, 16, 0);
    if (ctx->rank == 0) {
      CHECK_RESULT(r, LOOM_ERR_INVALID_ARGUMENT);
      CHECK_MSG("ids[13]");
    } else {
      CHECK_RESULT(r, LOOM_SUCCESS);
    }
  }
out:
  cudaDeviceSynchronize();
  if (plan) (void)loom_plan_destroy(plan);
  cudaFree(dx), cudaFree(dids);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_moe_bad_routing_is_reported_w1) {
  static const int one = 0;
  const loom_case_suite_t su = {&one, sizeof one, 1, 30000, run_bad, NULL};
  if (loom_test_gpus(1)) loom_case_suite_run(1, LAUNCH_TIMEOUT_S, &su);
}

/* Rank 1 never dispatches: rank 0's dispatch gives up after the timeout,
 * names the wait, and the next call reports it. */
static int rank_absent_peer(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  void *dx = NULL;
  int32_t *dids = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = 64, d.experts = 4, d.topk = 2, d.max_tokens = 32;
  LOOM_OK(loom_plan_moe(comm, &d, &plan));
  CUDA_OK(cudaMalloc(&dx, 32 * 64 * 2));
  CUDA_OK(cudaMemsetAsync(dx, 0, 32 * 64 * 2, s)); /* on the call's stream: the legacy one is not ordered with it */
  CUDA_OK(cudaMalloc((void **)&dids, 64 * sizeof(int32_t)));
  {
    int32_t ids[64];
    for (int i = 0; i < 64; ++i) ids[i] = (i % 2) ? 3 : 0;
    CUDA_OK(cudaMemcpyAsync(dids, ids, sizeof ids, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
  }
  if (ctx->rank == 0) {
    LOOM_OK(loom_moe_dispatch(plan, dx, dids, 32, s));
    CUDA_OK(cudaStreamSynchronize(s)); /* returns: every wait is bounded */
    CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
    CHECK_MSG("MoE dispatch");
    printf("  rank 0: %s\n", loom_last_error());
    CHECK_RESULT(loom_moe_dispatch(plan, dx, dids, 32, s), LOOM_ERR_TIMEOUT);
  } else {
    sleep(2);
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  cudaFree(dx), cudaFree(dids);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_moe_absent_peer_times_out_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}
LOOM_TEST(gpu_world_moe_absent_peer_times_out_w3) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}

/* A dispatch + combine captured once in a CUDA graph, replayed 1000 times
 * with one of four routings (new ids, rows and weights copied in before
 * each replay: the counts move on the device), the expert outputs the
 * received rows themselves (y = the receive buffer): every replay's output
 * bit-identical to the eager call's of the same routing, and the eager one
 * within one rounding of sum_j w_j x_t. */
#define SOAK_ROUTES 4
#define SOAK_CALLS 1000
static int run_soak(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *unused) {
  (void)unused;
  const int fails0 = loom_test_failures, me = ctx->rank;
  const int E = 8, K = 2, H = 128;
  const int64_t T = 256 - 19 * me;
  const size_t row = (size_t)H * 2;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  void *dx = NULL, *dout = NULL, *hx[SOAK_ROUTES] = {0}, *hout[SOAK_ROUTES] = {0}, *got = NULL;
  int32_t *dids = NULL, *hids[SOAK_ROUTES] = {0};
  float *dw = NULL, *hw[SOAK_ROUTES] = {0};
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = H, d.experts = E, d.topk = K, d.max_tokens = 256;
  LOOM_OK(loom_plan_moe(comm, &d, &plan));
  loom_moe_plan_info_t info = LOOM_MOE_PLAN_INFO_INIT;
  LOOM_OK(loom_moe_plan_info(plan, &info));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&dx, (size_t)T * row));
  CUDA_OK(cudaMalloc(&dout, (size_t)T * row));
  CUDA_OK(cudaMalloc((void **)&dids, (size_t)T * K * sizeof(int32_t)));
  CUDA_OK(cudaMalloc((void **)&dw, (size_t)T * K * sizeof(float)));
  got = malloc((size_t)T * row);
  CHECK(got != NULL);
  if (!got) goto out;
  for (int q = 0; q < SOAK_ROUTES; ++q) {
    hx[q] = malloc((size_t)T * row), hout[q] = malloc((size_t)T * row);
    hids[q] = (int32_t *)malloc((size_t)T * K * sizeof(int32_t)), hw[q] = (float *)malloc((size_t)T * K * sizeof(float));
    CHECK(hx[q] && hout[q] && hids[q] && hw[q]);
    if (!(hx[q] && hout[q] && hids[q] && hw[q])) goto out;
    loom_ref_fill_random(LOOM_BF16, hx[q], (size_t)T * H, loom_route_mix(loom_test_seed() ^ (uint64_t)(q * 16 + me)) | 1u, 1.0);
    CHECK(loom_route_make(q % 2 ? LOOM_ROUTE_ZIPF : LOOM_ROUTE_UNIFORM, loom_test_seed(), me, q, T, E, K, 1.2, hids[q],
                          hw[q]) == 0);
  }
  /* eager: one call per routing, checked against sum_j w_j x_t */
  for (int q = 0; q < SOAK_ROUTES; ++q) {
    CUDA_OK(cudaMemcpyAsync(dx, hx[q], (size_t)T * row, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dids, hids[q], (size_t)T * K * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dw, hw[q], (size_t)T * K * sizeof(float), cudaMemcpyHostToDevice, s));
    loom_launch_step_time(me, q, "uploaded");
    CHECK(loom_launch_world_sync(ctx)); /* every rank's (pageable) uploads done before any calls */
    loom_launch_step_time(me, q, "host barrier");
    LOOM_OK(loom_moe_dispatch(plan, dx, dids, T, s));
    loom_launch_step_time(me, q, "dispatch queued");
    LOOM_OK(loom_moe_combine(plan, info.recv, dw, dout, s));
    loom_launch_step_time(me, q, "combine queued");
    CUDA_OK(loom_launch_download(hout[q], dout, (size_t)T * row, s));
    loom_launch_step_time(me, q, "downloaded");
    int64_t far = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < H; ++h) {
        double want = 0;
        for (int j = 0; j < K; ++j) want += (double)hw[q][t * K + j] * loom_ref_load(LOOM_BF16, hx[q], (size_t)(t * H + h));
        const double g = loom_ref_load(LOOM_BF16, hout[q], (size_t)(t * H + h));
        far += !(fabs(g - want) <= (fabs(want) + 1e-3) / 128);
      }
    CHECK_EQ_INT(far, 0);
  }
  /* the graph: the last routing's inputs are in place while it is captured */
  CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  {
    const loom_result_t r1 = loom_moe_dispatch(plan, dx, dids, T, s);
    const loom_result_t r2 = r1 == LOOM_SUCCESS ? loom_moe_combine(plan, info.recv, dw, dout, s) : r1;
    CUDA_OK(cudaStreamEndCapture(s, &graph));
    LOOM_OK(r2);
  }
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  int64_t differ = 0;
  for (int i = 0; i < SOAK_CALLS; ++i) {
    const int q = i % SOAK_ROUTES;
    CUDA_OK(cudaMemcpyAsync(dx, hx[q], (size_t)T * row, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dids, hids[q], (size_t)T * K * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(dw, hw[q], (size_t)T * K * sizeof(float), cudaMemcpyHostToDevice, s));
    CHECK(loom_launch_world_sync(ctx));
    if (i < 2) loom_launch_step_time(me, SOAK_ROUTES + i, "host barrier");
    CUDA_OK(cudaGraphLaunch(exec, s));
    if (i < 2) loom_launch_step_time(me, SOAK_ROUTES + i, "replay queued");
    CUDA_OK(loom_launch_download(got, dout, (size_t)T * row, s));
    differ += memcmp(got, hout[q], (size_t)T * row) != 0;
  }
  CHECK_EQ_INT(differ, 0);
  LOOM_OK(loom_comm_get_async_error(comm));
out:
  if (s) cudaStreamSynchronize(s);
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  cudaFree(dx), cudaFree(dout), cudaFree(dids), cudaFree(dw);
  if (s) cudaStreamDestroy(s);
  for (int q = 0; q < SOAK_ROUTES; ++q) free(hx[q]), free(hout[q]), free(hids[q]), free(hw[q]);
  free(got);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_moe_graph_replays_1000_calls_w1) {
  static const int one = 0;
  const loom_case_suite_t su = {&one, sizeof one, 1, 30000, run_soak, NULL};
  if (loom_test_gpus(1)) loom_case_suite_run(1, LAUNCH_TIMEOUT_S, &su);
}
LOOM_TEST(gpu_moe_graph_replays_1000_calls_w2) {
  static const int one = 0;
  const loom_case_suite_t su = {&one, sizeof one, 1, 30000, run_soak, NULL};
  if (loom_test_gpus(2)) loom_case_suite_run(2, LAUNCH_TIMEOUT_S, &su);
}
/* the soak as 4 ranks on one GPU */
LOOM_TEST(gpu_world_moe_graph_replays_1000_calls_w4) {
  static const int one = 0;
  run_world(4, run_soak, &one, sizeof one, 1);
}
