/*
 * finalize.c - loom_finalize: releases what the process keeps between
 * calls, the scratch memory (core/scratch.h) and the cuBLASLt handles and
 * descriptor cache (baseline.h). It lives in the baseline layer, the
 * lowest layer that sees both.
 */
#include "baseline/baseline.h"
#include "core/scratch.h"

loom_result_t loom_finalize(void) {
  loom__scratch_release_all();
  loom__base_gemm_release();
  return LOOM_SUCCESS;
}
