/* gemm_sm80_fp16.cu - the sm80 GEMM kernels with fp16 A and B (gemm_sm80.cuh:
 * one group of instantiations per translation unit). */
#include "gemm/gemm_sm80.cuh"

LOOM_SM80_GROUP(fp16)
