/*
 * test_world.c - host tests of a world of ranks in one process
 * (core/world.h) on a machine without a GPU: test worlds
 * (loom__world_create_detached) whose comms are detached and whose
 * symmetric memory is host memory, each rank a thread.
 *  - the SM share of W ranks;
 *  - the in-process exchange at W = 1..16: every rank reads every rank's
 *    words of every step, in any arrival order (random delays);
 *  - comms of a world: info, loom_malloc (every rank's copy reached
 *    through loom_peer_ptr), sizes that differ, the plan agreement and the
 *    plan slices over the exchange, the tuners' maximum;
 *  - a rank that never comes: LOOM_ERR_TIMEOUT naming the step and the
 *    rank, at comm creation and at a later step; the world then fails at
 *    once; ranks in different collective calls: both named;
 *  - refusals: arguments, a second comm of a rank, a world with comms,
 *    the paths that need NCCL (sequential TP, the embedding's staged
 *    path) and the tuners.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/common/test.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/plan.h"
#include "core/world.h"
#include "ops/embedding/embedding_a2a.h"
#include "testing/hooks.h"

#define MAXT 16

typedef struct rank_arg {
  loom_world_t w;
  int rank, size;
  void *shared; /* what a test's ranks share */
} rank_arg_t;

/* Runs fn(rank) on `size` threads of world w. */
static void run_ranks(loom_world_t w, int size, void *(*fn)(void *), void *shared) {
  pthread_t th[MAXT];
  rank_arg_t a[MAXT];
  for (int r = 0; r < size; ++r) {
    a[r].w = w, a[r].rank = r, a[r].size = size, a[r].shared = shared;
    CHECK_EQ_INT(pthread_create(&th[r], NULL, fn, &a[r]), 0);
  }
  for (int r = 0; r < size; ++r) pthread_join(th[r], NULL);
}

static void sleep_us(long us) {
  struct timespec t = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&t, NULL);
}

LOOM_TEST(world_sm_share_of_each_rank) {
  for (int w = 1; w <= 16; ++w) {
    const int b = loom__world_budget(132, w, 100);
    CHECK_EQ_INT(b, 132 / w);
    CHECK(loom__world_budget(132, w, 50) == (132 / 2 / w > 0 ? 132 / 2 / w : 1));
    CHECK(b * w <= 132); /* every rank's blocks fit at once */
  }
  CHECK_EQ_INT(loom__world_budget(132, 8, 100), 16);
  CHECK_EQ_INT(loom__world_budget(2, 8, 100), 1); /* at least one */
  CHECK_EQ_INT(loom__world_budget(132, 4, 75), 24); /* LOOM_WORLD_SM_PERCENT: SMs left unclaimed */
  CHECK_EQ_INT(loom__world_budget(132, 4, 0), 33);  /* out of range: all of them */
  CHECK_EQ_INT(loom__world_budget(132, 64, 10), 1);
  loom_world_t w = NULL;
  CHECK_RESULT(loom__world_create_detached(3, 132, &w), LOOM_SUCCESS);
  CHECK_EQ_INT(loom__world_sm_budget(w), loom__world_budget(132, 3, (int)loom__param_WORLD_SM_PERCENT()));
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
}

/* CUDA_DEVICE_MAX_CONNECTIONS against the ranks' streams that can wait at once. */
LOOM_TEST(world_hardware_queues_verdict) {
  char why[640];
  CHECK_EQ_INT(loom__world_queues_verdict(2, NULL, why, sizeof why), 2); /* unset: 8 queues */
  CHECK(strstr(why, "8 hardware queues") != NULL);
  CHECK_EQ_INT(loom__world_queues_verdict(4, NULL, why, sizeof why), 1);
  CHECK(strstr(why, "side stream") != NULL && strstr(why, "CUDA_DEVICE_MAX_CONNECTIONS=32") != NULL);
  CHECK_EQ_INT(loom__world_queues_verdict(8, NULL, why, sizeof why), 0);
  CHECK(strstr(why, "no launch starts") != NULL && strstr(why, "for 8 ranks") != NULL);
  CHECK_EQ_INT(loom__world_queues_verdict(8, "32", why, sizeof why), 2);
  CHECK_EQ_INT(loom__world_queues_verdict(15, "32", why, sizeof why), 2);
  CHECK_EQ_INT(loom__world_queues_verdict(16, "32", why, sizeof why), 1);
  CHECK_EQ_INT(loom__world_queues_verdict(31, "32", why, sizeof why), 1);
  CHECK_EQ_INT(loom__world_queues_verdict(32, "32", why, sizeof why), 0);
  CHECK_EQ_INT(loom__world_queues_verdict(64, "32", why, sizeof why), 0);
  /* not a value CUDA takes: its default */
  static const char *bad[] = {"", "x", "64", "0", "-3", "16x"};
  for (int i = 0; i < 6; ++i) {
    CHECK_EQ_INT(loom__world_queues_verdict(4, bad[i], why, sizeof why), 1);
    CHECK(strstr(why, "8 hardware queues") != NULL);
  }
  CHECK_EQ_INT(loom__world_queues_verdict(1, "3", NULL, 0), 2);
}

/* ---- the exchange ---------------------------------------------------------- */

#define STEPS 300

static void *exchange_rank(void *p) {
  const rank_arg_t *a = (const rank_arg_t *)p;
  unsigned seed = (unsigned)(a->rank * 7919 + a->size);
  uint64_t all[MAXT * LOOM_WORLD_WORDS];
  for (int s = 0; s < STEPS; ++s) {
    const int n = 1 + s % LOOM_WORLD_WORDS;
    uint64_t mine[LOOM_WORLD_WORDS];
    for (int i = 0; i < n; ++i) mine[i] = ((uint64_t)a->rank << 32) | ((uint64_t)s << 4) | (uint64_t)i;
    if (rand_r(&seed) % 4 == 0) sleep_us(rand_r(&seed) % 200); /* arrivals in any order */
    if (loom__world_exchange(a->w, a->rank, LOOM_WORLD_AGREE, "a test step", 10000, mine, n, all) != LOOM_SUCCESS) {
      loom_test_fail(__FILE__, __LINE__, "rank %d step %d: %s", a->rank, s, loom_last_error());
      return NULL;
    }
    for (int q = 0; q < a->size; ++q)
      for (int i = 0; i < n; ++i)
        if (all[q * n + i] != (((uint64_t)q << 32) | ((uint64_t)s << 4) | (uint64_t)i)) {
          loom_test_fail(__FILE__, __LINE__, "rank %d step %d: rank %d's word %d is %llx", a->rank, s, q, i,
                         (unsigned long long)all[q * n + i]);
          return NULL;
        }
  }
  return NULL;
}

LOOM_TEST(world_exchange_every_rank_reads_every_rank_w1_to_w16) {
  for (int w = 1; w <= MAXT; ++w) {
    loom_world_t world = NULL;
    CHECK_RESULT(loom__world_create_detached(w, 132, &world), LOOM_SUCCESS);
    if (!world) return;
    run_ranks(world, w, exchange_rank, NULL);
    CHECK_RESULT(loom_world_destroy(world), LOOM_SUCCESS);
  }
}

/* ---- comms of a world ---------------------------------------------------- */

static loom_comm_t make_comm(const rank_arg_t *a, int timeout_ms) {
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms, cfg.workspace_bytes = 1 << 20;
  loom_comm_t c = NULL;
  CHECK_RESULT(loom_comm_create_in_world(a->w, a->rank, &cfg, &c), LOOM_SUCCESS);
  return c;
}

/* loom_malloc: every rank's copy through loom_peer_ptr holds what its rank
 * wrote; sizes that differ are refused on every rank. */
static void world_memory(const rank_arg_t *a, loom_comm_t c) {
  char *mine = NULL;
  CHECK_RESULT(loom_malloc(c, 4096, (void **)&mine), LOOM_SUCCESS);
  if (!mine) return;
  memset(mine, 'a' + a->rank, 4096);
  CHECK_RESULT(loom__comm_fence(c), LOOM_SUCCESS); /* every rank wrote before any reads */
  for (int q = 0; q < a->size; ++q) {
    char *theirs = NULL;
    CHECK_RESULT(loom_peer_ptr(c, mine + 100, q, (void **)&theirs), LOOM_SUCCESS);
    if (q == a->rank) CHECK(theirs == mine + 100);
    if (theirs) CHECK(theirs[0] == 'a' + q && theirs[3995] == 'a' + q);
  }
  CHECK_RESULT(loom_free(c, mine), LOOM_SUCCESS);
  void *odd = NULL;
  CHECK_RESULT(loom_malloc(c, a->rank == 1 ? 512 : 256, &odd), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("every rank must allocate the same size");
  CHECK(odd == NULL);
}

/* The agreement over the exchange: alike, a rank that differs, a rank
 * that refused; plan slices; the tuners' maximum. */
static void world_agreement(const rank_arg_t *a, loom_comm_t c) {
  CHECK_RESULT(loom__comm_agree(c, "test_agree", 42, 0, "the same"), LOOM_SUCCESS);
  CHECK_RESULT(loom__comm_agree(c, "test_agree", a->rank == 2 ? 43 : 42, 0, "the same number"),
               LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("the ranks' descriptions differ: the same number");
  if (a->rank == 1) {
    CHECK_RESULT(loom__comm_refuse(c, "test_agree", loom__fail(LOOM_ERR_INVALID_ARGUMENT, "rank 1's own reason")),
                 LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("rank 1's own reason");
  } else {
    CHECK_RESULT(loom__comm_agree(c, "test_agree", 7, 0, ""), LOOM_ERR_INVALID_ARGUMENT);
    CHECK_MSG("another rank refused its arguments");
  }
  loom_plan_t p = NULL, q = NULL;
  CHECK_RESULT(loom__test_plan(c, 4, 1000, &p), LOOM_SUCCESS);
  CHECK_RESULT(loom__test_plan(c, 4, 1000, &q), LOOM_SUCCESS);
  if (p) CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  if (q) CHECK_RESULT(loom_plan_destroy(q), LOOM_SUCCESS);
  /* another description on one rank: refused on every rank */
  CHECK_RESULT(loom__test_plan(c, a->rank == 3 ? 5 : 4, 1000, &p), LOOM_ERR_INVALID_ARGUMENT);
  float most = 0.f;
  CHECK_RESULT(loom__comm_max_ms(c, 1.5f * (float)a->rank, NULL, NULL, &most), LOOM_SUCCESS);
  CHECK(most == 1.5f * (float)(a->size - 1));
}

static void *comm_rank(void *p) {
  const rank_arg_t *a = (const rank_arg_t *)p;
  loom_comm_t c = make_comm(a, 10000);
  if (!c) return NULL;
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  CHECK_RESULT(loom_comm_get_info(c, &info), LOOM_SUCCESS);
  CHECK_EQ_INT(info.rank, a->rank);
  CHECK_EQ_INT(info.size, a->size);
  CHECK_EQ_INT(info.lsa_size, a->size);
  CHECK_EQ_INT(info.sm_count, loom__world_budget(132, a->size, (int)loom__param_WORLD_SM_PERCENT()));
  CHECK(c->ws_all_reachable == 1);
  world_memory(a, c);
  world_agreement(a, c);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  return NULL;
}

LOOM_TEST(world_comms_memory_agreement_and_plans_over_the_exchange) {
  loom_world_t w = NULL;
  CHECK_RESULT(loom__world_create_detached(4, 132, &w), LOOM_SUCCESS);
  if (!w) return;
  run_ranks(w, 4, comm_rank, NULL);
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
}

/* ---- absent ranks, mismatched calls ---------------------------------------- */

static void *absent_at_create(void *p) {
  const rank_arg_t *a = (const rank_arg_t *)p;
  if (a->rank == 3) return NULL; /* never comes */
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 300;
  loom_comm_t c = NULL;
  CHECK_RESULT(loom_comm_create_in_world(a->w, a->rank, &cfg, &c), LOOM_ERR_TIMEOUT);
  CHECK_MSG("loom_comm_create_in_world");
  CHECK_MSG("rank(s) 3 (last in nothing yet)");
  CHECK_MSG("unusable");
  CHECK(c == NULL);
  return NULL;
}

static void *absent_at_malloc(void *p) {
  const rank_arg_t *a = (const rank_arg_t *)p;
  loom_comm_t c = make_comm(a, 300);
  if (!c) return NULL;
  if (a->rank != 2) {
    void *m = NULL;
    CHECK_RESULT(loom_malloc(c, 256, &m), LOOM_ERR_TIMEOUT);
    CHECK_MSG("loom_malloc");
    CHECK_MSG("rank(s) 2 (last in the fence)");
  } else {
    sleep_us(600000); /* absent past the others' timeout */
  }
  /* the world is broken: the next collective step fails at once */
  CHECK_RESULT(loom__comm_fence(c), LOOM_ERR_TIMEOUT);
  CHECK_MSG("the world is unusable");
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS); /* frees without waiting */
  return NULL;
}

LOOM_TEST(world_absent_rank_times_out_naming_the_step_and_the_rank) {
  loom_world_t w = NULL;
  CHECK_RESULT(loom__world_create_detached(4, 132, &w), LOOM_SUCCESS);
  if (!w) return;
  run_ranks(w, 4, absent_at_create, NULL);
  /* the late rank is told at once */
  loom_comm_t late = NULL;
  CHECK_RESULT(loom_comm_create_in_world(w, 3, NULL, &late), LOOM_ERR_TIMEOUT);
  CHECK_MSG("the world is unusable");
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
  CHECK_RESULT(loom__world_create_detached(3, 132, &w), LOOM_SUCCESS);
  if (!w) return;
  run_ranks(w, 3, absent_at_malloc, NULL);
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
}

static void *mismatched(void *p) {
  const rank_arg_t *a = (const rank_arg_t *)p;
  loom_comm_t c = make_comm(a, 10000);
  if (!c) return NULL;
  void *m = NULL;
  CHECK_RESULT(a->rank == 0 ? loom_malloc(c, 256, &m) : loom__comm_fence(c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("different collective calls");
  CHECK_MSG("rank 0 is in loom_malloc, rank 1 in the fence");
  CHECK(m == NULL);
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  return NULL;
}

LOOM_TEST(world_ranks_in_different_collective_calls_are_named) {
  loom_world_t w = NULL;
  CHECK_RESULT(loom__world_create_detached(2, 132, &w), LOOM_SUCCESS);
  if (!w) return;
  run_ranks(w, 2, mismatched, NULL);
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
}

/* ---- refusals ------------------------------------------------------------ */

LOOM_TEST(world_arguments_are_checked) {
  loom_world_t w = NULL;
  CHECK_RESULT(loom_world_create(0, 0, &w), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("size=0");
  CHECK_RESULT(loom_world_create(65, 0, &w), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_world_create(2, 0, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom__world_create_detached(0, 132, &w), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_RESULT(loom_world_destroy(NULL), LOOM_ERR_INVALID_ARGUMENT);
  loom_comm_t c = NULL, c2 = NULL;
  CHECK_RESULT(loom_comm_create_in_world(NULL, 0, NULL, &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("world=NULL");
  CHECK_RESULT(loom__world_create_detached(1, 132, &w), LOOM_SUCCESS);
  if (!w) return;
  CHECK_RESULT(loom_comm_create_in_world(w, 1, NULL, &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("rank=1 is not a rank of a world of 1");
  CHECK_RESULT(loom_comm_create_in_world(w, 0, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  loom_config_t bad = LOOM_CONFIG_INIT;
  bad.timeout_ms = -1;
  CHECK_RESULT(loom_comm_create_in_world(w, 0, &bad, &c), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom_comm_create_in_world: cfg->timeout_ms=-1");
  CHECK_RESULT(loom_comm_create_in_world(w, 0, NULL, &c), LOOM_SUCCESS);
  CHECK_RESULT(loom_comm_create_in_world(w, 0, NULL, &c2), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("has a live comm already");
  CHECK_RESULT(loom_world_destroy(w), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("still has 1 comm(s)");
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  CHECK_RESULT(loom_comm_create_in_world(w, 0, NULL, &c), LOOM_SUCCESS); /* the rank may come again */
  CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
  CHECK_RESULT(loom_world_destroy(w), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("not a live loom world");
}

/* The tensor-parallel ops' sequential transfers and tuners (a one-rank
 * world: a refusal answers no agreement). */
static void world_refuses_tp(loom_comm_t c) {
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 256, d.n = 256, d.k = 256, d.b_layout = LOOM_B_NK, d.world_size = 1, d.transfer = LOOM_TP_SEQUENTIAL;
  loom_plan_t p = NULL;
  CHECK_RESULT(loom_plan_ag_gemm(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("loom_plan_ag_gemm: desc->transfer=LOOM_TP_SEQUENTIAL cannot run in a world of 1 ranks on one GPU");
  CHECK_MSG("NCCL");
  CHECK_RESULT(loom_plan_gemm_rs(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("LOOM_TP_SEQUENTIAL cannot run in a world");
  d.transfer = LOOM_TP_DECOMPOSED; /* NCCL's send, receive and reduce */
  CHECK_RESULT(loom_plan_ag_gemm(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("loom_plan_ag_gemm: desc->transfer=LOOM_TP_DECOMPOSED cannot run in a world of 1 ranks on one GPU");
  CHECK_RESULT(loom_plan_gemm_rs(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("LOOM_TP_DECOMPOSED cannot run in a world");
  d.transfer = LOOM_TP_SEQUENTIAL;
  /* GEMM+AllReduce's sequential path is loom_allreduce: not refused (a test
   * comm holds no plan) */
  CHECK_RESULT(loom_plan_gemm_ar(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK(strstr(loom_last_error(), "world") == NULL);
  /* but not through cuBLASLt, asked by name (its first use waits for every running kernel) */
  d.sequential_gemm = LOOM_TP_GEMM_CUBLASLT;
  CHECK_RESULT(loom_plan_gemm_ar(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("loom_plan_gemm_ar: desc->sequential_gemm=LOOM_TP_GEMM_CUBLASLT cannot run in a world");
  CHECK_MSG("first use");
  d.transfer = LOOM_TP_SM_COPY; /* a fused transfer: the knob is unused, nothing refused for it */
  CHECK_RESULT(loom_plan_gemm_ar(c, &d, &p), LOOM_ERR_UNSUPPORTED);
  CHECK(strstr(loom_last_error(), "world") == NULL);
  d.sequential_gemm = LOOM_TP_GEMM_AUTO;
  d.transfer = LOOM_TP_AUTO;
  CHECK_RESULT(loom_ag_gemm_tune(c, &d, NULL), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("loom_ag_gemm_tune: tuning cannot run in a world");
  CHECK_MSG("not W-rank performance");
}

/* The embedding's staged and GIN paths (they move rows through NCCL). */
static void world_refuses_embedding(loom_comm_t c) {
  static const int tpr[1] = {2};
  static const int64_t rows[2] = {100, 50};
  loom_embedding_desc_t d = LOOM_EMBEDDING_DESC_INIT;
  d.world_size = 1, d.tables_per_rank = tpr, d.rows = rows, d.dim = 64, d.global_batch = 32, d.slice_samples = 8;
  loom__emb_plan_opts_t o = LOOM__EMB_PLAN_OPTS_INIT;
  loom_plan_t p = NULL;
  o.path = LOOM_EMB_PATH_STAGED;
  CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, &o, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("the staged path (pooling, NCCL send/recv) cannot run in a world");
  o.path = LOOM_EMB_PATH_GIN;
  CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, &o, &p), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("the GIN path (ncclGin puts) cannot run in a world");
  /* the path a world runs, and AUTO's choice there */
  for (int i = 0; i < 2; ++i) {
    o.path = i ? LOOM_EMB_PATH_AUTO : LOOM_EMB_PATH_ZERO_COPY;
    CHECK_RESULT(loom__plan_embedding_a2a_opts(c, &d, &o, &p), LOOM_SUCCESS);
    loom_embedding_plan_info_t info = LOOM_EMBEDDING_PLAN_INFO_INIT;
    CHECK_RESULT(loom_embedding_a2a_plan_info(p, &info), LOOM_SUCCESS);
    CHECK_EQ_INT(info.path, LOOM_EMB_PATH_ZERO_COPY);
    CHECK_RESULT(loom_plan_destroy(p), LOOM_SUCCESS);
  }
}

LOOM_TEST(world_refuses_the_paths_that_need_nccl_and_the_tuners) {
  loom_world_t w = NULL;
  CHECK_RESULT(loom__world_create_detached(1, 132, &w), LOOM_SUCCESS);
  if (!w) return;
  loom_comm_t c = NULL;
  CHECK_RESULT(loom_comm_create_in_world(w, 0, NULL, &c), LOOM_SUCCESS);
  if (c) {
    world_refuses_tp(c);
    world_refuses_embedding(c);
    CHECK_RESULT(loom_comm_destroy(c), LOOM_SUCCESS);
  }
  CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
}
