/*
 * test_prog_plan.c - loom_prog_compile's door on test comms (no GPU): a
 * valid program is lowered, checked and compiled on every rank of a test
 * world and stops where a GPU is needed (LOOM_ERR_UNSUPPORTED, "the
 * description is valid"); what it refuses is refused on every rank with
 * the argument named: a NULL program or out, an unknown or refused
 * schedule, an unbound size, a comm whose size is no multiple of the
 * program's pipeline groups, an FP32 MatMul.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "codegen/cg_args.h"
#include "codegen/prog_tune.h"
#include "lang/lang.h"
#include "testing/hooks.h"
#include "tests/common/test.h"
#include "tests/host/lang/lang_test_util.h"

typedef struct compile_rank {
  loom_world_t world;
  int rank;
  loom_prog_t prog;
  const char *sched, *bind;
  loom_result_t r;
  char msg[512];
} compile_rank_t;

static void *compile_one(void *arg) {
  compile_rank_t *c = arg;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  c->r = loom_comm_create_in_world(c->world, c->rank, NULL, &comm);
  if (c->r == LOOM_SUCCESS) c->r = loom_prog_compile(comm, c->prog, c->sched, c->bind, &plan);
  snprintf(c->msg, sizeof c->msg, "%s", loom_last_error());
  if (plan) loom_plan_destroy(plan);
  if (comm) loom_comm_destroy(comm);
  return NULL;
}

/* Compiles prog on every rank of a test world of W ranks; each rank's result must be `want` and its
 * message hold `says`. */
static void compile_in_world(loom_prog_t prog, int W, const char *sched, const char *bind, loom_result_t want,
                             const char *says) {
  loom_world_t world;
  CHECK_RESULT(loom__world_create_detached(W, 132, &world), LOOM_SUCCESS);
  compile_rank_t c[8];
  pthread_t t[8];
  for (int r = 0; r < W; ++r) {
    c[r] = (compile_rank_t){world, r, prog, sched, bind, LOOM_SUCCESS, ""};
    pthread_create(&t[r], NULL, compile_one, &c[r]);
  }
  for (int r = 0; r < W; ++r) {
    pthread_join(t[r], NULL);
    if (c[r].r != want || !strstr(c[r].msg, says))
      loom_test_fail(__FILE__, __LINE__, "%s schedule %s at W = %d, rank %d: %d (%s); expected %d saying \"%s\"",
                     prog ? prog->name : "NULL", sched ? sched : "-", W, r, (int)c[r].r, c[r].msg, (int)want, says);
  }
  CHECK_RESULT(loom_world_destroy(world), LOOM_SUCCESS);
}

LOOM_TEST(codegen_compile_runs_the_door_to_the_gpu_and_refuses_what_it_cannot_run) {
  setenv("LOOM_CACHE_DIR", "off", 1);
  const char *valid = "cannot hold a plan"; /* loom__plan_detached: everything before the GPU passed */
  loom_prog_t mp = lang_load_example("model_parallel"), pipe = lang_load_example("pipeline");
  CHECK(mp && pipe);
  if (!mp || !pipe) return;
  compile_in_world(mp, 3, "best", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(mp, 2, NULL, "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(pipe, 4, "best", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(mp, 2, "nope", "B=2,S=3,H=8", LOOM_ERR_INVALID_ARGUMENT, "no Schedule `nope`");
  /* run names: the search's schedules, a knob, the library runners */
  compile_in_world(mp, 2, "s3", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(mp, 2, "best/b2", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(mp, 2, "unscheduled/b1", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(mp, 3, "sequential", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, valid);
  compile_in_world(mp, 2, "cublaslt+nccl", "B=2,S=3,H=8", LOOM_ERR_UNSUPPORTED, "NCCL communicator");
  compile_in_world(mp, 2, "best/b9", "B=2,S=3,H=8", LOOM_ERR_INVALID_ARGUMENT, "schedule=\"best/b9\": expected");
  compile_in_world(mp, 2, "sequential/b2", "B=2,S=3,H=8", LOOM_ERR_INVALID_ARGUMENT, "expected a schedule's name");
  compile_in_world(mp, 2, "best/", "B=2,S=3,H=8", LOOM_ERR_INVALID_ARGUMENT, "expected a schedule's name");
  compile_in_world(mp, 2, "best", "B=2,H=8", LOOM_ERR_INVALID_ARGUMENT, "`S` is not bound");
  compile_in_world(mp, 2, "best", "B=2,S=x", LOOM_ERR_INVALID_ARGUMENT, "bind `B=2,S=x`");
  compile_in_world(pipe, 3, "best", "B=2,S=3,H=8", LOOM_ERR_INVALID_ARGUMENT, "no multiple");
  compile_in_world(NULL, 2, NULL, "", LOOM_ERR_INVALID_ARGUMENT, "prog=NULL");
  loom_prog_t f32 = NULL;
  CHECK_RESULT(loom_prog_parse("Tensor a(FP32, [M, K], Sliced(1), WORLD);\nTensor b(FP32, [K, N], Sliced(0), WORLD);\n"
                               "Var c = MatMul(a, b);\nVar s = AllReduce(\"+\", c);\nExecute mm({a, b}, {s});\n",
                               "f32.loom", &f32),
               LOOM_SUCCESS);
  compile_in_world(f32, 2, NULL, "M=4,K=8,N=8", LOOM_ERR_UNSUPPORTED, "fp32 operands");
  loom_comm_t comm;
  CHECK_RESULT(loom__comm_create_detached(0, 2, 1 << 20, &comm), LOOM_SUCCESS);
  CHECK_RESULT(loom_prog_compile(comm, mp, NULL, "B=2,S=3,H=8", NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK(strstr(loom_last_error(), "out=NULL") != NULL);
  loom_comm_destroy(comm);
  loom_prog_destroy(f32);
  loom_prog_destroy(mp);
  loom_prog_destroy(pipe);
  unsetenv("LOOM_CACHE_DIR");
}

/* Untuned, a compile runs the cost model's cheapest schedule that takes the program's inputs and outputs as
 * written: every candidate the tuner lists as cheaper is refused or not eligible (Adam at W = 2: Figure 6b keeps
 * its moments on slices, so something else runs; at W = 1 it is eligible and runs). */
LOOM_TEST(codegen_untuned_compile_runs_the_cost_models_first_eligible_schedule) {
  static const struct { const char *ex, *bind; int W; } k[] = {
      {"model_parallel", "B=2,S=3,H=16", 2}, {"adam", "N=4096", 2}, {"adam", "N=4096", 1},
      {"lamb", "N=4096", 2}, {"llama_tp", "T=16,H=16,F=32", 4}};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i) {
    loom_prog_t p = lang_load_example(k[i].ex);
    CHECK(p && loom_prog_check(p) == LOOM_SUCCESS);
    if (!p) continue;
    loom__binding_t b;
    CHECK_RESULT(loom__lang_parse_bind(k[i].bind, &b), LOOM_SUCCESS);
    loom__prog_t *q = NULL;
    char name[LOOM__LANG_NAME];
    CHECK_RESULT(loom__cg_default_program(p, k[i].W, &b, 6, 200, &q, name), LOOM_SUCCESS);
    loom_cg_cands_t cs;
    CHECK_RESULT(loom__cg_tune_candidates(p, k[i].W, &b, 6, 200, &cs), LOOM_SUCCESS);
    const loom_cg_cand_t *pick = NULL;
    for (int c = 0; c < cs.n; ++c)
      if (!strcmp(cs.c[c].name, name)) pick = &cs.c[c];
    CHECK(q && pick && pick->eligible && pick->text == loom__cg_prog_hash(q, 1));
    for (int c = 0; pick && c < cs.n; ++c)
      if (cs.c[c].predicted_us < pick->predicted_us && !cs.c[c].run.lib) CHECK(!cs.c[c].eligible);
    printf("    %s at W = %d: %s (predicted %.2f us)\n", k[i].ex, k[i].W, name, pick ? pick->predicted_us : -1.0);
    if (!strcmp(k[i].ex, "adam")) CHECK((strcmp(name, "best") == 0) == (k[i].W == 1));
    loom__cg_tune_candidates_free(&cs);
    loom__lang_free(q);
    loom_prog_destroy(p);
  }
}

LOOM_TEST(codegen_wait_sites_are_named) {
  const uint32_t sites[] = {LOOM_SITE_CG_ARRIVED, LOOM_SITE_CG_READY, LOOM_SITE_CG_DONE, LOOM_SITE_CG_BLOCKS};
  for (int i = 0; i < 4; ++i) CHECK(strstr(loom__wait_site_name(sites[i]), "generated kernel") != NULL);
  CHECK_EQ_INT(loom__wait_site_clashes(), 0);
}
