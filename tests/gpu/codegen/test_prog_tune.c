/*
 * test_prog_tune.c - loom_prog_tune on a GPU, in the one-GPU world of W
 * ranks (W = 1, and 2), on loom-bench lang's AllReduce + bias + dropout +
 * residual + RMSNorm program (support/lang_cases.h: five operations, one
 * fused kernel under its schedule `fused`):
 *  - the table: the program as written first, every candidate the search
 *    lists (depth 3, at most 24 programs) with its prediction, the own
 *    schedule `fused` run, the winner eligible and picked by the tuning
 *    rule from the medians it reports (the fastest eligible one, which
 *    replaces the default only when faster by the margin; fusing five
 *    operations into one kernel is), a rank correlation in [-1, 1]; the
 *    program as loom's ops one after another ("sequential") run, the
 *    cuBLASLt + NCCL row left out (a world has no NCCL communicator), the
 *    knob's round run (blocks per SM of the fastest candidates);
 *  - the entry: keyed to the world, the value naming the winner, in the
 *    tuning cache and in LOOM_TUNE_FILE (rank 0 writes it);
 *  - an untuned loom_prog_compile then runs the winner's program (the
 *    plan's schedule and lowered program are the entry's), a named
 *    schedule is never replaced, and the untuned plan's outputs, three
 *    calls with fresh inputs, equal the CPU interpreter's within
 *    prog_io_bound.
 *   build/tests/loom-test-gpu gpu_world_codegen_tune     (one GPU)
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp, setenv */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>

#include "codegen/prog.h"
#include "codegen/prog_tune.h"
#include "core/op.h"
#include "core/tune.h"
#include "core/tune_rule.h"
#include "support/lang_cases.h"
#include "support/launch.h"
#include "support/prog_io.h"
#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"

#define LAUNCH_TIMEOUT_S 1800
#define TUNE_BIND "R=256,C=2048"
#define MAX_ROWS 64
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)

static char g_tune_file[64]; /* LOOM_TUNE_FILE of the test */

/* A knob row's note: "knob round: raced against NAME (T us there)"; T, or -1. */
static double note_there(const loom_prog_tune_row_t *r) {
  const char *p = strrchr(r->note, '(');
  double t = -1;
  CHECK(p && strstr(p, " us there)") && sscanf(p + 1, "%lf", &t) == 1 && t > 0);
  return t;
}

/* The first round's pick a knob row raced against (named in its note). */
static const loom_prog_tune_row_t *first_pick(const loom_prog_tune_result_t *res, const loom_prog_tune_row_t *r) {
  const char *p = strstr(r->note, "raced against ");
  if (!p) return NULL;
  p += strlen("raced against ");
  for (int i = 0; i < res->n; ++i) {
    const size_t l = strlen(res->rows[i].schedule);
    if (!strncmp(p, res->rows[i].schedule, l) && p[l] == ' ') return &res->rows[i];
  }
  return NULL;
}

/* The result's rows against the tuning rule: the default first, the winner eligible, the fastest eligible
 * candidate measured, replacing the default only when faster by the margin. */
static void check_table(const loom_prog_tune_result_t *res, int rank) {
  const loom_prog_tune_row_t *row = res->rows, *w = &res->rows[res->winner];
  CHECK(res->n >= 2 && res->n <= MAX_ROWS);
  CHECK(res->winner >= 0 && res->winner < res->n);
  if (res->n < 2 || res->n > MAX_ROWS || res->winner < 0 || res->winner >= res->n) return;
  CHECK(!strcmp(row[0].schedule, "unscheduled") && row[0].eligible && row[0].measured_us > 0);
  CHECK(w->eligible && w->measured_us > 0);
  int fused = 0, sequential = 0, nccl = 0, knobs = 0;
  for (int i = 0; i < res->n; ++i) {
    if (rank == 0)
      printf("    %-12s predicted %9.2f us measured %9.2f us%s%s %s\n", row[i].schedule, row[i].predicted_us,
             row[i].measured_us, row[i].eligible ? "" : " (not eligible)", i == res->winner ? " <- winner" : "",
             row[i].note);
    if (!strcmp(row[i].schedule, "fused")) fused = row[i].own && row[i].measured_us > 0;
    if (!strcmp(row[i].schedule, "sequential")) sequential = row[i].eligible && row[i].measured_us > 0;
    if (!strcmp(row[i].schedule, "cublaslt+nccl")) /* a one-GPU world has no NCCL communicator */
      nccl = row[i].measured_us < 0 && strstr(row[i].note, "NCCL communicator") != NULL;
    knobs += strstr(row[i].schedule, "/b") != NULL && row[i].measured_us > 0;
    if (!row[i].eligible || row[i].measured_us <= 0) continue;
    /* same race: the winner is the fastest (the rule replaces the default only when faster by the
     * margin). The knob's round races its rows against the first round's pick, whose time there each
     * row's note names; two races are never compared (they differ by more than the margin under load) */
    const int knob_row = !strncmp(row[i].note, "knob", 4), knob_won = !strncmp(w->note, "knob", 4);
    if (res->winner == 0) {
      CHECK(row[i].measured_us >= (knob_row ? note_there(&row[i]) : row[0].measured_us) * (1 - LOOM_TUNE_MARGIN) *
                                      (1 - 1e-6));
    } else if (knob_row == knob_won || i == res->winner) {
      CHECK(w->measured_us <= row[i].measured_us * (1 + 1e-6));
    } else if (knob_row) { /* the first round's pick kept: no knob row faster than it there by the margin */
      CHECK(row[i].measured_us >= note_there(&row[i]) * (1 - LOOM_TUNE_MARGIN) * (1 - 1e-6));
    } else { /* a knob row won over the first round's pick, the fastest of row i's race */
      CHECK(w->measured_us <= note_there(w) * (1 - LOOM_TUNE_MARGIN) * (1 + 1e-6));
      const loom_prog_tune_row_t *pick = first_pick(res, w);
      CHECK(pick && pick->measured_us <= row[i].measured_us * (1 + 1e-6));
    }
  }
  CHECK(fused && sequential && nccl && knobs >= 1);
  if (res->winner) CHECK(w->measured_us < row[0].measured_us * (1 - LOOM_TUNE_MARGIN) * (1 + LOOM_TUNE_MARGIN));
  if (res->winner == 0)
    loom_test_fail(__FILE__, __LINE__, "the program as written (five operations, each its own pass) won");
  CHECK(isnan(res->rank_correlation) || fabs(res->rank_correlation) <= 1.0 + 1e-12);
}

/* The entry: keyed to the world, naming the winner, in the cache; in the file once rank 0 wrote it. */
static void check_entry(const loom_prog_tune_result_t *res, loom_rank_ctx_t *ctx) {
  char v[LOOM_TUNE_TEXT_BYTES], want[64];
  CHECK(strstr(res->key, " world ") != NULL);
  snprintf(want, sizeof want, "schedule=%s ", res->rows[res->winner].schedule);
  CHECK(!strncmp(res->value, want, strlen(want)));
  CHECK(loom__tune_get(res->key, v, sizeof v) && !strcmp(v, res->value));
  CHECK(loom_launch_same_u64(ctx, 1)); /* rank 0 has written the file */
  char *text = lang_read_file(g_tune_file);
  CHECK(text && strstr(text, res->key) && strstr(text, res->value));
  free(text);
}

/* An untuned compile takes the entry's program; a named schedule is kept. */
static void check_compiles(loom_comm_t comm, loom_prog_t p, const loom_prog_tune_result_t *res, loom_plan_t *plan) {
  loom_cg_state_t *st = NULL;
  loom_plan_t named = NULL;
  loom__prog_t *q = NULL;
  char why[320];
  int eq = 0;
  CHECK_LOOM_OR(loom_prog_compile(comm, p, NULL, TUNE_BIND, plan), return);
  CHECK_RESULT(loom__plan_state(*plan, "test", NULL, &loom__op_prog, (void **)&st), LOOM_SUCCESS);
  CHECK(st && !strcmp(st->tuned, res->rows[res->winner].schedule));
  loom_cg_run_t run;
  CHECK_RESULT(loom__cg_tuned_program(p, res->value, &q, &run, why, sizeof why), LOOM_SUCCESS);
  CHECK(st && q && loom_prog_equal(st->prog, q, &eq) == LOOM_SUCCESS && eq);
  loom__lang_free(q);
  CHECK_LOOM_OR(loom_prog_compile(comm, p, "fused", TUNE_BIND, &named), return);
  CHECK_RESULT(loom__plan_state(named, "test", NULL, &loom__op_prog, (void **)&st), LOOM_SUCCESS);
  CHECK(st && st->tuned[0] == 0);
  CHECK_RESULT(loom_plan_destroy(named), LOOM_SUCCESS);
}

/* Three calls of the untuned plan with fresh inputs, every output element against the interpreter. */
static void check_outputs(loom_rank_ctx_t *ctx, loom_plan_t plan, loom_prog_t p, cudaStream_t s) {
  prog_io_t b;
  memset(&b, 0, sizeof b);
  /* the bound of the program the plan compiled (typed, so its bf16 values
   * give bf16's bound; `p` as loaded is not typed) */
  loom_cg_state_t *st = NULL;
  LOOM_OK(loom__plan_state(plan, "test", NULL, &loom__op_prog, (void **)&st));
  const double bound = prog_io_bound(st->prog);
  LOOM_OK(prog_io_make(plan, &b));
  for (int call = 0; call < 3; ++call) {
    const uint64_t seed = loom_test_seed() + 7919u * (uint64_t)call;
    double d = 0;
    int bad = 0;
    CHECK(prog_io_fill(&b, ctx->rank, seed, s) == 0);
    LOOM_OK(loom_prog_run(plan, (const void *const *)b.din, b.dout, s));
    CUDA_OK(cudaStreamSynchronize(s));
    CHECK_RESULT(prog_io_check(&b, p, ctx->size, TUNE_BIND, seed, ctx->rank, bound, "tuned plan", &d, &bad),
                 LOOM_SUCCESS);
    if (bad)
      loom_test_fail(__FILE__, __LINE__, "rank %d: %d elements beyond %g (largest %g)", ctx->rank, bad, bound, d);
  }
out:
  prog_io_free(&b);
}

static int rank_tune(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int before = loom_test_failures;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  cudaStream_t s = NULL;
  loom_prog_t p = NULL;
  loom_prog_tune_row_t rows[MAX_ROWS];
  loom_prog_tune_result_t res = LOOM_PROG_TUNE_RESULT_INIT;
  res.depth = 3, res.max = 24, res.rows = rows, res.cap = MAX_ROWS;
  LOOM_OK(loom_prog_parse(lang_case_find("ar_norm")->text, "ar_norm", &p));
  LOOM_OK(loom_launch_comm_create(ctx, NULL, &comm));
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  LOOM_OK(loom_prog_tune(comm, p, TUNE_BIND, s, &res));
  check_table(&res, ctx->rank);
  if (res.n < 2 || res.n > MAX_ROWS || res.winner < 0 || res.winner >= res.n) goto out; /* (alike on every rank) */
  check_entry(&res, ctx);
  check_compiles(comm, p, &res, &plan);
  if (plan) check_outputs(ctx, plan, p, s);
out:
  if (s) cudaStreamSynchronize(s);
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (s) cudaStreamDestroy(s);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  loom_prog_destroy(p);
  return loom_test_failures != before;
}

static void run_tune(int W) {
  if (!loom_test_gpus(1)) return;
  snprintf(g_tune_file, sizeof g_tune_file, "/tmp/loom-test-tune-XXXXXX");
  const int fd = mkstemp(g_tune_file);
  CHECK(fd >= 0);
  if (fd < 0) return;
  close(fd);
  setenv("LOOM_TUNE_FILE", g_tune_file, 1);
  CHECK_EQ_INT(loom_launch_world(W, LAUNCH_TIMEOUT_S, rank_tune, NULL), 0);
  unlink(g_tune_file);
}

LOOM_TEST(gpu_world_codegen_tune_records_and_untuned_compile_takes_it_w1) { run_tune(1); }
LOOM_TEST(gpu_world_codegen_tune_records_and_untuned_compile_takes_it_w2) { run_tune(2); }
