/*
 * bench_moe.c - loom-bench moe: the mixture-of-experts dispatch and combine
 * (loom_moe_dispatch, loom_moe_combine) against NCCL's all-to-all of the
 * same rows, side by side in one run on every rank (each repetition runs
 * every variant; the time of a repetition is the slowest rank's; medians).
 *   loom-dispatch   loom_moe_dispatch: the routing in, every row stored
 *                   into its expert's rank, grouped by expert; counts on
 *                   the device
 *   loom-combine    loom_moe_combine of expert outputs in the receive
 *                   layout: rows back to their tokens, the k-way weighted
 *                   sums
 *   nccl-a2av       ncclSend/ncclRecv of the same rows per rank pair, the
 *                   counts known on the host and the rows already sorted by
 *                   destination (a lower bound of the sequential path: no
 *                   count exchange, no permutation, no weighted sum)
 *   nccl-a2av+counts  what a sequential layer must do first: the counts
 *                   exchanged (ncclAllGather), copied to the host and
 *                   waited for, then the all-to-all (all_to_all_single
 *                   with split sizes)
 *   link-stores     the link itself: the same rows, already sorted by
 *                   destination, copied into the destinations' loom_malloc
 *                   memory by 16-byte kernel stores (bench_link.cu), every
 *                   rank at once; no routing, no signals. The dispatch's and
 *                   combine's rows note their time against it.
 * Shapes (bf16): Mixtral-8x7B (H 4096, 8 experts, top-2), Qwen3-30B-A3B
 * (2048, 128, top-8), DeepSeek-V3 (7168, 256, top-8); tokens per rank 128
 * (decode) and 4096 (prefill); uniform and Zipf(1.2) routing (--quick:
 * uniform only). Bytes per row: H x 2. algbw = the rows the busiest rank
 * sends to other ranks, in bytes, over the time (dispatch and combine move
 * the same rows, in opposite directions).
 * Correctness is the GPU tests' (tests/gpu/moe): here #wrong is "-".
 * Peer (W >= 2, unless --peer none): bench/peers/moe_torch.py, run first on
 * this run's exact shapes and routings, gives PyTorch's dispatch and combine
 * (argsort + index_select + all_to_all_single with split sizes through the
 * host, and back with the weighted sum; timed call by call, Python's host
 * time included): the peer column of the loom-dispatch / loom-combine rows
 * of the same complete shape.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "bench.h"
#include "moe_models.h"
#include "testing/bench_api.h"

static int moe_opt(void *ctx, int argc, char **argv, int *i) {
  moe_args_t *a = (moe_args_t *)ctx;
  const char *s = argv[*i], *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(s, "--help")) {
    printf("  --model NAME         Mixtral-8x7B, Qwen3-30B-A3B or DeepSeek-V3 (default all)\n"
           "  --tokens T           tokens per rank (default 128 and 4096)\n"
           "  --peer none          skip PyTorch's dispatch and combine (bench/peers/moe_torch.py, run by default on\n"
           "                       this run's exact shapes; timed call by call: Python's host time included)\n"
           "  --layer              the whole expert MLP layer (loom_moe_mlp) instead: loom's unfused sequence, its\n"
           "                       grouped GEMMs alone, dispatch + combine alone, PyTorch's layer as the peer\n"
           "  --list               print the shapes, the rows each rank sends off-rank and their floors (--world W,\n"
           "                       default 2), then exit (no GPU needed)\n");
    return 1;
  }
  if (!strcmp(s, "--list")) return a->list = 1, 1;
  if (!strcmp(s, "--layer")) return a->layer = 1, 1;
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--model")) {
    a->model = -2;
    for (int m = 0; v && m < g_moe_model_count; ++m)
      if (!strcmp(v, g_moe_models[m].name)) a->model = m;
    if (a->model < 0) {
      fprintf(stderr, "loom-bench moe: --model needs Mixtral-8x7B, Qwen3-30B-A3B or DeepSeek-V3, got \"%s\"\n",
              v ? v : "(nothing)");
      return -1;
    }
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--tokens")) {
    char *end = NULL;
    const long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 1 || x > (1 << 20)) {
      fprintf(stderr, "loom-bench moe: --tokens needs an integer in 1..1048576, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->tokens = x;
    *i += 1;
    return 1;
  }
  return 0;
}

enum { V_DISPATCH, V_COMBINE, V_A2A, V_A2A_COUNTS, V_LINK, V_COUNT };
static const char *const g_vname[V_COUNT] = {"loom-dispatch", "loom-combine", "nccl-a2av", "nccl-a2av+counts",
                                             "link-stores"};

typedef struct moe_run {
  loom_plan_t plan;
  loom_moe_plan_info_t info;
  ncclComm_t nccl;
  int W, rank;
  int64_t T, row;                 /* tokens here, bytes per row */
  void *x, *y, *out, *send, *recv;
  int32_t *ids, *counts_dev, *counts_all;
  float *w;
  int64_t sendc[MOE_MAXW], recvc[MOE_MAXW]; /* rows to / from each rank */
  int32_t *counts_host;           /* [W E] pinned */
  int experts;
  void *link;                     /* loom_malloc: [most rows any rank receives from the others, H] */
  char *link_dst[MOE_MAXW];       /* link-stores: where this rank's rows for each peer start there */
} moe_run_t;

typedef struct moe_var {
  moe_run_t *r;
  int v;
} moe_var_t;

/* The rows of every (source, destination) pair; sorted send offsets. */
static loom_result_t a2av(moe_run_t *r, cudaStream_t s) {
  LOOM_BENCH_NCCL(ncclGroupStart());
  int64_t so = 0, ro = 0;
  for (int p = 0; p < r->W; ++p) {
    if (r->sendc[p]) LOOM_BENCH_NCCL(ncclSend((char *)r->send + so * r->row, (size_t)(r->sendc[p] * r->row / 2), ncclBfloat16, p, r->nccl, s));
    if (r->recvc[p]) LOOM_BENCH_NCCL(ncclRecv((char *)r->recv + ro * r->row, (size_t)(r->recvc[p] * r->row / 2), ncclBfloat16, p, r->nccl, s));
    so += r->sendc[p], ro += r->recvc[p];
  }
  LOOM_BENCH_NCCL(ncclGroupEnd());
  return LOOM_SUCCESS;
}

/* link-stores: this rank's off-rank rows (send, sorted by destination)
 * into each peer's link buffer, after the rows of the lower sources. */
static loom_result_t link_stores(moe_run_t *r, cudaStream_t s) {
  int64_t so = 0;
  for (int p = 0; p < r->W; ++p) {
    if (p != r->rank && r->sendc[p])
      LOOM_BENCH_TRY(loom_bench_link_copy(r->link_dst[p], (char *)r->send + so * r->row, (size_t)(r->sendc[p] * r->row), s));
    so += r->sendc[p];
  }
  return LOOM_SUCCESS;
}

/* The link buffer (collective: every rank calls, whatever happened before;
 * the same size everywhere) and this rank's destinations in the peers'. */
static loom_result_t link_setup(moe_run_t *r, loom_comm_t comm, const int64_t (*pair)[MOE_MAXW], loom_result_t rr) {
  int64_t most = 0;
  for (int q = 0; q < r->W; ++q) {
    int64_t in = 0;
    for (int p = 0; p < r->W; ++p) in += p == q ? 0 : pair[p][q];
    if (in > most) most = in;
  }
  const loom_result_t mr = loom_malloc(comm, (size_t)((most + 1) * r->row), &r->link);
  if (rr != LOOM_SUCCESS) return rr;
  LOOM_BENCH_TRY(mr);
  for (int p = 0; p < r->W; ++p) {
    if (p == r->rank) continue;
    int64_t before = 0; /* rows of the sources below this rank in p's buffer */
    for (int q = 0; q < r->rank; ++q) before += q == p ? 0 : pair[q][p];
    void *pp = NULL;
    LOOM_BENCH_TRY(loom_peer_ptr(comm, r->link, p, &pp));
    r->link_dst[p] = (char *)pp + before * r->row;
  }
  return LOOM_SUCCESS;
}

static loom_result_t moe_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  const moe_var_t *x = (const moe_var_t *)arg;
  moe_run_t *r = x->r;
  switch (x->v) {
    case V_DISPATCH: return loom_moe_dispatch(r->plan, r->x, r->ids, r->T, s);
    case V_COMBINE: return loom_moe_combine(r->plan, r->y, r->w, r->out, s);
    case V_A2A: return a2av(r, s);
    case V_LINK: return link_stores(r, s);
    default:
      LOOM_BENCH_NCCL(ncclAllGather(r->counts_dev, r->counts_all, (size_t)r->experts, ncclInt32, r->nccl, s));
      if (cudaMemcpyAsync(r->counts_host, r->counts_all, (size_t)r->W * r->experts * sizeof(int32_t),
                          cudaMemcpyDeviceToHost, s) != cudaSuccess ||
          cudaStreamSynchronize(s) != cudaSuccess)
        return loom_bench_fail(LOOM_ERR_CUDA, "the counts' copy to the host");
      return a2av(r, s);
  }
}

static int moe_shape(moe_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, loom_bench_table_t *t,
                     const moe_model_t *mm, int64_t T, loom_route_kind_t kind) {
  const int W = ctx->size, me = ctx->rank;
  moe_run_t r;
  memset(&r, 0, sizeof r);
  r.nccl = ctx->nccl, r.W = W, r.rank = me, r.T = T, r.row = (int64_t)mm->hidden * 2, r.experts = mm->experts;
  moe_route_t rt;
  loom_result_t rr = moe_route_draw(mm, T, kind, W, me, &rt);
  const int64_t(*pair)[MOE_MAXW] = rt.pair;
  int64_t send_total = 0, recv_total = 0, busiest = 0;
  for (int p = 0; p < W; ++p) {
    r.sendc[p] = pair[me][p], r.recvc[p] = pair[p][me];
    send_total += r.sendc[p], recv_total += r.recvc[p];
  }
  for (int q = 0; q < W; ++q) {
    int64_t off = 0;
    for (int p = 0; p < W; ++p) off += p == q ? 0 : pair[q][p];
    if (off > busiest) busiest = off;
  }
  loom_moe_desc_t d = LOOM_MOE_DESC_INIT;
  d.hidden = mm->hidden, d.experts = mm->experts, d.topk = mm->topk, d.max_tokens = T;
  loom_result_t pr = loom_plan_moe(comm, &d, &r.plan); /* collective: every rank, whatever happened */
  if (rr == LOOM_SUCCESS) rr = pr;
  r.info = (loom_moe_plan_info_t)LOOM_MOE_PLAN_INFO_INIT;
  if (rr == LOOM_SUCCESS) rr = loom_moe_plan_info(r.plan, &r.info);
  cudaError_t e = cudaSuccess;
  if (rr == LOOM_SUCCESS) {
    e = cudaMalloc(&r.x, (size_t)(T * r.row));
    if (e == cudaSuccess) e = cudaMalloc(&r.y, (size_t)(r.info.max_recv_rows * r.row));
    if (e == cudaSuccess) e = cudaMalloc(&r.out, (size_t)(T * r.row));
    if (e == cudaSuccess) e = cudaMalloc(&r.send, (size_t)((send_total + 1) * r.row));
    if (e == cudaSuccess) e = cudaMalloc(&r.recv, (size_t)((recv_total + 1) * r.row));
    if (e == cudaSuccess) e = cudaMalloc((void **)&r.ids, (size_t)T * mm->topk * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&r.w, (size_t)T * mm->topk * sizeof(float));
    if (e == cudaSuccess) e = cudaMalloc((void **)&r.counts_dev, (size_t)mm->experts * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMalloc((void **)&r.counts_all, (size_t)W * mm->experts * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMallocHost((void **)&r.counts_host, (size_t)W * mm->experts * sizeof(int32_t));
    if (e == cudaSuccess) e = cudaMemcpy(r.ids, rt.ids, (size_t)T * mm->topk * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMemcpy(r.w, rt.w, (size_t)T * mm->topk * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess)
      e = cudaMemcpy(r.counts_dev, rt.counts, (size_t)mm->experts * sizeof(int32_t), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) rr = loom_bench_cuda_fail((int)e, "bench buffers", __FILE__, __LINE__);
  }
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.x, LOOM_BF16, (size_t)(T * mm->hidden), MOE_SEED + me, 1.0);
  if (rr == LOOM_SUCCESS)
    rr = loom_bench_fill_random(r.y, LOOM_BF16, (size_t)(r.info.max_recv_rows * mm->hidden), MOE_SEED + 7 + me, 1.0);
  if (rr == LOOM_SUCCESS) rr = loom_moe_dispatch(r.plan, r.x, r.ids, T, s); /* combine needs a dispatch */
  if (rr == LOOM_SUCCESS) { /* the rows loom received are the ones the all-to-all's counts expect */
    int64_t got = -1;
    e = cudaMemcpyAsync(&got, r.info.expert_offsets + r.info.local_experts, sizeof got, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) rr = loom_bench_cuda_fail((int)e, "expert_offsets", __FILE__, __LINE__);
    else if (got != recv_total)
      rr = loom_bench_fail(LOOM_ERR_INTERNAL, "rank %d received %lld rows, the routing says %lld", me, (long long)got,
                           (long long)recv_total);
  }
  rr = link_setup(&r, comm, pair, rr);
  moe_var_t vars[V_COUNT];
  void *args[V_COUNT];
  for (int v = 0; v < V_COUNT; ++v) vars[v].r = &r, vars[v].v = v, args[v] = &vars[v];
  loom_bench_time_t tm[V_COUNT];
  const int failed = moe_time_side_by_side(ctx, comm, s, a, rr, "moe", mm, T, V_COUNT, moe_op, args, tm);
  if (me == 0 && !failed)
    for (int v = 0; v < V_COUNT; ++v) {
      loom_bench_row_t *row = moe_row(t, "moe", g_vname[v], mm, T, kind, W);
      if (!row) break;
      row->k = mm->topk;
      row->bytes = busiest * r.row;
      row->busbw_factor = 1.0;
      row->fused_us = tm[v].median_us, row->min_us = tm[v].min_us, row->max_us = tm[v].max_us;
      row->host_us = tm[v].host_us;
      row->comm_us = tm[V_A2A].median_us;
      snprintf(row->note, sizeof row->note,
               "E %d top-%d H %d; busiest rank sends %lld rows off-rank; vs nccl-a2av %.2fx; link-stores %.1f us "
               "(%.0f GB/s), this row at %.2f of the link's rate",
               mm->experts, mm->topk, mm->hidden, (long long)busiest, tm[V_A2A].median_us / tm[v].median_us,
               tm[V_LINK].median_us, busiest * r.row / tm[V_LINK].median_us / 1e3,
               tm[V_LINK].median_us / tm[v].median_us);
      if (v == V_DISPATCH || v == V_COMBINE) {
        loom_bench_shape_t ps;
        moe_pair_shape(mm, T, kind, W, 0, &ps);
        (void)loom_bench_row_pair(row, a->peer_json, v == V_DISPATCH ? "dispatch" : "combine", &ps, 0);
      }
    }
  if (me == 0 && !failed) {
    printf("# moe %-36s dispatch %8.1f  combine %8.1f  nccl-a2av %8.1f  +counts %8.1f  link %8.1f us\n",
           t->rows[t->n - 1]->shape, tm[V_DISPATCH].median_us, tm[V_COMBINE].median_us, tm[V_A2A].median_us,
           tm[V_A2A_COUNTS].median_us, tm[V_LINK].median_us);
    fflush(stdout);
  }
  if (r.plan) (void)loom_plan_destroy(r.plan);
  if (r.link) (void)loom_free(comm, r.link);
  cudaFree(r.x), cudaFree(r.y), cudaFree(r.out), cudaFree(r.send), cudaFree(r.recv), cudaFree(r.ids), cudaFree(r.w);
  cudaFree(r.counts_dev), cudaFree(r.counts_all);
  if (r.counts_host) cudaFreeHost(r.counts_host);
  moe_route_free(&rt);
  return failed ? 1 : 0;
}

/* The run's shapes in order: (model, tokens, routing) into out[max]; the count. */
static int moe_shapes(const moe_args_t *a, moe_shape_sel_t *out, int max) {
  int n = 0;
  for (int m = 0; m < g_moe_model_count; ++m) {
    if (a->model >= 0 && a->model != m) continue;
    for (int ti = 0; ti < 2; ++ti) {
      if (a->tokens && ti) break;
      for (int k = 0; k < (a->o.quick ? 1 : 2) && n < max; ++k)
        out[n++] = (moe_shape_sel_t){m, a->tokens ? a->tokens : g_moe_tokens[ti], k ? LOOM_ROUTE_ZIPF : LOOM_ROUTE_UNIFORM};
    }
  }
  return n;
}

static int moe_rank(loom_rank_ctx_t *ctx, void *arg) {
  moe_args_t *a = (moe_args_t *)arg;
  if (ctx->size > MOE_MAXW) {
    fprintf(stderr, "loom-bench moe: at most %d ranks\n", MOE_MAXW);
    return 1;
  }
  cudaStream_t s = NULL;
  loom_comm_t comm = NULL;
  if (loom_bench_rank_open(ctx, &s, &comm)) return 1;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  int failures = 0;
  moe_shape_sel_t sel[16];
  const int ns = moe_shapes(a, sel, 16);
  for (int i = 0; i < ns; ++i)
    failures += (a->layer ? moe_layer_shape : moe_shape)(a, ctx, comm, s, &t, &g_moe_models[sel[i].model], sel[i].T,
                                                         sel[i].kind);
  if (ctx->rank == 0 && a->layer) {
    failures = moe_layer_finish(a, &t, ctx->size, failures);
  } else if (ctx->rank == 0) {
    loom_bench_note(&t, "bf16 rows; time = median of the slowest rank; algbw = the busiest rank's off-rank rows x H x 2 "
                        "/ time; comm(us) = nccl-a2av");
    loom_bench_note(&t, "nccl-a2av: counts known on the host, rows pre-sorted by destination (a lower bound of the "
                        "sequential path); +counts: ncclAllGather of the counts, copy to the host, wait, then it");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us): PyTorch's dispatch / combine (bench/peers/moe_torch.py: argsort, index_select, "
                          "all_to_all_single with host split sizes; eager): %.60s", a->peer_json);
    else
      loom_bench_note(&t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
    char title[160];
    snprintf(title, sizeof title, "loom-bench moe: dispatch and combine vs NCCL all-to-all, world %d, median of %d reps",
             ctx->size, a->o.reps);
    failures = loom_bench_finish("moe", &t, &a->o, ctx->size, title, failures);
  }
  loom_bench_table_free(&t);
  loom_bench_rank_close(s, comm);
  return failures ? 1 : 0;
}

/* One-way NVLink of kernel stores, the floors' link (docs/perf/core.md,
 * "Ceilings the floors use": 359-364 GB/s on 2x H200). */
#define MOE_LINK_GBS 360.0

/* --list: every shape, the busiest rank's off-rank rows and bytes under
 * this run's routing, and the time they need at MOE_LINK_GBS; no GPU. */
static int moe_list(const moe_args_t *a, int W) {
  if (W > MOE_MAXW) {
    fprintf(stderr, "loom-bench moe: at most %d ranks\n", MOE_MAXW);
    return 2;
  }
  moe_shape_sel_t sel[16];
  const int ns = moe_shapes(a, sel, 16);
  printf("loom-bench moe: bf16 rows, world %d; floor = the busiest rank's off-rank bytes at %.0f GB/s one way\n", W,
         MOE_LINK_GBS);
  printf("%-36s %7s %5s %5s %12s %10s %10s\n", "shape", "H", "E", "top", "rows off", "MiB", "floor us");
  for (int i = 0; i < ns; ++i) {
    const moe_model_t *mm = &g_moe_models[sel[i].model];
    const int64_t T = sel[i].T;
    moe_route_t rt;
    const int ok = moe_route_draw(mm, T, sel[i].kind, W, 0, &rt) == LOOM_SUCCESS;
    moe_route_free(&rt);
    const int64_t(*pair)[MOE_MAXW] = rt.pair;
    if (!ok) {
      fprintf(stderr, "loom-bench moe: out of host memory\n");
      return 1;
    }
    int64_t busiest = 0;
    for (int q = 0; q < W; ++q) {
      int64_t off = 0;
      for (int p = 0; p < W; ++p) off += p == q ? 0 : pair[q][p];
      if (off > busiest) busiest = off;
    }
    const double bytes = (double)busiest * mm->hidden * 2;
    char shape[64];
    snprintf(shape, sizeof shape, "%s T=%lld %s", mm->name, (long long)T, moe_route_name(sel[i].kind));
    printf("%-36s %7d %5d %5d %12lld %10.1f %10.1f\n", shape, mm->hidden, mm->experts, mm->topk, (long long)busiest,
           bytes / 1048576.0, bytes / (MOE_LINK_GBS * 1e3));
  }
  return 0;
}

/* Runs moe_torch.py on this run's exact shapes (from the parent, before the ranks). */
static void moe_peer(moe_args_t *a, int world) {
  if (!a->peer || world < 2) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (%s)", a->peer ? "one rank" : "--peer none");
    return;
  }
  char args[1024];
  moe_shape_sel_t sel[16];
  const int ns = moe_shapes(a, sel, 16);
  snprintf(args, sizeof args, "--eager --world %d --reps %d --warmup %d %s--shapes ", world, a->o.reps, a->o.warmup,
           a->layer ? "--layer " : "");
  for (int i = 0; i < ns; ++i) {
    const moe_model_t *mm = &g_moe_models[sel[i].model];
    (void)loom_bench_appendf(args, sizeof args, "%s%s:%d:%d:%d:%lld:%s", i ? "," : "", mm->name, mm->hidden,
                             mm->experts, mm->topk, (long long)sel[i].T, moe_route_name(sel[i].kind));
    if (a->layer) (void)loom_bench_appendf(args, sizeof args, ":%d", mm->ffn);
  }
  (void)loom_bench_run_peer("moe_torch.py", args, "moe_torch", a->peer_json, sizeof a->peer_json, a->peer_note,
                            sizeof a->peer_note);
}

LOOM_BENCH(moe, "MoE dispatch and combine (expert parallelism) vs NCCL all-to-all: Mixtral, Qwen3-MoE, DeepSeek-V3 "
                "shapes, decode and prefill, uniform and Zipf routing") {
  moe_args_t a;
  memset(&a, 0, sizeof a);
  a.model = -1;
  a.peer = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, moe_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (a.list) return moe_list(&a, a.o.world > 0 ? a.o.world : 2);
  const int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  moe_peer(&a, world);
  return loom_bench_launch(&a.o, world, moe_rank, &a) ? 1 : 0;
}
