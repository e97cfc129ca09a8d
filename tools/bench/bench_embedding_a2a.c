/*
 * bench_embedding_a2a.c - loom-bench embedding_a2a: the fused embedding-bag
 * + All-to-All against its parts, the sequential path, the previous build of
 * loom and PyTorch, side by side in one run. Shapes: D = 256, pooling 32,
 * 100k rows per table, fp32 tables, (B, T per GPU) in {(1024, 64), (4096,
 * 64), (4096, 128), (16384, 64)} (--quick: the first two).
 *
 * Every comparison is interleaved: each repetition runs every implementation
 * once, one after the other, on every rank (loom_bench_time_ranks_side_by_
 * side: the time of a repetition is the maximum over ranks; medians).
 *  forward, per shape (tables random on the device, CSR inputs from
 *  support/dlrm_gen.h, uniform indices or --zipf / --variable):
 *    fused   loom_embedding_a2a on the zero-copy plan
 *    pool    loom_embedding_pool alone (the "gemm" column, so ECT = fused -
 *            pool and overlap = 1 - ECT(fused) / ECT(seq))
 *    comm    NCCL AlltoAll (send/recv) of the pooled bytes
 *    seq     the staged plan: loom pooling + NCCL send/recv + reorder into
 *            the interaction layout (the sequential path, same output)
 *    before  with --before LIB: loom_embedding_a2a and loom_embedding_pool of
 *            the previous build (its libloom.so, loaded with dlopen, its own
 *            comm on the same NCCL communicator): the before(us) column
 *  backward, per shape, Zipf indices (--bwd-zipf, default 1.05: hot rows):
 *    loom_embedding_a2a_backward with fp32 tables (fp32 atomics, the default;
 *    and the sorted accumulation), bf16 tables (sorted: fp32 sums per row,
 *    one rounding), each against the previous build (fp32 atomics; bf16
 *    tables: bf16 atomics).
 * Checks: fused == staged and now == before, word for word (same pooling
 * code and order); two sorted backwards from the same table_grad give the
 * same bits (deterministic). #wrong counts the words that differ.
 * PyTorch: the parent process runs bench/peers/embedding_torch.py (this
 * run's exact shapes, world, reps, D, L, rows, indices and bag lengths)
 * before the ranks start and rank 0 pairs its rows by the complete shape
 * (op, B, T, D, L, table_rows, world, dtype, bags, zipf): torch's
 * sequential time is the peer(us) column of each shape, its pooling alone
 * that of the pooling row, and the ratios peer/now are computed here; a row
 * whose shape the peer did not run has no peer value and says why. Absent
 * PyTorch, the table says so.
 * The forward row and the slice-sweep and order rows run AUTO-path plans:
 * each names the path its plan took (loom_embedding_a2a_plan_info), e.g.
 * "loom-auto:zero-copy", and its time is auto(us).
 * HBM: the device-to-device copy bandwidth is measured at the start on every
 * rank (the least is used); pooling moves rows (T*B*L*D*4) + indices
 * (T*B*L*8) + pooled output (T*B*D*4) and is reported as a fraction of it.
 * Each shape also prints the configuration that ran (plan info, bags per
 * task, registers).
 * Then, at B = 4096, T = 64: the slice-size sweep (S = 8..512, interleaved)
 * and remote-first against local-first (each rank's own median, the spread
 * between the ranks' finish times: the paper's Figure 13).
 * The row loops and work cuts that are not the default are studied in
 * dev/embedding, not here.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "support/dlrm_gen.h"
#include "loom.h"

typedef struct emb_args {
  loom_bench_opts_t o;
  int pooling, dim;
  int64_t rows;
  double zipf, bwd_zipf;
  int variable;
  int sweep;
  int backward;
  const char *before;        /* previous build's libloom.so, or NULL */
  const char *peer;          /* PyTorch peer script, or "none" */
  char peer_json[1200];      /* where the parent had it write its results ("" if not run) */
  char peer_note[160];       /* why there is no peer column, if there is none */
} emb_args_t;

static int emb_opt(void *ctx, int argc, char **argv, int *i) {
  emb_args_t *a = (emb_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --zipf ALPHA      forward: Zipf-distributed indices (default uniform)\n"
           "  --variable        bag lengths uniform in [0, 2L] (default fixed L = 32)\n"
           "  --bwd-zipf ALPHA  backward: Zipf exponent of its indices (default 1.05)\n"
           "  --no-backward     skip the backward table\n"
           "  --no-sweep        skip the slice-size sweep and the remote-first comparison\n"
           "  --before LIB      also time the previous build (LIB: its libloom.so) side by side\n"
           "  --peer SCRIPT     the PyTorch peer (default embedding_torch.py of the peers' folder: bench/peers,\n"
           "                    installed share/loom/peers or $LOOM_BENCH_PEERS; run on this run's exact shapes;\n"
           "                    peer(us) only on rows of the same complete shape; none: skip)\n");
    return 1;
  }
  if (!strcmp(s, "--variable")) return a->variable = 1, 1;
  if (!strcmp(s, "--no-sweep")) return a->sweep = 0, 1;
  if (!strcmp(s, "--no-backward")) return a->backward = 0, 1;
  if (!strcmp(s, "--zipf") || !strcmp(s, "--bwd-zipf")) {
    if (*i + 1 >= argc) return -1;
    const double v = atof(argv[++*i]);
    if (!(v > 0)) return -1;
    if (s[2] == 'z') a->zipf = v;
    else a->bwd_zipf = v;
    return 1;
  }
  if (!strcmp(s, "--before") || !strcmp(s, "--peer")) {
    if (*i + 1 >= argc) return -1;
    if (s[2] == 'b') a->before = argv[++*i];
    else a->peer = argv[++*i];
    return 1;
  }
  return 0;
}

/* ---- the two builds: this one (linked) and the previous one (dlopen) ------ */

typedef struct emb_api {
  const char *name;          /* "now" or "before" */
  void *dl;
  loom_result_t (*comm_create)(ncclComm_t, const loom_config_t *, loom_comm_t *);
  loom_result_t (*comm_destroy)(loom_comm_t);
  loom_result_t (*comm_async)(loom_comm_t);
  loom_result_t (*mem_alloc)(loom_comm_t, size_t, void **);
  loom_result_t (*mem_free)(loom_comm_t, void *);
  loom_result_t (*plan)(loom_comm_t, const loom_embedding_desc_t *, loom_plan_t *);
  loom_result_t (*plan_destroy)(loom_plan_t);
  loom_result_t (*a2a)(loom_plan_t, const void *, const int64_t *, const int64_t *, int64_t, const float *, void *,
                       cudaStream_t);
  loom_result_t (*pool)(loom_plan_t, const void *, const int64_t *, const int64_t *, int64_t, const float *, void *,
                        cudaStream_t);
  loom_result_t (*backward)(loom_plan_t, const void *, const int64_t *, const int64_t *, int64_t, const float *, float,
                            void *, cudaStream_t);
  loom_result_t (*check)(loom_plan_t);
  const char *(*last_error)(void);
} emb_api_t;

static void api_now(emb_api_t *a) {
  memset(a, 0, sizeof *a);
  a->name = "now";
  a->comm_create = loom_comm_create;
  a->comm_destroy = loom_comm_destroy;
  a->comm_async = loom_comm_get_async_error;
  a->mem_alloc = loom_malloc;
  a->mem_free = loom_free;
  a->plan = loom_plan_embedding_a2a;
  a->plan_destroy = loom_plan_destroy;
  a->a2a = loom_embedding_a2a;
  a->pool = loom_embedding_pool;
  a->backward = loom_embedding_a2a_backward;
  a->check = loom_embedding_a2a_check;
  a->last_error = loom_last_error;
}

/* The previous build's public API from its shared library: its own copy of
 * every internal symbol (RTLD_DEEPBIND), its own kernels, the process's CUDA
 * runtime and NCCL. 0, or -1 with the reason on stderr. */
static int api_before(emb_api_t *a, const char *path) {
  memset(a, 0, sizeof *a);
  a->name = "before";
  a->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!a->dl) {
    fprintf(stderr, "loom-bench embedding_a2a: --before %s: %s\n", path, dlerror());
    return -1;
  }
#define SYM(field, name)                                                                           \
  do {                                                                                             \
    *(void **)&a->field = dlsym(a->dl, name);                                                      \
    if (!a->field) {                                                                               \
      fprintf(stderr, "loom-bench embedding_a2a: --before %s has no %s\n", path, name);           \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)
  SYM(comm_create, "loom_comm_create");
  SYM(comm_destroy, "loom_comm_destroy");
  SYM(comm_async, "loom_comm_get_async_error");
  SYM(mem_alloc, "loom_malloc");
  SYM(mem_free, "loom_free");
  SYM(plan, "loom_plan_embedding_a2a");
  SYM(plan_destroy, "loom_plan_destroy");
  SYM(a2a, "loom_embedding_a2a");
  SYM(pool, "loom_embedding_pool");
  SYM(backward, "loom_embedding_a2a_backward");
  SYM(check, "loom_embedding_a2a_check");
  SYM(last_error, "loom_last_error");
#undef SYM
  return 0;
}

/* The description as builds made it before local_first and path left it
 * (they followed slice_samples): a --before library of such a build refuses
 * the current layout by its struct_size, on every rank alike. */
typedef struct emb_desc_legacy {
  size_t struct_size;
  int world_size;
  const int *tables_per_rank;
  const int64_t *rows;
  int dim;
  int64_t global_batch;
  loom_pooling_t pooling;
  int per_sample_weights;
  loom_dtype_t table_type, out_type;
  int slice_samples, local_first;
  loom_embedding_path_t path;
  int grid_blocks, check_indices_sync;
} emb_desc_legacy_t;

/* api's plan of d (AUTO path, remote-first), in the layout its build takes. */
static loom_result_t api_plan(const emb_api_t *api, loom_comm_t comm, const loom_embedding_desc_t *d,
                              loom_plan_t *out) {
  const loom_result_t r = api->plan(comm, d, out);
  if (r != LOOM_ERR_INVALID_ARGUMENT || !strstr(api->last_error(), "desc->struct_size=")) return r;
  const emb_desc_legacy_t l = {sizeof l, d->world_size, d->tables_per_rank, d->rows, d->dim, d->global_batch,
                               d->pooling, d->per_sample_weights, d->table_type, d->out_type, d->slice_samples, 0,
                               LOOM_EMB_PATH_AUTO, d->grid_blocks, d->check_indices_sync};
  return api->plan(comm, (const loom_embedding_desc_t *)(const void *)&l, out);
}

/* A build and its comm. */
typedef struct emb_side {
  const emb_api_t *api;
  loom_comm_t comm;
} emb_side_t;

#define TRY_API(side, call)                                                                             \
  do {                                                                                                  \
    loom_result_t r_ = (call);                                                                          \
    if (r_ != LOOM_SUCCESS) {                                                                           \
      fprintf(stderr, "rank %d (%s): %s: %s\n", ctx->rank, (side)->api->name, #call, (side)->api->last_error()); \
      return 1;                                                                                         \
    }                                                                                                   \
  } while (0)
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

/* ---- the PyTorch peer -------------------------------------------------------- */

typedef struct emb_shape {
  int64_t B;
  int T;
} emb_shape_t;

/* The shapes of the selection (--quick: the first two); returns the count. */
static int emb_shapes(const emb_args_t *a, const emb_shape_t **list) {
  static const emb_shape_t full[] = {{1024, 64}, {4096, 64}, {4096, 128}, {16384, 64}};
  *list = full;
  return a->o.quick ? 2 : 4;
}

/* The complete shape of a forward row, as embedding_torch.py names its rows'. */
static void emb_pair_shape(const emb_args_t *a, emb_shape_t sh, int W, loom_bench_shape_t *s) {
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", "embedding_a2a");
  loom_bench_shape_int(s, "B", sh.B);
  loom_bench_shape_int(s, "T", sh.T);
  loom_bench_shape_int(s, "D", a->dim);
  loom_bench_shape_int(s, "L", a->pooling);
  loom_bench_shape_int(s, "table_rows", a->rows);
  loom_bench_shape_int(s, "world", W);
  loom_bench_shape_str(s, "dtype", "fp32");
  loom_bench_shape_str(s, "bags", a->variable ? "variable" : "fixed");
  loom_bench_shape_num(s, "zipf", a->zipf);
}

/* Runs the peer script from the parent process (no CUDA here), before any
 * rank starts, so the two never share the GPUs. Sets a->peer_json on
 * success, else a->peer_note says why there is no peer column. */
static void peer_run(emb_args_t *a, int world) {
  a->peer_json[0] = 0;
  if (!strcmp(a->peer, "none")) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (--peer none)");
    return;
  }
  char args[512];
  const emb_shape_t *sh = NULL;
  const int ns = emb_shapes(a, &sh);
  snprintf(args, sizeof args,
           "--world %d --reps %d --warmup %d --dim %d --pooling %d --rows %lld --zipf %.17g%s --shapes ", world,
           a->o.reps, a->o.warmup, a->dim, a->pooling, (long long)a->rows, a->zipf, a->variable ? " --variable" : "");
  for (int i = 0; i < ns; ++i) /* 4 shapes: fits */
    (void)loom_bench_appendf(args, sizeof args, "%s%lldx%d", i ? "," : "", (long long)sh[i].B, sh[i].T);
  (void)loom_bench_run_peer(a->peer, args, "embedding_torch", a->peer_json, sizeof a->peer_json, a->peer_note,
                            sizeof a->peer_note);
}

/* ---- inputs and calls ------------------------------------------------------ */

/* One timed operation: which call, through which build, on what. */
enum { OP_A2A, OP_POOL, OP_NCCL, OP_BWD };
typedef struct emb_call {
  const emb_api_t *api;
  int which;
  loom_plan_t plan;
  const void *tables;
  const int64_t *idx, *off;
  int64_t n;
  void *out;                  /* out, pooled, grad_out (backward) */
  void *tg;                   /* backward: table_grad */
  void *send, *recv;          /* NCCL AlltoAll */
  size_t per_peer;
  ncclComm_t nccl;
} emb_call_t;

static loom_result_t emb_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  emb_call_t *c = (emb_call_t *)arg;
  switch (c->which) {
    case OP_A2A: return c->api->a2a(c->plan, c->tables, c->idx, c->off, c->n, NULL, c->out, s);
    case OP_POOL: return c->api->pool(c->plan, c->tables, c->idx, c->off, c->n, NULL, c->out, s);
    case OP_BWD: return c->api->backward(c->plan, c->out, c->idx, c->off, c->n, NULL, 1e-3f, c->tg, s);
    default: return loom_bench_base_alltoall(c->nccl, c->send, c->recv, c->per_peer, LOOM_FP32, s);
  }
}

/* A new table row (op, impl, shape, dtype, world set). Out of host memory,
 * the row goes to a spare that is never printed (said on stderr): rank 0
 * carries on, so the other ranks' collectives are not left waiting. */
static loom_bench_row_t *emb_row(loom_bench_table_t *t, const char *op, const char *impl, emb_shape_t sh,
                                 loom_dtype_t dt, int W) {
  static loom_bench_row_t spare;
  loom_bench_row_t *r = loom_bench_add(t);
  if (!r) {
    fprintf(stderr, "loom-bench embedding_a2a: out of host memory: row %s %s dropped\n", op, impl);
    r = &spare;
  }
  snprintf(r->op, sizeof r->op, "%s", op);
  snprintf(r->impl, sizeof r->impl, "%s", impl);
  snprintf(r->shape, sizeof r->shape, "B=%lld T=%d/GPU", (long long)sh.B, sh.T);
  snprintf(r->dtype, sizeof r->dtype, "%s", loom_bench_dtype_name(dt));
  r->world = W;
  return r;
}

/* CSR inputs of one rank on the device: offsets [T*B+1], indices. */
typedef struct emb_csr {
  int64_t *idx, *off, n;
} emb_csr_t;

static int csr_make(loom_rank_ctx_t *ctx, const emb_args_t *a, emb_shape_t sh, const int64_t *rows, double zipf,
                    uint64_t seed, emb_csr_t *c) {
  const int T = sh.T;
  const int64_t B = sh.B;
  memset(c, 0, sizeof *c);
  int64_t *h_off = (int64_t *)malloc(((size_t)T * (size_t)B + 1) * sizeof(int64_t));
  if (!h_off) return 1;
  loom_dlrm_gen_t g = {T, B, rows, a->pooling, a->variable, 0.0, zipf, seed + (uint64_t)ctx->rank};
  c->n = loom_dlrm_gen_offsets(&g, h_off);
  int64_t *h_idx = (int64_t *)malloc((size_t)(c->n ? c->n : 1) * sizeof(int64_t));
  if (!h_idx || loom_dlrm_gen_indices(&g, h_off, h_idx) != 0) return 1;
  CTRY(cudaMalloc((void **)&c->off, ((size_t)T * (size_t)B + 1) * sizeof(int64_t)));
  CTRY(cudaMalloc((void **)&c->idx, (size_t)(c->n ? c->n : 1) * sizeof(int64_t)));
  CTRY(cudaMemcpy(c->off, h_off, ((size_t)T * (size_t)B + 1) * sizeof(int64_t), cudaMemcpyHostToDevice));
  CTRY(cudaMemcpy(c->idx, h_idx, (size_t)c->n * sizeof(int64_t), cudaMemcpyHostToDevice));
  CTRY(cudaStreamSynchronize(0)); /* a pageable upload's last DMA may still run: done before any other stream reads */
  free(h_off);
  free(h_idx);
  return 0;
}

static void csr_free(emb_csr_t *c) {
  cudaFree(c->idx);
  cudaFree(c->off);
  memset(c, 0, sizeof *c);
}

static loom_embedding_desc_t emb_desc(const emb_args_t *a, int W, const int *tpr, const int64_t *rows, emb_shape_t sh,
                                      int S, loom_dtype_t tt) {
  loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
  d.world_size = W;
  d.tables_per_rank = tpr;
  d.rows = rows;
  d.dim = a->dim;
  d.global_batch = sh.B;
  d.slice_samples = S;
  d.table_type = tt;
  d.out_type = tt;
  return d;
}

/* Words of two device buffers that differ (or hold the 0xff poison). */
static int64_t words_differ(const void *x, const void *y, size_t bytes) {
  const size_t words = bytes / 4;
  uint32_t *hx = (uint32_t *)malloc(bytes), *hy = (uint32_t *)malloc(bytes);
  int64_t wrong = (int64_t)words;
  if (hx && hy && cudaMemcpy(hx, x, bytes, cudaMemcpyDeviceToHost) == cudaSuccess &&
      cudaMemcpy(hy, y, bytes, cudaMemcpyDeviceToHost) == cudaSuccess) {
    wrong = 0;
    for (size_t i = 0; i < words; ++i) wrong += hx[i] != hy[i] || hx[i] == 0xffffffffu;
  }
  free(hx);
  free(hy);
  return wrong;
}

/* The configuration a plan runs (plan info and kernel registers), for the table. */
static void plan_summary(loom_plan_t p, loom_dtype_t tt, int dim, char *buf, size_t cap) {
  loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
  int part = 0, regs = 0, spill = 0;
  if (loom_embedding_a2a_plan_info(p, &info) != LOOM_SUCCESS || loom_bench_emb_part(p, &part) != LOOM_SUCCESS ||
      loom_bench_emb_kernel_regs(tt, tt, dim, &regs, &spill) != LOOM_SUCCESS) {
    snprintf(buf, cap, "plan info unavailable: %s", loom_last_error());
    return;
  }
  snprintf(buf, cap, "%s S%d x%d P%d grid %d, %u flags, ws %zu B, %d regs %d B spill",
           info.path == LOOM_EMB_PATH_ZERO_COPY ? "zero-copy" : info.path == LOOM_EMB_PATH_STAGED ? "staged" : "GIN",
           info.slice_samples, info.slices_per_rank, part, info.grid_blocks, info.num_flags, info.workspace_bytes, regs,
           spill);
}

/* ---- one shape: forward ------------------------------------------------------ */

typedef struct emb_run {
  loom_rank_ctx_t *ctx;
  const emb_args_t *a;
  emb_side_t now, before;     /* before.api NULL: no --before */
  cudaStream_t s;
  double copy_bps;            /* least over ranks */
  loom_bench_table_t *t;
  int failures;
} emb_run_t;

/* The path a plan of the AUTO path resolved to. */
static const char *emb_path_of(loom_plan_t p) {
  loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
  return loom_embedding_a2a_plan_info(p, &info) == LOOM_SUCCESS ? loom_bench_emb_path(info.path) : "unresolved";
}

/* Rank 0: the PyTorch peer's times of shape sh. r (loom's forward) pairs
 * with torch's sequential path, q (loom's pooling) with its EmbeddingBag;
 * where the sequential path paired, a "torch" row with its pooling, a2a and
 * sequential times (each of the same shape, or NAN). */
static void emb_peer(emb_run_t *R, emb_shape_t sh, loom_bench_row_t *r, loom_bench_row_t *q, double fused_us) {
  const char *path = R->a->peer_json;
  loom_bench_shape_t ps;
  emb_pair_shape(R->a, sh, R->ctx->size, &ps);
  (void)loom_bench_row_pair(q, path, "pool", &ps, 0);
  if (!loom_bench_row_pair(r, path, "seq", &ps, 0)) return;
  loom_bench_pair_t pool, a2a;
  loom_bench_pair_file(path, "pool", &ps, 0, &pool);
  loom_bench_pair_file(path, "a2a", &ps, 0, &a2a);
  loom_bench_row_t *p = emb_row(R->t, "embedding_a2a", "torch", sh, LOOM_FP32, R->ctx->size);
  p->gemm_us = pool.us;
  p->comm_us = a2a.us;
  p->seq_us = r->peer_us;
  snprintf(p->note, sizeof p->note, "PyTorch peer, same job and shape, timed %s: torch seq / loom = %.2fx",
           r->peer_timing, r->peer_us / fused_us);
  loom_bench_row_finish(p);
  printf("#   PyTorch (%s): pool %.1f us, a2a %.1f us, seq %.1f us: torch seq / loom %.2fx\n", r->peer_timing, pool.us,
         a2a.us, r->peer_us, r->peer_us / fused_us);
}

static int run_forward(emb_run_t *R, emb_shape_t sh, const int *tpr, const int64_t *rows) {
  loom_rank_ctx_t *ctx = R->ctx;
  const emb_args_t *a = R->a;
  const int W = ctx->size, T = sh.T, D = a->dim, L = a->pooling;
  const int64_t B = sh.B, Bl = B / W;
  const int have_before = R->before.api != NULL;
  const size_t tab = (size_t)T * (size_t)a->rows * (size_t)D;
  const size_t out_bytes = (size_t)Bl * (size_t)T * (size_t)W * (size_t)D * 4, pool_bytes = (size_t)B * T * D * 4;
  void *tables = NULL, *out = NULL, *out2 = NULL, *pooled = NULL, *send = NULL, *recv = NULL, *out_b = NULL,
       *pooled_b = NULL;
  emb_csr_t in;
  CTRY(cudaMalloc(&tables, tab * 4));
  TRY(loom_bench_fill_random(tables, LOOM_FP32, tab, 1234 + (uint64_t)ctx->rank, 1.0));
  if (csr_make(ctx, a, sh, rows, a->zipf, 77, &in)) return 1;
  TRY_API(&R->now, R->now.api->mem_alloc(R->now.comm, out_bytes, &out));
  TRY_API(&R->now, R->now.api->mem_alloc(R->now.comm, out_bytes, &out2)); /* symmetric on every path */
  CTRY(cudaMalloc(&pooled, pool_bytes));
  CTRY(cudaMalloc(&send, pool_bytes));
  CTRY(cudaMalloc(&recv, pool_bytes));
  loom_plan_t fused = NULL, staged = NULL, fused_b = NULL;
  loom_embedding_desc_t d = emb_desc(a, W, tpr, rows, sh, 0, LOOM_FP32);
  TRY(loom_plan_embedding_a2a(R->now.comm, &d, &fused));
  TRY(loom_bench_plan_embedding_a2a(R->now.comm, &d, 0, LOOM_EMB_PATH_STAGED, &staged));
  if (have_before) {
    TRY_API(&R->before, api_plan(R->before.api, R->before.comm, &d, &fused_b));
    TRY_API(&R->before, R->before.api->mem_alloc(R->before.comm, out_bytes, &out_b));
    CTRY(cudaMalloc(&pooled_b, pool_bytes));
  }
  emb_call_t calls[6];
  memset(calls, 0, sizeof calls);
  const emb_call_t base = {R->now.api, OP_A2A, fused, tables, in.idx, in.off, in.n, out, NULL, NULL, NULL, 0, ctx->nccl};
  for (int i = 0; i < 6; ++i) calls[i] = base;
  calls[1].which = OP_POOL, calls[1].out = pooled;                        /* pool */
  calls[2].plan = staged, calls[2].out = out2;                            /* seq */
  calls[3].which = OP_NCCL, calls[3].send = send, calls[3].recv = recv;  /* comm */
  calls[3].per_peer = (size_t)Bl * (size_t)T * (size_t)D;
  calls[4].api = R->before.api, calls[4].plan = fused_b, calls[4].out = out_b;                       /* before fused */
  calls[5].api = R->before.api, calls[5].plan = fused_b, calls[5].which = OP_POOL, calls[5].out = pooled_b; /* before pool */
  loom_bench_op_fn ops[6];
  void *args[6];
  int nops = 0;
  int idx_of[6];
  for (int i = 0; i < 6; ++i) {
    idx_of[i] = -1;
    if (i == 3 && W == 1) continue;
    if (i >= 4 && !have_before) continue;
    idx_of[i] = nops;
    ops[nops] = emb_op;
    args[nops++] = &calls[i];
  }
  loom_bench_time_t tm[6];
  TRY(loom_bench_time_ranks_side_by_side(ctx->nccl, R->s, a->o.warmup, a->o.reps, nops, ops, args, tm));
  TRY(loom_comm_get_async_error(R->now.comm));
  TRY(loom_embedding_a2a_check(fused));
  if (have_before) TRY_API(&R->before, R->before.api->comm_async(R->before.comm));
  /* fused == staged, and before == now, word for word, on poisoned outputs */
  int64_t wrong = -1, wrong_b = -1;
  if (a->o.check) {
    CTRY(cudaMemsetAsync(out, 0xff, out_bytes, R->s));
    CTRY(cudaMemsetAsync(out2, 0xff, out_bytes, R->s));
    TRY(emb_op(&calls[0], 0, R->s));
    TRY(emb_op(&calls[2], 0, R->s));
    if (have_before) {
      CTRY(cudaMemsetAsync(out_b, 0xff, out_bytes, R->s));
      TRY_API(&R->before, emb_op(&calls[4], 0, R->s));
    }
    CTRY(cudaStreamSynchronize(R->s));
    TRY(loom_comm_get_async_error(R->now.comm));
    wrong = words_differ(out, out2, out_bytes);
    TRY(loom_bench_sum_ranks(ctx->nccl, R->s, &wrong));
    if (have_before) {
      wrong_b = words_differ(out, out_b, out_bytes);
      TRY(loom_bench_sum_ranks(ctx->nccl, R->s, &wrong_b));
    }
    R->failures += (wrong != 0) + (wrong_b > 0);
  }
  char cfg[160];
  plan_summary(fused, LOOM_FP32, D, cfg, sizeof cfg);
  if (ctx->rank == 0) {
    const double bytes = (double)T * B * L * D * 4 + (double)T * B * L * 8 + (double)T * B * D * 4;
    const double pool_us = tm[idx_of[1]].median_us, fused_us = tm[idx_of[0]].median_us;
    const double pool_bps = bytes / (pool_us * 1e-6), fused_bps = bytes / (fused_us * 1e-6);
    loom_bench_row_t *r = emb_row(R->t, "embedding_a2a", "loom-auto", sh, LOOM_FP32, W);
    loom_bench_row_auto(r, emb_path_of(fused)); /* what ran: staged is no fused path */
    r->m = sh.B;
    r->n = sh.T;
    r->bytes = (int64_t)out_bytes;
    r->auto_us = fused_us;
    r->gemm_us = pool_us;
    r->seq_us = tm[idx_of[2]].median_us;
    r->comm_us = W > 1 ? tm[idx_of[3]].median_us : NAN;
    r->min_us = tm[idx_of[0]].min_us;
    r->max_us = tm[idx_of[0]].max_us;
    r->wrong = wrong;
    if (have_before) r->before_us = tm[idx_of[4]].median_us;
    snprintf(r->note, sizeof r->note, "seq/auto %.2fx; %.0f%% of copy bw; peer = torch seq; %s%s",
             r->seq_us / fused_us, 100.0 * fused_bps / R->copy_bps, have_before ? "before = previous build" : "",
             wrong_b > 0 ? " (before != now!)" : "");
    loom_bench_row_finish(r);
    loom_bench_row_t *q = emb_row(R->t, "embedding_pool", "loom", sh, LOOM_FP32, W);
    q->m = sh.B;
    q->n = sh.T;
    q->fused_us = pool_us;
    q->min_us = tm[idx_of[1]].min_us;
    q->max_us = tm[idx_of[1]].max_us;
    if (have_before) q->before_us = tm[idx_of[5]].median_us;
    q->wrong = wrong_b;
    snprintf(q->note, sizeof q->note, "%.0f GB/s = %.1f%% of copy bw %.0f GB/s; peer = torch EmbeddingBag",
             pool_bps / 1e9, 100.0 * pool_bps / R->copy_bps, R->copy_bps / 1e9);
    loom_bench_row_finish(q);
    printf("# B=%lld T=%d: %s %.1f us, pool %.1f us (%.0f GB/s, %.1f%% of the copy bandwidth), nccl a2a %.1f us, "
           "seq %.1f us, seq/auto %.2fx%s; plan: %s\n",
           (long long)sh.B, sh.T, r->impl, fused_us, pool_us, pool_bps / 1e9, 100.0 * pool_bps / R->copy_bps,
           W > 1 ? r->comm_us : 0.0, r->seq_us, r->seq_us / fused_us, wrong ? ", OUTPUTS DIFFER" : "", cfg);
    if (have_before)
      printf("#   before (previous build): fused %.1f us (now/before %.3f), pool %.1f us (now/before %.3f), outputs %s\n",
             r->before_us, fused_us / r->before_us, q->before_us, pool_us / q->before_us,
             wrong_b == 0 ? "identical" : wrong_b < 0 ? "not compared" : "DIFFER");
    emb_peer(R, sh, r, q, fused_us); /* the torch row and line where the shapes pair */
    fflush(stdout);
  }

  if (a->sweep && sh.B == 4096 && sh.T == 64) {
    /* slice sizes, interleaved */
    static const int Ss[] = {8, 16, 32, 64, 128, 256, 512};
    enum { NS = (int)(sizeof Ss / sizeof *Ss) };
    loom_plan_t ps[NS];
    emb_call_t cs[NS];
    loom_bench_op_fn sops[NS];
    void *sargs[NS];
    loom_bench_time_t st[NS];
    for (int k = 0; k < NS; ++k) {
      loom_embedding_desc_t ds = emb_desc(a, W, tpr, rows, sh, Ss[k], LOOM_FP32);
      TRY(loom_plan_embedding_a2a(R->now.comm, &ds, &ps[k]));
      cs[k] = base;
      cs[k].plan = ps[k];
      sops[k] = emb_op;
      sargs[k] = &cs[k];
    }
    TRY(loom_bench_time_ranks_side_by_side(ctx->nccl, R->s, a->o.warmup, a->o.reps, NS, sops, sargs, st));
    for (int k = 0; k < NS; ++k) {
      if (ctx->rank == 0) {
        char impl_[24];
        snprintf(impl_, sizeof impl_, "loom S=%d", Ss[k]);
        loom_bench_row_t *r = emb_row(R->t, "emb_a2a slice sweep", impl_, sh, LOOM_FP32, W);
        loom_bench_row_auto(r, emb_path_of(ps[k]));
        r->auto_us = st[k].median_us;
        r->min_us = st[k].min_us;
        r->max_us = st[k].max_us;
        loom_bench_row_finish(r);
      }
      TRY(loom_plan_destroy(ps[k]));
    }
    /* remote-first vs local-first, interleaved: each rank's own median (not the max over ranks) */
    loom_plan_t po[2];
    emb_call_t co[2];
    loom_bench_op_fn oops[2] = {emb_op, emb_op};
    void *oargs[2] = {&co[0], &co[1]};
    loom_bench_time_t ot[2];
    for (int lf = 0; lf < 2; ++lf) {
      loom_embedding_desc_t ds = emb_desc(a, W, tpr, rows, sh, 0, LOOM_FP32);
      TRY(loom_bench_plan_embedding_a2a(R->now.comm, &ds, lf, LOOM_EMB_PATH_AUTO, &po[lf]));
      co[lf] = base;
      co[lf].plan = po[lf];
    }
    TRY(loom_bench_barrier(ctx->nccl, R->s));
    TRY(loom_bench_time_side_by_side(R->s, a->o.warmup, a->o.reps, 2, oops, oargs, ot));
    for (int lf = 0; lf < 2; ++lf) {
      int64_t mine = (int64_t)(ot[lf].median_us * 1000.0), mx = mine, mn = mine;
      TRY(loom_bench_reduce_ranks(ctx->nccl, R->s, &mx, ncclMax));
      TRY(loom_bench_reduce_ranks(ctx->nccl, R->s, &mn, ncclMin));
      if (ctx->rank == 0) {
        loom_bench_row_t *r = emb_row(R->t, "emb_a2a order", lf ? "loom local-first" : "loom remote-first", sh,
                                      LOOM_FP32, W);
        loom_bench_row_auto(r, emb_path_of(po[lf]));
        r->auto_us = mx / 1000.0;
        snprintf(r->note, sizeof r->note, "ranks' medians %.1f..%.1f us, skew %.1f us", mn / 1000.0, mx / 1000.0,
                 (mx - mn) / 1000.0);
        loom_bench_row_finish(r);
      }
      TRY(loom_plan_destroy(po[lf]));
    }
  }
  CTRY(cudaStreamSynchronize(R->s));
  TRY(loom_plan_destroy(fused));
  TRY(loom_plan_destroy(staged));
  if (have_before) {
    TRY_API(&R->before, R->before.api->plan_destroy(fused_b));
    TRY_API(&R->before, R->before.api->mem_free(R->before.comm, out_b));
    CTRY(cudaFree(pooled_b));
  }
  TRY(loom_free(R->now.comm, out));
  TRY(loom_free(R->now.comm, out2));
  CTRY(cudaFree(pooled));
  CTRY(cudaFree(send));
  CTRY(cudaFree(recv));
  CTRY(cudaFree(tables));
  csr_free(&in);
  return 0;
}

/* ---- one shape: backward ------------------------------------------------------ */

/* Backward with Zipf indices, interleaved: fp32 tables (atomic, sorted),
 * bf16 tables (sorted), against the previous build; grad_out random, one
 * table_grad per dtype that every implementation adds into (values grow;
 * times do not depend on them). Then the determinism check of the bf16
 * sorted path: two calls from the same table_grad, compared bit for bit. */
static int run_backward(emb_run_t *R, emb_shape_t sh, const int *tpr, const int64_t *rows) {
  loom_rank_ctx_t *ctx = R->ctx;
  const emb_args_t *a = R->a;
  const int W = ctx->size, T = sh.T, D = a->dim;
  const int64_t B = sh.B, Bl = B / W;
  const int have_before = R->before.api != NULL;
  const size_t tab = (size_t)T * (size_t)a->rows * (size_t)D, gout = (size_t)Bl * (size_t)T * (size_t)W * (size_t)D;
  emb_csr_t in;
  if (csr_make(ctx, a, sh, rows, a->bwd_zipf, 991, &in)) return 1;
  void *tg32 = NULL, *tg16 = NULL, *snap = NULL, *g32 = NULL, *g16 = NULL, *g32b = NULL, *g16b = NULL;
  CTRY(cudaMalloc(&tg32, tab * 4));
  CTRY(cudaMalloc(&tg16, tab * 2));
  CTRY(cudaMalloc(&snap, tab * 2));
  TRY(loom_bench_fill_random(tg32, LOOM_FP32, tab, 555 + (uint64_t)ctx->rank, 1.0));
  TRY(loom_bench_fill_random(tg16, LOOM_BF16, tab, 556 + (uint64_t)ctx->rank, 1.0));
  TRY(loom_malloc(R->now.comm, gout * 4, &g32));
  TRY(loom_malloc(R->now.comm, gout * 2, &g16));
  TRY(loom_bench_fill_random(g32, LOOM_FP32, gout, 557 + (uint64_t)ctx->rank, 1.0));
  TRY(loom_bench_fill_random(g16, LOOM_BF16, gout, 558 + (uint64_t)ctx->rank, 1.0));
  loom_plan_t p32 = NULL, p32s = NULL, p16 = NULL, b32 = NULL, b16 = NULL;
  loom_embedding_desc_t d = emb_desc(a, W, tpr, rows, sh, 0, LOOM_FP32);
  TRY(loom_plan_embedding_a2a(R->now.comm, &d, &p32));
  TRY(loom_plan_embedding_a2a(R->now.comm, &d, &p32s));
  TRY(loom_bench_emb_backward_sorted(p32s));
  loom_embedding_desc_t d16 = emb_desc(a, W, tpr, rows, sh, 0, LOOM_BF16);
  TRY(loom_plan_embedding_a2a(R->now.comm, &d16, &p16));
  if (have_before) {
    TRY_API(&R->before, api_plan(R->before.api, R->before.comm, &d, &b32));
    TRY_API(&R->before, api_plan(R->before.api, R->before.comm, &d16, &b16));
    TRY_API(&R->before, R->before.api->mem_alloc(R->before.comm, gout * 4, &g32b));
    TRY_API(&R->before, R->before.api->mem_alloc(R->before.comm, gout * 2, &g16b));
    CTRY(cudaMemcpyAsync(g32b, g32, gout * 4, cudaMemcpyDeviceToDevice, R->s));
    CTRY(cudaMemcpyAsync(g16b, g16, gout * 2, cudaMemcpyDeviceToDevice, R->s));
  }
  const emb_call_t base = {R->now.api, OP_BWD, p32, NULL, in.idx, in.off, in.n, g32, tg32, NULL, NULL, 0, ctx->nccl};
  emb_call_t calls[5] = {base, base, base, base, base};
  calls[1].plan = p32s;
  calls[2].plan = p16, calls[2].out = g16, calls[2].tg = tg16;
  calls[3].api = R->before.api, calls[3].plan = b32, calls[3].out = g32b;
  calls[4].api = R->before.api, calls[4].plan = b16, calls[4].out = g16b, calls[4].tg = tg16;
  const int nops = have_before ? 5 : 3;
  loom_bench_op_fn ops[5] = {emb_op, emb_op, emb_op, emb_op, emb_op};
  void *args[5] = {&calls[0], &calls[1], &calls[2], &calls[3], &calls[4]};
  loom_bench_time_t tm[5];
  TRY(loom_bench_time_ranks_side_by_side(ctx->nccl, R->s, a->o.warmup, a->o.reps, nops, ops, args, tm));
  TRY(loom_comm_get_async_error(R->now.comm));
  TRY(loom_embedding_a2a_check(p16));
  if (have_before) TRY_API(&R->before, R->before.api->comm_async(R->before.comm));
  /* deterministic: the same table_grad twice through the sorted bf16 path */
  int64_t diff = -1;
  if (a->o.check) {
    void *res1 = NULL;
    CTRY(cudaMalloc(&res1, tab * 2));
    CTRY(cudaMemcpyAsync(snap, tg16, tab * 2, cudaMemcpyDeviceToDevice, R->s));
    TRY(emb_op(&calls[2], 0, R->s));
    CTRY(cudaMemcpyAsync(res1, tg16, tab * 2, cudaMemcpyDeviceToDevice, R->s));
    CTRY(cudaMemcpyAsync(tg16, snap, tab * 2, cudaMemcpyDeviceToDevice, R->s));
    TRY(emb_op(&calls[2], 0, R->s));
    CTRY(cudaStreamSynchronize(R->s));
    TRY(loom_comm_get_async_error(R->now.comm));
    diff = words_differ(res1, tg16, tab * 2);
    CTRY(cudaFree(res1));
    TRY(loom_bench_sum_ranks(ctx->nccl, R->s, &diff));
    R->failures += diff != 0;
  }
  if (ctx->rank == 0) {
    const size_t scratch = loom_bench_emb_sorted_scratch_bytes(in.n, D);
    static const char *const impl[3] = {"loom atomic", "loom sorted", "loom sorted"};
    static const loom_dtype_t dt[3] = {LOOM_FP32, LOOM_FP32, LOOM_BF16};
    for (int i = 0; i < 3; ++i) {
      loom_bench_row_t *r = emb_row(R->t, "emb_a2a backward", impl[i], sh, dt[i], W);
      r->m = sh.B;
      r->n = sh.T;
      r->fused_us = tm[i].median_us;
      r->min_us = tm[i].min_us;
      r->max_us = tm[i].max_us;
      if (have_before) r->before_us = tm[i == 2 ? 4 : 3].median_us;
      if (i == 2) r->wrong = diff;
      if (i == 0)
        snprintf(r->note, sizeof r->note, "zipf %.2f; fp32 atomics per index; before: the same", a->bwd_zipf);
      else
        snprintf(r->note, sizeof r->note, "fp32 sums per row, one rounding; %.0f MiB scratch/call; before: %s atomics%s",
                 (double)scratch / (1 << 20), i == 2 ? "bf16" : "fp32", i == 2 ? "; #wrong: not deterministic" : "");
      loom_bench_row_finish(r);
    }
    printf("# B=%lld T=%d backward (zipf %.2f, %lld indices): fp32 atomic %.1f us, fp32 sorted %.1f us, bf16 sorted "
           "%.1f us (scratch %.0f MiB per call)%s",
           (long long)sh.B, sh.T, a->bwd_zipf, (long long)in.n, tm[0].median_us, tm[1].median_us, tm[2].median_us,
           (double)scratch / (1 << 20), have_before ? "" : "\n");
    if (have_before) printf("; before: fp32 %.1f us, bf16 (bf16 atomics) %.1f us\n", tm[3].median_us, tm[4].median_us);
    fflush(stdout);
  }
  CTRY(cudaStreamSynchronize(R->s));
  TRY(loom_plan_destroy(p32));
  TRY(loom_plan_destroy(p32s));
  TRY(loom_plan_destroy(p16));
  if (have_before) {
    TRY_API(&R->before, R->before.api->plan_destroy(b32));
    TRY_API(&R->before, R->before.api->plan_destroy(b16));
    TRY_API(&R->before, R->before.api->mem_free(R->before.comm, g32b));
    TRY_API(&R->before, R->before.api->mem_free(R->before.comm, g16b));
  }
  TRY(loom_free(R->now.comm, g32));
  TRY(loom_free(R->now.comm, g16));
  CTRY(cudaFree(tg32));
  CTRY(cudaFree(tg16));
  CTRY(cudaFree(snap));
  csr_free(&in);
  return 0;
}

/* ---- rank ------------------------------------------------------------------------ */

static int emb_rank(loom_rank_ctx_t *ctx, void *arg) {
  emb_args_t *a = (emb_args_t *)arg;
  const int W = ctx->size;
  emb_api_t api_n, api_b;
  api_now(&api_n);
  emb_run_t R;
  memset(&R, 0, sizeof R);
  R.ctx = ctx;
  R.a = a;
  R.now.api = &api_n;
  CTRY(cudaStreamCreateWithFlags(&R.s, cudaStreamNonBlocking));
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.workspace_bytes = (size_t)64 << 20;
  TRY(loom_comm_create(ctx->nccl, &cfg, &R.now.comm));
  if (a->before) {
    if (api_before(&api_b, a->before)) return 1;
    R.before.api = &api_b;
    TRY_API(&R.before, api_b.comm_create(ctx->nccl, NULL, &R.before.comm)); /* its own defaults: 64 MiB workspace */
  }
  /* the copy bandwidth of every GPU, now; the least counts */
  const double bw = loom_bench_copy_bandwidth(R.s);
  int64_t mbps = isfinite(bw) ? (int64_t)(bw / 1e6) : 0;
  TRY(loom_bench_reduce_ranks(ctx->nccl, R.s, &mbps, ncclMin));
  if (mbps <= 0) {
    fprintf(stderr, "rank %d: the copy bandwidth could not be measured\n", ctx->rank);
    return 1;
  }
  R.copy_bps = (double)mbps * 1e6;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  R.t = &t;
  const emb_shape_t *full = NULL;
  const int nshapes = emb_shapes(a, &full);
  if (ctx->rank == 0) {
    struct cudaDeviceProp p;
    int dev = 0;
    CTRY(cudaGetDevice(&dev));
    CTRY(cudaGetDeviceProperties(&p, dev));
    printf("# loom-bench embedding_a2a: %d rank(s) on %s (%d SMs), copy bandwidth %.0f GB/s (least over ranks); D=%d "
           "L=%d rows=%lld fp32 %s%s; %s; before: %s\n",
           W, p.name, p.multiProcessorCount, R.copy_bps / 1e9, a->dim, a->pooling, (long long)a->rows,
           a->zipf > 0 ? "zipf" : "uniform", a->variable ? " variable" : " fixed",
           a->peer_json[0] ? "PyTorch peer ran" : a->peer_note, a->before ? a->before : "not run (--before LIB)");
    fflush(stdout);
  }
  for (int si = 0; si < nshapes; ++si) {
    const emb_shape_t sh = full[si];
    int tpr[64];
    int64_t *rows = (int64_t *)malloc((size_t)sh.T * (size_t)W * sizeof(int64_t));
    if (!rows || W > 64) return 1;
    for (int p = 0; p < W; ++p) tpr[p] = sh.T;
    for (int g = 0; g < sh.T * W; ++g) rows[g] = a->rows;
    if (run_forward(&R, sh, tpr, rows)) return 1;
    if (a->backward && run_backward(&R, sh, tpr, rows)) return 1;
    free(rows);
  }
  if (ctx->rank == 0) {
    loom_bench_note(&t, "gemm column = loom pooling kernel alone; comm = NCCL AlltoAll (send/recv) of the pooled "
                        "bytes; seq = loom pooling + NCCL send/recv + reorder (the staged path)");
    loom_bench_note(&t, "interleaved: every repetition runs each implementation once, in turn; max over ranks; median");
    loom_bench_note(&t, "copy bandwidth (D2D cudaMemcpy, read + write) measured now: %.0f GB/s; pooling bytes = rows "
                        "(T*B*L*D*4) + indices (8 B each) + pooled (T*B*D*4)", R.copy_bps / 1e9);
    if (a->before) loom_bench_note(&t, "before(us): the previous build (%.120s), same process, interleaved", a->before);
    else loom_bench_note(&t, "before: not run (--before <previous build's libloom.so>)");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us): PyTorch of the row's exact shape, or none (the note says why; "
                          "bench/peers/embedding_torch.py, this job): %.60s", a->peer_json);
    else loom_bench_note(&t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
    char title[200];
    snprintf(title, sizeof title, "loom-bench embedding_a2a: D=%d L=%d rows=%lld fp32, world %d, median of %d reps",
             a->dim, a->pooling, (long long)a->rows, W, a->o.reps);
    R.failures = loom_bench_finish("embedding_a2a", &t, &a->o, W, title, R.failures);
  }
  loom_bench_table_free(&t);
  if (R.before.api) TRY_API(&R.before, R.before.api->comm_destroy(R.before.comm));
  TRY(loom_comm_destroy(R.now.comm));
  CTRY(cudaStreamDestroy(R.s));
  return R.failures ? 1 : 0;
}

LOOM_BENCH(embedding_a2a, "fused embedding-bag + All-to-All vs pooling, NCCL AlltoAll, the sequential path, the "
                          "previous build (--before) and PyTorch; backward with Zipf indices") {
  static emb_args_t a;
  memset(&a, 0, sizeof a);
  a.pooling = 32;
  a.dim = 256;
  a.rows = 100000;
  a.sweep = 1;
  a.backward = 1;
  a.bwd_zipf = 1.05;
  a.peer = "embedding_torch.py"; /* in loom_bench_peers_dir() */
  int rc = loom_bench_parse(&a.o, argc, argv, emb_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  peer_run(&a, world);
  return loom_bench_launch(&a.o, world, emb_rank, &a) ? 1 : 0;
}
