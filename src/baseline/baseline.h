/*
 * baseline.h - the sequential paths every fused op is compared with and
 * falls back to: cuBLASLt GEMM and NCCL collectives.
 *
 * GEMM: one cuBLASLt handle and workspace per device (LOOM_CUBLAS_WORKSPACE_BYTES),
 * a cache of matmul descriptors and the chosen algorithm per shape
 * (loom_gemm_desc_t + device). The default choice is the heuristic's first
 * algorithm; loom__base_gemm_tune times the heuristic's top candidates on the
 * given buffers, caches the fastest (what benchmarks compare against) and
 * records it in the tuning cache (core/tune.h: LOOM_TUNE_FILE where a tuner
 * saves it), where entries made later for the same shape, alignments, GPU
 * and cuBLASLt version find it.
 * Row-major loom layouts are mapped onto cuBLASLt's column-major view
 * (C^T = B^T A^T), so no data is transposed.
 *
 * Collectives: thin stream-ordered wrappers over the caller's NCCL comm;
 * counts are elements of `dtype`; reductions are sums. Arguments are checked
 * before NCCL is called (comm NULL, buffers NULL, unknown dtype, count
 * overflow): LOOM_ERR_INVALID_ARGUMENT naming them. AllGather/ReduceScatter/
 * AllReduce may run in place as NCCL allows. AlltoAll is ncclSend/ncclRecv in
 * a group: rank r sends block p ([count] elements at send + p*count) to rank
 * p and receives rank p's block r at recv + p*count; send and recv must not
 * overlap.
 */
#ifndef LOOM_CORE_BASELINE_H
#define LOOM_CORE_BASELINE_H

#include <stddef.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* C = A x B (+ bias) through cuBLASLt on `stream` (current device). The
 * caller has checked the arguments (loom__gemm_check_args, src/gemm); a
 * NULL description, pointer, dimension < 1 or unknown type is still
 * LOOM_ERR_INVALID_ARGUMENT. */
loom_result_t loom__base_gemm(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                              const void *bias, cudaStream_t stream);

/* Times up to `candidates` heuristic algorithms on these buffers by the
 * one tuning rule (core/tune_rule.h; the heuristic's first is the default;
 * synchronizes `stream`; C holds the product afterwards), caches the
 * winner for this shape, records it in the tuning cache and returns its
 * time in ms (may be NULL). Not graph-capturable. */
loom_result_t loom__base_gemm_tune(const loom_gemm_desc_t *d, const void *a, const void *b, void *c,
                                   const void *bias, int candidates, cudaStream_t stream, float *best_ms);

/* Frees the handles and cache of the calling process (loom_finalize; the
 * workspaces are core/scratch.h's). */
void loom__base_gemm_release(void);

/* Nonzero: shapes set up afterwards add the bias through C (beta = 1)
 * instead of cuBLASLt's bias epilogue, the fallback path used where no
 * algorithm takes the epilogue. Set by the test-support library's hook
 * (src/testing/hooks.h); 0 in use. */
extern int loom__base_gemm_no_bias_epilogue;

/* How many cache entries took a recorded choice (tests; under the lock). */
extern int loom__base_gemm_recorded_taken;

loom_result_t loom__base_allgather(ncclComm_t nccl, const void *send, void *recv, size_t count_per_rank,
                                   loom_dtype_t dtype, cudaStream_t stream);
loom_result_t loom__base_reducescatter(ncclComm_t nccl, const void *send, void *recv,
                                       size_t count_per_rank, loom_dtype_t dtype, cudaStream_t stream);
loom_result_t loom__base_allreduce(ncclComm_t nccl, const void *send, void *recv, size_t count,
                                   loom_dtype_t dtype, cudaStream_t stream);
loom_result_t loom__base_alltoall(ncclComm_t nccl, const void *send, void *recv, size_t count_per_peer,
                                  loom_dtype_t dtype, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_BASELINE_H */
