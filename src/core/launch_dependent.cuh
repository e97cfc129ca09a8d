/*
 * launch_dependent.cuh - a kernel launched as a programmatic dependent of
 * the stream's previous kernel (sm_90 on): the launch may begin while that
 * kernel still runs, so the kernel itself must wait (griddepcontrol.wait,
 * cudaGridDependencySynchronize) before it reads anything the previous
 * kernel writes. Inside a graph capture it becomes a programmatic edge.
 * Used where loom's kernels follow each other on a stream: the
 * collectives' calls (coll_kernels.cu), the grouped GEMM behind the MoE
 * dispatch that sends its rows (gemm_grouped_sm90.cu).
 */
#ifndef LOOM_CORE_LAUNCH_DEPENDENT_CUH
#define LOOM_CORE_LAUNCH_DEPENDENT_CUH

#include <cuda_runtime.h>

/* kern<<<grid, block, smem, stream>>>(args...) with the programmatic stream
 * serialization attribute; the launch's error. */
template <typename... Params, typename... Args>
static cudaError_t loom__launch_dependent(void (*kern)(Params...), dim3 grid, dim3 block, size_t smem,
                                          cudaStream_t stream, Args... args) {
  cudaLaunchConfig_t lc = {};
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  lc.gridDim = grid, lc.blockDim = block, lc.dynamicSmemBytes = smem;
  lc.stream = stream, lc.attrs = attr, lc.numAttrs = 1;
  return cudaLaunchKernelEx(&lc, kern, args...);
}

#endif /* LOOM_CORE_LAUNCH_DEPENDENT_CUH */
