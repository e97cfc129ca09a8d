/*
 * test_gemm_grouped.c - GPU tests of the grouped GEMM (loom_gemm_grouped,
 * gemm_grouped_sm90.cu), one GPU with loom's sm90 kernel (skipped
 * elsewhere; elsewhere the call must say LOOM_ERR_UNSUPPORTED).
 *
 * A case: G groups with row counts drawn from a pattern (empty groups, one
 * row, bm - 1, bm, bm + 1, random, all rows in one group, a first offset
 * above 0), fresh random A, B [G, ...] and bias, C poisoned with 0xFF bytes
 * (NaN in every dtype) and guarded by poisoned rows past max_rows. Checked:
 * every element of rows [off[0], off[G]) against an fp64 reference of its
 * group's GEMM (bound of test_gemm.c: (eps_out + eps_acc(k)) |ref| + 1e-5
 * sqrt(k)), every other row and the guard still poison. Also: each of the
 * four tiles forced, both B layouts, bf16 / fp16 in, bf16 / fp16 / fp32
 * out; a graph captured once and replayed after the offsets changed on the
 * device (the counts are read by the kernel); a malformed table (decreasing,
 * past max_rows) runs without touching the guard; 256 groups; the SwiGLU
 * epilogue (loom_moe_mlp's gate/up GEMM: C [rows, n/2] = silu(A Bgate^T) x
 * (A Bup^T)) at both tile heights against fp64, bound (1/128) |ref| +
 * 1e-3 sqrt(k) (|silu(g)| + |u|).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "tests/common/test.h"
#include "tests/gpu/gemm/gemm_cases.h"
#include "gemm/gemm.h"
#include "ref/ref.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)
#define GUARD_ROWS 64

typedef struct grouped_case {
  loom_grouped_gemm_desc_t d;
  int64_t *off;              /* host [G + 1] */
  double *a, *b, *bias;      /* the inputs as the kernel reads them, in double */
  void *ha, *hb, *hbias, *hc;
  void *da, *db, *dbias, *dc;
  int64_t *doff;
  size_t a_bytes, b_bytes, bias_bytes, c_bytes; /* c_bytes: with the guard rows */
} grouped_case_t;

static void gc_free(grouped_case_t *g) {
  free(g->off), free(g->a), free(g->b), free(g->bias);
  free(g->ha), free(g->hb), free(g->hbias), free(g->hc);
  cudaFree(g->da), cudaFree(g->db), cudaFree(g->dbias), cudaFree(g->dc), cudaFree(g->doff);
  memset(g, 0, sizeof *g);
}

static uint64_t mix(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Offsets of pattern p over G groups (first offset `first`); returns off[G]. */
static int64_t draw_offsets(int64_t *off, int G, int p, int64_t first, uint64_t *s) {
  off[0] = first;
  for (int g = 0; g < G; ++g) {
    const int64_t edge[6] = {0, 1, 63, 64, 65, 129};
    int64_t r = p == 0   ? edge[g % 6]
                : p == 1 ? (int64_t)(mix(s) % 300)
                : p == 2 ? (g == G / 2 ? 777 : 0)           /* every row to one group */
                         : (g % 5 == 1 ? (int64_t)(mix(s) % 1200) : 0); /* skewed, mostly empty */
    off[g + 1] = off[g] + r;
  }
  return off[G];
}

/* Buffers for d (max_rows from the offsets), inputs random, C poisoned. */
static int gc_init(grouped_case_t *g, const loom_grouped_gemm_desc_t *d, const int64_t *off) {
  memset(g, 0, sizeof *g);
  g->d = *d;
  const int G = d->groups;
  const size_t R = (size_t)d->max_rows, n = (size_t)d->n, k = (size_t)d->k;
  const size_t es = loom_dtype_size(d->ab_type), ec = loom_dtype_size(d->c_type);
  g->a_bytes = R * k * es, g->b_bytes = (size_t)G * n * k * es;
  g->bias_bytes = d->has_bias ? (size_t)G * n * ec : 0;
  g->c_bytes = (R + GUARD_ROWS) * n * ec;
  g->off = (int64_t *)malloc((size_t)(G + 1) * sizeof(int64_t));
  g->ha = malloc(g->a_bytes), g->hb = malloc(g->b_bytes), g->hc = malloc(g->c_bytes);
  g->a = (double *)malloc(R * k * sizeof(double)), g->b = (double *)malloc((size_t)G * n * k * sizeof(double));
  if (!g->off || !g->ha || !g->hb || !g->hc || !g->a || !g->b) return 0;
  memcpy(g->off, off, (size_t)(G + 1) * sizeof(int64_t));
  loom_ref_fill_random(d->ab_type, g->ha, R * k, next_seed(), 1.0);
  loom_ref_fill_random(d->ab_type, g->hb, (size_t)G * n * k, next_seed(), 1.0);
  for (size_t i = 0; i < R * k; ++i) g->a[i] = loom_ref_load(d->ab_type, g->ha, i);
  for (size_t i = 0; i < (size_t)G * n * k; ++i) g->b[i] = loom_ref_load(d->ab_type, g->hb, i);
  if (d->has_bias) {
    g->hbias = malloc(g->bias_bytes), g->bias = (double *)malloc((size_t)G * n * sizeof(double));
    if (!g->hbias || !g->bias) return 0;
    loom_ref_fill_random(d->c_type, g->hbias, (size_t)G * n, next_seed(), 1.0);
    for (size_t i = 0; i < (size_t)G * n; ++i) g->bias[i] = loom_ref_load(d->c_type, g->hbias, i);
  }
  if (cudaMalloc(&g->da, g->a_bytes) || cudaMalloc(&g->db, g->b_bytes) || cudaMalloc(&g->dc, g->c_bytes) ||
      cudaMalloc((void **)&g->doff, (size_t)(G + 1) * sizeof(int64_t)) ||
      (d->has_bias && cudaMalloc(&g->dbias, g->bias_bytes)))
    return 0;
  if (cudaMemcpy(g->da, g->ha, g->a_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(g->db, g->hb, g->b_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(g->doff, off, (size_t)(G + 1) * sizeof(int64_t), cudaMemcpyHostToDevice) ||
      (d->has_bias && cudaMemcpy(g->dbias, g->hbias, g->bias_bytes, cudaMemcpyHostToDevice)) ||
      cudaMemset(g->dc, 0xFF, g->c_bytes))
    return 0;
  return 1;
}

/* B_g's element (kk, col) in either layout. */
static double b_at(const grouped_case_t *g, int grp, int64_t kk, int64_t col) {
  const int64_t n = g->d.n, k = g->d.k;
  const size_t base = (size_t)grp * (size_t)n * (size_t)k;
  return g->d.b_layout == LOOM_B_NK ? g->b[base + (size_t)col * (size_t)k + (size_t)kk]
                                    : g->b[base + (size_t)kk * (size_t)n + (size_t)col];
}

/* C copied back and checked against g->off: every element of every group's
 * rows within bounds, every other row (and the guard) still poison. Returns
 * the number of bad elements; *rel the relative error of the checked ones. */
static size_t gc_check(grouped_case_t *g, double *rel_out) {
  const int64_t R = g->d.max_rows, n = g->d.n, k = g->d.k;
  const loom_dtype_t ct = g->d.c_type;
  if (cudaMemcpy(g->hc, g->dc, g->c_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return (size_t)-1;
  unsigned char *owned = (unsigned char *)calloc((size_t)R + GUARD_ROWS, 1);
  int *grp_of = (int *)malloc(((size_t)R + GUARD_ROWS) * sizeof(int));
  double *col = (double *)malloc((size_t)k * sizeof(double));
  if (!owned || !grp_of || !col) return (size_t)-1;
  for (int grp = 0; grp < g->d.groups; ++grp)
    for (int64_t r = g->off[grp]; r < g->off[grp + 1]; ++r) owned[r] = 1, grp_of[r] = grp;
  size_t bad = 0;
  double num = 0, den = 0;
  const double tol_rel = eps_out(ct) + eps_acc(k), tol_abs = 1e-5 * sqrt((double)k);
  for (int64_t c = 0; c < n; ++c) {
    int col_grp = -1;
    for (int64_t r = 0; r < R + GUARD_ROWS; ++r) {
      const double x = loom_ref_load(ct, g->hc, (size_t)r * (size_t)n + (size_t)c);
      if (!owned[r]) {
        bad += !isnan(x); /* never written */
        continue;
      }
      const int grp = grp_of[r];
      if (grp != col_grp) { /* B_g's column c, once per group run down the column */
        for (int64_t kk = 0; kk < k; ++kk) col[kk] = b_at(g, grp, kk, c);
        col_grp = grp;
      }
      double ref = g->bias ? g->bias[(size_t)grp * (size_t)n + (size_t)c] : 0.0;
      const double *arow = g->a + (size_t)r * (size_t)k;
      for (int64_t kk = 0; kk < k; ++kk) ref += arow[kk] * col[kk];
      const double err = fabs(x - ref);
      if (!(err <= tol_rel * fabs(ref) + tol_abs)) {
        if (bad < 3)
          fprintf(stderr, "    row %lld col %lld (group %d): %.6g vs %.6g\n", (long long)r, (long long)c, grp, x, ref);
        ++bad;
      }
      num += err * err, den += ref * ref;
    }
  }
  *rel_out = den > 0 ? sqrt(num / den) : 0.0;
  free(owned), free(grp_of), free(col);
  return bad;
}

/* One case: pattern p over G groups, config cfg (NULL: loom_gemm_grouped's
 * own). Returns 1 if it matched. */
static int run_case(int G, int p, int64_t first, int64_t n, int64_t k, loom_dtype_t ab, loom_dtype_t ct,
                    loom_layout_t lay, int bias, const loom_gemm_config_t *cfg) {
  static uint64_t s = 0x67726f75ull;
  s ^= loom_test_seed();
  int64_t *off = (int64_t *)malloc((size_t)(G + 1) * sizeof(int64_t));
  if (!off) return 0;
  const int64_t end = draw_offsets(off, G, p, first, &s);
  loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
  d.groups = G, d.max_rows = end + 37, d.n = n, d.k = k, d.ab_type = ab, d.c_type = ct, d.b_layout = lay;
  d.has_bias = bias, d.rows_hint = end - first;
  grouped_case_t g;
  int ok = 0;
  double rel = 0;
  size_t bad = 0;
  if (!gc_init(&g, &d, off)) {
    CHECK(!"grouped case buffers");
    goto out;
  }
  if (cfg) LOOM_OK(loom__gemm_grouped_sm90(&d, g.da, g.db, g.dc, g.dbias, g.doff, cfg, 0, 0));
  else LOOM_OK(loom_gemm_grouped(&d, g.da, g.db, g.dc, g.dbias, g.doff, 0));
  CUDA_OK(cudaDeviceSynchronize());
  bad = gc_check(&g, &rel);
  printf("    G=%3d pattern %d rows [%lld, %lld) n=%lld k=%lld %s->%s %s%s cfg %s: rel %.2e, %zu bad\n", G, p,
         (long long)first, (long long)end, (long long)n, (long long)k, dt_name(ab), dt_name(ct),
         lay == LOOM_B_NK ? "B[G,n,k]" : "B[G,k,n]", bias ? " bias" : "",
         cfg ? (cfg->bm == 64 ? (cfg->bn == 256 ? "64x256" : "64x128") : (cfg->bn == 256 ? "128x256" : "128x128"))
             : "model",
         rel, bad);
  CHECK(bad == 0);
  ok = bad == 0;
out:
  gc_free(&g);
  free(off);
  return ok;
}

LOOM_TEST(gemm_grouped_patterns_tiles_layouts_dtypes) {
  if (!gemm_kernel_or_skip(0)) return;
  const loom_gemm_config_t tiles[4] = {{.bn = 128, .bm = 64}, {.bn = 256, .bm = 64}, {.bn = 128, .bm = 128},
                                       {.bn = 256, .bm = 128}};
  for (int t = 0; t < 4; ++t)
    for (int p = 0; p < 4; ++p)
      run_case(p == 3 ? 17 : 8, p, p == 1 ? 5 : 0, 264, 200, LOOM_BF16, LOOM_BF16, t % 2 ? LOOM_B_KN : LOOM_B_NK,
               p == 2, &tiles[t]);
  /* the model's tile, the other dtypes, n and k off the tile */
  run_case(6, 1, 0, 520, 136, LOOM_FP16, LOOM_FP16, LOOM_B_NK, 1, NULL);
  run_case(6, 0, 3, 136, 1032, LOOM_BF16, LOOM_FP32, LOOM_B_KN, 0, NULL);
  run_case(3, 2, 0, 1024, 512, LOOM_FP16, LOOM_FP32, LOOM_B_KN, 1, NULL);
  /* the most groups, most of them empty */
  run_case(LOOM_GROUPED_GEMM_MAX_GROUPS, 3, 0, 128, 64, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0, NULL);
  run_case(LOOM_GROUPED_GEMM_MAX_GROUPS, 0, 0, 256, 128, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 1, &tiles[1]);
}

/* Captured once, replayed after the device offsets changed: each replay
 * computes the grouping the offsets hold at that moment. */
LOOM_TEST(gemm_grouped_graph_reads_offsets_at_replay) {
  if (!gemm_kernel_or_skip(0)) return;
  const int G = 12;
  uint64_t s = loom_test_seed() ^ 0x6772617068ull;
  int64_t off[13], off2[13];
  draw_offsets(off, G, 1, 0, &s);
  draw_offsets(off2, G, 3, 2, &s);
  loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
  d.groups = G, d.n = 384, d.k = 256, d.b_layout = LOOM_B_NK;
  d.max_rows = (off[G] > off2[G] ? off[G] : off2[G]) + 8;
  grouped_case_t g;
  cudaStream_t st = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double rel = 0;
  if (!gc_init(&g, &d, off)) {
    CHECK(!"graph case buffers");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  LOOM_OK(loom_gemm_grouped(&d, g.da, g.db, g.dc, NULL, g.doff, st));
  CUDA_OK(cudaStreamEndCapture(st, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 4; ++rep) {
    const int64_t *use = rep % 2 ? off2 : off;
    memcpy(g.off, use, sizeof off);
    CUDA_OK(cudaMemcpy(g.doff, use, sizeof off, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(g.dc, 0xFF, g.c_bytes));
    CUDA_OK(cudaGraphLaunch(exec, st));
    CUDA_OK(cudaStreamSynchronize(st));
    const size_t bad = gc_check(&g, &rel);
    printf("    replay %d: rows [%lld, %lld): rel %.2e, %zu bad\n", rep, (long long)use[0], (long long)use[G], rel, bad);
    CHECK(bad == 0);
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (st) cudaStreamDestroy(st);
  gc_free(&g);
}

/* A table that decreases and runs past max_rows: the call completes, no
 * CUDA error, and nothing past max_rows (the guard) is written. */
LOOM_TEST(gemm_grouped_malformed_offsets_stay_inside) {
  if (!gemm_kernel_or_skip(0)) return;
  const int G = 6;
  int64_t off[7] = {0, 300, 100, 900, 50, 5000, 4000};
  loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
  d.groups = G, d.max_rows = 1000, d.n = 256, d.k = 128;
  grouped_case_t g;
  size_t written = 0;
  if (!gc_init(&g, &d, off)) {
    CHECK(!"malformed case buffers");
    goto out;
  }
  LOOM_OK(loom_gemm_grouped(&d, g.da, g.db, g.dc, NULL, g.doff, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  for (size_t i = (size_t)d.max_rows * (size_t)d.n; i < (size_t)(d.max_rows + GUARD_ROWS) * (size_t)d.n; ++i)
    written += !isnan(loom_ref_load(d.c_type, g.hc, i));
  printf("    guard elements written: %zu (of %d rows)\n", written, GUARD_ROWS);
  CHECK(written == 0);
out:
  gc_free(&g);
}

/* The SwiGLU epilogue: C [R, n/2] of rows [off[0], off[G]) against fp64,
 * other rows (and the guard) still poison. */
static size_t glu_check(grouped_case_t *g) {
  const int64_t R = g->d.max_rows, n = g->d.n, F = n / 2, k = g->d.k;
  if (cudaMemcpy(g->hc, g->dc, g->c_bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return (size_t)-1;
  size_t bad = 0;
  for (int64_t r = 0; r < R + GUARD_ROWS; ++r) {
    int grp = -1;
    for (int q = 0; q < g->d.groups; ++q)
      if (r >= g->off[q] && r < g->off[q + 1]) grp = q;
    for (int64_t c = 0; c < F; ++c) {
      const double x = loom_ref_load(g->d.c_type, g->hc, (size_t)r * (size_t)F + (size_t)c);
      if (grp < 0) {
        bad += !isnan(x);
        continue;
      }
      double gs = 0, us = 0;
      const double *arow = g->a + (size_t)r * (size_t)k;
      for (int64_t kk = 0; kk < k; ++kk) gs += arow[kk] * b_at(g, grp, kk, c), us += arow[kk] * b_at(g, grp, kk, F + c);
      const double silu = gs / (1.0 + exp(-gs)), ref = silu * us;
      if (!(fabs(x - ref) <= eps_out(g->d.c_type) * fabs(ref) + 1e-3 * sqrt((double)k) * (fabs(silu) + fabs(us)))) {
        if (bad < 3) fprintf(stderr, "    glu row %lld col %lld: %.6g vs %.6g\n", (long long)r, (long long)c, x, ref);
        ++bad;
      }
    }
  }
  return bad;
}

LOOM_TEST(gemm_grouped_swiglu_epilogue) {
  if (!gemm_kernel_or_skip(0)) return;
  uint64_t s = loom_test_seed() ^ 0x676c75ull;
  const struct { int G, p, bm; int64_t n, k; loom_dtype_t t; } cs[] = {
      {8, 0, 128, 528, 200, LOOM_BF16}, {8, 1, 64, 272, 136, LOOM_BF16}, {17, 3, 128, 256, 72, LOOM_FP16},
      {5, 2, 64, 1040, 96, LOOM_FP16}};
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; ++i) {
    int64_t off[18];
    const int64_t end = draw_offsets(off, cs[i].G, cs[i].p, 1, &s);
    loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
    d.groups = cs[i].G, d.max_rows = end + 9, d.n = cs[i].n, d.k = cs[i].k, d.ab_type = d.c_type = cs[i].t;
    d.b_layout = LOOM_B_NK;
    const loom_gemm_config_t cfg = {.bn = 256, .bm = cs[i].bm};
    grouped_case_t g;
    size_t bad = 0;
    if (!gc_init(&g, &d, off)) {
      CHECK(!"swiglu case buffers");
      gc_free(&g);
      return;
    }
    LOOM_OK(loom__gemm_grouped_sm90(&d, g.da, g.db, g.dc, NULL, g.doff, &cfg, 1, 0));
    CUDA_OK(cudaDeviceSynchronize());
    bad = glu_check(&g);
    printf("    swiglu G=%2d pattern %d rows [1, %lld) n=%lld (%lld out) k=%lld %s tile %dx256: %zu bad\n", cs[i].G,
           cs[i].p, (long long)end, (long long)d.n, (long long)(d.n / 2), (long long)d.k, dt_name(cs[i].t), cs[i].bm,
           bad);
    CHECK(bad == 0);
  out:
    gc_free(&g);
  }
  /* refused where it cannot apply */
  loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
  d.groups = 1, d.max_rows = 64, d.n = 264, d.k = 64, d.b_layout = LOOM_B_KN;
  CHECK_RESULT(loom__gemm_grouped_sm90(&d, (void *)16, (void *)16, (void *)16, NULL, (const int64_t *)16, NULL, 1, 0),
               LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("SwiGLU");
}
