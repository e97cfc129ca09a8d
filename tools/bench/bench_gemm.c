/*
 * bench_gemm.c - `loom-bench gemm`: loom_gemm against cuBLAS and PyTorch on
 * the shape set (src/gemm/gemm_shapes.h: the linear layers of 23 model
 * families, TP 1/2/4/8, m = 1 .. 8192), side by side in one process on one
 * GPU (rank 0).
 *
 * Baselines, each timed in the same repetitions as loom:
 *   cublasLt   cuBLASLt, the fastest of its heuristic's top candidates
 *              (loom_bench_base_gemm_tune), bias in its epilogue;
 *   default    cublasGemmEx with CUBLAS_GEMM_DEFAULT and fp32 compute, what
 *              torch.matmul calls. It has no bias: for a bias GEMM its time
 *              is the product alone (a lower bound of matmul + bias).
 * and a third, outside, in the same job (unless --peer none):
 *   torch      bench/peers/gemm_torch.py, run first (its own process, before
 *              the rank), given this run's weights and m list: PyTorch's
 *              F.linear / torch.matmul / torch.addmm of the GEMM's exact
 *              variant, timed per call in a CUDA graph, its inputs rotated
 *              like loom's. Its time is peer(us) on the loom row of the same
 *              complete shape (m, n, k, dtype, layout, bias) and no other;
 *              vs_peer = torch / loom.
 * Every GEMM runs the set's variant (gemm_shapes.h: bf16 or fp16 drawn per
 * weight, B layout and bias per shape, C of the input type).
 *
 * Selection: every group by default: the fitting half, the held-out half
 * and the new families (gemm_shapes.h: never named by anything loom fitted),
 * each summarised on its own; --fitting, --held-out or --new-families for
 * one; --quick every fifth weight of each group at m = 1, 8, 64, 512, 1000,
 * 4096. --list prints the selection and an estimate of the run's length
 * (the peer's too) without touching the GPU. --check-only runs each GEMM
 * once through loom_gemm (whatever path LOOM_GEMM_PATH selects) and checks
 * it: the whole set's correctness in a minute or two (e.g.
 * LOOM_GEMM_PATH=sm80); no peer.
 *
 * Inputs, per weight (n, k): B in enough copies that consecutive
 * repetitions find none of them in L2 (loom_bench_rotation), A (as many rows
 * as the weight's largest m; a smaller m uses the leading rows) likewise,
 * random and never zero; one C. Repetition r runs on copy r of each. After
 * timing, loom's result (C poisoned first) is checked on sampled elements
 * against the fp64 reference (#wrong).
 *
 * Reported per GEMM: the three times (medians), cuBLASLt / loom and
 * default / loom, and for m <= 64 the fraction of the copy bandwidth
 * (device-to-device, read + write, measured at the start of the run) that
 * streaming the weight once in loom's time (and in cuBLASLt's) represents.
 * Per group and per band (m <= 64, 65..512, >= 1000): geometric mean and
 * minimum of both ratios, the HBM fraction at m <= 64, and the targets:
 * m >= 1000 none below 0.95 of cuBLASLt; m <= 512 each >= 0.95 of cuBLASLt
 * or >= 85% of the copy bandwidth; per group, torch / loom by band where
 * the peer ran. JSON: the results dir (loom_bench_write_json).
 */
#define _GNU_SOURCE /* RTLD_DEEPBIND */
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "ref/ref.h"

#define GEMM_SEED 0x6a09e667f3bcc909ull

/* The groups of the set (gemm_shapes.h's held_out): names in notes and
 * listings, letters in row labels. */
#define NGROUPS 3
static const char *const group_names[NGROUPS] = {"fitting", "held-out", "new families"};
static const char group_letters[NGROUPS] = {'F', 'H', 'N'};

typedef struct gemm_args {
  loom_bench_opts_t o;
  int candidates;
  int half;       /* the group: -1 every group (default), 0 --fitting, 1 --held-out, 2 --new-families */
  int tune;       /* --tune: loom_gemm_tune per shape before timing */
  int sm80;       /* --sm80: also the sm80 kernel with its heuristic */
  int list;       /* --list */
  int check_only; /* --check-only */
  int peer;       /* 0 with --peer none */
  const char *before; /* --before LIB */
  char peer_json[1200]; /* the PyTorch peer's results ("" if not run) */
  char peer_note[200];  /* why there is no peer column */
} gemm_args_t;

static int gemm_opt(void *ctx, int argc, char **argv, int *i) {
  gemm_args_t *a = (gemm_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --fitting         only the fitting half of the shape set\n"
           "  --held-out        only the held-out half (families the heuristic was not fitted on)\n"
           "  --new-families    only the new families (added after the model was fitted, never named by it)\n"
           "  --candidates N    cuBLASLt heuristic candidates timed (default 8; --quick 4)\n"
           "  --tune            tune loom_gemm per shape (loom_gemm_tune) before timing\n"
           "  --sm80            also time the portable sm80 kernel (its heuristic)\n"
           "  --check-only      run each GEMM once through loom_gemm and check it, no timing\n"
           "  --list            print the selected GEMMs and an estimate of the run time, then exit\n"
           "  --before LIB      also time loom_gemm of a previous build (its libloom.so), interleaved\n"
           "  --peer none       skip PyTorch (bench/peers/gemm_torch.py, run by default on this run's weights\n"
           "                    and m list; peer(us) only on the loom row of the same complete shape)\n");
    return 1;
  }
  if (!strcmp(s, "--fitting")) return a->half = 0, 1;
  if (!strcmp(s, "--held-out")) return a->half = 1, 1;
  if (!strcmp(s, "--new-families")) return a->half = 2, 1;
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--tune")) return a->tune = 1, 1;
  if (!strcmp(s, "--sm80")) return a->sm80 = 1, 1;
  if (!strcmp(s, "--list")) return a->list = 1, 1;
  if (!strcmp(s, "--check-only")) return a->check_only = 1, 1;
  if (!strcmp(s, "--before") && *i + 1 < argc) return a->before = argv[++*i], 1;
  if (!strcmp(s, "--candidates") && *i + 1 < argc) {
    a->candidates = atoi(argv[++*i]);
    return a->candidates >= 1 ? 1 : -1;
  }
  (void)argc;
  return 0;
}

/* ---- the selection -------------------------------------------------------- */

static const int64_t quick_ms[] = {1, 8, 64, 512, 1000, 4096};

#define MAX_WEIGHTS 512 /* more than the whole set's (276) */

/* The weights of the selection (up to max), group after group in table
 * order; --quick: every fifth of each group. */
static int select_weights(const gemm_args_t *a, loom_gemm_weight_t *w, int max) {
  loom_gemm_weight_t all[MAX_WEIGHTS];
  int c = 0;
  for (int g = 0; g < NGROUPS; ++g) {
    if (a->half >= 0 && a->half != g) continue;
    const int n = loom_bench_gemm_weights(g, all, MAX_WEIGHTS);
    for (int i = 0; i < n && i < MAX_WEIGHTS && c < max; ++i)
      if (!a->o.quick || i % 5 == 0) w[c++] = all[i];
  }
  return c;
}

static int select_ms(const gemm_args_t *a, const int64_t **ms) {
  *ms = a->o.quick ? quick_ms : loom_gemm_shape_ms;
  return a->o.quick ? (int)(sizeof quick_ms / sizeof quick_ms[0]) : LOOM_GEMM_SHAPE_NMS;
}

/* Estimated seconds of one GEMM on an H100/H200-class GPU (700 TFLOP/s,
 * 3.5 TB/s, 5 us per launch) and of the whole run. */
static double est_gemm_s(int64_t m, int64_t n, int64_t k) {
  const double c = 2.0 * m * n * k / 700e12, b = 2.0 * (double)(n * k + m * k + m * n) / 3.5e12;
  return (c > b ? c : b) + 5e-6;
}

/* Estimated seconds of the peer (gemm_torch.py) on one GEMM: its calls
 * (a rough eager timing, the graph's warm-up and capture, then warm-up and
 * timed replays of G calls, G as it picks them: about 1 ms per replay, at
 * most 16) and its Python time per GEMM (capture, a barrier per
 * repetition: about 0.09 s, measured on an H200 with torch 2.11). */
static double est_peer_s(const gemm_args_t *a, int64_t m, int64_t n, int64_t k) {
  const double t = est_gemm_s(m, n, k);
  double g = ceil(1e-3 / t);
  if (g > 16) g = 16;
  return (4 + 3 + g + (a->o.warmup + a->o.reps) * g) * t + 0.09;
}

static int peer_runs(const gemm_args_t *a) { return a->peer && !a->check_only; }

static void list_selection(const gemm_args_t *a) {
  loom_gemm_weight_t w[MAX_WEIGHTS];
  const int nw = select_weights(a, w, MAX_WEIGHTS);
  const int64_t *ms;
  const int nm = select_ms(a, &ms);
  const int impls = 3 + a->sm80;
  const int launches = a->check_only ? 2 : a->candidates * 3 + impls * (a->o.warmup + a->o.reps) + 2;
  double total = 0, peer = 15; /* the peer: torch's import and NCCL's start */
  int gemms = 0;
  for (int i = 0; i < nw; ++i) {
    printf("%-18s %-8s TP=%d %-12s n=%6lld k=%6lld %s\n", loom_gemm_families[w[i].family].name, w[i].layer, w[i].tp,
           group_names[w[i].held_out], (long long)w[i].n, (long long)w[i].k,
           loom_bench_gemm_shape_variant(1, w[i].n, w[i].k).ab_type == LOOM_FP16 ? "fp16" : "bf16");
    total += 0.05, peer += 0.05; /* inputs: host random fill and uploads */
    for (int j = 0; j < nm; ++j, ++gemms) {
      total += launches * est_gemm_s(ms[j], w[i].n, w[i].k) + 0.004;
      peer += est_peer_s(a, ms[j], w[i].n, w[i].k);
    }
  }
  printf("# %d weights x %d m = %d GEMMs, about %.0f s on one H100/H200 (%d launches per GEMM)\n", nw, nm, gemms,
         total, launches);
  if (peer_runs(a))
    printf("# peer (bench/peers/gemm_torch.py, before the rank): about %.0f s more%s\n", peer,
           peer > 900 ? "; over loom-bench's 900 s bound on a peer: it would be stopped (--quick, one group, or "
                        "--peer none)"
                      : "");
}

/* ---- inputs of one weight ------------------------------------------------- */

typedef struct wbufs {
  loom_dtype_t t;
  int64_t max_m, n, k;
  int na, nb;
  void **a, **b; /* [na], [nb] copies */
  void *c, *bias;
  void *ha, *hb, *hbias; /* host fill periods (the checks rebuild elements from them) */
  size_t pa, pb;
} wbufs_t;

static void wbufs_free(wbufs_t *w) {
  for (int i = 0; w->a && i < w->na; ++i) cudaFree(w->a[i]);
  for (int i = 0; w->b && i < w->nb; ++i) cudaFree(w->b[i]);
  free(w->a), free(w->b);
  cudaFree(w->c), cudaFree(w->bias);
  free(w->ha), free(w->hb), free(w->hbias);
  memset(w, 0, sizeof *w);
}

/* Device buffer of n elements of t: the host period p (pn elements),
 * uploaded and tiled. */
static loom_result_t fill_tiled(void *dev, loom_dtype_t t, size_t n, const void *p, size_t pn) {
  const size_t es = loom_dtype_size(t);
  LOOM_BENCH_CUDA(cudaMemcpy(dev, p, pn * es, cudaMemcpyHostToDevice));
  for (size_t done = pn; done < n;) {
    const size_t cnt = done < n - done ? done : n - done;
    LOOM_BENCH_CUDA(cudaMemcpy((char *)dev + done * es, dev, cnt * es, cudaMemcpyDeviceToDevice));
    done += cnt;
  }
  return LOOM_SUCCESS;
}

static loom_result_t wbufs_alloc(wbufs_t *w, loom_dtype_t t, int64_t max_m, int64_t n, int64_t k, uint64_t seed) {
  memset(w, 0, sizeof *w);
  w->t = t, w->max_m = max_m, w->n = n, w->k = k;
  const size_t es = loom_dtype_size(t);
  const size_t ea = (size_t)(max_m * k), eb = (size_t)(n * k);
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) free_b = (size_t)8 << 30;
  const size_t c_bytes = (size_t)(max_m * n) * es;
  size_t budget = free_b / 2 > c_bytes ? free_b / 2 - c_bytes : 0;
  if (budget > ((size_t)24 << 30)) budget = (size_t)24 << 30;
  w->nb = loom_bench_rotation(eb * es, budget / 2);
  w->na = loom_bench_rotation(ea * es, budget / 2);
  w->a = (void **)calloc((size_t)w->na, sizeof(void *));
  w->b = (void **)calloc((size_t)w->nb, sizeof(void *));
  w->pa = loom_bench_fill_period(ea), w->pb = loom_bench_fill_period(eb);
  w->ha = malloc(w->pa * es), w->hb = malloc(w->pb * es), w->hbias = malloc((size_t)n * es);
  if (!w->a || !w->b || !w->ha || !w->hb || !w->hbias)
    return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom-bench gemm: host allocation failed");
  loom_ref_fill_random(t, w->ha, w->pa, seed + 1, 1.0);
  loom_ref_fill_random(t, w->hb, w->pb, seed + 2, 1.0);
  loom_ref_fill_random(t, w->hbias, (size_t)n, seed + 3, 1.0);
  for (int i = 0; i < w->na; ++i) {
    LOOM_BENCH_CUDA(cudaMalloc(&w->a[i], ea * es));
    if (i == 0) LOOM_BENCH_TRY(fill_tiled(w->a[0], t, ea, w->ha, w->pa));
    else LOOM_BENCH_CUDA(cudaMemcpy(w->a[i], w->a[0], ea * es, cudaMemcpyDeviceToDevice));
  }
  for (int i = 0; i < w->nb; ++i) {
    LOOM_BENCH_CUDA(cudaMalloc(&w->b[i], eb * es));
    if (i == 0) LOOM_BENCH_TRY(fill_tiled(w->b[0], t, eb, w->hb, w->pb));
    else LOOM_BENCH_CUDA(cudaMemcpy(w->b[i], w->b[0], eb * es, cudaMemcpyDeviceToDevice));
  }
  LOOM_BENCH_CUDA(cudaMalloc(&w->c, c_bytes));
  LOOM_BENCH_CUDA(cudaMalloc(&w->bias, (size_t)n * es));
  LOOM_BENCH_CUDA(cudaMemcpy(w->bias, w->hbias, (size_t)n * es, cudaMemcpyHostToDevice));
  LOOM_BENCH_CUDA(cudaDeviceSynchronize());
  return LOOM_SUCCESS;
}

/* Sampled elements of C (desc d on the buffers of w) out of bound against
 * the fp64 reference; -1 if the check could not run. */
static int64_t check_c(const wbufs_t *w, const loom_gemm_desc_t *d, int samples) {
  const size_t es = loom_dtype_size(d->ab_type), ec = loom_dtype_size(d->c_type);
  char *arow = (char *)malloc((size_t)d->k * es), *bcol = (char *)malloc((size_t)d->k * es);
  int64_t wrong = -1;
  if (!arow || !bcol) goto out;
  const double rtol = d->c_type == LOOM_BF16 ? 1.0 / 128 : d->c_type == LOOM_FP16 ? 1.0 / 1024 : 1e-5;
  wrong = 0;
  uint64_t z = 0x9e3779b97f4a7c15ull ^ (uint64_t)d->m;
  for (int s = 0; s < samples; ++s) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t row = s == 0 ? 0 : s == 1 ? d->m - 1 : (int64_t)((z >> 33) % (uint64_t)d->m);
    const int64_t col = s == 0 ? 0 : s == 1 ? d->n - 1 : (int64_t)((z >> 13) % (uint64_t)d->n);
    for (int64_t kk = 0; kk < d->k; ++kk) {
      const size_t ai = (size_t)(row * d->k + kk) % w->pa;
      const size_t bi = (d->b_layout == LOOM_B_KN ? (size_t)(kk * d->n + col) : (size_t)(col * d->k + kk)) % w->pb;
      memcpy(arow + (size_t)kk * es, (const char *)w->ha + ai * es, es);
      memcpy(bcol + (size_t)kk * es, (const char *)w->hb + bi * es, es);
    }
    loom_gemm_desc_t one = *d;
    one.m = 1, one.n = 1, one.has_bias = 0, one.b_layout = LOOM_B_KN;
    double ref = loom_ref_gemm_element(&one, arow, bcol, NULL, 0, 0);
    if (d->has_bias) ref += loom_ref_load(d->c_type, w->hbias, (size_t)col);
    unsigned char got[4];
    if (cudaMemcpy(got, (const char *)w->c + (size_t)(row * d->n + col) * ec, ec, cudaMemcpyDeviceToHost) !=
        cudaSuccess) {
      wrong = -1;
      goto out;
    }
    const double v = loom_ref_load(d->c_type, got, 0);
    if (!(fabs(v - ref) <= rtol * fabs(ref) + 1e-4 * sqrt((double)d->k))) wrong++;
  }
out:
  free(arow), free(bcol);
  return wrong;
}

/* A row's note (printf format; cut at the note's size). */
static void set_note(loom_bench_row_t *row, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_note(loom_bench_row_t *row, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(row->note, sizeof row->note, fmt, ap);
  va_end(ap);
}

/* ---- the implementations ---------------------------------------------------- */

enum { IMPL_LT = 0, IMPL_DEFAULT = 1, IMPL_LOOM = 2, IMPL_SM80 = 3, IMPL_BEFORE = 4, NIMPL = 5 };
static const char *const impl_names[NIMPL] = {"cublasLt", "cublas-default", "loom", "loom-sm80", "loom-before"};

/* loom_gemm of the previous build (--before: its libloom.so, dlopen'ed with
 * its own copy of every internal symbol), NULL without --before. */
typedef loom_result_t (*gemm_fn_t)(const loom_gemm_desc_t *, const void *, const void *, void *, const void *,
                                   cudaStream_t);
static gemm_fn_t g_before_gemm;

typedef struct grun {
  loom_gemm_desc_t d;
  const wbufs_t *w;
  int impl;
  cublasHandle_t h;
} grun_t;

static loom_result_t gemm_default(const grun_t *g, const void *a, const void *b, void *c, cudaStream_t s) {
  const loom_gemm_desc_t *d = &g->d;
  const cudaDataType_t t = d->ab_type == LOOM_FP16 ? CUDA_R_16F : CUDA_R_16BF;
  const cudaDataType_t ct = d->c_type == LOOM_FP32 ? CUDA_R_32F : d->c_type == LOOM_FP16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f, beta = 0.0f;
  /* column-major view: C^T [n, m] = B^T A^T (as src/baseline/baseline_gemm.c) */
  const int nk = d->b_layout == LOOM_B_NK;
  if (cublasSetStream(g->h, s) != CUBLAS_STATUS_SUCCESS)
    return loom_bench_fail(LOOM_ERR_CUDA, "loom-bench gemm: cublasSetStream failed");
  const cublasStatus_t st =
      cublasGemmEx(g->h, nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, (int)d->n, (int)d->m, (int)d->k, &alpha, b, t,
                   nk ? (int)d->k : (int)d->n, a, t, (int)d->k, &beta, c, ct, (int)d->n, CUBLAS_COMPUTE_32F,
                   CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return loom_bench_fail(LOOM_ERR_CUDA, "loom-bench gemm: cublasGemmEx failed: status %d", (int)st);
  return LOOM_SUCCESS;
}

static loom_result_t grun_op(void *arg, int iter, cudaStream_t s) {
  grun_t *g = (grun_t *)arg;
  const void *a = g->w->a[iter % g->w->na], *b = g->w->b[iter % g->w->nb];
  void *c = g->w->c;
  const void *bias = g->d.has_bias ? g->w->bias : NULL;
  switch (g->impl) {
    case IMPL_LT: return loom_bench_base_gemm(&g->d, a, b, c, bias, s);
    case IMPL_DEFAULT: return gemm_default(g, a, b, c, s);
    case IMPL_SM80: return loom_bench_gemm_sm80(&g->d, a, b, c, bias, NULL, s);
    case IMPL_BEFORE: return g_before_gemm(&g->d, a, b, c, bias, s);
    default: return loom_gemm(&g->d, a, b, c, bias, s);
  }
}

/* ---- summaries ---------------------------------------------------------------- */

/* Per group (0 fitting, 1 held-out, 2 new families) and band (0: m <= 64,
 * 1: 65..512, 2: >= 1000). */
typedef struct band {
  int n;
  double log_lt, min_lt, log_def, min_def;
  double log_hbm, min_hbm, log_hbm_lt; /* band 0 only */
  int n_before;
  double log_before, min_before;       /* previous build's time / loom time (--before) */
  int n_peer;
  double log_peer, min_peer;           /* torch's time / loom time, where paired */
  int hbm85, ok;                       /* m <= 512: meeting the target; m >= 1000: >= 0.95 of cuBLASLt */
} band_t;

static void band_add(band_t *b, double r_lt, double r_def, double hbm, double hbm_lt, int ok) {
  if (b->n == 0) b->min_lt = b->min_def = b->min_hbm = 1e9;
  b->n++;
  b->log_lt += log(r_lt), b->log_def += log(r_def);
  if (r_lt < b->min_lt) b->min_lt = r_lt;
  if (r_def < b->min_def) b->min_def = r_def;
  if (hbm > 0) {
    b->log_hbm += log(hbm), b->log_hbm_lt += log(hbm_lt);
    if (hbm < b->min_hbm) b->min_hbm = hbm;
    b->hbm85 += hbm >= 0.85;
  }
  b->ok += ok;
}

/* Device-to-device copy bandwidth (bytes read + written per second). */
static double copy_bandwidth(cudaStream_t s) {
  const size_t bytes = (size_t)512 << 20;
  void *x = NULL, *y = NULL;
  double bps = 4.0e12; /* fallback: about an H200's */
  cudaEvent_t e0 = NULL, e1 = NULL;
  if (cudaMalloc(&x, bytes) != cudaSuccess || cudaMalloc(&y, bytes) != cudaSuccess) goto out;
  if (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) goto out;
  float best = 1e30f;
  for (int i = 0; i < 10; ++i) {
    float ms = 0;
    cudaEventRecord(e0, s);
    cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s);
    cudaEventRecord(e1, s);
    if (cudaEventSynchronize(e1) == cudaSuccess && cudaEventElapsedTime(&ms, e0, e1) == cudaSuccess && i > 0 &&
        ms < best)
      best = ms;
  }
  if (best < 1e29f) bps = 2.0 * (double)bytes / (best * 1e-3);
out:
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  cudaFree(x);
  cudaFree(y);
  (void)cudaGetLastError();
  return bps;
}

typedef struct run_state {
  gemm_args_t *a;
  cudaStream_t s;
  cublasHandle_t h;
  loom_bench_table_t t;
  band_t bands[NGROUPS][3];
  double hbm_bps;
  int gemms, failures;
} run_state_t;

/* The complete shape of a loom row for pairing with gemm_torch.py's rows
 * (its shape_fields: op, m, n, k, dtype, layout, bias). */
static void gemm_pair_shape(const loom_gemm_desc_t *d, loom_bench_shape_t *ps) {
  loom_bench_shape_init(ps);
  loom_bench_shape_str(ps, "op", "gemm");
  loom_bench_shape_int(ps, "m", d->m);
  loom_bench_shape_int(ps, "n", d->n);
  loom_bench_shape_int(ps, "k", d->k);
  loom_bench_shape_str(ps, "dtype", loom_bench_dtype_name(d->ab_type));
  loom_bench_shape_str(ps, "layout", d->b_layout == LOOM_B_NK ? "NK" : "KN");
  loom_bench_shape_int(ps, "bias", d->has_bias);
}

/* One GEMM: rows, timing side by side, check, summary. */
static void gemm_one(run_state_t *st, const loom_gemm_weight_t *x, wbufs_t *w, int64_t m) {
  gemm_args_t *a = st->a;
  const loom_gemm_desc_t d = loom_bench_gemm_shape_variant(m, x->n, x->k);
  char shape[64], label[48], cfg[96];
  snprintf(shape, sizeof shape, "%lldx%lldx%lld %s%s", (long long)m, (long long)x->n, (long long)x->k,
           d.b_layout == LOOM_B_NK ? "NK" : "KN", d.has_bias ? "+b" : "");
  snprintf(label, sizeof label, "%c %s/%s/tp%d", group_letters[x->held_out], loom_gemm_families[x->family].name,
           x->layer, x->tp);
  loom_bench_gemm_config_text(&d, cfg, sizeof cfg);
  /* positions: cuBLASLt, cublasGemmEx default, loom, then the sm80 kernel
   * and the previous build where asked for */
  int order[NIMPL] = {IMPL_LT, IMPL_DEFAULT, IMPL_LOOM, 0, 0}, nimpl = 3, p_sm80 = -1, p_before = -1;
  if (a->sm80) p_sm80 = nimpl, order[nimpl++] = IMPL_SM80;
  if (g_before_gemm) p_before = nimpl, order[nimpl++] = IMPL_BEFORE;
  if (a->check_only) nimpl = 1;
  grun_t g[NIMPL];
  loom_bench_row_t *rows[NIMPL] = {NULL, NULL, NULL, NULL, NULL};
  for (int i = 0; i < nimpl; ++i) {
    const int impl = a->check_only ? IMPL_LOOM : order[i];
    g[i].d = d, g[i].w = w, g[i].impl = impl, g[i].h = st->h;
    loom_bench_row_t *row = loom_bench_add(&st->t);
    if (!row) {
      st->failures++;
      return;
    }
    rows[i] = row;
    snprintf(row->op, sizeof row->op, "gemm");
    snprintf(row->impl, sizeof row->impl, "%s", impl_names[impl]);
    snprintf(row->shape, sizeof row->shape, "%s", shape);
    snprintf(row->dtype, sizeof row->dtype, "%s", d.ab_type == LOOM_FP16 ? "fp16" : "bf16");
    row->m = d.m, row->n = d.n, row->k = d.k;
    row->flops = 2.0 * (double)d.m * (double)d.n * (double)d.k;
  }
  /* the peer's time of this exact GEMM, on loom's row */
  int paired = 0;
  if (!a->check_only && a->peer_json[0]) {
    loom_bench_shape_t ps;
    gemm_pair_shape(&d, &ps);
    paired = loom_bench_row_pair(rows[2], a->peer_json, "matmul", &ps, 0);
  }
  loom_result_t r = LOOM_SUCCESS;
  loom_bench_time_t tm[NIMPL];
  double us[NIMPL] = {NAN, NAN, NAN, NAN, NAN};
  if (!a->check_only) {
    r = loom_bench_base_gemm_tune(&d, w->a[0], w->b[0], w->c, d.has_bias ? w->bias : NULL, a->candidates, st->s,
                                  NULL);
    if (r == LOOM_SUCCESS && a->tune) r = loom_gemm_tune(&d, w->a[0], w->b[0], w->c, d.has_bias ? w->bias : NULL, st->s);
    if (r == LOOM_SUCCESS && a->tune) loom_bench_gemm_config_text(&d, cfg, sizeof cfg);
    loom_bench_op_fn ops[NIMPL] = {grun_op, grun_op, grun_op, grun_op, grun_op};
    void *args[NIMPL] = {&g[0], &g[1], &g[2], &g[3], &g[4]};
    if (r == LOOM_SUCCESS) r = loom_bench_time_side_by_side(st->s, a->o.warmup, a->o.reps, nimpl, ops, args, tm);
    if (r == LOOM_SUCCESS)
      for (int i = 0; i < nimpl; ++i) {
        us[i] = tm[i].median_us;
        rows[i]->gemm_us = tm[i].median_us, rows[i]->min_us = tm[i].min_us, rows[i]->max_us = tm[i].max_us;
        rows[i]->host_us = tm[i].host_us; /* the call's issue time: where it exceeds gemm_us the GPU waited */
      }
  }
  /* loom's result (and the sm80 kernel's): C poisoned, one run, checked */
  if (r == LOOM_SUCCESS && a->o.check)
    for (int i = 0; i < nimpl; ++i) {
      if (g[i].impl != IMPL_LOOM && g[i].impl != IMPL_SM80) continue;
      loom_result_t cr = cudaMemsetAsync(w->c, 0xFF, (size_t)(d.m * d.n) * loom_dtype_size(d.c_type), st->s) == cudaSuccess
                             ? grun_op(&g[i], 0, st->s)
                             : LOOM_ERR_CUDA;
      if (cr == LOOM_SUCCESS && cudaStreamSynchronize(st->s) != cudaSuccess) cr = LOOM_ERR_CUDA;
      rows[i]->wrong = cr == LOOM_SUCCESS ? check_c(w, &d, a->o.quick ? 12 : 24) : -1;
      if (rows[i]->wrong != 0) st->failures++;
      if (cr != LOOM_SUCCESS) r = cr;
    }
  if (r != LOOM_SUCCESS) {
    fprintf(stderr, "loom-bench gemm: %s %s: %s\n", label, shape, loom_last_error());
    for (int i = 0; i < nimpl; ++i) set_note(rows[i], "error: %s", loom_result_string(r));
    st->failures++;
    (void)cudaStreamSynchronize(st->s);
    (void)cudaGetLastError();
  } else if (a->check_only) {
    set_note(rows[0], "%s, %s", label, cfg);
    printf("# gemm %-26s %-32s #wrong %lld  %s\n", shape, label, (long long)rows[0]->wrong, cfg);
  } else {
    const double wbytes = (double)d.n * (double)d.k * (double)loom_dtype_size(d.ab_type);
    const double r_lt = us[0] / us[2], r_def = us[1] / us[2];
    const double hbm = wbytes / (us[2] * 1e-6) / st->hbm_bps, hbm_lt = wbytes / (us[0] * 1e-6) / st->hbm_bps;
    const int band = m <= 64 ? 0 : m <= 512 ? 1 : 2;
    const int ok = band == 2 ? r_lt >= 0.95 : (r_lt >= 0.95 || hbm >= 0.85);
    band_add(&st->bands[x->held_out][band], r_lt, r_def, band == 0 ? hbm : 0, hbm_lt, ok);
    if (paired) {
      band_t *bp = &st->bands[x->held_out][band];
      const double rp = rows[2]->peer_us / us[2];
      if (bp->n_peer == 0) bp->min_peer = 1e9;
      bp->n_peer++, bp->log_peer += log(rp);
      if (rp < bp->min_peer) bp->min_peer = rp;
    }
    if (m <= 64)
      set_note(rows[2], "%s x%.3f Lt x%.3f def HBM %.0f%% (Lt %.0f%%) %s", label, r_lt,
               r_def, 100 * hbm, 100 * hbm_lt, cfg);
    else
      set_note(rows[2], "%s x%.3f Lt x%.3f def %s", label, r_lt, r_def, cfg);
    set_note(rows[0], "%s, %d+%d copies of A+B", label, w->na, w->nb);
    set_note(rows[1], "%s%s", label, d.has_bias ? ", no bias (matmul alone)" : "");
    if (p_sm80 >= 0) set_note(rows[p_sm80], "%s x%.3f Lt", label, us[0] / us[p_sm80]);
    if (p_before >= 0) {
      rows[2]->before_us = us[p_before];
      set_note(rows[p_before], "%s (previous build)", label);
      band_t *bb = &st->bands[x->held_out][band];
      const double rb = us[p_before] / us[2];
      if (bb->n_before == 0) bb->min_before = 1e9;
      bb->n_before++, bb->log_before += log(rb);
      if (rb < bb->min_before) bb->min_before = rb;
    }
    printf("# gemm %-26s %-32s Lt %9.1f  def %9.1f  loom %9.1f us  x%.3f Lt  x%.3f def", shape, label, us[0], us[1],
           us[2], r_lt, r_def);
    if (m <= 64) printf("  HBM %3.0f%% (Lt %3.0f%%)", 100 * hbm, 100 * hbm_lt);
    if (p_sm80 >= 0) printf("  sm80 %9.1f us", us[p_sm80]);
    if (p_before >= 0) printf("  before %9.1f us x%.3f", us[p_before], us[p_before] / us[2]);
    if (paired) printf("  torch %9.1f us x%.3f", rows[2]->peer_us, rows[2]->peer_us / us[2]);
    printf("  %s%s\n", cfg, ok ? "" : "  MISS");
  }
  for (int i = 0; i < nimpl; ++i) loom_bench_row_finish(rows[i]);
  fflush(stdout);
  st->gemms++;
}

static void band_notes(run_state_t *st, int half) {
  static const char *const names[3] = {"m <= 64", "m 65..512", "m >= 1000"};
  const char *hn = group_names[half];
  for (int b = 0; b < 3; ++b) {
    const band_t *x = &st->bands[half][b];
    if (!x->n) continue;
    if (b == 0)
      loom_bench_note(&st->t,
                      "%s %s: %d GEMMs; vs cuBLASLt geomean %.3f min %.3f; vs default %.3f min %.3f; HBM geomean %.0f%% "
                      "(cuBLASLt %.0f%%) min %.0f%%, %d >= 85%%; target met %d",
                      hn, names[b], x->n, exp(x->log_lt / x->n), x->min_lt, exp(x->log_def / x->n), x->min_def,
                      100 * exp(x->log_hbm / x->n), 100 * exp(x->log_hbm_lt / x->n), 100 * x->min_hbm, x->hbm85, x->ok);
    else
      loom_bench_note(&st->t, "%s %s: %d GEMMs; vs cuBLASLt geomean %.3f min %.3f; vs default %.3f min %.3f; %s %d of %d",
                      hn, names[b], x->n, exp(x->log_lt / x->n), x->min_lt, exp(x->log_def / x->n), x->min_def,
                      b == 2 ? ">= 0.95 of cuBLASLt:" : "target met:", x->ok, x->n);
    if (x->n_before)
      loom_bench_note(&st->t, "%s %s: previous build / now geomean %.3f min %.3f over %d GEMMs (> 1: faster now)", hn,
                      names[b], exp(x->log_before / x->n_before), x->min_before, x->n_before);
  }
  /* the peer: one line per group, every band */
  char line[192];
  snprintf(line, sizeof line, "%s: torch (CUDA graph) / loom geomean", hn);
  int any = 0;
  for (int b = 0; b < 3; ++b) {
    const band_t *x = &st->bands[half][b];
    if (!x->n_peer) continue;
    (void)loom_bench_appendf(line, sizeof line, "%s %s %.3f min %.3f (%d)", any ? ";" : "", names[b],
                             exp(x->log_peer / x->n_peer), x->min_peer, x->n_peer);
    any = 1;
  }
  if (any) loom_bench_note(&st->t, "%s", line);
}

static int gemm_rank(loom_rank_ctx_t *ctx, void *arg) {
  gemm_args_t *a = (gemm_args_t *)arg;
  if (ctx->rank != 0) return 0;
  run_state_t st;
  memset(&st, 0, sizeof st);
  st.a = a;
  if (cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking) != cudaSuccess ||
      cublasCreate(&st.h) != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "loom-bench gemm: setup failed: %s\n", loom_last_error());
    return 1;
  }
  if (a->before) {
    /* its own copy of every internal symbol (RTLD_DEEPBIND), the process's
     * CUDA runtime */
    void *dl = dlopen(a->before, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (dl) *(void **)&g_before_gemm = dlsym(dl, "loom_gemm");
    if (!g_before_gemm) {
      fprintf(stderr, "loom-bench gemm: --before %s: %s\n", a->before, dl ? "no loom_gemm in it" : dlerror());
      return 1;
    }
  }
  st.hbm_bps = copy_bandwidth(st.s);
  struct cudaDeviceProp p;
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    printf("# loom-bench gemm: %s (%d SMs, compute capability %d.%d), copy bandwidth %.0f GB/s\n", p.name,
           p.multiProcessorCount, p.major, p.minor, st.hbm_bps / 1e9);
  loom_gemm_weight_t w[MAX_WEIGHTS];
  const int nw = select_weights(a, w, MAX_WEIGHTS);
  const int64_t *ms;
  const int nm = select_ms(a, &ms);
  for (int i = 0; i < nw; ++i) {
    wbufs_t b;
    const loom_dtype_t t = loom_bench_gemm_shape_variant(1, w[i].n, w[i].k).ab_type;
    loom_result_t r = wbufs_alloc(&b, t, ms[nm - 1], w[i].n, w[i].k, GEMM_SEED + 7919u * (uint64_t)i);
    if (r != LOOM_SUCCESS) {
      fprintf(stderr, "loom-bench gemm: inputs of n=%lld k=%lld: %s\n", (long long)w[i].n, (long long)w[i].k,
              loom_last_error());
      st.failures++;
    } else {
      for (int j = 0; j < nm; ++j) gemm_one(&st, &w[i], &b, ms[j]);
    }
    wbufs_free(&b);
    loom_bench_base_gemm_release(); /* cuBLASLt's per-shape cache */
  }
  loom_bench_note(&st.t, "copy bandwidth %.0f GB/s (device-to-device, read + write); HBM %% = weight bytes / loom time / it",
                  st.hbm_bps / 1e9);
  for (int h = 0; h < NGROUPS; ++h) band_notes(&st, h);
  loom_bench_note(&st.t, "cublasLt: best of %d heuristic candidates, bias in its epilogue; cublas-default: cublasGemmEx, "
                  "CUBLAS_GEMM_DEFAULT, no bias; loom: loom_gemm%s",
                  a->candidates, a->tune ? " tuned per shape" : " (model or tuned entry)");
  loom_bench_note(&st.t, "targets: m >= 1000 none < 0.95 of cuBLASLt, geomean >= 1.00; m <= 512 each >= 0.95 of "
                  "cuBLASLt or >= 85%% HBM");
  if (a->peer_json[0])
    loom_bench_note(&st.t, "peer(us): torch (F.linear / matmul / addmm) of the row's exact GEMM in a CUDA graph, or "
                           "none (the note says why; bench/peers/gemm_torch.py, this job): %.40s", a->peer_json);
  else
    loom_bench_note(&st.t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
  static const char *const sel[NGROUPS] = {"fitting half", "held-out half", "new families"};
  char title[160];
  snprintf(title, sizeof title, "loom-bench gemm: loom vs cuBLAS and torch on the shape set (%s), median of %d reps",
           a->half < 0 ? "both halves and the new families" : sel[a->half], a->o.reps);
  loom_bench_note(&st.t, "%d GEMMs", st.gemms);
  st.failures = loom_bench_finish("gemm", &st.t, &a->o, 1, title, st.failures);
  loom_bench_table_free(&st.t);
  loom_finalize();
  cublasDestroy(st.h);
  cudaStreamDestroy(st.s);
  return st.failures ? 1 : 0;
}

/* Runs gemm_torch.py on this run's weights and m list (from the parent,
 * before the rank). */
static void gemm_peer(gemm_args_t *a) {
  if (!peer_runs(a)) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (%s)", a->peer ? "--check-only" : "--peer none");
    return;
  }
  loom_gemm_weight_t w[MAX_WEIGHTS];
  const int nw = select_weights(a, w, MAX_WEIGHTS);
  const int64_t *ms;
  const int nm = select_ms(a, &ms);
  char args[6144];
  snprintf(args, sizeof args, "--world 1 --reps %d --warmup %d --ms ", a->o.reps, a->o.warmup);
  int bad = 0;
  for (int j = 0; j < nm; ++j) bad |= loom_bench_appendf(args, sizeof args, "%s%lld", j ? "," : "", (long long)ms[j]);
  bad |= loom_bench_appendf(args, sizeof args, " --weights ");
  for (int i = 0; i < nw; ++i)
    bad |= loom_bench_appendf(args, sizeof args, "%s%lld:%lld", i ? "," : "", (long long)w[i].n, (long long)w[i].k);
  if (bad) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run: its weight list is too long");
    return;
  }
  (void)loom_bench_run_peer("gemm_torch.py", args, "gemm_torch", a->peer_json, sizeof a->peer_json, a->peer_note,
                            sizeof a->peer_note);
}

LOOM_BENCH(gemm, "loom's GEMM engine vs cuBLASLt, cublasGemmEx and torch on the shape set (23 model families in "
                 "three groups, TP 1-8, m 1-8192)") {
  gemm_args_t a;
  memset(&a, 0, sizeof a);
  a.half = -1;
  a.peer = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, gemm_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (!a.candidates) a.candidates = a.o.quick ? 4 : 8;
  if (a.list) {
    list_selection(&a);
    return 0;
  }
  if (loom_bench_world(&a.o, 1) == 0) return 1;
  gemm_peer(&a);
  return loom_bench_launch(&a.o, 1, gemm_rank, &a) ? 1 : 0;
}
