/*
 * bench_grouped.c - `loom-bench grouped`: loom's grouped GEMM
 * (loom_gemm_grouped) against PyTorch's torch._grouped_mm (CUTLASS grouped
 * kernels) on one MoE layer's expert GEMMs, on one GPU (rank 0).
 *
 * Shapes (support/grouped_cases.h): T tokens routed top-k over E experts
 * (uniform or Zipf(1.2), the generator loom-bench moe uses), R = T x k
 * rows grouped by expert; gate_up C [R, 2F] = A [R, H] x W1_e^T and down
 * C [R, H] = A [R, F] x W2_e^T, weights [E, n, k] as nn.Linear stores
 * them, bf16, every expert on this GPU. Models: Mixtral-8x7B, Qwen3-30B-A3B,
 * DeepSeek-V3 (routed experts) and four families the GEMM model was never
 * fitted or checked on: Qwen1.5-MoE-A2.7B, OLMoE-1B-7B, Llama-4-Scout,
 * gpt-oss-120b.
 * Tokens 1, 8, 64, 512, 1024, 2048, 8192 (--quick: 1, 64, 1024, 8192).
 *
 * What runs, per shape:
 *   loom          loom_gemm_grouped as an MoE layer calls it (rows_hint
 *                 = R; the tile its model picks, named in the note), the
 *                 expert offsets on the device
 *   cublasLt-loop (--cublas) one cuBLASLt GEMM per expert with rows, the
 *                 row counts known on the host (heuristic's first choice)
 *   peer          bench/peers/grouped_torch.py, run first on this run's
 *                 exact shapes and routings: torch._grouped_mm(A,
 *                 W.transpose(-2, -1), offs=int32 row ends on the device),
 *                 the peer column of the loom row of the same complete
 *                 shape (support/grouped_cases.h: loom_grouped_pair_shape)
 * Timing: every variant per call inside a CUDA graph of
 * LOOM_GROUPED_GRAPH_CALLS calls (no host issue time: as the peer times
 * torch._grouped_mm, peer_timing.py), the graphs side by side, medians.
 * Call j of a graph reads input set j mod S (A and all weights), S the
 * fewest sets whose bytes touched per call reach 4 x L2 (at most 16, within
 * half the free memory): the peer rotates the same way.
 * Correctness: C poisoned, one loom_gemm_grouped call, sampled elements
 * (every group's boundaries among them) against the fp64 reference.
 * Summaries: torch._grouped_mm / loom per model and per token band
 * (T <= 64, 65..2048, > 2048), geomean and minimum, against the targets (>=
 * 1.0 on every shape, >= 1.2 geomean). --list: the shapes, their routing's
 * rows and an estimate of the run's length, without a GPU.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "bench.h"
#include "moe_models.h"
#include "ref/ref.h"
#include "support/grouped_cases.h"
#include "testing/bench_api.h"

#define GROUPED_SEED 0x67726f7570ull
#define GROUPED_MAX_CASES 512
#define GROUPED_L2_LIST (50.0 * 1048576) /* --list: an H100/H200's L2 */
#define GROUPED_BUDGET_MAX (48.0 * 1073741824) /* input sets: at most this (and half the free memory) */
#define GROUPED_TARGET_MIN 1.0
#define GROUPED_TARGET_GEOMEAN 1.2

typedef struct grouped_args {
  loom_bench_opts_t o;
  loom_grouped_sel_t sel;
  int peer;   /* 0 with --peer none */
  int list;   /* --list */
  int cublas; /* --cublas: also the per-expert cuBLASLt loop */
  char peer_json[1200]; /* grouped_torch.py's results ("" if not run) */
  char peer_note[200];  /* why there is no peer column */
} grouped_args_t;

static int grouped_opt(void *ctx, int argc, char **argv, int *i) {
  grouped_args_t *a = (grouped_args_t *)ctx;
  const char *s = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(s, "--help")) {
    printf("  --model NAME         one model (default all): ");
    for (int m = 0; m < loom_grouped_model_count; ++m) printf("%s%s", m ? ", " : "", loom_grouped_models[m].name);
    printf("\n"
           "  --tokens T           tokens (default 1, 8, 64, 512, 1024, 2048, 8192; --quick 1, 64, 1024, 8192)\n"
           "  --gemm G             gate_up or down (default both)\n"
           "  --routing R          uniform or zipf (default both)\n"
           "  --cublas             also one cuBLASLt GEMM per expert (host row counts), timed alike\n"
           "  --peer none          skip torch._grouped_mm (bench/peers/grouped_torch.py, run by default on this\n"
           "                       run's exact shapes, timed in CUDA graphs)\n"
           "  --list               print the shapes, their routing's rows and an estimate of the run, then exit\n");
    return 1;
  }
  if (!strcmp(s, "--list")) return a->list = 1, 1;
  if (!strcmp(s, "--cublas")) return a->cublas = 1, 1;
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--model")) {
    a->sel.model = loom_grouped_model_find(v);
    if (a->sel.model < 0) {
      fprintf(stderr, "loom-bench grouped: --model needs one of the models in --help, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    return *i += 1, 1;
  }
  if (!strcmp(s, "--gemm") || !strcmp(s, "--routing")) {
    const int gemm = s[2] == 'g';
    const char *x = gemm ? "gate_up" : "uniform", *y = gemm ? "down" : "zipf";
    const int val = v && !strcmp(v, x) ? 0 : v && !strcmp(v, y) ? 1 : -1;
    if (val < 0) {
      fprintf(stderr, "loom-bench grouped: %s needs %s or %s, got \"%s\"\n", s, x, y, v ? v : "(nothing)");
      return -1;
    }
    if (gemm) a->sel.gemm = val;
    else a->sel.route = val;
    return *i += 1, 1;
  }
  if (!strcmp(s, "--tokens")) {
    char *end = NULL;
    const long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 1 || x > 65536) {
      fprintf(stderr, "loom-bench grouped: --tokens needs an integer in 1..65536, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->sel.tokens = x;
    return *i += 1, 1;
  }
  return 0;
}

/* The cases of the run (at most GROUPED_MAX_CASES) into out; the count. */
static int grouped_select(const grouped_args_t *a, loom_grouped_case_t *out) {
  const int n = loom_grouped_cases(&a->sel, out, GROUPED_MAX_CASES);
  return n > GROUPED_MAX_CASES ? GROUPED_MAX_CASES : n;
}

static const char *grouped_route_name(int route) { return route == 1 ? "zipf" : "uniform"; }

/* The models this suite shares with loom-bench moe have its numbers
 * (moe_models.c): 0, or 1 after saying which differs. */
static int grouped_models_agree(void) {
  for (int i = 0; i < g_moe_model_count; ++i) {
    const moe_model_t *x = &g_moe_models[i];
    const int m = loom_grouped_model_find(x->name);
    const loom_grouped_model_t *y = m >= 0 ? &loom_grouped_models[m] : NULL;
    if (!y || y->hidden != x->hidden || y->experts != x->experts || y->topk != x->topk || y->ffn != x->ffn) {
      fprintf(stderr, "loom-bench grouped: model %s differs from loom-bench moe's (support/grouped_cases.c, "
                      "tools/bench/moe_models.c)\n", x->name);
      return 1;
    }
  }
  return 0;
}

/* ---- --list ---------------------------------------------------------------- */

/* Every shape with its routing's rows, and the run's estimated length: per
 * shape and variant, (warm-up + reps + 1 capture) graphs of
 * LOOM_GROUPED_GRAPH_CALLS calls at loom_grouped_est_call_s, 0.15 s of
 * setup; the peer alike plus its 3 warm-up calls and 20 s to start. */
static int grouped_list(const grouped_args_t *a) {
  static loom_grouped_case_t cs[GROUPED_MAX_CASES];
  const int n = grouped_select(a, cs);
  if (n < 0) return 2;
  const int graphs = a->o.warmup + a->o.reps + 1;
  double loom_s = 0, peer_s = 0;
  printf("loom-bench grouped: bf16, one GPU; sets assume an L2 of %.0f MiB; est = one call at 700 TFLOP/s or "
         "3.5 TB/s of the bytes it touches\n", GROUPED_L2_LIST / 1048576);
  printf("%-42s %7s %6s %6s %6s %6s %7s %5s %10s\n", "shape", "rows", "n", "k", "groups", "active", "hot", "sets",
         "est us");
  for (int i = 0; i < n; ++i) {
    const loom_grouped_case_t *c = &cs[i];
    const loom_grouped_model_t *mm = &loom_grouped_models[c->model];
    int64_t off[LOOM_GROUPED_GEMM_MAX_GROUPS + 1], hot = 0;
    int active = 0;
    if (loom_grouped_offsets(c, MOE_SEED, off, &active, &hot) != 0) {
      fprintf(stderr, "loom-bench grouped: out of host memory\n");
      return 1;
    }
    const int sets = loom_grouped_sets(loom_grouped_touched_bytes(c, active), loom_grouped_set_bytes(c),
                                       GROUPED_L2_LIST, GROUPED_BUDGET_MAX);
    const double call = loom_grouped_est_call_s(c, active);
    const double one = graphs * LOOM_GROUPED_GRAPH_CALLS * call + 0.15;
    loom_s += one * (1 + a->cublas);
    peer_s += one + 3 * call;
    char shape[64];
    snprintf(shape, sizeof shape, "%s %s T=%lld %s", mm->name, loom_grouped_gemm_name(c->gemm), (long long)c->tokens,
             grouped_route_name(c->route));
    printf("%-42s %7lld %6lld %6lld %6d %6d %7lld %5d %10.1f\n", shape, (long long)c->rows, (long long)c->n,
           (long long)c->k, mm->experts, active, (long long)hot, sets, call * 1e6);
  }
  if (a->peer) peer_s += 20;
  else peer_s = 0;
  printf("# %d shapes, %d graphs of %d calls per variant: about %.0f s for loom%s, %.0f s for the peer "
         "(torch._grouped_mm), %.0f s in all on one H100/H200\n",
         n, graphs, LOOM_GROUPED_GRAPH_CALLS, loom_s, a->cublas ? " and cuBLASLt" : "", peer_s, loom_s + peer_s);
  return 0;
}

/* ---- buffers ---------------------------------------------------------------- */

/* `sets` copies of n bf16 elements (loom_bench_fill_random with `seed`),
 * and the host period the checks rebuild elements from. */
typedef struct gbuf {
  int sets;
  size_t n;
  void *dev[LOOM_GROUPED_GRAPH_CALLS];
  uint16_t *host; /* the fill's period */
  size_t period;
} gbuf_t;

static void gbuf_free(gbuf_t *b) {
  for (int i = 0; i < b->sets; ++i) cudaFree(b->dev[i]);
  free(b->host);
  memset(b, 0, sizeof *b);
}

static loom_result_t gbuf_alloc(gbuf_t *b, size_t n, int sets, uint64_t seed) {
  memset(b, 0, sizeof *b);
  b->n = n;
  b->period = loom_bench_fill_period(n);
  b->host = (uint16_t *)malloc(b->period * sizeof(uint16_t));
  if (!b->host) return loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom-bench grouped: host period of %zu", b->period);
  loom_ref_fill_random(LOOM_BF16, b->host, b->period, seed, 1.0);
  for (int i = 0; i < sets; ++i) {
    LOOM_BENCH_CUDA(cudaMalloc(&b->dev[i], n * sizeof(uint16_t)));
    b->sets = i + 1;
    if (i == 0) LOOM_BENCH_TRY(loom_bench_fill_random(b->dev[0], LOOM_BF16, n, seed, 1.0));
    else LOOM_BENCH_CUDA(cudaMemcpy(b->dev[i], b->dev[0], n * sizeof(uint16_t), cudaMemcpyDeviceToDevice));
  }
  return LOOM_SUCCESS;
}

/* ---- one shape ----------------------------------------------------------------- */

enum { IMPL_LOOM = 0, IMPL_CUBLAS = 1, NIMPL = 2 };
static const char *const g_impl[NIMPL] = {"loom", "cublasLt-loop"};

typedef struct gvar {
  int impl, sets, E;
  const loom_grouped_gemm_desc_t *d;
  const gbuf_t *a, *b;
  void *c;
  const int64_t *off_dev;  /* [E + 1] on the device */
  const int64_t *off_host; /* the same on the host */
} gvar_t;

/* Call j of variant v on s: input set j mod sets. */
static loom_result_t gvar_call(const gvar_t *v, int j, cudaStream_t s) {
  const char *a = (const char *)v->a->dev[j % v->sets], *b = (const char *)v->b->dev[j % v->sets];
  if (v->impl == IMPL_LOOM) return loom_gemm_grouped(v->d, a, b, v->c, NULL, v->off_dev, s);
  const int64_t n = v->d->n, k = v->d->k;
  for (int e = 0; e < v->E; ++e) {
    const int64_t r0 = v->off_host[e], rows = v->off_host[e + 1] - r0;
    if (rows == 0) continue;
    const loom_gemm_desc_t g = LOOM_GEMM_DESC(rows, n, k, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
    LOOM_BENCH_TRY(loom_bench_base_gemm(&g, a + (size_t)(r0 * k) * 2, b + (size_t)e * (size_t)(n * k) * 2,
                                        (char *)v->c + (size_t)(r0 * n) * 2, NULL, s));
  }
  return LOOM_SUCCESS;
}

/* LOOM_GROUPED_GRAPH_CALLS calls of v captured on s into *exec (NULL on failure). */
static loom_result_t gvar_capture(const gvar_t *v, cudaStream_t s, cudaGraphExec_t *exec) {
  *exec = NULL;
  cudaGraph_t g = NULL;
  LOOM_BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  loom_result_t r = LOOM_SUCCESS;
  for (int j = 0; j < LOOM_GROUPED_GRAPH_CALLS && r == LOOM_SUCCESS; ++j) r = gvar_call(v, j, s);
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  if (r == LOOM_SUCCESS && e != cudaSuccess) r = loom_bench_cuda_fail((int)e, "cudaStreamEndCapture", __FILE__, __LINE__);
  if (r == LOOM_SUCCESS) {
    const cudaError_t e2 = cudaGraphInstantiate(exec, g, 0);
    if (e2 != cudaSuccess) r = loom_bench_cuda_fail((int)e2, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  if (g) (void)cudaGraphDestroy(g);
  return r;
}

static loom_result_t graph_run(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  LOOM_BENCH_CUDA(cudaGraphLaunch((cudaGraphExec_t)arg, s));
  return LOOM_SUCCESS;
}

/* Sampled elements of C (the case c on the buffers a, b, off) out of bound
 * against the fp64 reference; -1 if the check could not run. Samples: the
 * first and last element, each group's first row (in turn, up to half the
 * samples), random elements. */
static int64_t grouped_check(const loom_grouped_case_t *c, const gbuf_t *a, const gbuf_t *b, const void *cdev,
                             const int64_t *off, int E, int samples) {
  const int64_t n = c->n, k = c->k;
  uint16_t *arow = (uint16_t *)malloc((size_t)k * 2), *bcol = (uint16_t *)malloc((size_t)k * 2);
  int64_t wrong = -1;
  if (!arow || !bcol) goto out;
  wrong = 0;
  uint64_t z = 0x9e3779b97f4a7c15ull ^ (uint64_t)c->rows;
  int next_group = 0;
  for (int s = 0; s < samples; ++s) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    int64_t row = (int64_t)((z >> 33) % (uint64_t)c->rows), col = (int64_t)((z >> 13) % (uint64_t)n);
    if (s == 0) row = 0, col = 0;
    else if (s == 1) row = c->rows - 1, col = n - 1;
    else if (s % 2 == 0)
      for (int tries = 0; tries < E; ++tries) { /* the next group with rows: its first row */
        const int g = next_group;
        next_group = (next_group + 1) % E;
        if (off[g + 1] > off[g]) {
          row = off[g];
          break;
        }
      }
    int g = 0;
    while (g < E - 1 && off[g + 1] <= row) ++g;
    for (int64_t kk = 0; kk < k; ++kk) {
      arow[kk] = a->host[(size_t)(row * k + kk) % a->period];
      bcol[kk] = b->host[((size_t)g * (size_t)(n * k) + (size_t)(col * k + kk)) % b->period];
    }
    const loom_gemm_desc_t one = LOOM_GEMM_DESC(1, 1, k, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
    const double ref = loom_ref_gemm_element(&one, arow, bcol, NULL, 0, 0);
    uint16_t got = 0;
    if (cudaMemcpy(&got, (const char *)cdev + (size_t)(row * n + col) * 2, 2, cudaMemcpyDeviceToHost) != cudaSuccess) {
      wrong = -1;
      goto out;
    }
    const double v = loom_ref_load(LOOM_BF16, &got, 0);
    if (!(fabs(v - ref) <= fabs(ref) / 128 + 1e-4 * sqrt((double)k))) wrong++;
  }
out:
  free(arow), free(bcol);
  return wrong;
}

/* torch._grouped_mm / loom over a set of shapes. */
typedef struct gsum {
  int n, below;
  double log, min;
  char min_at[64];
} gsum_t;

static void gsum_add(gsum_t *x, double r, const char *where) {
  if (x->n == 0 || r < x->min) {
    x->min = r;
    snprintf(x->min_at, sizeof x->min_at, "%s", where);
  }
  x->n++, x->log += log(r);
  x->below += r < GROUPED_TARGET_MIN;
}

/* The token band of T: 0 (T <= 64), 1 (65..2048), 2 (more). */
static int grouped_band(int64_t T) { return T <= 64 ? 0 : T <= 2048 ? 1 : 2; }
static const char *const g_band[3] = {"T <= 64", "T 65..2048", "T > 2048"};

typedef struct grun {
  grouped_args_t *a;
  cudaStream_t s;
  double l2, budget;
  loom_bench_table_t t;
  int col_active, col_hot;
  gsum_t model[16], band[3], all, cublas;
  int shapes, unpaired, failures;
} grun_t;

/* One shape on the weights b: rows, timing, check, summaries. */
static void grouped_one(grun_t *st, const loom_grouped_case_t *c, const gbuf_t *b, uint64_t seed) {
  grouped_args_t *a = st->a;
  const loom_grouped_model_t *mm = &loom_grouped_models[c->model];
  const int E = mm->experts, nimpl = a->cublas ? 2 : 1;
  int64_t off[LOOM_GROUPED_GEMM_MAX_GROUPS + 1], hot = 0;
  int active = 0, bm = 0, bn = 0;
  char shape[64];
  snprintf(shape, sizeof shape, "%s %s T=%lld %s", mm->name, loom_grouped_gemm_name(c->gemm), (long long)c->tokens,
           grouped_route_name(c->route));
  loom_bench_row_t *rows[NIMPL] = {NULL, NULL};
  for (int i = 0; i < nimpl; ++i) {
    loom_bench_row_t *row = loom_bench_add(&st->t);
    if (!row) {
      st->failures++;
      return;
    }
    rows[i] = row;
    snprintf(row->op, sizeof row->op, "grouped_gemm");
    snprintf(row->impl, sizeof row->impl, "%s", g_impl[i]);
    snprintf(row->shape, sizeof row->shape, "%s", shape);
    snprintf(row->dtype, sizeof row->dtype, "bf16");
    row->m = c->rows, row->n = c->n, row->k = c->k;
    row->flops = 2.0 * (double)c->rows * (double)c->n * (double)c->k;
  }
  gbuf_t abuf;
  memset(&abuf, 0, sizeof abuf);
  void *cdev = NULL;
  int64_t *off_dev = NULL;
  cudaGraphExec_t ge[NIMPL] = {NULL, NULL};
  loom_bench_time_t tm[NIMPL];
  int sets = 1;
  loom_result_t r = loom_grouped_offsets(c, MOE_SEED, off, &active, &hot) == 0
                        ? LOOM_SUCCESS
                        : loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "loom-bench grouped: routing of %s", shape);
  if (r == LOOM_SUCCESS) {
    sets = loom_grouped_sets(loom_grouped_touched_bytes(c, active), loom_grouped_set_bytes(c), st->l2, st->budget);
    if (sets > b->sets) sets = b->sets;
    r = gbuf_alloc(&abuf, (size_t)(c->rows * c->k), sets, seed);
  }
  if (r == LOOM_SUCCESS) {
    const cudaError_t e1 = cudaMalloc(&cdev, (size_t)(c->rows * c->n) * 2);
    const cudaError_t e2 = e1 == cudaSuccess ? cudaMalloc((void **)&off_dev, sizeof(int64_t) * (size_t)(E + 1)) : e1;
    const cudaError_t e3 =
        e2 == cudaSuccess ? cudaMemcpy(off_dev, off, sizeof(int64_t) * (size_t)(E + 1), cudaMemcpyHostToDevice) : e2;
    if (e3 != cudaSuccess) r = loom_bench_cuda_fail((int)e3, "grouped buffers", __FILE__, __LINE__);
  }
  loom_grouped_gemm_desc_t d = LOOM_GROUPED_GEMM_DESC_INIT;
  d.groups = E, d.max_rows = c->rows, d.n = c->n, d.k = c->k, d.rows_hint = c->rows; /* as loom_moe_mlp's */
  gvar_t v[NIMPL];
  for (int i = 0; i < NIMPL; ++i) {
    v[i].impl = i, v[i].sets = sets, v[i].E = E, v[i].d = &d, v[i].a = &abuf, v[i].b = b, v[i].c = cdev;
    v[i].off_dev = off_dev, v[i].off_host = off;
  }
  /* the tile loom's model picks (the same call loom_gemm_grouped makes);
   * then C poisoned, one loom_gemm_grouped, checked */
  if (r == LOOM_SUCCESS)
    r = loom_bench_gemm_grouped_tile(&d, abuf.dev[0], b->dev[0], cdev, off_dev, 0, 0, 0, &bm, &bn, st->s);
  if (r == LOOM_SUCCESS && a->o.check) {
    if (cudaMemsetAsync(cdev, 0xFF, (size_t)(c->rows * c->n) * 2, st->s) != cudaSuccess)
      r = loom_bench_fail(LOOM_ERR_CUDA, "loom-bench grouped: cudaMemsetAsync failed");
    if (r == LOOM_SUCCESS) r = gvar_call(&v[IMPL_LOOM], 0, st->s);
    if (r == LOOM_SUCCESS && cudaStreamSynchronize(st->s) != cudaSuccess)
      r = loom_bench_fail(LOOM_ERR_CUDA, "loom-bench grouped: the checked call failed");
    if (r == LOOM_SUCCESS) {
      rows[IMPL_LOOM]->wrong = grouped_check(c, &abuf, b, cdev, off, E, a->o.quick ? 16 : 32);
      if (rows[IMPL_LOOM]->wrong != 0) st->failures++;
    }
  }
  /* cuBLASLt's heuristic per row count, eagerly, before its capture */
  if (r == LOOM_SUCCESS && a->cublas) r = gvar_call(&v[IMPL_CUBLAS], 0, st->s);
  for (int i = 0; i < nimpl && r == LOOM_SUCCESS; ++i) r = gvar_capture(&v[i], st->s, &ge[i]);
  if (r == LOOM_SUCCESS) {
    loom_bench_op_fn ops[NIMPL] = {graph_run, graph_run};
    void *args[NIMPL] = {ge[0], ge[1]};
    r = loom_bench_time_side_by_side(st->s, a->o.warmup, a->o.reps, nimpl, ops, args, tm);
  }
  (void)cudaStreamSynchronize(st->s);
  for (int i = 0; i < NIMPL; ++i)
    if (ge[i]) (void)cudaGraphExecDestroy(ge[i]);
  gbuf_free(&abuf);
  cudaFree(cdev), cudaFree(off_dev);
  st->shapes++;
  if (r != LOOM_SUCCESS) {
    fprintf(stderr, "loom-bench grouped: %s: %s\n", shape, loom_last_error());
    for (int i = 0; i < nimpl; ++i) snprintf(rows[i]->note, sizeof rows[i]->note, "error: %s", loom_result_string(r));
    st->failures++;
    (void)cudaGetLastError();
    return;
  }
  const double G = LOOM_GROUPED_GRAPH_CALLS;
  for (int i = 0; i < nimpl; ++i) {
    rows[i]->gemm_us = tm[i].median_us / G, rows[i]->min_us = tm[i].min_us / G, rows[i]->max_us = tm[i].max_us / G;
    rows[i]->own[st->col_active] = active, rows[i]->own[st->col_hot] = (double)hot;
  }
  loom_bench_row_t *lr = rows[IMPL_LOOM];
  loom_bench_shape_t ps;
  loom_grouped_pair_shape(c, hot, &ps);
  const int paired = loom_bench_row_pair(lr, a->peer_json, "grouped_mm", &ps, 1);
  const double ratio = paired ? lr->peer_us / lr->gemm_us : NAN;
  snprintf(lr->note, sizeof lr->note, "E %d top-%d: %lld rows, %d experts with rows, busiest %lld; tile %dx%d; %d "
           "input set(s)", E, mm->topk, (long long)c->rows, active, (long long)hot, bm, bn, sets);
  if (a->cublas)
    snprintf(rows[IMPL_CUBLAS]->note, sizeof rows[IMPL_CUBLAS]->note,
             "one cuBLASLt GEMM per expert with rows (%d), host counts; loom x%.3f", active,
             rows[IMPL_CUBLAS]->gemm_us / lr->gemm_us);
  for (int i = 0; i < nimpl; ++i) loom_bench_row_finish(rows[i]);
  if (paired) {
    char where[64];
    snprintf(where, sizeof where, "%s %s T=%lld %s", loom_grouped_gemm_name(c->gemm), mm->name, (long long)c->tokens,
             grouped_route_name(c->route));
    gsum_add(&st->model[c->model], ratio, where);
    gsum_add(&st->band[grouped_band(c->tokens)], ratio, where);
    gsum_add(&st->all, ratio, shape);
  } else {
    st->unpaired++;
  }
  if (a->cublas) gsum_add(&st->cublas, rows[IMPL_CUBLAS]->gemm_us / lr->gemm_us, shape);
  printf("# grouped %-42s loom %9.2f us (%dx%d, %5.0f TFLOP/s)", shape, lr->gemm_us, bm, bn, lr->tflops);
  if (paired) printf("  torch %9.2f us  x%.3f%s", lr->peer_us, ratio, ratio < GROUPED_TARGET_MIN ? "  BELOW" : "");
  if (a->cublas) printf("  cublasLt-loop %9.2f us", rows[IMPL_CUBLAS]->gemm_us);
  printf("  #wrong %lld\n", (long long)lr->wrong);
  fflush(stdout);
}

/* A summary line: note and stdout. */
static void gsum_note(grun_t *st, const char *what, const gsum_t *x) {
  if (!x->n) return;
  loom_bench_note(&st->t, "%s: %d shapes; torch._grouped_mm / loom geomean %.3f, min %.3f (%s); %d below %.1f", what,
                  x->n, exp(x->log / x->n), x->min, x->min_at, x->below, GROUPED_TARGET_MIN);
}

static void grouped_summaries(grun_t *st) {
  for (int m = 0; m < loom_grouped_model_count && m < 16; ++m) gsum_note(st, loom_grouped_models[m].name, &st->model[m]);
  char line[192] = "";
  for (int b = 0; b < 3; ++b)
    if (st->band[b].n)
      (void)loom_bench_appendf(line, sizeof line, "%s%s: geomean %.3f min %.3f (%d)", line[0] ? "; " : "", g_band[b],
                               exp(st->band[b].log / st->band[b].n), st->band[b].min, st->band[b].n);
  if (line[0]) loom_bench_note(&st->t, "torch._grouped_mm / loom by tokens: %s", line);
  const gsum_t *x = &st->all;
  if (x->n) {
    const double gm = exp(x->log / x->n);
    loom_bench_note(&st->t,
                    "all %d paired shapes: geomean %.3f (target >= %.1f: %s), min %.3f at %s (target >= %.1f on "
                    "every shape: %s)%s",
                    x->n, gm, GROUPED_TARGET_GEOMEAN, gm >= GROUPED_TARGET_GEOMEAN ? "met" : "MISSED", x->min,
                    x->min_at, GROUPED_TARGET_MIN, x->below ? "MISSED" : "met", st->unpaired ? "; some unpaired" : "");
    printf("# grouped: %d shapes paired, %d not; torch._grouped_mm / loom geomean %.3f (target %.1f: %s), min %.3f "
           "(%s; target %.1f: %s, %d below)\n",
           x->n, st->unpaired, gm, GROUPED_TARGET_GEOMEAN, gm >= GROUPED_TARGET_GEOMEAN ? "met" : "MISSED", x->min,
           x->min_at, GROUPED_TARGET_MIN, x->below ? "MISSED" : "met", x->below);
  }
  if (st->cublas.n)
    loom_bench_note(&st->t, "cublasLt-loop / loom over %d shapes: geomean %.3f, min %.3f (%s)", st->cublas.n,
                    exp(st->cublas.log / st->cublas.n), st->cublas.min, st->cublas.min_at);
}

static int grouped_rank(loom_rank_ctx_t *ctx, void *arg) {
  grouped_args_t *a = (grouped_args_t *)arg;
  if (ctx->rank != 0) return 0;
  static grun_t st;
  memset(&st, 0, sizeof st);
  st.a = a;
  if (cudaStreamCreateWithFlags(&st.s, cudaStreamNonBlocking) != cudaSuccess) {
    fprintf(stderr, "loom-bench grouped: cudaStreamCreate failed\n");
    return 1;
  }
  int dev = 0, l2 = 0;
  size_t free_b = 0, total_b = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev) != cudaSuccess)
    l2 = 50 << 20;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) free_b = (size_t)16 << 30;
  st.l2 = l2;
  st.budget = fmin((double)free_b / 2, GROUPED_BUDGET_MAX);
  st.col_active = loom_bench_own_col(&st.t, "active", "experts_with_rows", 0);
  st.col_hot = loom_bench_own_col(&st.t, "hot", "busiest_expert_rows", 0);
  struct cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, dev) == cudaSuccess)
    printf("# loom-bench grouped: %s (%d SMs, L2 %d MiB), input sets within %.1f GiB\n", p.name,
           p.multiProcessorCount, l2 >> 20, st.budget / 1073741824);
  static loom_grouped_case_t cs[GROUPED_MAX_CASES];
  const int n = grouped_select(a, cs);
  for (int i0 = 0; i0 < n;) {
    /* the cases of one model's GEMM share its weights, in as many sets as
     * the one that needs most */
    int i1 = i0, nb = 1;
    for (; i1 < n && cs[i1].model == cs[i0].model && cs[i1].gemm == cs[i0].gemm; ++i1) {
      int64_t off[LOOM_GROUPED_GEMM_MAX_GROUPS + 1];
      int active = 0;
      if (loom_grouped_offsets(&cs[i1], MOE_SEED, off, &active, NULL) != 0) continue;
      const int sets =
          loom_grouped_sets(loom_grouped_touched_bytes(&cs[i1], active), loom_grouped_set_bytes(&cs[i1]), st.l2, st.budget);
      if (sets > nb) nb = sets;
    }
    const loom_grouped_model_t *mm = &loom_grouped_models[cs[i0].model];
    const uint64_t seed = GROUPED_SEED + 7919u * (uint64_t)cs[i0].model + 131u * (uint64_t)cs[i0].gemm;
    gbuf_t b;
    const loom_result_t r = gbuf_alloc(&b, (size_t)mm->experts * (size_t)(cs[i0].n * cs[i0].k), nb, seed);
    if (r != LOOM_SUCCESS) {
      fprintf(stderr, "loom-bench grouped: %s %s weights (%d set(s)): %s\n", mm->name,
              loom_grouped_gemm_name(cs[i0].gemm), nb, loom_last_error());
      st.failures++;
      (void)cudaGetLastError();
    } else {
      for (int i = i0; i < i1; ++i) grouped_one(&st, &cs[i], &b, seed + 1 + (uint64_t)i);
    }
    gbuf_free(&b);
    if (a->cublas) loom_bench_base_gemm_release(); /* cuBLASLt's per-shape cache */
    i0 = i1;
  }
  grouped_summaries(&st);
  loom_bench_note(&st.t, "bf16; time = per call in a CUDA graph of %d calls (no host issue time), median of %d graphs; "
                  "loom = loom_gemm_grouped (rows_hint = T x top-k, its model's tile); inputs rotated over the sets "
                  "in the note", LOOM_GROUPED_GRAPH_CALLS, a->o.reps);
  if (a->peer_json[0])
    loom_bench_note(&st.t, "peer(us): torch._grouped_mm(A, W.transpose(-2, -1), offs=int32 row ends on the device), "
                    "CUDA graph (bench/peers/grouped_torch.py): %.60s", a->peer_json);
  else
    loom_bench_note(&st.t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
  char title[160];
  snprintf(title, sizeof title, "loom-bench grouped: loom_gemm_grouped vs torch._grouped_mm, MoE experts' GEMMs, "
           "median of %d reps", a->o.reps);
  st.failures = loom_bench_finish("grouped", &st.t, &a->o, 1, title, st.failures);
  loom_bench_table_free(&st.t);
  cudaStreamDestroy(st.s);
  return st.failures ? 1 : 0;
}

/* Runs grouped_torch.py on this run's exact shapes (from the parent, before the rank). */
static void grouped_peer(grouped_args_t *a) {
  if (!a->peer) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (--peer none)");
    return;
  }
  char args[1024], shapes[900];
  if (loom_grouped_peer_args(&a->sel, shapes, sizeof shapes) != 0) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run: its argument list does not fit");
    return;
  }
  snprintf(args, sizeof args, "--world 1 --reps %d --warmup %d --graph-calls %d %s", a->o.reps, a->o.warmup,
           LOOM_GROUPED_GRAPH_CALLS, shapes);
  (void)loom_bench_run_peer("grouped_torch.py", args, "grouped_torch", a->peer_json, sizeof a->peer_json,
                            a->peer_note, sizeof a->peer_note);
}

LOOM_BENCH(grouped, "loom's grouped GEMM vs torch._grouped_mm: MoE experts' GEMMs of 7 models (Mixtral, Qwen3-MoE, "
                    "DeepSeek-V3, ...), tokens 1-8192, uniform and Zipf routing") {
  grouped_args_t a;
  memset(&a, 0, sizeof a);
  loom_grouped_sel_init(&a.sel);
  a.peer = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, grouped_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  a.sel.quick = a.o.quick;
  if (grouped_models_agree()) return 1;
  if (a.list) return grouped_list(&a);
  if (loom_bench_world(&a.o, 1) == 0) return 1;
  grouped_peer(&a);
  return loom_bench_launch(&a.o, 1, grouped_rank, &a) ? 1 : 0;
}
