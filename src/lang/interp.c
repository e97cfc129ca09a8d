/*
 * interp.c - the CPU meaning of a program: W simulated ranks per group
 * (G groups: G * W ranks), every value in double, each rank holding what its
 * layout gives it (a Sliced value: its slice; Replicated: the whole; Local:
 * its own; Root(r): on rank r only). Slices are loom's ops' shards (S =
 * ceil(n / W), rank q owns [min(n, qS), min(n, (q+1)S)): loom__coll_slice
 * with a unit of 1, as generated code splits them), so any size runs at any
 * W (the last ranks' slices may be short or empty).
 *
 * Nodes run in the schedule's order (loom__lang_unit_order: a kernel's or a
 * stage's nodes together), so a schedule whose groups cannot run fails here.
 * Collectives reduce in rank order 0..W-1, so AllReduce and ReduceScatter +
 * AllGather agree bit for bit. Dropout keeps element i (its index in the
 * whole tensor, wherever it is computed) by loom__dropout_keep (seed, offset
 * 0): the mask of loom's kernels. Inputs: uniform in [0.25, 1.25) from a
 * generator keyed by (seed, tensor name[, rank for Local]), so two programs
 * over the same tensors see the same values whatever their layouts.
 * Results: Execute's outputs by position, then each state by name, as
 * logical tensors; a Replicated result that differs between ranks is an
 * internal error (the layout rules would be wrong).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pointwise.h"
#include "lang/interp_ops.h"
#include "lang/lang.h"

loom_result_t loom__lang_parse_bind(const char *text, loom__binding_t *b) {
  memset(b, 0, sizeof *b);
  const char *s = text ? text : "";
  while (*s) {
    const char *eq = strchr(s, '='), *end = strchr(s, ',');
    if (!end) end = s + strlen(s);
    if (!eq || eq > end || eq == s || eq - s >= 16 || b->n == 16)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "bind `%s`: expected NAME=SIZE[,NAME=SIZE...] (at most 16)", text);
    char *stop;
    const long long v = strtoll(eq + 1, &stop, 10);
    if (stop != end || v < 1 || v > (1ll << 40))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "bind `%s`: the size of `%.*s` must be an integer >= 1", text,
                        (int)(eq - s), s);
    snprintf(b->sym[b->n], 16, "%.*s", (int)(eq - s), s);
    b->val[b->n++] = v;
    s = *end ? end + 1 : end;
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_dim_size(const loom__binding_t *b, const loom__dim_t *d, int64_t *n) {
  if (!d->sym[0]) {
    *n = d->n;
    return LOOM_SUCCESS;
  }
  for (int i = 0; i < b->n; ++i)
    if (!strcmp(b->sym[i], d->sym)) {
      *n = b->val[i];
      return LOOM_SUCCESS;
    }
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "size `%s` is not bound (give it: --bind %s=SIZE)", d->sym, d->sym);
}

/* ---- setup ------------------------------------------------------------------------ */

static loom_result_t shape_of(loom__interp_t *in, int id) {
  const loom__type_t *t = &in->p->nodes[id].ty;
  loom__shape_t *s = &in->shapes[id];
  s->rank = t->rank;
  s->count = 1;
  for (int i = 0; i < t->rank; ++i) {
    LOOM_TRY(loom__lang_dim_size(in->bind, &t->dims[i], &s->dims[i]));
    s->count *= s->dims[i];
  }
  if (s->count > (1ll << 26))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "interp: `%s` has %lld elements; the interpreter takes at most 2^26",
                      in->p->nodes[id].name, (long long)s->count);
  const loom__layout_t *l = &t->lay;
  if (l->kind == LOOM__LAY_ROOT && l->arg >= in->W)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "interp: %s's root %d is outside a group of %d ranks",
                      loom__lang_op_info(in->p->nodes[id].op)->name, l->arg, in->W);
  return LOOM_SUCCESS;
}

static uint64_t mix(uint64_t x) {
  x ^= x >> 33, x *= 0xff51afd7ed558ccdull, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ull, x ^= x >> 33;
  return x;
}

static uint64_t name_key(const char *s, uint64_t seed) {
  uint64_t h = seed * 0x9E3779B97F4A7C15ull + 1469598103934665603ull;
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

double loom__interp_input_elem(const char *name, uint64_t seed, int rank, int64_t i) {
  const uint64_t k = mix(name_key(name, seed) + (uint64_t)(rank + 1) * 0x632BE59BD9B4E019ull + (uint64_t)i);
  return 0.25 + (double)(k >> 11) * (1.0 / 9007199254740992.0);
}

static loom_result_t make_input(loom__interp_t *in, int id) {
  const loom__node_t *nd = &in->p->nodes[id];
  const loom__shape_t *s = &in->shapes[id];
  for (int r = 0; r < in->R; ++r) {
    if (!loom__interp_present(in, id, r)) continue;
    loom__local_t loc;
    loom__interp_local(in, id, r, &loc);
    double *v = malloc(sizeof(double) * (size_t)(loc.count ? loc.count : 1));
    if (!v) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
    const int local = nd->ty.lay.kind == LOOM__LAY_LOCAL;
    for (int64_t e = 0; e < loc.count; ++e)
      v[e] = loom__interp_input_elem(nd->name, in->seed, local ? loom__interp_q(in, id, r) : -1, loom__interp_global(s, &loc, e));
    in->vals[(size_t)id * (size_t)in->R + (size_t)r] = v;
  }
  return LOOM_SUCCESS;
}

/* ---- results ---------------------------------------------------------------------------- */

static loom_result_t result_of(loom__interp_t *in, int id, const char *name, int is_state, loom__value_t *out) {
  const loom__node_t *nd = &in->p->nodes[id];
  memset(out, 0, sizeof *out);
  snprintf(out->name, sizeof out->name, "%s", name);
  out->is_state = is_state;
  out->count = in->shapes[id].count;
  out->local = nd->ty.lay.kind == LOOM__LAY_LOCAL;
  out->ranks = out->local ? in->W : 1;
  out->v = malloc(sizeof(double) * (size_t)(out->count * out->ranks + 1));
  if (!out->v) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
  return loom__interp_logical(in, id, out->v);
}

static int cmp_state(const void *a, const void *b) {
  const loom__value_t *x = a, *y = b;
  return strcmp(x->name, y->name);
}

static loom_result_t collect(loom__interp_t *in, loom__results_t *res) {
  const loom__prog_t *p = in->p;
  res->vals = calloc((size_t)(p->nexec_out + p->nstate + 1), sizeof *res->vals);
  if (!res->vals) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
  for (int i = 0; i < p->nexec_out; ++i) {
    char name[LOOM__LANG_NAME];
    snprintf(name, sizeof name, "output %d", i);
    LOOM_TRY(result_of(in, p->exec_out[i], name, 0, &res->vals[res->n]));
    res->n++;
  }
  const int first = res->n;
  for (int i = 0; i < p->nstate; ++i) {
    LOOM_TRY(result_of(in, p->states[i].value, p->nodes[p->states[i].tensor].name, 1, &res->vals[res->n]));
    res->n++;
  }
  qsort(res->vals + first, (size_t)(res->n - first), sizeof *res->vals, cmp_state);
  return LOOM_SUCCESS;
}

void loom__lang_results_free(loom__results_t *r) {
  for (int i = 0; r->vals && i < r->n; ++i) free(r->vals[i].v);
  free(r->vals);
  memset(r, 0, sizeof *r);
}

loom_result_t loom__lang_results_diff(const loom__results_t *a, const loom__results_t *b, double *maxdiff) {
  *maxdiff = 0;
  if (a->n != b->n) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "results: %d values and %d values", a->n, b->n);
  for (int i = 0; i < a->n; ++i) {
    const loom__value_t *x = &a->vals[i], *y = &b->vals[i];
    if (strcmp(x->name, y->name) || x->count != y->count || x->local != y->local || x->ranks != y->ranks)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "results: %s (%lld elements%s) against %s (%lld elements%s)",
                        x->name, (long long)x->count, x->local ? ", Local" : "", y->name, (long long)y->count,
                        y->local ? ", Local" : "");
    for (int64_t e = 0; e < x->count * x->ranks; ++e) {
      const double u = x->v[e], w = y->v[e];
      double d = (isnan(u) || isnan(w)) ? (isnan(u) && isnan(w) ? 0 : INFINITY) : fabs(u - w) / fmax(1.0, fabs(u));
      if (u == w) d = 0;
      if (d > *maxdiff) *maxdiff = d;
    }
  }
  return LOOM_SUCCESS;
}

/* ---- the run ------------------------------------------------------------------------------- */

static void interp_free(loom__interp_t *in) {
  for (size_t i = 0; in->vals && i < (size_t)in->p->n * (size_t)in->R; ++i) free(in->vals[i]);
  free(in->vals);
  free(in->shapes);
}

static loom_result_t interp_run(loom__interp_t *in) {
  int *order = malloc(sizeof(int) * (size_t)(in->p->n + 1)), n = 0;
  if (!order) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
  loom_result_t r = loom__lang_unit_order(in->p, order, &n);
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) r = shape_of(in, order[i]);
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) {
    const int id = order[i];
    r = in->p->nodes[id].op == LOOM__OP_INPUT ? make_input(in, id) : loom__interp_node(in, id);
  }
  free(order);
  return r;
}

loom_result_t loom__lang_interp(loom__prog_t *p, int W, const loom__binding_t *bind, uint64_t seed,
                                loom__results_t *res) {
  memset(res, 0, sizeof *res);
  if (W < 1 || W > 64) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "interp: world %d; expected 1..64 ranks", W);
  LOOM_TRY(loom__lang_infer(p));
  loom__interp_t in;
  memset(&in, 0, sizeof in);
  in.p = p, in.W = W, in.G = loom__lang_ngroups(p), in.bind = bind, in.seed = seed;
  in.R = in.G * W;
  in.vals = calloc((size_t)p->n * (size_t)in.R + 1, sizeof(double *));
  in.shapes = calloc((size_t)p->n + 1, sizeof *in.shapes);
  loom_result_t r = in.vals && in.shapes ? interp_run(&in) : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
  if (r == LOOM_SUCCESS) r = collect(&in, res);
  if (r != LOOM_SUCCESS) loom__lang_results_free(res);
  interp_free(&in);
  return r;
}
