/*
 * check.cuh - the check that ends a dev program (dev/<area>/<name>.cu) on the
 * first failed call, naming the call, its file and line and the error:
 *
 *   CK(cuda call)   a cudaError_t other than cudaSuccess
 *   LK(loom call)   a loom_result_t other than LOOM_SUCCESS (loom_last_error)
 *
 * Dev programs are probes and kernel benchmarks, not library code: they
 * exit(1); the library returns its errors.
 */
#ifndef LOOM_DEV_COMMON_CHECK_CUH
#define LOOM_DEV_COMMON_CHECK_CUH

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "loom.h"

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)

#define LK(x)                                                                        \
  do {                                                                               \
    loom_result_t r_ = (x);                                                          \
    if (r_ != LOOM_SUCCESS) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, loom_last_error()); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

#endif /* LOOM_DEV_COMMON_CHECK_CUH */
