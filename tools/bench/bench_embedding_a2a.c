/*
 * bench_embedding_a2a.c - loom-bench embedding_a2a: the fused embedding-bag
 * + All-to-All against its parts and the sequential path, side by side in
 * one run (issue 4's shapes: D = 256, pooling 32, 100k rows per table,
 * fp32, (B, T per GPU) in {(1024,64), (4096,64), (4096,128), (16384,64)}).
 *
 * Per shape, every rank: tables filled with random values on the device,
 * CSR inputs from bench/dlrm_gen.h (uniform indices, fixed pooling, or
 * --zipf / --variable), then, timed with loom_bench_time_ranks (max over
 * ranks per repetition, median):
 *   fused  loom_embedding_a2a on the zero-copy plan
 *   pool   loom_embedding_pool alone (no communication): the "gemm" column,
 *          so ECT = fused - pool and overlap = 1 - ECT(fused)/ECT(seq)
 *   comm   NCCL AlltoAll alone (ncclSend/Recv group) of the pooled bytes
 *   seq    the staged plan: loom pooling + NCCL send/recv + reorder into the
 *          interaction layout (the sequential path, same output)
 * The fused output is compared with the staged output word for word (same
 * pooling code and order, so bit-identical): #wrong.
 * Then, at B = 4096, T = 64: the slice-size sweep (S = 8..512), and
 * remote-first against local-first with each rank's own median time (the
 * spread between the ranks' finish times, the paper's Figure 13).
 * --variants: at B = 4096, T = 64 only, the row-loop table (each forward row
 * loop and cut timed as pooling alone and fused, side by side, registers,
 * outputs compared word for word with the default pooling and the staged
 * path), then the table of work cuts (--loops: the first table only).
 * HBM floor: pooling reads T*B*L*D*4 bytes of rows (+ 8-byte indices) and
 * writes B*T*D*4; at 4.3 TB/s (copy, read + write) that is the pool floor.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench.h"
#include "bench/dlrm_gen.h"
#include "core/baseline.h"
#include "loom.h"
#include "ops/embedding_a2a.h"

typedef struct emb_args {
  loom_bench_opts_t o;
  int pooling, dim;
  int64_t rows;
  double zipf;
  int variable;
  int sweep;
  int variants;      /* 1: only the variant tables (B=4096, T=64) */
  int loops_only;    /* 1: only the row-loop table (sets variants) */
} emb_args_t;

static int emb_opt(void *ctx, int argc, char **argv, int *i) {
  emb_args_t *a = (emb_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --zipf ALPHA      Zipf-distributed indices (default uniform)\n"
           "  --variable        bag lengths uniform in [0, 2L] (default fixed L = 32)\n"
           "  --no-sweep        skip the slice-size sweep and the remote-first comparison\n"
           "  --variants        only the kernel variant tables at B=4096, T=64: row loops (pooling\n"
           "                    alone and fused side by side, outputs checked), then task size,\n"
           "                    worker group, rows in flight, fetch, per-task count, exit waits\n"
           "  --loops           only the row-loop table (B=4096, T=64)\n");
    return 1;
  }
  if (!strcmp(s, "--variable")) return a->variable = 1, 1;
  if (!strcmp(s, "--no-sweep")) return a->sweep = 0, 1;
  if (!strcmp(s, "--variants")) return a->variants = 1, 1;
  if (!strcmp(s, "--loops")) return a->variants = a->loops_only = 1, 1;
  if (!strcmp(s, "--zipf")) {
    if (*i + 1 >= argc) return -1;
    a->zipf = atof(argv[++*i]);
    return a->zipf > 0 ? 1 : -1;
  }
  return 0;
}

typedef struct emb_call {
  loom_plan_t plan;
  int which;                    /* 0 fused/staged a2a, 1 pool, 2 nccl a2a */
  const void *tables;
  const int64_t *idx, *off;
  int64_t n;
  void *out;
  void *send, *recv;
  size_t per_peer;
  ncclComm_t nccl;
} emb_call_t;

static loom_result_t emb_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  emb_call_t *c = (emb_call_t *)arg;
  switch (c->which) {
    case 0: return loom_embedding_a2a(c->plan, c->tables, c->idx, c->off, c->n, NULL, c->out, s);
    case 1: return loom_embedding_pool(c->plan, c->tables, c->idx, c->off, c->n, NULL, c->out, s);
    default: return loom__base_alltoall(c->nccl, c->send, c->recv, c->per_peer, LOOM_FP32, s);
  }
}

typedef struct emb_shape {
  int64_t B;
  int T;
} emb_shape_t;

/* A new table row of an fp32 embedding_a2a measurement at shape sh on W
 * ranks (op, impl, shape, dtype, world set). Out of host memory, the row
 * goes to a spare that is never printed (said on stderr): rank 0 carries on,
 * so the other ranks' collectives are not left waiting. */
static loom_bench_row_t *emb_row(loom_bench_table_t *t, const char *op, const char *impl, emb_shape_t sh, int W) {
  static loom_bench_row_t spare;
  loom_bench_row_t *r = loom_bench_add(t);
  if (!r) {
    fprintf(stderr, "loom-bench embedding_a2a: out of host memory: row %s %s dropped\n", op, impl);
    r = &spare;
  }
  snprintf(r->op, sizeof r->op, "%s", op);
  snprintf(r->impl, sizeof r->impl, "%s", impl);
  snprintf(r->shape, sizeof r->shape, "B=%lld T=%d/GPU", (long long)sh.B, sh.T);
  snprintf(r->dtype, sizeof r->dtype, "fp32");
  r->world = W;
  return r;
}

/* Buffers and inputs of one shape on this rank. */
typedef struct emb_bufs {
  void *tables, *out, *out2, *pooled, *send, *recv;
  int64_t *idx, *off, n;
  int64_t *rows;
  int tpr[64];
} emb_bufs_t;

static void bufs_free(loom_comm_t comm, emb_bufs_t *b) {
  cudaFree(b->tables);
  if (b->out) loom_free(comm, b->out);
  cudaFree(b->out2);
  cudaFree(b->pooled);
  cudaFree(b->send);
  cudaFree(b->recv);
  cudaFree(b->idx);
  cudaFree(b->off);
  free(b->rows);
  memset(b, 0, sizeof *b);
}

static loom_result_t make_plan(loom_comm_t comm, const emb_args_t *a, emb_bufs_t *b, int W, emb_shape_t sh, int S,
                               int local_first, loom_embedding_path_t path, loom_plan_t *p) {
  loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
  d.world_size = W;
  d.tables_per_rank = b->tpr;
  d.rows = b->rows;
  d.dim = a->dim;
  d.global_batch = sh.B;
  d.slice_samples = S;
  d.local_first = local_first;
  d.path = path;
  return loom_plan_embedding_a2a(comm, &d, p);
}

#define TRY(call)                                                                       \
  do {                                                                                  \
    loom_result_t r_ = (call);                                                          \
    if (r_ != LOOM_SUCCESS) {                                                           \
      fprintf(stderr, "rank %d: %s: %s\n", ctx->rank, #call, loom_last_error());       \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)
#define CTRY(call)                                                                      \
  do {                                                                                  \
    cudaError_t e_ = (call);                                                            \
    if (e_ != cudaSuccess) {                                                            \
      fprintf(stderr, "rank %d: %s: %s\n", ctx->rank, #call, cudaGetErrorString(e_));  \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

/* Allocates and fills the inputs of one shape. */
static int shape_inputs(loom_rank_ctx_t *ctx, loom_comm_t comm, const emb_args_t *a, emb_shape_t sh, emb_bufs_t *b) {
  const int W = ctx->size, T = sh.T, D = a->dim;
  const int64_t B = sh.B, Bl = B / W;
  memset(b, 0, sizeof *b);
  for (int p = 0; p < W; ++p) b->tpr[p] = T;
  b->rows = (int64_t *)malloc((size_t)T * (size_t)W * sizeof(int64_t));
  for (int g = 0; g < T * W; ++g) b->rows[g] = a->rows;
  const size_t tab = (size_t)T * (size_t)a->rows * (size_t)D;
  CTRY(cudaMalloc(&b->tables, tab * 4));
  TRY(loom_bench_fill_random(b->tables, LOOM_FP32, tab, 1234 + (uint64_t)ctx->rank, 1.0));
  int64_t *h_off = (int64_t *)malloc(((size_t)T * (size_t)B + 1) * sizeof(int64_t));
  loom_dlrm_gen_t g = {T, B, b->rows, a->pooling, a->variable, 0.0, a->zipf, 77 + (uint64_t)ctx->rank};
  b->n = loom_dlrm_gen_offsets(&g, h_off);
  int64_t *h_idx = (int64_t *)malloc((size_t)b->n * sizeof(int64_t));
  if (loom_dlrm_gen_indices(&g, h_off, h_idx) != 0) return 1;
  CTRY(cudaMalloc((void **)&b->off, ((size_t)T * (size_t)B + 1) * sizeof(int64_t)));
  CTRY(cudaMalloc((void **)&b->idx, (size_t)b->n * sizeof(int64_t)));
  CTRY(cudaMemcpy(b->off, h_off, ((size_t)T * (size_t)B + 1) * sizeof(int64_t), cudaMemcpyHostToDevice));
  CTRY(cudaMemcpy(b->idx, h_idx, (size_t)b->n * sizeof(int64_t), cudaMemcpyHostToDevice));
  free(h_off);
  free(h_idx);
  const size_t out = (size_t)Bl * (size_t)T * (size_t)W * (size_t)D * 4;
  TRY(loom_malloc(comm, out, &b->out));
  CTRY(cudaMalloc(&b->out2, out));
  CTRY(cudaMalloc(&b->pooled, (size_t)B * (size_t)T * (size_t)D * 4));
  CTRY(cudaMalloc(&b->send, (size_t)B * (size_t)T * (size_t)D * 4));
  CTRY(cudaMalloc(&b->recv, (size_t)B * (size_t)T * (size_t)D * 4));
  return 0;
}

/* One row of the variant table: which op (0 fused, 1 pool), slice, tuning. */
typedef struct emb_variant {
  const char *name;
  int which, S;
  loom_emb_tuning_t tun;
} emb_variant_t;

static const emb_variant_t g_variants[] = {
  /* block tasks (a worker = the block's 8 warps, 1 bag per warp per task): the kernel of f07cc73 */
  {"pool g8 P8 static", 1, 128, {8, 8, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"pool g8 P8 dynamic fetch", 1, 128, {8, 8, 8, LOOM_EMB_V_DYNFETCH | LOOM_EMB_V_NOPREFETCH, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P8 (f07cc73)", 0, 128, {8, 8, 8, LOOM_EMB_V_NOPREFETCH, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P8 no exit wait", 0, 128, {8, 8, 8, LOOM_EMB_V_NOPREFETCH | LOOM_EMB_V_NOWAIT, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P8 no count/flags/wait", 0, 128, {8, 8, 8, LOOM_EMB_V_NOPREFETCH | LOOM_EMB_V_NOCOUNT, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P8 prefetch", 0, 128, {8, 8, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P32 (4 bags/warp)", 0, 128, {8, 32, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"pool g8 P32", 1, 128, {8, 32, 8, 0, LOOM_EMB_LOOP_SELECT}},
  /* warp tasks */
  {"pool g1 P4 static", 1, 128, {1, 4, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"pool g1 P4 dynamic", 1, 128, {1, 4, 8, LOOM_EMB_V_DYNFETCH, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P1", 0, 128, {1, 1, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P2", 0, 128, {1, 2, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P4", 0, 128, {1, 4, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P8", 0, 128, {1, 8, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P16", 0, 128, {1, 16, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P4 no exit wait", 0, 128, {1, 4, 8, LOOM_EMB_V_NOWAIT, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P4 no count/flags/wait", 0, 128, {1, 4, 8, LOOM_EMB_V_NOCOUNT, LOOM_EMB_LOOP_SELECT}},
  {"fused g2 P8", 0, 128, {2, 8, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g4 P16", 0, 128, {4, 16, 8, 0, LOOM_EMB_LOOP_SELECT}},
  /* 16 row chunks in flight per lane */
  {"pool g1 P4 unroll16", 1, 128, {1, 4, 16, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P4 unroll16", 0, 128, {1, 4, 16, 0, LOOM_EMB_LOOP_SELECT}},
  {"pool g8 P8 unroll16", 1, 128, {8, 8, 16, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P32 unroll16", 0, 128, {8, 32, 16, 0, LOOM_EMB_LOOP_SELECT}},
  /* slices of 256 */
  {"fused g1 P4 S256", 0, 256, {1, 4, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g1 P8 S256", 0, 256, {1, 8, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"fused g8 P32 S256", 0, 256, {8, 32, 8, 0, LOOM_EMB_LOOP_SELECT}},
};

/* Row loops (LOOM_EMB_LOOP_*, src/ops/embedding_a2a.h): each tuning timed
 * as pooling alone and fused, side by side, its outputs checked. */
typedef struct emb_loop_row {
  const char *name;
  loom_emb_tuning_t tun;
} emb_loop_row_t;

static const emb_loop_row_t g_loops[] = {
  {"FLAT g1 P4 (default)", {1, 4, 8, 0, LOOM_EMB_LOOP_FLAT}},
  {"SELECT g1 P4 (61b3453 default)", {1, 4, 8, 0, LOOM_EMB_LOOP_SELECT}},
  {"SELECT g1 P4 no reg cap", {1, 4, 8, LOOM_EMB_V_NOCAP, LOOM_EMB_LOOP_SELECT}},
  {"F07 g1 P4 (f07cc73 bag loop)", {1, 4, 8, 0, LOOM_EMB_LOOP_F07}},
  {"F07 g8 P8 (f07cc73 scheme)", {8, 8, 8, LOOM_EMB_V_NOPREFETCH, LOOM_EMB_LOOP_F07}},
  {"FLAT g1 P8", {1, 8, 8, 0, LOOM_EMB_LOOP_FLAT}},
  {"FLAT g1 P16", {1, 16, 8, 0, LOOM_EMB_LOOP_FLAT}},
  {"FLAT g1 P4 unroll16", {1, 4, 16, 0, LOOM_EMB_LOOP_FLAT}},
  {"PIPE g1 P4", {1, 4, 8, 0, LOOM_EMB_LOOP_PIPE}},
  {"PIPE g1 P8", {1, 8, 8, 0, LOOM_EMB_LOOP_PIPE}},
  {"FLAT g8 P32", {8, 32, 8, 0, LOOM_EMB_LOOP_FLAT}},
  {"FLAT g1 P4 (default, again)", {1, 4, 8, 0, LOOM_EMB_LOOP_FLAT}},
};

/* Words of the device buffer `d` that differ from `ref` (a word left at
 * the 0xff poison counts as wrong); prints the first few. */
static int64_t count_wrong(const void *d, const uint32_t *ref, uint32_t *h, size_t words, const char *what, int rank) {
  if (cudaMemcpy(h, d, words * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return (int64_t)words;
  int64_t wrong = 0;
  for (size_t i = 0; i < words; ++i)
    if (h[i] != ref[i] || h[i] == 0xffffffffu) {
      if (wrong < 3) fprintf(stderr, "rank %d %s: word %zu = 0x%08x, expected 0x%08x\n", rank, what, i, h[i], ref[i]);
      ++wrong;
    }
  return wrong;
}

/* The loop table at one shape: references first (pooling with the default
 * tuning; the staged path: that pooling + NCCL + reorder), then per row the
 * pooling-alone and fused times (max over ranks per repetition, median) and
 * one more call of each on poisoned outputs, compared word for word with the
 * references (every loop adds the same products in the same order). */
static int run_loops(loom_rank_ctx_t *ctx, loom_comm_t comm, const emb_args_t *a, emb_bufs_t *b, emb_shape_t sh,
                     cudaStream_t s, loom_bench_table_t *t, int *failures) {
  const int W = ctx->size, D = a->dim, L = a->pooling;
  const int n = (int)(sizeof g_loops / sizeof *g_loops);
  const size_t wpool = (size_t)sh.B * (size_t)sh.T * (size_t)D;
  const size_t wout = (size_t)(sh.B / W) * (size_t)sh.T * (size_t)W * (size_t)D;
  loom_plan_t p = NULL, staged = NULL;
  TRY(make_plan(comm, a, b, W, sh, 128, 0, LOOM_EMB_PATH_AUTO, &p));
  TRY(make_plan(comm, a, b, W, sh, 128, 0, LOOM_EMB_PATH_STAGED, &staged));
  uint32_t *ref_pool = (uint32_t *)malloc(wpool * 4), *ref_out = (uint32_t *)malloc(wout * 4);
  uint32_t *h = (uint32_t *)malloc((wpool > wout ? wpool : wout) * 4);
  if (!ref_pool || !ref_out || !h) {
    fprintf(stderr, "rank %d: host buffers for the loop table\n", ctx->rank);
    return 1;
  }
  emb_call_t cp = {p, 1, b->tables, b->idx, b->off, b->n, b->pooled, NULL, NULL, 0, ctx->nccl};
  emb_call_t cf = {p, 0, b->tables, b->idx, b->off, b->n, b->out, NULL, NULL, 0, ctx->nccl};
  emb_call_t cs = {staged, 0, b->tables, b->idx, b->off, b->n, b->out2, NULL, NULL, 0, ctx->nccl};
  CTRY(cudaMemsetAsync(b->pooled, 0xff, wpool * 4, s));
  CTRY(cudaMemsetAsync(b->out2, 0xff, wout * 4, s));
  TRY(emb_op(&cp, 0, s));
  TRY(emb_op(&cs, 0, s));
  CTRY(cudaStreamSynchronize(s));
  TRY(loom_comm_get_async_error(comm));
  CTRY(cudaMemcpy(ref_pool, b->pooled, wpool * 4, cudaMemcpyDeviceToHost));
  CTRY(cudaMemcpy(ref_out, b->out2, wout * 4, cudaMemcpyDeviceToHost));
  const double bytes = (double)sh.T * (double)sh.B * (double)L * D * 4 + (double)sh.T * sh.B * L * 8 +
                       (double)sh.T * sh.B * D * 4;
  if (ctx->rank == 0) {
    printf("# row loops, B=%lld T=%d S=128 (src/ops/embedding_a2a.h LOOM_EMB_LOOP_*); %% = of 4.3 TB/s; wrong = words "
           "!= default pooling / staged output\n",
           (long long)sh.B, sh.T);
    printf("# %-30s %9s %5s %9s %5s %7s %5s %6s %5s %6s %6s\n", "loop", "pool us", "%", "fused us", "%", "f/p-1", "regs",
           "spill", "grid", "wrongP", "wrongF");
    fflush(stdout);
  }
  for (int i = 0; i < n; ++i) {
    const emb_loop_row_t *v = &g_loops[i];
    TRY(loom__emb_set_tuning(p, &v->tun));
    loom_embedding_plan_info_t info;
    TRY(loom_embedding_a2a_plan_info(p, &info));
    int regs = 0, spill = 0;
    TRY(loom__emb_forward_regs(LOOM_FP32, LOOM_FP32, D, &v->tun, &regs, &spill));
    loom_bench_time_t tp, tf;
    TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &cp, &tp));
    TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &cf, &tf));
    TRY(loom_comm_get_async_error(comm));
    TRY(loom_embedding_a2a_check(p));
    int64_t wp = -1, wf = -1;
    if (a->o.check) {
      CTRY(cudaMemsetAsync(b->pooled, 0xff, wpool * 4, s));
      CTRY(cudaMemsetAsync(b->out, 0xff, wout * 4, s));
      TRY(emb_op(&cp, 0, s));
      TRY(emb_op(&cf, 0, s));
      CTRY(cudaStreamSynchronize(s));
      TRY(loom_comm_get_async_error(comm));
      wp = count_wrong(b->pooled, ref_pool, h, wpool, v->name, ctx->rank);
      wf = count_wrong(b->out, ref_out, h, wout, v->name, ctx->rank);
      TRY(loom_bench_sum_ranks(ctx->nccl, s, &wp));
      TRY(loom_bench_sum_ranks(ctx->nccl, s, &wf));
      *failures += (wp != 0) + (wf != 0);
    }
    if (ctx->rank == 0) {
      const double gp = bytes / (tp.median_us * 1e-6) / 1e9, gf = bytes / (tf.median_us * 1e-6) / 1e9;
      char impl_[sizeof ((loom_bench_row_t *)0)->impl];
      snprintf(impl_, sizeof impl_, "%.23s", v->name);
      loom_bench_row_t *r = emb_row(t, "emb_a2a loop", impl_, sh, W);
      r->fused_us = tf.median_us;
      r->gemm_us = tp.median_us;
      r->min_us = tf.min_us;
      r->max_us = tf.max_us;
      r->wrong = a->o.check ? wp + wf : -1;
      snprintf(r->note, sizeof r->note, "%s; pool %.0f%% fused %.0f%% HBM; %d regs, %d B local; grid %d", v->name,
               gp / 43.0, gf / 43.0, regs, spill, info.grid_blocks);
      loom_bench_row_finish(r);
      printf("  %-30s %9.1f %4.0f%% %9.1f %4.0f%% %+6.1f%% %5d %6d %5d %6lld %6lld\n", v->name, tp.median_us, gp / 43.0,
             tf.median_us, gf / 43.0, 100.0 * (tf.median_us / tp.median_us - 1.0), regs, spill, info.grid_blocks,
             (long long)wp, (long long)wf);
      fflush(stdout);
    }
  }
  const loom_emb_tuning_t tdef = LOOM_EMB_TUNING_DEFAULT;
  TRY(loom__emb_set_tuning(p, &tdef));
  free(ref_pool);
  free(ref_out);
  free(h);
  TRY(loom_plan_destroy(staged));
  TRY(loom_plan_destroy(p));
  return 0;
}

/* The variant table at one shape: each row timed like the main table (max
 * over ranks per repetition, median). */
static int run_variants(loom_rank_ctx_t *ctx, loom_comm_t comm, const emb_args_t *a, emb_bufs_t *b, emb_shape_t sh,
                        cudaStream_t s, loom_bench_table_t *t) {
  const int W = ctx->size, D = a->dim, L = a->pooling;
  const int n = (int)(sizeof g_variants / sizeof *g_variants);
  loom_plan_t p128 = NULL, p256 = NULL;
  TRY(make_plan(comm, a, b, W, sh, 128, 0, LOOM_EMB_PATH_AUTO, &p128));
  TRY(make_plan(comm, a, b, W, sh, 256, 0, LOOM_EMB_PATH_AUTO, &p256));
  double rd = (double)sh.T * (double)sh.B * (double)L * D * 4, ix = (double)sh.T * sh.B * L * 8,
         wr = (double)sh.T * sh.B * D * 4;
  for (int i = 0; i < n; ++i) {
    const emb_variant_t *v = &g_variants[i];
    loom_plan_t p = v->S == 256 ? p256 : p128;
    TRY(loom__emb_set_tuning(p, &v->tun));
    loom_embedding_plan_info_t info;
    TRY(loom_embedding_a2a_plan_info(p, &info));
    emb_call_t c = {p, v->which, b->tables, b->idx, b->off, b->n, v->which ? b->pooled : b->out, NULL, NULL, 0,
                    ctx->nccl};
    loom_bench_time_t tm;
    TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &c, &tm));
    TRY(loom_comm_get_async_error(comm));
    TRY(loom_embedding_a2a_check(p));
    if (ctx->rank == 0) {
      char impl_[sizeof ((loom_bench_row_t *)0)->impl];
      snprintf(impl_, sizeof impl_, "%s", v->name);
      loom_bench_row_t *r = emb_row(t, "emb_a2a variant", impl_, sh, W);
      r->fused_us = tm.median_us;
      r->min_us = tm.min_us;
      r->max_us = tm.max_us;
      const double gbs = (rd + ix + wr) / (tm.median_us * 1e-6) / 1e9;
      snprintf(r->note, sizeof r->note, "%.0f GB/s = %.0f%% of 4.3 TB/s; grid %d", gbs, gbs / 43.0, info.grid_blocks);
      loom_bench_row_finish(r);
      printf("# variant %-34s %9.1f us  (min %.1f max %.1f)  %5.0f GB/s  %3.0f%%  grid %d\n", v->name, tm.median_us,
             tm.min_us, tm.max_us, gbs, gbs / 43.0, info.grid_blocks);
      fflush(stdout);
    }
  }
  TRY(loom_plan_destroy(p128));
  TRY(loom_plan_destroy(p256));
  return 0;
}

static int emb_rank(loom_rank_ctx_t *ctx, void *arg) {
  emb_args_t *a = (emb_args_t *)arg;
  const int W = ctx->size, D = a->dim, L = a->pooling;
  cudaStream_t s;
  CTRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  loom_comm_t comm = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.workspace_bytes = (size_t)64 << 20;
  TRY(loom_comm_create(ctx->nccl, &cfg, &comm));
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  static const emb_shape_t full[] = {{1024, 64}, {4096, 64}, {4096, 128}, {16384, 64}};
  static const emb_shape_t quick[] = {{1024, 64}, {4096, 64}};
  const emb_shape_t *shapes = a->o.quick ? quick : full;
  const int nshapes = a->o.quick ? 2 : 4;
  int failures = 0;
  if (ctx->rank == 0) {
    struct cudaDeviceProp p;
    int dev = 0;
    cudaGetDevice(&dev);
    cudaGetDeviceProperties(&p, dev);
    printf("# loom-bench embedding_a2a: %d rank(s) on %s (%d SMs); D=%d L=%d rows=%lld fp32 %s%s\n", W, p.name,
           p.multiProcessorCount, D, L, (long long)a->rows, a->zipf > 0 ? "zipf" : "uniform",
           a->variable ? " variable" : " fixed");
    fflush(stdout);
  }
  for (int si = 0; si < nshapes; ++si) {
    emb_shape_t sh = shapes[si];
    if (a->variants && !(sh.B == 4096 && sh.T == 64)) continue;
    emb_bufs_t b;
    if (shape_inputs(ctx, comm, a, sh, &b)) return 1;
    if (a->variants) {
      if (run_loops(ctx, comm, a, &b, sh, s, &t, &failures)) return 1;
      if (a->loops_only == 0 && run_variants(ctx, comm, a, &b, sh, s, &t)) return 1;
      CTRY(cudaStreamSynchronize(s));
      bufs_free(comm, &b);
      continue;
    }
    loom_plan_t fused = NULL, staged = NULL;
    TRY(make_plan(comm, a, &b, W, sh, 0, 0, LOOM_EMB_PATH_AUTO, &fused));
    TRY(make_plan(comm, a, &b, W, sh, 0, 0, LOOM_EMB_PATH_STAGED, &staged));
    emb_call_t cf = {fused, 0, b.tables, b.idx, b.off, b.n, b.out, NULL, NULL, 0, ctx->nccl};
    emb_call_t cp = {fused, 1, b.tables, b.idx, b.off, b.n, b.pooled, NULL, NULL, 0, ctx->nccl};
    emb_call_t cs = {staged, 0, b.tables, b.idx, b.off, b.n, b.out2, NULL, NULL, 0, ctx->nccl};
    emb_call_t ca = {NULL, 2, NULL, NULL, NULL, 0, NULL, b.send, b.recv,
                     (size_t)(sh.B / W) * (size_t)sh.T * (size_t)D, ctx->nccl};
    loom_bench_time_t tf, tp, ts, ta;
    TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &cf, &tf));
    TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &cp, &tp));
    TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &cs, &ts));
    if (W > 1) TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &ca, &ta));
    TRY(loom_comm_get_async_error(comm));
    TRY(loom_embedding_a2a_check(fused));
    /* fused output == staged output, word for word */
    int64_t wrong = 0;
    if (a->o.check) {
      const size_t words = (size_t)(sh.B / W) * (size_t)sh.T * (size_t)W * (size_t)D;
      /* poison both outputs (all bits set: NaN), one more call of each */
      CTRY(cudaMemsetAsync(b.out, 0xff, words * 4, s));
      CTRY(cudaMemsetAsync(b.out2, 0xff, words * 4, s));
      TRY(emb_op(&cf, 0, s));
      TRY(emb_op(&cs, 0, s));
      CTRY(cudaStreamSynchronize(s));
      TRY(loom_comm_get_async_error(comm));
      uint32_t *h1 = (uint32_t *)malloc(words * 4), *h2 = (uint32_t *)malloc(words * 4);
      CTRY(cudaMemcpy(h1, b.out, words * 4, cudaMemcpyDeviceToHost));
      CTRY(cudaMemcpy(h2, b.out2, words * 4, cudaMemcpyDeviceToHost));
      for (size_t i = 0; i < words; ++i)
        if (h1[i] != h2[i] || h1[i] == 0xffffffffu) {
          if (wrong < 3) {
            float f1, f2;
            memcpy(&f1, &h1[i], 4);
            memcpy(&f2, &h2[i], 4);
            const size_t cols = (size_t)sh.T * (size_t)W * (size_t)D;
            fprintf(stderr, "rank %d B=%lld T=%d: out[%zu] (row %zu, table %zu, d %zu): fused %.9g (0x%08x), staged %.9g (0x%08x)\n",
                    ctx->rank, (long long)sh.B, sh.T, i, i / cols, (i % cols) / (size_t)D, i % (size_t)D, f1, h1[i], f2, h2[i]);
          }
          ++wrong;
        }
      free(h1);
      free(h2);
      TRY(loom_bench_sum_ranks(ctx->nccl, s, &wrong));
    }
    if (ctx->rank == 0) {
      loom_bench_row_t *r = emb_row(&t, "embedding_a2a", "loom", sh, W);
      r->m = sh.B;
      r->n = sh.T;
      r->bytes = (int64_t)(sh.B / W) * sh.T * W * D * 4;
      r->fused_us = tf.median_us;
      r->gemm_us = tp.median_us;
      r->seq_us = ts.median_us;
      r->comm_us = W > 1 ? ta.median_us : NAN;
      r->min_us = tf.min_us;
      r->max_us = tf.max_us;
      r->wrong = a->o.check ? wrong : -1;
      double rd = (double)sh.T * (double)sh.B * (double)L * D * 4, ix = (double)sh.T * sh.B * L * 8,
             wr = (double)sh.T * sh.B * D * 4;
      double pool_gbs = (rd + ix + wr) / (tp.median_us * 1e-6) / 1e9;
      loom_emb_tuning_t tun;
      TRY(loom__emb_get_tuning(fused, &tun));
      snprintf(r->note, sizeof r->note, "pool %.0f GB/s=%.0f%% HBM; seq/fused %.2fx; g%d P%d u%d", pool_gbs,
               pool_gbs / 43.0, ts.median_us / tf.median_us, tun.group, tun.part, tun.unroll);
      loom_bench_row_finish(r);
      printf("# B=%lld T=%d: fused %.1f us, pool %.1f us (%.0f GB/s, floor %.1f us at 4.3 TB/s), nccl a2a %.1f us, "
             "seq (pool+a2a+reorder) %.1f us, seq/fused %.2fx, wrong %lld\n",
             (long long)sh.B, sh.T, tf.median_us, tp.median_us, pool_gbs, (rd + ix + wr) / 4.3e12 * 1e6,
             W > 1 ? ta.median_us : 0.0, ts.median_us, ts.median_us / tf.median_us, (long long)wrong);
      fflush(stdout);
    }
    failures += wrong != 0;
    TRY(loom_plan_destroy(staged));
    if (a->sweep && sh.B == 4096 && sh.T == 64) {
      static const int Ss[] = {8, 16, 32, 64, 128, 256, 512};
      for (int k = 0; k < 7; ++k) {
        loom_plan_t p = NULL;
        TRY(make_plan(comm, a, &b, W, sh, Ss[k], 0, LOOM_EMB_PATH_AUTO, &p));
        emb_call_t c = {p, 0, b.tables, b.idx, b.off, b.n, b.out, NULL, NULL, 0, ctx->nccl};
        loom_bench_time_t tm;
        TRY(loom_bench_time_ranks(ctx->nccl, s, a->o.warmup, a->o.reps, emb_op, &c, &tm));
        if (ctx->rank == 0) {
          char impl_[sizeof ((loom_bench_row_t *)0)->impl];
          snprintf(impl_, sizeof impl_, "loom S=%d", Ss[k]);
          loom_bench_row_t *r = emb_row(&t, "emb_a2a slice sweep", impl_, sh, W);
          r->fused_us = tm.median_us;
          r->min_us = tm.min_us;
          r->max_us = tm.max_us;
          loom_bench_row_finish(r);
        }
        TRY(loom_plan_destroy(p));
      }
      /* remote-first vs local-first: each rank's own median (not max over ranks) */
      for (int lf = 0; lf < 2; ++lf) {
        loom_plan_t p = NULL;
        TRY(make_plan(comm, a, &b, W, sh, 0, lf, LOOM_EMB_PATH_AUTO, &p));
        emb_call_t c = {p, 0, b.tables, b.idx, b.off, b.n, b.out, NULL, NULL, 0, ctx->nccl};
        loom_bench_time_t tm;
        TRY(loom_bench_barrier(ctx->nccl, s));
        TRY(loom_bench_time(s, a->o.warmup, a->o.reps, emb_op, &c, &tm));
        int64_t mine = (int64_t)(tm.median_us * 1000.0), mx = mine, mn = mine;
        TRY(loom_bench_reduce_ranks(ctx->nccl, s, &mx, ncclMax));
        TRY(loom_bench_reduce_ranks(ctx->nccl, s, &mn, ncclMin));
        if (ctx->rank == 0) {
          char impl_[sizeof ((loom_bench_row_t *)0)->impl];
          snprintf(impl_, sizeof impl_, "loom %s", lf ? "local-first" : "remote-first");
          loom_bench_row_t *r = emb_row(&t, "emb_a2a order", impl_, sh, W);
          r->fused_us = mx / 1000.0;
          snprintf(r->note, sizeof r->note, "ranks' medians %.1f..%.1f us, skew %.1f us", mn / 1000.0, mx / 1000.0,
                   (mx - mn) / 1000.0);
          loom_bench_row_finish(r);
        }
        TRY(loom_plan_destroy(p));
      }
    }
    TRY(loom_plan_destroy(fused));
    CTRY(cudaStreamSynchronize(s));
    bufs_free(comm, &b);
  }
  if (ctx->rank == 0) {
    loom_bench_note(&t, "gemm column = loom pooling kernel alone; comm = NCCL AlltoAll (send/recv) of the pooled "
                        "bytes; seq = loom pooling + NCCL send/recv + reorder (the staged path)");
    loom_bench_note(&t, "pool GB/s counts rows read (T*B*L*D*4) + indices (8 B each) + pooled written (T*B*D*4)");
    char title[200];
    snprintf(title, sizeof title, "loom-bench embedding_a2a: D=%d L=%d rows=%lld fp32, world %d, median of %d reps", D,
             L, (long long)a->rows, W, a->o.reps);
    if (a->o.json) {
      char path[1200];
      if (loom_bench_write_json("embedding_a2a", &t, &a->o, W, path, sizeof path) == 0)
        loom_bench_note(&t, "JSON: %s", path);
    }
    loom_bench_print(stdout, &t, title);
  }
  loom_bench_table_free(&t);
  TRY(loom_comm_destroy(comm));
  cudaStreamDestroy(s);
  return failures ? 1 : 0;
}

LOOM_BENCH(embedding_a2a, "fused embedding-bag + All-to-All vs pooling, NCCL AlltoAll and the sequential path") {
  emb_args_t a;
  memset(&a, 0, sizeof a);
  a.pooling = 32;
  a.dim = 256;
  a.rows = 100000;
  a.sweep = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, emb_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  return loom_bench_launch(&a.o, world, emb_rank, &a) ? 1 : 0;
}
