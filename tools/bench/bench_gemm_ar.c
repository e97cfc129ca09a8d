/*
 * bench_gemm_ar.c - loom-bench gemm_ar: GEMM + AllReduce with the pointwise
 * epilogue y = dropout(AR(x W) + b) + r (CoCoNet 5.4, p = 0.1, fp16) against
 * its baselines, side by side in one run on every rank (each repetition runs
 * every variant back to back; the time of a repetition is that of the
 * slowest rank):
 *   loom-sm     loom_gemm_ar, fused (LOOM_TP_SM_COPY)
 *   loom-auto   loom_gemm_ar, the plan's own choice (tuned with --tune); the
 *               row names the transfer it resolved to (loom_tp_plan_info),
 *               "loom-auto:sequential" or "loom-auto:sm-copy", its time auto(us)
 *   loom-seq    loom_gemm_ar, sequential: loom_gemm + loom_allreduce with
 *               the epilogue
 *   seq         the baseline: cuBLASLt (best of its heuristic's candidates)
 *               + NCCL all-reduce + one pointwise kernel (the same mask:
 *               src/testing/bench_pointwise.cu)
 *   gemm        cuBLASLt and loom_gemm on the local shape (the row's GEMM
 *               time is the better of the two)
 *   nccl        ncclAllReduce of the [m, n] fp16 output alone
 * One row per loom variant; its seq column is the baseline, ECT and overlap
 * as bench.h derives them. #wrong: the row's output against loom-seq's
 * (tolerance 2^-6 (|y| + rms y): partials rounded to fp16 differ by an ulp
 * between GEMM kernels; a lost partial or a wrong mask is far beyond it).
 * Shapes: CoCoNet's model-parallel GPT-2 setting, H = 3072, S = 1024,
 * B = 8 and 16 (m = B S), weights split T ways (--tp, default W): Megatron's
 * row-parallel second MLP GEMM [m, 4H/T] x [4H/T, H] and attention output
 * GEMM [m, H/T] x [H/T, H]. --list prints them without a GPU. The PyTorch
 * peer (bench/peers/gemm_ar_torch.py: matmul + dist.all_reduce + dropout +
 * residual) runs at W >= 2 before the ranks start, on this run's exact
 * shapes (--shapes layer:B:m:n:k); its time pairs with the loom-seq row of
 * the same complete shape (op, layer, B, m, n, k, world, dtype, epilogue).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "ref/ref.h"

#define AR_SEED 0x67656d61ull
#define AR_H 3072
#define AR_S 1024
#define AR_P 0.1f

typedef struct ar_args {
  loom_bench_opts_t o;
  int layer;            /* -1 both, 0 mlp, 1 attn */
  int batch;            /* 0: 8 and 16 (--quick: 8) */
  int tp;               /* 0: the world size */
  int blocks;           /* desc.comm_blocks of the fused plan (0: the plan's) */
  int peer, tune, list;
  char peer_json[1200];
  char peer_note[200];
} ar_args_t;

static const char *g_layer_name[2] = {"mlp-fc2", "attn-out"};
static const char *g_layer_peer[2] = {"mlp", "attn"}; /* the layer as gemm_ar_torch.py names it */
#define AR_EPILOGUE "dropout(x+bias,p=0.1)+residual"   /* gemm_ar_torch.py's EPILOGUE: AR_P and the terms */
static const int64_t g_layer_k[2] = {4 * AR_H, AR_H}; /* the layer's full K */

static int ar_opt(void *ctx, int argc, char **argv, int *i) {
  ar_args_t *a = (ar_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --layer mlp|attn     one layer's GEMM only (default both)\n"
           "  --batch B            one batch size only (default 8 and 16; --quick: 8)\n"
           "  --tp T               split the weights T ways (default: the world size)\n"
           "  --blocks N           desc.comm_blocks of the fused plan (default: the plan's)\n"
           "  --peer none          skip the PyTorch peer (bench/peers/gemm_ar_torch.py, run by default on this\n"
           "                       run's exact shapes; peer(us) on the loom-seq row of the same complete shape)\n"
           "  --tune               loom_gemm_ar_tune each shape first (the loom-auto row takes its choice)\n"
           "  --list               print the shapes, their FLOPs and bytes, then exit (no GPU needed)\n");
    return 1;
  }
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(s, "--list")) return a->list = 1, 1;
  if (!strcmp(s, "--tune")) return a->tune = 1, 1;
  if (!strcmp(s, "--layer")) {
    if (!v || (strcmp(v, "mlp") && strcmp(v, "attn"))) {
      fprintf(stderr, "loom-bench: --layer needs mlp or attn, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->layer = strcmp(v, "mlp") ? 1 : 0;
    *i += 1;
    return 1;
  }
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--batch") || !strcmp(s, "--tp") || !strcmp(s, "--blocks")) {
    char *end = NULL;
    const long long x = v ? strtoll(v, &end, 10) : -1;
    const long long lo = strcmp(s, "--blocks") ? 1 : 0, hi = !strcmp(s, "--tp") ? 64 : 1024;
    if (!v || !end || *end || x < lo || x > hi) {
      fprintf(stderr, "loom-bench: %s needs an integer in %lld..%lld, got \"%s\"\n", s, lo, hi, v ? v : "(nothing)");
      return -1;
    }
    if (!strcmp(s, "--batch")) a->batch = (int)x;
    else if (!strcmp(s, "--tp")) a->tp = (int)x;
    else a->blocks = (int)x;
    *i += 1;
    return 1;
  }
  return 0;
}

/* The shapes of the selection: (layer, B) pairs; returns the count. */
static int ar_shapes(const ar_args_t *a, int layer[4], int batch[4]) {
  static const int bs[2] = {8, 16};
  int c = 0;
  for (int l = 0; l < 2; ++l) {
    if (a->layer >= 0 && a->layer != l) continue;
    for (int i = 0; i < 2; ++i) {
      const int B = a->batch ? a->batch : bs[i];
      if ((a->batch || a->o.quick) && i > 0) break;
      layer[c] = l, batch[c] = B, ++c;
    }
  }
  return c;
}

enum { V_FUSED, V_AUTO, V_LSEQ, V_BASE, V_GEMM_LT, V_GEMM_LOOM, V_NCCL, NV };
#define NLOOM 3 /* rows: V_FUSED, V_AUTO, V_LSEQ */

typedef struct ar_run {
  ncclComm_t nccl;
  loom_gemm_desc_t d;
  void *a, *b, *bias, *res, *out_sym, *out_seq, *part, *out_base, *ar_buf;
  loom_plan_t plans[NLOOM];
  loom_epilogue_t epi;
  loom_bench_pointwise_t pw;
} ar_run_t;

typedef struct ar_var {
  ar_run_t *r;
  int v;
} ar_var_t;

static loom_result_t ar_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  const ar_var_t *x = (const ar_var_t *)arg;
  ar_run_t *r = x->r;
  const size_t mn = (size_t)r->d.m * (size_t)r->d.n;
  switch (x->v) {
    case V_FUSED:
    case V_AUTO: return loom_gemm_ar(r->plans[x->v], r->a, r->b, r->out_sym, &r->epi, s);
    case V_LSEQ: return loom_gemm_ar(r->plans[V_LSEQ], r->a, r->b, r->out_seq, &r->epi, s);
    case V_BASE: {
      LOOM_BENCH_TRY(loom_bench_base_gemm(&r->d, r->a, r->b, r->part, NULL, s));
      LOOM_BENCH_TRY(loom_bench_base_allreduce(r->nccl, r->part, r->part, mn, LOOM_FP16, s));
      return loom_bench_pointwise_run(&r->pw, r->part, r->out_base, (int64_t)mn, s);
    }
    case V_GEMM_LT: return loom_bench_base_gemm(&r->d, r->a, r->b, r->part, NULL, s);
    case V_GEMM_LOOM: return loom_gemm(&r->d, r->a, r->b, r->part, NULL, s);
    default: return loom_bench_base_allreduce(r->nccl, r->ar_buf, r->ar_buf, mn, LOOM_FP16, s);
  }
}

static const char *tr_name(loom_tp_transfer_t t) {
  return t == LOOM_TP_SM_COPY ? "fused" : t == LOOM_TP_SEQUENTIAL ? "sequential" : "?";
}

/* Elements of x farther from y than tol x (|y| + rms(y)) (fp16). */
static int64_t count_far(const void *x, const void *y, size_t n, double tol) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) {
    const double v = loom_ref_load(LOOM_FP16, y, i);
    ss += v * v;
  }
  const double rms = n ? sqrt(ss / (double)n) : 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const double fx = loom_ref_load(LOOM_FP16, x, i), fy = loom_ref_load(LOOM_FP16, y, i);
    if (!(fabs(fx - fy) <= tol * (fabs(fy) + rms))) ++bad;
  }
  return bad;
}

/* The complete shape of a row, as gemm_ar_torch.py names its rows'. */
static void ar_pair_shape(int layer, int B, int64_t m, int64_t n, int64_t k, int W, loom_bench_shape_t *s) {
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", "gemm_ar");
  loom_bench_shape_str(s, "layer", g_layer_peer[layer]);
  loom_bench_shape_int(s, "B", B);
  loom_bench_shape_int(s, "m", m);
  loom_bench_shape_int(s, "n", n);
  loom_bench_shape_int(s, "k", k);
  loom_bench_shape_int(s, "world", W);
  loom_bench_shape_str(s, "dtype", "fp16");
  loom_bench_shape_str(s, "epilogue", AR_EPILOGUE);
}

static int ar_shape(ar_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, loom_bench_table_t *t,
                    int layer, int B) {
  const int W = ctx->size, T = a->tp > 0 ? a->tp : W;
  const int64_t m = (int64_t)B * AR_S, n = AR_H, k = g_layer_k[layer] / T;
  ar_run_t r;
  memset(&r, 0, sizeof r);
  r.nccl = ctx->nccl;
  r.d = (loom_gemm_desc_t)LOOM_GEMM_DESC(m, n, k, LOOM_FP16, LOOM_FP16, LOOM_B_KN, 0);
  const size_t mn = (size_t)m * (size_t)n, es = 2;
  int failures = 0;
  loom_result_t rr = LOOM_SUCCESS;
  /* out_sym: loom_malloc (collective; peers store into it) */
  rr = loom_malloc(comm, mn * es, &r.out_sym);
  cudaError_t e = cudaMalloc(&r.a, (size_t)m * (size_t)k * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.b, (size_t)k * (size_t)n * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.bias, (size_t)n * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.res, mn * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.out_seq, mn * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.part, mn * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.out_base, mn * es);
  if (e == cudaSuccess) e = cudaMalloc(&r.ar_buf, mn * es);
  if (e != cudaSuccess && rr == LOOM_SUCCESS)
    rr = loom_bench_cuda_fail((int)e, "cudaMalloc (bench buffers)", __FILE__, __LINE__);
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.a, LOOM_FP16, (size_t)m * (size_t)k, AR_SEED + (uint64_t)ctx->rank, 1.0);
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.b, LOOM_FP16, (size_t)k * (size_t)n, AR_SEED + 100 + (uint64_t)ctx->rank, 1.0);
  /* bias and residual: the same on every rank */
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.bias, LOOM_FP16, (size_t)n, AR_SEED + 200, 1.0);
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.res, LOOM_FP16, mn, AR_SEED + 300, 1.0);
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.ar_buf, LOOM_FP16, mn, AR_SEED + 400, 1e-3);
  r.epi = (loom_epilogue_t)LOOM_EPILOGUE_INIT;
  r.epi.bias = r.bias, r.epi.residual = r.res;
  r.epi.dropout_p = AR_P, r.epi.dropout_seed = AR_SEED;
  if (rr == LOOM_SUCCESS) rr = loom_bench_pointwise_make(&r.epi, LOOM_FP16, n, &r.pw);
  /* plans are collective: every rank makes every plan whatever happened */
  const loom_tp_transfer_t tr[NLOOM] = {LOOM_TP_SM_COPY, LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL};
  loom_tp_plan_info_t info[NLOOM];
  for (int f = 0; f < NLOOM; ++f) {
    loom_tp_desc_t desc = LOOM_TP_DESC_INIT;
    desc.m = m, desc.n = n, desc.k = k, desc.ab_type = LOOM_FP16, desc.c_type = LOOM_FP16;
    desc.b_layout = LOOM_B_KN, desc.world_size = W, desc.transfer = tr[f];
    if (tr[f] == LOOM_TP_SM_COPY) desc.comm_blocks = a->blocks;
    if (tr[f] == LOOM_TP_AUTO && a->tune) {
      const loom_result_t tu = loom_gemm_ar_tune(comm, &desc, s);
      if (rr == LOOM_SUCCESS) rr = tu;
    }
    loom_result_t pr = loom_plan_gemm_ar(comm, &desc, &r.plans[f]);
    info[f] = (loom_tp_plan_info_t)LOOM_TP_PLAN_INFO_INIT;
    if (pr == LOOM_SUCCESS) pr = loom_tp_plan_info(r.plans[f], &info[f]);
    if (rr == LOOM_SUCCESS) rr = pr;
  }
  if (rr == LOOM_SUCCESS) {
    float ms = 0;
    rr = loom_bench_base_gemm_tune(&r.d, r.a, r.b, r.part, NULL, a->o.quick ? 4 : 8, s, &ms);
  }
  int64_t failed = rr != LOOM_SUCCESS;
  if (failed) fprintf(stderr, "rank %d: %s B=%d: %s\n", ctx->rank, g_layer_name[layer], B, loom_last_error());
  if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
  loom_bench_time_t tm[NV];
  ar_var_t vars[NV];
  loom_bench_op_fn ops[NV];
  void *args[NV];
  int64_t wrong[NLOOM + 1] = {-1, -1, -1, -1}; /* the loom rows, then the baseline */
  if (!failed) {
    for (int v = 0; v < NV; ++v) vars[v].r = &r, vars[v].v = v, ops[v] = ar_op, args[v] = &vars[v];
    rr = loom_bench_time_ranks_side_by_side(ctx->nccl, s, a->o.warmup, a->o.reps, NV, ops, args, tm);
    /* check: every output against loom-seq's (each poisoned first) */
    if (rr == LOOM_SUCCESS && a->o.check) {
      uint16_t *ref = (uint16_t *)malloc(mn * es), *got = (uint16_t *)malloc(mn * es);
      ar_var_t sv = {&r, V_LSEQ};
      if (cudaMemsetAsync(r.out_seq, 0xff, mn * es, s) != cudaSuccess) rr = loom_bench_fail(LOOM_ERR_CUDA, "poison");
      if (rr == LOOM_SUCCESS) rr = ar_op(&sv, 0, s);
      if (rr == LOOM_SUCCESS && cudaMemcpyAsync(ref, r.out_seq, mn * es, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        rr = loom_bench_fail(LOOM_ERR_CUDA, "check copy");
      const int checked[NLOOM + 1] = {V_FUSED, V_AUTO, V_LSEQ, V_BASE};
      for (int f = 0; f < NLOOM + 1 && rr == LOOM_SUCCESS; ++f) {
        const int v = checked[f];
        void *out = v == V_LSEQ ? r.out_seq : v == V_BASE ? r.out_base : r.out_sym;
        if (cudaMemsetAsync(out, 0xff, mn * es, s) != cudaSuccess) rr = loom_bench_fail(LOOM_ERR_CUDA, "poison");
        ar_var_t fv = {&r, v};
        if (rr == LOOM_SUCCESS) rr = ar_op(&fv, 0, s);
        if (rr == LOOM_SUCCESS && cudaMemcpyAsync(got, out, mn * es, cudaMemcpyDeviceToHost, s) != cudaSuccess)
          rr = loom_bench_fail(LOOM_ERR_CUDA, "check copy");
        if (rr == LOOM_SUCCESS && cudaStreamSynchronize(s) != cudaSuccess) rr = loom_bench_fail(LOOM_ERR_CUDA, "sync");
        if (rr == LOOM_SUCCESS) rr = loom_comm_get_async_error(comm);
        if (rr == LOOM_SUCCESS) wrong[f] = count_far(got, ref, mn, 1.0 / 64);
      }
      free(ref), free(got);
    }
    failed = rr != LOOM_SUCCESS;
    if (failed) fprintf(stderr, "rank %d: %s B=%d: %s\n", ctx->rank, g_layer_name[layer], B, loom_last_error());
    if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
    for (int f = 0; f < NLOOM + 1 && !failed; ++f)
      if (loom_bench_sum_ranks(ctx->nccl, s, &wrong[f]) != LOOM_SUCCESS) failed = 1;
  }
  if (ctx->rank == 0) {
    static const char *impl[NLOOM] = {"loom-sm", "loom-auto", "loom-seq"};
    for (int f = 0; f < NLOOM; ++f) {
      loom_bench_row_t *row = loom_bench_add(t);
      if (!row) break;
      snprintf(row->op, sizeof row->op, "gemm_ar");
      snprintf(row->impl, sizeof row->impl, "%s", f == V_AUTO && a->tune ? "loom-tuned" : impl[f]);
      snprintf(row->shape, sizeof row->shape, "%s tp%d B=%d m=%lld", g_layer_name[layer], T, B, (long long)m);
      snprintf(row->dtype, sizeof row->dtype, "fp16");
      row->m = m, row->n = n, row->k = k, row->world = W;
      row->bytes = (int64_t)(mn * es);
      row->flops = 2.0 * (double)m * (double)n * (double)k;
      row->busbw_factor = 2.0 * (double)(W - 1) / W;
      if (failed) {
        snprintf(row->note, sizeof row->note, "error (see stderr)");
        failures++;
        continue;
      }
      const double t_us = tm[f].median_us;
      if (f == V_AUTO) { /* what ran, from the plan: its time is no fused time where it was sequential */
        row->auto_us = t_us;
        loom_bench_row_auto(row, loom_bench_tp_path(info[f].transfer));
      } else {
        row->fused_us = t_us;
      }
      row->min_us = tm[f].min_us, row->max_us = tm[f].max_us;
      row->gemm_us = fmin(tm[V_GEMM_LT].median_us, tm[V_GEMM_LOOM].median_us);
      row->comm_us = tm[V_NCCL].median_us;
      row->seq_us = tm[V_BASE].median_us;
      row->wrong = wrong[f];
      if (f == V_LSEQ) {
        loom_bench_shape_t ps;
        ar_pair_shape(layer, B, m, n, k, W, &ps);
        (void)loom_bench_row_pair(row, a->peer_json, "torch", &ps, 0);
      }
      if (row->wrong > 0) failures++;
      snprintf(row->note, sizeof row->note,
               "%s; lt %.1f loom-gemm %.1f; base #wrong %lld; blk %d %dx%d g%d; sym %.1f MiB",
               tr_name(info[f].transfer), tm[V_GEMM_LT].median_us, tm[V_GEMM_LOOM].median_us,
               (long long)wrong[NLOOM], info[f].comm_blocks, info[f].gemm_bm, info[f].gemm_bn, info[f].gemm_grid,
               (double)info[f].symmetric_bytes / 1048576.0);
      loom_bench_row_finish(row);
      printf("# gemm_ar %-10s %-28s loom %9.1f  base %9.1f  gemm %9.1f  nccl %8.1f us  overlap %6.2f  speedup %5.2f\n",
             row->impl, row->shape, t_us, row->seq_us, row->gemm_us, row->comm_us, row->overlap, row->seq_us / t_us);
      fflush(stdout);
    }
  }
  for (int f = 0; f < NLOOM; ++f)
    if (r.plans[f]) (void)loom_plan_destroy(r.plans[f]);
  if (r.out_sym) (void)loom_free(comm, r.out_sym);
  cudaFree(r.a), cudaFree(r.b), cudaFree(r.bias), cudaFree(r.res), cudaFree(r.out_seq), cudaFree(r.part);
  cudaFree(r.out_base), cudaFree(r.ar_buf);
  loom_bench_base_gemm_release();
  return failures;
}

static int ar_rank(loom_rank_ctx_t *ctx, void *arg) {
  ar_args_t *a = (ar_args_t *)arg;
  cudaStream_t s = NULL;
  loom_comm_t comm = NULL;
  if (loom_bench_rank_open(ctx, &s, &comm)) return 1;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  int failures = 0, layer[4], batch[4];
  const int ns = ar_shapes(a, layer, batch);
  for (int i = 0; i < ns; ++i) failures += ar_shape(a, ctx, comm, s, &t, layer[i], batch[i]);
  if (ctx->rank == 0) {
    loom_bench_note(&t, "y = dropout(AR(x W) + b, p=0.1) + r, fp16, B [k, n]; seq = cuBLASLt + NCCL all-reduce + one "
                        "pointwise kernel; gemm = min(cuBLASLt, loom_gemm); time = median of the slowest rank");
    loom_bench_note(&t, "overlap = 1 - ECT(loom)/ECT(seq), ECT = time - gemm; #wrong: the row's output vs loom-seq's "
                        "(base #wrong in the note: the baseline's)");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us) on the loom-seq rows of the same shape: PyTorch matmul + all_reduce + dropout "
                          "(bench/peers/gemm_ar_torch.py): %.70s", a->peer_json);
    else
      loom_bench_note(&t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
    char title[160];
    snprintf(title, sizeof title, "loom-bench gemm_ar: fused vs cuBLASLt + NCCL + pointwise, world %d, median of %d reps",
             ctx->size, a->o.reps);
    failures = loom_bench_finish("gemm_ar", &t, &a->o, ctx->size, title, failures);
  }
  loom_bench_table_free(&t);
  loom_bench_rank_close(s, comm);
  return failures ? 1 : 0;
}

/* --list: the shapes with their floors, no GPU. */
static int ar_list(const ar_args_t *a, int T) {
  int layer[4], batch[4];
  const int ns = ar_shapes(a, layer, batch);
  printf("loom-bench gemm_ar: y = dropout(AR(x W) + b, p=0.1) + r, fp16, weights split %d ways%s\n", T,
         a->tp ? "" : " (--tp, default: the world size; 2 shown)");
  printf("variants: loom-sm (fused), loom-auto, loom-seq (loom_gemm + loom_allreduce), seq (cuBLASLt + NCCL + "
         "pointwise), gemm (cuBLASLt, loom_gemm), nccl (all-reduce alone)\n");
  printf("%-10s %3s %6s %5s %6s %10s %12s %12s\n", "layer", "B", "m", "n", "k", "GFLOP", "AR MiB", "HBM MiB");
  for (int i = 0; i < ns; ++i) {
    const int64_t m = (int64_t)batch[i] * AR_S, n = AR_H, k = g_layer_k[layer[i]] / T;
    const double flops = 2.0 * (double)m * (double)n * (double)k, out = (double)m * (double)n * 2;
    /* per rank: A and B read, the partial written, the residual read, out written (the fused path's
     * floor; the sequential one reads and writes the [m, n] output twice more) */
    const double hbm = ((double)m * (double)k + (double)k * (double)n) * 2 + 3 * out;
    printf("%-10s %3d %6lld %5lld %6lld %10.1f %12.1f %12.1f\n", g_layer_name[layer[i]], batch[i], (long long)m,
           (long long)n, (long long)k, flops / 1e9, out / 1048576.0, hbm / 1048576.0);
  }
  return 0;
}

/* Runs gemm_ar_torch.py on this run's exact shapes (from the parent, before the ranks). */
static void ar_peer(ar_args_t *a, int world, int T) {
  if (!a->peer || world < 2) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (%s)", a->peer ? "one rank" : "--peer none");
    return;
  }
  char args[512];
  int layer[4], batch[4];
  const int ns = ar_shapes(a, layer, batch);
  snprintf(args, sizeof args, "--world %d --reps %d --warmup %d --shapes ", world, a->o.reps, a->o.warmup);
  for (int i = 0; i < ns; ++i) /* 4 shapes: fits */
    (void)loom_bench_appendf(args, sizeof args, "%s%s:%d:%lld:%d:%lld", i ? "," : "", g_layer_peer[layer[i]], batch[i],
                             (long long)batch[i] * AR_S, AR_H, (long long)(g_layer_k[layer[i]] / T));
  (void)loom_bench_run_peer("gemm_ar_torch.py", args, "gemm_ar_torch", a->peer_json, sizeof a->peer_json,
                            a->peer_note, sizeof a->peer_note);
}

LOOM_BENCH(gemm_ar, "GEMM + AllReduce + dropout/bias/residual (CoCoNet 5.4): fused vs cuBLASLt + NCCL + pointwise") {
  ar_args_t a;
  memset(&a, 0, sizeof a);
  a.layer = -1;
  a.peer = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, ar_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (a.list) return ar_list(&a, a.tp ? a.tp : 2);
  int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  const int T = a.tp ? a.tp : world;
  for (int l = 0; l < 2; ++l)
    if ((a.layer < 0 || a.layer == l) && (g_layer_k[l] % T != 0 || (g_layer_k[l] / T) % 8 != 0)) {
      fprintf(stderr, "loom-bench gemm_ar: K=%lld of %s does not split %d ways into multiples of 8\n",
              (long long)g_layer_k[l], g_layer_name[l], T);
      return 2;
    }
  ar_peer(&a, world, T);
  return loom_bench_launch(&a.o, world, ar_rank, &a) ? 1 : 0;
}
