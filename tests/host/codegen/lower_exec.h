/*
 * lower_exec.h - the lowered form (src/lang/lower.h) run on the CPU, for
 * the host tests: every rank's buffers in host memory, the units in order,
 * each kernel unit's steps on every rank in turn (a step reads only what
 * earlier steps of every rank wrote, so running the ranks one after another
 * meets every wait), each loop's body evaluated as the generated kernel
 * evaluates it: fp32 arithmetic, inputs and stored values rounded to their
 * dtype, reductions in rank order, a Norm from its partial slots, RMSNorm /
 * LayerNorm per row; the GEMM units in double, rounded once; the COLL
 * units (a library's collective) as sums in rank order in fp32 or the
 * owner's copy. It checks the
 * lowering (geometry, index maps, materialization, steps, bodies) against
 * the interpreter on a machine without a GPU; the CUDA text emitted from
 * the same form is checked by the GPU tests.
 */
#ifndef LOOM_TESTS_LOWER_EXEC_H
#define LOOM_TESTS_LOWER_EXEC_H

#include "lang/lower.h"

/* Runs lw on inputs drawn from seed (as the interpreter draws them) and sets *maxdiff to the largest
 * |x - ref| / max(1, |ref|) of every output element every rank holds against the interpreter's results
 * of lw->p at lw->W. LOOM_SUCCESS, or the failure (out of memory, the interpreter's refusal). */
loom_result_t lower_exec_compare(const loom__lw_prog_t *lw, uint64_t seed, double *maxdiff);

#endif /* LOOM_TESTS_LOWER_EXEC_H */
