/*
 * bench_gemm.c - `loom-bench gemm`: loom's GEMM engine (loom_gemm) against
 * cuBLASLt (best of its heuristic's top candidates, loom__base_gemm_tune),
 * side by side in one process, on one GPU (rank 0).
 *
 * Shapes (issue 3): Flux at TP=2, A [m, 12288] x B [12288, 24576] and
 * A [m, 24576] x B [24576, 12288]; Llama-3-70B at TP=2, [m, 8192] x
 * [8192, 14336] and [m, 14336] x [14336, 8192]; m = 64 .. 8192 (powers of
 * two); 4096^3 and 8192^3. Both B layouts, bf16 in and out, fp32
 * accumulation. --quick: a subset.
 *
 * Per shape and layout: input sets rotated so that L2 never holds the next
 * one (loom_bench_rotation), random never-zero inputs, cuBLASLt tuned, then
 * cuBLASLt and loom (and the sm80 rows) timed side by side (each repetition
 * runs one after the other, so clock and heat changes of the GPU weigh on
 * all alike), medians of --reps event-timed repetitions. Each loom kernel
 * then runs once more on set 0, and that output is checked against the fp64
 * reference on sampled elements (#wrong). The loom row's note carries the ratio cuBLASLt time /
 * loom time and, for m <= 512, the fraction of the measured copy bandwidth
 * that streaming the weight (k n 2 bytes) in loom's time represents.
 * Notes: geometric-mean ratio and minimum over m >= 1024; count of m <= 512
 * shapes meeting ">= 0.95 of cuBLAS or >= 85% of HBM".
 *
 * --sm80 adds a row per shape for the portable sm80 kernel (loom__gemm_sm80,
 * its heuristic's tile width), timed in the same run beside cuBLASLt and
 * loom_gemm (sm90 on an H100/H200); --sm80-widths adds rows for both tile
 * widths forced (128 and 256). Notes: geometric mean and minimum of
 * cuBLASLt/sm80 time over m >= 1024 and over all shapes (issue 3's portable
 * target: >= 0.70).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench.h"
#include "gemm_inputs.h"
#include "core/baseline.h"
#include "core/error.h"
#include "gemm/gemm.h"
#include "gemm/gemm_heuristic.h"
#include "ref/ref.h"

#define GEMM_SEED 0x6a09e667f3bcc909ull

typedef struct gemm_args {
  loom_bench_opts_t o;
  int candidates;
  int only_nk; /* --nk-only */
  int tune;    /* --tune: loom_gemm_tune per shape before timing */
  int sm80;    /* 1: --sm80 (heuristic row), 2: --sm80-widths (also bn 128 and 256 rows) */
} gemm_args_t;

static int gemm_opt(void *ctx, int argc, char **argv, int *i) {
  gemm_args_t *a = (gemm_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --candidates N    cuBLASLt heuristic candidates timed (default 8; --quick 4)\n"
           "  --nk-only         only B [n, k] (PyTorch Linear weight)\n"
           "  --tune            tune loom_gemm per shape (loom_gemm_tune) before timing, as\n"
           "                    cuBLASLt is tuned per shape (best of its candidates)\n"
           "  --sm80            also time the portable sm80 kernel (its heuristic's tile width)\n"
           "  --sm80-widths     also time the sm80 kernel with each tile width forced (128, 256)\n");
    return 1;
  }
  if (!strcmp(s, "--nk-only")) return a->only_nk = 1, 1;
  if (!strcmp(s, "--tune")) return a->tune = 1, 1;
  if (!strcmp(s, "--sm80")) return a->sm80 = a->sm80 > 1 ? a->sm80 : 1, 1;
  if (!strcmp(s, "--sm80-widths")) return a->sm80 = 2, 1;
  if (!strcmp(s, "--candidates") && *i + 1 < argc) {
    a->candidates = atoi(argv[++*i]);
    return a->candidates >= 1 ? 1 : -1;
  }
  (void)argc;
  return 0;
}

typedef struct grun {
  loom_gemm_desc_t d;
  const loom_bench_gemm_inputs_t *in;
  int use_loom; /* 0 cuBLASLt, 1 loom_gemm, 2 the sm80 kernel */
  int bn;       /* sm80: tile width forced (0: heuristic) */
} grun_t;

static loom_result_t grun_op(void *arg, int iter, cudaStream_t s) {
  grun_t *g = (grun_t *)arg;
  const loom_bench_gemm_set_t *x = &g->in->sets[iter % g->in->nsets];
  if (g->use_loom == 2) {
    const loom_gemm_config_t cfg = {g->bn, 0, 0, 0, 0, 0, 0, 0, 0};
    return loom__gemm_sm80(&g->d, x->a, x->b, x->c, NULL, g->bn ? &cfg : NULL, NULL, s);
  }
  return g->use_loom ? loom_gemm(&g->d, x->a, x->b, x->c, NULL, s) : loom__base_gemm(&g->d, x->a, x->b, x->c, NULL, s);
}

typedef struct gsum {
  double logsum, minr;
  int nbig, nsmall, small_ok;
  double hbm_bps;
  /* sm80 heuristic row: cuBLASLt / sm80 time, over m >= 1024 and over all */
  double log80_big, min80_big, log80_all, min80_all;
  int n80_big, n80_all;
} gsum_t;

/* Row labels of the implementations: cuBLASLt, loom_gemm, sm80 heuristic,
 * sm80 bn 128, sm80 bn 256. */
static const char *const gemm_impl_names[5] = {"cublasLt", "loom", "loom-sm80", "sm80-bn128", "sm80-bn256"};

/* One shape, both layouts (or NK only): a loom row and a cuBLASLt row each. */
static int gemm_shape(gemm_args_t *a, cudaStream_t s, loom_bench_table_t *t, gsum_t *sum, int64_t m, int64_t n,
                      int64_t k, const char *label) {
  const size_t bytes_b = (size_t)(k * n) * 2; /* the weight, streamed once at small m */
  loom_gemm_desc_t d0 = LOOM_GEMM_DESC(m, n, k, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
  loom_bench_gemm_inputs_t in;
  int failures = 0;
  loom_result_t r = loom_bench_gemm_inputs_alloc(&in, &d0, (size_t)16 << 30, GEMM_SEED);
  for (int lay = 0; lay < 2 && r == LOOM_SUCCESS; ++lay) {
    if (a->only_nk && lay == 0) continue;
    grun_t g[5]; /* 0 cuBLASLt, 1 loom, 2.. sm80 */
    memset(g, 0, sizeof g);
    double us[5] = {NAN, NAN, NAN, NAN, NAN};
    loom_bench_row_t *rows[5] = {NULL, NULL, NULL, NULL, NULL};
    const int nimpl = a->sm80 == 2 ? 5 : a->sm80 == 1 ? 3 : 2;
    for (int impl = 0; impl < nimpl; ++impl) {
      g[impl].d = d0;
      g[impl].d.b_layout = lay ? LOOM_B_NK : LOOM_B_KN;
      g[impl].in = &in;
      g[impl].use_loom = impl < 2 ? impl : 2;
      g[impl].bn = impl == 3 ? 128 : impl == 4 ? 256 : 0;
      loom_bench_row_t *row = loom_bench_add(t);
      if (!row) {
        r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "table row: host allocation failed");
        break;
      }
      rows[impl] = row;
      snprintf(row->op, sizeof row->op, "gemm");
      snprintf(row->impl, sizeof row->impl, "%s", gemm_impl_names[impl]);
      snprintf(row->shape, sizeof row->shape, "%lldx%lldx%lld %s", (long long)m, (long long)n, (long long)k,
               lay ? "NK" : "KN");
      snprintf(row->dtype, sizeof row->dtype, "bf16");
      row->m = m, row->n = n, row->k = k;
      row->flops = 2.0 * (double)m * (double)n * (double)k;
    }
    if (r != LOOM_SUCCESS) break;
    /* cuBLASLt tuned first, then all timed side by side: each repetition runs
     * cuBLASLt, loom, (sm80 ...) back to back, consecutive runs on different
     * input sets, so clock and heat changes weigh on each alike */
    loom_result_t lr = loom__base_gemm_tune(&g[0].d, in.sets[0].a, in.sets[0].b, in.sets[0].c, NULL, a->candidates,
                                            a->o.quick ? 2 : 5, s, NULL);
    loom_bench_time_t tm[5];
    loom_bench_op_fn ops[5] = {grun_op, grun_op, grun_op, grun_op, grun_op};
    void *args[5] = {&g[0], &g[1], &g[2], &g[3], &g[4]};
    if (lr == LOOM_SUCCESS && a->tune) lr = loom_gemm_tune(&g[1].d, in.sets[0].a, in.sets[0].b, in.sets[0].c, NULL, s);
    if (lr == LOOM_SUCCESS) lr = loom_bench_time_side_by_side(s, a->o.warmup, a->o.reps, nimpl, ops, args, tm);
    if (lr != LOOM_SUCCESS) {
      fprintf(stderr, "loom-bench gemm: %s: %s\n", rows[1]->shape, loom_last_error());
      for (int impl = 0; impl < nimpl; ++impl)
        snprintf(rows[impl]->note, sizeof rows[impl]->note, "error: %s", loom_result_string(lr));
      failures++;
      if (cudaStreamSynchronize(s) != cudaSuccess) r = LOOM_ERR_CUDA;
    } else {
      for (int impl = 0; impl < nimpl; ++impl) {
        us[impl] = tm[impl].median_us;
        rows[impl]->gemm_us = tm[impl].median_us, rows[impl]->min_us = tm[impl].min_us;
        rows[impl]->max_us = tm[impl].max_us;
        /* each loom kernel's output: one more run on set 0, checked */
        if (a->o.check && impl) {
          loom_result_t cr = grun_op(&g[impl], 0, s);
          if (cr == LOOM_SUCCESS && cudaStreamSynchronize(s) != cudaSuccess) cr = LOOM_ERR_CUDA;
          rows[impl]->wrong = cr == LOOM_SUCCESS ? loom_bench_gemm_check(&in, &g[impl].d, 0, a->o.quick ? 16 : 48) : -1;
          if (rows[impl]->wrong != 0) failures++;
        }
      }
    }
    if (rows[0] && rows[1] && !isnan(us[0]) && !isnan(us[1])) {
      const double ratio = us[0] / us[1];
      const double frac = (double)bytes_b / (us[1] * 1e-6) / sum->hbm_bps;
      /* the configuration loom_gemm took (sm90 path): tuned or the heuristic's */
      char cfg[96] = "";
      int tuned = 0;
      loom__gemm_device_t dv;
      if (loom__gemm_device(&dv) == LOOM_SUCCESS) {
        loom_gemm_config_t h;
        if (loom__gemm_tuned_config(&g[1].d, "sm90", dv.sms, &h, &tuned) != LOOM_SUCCESS || !tuned)
          h = loom__gemm_choose(&g[1].d, &dv, 1);
        char v[80];
        loom__gemm_config_format(&h, v, sizeof v);
        snprintf(cfg, sizeof cfg, ", %s %s", tuned ? "tuned" : "heuristic", v);
      }
      if (m <= 512)
        snprintf(rows[1]->note, sizeof rows[1]->note, "%s%sx%.3f of cuBLASLt, HBM %.0f%%%s", label, *label ? ", " : "",
                 ratio, 100 * frac, cfg);
      else
        snprintf(rows[1]->note, sizeof rows[1]->note, "%s%sx%.3f of cuBLASLt%s", label, *label ? ", " : "", ratio, cfg);
      snprintf(rows[0]->note, sizeof rows[0]->note, "%s%s%d sets", label, *label ? ", " : "", in.nsets);
      if (m >= 1024) {
        sum->logsum += log(ratio), sum->nbig++;
        if (ratio < sum->minr) sum->minr = ratio;
      } else if (m <= 512) {
        sum->nsmall++;
        sum->small_ok += ratio >= 0.95 || frac >= 0.85;
      }
    }
    for (int impl = 2; impl < nimpl; ++impl) {
      if (!rows[0] || !rows[impl] || isnan(us[0]) || isnan(us[impl])) continue;
      const double ratio = us[0] / us[impl];
      char cfg[24] = "";
      loom__gemm_device_t dv;
      if (impl == 2 && loom__gemm_device(&dv) == LOOM_SUCCESS) {
        const loom_gemm_config_t h = loom__gemm_sm80_heuristic(&g[2].d, &dv);
        if (h.sk_splits > 1) snprintf(cfg, sizeof cfg, ", bn%d split%d", h.bn, h.sk_splits);
        else snprintf(cfg, sizeof cfg, ", bn%d", h.bn);
      }
      snprintf(rows[impl]->note, sizeof rows[impl]->note, "%s%sx%.3f of cuBLASLt%s", label, *label ? ", " : "",
               ratio, cfg);
      if (impl == 2) {
        sum->log80_all += log(ratio), sum->n80_all++;
        if (ratio < sum->min80_all) sum->min80_all = ratio;
        if (m >= 1024) {
          sum->log80_big += log(ratio), sum->n80_big++;
          if (ratio < sum->min80_big) sum->min80_big = ratio;
        }
      }
    }
    for (int impl = 0; impl < nimpl; ++impl)
      if (rows[impl]) loom_bench_row_finish(rows[impl]);
    printf("# gemm %-24s cuBLASLt %9.1f us  loom %9.1f us  ratio %.3f", rows[1] ? rows[1]->shape : "?", us[0],
           us[1], us[0] / us[1]);
    for (int impl = 2; impl < nimpl; ++impl)
      printf("  %s %9.1f us (%.3f)", gemm_impl_names[impl], us[impl], us[0] / us[impl]);
    printf("\n");
    fflush(stdout);
  }
  if (r != LOOM_SUCCESS) {
    fprintf(stderr, "loom-bench gemm: %lldx%lldx%lld: %s\n", (long long)m, (long long)n, (long long)k,
            loom_last_error());
    failures++;
  }
  loom_bench_gemm_inputs_free(&in);
  return failures;
}

/* Device-to-device copy bandwidth (bytes read + written per second). */
static double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = (size_t)256 << 20;
  void *x = NULL, *y = NULL;
  double bps = 4.0e12; /* fallback: about an H200's */
  cudaEvent_t e0, e1;
  if (cudaMalloc(&x, bytes) != cudaSuccess || cudaMalloc(&y, bytes) != cudaSuccess) goto out;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto out;
  float best = 1e30f;
  for (int i = 0; i < 8; ++i) {
    float ms = 0;
    cudaEventRecord(e0, s);
    cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s);
    cudaEventRecord(e1, s);
    if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && i > 0 &&
        ms < best)
      best = ms;
  }
  if (best < 1e29f) bps = 2.0 * (double)bytes / (best * 1e-3);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
out:
  cudaFree(x);
  cudaFree(y);
  (void)cudaGetLastError();
  return bps;
}

static int gemm_rank(loom_rank_ctx_t *ctx, void *arg) {
  gemm_args_t *a = (gemm_args_t *)arg;
  if (ctx->rank != 0) return 0;
  cudaStream_t s = NULL;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "loom-bench gemm: cudaStreamCreate failed\n");
    return 1;
  }
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  gsum_t sum;
  memset(&sum, 0, sizeof sum);
  sum.minr = 1e9;
  sum.min80_big = sum.min80_all = 1e9;
  sum.hbm_bps = copy_bandwidth(s);
  int dev = 0;
  struct cudaDeviceProp p;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    printf("# loom-bench gemm: %s (%d SMs, compute capability %d.%d), copy bandwidth %.0f GB/s\n", p.name,
           p.multiProcessorCount, p.major, p.minor, sum.hbm_bps / 1e9);
  struct { int64_t n, k; const char *label; } fam[] = {
      {24576, 12288, "Flux AG+GEMM TP=2"}, {12288, 24576, "Flux GEMM+RS TP=2"},
      {14336, 8192, "Llama-3-70B up TP=2"}, {8192, 14336, "Llama-3-70B down TP=2"}};
  const int64_t ms_all[] = {64, 128, 256, 512, 1024, 2048, 4096, 8192};
  const int64_t ms_quick[] = {64, 512, 4096};
  int failures = 0;
  for (int f = 0; f < 4; ++f) {
    const int64_t *ms = a->o.quick ? ms_quick : ms_all;
    const int nm = a->o.quick ? 3 : 8;
    for (int i = 0; i < nm; ++i) failures += gemm_shape(a, s, &t, &sum, ms[i], fam[f].n, fam[f].k, fam[f].label);
  }
  failures += gemm_shape(a, s, &t, &sum, 4096, 4096, 4096, "");
  if (!a->o.quick) failures += gemm_shape(a, s, &t, &sum, 8192, 8192, 8192, "");
  if (sum.nbig)
    loom_bench_note(&t, "m >= 1024: geometric mean of cuBLASLt/loom time %.3f, minimum %.3f, over %d GEMMs (target >= 1.00, none < 0.95)",
                    exp(sum.logsum / sum.nbig), sum.minr, sum.nbig);
  if (sum.nsmall)
    loom_bench_note(&t, "m <= 512: %d of %d GEMMs at >= 0.95 of cuBLASLt or >= 85%% of the copy bandwidth (%.0f GB/s) on the weight",
                    sum.small_ok, sum.nsmall, sum.hbm_bps / 1e9);
  if (sum.n80_all)
    loom_bench_note(&t, "sm80 kernel (heuristic width): geometric mean of cuBLASLt/sm80 time %.3f (min %.3f) over %d GEMMs with m >= 1024, %.3f (min %.3f) over all %d (target >= 0.70)",
                    sum.n80_big ? exp(sum.log80_big / sum.n80_big) : NAN, sum.n80_big ? sum.min80_big : NAN,
                    sum.n80_big, exp(sum.log80_all / sum.n80_all), sum.min80_all, sum.n80_all);
  loom_bench_note(&t, "cuBLASLt: best of %d heuristic candidates; loom: loom_gemm (sm90 kernel on compute capability 9.0)%s%s",
                  a->candidates, a->tune ? ", tuned per shape by loom_gemm_tune" : ", heuristic configuration",
                  a->sm80 ? "; loom-sm80/sm80-bn*: the portable sm80 kernel (loom__gemm_sm80)" : "");
  char title[160];
  snprintf(title, sizeof title, "loom-bench gemm: loom vs cuBLASLt, bf16, median of %d reps", a->o.reps);
  if (a->o.json) {
    char path[1200];
    if (loom_bench_write_json("gemm", &t, &a->o, 1, path, sizeof path) == 0) loom_bench_note(&t, "JSON: %s", path);
    else failures++;
  }
  loom_bench_print(stdout, &t, title);
  if (failures) printf("# %d failure(s): see the messages above, the #wrong and note columns\n", failures);
  loom_bench_table_free(&t);
  loom__base_gemm_release();
  loom__gemm_release();
  cudaStreamDestroy(s);
  return failures ? 1 : 0;
}

LOOM_BENCH(gemm, "loom's GEMM engine vs cuBLASLt (Flux, Llama-3-70B at TP=2, squares; both B layouts)") {
  gemm_args_t a;
  memset(&a, 0, sizeof a);
  int rc = loom_bench_parse(&a.o, argc, argv, gemm_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (!a.candidates) a.candidates = a.o.quick ? 4 : 8;
  if (loom_bench_world(&a.o, 1) == 0) return 1;
  return loom_bench_launch(&a.o, 1, gemm_rank, &a) ? 1 : 0;
}
