/* case_suite.c - see case_suite.h. */
#include <stdio.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"

static int rank_suite(loom_rank_ctx_t *ctx, void *arg) {
  const loom_case_suite_t *su = (const loom_case_suite_t *)arg;
  loom_comm_t comm = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = su->timeout_ms;
  CHECK_LOOM_OR(loom_comm_create(ctx->nccl, &cfg, &comm), return 1);
  for (int i = 0; i < su->n; ++i)
    if (su->run(ctx, comm, (const char *)su->cases + (size_t)i * su->stride)) {
      printf("    rank %d: stopping after case %d of %d failed\n", ctx->rank, i, su->n);
      break;
    }
  CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

void loom_case_suite_run(int W, int launch_timeout_s, const loom_case_suite_t *su) {
  CHECK_EQ_INT(loom_launch(W, launch_timeout_s, rank_suite, (void *)su), 0);
}
