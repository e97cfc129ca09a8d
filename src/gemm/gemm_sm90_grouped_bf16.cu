/* gemm_sm90_grouped_bf16.cu - the sm90 grouped GEMM kernels with bf16 A and B
 * (gemm_sm90.cuh: LOOM_SM90_GROUPED; launcher: gemm_grouped_sm90.cu). */
#include "gemm/gemm_sm90.cuh"

LOOM_SM90_GROUPED(bf16)
