/*
 * util.h - the small helpers every layer uses.
 *
 *   LOOM_HD            a function usable from host C and device code (the
 *                      pure schedule headers: host-tested at any world size)
 *   loom__ceil_div      ceil(a / b), host and device
 *   loom__align256     a size rounded up to 256 bytes (device sub-allocations)
 *   loom__dtype_known  LOOM_FP32, LOOM_FP16 or LOOM_BF16
 */
#ifndef LOOM_CORE_UTIL_H
#define LOOM_CORE_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __CUDACC__
#define LOOM_HD static __host__ __device__ __forceinline__
#else
#define LOOM_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ceil(a / b) for a >= 0, b > 0. */
LOOM_HD int64_t loom__ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The last i in [0, n) with a[i] <= x, for a non-decreasing a[0..n) with
 * a[0] <= x (a table of first positions: the entry holding x; entries that
 * hold nothing share their start with the next one). Binary search; one
 * body for the int64 tables (the MoE receive layout) and the int32 ones
 * (the grouped GEMM's tile prefix, in shared memory). */
#define LOOM__LAST_AT_MOST(NAME, T)                       \
  LOOM_HD int64_t NAME(const T *a, int64_t n, T x) {      \
    int64_t lo = 0, hi = n - 1;                           \
    while (lo < hi) {                                     \
      const int64_t mid = lo + (hi - lo + 1) / 2;         \
      if (a[mid] <= x) lo = mid;                          \
      else hi = mid - 1;                                  \
    }                                                     \
    return lo;                                            \
  }
LOOM__LAST_AT_MOST(loom__last_at_most, int64_t)
LOOM__LAST_AT_MOST(loom__last_at_most_i32, int32_t)

/* 1 if the byte ranges [p, p + pb) and [q, q + qb) overlap (argument
 * checks: an output must not alias an input). */
static inline int loom__ranges_overlap(const void *p, size_t pb, const void *q, size_t qb) {
  const uintptr_t a = (uintptr_t)p, b = (uintptr_t)q;
  return a < b + qb && b < a + pb;
}

/* x rounded up to a multiple of 256. */
static inline size_t loom__align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* 1 for the element types loom's ops take (LOOM_FP32, LOOM_FP16, LOOM_BF16). */
static inline int loom__dtype_known(loom_dtype_t t) { return t == LOOM_FP32 || t == LOOM_FP16 || t == LOOM_BF16; }

#ifdef __cplusplus
}
#endif
#endif /* LOOM_CORE_UTIL_H */
