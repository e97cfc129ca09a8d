/*
 * coll_ref.h - CPU references of loom's collectives (loom_allreduce,
 * loom_reduce_scatter, loom_all_gather) with their epilogues, in double
 * precision, on the exact input bytes the kernels read.
 *
 *   loom_ref_coll_reduce     y[i] = epilogue(sum over ranks of in[p][i]) for the
 *                            whole vector: the pointwise epilogue
 *                            (loom_ref_epilogue: same dropout mask as the
 *                            kernels), then, with a norm, RMSNorm / LayerNorm
 *                            of each row. AllReduce's output on every rank;
 *                            ReduceScatter's is its slice of it (the residual
 *                            given here is the full-length one).
 *   loom_ref_coll_all_gather the ranks' slices (loom__coll_slice ownership)
 *                            side by side: exact bytes.
 *   loom_ref_gemm_ar         GEMM + AllReduce (loom_gemm_ar): y[row, col] =
 *                            epilogue(sum over ranks of A_p x B_p), each
 *                            rank's product rounded once to c_type first
 *                            (as both of loom's paths do), the sum and the
 *                            epilogue (loom_ref_epilogue, element row x n +
 *                            col) in double.
 * The result is left in double (not rounded to out_type): a test compares the
 * kernel's rounded output with a bound.
 */
#ifndef LOOM_REF_COLL_REF_H
#define LOOM_REF_COLL_REF_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* in[p]: rank p's input [count] of d->dtype (p < d->world_size). epi: NULL or
 * the epilogue (bias [cols], residual [count] of d->out_type). norm_w /
 * norm_b: [cols] of d->out_type (norm_b may be NULL). out: [count]. */
void loom_ref_coll_reduce(const loom_coll_desc_t *d, const void *const *in, const loom_epilogue_t *epi,
                          const void *norm_w, const void *norm_b, double *out);

/* slices[p]: rank p's slice (its loom__coll_slice length) of d->dtype; out:
 * [count] of d->dtype (bytes copied). */
void loom_ref_coll_all_gather(const loom_coll_desc_t *d, const void *const *slices, void *out);

/* d: the local GEMM (m, n, k, dtypes, layout; has_bias ignored); a[p], b[p]:
 * rank p's A [m, k] and B (p < world); epi NULL or the epilogue (bias [n],
 * residual [m, n] of d->c_type). out: [m, n]. mag (may be NULL): [m, n]
 * the sum of the partials' magnitudes, for error bounds. */
void loom_ref_gemm_ar(const loom_gemm_desc_t *d, int world, const void *const *a, const void *const *b,
                      const loom_epilogue_t *epi, double *out, double *mag);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_REF_COLL_REF_H */
