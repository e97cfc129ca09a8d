/*
 * test_baseline.c - host tests of the baselines' argument checks: the
 * cuBLASLt GEMM's minimal check (the full one is the GEMM engine's,
 * test_gemm_validate.c) and the NCCL wrappers, which refuse bad arguments
 * before calling NCCL. No GPU: pointers are fake addresses
 * that are never dereferenced.
 */
#include <stdint.h>

#include "tests/common/test.h"
#include "baseline/baseline.h"

LOOM_TEST(baseline_gemm_minimal_check) {
  /* the baseline trusts its callers' check (src/gemm) but refuses what it
   * cannot hand cuBLASLt, before it touches CUDA (fake, never-dereferenced
   * addresses) */
  const void *a = (const void *)(uintptr_t)0x10000000, *b = (const void *)(uintptr_t)0x50000000;
  void *c = (void *)(uintptr_t)0x90000000;
  const loom_gemm_desc_t good = LOOM_GEMM_DESC(64, 128, 256, LOOM_BF16, LOOM_BF16, LOOM_B_KN, 0);
  loom_gemm_desc_t d = good;
  d.m = 0;
  CHECK_RESULT(loom__base_gemm(&d, a, b, c, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_gemm: m=0");
  CHECK_RESULT(loom__base_gemm_tune(&d, a, b, c, NULL, 4, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_gemm_tune: m=0");
  CHECK_RESULT(loom__base_gemm(NULL, a, b, c, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("desc=NULL");
  d = good;
  CHECK_RESULT(loom__base_gemm(&d, a, NULL, c, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("b=(nil)");
  d.has_bias = 1;
  CHECK_RESULT(loom__base_gemm(&d, a, b, c, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("has_bias=1");
  CHECK_RESULT(loom__base_gemm_tune(&good, a, b, c, NULL, 0, NULL, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("candidates=0");
}

LOOM_TEST(baseline_collectives_check_arguments) {
  static char buf[64];
  CHECK_RESULT(loom__base_allreduce(NULL, buf, buf, 4, LOOM_BF16, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_allreduce: nccl=NULL");
  CHECK_RESULT(loom__base_allgather(NULL, buf, buf, 4, LOOM_BF16, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_allgather: nccl=NULL");
  CHECK_RESULT(loom__base_reducescatter(NULL, buf, buf, 4, LOOM_BF16, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_reducescatter: nccl=NULL");
  CHECK_RESULT(loom__base_alltoall(NULL, buf, buf, 4, LOOM_BF16, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_alltoall: nccl=NULL");
  /* a non-NULL fake comm: the dtype and buffer checks come before any NCCL call */
  ncclComm_t fake = (ncclComm_t)(uintptr_t)0x1000;
  CHECK_RESULT(loom__base_allreduce(fake, buf, buf, 4, (loom_dtype_t)5, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_allreduce: dtype=5 is unknown");
  CHECK_RESULT(loom__base_allreduce(fake, NULL, buf, 4, LOOM_FP32, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_allreduce: send=NULL with count=4");
  CHECK_RESULT(loom__base_allgather(fake, buf, NULL, 4, LOOM_FP16, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_allgather: recv=NULL with count=4");
  CHECK_RESULT(loom__base_alltoall(fake, buf, buf, 4, (loom_dtype_t)-3, NULL), LOOM_ERR_INVALID_ARGUMENT);
  CHECK_MSG("loom__base_alltoall: dtype=-3");
}
