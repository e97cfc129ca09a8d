/*
 * gemm_inputs.h - GEMM operands for benchmarks: rotated input sets and the
 * sampled fp64 check of a result, shared by every suite that times GEMMs
 * (baseline, gemm, and the fused GEMM ops).
 *
 * Sets: enough [A, B, C] triples that consecutive repetitions never find
 * their inputs in L2 (loom_bench_rotation), within a memory budget. A and B
 * of set i are filled by loom_bench_fill_random from seeds derived from the
 * suite's seed and i, so the check can rebuild them on the host.
 */
#ifndef LOOM_BENCH_GEMM_INPUTS_H
#define LOOM_BENCH_GEMM_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loom_bench_gemm_set { void *a, *b, *c; } loom_bench_gemm_set_t;

typedef struct loom_bench_gemm_inputs {
  loom_gemm_desc_t d;          /* shape and dtypes of every set (b_layout may be changed later:
                                  B holds k*n elements either way) */
  loom_bench_gemm_set_t *sets; /* [nsets] */
  int nsets;
  uint64_t seed;
} loom_bench_gemm_inputs_t;

/* Allocates and fills the sets for `d` using at most min(half the free
 * device memory, budget_cap) bytes (at least one set). */
loom_result_t loom_bench_gemm_inputs_alloc(loom_bench_gemm_inputs_t *in, const loom_gemm_desc_t *d,
                                           size_t budget_cap, uint64_t seed);
void loom_bench_gemm_inputs_free(loom_bench_gemm_inputs_t *in);

/* Checks `samples` elements of set si's C (first, last, then pseudo-random)
 * computed with description d (in->d with its b_layout) against the fp64
 * reference; bound: one ulp of the output type relative, plus 1e-4 sqrt(k).
 * Returns the number out of bound, -1 if the check could not run. */
int64_t loom_bench_gemm_check(const loom_bench_gemm_inputs_t *in, const loom_gemm_desc_t *d, int si, int samples);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_BENCH_GEMM_INPUTS_H */
