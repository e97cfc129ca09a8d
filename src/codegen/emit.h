/*
 * emit.h - CUDA C emitted from the lowered form (lang/lower.h): one kernel
 * per kernel unit, built on codegen/cg_device.cuh.
 *
 * The kernel of a unit of S steps, rank r (q its index in its group):
 *   e = the unit's epoch + 1 (device counter: CUDA-graph replays are calls)
 *   the start's SETs (arrived, after a system fence)
 *   per step: its WAITs (a block per wait, one thread per rank polled,
 *     bounded), its loops (grid-stride over this rank's piece; ROW: a block
 *     per row; SUMSQ: a block per partial slot), its end (every block
 *     counts in; the last sets ready[s])
 *   the end: the last block sets done, waits for the done it needs, and
 *     publishes the epoch
 * exactly as the unit's exchange list and loops say, entries left out
 * (`off`) left out: the protocol the checker proved is the one the code
 * runs. A body is the loop's SSA, one float per instruction (fp32, as
 * loom's kernels compute; float[w] where the loop runs vectors of w
 * consecutive elements: emit_body.c), element loads and stores of each
 * dtype through core/vec8.cuh (L2 loads: peers write these buffers during
 * the kernel), rounded once when stored. Sizes, offsets and constants are literals (a
 * program compiled for other sizes is another kernel); the rank, the
 * workspace offset and the buffers are arguments, so the ranks of a job
 * share one image. Names of the program's values appear nowhere, so equal
 * units of different schedules are one cache entry.
 */
#ifndef LOOM_CODEGEN_EMIT_H
#define LOOM_CODEGEN_EMIT_H

#include <stdint.h>

#include "lang/lower.h"

/* The name of every generated kernel. */
#define LOOM_CG_KERNEL "loom_cg_unit"

/* Words (uint32) of kernel unit u's epoch record, signals and counters in the workspace (a multiple of 4). */
uint32_t loom__cg_unit_words(const loom__lw_unit_t *u);

/* LOOM_CG_VEC where loop l runs vectors of consecutive elements (emit_body.c says when), else 1. */
int loom__cg_loop_width(const loom__lw_prog_t *lw, const loom__lw_loop_t *l);

/* The CUDA C of kernel unit u of lw into *src (malloc'ed). LOOM_ERR_UNSUPPORTED where the unit needs more
 * ranks or buffers than a kernel's arguments hold. */
loom_result_t loom__cg_emit_unit(const loom__lw_prog_t *lw, int u, char **src);

#endif /* LOOM_CODEGEN_EMIT_H */
