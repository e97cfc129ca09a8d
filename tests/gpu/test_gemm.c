/*
 * test_gemm.c - GPU tests of the GEMM engine (src/gemm), one GPU.
 *
 * Every case draws fresh random inputs (seed printed once per run), poisons
 * C with 0xFF bytes (NaN in every output dtype) and checks that every element
 * was written, then compares
 *   - with an fp64 CPU reference (loom_ref_gemm_element) on whole sampled rows
 *     and whole sampled columns (first, last and random ones), and
 *   - with cuBLASLt (loom__base_gemm) on every element.
 * Bound per element: |x - ref| <= eps_out |ref| + eps_acc sqrt(k) (inputs are
 * uniform in [-1, 1); eps_out covers the output rounding, eps_acc the fp32
 * accumulation order).
 * Shapes: odd m (1, 7, 127, 1000, 3001), n and k not multiples of the tile,
 * both B layouts, bf16/fp16 inputs, bf16/fp16/fp32 outputs, bias, both tile
 * configurations; hooks: a host-set schedule with prologue waits released by
 * the host row block by row block and per-tile signals watched by the host,
 * row-routed stores, atomic reduce, the prologue timeout, graph capture.
 * Tests of loom's own kernel skip without a compute capability 9.0 GPU.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "../common/test.h"
#include "core/baseline.h"
#include "core/tune.h"
#include "gemm/gemm.h"
#include "ref/ref.h"

#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* Seeds of this run: the run's seed (printed at start), then one more per draw. */
static uint64_t next_seed(void) {
  static uint64_t drawn;
  return loom_test_seed() + ++drawn;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 1 if the current GPU runs loom's sm90 kernel, else marks the test skipped. */
static int sm90_or_skip(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    loom_test_skip("no GPU");
    return 0;
  }
  int major = 0, minor = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  loom_gemm_desc_t d = {64, 64, 64, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0};
  if (!loom__gemm_sm90_supported(&d, major, minor)) {
    loom_test_skip("needs a compute capability 9.0 GPU (loom's sm90 kernel)");
    return 0;
  }
  return 1;
}

static double eps_out(loom_dtype_t t) {
  return t == LOOM_BF16 ? 1.0 / 128 : t == LOOM_FP16 ? 1.0 / 1024 : 1e-6;
}

/* Host and device buffers of one GEMM case. */
typedef struct gcase {
  loom_gemm_desc_t d;
  void *ha, *hb, *hbias, *hc, *hc2;
  void *da, *db, *dbias, *dc, *dc2;
  size_t a_bytes, b_bytes, c_bytes, bias_bytes;
} gcase_t;

static void gcase_free(gcase_t *g) {
  free(g->ha), free(g->hb), free(g->hbias), free(g->hc), free(g->hc2);
  cudaFree(g->da), cudaFree(g->db), cudaFree(g->dbias), cudaFree(g->dc), cudaFree(g->dc2);
  memset(g, 0, sizeof *g);
}

/* Allocates, fills A, B, bias with fresh random data, poisons C and C2. */
static int gcase_init(gcase_t *g, const loom_gemm_desc_t *d) {
  memset(g, 0, sizeof *g);
  g->d = *d;
  const size_t ab = loom_dtype_size(d->ab_type), cs = loom_dtype_size(d->c_type);
  g->a_bytes = (size_t)d->m * (size_t)d->k * ab;
  g->b_bytes = (size_t)d->k * (size_t)d->n * ab;
  g->c_bytes = (size_t)d->m * (size_t)d->n * cs;
  g->bias_bytes = (size_t)d->n * cs;
  g->ha = malloc(g->a_bytes), g->hb = malloc(g->b_bytes), g->hbias = malloc(g->bias_bytes);
  g->hc = malloc(g->c_bytes), g->hc2 = malloc(g->c_bytes);
  if (!g->ha || !g->hb || !g->hbias || !g->hc || !g->hc2) return 0;
  loom_ref_fill_random(d->ab_type, g->ha, (size_t)d->m * (size_t)d->k, next_seed(), 1.0);
  loom_ref_fill_random(d->ab_type, g->hb, (size_t)d->k * (size_t)d->n, next_seed(), 1.0);
  loom_ref_fill_random(d->c_type, g->hbias, (size_t)d->n, next_seed(), 1.0);
  if (cudaMalloc(&g->da, g->a_bytes) || cudaMalloc(&g->db, g->b_bytes) || cudaMalloc(&g->dbias, g->bias_bytes) ||
      cudaMalloc(&g->dc, g->c_bytes) || cudaMalloc(&g->dc2, g->c_bytes))
    return 0;
  if (cudaMemcpy(g->da, g->ha, g->a_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(g->db, g->hb, g->b_bytes, cudaMemcpyHostToDevice) ||
      cudaMemcpy(g->dbias, g->hbias, g->bias_bytes, cudaMemcpyHostToDevice) ||
      cudaMemset(g->dc, 0xFF, g->c_bytes) || cudaMemset(g->dc2, 0xFF, g->c_bytes))
    return 0;
  return 1;
}

/* Elements of host C that are still poison (NaN). */
static size_t count_unwritten(loom_dtype_t t, const void *c, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += isnan(loom_ref_load(t, c, i)) ? 1 : 0;
  return bad;
}

/* Compares host C (g->hc, plus `init` added: NULL or a [m, n] c_type buffer
 * that C was reduced into) with the fp64 reference on whole sampled rows and
 * columns. Returns the number of elements out of bound; *rel gets
 * ||x - ref|| / ||ref|| over the samples. */
static size_t check_ref(const gcase_t *g, const void *init, double extra_eps, double *rel) {
  const loom_gemm_desc_t *d = &g->d;
  const void *bias = d->has_bias ? g->hbias : NULL;
  int64_t rows[10], cols[10];
  int nr = 0, nc = 0;
  uint64_t s = next_seed();
  rows[nr++] = 0, rows[nr++] = d->m - 1;
  cols[nc++] = 0, cols[nc++] = d->n - 1;
  for (int i = 0; i < 4; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    rows[nr++] = (int64_t)((s >> 33) % (uint64_t)d->m);
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    cols[nc++] = (int64_t)((s >> 33) % (uint64_t)d->n);
  }
  const double eo = eps_out(d->c_type), ea = 1e-5 * sqrt((double)d->k) + 1e-6;
  double se = 0, sr = 0;
  size_t bad = 0, printed = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const int outer = pass == 0 ? nr : nc;
    for (int o = 0; o < outer; ++o) {
      const int64_t inner = pass == 0 ? d->n : d->m;
      for (int64_t i = 0; i < inner; ++i) {
        const int64_t r = pass == 0 ? rows[o] : i, c = pass == 0 ? i : cols[o];
        double ref = loom_ref_gemm_element(d, g->ha, g->hb, bias, r, c), bound = eo * fabs(ref) + ea;
        if (init) {
          /* reduce: the product is rounded to c_type, then the sum */
          const double iv = loom_ref_load(d->c_type, init, (size_t)(r * d->n + c));
          bound = eo * (fabs(ref) + fabs(iv + ref)) + extra_eps * fabs(iv) + ea;
          ref += iv;
        }
        const double x = loom_ref_load(d->c_type, g->hc, (size_t)(r * d->n + c));
        se += (x - ref) * (x - ref), sr += ref * ref;
        if (!(fabs(x - ref) <= bound)) {
          if (printed++ < 4)
            printf("    C[%lld, %lld] = %.6g, reference %.6g\n", (long long)r, (long long)c, x, ref);
          bad++;
        }
      }
    }
  }
  *rel = sqrt(se / (sr > 0 ? sr : 1));
  if (isnan(*rel)) bad++;
  return bad;
}

/* Compares host C with host C2 (cuBLASLt) on every element. */
static size_t check_same(const gcase_t *g, double *rel) {
  const loom_gemm_desc_t *d = &g->d;
  const size_t n = (size_t)d->m * (size_t)d->n;
  const double eo = 2 * eps_out(d->c_type), ea = 2e-5 * sqrt((double)d->k) + 1e-6;
  double se = 0, sr = 0;
  size_t bad = 0, printed = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = loom_ref_load(d->c_type, g->hc, i), y = loom_ref_load(d->c_type, g->hc2, i);
    se += (x - y) * (x - y), sr += y * y;
    if (!(fabs(x - y) <= eo * fabs(y) + ea)) {
      if (printed++ < 4)
        printf("    C[%zu, %zu] = %.6g, cuBLASLt %.6g\n", i / (size_t)d->n, i % (size_t)d->n, x, y);
      bad++;
    }
  }
  *rel = sqrt(se / (sr > 0 ? sr : 1));
  return bad;
}

static const char *dt_name(loom_dtype_t t) { return t == LOOM_BF16 ? "bf16" : t == LOOM_FP16 ? "fp16" : "fp32"; }

/* One full case: loom (cfg NULL: loom_gemm; else the sm90 launcher with that
 * configuration) vs fp64 and cuBLASLt. Returns 1 if everything matched. */
static int run_case(const loom_gemm_desc_t *d, const loom_gemm_config_t *cfg, int vs_cublas) {
  gcase_t g;
  int ok = 0;
  double rel_ref = 0, rel_cub = 0;
  size_t unw = 0, bad_ref = 0, bad_cub = 0;
  if (!gcase_init(&g, d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation for m=%lld n=%lld k=%lld", (long long)d->m, (long long)d->n,
                   (long long)d->k);
    goto out;
  }
  const void *bias = d->has_bias ? g.dbias : NULL;
  if (cfg) LOOM_OK(loom__gemm_sm90(d, g.da, g.db, g.dc, bias, cfg, NULL, 0));
  else LOOM_OK(loom_gemm(d, g.da, g.db, g.dc, bias, 0));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  unw = count_unwritten(d->c_type, g.hc, (size_t)d->m * (size_t)d->n);
  bad_ref = check_ref(&g, NULL, 0, &rel_ref);
  /* cuBLASLt takes bf16 -> bf16/fp32 and fp16 -> fp16/fp32 */
  if (d->c_type != LOOM_FP32 && d->c_type != d->ab_type) vs_cublas = 0;
  if (vs_cublas) {
    LOOM_OK(loom__base_gemm(d, g.da, g.db, g.dc2, bias, 0));
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(g.hc2, g.dc2, g.c_bytes, cudaMemcpyDeviceToHost));
    bad_cub = check_same(&g, &rel_cub);
  }
  ok = unw == 0 && bad_ref == 0 && bad_cub == 0;
  printf("    %-4s m=%-5lld n=%-5lld k=%-5lld %s->%s %s bias=%d bn=%d sk=%d/%d/%d cl=%d: unwritten %zu, vs fp64 rel %.2e (%zu bad), vs cuBLASLt rel %.2e (%zu bad)\n",
         ok ? "ok" : "FAIL", (long long)d->m, (long long)d->n, (long long)d->k, dt_name(d->ab_type),
         dt_name(d->c_type), d->b_layout == LOOM_B_NK ? "B[n,k]" : "B[k,n]", d->has_bias, cfg ? cfg->bn : 0,
         cfg ? cfg->sk_tiles : 0, cfg ? cfg->sk_blocks : 0, cfg ? cfg->sk_splits : 0, cfg ? cfg->cluster : 0, unw, rel_ref, bad_ref, rel_cub,
         bad_cub);
  if (!ok)
    loom_test_fail(__FILE__, __LINE__, "GEMM m=%lld n=%lld k=%lld mismatched", (long long)d->m, (long long)d->n,
                   (long long)d->k);
out:
  gcase_free(&g);
  return ok;
}

LOOM_TEST(gemm_odd_shapes_both_layouts) {
  if (!sm90_or_skip()) return;
  const int64_t shapes[][3] = {{1, 256, 512}, {7, 136, 264}, {127, 1000, 520}, {1000, 776, 1032},
                               {3001, 2056, 1000}, {64, 24, 8}, {129, 264, 4104}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i)
    for (int lay = 0; lay < 2; ++lay) {
      loom_gemm_desc_t d = {shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                            lay ? LOOM_B_KN : LOOM_B_NK, (int)(i & 1)};
      run_case(&d, NULL, 1);
    }
}

LOOM_TEST(gemm_dtypes_bias_layouts) {
  if (!sm90_or_skip()) return;
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay)
        for (int bias = 0; bias < 2; ++bias) {
          loom_gemm_desc_t d = {1000, 776, 1032, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, bias};
          run_case(&d, NULL, 1);
        }
}

LOOM_TEST(gemm_both_tile_configs) {
  if (!sm90_or_skip()) return;
  /* 2900 rows: 23 tile rows, so the last cluster pair has a block past m */
  const int64_t shapes[][3] = {{3001, 2056, 1000}, {64, 4096, 4096}, {512, 1280, 2048}, {2900, 776, 1032}};
  const int bns[] = {128, 256};
  for (size_t i = 0; i < 4; ++i)
    for (int b = 0; b < 2; ++b)
      for (int lay = 0; lay < 2; ++lay)
        for (int cl = 1; cl <= 2; ++cl) {
          loom_gemm_config_t cfg = {bns[b], 0, 0, 0, 0, 0, 0, cl};
          loom_gemm_desc_t d = {shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16,
                                lay ? LOOM_B_KN : LOOM_B_NK, 1};
          run_case(&d, &cfg, 1);
        }
  /* a small grid: every block (cluster) walks many tiles (persistent loop,
   * phases), every output dtype */
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int c = 0; c < 3; ++c)
    for (int cl = 1; cl <= 2; ++cl) {
      loom_gemm_config_t cfg = {256, 0, 3, 5, 0, 0, 0, cl};
      loom_gemm_desc_t d = {1000, 2056, 1032, LOOM_FP16, cs[c], c ? LOOM_B_NK : LOOM_B_KN, 1};
      run_case(&d, &cfg, 1);
    }
}

/* Stream-K and split-K: the k-loop of every tile (or of the last tiles)
 * shared among blocks, partials summed by the last contributor. Odd m, n not a multiple
 * of the tile, k-blocks not a multiple of the blocks (uneven ranges), both
 * layouts, every dtype pair, bias (added once: the fp64 bound would catch a
 * second one). */
LOOM_TEST(gemm_stream_k_shapes_dtypes_layouts) {
  if (!sm90_or_skip()) return;
  /* m, n, k, sk_tiles, sk_blocks, grid, sk_splits (0: stream-K ranges,
   * else aligned split-K) */
  const int64_t cases[][7] = {{1, 256, 512, -1, 5, 0, 0},      {7, 136, 1032, -1, 7, 0, 0},
                              {65, 1000, 4104, -1, 13, 0, 0},  {127, 776, 1032, -1, 132, 0, 0},
                              {200, 2056, 3000, -1, 50, 0, 0}, {1000, 2056, 1032, 9, 0, 0, 0},
                              {3001, 776, 520, 20, 6, 6, 0},   {64, 4096, 4096, -1, 0, 0, 0},
                              {7, 136, 1032, -1, 0, 0, 3},     {65, 1000, 4104, -1, 0, 0, 5},
                              {200, 2056, 3000, -1, 0, 0, 4},  {1000, 2056, 1032, 9, 0, 0, 2},
                              {3001, 776, 520, 20, 0, 6, 7},   {64, 4096, 4096, -1, 0, 0, 16}};
  const int bns[] = {128, 256};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i)
    for (int b = 0; b < 2; ++b)
      for (int lay = 0; lay < 2; ++lay) {
        loom_gemm_config_t cfg = {bns[b], 0, 0, (int)cases[i][5], (int)cases[i][3], (int)cases[i][4], (int)cases[i][6], 0};
        loom_gemm_desc_t d = {cases[i][0], cases[i][1], cases[i][2], LOOM_BF16, LOOM_BF16,
                              lay ? LOOM_B_KN : LOOM_B_NK, (int)((i + (size_t)lay) & 1)};
        run_case(&d, &cfg, 1);
      }
  const loom_dtype_t abs_[] = {LOOM_BF16, LOOM_FP16};
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_FP16, LOOM_BF16};
  for (int a = 0; a < 2; ++a)
    for (int c = 0; c < 3; ++c)
      for (int lay = 0; lay < 2; ++lay) {
        loom_gemm_config_t cfg = {a ? 256 : 128, 0, 0, 0, -1, 11, c == 1 ? 3 : 0, 0};
        loom_gemm_desc_t d = {97, 520, 2056, abs_[a], cs[c], lay ? LOOM_B_KN : LOOM_B_NK, 1};
        run_case(&d, &cfg, 1);
      }
}

/* The heuristic takes stream-K for decode batches (m <= 64) with few tiles;
 * loom_gemm on those, twice in a row on one stream (tickets back to 0). */
LOOM_TEST(gemm_stream_k_heuristic_small_m) {
  if (!sm90_or_skip()) return;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int64_t shapes[][3] = {{64, 8192, 4096}, {1, 4096, 8192}, {17, 2048, 4096}, {48, 3072, 4096}, {33, 1288, 8200}};
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    loom_gemm_desc_t d = {shapes[i][0], shapes[i][1], shapes[i][2], LOOM_BF16, LOOM_BF16, LOOM_B_NK, (int)(i & 1)};
    loom_gemm_config_t h = loom__gemm_sm90_heuristic(&d, sms);
    printf("    heuristic m=%lld n=%lld k=%lld: bn %d sk_tiles %d sk_blocks %d\n", (long long)d.m, (long long)d.n,
           (long long)d.k, h.bn, h.sk_tiles, h.sk_blocks);
    CHECK(h.sk_tiles != 0);
    for (int rep = 0; rep < 2; ++rep) run_case(&d, NULL, 1);
  }
}

/* Same inputs, same configuration, twice: bit-identical (the partials are
 * summed in k order whoever finishes last); and a captured stream-K GEMM
 * replayed twice (the scratch exists before the capture). */
LOOM_TEST(gemm_stream_k_deterministic_and_graph) {
  if (!sm90_or_skip()) return;
  gcase_t g;
  cudaStream_t st = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double rel = 0;
  loom_gemm_desc_t d = {77, 3000, 6152, LOOM_BF16, LOOM_FP32, LOOM_B_KN, 1};
  loom_gemm_config_t cfg = {128, 0, 0, 0, -1, 0, 0, 0};
  loom_gemm_config_t split = {256, 0, 0, 0, -1, 0, 6, 0};
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  LOOM_OK(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &cfg, NULL, st));
  LOOM_OK(loom__gemm_sm90(&d, g.da, g.db, g.dc2, g.dbias, &cfg, NULL, st));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(g.hc2, g.dc2, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(memcmp(g.hc, g.hc2, g.c_bytes) == 0);
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
  CHECK(check_ref(&g, NULL, 0, &rel) == 0);
  printf("    two runs bit-identical: %s, vs fp64 rel %.2e\n", memcmp(g.hc, g.hc2, g.c_bytes) == 0 ? "yes" : "NO", rel);
  /* split-K, the same */
  CUDA_OK(cudaMemset(g.dc, 0xFF, g.c_bytes));
  CUDA_OK(cudaMemset(g.dc2, 0xFF, g.c_bytes));
  LOOM_OK(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &split, NULL, st));
  LOOM_OK(loom__gemm_sm90(&d, g.da, g.db, g.dc2, g.dbias, &split, NULL, st));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(g.hc2, g.dc2, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(memcmp(g.hc, g.hc2, g.c_bytes) == 0);
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
  CHECK(check_ref(&g, NULL, 0, &rel) == 0);
  printf("    split-K: two runs bit-identical: %s, vs fp64 rel %.2e\n", memcmp(g.hc, g.hc2, g.c_bytes) == 0 ? "yes" : "NO",
         rel);
  /* the graph below replays the stream-K configuration: reference from it */
  LOOM_OK(loom__gemm_sm90(&d, g.da, g.db, g.dc2, g.dbias, &cfg, NULL, st));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g.hc2, g.dc2, g.c_bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemset(g.dc, 0xFF, g.c_bytes));
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  LOOM_OK(loom__gemm_sm90(&d, g.da, g.db, g.dc, g.dbias, &cfg, NULL, st));
  CUDA_OK(cudaStreamEndCapture(st, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int r = 0; r < 2; ++r) {
    CUDA_OK(cudaGraphLaunch(exec, st));
    CUDA_OK(cudaStreamSynchronize(st));
    CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(g.hc, g.hc2, g.c_bytes) == 0);
  }
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
}

LOOM_TEST(gemm_invalid_arguments) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    (void)cudaGetLastError();
    loom_test_skip("no GPU");
    return;
  }
  void *p = NULL;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) {
    loom_test_fail(__FILE__, __LINE__, "cudaMalloc");
    return;
  }
  loom_gemm_desc_t d = {64, 12, 64, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0};
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("n=12");
  d.n = 64, d.k = 20;
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("k=20");
  d.k = 64, d.m = 0;
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("m=0");
  d.m = 64;
  CHECK_RESULT(loom_gemm(&d, NULL, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  d.has_bias = 1;
  CHECK_RESULT(loom_gemm(&d, p, p, p, NULL, 0), LOOM_ERR_INVALID_ARGUMENT);
  cudaFree(p);
}

LOOM_TEST(gemm_graph_capture) {
  if (!sm90_or_skip()) return;
  gcase_t g;
  cudaStream_t st = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  double rel = 0;
  loom_gemm_desc_t d = {300, 520, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1};
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  LOOM_OK(loom_gemm(&d, g.da, g.db, g.dc, g.dbias, st));
  CUDA_OK(cudaStreamEndCapture(st, &graph));
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_OK(cudaGraphLaunch(exec, st));
  CUDA_OK(cudaStreamSynchronize(st));
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
  CHECK(check_ref(&g, NULL, 0, &rel) == 0);
out:
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  if (st) cudaStreamDestroy(st);
  gcase_free(&g);
}

/* ---- hooks ----------------------------------------------------------- */

/* A comm description for hooks without a real comm: host-mapped error
 * record, device abort flag, the given timeout. */
typedef struct fake_comm {
  loom_error_record_t *err_h, *err_d;
  uint32_t *abort_d;
  loom_dev_comm_t dc;
} fake_comm_t;

static int fake_comm_init(fake_comm_t *f, double timeout_s) {
  memset(f, 0, sizeof *f);
  if (cudaHostAlloc((void **)&f->err_h, sizeof *f->err_h, cudaHostAllocMapped) != cudaSuccess) return 0;
  memset(f->err_h, 0, sizeof *f->err_h);
  if (cudaHostGetDevicePointer((void **)&f->err_d, f->err_h, 0) != cudaSuccess) return 0;
  if (cudaMalloc((void **)&f->abort_d, 4) != cudaSuccess || cudaMemset(f->abort_d, 0, 4) != cudaSuccess) return 0;
  f->dc.rank = 0, f->dc.size = 1;
  f->dc.err = f->err_d;
  f->dc.abort_flag = f->abort_d;
  f->dc.timeout_ns = (uint64_t)(timeout_s * 1e9);
  return 1;
}

static void fake_comm_free(fake_comm_t *f) {
  if (f->err_h) cudaFreeHost(f->err_h);
  if (f->abort_d) cudaFree(f->abort_d);
  memset(f, 0, sizeof *f);
}

LOOM_TEST(gemm_hooks_host_schedule_waits_and_tile_signals) {
  if (!sm90_or_skip()) return;
  /* 6 tile rows x 4 tile columns (bn 128). The host releases row blocks in a
   * random order; the schedule follows that order (arrival order). After
   * releasing a row block the host waits for every tile of it to signal, and
   * checks no tile of an unreleased row block has signalled. */
  gcase_t g;
  fake_comm_t fc;
  uint32_t *wait_h = NULL, *wait_d = NULL, *sig_h = NULL, *sig_d = NULL;
  int32_t *sched_d = NULL;
  cudaStream_t st = NULL;
  double rel = 0;
  memset(&g, 0, sizeof g);
  memset(&fc, 0, sizeof fc);
  enum { TM = 6, TN = 4 };
  loom_gemm_desc_t d = {TM * 128 - 37, TN * 128 - 8, 1032, LOOM_BF16, LOOM_FP32, LOOM_B_NK, 1};
  if (!gcase_init(&g, &d) || !fake_comm_init(&fc, 20.0)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaHostAlloc((void **)&wait_h, TM * 4, cudaHostAllocMapped));
  CUDA_OK(cudaHostAlloc((void **)&sig_h, TM * TN * 4, cudaHostAllocMapped));
  memset(wait_h, 0, TM * 4);
  memset(sig_h, 0, TM * TN * 4);
  CUDA_OK(cudaHostGetDevicePointer((void **)&wait_d, wait_h, 0));
  CUDA_OK(cudaHostGetDevicePointer((void **)&sig_d, sig_h, 0));
  int order[TM];
  for (int i = 0; i < TM; ++i) order[i] = i;
  uint64_t s = next_seed();
  for (int i = TM - 1; i > 0; --i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    int j = (int)((s >> 33) % (uint64_t)(i + 1)), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  int32_t sched[TM * TN];
  for (int i = 0; i < TM; ++i)
    for (int j = 0; j < TN; ++j) sched[i * TN + j] = order[i] * TN + j;
  CUDA_OK(cudaMalloc((void **)&sched_d, sizeof sched));
  CUDA_OK(cudaMemcpy(sched_d, sched, sizeof sched, cudaMemcpyHostToDevice));
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

  const uint32_t epoch = 7;
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  h.order.kind = LOOM_TILE_ORDER_SCHEDULE;
  h.order.schedule = sched_d;
  h.wait_signals = wait_d;
  h.wait_epoch = epoch;
  h.wait_rows_per_signal = 128;
  h.epilogue = LOOM_EPI_STORE;
  h.tile_signal = sig_d;
  h.signal_epoch = epoch;
  h.comm = fc.dc;
  loom_gemm_config_t cfg = {128, 0, 0, 3, 0, 0, 0, 0};
  LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, g.dbias, &cfg, &h, st));
  int premature = 0, late = 0;
  for (int i = 0; i < TM; ++i) {
    const int r = order[i];
    /* nothing of the rows not yet released may have signalled */
    for (int k = i; k < TM; ++k)
      for (int j = 0; j < TN; ++j) premature += __atomic_load_n(&sig_h[order[k] * TN + j], __ATOMIC_ACQUIRE) != 0;
    __atomic_store_n(&wait_h[r], epoch, __ATOMIC_RELEASE);
    const double t0 = now_s();
    for (int j = 0; j < TN; ++j)
      while (__atomic_load_n(&sig_h[r * TN + j], __ATOMIC_ACQUIRE) != epoch) {
        if (now_s() - t0 > 10.0) {
          late++;
          break;
        }
      }
  }
  CUDA_OK(cudaStreamSynchronize(st));
  CHECK_EQ_INT(premature, 0);
  CHECK_EQ_INT(late, 0);
  CHECK_EQ_INT(fc.err_h->valid, 0);
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == 0);
  CHECK(check_ref(&g, NULL, 0, &rel) == 0);
  printf("    release order %d %d %d %d %d %d: rel %.2e\n", order[0], order[1], order[2], order[3], order[4],
         order[5], rel);
out:
  if (st) cudaStreamDestroy(st);
  if (wait_h) cudaFreeHost(wait_h);
  if (sig_h) cudaFreeHost(sig_h);
  cudaFree(sched_d);
  fake_comm_free(&fc);
  gcase_free(&g);
}

LOOM_TEST(gemm_hooks_row_routed_store_and_reduce) {
  if (!sm90_or_skip()) return;
  /* STORE: rows split over two destination buffers (as peers' windows
   * would be); REDUCE: atomically added onto random C, for each C dtype. */
  const loom_dtype_t cs[] = {LOOM_FP32, LOOM_BF16, LOOM_FP16};
  for (int ci = 0; ci < 3; ++ci)
    for (int mode = 0; mode < 2; ++mode) {
      gcase_t g;
      void *init = NULL, *half_d = NULL, **tab_d = NULL;
      double rel = 0;
      memset(&g, 0, sizeof g);
      loom_gemm_desc_t d = {1000, 776, 1032, LOOM_BF16, cs[ci], ci == 1 ? LOOM_B_KN : LOOM_B_NK, mode};
      if (!gcase_init(&g, &d)) {
        loom_test_fail(__FILE__, __LINE__, "allocation");
        goto next;
      }
      const int64_t rp = 500; /* rows per destination */
      const size_t cs_ = loom_dtype_size(d.c_type);
      loom_gemm_hooks_t h;
      memset(&h, 0, sizeof h);
      h.order.kind = LOOM_TILE_ORDER_RANK_SHIFTED;
      h.order.row_shift = loom_tile_rank_shift(d.m, 128, 2, 1);
      if (mode == 0) {
        /* rows [0, 500) -> dc, rows [500, 1000) -> a separate buffer */
        CUDA_OK(cudaMalloc(&half_d, (size_t)rp * (size_t)d.n * cs_));
        CUDA_OK(cudaMemset(half_d, 0xFF, (size_t)rp * (size_t)d.n * cs_));
        void *tab[2] = {g.dc, half_d};
        CUDA_OK(cudaMalloc((void **)&tab_d, sizeof tab));
        CUDA_OK(cudaMemcpy(tab_d, tab, sizeof tab, cudaMemcpyHostToDevice));
        h.epilogue = LOOM_EPI_STORE;
        h.row_dst = tab_d;
        h.rows_per_dst = rp;
      } else {
        init = malloc(g.c_bytes);
        loom_ref_fill_random(d.c_type, init, (size_t)d.m * (size_t)d.n, next_seed(), 4.0);
        CUDA_OK(cudaMemcpy(g.dc, init, g.c_bytes, cudaMemcpyHostToDevice));
        h.epilogue = LOOM_EPI_REDUCE;
      }
      loom_gemm_config_t cfg = {256, 0, 0, 0, 0, 0, 0, 0};
      LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, d.has_bias ? g.dbias : NULL, &cfg, &h, 0));
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
      if (mode == 0) /* the second half of the rows lives in half_d */
        CUDA_OK(cudaMemcpy((char *)g.hc + (size_t)rp * (size_t)d.n * cs_, half_d, (size_t)rp * (size_t)d.n * cs_,
                           cudaMemcpyDeviceToHost));
      {
        const size_t unw = count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n);
        /* reduce rounds twice (the product, then the sum) */
        const size_t bad = check_ref(&g, init, mode ? eps_out(d.c_type) : 0, &rel);
        printf("    %s %s: unwritten %zu, vs fp64 rel %.2e (%zu bad)\n", mode ? "reduce" : "routed store",
               dt_name(d.c_type), unw, rel, bad);
        CHECK(unw == 0);
        CHECK(bad == 0);
      }
    next:
    out:
      free(init);
      cudaFree(half_d);
      cudaFree(tab_d);
      gcase_free(&g);
    }
}

LOOM_TEST(gemm_hooks_prologue_timeout) {
  if (!sm90_or_skip()) return;
  /* a wait that nobody releases expires: the error record names the GEMM
   * prologue and the signal, the kernel returns, C stays untouched */
  gcase_t g;
  fake_comm_t fc;
  uint32_t *wait_d = NULL;
  memset(&g, 0, sizeof g);
  memset(&fc, 0, sizeof fc);
  loom_gemm_desc_t d = {256, 512, 512, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0};
  if (!gcase_init(&g, &d) || !fake_comm_init(&fc, 0.05)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    goto out;
  }
  CUDA_OK(cudaMalloc((void **)&wait_d, 8));
  CUDA_OK(cudaMemset(wait_d, 0, 8));
  loom_gemm_hooks_t h;
  memset(&h, 0, sizeof h);
  h.wait_signals = wait_d;
  h.wait_epoch = 1;
  h.wait_rows_per_signal = 128;
  h.comm = fc.dc;
  const double t0 = now_s();
  LOOM_OK(loom__gemm_hooked(&d, g.da, g.db, g.dc, NULL, NULL, &h, 0));
  CUDA_OK(cudaDeviceSynchronize());
  const double dt = now_s() - t0;
  CHECK(dt < 5.0);
  CHECK_EQ_INT(fc.err_h->valid, 1);
  CHECK_EQ_INT(fc.err_h->site, LOOM_SITE_GEMM_PROLOGUE);
  CHECK(fc.err_h->signal <= 1);
  CHECK_EQ_INT(fc.err_h->expected, 1);
  CUDA_OK(cudaMemcpy(g.hc, g.dc, g.c_bytes, cudaMemcpyDeviceToHost));
  CHECK(count_unwritten(d.c_type, g.hc, (size_t)d.m * (size_t)d.n) == (size_t)d.m * (size_t)d.n);
  printf("    timed out after %.3f s on signal %u\n", dt, fc.err_h->signal);
out:
  cudaFree(wait_d);
  fake_comm_free(&fc);
  gcase_free(&g);
}

/* loom_gemm_tune records an entry that loom_gemm then uses; forced entries
 * (cluster, split-K) are used and correct; a malformed entry is an error;
 * tuning inside a graph capture is refused. */
LOOM_TEST(gemm_tune_records_an_entry_loom_gemm_uses) {
  if (!sm90_or_skip()) return;
  loom__tune_clear();
  const loom_gemm_desc_t d = {1000, 2056, 1032, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1};
  gcase_t g;
  if (!gcase_init(&g, &d)) {
    loom_test_fail(__FILE__, __LINE__, "allocation");
    return;
  }
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  char key[LOOM_TUNE_TEXT_BYTES], value[LOOM_TUNE_TEXT_BYTES];
  CHECK(loom__gemm_tune_key(&d, "sm90", sms, key, sizeof key));
  CHECK(!loom__tune_get(key, value, sizeof value));
  CHECK_RESULT(loom_gemm_tune(&d, g.da, g.db, g.dc, g.dbias, 0), LOOM_SUCCESS);
  CHECK(loom__tune_get(key, value, sizeof value));
  printf("    tuned: %s = %s\n", key, value);
  loom_gemm_config_t c;
  CHECK_RESULT(loom__gemm_config_parse(value, &c), LOOM_SUCCESS);
  CHECK(run_case(&d, NULL, 1)); /* loom_gemm with the tuned entry */
  const char *forced[] = {"bn=128 group=16 cluster=2", "bn=256 group=16 sk_tiles=-1 splits=3", "bn=256 grid=7 cluster=2"};
  for (int i = 0; i < 3; ++i) {
    CHECK_RESULT(loom__tune_put(key, forced[i]), LOOM_SUCCESS);
    printf("    forced: %s\n", forced[i]);
    CHECK(run_case(&d, NULL, 1));
  }
  CHECK_RESULT(loom__tune_put(key, "bn=256 tiles=3"), LOOM_SUCCESS);
  CHECK_RESULT(loom_gemm(&d, g.da, g.db, g.dc, g.dbias, 0), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("tiles");
  loom__tune_clear();
  cudaStream_t st;
  CUDA_OK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  CHECK_RESULT(loom_gemm_tune(&d, g.da, g.db, g.dc, g.dbias, st), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("capturing");
  cudaGraph_t graph = NULL;
  CUDA_OK(cudaStreamEndCapture(st, &graph));
  if (graph) cudaGraphDestroy(graph);
  cudaStreamDestroy(st);
out:
  loom__tune_clear();
  gcase_free(&g);
}
