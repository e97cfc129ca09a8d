/*
 * bench_optim.c - loom-bench adam and lamb: the distributed optimizers
 * against their unfused decompositions, side by side in one run on every
 * rank (each repetition runs every variant back to back; the time of a
 * repetition is that of the slowest rank):
 *   loom-auto       loom_adam_step / loom_lamb_step, LOOM_OPTIM_AUTO (RS-Opt-AG
 *                   for tensors > 4096 elements, AR-Opt below), one kernel
 *                   (Adam) or three (LAMB) per step; the row names the forms
 *                   the plan chose (loom_optim_plan_info): "loom-auto:rs-opt-ag",
 *                   ":ar-opt", or ":ar-opt A/T" (A of T tensors AR-Opt)
 *   loom-rs         the same, every tensor RS-Opt-AG
 *   loom-ar         the same, every tensor AR-Opt (each rank sums the whole
 *                   gradient through NVLink and updates everything)
 *   nccl-ar         ncclAllReduce of the flat gradient buffer alone (the
 *                   paper's UB: the communication an unfused step needs)
 *   ar+update       ncclAllReduce, then loom's own multi-tensor update kernel
 *                   (the AR-Opt update with no communication: what
 *                   all_reduce + torch._fused_adam_ / apex FusedLAMB do)
 *   rs+update+ag    ncclReduceScatter of the flat buffer, the update of this
 *                   rank's flat slice (one tensor: for LAMB a cost proxy,
 *                   its norms would span tensors), ncclAllGather of the
 *                   parameters (ZeRO / GShard)
 *   update          the update kernel alone on the whole list
 * Cases: one tensor of 2^20, 2^24, 2^27 elements and a BERT-large-like list
 * of 360 tensors (24 layers x 15 tensors, 302M elements), each in fp32
 * (fp32 parameters and gradients) and mixed precision (bf16 parameters and
 * gradients, fp32 master weights and moments). The tensors of a list lie in
 * one loom_malloc buffer (256-byte aligned, gaps between them), so that the
 * NCCL baselines can treat it as one flat buffer. Small cases rotate among
 * several input sets (each with its own plans) so that L2 holds none.
 * Times are medians; speedup = (ar+update) / loom-auto.
 * Peer (W >= 2, unless --peer none): bench/peers/optim_torch.py, run first
 * on this run's exact cases (--cases, --dtypes), gives PyTorch's step
 * (all_reduce of the flat gradient + torch._fused_adamw_, or LAMB in
 * torch._foreach_ ops; mixed precision with fp32 master weights): the peer
 * column of the loom rows of the same complete shape (op, elements,
 * tensors, dtype, world) (> 1: loom faster).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "testing/bench_api.h"

#define OPT_SEED 0x6f707469ull
#define MAX_SETS 8
#define MAX_T 400

enum { V_LOOM_AUTO, V_LOOM_RS, V_LOOM_AR, V_NCCL_AR, V_AR_UPD, V_RS_UPD_AG, V_UPD, V_COUNT };
static const char *const g_vname[V_COUNT] = {"loom-auto", "loom-rs", "loom-ar", "nccl-ar", "ar+update",
                                             "rs+update+ag", "update"};

typedef struct opt_args {
  loom_bench_opts_t o;
  int lamb;
  int64_t only_size; /* 0: all cases */
  int only_list;     /* --list bert */
  int dtype;         /* -1 both, 0 fp32, 1 mixed */
  int peer;          /* 0 with --peer none */
  int64_t chunk;     /* --chunk N: the loom plans' chunk_elems (0: the default) */
  char peer_json[1200]; /* PyTorch's results (bench/peers/optim_torch.py; "" if not run) */
  char peer_note[200];  /* why there is no peer column */
} opt_args_t;

static int opt_opt(void *ctx, int argc, char **argv, int *i) {
  opt_args_t *a = (opt_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --size N             one single-tensor case of N elements only\n"
           "  --list bert          the BERT-large-like list only\n"
           "  --dtype fp32|mixed   one precision only (default both)\n"
           "  --chunk N            the loom plans' chunk_elems (a multiple of 8; default: the library's)\n"
           "  --peer none          skip PyTorch's step (bench/peers/optim_torch.py, run by default on this run's\n"
           "                       exact cases; peer(us) only on rows of the same complete shape)\n");
    return 1;
  }
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(s, "--size")) {
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 1) {
      fprintf(stderr, "loom-bench: --size needs a positive integer, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->only_size = x;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--chunk")) {
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 8 || x % 8) {
      fprintf(stderr, "loom-bench: --chunk needs a positive multiple of 8, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->chunk = x;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--list")) {
    if (!v || strcmp(v, "bert")) {
      fprintf(stderr, "loom-bench: --list takes only \"bert\", got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->only_list = 1;
    *i += 1;
    return 1;
  }
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--dtype")) {
    if (!v || (strcmp(v, "fp32") && strcmp(v, "mixed"))) {
      fprintf(stderr, "loom-bench: --dtype needs fp32 or mixed, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->dtype = strcmp(v, "fp32") ? 1 : 0;
    *i += 1;
    return 1;
  }
  return 0;
}

/* One input set: the buffers and every plan that binds them. */
typedef struct opt_set {
  char *params, *grads;   /* loom_malloc: [flat] */
  char *gred, *gslice;    /* cudaMalloc: the all-reduced gradient [flat], this rank's reduced slice [flat / W] */
  loom_plan_t loom[3];    /* AUTO, RS, AR */
  loom_plan_t upd;        /* update only (loom_bench_optim_update_plan): the list from gred */
  loom_plan_t upd_slice;  /* update only: this rank's flat slice from gslice */
} opt_set_t;

typedef struct opt_run {
  ncclComm_t nccl;
  int lamb, W, rank, nsets;
  loom_dtype_t pt, gt;
  int64_t flat;           /* elements of the flat buffers (a multiple of 64 W) */
  opt_set_t set[MAX_SETS];
} opt_run_t;

typedef struct opt_var {
  opt_run_t *r;
  int v;
} opt_var_t;

static ncclDataType_t nccl_type(loom_dtype_t t) { return t == LOOM_FP32 ? ncclFloat32 : ncclBfloat16; }

static loom_result_t step(opt_run_t *r, loom_plan_t p, cudaStream_t s) {
  return r->lamb ? loom_lamb_step(p, NULL, s) : loom_adam_step(p, NULL, s);
}

static loom_result_t opt_op(void *arg, int iter, cudaStream_t s) {
  const opt_var_t *x = (const opt_var_t *)arg;
  opt_run_t *r = x->r;
  opt_set_t *st = &r->set[iter % r->nsets];
  const size_t ps = loom_dtype_size(r->pt);
  const size_t slice = (size_t)(r->flat / r->W);
  switch (x->v) {
    case V_LOOM_AUTO:
    case V_LOOM_RS:
    case V_LOOM_AR: return step(r, st->loom[x->v - V_LOOM_AUTO], s);
    case V_NCCL_AR:
      LOOM_BENCH_NCCL(ncclAllReduce(st->grads, st->gred, (size_t)r->flat, nccl_type(r->gt), ncclSum, r->nccl, s));
      return LOOM_SUCCESS;
    case V_AR_UPD:
      LOOM_BENCH_NCCL(ncclAllReduce(st->grads, st->gred, (size_t)r->flat, nccl_type(r->gt), ncclSum, r->nccl, s));
      return step(r, st->upd, s);
    case V_RS_UPD_AG:
      LOOM_BENCH_NCCL(ncclReduceScatter(st->grads, st->gslice, slice, nccl_type(r->gt), ncclSum, r->nccl, s));
      LOOM_BENCH_TRY(step(r, st->upd_slice, s));
      LOOM_BENCH_NCCL(
          ncclAllGather(st->params + (size_t)r->rank * slice * ps, st->params, slice, nccl_type(r->pt), r->nccl, s));
      return LOOM_SUCCESS;
    case V_UPD: return step(r, st->upd, s);
  }
  return loom_bench_fail(LOOM_ERR_INTERNAL, "bench adam: variant %d", x->v);
}

/* The complete shape of a row, as optim_torch.py names its rows'. */
static void opt_pair_shape(int lamb, int64_t elements, int tensors, int mixed, int W, loom_bench_shape_t *s) {
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", lamb ? "lamb" : "adam");
  loom_bench_shape_int(s, "elements", elements);
  loom_bench_shape_int(s, "tensors", tensors);
  loom_bench_shape_str(s, "dtype", mixed ? "bf16+fp32" : "fp32");
  loom_bench_shape_int(s, "world", W);
}

/* The cases of the selection: sizes[i] elements of one tensor (0: the
 * BERT-large-like list); returns the count. */
static int opt_cases(const opt_args_t *a, int64_t sizes[4]) {
  if (a->only_size || a->only_list) {
    sizes[0] = a->only_list ? 0 : a->only_size;
    return 1;
  }
  static const int64_t full[] = {(int64_t)1 << 20, (int64_t)1 << 24, (int64_t)1 << 27, 0};
  const int n = a->o.quick ? 2 : 4;
  memcpy(sizes, full, (size_t)n * sizeof *sizes);
  return n;
}

/* The forms AUTO chose, for the loom-auto row's label. */
static void opt_auto_path(const loom_optim_plan_info_t *info, char *buf, size_t cap) {
  if (info->num_ar_tensors == 0) snprintf(buf, cap, "rs-opt-ag");
  else if (info->num_ar_tensors == info->num_tensors) snprintf(buf, cap, "ar-opt");
  else snprintf(buf, cap, "ar-opt %d/%d", info->num_ar_tensors, info->num_tensors);
}

/* The tensor sizes of a case: one tensor of `size`, or the BERT-large-like
 * list (size 0). */
static int case_list(int64_t size, int64_t *n) {
  if (size > 0) {
    n[0] = size;
    return 1;
  }
  int T = 0;
  const int64_t H = 1024;
  for (int layer = 0; layer < 24; ++layer) {
    const int64_t s[15] = {H * H, H, H * H, H, H * H, H, H * H, H, H, H, 4 * H * H, 4 * H, 4 * H * H, H, H};
    for (int i = 0; i < 15; ++i) n[T++] = s[i];
  }
  return T;
}

static void release(opt_run_t *r, loom_comm_t comm) {
  for (int i = 0; i < MAX_SETS; ++i) {
    opt_set_t *st = &r->set[i];
    for (int j = 0; j < 3; ++j)
      if (st->loom[j]) (void)loom_plan_destroy(st->loom[j]);
    if (st->upd) (void)loom_plan_destroy(st->upd);
    if (st->upd_slice) (void)loom_plan_destroy(st->upd_slice);
    if (st->params) (void)loom_free(comm, st->params);
    if (st->grads) (void)loom_free(comm, st->grads);
    cudaFree(st->gred), cudaFree(st->gslice);
    memset(st, 0, sizeof *st);
  }
}

static int opt_case(opt_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, loom_bench_table_t *t,
                    int64_t size, int mixed) {
  const int W = ctx->size;
  int64_t n[MAX_T];
  const int T = case_list(size, n);
  opt_run_t r;
  memset(&r, 0, sizeof r);
  r.nccl = ctx->nccl, r.lamb = a->lamb, r.W = W, r.rank = ctx->rank;
  r.pt = mixed ? LOOM_BF16 : LOOM_FP32;
  r.gt = r.pt;
  const size_t ps = loom_dtype_size(r.pt), gs = ps;
  /* element offsets of the tensors in the flat buffers (256-byte aligned) */
  int64_t off[MAX_T], end = 0, total = 0;
  for (int i = 0; i < T; ++i) {
    off[i] = (end + 127) / 128 * 128;
    end = off[i] + n[i];
    total += n[i];
  }
  r.flat = (end + 64 * W - 1) / (64 * W) * (64 * W);
  const size_t state_bytes = (size_t)total * (mixed ? 12 : 8);
  const size_t per_set = (size_t)r.flat * (2 * ps + gs) + 5 * state_bytes;
  r.nsets = loom_bench_rotation(per_set, (size_t)2 << 30);
  if (r.nsets > MAX_SETS) r.nsets = MAX_SETS;
  loom_result_t rr = LOOM_SUCCESS;
  void *params[MAX_T], *grads[MAX_T], *greds[MAX_T];
  /* buffers and plans (collective: every rank makes every one) */
  for (int si = 0; si < r.nsets && rr == LOOM_SUCCESS; ++si) {
    opt_set_t *st = &r.set[si];
    rr = loom_malloc(comm, (size_t)r.flat * ps, (void **)&st->params);
    if (rr == LOOM_SUCCESS) rr = loom_malloc(comm, (size_t)r.flat * gs, (void **)&st->grads);
    if (rr == LOOM_SUCCESS && (cudaMalloc((void **)&st->gred, (size_t)r.flat * gs) != cudaSuccess ||
                               cudaMalloc((void **)&st->gslice, (size_t)(r.flat / W) * gs) != cudaSuccess))
      rr = loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "bench: cudaMalloc of the reduced gradients");
    /* the same parameters on every rank, other gradients on each */
    if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(st->params, r.pt, (size_t)r.flat, OPT_SEED + (uint64_t)si, 1.0);
    if (rr == LOOM_SUCCESS)
      rr = loom_bench_fill_random(st->grads, r.gt, (size_t)r.flat, OPT_SEED * 7 + (uint64_t)si * 131 + (uint64_t)ctx->rank,
                                  1e-2);
    if (rr == LOOM_SUCCESS)
      rr = loom_bench_fill_random(st->gred, r.gt, (size_t)r.flat, OPT_SEED * 3 + (uint64_t)si, 1e-2);
    for (int i = 0; i < T; ++i) {
      params[i] = st->params + (size_t)off[i] * ps;
      grads[i] = st->grads + (size_t)off[i] * gs;
      greds[i] = st->gred + (size_t)off[i] * gs;
    }
    loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
    d.world_size = W, d.num_tensors = T, d.params = params, d.grads = grads, d.numels = n;
    d.param_type = r.pt, d.grad_type = r.gt, d.weight_decay = 0.01f;
    d.chunk_elems = a->chunk;
    static const loom_optim_form_t forms[3] = {LOOM_OPTIM_AUTO, LOOM_OPTIM_RS_OPT_AG, LOOM_OPTIM_AR_OPT};
    for (int j = 0; j < 3; ++j) {
      d.form = forms[j];
      loom_result_t pr = rr;
      if (rr == LOOM_SUCCESS)
        pr = a->lamb ? loom_plan_lamb(comm, &d, &st->loom[j]) : loom_plan_adam(comm, &d, &st->loom[j]);
      if (rr == LOOM_SUCCESS) rr = pr;
    }
    d.grads = greds, d.form = LOOM_OPTIM_AR_OPT;
    if (rr == LOOM_SUCCESS) rr = loom_bench_optim_update_plan(comm, &d, a->lamb, &st->upd);
    {
      const int64_t ns = r.flat / W;
      void *pp = st->params + (size_t)ctx->rank * (size_t)ns * ps, *gp = st->gslice;
      loom_optim_desc_t ds = d;
      ds.num_tensors = 1, ds.params = &pp, ds.grads = &gp, ds.numels = &ns;
      if (rr == LOOM_SUCCESS) rr = loom_bench_optim_update_plan(comm, &ds, a->lamb, &st->upd_slice);
    }
  }
  int64_t failed = rr != LOOM_SUCCESS;
  if (failed) fprintf(stderr, "rank %d: %s case %lld: %s\n", ctx->rank, a->lamb ? "lamb" : "adam", (long long)size,
                      loom_last_error());
  if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
  loom_bench_time_t tm[V_COUNT];
  opt_var_t vars[V_COUNT];
  loom_bench_op_fn ops[V_COUNT];
  void *args[V_COUNT];
  if (!failed) {
    for (int v = 0; v < V_COUNT; ++v) vars[v].r = &r, vars[v].v = v, ops[v] = opt_op, args[v] = &vars[v];
    rr = loom_bench_time_ranks_side_by_side(ctx->nccl, s, a->o.warmup, a->o.reps, V_COUNT, ops, args, tm);
    if (rr == LOOM_SUCCESS && cudaStreamSynchronize(s) != cudaSuccess) rr = loom_bench_fail(LOOM_ERR_CUDA, "sync");
    if (rr == LOOM_SUCCESS) rr = loom_comm_get_async_error(comm);
    failed = rr != LOOM_SUCCESS;
    if (failed) fprintf(stderr, "rank %d: %s: %s\n", ctx->rank, a->lamb ? "lamb" : "adam", loom_last_error());
    if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
  }
  int failures = 0;
  if (ctx->rank == 0) {
    loom_optim_plan_info_t info = LOOM_OPTIM_PLAN_INFO_INIT;
    char auto_path[24] = "unresolved";
    if (r.set[0].loom[0] && loom_optim_plan_info(r.set[0].loom[0], &info) == LOOM_SUCCESS)
      opt_auto_path(&info, auto_path, sizeof auto_path);
    loom_bench_shape_t ps;
    opt_pair_shape(a->lamb, total, T, mixed, W, &ps);
    for (int v = V_LOOM_AUTO; v <= V_LOOM_AR; ++v) {
      loom_bench_row_t *row = loom_bench_add(t);
      if (!row) break;
      snprintf(row->op, sizeof row->op, "%s", a->lamb ? "lamb" : "adam");
      snprintf(row->impl, sizeof row->impl, "%s", g_vname[v]);
      if (size > 0 && (size & (size - 1)) == 0)
        snprintf(row->shape, sizeof row->shape, "2^%d", (int)lround(log2((double)size)));
      else if (size > 0)
        snprintf(row->shape, sizeof row->shape, "%lld", (long long)size);
      else snprintf(row->shape, sizeof row->shape, "bert-large %d tensors", T);
      snprintf(row->dtype, sizeof row->dtype, "%s", mixed ? "bf16+fp32" : "fp32");
      row->m = total, row->world = W;
      row->bytes = total * (int64_t)gs;
      row->busbw_factor = 2.0 * (double)(W - 1) / W;
      if (failed) {
        snprintf(row->note, sizeof row->note, "error (see stderr)");
        failures++;
        continue;
      }
      if (v == V_LOOM_AUTO) { /* what ran, from the plan */
        row->auto_us = tm[v].median_us;
        loom_bench_row_auto(row, auto_path);
      } else {
        row->fused_us = tm[v].median_us;
      }
      row->min_us = tm[v].min_us, row->max_us = tm[v].max_us;
      row->comm_us = tm[V_NCCL_AR].median_us;
      row->seq_us = tm[V_AR_UPD].median_us;
      (void)loom_bench_row_pair(row, a->peer_json, "step", &ps, 0);
      snprintf(row->note, sizeof row->note, "rs+upd+ag %.1f upd %.1f; vs ar+upd %.2fx, vs rs+upd+ag %.2fx; %d sets, %lld chunks",
               tm[V_RS_UPD_AG].median_us, tm[V_UPD].median_us, tm[V_AR_UPD].median_us / tm[v].median_us,
               tm[V_RS_UPD_AG].median_us / tm[v].median_us, r.nsets, (long long)info.chunks);
      loom_bench_row_finish(row);
      printf("# %s %-9s %-24s %-9s loom %9.1f  ar+upd %9.1f  rs+upd+ag %9.1f  nccl-ar %9.1f  upd %8.1f us  speedup %5.2f\n",
             row->op, row->impl, row->shape, row->dtype, tm[v].median_us, row->seq_us, tm[V_RS_UPD_AG].median_us,
             row->comm_us, tm[V_UPD].median_us, row->seq_us / tm[v].median_us);
      fflush(stdout);
    }
  }
  if (s) cudaStreamSynchronize(s);
  release(&r, comm);
  return failures;
}

static int opt_rank(loom_rank_ctx_t *ctx, void *arg) {
  opt_args_t *a = (opt_args_t *)arg;
  cudaStream_t s = NULL;
  loom_comm_t comm = NULL;
  if (loom_bench_rank_open(ctx, &s, &comm)) return 1;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  int failures = 0;
  int64_t sizes[4];
  const int ns = opt_cases(a, sizes);
  for (int mixed = 0; mixed <= 1; ++mixed) {
    if (a->dtype >= 0 && a->dtype != mixed) continue;
    for (int i = 0; i < ns; ++i) failures += opt_case(a, ctx, comm, s, &t, sizes[i], mixed);
  }
  if (ctx->rank == 0) {
    loom_bench_note(&t, "fused = loom's step; seq = NCCL all-reduce + loom's update kernel (the AR-Opt update without "
                        "communication); comm = NCCL all-reduce alone; time = median of the slowest rank");
    loom_bench_note(&t, "rs+upd+ag = NCCL reduce-scatter + the update of the rank's flat slice + NCCL all-gather; "
                        "weight decay 0.01, AdamW / LAMB adam_w_mode");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us): PyTorch's step (bench/peers/optim_torch.py, this job): %.80s", a->peer_json);
    else
      loom_bench_note(&t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
    char title[160];
    snprintf(title, sizeof title, "loom-bench %s: fused RS-Opt-AG / AR-Opt vs NCCL + update, world %d, median of %d reps",
             a->lamb ? "lamb" : "adam", ctx->size, a->o.reps);
    failures = loom_bench_finish(a->lamb ? "lamb" : "adam", &t, &a->o, ctx->size, title, failures);
  }
  loom_bench_table_free(&t);
  loom_bench_rank_close(s, comm);
  return failures ? 1 : 0;
}

/* Runs optim_torch.py on this run's exact cases (from the parent, before the ranks). */
static void opt_peer(opt_args_t *a, int world) {
  if (!a->peer || world < 2) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (%s)", a->peer ? "one rank" : "--peer none");
    return;
  }
  char args[320];
  int64_t sizes[4];
  const int ns = opt_cases(a, sizes);
  snprintf(args, sizeof args, "--op %s --world %d --reps %d --warmup %d --dtypes %s --cases ",
           a->lamb ? "lamb" : "adam", world, a->o.reps, a->o.warmup,
           a->dtype < 0 ? "fp32,mixed" : a->dtype ? "mixed" : "fp32");
  for (int i = 0; i < ns; ++i) { /* 4 cases: fits */
    if (sizes[i]) (void)loom_bench_appendf(args, sizeof args, "%s%lld", i ? "," : "", (long long)sizes[i]);
    else (void)loom_bench_appendf(args, sizeof args, "%sbert", i ? "," : "");
  }
  (void)loom_bench_run_peer("optim_torch.py", args, a->lamb ? "lamb_torch" : "adam_torch", a->peer_json,
                            sizeof a->peer_json, a->peer_note, sizeof a->peer_note);
}

static int opt_main(int lamb, int argc, char **argv) {
  opt_args_t a;
  memset(&a, 0, sizeof a);
  a.lamb = lamb;
  a.dtype = -1;
  a.peer = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, opt_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  opt_peer(&a, world);
  return loom_bench_launch(&a.o, world, opt_rank, &a) ? 1 : 0;
}

LOOM_BENCH(adam, "distributed Adam (CoCoNet RS-Opt-AG / AR-Opt) vs NCCL all-reduce + update, 2^20..2^27 and BERT-large") {
  return opt_main(0, argc, argv);
}

LOOM_BENCH(lamb, "distributed LAMB (CoCoNet RS-Opt-AG / AR-Opt) vs NCCL all-reduce + update, 2^20..2^27 and BERT-large") {
  return opt_main(1, argc, argv);
}
