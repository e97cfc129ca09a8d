/*
 * test_embedding_a2a.c - GPU tests of the fused embedding-bag + All-to-All
 * (loom_embedding_a2a, _backward, _pool, _check) against the double
 * precision CPU reference (src/ref/embedding_ref.h).
 *
 * Every rank builds every rank's inputs from the seed (tables with random
 * values of the table dtype, variable bag lengths with empty bags, uniform
 * or Zipf indices, per-sample weights), so each rank can compute its own
 * expected output. Outputs are poisoned (all bits set: NaN in every dtype)
 * before every call, and every element is checked, read as soon as the
 * rank's call is over. Tables per rank are uneven (3 on rank 0, 2, and 6 on
 * the last rank from W = 3: its slices arrive last, so a rank whose call
 * ended before every slice arrived reads poison), Bl is not a multiple of
 * the slice size, and D covers
 * the 1, 2, 4 and 8 chunks-per-lane kernels. W = 1 everywhere; W = 2 where
 * two GPUs exist (else skipped).
 *
 * Backward: table_grad starts random; the bound is what one rounding of the
 * exact sum gives: |got - exact| <= u(table dtype) |exact| + 2e-6 sum|terms|
 * (fp32 accumulation) (+ half the fp16 subnormal spacing), u = 2^-8 bf16,
 * 2^-11 fp16, 0 fp32 (the fp32 table is the accumulator). Zipf indices with
 * alpha up to 2 put one row in ~60% of a table's positions, so a run spans
 * several chunks of the sorted backward (fp16/bf16 tables; fp32 tables too
 * when a case forces it) and the half-precision atomics it replaces would
 * miss the bound by far. Also: the calls' device pointer checks (host, freed
 * and too-short memory, by argument name) and the plan's 32-bit bounds.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "support/dlrm_gen.h"
#include "ops/embedding/embedding_a2a.h"
#include "ref/embedding_ref.h"
#include "ref/ref.h"
#include "support/launch.h"

#define LAUNCH_TIMEOUT_S 300

#define CUDA_OK(call) CHECK_CUDA_OR(call, return 1)
#define LOOM_OK(call) CHECK_LOOM_OR(call, return 1)


typedef struct emb_case {
  int D;
  loom_dtype_t tt, ot;
  int mean, weighted;
  int S;
  loom_embedding_path_t path;
  double zipf;
  int calls;
  int backward;
  int bad_index;   /* rank 0 plants an out-of-range index in its table 1 */
  int skip_rank1;  /* rank 1 never calls: rank 0 must time out */
  int part;        /* bags per task (0: the plan's default) */
  int graph;       /* capture the forward (and the backward) in a CUDA graph once, replay it */
  int sorted;      /* 1: the sorted backward on fp32 tables too */
} emb_case_t;

typedef struct emb_suite {
  const emb_case_t *cases;
  int ncases;
  int timeout_ms;
  int64_t local_batch;
} emb_suite_t;

static const char *dt_name(loom_dtype_t t) { return t == LOOM_FP32 ? "fp32" : t == LOOM_FP16 ? "fp16" : "bf16"; }
static double dt_eps(loom_dtype_t t) { return t == LOOM_FP32 ? 1e-6 : t == LOOM_FP16 ? 1e-3 : 8e-3; }
/* Unit roundoff of one rounding to the table dtype (0: fp32 tables
 * accumulate in their own precision, covered by the fp32 term). */
static double dt_unit(loom_dtype_t t) { return t == LOOM_FP32 ? 0.0 : t == LOOM_FP16 ? 0x1p-11 : 0x1p-8; }

/* Rank p's inputs for call c (identical on every process). */
typedef struct rank_inputs {
  int T;
  int64_t *rows, total_rows;
  void *tables;          /* host [total_rows, D] */
  int64_t *offsets, *indices, n;
  float *weights;
} rank_inputs_t;

static void free_inputs(rank_inputs_t *in) {
  free(in->rows);
  free(in->tables);
  free(in->offsets);
  free(in->indices);
  free(in->weights);
  memset(in, 0, sizeof *in);
}

static int make_inputs(rank_inputs_t *in, const emb_case_t *k, int p, int T, const int64_t *rows, int64_t B, int call,
                       uint64_t seed) {
  memset(in, 0, sizeof *in);
  in->T = T;
  in->rows = (int64_t *)malloc((size_t)(T ? T : 1) * sizeof(int64_t));
  for (int t = 0; t < T; ++t) in->total_rows += (in->rows[t] = rows[t]);
  size_t es = loom_dtype_size(k->tt);
  in->tables = malloc((size_t)(in->total_rows ? in->total_rows : 1) * (size_t)k->D * es);
  loom_ref_fill_random(k->tt, in->tables, (size_t)in->total_rows * (size_t)k->D, seed + 7919u * (uint64_t)p, 1.0);
  in->offsets = (int64_t *)malloc(((size_t)T * (size_t)B + 1) * sizeof(int64_t));
  loom_dlrm_gen_t g = {T, B, in->rows, 8, 1, 0.1, k->zipf, seed + 104729u * (uint64_t)p + 31u * (uint64_t)call};
  in->n = loom_dlrm_gen_offsets(&g, in->offsets);
  in->indices = (int64_t *)malloc((size_t)(in->n ? in->n : 1) * sizeof(int64_t));
  in->weights = (float *)malloc((size_t)(in->n ? in->n : 1) * sizeof(float));
  if (loom_dlrm_gen_indices(&g, in->offsets, in->indices) != 0) return 1;
  loom_dlrm_gen_weights(g.seed, in->n, in->weights);
  return 0;
}

/* Position of an index to corrupt: the first of a non-empty bag of table 1. */
static int64_t bad_position(const rank_inputs_t *in, int64_t B) {
  for (int64_t b = 3; b < B; ++b)
    if (in->offsets[B + b + 1] > in->offsets[B + b]) return in->offsets[B + b];
  return -1;
}

static int run_case(loom_rank_ctx_t *ctx, loom_comm_t comm, const emb_suite_t *su, const emb_case_t *k) {
  const int W = ctx->size, r = ctx->rank, D = k->D;
  const int64_t Bl = su->local_batch, B = Bl * W;
  int tpr[8], base[9];
  base[0] = 0;
  for (int p = 0; p < W; ++p) { /* the last rank (W >= 3) pools three times the others' tables: its slices
                                  * reach the other ranks last, after their own pooling is over */
    tpr[p] = p == 0 ? 3 : p == W - 1 && W >= 3 ? 6 : 2;
    base[p + 1] = base[p] + tpr[p];
  }
  const int T_total = base[W];
  int64_t rows[32];
  for (int g = 0; g < T_total; ++g) rows[g] = 500 + 37 * g;
  loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
  d.world_size = W;
  d.tables_per_rank = tpr;
  d.rows = rows;
  d.dim = D;
  d.global_batch = B;
  d.pooling = k->mean ? LOOM_POOL_MEAN : LOOM_POOL_SUM;
  d.per_sample_weights = k->weighted;
  d.table_type = k->tt;
  d.out_type = k->ot;
  d.slice_samples = k->S;
  loom__emb_plan_opts_t opts = LOOM__EMB_PLAN_OPTS_INIT;
  opts.path = k->path;
  loom_plan_t plan = NULL;
  LOOM_OK(loom__plan_embedding_a2a_opts(comm, &d, &opts, &plan));
  if (k->part) LOOM_OK(loom__emb_set_part(plan, k->part));
  if (k->sorted) LOOM_OK(loom__emb_set_backward(plan, LOOM_EMB_BWD_SORTED));
  int part = 0;
  LOOM_OK(loom__emb_get_part(plan, &part));
  const int sorted = k->tt != LOOM_FP32 || k->sorted;
  cudaGraph_t graph = NULL, bgraph = NULL;
  cudaGraphExec_t gexec = NULL, bgexec = NULL;
  uint32_t epoch0 = 0;
  loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
  LOOM_OK(loom_embedding_a2a_plan_info(plan, &info));
  if (k->path == LOOM_EMB_PATH_AUTO) CHECK_EQ_INT(info.staging_bytes, 0); /* zero-copy: no staging */

  const size_t os = loom_dtype_size(k->ot), ts = loom_dtype_size(k->tt);
  const size_t out_elems = (size_t)Bl * (size_t)T_total * (size_t)D;
  void *out = NULL, *d_tables = NULL, *d_tg = NULL, *grad = NULL;
  int64_t *d_off = NULL, *d_idx = NULL;
  float *d_w = NULL;
  LOOM_OK(loom_malloc(comm, out_elems * os, &out));
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  void *h_out = malloc(out_elems * os);
  double *expect = (double *)malloc(out_elems * sizeof(double)), *mag = (double *)malloc(out_elems * sizeof(double));
  int fails = 0;
  for (int call = 0; call < k->calls; ++call) {
    rank_inputs_t in[8];
    for (int p = 0; p < W; ++p)
      if (make_inputs(&in[p], k, p, tpr[p], rows + base[p], B, call, loom_test_seed())) return 1;
    int64_t badpos = -1, badval = 0;
    if (k->bad_index && call == 0) {
      badpos = bad_position(&in[0], B);
      badval = in[0].rows[1] + 5;
      CHECK(badpos >= 0);
      if (badpos >= 0) in[0].indices[badpos] = badval; /* the reference skips it too */
    }
    rank_inputs_t *mine = &in[r];
    if (call == 0) {
      CUDA_OK(cudaMalloc(&d_tables, (size_t)mine->total_rows * (size_t)D * ts));
      CUDA_OK(cudaMalloc((void **)&d_off, ((size_t)mine->T * (size_t)B + 1) * sizeof(int64_t)));
      CUDA_OK(cudaMalloc((void **)&d_idx, (size_t)(B * mine->T * 17 + 1) * sizeof(int64_t)));
      CUDA_OK(cudaMalloc((void **)&d_w, (size_t)(B * mine->T * 17 + 1) * sizeof(float)));
    }
    CUDA_OK(cudaMemcpy(d_tables, mine->tables, (size_t)mine->total_rows * (size_t)D * ts, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(d_off, mine->offsets, ((size_t)mine->T * (size_t)B + 1) * sizeof(int64_t), cudaMemcpyHostToDevice));
    if (mine->n) {
      CUDA_OK(cudaMemcpy(d_idx, mine->indices, (size_t)mine->n * sizeof(int64_t), cudaMemcpyHostToDevice));
      CUDA_OK(cudaMemcpy(d_w, mine->weights, (size_t)mine->n * sizeof(float), cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaStreamSynchronize(0)); /* a pageable upload's last DMA may still run: done before `st` reads */
    CHECK(loom_launch_world_sync(ctx)); /* every rank's uploads done before any calls */
    CUDA_OK(cudaMemsetAsync(out, 0xff, out_elems * os, st)); /* poison, ordered before the call */
    if (k->skip_rank1 && r == 1) {
      for (int p = 0; p < W; ++p) free_inputs(&in[p]);
      continue; /* never calls */
    }
    loom_result_t rc;
    if (k->graph) {
      if (call == 0) {
        /* num_indices: the buffer's capacity (every call's bags fit in it) */
        CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        rc = loom_embedding_a2a(plan, d_tables, d_idx, d_off, B * mine->T * 17, k->weighted ? d_w : NULL, out, st);
        CUDA_OK(cudaStreamEndCapture(st, &graph));
        CHECK_RESULT(rc, LOOM_SUCCESS);
        CHECK(loom_launch_graph_ready(ctx, graph, &gexec, st) == 0); /* every rank's, before any launches */
      }
      LOOM_OK(loom__emb_device_epoch(plan, &epoch0));
      CUDA_OK(cudaGraphLaunch(gexec, st));
      rc = LOOM_SUCCESS;
    } else {
      rc = loom_embedding_a2a(plan, d_tables, d_idx, d_off, mine->n, k->weighted ? d_w : NULL, out, st);
    }
    CHECK_RESULT(rc, LOOM_SUCCESS);
    /* the output read as soon as this rank's call is over (before the
     * reference is computed): a peer's slice that arrives after the call's
     * end (a wait missing) is still the poison here */
    CUDA_OK(loom_launch_download(h_out, out, out_elems * os, st));
    if (k->graph && info.path != LOOM_EMB_PATH_STAGED) { /* the replay ran a new epoch on the device */
      uint32_t e1 = 0;
      LOOM_OK(loom__emb_device_epoch(plan, &e1));
      CHECK_EQ_INT(e1, epoch0 + 1);
    }
    if (k->skip_rank1) {
      CHECK_RESULT(loom_comm_get_async_error(comm), LOOM_ERR_TIMEOUT);
      printf("    rank %d: peer never called: %s\n", r, loom_last_error());
      for (int p = 0; p < W; ++p) free_inputs(&in[p]);
      break;
    }
    LOOM_OK(loom_comm_get_async_error(comm));
    if (k->bad_index && call == 0 && r == 0) {
      CHECK_RESULT(loom_embedding_a2a_check(plan), LOOM_ERR_INVALID_ARGUMENT);
      char want[96];
      snprintf(want, sizeof want, "indices[%lld]=%lld", (long long)badpos, (long long)badval);
      CHECK_MSG(want);
      CHECK_MSG("local table 1");
      printf("    rank 0: %s\n", loom_last_error());
    }
    LOOM_OK(loom_embedding_a2a_check(plan)); /* cleared / nothing on other ranks */
    /* expected output of this rank */
    for (int p = 0; p < W; ++p) {
      size_t n = (size_t)B * (size_t)tpr[p] * (size_t)D;
      double *pooled = (double *)malloc((n ? n : 1) * sizeof(double)), *pm = (double *)malloc((n ? n : 1) * sizeof(double));
      loom_ref_embedding_pool(in[p].tables, k->tt, in[p].rows, tpr[p], D, B, in[p].offsets, in[p].indices,
                              k->weighted ? in[p].weights : NULL, k->mean, pooled, pm);
      loom_ref_embedding_place(pooled, tpr[p], base[p], T_total, D, B, W, r, expect);
      loom_ref_embedding_place(pm, tpr[p], base[p], T_total, D, B, W, r, mag);
      free(pooled);
      free(pm);
    }
    size_t wrong = 0;
    double maxerr = 0;
    for (size_t i = 0; i < out_elems; ++i) {
      double x = loom_ref_load(k->ot, h_out, i), e = fabs(x - expect[i]);
      /* relative rounding of the output dtype, fp32 accumulation, and for
       * fp16 the absolute spacing of its subnormals (2^-24) */
      double tol = dt_eps(k->ot) * fabs(expect[i]) + 2e-6 * mag[i] + (k->ot == LOOM_FP16 ? 6.0e-8 : 1e-30);
      if (!(e <= tol)) {
        if (wrong < 4)
          printf("    rank %d call %d: out[%zu] (row %zu col %zu) = %.8g, expected %.8g (tol %.3g)\n", r, call, i,
                 i / ((size_t)T_total * D), i % ((size_t)T_total * D), x, expect[i], tol);
        ++wrong;
      }
      if (e > maxerr && mag[i] > 0) maxerr = e / mag[i];
    }
    CHECK_EQ_INT(wrong, 0);
    fails += wrong != 0;

    if (k->backward && call == k->calls - 1) {
      /* grad_out: symmetric, random per rank; table_grad: random start */
      LOOM_OK(loom_malloc(comm, out_elems * os, &grad));
      void *h_grad[8];
      for (int p = 0; p < W; ++p) {
        h_grad[p] = malloc(out_elems * os);
        loom_ref_fill_random(k->ot, h_grad[p], out_elems, loom_test_seed() + 5000u + (uint64_t)p, 1.0);
      }
      CUDA_OK(cudaMemcpy(grad, h_grad[r], out_elems * os, cudaMemcpyHostToDevice));
      size_t tg_elems = (size_t)mine->total_rows * (size_t)D;
      void *h_tg = malloc(tg_elems * ts);
      loom_ref_fill_random(k->tt, h_tg, tg_elems, loom_test_seed() + 6000u + (uint64_t)r, 1.0);
      CUDA_OK(cudaMalloc(&d_tg, tg_elems * ts));
      CUDA_OK(cudaMemcpy(d_tg, h_tg, tg_elems * ts, cudaMemcpyHostToDevice));
      CUDA_OK(cudaStreamSynchronize(0));
      CHECK(loom_launch_world_sync(ctx)); /* every rank's uploads done before any calls */
      const float scale = 0.5f;
      if (k->graph) { /* captured once, replayed once (the sorted path allocates inside the graph) */
        CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
        loom_result_t rb = loom_embedding_a2a_backward(plan, grad, d_idx, d_off, mine->n, k->weighted ? d_w : NULL,
                                                       scale, d_tg, st);
        CUDA_OK(cudaStreamEndCapture(st, &bgraph));
        LOOM_OK(rb);
        CHECK(loom_launch_graph_ready(ctx, bgraph, &bgexec, st) == 0); /* every rank's, before any launches */
        CUDA_OK(cudaGraphLaunch(bgexec, st));
      } else {
        LOOM_OK(loom_embedding_a2a_backward(plan, grad, d_idx, d_off, mine->n, k->weighted ? d_w : NULL, scale, d_tg,
                                            st));
      }
      CUDA_OK(cudaStreamSynchronize(st));
      LOOM_OK(loom_comm_get_async_error(comm));
      if (k->bad_index && call == 0 && r == 0) { /* the backward skips and reports it too */
        CHECK_RESULT(loom_embedding_a2a_check(plan), LOOM_ERR_INVALID_ARGUMENT);
        char want[96];
        snprintf(want, sizeof want, "indices[%lld]=%lld", (long long)badpos, (long long)badval);
        CHECK_MSG(want);
      }
      LOOM_OK(loom_embedding_a2a_check(plan));
      /* this rank's tables' gradient over the global batch, from every rank */
      size_t gn = (size_t)B * (size_t)mine->T * (size_t)D;
      double *gb = (double *)malloc(gn * sizeof(double)), *ga = (double *)malloc(gn * sizeof(double));
      for (int64_t b = 0; b < B; ++b)
        for (int t = 0; t < mine->T; ++t)
          for (int e = 0; e < D; ++e) {
            size_t src = (size_t)(b % Bl) * (size_t)T_total * D + (size_t)(base[r] + t) * D + (size_t)e;
            double v = loom_ref_load(k->ot, h_grad[b / Bl], src);
            gb[((size_t)b * mine->T + (size_t)t) * D + (size_t)e] = v;
            ga[((size_t)b * mine->T + (size_t)t) * D + (size_t)e] = fabs(v);
          }
      double *tg = (double *)malloc(tg_elems * sizeof(double)), *tm = (double *)malloc(tg_elems * sizeof(double));
      for (size_t i = 0; i < tg_elems; ++i) {
        tg[i] = loom_ref_load(k->tt, h_tg, i);
        tm[i] = fabs(tg[i]);
      }
      float *absw = NULL;
      if (k->weighted) {
        absw = (float *)malloc((size_t)(mine->n ? mine->n : 1) * sizeof(float));
        for (int64_t i = 0; i < mine->n; ++i) absw[i] = fabsf(mine->weights[i]);
      }
      loom_ref_embedding_backward(gb, mine->rows, mine->T, D, B, mine->offsets, mine->indices,
                                  k->weighted ? mine->weights : NULL, k->mean, scale, tg);
      loom_ref_embedding_backward(ga, mine->rows, mine->T, D, B, mine->offsets, mine->indices, absw, k->mean, scale, tm);
      CUDA_OK(cudaMemcpy(h_tg, d_tg, tg_elems * ts, cudaMemcpyDeviceToHost));
      size_t bw = 0;
      double bmax = 0; /* largest error in units of the bound */
      for (size_t i = 0; i < tg_elems; ++i) {
        double x = loom_ref_load(k->tt, h_tg, i), e = fabs(x - tg[i]);
        /* one rounding of the exact sum to the table dtype, fp32 accumulation */
        double tol = dt_unit(k->tt) * fabs(tg[i]) + 2e-6 * tm[i] + (k->tt == LOOM_FP16 ? 0x1p-25 : 1e-30);
        if (!(e <= tol)) {
          if (bw < 4)
            printf("    rank %d backward: table_grad[%zu] (row %zu) = %.8g, expected %.8g (tol %.3g, err %.3g)\n", r, i,
                   i / (size_t)D, x, tg[i], tol, e);
          ++bw;
        }
        if (e / tol > bmax) bmax = e / tol;
      }
      CHECK_EQ_INT(bw, 0);
      fails += bw != 0;
      if (r == 0)
        printf("    backward %s tables, %s: largest error %.2f of the bound\n", dt_name(k->tt),
               sorted ? "sorted (fp32 sums, one rounding)" : "fp32 atomics", bmax);
      free(gb); free(ga); free(tg); free(tm); free(absw); free(h_tg);
      for (int p = 0; p < W; ++p) free(h_grad[p]);
      CUDA_OK(cudaFree(d_tg));
      d_tg = NULL;
    }
    for (int p = 0; p < W; ++p) free_inputs(&in[p]);
    if (r == 0 && call == k->calls - 1)
      printf("    W=%d D=%d %s->%s %s%s S=%d path=%d zipf=%.2f calls=%d%s%s P%d: %s (max err/mag %.2g, grid "
             "%d, %u flags, workspace %zu B, staging %zu B)\n",
             W, D, dt_name(k->tt), dt_name(k->ot), k->mean ? "mean" : "sum", k->weighted ? "+weights" : "", info.slice_samples,
             (int)info.path, k->zipf, k->calls, k->backward ? (sorted ? " +backward sorted" : " +backward atomic") : "",
             k->graph ? " graph replays" : "", part, fails ? "WRONG" : "ok", maxerr, info.grid_blocks,
             info.num_flags, info.workspace_bytes, info.staging_bytes);
  }
  CUDA_OK(cudaStreamSynchronize(st));
  if (gexec) CUDA_OK(cudaGraphExecDestroy(gexec));
  if (graph) CUDA_OK(cudaGraphDestroy(graph));
  if (bgexec) CUDA_OK(cudaGraphExecDestroy(bgexec));
  if (bgraph) CUDA_OK(cudaGraphDestroy(bgraph));
  cudaStreamDestroy(st);
  cudaFree(d_tables);
  cudaFree(d_off);
  cudaFree(d_idx);
  cudaFree(d_w);
  free(h_out);
  free(expect);
  free(mag);
  if (grad) LOOM_OK(loom_free(comm, grad));
  LOOM_OK(loom_free(comm, out));
  LOOM_OK(loom_plan_destroy(plan));
  return fails;
}

static int rank_suite(loom_rank_ctx_t *ctx, void *arg) {
  const emb_suite_t *su = (const emb_suite_t *)arg;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = su->timeout_ms;
  loom_comm_t comm = NULL;
  LOOM_OK(loom_launch_comm_create(ctx, &cfg, &comm));
  /* Every case runs even after a wrong result: plan creation is collective,
   * so a rank that stopped early would leave its peer waiting. */
  for (int i = 0; i < su->ncases; ++i) (void)run_case(ctx, comm, su, &su->cases[i]);
  LOOM_OK(loom_comm_destroy(comm));
  return loom_test_failures;
}

static int gpus(int need) { return loom_test_gpus(need); }

/* Bags per task (loom__emb_set_part; 0: the plan's default). */
static const int g_parts[] = {0, 8, 4, 1, 16, 32, 2};

/* Every dtype pair x {sum, mean, sum + weights}, D in {72, 256, 520}. */
static emb_case_t g_all[64];
static int all_cases(void) {
  static const loom_dtype_t ts[3] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  static const int Ds[3] = {72, 256, 520};
  int n = 0;
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b)
      for (int m = 0; m < 3; ++m) {
        emb_case_t k;
        memset(&k, 0, sizeof k);
        k.D = Ds[(a + b + m) % 3];
        k.tt = ts[a];
        k.ot = ts[b];
        k.mean = m == 1;
        k.weighted = m == 2;
        k.S = (a + m) % 2 ? 32 : 7;
        k.calls = 2;
        k.part = g_parts[n % (int)(sizeof g_parts / sizeof *g_parts)];
        g_all[n++] = k;
      }
  return n;
}

static void run_suite(int W, const emb_case_t *cases, int n, int timeout_ms) {
  emb_suite_t su = {cases, n, timeout_ms, 100};
  CHECK_EQ_INT(loom_launch(W, LAUNCH_TIMEOUT_S, rank_suite, &su), 0);
}

/* The cases of the zero-copy path (AUTO takes it there; a world refuses
 * the staged path, which moves rows through NCCL) as W ranks on one GPU. */
static void run_world(int W, const emb_case_t *cases, int n, int timeout_ms) {
  static emb_case_t fused[64];
  int m = 0;
  for (int i = 0; i < n && m < 64; ++i)
    if (cases[i].path != LOOM_EMB_PATH_STAGED) fused[m++] = cases[i];
  emb_suite_t su = {fused, m, timeout_ms, 100};
  CHECK(m > 0);
  if (gpus(1)) CHECK_EQ_INT(loom_launch_world(W, LAUNCH_TIMEOUT_S, rank_suite, &su), 0);
}

LOOM_TEST(gpu_embedding_a2a_forward_every_dtype_and_pooling_w1) {
  if (gpus(1)) run_suite(1, g_all, all_cases(), 10000);
}

LOOM_TEST(gpu_embedding_a2a_forward_every_dtype_and_pooling_w2) {
  if (gpus(2)) run_suite(2, g_all, all_cases(), 10000);
}

static void world_all(int W, int timeout_ms) { run_world(W, g_all, all_cases(), timeout_ms); }
LOOM_WORLD_TESTS(gpu_world_embedding_a2a_forward_every_dtype_and_pooling, world_all, 10000)

static const emb_case_t g_more[] = {
  /* D, tt, ot, mean, weighted, S, path, zipf, calls, backward, bad, skip, part, graph, sorted */
  {256, LOOM_FP32, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_STAGED, 0.0, 2, 0, 0, 0, 0, 0, 0},
  {72, LOOM_BF16, LOOM_FP16, 1, 0, 16, LOOM_EMB_PATH_STAGED, 0.0, 1, 0, 0, 0, 0, 0, 0},
  {256, LOOM_FP32, LOOM_FP32, 0, 1, 1, LOOM_EMB_PATH_AUTO, 1.05, 3, 0, 0, 0, 0, 0, 0},
  {256, LOOM_FP32, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_AUTO, 0.0, 1, 1, 0, 0, 0, 0, 0},
  {72, LOOM_FP32, LOOM_FP32, 1, 0, 8, LOOM_EMB_PATH_AUTO, 1.2, 1, 1, 0, 0, 0, 0, 0},
  {136, LOOM_BF16, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 0.0, 1, 1, 0, 0, 0, 0, 0},
  {64, LOOM_FP16, LOOM_FP16, 1, 0, 32, LOOM_EMB_PATH_AUTO, 0.0, 1, 1, 0, 0, 0, 0, 0},
  {72, LOOM_FP32, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_AUTO, 0.0, 2, 0, 1, 0, 0, 0, 0},
  /* backward on the staged path (pooling + NCCL send/recv; the gradient goes back the same way) */
  {256, LOOM_FP32, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_STAGED, 0.0, 1, 1, 0, 0, 0, 0, 0},
  {72, LOOM_BF16, LOOM_FP16, 1, 0, 16, LOOM_EMB_PATH_STAGED, 1.1, 1, 1, 0, 0, 4, 0, 0},
  {136, LOOM_FP16, LOOM_FP32, 0, 1, 7, LOOM_EMB_PATH_STAGED, 0.0, 1, 1, 0, 0, 8, 0, 0},
  /* other cuts of the work (bags per task), backward included */
  {256, LOOM_FP32, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 1.05, 2, 1, 0, 0, 4, 0, 0},
  {520, LOOM_FP16, LOOM_BF16, 1, 0, 64, LOOM_EMB_PATH_AUTO, 0.0, 2, 1, 0, 0, 32, 0, 0},
  {72, LOOM_FP32, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_AUTO, 0.0, 2, 0, 1, 0, 1, 0, 0},
  {256, LOOM_FP32, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 0.0, 2, 0, 0, 0, 16, 0, 0},
  {72, LOOM_FP32, LOOM_FP32, 1, 0, 7, LOOM_EMB_PATH_AUTO, 1.1, 2, 0, 1, 0, 2, 0, 0},
  {520, LOOM_BF16, LOOM_FP32, 0, 1, 16, LOOM_EMB_PATH_AUTO, 0.0, 2, 0, 0, 0, 8, 0, 0},
  {520, LOOM_FP32, LOOM_FP16, 0, 0, 8, LOOM_EMB_PATH_AUTO, 0.0, 2, 0, 0, 0, 1, 0, 0},
  {256, LOOM_BF16, LOOM_BF16, 0, 1, 32, LOOM_EMB_PATH_AUTO, 0.0, 2, 0, 1, 0, 32, 0, 0},
  /* the forward captured in a CUDA graph, replayed with new inputs each time */
  {256, LOOM_FP32, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 0.0, 4, 0, 0, 0, 0, 1, 0},
  {72, LOOM_BF16, LOOM_FP32, 1, 0, 7, LOOM_EMB_PATH_AUTO, 1.2, 3, 0, 0, 0, 4, 1, 0},
  {136, LOOM_FP16, LOOM_FP16, 0, 0, 16, LOOM_EMB_PATH_STAGED, 0.0, 3, 0, 0, 0, 16, 1, 0},
  {520, LOOM_BF16, LOOM_BF16, 0, 0, 16, LOOM_EMB_PATH_AUTO, 0.0, 3, 0, 0, 0, 2, 1, 0},
  /* the backward's accumulation on hot rows (Zipf 2: one row in ~60% of a
   * table's positions, runs across several chunks of the sorted backward):
   * bf16 / fp16 tables (sorted, one rounding), fp32 tables with atomics and
   * sorted; D 72 (fewer chunks than lanes), 256, 520, 1024 (8 per lane);
   * fused and staged paths; an out-of-range index (sorted last, skipped);
   * the backward captured in a graph (the sorted path allocates inside it) */
  {256, LOOM_BF16, LOOM_BF16, 0, 0, 32, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 0, 0, 0, 0, 0},
  {256, LOOM_BF16, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 0, 0, 0, 0, 0},
  {520, LOOM_FP16, LOOM_FP32, 0, 1, 16, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 0, 0, 0, 0, 0},
  {72, LOOM_FP16, LOOM_FP16, 1, 0, 8, LOOM_EMB_PATH_AUTO, 1.05, 1, 1, 0, 0, 0, 0, 0},
  {1024, LOOM_BF16, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_AUTO, 1.2, 1, 1, 0, 0, 0, 0, 0},
  {1024, LOOM_FP16, LOOM_FP16, 1, 0, 32, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 0, 0, 0, 0, 0},
  {136, LOOM_FP32, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 0, 0, 0, 0, 0},
  {136, LOOM_FP32, LOOM_FP32, 0, 1, 32, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 0, 0, 0, 0, 1},
  {256, LOOM_FP32, LOOM_BF16, 1, 0, 32, LOOM_EMB_PATH_AUTO, 1.05, 1, 1, 0, 0, 0, 0, 1},
  {256, LOOM_BF16, LOOM_BF16, 0, 0, 32, LOOM_EMB_PATH_STAGED, 2.0, 1, 1, 0, 0, 0, 0, 0},
  {136, LOOM_FP32, LOOM_FP32, 0, 0, 16, LOOM_EMB_PATH_STAGED, 2.0, 1, 1, 0, 0, 0, 0, 1},
  {256, LOOM_FP16, LOOM_FP16, 0, 1, 32, LOOM_EMB_PATH_AUTO, 2.0, 1, 1, 1, 0, 0, 0, 0},
  {256, LOOM_BF16, LOOM_BF16, 0, 0, 32, LOOM_EMB_PATH_AUTO, 2.0, 2, 1, 0, 0, 0, 1, 0},
  {136, LOOM_FP32, LOOM_FP32, 0, 1, 16, LOOM_EMB_PATH_STAGED, 2.0, 2, 1, 0, 0, 0, 1, 1},
};

LOOM_TEST(gpu_embedding_a2a_staged_zipf_backward_bad_index_w1) {
  if (gpus(1)) run_suite(1, g_more, (int)(sizeof g_more / sizeof *g_more), 10000);
}

LOOM_TEST(gpu_embedding_a2a_staged_zipf_backward_bad_index_w2) {
  if (gpus(2)) run_suite(2, g_more, (int)(sizeof g_more / sizeof *g_more), 10000);
}
LOOM_WORLD_TESTS(gpu_world_embedding_a2a_zipf_backward_bad_index_graphs, run_world, g_more,
                 (int)(sizeof g_more / sizeof *g_more), 10000)

static const emb_case_t g_timeout[] = {{72, LOOM_FP32, LOOM_FP32, 0, 0, 32, LOOM_EMB_PATH_AUTO, 0.0, 1, 0, 0, 1, 0, 0, 0}};

LOOM_TEST(gpu_embedding_a2a_peer_never_calls_times_out_2gpu) {
  if (gpus(2)) run_suite(2, g_timeout, 1, 1000);
}
/* rank 1 of 3 on one GPU never calls: ranks 0 and 2 time out */
LOOM_TEST(gpu_world_embedding_a2a_peer_never_calls_times_out_w3) { run_world(3, g_timeout, 1, 1000); }

/* ---- argument errors on a real comm ---------------------------------------
 * Every pointer a call reads or writes is checked before anything is
 * launched: host memory, freed memory and memory shorter than the bytes the
 * call reaches are refused with LOOM_ERR_INVALID_ARGUMENT naming the
 * argument; the plan refuses counts past its 32-bit signal indices and the
 * sorted backward more than 2^32 - 1 indices. Every rank makes the same bad
 * calls (none starts a kernel, so no peer is left waiting), and a good call
 * before and after shows the plan unharmed. */

#define ERR_T 2       /* tables per rank */
#define ERR_ROWS 1000 /* rows per table */
#define ERR_D 64
#define ERR_BL 32     /* local batch */

/* One bad call: its result and the names its message must carry. */
static void expect_refused(loom_result_t got, loom_result_t want, const char *arg, const char *what) {
  CHECK_RESULT(got, want);
  CHECK_MSG(arg);
  if (what) CHECK_MSG(what);
}

static int rank_errors(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size;
  const int64_t B = (int64_t)ERR_BL * W, n = (int64_t)ERR_T * B * 2;
  loom_comm_t comm = NULL;
  LOOM_OK(loom_launch_comm_create(ctx, NULL, &comm));
  int tpr[8];
  int64_t rows[16];
  for (int p = 0; p < W; ++p) tpr[p] = ERR_T;
  for (int g = 0; g < ERR_T * W; ++g) rows[g] = ERR_ROWS;
  loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
  d.world_size = W;
  d.tables_per_rank = tpr;
  d.rows = rows;
  d.dim = ERR_D;
  d.global_batch = B;
  loom_plan_t plan = NULL, wplan = NULL, hplan = NULL, bad = NULL;
  LOOM_OK(loom_plan_embedding_a2a(comm, &d, &plan));
  d.per_sample_weights = 1;
  LOOM_OK(loom_plan_embedding_a2a(comm, &d, &wplan));
  d.per_sample_weights = 0;
  d.table_type = LOOM_BF16;
  LOOM_OK(loom_plan_embedding_a2a(comm, &d, &hplan));
  d.table_type = LOOM_FP32;

  /* good inputs: bags of 2, random rows */
  const size_t tab_bytes = (size_t)ERR_T * ERR_ROWS * ERR_D * 4, out_bytes = (size_t)ERR_BL * ERR_T * W * ERR_D * 4;
  int64_t *h_off = (int64_t *)malloc(((size_t)ERR_T * B + 1) * sizeof(int64_t)), *h_idx = (int64_t *)malloc((size_t)n * 8);
  float *h_tab = (float *)malloc(tab_bytes), *h_w = (float *)malloc((size_t)n * 4);
  for (int64_t i = 0; i <= ERR_T * B; ++i) h_off[i] = 2 * i;
  uint64_t seed = loom_test_seed() + 17u * (uint64_t)ctx->rank;
  for (int64_t i = 0; i < n; ++i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    h_idx[i] = (int64_t)((seed >> 33) % ERR_ROWS);
    h_w[i] = 1.0f;
  }
  loom_ref_fill_random(LOOM_FP32, h_tab, tab_bytes / 4, loom_test_seed(), 1.0);
  void *tab = NULL, *tg = NULL, *out = NULL, *grad = NULL, *big = NULL, *freed = NULL;
  int64_t *off = NULL, *idx = NULL;
  float *w = NULL;
  const size_t big_bytes = (size_t)4 << 20;
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaMalloc(&tab, tab_bytes));
  CUDA_OK(cudaMalloc(&tg, tab_bytes));
  CUDA_OK(cudaMalloc((void **)&off, ((size_t)ERR_T * B + 1) * 8));
  CUDA_OK(cudaMalloc((void **)&idx, (size_t)n * 8));
  CUDA_OK(cudaMalloc((void **)&w, (size_t)n * 4));
  CUDA_OK(cudaMalloc(&big, big_bytes));
  CUDA_OK(cudaMemcpy(tab, h_tab, tab_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(tg, h_tab, tab_bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(off, h_off, ((size_t)ERR_T * B + 1) * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(idx, h_idx, (size_t)n * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(w, h_w, (size_t)n * 4, cudaMemcpyHostToDevice));
  LOOM_OK(loom_malloc(comm, out_bytes, &out));
  LOOM_OK(loom_malloc(comm, out_bytes, &grad));
  CUDA_OK(cudaMemset(grad, 0, out_bytes));
  CUDA_OK(cudaStreamSynchronize(0)); /* uploads and the memset done before `st` reads */
  /* the last 64 bytes of a 4 MiB allocation: shorter than any of the buffers */
  char *tail = (char *)big + big_bytes - 64;

  LOOM_OK(loom_embedding_a2a(plan, tab, idx, off, n, NULL, out, st));
  CUDA_OK(cudaStreamSynchronize(st));
  LOOM_OK(loom_comm_get_async_error(comm));

  expect_refused(loom_embedding_a2a(plan, h_tab, idx, off, n, NULL, out, st), LOOM_ERR_INVALID_ARGUMENT,
                 "loom_embedding_a2a: tables=", "host memory");
  expect_refused(loom_embedding_a2a(plan, tab, idx, (const int64_t *)tail, n, NULL, out, st), LOOM_ERR_INVALID_ARGUMENT,
                 "offsets=", "the op reaches");
  expect_refused(loom_embedding_a2a(plan, tab, (const int64_t *)tail, off, n, NULL, out, st), LOOM_ERR_INVALID_ARGUMENT,
                 "indices=", "the op reaches");
  expect_refused(loom_embedding_a2a(plan, tab, idx, off, n, NULL, tail, st), LOOM_ERR_INVALID_ARGUMENT, "out=",
                 "the op reaches");
  expect_refused(loom_embedding_a2a(wplan, tab, idx, off, n, h_w, out, st), LOOM_ERR_INVALID_ARGUMENT, "weights=",
                 "host memory");
  expect_refused(loom_embedding_pool(plan, tab, idx, off, n, NULL, h_tab, st), LOOM_ERR_INVALID_ARGUMENT,
                 "loom_embedding_pool: pooled=", "host memory");
  expect_refused(loom_embedding_a2a_backward(plan, h_tab, idx, off, n, NULL, 1.f, tg, st), LOOM_ERR_INVALID_ARGUMENT,
                 "grad_out=", "host memory");
  expect_refused(loom_embedding_a2a_backward(plan, grad, idx, off, n, NULL, 1.f, tail, st), LOOM_ERR_INVALID_ARGUMENT,
                 "table_grad=", "the op reaches");
  expect_refused(loom_embedding_a2a_backward(hplan, grad, idx, off, n, NULL, 1.f, h_tab, st),
                 LOOM_ERR_INVALID_ARGUMENT, "table_grad=", "host memory");
  /* out / grad_out outside loom_malloc memory: refused on every path, the
   * staged one included (what a call accepts never depends on the path) */
  {
    loom_plan_t sp = NULL;
    const loom__emb_plan_opts_t staged = {0, LOOM_EMB_PATH_STAGED};
    LOOM_OK(loom__plan_embedding_a2a_opts(comm, &d, &staged, &sp));
    loom_plan_t both[2] = {plan, sp};
    for (int i = 0; i < 2; ++i) {
      expect_refused(loom_embedding_a2a(both[i], tab, idx, off, n, NULL, big, st), LOOM_ERR_INVALID_ARGUMENT, "out=",
                     "loom_malloc");
      expect_refused(loom_embedding_a2a_backward(both[i], big, idx, off, n, NULL, 1.f, tg, st),
                     LOOM_ERR_INVALID_ARGUMENT, "grad_out=", "loom_malloc");
    }
    LOOM_OK(loom_plan_destroy(sp));
  }
  /* freed memory (checked before anything else is allocated) */
  CUDA_OK(cudaMalloc(&freed, (size_t)n * 8));
  CUDA_OK(cudaFree(freed));
  expect_refused(loom_embedding_a2a(plan, tab, (const int64_t *)freed, off, n, NULL, out, st),
                 LOOM_ERR_INVALID_ARGUMENT, "indices=", NULL);
  /* 32-bit bounds: signal counts of a plan, positions of the sorted backward */
  d.global_batch = ((int64_t)1 << 30) / W * W; /* T_total x Bl = 2^31 flags */
  d.slice_samples = 1;
  expect_refused(loom_plan_embedding_a2a(comm, &d, &bad), LOOM_ERR_INVALID_ARGUMENT, "slice ready flags",
                 "exceeds the limit 2147483647");
  CHECK(bad == NULL);
  expect_refused(loom_embedding_a2a_backward(hplan, grad, idx, off, LOOM_EMB_MAX_SORTED_INDICES + 1, NULL, 1.f, tg, st),
                 LOOM_ERR_UNSUPPORTED, "num_indices=4294967296", "at most 4294967295");

  /* the plan works after all that */
  CUDA_OK(cudaMemsetAsync(out, 0xff, out_bytes, st));
  LOOM_OK(loom_embedding_a2a(plan, tab, idx, off, n, NULL, out, st));
  CUDA_OK(cudaStreamSynchronize(st));
  LOOM_OK(loom_comm_get_async_error(comm));
  LOOM_OK(loom_embedding_a2a_check(plan));
  float *h_out = (float *)malloc(out_bytes);
  CUDA_OK(cudaMemcpy(h_out, out, out_bytes, cudaMemcpyDeviceToHost));
  size_t poisoned = 0;
  for (size_t i = 0; i < out_bytes / 4; ++i) poisoned += h_out[i] != h_out[i];
  CHECK_EQ_INT(poisoned, 0);
  free(h_out);

  CUDA_OK(cudaStreamDestroy(st));
  CUDA_OK(cudaFree(tab));
  CUDA_OK(cudaFree(tg));
  CUDA_OK(cudaFree(off));
  CUDA_OK(cudaFree(idx));
  CUDA_OK(cudaFree(w));
  CUDA_OK(cudaFree(big));
  free(h_off);
  free(h_idx);
  free(h_tab);
  free(h_w);
  LOOM_OK(loom_free(comm, out));
  LOOM_OK(loom_free(comm, grad));
  LOOM_OK(loom_plan_destroy(plan));
  LOOM_OK(loom_plan_destroy(wplan));
  LOOM_OK(loom_plan_destroy(hplan));
  LOOM_OK(loom_comm_destroy(comm));
  return loom_test_failures;
}

LOOM_TEST(gpu_embedding_a2a_pointer_and_bound_errors_w1) {
  if (gpus(1)) CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_errors, NULL), 0);
}

LOOM_TEST(gpu_embedding_a2a_pointer_and_bound_errors_w2) {
  if (gpus(2)) CHECK_EQ_INT(loom_launch(2, LAUNCH_TIMEOUT_S, rank_errors, NULL), 0);
}
