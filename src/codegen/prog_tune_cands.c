/*
 * prog_tune_cands.c - the candidates loom_prog_tune times (prog_tune.h):
 * every schedule `loom schedules` lists for the program, the program as
 * written first, then the program as written run by the libraries
 * (loom's collectives and GEMM one after another; cuBLASLt + NCCL), and,
 * asked for after the first race, the knob's variants of a candidate.
 *
 * Each is scheduled (a copy of the program with its statements applied,
 * typed) and lowered as code generation lowers it (loom__lw_lower: units,
 * buffers, every kernel's protocol model-checked). What the language
 * refuses (a Schedule section with a statement that does not apply) or the
 * code generator refuses (an FP32 MatMul, a protocol it cannot check) is
 * kept with the refusal: the tuner reports it and never runs it.
 *
 * Eligible: a candidate that takes the same inputs and outputs as the
 * program as written (the same names, dtypes and, on every rank, the same
 * piece: dims and offset), so that an untuned loom_prog_compile of the
 * program may run it in the program's place with the caller's buffers.
 * A schedule that keeps a state on slices (asSlice) changes what each rank
 * passes wherever W > 1: it is timed, but not eligible.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codegen/prog_tune.h"
#include "core/error.h"
#include "lang/lower.h"

/* Input (output = 0) or output i of lw: its node, its name, its buffer. */
static const loom__lw_buf_t *io_of(const loom__lw_prog_t *lw, int output, int i, int *node, const char **name) {
  *node = output ? lw->out_node[i] : lw->in_node[i];
  *name = output ? lw->out_name[i] : lw->p->nodes[*node].name;
  return &lw->bufs[lw->buf_of[*node]];
}

/* 1 where io i of a and b is the same to a caller on every rank. */
static int io_same(const loom__lw_prog_t *a, const loom__lw_prog_t *b, int output, int i) {
  int na, nb;
  const char *sa, *sb;
  const loom__lw_buf_t *x = io_of(a, output, i, &na, &sa), *y = io_of(b, output, i, &nb, &sb);
  if (strcmp(sa, sb) || x->dtype != y->dtype || x->geom.rank != y->geom.rank) return 0;
  for (int r = 0; r < a->R; ++r) {
    const int hx = loom__lw_holds(a, x, r), hy = loom__lw_holds(b, y, r);
    if (hx != hy) return 0;
    if (!hx) continue;
    int64_t dx[LOOM__LANG_RANK], dy[LOOM__LANG_RANK], ox, oy;
    loom__lw_piece(&x->geom, r % a->W, dx, &ox);
    loom__lw_piece(&y->geom, r % b->W, dy, &oy);
    if (ox != oy || memcmp(dx, dy, sizeof(int64_t) * (size_t)x->geom.rank)) return 0;
  }
  return 1;
}

/* Whether lw takes the same inputs and outputs as lw0; why[cap] says which differs where not. */
static int same_io(const loom__lw_prog_t *lw0, const loom__lw_prog_t *lw, char *why, size_t cap) {
  if (lw->ninputs != lw0->ninputs || lw->noutputs != lw0->noutputs) {
    snprintf(why, cap, "not eligible: %d inputs and %d outputs, the program as written %d and %d", lw->ninputs,
             lw->noutputs, lw0->ninputs, lw0->noutputs);
    return 0;
  }
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < (side ? lw->noutputs : lw->ninputs); ++i) {
      if (io_same(lw0, lw, side, i)) continue;
      int n0, n1;
      const char *s0, *s1;
      (void)io_of(lw0, side, i, &n0, &s0), (void)io_of(lw, side, i, &n1, &s1);
      char l0[64], l1[64];
      snprintf(why, cap, "not eligible: %s %d (`%s`) is %s, as written %s: each rank's piece differs", side ? "output"
               : "input", i, s1, loom__lang_layout_str(&lw->p->nodes[n1].ty.lay, l1, sizeof l1),
               loom__lang_layout_str(&lw0->p->nodes[n0].ty.lay, l0, sizeof l0));
      return 0;
    }
  return 1;
}

/* The whole bytes and dtypes of lw's inputs and outputs into c. */
static void io_sizes(const loom__lw_prog_t *lw, loom_cg_cand_t *c) {
  c->ni = lw->ninputs, c->no = lw->noutputs;
  for (int side = 0; side < 2; ++side)
    for (int i = 0; i < (side ? c->no : c->ni); ++i) {
      int node;
      const char *name;
      const loom__lw_buf_t *b = io_of(lw, side, i, &node, &name);
      size_t n = loom_dtype_size((loom_dtype_t)b->dtype);
      for (int d = 0; d < b->geom.rank; ++d) n *= (size_t)b->geom.dims[d];
      if (side) c->out_bytes[i] = n;
      else c->in_bytes[i] = n, c->in_dtype[i] = b->dtype;
    }
}

/* Refusal text into c (left out). */
static void refuse(loom_cg_cand_t *c, loom_result_t code, const char *what, const char *msg) {
  c->refused = 1, c->code = code;
  snprintf(c->note, sizeof c->note, "%s: %s", what, msg);
}

/* Candidate c from listing row `row` of p: scheduled, lowered at W (into *lw, which the caller frees where
 * c->q is set). A refusal is no failure; running out of memory is. */
static loom_result_t cand_make(const loom__prog_t *p, int W, const loom__binding_t *b, const loom__listed_t *row,
                               loom_cg_cand_t *c, loom__lw_prog_t *lw) {
  snprintf(c->name, sizeof c->name, "%s", row->s->name);
  c->own = row->own;
  c->predicted_us = row->cost.time_us;
  if (row->refused) return refuse(c, LOOM_ERR_INVALID_ARGUMENT, "refused", row->refused), LOOM_SUCCESS;
  loom__prog_t *q = NULL;
  LOOM_TRY(loom__lang_clone(p, &q));
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < row->s->n && r == LOOM_SUCCESS; ++i) r = loom__lang_apply(q, &row->s->stmts[i]);
  if (r == LOOM_SUCCESS) r = loom__lang_infer(q);
  if (r == LOOM_SUCCESS) r = loom__lw_lower(q, W, b, lw);
  if (r == LOOM_ERR_OUT_OF_MEMORY) return loom__lang_free(q), r;
  if (r != LOOM_SUCCESS)
    return refuse(c, r, "the code generator refuses it", loom_last_error()), loom__lang_free(q), LOOM_SUCCESS;
  if (lw->ninputs > LOOM_CG_MAX_PTRS || lw->noutputs > LOOM_CG_MAX_PTRS) {
    char m[96];
    snprintf(m, sizeof m, "%d inputs and %d outputs (at most %d each)", lw->ninputs, lw->noutputs, LOOM_CG_MAX_PTRS);
    loom__lw_free(lw);
    return refuse(c, LOOM_ERR_UNSUPPORTED, "the code generator refuses it", m), loom__lang_free(q), LOOM_SUCCESS;
  }
  c->q = q;
  c->text = loom__cg_prog_hash(q, 1);
  snprintf(c->run.schedule, sizeof c->run.schedule, "%s", c->name);
  for (int u = 0; u < lw->nunit; ++u) c->kernels += lw->units[u].kind == LOOM__LU_KERNEL;
  io_sizes(lw, c);
  return LOOM_SUCCESS;
}

/* Candidate c: candidate c0's program (a copy) with another run (its name from the run). */
static loom_result_t variant(const loom_cg_cand_t *c0, const loom_cg_run_t *run, loom_cg_cand_t *c) {
  *c = *c0;
  c->q = NULL, c->own = 0, c->run = *run;
  loom__cg_run_name(run, c->name, sizeof c->name);
  return loom__lang_clone(c0->q, &c->q);
}

/* The library runners' candidates of c[0] (the program as written): each where its lowering has a unit the
 * library runs. */
static loom_result_t lib_candidates(int W, const loom__binding_t *b, loom_cg_cands_t *out) {
  for (int lib = LOOM__LW_LIB_LOOM; lib <= LOOM__LW_LIB_BASE; ++lib) {
    loom__lw_prog_t lw;
    if (loom__lw_lower_lib(out->c[0].q, W, b, lib, &lw) != LOOM_SUCCESS) continue; /* as GEN: it lowers */
    int runs = 0;
    for (int u = 0; u < lw.nunit; ++u)
      runs += lw.units[u].kind == LOOM__LU_COLL || (lib == LOOM__LW_LIB_BASE && lw.units[u].kind == LOOM__LU_GEMM);
    loom__lw_free(&lw);
    if (!runs) continue;
    loom_cg_run_t run;
    memset(&run, 0, sizeof run);
    snprintf(run.schedule, sizeof run.schedule, "%s", lib == LOOM__LW_LIB_LOOM ? LOOM_CG_RUN_SEQUENTIAL
                                                                                 : LOOM_CG_RUN_BASELINE);
    run.lib = lib;
    LOOM_TRY(variant(&out->c[0], &run, &out->c[out->n]));
    out->n++;
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__cg_tune_knobs(loom_cg_cands_t *cs, int i, int *added) {
  *added = 0;
  int n = 0;
  for (int b = LOOM_CG_BLOCKS_PER_SM / 2; b >= 1; b /= 2) n++;
  loom_cg_cand_t *c = realloc(cs->c, sizeof *c * (size_t)(cs->n + n));
  if (!c) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_prog_tune: out of host memory");
  cs->c = c;
  for (int b = LOOM_CG_BLOCKS_PER_SM / 2; b >= 1; b /= 2) {
    loom_cg_run_t run = cs->c[i].run;
    run.bps = b;
    LOOM_TRY(variant(&cs->c[i], &run, &cs->c[cs->n]));
    cs->n++, (*added)++;
  }
  return LOOM_SUCCESS;
}

/* The listing's rows in the tuner's order: the unscheduled program (no statement, not the program's own)
 * first, then the listing's order. */
static void order_rows(const loom__listing_t *l, int *order) {
  int n = 1;
  order[0] = 0;
  for (int i = 0; i < l->n; ++i)
    if (!l->rows[i].own && l->rows[i].s->n == 0) order[0] = i;
  for (int i = 0; i < l->n; ++i)
    if (i != order[0]) order[n++] = i;
}

loom_result_t loom__cg_tune_candidates(loom__prog_t *p, int W, const loom__binding_t *b, int depth, int max,
                                       loom_cg_cands_t *out) {
  memset(out, 0, sizeof *out);
  loom__listing_t l;
  LOOM_TRY(loom__lang_list(p, W, b, depth, max, &l));
  int *order = malloc(sizeof(int) * (size_t)(l.n + 1));
  out->c = calloc((size_t)l.n + 3, sizeof *out->c); /* the listing's, the library runners' */
  loom_result_t r = order && out->c ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom_prog_tune: out of host "
                                                                "memory for %d candidates", l.n);
  if (r == LOOM_SUCCESS) order_rows(&l, order);
  loom__lw_prog_t lw0;
  int have0 = 0;
  for (int k = 0; k < l.n && r == LOOM_SUCCESS; ++k) {
    loom_cg_cand_t *c = &out->c[out->n++];
    loom__lw_prog_t lw;
    r = cand_make(p, W, b, &l.rows[order[k]], c, k == 0 ? &lw0 : &lw);
    if (r != LOOM_SUCCESS || !c->q) continue;
    if (k == 0) {
      have0 = 1, c->eligible = 1;
      continue;
    }
    c->eligible = have0 && same_io(&lw0, &lw, c->note, sizeof c->note);
    if (!have0) snprintf(c->note, sizeof c->note, "not eligible: the program as written does not run here");
    loom__lw_free(&lw);
  }
  if (have0) loom__lw_free(&lw0);
  if (r == LOOM_SUCCESS && have0) r = lib_candidates(W, b, out);
  free(order);
  loom__lang_listing_free(&l);
  if (r != LOOM_SUCCESS) loom__cg_tune_candidates_free(out);
  return r;
}

loom_result_t loom__cg_default_program(loom__prog_t *p, int W, const loom__binding_t *b, int depth, int max,
                                       loom__prog_t **out, char name[LOOM__LANG_NAME]) {
  *out = NULL;
  snprintf(name, LOOM__LANG_NAME, "unscheduled");
  loom__lw_prog_t lw0;
  LOOM_TRY(loom__lw_lower(p, W, b, &lw0)); /* the program as written: what an eligible schedule matches */
  loom__listing_t l;
  loom_result_t r = loom__lang_list(p, W, b, depth, max, &l);
  if (r != LOOM_SUCCESS) return loom__lw_free(&lw0), r;
  for (int k = 0; k < l.n && r == LOOM_SUCCESS && !*out; ++k) { /* cheapest first */
    loom_cg_cand_t c;
    loom__lw_prog_t lw;
    memset(&c, 0, sizeof c);
    r = cand_make(p, W, b, &l.rows[k], &c, &lw);
    if (r != LOOM_SUCCESS || !c.q) continue;
    char why[LOOM_CG_TUNE_NOTE];
    if (same_io(&lw0, &lw, why, sizeof why)) *out = c.q, snprintf(name, LOOM__LANG_NAME, "%s", c.name);
    else loom__lang_free(c.q);
    loom__lw_free(&lw);
  }
  loom__lang_listing_free(&l);
  loom__lw_free(&lw0);
  return r;
}

void loom__cg_tune_candidates_free(loom_cg_cands_t *c) {
  for (int i = 0; c->c && i < c->n; ++i) loom__lang_free(c->c[i].q);
  free(c->c);
  memset(c, 0, sizeof *c);
}
