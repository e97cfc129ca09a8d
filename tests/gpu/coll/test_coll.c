/*
 * test_coll.c - GPU tests of loom's collectives (loom_allreduce one-shot,
 * two-shot, LL and PUSH, loom_reduce_scatter, loom_all_gather) on W ranks (one process per
 * GPU; W = 1 runs the whole protocol on one GPU), against the CPU references
 * (src/ref/coll_ref.c, double precision):
 *  - every dtype pair, counts 1, odd, not divisible by W or by 8, large;
 *    flat and in rows (cols aligned to 8 or not);
 *  - every epilogue: scale, bias over rows, ReLU/GeLU, dropout (the mask
 *    checked bit for bit against loom__dropout_keep: dropped elements exactly
 *    0), residual, output cast; RMSNorm and LayerNorm (with and without
 *    bias) after a residual add;
 *  - fresh random inputs (never zero) on every call, outputs poisoned (NaN
 *    bytes) before each call, every element checked; a second call on the
 *    same inputs gives the same bits;
 *  - in place (AllReduce out == in, ReduceScatter out inside in, AllGather
 *    in inside out);
 *  - CUDA-graph capture, replayed with new inputs;
 *  - hundreds of calls alternating four plans on one stream;
 *  - one-shot, two-shot, LL and PUSH give the same bits, and every rank the same;
 *  - argument errors named; a peer that never calls: LOOM_ERR_TIMEOUT
 *    naming the wait.
 * Every rank generates every rank's inputs from the run's seed (so each can
 * compute the reference) and uploads its own.
 * Run: build/tests/loom-test-gpu gpu_coll  (the _w2 tests skip on one GPU).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "core/pointwise.h"
#include "ops/coll/coll_schedule.h"
#include "ref/coll_ref.h"
#include "ref/ref.h"
#include "support/launch.h"

#define LAUNCH_TIMEOUT_S 600
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

enum { AR = 0, RS = 1, AG = 2 };
/* epilogue parts */
#define E_SCALE 1
#define E_BIAS 2
#define E_GELU 4
#define E_DROP 8
#define E_RES 16
#define E_RELU 32

typedef struct coll_case {
  int op;
  int64_t count, cols;
  loom_dtype_t in, out;
  loom_coll_algo_t algo;
  int epi;              /* E_* */
  loom_norm_t norm;
  int norm_bias;
  int in_place;
  int graph;
  int calls;
  int blocks;
} coll_case_t;

static uint64_t seed_for(int call, int what, int rank) {
  return loom_test_seed() * 1000003ull + (uint64_t)call * 7919ull + (uint64_t)what * 104729ull + (uint64_t)rank;
}

static const char *dt(loom_dtype_t t) { return t == LOOM_FP32 ? "fp32" : t == LOOM_FP16 ? "fp16" : "bf16"; }
static double eps_of(loom_dtype_t t) { return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_FP16 ? 1.0 / 1024 : 1e-6; }

/* Host copies of one call's inputs: every rank's `in` (AR, RS: [count]; AG
 * the full vector whose slices the ranks hold), bias, residual (full length),
 * norm weight and bias. */
typedef struct coll_inputs {
  void *in[64];
  void *bias, *res, *nw, *nb;
  int n;
} coll_inputs_t;

static void inputs_free(coll_inputs_t *x) {
  for (int i = 0; i < x->n; ++i) free(x->in[i]);
  free(x->bias), free(x->res), free(x->nw), free(x->nb);
  memset(x, 0, sizeof *x);
}

static void inputs_make(coll_inputs_t *x, const coll_case_t *k, int W, int call) {
  const size_t ei = loom_dtype_size(k->in), eo = loom_dtype_size(k->out);
  const int64_t cols = k->cols > 0 ? k->cols : 1;
  x->n = k->op == AG ? 1 : W;
  for (int p = 0; p < x->n; ++p) {
    x->in[p] = malloc((size_t)k->count * ei);
    loom_ref_fill_random(k->in, x->in[p], (size_t)k->count, seed_for(call, 1, p), 1.0);
  }
  x->bias = malloc((size_t)cols * eo);
  loom_ref_fill_random(k->out, x->bias, (size_t)cols, seed_for(call, 2, 0), 1.0);
  x->res = malloc((size_t)k->count * eo);
  loom_ref_fill_random(k->out, x->res, (size_t)k->count, seed_for(call, 3, 0), 1.0);
  x->nw = malloc((size_t)cols * eo);
  loom_ref_fill_random(k->out, x->nw, (size_t)cols, seed_for(call, 4, 0), 1.0);
  x->nb = malloc((size_t)cols * eo);
  loom_ref_fill_random(k->out, x->nb, (size_t)cols, seed_for(call, 5, 0), 1.0);
}

/* The epilogue of call `call` (device pointers for bias and residual). */
static loom_epilogue_t make_epi(const coll_case_t *k, int call, const void *d_bias, const void *d_res) {
  loom_epilogue_t e = LOOM_EPILOGUE_INIT;
  if (k->epi & E_SCALE) e.scale = 0.75f;
  if (k->epi & E_BIAS) e.bias = d_bias;
  if (k->epi & E_GELU) e.activation = (call & 1) ? LOOM_ACT_GELU_ERF : LOOM_ACT_GELU_TANH;
  if (k->epi & E_RELU) e.activation = LOOM_ACT_RELU;
  if (k->epi & E_DROP) {
    e.dropout_p = 0.3f;
    e.dropout_seed = 0x5eed0000ull + loom_test_seed();
    e.dropout_offset = (uint64_t)call * (uint64_t)k->count; /* a fresh mask per call */
  }
  if (k->epi & E_RES) e.residual = d_res;
  return e;
}

/* Checks this rank's output against the reference; returns the elements
 * out of bound (or with the wrong dropout decision). */
static size_t check_out(const coll_case_t *k, const coll_inputs_t *x, const void *got, int rank, int W, int call) {
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = k->count, d.cols = k->cols, d.dtype = k->in, d.out_type = k->out, d.norm = k->norm, d.world_size = W;
  const int64_t unit = loom__coll_unit(k->cols);
  int64_t mb, ml;
  loom__coll_slice(k->count, W, rank, unit, &mb, &ml);
  size_t bad = 0;
  if (k->op == AG) {
    const size_t es = loom_dtype_size(k->in);
    const char *full = (const char *)x->in[0];
    for (int64_t i = 0; i < k->count; ++i)
      if (memcmp((const char *)got + (size_t)i * es, full + (size_t)i * es, es) != 0) {
        if (bad < 5)
          fprintf(stderr, "  rank %d element %lld: got %.6g, expected %.6g\n", rank, (long long)i,
                  loom_ref_load(k->out, got, (size_t)i), loom_ref_load(k->in, full, (size_t)i));
        ++bad;
      }
    return bad;
  }
  /* the reference epilogue reads host copies of bias and residual */
  loom_epilogue_t e = make_epi(k, call, x->bias, x->res);
  double *ref = (double *)malloc((size_t)k->count * sizeof(double));
  loom_ref_coll_reduce(&d, (const void *const *)x->in, k->epi ? &e : NULL, x->nw, k->norm_bias ? x->nb : NULL, ref);
  const int64_t b = k->op == RS ? mb : 0, n = k->op == RS ? ml : k->count;
  const double eo = eps_of(k->out);
  const uint32_t th = loom__dropout_threshold(e.dropout_p);
  for (int64_t t = 0; t < n; ++t) {
    const int64_t i = b + t;
    const double r = ref[i], g = loom_ref_load(k->out, got, (size_t)t);
    /* fp32 sum and epilogue vs double: ~1e-6 relative; norms: rstd in fp32 */
    const double bound = eo * fabs(r) + (k->norm ? 2e-4 : 5e-5) * (1.0 + fabs(r)) + (k->out == LOOM_FP32 ? 0 : eo * 1e-2);
    int wrong = !(fabs(g - r) <= bound);
    if ((k->epi & E_DROP) && !(k->epi & E_RES) && !k->norm) {
      /* the mask bit for bit: dropped elements are exactly 0, kept ones are not */
      const int keep = loom__dropout_keep(e.dropout_seed, e.dropout_offset, (uint64_t)i, th);
      if (!keep && g != 0.0) wrong = 1;
      if (keep && g == 0.0 && fabs(r) > 1e-3) wrong = 1;
    }
    if (wrong) {
      if (bad < 5)
        fprintf(stderr, "  rank %d element %lld (row %lld): got %.8g, expected %.8g (bound %.3g)\n", rank, (long long)i,
                (long long)(k->cols > 0 ? i / k->cols : 0), g, r, bound);
      ++bad;
    }
  }
  free(ref);
  return bad;
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const coll_case_t *k) {
  const int W = ctx->size, rank = ctx->rank;
  const size_t ei = loom_dtype_size(k->in), eo = loom_dtype_size(k->out);
  const int64_t cols = k->cols > 0 ? k->cols : 1;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  void *d_in = NULL, *d_out = NULL, *d_bias = NULL, *d_res = NULL, *d_nw = NULL, *d_nb = NULL, *h_out = NULL,
       *again = NULL;
  int sym_out = 0;
  coll_inputs_t x;
  memset(&x, 0, sizeof x);
  const int fails0 = loom_test_failures;

  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = k->count, d.cols = k->cols, d.dtype = k->in, d.out_type = k->out, d.norm = k->norm;
  d.algo = k->algo, d.world_size = W, d.blocks = k->blocks;
  LOOM_OK(k->op == AR ? loom_plan_allreduce(comm, &d, &plan)
          : k->op == RS ? loom_plan_reduce_scatter(comm, &d, &plan)
                        : loom_plan_all_gather(comm, &d, &plan));
  loom_coll_plan_info_t info = LOOM_COLL_PLAN_INFO_INIT;
  LOOM_OK(loom_coll_plan_info(plan, &info));
  if (rank == 0)
    printf("  %s count=%lld cols=%lld %s->%s algo %d epi %d norm %d%s%s%s: S=%lld chunk=%lld blocks=%d\n",
           k->op == AR ? "allreduce" : k->op == RS ? "reduce_scatter" : "all_gather", (long long)k->count,
           (long long)k->cols, dt(k->in), dt(k->out), (int)info.algo, k->epi, (int)k->norm, k->norm_bias ? "+bias" : "",
           k->in_place ? " in place" : "", k->graph ? " graph" : "", (long long)info.slice_elems,
           (long long)info.chunk_elems, info.blocks);
  if (k->op == AR && k->algo != LOOM_COLL_AUTO) CHECK_EQ_INT(info.algo, k->algo);
  if (k->op == AR)
    CHECK(info.algo == LOOM_COLL_ONE_SHOT || info.algo == LOOM_COLL_TWO_SHOT || info.algo == LOOM_COLL_LL ||
          info.algo == LOOM_COLL_PUSH);
  CHECK(info.deterministic == 1);
  const int64_t mb = info.my_begin, ml = info.my_len;
  {
    int64_t b2, l2;
    loom__coll_slice(k->count, W, rank, loom__coll_unit(k->cols), &b2, &l2);
    CHECK_EQ_INT(mb, b2);
    CHECK_EQ_INT(ml, l2);
  }

  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  /* in: loom_malloc (collective: every rank the same size) */
  const int64_t S = info.slice_elems < k->count ? info.slice_elems : k->count;
  const size_t in_elems = k->op == AG ? (size_t)S : (size_t)k->count;
  const size_t out_elems = k->op == RS ? (size_t)ml : (size_t)k->count;
  const size_t out_bytes = out_elems * eo;
  char *in_ptr = NULL, *out_ptr = NULL;
  if (k->op == AG && k->in_place) {
    LOOM_OK(loom_malloc(comm, (size_t)k->count * eo, &d_out));
    sym_out = 1;
    out_ptr = (char *)d_out;
    in_ptr = out_ptr + (size_t)mb * eo;
  } else {
    LOOM_OK(loom_malloc(comm, in_elems * ei, &d_in));
    in_ptr = (char *)d_in;
    if (k->in_place) {
      out_ptr = k->op == AR ? in_ptr : in_ptr + (size_t)mb * ei;
    } else if (out_bytes > 0) {
      CUDA_OK(cudaMalloc(&d_out, out_bytes));
      out_ptr = (char *)d_out;
    }
  }
  CUDA_OK(cudaMalloc(&d_bias, (size_t)cols * eo));
  CUDA_OK(cudaMalloc(&d_res, (size_t)k->count * eo));
  CUDA_OK(cudaMalloc(&d_nw, (size_t)cols * eo));
  CUDA_OK(cudaMalloc(&d_nb, (size_t)cols * eo));
  h_out = malloc(out_bytes + 16);
  again = malloc(out_bytes + 16);
  /* the residual this rank passes: the full one (AR) or its slice (RS, uploaded below) */
  const char *res_arg = (const char *)d_res;

  for (int call = 0; call < k->calls; ++call) {
    inputs_free(&x);
    inputs_make(&x, k, W, call);
    /* uploads (the stream: after the previous call, which hands `in` back) */
    if (k->op == AG) {
      if (ml > 0) CUDA_OK(cudaMemcpyAsync(in_ptr, (char *)x.in[0] + (size_t)mb * ei, (size_t)ml * ei, cudaMemcpyHostToDevice, s));
    } else {
      CUDA_OK(cudaMemcpyAsync(in_ptr, x.in[rank], (size_t)k->count * ei, cudaMemcpyHostToDevice, s));
    }
    CUDA_OK(cudaMemcpyAsync(d_bias, x.bias, (size_t)cols * eo, cudaMemcpyHostToDevice, s));
    if (k->op == RS) {
      if (ml > 0)
        CUDA_OK(cudaMemcpyAsync(d_res, (char *)x.res + (size_t)mb * eo, (size_t)ml * eo, cudaMemcpyHostToDevice, s));
    } else {
      CUDA_OK(cudaMemcpyAsync(d_res, x.res, (size_t)k->count * eo, cudaMemcpyHostToDevice, s));
    }
    CUDA_OK(cudaMemcpyAsync(d_nw, x.nw, (size_t)cols * eo, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaMemcpyAsync(d_nb, x.nb, (size_t)cols * eo, cudaMemcpyHostToDevice, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK(loom_launch_world_sync(ctx)); /* every rank's (pageable) uploads done before any calls */
    /* poison every output element the call must write (not the input of an in-place call) */
    if (!k->in_place && out_bytes > 0) CUDA_OK(cudaMemsetAsync(out_ptr, 0xff, out_bytes, s));
    if (k->op == AG && k->in_place) {
      if (mb > 0) CUDA_OK(cudaMemsetAsync(out_ptr, 0xff, (size_t)mb * eo, s));
      const size_t tail = (size_t)(k->count - mb - ml) * eo;
      if (tail) CUDA_OK(cudaMemsetAsync(out_ptr + (size_t)(mb + ml) * eo, 0xff, tail, s));
    }
    const loom_epilogue_t e = make_epi(k, k->graph ? 0 : call, d_bias, res_arg);
    const loom_epilogue_t *ep = k->epi ? &e : NULL;
    const void *nw = k->norm ? d_nw : NULL, *nb = k->norm && k->norm_bias ? d_nb : NULL;
#define CALL()                                                                            \
  (k->op == AR   ? loom_allreduce(plan, in_ptr, out_ptr, ep, nw, nb, s)                  \
   : k->op == RS ? loom_reduce_scatter(plan, in_ptr, out_ptr, ep, nw, nb, s)             \
                 : loom_all_gather(plan, in_ptr, out_ptr, s))
    if (k->graph && !exec) {
      CUDA_OK(cudaStreamSynchronize(s));
      CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      loom_result_t r = CALL();
      cudaError_t ce = cudaStreamEndCapture(s, &graph);
      CHECK_RESULT(r, LOOM_SUCCESS);
      CUDA_OK(ce);
      CHECK(loom_launch_graph_ready(ctx, graph, &exec, s) == 0); /* every rank's, before any launches */
    }
    if (k->graph) CUDA_OK(cudaGraphLaunch(exec, s));
    else LOOM_OK(CALL());
    CUDA_OK(cudaStreamSynchronize(s));
    LOOM_OK(loom_comm_get_async_error(comm));
    if (out_bytes > 0) CUDA_OK(cudaMemcpy(h_out, out_ptr, out_bytes, cudaMemcpyDeviceToHost));
    const size_t bad = check_out(k, &x, h_out, rank, W, k->graph ? 0 : call);
    if (bad) loom_test_fail(__FILE__, __LINE__, "rank %d call %d: %zu elements wrong", rank, call, bad);
    /* the same inputs again: the same bits (not in place: the input is the output) */
    if (!k->graph && !k->in_place) {
      if (out_bytes > 0) CUDA_OK(cudaMemsetAsync(out_ptr, 0xff, out_bytes, s));
      LOOM_OK(CALL());
      CUDA_OK(cudaStreamSynchronize(s));
      if (out_bytes > 0) {
        CUDA_OK(cudaMemcpy(again, out_ptr, out_bytes, cudaMemcpyDeviceToHost));
        if (memcmp(again, h_out, out_bytes) != 0)
          loom_test_fail(__FILE__, __LINE__, "rank %d call %d: the same inputs gave other bits", rank, call);
      }
    }
#undef CALL
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (d_in) CHECK_RESULT(loom_free(comm, d_in), LOOM_SUCCESS);
  if (d_out) {
    if (sym_out) CHECK_RESULT(loom_free(comm, d_out), LOOM_SUCCESS);
    else cudaFree(d_out);
  }
  cudaFree(d_bias), cudaFree(d_res), cudaFree(d_nw), cudaFree(d_nb);
  if (s) cudaStreamDestroy(s);
  free(h_out), free(again);
  inputs_free(&x);
  return loom_test_failures != fails0;
}

static int run_case_v(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *k) {
  return run_case(ctx, comm, (const coll_case_t *)k);
}

/* A world runs every case whose block count fits a rank's share of the SMs. */
static int world_skip(const void *k, int W, int sms) {
  (void)W;
  return ((const coll_case_t *)k)->blocks > sms;
}

static void run_suite(int W, const coll_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 20000, run_case_v, world_skip};
  if (loom_test_gpus(W)) loom_case_suite_run(W, LAUNCH_TIMEOUT_S, &su);
}

/* The suite as W ranks on one GPU (a loom world). */
static void run_world(int W, const coll_case_t *cases, int n) {
  const loom_case_suite_t su = {cases, sizeof *cases, n, 20000, run_case_v, world_skip};
  if (loom_test_gpus(1)) loom_case_suite_run_world(W, LAUNCH_TIMEOUT_S, &su);
}

#define BF LOOM_BF16
#define FH LOOM_FP16
#define F32 LOOM_FP32
#define A0 LOOM_COLL_AUTO
#define A1 LOOM_COLL_ONE_SHOT
#define A2 LOOM_COLL_TWO_SHOT
#define LL LOOM_COLL_LL
#define PU LOOM_COLL_PUSH
#define NN LOOM_NORM_NONE
#define RMS LOOM_NORM_RMS
#define LN LOOM_NORM_LAYER

/* op, count, cols, in, out, algo, epi, norm, norm_bias, in_place, graph, calls, blocks */
static const coll_case_t g_sizes[] = {
    {AR, 1, 0, BF, BF, A1, 0, NN, 0, 0, 0, 2, 0},
    {AR, 1, 0, BF, BF, A2, 0, NN, 0, 0, 0, 2, 0},
    {AR, 7, 0, FH, FH, A1, 0, NN, 0, 0, 0, 2, 0},
    {AR, 7, 0, F32, F32, A2, 0, NN, 0, 0, 0, 2, 0},
    {AR, 13, 0, BF, F32, A2, 0, NN, 0, 0, 0, 2, 0},
    {AR, 17, 0, F32, BF, A1, 0, NN, 0, 0, 0, 2, 0},
    {AR, 1000, 0, BF, BF, A0, 0, NN, 0, 0, 0, 2, 0},
    {AR, 4099, 0, FH, F32, A1, 0, NN, 0, 0, 0, 2, 3},
    {AR, 4099, 0, FH, FH, A2, 0, NN, 0, 0, 0, 2, 3},
    {AR, 65537, 0, BF, BF, A1, 0, NN, 0, 0, 0, 2, 0},
    {AR, 65537, 0, BF, BF, A2, 0, NN, 0, 0, 0, 2, 0},
    {AR, 65537, 0, F32, FH, A2, 0, NN, 0, 0, 0, 2, 1},  /* one block: every chunk in turn */
    {AR, (1 << 20) + 3, 0, BF, BF, A0, 0, NN, 0, 0, 0, 2, 0}, /* AUTO: PUSH at W <= 2, many chunks */
    {AR, (1 << 20) + 3, 0, F32, F32, A2, 0, NN, 0, 0, 0, 1, 0},
    {AR, 3 << 20, 0, FH, FH, A2, 0, NN, 0, 0, 0, 1, 0},
    {AR, 100003, 0, BF, BF, A1, 0, NN, 0, 0, 0, 1, 5},
};

static const coll_case_t g_epi[] = {
    /* CoCoNet's FusedAllReduce: dropout(AR(x) + bias) + residual, with rows */
    {AR, 37 * 768, 768, BF, BF, A1, E_BIAS | E_DROP | E_RES, NN, 0, 0, 0, 2, 0},
    {AR, 37 * 768, 768, BF, BF, A2, E_BIAS | E_DROP | E_RES, NN, 0, 0, 0, 2, 0},
    {AR, 37 * 768, 768, FH, F32, A2, E_SCALE | E_BIAS | E_GELU, NN, 0, 0, 0, 2, 0},
    {AR, 9 * 100, 100, F32, BF, A1, E_SCALE | E_BIAS | E_RELU | E_RES, NN, 0, 0, 0, 2, 0}, /* rows not multiples of 8 */
    {AR, 9 * 100, 100, F32, F32, A2, E_SCALE | E_BIAS | E_GELU | E_RES, NN, 0, 0, 0, 2, 0},
    {AR, 100003, 0, BF, BF, A2, E_DROP, NN, 0, 0, 0, 3, 0},  /* the mask alone, bit for bit */
    {AR, 100003, 0, FH, FH, A1, E_DROP, NN, 0, 0, 0, 3, 0},
    {AR, 5 * 3, 3, BF, BF, A2, E_BIAS | E_DROP, NN, 0, 0, 0, 2, 0},
    {AR, 1, 1, F32, F32, A1, E_SCALE | E_BIAS | E_RES, NN, 0, 0, 0, 2, 0},
    {AR, 1 << 20, 4096, BF, BF, A2, E_BIAS | E_DROP | E_RES, NN, 0, 0, 0, 2, 0},
    /* residual + norm after the AllReduce (rows split whole between ranks) */
    {AR, 37 * 768, 768, BF, BF, A2, E_RES, RMS, 0, 0, 0, 2, 0},
    {AR, 37 * 768, 768, BF, BF, A1, E_RES, RMS, 0, 0, 0, 2, 0},
    {AR, 37 * 768, 768, FH, FH, A2, E_RES, LN, 1, 0, 0, 2, 0},
    {AR, 11 * 100, 100, F32, F32, A2, E_BIAS | E_RES, LN, 0, 0, 0, 2, 0},
    {AR, 11 * 100, 100, BF, F32, A1, E_RES, RMS, 0, 0, 0, 2, 0},
    {AR, 3 * 5, 5, BF, BF, A2, E_RES, LN, 1, 0, 0, 2, 0},  /* rows of 5: fewer rows than vectors */
    {AR, 64 * 8192, 8192, BF, BF, A2, E_RES, RMS, 0, 0, 0, 1, 0},
    {AR, 2 * 32768, 32768, BF, BF, A2, E_RES, LN, 1, 0, 0, 1, 0}, /* the largest row */
};

static const coll_case_t g_rs_ag[] = {
    {RS, 1, 0, BF, BF, A0, 0, NN, 0, 0, 0, 2, 0},
    {RS, 1001, 0, FH, F32, A0, 0, NN, 0, 0, 0, 2, 0},
    {RS, 65537, 0, BF, BF, A0, E_SCALE | E_DROP, NN, 0, 0, 0, 2, 0},
    {RS, 37 * 768, 768, BF, BF, A0, E_BIAS | E_RES, RMS, 0, 0, 0, 2, 0},
    {RS, 11 * 100, 100, F32, BF, A0, E_RES | E_GELU | E_BIAS, LN, 1, 0, 0, 2, 0},
    {RS, (1 << 20) + 5, 0, F32, F32, A0, 0, NN, 0, 0, 0, 1, 0},
    {AG, 1, 0, BF, BF, A0, 0, NN, 0, 0, 0, 2, 0},
    {AG, 1001, 0, FH, FH, A0, 0, NN, 0, 0, 0, 2, 0},
    {AG, 65537, 0, F32, F32, A0, 0, NN, 0, 0, 0, 2, 2},
    {AG, 37 * 100, 100, BF, BF, A0, 0, NN, 0, 0, 0, 2, 0},
    {AG, (1 << 20) + 5, 0, BF, BF, A0, 0, NN, 0, 0, 0, 1, 0},
};

/* AllReduce LL: sizes (a short last group, one element, groups spread over
 * a capped grid), dtype pairs, every epilogue, norms over rows of a
 * multiple of 8, in place, graphs; at least 3 calls each so that both
 * parities of the buffer are used and reused (flags of call e - 2 stale) */
static const coll_case_t g_ll[] = {
    {AR, 1, 0, BF, BF, LL, 0, NN, 0, 0, 0, 3, 0},
    {AR, 7, 0, FH, FH, LL, 0, NN, 0, 0, 0, 3, 0},
    {AR, 13, 0, F32, BF, LL, 0, NN, 0, 0, 0, 3, 0},
    {AR, 17, 0, BF, F32, LL, 0, NN, 0, 0, 0, 3, 0},
    {AR, 1000, 0, BF, BF, A0, 0, NN, 0, 0, 0, 3, 0}, /* AUTO: LL at the default threshold */
    {AR, 4099, 0, FH, F32, LL, 0, NN, 0, 0, 0, 3, 3},
    {AR, 65537, 0, BF, BF, LL, 0, NN, 0, 0, 0, 3, 0},
    {AR, 65537, 0, F32, F32, LL, 0, NN, 0, 0, 0, 3, 1}, /* one block: 16 groups per thread */
    {AR, (1 << 20) + 3, 0, BF, BF, LL, 0, NN, 0, 0, 0, 3, 0}, /* more groups than threads */
    {AR, 37 * 768, 768, BF, BF, LL, E_BIAS | E_DROP | E_RES, NN, 0, 0, 0, 3, 0},
    {AR, 9 * 100, 100, F32, BF, LL, E_SCALE | E_BIAS | E_RELU | E_RES, NN, 0, 0, 0, 3, 0},
    {AR, 37 * 768, 768, FH, F32, LL, E_SCALE | E_BIAS | E_GELU, NN, 0, 0, 0, 3, 0},
    {AR, 100003, 0, FH, FH, LL, E_DROP, NN, 0, 0, 0, 3, 0},
    {AR, 37 * 768, 768, BF, BF, LL, E_RES, RMS, 0, 0, 0, 3, 0},
    {AR, 37 * 768, 768, FH, FH, LL, E_RES, LN, 1, 0, 0, 3, 0},
    {AR, 11 * 104, 104, F32, BF, LL, E_BIAS | E_RES, LN, 0, 0, 0, 3, 0},
    {AR, 4 * 4096, 4096, BF, BF, LL, E_RES, RMS, 0, 0, 0, 3, 0},   /* the longest row held in registers */
    {AR, 3 * 4104, 4104, FH, F32, LL, E_BIAS | E_RES, LN, 1, 0, 0, 3, 0}, /* one group more: shared memory */
    {AR, 2 * 32768, 32768, BF, BF, LL, E_RES, RMS, 0, 0, 0, 3, 0}, /* the largest row (in shared memory) */
    {AR, 300 * 8, 8, BF, BF, LL, E_RES, RMS, 0, 0, 0, 3, 4},       /* more rows than blocks */
    {AR, 1000, 0, BF, BF, LL, 0, NN, 0, 1, 0, 3, 0},                /* in place */
    {AR, 37 * 768, 768, BF, BF, LL, E_BIAS | E_RES, RMS, 0, 1, 0, 3, 0},
    {AR, 65537, 0, FH, FH, LL, E_DROP, NN, 0, 1, 0, 3, 0},
    {AR, 4099, 4099, BF, BF, LL, E_BIAS | E_DROP | E_RES, NN, 0, 0, 1, 5, 0}, /* graph replays: parities alternate */
    {AR, 37 * 768, 768, BF, BF, LL, E_RES, RMS, 0, 0, 1, 5, 0},
    {AR, 1000, 0, BF, BF, LL, 0, NN, 0, 1, 1, 5, 0},
};

/* AllReduce PUSH: the same, with rows of any length (a chunk is whole rows)
 * and more chunks than blocks */
static const coll_case_t g_push[] = {
    {AR, 1, 0, BF, BF, PU, 0, NN, 0, 0, 0, 3, 0},
    {AR, 7, 0, FH, FH, PU, 0, NN, 0, 0, 0, 3, 0},
    {AR, 13, 0, F32, BF, PU, 0, NN, 0, 0, 0, 3, 0},
    {AR, 17, 0, BF, F32, PU, 0, NN, 0, 0, 0, 3, 0},
    {AR, 4099, 0, FH, F32, PU, 0, NN, 0, 0, 0, 3, 3},
    {AR, 65537, 0, BF, BF, PU, 0, NN, 0, 0, 0, 3, 0},
    {AR, 65537, 0, F32, F32, PU, 0, NN, 0, 0, 0, 3, 1}, /* one block: every chunk in turn */
    {AR, (3 << 20) + 5, 0, BF, BF, PU, 0, NN, 0, 0, 0, 3, 4}, /* 256 KiB chunks, several per block */
    {AR, 37 * 768, 768, BF, BF, PU, E_BIAS | E_DROP | E_RES, NN, 0, 0, 0, 3, 0},
    {AR, 9 * 100, 100, F32, BF, PU, E_SCALE | E_BIAS | E_RELU | E_RES, NN, 0, 0, 0, 3, 0},
    {AR, 100003, 0, FH, FH, PU, E_DROP, NN, 0, 0, 0, 3, 0},
    {AR, 37 * 768, 768, BF, BF, PU, E_RES, RMS, 0, 0, 0, 3, 0},
    {AR, 11 * 100, 100, F32, F32, PU, E_BIAS | E_RES, LN, 0, 0, 0, 3, 0}, /* rows not multiples of 8 */
    {AR, 3 * 5, 5, BF, BF, PU, E_RES, LN, 1, 0, 0, 3, 0},
    {AR, 64 * 8192, 8192, BF, BF, PU, E_RES, RMS, 0, 0, 0, 3, 0},
    {AR, 1000, 0, BF, BF, PU, 0, NN, 0, 1, 0, 3, 0},                /* in place */
    {AR, 37 * 768, 768, BF, BF, PU, E_BIAS | E_RES, RMS, 0, 1, 0, 3, 0},
    {AR, 65537, 0, FH, FH, PU, E_DROP, NN, 0, 1, 0, 3, 0},
    {AR, 4099, 4099, BF, BF, PU, E_BIAS | E_DROP | E_RES, NN, 0, 0, 1, 5, 0}, /* graph replays */
    {AR, 37 * 768, 768, BF, BF, PU, E_RES, RMS, 0, 0, 1, 5, 0},
    {AR, 1000, 0, BF, BF, PU, 0, NN, 0, 1, 1, 5, 0},
};

static const coll_case_t g_in_place_graph[] = {
    {AR, 1000, 0, BF, BF, A1, 0, NN, 0, 1, 0, 3, 0},
    {AR, 65537, 0, FH, FH, A2, 0, NN, 0, 1, 0, 3, 0},
    {AR, 37 * 768, 768, BF, BF, A2, E_BIAS | E_RES, RMS, 0, 1, 0, 2, 0},
    {AR, 37 * 768, 768, F32, F32, A1, E_DROP, NN, 0, 1, 0, 2, 0},
    {RS, 65537, 0, BF, BF, A0, E_SCALE, NN, 0, 1, 0, 2, 0},
    {AG, 65537, 0, BF, BF, A0, 0, NN, 0, 1, 0, 2, 0},
    {AG, 37 * 100, 100, FH, FH, A0, 0, NN, 0, 1, 0, 2, 0},
    /* graph: capture once, replay with new inputs every call */
    {AR, 4099, 4099, BF, BF, A1, E_BIAS | E_DROP | E_RES, NN, 0, 0, 1, 4, 0}, /* one row: a bias needs cols */
    {AR, 37 * 768, 768, BF, BF, A2, E_BIAS | E_DROP | E_RES, NN, 0, 0, 1, 4, 0},
    {AR, 37 * 768, 768, BF, BF, A2, E_RES, RMS, 0, 0, 1, 3, 0},
    {RS, 65537, 0, FH, FH, A0, 0, NN, 0, 0, 1, 3, 0},
    {AG, 65537, 0, FH, FH, A0, 0, NN, 0, 0, 1, 3, 0},
    {AR, 1000, 0, BF, BF, A1, 0, NN, 0, 1, 1, 3, 0},
};

/* ReduceScatter in place on rows of any width: a rank's slice begins at a
 * row start that need not be 16-byte aligned (1000 x 8191 bf16 at W = 2:
 * rank 1's out = in + 8,191,000 bytes); the call must take every count and
 * row width the out-of-place call takes */
static const coll_case_t g_rs_in_place_rows[] = {
    {RS, 1000 * 8191, 8191, BF, BF, A0, 0, NN, 0, 1, 0, 2, 0},
    {RS, 1000 * 8191, 8191, BF, BF, A0, E_BIAS | E_RES, RMS, 0, 1, 0, 2, 0},
    {RS, 37 * 1001, 1001, F32, F32, A0, E_SCALE | E_DROP, NN, 0, 1, 0, 2, 0},
    {RS, 33 * 77, 77, FH, FH, A0, E_RES, LN, 1, 1, 0, 2, 0},
    {RS, 33 * 77, 77, FH, FH, A0, 0, NN, 0, 1, 1, 3, 0}, /* graph */
    {RS, 8 * 1000 + 3, 0, BF, BF, A0, E_SCALE, NN, 0, 1, 0, 2, 0},
};

#define N(a) ((int)(sizeof a / sizeof *a))
LOOM_TEST(gpu_coll_sizes_dtypes_w1) { run_suite(1, g_sizes, N(g_sizes)); }
LOOM_TEST(gpu_coll_sizes_dtypes_w2) { run_suite(2, g_sizes, N(g_sizes)); }
LOOM_TEST(gpu_coll_epilogues_and_norms_w1) { run_suite(1, g_epi, N(g_epi)); }
LOOM_TEST(gpu_coll_epilogues_and_norms_w2) { run_suite(2, g_epi, N(g_epi)); }
LOOM_TEST(gpu_coll_reduce_scatter_all_gather_w1) { run_suite(1, g_rs_ag, N(g_rs_ag)); }
LOOM_TEST(gpu_coll_reduce_scatter_all_gather_w2) { run_suite(2, g_rs_ag, N(g_rs_ag)); }
LOOM_TEST(gpu_coll_in_place_and_graphs_w1) { run_suite(1, g_in_place_graph, N(g_in_place_graph)); }
LOOM_TEST(gpu_coll_in_place_and_graphs_w2) { run_suite(2, g_in_place_graph, N(g_in_place_graph)); }
LOOM_TEST(gpu_coll_reduce_scatter_in_place_any_row_width_w1) { run_suite(1, g_rs_in_place_rows, N(g_rs_in_place_rows)); }
LOOM_TEST(gpu_coll_reduce_scatter_in_place_any_row_width_w2) { run_suite(2, g_rs_in_place_rows, N(g_rs_in_place_rows)); }
LOOM_TEST(gpu_coll_ll_w1) { run_suite(1, g_ll, N(g_ll)); }
LOOM_TEST(gpu_coll_ll_w2) { run_suite(2, g_ll, N(g_ll)); }
LOOM_TEST(gpu_coll_push_w1) { run_suite(1, g_push, N(g_push)); }
LOOM_TEST(gpu_coll_push_w2) { run_suite(2, g_push, N(g_push)); }
LOOM_WORLD_TESTS(gpu_world_coll_sizes_dtypes, run_world, g_sizes, N(g_sizes))
LOOM_WORLD_TESTS(gpu_world_coll_epilogues_and_norms, run_world, g_epi, N(g_epi))
LOOM_WORLD_TESTS(gpu_world_coll_reduce_scatter_all_gather, run_world, g_rs_ag, N(g_rs_ag))
LOOM_WORLD_TESTS(gpu_world_coll_in_place_and_graphs, run_world, g_in_place_graph, N(g_in_place_graph))
LOOM_WORLD_TESTS(gpu_world_coll_reduce_scatter_in_place_any_row_width, run_world, g_rs_in_place_rows,
                 N(g_rs_in_place_rows))
LOOM_WORLD_TESTS(gpu_world_coll_ll, run_world, g_ll, N(g_ll))
LOOM_WORLD_TESTS(gpu_world_coll_push, run_world, g_push, N(g_push))

/* Hundreds of calls of six plans alternating on one stream (AllReduce one-
 * and two-shot with epilogues, ReduceScatter, AllGather, AllReduce LL and
 * PUSH),
 * inputs fixed, the outputs checked every 100 calls: no drift in the epochs,
 * no stale chunk or line. */
#define NP 6
static int rank_many(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, rank = ctx->rank;
  loom_comm_t comm = NULL;
  loom_plan_t p[NP] = {NULL, NULL, NULL, NULL, NULL, NULL};
  cudaStream_t s = NULL;
  const coll_case_t ks[NP] = {
      {AR, 3001, 0, BF, BF, A1, 0, NN, 0, 0, 0, 1, 0},
      {AR, 200 * 512, 512, BF, BF, A2, E_BIAS | E_RES, RMS, 0, 0, 0, 1, 0},
      {RS, 70001, 0, FH, F32, A0, 0, NN, 0, 0, 0, 1, 0},
      {AG, 50003, 0, F32, F32, A0, 0, NN, 0, 0, 0, 1, 0},
      {AR, 5003, 0, FH, FH, LL, 0, NN, 0, 0, 0, 1, 0},
      {AR, 70003, 0, BF, F32, PU, 0, NN, 0, 0, 0, 1, 0},
  };
  void *in[NP] = {NULL}, *out[NP] = {NULL}, *h[NP] = {NULL};
  void *d_bias = NULL, *d_res = NULL, *d_nw = NULL;
  coll_inputs_t x[NP];
  memset(x, 0, sizeof x);
  size_t obytes[NP] = {0};
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&d_bias, 512 * 2));
  CUDA_OK(cudaMalloc(&d_res, 200 * 512 * 2));
  CUDA_OK(cudaMalloc(&d_nw, 512 * 2));
  for (int i = 0; i < NP; ++i) {
    const coll_case_t *k = &ks[i];
    loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
    d.count = k->count, d.cols = k->cols, d.dtype = k->in, d.out_type = k->out, d.norm = k->norm, d.algo = k->algo;
    d.world_size = W;
    LOOM_OK(k->op == AR ? loom_plan_allreduce(comm, &d, &p[i])
            : k->op == RS ? loom_plan_reduce_scatter(comm, &d, &p[i])
                          : loom_plan_all_gather(comm, &d, &p[i]));
    loom_coll_plan_info_t info = LOOM_COLL_PLAN_INFO_INIT;
    LOOM_OK(loom_coll_plan_info(p[i], &info));
    inputs_make(&x[i], k, W, 1000 + i);
    const size_t ei = loom_dtype_size(k->in), eo = loom_dtype_size(k->out);
    const int64_t S = info.slice_elems < k->count ? info.slice_elems : k->count;
    LOOM_OK(loom_malloc(comm, (size_t)(k->op == AG ? S : k->count) * ei, &in[i]));
    obytes[i] = (size_t)(k->op == RS ? info.my_len : k->count) * eo;
    if (obytes[i]) CUDA_OK(cudaMalloc(&out[i], obytes[i]));
    h[i] = malloc(obytes[i] + 16);
    if (k->op == AG) {
      if (info.my_len)
        CUDA_OK(cudaMemcpy(in[i], (char *)x[i].in[0] + (size_t)info.my_begin * ei, (size_t)info.my_len * ei,
                           cudaMemcpyHostToDevice));
    } else {
      CUDA_OK(cudaMemcpy(in[i], x[i].in[rank], (size_t)k->count * ei, cudaMemcpyHostToDevice));
    }
    if (i == 1) {
      CUDA_OK(cudaMemcpy(d_bias, x[i].bias, 512 * 2, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(d_res, x[i].res, 200 * 512 * 2, cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(d_nw, x[i].nw, 512 * 2, cudaMemcpyHostToDevice));
    }
  }
  for (int it = 0; it < 600; ++it) {
    const int i = it % NP;
    loom_epilogue_t e = make_epi(&ks[1], 1000 + 1, d_bias, d_res);
    if (i == 0) LOOM_OK(loom_allreduce(p[0], in[0], out[0], NULL, NULL, NULL, s));
    if (i == 1) LOOM_OK(loom_allreduce(p[1], in[1], out[1], &e, d_nw, NULL, s));
    if (i == 2) LOOM_OK(loom_reduce_scatter(p[2], in[2], out[2], NULL, NULL, NULL, s));
    if (i == 3) LOOM_OK(loom_all_gather(p[3], in[3], out[3], s));
    if (i == 4) LOOM_OK(loom_allreduce(p[4], in[4], out[4], NULL, NULL, NULL, s));
    if (i == 5) LOOM_OK(loom_allreduce(p[5], in[5], out[5], NULL, NULL, NULL, s));
    if (it % 100 == 99 || it >= 600 - NP) {
      CUDA_OK(cudaStreamSynchronize(s));
      LOOM_OK(loom_comm_get_async_error(comm));
      if (obytes[i]) CUDA_OK(cudaMemcpy(h[i], out[i], obytes[i], cudaMemcpyDeviceToHost));
      const size_t bad = check_out(&ks[i], &x[i], h[i], rank, W, 1000 + i);
      if (bad) loom_test_fail(__FILE__, __LINE__, "rank %d call %d (plan %d): %zu elements wrong", rank, it, i, bad);
      if (bad) break;
    }
  }
out:
  if (s) cudaStreamSynchronize(s);
  for (int i = 0; i < NP; ++i) {
    if (p[i]) CHECK_RESULT(loom_plan_destroy(p[i]), LOOM_SUCCESS);
    if (in[i]) CHECK_RESULT(loom_free(comm, in[i]), LOOM_SUCCESS);
    cudaFree(out[i]);
    free(h[i]);
    inputs_free(&x[i]);
  }
  cudaFree(d_bias), cudaFree(d_res), cudaFree(d_nw);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_coll_many_alternating_calls_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_many, NULL), 0);
}
LOOM_TEST(gpu_coll_many_alternating_calls_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_many, NULL), 0);
}

/* Argument errors are named before anything is launched. */
static int rank_bad_args(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  loom_comm_t comm = NULL;
  loom_plan_t ar = NULL, rn = NULL, ag = NULL;
  void *sym = NULL, *plain = NULL, *w = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 4096, d.cols = 256, d.world_size = W;
  LOOM_OK(loom_plan_allreduce(comm, &d, &ar));
  d.norm = LOOM_NORM_RMS;
  LOOM_OK(loom_plan_allreduce(comm, &d, &rn));
  d.norm = LOOM_NORM_NONE;
  LOOM_OK(loom_plan_all_gather(comm, &d, &ag));
  LOOM_OK(loom_malloc(comm, 4096 * 2 * 2, &sym));
  CUDA_OK(cudaMalloc(&plain, 4096 * 2 * 2));
  CUDA_OK(cudaMalloc(&w, 256 * 2));
  /* in must be symmetric memory */
  CHECK_RESULT(loom_allreduce(ar, plain, plain, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("in=");
  CHECK_MSG("loom_malloc");
  CHECK_RESULT(loom_allreduce(ar, NULL, plain, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("in=NULL");
  CHECK_RESULT(loom_allreduce(ar, sym, NULL, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("out=NULL");
  CHECK_RESULT(loom_allreduce(ar, (char *)sym + 2, plain, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not 16-byte aligned");
  {
    static char host[4096 * 2];
    CHECK_RESULT(loom_allreduce(ar, sym, host, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("out=");
  }
  /* partial overlap */
  CHECK_RESULT(loom_allreduce(ar, sym, (char *)sym + 256, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("overlap");
  /* norm weights */
  CHECK_RESULT(loom_allreduce(rn, sym, plain, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("norm_weight=NULL");
  CHECK_RESULT(loom_allreduce(rn, sym, plain, NULL, w, w, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("only LOOM_NORM_LAYER");
  CHECK_RESULT(loom_allreduce(ar, sym, plain, NULL, w, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("LOOM_NORM_NONE");
  /* epilogue fields */
  {
    loom_epilogue_t e = LOOM_EPILOGUE_INIT;
    e.dropout_p = 1.5f;
    CHECK_RESULT(loom_allreduce(ar, sym, plain, &e, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("dropout_p=1.5");
    e.dropout_p = 0.f;
    e.struct_size = 3;
    CHECK_RESULT(loom_allreduce(ar, sym, plain, &e, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("struct_size=3");
  }
  /* the wrong plan */
  CHECK_RESULT(loom_reduce_scatter(ar, sym, plain, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not a reduce_scatter plan");
  CHECK_RESULT(loom_allreduce(ag, sym, plain, NULL, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not an allreduce plan");
  CHECK_RESULT(loom_all_gather(ag, plain, sym, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("in=");
  {
    loom_coll_plan_info_t info = LOOM_COLL_PLAN_INFO_INIT;
    info.struct_size = 1;
    CHECK_RESULT(loom_coll_plan_info(ar, &info), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("info->struct_size=1");
  }
  /* a flat plan takes no bias (the bias has cols elements) */
  {
    loom_plan_t flat = NULL;
    loom_coll_desc_t f = LOOM_COLL_DESC_INIT;
    f.count = 4096, f.world_size = W;
    LOOM_OK(loom_plan_allreduce(comm, &f, &flat));
    loom_epilogue_t e = LOOM_EPILOGUE_INIT;
    e.bias = w;
    CHECK_RESULT(loom_allreduce(flat, sym, plain, &e, NULL, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("needs rows");
    CHECK_RESULT(loom_plan_destroy(flat), LOOM_SUCCESS);
  }
  /* bad descriptions through the public call */
  {
    loom_plan_t p = NULL;
    loom_coll_desc_t b = d;
    b.cols = 100; /* does not divide 4096 */
    CHECK_RESULT(loom_plan_allreduce(comm, &b, &p), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("desc->cols=100");
    b = d, b.world_size = W + 1;
    CHECK_RESULT(loom_plan_reduce_scatter(comm, &b, &p), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("desc->world_size");
    CHECK(p == NULL);
    if (W > 1) {
      /* ranks that disagree: an error on every rank, not a hang or mixed
       * protocols (another count on the last rank; a description only the
       * last rank refuses; one-shot against two-shot); then plans as before */
      const int last = ctx->rank == W - 1;
      b = d, b.count = last ? 4096 + 256 : 4096;
      CHECK_RESULT(loom_plan_allreduce(comm, &b, &p), LOOM_ERR_INVALID_ARGUMENT);
      CHECK_MSG("descriptions differ");
      b = d, b.cols = last ? 100 : 256;
      CHECK_RESULT(loom_plan_all_gather(comm, &b, &p), LOOM_ERR_INVALID_ARGUMENT);
      CHECK_MSG(last ? "desc->cols=100" : "another rank refused");
      b = d, b.algo = ctx->rank == 0 ? LOOM_COLL_ONE_SHOT : LOOM_COLL_TWO_SHOT;
      CHECK_RESULT(loom_plan_allreduce(comm, &b, &p), LOOM_ERR_INVALID_ARGUMENT);
      CHECK_MSG("descriptions differ");
      CHECK(p == NULL);
      b = d;
      LOOM_OK(loom_plan_reduce_scatter(comm, &b, &p));
      CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
    }
  }
out:
  if (ar) CHECK_RESULT(loom_plan_destroy(ar), LOOM_SUCCESS);
  if (rn) CHECK_RESULT(loom_plan_destroy(rn), LOOM_SUCCESS);
  if (ag) CHECK_RESULT(loom_plan_destroy(ag), LOOM_SUCCESS);
  if (sym) CHECK_RESULT(loom_free(comm, sym), LOOM_SUCCESS);
  cudaFree(plain), cudaFree(w);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_coll_bad_arguments_are_named_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}
LOOM_TEST(gpu_coll_bad_arguments_are_named_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_bad_args, NULL), 0);
}

/* The last rank never calls: the others' calls give up after the timeout,
 * name the wait, and the comm and plan can still be destroyed. arg: the
 * algorithm. */
static int rank_absent_peer(loom_rank_ctx_t *ctx, void *arg) {
  const int op = *(const int *)arg; /* 0 one-shot, 1 two-shot, 2 RS, 3 AG, 4 LL, 5 PUSH */
  const int ar = op <= 1 || op >= 4;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  void *in = NULL, *out = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 500;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = 100000, d.world_size = ctx->size;
  d.algo = op == 0 ? LOOM_COLL_ONE_SHOT : op == 1 ? LOOM_COLL_TWO_SHOT : op == 4 ? LOOM_COLL_LL
           : op == 5 ? LOOM_COLL_PUSH : LOOM_COLL_AUTO;
  LOOM_OK(ar ? loom_plan_allreduce(comm, &d, &plan)
          : op == 2 ? loom_plan_reduce_scatter(comm, &d, &plan)
                    : loom_plan_all_gather(comm, &d, &plan));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LOOM_OK(loom_malloc(comm, 100000 * 2, &in));
  CUDA_OK(cudaMalloc(&out, 100000 * 2));
  CUDA_OK(cudaMemset(in, 0x3c, 100000 * 2));
  if (ctx->rank != ctx->size - 1) {
    LOOM_OK(ar ? loom_allreduce(plan, in, out, NULL, NULL, NULL, s)
            : op == 2 ? loom_reduce_scatter(plan, in, out, NULL, NULL, NULL, s)
                      : loom_all_gather(plan, in, out, s));
    CUDA_OK(cudaStreamSynchronize(s)); /* returns: every wait is bounded */
    CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
    const char *msg = loom_last_error();
    CHECK(strstr(msg, "collective") != NULL || strstr(msg, "AllReduce") != NULL);
    printf("  rank %d: %s\n", ctx->rank, msg);
    /* the comm stays in error: the next call says so */
    CHECK_RESULT(ar ? loom_allreduce(plan, in, out, NULL, NULL, NULL, s)
                 : op == 2 ? loom_reduce_scatter(plan, in, out, NULL, NULL, NULL, s)
                           : loom_all_gather(plan, in, out, s),
                 LOOM_ERR_TIMEOUT);
  } else {
    sleep(2); /* absent while the others wait */
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (in) (void)loom_free(comm, in);
  cudaFree(out);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_coll_absent_peer_times_out_w2) {
  static const int ops[6] = {0, 1, 2, 3, 4, 5};
  for (int i = 0; i < 6 && loom_test_gpus(2); ++i) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_absent_peer, (void *)&ops[i]), 0);
}

/* The same in a world of 4 ranks on one GPU: rank 3 never calls, ranks
 * 0..2 time out (each algorithm in a world of its own: their frees' exchange
 * expires too while rank 3 sleeps, which breaks that world). */
LOOM_TEST(gpu_world_coll_absent_peer_times_out_w4) {
  static const int ops[6] = {0, 1, 2, 3, 4, 5};
  for (int i = 0; i < 6 && loom_test_gpus(1); ++i)
    CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_absent_peer, (void *)&ops[i]), 0);
}

/* One-shot, two-shot and LL (where it applies) give the same bits, on every
 * rank: each element is summed in rank order in fp32 and the epilogue runs
 * once on it (loom.h promises "the same bits on every rank, run and
 * algorithm").
 * Every rank hashes its output; the hashes agree (loom_launch_same_u64). */
static uint64_t fnv1a(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ ((const unsigned char *)p)[i]) * 1099511628211ull;
  return h;
}

static int rank_same_bits(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, rank = ctx->rank;
  static const coll_case_t cs[] = {
      {AR, 100003, 0, BF, BF, A0, E_DROP, NN, 0, 0, 0, 1, 0},
      {AR, 37 * 768, 768, FH, F32, A0, E_SCALE | E_BIAS | E_GELU | E_DROP | E_RES, NN, 0, 0, 0, 1, 0},
      {AR, 11 * 100, 100, F32, BF, A0, E_BIAS | E_RES, LN, 1, 0, 0, 1, 0},
      {AR, 37 * 768, 768, BF, BF, A0, E_RES, RMS, 0, 0, 0, 1, 0},
  };
  loom_comm_t comm = NULL;
  cudaStream_t s = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (size_t c = 0; c < sizeof cs / sizeof *cs; ++c) {
    const coll_case_t *k = &cs[c];
    const size_t ei = loom_dtype_size(k->in), eo = loom_dtype_size(k->out), ob = (size_t)k->count * eo;
    const int64_t cols = k->cols > 0 ? k->cols : 1;
    loom_plan_t p1 = NULL, p2 = NULL, p3 = NULL, p4 = NULL;
    const int use_ll = k->norm == NN || k->cols % 8 == 0;
    void *o3 = NULL, *h3 = malloc(ob), *o4 = NULL;
    void *in = NULL, *o1 = NULL, *o2 = NULL, *bias = NULL, *res = NULL, *nw = NULL, *nb = NULL;
    void *h1 = malloc(ob), *h2 = malloc(ob);
    coll_inputs_t x;
    memset(&x, 0, sizeof x);
    inputs_make(&x, k, W, 77);
    loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
    d.count = k->count, d.cols = k->cols, d.dtype = k->in, d.out_type = k->out, d.norm = k->norm, d.world_size = W;
    d.algo = LOOM_COLL_ONE_SHOT;
    loom_result_t r = loom_plan_allreduce(comm, &d, &p1);
    d.algo = LOOM_COLL_TWO_SHOT;
    if (r == LOOM_SUCCESS) r = loom_plan_allreduce(comm, &d, &p2);
    d.algo = LOOM_COLL_LL;
    if (r == LOOM_SUCCESS && use_ll) r = loom_plan_allreduce(comm, &d, &p3);
    d.algo = LOOM_COLL_PUSH;
    if (r == LOOM_SUCCESS) r = loom_plan_allreduce(comm, &d, &p4);
    if (r == LOOM_SUCCESS) r = loom_malloc(comm, (size_t)k->count * ei, &in);
    CHECK_RESULT(r, LOOM_SUCCESS);
    int ok = r == LOOM_SUCCESS && cudaMalloc(&o1, ob) == cudaSuccess && cudaMalloc(&o2, ob) == cudaSuccess &&
             cudaMalloc(&bias, (size_t)cols * eo) == cudaSuccess && cudaMalloc(&res, ob) == cudaSuccess &&
             cudaMalloc(&nw, (size_t)cols * eo) == cudaSuccess && cudaMalloc(&nb, (size_t)cols * eo) == cudaSuccess &&
             cudaMalloc(&o3, ob) == cudaSuccess && cudaMalloc(&o4, ob) == cudaSuccess && h1 && h2 && h3;
    ok = ok && cudaMemcpy(in, x.in[rank], (size_t)k->count * ei, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(bias, x.bias, (size_t)cols * eo, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(res, x.res, ob, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(nw, x.nw, (size_t)cols * eo, cudaMemcpyHostToDevice) == cudaSuccess &&
         cudaMemcpy(nb, x.nb, (size_t)cols * eo, cudaMemcpyHostToDevice) == cudaSuccess;
    CHECK(ok);
    if (ok) {
      const loom_epilogue_t e = make_epi(k, 3, bias, res);
      const void *w = k->norm ? nw : NULL, *b = k->norm && k->norm_bias ? nb : NULL;
      CHECK_RESULT(loom_allreduce(p1, in, o1, &e, w, b, s), LOOM_SUCCESS);
      CHECK_RESULT(loom_allreduce(p2, in, o2, &e, w, b, s), LOOM_SUCCESS);
      if (p3) CHECK_RESULT(loom_allreduce(p3, in, o3, &e, w, b, s), LOOM_SUCCESS);
      CHECK_RESULT(loom_allreduce(p4, in, o4, &e, w, b, s), LOOM_SUCCESS);
      CHECK(cudaStreamSynchronize(s) == cudaSuccess);
      CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_SUCCESS);
      CHECK(cudaMemcpy(h1, o1, ob, cudaMemcpyDeviceToHost) == cudaSuccess);
      CHECK(cudaMemcpy(h2, o2, ob, cudaMemcpyDeviceToHost) == cudaSuccess);
      if (memcmp(h1, h2, ob) != 0)
        loom_test_fail(__FILE__, __LINE__, "rank %d case %zu: one-shot and two-shot differ in their bits", rank, c);
      if (p3 && (cudaMemcpy(h3, o3, ob, cudaMemcpyDeviceToHost) != cudaSuccess || memcmp(h1, h3, ob) != 0))
        loom_test_fail(__FILE__, __LINE__, "rank %d case %zu: one-shot and LL differ in their bits", rank, c);
      if (cudaMemcpy(h3, o4, ob, cudaMemcpyDeviceToHost) != cudaSuccess || memcmp(h1, h3, ob) != 0)
        loom_test_fail(__FILE__, __LINE__, "rank %d case %zu: one-shot and PUSH differ in their bits", rank, c);
      const size_t bad = check_out(k, &x, h1, rank, W, 3);
      if (bad) loom_test_fail(__FILE__, __LINE__, "rank %d case %zu: %zu elements wrong", rank, c, bad);
      if (!loom_launch_same_u64(ctx, fnv1a(h1, ob)))
        loom_test_fail(__FILE__, __LINE__, "case %zu: the ranks' outputs differ", c);
    }
    if (s) cudaStreamSynchronize(s);
    if (p1) CHECK_RESULT(loom_plan_destroy(p1), LOOM_SUCCESS);
    if (p2) CHECK_RESULT(loom_plan_destroy(p2), LOOM_SUCCESS);
    if (p3) CHECK_RESULT(loom_plan_destroy(p3), LOOM_SUCCESS);
    if (p4) CHECK_RESULT(loom_plan_destroy(p4), LOOM_SUCCESS);
    if (in) CHECK_RESULT(loom_free(comm, in), LOOM_SUCCESS);
    cudaFree(o3), cudaFree(o4), free(h3);
    cudaFree(o1), cudaFree(o2), cudaFree(bias), cudaFree(res), cudaFree(nw), cudaFree(nb);
    free(h1), free(h2);
    inputs_free(&x);
  }
out:
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

LOOM_TEST(gpu_coll_one_and_two_shot_same_bits_on_every_rank_w1) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_same_bits, NULL), 0);
}
LOOM_TEST(gpu_coll_one_and_two_shot_same_bits_on_every_rank_w2) {
  if (loom_test_gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_same_bits, NULL), 0);
}
static void world_same_bits(int W, void *unused) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(W, LAUNCH_TIMEOUT_S, rank_same_bits, unused), 0);
}
LOOM_WORLD_TESTS(gpu_world_coll_one_and_two_shot_same_bits_on_every_rank, world_same_bits, NULL)
