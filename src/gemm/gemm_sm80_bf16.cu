/* gemm_sm80_bf16.cu - the sm80 GEMM kernels with bf16 A and B (gemm_sm80.cuh:
 * one group of instantiations per translation unit). */
#include "gemm/gemm_sm80.cuh"

LOOM_SM80_GROUP(bf16)
