/*
 * test_prog_tune.c - the tuner of loom programs on the host (no GPU):
 *  - Spearman's rank correlation (a textbook case, ties, the degenerate
 *    ones);
 *  - the tuning-cache key: it names the program (any change of its text or
 *    of its Schedule sections is another key), the sizes its tensors use
 *    (order and unused symbols aside), the comm's shape and a world; it is
 *    a valid cache key however long the sizes;
 *  - the value: written, parsed, malformed values refused, the schedule it
 *    names found again (the program as written, a Schedule section, a
 *    schedule of the search), a stale one (another text) not taken;
 *  - what an untuned compile takes from the cache (loom__cg_tuned_lookup):
 *    the entry's schedule, nothing without an entry, the program as written
 *    for a stale entry;
 *  - the candidates of every example: one per schedule `loom schedules`
 *    lists, the program as written first (eligible), Adam's RS-Opt-AG
 *    (states on slices) not eligible at W = 2 but eligible at W = 1; the
 *    refusals: a Schedule section that does not apply, an FP32 MatMul the
 *    code generator refuses (the tuner then refuses the program);
 *  - loom_prog_tune's argument checks on test comms.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/prog_tune.h"
#include "core/comm.h"
#include "core/tune.h"
#include "core/world.h"
#include "testing/hooks.h"
#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"

static const char *const g_examples[] = {"model_parallel", "adam", "lamb", "llama_tp", "pipeline"};
static const char *const g_binds[] = {"B=2,S=3,H=16", "N=1000", "N=1000", "T=8,H=16,F=24", "B=2,S=3,H=16"};

LOOM_TEST(codegen_tune_rank_correlation) {
  const double x[10] = {106, 86, 100, 101, 99, 103, 97, 113, 112, 110}; /* a textbook case: rho = -29/165 */
  const double y[10] = {7, 0, 27, 50, 28, 29, 20, 12, 6, 17};
  CHECK(fabs(loom__rank_correlation(x, y, 10) - (-29.0 / 165.0)) < 1e-12);
  const double a[4] = {1, 2, 3, 4}, b[4] = {1, 1, 2, 2}, c[4] = {40, 30, 20, 10}, d[4] = {5, 5, 5, 5};
  CHECK(fabs(loom__rank_correlation(a, b, 4) - 4.0 / sqrt(20.0)) < 1e-12); /* ties: mean ranks */
  CHECK(fabs(loom__rank_correlation(a, a, 4) - 1.0) < 1e-12);
  CHECK(fabs(loom__rank_correlation(a, c, 4) + 1.0) < 1e-12);
  CHECK(fabs(loom__rank_correlation(x, x, 10) - 1.0) < 1e-12);
  CHECK(isnan(loom__rank_correlation(a, d, 4))); /* one side all tied */
  CHECK(isnan(loom__rank_correlation(a, b, 1)));
  const double n[2] = {1, NAN};
  CHECK(isnan(loom__rank_correlation(a, n, 2)));
}

/* The key of text+bind on shape s (the program parsed and checked). */
static void key_of(const char *text, const char *bind, const loom_cg_tune_shape_t *s, char *key, size_t cap) {
  loom_prog_t p = NULL;
  loom__binding_t b;
  key[0] = 0;
  CHECK_RESULT(loom_prog_parse(text, "k.loom", &p), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  if (p) CHECK(loom__cg_tune_key(p, &b, s, key, cap));
  loom_prog_destroy(p);
}

LOOM_TEST(codegen_tune_key_names_program_sizes_and_comm) {
  const char *text = "Tensor x(FP32, [N, K], Local, WORLD);\nVar s = AllReduce(\"+\", x);\nVar y = s * 2;\n"
                     "Execute scale({x}, {y});\n";
  const char *text2 = "Tensor x(FP32, [N, K], Local, WORLD);\nVar s = AllReduce(\"+\", x);\nVar y = s * 3;\n"
                      "Execute scale({x}, {y});\n";
  char with_sched[512];
  snprintf(with_sched, sizeof with_sched, "%sSchedule f { k = fuse(y); }\n", text);
  const loom_cg_tune_shape_t s = {2, 1, 132, 0, "sm_90a"}, w = {2, 1, 66, 1, "sm_90a"}, s4 = {4, 1, 132, 0, "sm_90a"};
  char k[8][LOOM_TUNE_TEXT_BYTES];
  key_of(text, "N=8,K=16", &s, k[0], sizeof k[0]);
  key_of(text, "Z=3,K=16,N=8", &s, k[1], sizeof k[1]); /* order and unused symbols aside */
  key_of(text, "N=8,K=32", &s, k[2], sizeof k[2]);
  key_of(text2, "N=8,K=16", &s, k[3], sizeof k[3]);
  key_of(with_sched, "N=8,K=16", &s, k[4], sizeof k[4]);
  key_of(text, "N=8,K=16", &w, k[5], sizeof k[5]);
  key_of(text, "N=8,K=16", &s4, k[6], sizeof k[6]);
  CHECK(strstr(k[0], "prog scale ") == k[0] && strstr(k[0], " W2 G1 132sm sm_90a K:16,N:8"));
  CHECK(!strcmp(k[0], k[1]));
  for (int i = 2; i < 7; ++i) CHECK(strcmp(k[0], k[i]) != 0);
  CHECK(strstr(k[5], " 66sm sm_90a world K:16,N:8") != NULL);
  CHECK(!strchr(k[0], '=')); /* a cache key */
  CHECK_RESULT(loom__tune_put(k[0], "schedule=unscheduled depth=6 max=200 text=0000000000000001"), LOOM_SUCCESS);
  /* sizes too long to spell: their hash, still a valid key */
  char many[2048] = "Tensor x(FP32, [", bind[1024] = "";
  for (int i = 0; i < 6; ++i) {
    char sym[32];
    snprintf(sym, sizeof sym, "%sLongSymbolName%d", i ? ", " : "", i);
    strcat(many, sym);
    snprintf(sym, sizeof sym, "%sLongSymbolName%d=1099511627776", i ? "," : "", i);
    strcat(bind, sym);
  }
  strcat(many, "], Local, WORLD);\nVar s = AllReduce(\"+\", x);\nExecute big({x}, {s});\n");
  key_of(many, bind, &s, k[7], sizeof k[7]);
  CHECK(strstr(k[7], " bind#") != NULL && strlen(k[7]) < LOOM_TUNE_TEXT_BYTES);
  CHECK_RESULT(loom__tune_put(k[7], "schedule=unscheduled depth=6 max=200 text=0000000000000001"), LOOM_SUCCESS);
  loom__tune_clear();
}

LOOM_TEST(codegen_tune_value_finds_its_schedule_again) {
  loom_prog_t p = lang_load_example("model_parallel");
  CHECK(p && loom_prog_check(p) == LOOM_SUCCESS);
  if (!p) return;
  char v[LOOM_TUNE_TEXT_BYTES], name[LOOM__LANG_NAME], why[320];
  int depth, max;
  uint64_t text;
  loom__found_t f;
  CHECK_RESULT(loom__lang_explore(p, 2, 50, &f), LOOM_SUCCESS);
  CHECK(f.n > 3);
  loom_prog_t best = NULL, plain = NULL, found = lang_apply_prefix(p, &f.scheds[3], f.scheds[3].n);
  CHECK_RESULT(loom_prog_schedule(p, "best", &best), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_schedule(p, NULL, &plain), LOOM_SUCCESS);
  CHECK(found && loom_prog_check(found) == LOOM_SUCCESS);
  const struct { const char *name; loom_prog_t q; int depth; } want[3] = {
      {"unscheduled", plain, 6}, {"best", best, 6}, {f.scheds[3].name, found, 2}};
  for (int i = 0; i < 3 && found; ++i) {
    loom__cg_tune_value(want[i].name, want[i].depth, 50, loom__cg_prog_hash(want[i].q, 1), v, sizeof v);
    CHECK_RESULT(loom__cg_tune_parse_value(v, name, &depth, &max, &text), LOOM_SUCCESS);
    CHECK(!strcmp(name, want[i].name) && depth == want[i].depth && max == 50);
    loom__prog_t *q = NULL;
    loom_cg_run_t run;
    CHECK_RESULT(loom__cg_tuned_program(p, v, &q, &run, why, sizeof why), LOOM_SUCCESS);
    CHECK(!strcmp(run.schedule, want[i].name) && run.lib == LOOM__LW_LIB_GEN && run.bps == 0);
    int eq = 0;
    CHECK(q && loom_prog_equal(q, want[i].q, &eq) == LOOM_SUCCESS && eq);
    loom__lang_free(q);
    /* the same name with another text: stale */
    loom__cg_tune_value(want[i].name, want[i].depth, 50, loom__cg_prog_hash(want[i].q, 1) ^ 1, v, sizeof v);
    CHECK_RESULT(loom__cg_tuned_program(p, v, &q, &run, why, sizeof why), LOOM_SUCCESS);
    CHECK(!q && strstr(why, "no longer has"));
  }
  /* a knob and the library runners: the program they run and the run */
  const struct { const char *name; loom_prog_t q; int lib, bps; } runs[3] = {
      {"best/b2", best, LOOM__LW_LIB_GEN, 2}, {"sequential", plain, LOOM__LW_LIB_LOOM, 0},
      {"cublaslt+nccl", plain, LOOM__LW_LIB_BASE, 0}};
  for (int i = 0; i < 3; ++i) {
    loom__cg_tune_value(runs[i].name, 6, 200, loom__cg_prog_hash(runs[i].q, 1), v, sizeof v);
    loom__prog_t *q = NULL;
    loom_cg_run_t run;
    CHECK_RESULT(loom__cg_tuned_program(p, v, &q, &run, why, sizeof why), LOOM_SUCCESS);
    int eq = 0;
    CHECK(q && loom_prog_equal(q, runs[i].q, &eq) == LOOM_SUCCESS && eq);
    CHECK(run.lib == runs[i].lib && run.bps == runs[i].bps);
    char back[LOOM__LANG_NAME];
    loom__cg_run_name(&run, back, sizeof back);
    CHECK(!strcmp(back, runs[i].name));
    loom__lang_free(q);
  }
  loom__cg_tune_value("best/b7", 6, 200, loom__cg_prog_hash(best, 1), v, sizeof v);
  loom__prog_t *none = NULL;
  loom_cg_run_t run;
  CHECK_RESULT(loom__cg_tuned_program(p, v, &none, &run, why, sizeof why), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("is no schedule name");
  const char *bad[] = {"", "schedule=best", "schedule=best depth=6 max=200 text=zz", "transfer=1 chunk=2 blocks=3",
                       "schedule=best depth=99 max=200 text=0000000000000001",
                       "schedule=best depth=6 max=200 text=0000000000000001 extra"};
  for (int i = 0; i < 6; ++i) {
    CHECK_RESULT(loom__cg_tune_parse_value(bad[i], name, &depth, &max, &text), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("expected \"schedule=NAME depth=D max=N text=HASH\"");
  }
  loom__lang_found_free(&f);
  loom_prog_destroy(found), loom_prog_destroy(best), loom_prog_destroy(plain), loom_prog_destroy(p);
}

LOOM_TEST(codegen_tune_untuned_compile_takes_the_entry_and_no_other) {
  loom_prog_t p = lang_load_example("model_parallel"), best = NULL;
  CHECK(p && loom_prog_check(p) == LOOM_SUCCESS && loom_prog_schedule(p, "best", &best) == LOOM_SUCCESS);
  if (!best) return;
  loom__binding_t b, b2;
  CHECK_RESULT(loom__lang_parse_bind("B=2,S=3,H=16", &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_parse_bind("B=2,S=3,H=32", &b2), LOOM_SUCCESS);
  const loom_cg_tune_shape_t s = {2, 1, 132, 0, "sm_90a"}, w = {2, 1, 66, 1, "sm_90a"};
  char key[LOOM_TUNE_TEXT_BYTES], v[LOOM_TUNE_TEXT_BYTES], name[LOOM__LANG_NAME];
  loom__prog_t *q = NULL;
  loom_cg_run_t run;
  loom__tune_clear();
  CHECK_RESULT(loom__cg_tuned_lookup(p, &b, &s, "test", &q, &run, name), LOOM_SUCCESS); /* no entry */
  CHECK(!q && !name[0]);
  CHECK(loom__cg_tune_key(p, &b, &s, key, sizeof key));
  loom__cg_tune_value("best", 6, 200, loom__cg_prog_hash(best, 1), v, sizeof v);
  CHECK_RESULT(loom__tune_put(key, v), LOOM_SUCCESS);
  CHECK_RESULT(loom__cg_tuned_lookup(p, &b, &s, "test", &q, &run, name), LOOM_SUCCESS);
  int eq = 0;
  CHECK(q && !strcmp(name, "best") && loom_prog_equal(q, best, &eq) == LOOM_SUCCESS && eq);
  loom__lang_free(q), q = NULL;
  CHECK_RESULT(loom__cg_tuned_lookup(p, &b2, &s, "test", &q, &run, name), LOOM_SUCCESS); /* other sizes */
  CHECK(!q);
  CHECK_RESULT(loom__cg_tuned_lookup(p, &b, &w, "test", &q, &run, name), LOOM_SUCCESS); /* a world */
  CHECK(!q);
  CHECK_RESULT(loom__cg_tuned_lookup(best, &b, &s, "test", &q, &run, name), LOOM_SUCCESS); /* another program */
  CHECK(!q);
  loom__cg_tune_value("best", 6, 200, 12345, v, sizeof v); /* stale: warned, as written */
  CHECK_RESULT(loom__tune_put(key, v), LOOM_SUCCESS);
  CHECK_RESULT(loom__cg_tuned_lookup(p, &b, &s, "test", &q, &run, name), LOOM_SUCCESS);
  CHECK(!q && !name[0]);
  loom__tune_clear();
  loom_prog_destroy(best), loom_prog_destroy(p);
}

/* The candidates of example ex at W with sizes bind; n: how many `loom schedules` lists. */
static void candidates(const char *ex, int W, const char *bind, loom_cg_cands_t *cs, int *listed) {
  loom_prog_t p = lang_load_example(ex);
  loom__binding_t b;
  loom__listing_t l;
  memset(cs, 0, sizeof *cs);
  *listed = -1;
  CHECK(p && loom_prog_check(p) == LOOM_SUCCESS);
  if (!p) return;
  CHECK_RESULT(loom__lang_parse_bind(bind, &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_list(p, W, &b, 3, 40, &l), LOOM_SUCCESS);
  *listed = l.n;
  loom__lang_listing_free(&l);
  CHECK_RESULT(loom__cg_tune_candidates(p, W, &b, 3, 40, cs), LOOM_SUCCESS);
  loom_prog_destroy(p);
}

static const loom_cg_cand_t *cand_named(const loom_cg_cands_t *cs, const char *name) {
  for (int i = 0; i < cs->n; ++i)
    if (!strcmp(cs->c[i].name, name)) return &cs->c[i];
  return NULL;
}

LOOM_TEST(codegen_tune_candidates_are_every_listed_schedule_the_default_first) {
  for (int e = 0; e < 5; ++e) {
    const int W = strcmp(g_examples[e], "pipeline") ? 2 : 1; /* ranks per group */
    loom_cg_cands_t cs;
    int listed;
    candidates(g_examples[e], W, g_binds[e], &cs, &listed);
    int libs = 0; /* after the listing's rows: the program as written run by the libraries */
    for (int i = listed; i < cs.n; ++i) {
      const loom_cg_cand_t *c = &cs.c[i];
      libs++;
      CHECK(c->run.lib && c->eligible && !c->own && c->q && c->text == cs.c[0].text);
      CHECK(!strcmp(c->name, c->run.lib == LOOM__LW_LIB_LOOM ? "sequential" : "cublaslt+nccl"));
    }
    for (int i = 0; i < listed && i < cs.n; ++i) CHECK(!cs.c[i].run.lib && !cs.c[i].run.bps);
    /* every example but the pipeline has a plain AllReduce or a MatMul as written */
    CHECK_EQ_INT(libs, strcmp(g_examples[e], "pipeline") ? 2 : 0);
    CHECK(cs.n > 3);
    if (cs.n < 1) continue;
    CHECK(!strcmp(cs.c[0].name, "unscheduled") && !cs.c[0].own && cs.c[0].eligible && !cs.c[0].refused);
    const loom_cg_cand_t *best = cand_named(&cs, "best");
    CHECK(best && best->own && !best->refused && best->q);
    int eligible = 0;
    for (int i = 0; i < cs.n; ++i) {
      const loom_cg_cand_t *c = &cs.c[i];
      CHECK(cand_named(&cs, c->name) == c); /* names are unique */
      CHECK(c->refused == !c->q && c->predicted_us > 0 && c->ni > 0 && c->no > 0);
      CHECK(c->eligible ? !c->note[0] : strstr(c->note, "not eligible") || c->refused);
      if (c->q) CHECK(c->text == loom__cg_prog_hash(c->q, 1));
      eligible += c->eligible;
    }
    CHECK(eligible > 1);
    printf("    %s at W = %d: %d candidates, %d eligible\n", g_examples[e], W, cs.n, eligible);
    loom__cg_tune_candidates_free(&cs);
  }
}

LOOM_TEST(codegen_tune_states_on_slices_are_eligible_only_at_one_rank) {
  loom_cg_cands_t cs;
  int listed;
  for (int W = 1; W <= 2; ++W) {
    candidates("adam", W, "N=1000", &cs, &listed);
    const loom_cg_cand_t *best = cand_named(&cs, "best"); /* Figure 6b: m and v kept on slices */
    CHECK(best && best->q && best->eligible == (W == 1));
    if (best && W == 2) CHECK(strstr(best->note, "not eligible: input") && strstr(best->note, "Sliced(0)"));
    loom__cg_tune_candidates_free(&cs);
  }
}

LOOM_TEST(codegen_tune_candidates_refused_are_kept_with_why) {
  const char *own_refused = "Tensor x(FP16, [N], Local, WORLD);\nVar s = AllReduce(\"+\", x);\nVar y = s * 2;\n"
                            "Execute f({x}, {y});\nSchedule wrong { (a, b) = split(y, AllReduceSplitRSAG); }\n"
                            "Schedule right { k = fuse(y); }\n";
  loom_prog_t p = NULL;
  loom__binding_t b;
  loom_cg_cands_t cs;
  CHECK_RESULT(loom__lang_parse_bind("N=64", &b), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_parse(own_refused, "r.loom", &p), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  CHECK_RESULT(loom__cg_tune_candidates(p, 2, &b, 2, 40, &cs), LOOM_SUCCESS);
  const loom_cg_cand_t *wrong = cand_named(&cs, "wrong"), *right = cand_named(&cs, "right");
  CHECK(wrong && wrong->refused && !wrong->q && !wrong->eligible && strstr(wrong->note, "refused: r.loom:5:"));
  CHECK(wrong == &cs.c[cs.n - 3]); /* listed last, as `loom schedules` does; then the two library runners */
  CHECK(!strcmp(cs.c[cs.n - 2].name, "sequential") && !strcmp(cs.c[cs.n - 1].name, "cublaslt+nccl"));
  CHECK(right && !right->refused && right->eligible);
  loom__cg_tune_candidates_free(&cs);
  loom_prog_destroy(p);
  /* the code generator refuses an FP32 MatMul: every candidate, the default first */
  CHECK_RESULT(loom_prog_parse("Tensor a(FP32, [M, K], Sliced(1), WORLD);\nTensor w(FP32, [K, N], Sliced(0), WORLD);\n"
                               "Var c = MatMul(a, w);\nVar s = AllReduce(\"+\", c);\nExecute mm({a, w}, {s});\n",
                               "f32.loom", &p),
               LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_check(p), LOOM_SUCCESS);
  CHECK_RESULT(loom__lang_parse_bind("M=4,K=8,N=8", &b), LOOM_SUCCESS);
  CHECK_RESULT(loom__cg_tune_candidates(p, 2, &b, 2, 40, &cs), LOOM_SUCCESS);
  CHECK(cs.n > 1);
  for (int i = 0; i < cs.n; ++i)
    CHECK(cs.c[i].refused && cs.c[i].code == LOOM_ERR_UNSUPPORTED && strstr(cs.c[i].note, "code generator refuses"));
  loom__cg_tune_candidates_free(&cs);
  loom_prog_destroy(p);
}

/* ---- loom_prog_tune's argument checks on test comms ------------------------------------------- */

typedef struct tune_rank {
  loom_world_t world;
  int rank;
  loom_prog_t prog;
  const char *bind;
  loom_prog_tune_result_t *res;
  loom_result_t r;
  char msg[512];
} tune_rank_t;

static void *tune_one(void *arg) {
  tune_rank_t *c = arg;
  loom_comm_t comm = NULL;
  c->r = loom_comm_create_in_world(c->world, c->rank, NULL, &comm);
  if (c->r == LOOM_SUCCESS) c->r = loom_prog_tune(comm, c->prog, c->bind, NULL, c->res);
  snprintf(c->msg, sizeof c->msg, "%s", loom_last_error());
  if (comm) loom_comm_destroy(comm);
  return NULL;
}

/* loom_prog_tune on every rank of a test world of W ranks: each returns `want` saying `says`. */
static void tune_in_world(loom_prog_t prog, int W, const char *bind, loom_prog_tune_result_t *res,
                          loom_result_t want, const char *says) {
  loom_world_t world;
  CHECK_RESULT(loom__world_create_detached(W, 132, &world), LOOM_SUCCESS);
  tune_rank_t c[4];
  pthread_t t[4];
  for (int r = 0; r < W; ++r) {
    c[r] = (tune_rank_t){world, r, prog, bind, res, LOOM_SUCCESS, ""};
    pthread_create(&t[r], NULL, tune_one, &c[r]);
  }
  for (int r = 0; r < W; ++r) {
    pthread_join(t[r], NULL);
    if (c[r].r != want || !strstr(c[r].msg, says))
      loom_test_fail(__FILE__, __LINE__, "rank %d of %d: %s (%s); expected %s saying \"%s\"", r, W,
                     loom_result_string(c[r].r), c[r].msg, loom_result_string(want), says);
  }
  CHECK_RESULT(loom_world_destroy(world), LOOM_SUCCESS);
}

LOOM_TEST(codegen_tune_refuses_bad_arguments_on_every_rank) {
  loom_prog_t p = lang_load_example("adam");
  CHECK(p != NULL);
  loom_prog_tune_result_t res = LOOM_PROG_TUNE_RESULT_INIT, bad = LOOM_PROG_TUNE_RESULT_INIT;
  tune_in_world(p, 2, "N=64", &res, LOOM_ERR_UNSUPPORTED, "a test comm without a GPU cannot time");
  tune_in_world(NULL, 2, "N=64", &res, LOOM_ERR_INVALID_ARGUMENT, "prog=NULL");
  tune_in_world(p, 2, "N=x", &res, LOOM_ERR_INVALID_ARGUMENT, "bind `N=x`");
  bad.struct_size = 8;
  tune_in_world(p, 2, "N=64", &bad, LOOM_ERR_INVALID_ARGUMENT, "result->struct_size=8");
  bad = res, bad.cap = 3;
  tune_in_world(p, 2, "N=64", &bad, LOOM_ERR_INVALID_ARGUMENT, "result->cap=3 with rows=");
  bad = res, bad.depth = 40;
  tune_in_world(p, 3, "N=64", &bad, LOOM_ERR_INVALID_ARGUMENT, "the search takes 0..32 moves");
  loom_prog_t pipe = lang_load_example("pipeline");
  tune_in_world(pipe, 3, "B=2,S=3,H=8", &res, LOOM_ERR_INVALID_ARGUMENT, "no multiple");
  CHECK_RESULT(loom_prog_tune(NULL, p, "N=64", NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  loom_prog_destroy(pipe);
  loom_prog_destroy(p);
}
