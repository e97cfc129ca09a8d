/*
 * bench_baseline.c - `loom-bench baseline`: what loom's fused ops must beat,
 * measured again on this machine (the project's anchor measurements are leads only).
 *
 * GEMM (rank 0's GPU alone; the other ranks wait in a barrier): cuBLASLt
 * through loom_bench_base_gemm, bf16 inputs and output, fp32 accumulation, both
 * B layouts, on 4096^3, 8192^3 and the Flux GPT-3 MLP shapes at TP=2
 * (m in {64, 1024, 8192}; [m, 12288] x [12288, 24576] as after the
 * AllGather, [m, 24576] x [24576, 12288] as before the ReduceScatter). For
 * each shape the heuristic's top candidates are timed and the fastest kept
 * (loom_bench_base_gemm_tune); then the median of the timed repetitions, inputs
 * rotated among enough sets to exceed 4x L2. 64 (16 with --quick) sampled
 * outputs are checked against the fp64 CPU reference (#wrong).
 *
 * Collectives (every rank, one process per GPU): NCCL AllGather,
 * ReduceScatter, AllReduce and AlltoAll (ncclSend/Recv in a group) through
 * the loom_bench_base_* wrappers, bf16, out of place, cudaMalloc buffers, sizes
 * 1 MiB .. 1 GiB in steps of 4x (1, 16, 256 MiB with --quick). Bytes follow
 * nccl-tests: AllReduce each rank's buffer, AllGather the gathered output,
 * ReduceScatter the input, AlltoAll each rank's send buffer. A repetition's
 * time is the slowest rank's (max over ranks of CUDA-event times, see
 * loom_bench_time_ranks). busbw = algbw x 2(n-1)/n (AllReduce) or (n-1)/n.
 * Inputs are random per rank (a 4 Mi-element pattern, tiled); outputs are
 * poisoned (0xFF = NaN) before the run and every element of the last
 * repetition's output is checked on each rank: AllGather and AlltoAll bit
 * for bit, sums within (n x 2^-8) of the sum of magnitudes; #wrong is the
 * total over ranks. With one GPU the collectives run with W = 1 and the
 * table says so.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "gemm_inputs.h"
#include "ref/ref.h"

#define BASE_SEED 0x6c6f6f6dull /* fixed: runs are comparable */

typedef struct baseline_args {
  loom_bench_opts_t o;
  int gemm, coll;
  int candidates;
  int64_t max_bytes;
} baseline_args_t;

static int baseline_opt(void *ctx, int argc, char **argv, int *i) {
  baseline_args_t *a = (baseline_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --gemm-only       only the cuBLASLt GEMMs\n"
           "  --coll-only       only the NCCL collectives\n"
           "  --candidates N    heuristic algorithms timed per GEMM shape (default 8; --quick 4)\n"
           "  --max-bytes SIZE  largest collective buffer, e.g. 256M (default 1G)\n");
    return 1;
  }
  if (!strcmp(s, "--gemm-only")) return a->coll = 0, a->gemm = 1, 1;
  if (!strcmp(s, "--coll-only")) return a->gemm = 0, a->coll = 1, 1;
  if (!strcmp(s, "--candidates") || !strcmp(s, "--max-bytes")) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (v && end && (*end == 'K' || *end == 'k')) x <<= 10, end++;
    else if (v && end && (*end == 'M' || *end == 'm')) x <<= 20, end++;
    else if (v && end && (*end == 'G' || *end == 'g')) x <<= 30, end++;
    if (!v || end == v || *end || x < 1 || (!strcmp(s, "--candidates") && x > 64)) {
      fprintf(stderr, "loom-bench baseline: %s needs a positive %s, got \"%s\"\n", s,
              !strcmp(s, "--candidates") ? "integer <= 64" : "size (K, M, G suffixes)", v ? v : "(nothing)");
      return -1;
    }
    if (!strcmp(s, "--candidates")) a->candidates = (int)x;
    else a->max_bytes = x;
    *i += 1;
    return 1;
  }
  return 0;
}

/* ---- GEMM ------------------------------------------------------------------ */

typedef struct gemm_run {
  loom_gemm_desc_t d;
  const loom_bench_gemm_inputs_t *in;
} gemm_run_t;

static loom_result_t gemm_op(void *arg, int iter, cudaStream_t s) {
  gemm_run_t *g = (gemm_run_t *)arg;
  const loom_bench_gemm_set_t *x = &g->in->sets[iter % g->in->nsets];
  return loom_bench_base_gemm(&g->d, x->a, x->b, x->c, NULL, s);
}

/* One GEMM shape, both layouts: rows into t. Returns failures. */
static int gemm_shape(baseline_args_t *a, cudaStream_t s, loom_bench_table_t *t, int64_t m, int64_t n, int64_t k,
                      const char *label) {
  loom_gemm_desc_t d0 = LOOM_GEMM_DESC(m, n, k, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
  loom_bench_gemm_inputs_t in;
  int failures = 0;
  loom_result_t r = loom_bench_gemm_inputs_alloc(&in, &d0, (size_t)24 << 30, BASE_SEED);
  for (int lay = 0; lay < 2 && r == LOOM_SUCCESS; ++lay) {
    gemm_run_t g;
    g.d = d0;
    g.d.b_layout = lay ? LOOM_B_NK : LOOM_B_KN;
    g.in = &in;
    loom_bench_row_t *row = loom_bench_add(t);
    if (!row) {
      r = loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "table row: host allocation failed");
      break;
    }
    snprintf(row->op, sizeof row->op, "gemm");
    snprintf(row->impl, sizeof row->impl, "cublasLt");
    snprintf(row->shape, sizeof row->shape, "%lldx%lldx%lld %s", (long long)m, (long long)n, (long long)k,
             lay ? "NK" : "KN");
    snprintf(row->dtype, sizeof row->dtype, "bf16");
    row->m = m, row->n = n, row->k = k;
    row->flops = 2.0 * (double)m * (double)n * (double)k;
    float tuned_ms = 0.0f;
    loom_result_t lr = loom_bench_base_gemm_tune(&g.d, in.sets[0].a, in.sets[0].b, in.sets[0].c, NULL, a->candidates, s,
                                                 &tuned_ms);
    loom_bench_time_t tm;
    if (lr == LOOM_SUCCESS) lr = loom_bench_time(s, a->o.warmup, a->o.reps, gemm_op, &g, &tm);
    if (lr != LOOM_SUCCESS) {
      fprintf(stderr, "loom-bench baseline: GEMM %s: %s\n", row->shape, loom_last_error());
      snprintf(row->note, sizeof row->note, "error: %s", loom_result_string(lr));
      failures++;
      if (cudaStreamSynchronize(s) != cudaSuccess) break; /* the context is gone */
      continue;
    }
    row->gemm_us = tm.median_us, row->min_us = tm.min_us, row->max_us = tm.max_us;
    if (a->o.check) {
      int last = (a->o.warmup + a->o.reps - 1) % in.nsets;
      row->wrong = loom_bench_gemm_check(&in, &g.d, last, a->o.quick ? 16 : 64);
      if (row->wrong != 0) failures++;
    }
    snprintf(row->note, sizeof row->note, "%s%s%d sets", label, *label ? ", " : "", in.nsets);
    loom_bench_row_finish(row);
    printf("# gemm %-24s %10.1f us %8.1f TFLOP/s (tuned %d candidates: %.1f us)\n", row->shape, row->gemm_us,
           row->tflops, a->candidates, 1e3 * (double)tuned_ms);
    fflush(stdout);
  }
  if (r != LOOM_SUCCESS) {
    fprintf(stderr, "loom-bench baseline: GEMM %lldx%lldx%lld: %s\n", (long long)m, (long long)n, (long long)k,
            loom_last_error());
    failures++;
  }
  loom_bench_gemm_inputs_free(&in);
  return failures;
}

static int gemm_part(baseline_args_t *a, cudaStream_t s, loom_bench_table_t *t) {
  struct { int64_t m, n, k; const char *label; int quick; } shapes[] = {
      {4096, 4096, 4096, "", 1},
      {8192, 8192, 8192, "", 0},
      {64, 24576, 12288, "Flux AG+GEMM TP=2", 1},
      {1024, 24576, 12288, "Flux AG+GEMM TP=2", 0},
      {8192, 24576, 12288, "Flux AG+GEMM TP=2", 1},
      {64, 12288, 24576, "Flux GEMM+RS TP=2", 0},
      {1024, 12288, 24576, "Flux GEMM+RS TP=2", 1},
      {8192, 12288, 24576, "Flux GEMM+RS TP=2", 0},
  };
  int failures = 0;
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; ++i) {
    if (a->o.quick && !shapes[i].quick) continue;
    failures += gemm_shape(a, s, t, shapes[i].m, shapes[i].n, shapes[i].k, shapes[i].label);
  }
  return failures;
}

/* ---- collectives ----------------------------------------------------------- */

enum { C_AG, C_RS, C_AR, C_A2A, C_NUM };
static const char *const coll_name[C_NUM] = {"allgather", "reducescatter", "allreduce", "alltoall"};

typedef struct coll_run {
  ncclComm_t nccl;
  int kind;
  void *send, *recv;
  size_t count; /* per rank (AG, RS), per peer (A2A), total (AR) */
} coll_run_t;

static loom_result_t coll_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  coll_run_t *c = (coll_run_t *)arg;
  switch (c->kind) {
    case C_AG: return loom_bench_base_allgather(c->nccl, c->send, c->recv, c->count, LOOM_BF16, s);
    case C_RS: return loom_bench_base_reducescatter(c->nccl, c->send, c->recv, c->count, LOOM_BF16, s);
    case C_AR: return loom_bench_base_allreduce(c->nccl, c->send, c->recv, c->count, LOOM_BF16, s);
    case C_A2A: return loom_bench_base_alltoall(c->nccl, c->send, c->recv, c->count, LOOM_BF16, s);
  }
  return loom_bench_fail(LOOM_ERR_INTERNAL, "coll_op: kind %d", c->kind);
}

typedef struct coll_ref {
  int world;
  size_t period;
  uint16_t **pat;   /* [world][period]: each rank's input pattern */
  float *sum, *mag; /* [period]: sum over ranks and sum of magnitudes */
} coll_ref_t;

static int coll_ref_init(coll_ref_t *r, int world, size_t fill_count) {
  memset(r, 0, sizeof *r);
  r->world = world;
  r->period = loom_bench_fill_period(fill_count);
  r->pat = (uint16_t **)calloc((size_t)world, sizeof *r->pat);
  r->sum = (float *)calloc(r->period, sizeof(float));
  r->mag = (float *)calloc(r->period, sizeof(float));
  if (!r->pat || !r->sum || !r->mag) return -1;
  for (int q = 0; q < world; ++q) {
    r->pat[q] = (uint16_t *)malloc(r->period * 2);
    if (!r->pat[q]) return -1;
    loom_ref_fill_random(LOOM_BF16, r->pat[q], r->period, BASE_SEED + 77 + (uint64_t)q, 1.0);
    for (size_t i = 0; i < r->period; ++i) {
      float v = loom_ref_bf16_to_float(r->pat[q][i]);
      r->sum[i] += v;
      r->mag[i] += fabsf(v);
    }
  }
  return 0;
}

static void coll_ref_free(coll_ref_t *r) {
  for (int q = 0; r->pat && q < r->world; ++q) free(r->pat[q]);
  free(r->pat), free(r->sum), free(r->mag);
}

/* Elements of this rank's output (host copy `h`, n elements) that are wrong. */
static int64_t coll_count_wrong(const coll_ref_t *ref, int kind, int rank, size_t count, const uint16_t *h) {
  const size_t P = ref->period;
  const int W = ref->world;
  const float tol_scale = (float)W / 256.0f;
  int64_t wrong = 0;
  switch (kind) {
    case C_AG:
      for (int q = 0; q < W; ++q)
        for (size_t j = 0; j < count; ++j) wrong += h[(size_t)q * count + j] != ref->pat[q][j % P];
      break;
    case C_A2A:
      for (int p = 0; p < W; ++p)
        for (size_t j = 0; j < count; ++j)
          wrong += h[(size_t)p * count + j] != ref->pat[p][((size_t)rank * count + j) % P];
      break;
    case C_AR:
    case C_RS: {
      const size_t off = kind == C_RS ? (size_t)rank * count : 0;
      for (size_t j = 0; j < count; ++j) {
        size_t i = (off + j) % P;
        float d = fabsf(loom_ref_bf16_to_float(h[j]) - ref->sum[i]);
        wrong += !(d <= tol_scale * ref->mag[i] + 1e-6f); /* NaN (poison) is wrong */
      }
      break;
    }
  }
  return wrong;
}

static int coll_part(loom_rank_ctx_t *ctx, baseline_args_t *a, cudaStream_t s, loom_bench_table_t *t) {
  const int W = ctx->size;
  int64_t sizes_all[] = {INT64_C(1) << 20, INT64_C(4) << 20, INT64_C(16) << 20, INT64_C(64) << 20,
                         INT64_C(256) << 20, INT64_C(1) << 30};
  int64_t sizes[6];
  int nsizes = 0;
  for (int i = 0; i < 6; ++i) {
    if (a->o.quick && (i == 1 || i == 3 || i == 5)) continue;
    if (sizes_all[i] <= a->max_bytes) sizes[nsizes++] = sizes_all[i];
  }
  /* What fits: send + recv of the largest size, plus a margin, on every rank. */
  size_t free_b = 0, total_b = 0;
  int64_t fit = nsizes;
  if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess)
    while (fit > 0 && (size_t)(2 * sizes[fit - 1]) + ((size_t)1 << 30) > free_b) fit--;
  if (loom_bench_reduce_ranks(ctx->nccl, s, &fit, ncclMin) != LOOM_SUCCESS) {
    fprintf(stderr, "rank %d: %s\n", ctx->rank, loom_last_error());
    return 1;
  }
  if (fit < nsizes && ctx->rank == 0)
    loom_bench_note(t, "collectives above %lld MiB skipped: not enough free GPU memory",
                    (long long)(fit ? sizes[fit - 1] >> 20 : 0));
  nsizes = (int)fit;
  if (nsizes == 0) return 1;

  const int64_t max_bytes = sizes[nsizes - 1];
  void *send = NULL, *recv = NULL;
  uint16_t *host = NULL;
  coll_ref_t ref;
  memset(&ref, 0, sizeof ref);
  int64_t bad = 0;
  if (cudaMalloc(&send, (size_t)max_bytes) != cudaSuccess || cudaMalloc(&recv, (size_t)max_bytes) != cudaSuccess)
    bad = 1, fprintf(stderr, "rank %d: cudaMalloc of 2 x %lld bytes failed\n", ctx->rank, (long long)max_bytes);
  if (!bad && loom_bench_fill_random(send, LOOM_BF16, (size_t)max_bytes / 2, BASE_SEED + 77 + (uint64_t)ctx->rank,
                                     1.0) != LOOM_SUCCESS)
    bad = 1, fprintf(stderr, "rank %d: %s\n", ctx->rank, loom_last_error());
  if (!bad && a->o.check) {
    host = (uint16_t *)malloc((size_t)max_bytes);
    if (!host || coll_ref_init(&ref, W, (size_t)max_bytes / 2) != 0)
      bad = 1, fprintf(stderr, "rank %d: host allocation for the check failed\n", ctx->rank);
  }
  int failures = 0;
  if (loom_bench_sum_ranks(ctx->nccl, s, &bad) != LOOM_SUCCESS || bad) {
    if (ctx->rank == 0) fprintf(stderr, "loom-bench baseline: collectives not run (setup failed on %lld ranks)\n",
                                (long long)bad);
    failures = 1;
    goto out;
  }
  if (ctx->rank == 0) {
    if (W == 1)
      loom_bench_note(t, "1 GPU: the collectives ran with W=1 (no inter-GPU traffic; busbw is 0 by the "
                         "nccl-tests formula)");
    loom_bench_note(t, "collectives: bytes as nccl-tests (AR each rank's buffer, AG the gathered output, RS the "
                       "input, A2A each rank's send buffer); time = median over reps of the slowest rank");
  }
  for (int kind = 0; kind < C_NUM; ++kind)
    for (int si = 0; si < nsizes; ++si) {
      const size_t es = 2;
      coll_run_t c;
      c.nccl = ctx->nccl, c.kind = kind, c.send = send, c.recv = recv;
      c.count = kind == C_AR ? (size_t)sizes[si] / es : (size_t)sizes[si] / es / (size_t)W;
      const size_t out_elems = kind == C_AG || kind == C_A2A ? c.count * (size_t)W : c.count;
      const int64_t bytes = (int64_t)((kind == C_AR ? c.count : c.count * (size_t)W) * es);
      if (c.count == 0) continue;
      loom_bench_time_t tm;
      loom_result_t r = LOOM_SUCCESS;
      cudaError_t e = cudaMemsetAsync(recv, 0xFF, out_elems * es, s); /* poison: bf16 NaN */
      if (e != cudaSuccess) r = loom_bench_cuda_fail((int)e, "cudaMemsetAsync", __FILE__, __LINE__);
      /* every rank enters the timing (it lines ranks up and reduces a failure to all) */
      loom_result_t rt = loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, coll_op, &c, &tm);
      if (r == LOOM_SUCCESS) r = rt;
      int64_t wrong = -1;
      if (r == LOOM_SUCCESS && a->o.check) {
        e = cudaMemcpy(host, recv, out_elems * es, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) r = loom_bench_cuda_fail((int)e, "cudaMemcpy (check)", __FILE__, __LINE__);
        else wrong = coll_count_wrong(&ref, kind, ctx->rank, c.count, host);
      }
      int64_t failed = r != LOOM_SUCCESS;
      if (failed) fprintf(stderr, "rank %d: %s %lld bytes: %s\n", ctx->rank, coll_name[kind], (long long)bytes,
                          loom_last_error());
      if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) return failures + 1; /* comm is gone */
      if (a->o.check && !failed && loom_bench_sum_ranks(ctx->nccl, s, &wrong) != LOOM_SUCCESS) return failures + 1;
      if (ctx->rank != 0) continue;
      loom_bench_row_t *row = loom_bench_add(t);
      if (!row) return failures + 1;
      snprintf(row->op, sizeof row->op, "%s", coll_name[kind]);
      snprintf(row->impl, sizeof row->impl, "nccl");
      loom_bench_format_bytes(bytes, row->shape, sizeof row->shape);
      snprintf(row->dtype, sizeof row->dtype, "bf16");
      row->bytes = bytes;
      row->world = W;
      row->busbw_factor = kind == C_AR ? 2.0 * (W - 1) / W : (double)(W - 1) / W;
      if (failed) {
        snprintf(row->note, sizeof row->note, "error on %lld rank(s)", (long long)failed);
        failures++;
        continue;
      }
      row->comm_us = tm.median_us, row->min_us = tm.min_us, row->max_us = tm.max_us;
      row->wrong = a->o.check ? wrong : -1;
      if (row->wrong > 0) failures++;
      loom_bench_row_finish(row);
      printf("# %-13s %8s %10.1f us  algbw %7.1f  busbw %7.1f GB/s\n", row->op, row->shape, row->comm_us,
             row->algbw, row->busbw);
      fflush(stdout);
    }
out:
  if (send) cudaFree(send);
  if (recv) cudaFree(recv);
  free(host);
  coll_ref_free(&ref);
  return failures;
}

/* ---- the suite -------------------------------------------------------------- */

static int baseline_rank(loom_rank_ctx_t *ctx, void *arg) {
  baseline_args_t *a = (baseline_args_t *)arg;
  cudaStream_t s = NULL; /* blocking: ordered after plain cudaMemcpy/cudaMemset on the legacy stream */
  if (cudaStreamCreate(&s) != cudaSuccess) {
    fprintf(stderr, "rank %d: cudaStreamCreate failed\n", ctx->rank);
    return 1;
  }
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  int failures = 0;
  if (ctx->rank == 0) {
    int dev = 0;
    struct cudaDeviceProp p;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&p, dev) == cudaSuccess)
      printf("# loom-bench baseline: %d rank(s); rank 0 on %s (%d SMs, %d MiB L2, %zu GiB)\n", ctx->size, p.name,
             p.multiProcessorCount, p.l2CacheSize >> 20, p.totalGlobalMem >> 30);
    fflush(stdout);
  }
  if (a->gemm) {
    if (ctx->rank == 0) failures += gemm_part(a, s, &t);
    if (ctx->size > 1 && loom_bench_barrier(ctx->nccl, s) != LOOM_SUCCESS) {
      fprintf(stderr, "rank %d: %s\n", ctx->rank, loom_last_error());
      failures++;
      a->coll = 0;
    }
  }
  if (a->coll) failures += coll_part(ctx, a, s, &t);
  if (ctx->rank == 0) {
    loom_bench_note(&t, "GEMM: cuBLASLt, fp32 accumulation, best of %d heuristic candidates, on GPU %d only",
                    a->candidates, ctx->device);
    char title[160];
    snprintf(title, sizeof title, "loom-bench baseline: cuBLASLt GEMM and NCCL collectives, world %d, median of %d reps",
             ctx->size, a->o.reps);
    failures = loom_bench_finish("baseline", &t, &a->o, ctx->size, title, failures);
  }
  loom_bench_table_free(&t);
  loom_bench_base_gemm_release();
  cudaStreamDestroy(s);
  return failures ? 1 : 0;
}

LOOM_BENCH(baseline, "cuBLASLt GEMM and NCCL collectives (the baselines fused ops must beat)") {
  baseline_args_t a;
  memset(&a, 0, sizeof a);
  a.gemm = a.coll = 1;
  a.candidates = 0;
  a.max_bytes = INT64_C(1) << 30;
  int rc = loom_bench_parse(&a.o, argc, argv, baseline_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (!a.candidates) a.candidates = a.o.quick ? 4 : 8;
  int world = loom_bench_world(&a.o, a.coll ? 0 : 1);
  if (world == 0) return 1;
  return loom_bench_launch(&a.o, world, baseline_rank, &a) ? 1 : 0;
}
