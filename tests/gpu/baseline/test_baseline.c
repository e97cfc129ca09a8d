/*
 * test_baseline.c - GPU tests of the baselines (src/baseline/baseline_*.c):
 * the cuBLASLt GEMM against the fp64 CPU reference, and the NCCL wrappers
 * on every GPU present.
 *
 * Every test body runs in child processes through loom_launch (one per GPU),
 * so the test runner's own process never initialises CUDA and later tests
 * can still fork ranks. Inputs are fresh random data (a new seed each run,
 * printed by the parent; a failure names the seed and the case). Outputs are
 * poisoned with 0xFF bytes (NaN in fp32, fp16 and bf16) before the call.
 * Streams are blocking (cudaStreamCreate), so work on them is ordered after
 * the plain cudaMemcpy/cudaMemset uploads on the legacy default stream.
 *
 * GEMM: every element of C must have been written (no NaN left); whole
 * sampled rows (first, last, two random) and whole sampled columns are
 * compared with loom_ref_gemm_element: per element |x - ref| <= rtol |ref| +
 * atol k (rtol: output rounding, 2^-8 bf16, 2^-10 fp16, 1e-5 fp32; atol =
 * 2e-6 per term of fp32 accumulation, inputs in [-1, 1)), and over the
 * sampled elements ||x - ref|| / ||ref|| < 1e-2 (bf16 output), 2e-3 (fp16),
 * 1e-4 (fp32); NaN never passes. Cases: both B layouts, bf16 and fp16
 * inputs, same-type and fp32 outputs, bias on and off, m in {1, 7, 127, 515},
 * n and k multiples of 8 but not of 16/64, 16-byte (not 256-byte) aligned
 * pointers, the bias fallback path, tuning, graph capture, and the
 * bf16->fp16 combination (correct or LOOM_ERR_UNSUPPORTED).
 *
 * Collectives: AllGather and AlltoAll bit for bit; ReduceScatter and
 * AllReduce (also in place) within W x eps(dtype) x sum of magnitudes;
 * bf16, fp16 and fp32; odd counts; on every GPU present, and on one rank.
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

#include "tests/common/test.h"
#include "baseline/baseline.h"
#include "core/tune.h"
#include "ref/ref.h"
#include "support/launch.h"
#include "testing/hooks.h"

#define B_CUDA(call) CHECK_CUDA_OR(call, goto out)
#define B_LOOM(call) CHECK_LOOM_OR(call, goto out)

#define LAUNCH_TIMEOUT_S 300

static int g_rounds_twice; /* set in the bias-fallback test: see the tolerance */

static const char *tname(loom_dtype_t t) {
  return t == LOOM_BF16 ? "bf16" : t == LOOM_FP16 ? "fp16" : t == LOOM_FP32 ? "fp32" : "?";
}

/* ---- GEMM ------------------------------------------------------------------ */

typedef struct gemm_arg {
  uint64_t seed;
} gemm_arg_t;

/* One GEMM on fresh data, checked. `align_off` shifts every device pointer
 * by that many bytes from its 256-aligned allocation. With `graph`, the GEMM
 * runs once eagerly (workspace set-up) and then from a captured graph. */
static void gemm_case(const loom_gemm_desc_t *d, uint64_t *seed, int align_off, int graph, cudaStream_t s) {
  const size_t ab = loom_dtype_size(d->ab_type), cs = loom_dtype_size(d->c_type);
  const size_t na = (size_t)(d->m * d->k), nb = (size_t)(d->k * d->n), nc = (size_t)(d->m * d->n);
  char what[200];
  snprintf(what, sizeof what, "m=%lld n=%lld k=%lld %s->%s %s bias=%d align+%d%s (seed %llu)", (long long)d->m,
           (long long)d->n, (long long)d->k, tname(d->ab_type), tname(d->c_type),
           d->b_layout == LOOM_B_KN ? "KN" : "NK", d->has_bias, align_off, graph ? " graph" : "",
           (unsigned long long)*seed);
  void *ha = malloc(na * ab), *hb = malloc(nb * ab), *hbias = malloc((size_t)d->n * cs), *hc = malloc(nc * cs);
  void *da = NULL, *db = NULL, *dbias = NULL, *dc = NULL;
  double *xs = NULL, *rs = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  if (!ha || !hb || !hbias || !hc) {
    loom_test_fail(__FILE__, __LINE__, "%s: host allocation failed", what);
    goto out;
  }
  loom_ref_fill_random(d->ab_type, ha, na, (*seed)++, 1.0);
  loom_ref_fill_random(d->ab_type, hb, nb, (*seed)++, 1.0);
  loom_ref_fill_random(d->c_type, hbias, (size_t)d->n, (*seed)++, 1.0);
  B_CUDA(cudaMalloc(&da, na * ab + 256));
  B_CUDA(cudaMalloc(&db, nb * ab + 256));
  B_CUDA(cudaMalloc(&dbias, (size_t)d->n * cs + 256));
  B_CUDA(cudaMalloc(&dc, nc * cs + 256));
  char *pa = (char *)da + align_off, *pb = (char *)db + align_off, *pbias = (char *)dbias + align_off;
  char *pc = (char *)dc + align_off;
  B_CUDA(cudaMemcpy(pa, ha, na * ab, cudaMemcpyHostToDevice));
  B_CUDA(cudaMemcpy(pb, hb, nb * ab, cudaMemcpyHostToDevice));
  B_CUDA(cudaMemcpy(pbias, hbias, (size_t)d->n * cs, cudaMemcpyHostToDevice));
  const void *bias_arg = d->has_bias ? pbias : NULL;
  if (graph) {
    B_LOOM(loom__base_gemm(d, pa, pb, pc, bias_arg, s)); /* first call on s: workspace, outside capture */
    B_CUDA(cudaStreamSynchronize(s));
    B_CUDA(cudaMemsetAsync(pc, 0xFF, nc * cs, s));
    B_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    loom_result_t r = loom__base_gemm(d, pa, pb, pc, bias_arg, s);
    cudaError_t ce = cudaStreamEndCapture(s, &g);
    if (r != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "%s: captured loom__base_gemm: %s", what, loom_last_error());
      goto out;
    }
    B_CUDA(ce);
    B_CUDA(cudaGraphInstantiate(&ge, g, 0));
    B_CUDA(cudaGraphLaunch(ge, s));
  } else {
    B_CUDA(cudaMemsetAsync(pc, 0xFF, nc * cs, s));
    B_LOOM(loom__base_gemm(d, pa, pb, pc, bias_arg, s));
  }
  B_CUDA(cudaStreamSynchronize(s));
  B_CUDA(cudaMemcpy(hc, pc, nc * cs, cudaMemcpyDeviceToHost));

  size_t unwritten = 0;
  for (size_t i = 0; i < nc; ++i) unwritten += isnan(loom_ref_load(d->c_type, hc, i));
  if (unwritten) loom_test_fail(__FILE__, __LINE__, "%s: %zu of %zu outputs not written (NaN)", what, unwritten, nc);

  /* sampled rows and columns */
  /* The bias fallback (beta = 1 on C preloaded with the bias) rounds twice:
   * cuBLASLt's epilogue may round the product A x B to C's type before
   * adding C, so its error is half an ulp of |A x B| plus half an ulp of the
   * result, and |A x B| = |ref - bias| can be far larger than |ref| when the
   * bias cancels it (seen on H200: 2.8 ulp of a small result). */
  const double rtol = d->c_type == LOOM_BF16 ? 1.0 / 256 : d->c_type == LOOM_FP16 ? 1.0 / 1024 : 1e-5;
  const double atol = 2e-6 * (double)d->k;
  const double rel_lim = d->c_type == LOOM_BF16 ? 1e-2 : d->c_type == LOOM_FP16 ? 2e-3 : 1e-4;
  int64_t rows[4] = {0, d->m - 1, (int64_t)(*seed % (uint64_t)d->m), (int64_t)((*seed / 7) % (uint64_t)d->m)};
  int64_t cols[4] = {0, d->n - 1, (int64_t)(*seed % (uint64_t)d->n), (int64_t)((*seed / 13) % (uint64_t)d->n)};
  const size_t cap = 4 * (size_t)d->n + 4 * (size_t)d->m;
  xs = (double *)malloc(cap * sizeof *xs), rs = (double *)malloc(cap * sizeof *rs);
  if (!xs || !rs) {
    loom_test_fail(__FILE__, __LINE__, "%s: host allocation failed", what);
    goto out;
  }
  size_t cnt = 0, bad = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (int si = 0; si < 4; ++si) {
      const int64_t len = pass == 0 ? d->n : d->m;
      for (int64_t j = 0; j < len; ++j) {
        int64_t row = pass == 0 ? rows[si] : j, col = pass == 0 ? j : cols[si];
        double ref = loom_ref_gemm_element(d, ha, hb, d->has_bias ? hbias : NULL, row, col);
        double x = loom_ref_load(d->c_type, hc, (size_t)(row * d->n + col));
        xs[cnt] = x, rs[cnt] = ref, cnt++;
        double scale = fabs(ref);
        if (g_rounds_twice && d->has_bias) scale += fabs(ref - loom_ref_load(d->c_type, hbias, (size_t)col));
        const double tol = rtol * scale + atol;
        if (!(fabs(x - ref) <= tol)) {
          if (bad < 3)
            loom_test_fail(__FILE__, __LINE__, "%s: C[%lld][%lld] = %.6g, reference %.6g (tolerance %.3g)", what,
                           (long long)row, (long long)col, x, ref, tol);
          bad++;
        }
      }
    }
  if (bad > 3) loom_test_fail(__FILE__, __LINE__, "%s: %zu of %zu sampled outputs wrong", what, bad, cnt);
  double rel = loom_ref_rel_error(xs, rs, cnt);
  if (!(rel < rel_lim))
    loom_test_fail(__FILE__, __LINE__, "%s: relative error %.3g over the sampled outputs (limit %.g)", what, rel,
                   rel_lim);
out:
  if (ge) cudaGraphExecDestroy(ge);
  if (g) cudaGraphDestroy(g);
  free(ha), free(hb), free(hbias), free(hc), free(xs), free(rs);
  cudaFree(da), cudaFree(db), cudaFree(dbias), cudaFree(dc);
}

static const int64_t g_shapes[][3] = {{1, 136, 264}, {7, 64, 1032}, {127, 264, 136}, {515, 1024, 520}};
static const loom_dtype_t g_types[][2] = {
    {LOOM_BF16, LOOM_BF16}, {LOOM_BF16, LOOM_FP32}, {LOOM_FP16, LOOM_FP16}, {LOOM_FP16, LOOM_FP32}};

static int rank_gemm_reference(loom_rank_ctx_t *ctx, void *arg) {
  uint64_t seed = ((gemm_arg_t *)arg)->seed;
  cudaStream_t s = NULL;
  B_CUDA(cudaStreamCreate(&s));
  for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; ++i)
    for (size_t t = 0; t < sizeof g_types / sizeof g_types[0]; ++t)
      for (int lay = 0; lay < 2; ++lay)
        for (int bias = 0; bias < 2; ++bias) {
          loom_gemm_desc_t d = LOOM_GEMM_DESC(g_shapes[i][0], g_shapes[i][1], g_shapes[i][2], g_types[t][0], g_types[t][1],
                                lay ? LOOM_B_NK : LOOM_B_KN, bias);
          gemm_case(&d, &seed, (i + t + (size_t)lay) % 2 ? 16 : 0, 0, s);
        }
  /* the cache: the same shape again on new buffers and data */
  {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(127, 264, 136, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
    gemm_case(&d, &seed, 0, 0, s);
    gemm_case(&d, &seed, 0, 0, s);
  }
out:
  if (s) cudaStreamDestroy(s);
  loom__base_gemm_release();
  return loom_test_failures;
}

LOOM_TEST(baseline_gemm_vs_reference) {
  if (loom_launch_gpu_count() < 1) {
    loom_test_skip("needs a GPU");
    return;
  }
  gemm_arg_t a = {loom_test_seed() + 1000};
  CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_gemm_reference, &a), 0);
}

static int rank_gemm_bias_fallback(loom_rank_ctx_t *ctx, void *arg) {
  uint64_t seed = ((gemm_arg_t *)arg)->seed;
  g_rounds_twice = 1;
  cudaStream_t s = NULL;
  B_CUDA(cudaStreamCreate(&s));
  loom__base_gemm_force_bias_fallback(1);
  for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; ++i)
    for (size_t t = 0; t < sizeof g_types / sizeof g_types[0]; t += 1)
      for (int lay = 0; lay < 2; ++lay) {
        loom_gemm_desc_t d = LOOM_GEMM_DESC(g_shapes[i][0], g_shapes[i][1], g_shapes[i][2], g_types[t][0], g_types[t][1],
                              lay ? LOOM_B_NK : LOOM_B_KN, 1);
        gemm_case(&d, &seed, 0, 0, s);
      }
  loom__base_gemm_force_bias_fallback(0);
out:
  if (s) cudaStreamDestroy(s);
  loom__base_gemm_release();
  return loom_test_failures;
}

LOOM_TEST(baseline_gemm_bias_fallback) {
  if (loom_launch_gpu_count() < 1) {
    loom_test_skip("needs a GPU");
    return;
  }
  gemm_arg_t a = {loom_test_seed() + 2000};
  CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_gemm_bias_fallback, &a), 0);
}

static int rank_gemm_tune_graph_mixed(loom_rank_ctx_t *ctx, void *arg) {
  uint64_t seed = ((gemm_arg_t *)arg)->seed;
  cudaStream_t s = NULL, s2 = NULL;
  void *a = NULL, *b = NULL, *c = NULL, *bias = NULL;
  B_CUDA(cudaStreamCreate(&s));
  B_CUDA(cudaStreamCreate(&s2));
  /* tuning: a time comes back, and the tuned choice computes the right result */
  {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(256, 512, 512, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 1);
    B_CUDA(cudaMalloc(&a, 256 * 512 * 2));
    B_CUDA(cudaMalloc(&b, 512 * 512 * 2));
    B_CUDA(cudaMalloc(&c, 256 * 512 * 2));
    B_CUDA(cudaMalloc(&bias, 512 * 2));
    B_CUDA(cudaMemset(a, 0x3c, 256 * 512 * 2)); /* bf16 0x3c3c ~ 0.0115: finite data for timing */
    B_CUDA(cudaMemset(b, 0x3c, 512 * 512 * 2));
    B_CUDA(cudaMemset(bias, 0x3c, 512 * 2));
    for (int lay = 0; lay < 2; ++lay) {
      d.b_layout = lay ? LOOM_B_NK : LOOM_B_KN;
      float ms = -1.0f;
      B_LOOM(loom__base_gemm_tune(&d, a, b, c, bias, 8, s, &ms));
      CHECK(ms > 0.0f && isfinite(ms));
      printf("    tuned %s 256x512x512 bf16+bias: %.1f us\n", lay ? "NK" : "KN", 1e3 * (double)ms);
      gemm_case(&d, &seed, 0, 0, s);  /* same shape and alignment: the tuned entry */
      gemm_case(&d, &seed, 0, 0, s2); /* a second stream: its own workspace */
    }
    /* the choice is recorded: a fresh cache entry (another plan, another
     * process with the same LOOM_TUNE_FILE) takes it, and computes right;
     * a damaged record is ignored (the heuristic's pick) */
    char path[] = "/tmp/loom-base-tune-XXXXXX";
    const int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    B_LOOM(loom__tune_save(path));
    loom__tune_clear();
    B_LOOM(loom__tune_load(path));
    FILE *f = fopen(path, "r");
    int records = 0;
    char line[512];
    while (f && fgets(line, sizeof line, f))
      if (!strncmp(line, "cublaslt v", 10) && strstr(line, " m256 n512 k512 bf16->bf16 ") && strstr(line, " = algo=")) ++records;
    if (f) fclose(f);
    unlink(path);
    CHECK_EQ_INT(records, 2); /* KN and NK */
    loom__base_gemm_release();
    loom__base_gemm_recorded_taken = 0;
    gemm_case(&d, &seed, 0, 0, s); /* NK (the layout tuned last): a new entry */
    CHECK_EQ_INT(loom__base_gemm_recorded_taken, 1);
    gemm_case(&d, &seed, 16, 0, s); /* other alignments: nothing recorded for them */
    CHECK_EQ_INT(loom__base_gemm_recorded_taken, 1);
    loom__tune_clear();
    B_LOOM(loom__base_gemm_tune(&d, a, b, c, bias, 8, s, NULL));
    loom__base_gemm_release();
    char key[LOOM_TUNE_TEXT_BYTES] = "";
    /* damage every recorded value: same keys, one word of garbage */
    {
      char p2[] = "/tmp/loom-base-tune-XXXXXX";
      const int fd2 = mkstemp(p2);
      CHECK(fd2 >= 0);
      if (fd2 >= 0) close(fd2);
      B_LOOM(loom__tune_save(p2));
      FILE *in = fopen(p2, "r");
      while (in && fgets(line, sizeof line, in))
        if (!strncmp(line, "cublaslt v", 10)) {
          char *eq = strstr(line, " = ");
          if (eq && (size_t)(eq - line) < sizeof key) memcpy(key, line, (size_t)(eq - line)), key[eq - line] = 0;
        }
      if (in) fclose(in);
      unlink(p2);
    }
    CHECK(key[0] != 0);
    char junk[LOOM_TUNE_TEXT_BYTES];
    const uint64_t ones[8] = {~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull, ~0ull};
    CHECK(loom__tune_format_words("algo", ones, 8, junk, sizeof junk));
    B_LOOM(loom__tune_put(key, junk));
    loom__base_gemm_recorded_taken = 0;
    gemm_case(&d, &seed, 0, 0, s); /* refused by cublasLtMatmulAlgoCheck: the heuristic's pick, still right */
    CHECK_EQ_INT(loom__base_gemm_recorded_taken, 0);
    B_LOOM(loom__tune_put(key, "algo=12"));
    loom__base_gemm_release();
    gemm_case(&d, &seed, 0, 0, s); /* malformed: ignored */
    CHECK_EQ_INT(loom__base_gemm_recorded_taken, 0);
    loom__tune_clear();
  }
  /* graph capture, epilogue bias and no bias */
  {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(127, 264, 136, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 1);
    gemm_case(&d, &seed, 0, 1, s);
    d.has_bias = 0, d.c_type = LOOM_FP32, d.b_layout = LOOM_B_KN;
    gemm_case(&d, &seed, 16, 1, s);
  }
  /* bf16 inputs, fp16 output: cuBLASLt may refuse; then UNSUPPORTED, in words */
  {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(64, 128, 128, LOOM_BF16, LOOM_FP16, LOOM_B_NK, 0);
    void *ma = NULL, *mb = NULL, *mc = NULL;
    loom_result_t r = LOOM_ERR_INTERNAL;
    if (cudaMalloc(&ma, 64 * 128 * 2) == cudaSuccess && cudaMalloc(&mb, 128 * 128 * 2) == cudaSuccess &&
        cudaMalloc(&mc, 64 * 128 * 2) == cudaSuccess)
      r = loom__base_gemm(&d, ma, mb, mc, NULL, s);
    cudaStreamSynchronize(s);
    cudaFree(ma), cudaFree(mb), cudaFree(mc);
    if (r == LOOM_ERR_UNSUPPORTED) {
      CHECK_MSG("no algorithm");
      CHECK_MSG("c_type=fp16");
      printf("    bf16 -> fp16: LOOM_ERR_UNSUPPORTED (%s)\n", loom_last_error());
    } else {
      CHECK_RESULT(r, LOOM_SUCCESS);
      printf("    bf16 -> fp16: supported by cuBLASLt here; checking it\n");
      gemm_case(&d, &seed, 0, 0, s);
    }
  }
  /* bad arguments are refused before any GPU work */
  {
    loom_gemm_desc_t d = LOOM_GEMM_DESC(0, 64, 128, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    CHECK_RESULT(loom__base_gemm(&d, a, b, c, NULL, s), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("m=0");
  }
out:
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(bias);
  if (s) cudaStreamDestroy(s);
  if (s2) cudaStreamDestroy(s2);
  loom__base_gemm_release();
  return loom_test_failures;
}

LOOM_TEST(baseline_gemm_tune_graph_mixed_types) {
  if (loom_launch_gpu_count() < 1) {
    loom_test_skip("needs a GPU");
    return;
  }
  gemm_arg_t a = {loom_test_seed() + 3000};
  CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_gemm_tune_graph_mixed, &a), 0);
}

/* ---- collectives ------------------------------------------------------------ */

enum { OP_AG, OP_RS, OP_AR, OP_AR_INPLACE, OP_A2A, OP_NUM };
static const char *const op_name[OP_NUM] = {"allgather", "reducescatter", "allreduce", "allreduce(in place)",
                                            "alltoall"};

/* Rank q's input for (op, dtype): n elements, reproducible on every rank. */
static void coll_input(uint64_t seed, int op, loom_dtype_t t, int q, void *buf, size_t n) {
  loom_ref_fill_random(t, buf, n, seed + 100000u * (uint64_t)op + 1000u * (uint64_t)t + (uint64_t)q, 1.0);
}

static double coll_eps(loom_dtype_t t) {
  return t == LOOM_BF16 ? 1.0 / 256 : t == LOOM_FP16 ? 1.0 / 1024 : 1.0 / (1 << 21);
}

/* Runs one collective on fresh inputs and checks every output element. */
static void coll_case(loom_rank_ctx_t *ctx, uint64_t seed, int op, loom_dtype_t t, size_t count, cudaStream_t s) {
  const int W = ctx->size, me = ctx->rank;
  const size_t es = loom_dtype_size(t);
  /* send and receive element counts on this rank */
  const size_t n_send = op == OP_AG ? count : (op == OP_AR || op == OP_AR_INPLACE) ? count : count * (size_t)W;
  const size_t n_recv = (op == OP_AG || op == OP_A2A) ? count * (size_t)W : count;
  char what[160];
  snprintf(what, sizeof what, "rank %d/%d %s %s count=%zu (seed %llu)", me, W, op_name[op], tname(t), count,
           (unsigned long long)seed);
  void **in = (void **)calloc((size_t)W, sizeof *in);
  void *hout = malloc(n_recv * es);
  void *dsend = NULL, *drecv = NULL;
  if (!in || !hout) {
    loom_test_fail(__FILE__, __LINE__, "%s: host allocation failed", what);
    goto out;
  }
  for (int q = 0; q < W; ++q) {
    in[q] = malloc(n_send * es);
    if (!in[q]) {
      loom_test_fail(__FILE__, __LINE__, "%s: host allocation failed", what);
      goto out;
    }
    coll_input(seed, op, t, q, in[q], n_send);
  }
  B_CUDA(cudaMalloc(&dsend, n_send * es));
  B_CUDA(cudaMemcpy(dsend, in[me], n_send * es, cudaMemcpyHostToDevice));
  if (op == OP_AR_INPLACE) {
    drecv = dsend;
  } else {
    B_CUDA(cudaMalloc(&drecv, n_recv * es));
    B_CUDA(cudaMemset(drecv, 0xFF, n_recv * es)); /* poison: NaN */
  }
  switch (op) {
    case OP_AG: B_LOOM(loom__base_allgather(ctx->nccl, dsend, drecv, count, t, s)); break;
    case OP_RS: B_LOOM(loom__base_reducescatter(ctx->nccl, dsend, drecv, count, t, s)); break;
    case OP_AR:
    case OP_AR_INPLACE: B_LOOM(loom__base_allreduce(ctx->nccl, dsend, drecv, count, t, s)); break;
    case OP_A2A: B_LOOM(loom__base_alltoall(ctx->nccl, dsend, drecv, count, t, s)); break;
  }
  B_CUDA(cudaStreamSynchronize(s));
  B_CUDA(cudaMemcpy(hout, drecv, n_recv * es, cudaMemcpyDeviceToHost));
  size_t bad = 0;
  for (size_t j = 0; j < n_recv; ++j) {
    int ok;
    double x = loom_ref_load(t, hout, j), ref = 0.0, tol = 0.0;
    if (op == OP_AG || op == OP_A2A) { /* copies: bit for bit */
      size_t q = j / count, e = j % count;
      size_t src = op == OP_AG ? e : (size_t)me * count + e; /* A2A: rank q's block `me` */
      ok = !memcmp((const char *)hout + j * es, (const char *)in[q] + src * es, es);
      ref = loom_ref_load(t, in[q], src);
    } else { /* sums */
      size_t src = op == OP_RS ? (size_t)me * count + j : j;
      double mag = 0.0;
      for (int q = 0; q < W; ++q) {
        double v = loom_ref_load(t, in[q], src);
        ref += v, mag += fabs(v);
      }
      tol = (double)W * coll_eps(t) * mag + 1e-30;
      ok = fabs(x - ref) <= tol; /* false for NaN */
    }
    if (!ok) {
      if (bad < 3)
        loom_test_fail(__FILE__, __LINE__, "%s: out[%zu] = %.8g, expected %.8g (tolerance %.3g)", what, j, x, ref,
                       tol);
      bad++;
    }
  }
  if (bad > 3) loom_test_fail(__FILE__, __LINE__, "%s: %zu of %zu outputs wrong", what, bad, n_recv);
out:
  for (int q = 0; in && q < W; ++q) free(in[q]);
  free(in), free(hout);
  cudaFree(dsend);
  if (drecv != dsend) cudaFree(drecv);
}

typedef struct coll_arg {
  uint64_t seed;
} coll_arg_t;

static int rank_collectives(loom_rank_ctx_t *ctx, void *arg) {
  uint64_t seed = ((coll_arg_t *)arg)->seed;
  cudaStream_t s = NULL;
  void *buf = NULL;
  B_CUDA(cudaStreamCreate(&s));
  const loom_dtype_t types[3] = {LOOM_BF16, LOOM_FP16, LOOM_FP32};
  const size_t counts[OP_NUM] = {1031, 1031, 4099, 4099, 257};
  for (int op = 0; op < OP_NUM; ++op)
    for (int t = 0; t < 3; ++t) coll_case(ctx, seed, op, types[t], counts[op], s);
  /* a larger, non-power-of-two bf16 case of each (several NCCL chunks) */
  for (int op = 0; op < OP_NUM; ++op) coll_case(ctx, seed + 77, op, LOOM_BF16, ((size_t)3 << 20) + 5, s);
  /* AlltoAll refuses to run in place, before NCCL sees it (every rank alike) */
  B_CUDA(cudaMalloc(&buf, 64 * (size_t)ctx->size * 2));
  CHECK_RESULT(loom__base_alltoall(ctx->nccl, buf, buf, 64, LOOM_BF16, s), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("cannot run in place");
  /* count 0 is a no-op that succeeds */
  CHECK_RESULT(loom__base_alltoall(ctx->nccl, buf, (char *)buf + 64, 0, LOOM_BF16, s), LOOM_SUCCESS);
  B_CUDA(cudaStreamSynchronize(s));
out:
  cudaFree(buf);
  if (s) cudaStreamDestroy(s);
  return loom_test_failures;
}

LOOM_TEST(baseline_collectives_all_gpus) {
  int n = loom_launch_gpu_count();
  if (n < 1) {
    loom_test_skip("needs a GPU");
    return;
  }
  coll_arg_t a = {loom_test_seed() + 4000};
  printf("    %d rank(s)\n", n);
  CHECK_EQ_INT(loom_launch(n, LAUNCH_TIMEOUT_S, rank_collectives, &a), 0);
}

LOOM_TEST(baseline_collectives_one_rank) {
  if (loom_launch_gpu_count() < 1) {
    loom_test_skip("needs a GPU");
    return;
  }
  coll_arg_t a = {loom_test_seed() + 5000};
  CHECK_EQ_INT(loom_launch(1, LAUNCH_TIMEOUT_S, rank_collectives, &a), 0);
}
