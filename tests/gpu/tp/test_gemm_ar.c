/*
 * test_gemm_ar.c - GPU tests of loom_gemm_ar (GEMM + AllReduce with a fused
 * pointwise epilogue, CoCoNet 5.4) on W = 1 and 2 ranks (one process per
 * GPU), against the CPU reference (src/ref/coll_ref.c: loom_ref_gemm_ar, in
 * double, each rank's partial rounded to c_type as the kernels do):
 *  - shapes: odd m, m not divisible by W, m < W (an empty shard), decode m
 *    (64-row tiles), tiles spanning two shards; both B layouts; bf16 / fp16
 *    in; bf16 / fp16 / fp32 out;
 *  - every epilogue piece alone and together: scale, bias, ReLU / GeLU,
 *    dropout (the mask checked bit for bit against loom__dropout_keep:
 *    dropped elements are exactly the residual, or 0 without one), residual;
 *  - the fused transfer (SM_COPY, other reduction block counts) and the
 *    sequential one (loom_gemm + loom_allreduce, out in plain cudaMalloc
 *    memory), AUTO;
 *  - fresh random inputs on every call, out poisoned (NaN bytes) before
 *    each call, every element of every rank's out checked; the same bits on
 *    every rank (a hash compared over NCCL) and on a second call;
 *  - CUDA-graph capture, replayed with new inputs;
 *  - 200 calls back to back alternating two plans of different shapes, no
 *    drift, no leak; a slow rank whose stream reads out between calls never
 *    sees a peer's next call's rows early;
 *  - a peer that never calls: LOOM_ERR_TIMEOUT naming the wait;
 *  - argument errors named (a plain cudaMalloc out for a fused plan, has_bias,
 *    refused transfers, the epilogue's fields and pointers);
 *  - loom_gemm_ar_tune records a choice that AUTO plans take.
 * Every rank generates every rank's inputs from the run's seed (so each can
 * compute the reference) and uploads its own.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "core/pointwise.h"
#include "core/tune.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"
#include "ref/coll_ref.h"
#include "ref/ref.h"
#include "support/launch.h"

#define LAUNCH_TIMEOUT_S 300
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* epilogue pieces */
#define E_BIAS 1
#define E_RES 2
#define E_DROP 4
#define E_SCALE 8
#define E_GELU 16
#define E_RELU 32
#define E_MEGATRON (E_BIAS | E_RES | E_DROP) /* dropout(AR(x W) + b) + r */

typedef struct ar_case {
  int64_t m, n, k;
  loom_dtype_t ab, ct;
  loom_layout_t lay;
  int epi;               /* E_* */
  loom_tp_transfer_t tr;
  int blocks;            /* desc.comm_blocks */
  int calls;
  int graph;             /* capture one call, replay it `calls` times with new inputs */
  int gemm;              /* desc.sequential_gemm (loom_tp_gemm_t) */
} ar_case_t;

static double eps_of(loom_dtype_t t) { return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_FP16 ? 1.0 / 1024 : 1e-6; }
static const char *dt(loom_dtype_t t) { return t == LOOM_FP32 ? "fp32" : t == LOOM_FP16 ? "fp16" : "bf16"; }
static const char *trn(loom_tp_transfer_t t) {
  return t == LOOM_TP_SEQUENTIAL ? "seq" : t == LOOM_TP_SM_COPY ? "sm" : "auto";
}

static uint64_t seed_for(int call, int what, int rank) {
  return loom_test_seed() * 1000003ull + (uint64_t)call * 7919ull + (uint64_t)what * 104729ull + (uint64_t)rank + 77ull;
}

/* Host inputs of one call: every rank's A and B, the bias and the residual
 * (the same on every rank). */
typedef struct ar_inputs {
  void *a[64], *b[64], *bias, *res;
  int na;
} ar_inputs_t;

static void inputs_free(ar_inputs_t *in) {
  for (int i = 0; i < in->na; ++i) free(in->a[i]), free(in->b[i]);
  free(in->bias), free(in->res);
  memset(in, 0, sizeof *in);
}

static void inputs_make(ar_inputs_t *in, const ar_case_t *k, int W, int call) {
  const size_t ea = loom_dtype_size(k->ab), ec = loom_dtype_size(k->ct);
  in->na = W;
  for (int p = 0; p < W; ++p) {
    in->a[p] = malloc((size_t)(k->m * k->k) * ea);
    in->b[p] = malloc((size_t)(k->k * k->n) * ea);
    loom_ref_fill_random(k->ab, in->a[p], (size_t)(k->m * k->k), seed_for(call, 1, p), 1.0);
    loom_ref_fill_random(k->ab, in->b[p], (size_t)(k->k * k->n), seed_for(call, 2, p), 1.0);
  }
  in->bias = malloc((size_t)k->n * ec);
  in->res = malloc((size_t)(k->m * k->n) * ec);
  loom_ref_fill_random(k->ct, in->bias, (size_t)k->n, seed_for(call, 3, 0), 1.0);
  loom_ref_fill_random(k->ct, in->res, (size_t)(k->m * k->n), seed_for(call, 4, 0), 2.0);
}

/* The epilogue of a case; bias and residual pointers as given (device for
 * the call, host for the reference). The dropout offset moves with `call`
 * (a fresh mask per call). */
static loom_epilogue_t epi_of(const ar_case_t *k, int call, const void *bias, const void *res) {
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  if (k->epi & E_SCALE) e.scale = 0.75f;
  if (k->epi & E_BIAS) e.bias = bias;
  if (k->epi & E_GELU) e.activation = LOOM_ACT_GELU_TANH;
  if (k->epi & E_RELU) e.activation = LOOM_ACT_RELU;
  if (k->epi & E_DROP) {
    e.dropout_p = 0.1f;
    e.dropout_seed = 0xd509ull + loom_test_seed();
    e.dropout_offset = (uint64_t)call * (uint64_t)(k->m * k->n);
  }
  if (k->epi & E_RES) e.residual = res;
  return e;
}

/* Checks a whole [m, n] output (host copy `got`) against the reference of
 * inputs `in` with epilogue `e` (host pointers). Returns the elements out of
 * bound or with the wrong dropout decision. */
static size_t check_out(const ar_case_t *k, const ar_inputs_t *in, const loom_epilogue_t *e, const void *got, int rank,
                        int W) {
  const size_t mn = (size_t)(k->m * k->n);
  double *ref = (double *)malloc(mn * sizeof(double)), *mag = (double *)malloc(mn * sizeof(double));
  loom_gemm_desc_t d = LOOM_GEMM_DESC(k->m, k->n, k->k, k->ab, k->ct, k->lay, 0);
  loom_ref_gemm_ar(&d, W, (const void *const *)in->a, (const void *const *)in->b, e, ref, mag);
  /* before the epilogue: each partial within a rounding of c_type of the
   * exact product (fp32 accumulation over k), summed in fp32 */
  const double eo = eps_of(k->ct) + ((double)k->k / 16.0) * 0x1p-24, ea = 1e-5 * sqrt((double)k->k) + 1e-6;
  /* the epilogue scales an error by at most |scale| x max|act'| (1.13) x 1 / (1 - p) */
  const double grow = (e->scale < 0 ? -e->scale : e->scale) * (e->activation != LOOM_ACT_NONE ? 1.2 : 1.0) /
                      (1.0 - (double)e->dropout_p);
  const uint32_t th = loom__dropout_threshold(e->dropout_p);
  size_t bad = 0;
  for (size_t i = 0; i < mn; ++i) {
    const double r = ref[i], g = loom_ref_load(k->ct, got, i);
    const double bound = grow * (eo * (double)(W + 1) * mag[i] + ea * W) + eps_of(k->ct) * fabs(r) + 1e-6;
    int wrong = !(fabs(g - r) <= bound);
    if (e->dropout_p > 0.f) {
      /* the mask bit for bit: a dropped element is exactly the residual (or 0) */
      const int keep = loom__dropout_keep(e->dropout_seed, e->dropout_offset, (uint64_t)i, th);
      const double dropped = e->residual ? loom_ref_load(k->ct, e->residual, i) : 0.0;
      if (!keep && g != dropped) wrong = 1;
    }
    if (wrong) {
      if (bad < 5)
        fprintf(stderr, "  rank %d row %lld col %lld: got %.8g, expected %.8g (bound %.3g)\n", rank,
                (long long)(i / (size_t)k->n), (long long)(i % (size_t)k->n), g, r, bound);
      ++bad;
    }
  }
  free(ref), free(mag);
  return bad;
}

/* FNV-1a of a buffer. */
static uint64_t hash_bytes(const void *p, size_t n) {
  const unsigned char *c = (const unsigned char *)p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const ar_case_t *k) {
  const int W = ctx->size, rank = ctx->rank;
  const size_t ea = loom_dtype_size(k->ab), ec = loom_dtype_size(k->ct);
  const size_t a_bytes = (size_t)(k->m * k->k) * ea, b_bytes = (size_t)(k->k * k->n) * ea;
  const size_t out_bytes = (size_t)(k->m * k->n) * ec;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  void *d_a = NULL, *d_b = NULL, *d_out = NULL, *d_bias = NULL, *d_res = NULL, *h_out = NULL, *again = NULL;
  int out_sym = 0;
  ar_inputs_t in;
  memset(&in, 0, sizeof in);
  const int fails0 = loom_test_failures;

  loom_tp_desc_t desc = LOOM_TP_DESC_INIT;
  desc.m = k->m, desc.n = k->n, desc.k = k->k;
  desc.ab_type = k->ab, desc.c_type = k->ct, desc.b_layout = k->lay;
  desc.world_size = W;
  desc.transfer = k->tr;
  desc.comm_blocks = k->blocks;
  desc.sequential_gemm = (loom_tp_gemm_t)k->gemm;
  LOOM_OK(loom_plan_gemm_ar(comm, &desc, &plan));
  loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
  LOOM_OK(loom_tp_plan_info(plan, &info));
  {
    /* the rule itself is host-tested (tp_sequential_gemm_resolution_and_refusals); a
     * description of AUTO knobs may have taken a tuned entry of either engine */
    if (desc.transfer != LOOM_TP_AUTO || desc.sequential_gemm != LOOM_TP_GEMM_AUTO) {
      loom_tp_gemm_t want = loom__tp_resolve_gemm(&desc, info.transfer);
      if (ctx->world && want == LOOM_TP_GEMM_CUBLASLT) want = LOOM_TP_GEMM_LOOM; /* a world takes loom's */
      CHECK_EQ_INT(info.gemm, want);
    } else
      CHECK(info.gemm == LOOM_TP_GEMM_LOOM || info.gemm == LOOM_TP_GEMM_CUBLASLT);
  }
  if (rank == 0)
    printf("  gemm_ar m=%lld n=%lld k=%lld %s->%s %s epi 0x%x %s: transfer %d, S=%lld, blocks %d, tile %dx%d, grid %d, "
           "sym %zu B%s\n",
           (long long)k->m, (long long)k->n, (long long)k->k, dt(k->ab), dt(k->ct), k->lay == LOOM_B_NK ? "NK" : "KN",
           (unsigned)k->epi, trn(k->tr), (int)info.transfer, (long long)info.shard_rows, info.comm_blocks, info.gemm_bm,
           info.gemm_bn, info.gemm_grid, info.symmetric_bytes, k->graph ? " graph" : "");
  if (k->tr != LOOM_TP_AUTO) CHECK_EQ_INT(info.transfer, k->tr);
  CHECK_EQ_INT(info.deterministic, 1);
  CHECK(info.symmetric_bytes >= (size_t)(k->m * k->n) * ec && info.workspace_bytes > 0);

  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&d_a, a_bytes));
  CUDA_OK(cudaMalloc(&d_b, b_bytes));
  CUDA_OK(cudaMalloc(&d_bias, (size_t)k->n * ec));
  CUDA_OK(cudaMalloc(&d_res, out_bytes));
  /* a plan made SEQUENTIAL takes any device memory; any other (AUTO
   * included, whatever it resolved to) symmetric memory: peers store into
   * out when fused (collective) */
  if (k->tr == LOOM_TP_SEQUENTIAL) {
    CUDA_OK(cudaMalloc(&d_out, out_bytes));
  } else {
    LOOM_OK(loom_malloc(comm, out_bytes, &d_out));
    out_sym = 1;
  }
  h_out = malloc(out_bytes);
  again = malloc(out_bytes);

  for (int call = 0; call < k->calls; ++call) {
    inputs_free(&in);
    inputs_make(&in, k, W, call);
    CUDA_OK(cudaMemcpyAsync(d_a, in.a[rank], a_bytes, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(d_b, in.b[rank], b_bytes, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(d_bias, in.bias, (size_t)k->n * ec, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(d_res, in.res, out_bytes, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemsetAsync(d_out, 0xff, out_bytes, s)); /* NaN in every dtype */
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(loom_launch_world_sync(ctx)); /* every rank's (pageable) uploads done before any calls */
    /* a graph keeps the epilogue it captured (call 0's mask) */
    const int ecall = k->graph ? 0 : call;
    const loom_epilogue_t de = epi_of(k, ecall, d_bias, d_res), he = epi_of(k, ecall, in.bias, in.res);
    if (k->graph && !exec) {
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      const loom_result_t r = loom_gemm_ar(plan, d_a, d_b, d_out, &de, s);
      const cudaError_t ce = cudaStreamEndCapture(s, &graph);
      CHECK_RESULT(r, LOOM_SUCCESS);
      CUDA_OK(ce);
      CHECK(loom_launch_graph_ready(ctx, graph, &exec, s) == 0); /* every rank's, before any launches */
    }
    if (k->graph) CUDA_OK(cudaGraphLaunch(exec, s));
    else LOOM_OK(loom_gemm_ar(plan, d_a, d_b, d_out, &de, s));
    CUDA_OK(cudaStreamSynchronize(s));
    LOOM_OK(loom_comm_get_async_error(comm));
    CUDA_OK(cudaMemcpy(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost));
    const size_t bad = check_out(k, &in, &he, h_out, rank, W);
    if (bad) loom_test_fail(__FILE__, __LINE__, "rank %d call %d: %zu elements wrong", rank, call, bad);
    /* the same bits on every rank (collective: every rank gets here) */
    if (!loom_launch_same_u64(ctx, hash_bytes(h_out, out_bytes)))
      loom_test_fail(__FILE__, __LINE__, "rank %d call %d: out differs between ranks", rank, call);
    /* and again on a second call (collective) */
    if (!k->graph) {
      CUDA_OK(cudaMemsetAsync(d_out, 0xff, out_bytes, s));
      LOOM_OK(loom_gemm_ar(plan, d_a, d_b, d_out, &de, s));
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaMemcpy(again, d_out, out_bytes, cudaMemcpyDeviceToHost));
      if (memcmp(again, h_out, out_bytes) != 0)
        loom_test_fail(__FILE__, __LINE__, "rank %d call %d: other bits the second time", rank, call);
    }
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (d_out && out_sym) CHECK_RESULT(loom_free(comm, d_out), LOOM_SUCCESS);
  if (d_out && !out_sym) cudaFree(d_out);
  cudaFree(d_a), cudaFree(d_b), cudaFree(d_bias), cudaFree(d_res);
  if (s) cudaStreamDestroy(s);
  free(h_out), free(again);
  inputs_free(&in);
  return loom_test_failures != fails0;
}

static int run_case_v(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *k) {
  return run_case(ctx, comm, (const ar_case_t *)k);
}

/* A world runs the sequential path too (a GEMM, then loom_allreduce: no
 * NCCL) with loom's GEMM (cuBLASLt asked by name is refused there:
 * gpu_world_auto_is_fused_nccl_paths_and_tuners_refused_w2), but no
 * SM-copy block count at or above a rank's share of the SMs. */
static int world_skip(const void *one, int W, int sms) {
  (void)W;
  const ar_case_t *k = (const ar_case_t *)one;
  return k->blocks >= sms || k->gemm == LOOM_TP_GEMM_CUBLASLT;
}

static void run_suite(int W, const ar_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 20000, run_case_v, world_skip};
  loom_case_suite_run(W, LAUNCH_TIMEOUT_S, &su);
}

/* The suite as W ranks on one GPU (a loom world). */
static void run_world(int W, const ar_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 20000, run_case_v, world_skip};
  if (loom_test_gpus(1)) loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}

#define BF LOOM_BF16
#define FH LOOM_FP16
#define F32 LOOM_FP32
#define KN LOOM_B_KN
#define NK LOOM_B_NK
#define SEQ LOOM_TP_SEQUENTIAL
#define SM LOOM_TP_SM_COPY
#define AUTO LOOM_TP_AUTO

/* m, n, k, ab, ct, layout, epilogue, transfer, blocks, calls, graph, sequential GEMM */
static const ar_case_t g_w2[] = {
    {512, 256, 384, BF, BF, NK, 0, SM, 0, 2, 0, 0},
    {512, 256, 384, BF, BF, NK, 0, SEQ, 0, 2, 0, 0},
    {999, 384, 256, BF, BF, NK, E_MEGATRON, SM, 0, 2, 0, 0},        /* odd m, uneven shards */
    {999, 384, 256, BF, BF, NK, E_MEGATRON, SEQ, 0, 2, 0, 0},
    {999, 384, 256, FH, FH, KN, E_MEGATRON, AUTO, 0, 2, 0, 0},
    {1000, 256, 512, FH, F32, NK, E_BIAS, SM, 4, 2, 0, 0},
    {1000, 256, 512, BF, FH, KN, E_RES, SM, 0, 2, 0, 0},
    {777, 264, 136, BF, BF, NK, E_DROP, SM, 1, 2, 0, 0},            /* one reducer block, n not a tile multiple */
    {777, 264, 136, BF, F32, NK, E_DROP, SEQ, 0, 1, 0, 0},
    {300, 512, 256, FH, FH, NK, E_SCALE | E_GELU, SM, 0, 2, 0, 0},
    {300, 512, 256, BF, BF, KN, E_SCALE | E_BIAS | E_RELU | E_DROP | E_RES, SM, 0, 2, 0, 0},
    {300, 512, 256, BF, BF, KN, E_SCALE | E_BIAS | E_RELU | E_DROP | E_RES, SEQ, 0, 1, 0, 0},
    {1, 128, 64, BF, BF, NK, E_MEGATRON, SM, 0, 2, 0, 0},           /* m < W: rank 1 owns nothing */
    {3, 136, 72, FH, F32, KN, E_MEGATRON, SM, 0, 2, 0, 0},
    {3, 136, 72, FH, BF, KN, E_MEGATRON, SEQ, 0, 1, 0, 0},
    {64, 1024, 512, BF, BF, NK, E_MEGATRON, SM, 0, 3, 0, 0},        /* decode m: 64-row tiles */
    {200, 520, 264, FH, F32, NK, E_BIAS | E_RES, SM, 0, 2, 0, 0},   /* 200 rows: a tile across both shards */
    {2048, 768, 512, FH, FH, NK, E_MEGATRON, SM, 16, 2, 0, 0},
    {777, 256, 512, BF, BF, NK, E_MEGATRON, SM, 0, 4, 1, 0},        /* graph replays */
    {777, 256, 512, FH, FH, KN, E_MEGATRON, SEQ, 0, 3, 1, 0},
    {999, 384, 256, BF, BF, NK, E_MEGATRON, SEQ, 0, 2, 0, LOOM_TP_GEMM_LOOM},
    {777, 256, 512, BF, F32, KN, E_MEGATRON | E_SCALE, SEQ, 0, 3, 1, LOOM_TP_GEMM_CUBLASLT},
};

/* W = 1: AUTO is the sequential path; SM_COPY still runs the whole fused
 * protocol (begin, signals, hooked GEMM, reduction, stores) on one GPU. */
static const ar_case_t g_w1[] = {
    {300, 256, 128, BF, BF, NK, E_MEGATRON, AUTO, 0, 2, 0, 0},
    {300, 256, 128, BF, BF, NK, E_MEGATRON, SM, 0, 2, 0, 0},
    {513, 384, 256, FH, F32, KN, E_SCALE | E_GELU | E_BIAS, SM, 3, 2, 0, 0},
    {513, 384, 256, FH, FH, KN, E_DROP, SEQ, 0, 2, 0, 0},
    {1000, 520, 264, BF, FH, NK, E_RES | E_DROP, SM, 0, 2, 0, 0},
    {48, 1024, 512, BF, BF, NK, E_MEGATRON, SM, 0, 2, 0, 0},
    {777, 256, 512, BF, BF, NK, E_MEGATRON, SM, 0, 3, 1, 0},
    {1, 64, 64, FH, FH, NK, E_RES, SM, 0, 2, 0, 0},
    {300, 256, 128, BF, BF, NK, E_MEGATRON, SEQ, 0, 2, 0, LOOM_TP_GEMM_LOOM},
    {777, 256, 512, BF, F32, KN, E_MEGATRON | E_SCALE, SEQ, 0, 3, 1, LOOM_TP_GEMM_CUBLASLT},
};

LOOM_TEST(gpu_gemm_ar_matches_reference_w1) {
  if (loom_test_gpus(1)) run_suite(1, g_w1, (int)(sizeof g_w1 / sizeof *g_w1));
}

LOOM_TEST(gpu_gemm_ar_matches_reference_w2) {
  if (loom_test_gpus(2)) run_suite(2, g_w2, (int)(sizeof g_w2 / sizeof *g_w2));
}

LOOM_WORLD_TESTS(gpu_world_gemm_ar_matches_reference, run_world, g_w2, (int)(sizeof g_w2 / sizeof *g_w2))

/* 200 calls back to back on one stream, alternating a fused plan with the
 * Megatron epilogue and one of another shape, then both outputs checked;
 * device memory the same before and after. */
static int rank_back_to_back(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, rank = ctx->rank;
  const ar_case_t k1 = {1000, 256, 512, BF, BF, NK, E_MEGATRON, SM, 0, 1, 0, 0};
  const ar_case_t k2 = {333, 384, 256, FH, FH, KN, E_SCALE | E_GELU, AUTO, 0, 1, 0, 0};
  const ar_case_t *ks[2] = {&k1, &k2};
  loom_comm_t comm = NULL;
  loom_plan_t p[2] = {NULL, NULL};
  cudaStream_t s = NULL;
  void *a[2] = {NULL, NULL}, *b[2] = {NULL, NULL}, *o[2] = {NULL, NULL}, *bias[2] = {NULL, NULL}, *res[2] = {NULL, NULL};
  void *h = NULL;
  ar_inputs_t in[2];
  memset(in, 0, sizeof in);
  size_t free0 = 0, free1 = 0, total = 0;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) {
    const ar_case_t *k = ks[i];
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = k->m, d.n = k->n, d.k = k->k, d.ab_type = k->ab, d.c_type = k->ct, d.b_layout = k->lay, d.world_size = W;
    d.transfer = k->tr;
    LOOM_OK(loom_plan_gemm_ar(comm, &d, &p[i]));
    inputs_make(&in[i], k, W, i);
    const size_t ea = loom_dtype_size(k->ab), ec = loom_dtype_size(k->ct);
    CUDA_OK(cudaMalloc(&a[i], (size_t)(k->m * k->k) * ea));
    CUDA_OK(cudaMalloc(&b[i], (size_t)(k->k * k->n) * ea));
    CUDA_OK(cudaMalloc(&bias[i], (size_t)k->n * ec));
    CUDA_OK(cudaMalloc(&res[i], (size_t)(k->m * k->n) * ec));
    LOOM_OK(loom_malloc(comm, (size_t)(k->m * k->n) * ec, &o[i]));
    CUDA_OK(cudaMemcpy(a[i], in[i].a[rank], (size_t)(k->m * k->k) * ea, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b[i], in[i].b[rank], (size_t)(k->k * k->n) * ea, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(bias[i], in[i].bias, (size_t)k->n * ec, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(res[i], in[i].res, (size_t)(k->m * k->n) * ec, cudaMemcpyHostToDevice));
  }
  for (int it = 0; it < 200; ++it) {
    if (it == 10) {
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaMemGetInfo(&free0, &total));
    }
    const int i = it % 2;
    /* poisoned before the last call of each plan, which must rewrite it */
    if (it >= 198) CUDA_OK(cudaMemsetAsync(o[i], 0xff, (size_t)(ks[i]->m * ks[i]->n) * loom_dtype_size(ks[i]->ct), s));
    const loom_epilogue_t e = epi_of(ks[i], i, bias[i], res[i]);
    LOOM_OK(loom_gemm_ar(p[i], a[i], b[i], o[i], &e, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  LOOM_OK(loom_comm_get_async_error(comm));
  CUDA_OK(cudaMemGetInfo(&free1, &total));
  if (free1 != free0) loom_test_fail(__FILE__, __LINE__, "rank %d: device memory free %zu -> %zu over 190 calls", rank, free0, free1);
  for (int i = 0; i < 2; ++i) {
    const ar_case_t *k = ks[i];
    const size_t bytes = (size_t)(k->m * k->n) * loom_dtype_size(k->ct);
    h = malloc(bytes);
    CUDA_OK(cudaMemcpy(h, o[i], bytes, cudaMemcpyDeviceToHost));
    const loom_epilogue_t he = epi_of(k, i, in[i].bias, in[i].res);
    if (check_out(k, &in[i], &he, h, rank, W)) loom_test_fail(__FILE__, __LINE__, "rank %d: plan %d after 200 calls", rank, i);
    free(h);
    h = NULL;
  }
out:
  if (s) cudaStreamSynchronize(s);
  for (int i = 0; i < 2; ++i) {
    if (p[i]) CHECK_RESULT(loom_plan_destroy(p[i]), LOOM_SUCCESS);
    if (o[i]) CHECK_RESULT(loom_free(comm, o[i]), LOOM_SUCCESS);
    cudaFree(a[i]), cudaFree(b[i]), cudaFree(bias[i]), cudaFree(res[i]);
    inputs_free(&in[i]);
  }
  free(h);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_gemm_ar_back_to_back_alternating_shapes_no_drift_no_leak_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_back_to_back, NULL), 0);
}

/* The buffer contract: rank 0 is slowed down (a large copy on its stream
 * after every call) and then copies out into a snapshot of that call, on
 * its stream, before its next call; rank 1 runs ahead. Calls alternate two
 * input sets, so a peer's store of call i+1 landing in rank 0's out before
 * rank 0's stream passed its snapshot of call i would show as a snapshot
 * that differs from the others of its set. Every snapshot is checked. */
#define RACE_CALLS 24
static int rank_race(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, rank = ctx->rank;
  const ar_case_t k = {512, 256, 256, BF, BF, NK, E_MEGATRON, SM, 0, 1, 0, 0};
  const size_t ea = 2, ec = 2, out_bytes = (size_t)(k.m * k.n) * ec, slow_bytes = (size_t)256 << 20;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  void *a[2] = {NULL, NULL}, *b[2] = {NULL, NULL}, *bias = NULL, *res = NULL, *o = NULL, *snap = NULL;
  void *slow = NULL, *h = NULL;
  ar_inputs_t in[2];
  memset(in, 0, sizeof in);
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = k.m, d.n = k.n, d.k = k.k, d.b_layout = k.lay, d.world_size = W, d.transfer = LOOM_TP_SM_COPY;
    LOOM_OK(loom_plan_gemm_ar(comm, &d, &plan));
  }
  LOOM_OK(loom_malloc(comm, out_bytes, &o));
  CUDA_OK(cudaMalloc(&snap, out_bytes * RACE_CALLS));
  CUDA_OK(cudaMalloc(&bias, (size_t)k.n * ec));
  CUDA_OK(cudaMalloc(&res, out_bytes));
  if (rank == 0) CUDA_OK(cudaMalloc(&slow, 2 * slow_bytes));
  for (int i = 0; i < 2; ++i) {
    inputs_make(&in[i], &k, W, 100 + i);
    CUDA_OK(cudaMalloc(&a[i], (size_t)(k.m * k.k) * ea));
    CUDA_OK(cudaMalloc(&b[i], (size_t)(k.k * k.n) * ea));
    CUDA_OK(cudaMemcpy(a[i], in[i].a[rank], (size_t)(k.m * k.k) * ea, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(b[i], in[i].b[rank], (size_t)(k.k * k.n) * ea, cudaMemcpyHostToDevice));
  }
  /* bias and residual: set 0's for both sets (one epilogue) */
  CUDA_OK(cudaMemcpy(bias, in[0].bias, (size_t)k.n * ec, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(res, in[0].res, out_bytes, cudaMemcpyHostToDevice));
  {
    const loom_epilogue_t e = epi_of(&k, 0, bias, res);
    for (int c = 0; c < RACE_CALLS; ++c) {
      LOOM_OK(loom_gemm_ar(plan, a[c % 2], b[c % 2], o, &e, s));
      if (slow) CUDA_OK(cudaMemcpyAsync((char *)slow + slow_bytes, slow, slow_bytes, cudaMemcpyDeviceToDevice, s));
      CUDA_OK(cudaMemcpyAsync((char *)snap + (size_t)c * out_bytes, o, out_bytes, cudaMemcpyDeviceToDevice, s));
    }
  }
  CUDA_OK(cudaStreamSynchronize(s));
  LOOM_OK(loom_comm_get_async_error(comm));
  h = malloc(out_bytes * RACE_CALLS);
  CUDA_OK(cudaMemcpy(h, snap, out_bytes * RACE_CALLS, cudaMemcpyDeviceToHost));
  for (int i = 0; i < 2; ++i) {
    /* the set's reference with set 0's bias and residual */
    ar_inputs_t ref = in[i];
    ref.bias = in[0].bias, ref.res = in[0].res;
    const loom_epilogue_t he = epi_of(&k, 0, in[0].bias, in[0].res);
    if (check_out(&k, &ref, &he, (char *)h + (size_t)i * out_bytes, rank, W))
      loom_test_fail(__FILE__, __LINE__, "rank %d: input set %d wrong", rank, i);
  }
  for (int c = 2; c < RACE_CALLS; ++c)
    if (memcmp((char *)h + (size_t)c * out_bytes, (char *)h + (size_t)(c % 2) * out_bytes, out_bytes) != 0)
      loom_test_fail(__FILE__, __LINE__, "rank %d: the snapshot of call %d differs from call %d's (same inputs)", rank,
                     c, c % 2);
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (o) CHECK_RESULT(loom_free(comm, o), LOOM_SUCCESS);
  for (int i = 0; i < 2; ++i) cudaFree(a[i]), cudaFree(b[i]), inputs_free(&in[i]);
  cudaFree(bias), cudaFree(res), cudaFree(snap), cudaFree(slow);
  free(h);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_gemm_ar_slow_rank_reads_out_before_peers_store_the_next_call_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_race, NULL), 0);
}

/* The race with three peers running ahead of the slow rank, on one GPU. */
LOOM_TEST(gpu_world_gemm_ar_slow_rank_reads_out_before_peers_store_the_next_call_w4) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_race, NULL), 0);
}

/* Rank 1 never calls: rank 0's fused call gives up after the timeout,
 * names the wait, and its process stays usable. */
static int rank_absent_peer(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  void *a = NULL, *b = NULL, *c = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 512, d.n = 256, d.k = 256, d.b_layout = NK, d.world_size = ctx->size, d.transfer = LOOM_TP_SM_COPY;
  LOOM_OK(loom_plan_gemm_ar(comm, &d, &plan));
  LOOM_OK(loom_malloc(comm, 512 * 256 * 2, &c)); /* collective: before rank 1 goes away */
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&a, 512 * 256 * 2));
  CUDA_OK(cudaMalloc(&b, 256 * 256 * 2));
  CUDA_OK(cudaMemset(a, 0x3c, 512 * 256 * 2));
  CUDA_OK(cudaMemset(b, 0x3c, 256 * 256 * 2));
  if (ctx->rank == 0) {
    LOOM_OK(loom_gemm_ar(plan, a, b, c, NULL, s));
    CUDA_OK(cudaStreamSynchronize(s)); /* returns: every wait is bounded */
    CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
    const char *msg = loom_last_error();
    CHECK(strstr(msg, "partial tile") != NULL || strstr(msg, "GEMM+AllReduce") != NULL);
    printf("  rank 0: %s\n", msg);
    CHECK_RESULT(loom_gemm_ar(plan, a, b, c, NULL, s), LOOM_ERR_TIMEOUT);
  } else {
    sleep(2); /* absent while rank 0 waits */
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  if (ctx->rank == 0 && !loom_test_failures) {
    /* still usable: a plain GEMM runs */
    void *plain = NULL;
    loom_gemm_desc_t g = LOOM_GEMM_DESC(512, 256, 256, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    CHECK(cudaMalloc(&plain, 512 * 256 * 2) == cudaSuccess);
    CHECK_RESULT(loom_gemm(&g, a, b, plain, NULL, s), LOOM_SUCCESS);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
    cudaFree(plain);
  }
  cudaFree(a), cudaFree(b);
  if (s) cudaStreamDestroy(s);
  return loom_test_failures;
}

LOOM_TEST(gpu_gemm_ar_absent_peer_times_out_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}

LOOM_TEST(gpu_world_gemm_ar_absent_peer_times_out_w3) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}

/* Argument errors are named before anything is launched. */
static int rank_bad_args(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL, seq = NULL, rs = NULL, refused = NULL;
  void *a = NULL, *b = NULL, *plain = NULL, *sym = NULL, *bias = NULL, *big = NULL;
  static char host[256 * 128 * 2];
  const size_t big_bytes = (size_t)4 << 20;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 256, d.n = 128, d.k = 128, d.world_size = W, d.transfer = LOOM_TP_SM_COPY;
  /* the description */
  d.has_bias = 1;
  CHECK_RESULT(loom_plan_gemm_ar(comm, &d, &refused), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("has_bias=1");
  CHECK_MSG("epilogue");
  CHECK(refused == NULL);
  d.has_bias = 0;
  d.activation = LOOM_ACT_RELU;
  CHECK_RESULT(loom_plan_gemm_ar(comm, &d, &refused), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("activation=1");
  d.activation = LOOM_ACT_NONE;
  d.transfer = LOOM_TP_COPY_ENGINE;
  CHECK_RESULT(loom_plan_gemm_ar(comm, &d, &refused), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("transfer=LOOM_TP_COPY_ENGINE");
  d.transfer = LOOM_TP_SM_ATOMIC;
  CHECK_RESULT(loom_plan_gemm_ar(comm, &d, &refused), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("transfer=LOOM_TP_SM_ATOMIC");
  d.transfer = LOOM_TP_SM_COPY;
  LOOM_OK(loom_plan_gemm_ar(comm, &d, &plan));
  d.transfer = LOOM_TP_SEQUENTIAL;
  LOOM_OK(loom_plan_gemm_ar(comm, &d, &seq));
  LOOM_OK(loom_plan_gemm_rs(comm, &d, &rs));
  LOOM_OK(loom_malloc(comm, 256 * 128 * 2, &sym));
  CUDA_OK(cudaMalloc(&a, 256 * 128 * 2));
  CUDA_OK(cudaMalloc(&b, 128 * 128 * 2));
  CUDA_OK(cudaMalloc(&plain, 256 * 128 * 2));
  CUDA_OK(cudaMalloc(&bias, 128 * 2));
  CUDA_OK(cudaMalloc(&big, big_bytes));
  /* out: symmetric for a fused plan */
  CHECK_RESULT(loom_gemm_ar(plan, a, b, plain, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out=");
  CHECK_MSG("loom_malloc");
  CHECK_RESULT(loom_gemm_ar(plan, a, b, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out=NULL");
  CHECK_RESULT(loom_gemm_ar(plan, a, b, (char *)sym + 2, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not 16-byte aligned");
  CHECK_RESULT(loom_gemm_ar(plan, NULL, b, sym, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("a=NULL");
  CHECK_RESULT(loom_gemm_ar(plan, host, b, sym, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_gemm_ar: a=");
  {
    loom_epilogue_t e = LOOM_EPILOGUE_INIT;
    e.struct_size = 8;
    CHECK_RESULT(loom_gemm_ar(plan, a, b, sym, &e, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("struct_size=8");
    e.struct_size = sizeof e;
    e.dropout_p = 1.5f;
    CHECK_RESULT(loom_gemm_ar(plan, a, b, sym, &e, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("dropout_p=1.5");
    e.dropout_p = 0.f;
    e.residual = host;
    CHECK_RESULT(loom_gemm_ar(plan, a, b, sym, &e, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("epilogue->residual");
    e.residual = (char *)big + big_bytes - 64; /* the last 64 bytes of an allocation: [m, n] does not fit */
    CHECK_RESULT(loom_gemm_ar(plan, a, b, sym, &e, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("epilogue->residual");
    CHECK_MSG("the op reaches");
    e.residual = NULL;
    e.bias = host;
    CHECK_RESULT(loom_gemm_ar(plan, a, b, sym, &e, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("epilogue->bias");
  }
  /* other plans */
  CHECK_RESULT(loom_gemm_ar(rs, a, b, sym, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not a gemm_ar plan");
  CHECK_RESULT(loom_gemm_rs(plan, a, b, plain, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not a gemm_rs plan");
  {
    loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
    LOOM_OK(loom_tp_plan_info(plan, &info));
    CHECK_EQ_INT(info.transfer, LOOM_TP_SM_COPY);
    CHECK_EQ_INT(info.deterministic, 1);
    CHECK(info.comm_blocks > 0 && info.gemm_bm > 0 && info.gemm_grid > 0);
    /* the partial product, W x S rows of n */
    CHECK(info.symmetric_bytes >= (size_t)W * (size_t)loom__tp_shard_rows(256, W) * 128 * 2);
    LOOM_OK(loom_tp_plan_info(seq, &info));
    CHECK_EQ_INT(info.transfer, LOOM_TP_SEQUENTIAL);
    CHECK_EQ_INT(info.deterministic, 1);
    CHECK(info.symmetric_bytes >= (size_t)256 * 128 * 2);
  }
  /* a sequential plan takes any device memory as out (one valid call: collective) */
  CUDA_OK(cudaMemset(a, 0x3c, 256 * 128 * 2));
  CUDA_OK(cudaMemset(b, 0x3c, 128 * 128 * 2));
  LOOM_OK(loom_gemm_ar(seq, a, b, plain, NULL, NULL));
  CUDA_OK(cudaDeviceSynchronize());
  LOOM_OK(loom_comm_get_async_error(comm));
out:
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (seq) CHECK_RESULT(loom_plan_destroy(seq), LOOM_SUCCESS);
  if (rs) CHECK_RESULT(loom_plan_destroy(rs), LOOM_SUCCESS);
  if (sym) CHECK_RESULT(loom_free(comm, sym), LOOM_SUCCESS);
  cudaFree(a), cudaFree(b), cudaFree(plain), cudaFree(bias), cudaFree(big);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_gemm_ar_bad_arguments_are_named_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}

LOOM_TEST(gpu_gemm_ar_bad_arguments_are_named_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}

/* loom_gemm_ar_tune records a choice every rank agrees on, and an AUTO plan
 * of the same description takes it (and computes the right result). */
static int rank_tune(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  loom_comm_t comm = NULL;
  cudaStream_t s = NULL;
  loom_plan_t p = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    const ar_case_t k = {1024, 512, 768, BF, BF, NK, E_MEGATRON, AUTO, 0, 2, 0, 0};
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = k.m, d.n = k.n, d.k = k.k, d.b_layout = k.lay, d.world_size = W;
    LOOM_OK(loom_gemm_ar_tune(comm, &d, s));
    char key[160], value[160];
    int sms = 0, dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(loom__tp_tune_key(LOOM__TP_AR, &d, sms, key, sizeof key));
    CHECK(loom__tune_get(key, value, sizeof value));
    loom_tp_choice_t ch;
    CHECK_RESULT(loom__tp_tune_parse(value, &ch), LOOM_SUCCESS);
    const loom_tp_transfer_t t = ch.transfer;
    const int cb = ch.comm_blocks;
    CHECK(t == LOOM_TP_SEQUENTIAL || t == LOOM_TP_SM_COPY);
    if (ctx->rank == 0) printf("  tuned gemm_ar: %s\n", value);
    LOOM_OK(loom_plan_gemm_ar(comm, &d, &p));
    loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
    LOOM_OK(loom_tp_plan_info(p, &info));
    CHECK_EQ_INT(info.transfer, t);
    CHECK_EQ_INT(info.gemm, t == LOOM_TP_SEQUENTIAL ? ch.gemm : LOOM_TP_GEMM_LOOM);
    if (t == LOOM_TP_SM_COPY && cb > 0) CHECK_EQ_INT(info.comm_blocks, cb);
    LOOM_OK(loom_plan_destroy(p));
    p = NULL;
    (void)run_case(ctx, comm, &k); /* an AUTO plan of this description: the tuned choice, checked */
  }
out:
  if (p) (void)loom_plan_destroy(p);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_gemm_ar_tune_records_a_choice_plans_take_it_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_tune, NULL), 0);
}

LOOM_TEST(gpu_gemm_ar_tune_records_a_choice_plans_take_it_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_tune, NULL), 0);
}
