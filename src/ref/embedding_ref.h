/*
 * embedding_ref.h - CPU reference (double precision) of the embedding-bag
 * pooling, its All-to-All placement and its backward scatter-add, for the
 * tests and the benchmark checks. Shapes as in loom.h's embedding block.
 */
#ifndef LOOM_REF_EMBEDDING_REF_H
#define LOOM_REF_EMBEDDING_REF_H

#include <stddef.h>
#include <stdint.h>
#include "loom.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One rank's pooling over the global batch:
 *   tables   [sum_t rows[t], D] of dtype tt (stacked)
 *   offsets  [T*B + 1], indices [offsets[T*B]], weights NULL or [same]
 *   pooled   [B, T*D] doubles: pooled[b][t*D + d]
 *   mag      NULL or [B, T*D]: sum over the bag of |w * v| (error scale)
 * Indices outside [0, rows[t]) are skipped (as the kernel does). */
void loom_ref_embedding_pool(const void *tables, loom_dtype_t tt, const int64_t *rows, int T, int D, int64_t B,
                             const int64_t *offsets, const int64_t *indices, const float *weights, int mean,
                             double *pooled, double *mag);

/* Copies rank `src`'s pooled [B, T_src*D] into the part of rank q's output
 * [Bl, T_total*D] it owns (columns from table_base*D, rows q*Bl ..). */
void loom_ref_embedding_place(const double *pooled, int T_src, int table_base, int T_total, int D, int64_t B, int W,
                              int q, double *out);

/* Backward for one rank: grad [B, T*D] doubles (this rank's tables over the
 * global batch, gathered from every rank's grad_out); table_grad [sum rows, D]
 * doubles += scale * w * grad (/ bag length for mean). */
void loom_ref_embedding_backward(const double *grad, const int64_t *rows, int T, int D, int64_t B,
                                 const int64_t *offsets, const int64_t *indices, const float *weights, int mean,
                                 double scale, double *table_grad);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_REF_EMBEDDING_REF_H */
