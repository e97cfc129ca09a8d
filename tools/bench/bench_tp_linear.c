/*
 * bench_tp_linear.c - loom-bench ag_gemm and gemm_rs: the tensor-parallel
 * ops against their baselines, side by side in one run on every rank
 * (each repetition runs every variant back to back; the time of a
 * repetition is that of the slowest rank):
 *   loom fused      each fused transfer (AG: copy engine and SM copy; RS: SM
 *                   copy and SM atomic), the decomposed path (loom-dec:
 *                   LOOM_TP_DECOMPOSED, the library's form of `medium`
 *                   below), and the plan's own choice (AUTO:
 *                   tuned with --tune), one row each; the AUTO row names
 *                   the transfer it resolved to (loom_tp_plan_info), e.g.
 *                   "loom-auto:sequential", and its time is auto(us)
 *   gemm            cuBLASLt (best of its heuristic's candidates) and
 *                   loom_gemm on the local shape (m x n x k); the row's GEMM
 *                   time is the better of the two ("the limit")
 *   nccl            ncclAllGather / ncclReduceScatter of the shards
 *   seq             NCCL then cuBLASLt (AG) / cuBLASLt then NCCL (RS)
 *   medium          W chunks, cuBLASLt per chunk, NCCL on a second stream
 *                   (TransformerEngine's way; tp_medium)
 * ECT and overlap efficiency as bench.h derives them: ECT(x) = x - gemm,
 * overlap = 1 - ECT(fused) / ECT(seq). Shapes (B as a PyTorch Linear
 * weight, bf16, TP = W): Flux's GPT-3 175B (AG: [m, 12288] x [12288,
 * 49152/W]; RS: [m, 49152/W] x [.., 12288]) and Llama-3-70B (AG: [m, 8192]
 * x [8192, 28672/W]; RS: [m, 28672/W] x [.., 8192]), m = 64 .. 8192; or,
 * with --set fitting|held-out|all, the tensor-parallel layers of the GEMM
 * shape set's families at TP 2, 4 and 8 (support/tp_cases.h; --sample N
 * keeps N of them, spread evenly): rows "<family>/<layer> tp<T> m=<m> F|H"
 * (F: the fitting half, H: held out), the shapes a model of the paths is
 * fitted on and checked on.
 * Every fused output is checked against the sequential one (#wrong).
 * Peer (W >= 2, unless --peer none): bench/peers/tp_torch.py, run first,
 * given this run's exact shapes (--shapes model:m:n:k, n and k after the
 * --tp split); its async-TP time pairs with every loom row of the same
 * complete shape (op, model, m, n, k, world, dtype) and no other.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "testing/bench_api.h"
#include "support/tp_cases.h"

#define TP_SEED 0x74706c6eull

/* Shards as include/loom.h states them: S = ceil(m / W) rows; rank p owns
 * rows [min(m, p S), min(m, (p+1) S)). */
static int64_t tp_shard_rows(int64_t m, int W) { return (m + W - 1) / W; }

/* LOOM_TP_BULK_REDUCE's rule (loom.h): compute capability 9.0 and m = W
 * equal shards of a multiple of 64 rows. */
static int bulk_runs(int64_t m, int W) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
    return 0;
  return major == 9 && minor == 0 && m % W == 0 && (m / W) % 64 == 0;
}
static int64_t tp_shard_len(int64_t m, int W, int p) {
  const int64_t S = tp_shard_rows(m, W), b = (int64_t)p * S < m ? (int64_t)p * S : m;
  const int64_t e = (int64_t)(p + 1) * S < m ? (int64_t)(p + 1) * S : m;
  return e - b;
}

typedef struct tp_args {
  loom_bench_opts_t o;
  int ag;               /* 1: ag_gemm, 0: gemm_rs */
  loom_tp_case_sel_t sel; /* the shapes (support/tp_cases.h): --set, --model, --tp, --m, --sample, --quick */
  int blocks, chunk;    /* desc.comm_blocks, desc.chunk_rows (0: the plan's) */
  int peer;             /* 0 with --peer none */
  int tune;             /* --tune: loom_*_tune before the plans (the loom-auto row takes its choice) */
  unsigned paths;       /* --paths: bit t set for each transfer t whose fused row runs (0: every one) */
  char peer_json[1200]; /* the PyTorch peer's results ("" if not run) */
  char peer_note[200];  /* why there is no peer column */
} tp_args_t;

/* The fused rows' short names (the impl column: loom-<name>) by transfer. */
static const struct {
  const char *name;
  loom_tp_transfer_t t;
} path_names[] = {{"ce", LOOM_TP_COPY_ENGINE}, {"sm", LOOM_TP_SM_COPY},     {"at", LOOM_TP_SM_ATOMIC},
                  {"bk", LOOM_TP_BULK_REDUCE}, {"dec", LOOM_TP_DECOMPOSED}, {"auto", LOOM_TP_AUTO}};

/* --paths LIST -> *bits (bit t for transfer t); 0 with a message on a
 * name it does not know. */
static int parse_paths(const char *v, unsigned *bits) {
  char buf[128];
  if (!v || !*v || strlen(v) >= sizeof buf) {
    fprintf(stderr, "loom-bench: --paths needs a list such as sm,auto, got \"%s\"\n", v ? v : "(nothing)");
    return 0;
  }
  snprintf(buf, sizeof buf, "%s", v);
  *bits = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t j = 0;
    while (j < sizeof path_names / sizeof path_names[0] && strcmp(tok, path_names[j].name)) ++j;
    if (j == sizeof path_names / sizeof path_names[0]) {
      fprintf(stderr, "loom-bench: --paths: unknown path \"%s\" (ce, sm, at, bk, dec, auto)\n", tok);
      return 0;
    }
    *bits |= 1u << path_names[j].t;
  }
  return 1;
}

static int tp_opt(void *ctx, int argc, char **argv, int *i) {
  tp_args_t *a = (tp_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --set S              models (default: GPT-3 175B and Llama-3-70B), or the tensor-parallel layers of\n"
           "                       the GEMM shape set's families: fitting, held-out or all (TP 2, 4 and 8 unless\n"
           "                       --tp; rows name family/layer, TP and the half: support/tp_cases.h)\n"
           "  --sample N           at most N of the selected shapes, spread evenly over the list\n"
           "  --model gpt3|llama   one model's shapes (--set models; default both)\n"
           "  --layer NAME         the families' layers whose \"<family>/<layer>\" starts with NAME\n"
           "                       (--set fitting|held-out|all; e.g. Falcon-180B/o)\n"
           "  --m M                one m only\n"
           "  --tp T               split the weights T ways (default: the world size; --world 1 --tp 2\n"
           "                       times the TP=2 shapes' GEMMs and the fused protocol on one GPU)\n"
           "  --blocks N           desc.comm_blocks of the fused plans (default: the plan's)\n"
           "  --chunk N            desc.chunk_rows of the fused plans (default: the plan's)\n"
           "  --peer none          skip PyTorch async-TP (bench/peers/tp_torch.py, run by default on this run's\n"
           "                       exact shapes; peer(us) only on rows of the same complete shape)\n"
           "  --tune               tune each shape first (loom_ag_gemm_tune / loom_gemm_rs_tune): the loom-auto row\n"
           "                       (loom-tuned:<transfer>) takes its choice\n"
           "  --paths LIST         only these fused rows, comma-separated: ce, sm, at, bk, dec, auto (default: all\n"
           "                       that apply); the first one named gives the hook-idle and same-cfg columns\n"
           "                       their GEMM configuration (e.g. --paths sm: the hooked kernel's rows alone)\n");
    return 1;
  }
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  if (!strcmp(s, "--model")) {
    if (!v || (strcmp(v, "gpt3") && strcmp(v, "llama"))) {
      fprintf(stderr, "loom-bench: --model needs gpt3 or llama, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->sel.model = strcmp(v, "gpt3") ? 1 : 0;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--layer")) {
    if (!v || !*v || strlen(v) >= sizeof a->sel.layer) {
      fprintf(stderr, "loom-bench: --layer needs a family or family/layer name (--set families), got \"%s\"\n",
              v ? v : "(nothing)");
      return -1;
    }
    snprintf(a->sel.layer, sizeof a->sel.layer, "%s", v);
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--tune")) return a->tune = 1, 1;
  if (!strcmp(s, "--paths")) return parse_paths(v, &a->paths) ? (*i += 1, 1) : -1;
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--tp")) {
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 1 || x > 64) {
      fprintf(stderr, "loom-bench: --tp needs an integer in 1..64, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->sel.tp = (int)x;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--blocks") || !strcmp(s, "--chunk")) {
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : -1;
    if (!v || !end || *end || x < 0 || x > 1 << 20) {
      fprintf(stderr, "loom-bench: %s needs a non-negative integer, got \"%s\"\n", s, v ? v : "(nothing)");
      return -1;
    }
    if (!strcmp(s, "--blocks")) a->blocks = (int)x;
    else a->chunk = (int)x;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--m")) {
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 1) {
      fprintf(stderr, "loom-bench: --m needs a positive integer, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->sel.only_m = x;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--set")) {
    const int set = loom_tp_set_parse(v);
    if (set < 0) {
      fprintf(stderr, "loom-bench: --set needs models, fitting, held-out or all, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->sel.set = (loom_tp_set_t)set;
    *i += 1;
    return 1;
  }
  if (!strcmp(s, "--sample")) {
    char *end = NULL;
    long long x = v ? strtoll(v, &end, 10) : 0;
    if (!v || !end || *end || x < 1 || x > 100000) {
      fprintf(stderr, "loom-bench: --sample needs an integer in 1..100000, got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->sel.sample = (int)x;
    *i += 1;
    return 1;
  }
  return 0;
}

enum { V_GEMM_LT, V_GEMM_LOOM, V_NCCL, V_SEQ, V_MEDIUM, V_PLAIN_CFG, V_HOOK_IDLE, V_FUSED0 };
#define MAX_FUSED 5

typedef struct tp_run {
  ncclComm_t nccl;
  int ag, W;
  loom_gemm_desc_t d;     /* the local GEMM */
  int64_t S;
  void *a, *a_full, *b, *c, *c_shard, *partial;
  loom_plan_t plans[MAX_FUSED];
  loom_bench_gemm_config_t cfg; /* the first fused plan's GEMM configuration */
  int cluster;            /* its blocks per cluster */
  int rank;
  cudaStream_t cs;        /* medium-grained: the communication stream */
  cudaEvent_t ev[65];     /* medium-grained: [0] start, [1 + i] chunk i moved */
} tp_run_t;

typedef struct tp_var {
  tp_run_t *r;
  int v;
} tp_var_t;

#define EV(call)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    if (e_ != cudaSuccess) return loom_bench_cuda_fail((int)e_, #call, __FILE__, __LINE__);   \
  } while (0)

/* The medium-grained decomposition (as TransformerEngine overlaps its
 * tensor-parallel GEMMs): W chunks of rows, cuBLASLt per chunk on the
 * compute stream, NCCL on a second stream, events between them.
 * AG: the own shard's GEMM first; at step i every rank sends its shard to
 * r - i and receives r + i's, whose GEMM follows. RS: chunk p (owner p's
 * rows) computed at step p, then reduced to p (ncclReduce) while chunk p+1
 * is computed. Shards equal (W divides m). */
static loom_result_t tp_medium(tp_run_t *r, cudaStream_t s) {
  const int W = r->W, rank = r->rank;
  const size_t es = 2, S = (size_t)r->S;
  loom_gemm_desc_t d = r->d;
  d.m = r->S;
  EV(cudaEventRecord(r->ev[0], s));
  EV(cudaStreamWaitEvent(r->cs, r->ev[0], 0));
  if (r->ag) {
    const size_t row = (size_t)r->d.k * es, crow = (size_t)r->d.n * es;
    LOOM_BENCH_TRY(loom_bench_base_gemm(&d, r->a, r->b, (char *)r->c + (size_t)rank * S * crow, NULL, s));
    for (int i = 1; i < W; ++i) {
      const int to = (rank - i + W) % W, from = (rank + i) % W;
      LOOM_BENCH_NCCL(ncclGroupStart());
      LOOM_BENCH_NCCL(ncclSend(r->a, S * (size_t)r->d.k, ncclBfloat16, to, r->nccl, r->cs));
      LOOM_BENCH_NCCL(ncclRecv((char *)r->a_full + (size_t)from * S * row, S * (size_t)r->d.k, ncclBfloat16, from,
                               r->nccl, r->cs));
      LOOM_BENCH_NCCL(ncclGroupEnd());
      EV(cudaEventRecord(r->ev[i], r->cs));
      EV(cudaStreamWaitEvent(s, r->ev[i], 0));
      LOOM_BENCH_TRY(loom_bench_base_gemm(&d, (char *)r->a_full + (size_t)from * S * row, r->b,
                                          (char *)r->c + (size_t)from * S * crow, NULL, s));
    }
    return LOOM_SUCCESS;
  }
  const size_t arow = (size_t)r->d.k * es, crow = (size_t)r->d.n * es;
  for (int p = 0; p < W; ++p) {
    LOOM_BENCH_TRY(loom_bench_base_gemm(&d, (char *)r->a + (size_t)p * S * arow, r->b,
                                        (char *)r->partial + (size_t)p * S * crow, NULL, s));
    EV(cudaEventRecord(r->ev[1 + p], s));
    EV(cudaStreamWaitEvent(r->cs, r->ev[1 + p], 0));
    LOOM_BENCH_NCCL(ncclReduce((char *)r->partial + (size_t)p * S * crow, r->c_shard, S * (size_t)r->d.n,
                               ncclBfloat16, ncclSum, p, r->nccl, r->cs));
  }
  EV(cudaEventRecord(r->ev[W + 1 < 65 ? W + 1 : 64], r->cs));
  EV(cudaStreamWaitEvent(s, r->ev[W + 1 < 65 ? W + 1 : 64], 0));
  return LOOM_SUCCESS;
}

static loom_result_t tp_op(void *arg, int iter, cudaStream_t s) {
  (void)iter;
  const tp_var_t *x = (const tp_var_t *)arg;
  tp_run_t *r = x->r;
  const size_t es = 2;
  switch (x->v) {
    case V_GEMM_LT:
      return loom_bench_base_gemm(&r->d, r->ag ? r->a_full : r->a, r->b, r->ag ? r->c : r->partial, NULL, s);
    case V_GEMM_LOOM:
      return loom_gemm(&r->d, r->ag ? r->a_full : r->a, r->b, r->ag ? r->c : r->partial, NULL, s);
    case V_NCCL:
      if (r->ag) return loom_bench_base_allgather(r->nccl, r->a, r->a_full, (size_t)(r->S * r->d.k), LOOM_BF16, s);
      return loom_bench_base_reducescatter(r->nccl, r->partial, r->c_shard, (size_t)(r->S * r->d.n), LOOM_BF16, s);
    case V_SEQ:
      if (r->ag) {
        LOOM_BENCH_TRY(loom_bench_base_allgather(r->nccl, r->a, r->a_full, (size_t)(r->S * r->d.k), LOOM_BF16, s));
        return loom_bench_base_gemm(&r->d, r->a_full, r->b, r->c, NULL, s);
      }
      LOOM_BENCH_TRY(loom_bench_base_gemm(&r->d, r->a, r->b, r->partial, NULL, s));
      return loom_bench_base_reducescatter(r->nccl, r->partial, r->c_shard, (size_t)(r->S * r->d.n), LOOM_BF16, s);
    case V_MEDIUM:
      return r->W * r->S == r->d.m ? tp_medium(r, s)
                                   : loom_bench_fail(LOOM_ERR_UNSUPPORTED, "medium-grained: uneven shards");
    case V_HOOK_IDLE: /* the fused GEMM's kernel and configuration, hooks idle */
      return loom_bench_gemm_hooks_idle(&r->d, r->ag ? r->a_full : r->a, r->b, r->ag ? r->c : r->partial, NULL, &r->cfg,
                                        s);
    case V_PLAIN_CFG: /* the same configuration without hooks (plain kernel: TMA-store epilogue) */
      return loom_bench_gemm_sm90(&r->d, r->ag ? r->a_full : r->a, r->b, r->ag ? r->c : r->partial, NULL, &r->cfg, s);
    default: {
      loom_plan_t p = r->plans[x->v - V_FUSED0];
      (void)es;
      if (r->ag) return loom_ag_gemm(p, r->a, r->b, r->c, NULL, NULL, s);
      return loom_gemm_rs(p, r->a, r->b, r->c_shard, NULL, s);
    }
  }
}

static float bf16_value(uint16_t h) {
  const uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The short name of a fused row's path (its impl column: loom-<name>). */
static const char *fused_name(loom_tp_transfer_t t, int tuned) {
  if (t == LOOM_TP_AUTO) return tuned ? "tuned" : "auto";
  for (size_t j = 0; j < sizeof path_names / sizeof path_names[0]; ++j)
    if (path_names[j].t == t) return path_names[j].name;
  return "?";
}

static double bf16_rms(const uint16_t *y, size_t n) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += (double)bf16_value(y[i]) * bf16_value(y[i]);
  return n ? sqrt(ss / (double)n) : 0.0;
}

/* How far a fused output x may lie from the sequential one y by rounding
 * alone, at an element of value y: (|y| + rms(y)) / 64, as for any two
 * bf16 results of the same sum, and for GEMM + ReduceScatter (parts = W
 * partials; 0 for AllGather + GEMM) at least what the sequential path's
 * rounding of each partial to bf16 before the sum costs: half an ulp of
 * each partial, parts x 2^-9 x P, P the power of two above the largest
 * partial; a partial is about rms(y) / sqrt(parts) and reaches 6 times that
 * in the tails of tens of millions of elements (a 4-sigma partial of 80 at
 * rms 28.7 has an ulp of 0.5: two of them cost 0.5 where rms / 64 allowed
 * 0.45, measured at Falcon-180B o TP 4 m = 8192, W = 2); the bound is
 * doubled for the fused output's own rounding. A lost, doubled or stale
 * partial is off by a partial's magnitude on a whole tile: tens of times
 * more, on thousands of elements. */
static double far_tol(double y, double rms, int parts) {
  double bound = rms / 64;
  if (parts > 0) {
    const double p = pow(2.0, ceil(log2(6.0 * rms / sqrt((double)parts) + 1e-30)));
    const double rounding = 2.0 * parts * p / 512.0;
    if (rounding > bound) bound = rounding;
  }
  return fabs(y) / 64 + bound;
}

static int64_t count_far(const uint16_t *x, const uint16_t *y, size_t n, int parts) {
  const double rms = bf16_rms(y, n);
  int64_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float fx = bf16_value(x[i]), fy = bf16_value(y[i]);
    if (!(fabs((double)fx - fy) <= far_tol(fy, rms, parts))) ++bad;
  }
  return bad;
}

/* The first few elements count_far counts, on stderr (where: row and
 * column of the rank's output, `cols` wide; what: the path's name). */
static void report_far(const uint16_t *x, const uint16_t *y, size_t n, size_t cols, int parts, int rank,
                       const char *what) {
  const double rms = bf16_rms(y, n);
  int shown = 0;
  for (size_t i = 0; i < n && shown < 4; ++i) {
    const float fx = bf16_value(x[i]), fy = bf16_value(y[i]);
    if (fabs((double)fx - fy) <= far_tol(fy, rms, parts)) continue;
    fprintf(stderr, "rank %d: %s: element %zu (row %zu, col %zu of the output) is %g (bits 0x%04x), sequential %g; rms %g\n",
            rank, what, i, i / cols, i % cols, (double)fx, (unsigned)x[i], (double)fy, rms);
    ++shown;
  }
}

#define TP_MAX_SHAPES 4096 /* more than any selection (support/tp_cases.c) */

/* The selection's cases for a run of `world` ranks into a new array (free
 * it), their count in *n; NULL if the selection fails. */
static loom_tp_case_t *tp_list(const tp_args_t *a, int world, int *n) {
  loom_tp_case_sel_t sel = a->sel;
  sel.ag = a->ag, sel.world = world, sel.quick = a->o.quick;
  loom_tp_case_t *c = (loom_tp_case_t *)malloc(sizeof *c * TP_MAX_SHAPES);
  *n = c ? loom_tp_cases(&sel, c, TP_MAX_SHAPES) : -1;
  if (*n < 0 || *n > TP_MAX_SHAPES) {
    free(c);
    return NULL;
  }
  return c;
}

/* The complete shape of a row, as tp_torch.py names its rows'. */
static void tp_pair_shape(int ag, const char *model, int64_t m, int64_t n, int64_t k, int W, loom_bench_shape_t *s) {
  loom_bench_shape_init(s);
  loom_bench_shape_str(s, "op", ag ? "ag_gemm" : "gemm_rs");
  loom_bench_shape_str(s, "model", model);
  loom_bench_shape_int(s, "m", m);
  loom_bench_shape_int(s, "n", n);
  loom_bench_shape_int(s, "k", k);
  loom_bench_shape_int(s, "world", W);
  loom_bench_shape_str(s, "dtype", "bf16");
}

static int tp_shape(tp_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s, loom_bench_table_t *t,
                    const loom_tp_case_t *cs) {
  const int W = ctx->size;
  tp_run_t r;
  memset(&r, 0, sizeof r);
  r.nccl = ctx->nccl, r.ag = a->ag, r.W = W;
  const int T = cs->tp;
  const int64_t m = cs->m, n = cs->n, k = cs->k;
  r.d = (loom_gemm_desc_t)LOOM_GEMM_DESC(m, n, k, LOOM_BF16, LOOM_BF16, LOOM_B_NK, 0);
  r.S = tp_shard_rows(m, W);
  int failures = 0, nf = 0;
  loom_tp_transfer_t fused_tr[MAX_FUSED];
  loom_tp_transfer_t all_tr[MAX_FUSED];
  int na = 0;
  if (a->ag) all_tr[na++] = LOOM_TP_COPY_ENGINE;
  all_tr[na++] = LOOM_TP_SM_COPY;
  if (!a->ag) all_tr[na++] = LOOM_TP_SM_ATOMIC;
  if (!a->ag && bulk_runs(m, W)) all_tr[na++] = LOOM_TP_BULK_REDUCE;
  all_tr[na++] = LOOM_TP_DECOMPOSED; /* the library's own medium-grained path */
  all_tr[na++] = LOOM_TP_AUTO; /* the plan's own choice: tuned with --tune, else the heuristic */
  for (int f = 0; f < na; ++f) /* --paths: the ones asked for, in this order */
    if (!a->paths || (a->paths >> all_tr[f] & 1u)) fused_tr[nf++] = all_tr[f];
  if (!nf) fused_tr[nf++] = LOOM_TP_AUTO; /* none of the asked ones applies here (bk below its size) */
  loom_tp_plan_info_t info[MAX_FUSED];
  loom_result_t rr = LOOM_SUCCESS;
  cudaError_t e = cudaSuccess;
  const size_t Wrows = (size_t)W * (size_t)r.S;
  if (a->ag) {
    e = cudaMalloc(&r.a, (size_t)r.S * (size_t)k * 2);
    if (e == cudaSuccess) e = cudaMalloc(&r.a_full, Wrows * (size_t)k * 2);
    if (e == cudaSuccess) e = cudaMalloc(&r.c, (size_t)m * (size_t)n * 2);
  } else {
    e = cudaMalloc(&r.a, (size_t)m * (size_t)k * 2);
    if (e == cudaSuccess) e = cudaMalloc(&r.partial, Wrows * (size_t)n * 2);
    if (e == cudaSuccess) e = cudaMalloc(&r.c_shard, (size_t)r.S * (size_t)n * 2);
  }
  if (e == cudaSuccess) e = cudaMalloc(&r.b, (size_t)n * (size_t)k * 2);
  if (e != cudaSuccess) rr = loom_bench_cuda_fail((int)e, "cudaMalloc (bench inputs)", __FILE__, __LINE__);
  if (rr == LOOM_SUCCESS)
    rr = loom_bench_fill_random(r.a, LOOM_BF16, a->ag ? (size_t)r.S * (size_t)k : (size_t)m * (size_t)k,
                                TP_SEED + (uint64_t)ctx->rank, 1.0);
  if (rr == LOOM_SUCCESS) rr = loom_bench_fill_random(r.b, LOOM_BF16, (size_t)n * (size_t)k, TP_SEED + 100 + (uint64_t)ctx->rank, 1.0);
  /* plans are collective: every rank makes every plan whatever happened */
  for (int f = 0; f < nf; ++f) {
    loom_tp_desc_t desc = LOOM_TP_DESC_INIT;
    desc.m = m, desc.n = n, desc.k = k, desc.b_layout = LOOM_B_NK, desc.world_size = W;
    desc.transfer = fused_tr[f];
    if (fused_tr[f] != LOOM_TP_AUTO) desc.comm_blocks = a->blocks, desc.chunk_rows = a->chunk;
    if (fused_tr[f] == LOOM_TP_AUTO && a->tune) {
      loom_result_t tr = a->ag ? loom_ag_gemm_tune(comm, &desc, s) : loom_gemm_rs_tune(comm, &desc, s);
      if (rr == LOOM_SUCCESS) rr = tr;
    }
    loom_result_t pr = a->ag ? loom_plan_ag_gemm(comm, &desc, &r.plans[f]) : loom_plan_gemm_rs(comm, &desc, &r.plans[f]);
    info[f] = (loom_tp_plan_info_t)LOOM_TP_PLAN_INFO_INIT;
    if (pr == LOOM_SUCCESS) pr = loom_tp_plan_info(r.plans[f], &info[f]);
    if (rr == LOOM_SUCCESS) rr = pr;
  }
  r.rank = ctx->rank;
  const int medium = W <= 63 && (int64_t)W * r.S == m;
  if (rr == LOOM_SUCCESS && cudaStreamCreateWithFlags(&r.cs, cudaStreamNonBlocking) != cudaSuccess)
    rr = loom_bench_fail(LOOM_ERR_CUDA, "cudaStreamCreate (medium-grained)");
  for (int i = 0; i < 65 && rr == LOOM_SUCCESS; ++i)
    if (cudaEventCreateWithFlags(&r.ev[i], cudaEventDisableTiming) != cudaSuccess)
      rr = loom_bench_fail(LOOM_ERR_CUDA, "cudaEventCreate (medium-grained)");
  if (rr == LOOM_SUCCESS && medium) {
    loom_gemm_desc_t dc = r.d;
    dc.m = r.S;
    float ms = 0;
    rr = loom_bench_base_gemm_tune(&dc, a->ag ? r.a : r.a, r.b, a->ag ? r.c : r.partial, NULL, a->o.quick ? 4 : 8, s, &ms);
  }
  /* the first fused plan's GEMM configuration, as its calls launch it
   * (tile, grid, group, clusters: the plan's state, not only plan info) */
  r.cluster = 0;
  if (!(r.plans[0] && info[0].gemm_bn > 0 &&
        loom_bench_tp_gemm_config(r.plans[0], &r.cfg, &r.cluster) == LOOM_SUCCESS))
    r.cfg = loom_bench_gemm_config_tile(128, 128), r.cluster = 0;
  if (rr == LOOM_SUCCESS) {
    float ms = 0;
    rr = loom_bench_base_gemm_tune(&r.d, a->ag ? r.a_full : r.a, r.b, a->ag ? r.c : r.partial, NULL, a->o.quick ? 4 : 8, s,
                                   &ms);
  }
  int64_t failed = rr != LOOM_SUCCESS;
  if (failed) fprintf(stderr, "rank %d: %s m=%lld: %s\n", ctx->rank, cs->model, (long long)m, loom_last_error());
  if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
  const int nv = V_FUSED0 + nf;
  loom_bench_time_t tm[V_FUSED0 + MAX_FUSED];
  tp_var_t vars[V_FUSED0 + MAX_FUSED];
  loom_bench_op_fn ops[V_FUSED0 + MAX_FUSED];
  void *args[V_FUSED0 + MAX_FUSED];
  int64_t wrong[MAX_FUSED];
  for (int f = 0; f < MAX_FUSED; ++f) wrong[f] = -1;
  if (!failed) {
    for (int v = 0; v < nv; ++v) vars[v].r = &r, vars[v].v = v, ops[v] = tp_op, args[v] = &vars[v];
    rr = loom_bench_time_ranks_side_by_side(ctx->nccl, s, a->o.warmup, a->o.reps, nv, ops, args, tm);
    /* check: each fused output against the sequential one */
    if (rr == LOOM_SUCCESS && a->o.check) {
      const size_t out_n = a->ag ? (size_t)m * (size_t)n : (size_t)tp_shard_len(m, W, ctx->rank) * (size_t)n;
      uint16_t *ref = (uint16_t *)malloc(out_n * 2 + 2), *got = (uint16_t *)malloc(out_n * 2 + 2);
      void *out = a->ag ? r.c : r.c_shard;
      tp_var_t seqv = {&r, V_SEQ};
      rr = tp_op(&seqv, 0, s);
      if (rr == LOOM_SUCCESS && cudaMemcpyAsync(ref, out, out_n * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        rr = loom_bench_fail(LOOM_ERR_CUDA, "check copy");
      for (int f = 0; f < nf && rr == LOOM_SUCCESS; ++f) {
        if (cudaMemsetAsync(out, 0xff, out_n * 2, s) != cudaSuccess) rr = loom_bench_fail(LOOM_ERR_CUDA, "poison");
        tp_var_t fv = {&r, V_FUSED0 + f};
        if (rr == LOOM_SUCCESS) rr = tp_op(&fv, 0, s);
        if (rr == LOOM_SUCCESS && cudaMemcpyAsync(got, out, out_n * 2, cudaMemcpyDeviceToHost, s) != cudaSuccess)
          rr = loom_bench_fail(LOOM_ERR_CUDA, "check copy");
        if (rr == LOOM_SUCCESS && cudaStreamSynchronize(s) != cudaSuccess) rr = loom_bench_fail(LOOM_ERR_CUDA, "sync");
        if (rr == LOOM_SUCCESS) rr = loom_comm_get_async_error(comm);
        /* bf16 outputs of the same sum; RS: the sequential partials rounded first (far_tol) */
        const int parts = a->ag ? 0 : W;
        if (rr == LOOM_SUCCESS) wrong[f] = count_far(got, ref, out_n, parts);
        if (rr == LOOM_SUCCESS && wrong[f] > 0)
          report_far(got, ref, out_n, (size_t)n, parts, ctx->rank, fused_name(fused_tr[f], a->tune));
      }
      free(ref), free(got);
    }
    failed = rr != LOOM_SUCCESS;
    if (failed) fprintf(stderr, "rank %d: %s m=%lld: %s\n", ctx->rank, cs->model, (long long)m, loom_last_error());
    if (loom_bench_sum_ranks(ctx->nccl, s, &failed) != LOOM_SUCCESS) failed = 1;
    for (int f = 0; f < nf && !failed; ++f)
      if (loom_bench_sum_ranks(ctx->nccl, s, &wrong[f]) != LOOM_SUCCESS) failed = 1;
  }
  if (ctx->rank == 0) {
    for (int f = 0; f < nf; ++f) {
      loom_bench_row_t *row = loom_bench_add(t);
      if (!row) break;
      snprintf(row->op, sizeof row->op, "%s", a->ag ? "ag_gemm" : "gemm_rs");
      snprintf(row->impl, sizeof row->impl, "loom-%s", fused_name(fused_tr[f], a->tune));
      snprintf(row->shape, sizeof row->shape, "%s tp%d m=%lld%s", cs->model, T, (long long)m,
               cs->held_out == 1 ? " H" : cs->held_out == 0 ? " F" : "");
      snprintf(row->dtype, sizeof row->dtype, "bf16");
      row->m = m, row->n = n, row->k = k, row->world = W;
      row->bytes = (int64_t)(a->ag ? (size_t)m * (size_t)k * 2 : (size_t)m * (size_t)n * 2);
      row->flops = 2.0 * (double)m * (double)n * (double)k;
      row->busbw_factor = (double)(W - 1) / W;
      if (failed) {
        snprintf(row->note, sizeof row->note, "error (see stderr)");
        failures++;
        continue;
      }
      const double t_us = tm[V_FUSED0 + f].median_us;
      if (fused_tr[f] == LOOM_TP_AUTO) { /* what ran, from the plan: no fused time where it was sequential */
        row->auto_us = t_us;
        loom_bench_row_auto(row, loom_bench_tp_path(info[f].transfer));
      } else {
        row->fused_us = t_us;
      }
      row->min_us = tm[V_FUSED0 + f].min_us, row->max_us = tm[V_FUSED0 + f].max_us;
      row->host_us = tm[V_FUSED0 + f].host_us;
      row->gemm_us = fmin(tm[V_GEMM_LT].median_us, tm[V_GEMM_LOOM].median_us);
      row->comm_us = tm[V_NCCL].median_us;
      row->seq_us = tm[V_SEQ].median_us;
      row->wrong = wrong[f];
      loom_bench_shape_t ps;
      tp_pair_shape(a->ag, cs->model, m, n, k, W, &ps);
      (void)loom_bench_row_pair(row, a->peer_json, "async_tp", &ps, 0);
      if (row->wrong > 0) failures++;
      snprintf(row->note, sizeof row->note,
               "medium %.1f lt %.1f loom %.1f hook-idle %.1f same-cfg %.1f; S=%lld ch %d blk %d %dx%d g%d cl%d; "
               "held %.1f MiB",
               tm[V_MEDIUM].median_us, tm[V_GEMM_LT].median_us, tm[V_GEMM_LOOM].median_us, tm[V_HOOK_IDLE].median_us,
               tm[V_PLAIN_CFG].median_us, (long long)info[f].shard_rows,
               info[f].chunk_rows, info[f].comm_blocks, info[f].gemm_bm, info[f].gemm_bn, info[f].gemm_grid,
               info[f].gemm_bn > 0 ? (r.cluster == 2 ? 2 : 1) : 0,
               (double)(info[f].symmetric_bytes + info[f].device_bytes + info[f].workspace_bytes) / (1 << 20));
      loom_bench_row_finish(row);
      printf("# %s %-8s %-22s loom %9.1f  seq %9.1f  medium %9.1f  gemm %9.1f  nccl %8.1f us  overlap %6.2f  "
             "speedup %5.2f  host: loom %.1f seq %.1f us\n",
             row->op, row->impl, row->shape, t_us, row->seq_us, tm[V_MEDIUM].median_us, row->gemm_us,
             row->comm_us, row->overlap, row->seq_us / t_us, row->host_us, tm[V_SEQ].host_us);
      fflush(stdout);
    }
  }
  for (int f = 0; f < nf; ++f)
    if (r.plans[f]) (void)loom_plan_destroy(r.plans[f]);
  cudaFree(r.a), cudaFree(r.a_full), cudaFree(r.b), cudaFree(r.c), cudaFree(r.c_shard), cudaFree(r.partial);
  for (int i = 0; i < 65; ++i)
    if (r.ev[i]) cudaEventDestroy(r.ev[i]);
  if (r.cs) cudaStreamDestroy(r.cs);
  loom_bench_base_gemm_release();
  return failures;
}

static int tp_rank(loom_rank_ctx_t *ctx, void *arg) {
  tp_args_t *a = (tp_args_t *)arg;
  cudaStream_t s = NULL;
  loom_comm_t comm = NULL;
  if (loom_bench_rank_open(ctx, &s, &comm)) return 1;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  int failures = 0;
  int ns = 0;
  loom_tp_case_t *cases = tp_list(a, ctx->size, &ns);
  if (!cases) {
    fprintf(stderr, "rank %d: the shape selection failed\n", ctx->rank);
    failures++;
  }
  for (int i = 0; cases && i < ns; ++i) failures += tp_shape(a, ctx, comm, s, &t, &cases[i]);
  free(cases);
  if (ctx->rank == 0) {
    loom_bench_note(&t, "B as a Linear weight [n, k], bf16; gemm = min(cuBLASLt best-of-candidates, loom_gemm) on the "
                        "local shape; seq = NCCL + cuBLASLt; time = median of the slowest rank");
    loom_bench_note(&t, "overlap = 1 - ECT(fused)/ECT(seq), ECT = time - gemm; #wrong: fused vs sequential output");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us): PyTorch async-TP of the row's exact shape, or none (the note says why; "
                          "bench/peers/tp_torch.py, this job): %.60s", a->peer_json);
    else
      loom_bench_note(&t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch async-TP: no rows");
    char title[160];
    snprintf(title, sizeof title, "loom-bench %s: fused vs sequential NCCL + cuBLASLt, world %d, median of %d reps",
             a->ag ? "ag_gemm" : "gemm_rs", ctx->size, a->o.reps);
    failures = loom_bench_finish(a->ag ? "ag_gemm" : "gemm_rs", &t, &a->o, ctx->size, title, failures);
  }
  loom_bench_table_free(&t);
  loom_bench_rank_close(s, comm);
  return failures ? 1 : 0;
}

/* Runs tp_torch.py on this run's exact shapes (from the parent, before the ranks). */
static void tp_peer(tp_args_t *a, int world) {
  if (!a->peer || world < 2) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch async-TP not run (%s)", a->peer ? "one rank" : "--peer none");
    return;
  }
  int ns = 0;
  loom_tp_case_t *cases = tp_list(a, world, &ns);
  if (!cases) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch async-TP not run: the shape selection failed");
    return;
  }
  char args[2048];
  snprintf(args, sizeof args, "--op %s --world %d --reps %d --warmup %d --shapes ", a->ag ? "ag_gemm" : "gemm_rs",
           world, a->o.reps, a->o.warmup);
  int bad = 0;
  for (int i = 0; i < ns; ++i)
    bad |= loom_bench_appendf(args, sizeof args, "%s%s:%lld:%lld:%lld", i ? "," : "", cases[i].model,
                              (long long)cases[i].m, (long long)cases[i].n, (long long)cases[i].k);
  free(cases);
  if (bad) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch async-TP not run: its shape list is too long");
    return;
  }
  (void)loom_bench_run_peer("tp_torch.py", args, a->ag ? "ag_gemm_torch" : "gemm_rs_torch", a->peer_json,
                            sizeof a->peer_json, a->peer_note, sizeof a->peer_note);
}

static int tp_main(int ag, int argc, char **argv) {
  tp_args_t a;
  memset(&a, 0, sizeof a);
  a.ag = ag;
  a.sel.model = -1;
  a.peer = 1;
  int rc = loom_bench_parse(&a.o, argc, argv, tp_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  int world = loom_bench_world(&a.o, 0);
  if (world == 0) return 1;
  tp_peer(&a, world);
  return loom_bench_launch(&a.o, world, tp_rank, &a) ? 1 : 0;
}

LOOM_BENCH(ag_gemm, "AllGather + GEMM (Flux): fused vs NCCL + cuBLASLt, GPT-3 175B and Llama-3-70B shapes") {
  return tp_main(1, argc, argv);
}

LOOM_BENCH(gemm_rs, "GEMM + ReduceScatter (Flux): fused vs cuBLASLt + NCCL, GPT-3 175B and Llama-3-70B shapes") {
  return tp_main(0, argc, argv);
}
