/*
 * bench_lang.c - loom-bench lang: loom programs' generated code against
 * loom's hand-written op for the same computation (support/lang_cases.h:
 * AllReduce + bias + dropout + residual + RMSNorm, Adam, LAMB, GEMM + bias,
 * and the CoCoNet paper's Figure 11: the model-parallel layer
 * Dropout(AllReduce(MatMul(in, w)) + b, 0.1) + r under four schedules),
 * side by side in one run on every rank (each repetition runs every
 * generated row's plan, then each variant of the hand-written op; the time
 * of a repetition is that of the slowest rank), and what compiling each
 * program costs. One row per generated schedule of a case (its Schedule
 * section, or a prefix of it: lang_case_rows), then, for loom_gemm_ar, one
 * per transfer of the hand-written op:
 *   generated:<row>  fused(us): the generated code: the row's scheduled
 *               program (lang_case_schedule) compiled as written by
 *               loom_prog_compile, one loom_prog_run per repetition
 *   hand(us)    the hand-written op on the same sizes and inputs
 *               (loom_allreduce with its epilogue and norm, loom_adam_step,
 *               loom_lamb_step, loom_gemm with its bias, loom_gemm_ar with
 *               the transfer AUTO); hand/gen > 1: generated faster
 *   cold(ms)    loom_prog_compile's kernels with no cache: the memory cache
 *               emptied, an empty disk cache folder of the rank's own
 *               (LOOM_CACHE_DIR), so NVRTC compiles every kernel
 *   disk(ms)    the same, the memory cache emptied again: from the disk
 *   warm(ms)    the same again: from the memory cache (this plan is timed)
 *   hand:auto:<path>, hand:sequential, hand:fused  (mp_layer cases)
 *               loom_gemm_ar with the transfer AUTO (auto(us) too; the row
 *               names what it resolved to), SEQUENTIAL and SM_COPY: their
 *               times in hand(us), no fused(us), no ratio
 * The compile columns are loom_prog_plan_info's compile_ms (the kernels'
 * time); the note gives each whole loom_prog_compile (plan, arena, peers)
 * and a cache that missed. A row whose kernels are all GEMMs has none.
 * A scheduled program compiled as written takes a tuning cache entry only
 * where one was recorded for that very scheduled graph (its hash): the
 * suite tunes nothing.
 * Inputs: drawn as the interpreter draws them (support/prog_io.h), once per
 * case: every row of the case runs on the same buffers (their plans must
 * describe the same pieces: refused by name otherwise); the hand-written
 * op reads them (or copies of them). All run back to back, so L2 treats
 * them alike; at the default sizes the working set is several times L2.
 * Checks (a mismatch makes the suite exit 1): ar_norm, gemm_bias and the
 * mp_layer cases compare every generated row's output with the
 * hand-written op's on the same inputs (the mp_layer cases: loom_gemm_ar
 * SEQUENTIAL's, which the hand:auto and hand:fused rows are checked against
 * too; its epilogue draws the program's Dropout mask: loom_epilogue_t's
 * Philox mask of the program's seed, offset 0 and the element's index in
 * the whole [B S, H] output (docs/language.md: a program's Dropout is that
 * mask), p and seed read from the program: lang_prog_dropout); adam
 * and lamb with the CPU interpreter at the timed sizes where it can, else
 * at the case's check_bind (lang_case_check_bind); the bound is
 * prog_io_bound's (relative to max(1, |ref|)).
 * peer(us): PyTorch's code for the same computation on the same sizes and
 * world (bench/peers/lang_torch.py, run first, its rows paired by the
 * complete shape: op, sizes, dtype, world; every row of a case pairs with
 * its one peer row); peer/now: the peer's time over the row's (generated
 * rows: over fused(us)); --peer none skips it.
 * --list prints the cases, each row's schedule and what each checks,
 * without a GPU (each row's program parsed, checked and scheduled on the
 * host).
 * A loom_gemm_ar case (mp_layer*) at a world that does not divide H is left
 * out, with a note in the table saying so (loom_gemm_ar takes k = H / W).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "ref/ref.h"
#include "support/lang_cases.h"
#include "support/prog_io.h"
#include "testing/bench_api.h"

#define LANG_SEED 0x6c616e67ull

typedef struct lang_args {
  loom_bench_opts_t o;
  const lang_case_t *only; /* --case NAME; NULL: every case */
  const char *bind;        /* --bind S=N,...: that case's sizes instead of its own (with --case) */
  int list;
  int peer;              /* 0 with --peer none */
  char peer_json[1200];  /* PyTorch's results (bench/peers/lang_torch.py; "" if not run) */
  char peer_note[200];   /* why there is no peer column */
} lang_args_t;

enum { COL_HAND, COL_RATIO, COL_COLD, COL_DISK, COL_WARM, NCOLS };

/* loom_gemm_ar's variants (the mp_layer cases' hand-written rows): AUTO (the generated rows' hand(us)), then
 * SEQUENTIAL (the reference the checks compare with), then SM_COPY. */
enum { HAND_AUTO, HAND_SEQ, HAND_FUSED, HAND_GEMM_AR_N };
static const loom_tp_transfer_t k_ar_transfer[HAND_GEMM_AR_N] = {LOOM_TP_AUTO, LOOM_TP_SEQUENTIAL, LOOM_TP_SM_COPY};
static const char *const k_ar_impl[HAND_GEMM_AR_N] = {"hand:auto", "hand:sequential", "hand:fused"};

/* The variants of case c's hand-written op that run (and, more than one, have rows of their own). */
static int hand_variants(const lang_case_t *c) { return c->kind == LANG_HAND_GEMM_AR ? HAND_GEMM_AR_N : 1; }
/* The variant the generated outputs are checked against. */
static int hand_reference(const lang_case_t *c) { return c->kind == LANG_HAND_GEMM_AR ? HAND_SEQ : 0; }

/* The cases' names, comma-separated, to f. */
static void print_case_names(FILE *f) {
  for (int i = 0; i < lang_case_count(); ++i) fprintf(f, "%s%s", i ? ", " : "", lang_case(i)->name);
}

static int lang_opt(void *ctx, int argc, char **argv, int *i) {
  lang_args_t *a = (lang_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --case NAME          one case only (");
    print_case_names(stdout);
    printf(")\n"
           "  --bind S=N,...       with --case: these sizes instead of the case's (e.g. adam's N=134217728)\n"
           "  --list               print the cases, their rows, sizes and checks, then exit (no GPU needed)\n"
           "  --peer none          skip PyTorch's code for the cases (bench/peers/lang_torch.py, run by default\n"
           "                       on this run's exact sizes and world)\n");
    return 1;
  }
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--list")) return a->list = 1, 1;
  if (!strcmp(s, "--bind")) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL; /* the sizes themselves are checked where they bind */
    if (!v || !strchr(v, '=')) {
      fprintf(stderr, "loom-bench: --bind needs sizes as S=N,... (e.g. N=134217728), got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    a->bind = v, *i += 1;
    return 1;
  }
  if (!strcmp(s, "--case")) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v || !(a->only = lang_case_find(v))) {
      fprintf(stderr, "loom-bench: --case needs one of ");
      print_case_names(stderr);
      fprintf(stderr, ", got \"%s\"\n", v ? v : "(nothing)");
      return -1;
    }
    *i += 1;
    return 1;
  }
  return 0;
}

static const char *case_bind(const lang_args_t *a, const lang_case_t *c) {
  if (a->bind) return a->bind;
  return a->o.quick ? c->quick_bind : c->bind;
}

/* Case c's program parsed and checked (*p): 0, or 1 after printing why. */
static int case_parse(const lang_case_t *c, loom_prog_t *p) {
  *p = NULL;
  if (loom_prog_parse(c->text, c->name, p) == LOOM_SUCCESS && loom_prog_check(*p) == LOOM_SUCCESS) return 0;
  fprintf(stderr, "loom-bench lang: case %s: %s\n", c->name, loom_last_error());
  loom_prog_destroy(*p);
  *p = NULL;
  return 1;
}

/* Row j of case c: its program p scheduled (*q, checked): 0, or 1 after printing why. */
static int row_program(const lang_case_t *c, int j, loom_prog_t p, loom_prog_t *q) {
  if (lang_case_schedule(c, j, p, q) == LOOM_SUCCESS) return 0;
  fprintf(stderr, "loom-bench lang: case %s, row %s: %s\n", c->name, lang_case_row_label(c, j), loom_last_error());
  return 1;
}

/* --list: case c's rows (each row's program scheduled on the host); returns 1 where one failed. */
static int list_case(const lang_args_t *a, const lang_case_t *c) {
  loom_prog_t p = NULL;
  int bad = case_parse(c, &p);
  char prog[80], check[64], sched[48], impl[48];
  if (c->example[0])
    snprintf(prog, sizeof prog, "examples/lang/%s.loom%s%s", c->example, c->as_dtype[0] ? " as " : "", c->as_dtype);
  else snprintf(prog, sizeof prog, "the suite's");
  if (c->check_hand) snprintf(check, sizeof check, "outputs vs the hand-written op's");
  else snprintf(check, sizeof check, "interpreter at %s", lang_case_check_bind(c, case_bind(a, c)));
  for (int j = 0; j < lang_case_rows(c); ++j) {
    loom_prog_t q = NULL;
    if (p) bad |= row_program(c, j, p, &q);
    loom_prog_destroy(q);
    lang_case_row_schedule(c, j, sched, sizeof sched);
    snprintf(impl, sizeof impl, "generated:%s", lang_case_row_label(c, j));
    printf("%-13s %-23s %-9s %-20s %-41s %-34s %s\n", c->name, impl, sched, case_bind(a, c), prog, check, c->hand);
  }
  for (int v = 0; hand_variants(c) > 1 && v < hand_variants(c); ++v)
    printf("%-13s %-23s %-9s %-20s %-41s %-34s %s\n", c->name, k_ar_impl[v], "-", case_bind(a, c), "-",
           v == hand_reference(c) ? "the reference of the checks" : "outputs vs hand:sequential's", c->hand);
  loom_prog_destroy(p);
  return bad;
}

/* --list: every case of the selection, its programs checked on the host. */
static int lang_list(const lang_args_t *a) {
  int bad = 0;
  printf("loom-bench lang: generated code against the hand-written op, world %d%s\n", a->o.world ? a->o.world : 1,
         a->o.quick ? " (--quick sizes)" : "");
  printf("%-13s %-23s %-9s %-20s %-41s %-34s %s\n", "case", "row", "schedule", "sizes", "program", "check",
         "hand-written op");
  for (int i = 0; i < lang_case_count(); ++i)
    if (!a->only || a->only == lang_case(i)) bad |= list_case(a, lang_case(i));
  return bad;
}

/* ---- one case on this rank ------------------------------------------------------------------- */

typedef struct lang_run {
  const lang_case_t *c;
  const char *bind;
  loom_comm_t comm;
  ncclComm_t nccl;
  int rank, W;
  int rows, hands;                   /* generated rows (lang_case_rows), hand-written variants */
  loom_prog_t p, q[LANG_ROWS_MAX];   /* the program as written; each row's, scheduled */
  loom_plan_t gen[LANG_ROWS_MAX];    /* each row's generated code (its warm compile) */
  prog_io_t io;                      /* the inputs and outputs every row runs on (the hand-written op reads them) */
  double ms[LANG_ROWS_MAX][3], wall[LANG_ROWS_MAX][3]; /* cold, disk, warm: the kernels' time, the whole compile's */
  int kernels[LANG_ROWS_MAX], missed[LANG_ROWS_MAX][3]; /* kernels; those NVRTC compiled where a cache should have served */
  /* the hand-written op */
  loom_plan_t hplan[HAND_GEMM_AR_N]; /* [0]: allreduce, adam or lamb; gemm_ar: one per variant */
  loom_tp_transfer_t hpath;          /* what gemm_ar's AUTO plan resolved to */
  loom_gemm_desc_t gd;
  loom_epilogue_t epi;
  void *hin, *hgrads;        /* loom_malloc copies: the all-reduce's input; the optimizer's params, grads */
  void *hout;                /* ar_norm, gemm_bias's output; gemm_ar SEQUENTIAL's */
  void *hsym;                /* gemm_ar AUTO and SM_COPY's output (loom_malloc) */
} lang_run_t;

/* One operation of the race: generated row j (j < rows), else the hand-written op's variant j - rows. */
typedef struct lang_op {
  lang_run_t *x;
  int j;
} lang_op_t;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* The index of input `name` of the generated plans, -1 where there is none. */
static int io_find(const lang_run_t *x, const char *name) {
  for (int i = 0; i < x->io.ni; ++i)
    if (!strcmp(x->io.in[i].name, name)) return i;
  return -1;
}

/* Input `name` of the generated plans (device memory), NULL where there is none. */
static void *io_input(const lang_run_t *x, const char *name) {
  const int i = io_find(x, name);
  return i < 0 ? NULL : x->io.din[i];
}

/* Removes the files of folder dir, then dir. */
static void remove_dir(const char *dir) {
  DIR *d = opendir(dir);
  char path[1200];
  for (struct dirent *e; d && (e = readdir(d));) {
    if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    (void)unlink(path);
  }
  if (d) closedir(d);
  (void)rmdir(dir);
}

/* One compile of row j's generated code (mode 0 cold, 1 disk, 2 warm), its times; the plan in *plan. */
static loom_result_t compile_once(lang_run_t *x, int j, int mode, loom_plan_t *plan) {
  if (mode < 2) loom_bench_rtc_cache_clear();
  const double t0 = now_ms();
  LOOM_BENCH_TRY(loom_prog_compile(x->comm, x->q[j], "unscheduled", x->bind, plan));
  x->wall[j][mode] = now_ms() - t0;
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  LOOM_BENCH_TRY(loom_prog_plan_info(*plan, &info));
  x->kernels[j] = info.kernels;
  x->ms[j][mode] = info.kernels ? info.compile_ms : NAN;
  x->missed[j][mode] = mode ? info.compiled : info.kernels - info.compiled;
  return LOOM_SUCCESS;
}

/* Row j's generated code compiled cold, from the disk cache, then warm (that plan kept in x->gen[j]), with
 * this rank's own disk cache folder; LOOM_CACHE_DIR as it was afterwards. */
static loom_result_t compile_three(lang_run_t *x, int j) {
  const char *was = getenv("LOOM_CACHE_DIR");
  char *old = was ? strdup(was) : NULL, dir[] = "/tmp/loom-bench-lang-XXXXXX";
  if (!mkdtemp(dir)) {
    free(old);
    return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "bench lang: mkdtemp %s failed", dir);
  }
  setenv("LOOM_CACHE_DIR", dir, 1);
  loom_result_t r = LOOM_SUCCESS;
  for (int mode = 0; mode < 3 && r == LOOM_SUCCESS; ++mode) {
    loom_plan_t plan = NULL;
    r = compile_once(x, j, mode, &plan);
    if (mode < 2 && plan) (void)loom_plan_destroy(plan);
    else x->gen[j] = plan;
  }
  if (old) setenv("LOOM_CACHE_DIR", old, 1);
  else unsetenv("LOOM_CACHE_DIR");
  free(old);
  remove_dir(dir);
  return r;
}

/* Row j's plan describes the same inputs and outputs as x->io (row 0's): the rows share those buffers. */
static loom_result_t same_io(const lang_run_t *x, int j) {
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  LOOM_BENCH_TRY(loom_prog_plan_info(x->gen[j], &info));
  if (info.ninputs != x->io.ni || info.noutputs != x->io.no)
    return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "bench lang %s: row %s has %d inputs, %d outputs; row %s %d, %d",
                           x->c->name, lang_case_row_label(x->c, j), info.ninputs, info.noutputs,
                           lang_case_row_label(x->c, 0), x->io.ni, x->io.no);
  for (int i = 0; i < x->io.ni + x->io.no; ++i) {
    const int out = i >= x->io.ni, k = out ? i - x->io.ni : i;
    loom_prog_io_t io = LOOM_PROG_IO_INIT;
    LOOM_BENCH_TRY(loom_prog_plan_io(x->gen[j], out, k, &io));
    const loom_prog_io_t *want = out ? &x->io.out[k] : &x->io.in[k];
    if (memcmp(&io, want, sizeof io))
      return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "bench lang %s: row %s's %s `%s` is not row %s's piece",
                             x->c->name, lang_case_row_label(x->c, j), out ? "output" : "input", io.name,
                             lang_case_row_label(x->c, 0));
  }
  return LOOM_SUCCESS;
}

/* A loom_malloc copy of input `name` of the generated plan (bytes). */
static loom_result_t copy_input(lang_run_t *x, const char *name, size_t bytes, void **out) {
  const void *src = io_input(x, name);
  if (!src) return loom_bench_fail(LOOM_ERR_INTERNAL, "bench lang %s: no input `%s`", x->c->name, name);
  LOOM_BENCH_TRY(loom_malloc(x->comm, bytes, out));
  LOOM_BENCH_CUDA(cudaMemcpy(*out, src, bytes, cudaMemcpyDeviceToDevice));
  return LOOM_SUCCESS;
}

/* Adam or LAMB on copies of the program's p and g, the hyperparameters of the program (lang_cases.h). */
static loom_result_t hand_optim(lang_run_t *x, int lamb) {
  const int64_t N = lang_bind_size(x->bind, "N");
  void *params = NULL;
  LOOM_BENCH_TRY(copy_input(x, "p", (size_t)N * 4, &params));
  x->hin = params;
  LOOM_BENCH_TRY(copy_input(x, "g", (size_t)N * 4, &x->hgrads));
  loom_optim_desc_t d = LOOM_OPTIM_DESC_INIT;
  void *grads = x->hgrads;
  d.world_size = x->W, d.num_tensors = 1, d.params = &params, d.grads = &grads, d.numels = &N;
  d.param_type = d.grad_type = LOOM_FP32, d.average_grads = 0, d.decoupled_weight_decay = 1;
  d.eps = lamb ? 1e-6f : 1e-8f, d.weight_decay = lamb ? 0.01f : 0.0f, d.bias_correction = !lamb;
  return lamb ? loom_plan_lamb(x->comm, &d, &x->hplan[0]) : loom_plan_adam(x->comm, &d, &x->hplan[0]);
}

/* x->epi: the program's bias `b`, residual `r` and its one Dropout's probability and seed (the same mask: the
 * epilogue's at offset 0 of the element's index in the whole output, as the program draws it). */
static loom_result_t hand_epilogue(lang_run_t *x) {
  const loom_epilogue_t epi = LOOM_EPILOGUE_INIT;
  x->epi = epi;
  x->epi.bias = io_input(x, "b"), x->epi.residual = io_input(x, "r");
  if (!x->epi.bias || !x->epi.residual)
    return loom_bench_fail(LOOM_ERR_INTERNAL, "bench lang %s: the program has no input `b` or `r`", x->c->name);
  if (lang_prog_dropout(x->p, &x->epi.dropout_p, &x->epi.dropout_seed) != 0)
    return loom_bench_fail(LOOM_ERR_INTERNAL, "bench lang %s: the program has no single Dropout", x->c->name);
  return LOOM_SUCCESS;
}

/* loom_gemm_ar's plans, one per variant (collective: every rank makes every plan whatever failed before),
 * for the program's MatMul(in [B, S, H / W], w [H / W, H]) and the epilogue of hand_epilogue; their outputs. */
static loom_result_t hand_gemm_ar(lang_run_t *x) {
  const int64_t B = lang_bind_size(x->bind, "B"), S = lang_bind_size(x->bind, "S"), H = lang_bind_size(x->bind, "H");
  const int in = io_find(x, "in");
  const loom_dtype_t dt = in >= 0 ? x->io.in[in].dtype : LOOM_FP16;
  const size_t bytes = (size_t)(B * S * H) * loom_dtype_size(dt);
  loom_result_t r = hand_epilogue(x);
  if (r == LOOM_SUCCESS && (in < 0 || H % x->W))
    r = loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "bench lang %s: H=%lld over W=%d ranks: loom_gemm_ar takes k = H / W "
                        "of the input `in` (%s)", x->c->name, (long long)H, x->W, in < 0 ? "absent" : "uneven");
  if (r == LOOM_SUCCESS && (x->io.no < 1 || x->io.out[0].count != B * S * H))
    r = loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "bench lang %s: the output holds %lld elements on this rank, "
                        "loom_gemm_ar's %lld", x->c->name, (long long)(x->io.no ? x->io.out[0].count : 0),
                        (long long)(B * S * H));
  if (cudaMalloc(&x->hout, bytes) != cudaSuccess && r == LOOM_SUCCESS)
    r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang %s: cudaMalloc of %zu bytes", x->c->name, bytes);
  const loom_result_t m = loom_malloc(x->comm, bytes, &x->hsym);
  if (r == LOOM_SUCCESS) r = m;
  for (int v = 0; v < HAND_GEMM_AR_N; ++v) {
    loom_tp_desc_t d = LOOM_TP_DESC_INIT;
    d.m = B * S, d.n = H, d.k = H / x->W, d.ab_type = d.c_type = dt, d.b_layout = LOOM_B_KN;
    d.world_size = x->W, d.transfer = k_ar_transfer[v];
    const loom_result_t pr = loom_plan_gemm_ar(x->comm, &d, &x->hplan[v]);
    if (r == LOOM_SUCCESS) r = pr;
  }
  loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
  if (r == LOOM_SUCCESS) r = loom_tp_plan_info(x->hplan[HAND_AUTO], &info);
  x->hpath = info.transfer;
  return r;
}

/* The hand-written op of the case on the generated plans' inputs (collective). */
static loom_result_t hand_open(lang_run_t *x) {
  const lang_case_t *c = x->c;
  if (c->kind == LANG_HAND_ADAM || c->kind == LANG_HAND_LAMB) return hand_optim(x, c->kind == LANG_HAND_LAMB);
  if (c->kind == LANG_HAND_GEMM_AR) return hand_gemm_ar(x);
  const int gemm = c->kind == LANG_HAND_GEMM_BIAS;
  const int64_t rows = lang_bind_size(x->bind, gemm ? "M" : "R"), cols = lang_bind_size(x->bind, gemm ? "N" : "C");
  LOOM_BENCH_CUDA(cudaMalloc(&x->hout, (size_t)(rows * cols) * 2));
  if (gemm) {
    const loom_gemm_desc_t gd = LOOM_GEMM_DESC(rows, cols, lang_bind_size(x->bind, "K"), LOOM_BF16, LOOM_BF16,
                                               LOOM_B_KN, 1);
    x->gd = gd;
    return LOOM_SUCCESS;
  }
  LOOM_BENCH_TRY(copy_input(x, "x", (size_t)(rows * cols) * 2, &x->hin));
  loom_coll_desc_t d = LOOM_COLL_DESC_INIT;
  d.count = rows * cols, d.cols = cols, d.norm = LOOM_NORM_RMS, d.norm_eps = 1e-5f, d.world_size = x->W;
  LOOM_BENCH_TRY(hand_epilogue(x));
  return loom_plan_allreduce(x->comm, &d, &x->hplan[0]);
}

/* Variant v of the hand-written op (0 where it has one), on the generated plans' inputs. */
static loom_result_t hand_run(lang_run_t *x, int v, cudaStream_t s) {
  switch (x->c->kind) {
    case LANG_HAND_ALLREDUCE_NORM:
      return loom_allreduce(x->hplan[0], x->hin, x->hout, &x->epi, io_input(x, "g"), NULL, s);
    case LANG_HAND_ADAM: return loom_adam_step(x->hplan[0], NULL, s);
    case LANG_HAND_LAMB: return loom_lamb_step(x->hplan[0], NULL, s);
    case LANG_HAND_GEMM_BIAS:
      return loom_gemm(&x->gd, io_input(x, "a"), io_input(x, "w"), x->hout, io_input(x, "bias"), s);
    case LANG_HAND_GEMM_AR:
      return loom_gemm_ar(x->hplan[v], io_input(x, "in"), io_input(x, "w"), v == HAND_SEQ ? x->hout : x->hsym,
                          &x->epi, s);
  }
  return loom_bench_fail(LOOM_ERR_INTERNAL, "bench lang: hand-written op %d", (int)x->c->kind);
}

/* The output variant v of the hand-written op writes (device memory). */
static const void *hand_output(const lang_run_t *x, int v) {
  return x->c->kind == LANG_HAND_GEMM_AR && v != HAND_SEQ ? x->hsym : x->hout;
}

/* One call of the race's operation arg (a lang_op_t): a generated row's plan or a hand-written variant. */
static loom_result_t race_op(void *arg, int iter, cudaStream_t s) {
  const lang_op_t *o = (const lang_op_t *)arg;
  lang_run_t *x = o->x;
  (void)iter;
  if (o->j >= x->rows) return hand_run(x, o->j - x->rows, s);
  return loom_prog_run(x->gen[o->j], (const void *const *)x->io.din, x->io.dout, s);
}

/* Everything case x holds on this rank released (the loom_malloc buffers and plans: collective). */
static void run_release(lang_run_t *x) {
  for (int j = 0; j < LANG_ROWS_MAX; ++j) {
    if (x->gen[j]) (void)loom_plan_destroy(x->gen[j]);
    loom_prog_destroy(x->q[j]);
  }
  for (int v = 0; v < HAND_GEMM_AR_N; ++v)
    if (x->hplan[v]) (void)loom_plan_destroy(x->hplan[v]);
  if (x->hin) (void)loom_free(x->comm, x->hin);
  if (x->hgrads) (void)loom_free(x->comm, x->hgrads);
  if (x->hsym) (void)loom_free(x->comm, x->hsym);
  cudaFree(x->hout);
  prog_io_free(&x->io);
  loom_prog_destroy(x->p);
}

/* ---- checks ---------------------------------------------------------------------------------- */

/* One call of a generated plan on its inputs, finished. */
static loom_result_t gen_once(lang_run_t *x, loom_plan_t gen, const prog_io_t *io, cudaStream_t s) {
  LOOM_BENCH_TRY(loom_prog_run(gen, (const void *const *)io->din, io->dout, s));
  LOOM_BENCH_CUDA(cudaStreamSynchronize(s));
  return loom_comm_get_async_error(x->comm);
}

/* Variant v of the hand-written op once, its output poisoned first (NaN), copied into host (the output's bytes). */
static loom_result_t hand_once(lang_run_t *x, int v, void *host, size_t bytes, cudaStream_t s) {
  LOOM_BENCH_CUDA(cudaMemsetAsync((void *)hand_output(x, v), 0xff, bytes, s));
  LOOM_BENCH_TRY(hand_run(x, v, s));
  LOOM_BENCH_CUDA(cudaStreamSynchronize(s));
  LOOM_BENCH_TRY(loom_comm_get_async_error(x->comm));
  LOOM_BENCH_CUDA(cudaMemcpy(host, hand_output(x, v), bytes, cudaMemcpyDeviceToHost));
  return LOOM_SUCCESS;
}

/* Elements of got (what `impl` computed) beyond the bound of want's, the first ones said on stderr. */
static int64_t count_wrong(const lang_run_t *x, const char *impl, const char *got, const char *want) {
  const loom_prog_io_t *o = &x->io.out[0];
  const double bound = prog_io_bound(x->q[0]);
  int64_t wrong = 0;
  for (size_t i = 0; i < (size_t)o->count; ++i) {
    const double g = loom_ref_load(o->dtype, got, i), w = loom_ref_load(o->dtype, want, i);
    if (fabs(g - w) <= bound * fmax(1.0, fabs(w))) continue; /* (NaN is beyond it) */
    if (wrong++ < 5)
      fprintf(stderr, "rank %d: lang %s: %s: output %s element %zu: %.6g, %s %.6g\n", x->rank, x->c->name, impl,
              o->name, i, g, x->c->hand, w);
  }
  return wrong;
}

/* Every generated row's output, then every variant of the hand-written op but the reference, against the
 * reference variant's (hand_reference) on the same inputs: wrong[k] elements beyond the bound for row k (the
 * generated rows, then the variants; -1: the reference, not checked). */
static loom_result_t check_hand(lang_run_t *x, cudaStream_t s, int64_t *wrong) {
  const loom_prog_io_t *o = &x->io.out[0];
  const size_t bytes = (size_t)o->count * loom_dtype_size(o->dtype);
  const int ref = hand_reference(x->c);
  char *got = malloc(bytes), *want = malloc(bytes), impl[64];
  loom_result_t r = got && want ? LOOM_SUCCESS : loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "bench lang: host copies");
  if (r == LOOM_SUCCESS) r = hand_once(x, ref, want, bytes, s);
  for (int j = 0; j < x->rows && r == LOOM_SUCCESS; ++j) {
    if (cudaMemsetAsync(x->io.dout[0], 0xff, bytes, s) != cudaSuccess) r = loom_bench_fail(LOOM_ERR_CUDA, "poison");
    if (r == LOOM_SUCCESS) r = gen_once(x, x->gen[j], &x->io, s);
    if (r == LOOM_SUCCESS && cudaMemcpy(got, x->io.dout[0], bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
      r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang: copying the output back");
    snprintf(impl, sizeof impl, "generated:%s", lang_case_row_label(x->c, j));
    if (r == LOOM_SUCCESS) wrong[j] = count_wrong(x, impl, got, want);
  }
  for (int v = 0; v < x->hands && r == LOOM_SUCCESS; ++v) {
    if (v == ref) continue;
    r = hand_once(x, v, got, bytes, s);
    if (r == LOOM_SUCCESS) wrong[x->rows + v] = count_wrong(x, k_ar_impl[v], got, want);
  }
  free(got), free(want);
  return r;
}

/* Row j's generated outputs against the interpreter: at the timed sizes where it can, else a plan of the
 * case's check_bind; *wrong elements beyond prog_io_bound. */
static loom_result_t check_interp(lang_run_t *x, int j, cudaStream_t s, int64_t *wrong) {
  const char *cb = lang_case_check_bind(x->c, x->bind);
  const uint64_t seed = LANG_SEED + 1;
  loom_plan_t plan = x->gen[j];
  prog_io_t own, *io = &x->io;
  memset(&own, 0, sizeof own);
  loom_result_t r = LOOM_SUCCESS;
  if (cb != x->bind) {
    r = loom_prog_compile(x->comm, x->q[j], "unscheduled", cb, &plan);
    if (r == LOOM_SUCCESS) r = prog_io_make(plan, &own);
    io = &own;
  }
  if (r == LOOM_SUCCESS && prog_io_fill(io, x->rank % x->W, seed, s))
    r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang: filling the check's inputs");
  if (r == LOOM_SUCCESS) r = gen_once(x, plan, io, s);
  double d = 0;
  int bad = 0;
  char label[128];
  snprintf(label, sizeof label, "lang %s, %s at %s", x->c->name, lang_case_row_label(x->c, j), cb);
  if (r == LOOM_SUCCESS)
    r = prog_io_check(io, x->q[j], x->W, cb, seed, x->rank, prog_io_bound(x->q[j]), label, &d, &bad);
  *wrong = bad;
  if (plan != x->gen[j] && plan) (void)loom_plan_destroy(plan);
  prog_io_free(&own);
  return r;
}

/* The checks of the case: wrong[k] per row (the generated rows, then the hand-written variants; -1 unchecked). */
static loom_result_t lang_check(lang_run_t *x, cudaStream_t s, int64_t *wrong) {
  if (x->c->check_hand) return check_hand(x, s, wrong);
  for (int j = 0; j < x->rows; ++j) LOOM_BENCH_TRY(check_interp(x, j, s, &wrong[j]));
  return LOOM_SUCCESS;
}

/* ---- the rows -------------------------------------------------------------------------------- */

/* A row of case x with impl, its sizes and the peer's time of the same complete shape (rank 0); NULL only if
 * memory ran out. */
static loom_bench_row_t *row_open(const lang_args_t *a, loom_bench_table_t *t, const lang_run_t *x, const char *impl) {
  loom_bench_row_t *row = loom_bench_add(t);
  if (!row) return NULL;
  const lang_case_t *c = x->c;
  const int64_t B = lang_bind_size(x->bind, "B"), S = lang_bind_size(x->bind, "S"), H = lang_bind_size(x->bind, "H");
  snprintf(row->op, sizeof row->op, "%s", c->name);
  snprintf(row->impl, sizeof row->impl, "%s", impl);
  snprintf(row->shape, sizeof row->shape, "%s", x->bind);
  snprintf(row->dtype, sizeof row->dtype, "%s", x->io.no ? loom_bench_dtype_name(x->io.out[0].dtype) : "?");
  switch (c->kind) {
    case LANG_HAND_ALLREDUCE_NORM: row->m = lang_bind_size(x->bind, "R"), row->n = lang_bind_size(x->bind, "C"); break;
    case LANG_HAND_ADAM:
    case LANG_HAND_LAMB: row->m = lang_bind_size(x->bind, "N"); break;
    case LANG_HAND_GEMM_BIAS:
      row->m = lang_bind_size(x->bind, "M"), row->n = lang_bind_size(x->bind, "N"), row->k = lang_bind_size(x->bind, "K");
      break;
    case LANG_HAND_GEMM_AR: row->m = B * S, row->n = H, row->k = H / x->W; break; /* this rank's GEMM */
  }
  row->flops = row->k ? 2.0 * (double)row->m * (double)row->n * (double)row->k : 0;
  row->world = x->W;
  loom_bench_shape_t ps; /* lang_torch.py's row of the same case, sizes and world */
  loom_bench_shape_init(&ps);
  loom_bench_shape_str(&ps, "op", c->name);
  loom_bench_shape_str(&ps, "shape", x->bind);
  loom_bench_shape_str(&ps, "dtype", row->dtype);
  loom_bench_shape_int(&ps, "world", x->W);
  (void)loom_bench_row_pair(row, a->peer_json, "torch", &ps, 0);
  return row;
}

/* What the generated rows' hand(us) ran, in words (loom_gemm_ar's: in buf). */
static const char *hand_words(const lang_run_t *x, char *buf, size_t cap) {
  if (x->c->kind != LANG_HAND_GEMM_AR) return x->c->hand;
  snprintf(buf, cap, "loom_gemm_ar auto:%s", loom_bench_tp_path(x->hpath));
  return buf;
}

/* Rank 0: generated row j of case x (failed: an error on some rank, its note says so). Returns its failures. */
static int gen_row(const lang_args_t *a, loom_bench_table_t *t, const int *col, const lang_run_t *x, int j,
                   const loom_bench_time_t *tm, int64_t wrong, int failed) {
  char impl[48], buf[48];
  snprintf(impl, sizeof impl, "generated:%s", lang_case_row_label(x->c, j));
  loom_bench_row_t *row = row_open(a, t, x, impl);
  if (!row) return 1;
  if (failed) {
    snprintf(row->note, sizeof row->note, "error (see stderr)");
    return 1;
  }
  const double gen = tm[j].median_us, hus = tm[x->rows].median_us;
  row->fused_us = gen, row->min_us = tm[j].min_us, row->max_us = tm[j].max_us;
  row->own[col[COL_HAND]] = hus;
  row->own[col[COL_RATIO]] = hus / gen;
  for (int m = 0; m < 3; ++m) row->own[col[COL_COLD + m]] = x->missed[j][m] ? NAN : x->ms[j][m];
  row->wrong = wrong;
  snprintf(row->note, sizeof row->note, "vs %s; %d kernels; compile %.0f / %.1f / %.1f ms%s%s%s; checked %s",
           hand_words(x, buf, sizeof buf),
           x->kernels[j], x->wall[j][0], x->wall[j][1], x->wall[j][2], x->missed[j][0] ? "; cold served by a cache" : "",
           x->missed[j][1] ? "; disk cache missed" : "", x->missed[j][2] ? "; memory cache missed" : "",
           wrong < 0 ? "not" : x->c->check_hand ? "vs the hand-written op" : "vs the interpreter");
  loom_bench_row_finish(row);
  printf("# lang %-13s %-23s %-18s generated %10.1f us  hand %10.1f us  hand/gen %5.2f  peer/gen %5.2f  compile cold "
         "%7.1f disk %5.1f warm %5.1f ms  #wrong %lld\n", x->c->name, impl, x->bind, gen, hus, hus / gen, row->vs_peer,
         x->ms[j][0], x->ms[j][1], x->ms[j][2], (long long)wrong);
  fflush(stdout);
  return wrong > 0;
}

/* Rank 0: the row of variant v of the hand-written op (loom_gemm_ar's transfers). Returns its failures. */
static int hand_row(const lang_args_t *a, loom_bench_table_t *t, const int *col, const lang_run_t *x, int v,
                    const loom_bench_time_t *tm, int64_t wrong, int failed) {
  loom_bench_row_t *row = row_open(a, t, x, k_ar_impl[v]);
  if (!row) return 1;
  if (v == HAND_AUTO) loom_bench_row_auto(row, loom_bench_tp_path(x->hpath));
  if (failed) {
    snprintf(row->note, sizeof row->note, "error (see stderr)");
    return 1;
  }
  const loom_bench_time_t *h = &tm[x->rows + v];
  row->own[col[COL_HAND]] = h->median_us;
  if (v == HAND_AUTO) row->auto_us = h->median_us;
  row->min_us = h->min_us, row->max_us = h->max_us;
  row->wrong = wrong;
  char ratio[32] = "";
  if (!isnan(row->peer_us)) snprintf(ratio, sizeof ratio, "; peer/hand %.2f", row->peer_us / h->median_us);
  snprintf(row->note, sizeof row->note, "loom_gemm_ar, transfer %s%s; %s",
           v == HAND_AUTO ? "AUTO" : loom_bench_tp_path(k_ar_transfer[v]), ratio,
           v == hand_reference(x->c) ? "the checks' reference" : wrong < 0 ? "not checked" : "checked vs hand:sequential");
  loom_bench_row_finish(row);
  printf("# lang %-13s %-23s %-18s hand %10.1f us  #wrong %lld\n", x->c->name, row->impl, x->bind, h->median_us,
         (long long)wrong);
  fflush(stdout);
  return wrong > 0;
}

/* ---- a case, every case ---------------------------------------------------------------------- */

/* The steps before the race: the program, each row's schedule and three compiles, the buffers (filled), the
 * hand-written op. */
static loom_result_t lang_prepare(lang_run_t *x, cudaStream_t s) {
  if (x->rows > LANG_ROWS_MAX)
    return loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "bench lang %s: %d rows; at most LANG_ROWS_MAX = %d", x->c->name,
                           x->rows, LANG_ROWS_MAX);
  int64_t bad = case_parse(x->c, &x->p);
  for (int j = 0; j < x->rows && !bad; ++j) bad = row_program(x->c, j, x->p, &x->q[j]);
  loom_result_t r = bad ? LOOM_ERR_INVALID_ARGUMENT : LOOM_SUCCESS; /* (every rank parses alike) */
  for (int j = 0; j < x->rows && r == LOOM_SUCCESS; ++j) r = compile_three(x, j);
  if (r == LOOM_SUCCESS) r = prog_io_make(x->gen[0], &x->io);
  for (int j = 1; j < x->rows && r == LOOM_SUCCESS; ++j) r = same_io(x, j);
  if (r == LOOM_SUCCESS && prog_io_fill(&x->io, x->rank % x->W, LANG_SEED, s))
    r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang: filling the inputs");
  bad = r != LOOM_SUCCESS; /* the ranks agree before the hand-written op's plan (collective) */
  if (loom_bench_sum_ranks(x->nccl, s, &bad) != LOOM_SUCCESS || bad)
    return r != LOOM_SUCCESS ? r : loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "another rank failed");
  return hand_open(x);
}

/* Every generated row and every variant of the hand-written op raced (collective): tm[k] per op. */
static loom_result_t lang_race(const lang_args_t *a, lang_run_t *x, cudaStream_t s, loom_bench_time_t *tm) {
  enum { N = LANG_ROWS_MAX + HAND_GEMM_AR_N };
  loom_bench_op_fn ops[N];
  void *args[N];
  lang_op_t op[N];
  const int n = x->rows + x->hands;
  for (int k = 0; k < n; ++k) op[k].x = x, op[k].j = k, ops[k] = race_op, args[k] = &op[k];
  LOOM_BENCH_TRY(loom_bench_time_ranks_side_by_side(x->nccl, s, a->o.warmup, a->o.reps, n, ops, args, tm));
  LOOM_BENCH_CUDA(cudaStreamSynchronize(s));
  return loom_comm_get_async_error(x->comm);
}

/* A failure of this rank said on stderr, then every rank's summed into *failed (collective). */
static void agree(const lang_run_t *x, loom_result_t r, cudaStream_t s, int64_t *failed) {
  if (r != LOOM_SUCCESS) {
    fprintf(stderr, "rank %d: lang %s at %s: %s\n", x->rank, x->c->name, x->bind, loom_last_error());
    *failed = 1;
  }
  if (loom_bench_sum_ranks(x->nccl, s, failed) != LOOM_SUCCESS) *failed = 1;
}

/* Case c on this rank (collective): prepared, checked, raced; its rows on rank 0. Returns the failures. */
static int lang_case_bench(const lang_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s,
                           loom_bench_table_t *t, const int *col, const lang_case_t *c) {
  enum { N = LANG_ROWS_MAX + HAND_GEMM_AR_N };
  lang_run_t x;
  memset(&x, 0, sizeof x);
  x.c = c, x.bind = case_bind(a, c), x.comm = comm, x.nccl = ctx->nccl, x.rank = ctx->rank, x.W = ctx->size;
  x.rows = lang_case_rows(c), x.hands = hand_variants(c);
  loom_result_t r = lang_prepare(&x, s);
  int64_t wrong[N], failed = 0;
  for (int k = 0; k < N; ++k) wrong[k] = -1;
  if (r == LOOM_SUCCESS && a->o.check) r = lang_check(&x, s, wrong);
  agree(&x, r, s, &failed);
  loom_bench_time_t tm[N];
  if (!failed) agree(&x, lang_race(a, &x, s, tm), s, &failed);
  for (int k = 0; k < x.rows + x.hands && !failed; ++k)
    if (wrong[k] >= 0 && loom_bench_sum_ranks(ctx->nccl, s, &wrong[k]) != LOOM_SUCCESS) failed = 1;
  int failures = 0;
  for (int j = 0; j < x.rows && ctx->rank == 0; ++j) failures += gen_row(a, t, col, &x, j, tm, wrong[j], failed != 0);
  for (int v = 0; x.hands > 1 && v < x.hands && ctx->rank == 0; ++v)
    failures += hand_row(a, t, col, &x, v, tm, wrong[x.rows + v], failed != 0);
  cudaStreamSynchronize(s);
  run_release(&x);
  return failures;
}

/* Whether case c runs at W ranks: loom_gemm_ar's cases take k = H / W, so H must split evenly; why: the
 * note where it does not. */
static int case_runs(const lang_case_t *c, const char *bind, int W, char *why, size_t cap) {
  const int64_t H = lang_bind_size(bind, "H");
  if (c->kind != LANG_HAND_GEMM_AR || (H > 0 && H % W == 0)) return 1;
  snprintf(why, cap, "%s not run: H=%lld does not split over W=%d ranks (loom_gemm_ar takes k = H / W)", c->name,
           (long long)H, W);
  return 0;
}

static int lang_rank(loom_rank_ctx_t *ctx, void *arg) {
  const lang_args_t *a = (const lang_args_t *)arg;
  cudaStream_t s = NULL;
  loom_comm_t comm = NULL;
  if (loom_bench_rank_open(ctx, &s, &comm)) return 1;
  loom_bench_table_t t;
  memset(&t, 0, sizeof t);
  static const char *const head[NCOLS] = {"hand(us)", "hand/gen", "cold(ms)", "disk(ms)", "warm(ms)"};
  static const char *const key[NCOLS] = {"hand_us", "hand_over_gen", "compile_cold_ms", "compile_disk_ms",
                                         "compile_warm_ms"};
  int col[NCOLS], failures = 0;
  for (int i = 0; i < NCOLS; ++i)
    col[i] = loom_bench_own_col(&t, head[i], key[i], i == COL_RATIO ? 3 : i > COL_COLD ? 2 : 1);
  for (int i = 0; i < lang_case_count(); ++i) {
    char why[200];
    if (a->only && a->only != lang_case(i)) continue;
    if (case_runs(lang_case(i), case_bind(a, lang_case(i)), ctx->size, why, sizeof why))
      failures += lang_case_bench(a, ctx, comm, s, &t, col, lang_case(i));
    else if (ctx->rank == 0)
      loom_bench_note(&t, "%s", why);
  }
  if (ctx->rank == 0) {
    loom_bench_note(&t, "fused(us) = the generated code (loom_prog_compile of the row's scheduled program, "
                        "loom_prog_run); hand(us) = loom's hand-written op on the same inputs; hand/gen > 1: generated "
                        "faster");
    loom_bench_note(&t, "mp_layer*: CoCoNet Figure 11, rows = prefixes of model_parallel.loom's best: mm_ar_c [:1], "
                        "mm_rs_c_ag [:3], fuse_rs_c_ag [:4], overlap [:5]; hand(us) of them = loom_gemm_ar AUTO");
    loom_bench_note(&t, "hand:* rows: loom_gemm_ar's transfers (AUTO, SEQUENTIAL, SM_COPY), time in hand(us), the "
                        "peer's ratio in their note");
    loom_bench_note(&t, "cold = NVRTC, no cache; disk = the disk cache (memory cache emptied); warm = the memory "
                        "cache: loom_prog_compile's kernel time (the note: each whole compile, cold / disk / warm)");
    loom_bench_note(&t, "#wrong: ar_norm, gemm_bias against the hand-written op's outputs, mp_layer* against "
                        "loom_gemm_ar SEQUENTIAL's, adam, lamb against the interpreter; relative to max(1, |ref|), "
                        "bound 6e-2 (bf16), 1.5e-2 (fp16), 2e-4 (fp32)");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us): PyTorch's code for the case (bench/peers/lang_torch.py, this job), peer/now = "
                          "peer(us) / fused(us): %.80s", a->peer_json);
    else
      loom_bench_note(&t, "%s", a->peer_note[0] ? a->peer_note : "PyTorch peer: no rows");
    char title[160];
    snprintf(title, sizeof title, "loom-bench lang: generated code vs loom's hand-written ops, world %d, median of %d "
             "reps", ctx->size, a->o.reps);
    failures = loom_bench_finish("lang", &t, &a->o, ctx->size, title, failures);
  }
  loom_bench_table_free(&t);
  loom_bench_rank_close(s, comm);
  return failures ? 1 : 0;
}

/* Runs lang_torch.py on this run's exact cases and world (from the parent, before the ranks). */
static void lang_peer(lang_args_t *a, int world) {
  if (!a->peer) {
    snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (--peer none)");
    return;
  }
  char args[512];
  snprintf(args, sizeof args, "--world %d --reps %d --warmup %d --cases ", world, a->o.reps, a->o.warmup);
  int first = 1;
  for (int i = 0; i < lang_case_count(); ++i) {
    const lang_case_t *c = lang_case(i);
    if (a->only && a->only != c) continue;
    char bind[96]; /* "R=1024,C=4096" as "R=1024/C=4096": the peer's case separator is the comma */
    snprintf(bind, sizeof bind, "%s", case_bind(a, c));
    for (char *q = bind; *q; ++q)
      if (*q == ',') *q = '/';
    if (loom_bench_appendf(args, sizeof args, "%s%s/%s", first ? "" : ",", c->name, bind) != 0) {
      snprintf(a->peer_note, sizeof a->peer_note, "PyTorch peer not run (its case list did not fit)");
      return;
    }
    first = 0;
  }
  (void)loom_bench_run_peer("lang_torch.py", args, "lang_torch", a->peer_json, sizeof a->peer_json, a->peer_note,
                            sizeof a->peer_note);
}

LOOM_BENCH(lang, "loom programs' generated code vs loom's hand-written ops (AllReduce+RMSNorm, Adam, LAMB, GEMM+bias, "
                 "CoCoNet Figure 11's GEMM+AllReduce layer); compile times cold / disk / warm") {
  lang_args_t a;
  memset(&a, 0, sizeof a);
  a.peer = 1;
  const int rc = loom_bench_parse(&a.o, argc, argv, lang_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (a.bind && !a.only) {
    fprintf(stderr, "loom-bench: --bind %s needs --case NAME (the sizes are one case's)\n", a.bind);
    return 1;
  }
  if (a.list) return lang_list(&a);
  const int world = loom_bench_world(&a.o, 1);
  if (world == 0) return 1;
  lang_peer(&a, world);
  return loom_bench_launch(&a.o, world, lang_rank, &a) ? 1 : 0;
}
