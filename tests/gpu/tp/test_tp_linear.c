/*
 * test_tp_linear.c - GPU tests of the tensor-parallel ops (loom_ag_gemm,
 * loom_gemm_rs) on W ranks (one process per GPU), against a CPU reference
 * in double precision:
 *  - random shapes: odd m, m not divisible by W, m < W (empty shards), both
 *    B layouts, every dtype combination, bias, every transfer (sequential,
 *    copy engine, SM copy) and other chunk sizes / block counts;
 *  - fresh random inputs on every call, outputs poisoned (NaN bytes) before
 *    each call, every element checked;
 *  - the gathered A returned in a user's symmetric buffer equals the real
 *    gather, bit for bit; a_shard in place inside a_full;
 *  - CUDA-graph capture, replayed with new inputs;
 *  - hundreds of back-to-back calls alternating ops and shapes, no drift, no
 *    leak;
 *  - a peer that never calls: LOOM_ERR_TIMEOUT naming the wait, and the
 *    process stays usable;
 *  - argument errors (a plain cudaMalloc pointer as a_full, NULL shards),
 *    and the same result code for the same arguments under every transfer.
 * Every rank generates every rank's inputs from the run's seed (so each can
 * compute its reference) and uploads its own.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "core/tune.h"
#include "ops/tp/tp_linear.h"
#include "ops/tp/tp_schedule.h"
#include "ref/ref.h"
#include "support/launch.h"

#define LAUNCH_TIMEOUT_S 300
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

typedef struct tp_case {
  int ag;                /* 1: loom_ag_gemm, 0: loom_gemm_rs */
  int64_t m, n, k;
  loom_dtype_t ab, ct;
  loom_layout_t lay;
  int bias;
  loom_tp_transfer_t tr;
  int chunk_rows, blocks;
  int calls;
  int user_a_full;       /* AG: a_full from loom_malloc (checked against the gather) */
  int in_place;          /* AG: a_shard is a_full's own rows */
  int graph;             /* capture one call, replay it `calls` times */
  int act;               /* AG: loom_activation_t after the bias */
  int gemm;              /* desc.sequential_gemm (loom_tp_gemm_t) */
} tp_case_t;

/* The activation in double (the reference). */
static double act_d(int act, double v) {
  switch (act) {
    case LOOM_ACT_RELU: return v > 0 ? v : 0;
    case LOOM_ACT_GELU_TANH: return 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    case LOOM_ACT_GELU_ERF: return 0.5 * v * (1 + erf(v * 0.7071067811865476));
    default: return v;
  }
}

static double eps_of(loom_dtype_t t) { return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_FP16 ? 1.0 / 1024 : 1e-6; }

static uint64_t seed_for(int call, int what, int rank) {
  return loom_test_seed() * 1000003ull + (uint64_t)call * 7919ull + (uint64_t)what * 104729ull + (uint64_t)rank;
}

static const char *dt(loom_dtype_t t) { return t == LOOM_FP32 ? "fp32" : t == LOOM_FP16 ? "fp16" : "bf16"; }
static const char *trn(loom_tp_transfer_t t) {
  return t == LOOM_TP_SEQUENTIAL ? "seq" : t == LOOM_TP_COPY_ENGINE ? "ce" : t == LOOM_TP_SM_COPY ? "sm"
         : t == LOOM_TP_SM_ATOMIC ? "atomic" : t == LOOM_TP_BULK_REDUCE ? "bulk"
         : t == LOOM_TP_DECOMPOSED ? "dec" : "auto";
}

/* Host inputs of one call. AG: a = A_full [m, k] (every shard), b = this
 * rank's B, bias this rank's. RS: a[p], b[p] every rank's A and B, bias the
 * global one. */
typedef struct tp_inputs {
  void *a[64], *b[64], *bias;
  int na;
} tp_inputs_t;

static void inputs_free(tp_inputs_t *in) {
  for (int i = 0; i < in->na; ++i) free(in->a[i]), free(in->b[i]);
  free(in->bias);
  memset(in, 0, sizeof *in);
}

static void inputs_make(tp_inputs_t *in, const tp_case_t *k, int rank, int W, int call) {
  const size_t ea = loom_dtype_size(k->ab), ec = loom_dtype_size(k->ct);
  in->na = k->ag ? 1 : W;
  for (int p = 0; p < in->na; ++p) {
    const int who = k->ag ? rank : p;
    in->a[p] = malloc((size_t)(k->m * k->k) * ea);
    in->b[p] = malloc((size_t)(k->k * k->n) * ea);
    loom_ref_fill_random(k->ab, in->a[p], (size_t)(k->m * k->k), seed_for(call, 1, k->ag ? 0 : who), 1.0);
    loom_ref_fill_random(k->ab, in->b[p], (size_t)(k->k * k->n), seed_for(call, 2, who), 1.0);
  }
  in->bias = malloc((size_t)k->n * ec);
  loom_ref_fill_random(k->ct, in->bias, (size_t)k->n, seed_for(call, 3, k->ag ? rank : 0), 1.0);
}

/* This rank's reference and each element's bound: AG all m rows; RS the
 * rows of its shard (rows r0 .. r0 + rows - 1, n columns). */
typedef struct tp_ref {
  int64_t r0, rows;
  double *ref, *bound;
} tp_ref_t;

static void ref_make(const tp_case_t *k, const tp_inputs_t *in, int rank, int W, tp_ref_t *R) {
  loom_gemm_desc_t d = LOOM_GEMM_DESC(k->m, k->n, k->k, k->ab, k->ct, k->lay, 0);
  const double eo = eps_of(k->ct) + ((double)k->k / 16.0) * 0x1p-24, ea = 1e-5 * sqrt((double)k->k) + 1e-6;
  R->r0 = k->ag ? 0 : loom__tp_shard_begin(k->m, W, rank);
  R->rows = k->ag ? k->m : loom__tp_shard_len(k->m, W, rank);
  const size_t cnt = (size_t)(R->rows * k->n);
  R->ref = (double *)calloc(cnt + 1, sizeof(double));
  R->bound = (double *)calloc(cnt + 1, sizeof(double));
  double *mag = (double *)calloc(cnt + 1, sizeof(double)), *part = (double *)malloc((cnt + 1) * sizeof(double));
  for (int p = 0; p < in->na; ++p) {
    const int whole = loom_ref_gemm_rows(&d, in->a[p], in->b[p], R->r0, R->rows, part) == 0;
    for (size_t i = 0; i < cnt; ++i) {
      const double v = whole ? part[i]
                             : loom_ref_gemm_element(&d, in->a[p], in->b[p], NULL, R->r0 + (int64_t)i / k->n,
                                                     (int64_t)i % k->n);
      R->ref[i] += v;
      mag[i] += fabs(v);
    }
  }
  for (size_t i = 0; i < cnt; ++i) {
    double ref = R->ref[i];
    if (k->bias) {
      const double bv = loom_ref_load(k->ct, in->bias, i % (size_t)k->n);
      ref += bv;
      mag[i] += fabs(bv);
    }
    /* RS: each partial rounded once to c_type, then summed (NCCL: in c_type) */
    double bound = k->ag ? eo * fabs(ref) + ea : eo * (fabs(ref) + (double)(W + 1) * mag[i]) + ea * W;
    if (k->act) {
      /* |act'| <= 1.13; the sequential path rounds before and after the activation */
      const double pre = ref;
      ref = act_d(k->act, pre);
      bound = 1.2 * bound + 2 * eps_of(k->ct) * fabs(ref) + 1e-6;
    }
    R->ref[i] = ref, R->bound[i] = bound;
  }
  free(mag), free(part);
}

static void ref_free(tp_ref_t *R) { free(R->ref), free(R->bound); }

/* The elements of `got` (this rank's output, host copy) out of R's bounds. */
static size_t ref_compare(const tp_case_t *k, const tp_ref_t *R, const void *got, int rank) {
  size_t bad = 0;
  for (size_t i = 0; i < (size_t)(R->rows * k->n); ++i) {
    const double x = loom_ref_load(k->ct, got, i);
    if (!(fabs(x - R->ref[i]) <= R->bound[i])) {
      if (bad < 5)
        fprintf(stderr, "  rank %d row %lld col %lld: got %.6g, expected %.6g (bound %.3g)\n", rank,
                (long long)(R->r0 + (int64_t)i / k->n), (long long)((int64_t)i % k->n), x, R->ref[i], R->bound[i]);
      ++bad;
    }
  }
  return bad;
}

/* Checks this rank's output (host copy `got`) against the reference.
 * Returns the elements out of bound. */
static size_t check_out(const tp_case_t *k, const tp_inputs_t *in, const void *got, int rank, int W) {
  tp_ref_t R;
  ref_make(k, in, rank, W, &R);
  const size_t bad = ref_compare(k, &R, got, rank);
  ref_free(&R);
  return bad;
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const tp_case_t *k) {
  const int W = ctx->size, rank = ctx->rank;
  const size_t ea = loom_dtype_size(k->ab), ec = loom_dtype_size(k->ct);
  const int64_t S = loom__tp_shard_rows(k->m, W), my0 = loom__tp_shard_begin(k->m, W, rank),
                mylen = loom__tp_shard_len(k->m, W, rank);
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  void *d_a = NULL, *d_b = NULL, *d_c = NULL, *d_bias = NULL, *d_full = NULL, *h_c = NULL, *h_full = NULL;
  tp_inputs_t in;
  memset(&in, 0, sizeof in);
  const int fails0 = loom_test_failures;

  loom_tp_desc_t desc = LOOM_TP_DESC_INIT;
  desc.m = k->m, desc.n = k->n, desc.k = k->k;
  desc.ab_type = k->ab, desc.c_type = k->ct, desc.b_layout = k->lay, desc.has_bias = k->bias;
  desc.world_size = W;
  desc.transfer = k->tr;
  desc.activation = (loom_activation_t)k->act;
  desc.chunk_rows = k->chunk_rows;
  desc.comm_blocks = k->blocks;
  desc.sequential_gemm = (loom_tp_gemm_t)k->gemm;
  LOOM_OK(k->ag ? loom_plan_ag_gemm(comm, &desc, &plan) : loom_plan_gemm_rs(comm, &desc, &plan));
  loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
  LOOM_OK(loom_tp_plan_info(plan, &info));
  /* the GEMM the plan says it runs: loom's for the hooked fused transfers; the
   * asked one, or cuBLASLt where it takes the dtypes, for the sequential,
   * decomposed and copy-engine shard GEMMs (loom_gemm in a world) */
  {
    /* the rule itself is host-tested (tp_sequential_gemm_resolution_and_refusals); a
     * description of AUTO knobs may have taken a tuned entry of either engine */
    if (desc.transfer != LOOM_TP_AUTO || desc.sequential_gemm != LOOM_TP_GEMM_AUTO)
      CHECK_EQ_INT(info.gemm, loom__tp_world_gemm(comm, loom__tp_resolve_gemm(&desc, info.transfer)));
    else
      CHECK(info.gemm == LOOM_TP_GEMM_LOOM || info.gemm == LOOM_TP_GEMM_CUBLASLT);
    if (rank == 0 && info.transfer == LOOM_TP_SEQUENTIAL)
      printf("    sequential GEMM: %s\n", info.gemm == LOOM_TP_GEMM_CUBLASLT ? "cuBLASLt" : "loom_gemm");
  }
  if (rank == 0)
    printf("  %s m=%lld n=%lld k=%lld %s->%s %s%s %s: transfer %d, S=%lld, chunk %d, blocks %d, tile %dx%d, grid %d%s%s\n",
           k->ag ? "ag_gemm" : "gemm_rs", (long long)k->m, (long long)k->n, (long long)k->k, dt(k->ab), dt(k->ct),
           k->lay == LOOM_B_NK ? "NK" : "KN", k->bias ? " bias" : "", trn(k->tr), (int)info.transfer,
           (long long)info.shard_rows, info.chunk_rows, info.comm_blocks, info.gemm_bm, info.gemm_bn, info.gemm_grid,
           k->graph ? " graph" : "", k->user_a_full ? (k->in_place ? " a_full(in place)" : " a_full") : "");
  loom_launch_step_time(rank, -1, "plan made");
  if (rank == 0 && k->act) printf("    activation %d\n", k->act);
  if (k->tr != LOOM_TP_AUTO && k->tr != info.transfer) CHECK_EQ_INT(info.transfer, k->tr);

  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const size_t a_bytes = k->ag ? (size_t)(S > 0 ? S : 1) * (size_t)k->k * ea : (size_t)(k->m * k->k) * ea;
  const size_t c_rows = k->ag ? (size_t)k->m : (size_t)(mylen > 0 ? mylen : 1);
  const size_t c_bytes = c_rows * (size_t)k->n * ec;
  CUDA_OK(cudaMalloc(&d_a, a_bytes));
  CUDA_OK(cudaMalloc(&d_b, (size_t)(k->k * k->n) * ea));
  CUDA_OK(cudaMalloc(&d_c, c_bytes));
  if (k->bias) CUDA_OK(cudaMalloc(&d_bias, (size_t)k->n * ec));
  if (k->user_a_full) LOOM_OK(loom_malloc(comm, (size_t)(k->m * k->k) * ea, &d_full)); /* collective */
  h_c = malloc(c_bytes);
  h_full = malloc((size_t)(k->m * k->k) * ea);
  /* the shard as the op reads it: in place inside a_full, or its own buffer */
  char *shard = k->in_place ? (char *)d_full + (size_t)my0 * (size_t)k->k * ea : (char *)d_a;

  for (int call = 0; call < k->calls; ++call) {
    inputs_free(&in);
    inputs_make(&in, k, rank, W, call);
    if (k->ag) {
      if (mylen > 0)
        CUDA_OK(cudaMemcpyAsync(shard, (char *)in.a[0] + (size_t)my0 * (size_t)k->k * ea,
                                (size_t)mylen * (size_t)k->k * ea, cudaMemcpyHostToDevice, s));
    } else {
      CUDA_OK(cudaMemcpyAsync(d_a, in.a[rank], a_bytes, cudaMemcpyHostToDevice, s));
    }
    CUDA_OK(cudaMemcpyAsync(d_b, in.b[k->ag ? 0 : rank], (size_t)(k->k * k->n) * ea, cudaMemcpyHostToDevice, s));
    if (k->bias) CUDA_OK(cudaMemcpyAsync(d_bias, in.bias, (size_t)k->n * ec, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemsetAsync(d_c, 0xff, c_bytes, s)); /* NaN in every dtype */
    if (k->user_a_full && !k->in_place) CUDA_OK(cudaMemsetAsync(d_full, 0xff, (size_t)(k->m * k->k) * ea, s));
    if (k->user_a_full && k->in_place) {
      /* poison every row but this rank's own */
      if (my0 > 0) CUDA_OK(cudaMemsetAsync(d_full, 0xff, (size_t)my0 * (size_t)k->k * ea, s));
      const size_t tail = (size_t)(k->m - my0 - mylen) * (size_t)k->k * ea;
      if (tail) CUDA_OK(cudaMemsetAsync((char *)d_full + (size_t)(my0 + mylen) * (size_t)k->k * ea, 0xff, tail, s));
    }
    loom_launch_step_time(rank, call, "uploads queued");
    /* every rank's (pageable) uploads done before any rank's call: an upload held behind a peer's
     * waiting push holds that peer's call back until the waits expire (8 ranks on one GPU) */
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(loom_launch_world_sync(ctx));
    if (k->graph && !exec) {
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      loom_result_t r = k->ag ? loom_ag_gemm(plan, shard, d_b, d_c, d_full, d_bias, s)
                              : loom_gemm_rs(plan, d_a, d_b, d_c, d_bias, s);
      cudaError_t ce = cudaStreamEndCapture(s, &graph);
      CHECK_RESULT(r, LOOM_SUCCESS);
      CUDA_OK(ce);
      loom_launch_step_time(rank, call, "captured");
      CHECK(loom_launch_graph_ready(ctx, graph, &exec, s) == 0); /* every rank's, before any launches */
      loom_launch_step_time(rank, call, "instantiated");
    }
    if (k->graph) {
      CUDA_OK(cudaGraphLaunch(exec, s));
    } else {
      LOOM_OK(k->ag ? loom_ag_gemm(plan, shard, d_b, d_c, d_full, d_bias, s)
                    : loom_gemm_rs(plan, d_a, d_b, d_c, d_bias, s));
    }
    loom_launch_step_time(rank, call, "launched");
    CUDA_OK(cudaStreamSynchronize(s));
    loom_launch_step_time(rank, call, "synced");
    LOOM_OK(loom_comm_get_async_error(comm));
    CUDA_OK(cudaMemcpy(h_c, d_c, c_bytes, cudaMemcpyDeviceToHost));
    if (k->ag || mylen > 0) {
      const size_t bad = check_out(k, &in, h_c, rank, W);
      if (bad) loom_test_fail(__FILE__, __LINE__, "rank %d call %d: %zu elements out of bound", rank, call, bad);
    }
    /* a plan that says it is deterministic gives the same bits again (every
     * rank makes the second call: it is collective) */
    if (!k->graph) {
      CUDA_OK(cudaMemsetAsync(d_c, 0xff, c_bytes, s));
      LOOM_OK(k->ag ? loom_ag_gemm(plan, shard, d_b, d_c, d_full, d_bias, s)
                    : loom_gemm_rs(plan, d_a, d_b, d_c, d_bias, s));
      CUDA_OK(cudaStreamSynchronize(s));
      if (info.deterministic && (k->ag || mylen > 0)) {
        void *again = malloc(c_bytes);
        CUDA_OK(cudaMemcpy(again, d_c, c_bytes, cudaMemcpyDeviceToHost));
        if (memcmp(again, h_c, c_bytes) != 0)
          loom_test_fail(__FILE__, __LINE__, "rank %d call %d: a deterministic plan gave other bits the second time",
                         rank, call);
        free(again);
      }
    }
    if (k->ag && k->user_a_full) {
      CUDA_OK(cudaMemcpy(h_full, d_full, (size_t)(k->m * k->k) * ea, cudaMemcpyDeviceToHost));
      if (memcmp(h_full, in.a[0], (size_t)(k->m * k->k) * ea) != 0)
        loom_test_fail(__FILE__, __LINE__, "rank %d call %d: the gathered A differs from the real gather", rank, call);
    }
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (d_full) CHECK_RESULT(loom_free(comm, d_full), LOOM_SUCCESS);
  cudaFree(d_a), cudaFree(d_b), cudaFree(d_c), cudaFree(d_bias);
  if (s) cudaStreamDestroy(s);
  free(h_c), free(h_full);
  inputs_free(&in);
  return loom_test_failures != fails0;
}

static int run_case_v(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *k) {
  const tp_case_t *c = (const tp_case_t *)k;
  /* LOOM_GEMM_PATH=sm80 (the sm80 kernels on a Hopper GPU): the bulk
   * reduction needs the sm90 kernels and is refused at plan time (a host
   * test checks that refusal); the other cases run on the sm80 kernels */
  const char *path = getenv("LOOM_GEMM_PATH");
  if (c->tr == LOOM_TP_BULK_REDUCE && path && !strcmp(path, "sm80")) {
    if (ctx->rank == 0) printf("    (skipped: LOOM_TP_BULK_REDUCE needs the sm90 kernels, LOOM_GEMM_PATH=sm80)\n");
    return 0;
  }
  return run_case(ctx, comm, c);
}

static int gpus(int need) { return loom_test_gpus(need); }

/* A world refuses the sequential and decomposed transfers (NCCL) and SM-copy
 * block counts at or above a rank's share of the SMs; the bulk reduction
 * takes only W equal shards of 64-row multiples (as on GPUs of their own). */
static int world_skip(const void *one, int W, int sms) {
  const tp_case_t *k = (const tp_case_t *)one;
  return k->tr == LOOM_TP_SEQUENTIAL || k->tr == LOOM_TP_DECOMPOSED || k->blocks >= sms ||
         (k->tr == LOOM_TP_BULK_REDUCE && !loom__tp_bulk_shape_ok(k->m, W));
}

static void run_suite(int W, const tp_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 20000, run_case_v, world_skip};
  loom_case_suite_run(W, LAUNCH_TIMEOUT_S, &su);
}

/* The suite as W ranks on one GPU (a loom world): every fused transfer. */
static void run_world(int W, const tp_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 20000, run_case_v, world_skip};
  if (loom_test_gpus(1)) loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}

#define BF LOOM_BF16
#define FH LOOM_FP16
#define F32 LOOM_FP32
#define KN LOOM_B_KN
#define NK LOOM_B_NK
#define SEQ LOOM_TP_SEQUENTIAL
#define CE LOOM_TP_COPY_ENGINE
#define SM LOOM_TP_SM_COPY
#define AT LOOM_TP_SM_ATOMIC
#define BK LOOM_TP_BULK_REDUCE
#define DEC LOOM_TP_DECOMPOSED

static const tp_case_t g_ag[] = {
    {.ag = 1, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = CE, .calls = 2},
    {.ag = 1, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = SM, .calls = 2},
    {.ag = 1, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = SEQ, .calls = 2},
    {.ag = 1, .m = 999, .n = 384, .k = 256, .ab = BF, .ct = F32, .lay = KN, .bias = 1, .tr = CE, .calls = 2},   /* odd m, uneven shards */
    {.ag = 1, .m = 999, .n = 384, .k = 256, .ab = FH, .ct = FH, .lay = NK, .bias = 1, .tr = SM, .chunk_rows = 7, .blocks = 5, .calls = 2},    /* odd chunks, few blocks */
    {.ag = 1, .m = 999, .n = 384, .k = 256, .ab = FH, .ct = BF, .lay = KN, .tr = SEQ, .calls = 1},
    {.ag = 1, .m = 1, .n = 128, .k = 64, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 2},       /* m < W: an empty shard */
    {.ag = 1, .m = 3, .n = 136, .k = 72, .ab = BF, .ct = FH, .lay = NK, .tr = SM, .calls = 2},
    {.ag = 1, .m = 3, .n = 136, .k = 72, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SEQ, .calls = 1},
    {.ag = 1, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 2, .user_a_full = 1},    /* decode m, gathered A returned */
    {.ag = 1, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .chunk_rows = 1, .calls = 2, .user_a_full = 1, .in_place = 1},    /* shard in place, 1-row chunks */
    {.ag = 1, .m = 1000, .n = 512, .k = 1024, .ab = BF, .ct = BF, .lay = KN, .tr = SM, .chunk_rows = 64, .blocks = 16, .calls = 2, .user_a_full = 1},
    {.ag = 1, .m = 2048, .n = 768, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .chunk_rows = 128, .calls = 2, .user_a_full = 1, .in_place = 1},
    {.ag = 1, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 3, .graph = 1},    /* graph replays */
    {.ag = 1, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 3, .user_a_full = 1, .graph = 1},
    /* fc1 + bias + activation in one call (the TP MLP's first layer) */
    {.ag = 1, .m = 1000, .n = 384, .k = 256, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 2, .act = LOOM_ACT_GELU_TANH},
    {.ag = 1, .m = 999, .n = 256, .k = 512, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = SM, .calls = 2, .act = LOOM_ACT_GELU_ERF},
    {.ag = 1, .m = 130, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .tr = SEQ, .calls = 2, .act = LOOM_ACT_RELU},
    /* every activation's hooked kernel (one instantiation each), 64-row tiles and a graph too */
    {.ag = 1, .m = 300, .n = 640, .k = 256, .ab = FH, .ct = FH, .lay = NK, .bias = 1, .tr = CE, .calls = 2, .act = LOOM_ACT_RELU},
    {.ag = 1, .m = 64, .n = 512, .k = 256, .ab = BF, .ct = BF, .lay = KN, .bias = 1, .tr = CE, .calls = 3, .graph = 1, .act = LOOM_ACT_GELU_ERF},
    /* the sequential path through each GEMM engine, graph replays too */
    {.ag = 1, .m = 999, .n = 384, .k = 256, .ab = BF, .ct = BF, .lay = KN, .bias = 1, .tr = SEQ, .calls = 2, .gemm = LOOM_TP_GEMM_LOOM},
    {.ag = 1, .m = 777, .n = 256, .k = 512, .ab = FH, .ct = F32, .lay = NK, .bias = 1, .tr = SEQ, .calls = 3, .user_a_full = 1, .graph = 1, .gemm = LOOM_TP_GEMM_CUBLASLT},
    /* the decomposed path: a GEMM per shard beside NCCL's send / receive */
    {.ag = 1, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = DEC, .calls = 2},
    {.ag = 1, .m = 999, .n = 384, .k = 256, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = DEC, .calls = 2, .user_a_full = 1},   /* uneven shards, gathered A returned */
    {.ag = 1, .m = 1, .n = 128, .k = 64, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = DEC, .calls = 2},       /* an empty shard */
    {.ag = 1, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = DEC, .calls = 2, .user_a_full = 1, .in_place = 1},
    {.ag = 1, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = DEC, .calls = 3, .user_a_full = 1, .graph = 1, .act = LOOM_ACT_GELU_TANH, .gemm = LOOM_TP_GEMM_CUBLASLT},
    {.ag = 1, .m = 1000, .n = 384, .k = 256, .ab = FH, .ct = BF, .lay = NK, .tr = DEC, .calls = 2, .act = LOOM_ACT_RELU},   /* loom_gemm (fp16 -> bf16) */
    {.ag = 1, .m = 1000, .n = 384, .k = 256, .ab = BF, .ct = BF, .lay = KN, .bias = 1, .tr = DEC, .calls = 2, .graph = 1, .gemm = LOOM_TP_GEMM_LOOM},
};

/* ag = 0: GEMM + ReduceScatter */
static const tp_case_t g_rs[] = {
    {.ag = 0, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = SM, .calls = 2},
    {.ag = 0, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = SEQ, .calls = 2},
    {.ag = 0, .m = 999, .n = 384, .k = 256, .ab = BF, .ct = F32, .lay = KN, .bias = 1, .tr = SM, .blocks = 4, .calls = 2},   /* odd m, uneven shards */
    {.ag = 0, .m = 999, .n = 384, .k = 256, .ab = FH, .ct = FH, .lay = NK, .bias = 1, .tr = SEQ, .calls = 1},
    {.ag = 0, .m = 1, .n = 128, .k = 64, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 2},       /* m < W: an empty shard */
    {.ag = 0, .m = 3, .n = 136, .k = 72, .ab = FH, .ct = BF, .lay = KN, .bias = 1, .tr = SEQ, .calls = 1},
    {.ag = 0, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 3},    /* decode m */
    {.ag = 0, .m = 200, .n = 520, .k = 264, .ab = FH, .ct = F32, .lay = NK, .tr = SM, .blocks = 1, .calls = 2},   /* tiles across shards, one reducer block */
    {.ag = 0, .m = 2048, .n = 768, .k = 512, .ab = BF, .ct = BF, .lay = KN, .bias = 1, .tr = SM, .blocks = 16, .calls = 2},
    {.ag = 0, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 4, .graph = 1},    /* graph replays */
    /* the atomic reduction: fp32 additions into the owner's accumulator */
    {.ag = 0, .m = 999, .n = 384, .k = 256, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = AT, .calls = 3},
    {.ag = 0, .m = 1, .n = 128, .k = 64, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = AT, .calls = 2},
    {.ag = 0, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .tr = AT, .blocks = 6, .calls = 2, .graph = 1},
    /* bulk reductions from the GEMM's epilogue into the owners (sm90; shards of 64-row multiples) */
    {.ag = 0, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = BK, .calls = 3},
    {.ag = 0, .m = 1024, .n = 520, .k = 264, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = BK, .calls = 2},   /* fp32 adds, partial tiles in n */
    {.ag = 0, .m = 384, .n = 448, .k = 256, .ab = FH, .ct = FH, .lay = NK, .bias = 1, .tr = BK, .calls = 2},
    {.ag = 0, .m = 128, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = BK, .calls = 4, .graph = 1},  /* 64-row shards, graph replays */
    {.ag = 0, .m = 2048, .n = 1536, .k = 256, .ab = BF, .ct = BF, .lay = KN, .bias = 1, .tr = BK, .calls = 3},   /* more tiles than SMs */
    /* the sequential path through each GEMM engine, graph replays too */
    {.ag = 0, .m = 999, .n = 384, .k = 256, .ab = BF, .ct = BF, .lay = KN, .bias = 1, .tr = SEQ, .calls = 2, .gemm = LOOM_TP_GEMM_LOOM},
    {.ag = 0, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = F32, .lay = NK, .bias = 1, .tr = SEQ, .calls = 3, .graph = 1, .gemm = LOOM_TP_GEMM_CUBLASLT},
    /* the decomposed path: a GEMM per shard, each reduced to its owner beside the next */
    {.ag = 0, .m = 512, .n = 256, .k = 384, .ab = BF, .ct = BF, .lay = NK, .tr = DEC, .calls = 2},
    {.ag = 0, .m = 999, .n = 384, .k = 256, .ab = FH, .ct = FH, .lay = NK, .bias = 1, .tr = DEC, .calls = 2},   /* uneven shards */
    {.ag = 0, .m = 1, .n = 128, .k = 64, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = DEC, .calls = 2},       /* an empty shard */
    {.ag = 0, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = F32, .lay = KN, .bias = 1, .tr = DEC, .calls = 3, .graph = 1, .gemm = LOOM_TP_GEMM_CUBLASLT},
    {.ag = 0, .m = 2048, .n = 768, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = DEC, .calls = 2, .gemm = LOOM_TP_GEMM_LOOM},
};

LOOM_TEST(gpu_tp_ag_gemm_matches_reference_w2) {
  if (gpus(2)) run_suite(2, g_ag, (int)(sizeof g_ag / sizeof *g_ag));
}

LOOM_TEST(gpu_tp_gemm_rs_matches_reference_w2) {
  if (gpus(2)) run_suite(2, g_rs, (int)(sizeof g_rs / sizeof *g_rs));
}

LOOM_WORLD_TESTS(gpu_world_tp_ag_gemm_matches_reference, run_world, g_ag, (int)(sizeof g_ag / sizeof *g_ag))
LOOM_WORLD_TESTS(gpu_world_tp_gemm_rs_matches_reference, run_world, g_rs, (int)(sizeof g_rs / sizeof *g_rs))

LOOM_TEST(gpu_tp_ops_on_one_rank) {
  /* W = 1: AUTO is the GEMM alone; the fused transfers still run their
   * whole protocol (begin, local copy and signals, hooked GEMM waits and
   * per-destination signals, the reduction) on one GPU */
  static const tp_case_t one[] = {
      {.ag = 1, .m = 300, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = LOOM_TP_AUTO, .calls = 1},
      {.ag = 0, .m = 300, .n = 256, .k = 128, .ab = BF, .ct = F32, .lay = KN, .bias = 1, .tr = LOOM_TP_AUTO, .calls = 1},
      {.ag = 1, .m = 300, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 2},
      {.ag = 1, .m = 513, .n = 384, .k = 256, .ab = FH, .ct = F32, .lay = KN, .tr = SM, .chunk_rows = 33, .blocks = 3, .calls = 2},
      {.ag = 1, .m = 640, .n = 256, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 3, .user_a_full = 1, .in_place = 1, .graph = 1},
      {.ag = 1, .m = 1000, .n = 512, .k = 256, .ab = BF, .ct = BF, .lay = NK, .tr = CE, .chunk_rows = 100, .calls = 3, .user_a_full = 1, .graph = 1},
      {.ag = 0, .m = 300, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 2},
      {.ag = 0, .m = 320, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = BK, .calls = 3},
      {.ag = 0, .m = 1000, .n = 520, .k = 264, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = SM, .blocks = 2, .calls = 2},
      {.ag = 0, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 4, .graph = 1},
      {.ag = 0, .m = 777, .n = 256, .k = 512, .ab = BF, .ct = F32, .lay = NK, .bias = 1, .tr = AT, .calls = 3, .graph = 1},
      {.ag = 0, .m = 300, .n = 520, .k = 264, .ab = FH, .ct = FH, .lay = KN, .tr = AT, .blocks = 4, .calls = 2},
      {.ag = 1, .m = 500, .n = 256, .k = 256, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 2, .act = LOOM_ACT_GELU_TANH},
      /* decode m: 64-row tiles in the hooked kernels */
      {.ag = 1, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = CE, .calls = 2, .user_a_full = 1},
      {.ag = 1, .m = 37, .n = 512, .k = 1024, .ab = FH, .ct = F32, .lay = KN, .tr = SM, .chunk_rows = 5, .calls = 2, .act = LOOM_ACT_GELU_TANH},
      {.ag = 0, .m = 48, .n = 1024, .k = 512, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SM, .calls = 2},
      {.ag = 0, .m = 64, .n = 512, .k = 1024, .ab = FH, .ct = F32, .lay = KN, .tr = SM, .calls = 2, .graph = 1},
      {.ag = 1, .m = 500, .n = 256, .k = 256, .ab = BF, .ct = F32, .lay = KN, .bias = 1, .tr = SEQ, .calls = 1, .act = LOOM_ACT_GELU_ERF},
      /* the sequential path through each GEMM engine (AUTO: cuBLASLt where it takes the dtypes) */
      {.ag = 1, .m = 300, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SEQ, .calls = 2, .gemm = LOOM_TP_GEMM_LOOM},
      {.ag = 1, .m = 300, .n = 256, .k = 128, .ab = FH, .ct = FH, .lay = KN, .bias = 1, .tr = SEQ, .calls = 3, .user_a_full = 1, .graph = 1, .gemm = LOOM_TP_GEMM_CUBLASLT},
      {.ag = 0, .m = 513, .n = 384, .k = 256, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = SEQ, .calls = 2, .gemm = LOOM_TP_GEMM_LOOM},
      {.ag = 0, .m = 513, .n = 384, .k = 256, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = SEQ, .calls = 3, .graph = 1, .gemm = LOOM_TP_GEMM_CUBLASLT},
      {.ag = 0, .m = 64, .n = 1024, .k = 512, .ab = BF, .ct = FH, .lay = NK, .bias = 1, .tr = SEQ, .calls = 2, .gemm = LOOM_TP_GEMM_AUTO},
      /* the decomposed path on one rank: the GEMM of the one shard */
      {.ag = 1, .m = 300, .n = 256, .k = 128, .ab = BF, .ct = BF, .lay = NK, .bias = 1, .tr = DEC, .calls = 3, .user_a_full = 1, .graph = 1, .act = LOOM_ACT_GELU_ERF},
      {.ag = 0, .m = 513, .n = 384, .k = 256, .ab = FH, .ct = F32, .lay = KN, .bias = 1, .tr = DEC, .calls = 3, .graph = 1},
  };
  if (gpus(1)) run_suite(1, one, (int)(sizeof one / sizeof *one));
}

/* Hundreds of calls back to back, alternating two ops of different shapes
 * on one stream, then both outputs checked; device memory the same before
 * and after. arg: NULL (AUTO) or the transfer both plans take. */
static int rank_back_to_back(loom_rank_ctx_t *ctx, void *arg) {
  const loom_tp_transfer_t tr = arg ? *(const loom_tp_transfer_t *)arg : LOOM_TP_AUTO;
  const int W = ctx->size, rank = ctx->rank;
  const tp_case_t ka = {1, 1000, 256, 512, BF, BF, NK, 1, LOOM_TP_AUTO, 0, 0, 1, 0, 0, 0, 0, 0};
  const tp_case_t kr = {0, 640, 384, 256, BF, BF, NK, 1, LOOM_TP_AUTO, 0, 0, 1, 0, 0, 0, 0, 0};
  loom_comm_t comm = NULL;
  loom_plan_t pa = NULL, pr = NULL;
  cudaStream_t s = NULL;
  void *a1 = NULL, *b1 = NULL, *c1 = NULL, *bias1 = NULL, *a2 = NULL, *b2 = NULL, *c2 = NULL, *bias2 = NULL;
  void *h1 = NULL, *h2 = NULL;
  tp_inputs_t i1, i2;
  memset(&i1, 0, sizeof i1), memset(&i2, 0, sizeof i2);
  size_t free0 = 0, free1 = 0, total = 0;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  {
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = ka.m, d.n = ka.n, d.k = ka.k, d.b_layout = NK, d.has_bias = 1, d.world_size = W, d.transfer = tr;
    LOOM_OK(loom_plan_ag_gemm(comm, &d, &pa));
    d.m = kr.m, d.n = kr.n, d.k = kr.k;
    LOOM_OK(loom_plan_gemm_rs(comm, &d, &pr));
  }
  inputs_make(&i1, &ka, rank, W, 0);
  inputs_make(&i2, &kr, rank, W, 0);
  const int64_t S1 = loom__tp_shard_rows(ka.m, W), b1r = loom__tp_shard_begin(ka.m, W, rank),
                l1 = loom__tp_shard_len(ka.m, W, rank), l2 = loom__tp_shard_len(kr.m, W, rank);
  CUDA_OK(cudaMalloc(&a1, (size_t)(S1 * ka.k) * 2));
  CUDA_OK(cudaMalloc(&b1, (size_t)(ka.k * ka.n) * 2));
  CUDA_OK(cudaMalloc(&c1, (size_t)(ka.m * ka.n) * 2));
  CUDA_OK(cudaMalloc(&bias1, (size_t)ka.n * 2));
  CUDA_OK(cudaMalloc(&a2, (size_t)(kr.m * kr.k) * 2));
  CUDA_OK(cudaMalloc(&b2, (size_t)(kr.k * kr.n) * 2));
  CUDA_OK(cudaMalloc(&c2, (size_t)((l2 > 0 ? l2 : 1) * kr.n) * 2));
  CUDA_OK(cudaMalloc(&bias2, (size_t)kr.n * 2));
  CUDA_OK(cudaMemcpy(a1, (char *)i1.a[0] + (size_t)(b1r * ka.k) * 2, (size_t)(l1 * ka.k) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b1, i1.b[0], (size_t)(ka.k * ka.n) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(bias1, i1.bias, (size_t)ka.n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(a2, i2.a[rank], (size_t)(kr.m * kr.k) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(b2, i2.b[rank], (size_t)(kr.k * kr.n) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(bias2, i2.bias, (size_t)kr.n * 2, cudaMemcpyHostToDevice));
  for (int it = 0; it < 1000; ++it) {
    if (it == 10) {
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaMemGetInfo(&free0, &total));
    }
    if (it % 2 == 0) LOOM_OK(loom_ag_gemm(pa, a1, b1, c1, NULL, bias1, s));
    else LOOM_OK(loom_gemm_rs(pr, a2, b2, c2, bias2, s));
    /* poisoned before the last call of each op, which must rewrite them */
    if (it == 997) CUDA_OK(cudaMemsetAsync(c1, 0xff, (size_t)(ka.m * ka.n) * 2, s));
    if (it == 998) CUDA_OK(cudaMemsetAsync(c2, 0xff, (size_t)((l2 > 0 ? l2 : 1) * kr.n) * 2, s));
  }
  CUDA_OK(cudaStreamSynchronize(s));
  LOOM_OK(loom_comm_get_async_error(comm));
  CUDA_OK(cudaMemGetInfo(&free1, &total));
  if (free1 != free0) loom_test_fail(__FILE__, __LINE__, "rank %d: device memory free %zu -> %zu over 990 calls", rank, free0, free1);
  h1 = malloc((size_t)(ka.m * ka.n) * 2);
  h2 = malloc((size_t)((l2 > 0 ? l2 : 1) * kr.n) * 2);
  CUDA_OK(cudaMemcpy(h1, c1, (size_t)(ka.m * ka.n) * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(h2, c2, (size_t)((l2 > 0 ? l2 : 1) * kr.n) * 2, cudaMemcpyDeviceToHost));
  if (check_out(&ka, &i1, h1, rank, W)) loom_test_fail(__FILE__, __LINE__, "rank %d: ag_gemm after 1000 calls", rank);
  if (l2 > 0 && check_out(&kr, &i2, h2, rank, W))
    loom_test_fail(__FILE__, __LINE__, "rank %d: gemm_rs after 1000 calls", rank);
out:
  if (s) cudaStreamSynchronize(s);
  if (pa) CHECK_RESULT(loom_plan_destroy(pa), LOOM_SUCCESS);
  if (pr) CHECK_RESULT(loom_plan_destroy(pr), LOOM_SUCCESS);
  cudaFree(a1), cudaFree(b1), cudaFree(c1), cudaFree(bias1), cudaFree(a2), cudaFree(b2), cudaFree(c2), cudaFree(bias2);
  free(h1), free(h2);
  inputs_free(&i1), inputs_free(&i2);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_thousand_calls_alternating_ops_no_drift_no_leak_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_back_to_back, NULL), 0);
}

/* The same through the decomposed path (NCCL on the plans' side streams). */
LOOM_TEST(gpu_tp_thousand_calls_decomposed_no_drift_no_leak_w2) {
  loom_tp_transfer_t tr = LOOM_TP_DECOMPOSED;
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_back_to_back, &tr), 0);
}

/* The soak as 4 ranks on one GPU (AUTO: fused in a world). */
LOOM_TEST(gpu_world_tp_thousand_calls_alternating_ops_no_drift_no_leak_w4) {
  if (gpus(1)) CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_back_to_back, NULL), 0);
}

/* A fused AllGather+GEMM whose GEMM splits k and reduces the partials
 * apart (split_reduce.h, a programmatic dependent of the GEMM), taken from
 * the tuning cache: the GEMM's tiles wait for the peers' chunk signals,
 * which kernels on the peers' side streams set on the SMs the GEMM leaves
 * free. The reduction must not be parked on those SMs while the GEMM waits
 * (it once was: every rank's wait expired, two H200s, a held-out shape). */
static int rank_ag_reduced_apart(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const tp_case_t k = {.ag = 1, .m = 1024, .n = 384, .k = 4096, .ab = BF, .ct = BF, .lay = NK, .bias = 1,
                       .tr = CE, .calls = 3};
  loom_gemm_config_t cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.bm = 128, cfg.bn = 128, cfg.group = 4, cfg.sk_tiles = -1, cfg.sk_splits = 4, cfg.sk_reduce = 1;
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  loom__gemm_config_format(&cfg, value, sizeof value);
  const loom_gemm_desc_t g = LOOM_GEMM_DESC(k.m, k.n, k.k, k.ab, k.ct, k.lay, k.bias);
  for (int sms = 1; sms <= 512; ++sms) /* whatever SM count the plan's GEMM keeps */
    if (loom__gemm_tune_key(&g, "sm90", sms, key, sizeof key)) CHECK_RESULT(loom__tune_put(key, value), LOOM_SUCCESS);
  loom_config_t cc = LOOM_CONFIG_INIT;
  cc.timeout_ms = 10000;
  loom_comm_t comm = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cc, &comm), return 1);
  {
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = k.m, d.n = k.n, d.k = k.k, d.b_layout = NK, d.has_bias = 1, d.world_size = ctx->size, d.transfer = CE;
    loom_plan_t plan = NULL;
    loom_tp_state_t *st = NULL;
    LOOM_OK(loom_plan_ag_gemm(comm, &d, &plan));
    LOOM_OK(loom__tp_state(plan, "test", LOOM__TP_AG, &st));
    const char *path = getenv("LOOM_GEMM_PATH");
    if (!(path && !strcmp(path, "sm80"))) CHECK_EQ_INT(st->gemm_cfg.sk_reduce, 1); /* the path under test */
    LOOM_OK(loom_plan_destroy(plan));
  }
  run_case(ctx, comm, &k);
out:
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  loom__tune_clear();
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_ag_gemm_split_k_reduced_apart_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_ag_reduced_apart, NULL), 0);
}

/* The same as 3 ranks on one GPU (each rank's GEMM keeps its share of the SMs). */
LOOM_TEST(gpu_world_tp_ag_gemm_split_k_reduced_apart_w3) {
  if (gpus(1)) CHECK_EQ_INT(loom_launch_world(3, LAUNCH_TIMEOUT_S, rank_ag_reduced_apart, NULL), 0);
}

/* Rank 1 never calls: rank 0's fused call gives up after the timeout,
 * names the wait, and its process stays usable (plans and comm destroyed,
 * a plain loom_gemm still runs). */
static int rank_absent_peer(loom_rank_ctx_t *ctx, void *arg) {
  const int rs = arg != NULL, bulk = rs && *(const int *)arg == 2;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  void *a = NULL, *b = NULL, *c = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 512, d.n = 256, d.k = 256, d.b_layout = NK, d.world_size = ctx->size;
  d.transfer = bulk ? LOOM_TP_BULK_REDUCE : rs ? LOOM_TP_SM_COPY : LOOM_TP_COPY_ENGINE;
  LOOM_OK(rs ? loom_plan_gemm_rs(comm, &d, &plan) : loom_plan_ag_gemm(comm, &d, &plan));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&a, 512 * 256 * 2));
  CUDA_OK(cudaMalloc(&b, 256 * 256 * 2));
  CUDA_OK(cudaMalloc(&c, 512 * 256 * 2));
  CUDA_OK(cudaMemset(a, 0x3c, 512 * 256 * 2));
  CUDA_OK(cudaMemset(b, 0x3c, 256 * 256 * 2));
  if (ctx->rank == 0) {
    LOOM_OK(rs ? loom_gemm_rs(plan, a, b, c, NULL, s) : loom_ag_gemm(plan, a, b, c, NULL, NULL, s));
    CUDA_OK(cudaStreamSynchronize(s)); /* returns: every wait is bounded */
    CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
    const char *msg = loom_last_error();
    CHECK(strstr(msg, bulk ? "sum" : rs ? "partial tile" : "GEMM prologue") != NULL || strstr(msg, "writable") != NULL);
    printf("  rank 0: %s\n", msg);
    CHECK_RESULT(rs ? loom_gemm_rs(plan, a, b, c, NULL, s) : loom_ag_gemm(plan, a, b, c, NULL, NULL, s),
                 LOOM_ERR_TIMEOUT);
  } else {
    sleep(2); /* absent while rank 0 waits */
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  if (ctx->rank == 0 && !loom_test_failures) {
    /* still usable: a plain GEMM runs */
    loom_gemm_desc_t g = LOOM_GEMM_DESC(512, 256, 256, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    CHECK_RESULT(loom_gemm(&g, a, b, c, NULL, s), LOOM_SUCCESS);
    CHECK(cudaStreamSynchronize(s) == cudaSuccess);
  }
  cudaFree(a), cudaFree(b), cudaFree(c);
  if (s) cudaStreamDestroy(s);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_ag_gemm_absent_peer_times_out_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
}

LOOM_TEST(gpu_tp_gemm_rs_absent_peer_times_out_w2) {
  static int one = 1;
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, &one), 0);
}

LOOM_TEST(gpu_tp_gemm_rs_bulk_absent_peer_times_out_w2) {
  static int two = 2;
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, &two), 0);
}

/* The three as 4 ranks on one GPU, ranks 1..3 absent (a world each). */
LOOM_TEST(gpu_world_tp_absent_peer_times_out_w4) {
  static int one = 1, two = 2;
  if (!gpus(1)) return;
  CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_absent_peer, NULL), 0);
  CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_absent_peer, &one), 0);
  CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_absent_peer, &two), 0);
}

/* BULK_REDUCE soak: 1000 calls back to back (no host sync between them),
 * each into its own output slot. A peer's adds of call i + 1 landing before
 * the owner's pass of call i has read and zeroed its sum buffer would show
 * in a slot: slot 0 is checked against the reference, and at W = 2 (one
 * add per element: the same bits every call) every other slot must equal
 * it bit for bit; above, each slot against the reference. */
static int rank_bulk_soak(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  enum { CALLS = 1000 };
  const tp_case_t k = {.ag = 0, .m = 512, .n = 512, .k = 256, .ab = LOOM_BF16, .ct = LOOM_BF16, .lay = LOOM_B_NK,
                       .bias = 1, .tr = LOOM_TP_BULK_REDUCE, .calls = 1};
  const int W = ctx->size, rank = ctx->rank;
  const int64_t mylen = loom__tp_shard_len(k.m, W, rank);
  const size_t slot = (size_t)mylen * (size_t)k.n * 2;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  char *d_a = NULL, *d_b = NULL, *d_bias = NULL, *d_c = NULL, *h_c = NULL;
  tp_inputs_t in;
  inputs_make(&in, &k, rank, W, 0);
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), goto out);
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = k.m, d.n = k.n, d.k = k.k, d.ab_type = k.ab, d.c_type = k.ct, d.b_layout = k.lay;
  d.has_bias = 1, d.world_size = W, d.transfer = LOOM_TP_BULK_REDUCE;
  LOOM_OK(loom_plan_gemm_rs(comm, &d, &plan));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&d_a, (size_t)(k.m * k.k) * 2));
  CUDA_OK(cudaMalloc((void **)&d_b, (size_t)(k.k * k.n) * 2));
  CUDA_OK(cudaMalloc((void **)&d_bias, (size_t)k.n * 2));
  CUDA_OK(cudaMalloc((void **)&d_c, slot * CALLS));
  CUDA_OK(cudaMemcpy(d_a, in.a[rank], (size_t)(k.m * k.k) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_b, in.b[rank], (size_t)(k.k * k.n) * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d_bias, in.bias, (size_t)k.n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d_c, 0xff, slot * CALLS)); /* poison: NaN where a call wrote nothing */
  for (int i = 0; i < CALLS; ++i) LOOM_OK(loom_gemm_rs(plan, d_a, d_b, d_c + (size_t)i * slot, d_bias, s));
  CUDA_OK(cudaStreamSynchronize(s));
  CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_SUCCESS);
  h_c = (char *)malloc(slot * CALLS);
  CUDA_OK(cudaMemcpy(h_c, d_c, slot * CALLS, cudaMemcpyDeviceToHost));
  tp_ref_t R;
  ref_make(&k, &in, rank, W, &R); /* once: every slot has the same reference */
  size_t bad = ref_compare(&k, &R, h_c, rank), differ = 0;
  for (int i = 1; i < CALLS; ++i) {
    if (W == 2) differ += memcmp(h_c, h_c + (size_t)i * slot, slot) != 0;
    else bad += ref_compare(&k, &R, h_c + (size_t)i * slot, rank);
  }
  ref_free(&R);
  if (rank == 0) printf("  %d calls back to back: %zu elements out of bound, %zu slots differing from the first\n",
                        CALLS, bad, differ);
  CHECK(bad == 0 && differ == 0);
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  cudaFree(d_a), cudaFree(d_b), cudaFree(d_bias), cudaFree(d_c);
  if (s) cudaStreamDestroy(s);
  free(h_c);
  inputs_free(&in);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_gemm_rs_bulk_soak_1000_calls_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_bulk_soak, NULL), 0);
}

/* The soak as 4 ranks on one GPU: three remote adds per element, in
 * arrival order, every call checked against the reference. */
LOOM_TEST(gpu_world_tp_gemm_rs_bulk_soak_1000_calls_w4) {
  if (gpus(1)) CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_bulk_soak, NULL), 0);
}

/* Argument errors are named before anything is launched. */
static int rank_bad_args(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  void *a = NULL, *b = NULL, *c = NULL, *plain = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 256, d.n = 128, d.k = 128, d.world_size = ctx->size, d.transfer = LOOM_TP_COPY_ENGINE;
  LOOM_OK(loom_plan_ag_gemm(comm, &d, &plan));
  CUDA_OK(cudaMalloc(&a, 256 * 128 * 2));
  CUDA_OK(cudaMalloc(&b, 128 * 128 * 2));
  CUDA_OK(cudaMalloc(&c, 256 * 128 * 2));
  CUDA_OK(cudaMalloc(&plain, 256 * 128 * 2));
  CHECK_RESULT(loom_ag_gemm(plan, a, b, c, plain, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "a_full=") != NULL && strstr(loom_last_error(), "loom_malloc") != NULL);
  CHECK_RESULT(loom_ag_gemm(plan, NULL, b, c, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "a_shard=NULL") != NULL);
  {
    static char host[256 * 128 * 2];
    CHECK_RESULT(loom_ag_gemm(plan, host, b, c, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(loom_last_error(), "a_shard=") != NULL);
  }
  CHECK_RESULT(loom_gemm_rs(plan, a, b, c, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT); /* an AG plan */
  CHECK(strstr(loom_last_error(), "not a gemm_rs plan") != NULL);
  {
    /* ranks that disagree get an error on every rank, not a hang: another m
     * on the last rank; then a description only the last rank refuses (n not
     * a multiple of 8); then the comm makes plans as before */
    loom_plan_t q = NULL;
    loom_tp_desc_t e = d;
    e.transfer = LOOM_TP_AUTO;
    if (ctx->rank == ctx->size - 1) e.m = 264;
    CHECK_RESULT(loom_plan_gemm_rs(comm, &e, &q), LOOM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(loom_last_error(), "descriptions differ") != NULL);
    CHECK(q == NULL);
    e = d;
    if (ctx->rank == ctx->size - 1) e.n = 12;
    CHECK_RESULT(loom_plan_ag_gemm(comm, &e, &q), LOOM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(loom_last_error(), ctx->rank == ctx->size - 1 ? "n=12" : "another rank refused") != NULL);
    CHECK(q == NULL);
    e = d;
    e.transfer = ctx->rank == 0 ? LOOM_TP_SEQUENTIAL : LOOM_TP_SM_COPY; /* two transfers: two protocols */
    CHECK_RESULT(loom_plan_ag_gemm(comm, &e, &q), LOOM_ERR_INVALID_ARGUMENT);
    CHECK(strstr(loom_last_error(), "descriptions differ") != NULL);
    e = d;
    e.transfer = LOOM_TP_AUTO;
    LOOM_OK(loom_plan_gemm_rs(comm, &e, &q));
    LOOM_OK(loom_plan_destroy(q));
  }
out:
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(plain);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_bad_arguments_are_named_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}

/* What a call accepts never depends on the path its plan resolved to: the
 * same arguments under every transfer, AUTO included, give the same result
 * code. m = 130 (AG AUTO: sequential, a shard of 65 rows). a_full the last
 * 1 KiB of a loom_malloc buffer or plain cudaMalloc memory: refused on every
 * path (the sequential path wrote 32 KiB past the buffer before); gemm_ar's
 * out outside symmetric memory: refused unless the plan was made
 * SEQUENTIAL; outputs that alias inputs: refused on every path. */
#define PATH_M 130
#define PATH_N 128
#define PATH_K 128
static loom_result_t path_call(int op, loom_plan_t plan, void *a, void *b, void *c, void *a_full, cudaStream_t s) {
  if (op == 0) return loom_ag_gemm(plan, a, b, c, a_full, NULL, s);
  if (op == 1) return loom_gemm_rs(plan, a, b, c, NULL, s);
  return loom_gemm_ar(plan, a, b, c, NULL, s);
}

typedef struct path_row {
  int op;             /* 0 AG, 1 RS, 2 AR */
  const char *what;
  int c_kind, afull_kind; /* buffer kinds below */
  loom_result_t want_seq, want_other; /* plans made SEQUENTIAL / any other transfer */
} path_row_t;
enum { B_NONE, B_PLAIN, B_SYM, B_SYM_TAIL, B_ALIAS_A, B_PLAIN_TAIL };

static int rank_path_checks(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const size_t ab = (size_t)PATH_M * PATH_K * 2, cb = (size_t)PATH_M * PATH_N * 2;
  loom_comm_t comm = NULL;
  cudaStream_t s = NULL;
  char *a = NULL, *b = NULL, *plain = NULL, *sym = NULL;
  static const path_row_t rows[] = {
      {0, "a_full past its loom_malloc buffer", B_PLAIN, B_SYM_TAIL, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {0, "a_full in cudaMalloc memory", B_PLAIN, B_PLAIN, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {0, "c aliasing a_full", B_SYM, B_SYM, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {0, "valid, a_full given", B_PLAIN, B_SYM, LOOM_SUCCESS, LOOM_SUCCESS},
      {0, "valid, no a_full", B_PLAIN, B_NONE, LOOM_SUCCESS, LOOM_SUCCESS},
      {1, "c_shard aliasing a", B_ALIAS_A, B_NONE, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {1, "c_shard past its allocation", B_PLAIN_TAIL, B_NONE, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {1, "valid", B_PLAIN, B_NONE, LOOM_SUCCESS, LOOM_SUCCESS},
      {2, "out in cudaMalloc memory", B_PLAIN, B_NONE, LOOM_SUCCESS, LOOM_ERR_INVALID_ARGUMENT},
      {2, "out past its loom_malloc buffer", B_SYM_TAIL, B_NONE, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {2, "out aliasing a", B_ALIAS_A, B_NONE, LOOM_ERR_INVALID_ARGUMENT, LOOM_ERR_INVALID_ARGUMENT},
      {2, "valid", B_SYM, B_NONE, LOOM_SUCCESS, LOOM_SUCCESS},
  };
  static const loom_tp_transfer_t tr[3][5] = {
      {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_COPY_ENGINE, LOOM_TP_SM_COPY, LOOM_TP_DECOMPOSED},
      {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY, LOOM_TP_SM_ATOMIC, LOOM_TP_DECOMPOSED},
      {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY, (loom_tp_transfer_t)-1, (loom_tp_transfer_t)-1}};
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc((void **)&a, ab));
  CUDA_OK(cudaMalloc((void **)&b, (size_t)PATH_K * PATH_N * 2));
  CUDA_OK(cudaMalloc((void **)&plain, ab > cb ? ab : cb));
  LOOM_OK(loom_malloc(comm, ab > cb ? ab : cb, (void **)&sym));
  CUDA_OK(cudaMemset(a, 0x3c, ab));
  CUDA_OK(cudaMemset(b, 0x3c, (size_t)PATH_K * PATH_N * 2));
  for (size_t i = 0; i < sizeof rows / sizeof *rows; ++i) {
    const path_row_t *r = &rows[i];
    const size_t big = ab > cb ? ab : cb;
    char *bufs[6] = {NULL, plain, sym, sym + big - 1024, a, plain + big - 1024};
    for (int t = 0; t < 5 && (int)tr[r->op][t] >= 0; ++t) {
      loom_tp_desc_t d = LOOM_TP_DESC_INIT;
      d.m = PATH_M, d.n = PATH_N, d.k = PATH_K, d.world_size = ctx->size, d.transfer = tr[r->op][t];
      loom_plan_t plan = NULL;
      LOOM_OK(r->op == 0 ? loom_plan_ag_gemm(comm, &d, &plan)
              : r->op == 1 ? loom_plan_gemm_rs(comm, &d, &plan) : loom_plan_gemm_ar(comm, &d, &plan));
      loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
      LOOM_OK(loom_tp_plan_info(plan, &info));
      const loom_result_t want = d.transfer == LOOM_TP_SEQUENTIAL ? r->want_seq : r->want_other;
      const loom_result_t got = path_call(r->op, plan, a, b, bufs[r->c_kind], bufs[r->afull_kind], s);
      if (got != want)
        loom_test_fail(__FILE__, __LINE__, "rank %d: %s, %s (resolved %s): result %d, expected %d (%s)", ctx->rank,
                       r->what, trn(d.transfer), trn(info.transfer), (int)got, (int)want, loom_last_error());
      CUDA_OK(cudaStreamSynchronize(s));
      LOOM_OK(loom_comm_get_async_error(comm));
      LOOM_OK(loom_plan_destroy(plan));
    }
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (sym) CHECK_RESULT(loom_free(comm, sym), LOOM_SUCCESS);
  cudaFree(a), cudaFree(b), cudaFree(plain);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_checks_do_not_depend_on_the_path_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_path_checks, NULL), 0);
}

/* loom_*_tune records a choice every rank agrees on, and an AUTO plan of
 * the same description takes it (and computes the right result). */
static int rank_tune(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  loom_comm_t comm = NULL;
  cudaStream_t s = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int ag = 1; ag >= 0; --ag) {
    const tp_case_t k = {ag, 1024, 512, 768, BF, BF, NK, 1, LOOM_TP_AUTO, 0, 0, 2, 0, 0, 0, 0, 0};
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = k.m, d.n = k.n, d.k = k.k, d.b_layout = k.lay, d.has_bias = 1, d.world_size = W;
    LOOM_OK(ag ? loom_ag_gemm_tune(comm, &d, s) : loom_gemm_rs_tune(comm, &d, s));
    char key[160], value[160];
    int sms = 0, dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(loom__tp_tune_key(ag ? 0 : 1, &d, sms, key, sizeof key));
    CHECK(loom__tune_get(key, value, sizeof value));
    loom_tp_choice_t ch;
    CHECK_RESULT(loom__tp_tune_parse(value, &ch), LOOM_SUCCESS);
    const loom_tp_transfer_t t = ch.transfer;
    const int cr = ch.chunk_rows, cb = ch.comm_blocks;
    if (ctx->rank == 0) printf("  tuned %s: %s\n", ag ? "ag_gemm" : "gemm_rs", value);
    loom_plan_t p = NULL;
    LOOM_OK(ag ? loom_plan_ag_gemm(comm, &d, &p) : loom_plan_gemm_rs(comm, &d, &p));
    loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
    LOOM_OK(loom_tp_plan_info(p, &info));
    CHECK_EQ_INT(info.transfer, t);
    loom_tp_desc_t e = d; /* the tuned engine where the entry names one */
    e.sequential_gemm = ch.gemm;
    CHECK_EQ_INT(info.gemm, loom__tp_resolve_gemm(&e, t));
    if (t == LOOM_TP_SM_COPY && cb > 0) CHECK_EQ_INT(info.comm_blocks, cb);
    if (t == LOOM_TP_COPY_ENGINE && cr > 0) CHECK_EQ_INT(info.chunk_rows, cr);
    LOOM_OK(loom_plan_destroy(p));
    (void)run_case(ctx, comm, &k); /* an AUTO plan of this description: the tuned choice, checked */
  }
out:
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

/* LOOM_TUNE=1: a plan of an AUTO description the cache lacks tunes it first
 * (every rank), records the choice and takes it; the next plan of the same
 * description finds the entry and computes the right result. */
static int rank_tune_at_plan(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  loom_comm_t comm = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  loom__tune_clear();
  for (int ag = 1; ag >= 0; --ag) {
    const tp_case_t k = {ag, 640, 384, 256, BF, BF, NK, 1, LOOM_TP_AUTO, 0, 0, 2, 0, 0, 0, 0, 0};
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = k.m, d.n = k.n, d.k = k.k, d.b_layout = k.lay, d.has_bias = 1, d.world_size = W;
    char key[160], value[160];
    int sms = 0, dev = 0;
    CUDA_OK(cudaGetDevice(&dev));
    CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CHECK(loom__tp_tune_key(ag ? LOOM__TP_AG : LOOM__TP_RS, &d, sms, key, sizeof key));
    CHECK(!loom__tune_get(key, value, sizeof value));
    loom_plan_t p = NULL;
    LOOM_OK(ag ? loom_plan_ag_gemm(comm, &d, &p) : loom_plan_gemm_rs(comm, &d, &p));
    CHECK(loom__tune_get(key, value, sizeof value)); /* tuned by the plan */
    loom_tp_choice_t ch;
    CHECK_RESULT(loom__tp_tune_parse(value, &ch), LOOM_SUCCESS);
    if (ctx->rank == 0) printf("  tuned at the first plan (%s): %s\n", ag ? "ag_gemm" : "gemm_rs", value);
    loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
    LOOM_OK(loom_tp_plan_info(p, &info));
    CHECK_EQ_INT(info.transfer, ch.transfer);
    CHECK_EQ_INT(info.gemm, ch.transfer == LOOM_TP_SEQUENTIAL ? ch.gemm : LOOM_TP_GEMM_LOOM);
    LOOM_OK(loom_plan_destroy(p));
    (void)run_case(ctx, comm, &k); /* the entry again, checked against the reference */
  }
out:
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_loom_tune_tunes_at_the_first_plan_w1) {
  if (!gpus(1)) return;
  setenv("LOOM_TUNE", "1", 1);
  CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_tune_at_plan, NULL), 0);
  unsetenv("LOOM_TUNE");
}

LOOM_TEST(gpu_tp_loom_tune_tunes_at_the_first_plan_w2) {
  if (!gpus(2)) return;
  setenv("LOOM_TUNE", "1", 1);
  CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_tune_at_plan, NULL), 0);
  unsetenv("LOOM_TUNE");
}

LOOM_TEST(gpu_tp_tune_records_a_choice_plans_take_it_w1) {
  if (gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_tune, NULL), 0);
}

LOOM_TEST(gpu_tp_tune_records_a_choice_plans_take_it_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_tune, NULL), 0);
}

/* Under lazy module loading (CUDA_MODULE_LOADING=LAZY, the default since
 * CUDA 12.2) a kernel loads at its first launch and the load waits for the
 * kernels running: GEMM+RS's reduction, launched first and waiting for the
 * GEMM's tiles, then held the GEMM's load until its timeout. Plans now load
 * their kernels when they are made. A fresh process whose first fused call
 * is a GEMM+RS (a short timeout: a hang fails fast). */
static int rank_rs_first(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  loom_comm_t comm = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 3000;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  const tp_case_t k = {0, 256, 384, 512, FH, BF, NK, 1, SM, 0, 0, 1, 0, 0, 0, 0, 0};
  (void)run_case(ctx, comm, &k);
  CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_tp_gemm_rs_first_call_under_lazy_loading_w2) {
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);
  if (gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_rs_first, NULL), 0);
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_rs_first, NULL), 0);
}
