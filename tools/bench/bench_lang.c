/*
 * bench_lang.c - loom-bench lang: loom programs' generated code against
 * loom's hand-written op for the same computation (support/lang_cases.h:
 * AllReduce + bias + dropout + residual + RMSNorm, Adam, LAMB, GEMM + bias),
 * side by side in one run on every rank (each repetition runs the generated
 * plan, then the hand-written op; the time of a repetition is that of the
 * slowest rank), and what compiling each program costs. One row per case:
 *   fused(us)   the generated code: the case's Schedule section (or the
 *               program as written) compiled by loom_prog_compile, one
 *               loom_prog_run per repetition
 *   hand(us)    the hand-written op on the same sizes (loom_allreduce with
 *               its epilogue and norm, loom_adam_step, loom_lamb_step,
 *               loom_gemm with its bias); hand/gen > 1: generated faster
 *   cold(ms)    loom_prog_compile's kernels with no cache: the memory cache
 *               emptied, an empty disk cache folder of the rank's own
 *               (LOOM_CACHE_DIR), so NVRTC compiles every kernel
 *   disk(ms)    the same, the memory cache emptied again: from the disk
 *   warm(ms)    the same again: from the memory cache (this plan is timed)
 * The compile columns are loom_prog_plan_info's compile_ms (the kernels'
 * time); the note gives each whole loom_prog_compile (plan, arena, peers)
 * and a cache that missed. A case whose kernels are all GEMMs has none.
 * Inputs: drawn as the interpreter draws them (support/prog_io.h), the
 * hand-written op's copies of the same values. Both sides run on one set of
 * buffers, back to back, so L2 treats them alike; at the default sizes the
 * working set is several times L2.
 * Checks (a mismatch makes the suite exit 1): ar_norm and gemm_bias compare
 * the generated outputs with the hand-written op's on the same inputs;
 * adam and lamb with the CPU interpreter at the timed sizes where it can,
 * else at the case's check_bind (lang_case_check_bind); the bound is
 * prog_io_bound's (relative to max(1, |ref|)).
 * peer(us): PyTorch's code for the same computation on the same sizes and
 * world (bench/peers/lang_torch.py, run first, its rows paired by the
 * complete shape: op, sizes, dtype, world); --peer none skips it.
 * --list prints the cases and what each checks, without a GPU (each
 * program parsed, checked and scheduled on the host).
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
  int list;
  int peer;              /* 0 with --peer none */
  char peer_json[1200];  /* PyTorch's results (bench/peers/lang_torch.py; "" if not run) */
  char peer_note[200];   /* why there is no peer column */
} lang_args_t;

enum { COL_HAND, COL_RATIO, COL_COLD, COL_DISK, COL_WARM, NCOLS };

static int lang_opt(void *ctx, int argc, char **argv, int *i) {
  lang_args_t *a = (lang_args_t *)ctx;
  const char *s = argv[*i];
  if (!strcmp(s, "--help")) {
    printf("  --case NAME          one case only (ar_norm, adam, lamb, gemm_bias)\n"
           "  --list               print the cases, their sizes and checks, then exit (no GPU needed)\n"
           "  --peer none          skip PyTorch's code for the cases (bench/peers/lang_torch.py, run by default\n"
           "                       on this run's exact sizes and world)\n");
    return 1;
  }
  const int pr = loom_bench_opt_peer(argc, argv, i, &a->peer);
  if (pr) return pr;
  if (!strcmp(s, "--list")) return a->list = 1, 1;
  if (!strcmp(s, "--case")) {
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    if (!v || !(a->only = lang_case_find(v))) {
      fprintf(stderr, "loom-bench: --case needs one of ar_norm, adam, lamb, gemm_bias, got \"%s\"\n",
              v ? v : "(nothing)");
      return -1;
    }
    *i += 1;
    return 1;
  }
  return 0;
}

static const char *case_bind(const lang_args_t *a, const lang_case_t *c) {
  return a->o.quick ? c->quick_bind : c->bind;
}
static const char *case_sched(const lang_case_t *c) { return c->schedule[0] ? c->schedule : NULL; }

/* Case c's program parsed and scheduled (*q; *p the program as written): 0, or 1 after printing why. */
static int case_program(const lang_case_t *c, loom_prog_t *p, loom_prog_t *q) {
  *p = *q = NULL;
  if (loom_prog_parse(c->text, c->name, p) == LOOM_SUCCESS && loom_prog_check(*p) == LOOM_SUCCESS &&
      loom_prog_schedule(*p, case_sched(c), q) == LOOM_SUCCESS && loom_prog_check(*q) == LOOM_SUCCESS)
    return 0;
  fprintf(stderr, "loom-bench lang: case %s: %s\n", c->name, loom_last_error());
  loom_prog_destroy(*q), loom_prog_destroy(*p);
  *p = *q = NULL;
  return 1;
}

/* --list: every case of the selection, its program checked on the host. */
static int lang_list(const lang_args_t *a) {
  int bad = 0;
  printf("loom-bench lang: generated code against the hand-written op, world %d%s\n", a->o.world ? a->o.world : 1,
         a->o.quick ? " (--quick sizes)" : "");
  printf("%-10s %-9s %-22s %-24s %-34s %s\n", "case", "schedule", "sizes", "program", "check", "hand-written op");
  for (int i = 0; i < lang_case_count(); ++i) {
    const lang_case_t *c = lang_case(i);
    if (a->only && a->only != c) continue;
    loom_prog_t p, q;
    bad |= case_program(c, &p, &q);
    loom_prog_destroy(q), loom_prog_destroy(p);
    char prog[64], check[64];
    if (c->example[0]) snprintf(prog, sizeof prog, "examples/lang/%s.loom", c->example);
    else snprintf(prog, sizeof prog, "the suite's");
    if (c->check_hand) snprintf(check, sizeof check, "outputs vs the hand-written op's");
    else snprintf(check, sizeof check, "interpreter at %s", lang_case_check_bind(c, case_bind(a, c)));
    printf("%-10s %-9s %-22s %-24s %-34s %s\n", c->name, c->schedule[0] ? c->schedule : "(none)", case_bind(a, c),
           prog, check, c->hand);
  }
  return bad;
}

/* ---- one case on this rank ------------------------------------------------------------------- */

typedef struct lang_run {
  const lang_case_t *c;
  const char *bind;
  loom_comm_t comm;
  ncclComm_t nccl;
  int rank, W;
  loom_prog_t p, q;          /* the program as written, scheduled */
  loom_plan_t gen;           /* the generated code (the warm compile) */
  prog_io_t io;              /* its inputs and outputs (the hand-written op reads copies) */
  double ms[3], wall[3];     /* cold, disk, warm: the kernels' time, the whole compile's */
  int kernels, missed[3];    /* kernels; kernels NVRTC compiled where a cache should have served */
  /* the hand-written op */
  loom_plan_t hplan;         /* allreduce, adam or lamb */
  loom_gemm_desc_t gd;
  loom_epilogue_t epi;
  void *hin, *hgrads;        /* loom_malloc copies: the all-reduce's input; the optimizer's params, grads */
  void *hout;                /* ar_norm and gemm_bias's output */
} lang_run_t;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* Input `name` of the generated plan (device memory), NULL where there is none. */
static void *io_input(const lang_run_t *x, const char *name) {
  for (int i = 0; i < x->io.ni; ++i)
    if (!strcmp(x->io.in[i].name, name)) return x->io.din[i];
  return NULL;
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

/* One compile of the generated code (mode 0 cold, 1 disk, 2 warm), its times; the plan in *plan. */
static loom_result_t compile_once(lang_run_t *x, int mode, loom_plan_t *plan) {
  if (mode < 2) loom_bench_rtc_cache_clear();
  const double t0 = now_ms();
  LOOM_BENCH_TRY(loom_prog_compile(x->comm, x->p, case_sched(x->c), x->bind, plan));
  x->wall[mode] = now_ms() - t0;
  loom_prog_plan_info_t info = LOOM_PROG_PLAN_INFO_INIT;
  LOOM_BENCH_TRY(loom_prog_plan_info(*plan, &info));
  x->kernels = info.kernels;
  x->ms[mode] = info.kernels ? info.compile_ms : NAN;
  x->missed[mode] = mode ? info.compiled : info.kernels - info.compiled;
  return LOOM_SUCCESS;
}

/* The generated code compiled cold, from the disk cache, then warm (that plan kept in x->gen), with this
 * rank's own disk cache folder; LOOM_CACHE_DIR as it was afterwards. */
static loom_result_t compile_three(lang_run_t *x) {
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
    r = compile_once(x, mode, &plan);
    if (mode < 2 && plan) (void)loom_plan_destroy(plan);
    else x->gen = plan;
  }
  if (old) setenv("LOOM_CACHE_DIR", old, 1);
  else unsetenv("LOOM_CACHE_DIR");
  free(old);
  remove_dir(dir);
  return r;
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
  return lamb ? loom_plan_lamb(x->comm, &d, &x->hplan) : loom_plan_adam(x->comm, &d, &x->hplan);
}

/* The hand-written op of the case on the generated plan's inputs (collective). */
static loom_result_t hand_open(lang_run_t *x) {
  const lang_case_t *c = x->c;
  if (c->kind == LANG_HAND_ADAM || c->kind == LANG_HAND_LAMB) return hand_optim(x, c->kind == LANG_HAND_LAMB);
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
  const loom_epilogue_t epi = LOOM_EPILOGUE_INIT;
  x->epi = epi;
  x->epi.bias = io_input(x, "b"), x->epi.residual = io_input(x, "r");
  x->epi.dropout_p = 0.1f, x->epi.dropout_seed = 1234;
  return loom_plan_allreduce(x->comm, &d, &x->hplan);
}

static loom_result_t hand_call(void *arg, int iter, cudaStream_t s) {
  lang_run_t *x = (lang_run_t *)arg;
  (void)iter;
  switch (x->c->kind) {
    case LANG_HAND_ALLREDUCE_NORM: return loom_allreduce(x->hplan, x->hin, x->hout, &x->epi, io_input(x, "g"), NULL, s);
    case LANG_HAND_ADAM: return loom_adam_step(x->hplan, NULL, s);
    case LANG_HAND_LAMB: return loom_lamb_step(x->hplan, NULL, s);
    case LANG_HAND_GEMM_BIAS:
      return loom_gemm(&x->gd, io_input(x, "a"), io_input(x, "w"), x->hout, io_input(x, "bias"), s);
  }
  return loom_bench_fail(LOOM_ERR_INTERNAL, "bench lang: hand-written op %d", (int)x->c->kind);
}

static loom_result_t gen_call(void *arg, int iter, cudaStream_t s) {
  lang_run_t *x = (lang_run_t *)arg;
  (void)iter;
  return loom_prog_run(x->gen, (const void *const *)x->io.din, x->io.dout, s);
}

static void run_release(lang_run_t *x) {
  if (x->gen) (void)loom_plan_destroy(x->gen);
  if (x->hplan) (void)loom_plan_destroy(x->hplan);
  if (x->hin) (void)loom_free(x->comm, x->hin);
  if (x->hgrads) (void)loom_free(x->comm, x->hgrads);
  cudaFree(x->hout);
  prog_io_free(&x->io);
  loom_prog_destroy(x->q), loom_prog_destroy(x->p);
}

/* ---- checks ---------------------------------------------------------------------------------- */

/* One call of the generated code on its inputs (and, hand, of the hand-written op), finished. */
static loom_result_t call_once(lang_run_t *x, loom_plan_t gen, const prog_io_t *io, int hand, cudaStream_t s) {
  LOOM_BENCH_TRY(loom_prog_run(gen, (const void *const *)io->din, io->dout, s));
  if (hand) LOOM_BENCH_TRY(hand_call(x, 0, s));
  LOOM_BENCH_CUDA(cudaStreamSynchronize(s));
  return loom_comm_get_async_error(x->comm);
}

/* The generated output against the hand-written op's on the same inputs: *wrong elements beyond the bound. */
static loom_result_t check_hand(lang_run_t *x, cudaStream_t s, int64_t *wrong) {
  LOOM_BENCH_TRY(call_once(x, x->gen, &x->io, 1, s));
  const loom_prog_io_t *o = &x->io.out[0];
  const size_t n = (size_t)o->count, bytes = n * loom_dtype_size(o->dtype);
  char *got = malloc(bytes), *want = malloc(bytes);
  loom_result_t r = got && want ? LOOM_SUCCESS : loom_bench_fail(LOOM_ERR_OUT_OF_MEMORY, "bench lang: host copies");
  if (r == LOOM_SUCCESS && (cudaMemcpy(got, x->io.dout[0], bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
                            cudaMemcpy(want, x->hout, bytes, cudaMemcpyDeviceToHost) != cudaSuccess))
    r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang: copying the outputs back");
  const double bound = prog_io_bound(x->q);
  *wrong = 0;
  for (size_t i = 0; r == LOOM_SUCCESS && i < n; ++i) {
    const double g = loom_ref_load(o->dtype, got, i), w = loom_ref_load(o->dtype, want, i);
    if (fabs(g - w) <= bound * fmax(1.0, fabs(w))) continue; /* (NaN is beyond it) */
    if ((*wrong)++ < 5)
      fprintf(stderr, "rank %d: lang %s: output %s element %zu: generated %.6g, %s %.6g\n", x->rank, x->c->name,
              o->name, i, g, x->c->hand, w);
  }
  free(got), free(want);
  return r;
}

/* The generated outputs against the interpreter: at the timed sizes where it can, else a plan of the case's
 * check_bind; *wrong elements beyond prog_io_bound. */
static loom_result_t check_interp(lang_run_t *x, cudaStream_t s, int64_t *wrong) {
  const char *cb = lang_case_check_bind(x->c, x->bind);
  const uint64_t seed = LANG_SEED + 1;
  loom_plan_t plan = x->gen;
  prog_io_t own, *io = &x->io;
  memset(&own, 0, sizeof own);
  loom_result_t r = LOOM_SUCCESS;
  if (cb != x->bind) {
    r = loom_prog_compile(x->comm, x->p, case_sched(x->c), cb, &plan);
    if (r == LOOM_SUCCESS) r = prog_io_make(plan, &own);
    io = &own;
  }
  if (r == LOOM_SUCCESS && prog_io_fill(io, x->rank % x->W, seed, s))
    r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang: filling the check's inputs");
  if (r == LOOM_SUCCESS) r = call_once(x, plan, io, 0, s);
  double d = 0;
  int bad = 0;
  char label[96];
  snprintf(label, sizeof label, "lang %s at %s", x->c->name, cb);
  if (r == LOOM_SUCCESS) r = prog_io_check(io, x->q, x->W, cb, seed, x->rank, prog_io_bound(x->q), label, &d, &bad);
  *wrong = bad;
  if (plan != x->gen && plan) (void)loom_plan_destroy(plan);
  prog_io_free(&own);
  return r;
}

/* ---- the row --------------------------------------------------------------------------------- */

/* Rank 0: case x's row (failed: an error on some rank, its note says so). Returns its failures. */
static int lang_row(const lang_args_t *a, loom_bench_table_t *t, const int *col, const lang_run_t *x,
                    const loom_bench_time_t *tm, int64_t wrong, int failed) {
  loom_bench_row_t *row = loom_bench_add(t);
  if (!row) return 1;
  const lang_case_t *c = x->c;
  const int gemm = c->kind == LANG_HAND_GEMM_BIAS, optim = c->kind == LANG_HAND_ADAM || c->kind == LANG_HAND_LAMB;
  snprintf(row->op, sizeof row->op, "%s", c->name);
  snprintf(row->impl, sizeof row->impl, "generated:%s", c->schedule[0] ? c->schedule : "as-written");
  snprintf(row->shape, sizeof row->shape, "%s", x->bind);
  snprintf(row->dtype, sizeof row->dtype, "%s", optim ? "fp32" : "bf16");
  row->m = lang_bind_size(x->bind, gemm ? "M" : optim ? "N" : "R");
  row->n = optim ? 0 : lang_bind_size(x->bind, gemm ? "N" : "C");
  row->k = gemm ? lang_bind_size(x->bind, "K") : 0;
  row->flops = gemm ? 2.0 * (double)row->m * (double)row->n * (double)row->k : 0;
  row->world = x->W;
  if (failed) {
    snprintf(row->note, sizeof row->note, "error (see stderr)");
    return 1;
  }
  row->fused_us = tm[0].median_us, row->min_us = tm[0].min_us, row->max_us = tm[0].max_us;
  row->own[col[COL_HAND]] = tm[1].median_us;
  row->own[col[COL_RATIO]] = tm[1].median_us / tm[0].median_us;
  for (int m = 0; m < 3; ++m) row->own[col[COL_COLD + m]] = x->missed[m] ? NAN : x->ms[m];
  row->wrong = wrong;
  loom_bench_shape_t ps; /* lang_torch.py's row of the same case, sizes and world */
  loom_bench_shape_init(&ps);
  loom_bench_shape_str(&ps, "op", c->name);
  loom_bench_shape_str(&ps, "shape", x->bind);
  loom_bench_shape_str(&ps, "dtype", row->dtype);
  loom_bench_shape_int(&ps, "world", x->W);
  (void)loom_bench_row_pair(row, a->peer_json, "torch", &ps, 0);
  snprintf(row->note, sizeof row->note, "vs %s; %d kernels; compile %.0f / %.1f / %.1f ms%s%s%s; checked %s",
           c->hand, x->kernels, x->wall[0], x->wall[1], x->wall[2], x->missed[0] ? "; cold served by a cache" : "",
           x->missed[1] ? "; disk cache missed" : "", x->missed[2] ? "; memory cache missed" : "",
           wrong < 0 ? "not" : c->check_hand ? "vs the hand-written op" : "vs the interpreter");
  loom_bench_row_finish(row);
  printf("# lang %-9s %-22s generated %10.1f us  hand %10.1f us  hand/gen %5.2f  compile cold %7.1f disk %5.1f warm "
         "%5.1f ms  #wrong %lld\n", c->name, x->bind, tm[0].median_us, tm[1].median_us,
         tm[1].median_us / tm[0].median_us,
         x->ms[0], x->ms[1], x->ms[2], (long long)wrong);
  fflush(stdout);
  return wrong > 0;
}

/* ---- a case, every case ---------------------------------------------------------------------- */

/* The steps before the race: the program, its three compiles, its buffers (filled), the hand-written op. */
static loom_result_t lang_prepare(lang_run_t *x, cudaStream_t s) {
  int64_t bad = case_program(x->c, &x->p, &x->q);
  loom_result_t r = bad ? LOOM_ERR_INVALID_ARGUMENT : compile_three(x); /* (every rank parses alike) */
  if (r == LOOM_SUCCESS) r = prog_io_make(x->gen, &x->io);
  if (r == LOOM_SUCCESS && prog_io_fill(&x->io, x->rank % x->W, LANG_SEED, s))
    r = loom_bench_fail(LOOM_ERR_CUDA, "bench lang: filling the inputs");
  bad = r != LOOM_SUCCESS; /* the ranks agree before the hand-written op's plan (collective) */
  if (loom_bench_sum_ranks(x->nccl, s, &bad) != LOOM_SUCCESS || bad)
    return r != LOOM_SUCCESS ? r : loom_bench_fail(LOOM_ERR_INVALID_ARGUMENT, "another rank failed");
  return hand_open(x);
}

/* The generated code and the hand-written op raced (collective); their medians in tm[0], tm[1]. */
static loom_result_t lang_race(const lang_args_t *a, lang_run_t *x, cudaStream_t s, loom_bench_time_t tm[2]) {
  loom_bench_op_fn ops[2] = {gen_call, hand_call};
  void *args[2] = {x, x};
  LOOM_BENCH_TRY(loom_bench_time_ranks_side_by_side(x->nccl, s, a->o.warmup, a->o.reps, 2, ops, args, tm));
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

static int lang_case_bench(const lang_args_t *a, loom_rank_ctx_t *ctx, loom_comm_t comm, cudaStream_t s,
                           loom_bench_table_t *t, const int *col, const lang_case_t *c) {
  lang_run_t x;
  memset(&x, 0, sizeof x);
  x.c = c, x.bind = case_bind(a, c), x.comm = comm, x.nccl = ctx->nccl, x.rank = ctx->rank, x.W = ctx->size;
  loom_result_t r = lang_prepare(&x, s);
  int64_t wrong = -1, failed = 0;
  if (r == LOOM_SUCCESS && a->o.check) r = c->check_hand ? check_hand(&x, s, &wrong) : check_interp(&x, s, &wrong);
  agree(&x, r, s, &failed);
  loom_bench_time_t tm[2];
  if (!failed) agree(&x, lang_race(a, &x, s, tm), s, &failed);
  if (!failed && wrong >= 0 && loom_bench_sum_ranks(ctx->nccl, s, &wrong) != LOOM_SUCCESS) failed = 1;
  const int failures = ctx->rank == 0 ? lang_row(a, t, col, &x, tm, wrong, failed != 0) : 0;
  cudaStreamSynchronize(s);
  run_release(&x);
  return failures;
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
  for (int i = 0; i < lang_case_count(); ++i)
    if (!a->only || a->only == lang_case(i)) failures += lang_case_bench(a, ctx, comm, s, &t, col, lang_case(i));
  if (ctx->rank == 0) {
    loom_bench_note(&t, "fused(us) = the generated code (loom_prog_compile of the case's schedule, loom_prog_run); "
                        "hand(us) = loom's hand-written op on the same sizes; hand/gen > 1: generated faster");
    loom_bench_note(&t, "cold = NVRTC, no cache; disk = the disk cache (memory cache emptied); warm = the memory "
                        "cache: loom_prog_compile's kernel time (the note: each whole compile, cold / disk / warm)");
    loom_bench_note(&t, "#wrong: ar_norm, gemm_bias against the hand-written op's outputs, adam, lamb against the "
                        "interpreter; relative to max(1, |ref|), bound 6e-2 (bf16), 2e-4 (fp32)");
    if (a->peer_json[0])
      loom_bench_note(&t, "peer(us): PyTorch's code for the case (bench/peers/lang_torch.py, this job): %.80s",
                      a->peer_json);
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

LOOM_BENCH(lang, "loom programs' generated code vs loom's hand-written ops (AllReduce+RMSNorm, Adam, LAMB, GEMM+bias); "
                 "compile times cold / disk / warm") {
  lang_args_t a;
  memset(&a, 0, sizeof a);
  a.peer = 1;
  const int rc = loom_bench_parse(&a.o, argc, argv, lang_opt, &a);
  if (rc != LOOM_BENCH_RUN) return rc;
  if (a.list) return lang_list(&a);
  const int world = loom_bench_world(&a.o, 1);
  if (world == 0) return 1;
  lang_peer(&a, world);
  return loom_bench_launch(&a.o, world, lang_rank, &a) ? 1 : 0;
}
