/*
 * case_suite.h - a table of cases run on W ranks, one comm per rank, the
 * way the collective ops' GPU tests run them (tensor-parallel, collectives,
 * optimizers, GEMM+AllReduce): loom_launch forks W ranks; each creates a
 * comm with the suite's timeout and runs the cases in order. Plans and
 * calls are collective, so after a failed case a rank stops, and its peers'
 * next call waits once for it, times out and stops too (going on would
 * make every later case wait out the timeout).
 */
#ifndef LOOM_TESTS_GPU_CASE_SUITE_H
#define LOOM_TESTS_GPU_CASE_SUITE_H

#include <stddef.h>

#include "loom.h"
#include "support/launch.h"

/* One case: nonzero when it failed (loom_test_failures grew). */
typedef int (*loom_case_fn)(loom_rank_ctx_t *ctx, loom_comm_t comm, const void *one_case);

typedef struct loom_case_suite {
  const void *cases; /* cases[0 .. n-1], each `stride` bytes */
  size_t stride;
  int n;
  int timeout_ms;    /* loom_config_t.timeout_ms of each rank's comm */
  loom_case_fn run;
} loom_case_suite_t;

/* Runs the suite on W ranks (loom_launch with a limit of launch_timeout_s)
 * and checks that every rank passed. */
void loom_case_suite_run(int W, int launch_timeout_s, const loom_case_suite_t *su);

#endif /* LOOM_TESTS_GPU_CASE_SUITE_H */
