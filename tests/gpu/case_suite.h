/*
 * case_suite.h - a table of cases run on W ranks, one comm per rank, the
 * way the collective ops' GPU tests run them (tensor-parallel, collectives,
 * optimizers, GEMM+AllReduce, MoE): loom_launch forks W ranks (one GPU
 * each), or loom_launch_world runs them as W threads of one process on one
 * GPU (a loom world); each rank creates a comm with the suite's timeout and
 * runs the cases in order. Plans and calls are collective, so after a
 * failed case a rank stops, and its peers' next call waits once for it,
 * times out and stops too (going on would make every later case wait out
 * the timeout). In a world a failed check counts for the whole test, so
 * every rank sees it after its own case and stops there.
 * LOOM_TEST_CASES ("10", "3,10-12") runs only those case indices.
 */
#ifndef LOOM_TESTS_GPU_CASE_SUITE_H
#define LOOM_TESTS_GPU_CASE_SUITE_H

#include <stddef.h>

#include "loom.h"
#include "support/launch.h"

/* One case: nonzero when it failed (loom_test_failures grew). */
typedef int (*loom_case_fn)(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *one_case);

/* In a world of W ranks with `sms` SMs per rank: 1 for a case the world
 * does not run (a path it refuses, such as one needing NCCL, or a knob
 * above a rank's share of the SMs); every rank decides alike. */
typedef int (*loom_case_world_skip_fn)(const void *one_case, int W, int sms);

typedef struct loom_case_suite {
  const void *cases; /* cases[0 .. n-1], each `stride` bytes */
  size_t stride;
  int n;
  int timeout_ms;    /* loom_config_t.timeout_ms of each rank's comm */
  loom_case_fn run;
  loom_case_world_skip_fn world_skip; /* NULL: a world runs every case */
} loom_case_suite_t;

/* Runs the suite on W ranks (loom_launch with a limit of launch_timeout_s)
 * and checks that every rank passed. */
void loom_case_suite_run(int W, int launch_timeout_s, const loom_case_suite_t *su);

/* The same as a world of W ranks on GPU 0 (loom_launch_world), without the
 * cases su->world_skip leaves out; checks that every rank passed and that
 * at least one case ran. */
void loom_case_suite_run_world(int W, int launch_timeout_s, const loom_case_suite_t *su);

/* Tests name_w2, name_w3, name_w4 and name_w8 (tests/common/test.h's
 * LOOM_TEST), each calling run(W, ...): a suite in worlds of those sizes,
 * each size its own test (process). Names carry "world" so that
 * `loom-test-gpu world` selects them. */
#define LOOM_WORLD_TESTS(name, run, ...)          \
  LOOM_TEST(name##_w2) { run(2, __VA_ARGS__); } \
  LOOM_TEST(name##_w3) { run(3, __VA_ARGS__); } \
  LOOM_TEST(name##_w4) { run(4, __VA_ARGS__); } \
  LOOM_TEST(name##_w8) { run(8, __VA_ARGS__); }

#endif /* LOOM_TESTS_GPU_CASE_SUITE_H */
