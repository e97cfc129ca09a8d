/* case_suite.c - see case_suite.h. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/common/test.h"
#include "tests/gpu/case_suite.h"
#include "support/tool_param.h"

static int g_world_cases; /* cases rank 0 of the last world run ran */

/* 0 where LOOM_TEST_CASES ("10", "3,10-12": case indices, for chasing one
 * case's failure) leaves case i out; unset or malformed: every case. */
static int case_selected(int i) {
  const char *s = loom_tool_param("TEST_CASES");
  int any = 0, hit = 0;
  while (s && *s) {
    char *e = NULL;
    const long a = strtol(s, &e, 10);
    long b = a;
    if (e == s) return 1;
    if (*e == '-') {
      s = e + 1;
      b = strtol(s, &e, 10);
      if (e == s) return 1;
    }
    any = 1, hit |= i >= a && i <= b;
    s = *e == ',' ? e + 1 : e;
    if (*e && *e != ',') return 1;
  }
  return !any || hit;
}

/* 1 where the world leaves case i out. */
static int world_skips(const loom_case_suite_t *su, loom_rank_ctx_t *ctx, loom_comm_t comm, int i) {
  if (!ctx->world || !su->world_skip) return 0;
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  if (loom_comm_get_info(comm, &info) != LOOM_SUCCESS) return 0;
  return su->world_skip((const char *)su->cases + (size_t)i * su->stride, ctx->size, info.sm_count);
}

static int rank_suite(loom_rank_ctx_t *ctx, void *arg) {
  const loom_case_suite_t *su = (const loom_case_suite_t *)arg;
  loom_comm_t comm = NULL;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = su->timeout_ms;
  /* LOOM_TEST_TIMEOUT_MS: every case's comm timeout (shorter: a hang found sooner) */
  const char *tmo = loom_tool_param("TEST_TIMEOUT_MS");
  if (tmo && atoi(tmo) > 0) cfg.timeout_ms = atoi(tmo);
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, &cfg, &comm), return 1);
  int ran = 0;
  for (int i = 0; i < su->n; ++i) {
    if (!case_selected(i) || world_skips(su, ctx, comm, i)) continue;
    ++ran;
    if (su->run(ctx, comm, (const char *)su->cases + (size_t)i * su->stride)) {
      printf("    rank %d: stopping after case %d of %d failed\n", ctx->rank, i, su->n);
      break;
    }
  }
  if (ctx->world && ctx->rank == 0) g_world_cases = ran;
  CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures;
}

void loom_case_suite_run(int W, int launch_timeout_s, const loom_case_suite_t *su) {
  CHECK_EQ_INT(loom_launch(W, launch_timeout_s, rank_suite, (void *)su), 0);
}

void loom_case_suite_run_world(int W, int launch_timeout_s, const loom_case_suite_t *su) {
  g_world_cases = 0;
  printf("  a world of %d ranks on one GPU\n", W);
  CHECK_EQ_INT(loom_launch_world(W, launch_timeout_s, rank_suite, (void *)su), 0);
  CHECK(g_world_cases > 0);
}
