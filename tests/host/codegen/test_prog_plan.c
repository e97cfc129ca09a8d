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

LOOM_TEST(codegen_wait_sites_are_named) {
  const uint32_t sites[] = {LOOM_SITE_CG_ARRIVED, LOOM_SITE_CG_READY, LOOM_SITE_CG_DONE, LOOM_SITE_CG_BLOCKS};
  for (int i = 0; i < 4; ++i) CHECK(strstr(loom__wait_site_name(sites[i]), "generated kernel") != NULL);
  CHECK_EQ_INT(loom__wait_site_clashes(), 0);
}
