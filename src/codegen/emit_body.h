/*
 * emit_body.h - what emit.c and emit_body.c share: the emitter's state, and
 * the loops (emit_body.c: each loop kind's frame, the element's
 * coordinates, the body's instructions, the index of each load, the
 * stores).
 */
#ifndef LOOM_CODEGEN_EMIT_BODY_H
#define LOOM_CODEGEN_EMIT_BODY_H

#include "lang/lower.h"

typedef struct cg_emit {
  const loom__lw_prog_t *lw;
  const loom__lw_unit_t *u;
  loom__buf_t *o;
  int vec; /* the body being emitted: 1 (a float per value) or LOOM_CG_VEC (float[LOOM_CG_VEC]) */
} cg_emit_t;

/* Loop l of the unit: guarded by the ranks that run it. */
loom_result_t loom__cg_emit_loop(cg_emit_t *E, int l);

#endif /* LOOM_CODEGEN_EMIT_BODY_H */
