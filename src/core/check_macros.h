/*
 * check_macros.h - the one definition of "return on failure" for loom code
 * and for the benchmarks' harness (src/testing/bench_api.h): each macro
 * takes the function that turns the failure into a loom_result_t with a
 * message, so the library (loom__cuda_fail: core/error.h) and the harness
 * (loom_bench_cuda_fail) share the logic and differ only in that function.
 *
 *   LOOM_CHECK_RESULT(call)         a loom_result_t failure, already described
 *   LOOM_CHECK_CUDA_WITH(fail, call) a cudaError_t call; fail(err, text, file, line)
 *   LOOM_CHECK_NCCL_WITH(fail, call) an ncclResult_t call; likewise
 */
#ifndef LOOM_CORE_CHECK_MACROS_H
#define LOOM_CORE_CHECK_MACROS_H

#define LOOM_CHECK_RESULT(call)              \
  do {                                       \
    loom_result_t loom_r_ = (call);          \
    if (loom_r_ != LOOM_SUCCESS) return loom_r_; \
  } while (0)

#define LOOM_CHECK_CUDA_WITH(fail, call)                       \
  do {                                                         \
    cudaError_t loom_e_ = (call);                              \
    if (loom_e_ != cudaSuccess)                                \
      return fail((int)loom_e_, #call, __FILE__, __LINE__);    \
  } while (0)

#define LOOM_CHECK_NCCL_WITH(fail, call)                       \
  do {                                                         \
    ncclResult_t loom_n_ = (call);                             \
    if (loom_n_ != ncclSuccess)                                \
      return fail((int)loom_n_, #call, __FILE__, __LINE__);    \
  } while (0)

#endif /* LOOM_CORE_CHECK_MACROS_H */
