/*
 * emit.c - a kernel unit's CUDA C (emit.h says what the kernel does): the
 * kernel's frame, its exchanges and its steps; the loops and bodies are in
 * emit_body.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/cg_args.h"
#include "codegen/emit.h"
#include "codegen/emit_body.h"
#include "core/error.h"

uint32_t loom__cg_unit_words(const loom__lw_unit_t *u) {
  const uint32_t n = LOOM_CG_WORDS0 + LOOM__LWS_READY + 2u * (uint32_t)u->nsteps;
  return (n + 3u) & ~3u;
}

/* ---- conditions and ranks --------------------------------------------------------------- */

/* "1" or the condition that rank r is in `group` and is its rank `root` (into out). */
static const char *where(const loom__lw_geom_t *g, char *out, size_t cap, int W) {
  if (g->group < 0 && g->root < 0) snprintf(out, cap, "1");
  else if (g->root < 0) snprintf(out, cap, "(r / %d == %d)", W, g->group);
  else if (g->group < 0) snprintf(out, cap, "(q == %d)", g->root);
  else snprintf(out, cap, "(r / %d == %d && q == %d)", W, g->group, g->root);
  return out;
}

/* The ranks that do entry e, as a C condition. */
static const char *does(const loom__lw_prog_t *lw, const loom__lw_ex_t *e, char *out, size_t cap) {
  if (e->loop >= 0) return where(&lw->loops[e->loop].space, out, cap, lw->W);
  if (e->buf >= 0) return where(&lw->bufs[e->buf].geom, out, cap, lw->W);
  snprintf(out, cap, "1");
  return out;
}

/* The OR of the conditions of the entries of unit u of `kind` at `step` on `slot` (""; none). */
static void any_does(const cg_emit_t *E, int kind, int step, int slot, char *out, size_t cap) {
  out[0] = 0;
  const loom__lw_unit_t *x = E->u;
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i) {
    const loom__lw_ex_t *e = &E->lw->ex[i];
    if (e->off || e->kind != kind || e->step != step || e->slot != slot) continue;
    char c[96];
    const size_t n = strlen(out);
    snprintf(out + n, cap - n, "%s%s", n ? " || " : "", does(E->lw, e, c, sizeof c));
  }
}

/* The first rank, the number of ranks and the one to skip of pattern (arg), as C expressions. */
static void pattern_range(const loom__lw_prog_t *lw, const loom__lw_ex_t *e, char *lo, char *n, char *skip) {
  const int self_too = e->slot >= LOOM__LWS_READY; /* a step's ready: this rank's blocks too */
  snprintf(skip, 32, "%s", self_too ? "-1" : "r");
  snprintf(n, 32, "1");
  switch (e->pattern) {
    case LOOM__LWP_GROUP: snprintf(lo, 48, "base"), snprintf(n, 32, "%d", lw->W); break;
    case LOOM__LWP_ROOT: snprintf(lo, 48, "(base + %d)", e->arg); break;
    case LOOM__LWP_SRC: snprintf(lo, 48, "(r - %d)", e->arg * lw->W); break;
    case LOOM__LWP_DST: snprintf(lo, 48, "(r + %d)", e->arg * lw->W); break;
    default: snprintf(lo, 48, "r"); break; /* SELF */
  }
}

static const char *site_of(const loom__lw_ex_t *e) {
  if (e->slot == LOOM__LWS_ARRIVED) return "LOOM_SITE_CG_ARRIVED";
  if (e->slot == LOOM__LWS_DONE) return "LOOM_SITE_CG_DONE";
  return e->pattern == LOOM__LWP_SELF ? "LOOM_SITE_CG_BLOCKS" : "LOOM_SITE_CG_READY";
}

/* ---- the exchanges ----------------------------------------------------------------------- */

/* The WAITs of step s: a whole block per wait. */
static void emit_waits(cg_emit_t *E, int s) {
  const loom__lw_unit_t *x = E->u;
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i) {
    const loom__lw_ex_t *e = &E->lw->ex[i];
    if (e->off || e->kind != LOOM__LX_WAIT || e->step != s) continue;
    char c[96], lo[48], n[32], skip[32];
    pattern_range(E->lw, e, lo, n, skip);
    loom__buf_printf(E->o, "  if (%s && !loom__cg_wait(a, %du, e, %s, %s, %s, %s)) return;\n",
                     does(E->lw, e, c, sizeof c), e->slot, lo, n, skip, site_of(e));
  }
}

/* The end of step s: the blocks count in; the last sets ready[s] where some entry says so. */
static void emit_step_end(cg_emit_t *E, int s) {
  char cond[1024];
  any_does(E, LOOM__LX_SET, s, LOOM__LWS_READY + s, cond, sizeof cond);
  if (!cond[0]) return;
  loom__buf_printf(E->o, "  loom__cg_step_end(a, %du, %du, %s, e);\n",
                   LOOM_CG_WORDS0 + LOOM__LWS_READY + E->u->nsteps + s, LOOM__LWS_READY + s, cond);
}

/* The end: the last block sets done, waits for the done it needs, publishes the epoch. */
static void emit_end(cg_emit_t *E) {
  const loom__lw_unit_t *x = E->u;
  char cond[1024];
  loom__buf_printf(E->o, "  if (!loom__cg_last_block(a)) return;\n");
  any_does(E, LOOM__LX_SET, x->nsteps, LOOM__LWS_DONE, cond, sizeof cond);
  if (cond[0])
    loom__buf_printf(E->o, "  if (%s) loom__signal_store_release(loom__cg_own(a, %du), e);\n", cond,
                     LOOM_CG_WORDS0 + LOOM__LWS_DONE);
  for (int i = x->ex0; i < x->ex0 + x->nex; ++i) {
    const loom__lw_ex_t *e = &E->lw->ex[i];
    if (e->off || e->kind != LOOM__LX_WAIT || e->step != x->nsteps) continue;
    char c[96], lo[48], n[32], skip[32];
    pattern_range(E->lw, e, lo, n, skip);
    loom__buf_printf(E->o, "  if (%s)\n    for (int p = %s; p < %s + %s; ++p)\n", does(E->lw, e, c, sizeof c), lo, lo,
                     n);
    loom__buf_printf(E->o, "      if (p != r && !loom__cg_wait_one(a, %du, e, p, %s)) return;\n", e->slot, site_of(e));
  }
  loom__buf_printf(E->o, "  *(volatile uint32_t *)&ep->epoch = e;\n");
}

/* ---- the kernel ------------------------------------------------------------------------- */

loom_result_t loom__cg_emit_unit(const loom__lw_prog_t *lw, int u, char **src) {
  *src = NULL;
  const loom__lw_unit_t *x = &lw->units[u];
  if (x->kind != LOOM__LU_KERNEL) return loom__fail(LOOM_ERR_INTERNAL, "emit: unit %s is no kernel", x->name);
  if (lw->R > LOOM_CG_MAX_RANKS || lw->ninputs + lw->noutputs > LOOM_CG_MAX_PTRS)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "emit: %d ranks and %d inputs and outputs; generated kernels take at "
                      "most %d ranks and %d buffers", lw->R, lw->ninputs + lw->noutputs, LOOM_CG_MAX_RANKS,
                      LOOM_CG_MAX_PTRS);
  loom__buf_t o = {0};
  cg_emit_t E = {lw, x, &o, 1};
  char cond[1024];
  loom__buf_printf(&o, "/* loom: a generated kernel (W = %d ranks per group, %d groups; %d steps) */\n", lw->W, lw->G,
                   x->nsteps);
  loom__buf_printf(&o, "#include \"codegen/cg_device.cuh\"\n\n");
  loom__buf_printf(
      &o, "extern \"C\" __global__ void __launch_bounds__(%d) %s(const __grid_constant__ loom_cg_args_t a) {\n",
      LOOM_CG_THREADS, LOOM_CG_KERNEL);
  int sums = 0; /* ROW and SUMSQ loops, and a Norm's partials read, sum over a block in shared memory */
  for (int l = x->loop0; l < x->loop0 + x->nloops; ++l) {
    sums |= lw->loops[l].kind != LOOM__LL_ELEM;
    for (int k = 0; k < lw->loops[l].nins; ++k) sums |= lw->ins[lw->loops[l].ins0 + k].kind == LOOM__LI_PARTIALS;
  }
  if (sums) loom__buf_printf(&o, "  __shared__ float loom_red[33];\n");
  loom__buf_printf(&o, "  const int r = a.dc.rank, base = r / %d * %d, q = r - base;\n", lw->W, lw->W);
  loom__buf_printf(&o, "  (void)q;\n");
  loom__buf_printf(&o, "  loom_dev_epoch_t *ep = (loom_dev_epoch_t *)(a.dc.ws + a.sig_off);\n");
  loom__buf_printf(&o, "  const uint32_t e = loom__epoch_begin(ep);\n");
  any_does(&E, LOOM__LX_SET, -1, LOOM__LWS_ARRIVED, cond, sizeof cond);
  if (cond[0]) loom__buf_printf(&o, "  if (%s) loom__cg_arrive(a, e);\n", cond);
  loom_result_t r = LOOM_SUCCESS;
  for (int s = 0; s < x->nsteps && r == LOOM_SUCCESS; ++s) {
    loom__buf_printf(&o, "  /* step %d */\n", s);
    emit_waits(&E, s);
    for (int l = x->loop0; l < x->loop0 + x->nloops && r == LOOM_SUCCESS; ++l)
      if (lw->loops[l].step == s) r = loom__cg_emit_loop(&E, l);
    emit_step_end(&E, s);
  }
  emit_end(&E);
  loom__buf_printf(&o, "}\n");
  if (r == LOOM_SUCCESS && o.oom) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "emit: out of host memory");
  if (r != LOOM_SUCCESS) free(o.s);
  else *src = o.s;
  return r;
}
