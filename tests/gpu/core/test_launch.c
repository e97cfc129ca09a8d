/*
 * test_launch.c - the multi-rank launcher (tools/common/launch.c) fails a
 * test in bounded time when a rank crashes, hangs or fails, instead of
 * hanging the suite. Each rank gets a real NCCL comm first, so these need a
 * GPU per rank.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/test.h"
#include "support/launch.h"

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int rank_last_crashes_others_hang(loom_rank_ctx_t *ctx, void *arg) {
  if (ctx->rank == ctx->size - 1) raise(SIGSEGV);
  sleep(600);
  return 0;
}

static int rank_all_hang(loom_rank_ctx_t *ctx, void *arg) {
  sleep(600);
  return 0;
}

static int rank_fails(loom_rank_ctx_t *ctx, void *arg) { return ctx->rank == 0 ? 1 : 0; }
static int rank_ok(loom_rank_ctx_t *ctx, void *arg) { return ctx->nccl ? 0 : 1; }

LOOM_TEST(gpu_launch_crashed_or_hung_rank_fails_in_bounded_time) {
  int n = loom_launch_gpu_count();
  if (n < 1) {
    loom_test_skip("needs a GPU");
    return;
  }
  int w = n >= 2 ? 2 : 1;
  double t0 = now_s();
  CHECK_EQ_INT(loom_launch(w, 120, rank_ok, NULL), 0);
  double ok_s = now_s() - t0;

  t0 = now_s();
  CHECK(loom_launch(w, 120, rank_last_crashes_others_hang, NULL) != 0);
  double crash_s = now_s() - t0;
  CHECK(crash_s < ok_s + 15.0); /* not the 120 s deadline: the others are ended soon after the crash */

  t0 = now_s();
  CHECK(loom_launch(w, 4, rank_all_hang, NULL) != 0);
  double hang_s = now_s() - t0;
  CHECK(hang_s < 4.0 + 5.0);

  CHECK(loom_launch(w, 120, rank_fails, NULL) != 0);
  printf("    %d rank(s): clean launch %.1f s, crashed rank detected after %.1f s, hang (4 s limit) ended after %.1f s\n",
         w, ok_s, crash_s, hang_s);
}
