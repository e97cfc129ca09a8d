/*
 * lower.c - a scheduled program lowered (lower.h says to what): the
 * geometry of every value, the units (the program's units, cut at each
 * MatMul), which values are materialized, the steps of each kernel unit,
 * the buffers and the arena.
 *
 * The order of work: units from loom__lang_unit_order; per kernel unit its
 * materialized values and their steps (a value's step is one more than the
 * latest step of a value of the same unit its expression reads); the loops
 * of each step (lower_body.c); then, with every loop known, which buffers
 * peers read (those live in the arena), the arena's layout, and each kernel
 * unit's exchanges (lower_proto.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/interp_ops.h"
#include "lang/lower.h"
#include "ops/coll/coll_schedule.h"

/* ---- geometry -------------------------------------------------------------------- */

void loom__lw_piece(const loom__lw_geom_t *g, int q, int64_t *dims, int64_t *off) {
  *off = 0;
  for (int j = 0; j < g->rank; ++j) dims[j] = g->dims[j];
  if (g->sliced < 0) return;
  const int64_t n = g->dims[g->sliced];
  int64_t b = q * g->S, e = b + g->S;
  if (b > n) b = n;
  if (e > n) e = n;
  *off = b, dims[g->sliced] = e - b;
}

int64_t loom__lw_piece_count(const loom__lw_geom_t *g, int q) {
  int64_t d[LOOM__LANG_RANK], off, c = 1;
  loom__lw_piece(g, q, d, &off);
  for (int j = 0; j < g->rank; ++j) c *= d[j];
  return c;
}

loom_result_t loom__lw_geom_of(const loom__prog_t *p, int id, int W, const loom__binding_t *b, loom__lw_geom_t *g) {
  const loom__type_t *t = &p->nodes[id].ty;
  memset(g, 0, sizeof *g);
  g->rank = t->rank, g->sliced = -1, g->root = -1;
  g->group = t->lay.group < 0 ? -1 : t->lay.group;
  g->local = t->lay.kind == LOOM__LAY_LOCAL;
  int64_t count = 1;
  for (int j = 0; j < t->rank; ++j) {
    LOOM_TRY(loom__lang_dim_size(b, &t->dims[j], &g->dims[j]));
    count *= g->dims[j];
  }
  if (t->lay.kind == LOOM__LAY_ROOT) g->root = t->lay.arg;
  if (t->lay.kind == LOOM__LAY_SLICED) {
    g->sliced = t->lay.arg;
    g->S = loom__coll_slice_elems(g->dims[g->sliced], W, 1);
    count = count / (g->dims[g->sliced] ? g->dims[g->sliced] : 1) * g->S;
  }
  if (g->root >= W)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "`%s`: root %d is outside a group of %d ranks", p->nodes[id].name,
                      g->root, W);
  g->max_count = count;
  return LOOM_SUCCESS;
}

static int in_group(const loom__lw_prog_t *lw, int group, int r) { return group < 0 || r / lw->W == group; }

int loom__lw_runs_loop(const loom__lw_prog_t *lw, const loom__lw_loop_t *l, int r) {
  return in_group(lw, l->space.group, r) && (l->space.root < 0 || r % lw->W == l->space.root);
}

int loom__lw_holds(const loom__lw_prog_t *lw, const loom__lw_buf_t *b, int r) {
  return in_group(lw, b->geom.group, r) && (b->geom.root < 0 || r % lw->W == b->geom.root);
}

int loom__lw_runs_unit(const loom__lw_prog_t *lw, const loom__lw_unit_t *u, int r) {
  return ((u->groups >> (r / lw->W)) & 1) != 0;
}

/* ---- growing arrays ---------------------------------------------------------------- */

loom_result_t loom__lw_grow(void **arr, int n, int *cap, size_t elem) {
  if (n < *cap) return LOOM_SUCCESS;
  const int c = *cap ? 2 * *cap : 16;
  void *a = realloc(*arr, elem * (size_t)c);
  if (!a) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  *arr = a, *cap = c;
  return LOOM_SUCCESS;
}

/* A new buffer for node id (or partials of Norm `of` when id < 0): *b its index. */
static loom_result_t add_buf(loom__lw_prog_t *lw, int id, int of, int *b) {
  LOOM_TRY(loom__lw_grow((void **)&lw->bufs, lw->nbuf, &lw->cbuf, sizeof *lw->bufs));
  loom__lw_buf_t *x = &lw->bufs[lw->nbuf];
  memset(x, 0, sizeof *x);
  x->node = id, x->of = of, x->input = -1, x->unit = -1, x->step = -1;
  if (id >= 0) {
    LOOM_TRY(loom__lw_geom_of(lw->p, id, lw->W, &lw->bind, &x->geom));
    x->dtype = lw->p->nodes[id].ty.dtype;
    lw->buf_of[id] = lw->nbuf;
  } else { /* a Norm's partials: NPART floats on every rank holding the Norm's operand */
    LOOM_TRY(loom__lw_geom_of(lw->p, lw->p->nodes[of].in[0], lw->W, &lw->bind, &x->geom));
    x->geom.rank = 1, x->geom.dims[0] = LOOM__LW_NPART, x->geom.sliced = -1, x->geom.local = 1;
    x->geom.root = -1, x->geom.max_count = LOOM__LW_NPART;
    x->dtype = LOOM_FP32;
  }
  *b = lw->nbuf++;
  return LOOM_SUCCESS;
}

loom_result_t loom__lw_buf_for(loom__lw_prog_t *lw, int id, int *b) {
  if (id >= 0 && lw->buf_of[id] >= 0) {
    *b = lw->buf_of[id];
    return LOOM_SUCCESS;
  }
  return add_buf(lw, id, -1, b);
}

loom_result_t loom__lw_partials_for(loom__lw_prog_t *lw, int norm, int *b) {
  for (int i = 0; i < lw->nbuf; ++i)
    if (lw->bufs[i].node < 0 && lw->bufs[i].of == norm) {
      *b = i;
      return LOOM_SUCCESS;
    }
  return add_buf(lw, -1, norm, b);
}

static loom_result_t add_unit(loom__lw_prog_t *lw, const char *stage, const char *part, int kind, int *u) {
  LOOM_TRY(loom__lw_grow((void **)&lw->units, lw->nunit, &lw->cunit, sizeof *lw->units));
  loom__lw_unit_t *x = &lw->units[lw->nunit];
  memset(x, 0, sizeof *x);
  snprintf(x->stage, sizeof x->stage, "%s", stage);
  snprintf(x->name, sizeof x->name, "%s%s%s", stage, *part ? ": " : "", part);
  x->kind = kind, x->gemm_a = x->gemm_b = x->gemm_c = x->gemm_bias = x->node = -1;
  x->loop0 = lw->nloop, x->ex0 = lw->nex;
  *u = lw->nunit++;
  return LOOM_SUCCESS;
}

/* ---- materialization and steps ------------------------------------------------------- */

/* 1 if kernel-unit node id gets a buffer: it leaves its unit, is a result, a collective's operand, or a
 * Norm or row norm (computed by loops of their own). */
static int materialized(const loom__lw_prog_t *lw, int id) {
  const loom__prog_t *p = lw->p;
  const int op = p->nodes[id].op;
  if (op == LOOM__OP_NORM || op == LOOM__OP_RMSNORM || op == LOOM__OP_LAYERNORM || op == LOOM__OP_MATMUL) return 1;
  if (op == LOOM__OP_CONST) return 0;
  if (op == LOOM__OP_INPUT || loom__lang_is_result(p, id)) return 1;
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->removed) continue;
    for (int k = 0; k < nd->nin; ++k) {
      if (nd->in[k] != id) continue;
      if (lw->unit_of[i] != lw->unit_of[id]) return 1;
      if (loom__lang_op_info((loom__op_t)nd->op)->cls == LOOM__CLS_COMM && k == 0) return 1;
    }
  }
  return 0;
}

static int mat_step(const loom__lw_prog_t *lw, int u, int id, int *step);

/* The space a materialized value's loop runs over, where a pointwise reader in that loop may compute a
 * materialized operand itself instead of waiting a step to load it: *space, and 1 for an ELEM loop's
 * value (pointwise), 0 otherwise (a Norm, a row norm, a collective's result). */
static int elem_space(const loom__lw_prog_t *lw, int id, loom__lw_geom_t *space) {
  const int op = lw->p->nodes[id].op;
  if (op == LOOM__OP_NORM || op == LOOM__OP_RMSNORM || op == LOOM__OP_LAYERNORM) return 0;
  if (loom__lang_op_info((loom__op_t)op)->cls != LOOM__CLS_POINTWISE) return 0;
  return loom__lw_geom_of(lw->p, id, lw->W, &lw->bind, space) == LOOM_SUCCESS;
}

int loom__lw_same_element(const loom__lw_prog_t *lw, int v, const loom__lw_geom_t *space) {
  const loom__node_t *nd = &lw->p->nodes[v];
  loom__lw_geom_t g;
  return nd->ty.dtype == LOOM_FP32 && elem_space(lw, v, &g) && loom__lw_same_space(&g, space);
}

/* The latest step of unit u whose values id's value needs (-1: none of u's): a value of another unit
 * needs none, a materialized one of u its own step (unless the reader, of space `space` through
 * pointwise operations only, computes it itself: loom__lw_same_element; then what its operands need),
 * an inlined one what its operands need. space: NULL once the path crossed a collective. */
static int needs(const loom__lw_prog_t *lw, int u, int id, int *step, const loom__lw_geom_t *space) {
  if (lw->unit_of[id] != u) return -1;
  if (lw->buf_of[id] >= 0) {
    const int s = mat_step(lw, u, id, step);
    if (!space || !loom__lw_same_element(lw, id, space)) return s;
  }
  const loom__node_t *nd = &lw->p->nodes[id];
  const int comm = loom__lang_op_info((loom__op_t)nd->op)->cls == LOOM__CLS_COMM;
  int s = -1;
  for (int k = 0; k < nd->nin; ++k) {
    const int t = needs(lw, u, nd->in[k], step, comm ? NULL : space);
    if (t > s) s = t;
  }
  return s;
}

/* The step that computes materialized value id of unit u (step[] memo, -1 unknown): one after what its
 * operands need (a Norm two: its partials take the step before). */
static int mat_step(const loom__lw_prog_t *lw, int u, int id, int *step) {
  if (step[id] >= 0) return step[id];
  const loom__node_t *nd = &lw->p->nodes[id];
  loom__lw_geom_t g;
  const loom__lw_geom_t *space = elem_space(lw, id, &g) ? &g : NULL;
  int s = -1;
  for (int k = 0; k < nd->nin; ++k) {
    const int t = needs(lw, u, nd->in[k], step, space);
    if (t > s) s = t;
  }
  step[id] = s + 1 + (nd->op == LOOM__OP_NORM);
  return step[id];
}

/* Kernel unit u of nodes ids[0..n): buffers, steps and loops. */
static loom_result_t lower_kernel(loom__lw_prog_t *lw, int u, const int *ids, int n, int *step) {
  int nsteps = 0;
  for (int i = 0; i < n; ++i)
    if (materialized(lw, ids[i]) && lw->buf_of[ids[i]] < 0) {
      int b;
      LOOM_TRY(loom__lw_buf_for(lw, ids[i], &b));
      lw->bufs[b].unit = u;
    }
  for (int i = 0; i < n; ++i)
    if (lw->buf_of[ids[i]] >= 0) {
      const int s = mat_step(lw, u, ids[i], step);
      lw->bufs[lw->buf_of[ids[i]]].step = s;
      if (s + 1 > nsteps) nsteps = s + 1;
    }
  if (nsteps > 6)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "unit %s needs %d steps; generated kernels take at most 6",
                      lw->units[u].name, nsteps);
  lw->units[u].nsteps = nsteps;
  int *sel = malloc(sizeof(int) * (size_t)(n + 1));
  if (!sel) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  loom_result_t r = LOOM_SUCCESS;
  for (int s = 0; s < nsteps && r == LOOM_SUCCESS; ++s) {
    int k = 0;
    for (int i = 0; i < n; ++i)
      if (lw->buf_of[ids[i]] >= 0 && step[ids[i]] == s) sel[k++] = ids[i];
    for (int i = 0; i < n; ++i) /* a Norm's partials, the step before it */
      if (lw->p->nodes[ids[i]].op == LOOM__OP_NORM && step[ids[i]] == s + 1) sel[k++] = -1 - ids[i];
    r = loom__lw_loops(lw, u, s, sel, k);
  }
  free(sel);
  lw->units[u].nloops = lw->nloop - lw->units[u].loop0;
  return r;
}

/* GEMM unit u of the MatMul ids[0] and, folded into it, its bias sum ids[1] (n == 2). */
static loom_result_t lower_gemm(loom__lw_prog_t *lw, int u, const int *ids, int n) {
  const loom__prog_t *p = lw->p;
  const int id = ids[0], out = n == 2 ? ids[1] : id;
  const loom__node_t *nd = &p->nodes[id];
  if (nd->ty.dtype != LOOM_BF16 && nd->ty.dtype != LOOM_FP16)
    return loom__fail(LOOM_ERR_UNSUPPORTED, "MatMul `%s`: %s operands; loom's GEMM engine takes BF16 and FP16",
                      nd->name, loom__dtype_name((loom_dtype_t)nd->ty.dtype));
  int b;
  for (int k = 0; k < 2; ++k) LOOM_TRY(loom__lw_buf_for(lw, nd->in[k], &b));
  loom__lw_unit_t *x = &lw->units[u];
  if (n == 2) {
    const loom__node_t *sum = &p->nodes[out];
    LOOM_TRY(loom__lw_buf_for(lw, sum->in[0] == id ? sum->in[1] : sum->in[0], &b));
    x->gemm_bias = b;
  }
  LOOM_TRY(loom__lw_buf_for(lw, out, &b));
  lw->bufs[b].unit = u, lw->bufs[b].step = 0;
  x->gemm_a = lw->buf_of[nd->in[0]], x->gemm_b = lw->buf_of[nd->in[1]], x->gemm_c = b, x->node = id;
  return LOOM_SUCCESS;
}

/* The bias of y = c + bias where y can be folded into MatMul c's GEMM: c read by y alone and no result,
 * bias an input vector of c's dtype over c's last dimension, y of c's dtype and layout; the GEMM's k and n
 * whole on every rank (neither A's last dimension nor C's sliced: the choice is the same at every world
 * size, as the lowering's protocol check at 2 and 3 ranks needs), multiples of 8 and k > 0 (no padded
 * operands), *matmul then c; -1 otherwise. */
static int foldable_bias(const loom__lw_prog_t *lw, int y, int *matmul) {
  const loom__prog_t *p = lw->p;
  const loom__node_t *ny = &p->nodes[y];
  if (ny->op != LOOM__OP_ADD || ny->nin != 2) return -1;
  for (int k = 0; k < 2; ++k) {
    const int c = ny->in[k], bias = ny->in[1 - k];
    const loom__node_t *nc = &p->nodes[c], *nb = &p->nodes[bias];
    int users[2];
    if (nc->op != LOOM__OP_MATMUL || nb->op != LOOM__OP_INPUT || loom__lang_is_result(p, c) ||
        loom__lang_users(p, c, users, 2) != 1 || nb->ty.dtype != nc->ty.dtype || ny->ty.dtype != nc->ty.dtype)
      continue;
    loom__lw_geom_t ga, gc, gb, gy;
    if (loom__lw_geom_of(p, nc->in[0], lw->W, &lw->bind, &ga) != LOOM_SUCCESS ||
        loom__lw_geom_of(p, c, lw->W, &lw->bind, &gc) != LOOM_SUCCESS ||
        loom__lw_geom_of(p, bias, lw->W, &lw->bind, &gb) != LOOM_SUCCESS ||
        loom__lw_geom_of(p, y, lw->W, &lw->bind, &gy) != LOOM_SUCCESS)
      continue;
    const int last = gc.rank - 1, klast = ga.rank - 1;
    if (last < 0 || klast < 0 || !loom__lw_same_space(&gc, &gy) || gb.rank != 1 || gb.dims[0] != gc.dims[last])
      continue;
    if (gc.sliced == last || ga.sliced == klast || gb.sliced >= 0 || gc.root >= 0 || gb.root >= 0 ||
        gb.group != gc.group)
      continue;
    const int64_t kk = ga.dims[klast], nn = gc.dims[last];
    if (kk <= 0 || kk % 8 || nn % 8) continue;
    *matmul = c;
    return bias;
  }
  return -1;
}

/* Folds each kernel unit that is only `MatMul(a, b) + bias` (its one node y, foldable_bias) into the
 * MatMul's GEMM unit: y joins that unit and the kernel unit is removed. Before any unit is lowered. */
static void fold_bias(loom__lw_prog_t *lw) {
  const loom__prog_t *p = lw->p;
  for (int v = 0; v < lw->nunit; ++v) {
    if (lw->units[v].kind != LOOM__LU_KERNEL) continue;
    int y = -1, n = 0, c = -1;
    for (int i = 0; i < p->n; ++i)
      if (lw->unit_of[i] == v) y = i, n++;
    if (n != 1 || foldable_bias(lw, y, &c) < 0) continue;
    const int u = lw->unit_of[c];
    if (u < 0 || lw->units[u].kind != LOOM__LU_GEMM) continue;
    lw->unit_of[y] = u;
    memmove(&lw->units[v], &lw->units[v + 1], sizeof *lw->units * (size_t)(lw->nunit - v - 1));
    lw->nunit--;
    for (int i = 0; i < p->n; ++i)
      if (lw->unit_of[i] > v) lw->unit_of[i]--;
    v--;
  }
}

/* ---- units ------------------------------------------------------------------------ */

static int prog_unit_key(const loom__prog_t *p, int id) {
  const loom__node_t *nd = &p->nodes[id];
  return nd->stage >= 0 ? p->n + nd->stage : nd->coll >= 0 ? p->n + nd->coll : nd->kern >= 0 ? p->n + nd->kern : id;
}

/* The lowered units of one program unit (nodes ids[0..n) in unit order). */
static loom_result_t lower_prog_unit(loom__lw_prog_t *lw, const int *ids, int n) {
  const loom__prog_t *p = lw->p;
  const int key = prog_unit_key(p, ids[0]);
  char stage[LOOM__LANG_NAME], part[64], lb[96];
  if (key >= p->n) snprintf(stage, sizeof stage, "%s", p->groups[key - p->n].name);
  else snprintf(stage, sizeof stage, "%s", loom__lang_label(p, ids[0], lb, sizeof lb));
  int nmm = 0;
  for (int i = 0; i < n; ++i) nmm += p->nodes[ids[i]].op == LOOM__OP_MATMUL;
  int first = 0, part_no = 0;
  for (int i = 0; i <= n; ++i) {
    const int cut = i == n || p->nodes[ids[i]].op == LOOM__OP_MATMUL;
    if (!cut) continue;
    int u;
    if (i > first) { /* the kernel before this MatMul */
      snprintf(part, sizeof part, nmm ? "kernel %d" : "", ++part_no);
      LOOM_TRY(add_unit(lw, stage, part, LOOM__LU_KERNEL, &u));
      for (int k = first; k < i; ++k) lw->unit_of[ids[k]] = u;
    }
    if (i < n) {
      snprintf(part, sizeof part, n > 1 ? "MatMul %s" : "", loom__lang_label(p, ids[i], lb, sizeof lb));
      LOOM_TRY(add_unit(lw, stage, part, LOOM__LU_GEMM, &u));
      lw->unit_of[ids[i]] = u;
    }
    first = i + 1;
  }
  return LOOM_SUCCESS;
}

int loom__lw_coll_unit_op(const loom__lw_prog_t *lw, int id) {
  const loom__prog_t *p = lw->p;
  const loom__node_t *nd = &p->nodes[id];
  if (lw->lib == LOOM__LW_LIB_GEN || lw->G != 1 || nd->nin != 1) return 0;
  if (nd->op != LOOM__OP_ALLREDUCE && nd->op != LOOM__OP_REDUCESCATTER && nd->op != LOOM__OP_ALLGATHER) return 0;
  const loom__node_t *in = &p->nodes[nd->in[0]];
  if (in->ty.dtype != nd->ty.dtype || in->ty.rank < 1) return 0;
  if (nd->op != LOOM__OP_ALLGATHER && nd->redop != LOOM__RED_SUM) return 0;
  if (nd->op == LOOM__OP_REDUCESCATTER) return nd->ty.lay.kind == LOOM__LAY_SLICED && nd->ty.lay.arg == 0;
  if (nd->op == LOOM__OP_ALLGATHER) return in->ty.lay.kind == LOOM__LAY_SLICED && in->ty.lay.arg == 0;
  return nd->ty.lay.kind == LOOM__LAY_REPLICATED;
}

/* COLL unit u of collective id: its operand's and its result's buffers. */
static loom_result_t lower_coll(loom__lw_prog_t *lw, int u, int id) {
  int a, c;
  LOOM_TRY(loom__lw_buf_for(lw, lw->p->nodes[id].in[0], &a));
  LOOM_TRY(loom__lw_buf_for(lw, id, &c));
  lw->bufs[c].unit = u, lw->bufs[c].step = 0;
  lw->bufs[a].peers_read = 1; /* loom's collectives load it at the peers: the arena */
  loom__lw_unit_t *x = &lw->units[u];
  x->gemm_a = a, x->gemm_c = c, x->node = id, x->nsteps = 1;
  return LOOM_SUCCESS;
}

/* Where lw->lib runs them, the kernel units that are one plain collective become COLL units. */
static void coll_units(loom__lw_prog_t *lw) {
  for (int v = 0; v < lw->nunit && lw->lib != LOOM__LW_LIB_GEN; ++v) {
    if (lw->units[v].kind != LOOM__LU_KERNEL) continue;
    int id = -1, n = 0;
    for (int i = 0; i < lw->p->n; ++i)
      if (lw->unit_of[i] == v) id = i, n++;
    if (n == 1 && loom__lw_coll_unit_op(lw, id)) lw->units[v].kind = LOOM__LU_COLL;
  }
}

/* Every unit's nodes (unit_of), then each unit lowered in order. */
static loom_result_t lower_units(loom__lw_prog_t *lw, const int *order, int cnt, int *step) {
  const loom__prog_t *p = lw->p;
  int *ids = malloc(sizeof(int) * (size_t)(cnt + 1)), n = 0;
  if (!ids) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i <= cnt && r == LOOM_SUCCESS; ++i) {
    const int leaf = i < cnt && loom__lang_op_info((loom__op_t)p->nodes[order[i]].op)->cls == LOOM__CLS_LEAF;
    if (leaf) continue;
    if (n > 0 && (i == cnt || prog_unit_key(p, order[i]) != prog_unit_key(p, ids[0]))) {
      r = lower_prog_unit(lw, ids, n);
      n = 0;
    }
    if (i < cnt) ids[n++] = order[i];
  }
  if (r == LOOM_SUCCESS) fold_bias(lw), coll_units(lw);
  for (int u = 0; u < lw->nunit && r == LOOM_SUCCESS; ++u) {
    n = 0;
    for (int i = 0; i < cnt; ++i)
      if (lw->unit_of[order[i]] == u) ids[n++] = order[i];
    lw->units[u].loop0 = lw->nloop;
    const int kind = lw->units[u].kind;
    r = kind == LOOM__LU_GEMM ? lower_gemm(lw, u, ids, n)
      : kind == LOOM__LU_COLL ? lower_coll(lw, u, ids[0])
                              : lower_kernel(lw, u, ids, n, step);
  }
  free(ids);
  return r;
}

/* ---- inputs, outputs, arena ------------------------------------------------------------ */

static const char *state_name(const loom__prog_t *p, int i) { return p->nodes[p->states[i].tensor].name; }

static loom_result_t lower_io(loom__lw_prog_t *lw) {
  const loom__prog_t *p = lw->p;
  lw->noutputs = p->nexec_out + p->nstate;
  lw->out_node = malloc(sizeof(int) * (size_t)(lw->noutputs + 1));
  lw->out_name = malloc(sizeof *lw->out_name * (size_t)(lw->noutputs + 1));
  lw->in_node = malloc(sizeof(int) * (size_t)(p->n + 1));
  if (!lw->out_node || !lw->out_name || !lw->in_node)
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  for (int i = 0; i < p->nexec_in; ++i) lw->in_node[lw->ninputs++] = p->exec_in[i];
  for (int id = 0; id < p->n; ++id) { /* tensors the program reads that Execute does not list (the interpreter's too) */
    int listed = 0;
    for (int i = 0; i < p->nexec_in; ++i) listed |= p->exec_in[i] == id;
    if (!listed && !p->nodes[id].removed && p->nodes[id].op == LOOM__OP_INPUT) lw->in_node[lw->ninputs++] = id;
  }
  for (int i = 0; i < p->nexec_out; ++i) {
    lw->out_node[i] = p->exec_out[i];
    snprintf(lw->out_name[i], LOOM__LANG_NAME, "%s", p->exec_names ? p->exec_names[i] : p->nodes[p->exec_out[i]].name);
  }
  int *st = malloc(sizeof(int) * (size_t)(p->nstate + 1)); /* the states by tensor name, as the interpreter */
  if (!st) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  for (int i = 0; i < p->nstate; ++i) st[i] = i;
  for (int i = 1; i < p->nstate; ++i) /* insertion sort: a handful of states */
    for (int j = i; j > 0 && strcmp(state_name(p, st[j - 1]), state_name(p, st[j])) > 0; --j) {
      const int t = st[j];
      st[j] = st[j - 1], st[j - 1] = t;
    }
  for (int i = 0; i < p->nstate; ++i) {
    lw->out_node[p->nexec_out + i] = p->states[st[i]].value;
    snprintf(lw->out_name[p->nexec_out + i], LOOM__LANG_NAME, "%s", state_name(p, st[i]));
  }
  free(st);
  for (int i = 0; i < lw->ninputs; ++i) {
    int b;
    LOOM_TRY(loom__lw_buf_for(lw, lw->in_node[i], &b));
    lw->bufs[b].store |= LOOM__LWB_INPUT, lw->bufs[b].input = i;
  }
  for (int i = 0; i < lw->noutputs; ++i) {
    const int id = lw->out_node[i], b = lw->buf_of[id];
    if (b < 0 || p->nodes[id].op == LOOM__OP_CONST)
      return loom__fail(LOOM_ERR_UNSUPPORTED, "output `%s` is a constant; generated code takes computed outputs",
                        lw->out_name[i]);
    loom__lw_buf_t *x = &lw->bufs[b];
    if (x->noutput == LOOM__LW_MAXDST)
      return loom__fail(LOOM_ERR_UNSUPPORTED, "`%s` is more than %d outputs", lw->out_name[i], LOOM__LW_MAXDST);
    x->store |= LOOM__LWB_OUTPUT, x->output[x->noutput++] = i;
  }
  return LOOM_SUCCESS;
}

/* Which buffers peers read; the arena: every buffer but the caller's alone (an input no peer reads, an
 * output nothing reads). */
static void lay_out_arena(loom__lw_prog_t *lw) {
  for (int l = 0; l < lw->nloop; ++l)
    for (int b = 0; b < lw->nbuf; ++b)
      if (loom__lw_reads_peers(lw, &lw->loops[l], b)) lw->bufs[b].peers_read = 1;
  int64_t off = 0;
  for (int b = 0; b < lw->nbuf; ++b) {
    loom__lw_buf_t *x = &lw->bufs[b];
    int used = 0; /* read by a loop or a GEMM (a unit other than the one writing it, or a later step) */
    for (int u = 0; u < lw->nunit && !used; ++u) /* a GEMM's or a COLL's operand */
      used = lw->units[u].gemm_a == b || lw->units[u].gemm_b == b || lw->units[u].gemm_bias == b;
    for (int l = 0; l < lw->nloop && !used; ++l)
      for (int i = 0; i < lw->loops[l].nins && !used; ++i) {
        const loom__lw_ins_t *in = &lw->ins[lw->loops[l].ins0 + i];
        used =
            (in->kind == LOOM__LI_LOAD || in->kind == LOOM__LI_REDUCE || in->kind == LOOM__LI_PARTIALS) && in->buf == b;
      }
    const int callers_only = (x->store & LOOM__LWB_INPUT) ? !x->peers_read : !used && (x->store & LOOM__LWB_OUTPUT);
    if (callers_only) continue;
    x->store |= LOOM__LWB_ARENA;
    x->arena_off = off;
    off += (x->geom.max_count * (x->dtype == LOOM_FP32 ? 4 : 2) + 255) / 256 * 256;
  }
  lw->arena_bytes = off;
}

/* The groups each unit's ranks are in: its loops' and the buffers they read. */
static void unit_groups(loom__lw_prog_t *lw) {
  for (int u = 0; u < lw->nunit; ++u) {
    loom__lw_unit_t *x = &lw->units[u];
    int g = 0;
    const int all = (1 << lw->G) - 1;
    if (x->kind == LOOM__LU_GEMM || x->kind == LOOM__LU_COLL) {
      const int grp = lw->bufs[x->gemm_c].geom.group;
      g = grp < 0 ? all : 1 << grp;
    }
    for (int l = x->loop0; l < x->loop0 + x->nloops; ++l) {
      const loom__lw_loop_t *lp = &lw->loops[l];
      g |= lp->space.group < 0 ? all : 1 << lp->space.group;
      for (int i = 0; i < lp->nins; ++i) {
        const loom__lw_ins_t *in = &lw->ins[lp->ins0 + i];
        if (in->kind != LOOM__LI_LOAD && in->kind != LOOM__LI_REDUCE && in->kind != LOOM__LI_PARTIALS) continue;
        const int bg = lw->bufs[in->buf].geom.group;
        g |= bg < 0 ? all : 1 << bg;
      }
    }
    x->groups = g;
  }
}

/* The steps' contract: a loop reads a buffer its unit writes only after the step that writes it (the
 * step boundary is the only wait between the unit's blocks); LOOM_ERR_INTERNAL naming the value where a
 * loop would read one of its own step. */
static loom_result_t check_step_reads(const loom__lw_prog_t *lw) {
  for (int l = 0; l < lw->nloop; ++l) {
    const loom__lw_loop_t *lp = &lw->loops[l];
    for (int i = 0; i < lp->nins; ++i) {
      const loom__lw_ins_t *in = &lw->ins[lp->ins0 + i];
      if (in->kind != LOOM__LI_LOAD && in->kind != LOOM__LI_REDUCE && in->kind != LOOM__LI_PARTIALS) continue;
      const loom__lw_buf_t *b = &lw->bufs[in->buf];
      if (b->unit == lp->unit && b->step >= lp->step)
        return loom__fail(LOOM_ERR_INTERNAL, "lowering: unit %s's step %d reads `%s`, written in step %d",
                          lw->units[lp->unit].name, lp->step,
                          b->node >= 0 ? lw->p->nodes[b->node].name : "a Norm's partials", b->step);
    }
  }
  return LOOM_SUCCESS;
}

/* ---- the entry ---------------------------------------------------------------------- */

static loom_result_t lower_all(loom__lw_prog_t *lw) {
  const loom__prog_t *p = lw->p;
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), cnt = 0;
  int *step = malloc(sizeof(int) * (size_t)(p->n + 1));
  lw->buf_of = malloc(sizeof(int) * (size_t)(p->n + 1));
  lw->unit_of = malloc(sizeof(int) * (size_t)(p->n + 1));
  if (!order || !step || !lw->buf_of || !lw->unit_of) {
    free(order), free(step);
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  }
  for (int i = 0; i < p->n; ++i) step[i] = -1, lw->buf_of[i] = -1, lw->unit_of[i] = -1;
  loom_result_t r = loom__lang_unit_order(p, order, &cnt);
  if (r == LOOM_SUCCESS) r = lower_units(lw, order, cnt, step);
  if (r == LOOM_SUCCESS) r = check_step_reads(lw);
  if (r == LOOM_SUCCESS) r = lower_io(lw);
  if (r == LOOM_SUCCESS) lay_out_arena(lw), unit_groups(lw);
  for (int u = 0; u < lw->nunit && r == LOOM_SUCCESS; ++u)
    if (lw->units[u].kind == LOOM__LU_KERNEL) r = loom__lw_exchanges(lw, u);
  free(order), free(step);
  return r;
}

loom_result_t loom__lw_lower_raw(loom__prog_t *p, int W, const loom__binding_t *bind, int lib, loom__lw_prog_t *out) {
  memset(out, 0, sizeof *out);
  out->lib = lib;
  if (W < 1 || W > 64) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "lowering: %d ranks per group; expected 1..64", W);
  LOOM_TRY(loom__lang_infer(p));
  out->p = p, out->W = W, out->G = loom__lang_ngroups(p), out->bind = *bind;
  out->R = out->G * W;
  if (out->G > 16) return loom__fail(LOOM_ERR_UNSUPPORTED, "lowering: %d pipeline groups; at most 16", out->G);
  loom_result_t r = lower_all(out);
  if (r != LOOM_SUCCESS) loom__lw_free(out);
  return r;
}

void loom__lw_free(loom__lw_prog_t *lw) {
  free(lw->bufs), free(lw->units), free(lw->loops), free(lw->ins), free(lw->ex), free(lw->idx);
  free(lw->buf_of), free(lw->unit_of), free(lw->out_node), free(lw->out_name), free(lw->in_node);
  memset(lw, 0, sizeof *lw);
}
