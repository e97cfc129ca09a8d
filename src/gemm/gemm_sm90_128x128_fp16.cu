/* gemm_sm90_128x128_fp16.cu - the sm90 GEMM kernels of 128 x 128 tiles with fp16 A and B
 * (gemm_sm90.cuh: one group of instantiations per translation unit). */
#include "gemm/gemm_sm90.cuh"

LOOM_SM90_GROUP(128, 128, fp16)
