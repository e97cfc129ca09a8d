/*
 * bench_coll.c - `loom-bench allreduce`, `loom-bench reduce_scatter`,
 * `loom-bench all_gather`: loom's collectives against NCCL, side by side in
 * one run on every rank (each repetition runs every variant back to back;
 * a repetition's time is that of the slowest rank), bf16 (--dtype fp32: fp32,
 * the plain rows only: no +epi / +rmsnorm rows), sizes 4 KiB ..
 * 1 GiB in steps of 4x (--quick: 4 KiB, 256 KiB, 16 MiB, 256 MiB), bytes as
 * nccl-tests (AllReduce: each rank's buffer; ReduceScatter: the input;
 * AllGather: the output), busbw = algbw x 2(n-1)/n (AllReduce) or (n-1)/n.
 *
 * allreduce rows, per size:
 *   nccl            ncclAllReduce (input in loom_malloc memory, output cudaMalloc)
 *   loom-auto       loom_allreduce as the plan chooses (LOOM_ALLREDUCE_LL_BYTES,
 *                   LOOM_ALLREDUCE_ONE_SHOT_BYTES); the row names the algorithm
 *                   it resolved to (loom_coll_plan_info): "loom-auto:ll", ...
 *   loom-1shot      one-shot forced (up to 64 MiB)
 *   loom-ll         LL (push with flags) forced (up to 4 MiB)
 *   loom-push       PUSH (one-shot by stores, a flag per chunk) forced (up to 64 MiB)
 *   loom-2shot      two-shot forced
 *   loom+epi        the plan's choice with CoCoNet's epilogue dropout(x + bias) +
 *                   residual (rows of 1024): its cost is this row vs loom-auto
 *   nccl+rmsnorm    ncclAllReduce, then a separate residual + RMSNorm kernel
 *                   (rows of min(4096, count); tools/bench/bench_coll_kernels.cu)
 *   loom+rmsnorm    loom_allreduce with residual + RMSNorm fused
 * Up to 1 MiB (every op): every variant again as "<impl>/graph", the time per
 * call of a CUDA graph of 16 calls (the device's latency without the host's
 * issue time, which the plain rows include where the host is slower).
 * #wrong: every element of each loom output (the plain ones against NCCL's,
 * within bf16 rounding of the W-term sum; loom+rmsnorm against
 * nccl+rmsnorm); loom+epi is not checked here (tests/gpu/coll/test_coll.c checks
 * it against the CPU reference).
 * reduce_scatter / all_gather rows: nccl, loom-auto (":ll" where the
 * plan runs the slices' LL, ":pull" the pull kernel); AllGather bit for bit.
 * Peer (allreduce, W >= 2, unless --peer none): bench/peers/coll_torch.py, run
 * first on this run's exact sizes, gives PyTorch's symm_mem one_shot /
 * two_shot_all_reduce_, dist.all_reduce and all_reduce + F.rms_norm times
 * for the peer column (vs_peer > 1: loom faster), each per call in a CUDA
 * graph where PyTorch lets it be captured: a row pairs with the peer's
 * variant of its kind (nccl: nccl; one-shot, LL, PUSH: one_shot; two-shot:
 * two_shot; AUTO: the kind it resolved to; +rmsnorm: ar_rmsnorm) at the
 * same complete shape (op, bytes, count, world, dtype, cols for the norm);
 * a /graph row (no host time) only with a graph-timed peer time.
 * JSON to <results dir>/<suite>-<stamp>.json (loom_bench_write_json).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "ref/ref.h"

#define COLL_SEED 0x636f6c6cull
#define COLL_MAX_VARS 9 /* rows per size */

int loom_bench_rmsnorm_residual(const void *x, const void *res, const void *w, void *y, int64_t rows, int64_t cols,
                                float eps, cudaStream_t s);

enum { OP_AR = 0, OP_RS = 1, OP_AG = 2 };
enum { V_NCCL, V_LOOM, V_NCCL_NORM };

typedef struct coll_bench_args {
  loom_bench_opts_t o;
  int op;
  int64_t max_bytes;
  int64_t sizes[16];    /* --sizes: these instead of 4 KiB .. max_bytes */
  int nsizes;
  int peer;             /* 0 with --peer none */
  loom_dtype_t dtype;   /* LOOM_BF16, or LOOM_FP32 with --dtype fp32 */
  char peer_json[1200]; /* PyTorch's results (bench/peers/coll_torch.py; "" if not run) */
  char peer_note[200];  /* why there is no peer column */
} coll_bench_args_t;

/* The complete shape of an AllReduce row, as coll_torch.py names its rows'
 * (cols: the norm's row length; 0: none). */
static void coll_pair_shape(int64_t bytes, int W, int64_t cols, loom_dtype_t dt, loom_bench_shape_t *s) {
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", "allreduce");
  loom_bench_shape_int(s, "bytes", bytes);
  loom_bench_shape_int(s, "count", bytes / (int64_t)loom_dtype_size(dt));
  loom_bench_shape_int(s, "world", W);
  loom_bench_shape_str(s, "dtype", dt == LOOM_FP32 ? "fp32" : "bf16");
  if (cols > 0) loom_bench_shape_int(s, "cols", cols);
}

/* The sizes of the selection (--sizes as given, else 4 KiB .. max_bytes by
 * 4x; --quick: four). */
static int coll_sizes(const coll_bench_args_t *a, int64_t sizes[16]) {
  int n = 0;
  if (a->nsizes > 0) {
    for (; n < a->nsizes; ++n) sizes[n] = a->sizes[n];
    return n;
  }
  for (int64_t b = 4096; b <= a->max_bytes && n < 16; b *= 4)
    if (!a->o.quick || b == 4096 || b == (256 << 10) || b == (16 << 20) || b == (256 << 20)) sizes[n++] = b;
  return n;
}

typedef struct coll_var {
  int kind;             /* V_* */
  int op;
  const char *impl;
  const char *peer;     /* the peer's variant of the same kind (NULL: none) */
  loom_coll_algo_t algo; /* as asked; LOOM_COLL_AUTO: the row names what the plan chose */
  loom_plan_t plan;
  ncclComm_t nccl;
  int world;
  const void *in;
  void *out, *tmp;
  size_t count;         /* AR, RS: input elements; AG: output elements */
  const loom_epilogue_t *epi;
  const void *nw, *res;
  int64_t rows, cols;
  ncclDataType_t nccl_type;
} coll_var_t;

static loom_result_t coll_var_run(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  coll_var_t *v = (coll_var_t *)arg;
  const size_t per = v->count / (size_t)v->world;
  switch (v->kind) {
    case V_NCCL:
      if (v->op == OP_AR) LOOM_BENCH_NCCL(ncclAllReduce(v->in, v->out, v->count, v->nccl_type, ncclSum, v->nccl, s));
      else if (v->op == OP_RS)
        LOOM_BENCH_NCCL(ncclReduceScatter(v->in, v->out, per, v->nccl_type, ncclSum, v->nccl, s));
      else LOOM_BENCH_NCCL(ncclAllGather(v->in, v->out, per, v->nccl_type, v->nccl, s));
      return LOOM_SUCCESS;
    case V_NCCL_NORM:
      LOOM_BENCH_NCCL(ncclAllReduce(v->in, v->tmp, v->count, ncclBfloat16, ncclSum, v->nccl, s));
      if (loom_bench_rmsnorm_residual(v->tmp, v->res, v->nw, v->out, v->rows, v->cols, 1e-5f, s) != 0)
        return loom_bench_fail(LOOM_ERR_CUDA, "the RMSNorm kernel failed to launch");
      return LOOM_SUCCESS;
    default:
      if (v->op == OP_AR) return loom_allreduce(v->plan, v->in, v->out, v->epi, v->nw, NULL, s);
      if (v->op == OP_RS) return loom_reduce_scatter(v->plan, v->in, v->out, NULL, NULL, NULL, s);
      return loom_all_gather(v->plan, v->in, v->out, s);
  }
}

/* AllReduce up to this size: each variant also timed per call inside a CUDA
 * graph of COLL_GRAPH_CALLS calls (the device's latency, no host issue). */
#define COLL_GRAPH_MAX_BYTES ((int64_t)1 << 20)
#define COLL_GRAPH_CALLS 16
#define COLL_GRAPH_REPS 100

static loom_result_t graph_run(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  LOOM_BENCH_CUDA(cudaGraphLaunch((cudaGraphExec_t)arg, s));
  return LOOM_SUCCESS;
}

/* COLL_GRAPH_CALLS calls of v captured on s into *exec (NULL on failure). */
static loom_result_t capture_calls(coll_var_t *v, cudaStream_t s, cudaGraphExec_t *exec) {
  *exec = NULL;
  cudaGraph_t g = NULL;
  LOOM_BENCH_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  loom_result_t r = LOOM_SUCCESS;
  for (int k = 0; k < COLL_GRAPH_CALLS && r == LOOM_SUCCESS; ++k) r = coll_var_run(v, k, s);
  const cudaError_t e = cudaStreamEndCapture(s, &g);
  if (r == LOOM_SUCCESS && e != cudaSuccess)
    r = loom_bench_cuda_fail((int)e, "cudaStreamEndCapture", __FILE__, __LINE__);
  if (r == LOOM_SUCCESS) {
    const cudaError_t e2 = cudaGraphInstantiate(exec, g, 0);
    if (e2 != cudaSuccess) r = loom_bench_cuda_fail((int)e2, "cudaGraphInstantiate", __FILE__, __LINE__);
  }
  if (g) (void)cudaGraphDestroy(g);
  return r;
}

/* Elements of got that differ from want (n of dtype dt) by more than rel x
 * |want| + floor, or bit for bit (exact). */
static int64_t count_wrong(const void *got, const void *want, loom_dtype_t dt, size_t n, int exact, double rel,
                           double floor) {
  const size_t es = loom_dtype_size(dt);
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (exact) {
      bad += memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0;
      continue;
    }
    const double g = loom_ref_load(dt, got, i), w = loom_ref_load(dt, want, i);
    bad += !(fabs(g - w) <= rel * fabs(w) + floor);
  }
  return bad;
}

/* The root mean square of x (bf16). */
static double rms_bf16(const void *x, size_t n) {
  double s = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double v = loom_ref_load(LOOM_BF16, x, i);
    s += v * v;
  }
  return n ? sqrt(s / (double)n) : 0.0;
}

/* A new row of t for variant `impl` (+ suffix) at `bytes` on W ranks: op,
 * shape, dtype and the nccl-tests busbw factor of op filled in. */
static loom_bench_row_t *add_row(loom_bench_table_t *t, const char *suite, int op, const char *impl,
                                 const char *suffix, int64_t bytes, int W, loom_dtype_t dt) {
  loom_bench_row_t *row = loom_bench_add(t);
  if (!row) return NULL;
  snprintf(row->op, sizeof row->op, "%s", suite);
  snprintf(row->impl, sizeof row->impl, "%s%s", impl, suffix);
  loom_bench_format_bytes(bytes, row->shape, sizeof row->shape);
  snprintf(row->dtype, sizeof row->dtype, "%s", dt == LOOM_FP32 ? "fp32" : "bf16");
  row->bytes = bytes;
  row->world = W;
  row->busbw_factor = op == OP_AR ? 2.0 * (W - 1) / W : (double)(W - 1) / W;
  return row;
}

/* Names the AUTO path of variant x's row (path NULL: not an AUTO plan)
 * and pairs an AllReduce row with the peer's variant of the same kind at
 * the row's complete shape; host_excluded: the row is per call in a graph. */
static void coll_row_peer(const coll_bench_args_t *a, loom_bench_row_t *row, const coll_var_t *x, const char *path,
                          int64_t bytes, int W, int host_excluded) {
  if (path) loom_bench_row_auto(row, path);
  if (x->op != OP_AR || !x->peer) return;
  loom_bench_shape_t shape;
  coll_pair_shape(bytes, W, x->nw ? x->cols : 0, a->dtype, &shape);
  (void)loom_bench_row_pair(row, a->peer_json, x->peer, &shape, host_excluded);
}

static loom_result_t make_plan(loom_comm_t comm, int op, size_t count, loom_dtype_t dt, int64_t cols,
                               loom_coll_algo_t algo, loom_norm_t norm, loom_plan_t *p) {
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = (int64_t)count, d.cols = cols, d.algo = algo, d.norm = norm, d.dtype = dt, d.out_type = dt;
  int W = 0;
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  LOOM_BENCH_TRY(loom_comm_get_info(comm, &info));
  W = info.size;
  d.world_size = W;
  return op == OP_AR ? loom_plan_allreduce(comm, &d, p)
         : op == OP_RS ? loom_plan_reduce_scatter(comm, &d, p)
                       : loom_plan_all_gather(comm, &d, p);
}

static int coll_rank(loom_rank_ctx_t *ctx, void *arg) {
  coll_bench_args_t *a = (coll_bench_args_t *)arg;
  const int W = ctx->size, op = a->op;
  const char *suite = op == OP_AR ? "allreduce" : op == OP_RS ? "reduce_scatter" : "all_gather";
  loom_comm_t comm = NULL;
  cudaStream_t s = NULL;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  int failures = 0;
  void *in = NULL, *out[COLL_MAX_VARS] = {NULL}, *tmp = NULL, *res = NULL, *nw = NULL, *bias = NULL;
  void *h_ref = NULL, *h_got = NULL;
  const loom_dtype_t dt = a->dtype;
  const size_t es = loom_dtype_size(dt);
  int64_t sizes[16];
  const int nsizes = coll_sizes(a, sizes);
  int64_t maxb = 0;
  for (int i = 0; i < nsizes; ++i) maxb = sizes[i] > maxb ? sizes[i] : maxb;
  if (cudaStreamCreate(&s) != cudaSuccess) return 1;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  if (loom_comm_create(ctx->nccl, &cfg, &comm) != LOOM_SUCCESS) {
    fprintf(stderr, "rank %d: %s\n", ctx->rank, loom_last_error());
    return 1;
  }
  int64_t bad = 0;
  if (loom_malloc(comm, (size_t)maxb, &in) != LOOM_SUCCESS) bad = 1;
  for (int i = 0; i < COLL_MAX_VARS && !bad; ++i)
    if (cudaMalloc(&out[i], (size_t)maxb) != cudaSuccess) bad = 1;
  if (!bad && op == OP_AR &&
      (cudaMalloc(&tmp, (size_t)maxb) != cudaSuccess || cudaMalloc(&res, (size_t)maxb) != cudaSuccess ||
       cudaMalloc(&nw, 4096 * 2) != cudaSuccess || cudaMalloc(&bias, 4096 * 2) != cudaSuccess))
    bad = 1;
  if (!bad && loom_bench_fill_random(in, dt, (size_t)maxb / es, COLL_SEED + (uint64_t)ctx->rank, 1.0) != LOOM_SUCCESS)
    bad = 1;
  if (!bad && op == OP_AR &&
      (loom_bench_fill_random(res, LOOM_BF16, (size_t)maxb / 2, COLL_SEED + 99, 1.0) != LOOM_SUCCESS ||
       loom_bench_fill_random(nw, LOOM_BF16, 4096, COLL_SEED + 98, 1.0) != LOOM_SUCCESS ||
       loom_bench_fill_random(bias, LOOM_BF16, 4096, COLL_SEED + 97, 1.0) != LOOM_SUCCESS))
    bad = 1;
  h_ref = malloc((size_t)maxb);
  h_got = malloc((size_t)maxb);
  if (!h_ref || !h_got) bad = 1;
  if (loom_bench_sum_ranks(ctx->nccl, s, &bad) != LOOM_SUCCESS || bad) {
    if (ctx->rank == 0) fprintf(stderr, "loom-bench %s: setup failed (%s)\n", suite, loom_last_error());
    failures = 1;
    goto out;
  }
  if (ctx->rank == 0)
    loom_bench_note(&t, "%s; input in loom_malloc memory for every variant, outputs cudaMalloc; time = median over "
                        "reps of the slowest rank; variants side by side in each repetition",
                    dt == LOOM_FP32 ? "fp32 (plain rows only)" : "bf16");
  for (int si = 0; si < nsizes; ++si) {
    const int64_t bytes = sizes[si];
    const size_t count = (size_t)bytes / es;
    if (op != OP_AR && count % (size_t)(8 * W) != 0) continue;
    coll_var_t v[COLL_MAX_VARS];
    int nv = 0;
    memset(v, 0, sizeof v);
    loom_epilogue_t epi = LOOM_EPILOGUE_INIT;
    const int64_t ecols = count % 1024 == 0 ? 1024 : 0;
    const int64_t ncols = count < 4096 ? (int64_t)count : 4096;
    epi.bias = ecols ? bias : NULL;
    epi.dropout_p = 0.1f, epi.dropout_seed = 7, epi.residual = res;
    loom_result_t r = LOOM_SUCCESS;
#define ADD(K, IMPL, ALGO, COLS, NORM, PEER)                                                       \
  do {                                                                                             \
    coll_var_t *x = &v[nv];                                                                        \
    x->kind = K, x->op = op, x->impl = IMPL, x->nccl = ctx->nccl, x->world = W, x->in = in;        \
    x->peer = PEER, x->algo = ALGO;                                                                \
    x->out = out[nv], x->tmp = tmp, x->count = count, x->res = res, x->rows = (int64_t)count / ncols, x->cols = ncols; \
    x->nccl_type = dt == LOOM_FP32 ? ncclFloat : ncclBfloat16;                                     \
    if (K == V_LOOM && r == LOOM_SUCCESS) r = make_plan(comm, op, count, dt, COLS, ALGO, NORM, &x->plan); \
    nv++;                                                                                          \
  } while (0)
    /* the peer's variants: loom-auto's is set once its plan has chosen */
    ADD(V_NCCL, "nccl", LOOM_COLL_AUTO, 0, LOOM_NORM_NONE, "nccl");
    ADD(V_LOOM, "loom-auto", LOOM_COLL_AUTO, 0, LOOM_NORM_NONE, NULL); /* RS, AG: AUTO only (LL or pull) */
    if (op == OP_AR) {
      if (bytes <= (64 << 20)) ADD(V_LOOM, "loom-1shot", LOOM_COLL_ONE_SHOT, 0, LOOM_NORM_NONE, "one_shot");
      if (bytes <= (4 << 20)) ADD(V_LOOM, "loom-ll", LOOM_COLL_LL, 0, LOOM_NORM_NONE, "one_shot");
      if (bytes <= (64 << 20)) ADD(V_LOOM, "loom-push", LOOM_COLL_PUSH, 0, LOOM_NORM_NONE, "one_shot");
      ADD(V_LOOM, "loom-2shot", LOOM_COLL_TWO_SHOT, 0, LOOM_NORM_NONE, "two_shot");
    }
    if (op == OP_AR && dt == LOOM_BF16) {
      ADD(V_LOOM, "loom+epi", LOOM_COLL_AUTO, ecols, LOOM_NORM_NONE, NULL);
      v[nv - 1].epi = &epi;
      ADD(V_NCCL_NORM, "nccl+rmsnorm", LOOM_COLL_AUTO, 0, LOOM_NORM_NONE, "ar_rmsnorm");
      v[nv - 1].nw = nw;
      ADD(V_LOOM, "loom+rmsnorm", LOOM_COLL_AUTO, ncols, LOOM_NORM_RMS, "ar_rmsnorm");
      v[nv - 1].nw = nw;
      {
        static loom_epilogue_t res_only;
        res_only = (loom_epilogue_t)LOOM_EPILOGUE_INIT;
        res_only.residual = res;
        v[nv - 1].epi = &res_only;
      }
    }
#undef ADD
    /* what each AUTO plan resolved to (rank 0 names it in the row) */
    const char *path[COLL_MAX_VARS] = {NULL};
    for (int i = 0; i < nv && r == LOOM_SUCCESS; ++i) {
      if (v[i].kind != V_LOOM || v[i].algo != LOOM_COLL_AUTO || !v[i].plan) continue;
      loom_coll_plan_info_t info = LOOM_COLL_PLAN_INFO_INIT;
      r = loom_coll_plan_info(v[i].plan, &info);
      /* ReduceScatter, AllGather: their LL, or the pull kernel (info.algo AUTO) */
      path[i] = op == OP_AR || info.algo == LOOM_COLL_LL ? loom_bench_coll_path(info.algo) : "pull";
      if (op == OP_AR && !v[i].epi) /* loom-auto: the peer's kernel of the same kind */
        v[i].peer = info.algo == LOOM_COLL_TWO_SHOT ? "two_shot" : "one_shot";
    }
    int64_t failed = r != LOOM_SUCCESS;
    if (failed) fprintf(stderr, "rank %d: %s: %s\n", ctx->rank, suite, loom_last_error());
    if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) {
      failures++;
      goto out;
    }
    loom_bench_time_t tm[COLL_MAX_VARS];
    loom_bench_op_fn fns[COLL_MAX_VARS];
    void *args[COLL_MAX_VARS];
    for (int i = 0; i < nv; ++i) fns[i] = coll_var_run, args[i] = &v[i];
    int64_t wrong[COLL_MAX_VARS];
    for (int i = 0; i < COLL_MAX_VARS; ++i) wrong[i] = -1;
    if (!failed) {
      r = loom_bench_time_ranks_side_by_side(ctx->nccl, s, a->o.warmup, a->o.reps, nv, fns, args, tm);
      if (r == LOOM_SUCCESS) r = loom_comm_get_async_error(comm);
      failed = r != LOOM_SUCCESS;
      if (failed) fprintf(stderr, "rank %d: %s %lld bytes: %s\n", ctx->rank, suite, (long long)bytes, loom_last_error());
      /* checks: every variant's last output */
      const size_t n_out = op == OP_RS ? count / (size_t)W : count;
      if (!failed && a->o.check && cudaStreamSynchronize(s) == cudaSuccess &&
          cudaMemcpy(h_ref, out[0], n_out * es, cudaMemcpyDeviceToHost) == cudaSuccess) {
        for (int i = 1; i < nv; ++i) {
          if (v[i].epi && v[i].kind == V_LOOM && !v[i].nw) continue; /* loom+epi: not here */
          if (v[i].kind == V_NCCL_NORM) {
            if (cudaMemcpy(h_ref, out[i], n_out * es, cudaMemcpyDeviceToHost) != cudaSuccess) break;
            continue;
          }
          if (cudaMemcpy(h_got, out[i], n_out * es, cudaMemcpyDeviceToHost) != cudaSuccess) break;
          /* plain: bf16 rounding of a W-term sum (|x| <= W). residual + RMSNorm:
           * NCCL's path rounds the sum to bf16 before the residual is added, loom's
           * adds in fp32, so where x + residual nearly cancels the two differ by
           * ~2^-9 |x| / rms before the weight: a floor of rms(y) / 32 (a lost or
           * doubled rank's term is off by ~rms(y)) */
          /* fp32: NCCL's order of the W terms may differ from loom's rank order */
          const double rel = v[i].nw ? 1.0 / 32 : dt == LOOM_FP32 ? 1e-6 * W : 1.0 / 64;
          const double floor = v[i].nw ? rel * rms_bf16(h_ref, n_out) : rel * 1e-2 * W;
          wrong[i] = count_wrong(h_got, h_ref, dt, n_out, op == OP_AG, rel, floor);
        }
        wrong[0] = 0;
      }
    }
    /* small sizes: every variant again, per call inside a CUDA graph */
    loom_bench_time_t tg[COLL_MAX_VARS];
    int64_t graphed = 0;
    if (!failed && bytes <= COLL_GRAPH_MAX_BYTES) {
      cudaGraphExec_t ge[COLL_MAX_VARS] = {NULL};
      loom_bench_op_fn gf[COLL_MAX_VARS];
      void *ga[COLL_MAX_VARS];
      loom_result_t rg = LOOM_SUCCESS;
      for (int i = 0; i < nv && rg == LOOM_SUCCESS; ++i) rg = capture_calls(&v[i], s, &ge[i]);
      int64_t gfail = rg != LOOM_SUCCESS;
      if (gfail) fprintf(stderr, "rank %d: %s %lld bytes: graph capture: %s\n", ctx->rank, suite, (long long)bytes, loom_last_error());
      if (loom_bench_sum_ranks(ctx->nccl, s, &gfail) == LOOM_SUCCESS && !gfail) {
        for (int i = 0; i < nv; ++i) gf[i] = graph_run, ga[i] = ge[i];
        const int greps = a->o.reps > COLL_GRAPH_REPS ? a->o.reps : COLL_GRAPH_REPS;
        rg = loom_bench_time_ranks_side_by_side(ctx->nccl, s, a->o.warmup, greps, nv, gf, ga, tg);
        if (rg == LOOM_SUCCESS) rg = loom_comm_get_async_error(comm);
        graphed = rg == LOOM_SUCCESS;
        if (!graphed) fprintf(stderr, "rank %d: %s %lld bytes (graphs): %s\n", ctx->rank, suite, (long long)bytes, loom_last_error());
      }
      (void)cudaStreamSynchronize(s);
      for (int i = 0; i < nv; ++i)
        if (ge[i]) (void)cudaGraphExecDestroy(ge[i]);
    }
    for (int i = 0; i < nv; ++i)
      if (wrong[i] >= 0 && loom_bench_sum_ranks(ctx->nccl, s, &wrong[i]) != LOOM_SUCCESS) failed = 1;
    if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
    for (int i = 0; i < nv; ++i)
      if (v[i].plan) (void)loom_plan_destroy(v[i].plan);
    if (ctx->rank != 0) continue;
    for (int i = 0; i < nv; ++i) {
      loom_bench_row_t *row = add_row(&t, suite, op, v[i].impl, "", bytes, W, dt);
      if (!row) break;
      if (failed) {
        snprintf(row->note, sizeof row->note, "error on %lld rank(s)", (long long)failed);
        failures++;
        continue;
      }
      row->comm_us = tm[i].median_us, row->min_us = tm[i].min_us, row->max_us = tm[i].max_us;
      row->host_us = tm[i].host_us;
      row->wrong = wrong[i];
      if (row->wrong > 0) failures++;
      coll_row_peer(a, row, &v[i], path[i], bytes, W, 0);
      if (v[i].nw) snprintf(row->note, sizeof row->note, "residual + RMSNorm, rows of %lld", (long long)v[i].cols);
      else if (v[i].epi) snprintf(row->note, sizeof row->note, "dropout(x%s) + residual%s", ecols ? " + bias" : "",
                                  ecols ? ", rows of 1024" : "");
      loom_bench_row_finish(row);
      printf("# %-14s %-13s %8s %10.1f us  busbw %7.1f GB/s  #wrong %lld  host %.1f us\n", suite, row->impl,
             row->shape, row->comm_us, row->busbw, (long long)row->wrong, row->host_us);
      fflush(stdout);
    }
    for (int i = 0; graphed && i < nv; ++i) {
      loom_bench_row_t *row = add_row(&t, suite, op, v[i].impl, "/graph", bytes, W, dt);
      if (!row) break;
      row->comm_us = tg[i].median_us / COLL_GRAPH_CALLS;
      row->min_us = tg[i].min_us / COLL_GRAPH_CALLS, row->max_us = tg[i].max_us / COLL_GRAPH_CALLS;
      snprintf(row->note, sizeof row->note, "per call, in a CUDA graph of %d calls (no host issue time)", COLL_GRAPH_CALLS);
      coll_row_peer(a, row, &v[i], path[i], bytes, W, 1);
      loom_bench_row_finish(row);
      printf("# %-14s %-19s %8s %10.2f us per call in a graph\n", suite, row->impl, row->shape, row->comm_us);
      fflush(stdout);
    }
  }
  if (ctx->rank == 0) {
    char title[160];
    snprintf(title, sizeof title, "loom-bench %s: loom vs NCCL, world %d, median of %d reps", suite, W, a->o.reps);
    if (W == 1) loom_bench_note(&t, "1 GPU: W=1 (no inter-GPU traffic; busbw is 0 by the nccl-tests formula)");
    if (op == OP_AR)
      loom_bench_note(&t, "%s", a->peer_json[0] ? "peer: PyTorch symm_mem one_shot_all_reduce (vs loom-1shot, -ll, "
                                                  "-push), two_shot_all_reduce_ (vs loom-2shot), the kind AUTO chose "
                                                  "(vs loom-auto), dist.all_reduce (vs nccl), all_reduce + F.rms_norm "
                                                  "(vs +rmsnorm); same shape only; bench/peers/coll_torch.py"
                                                : a->peer_note);
    failures = loom_bench_finish(suite, &t, &a->o, W, title, failures);
  }
out:
  if (s) cudaStreamSynchronize(s);
  if (in) (void)loom_free(comm, in);
  for (int i = 0; i < COLL_MAX_VARS; ++i) cudaFree(out[i]);
  cudaFree(tmp), cudaFree(res), cudaFree(nw), cudaFree(bias);
  free(h_ref), free(h_got);
  loom_bench_table_free(&t);
  if (comm) (void)loom_comm_destroy(comm);
  if (s) cudaStreamDestroy(s);
  return failures ? 1 : 0;
}

/* A size: digits, then K, M or G (binary) or nothing; 0 or -1. */
static int coll_parse_size(const char *text, int64_t *out) {
  if (!text || !*text) return -1;
  errno = 0;
  char *end = NULL;
  const long long v = strtoll(text, &end, 10);
  if (errno || end == text) return -1;
  long long mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1LL << 10, end++;
  else if (*end == 'M' || *end == 'm') mul = 1LL << 20, end++;
  else if (*end == 'G' || *end == 'g') mul = 1LL << 30, end++;
  if (*end != '\0' || v < 0 || (mul > 1 && v > (long long)(INT64_MAX / mul))) return -1;
  *out = (int64_t)(v * mul);
  return 0;
}

static int coll_opt(void *ctx, int argc, char **argv, int *i) {
  coll_bench_args_t *a = (coll_bench_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --max-bytes SIZE  largest buffer, e.g. 256M (default 1G)\n"
           "  --sizes LIST      these buffer sizes instead, e.g. 512K,768K,2M (at most 16; 4K or multiples of 8K)\n"
           "  --dtype fp32      fp32 buffers (default bf16); the plain rows only\n"
           "  --peer none       allreduce: skip PyTorch's AllReduce peers (bench/peers/coll_torch.py, run by default\n"
           "                    on this run's sizes; peer(us) only on rows of the same complete shape)\n");
    return 1;
  }
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--dtype")) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : "";
    if (strcmp(v, "fp32") && strcmp(v, "bf16")) {
      fprintf(stderr, "loom-bench: --dtype needs fp32 or bf16, not '%s'\n", v);
      return -1;
    }
    a->dtype = !strcmp(v, "fp32") ? LOOM_FP32 : LOOM_BF16;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--max-bytes")) {
    int64_t v = 0;
    if (*i + 1 >= argc || coll_parse_size(argv[*i + 1], &v) != 0 || v < 4096) {
      fprintf(stderr, "loom-bench: --max-bytes needs a size >= 4096\n");
      return -1;
    }
    a->max_bytes = v;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--sizes")) {
    char list[256];
    if (*i + 1 >= argc || strlen(argv[*i + 1]) >= sizeof list) {
      fprintf(stderr, "loom-bench: --sizes needs a list of sizes, e.g. 512K,768K\n");
      return -1;
    }
    strcpy(list, argv[*i + 1]);
    a->nsizes = 0;
    for (char *t = strtok(list, ","); t; t = strtok(NULL, ",")) {
      int64_t v = 0;
      /* whole rows of the norm's 4096 columns (bf16) above 8 KiB */
      if (a->nsizes == 16 || coll_parse_size(t, &v) != 0 || (v != 4096 && (v < 8192 || v % 8192 != 0))) {
        fprintf(stderr, "loom-bench: --sizes: '%s' is not 4K or a multiple of 8K (at most 16 sizes)\n", t);
        return -1;
      }
      a->sizes[a->nsizes++] = v;
    }
    *i += 1;
    return 1;
  }
  return 0;
}

/* Runs coll_torch.py on this run's exact sizes (from the parent, before the ranks). */
static void coll_peer(coll_bench_args_t *a, int world) {
  if (a->op != OP_AR || !a->peer || world < 2 || a->dtype != LOOM_BF16) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch symm_mem AllReduce not run (%s)",
             a->op != OP_AR ? "allreduce only" : !a->peer ? "--peer none" : world < 2 ? "one rank" : "bf16 only");
    return;
  }
  char args[512];
  int64_t sizes[16];
  const int n = coll_sizes(a, sizes);
  snprintf(args, sizeof args, "--world %d --reps %d --warmup %d --sizes ", world, a->o.reps, a->o.warmup);
  for (int i = 0; i < n; ++i) /* at most 16 sizes of at most 19 digits: fits */
    (void)loom_bench_appendf(args, sizeof args, "%s%lld", i ? "," : "", (long long)sizes[i]);
  (void)loom_bench_run_peer("coll_torch.py", args, "allreduce_torch", a->peer_json, sizeof a->peer_json,
                            a->peer_note, sizeof a->peer_note);
}

static int coll_main(int op, int argc, char **argv) {
  coll_bench_args_t a;
  memset(&a, 0, sizeof a);
  a.op = op;
  a.max_bytes = INT64_C(1) << 30;
  a.peer = 1;
  a.dtype = LOOM_BF16;
  int rc = loom_bench_parse(&a.o, argc, argv, coll_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  coll_peer(&a, world);
  return loom_bench_launch(&a.o, world, coll_rank, &a) ? 1 : 0;
}

LOOM_BENCH(allreduce, "loom_allreduce (one-shot, two-shot, +epilogue, +residual+RMSNorm) vs NCCL (+ a separate kernel)") {
  return coll_main(OP_AR, argc, argv);
}
LOOM_BENCH(reduce_scatter, "loom_reduce_scatter vs NCCL") { return coll_main(OP_RS, argc, argv); }
LOOM_BENCH(all_gather, "loom_all_gather vs NCCL") { return coll_main(OP_AG, argc, argv); }
