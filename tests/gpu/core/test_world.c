/*
 * test_world.c - GPU tests of a loom world (W ranks as threads of one
 * process on one GPU, loom_launch_world) beyond the families' suites,
 * which run in worlds in their own files (gpu_world_*):
 *  - each rank's comm: rank, size, load/store team, its share of the SMs;
 *    symmetric memory: every rank's copy reached through loom_peer_ptr
 *    holds what its rank wrote (W = 1, 2, 3, 8);
 *  - AUTO resolves to fused transfers whatever the shape, the sequential
 *    transfer and the tuners are refused, naming the world;
 *  - one rank that never creates its comm: the others' creation gives up
 *    with LOOM_ERR_TIMEOUT naming the step and the rank (one rank that
 *    never calls an op: gpu_world_coll_absent_peer_times_out_w4 and each
 *    family's gpu_world_*_absent_peer test);
 *  - a process whose CUDA loads kernels lazily, or has too few hardware
 *    queues for the ranks' waiting streams, cannot make a world.
 * Run: build/tests/loom-test-gpu world (one GPU).
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "tests/common/test.h"
#include "support/launch.h"
#include "core/world.h"

#define LAUNCH_TIMEOUT_S 300
#define CUDA_OK(call) CHECK_CUDA_OR(call, goto out)
#define LOOM_OK(call) CHECK_LOOM_OR(call, goto out)

/* Info and symmetric memory of each rank. */
static int rank_info_and_memory(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int W = ctx->size, r = ctx->rank, fails0 = loom_test_failures;
  loom_comm_t comm = NULL;
  char *mine = NULL, *host = (char *)malloc(4096);
  int sms = 0;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  loom_comm_info_t info = LOOM_COMM_INFO_INIT;
  LOOM_OK(loom_comm_get_info(comm, &info));
  CHECK_EQ_INT(info.rank, r);
  CHECK_EQ_INT(info.size, W);
  CHECK_EQ_INT(info.lsa_rank, r);
  CHECK_EQ_INT(info.lsa_size, W);
  CHECK_EQ_INT(info.sm_count, loom__world_budget(sms, W, (int)loom__param_WORLD_SM_PERCENT()));
  LOOM_OK(loom_malloc(comm, 4096, (void **)&mine));
  CUDA_OK(cudaMemset(mine, 'a' + r, 4096));
  CUDA_OK(cudaDeviceSynchronize()); /* (no collective call is in flight here) */
  CHECK(loom_launch_same_u64(ctx, 1)); /* every rank has written its copy */
  for (int q = 0; q < W && host; ++q) {
    void *theirs = NULL;
    LOOM_OK(loom_peer_ptr(comm, mine, q, &theirs));
    if (q == r) CHECK(theirs == (void *)mine);
    CUDA_OK(cudaMemcpy(host, theirs, 4096, cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < 4096; ++i) wrong += host[i] != 'a' + q;
    if (wrong) loom_test_fail(__FILE__, __LINE__, "rank %d: %d bytes of rank %d's copy are wrong", r, wrong, q);
  }
out:
  if (mine) CHECK_RESULT(loom_free(comm, mine), LOOM_SUCCESS);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  free(host);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_world_comm_info_sm_share_and_symmetric_memory) {
  static const int sizes[4] = {1, 2, 3, 8};
  for (int i = 0; i < 4 && loom_test_gpus(1); ++i)
    CHECK_EQ_INT(loom_launch_world(sizes[i], LAUNCH_TIMEOUT_S, rank_info_and_memory, NULL), 0);
}

/* AUTO is fused in a world (shards of 32 rows: on GPUs of their own the
 * sequential path); the sequential transfer, the tuners and cuBLASLt as
 * GEMM+AllReduce's sequential GEMM are refused. */
static int rank_paths(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  const int fails0 = loom_test_failures;
  loom_comm_t comm = NULL;
  loom_plan_t plan = NULL;
  CHECK_LOOM_OR(loom_launch_comm_create(ctx, NULL, &comm), return 1);
  loom_tp_desc_t d = LOOM_TP_DESC_INIT;
  d.m = 64, d.n = 256, d.k = 256, d.b_layout = LOOM_B_NK, d.world_size = ctx->size;
  for (int rs = 0; rs < 2; ++rs) {
    LOOM_OK(rs ? loom_plan_gemm_rs(comm, &d, &plan) : loom_plan_ag_gemm(comm, &d, &plan));
    loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
    LOOM_OK(loom_tp_plan_info(plan, &info));
    CHECK(info.transfer != LOOM_TP_SEQUENTIAL && info.transfer != LOOM_TP_AUTO);
    CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
    plan = NULL;
  }
  d.transfer = LOOM_TP_SEQUENTIAL;
  CHECK_RESULT(loom_plan_ag_gemm(comm, &d, &plan), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("cannot run in a world");
  d.transfer = LOOM_TP_AUTO;
  CHECK_RESULT(loom_gemm_rs_tune(comm, &d, NULL), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("tuning cannot run in a world");
  /* GEMM+AllReduce's sequential GEMM: loom's, never cuBLASLt (its first use
   * waits for every running kernel) */
  d.transfer = LOOM_TP_SEQUENTIAL, d.c_type = LOOM_FP32;
  LOOM_OK(loom_plan_gemm_ar(comm, &d, &plan));
  {
    loom_tp_plan_info_t info = LOOM_TP_PLAN_INFO_INIT;
    LOOM_OK(loom_tp_plan_info(plan, &info));
    CHECK_EQ_INT(info.transfer, LOOM_TP_SEQUENTIAL);
    CHECK_EQ_INT(info.gemm, LOOM_TP_GEMM_LOOM);
  }
  CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  plan = NULL;
  d.sequential_gemm = LOOM_TP_GEMM_CUBLASLT;
  CHECK_RESULT(loom_plan_gemm_ar(comm, &d, &plan), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("desc->sequential_gemm=LOOM_TP_GEMM_CUBLASLT cannot run in a world");
out:
  if (plan) CHECK_RESULT(loom_plan_destroy(plan), LOOM_SUCCESS);
  if (comm) CHECK_RESULT(loom_comm_destroy(comm), LOOM_SUCCESS);
  return loom_test_failures != fails0;
}

LOOM_TEST(gpu_world_auto_is_fused_nccl_paths_and_tuners_refused_w2) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(2, LAUNCH_TIMEOUT_S, rank_paths, NULL), 0);
}

/* Rank 3 of 4 never creates its comm. */
static int rank_absent_at_create(loom_rank_ctx_t *ctx, void *arg) {
  (void)arg;
  if (ctx->rank == ctx->size - 1) return 0;
  loom_config_t cfg = LOOM_CONFIG_INIT;
  cfg.timeout_ms = 1000;
  loom_comm_t comm = NULL;
  CHECK_RESULT(loom_launch_comm_create(ctx, &cfg, &comm), LOOM_ERR_TIMEOUT);
  CHECK_MSG("loom_comm_create_in_world");
  CHECK_MSG("rank(s) 3 (last in nothing yet)");
  CHECK(comm == NULL);
  return 0;
}

LOOM_TEST(gpu_world_absent_rank_at_comm_creation_times_out_w4) {
  if (loom_test_gpus(1)) CHECK_EQ_INT(loom_launch_world(4, LAUNCH_TIMEOUT_S, rank_absent_at_create, NULL), 0);
}

LOOM_TEST(gpu_world_refused_where_kernels_load_lazily) {
  if (!loom_test_gpus(1)) return;
  setenv("CUDA_MODULE_LOADING", "LAZY", 1); /* before this process's first CUDA call */
  loom_world_t w = NULL;
  CHECK_RESULT(loom_world_create(2, 0, &w), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("CUDA_MODULE_LOADING=EAGER");
  CHECK(w == NULL);
  CHECK_RESULT(loom_world_create(2, 99, &w), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("device=99");
}

/* Too few hardware queues for the ranks' waiting streams: refused at W or
 * fewer, warned (and made) at 2 W or fewer (loom__world_queues_verdict). */
LOOM_TEST(gpu_world_refused_with_too_few_hardware_queues) {
  if (!loom_test_gpus(1)) return;
  setenv("CUDA_MODULE_LOADING", "EAGER", 1); /* before this process's first CUDA call */
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8", 1);
  loom_world_t w = NULL;
  CHECK_RESULT(loom_world_create(8, 0, &w), LOOM_ERR_UNSUPPORTED);
  CHECK_MSG("8 hardware queues (CUDA_DEVICE_MAX_CONNECTIONS) for 8 ranks");
  CHECK_MSG("CUDA_DEVICE_MAX_CONNECTIONS=32");
  CHECK(w == NULL);
  CHECK_RESULT(loom_world_create(4, 0, &w), LOOM_SUCCESS);
  if (w) CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
  CHECK_RESULT(loom_world_create(3, 0, &w), LOOM_SUCCESS);
  if (w) CHECK_RESULT(loom_world_destroy(w), LOOM_SUCCESS);
}
