/*
 * gemm_tuning.h - loom_gemm for callers inside loom that want a GEMM shape
 * tuned at its first use whatever LOOM_TUNE says (the code generator's
 * tuner, whose plans race schedules at their GEMMs' tuned tiles). Apart
 * from gemm.h so that its users need not include the kernels' header.
 */
#ifndef LOOM_GEMM_GEMM_TUNING_H
#define LOOM_GEMM_GEMM_TUNING_H

#include "loom.h"

/* loom_gemm, but a shape the tuning cache lacks is tuned first (loom_gemm_tune's
 * race on these buffers, recorded in the tuning cache), as with LOOM_TUNE=1;
 * not while `stream` captures (there the model's pick runs). */
loom_result_t loom__gemm_tuning(const loom_gemm_desc_t *desc, const void *a, const void *b, void *c, const void *bias,
                                cudaStream_t stream);

#endif /* LOOM_GEMM_GEMM_TUNING_H */
