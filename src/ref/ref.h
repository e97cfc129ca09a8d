/*
 * ref.h - CPU reference implementations for tests and benchmarks, in
 * double precision, and host conversions between loom dtypes.
 *
 * Inputs are the exact bytes a kernel reads (bf16/fp16/fp32), so the
 * reference computes the same function on the same rounded inputs; only the
 * kernel's accumulation and output rounding differ from it.
 */
#ifndef LOOM_REF_H
#define LOOM_REF_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element i of a buffer of dtype t, as double. */
double loom_ref_load(loom_dtype_t t, const void *buf, size_t i);
/* Stores v (rounded to nearest even) as element i of a buffer of dtype t. */
void loom_ref_store(loom_dtype_t t, void *buf, size_t i, double v);

uint16_t loom_ref_float_to_bf16(float f);
float loom_ref_bf16_to_float(uint16_t h);
uint16_t loom_ref_float_to_fp16(float f);
float loom_ref_fp16_to_float(uint16_t h);

/* Fills n elements with uniform values in [-scale, scale) from a
 * splitmix64 stream seeded by `seed` (never zero; same seed, same data). */
void loom_ref_fill_random(loom_dtype_t t, void *buf, size_t n, uint64_t seed, double scale);

/* One element of C = A x B (+ bias) for the GEMM description d (row-major A
 * [m,k]; B [k,n] or [n,k] by d->b_layout; bias [n] of d->c_type). */
double loom_ref_gemm_element(const loom_gemm_desc_t *d, const void *a, const void *b, const void *bias,
                             int64_t row, int64_t col);

/* Rows r0 .. r0 + rows - 1 of C = A x B (no bias) into out [rows, n]: the
 * same values as loom_ref_gemm_element (fp64, summed over k in order), with
 * A's rows and B converted to fp64 once (B transposed), so that a whole
 * output's reference costs a plain fp64 product. 0, or -1 where a host
 * allocation failed (out untouched). */
int loom_ref_gemm_rows(const loom_gemm_desc_t *d, const void *a, const void *b, int64_t r0, int64_t rows,
                       double *out);

/* The pointwise epilogue (loom.h, loom_epilogue_t; NULL: identity) applied
 * in double to x at (row, col) of an output of `cols` columns of dtype
 * out_type (bias and residual read as that dtype). The dropout mask is the
 * one every kernel draws (core/pointwise.h: loom__dropout_keep). */
double loom_ref_epilogue(const loom_epilogue_t *epi, loom_dtype_t out_type, int64_t cols, double x, int64_t row,
                         int64_t col);

/* Relative error ||x - ref|| / ||ref|| over n pairs; NaN if any x is NaN. */
double loom_ref_rel_error(const double *x, const double *ref, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_REF_H */
