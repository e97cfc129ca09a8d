/*
 * layout_rules.c - type, shape and layout inference: the one table of rules
 * (docs/language.md repeats it).
 *
 *   pointwise (+ - * / Pow Max Min comparisons Neg Sqrt Exp ReLU GeLU SiLU
 *   Cast Dropout Update): shapes broadcast as PyTorch's (trailing dimensions
 *   aligned, equal or a literal 1); layouts combine pairwise:
 *       Replicated + L          -> L (a Replicated operand is sliced implicitly)
 *       Sliced(d) + Sliced(d)   -> Sliced(d)   (d in the result's dimensions)
 *       Local + Local           -> Local
 *       Root(r) + Root(r)       -> Root(r)
 *       anything else           -> error
 *   MatMul(a [.., K], b [K, N]) -> [.., N]:
 *       Sliced(last), Sliced(0) -> Local (partial sums)
 *       Replicated,   Sliced(1) -> Sliced(last)
 *       Sliced(d<last), Replicated -> Sliced(d)
 *       Replicated/Local with Replicated/Local -> Replicated if both are, else Local
 *   Norm(x) -> [] (a Sliced x is reduced over the group: Replicated)
 *   RMSNorm(x, w), LayerNorm(x, w, b): row-wise over the last dimension; x
 *       not Sliced(last); w, b [last] Replicated
 *   Slice(Replicated x, d) -> Sliced(d)   (reorder writes them)
 *   AllReduce(Local) -> Replicated     ReduceScatter(Local) -> Sliced(0)
 *   AllGather(Sliced(d)) -> Replicated Reduce(Local, root) -> Root(root)
 *   Broadcast(Root(r) or Local) -> Replicated
 *   AllToAll(Sliced(d), e != d) -> Sliced(e)
 *   Send(x in GROUP(i), GROUP+k) -> x's layout in GROUP(i+k)
 *
 * Groups: operands of one operation share a group (constants fit any).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"

const char *loom__lang_layout_str(const loom__layout_t *l, char *buf, size_t cap) {
  char g[24] = "";
  if (l->group >= 0) snprintf(g, sizeof g, " GROUP(%d)", l->group);
  switch (l->kind) {
    case LOOM__LAY_SLICED: snprintf(buf, cap, "Sliced(%d)%s", l->arg, g); break;
    case LOOM__LAY_LOCAL: snprintf(buf, cap, "Local%s", g); break;
    case LOOM__LAY_ROOT: snprintf(buf, cap, "Root(%d)%s", l->arg, g); break;
    default: snprintf(buf, cap, "Replicated%s", g); break;
  }
  return buf;
}

const char *loom__lang_shape_str(const loom__type_t *t, char *buf, size_t cap) {
  size_t n = (size_t)snprintf(buf, cap, "[");
  for (int i = 0; i < t->rank && n < cap; ++i) {
    if (t->dims[i].sym[0])
      n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? ", " : "", t->dims[i].sym);
    else
      n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? ", " : "", (long long)t->dims[i].n);
  }
  if (n < cap) snprintf(buf + n, cap - n, "]");
  return buf;
}

int loom__lang_dim_eq(const loom__dim_t *a, const loom__dim_t *b) {
  return a->sym[0] ? !strcmp(a->sym, b->sym) : (!b->sym[0] && a->n == b->n);
}

static int dim_one(const loom__dim_t *d) { return !d->sym[0] && d->n == 1; }

/* The error at node id: "file:line:col: <Op>: <message>". */
static loom_result_t err(const loom__prog_t *p, int id, const char *fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const loom__node_t *nd = &p->nodes[id];
  const char *op = loom__lang_op_info(nd->op)->name;
  if (nd->line) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s:%d:%d: %s: %s", p->file, nd->line, nd->col, op, msg);
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %s (value %d): %s", p->file, op, id, msg);
}

static const loom__type_t *ty(const loom__prog_t *p, int id) { return &p->nodes[id].ty; }

static const char *lab(const loom__prog_t *p, int id, char *buf) { return loom__lang_label(p, id, buf, 96); }

static const char *lay(const loom__prog_t *p, int id, char *buf) {
  return loom__lang_layout_str(&ty(p, id)->lay, buf, 64);
}

static const char *group_str(int g, char *buf) {
  if (g < 0)
    snprintf(buf, 24, "WORLD");
  else
    snprintf(buf, 24, "GROUP(%d)", g);
  return buf;
}

static loom_result_t join_group(const loom__prog_t *p, int id, int a, int *g) {
  const int ga = ty(p, a)->lay.group;
  if (ga == LOOM__GROUP_ANY || ga == *g) return LOOM_SUCCESS;
  if (*g == LOOM__GROUP_ANY) {
    *g = ga;
    return LOOM_SUCCESS;
  }
  char b1[96], g1[24], g2[24];
  return err(p, id, "operand %s is in %s; the other operands in %s", lab(p, a, b1), group_str(ga, g1),
             group_str(*g, g2));
}

/* ---- pointwise ---------------------------------------------------------------- */

static loom_result_t broadcast(const loom__prog_t *p, int id, loom__type_t *out) {
  const loom__node_t *nd = &p->nodes[id];
  const int first = nd->op == LOOM__OP_UPDATE ? 1 : 0;
  out->rank = 0;
  for (int k = first; k < nd->nin; ++k)
    if (ty(p, nd->in[k])->rank > out->rank) out->rank = ty(p, nd->in[k])->rank;
  for (int i = 0; i < out->rank; ++i) memset(&out->dims[i], 0, sizeof out->dims[i]), out->dims[i].n = 1;
  for (int k = first; k < nd->nin; ++k) {
    const loom__type_t *t = ty(p, nd->in[k]);
    for (int i = 0; i < t->rank; ++i) {
      loom__dim_t *o = &out->dims[out->rank - t->rank + i];
      const loom__dim_t *d = &t->dims[i];
      if (loom__lang_dim_eq(o, d) || dim_one(d)) continue;
      if (dim_one(o)) {
        *o = *d;
        continue;
      }
      char s1[96], s2[96], b[96];
      return err(p, id, "operand %s has shape %s, which does not broadcast with %s", lab(p, nd->in[k], b),
                 loom__lang_shape_str(t, s1, sizeof s1), loom__lang_shape_str(out, s2, sizeof s2));
    }
  }
  return LOOM_SUCCESS;
}

/* Operand a's layout in the result's coordinates (rank R). */
static loom__layout_t lift(const loom__prog_t *p, int a, int R) {
  loom__layout_t l = ty(p, a)->lay;
  if (l.kind == LOOM__LAY_SLICED) l.arg += R - ty(p, a)->rank;
  return l;
}

static loom_result_t combine(const loom__prog_t *p, int id, int a, loom__layout_t *acc, int *have, int R) {
  const loom__layout_t l = lift(p, a, R);
  if (l.kind == LOOM__LAY_REPLICATED) return LOOM_SUCCESS;
  if (!*have || acc->kind == LOOM__LAY_REPLICATED) {
    acc->kind = l.kind, acc->arg = l.arg, *have = 1;
    return LOOM_SUCCESS;
  }
  if (l.kind == acc->kind && (l.kind == LOOM__LAY_LOCAL || l.arg == acc->arg)) return LOOM_SUCCESS;
  char b1[96], b2[64], b3[64];
  loom__layout_t g = *acc;
  g.group = LOOM__GROUP_WORLD;
  return err(p, id, "operand %s is %s where the other operands make %s; pointwise operands are Replicated or share one layout",
             lab(p, a, b1), loom__lang_layout_str(&l, b2, sizeof b2), loom__lang_layout_str(&g, b3, sizeof b3));
}

/* A Sliced operand may not broadcast along its sliced dimension: that dimension's one element lives
 * on one rank only, and the other ranks' slices of the result would need it. */
static loom_result_t no_sliced_broadcast(const loom__prog_t *p, int id, const loom__type_t *t) {
  const loom__node_t *nd = &p->nodes[id];
  for (int k = nd->op == LOOM__OP_UPDATE ? 1 : 0; k < nd->nin; ++k) {
    const loom__type_t *a = ty(p, nd->in[k]);
    if (a->lay.kind != LOOM__LAY_SLICED || a->lay.arg >= a->rank) continue;
    const loom__dim_t *d = &a->dims[a->lay.arg], *o = &t->dims[a->lay.arg + t->rank - a->rank];
    if (!dim_one(d) || dim_one(o)) continue;
    char b[96], l[64], s1[96];
    return err(p, id, "operand %s is %s on a dimension of size 1 that broadcasts to the result's %s; only one rank "
               "holds that element: make it Replicated or slice it on another dimension", lab(p, nd->in[k], b),
               lay(p, nd->in[k], l), loom__lang_shape_str(t, s1, sizeof s1));
  }
  return LOOM_SUCCESS;
}

static loom_result_t infer_dtype(const loom__prog_t *p, int id, int *dt) {
  const loom__node_t *nd = &p->nodes[id];
  *dt = -1;
  for (int k = nd->op == LOOM__OP_UPDATE ? 1 : 0; k < nd->nin; ++k) {
    const loom__node_t *a = &p->nodes[nd->in[k]];
    if (a->op == LOOM__OP_CONST) continue;
    if (*dt < 0 || *dt == a->ty.dtype) {
      *dt = a->ty.dtype;
    } else if (*dt == LOOM_FP32 || a->ty.dtype == LOOM_FP32) {
      *dt = LOOM_FP32;
    } else {
      char b[96];
      return err(p, id, "operand %s is %s, another operand %s; cast one of them", lab(p, nd->in[k], b),
                 loom__dtype_name(a->ty.dtype), loom__dtype_name(*dt));
    }
  }
  if (*dt < 0) *dt = LOOM_FP32;
  if (nd->op == LOOM__OP_CAST) *dt = nd->dtype;
  return LOOM_SUCCESS;
}

static loom_result_t need_slice(const loom__prog_t *p, int id, loom__type_t *t) {
  const loom__node_t *nd = &p->nodes[id];
  char b[96], l[64];
  if (ty(p, nd->in[0])->lay.kind != LOOM__LAY_REPLICATED || nd->dim >= t->rank)
    return err(p, id, "operand %s is %s with %d dimensions; Slice(x, %d) needs a Replicated x with more than %d",
               lab(p, nd->in[0], b), lay(p, nd->in[0], l), t->rank, nd->dim, nd->dim);
  t->lay.kind = LOOM__LAY_SLICED, t->lay.arg = nd->dim;
  return LOOM_SUCCESS;
}

static loom_result_t infer_pointwise(loom__prog_t *p, int id) {
  loom__node_t *nd = &p->nodes[id];
  loom__type_t t;
  memset(&t, 0, sizeof t);
  LOOM_TRY(infer_dtype(p, id, &t.dtype));
  LOOM_TRY(broadcast(p, id, &t));
  int have = 0, g = LOOM__GROUP_ANY;
  t.lay.kind = LOOM__LAY_REPLICATED;
  for (int k = nd->op == LOOM__OP_UPDATE ? 1 : 0; k < nd->nin; ++k) {
    LOOM_TRY(combine(p, id, nd->in[k], &t.lay, &have, t.rank));
    LOOM_TRY(join_group(p, id, nd->in[k], &g));
  }
  t.lay.group = g;
  LOOM_TRY(no_sliced_broadcast(p, id, &t));
  if (nd->op == LOOM__OP_SLICE) {
    LOOM_TRY(need_slice(p, id, &t));
  }
  nd->ty = t;
  return LOOM_SUCCESS;
}

/* ---- MatMul and norms ------------------------------------------------------------ */

static loom_result_t matmul_layout(const loom__prog_t *p, int id, int R, loom__layout_t *o) {
  const loom__node_t *nd = &p->nodes[id];
  const loom__layout_t la = ty(p, nd->in[0])->lay, lb = ty(p, nd->in[1])->lay;
  const int ra = ty(p, nd->in[0])->rank;
  const int aR = la.kind == LOOM__LAY_REPLICATED, bR = lb.kind == LOOM__LAY_REPLICATED;
  const int aL = la.kind == LOOM__LAY_LOCAL, bL = lb.kind == LOOM__LAY_LOCAL;
  if ((aR || aL) && (bR || bL)) {
    o->kind = aR && bR ? LOOM__LAY_REPLICATED : LOOM__LAY_LOCAL;
  } else if (la.kind == LOOM__LAY_SLICED && la.arg == ra - 1 && lb.kind == LOOM__LAY_SLICED && lb.arg == 0) {
    o->kind = LOOM__LAY_LOCAL;
  } else if (aR && lb.kind == LOOM__LAY_SLICED && lb.arg == 1) {
    o->kind = LOOM__LAY_SLICED, o->arg = R - 1;
  } else if (la.kind == LOOM__LAY_SLICED && la.arg < ra - 1 && bR) {
    o->kind = LOOM__LAY_SLICED, o->arg = la.arg;
  } else {
    char b1[96], b2[96], l1[64], l2[64];
    return err(p, id,
               "operand %s is %s and %s is %s; MatMul takes (Sliced(last), Sliced(0)) -> Local, "
               "(Replicated, Sliced(1)) -> Sliced(last), (Sliced(d), Replicated) -> Sliced(d), or Replicated/Local pairs",
               lab(p, nd->in[0], b1), lay(p, nd->in[0], l1), lab(p, nd->in[1], b2), lay(p, nd->in[1], l2));
  }
  return LOOM_SUCCESS;
}

static loom_result_t infer_matmul(loom__prog_t *p, int id) {
  loom__node_t *nd = &p->nodes[id];
  const loom__type_t *a = ty(p, nd->in[0]), *b = ty(p, nd->in[1]);
  char s1[96], s2[96];
  if (a->rank < 1 || b->rank != 2 || !loom__lang_dim_eq(&a->dims[a->rank - 1], &b->dims[0]))
    return err(p, id, "shapes %s and %s; MatMul needs [.., K] and [K, N]", loom__lang_shape_str(a, s1, sizeof s1),
               loom__lang_shape_str(b, s2, sizeof s2));
  loom__type_t t = *a;
  t.dims[t.rank - 1] = b->dims[1];
  LOOM_TRY(infer_dtype(p, id, &t.dtype));
  t.lay.group = LOOM__GROUP_ANY;
  LOOM_TRY(join_group(p, id, nd->in[0], &t.lay.group));
  LOOM_TRY(join_group(p, id, nd->in[1], &t.lay.group));
  LOOM_TRY(matmul_layout(p, id, t.rank, &t.lay));
  nd->ty = t;
  return LOOM_SUCCESS;
}

static loom_result_t infer_norm(loom__prog_t *p, int id) {
  loom__node_t *nd = &p->nodes[id];
  const loom__type_t *x = ty(p, nd->in[0]);
  loom__type_t t = *x;
  char b[96], l[64], s1[96];
  if (nd->op == LOOM__OP_NORM) {
    t.rank = 0;
    if (t.lay.kind == LOOM__LAY_SLICED) t.lay.kind = LOOM__LAY_REPLICATED;
    nd->ty = t;
    return LOOM_SUCCESS;
  }
  if (x->rank < 1) return err(p, id, "operand %s is a scalar; a row norm needs rows", lab(p, nd->in[0], b));
  if (x->lay.kind == LOOM__LAY_SLICED && x->lay.arg == x->rank - 1)
    return err(p, id, "operand %s is %s along the normalised dimension; it needs whole rows (Sliced on another dimension, Replicated or Local)",
               lab(p, nd->in[0], b), lay(p, nd->in[0], l));
  for (int k = 1; k < nd->nin; ++k) {
    const loom__type_t *w = ty(p, nd->in[k]);
    if (w->rank != 1 || !loom__lang_dim_eq(&w->dims[0], &x->dims[x->rank - 1]) || w->lay.kind != LOOM__LAY_REPLICATED)
      return err(p, id, "operand %s is %s %s; it needs [%s] Replicated", lab(p, nd->in[k], b),
                 loom__lang_shape_str(w, s1, sizeof s1), lay(p, nd->in[k], l),
                 x->dims[x->rank - 1].sym[0] ? x->dims[x->rank - 1].sym : "last dimension");
    LOOM_TRY(join_group(p, id, nd->in[k], &t.lay.group));
  }
  nd->ty = t;
  return LOOM_SUCCESS;
}

/* ---- communication --------------------------------------------------------------- */

static loom_result_t need(const loom__prog_t *p, int id, int ok, const char *what) {
  if (ok) return LOOM_SUCCESS;
  char b[96], l[64];
  const int a = p->nodes[id].in[0];
  return err(p, id, "operand %s is %s; %s needs %s", lab(p, a, b), lay(p, a, l),
             loom__lang_op_info(p->nodes[id].op)->name, what);
}

static loom_result_t infer_comm(loom__prog_t *p, int id) {
  loom__node_t *nd = &p->nodes[id];
  const loom__type_t *x = ty(p, nd->in[0]);
  loom__type_t t = *x;
  const int k = x->lay.kind;
  switch (nd->op) {
    case LOOM__OP_ALLREDUCE:
      LOOM_TRY(need(p, id, k == LOOM__LAY_LOCAL, "Local (a partial value on each rank)"));
      t.lay.kind = LOOM__LAY_REPLICATED;
      break;
    case LOOM__OP_REDUCESCATTER:
      LOOM_TRY(need(p, id, k == LOOM__LAY_LOCAL && x->rank >= 1, "Local with at least one dimension"));
      t.lay.kind = LOOM__LAY_SLICED, t.lay.arg = 0;
      break;
    case LOOM__OP_ALLGATHER:
      LOOM_TRY(need(p, id, k == LOOM__LAY_SLICED, "Sliced(d)"));
      t.lay.kind = LOOM__LAY_REPLICATED;
      break;
    case LOOM__OP_REDUCE:
      LOOM_TRY(need(p, id, k == LOOM__LAY_LOCAL, "Local (a partial value on each rank)"));
      t.lay.kind = LOOM__LAY_ROOT, t.lay.arg = nd->root;
      break;
    case LOOM__OP_BROADCAST:
      LOOM_TRY(need(p, id, k == LOOM__LAY_ROOT || k == LOOM__LAY_LOCAL, "Root(r) or Local"));
      if (k == LOOM__LAY_ROOT && nd->root != x->lay.arg)
        return err(p, id, "operand is Root(%d) but the root is %d; they must agree", x->lay.arg, nd->root);
      t.lay.kind = LOOM__LAY_REPLICATED;
      break;
    case LOOM__OP_ALLTOALL:
      LOOM_TRY(need(p, id, k == LOOM__LAY_SLICED && x->lay.arg != nd->dim && nd->dim < x->rank,
                    "Sliced(d) with d other than the result's dimension, within its rank"));
      t.lay.arg = nd->dim;
      break;
    default: /* Send */
      LOOM_TRY(need(p, id, x->lay.group >= 0, "a GROUP(i) of a pipeline program"));
      t.lay.group = x->lay.group + nd->send_off;
      break;
  }
  nd->ty = t;
  return LOOM_SUCCESS;
}

/* ---- leaves, statements ------------------------------------------------------------- */

static loom_result_t infer_input(loom__prog_t *p, int id) {
  loom__node_t *nd = &p->nodes[id];
  nd->ty = nd->decl;
  if (nd->ty.lay.kind == LOOM__LAY_SLICED && nd->ty.lay.arg >= nd->ty.rank)
    return err(p, id, "`%s` is Sliced(%d) but has %d dimensions", nd->name, nd->ty.lay.arg, nd->ty.rank);
  return LOOM_SUCCESS;
}

static loom_result_t infer_node(loom__prog_t *p, int id) {
  loom__node_t *nd = &p->nodes[id];
  switch (loom__lang_op_info(nd->op)->cls) {
    case LOOM__CLS_LEAF:
      if (nd->op == LOOM__OP_INPUT) return infer_input(p, id);
      memset(&nd->ty, 0, sizeof nd->ty);
      nd->ty.lay.kind = LOOM__LAY_REPLICATED, nd->ty.lay.group = LOOM__GROUP_ANY;
      return LOOM_SUCCESS;
    case LOOM__CLS_POINTWISE:
      if (nd->op == LOOM__OP_UPDATE && p->nodes[nd->in[0]].op != LOOM__OP_INPUT)
        return err(p, id, "operand %s is no Tensor; only an input tensor holds state", p->nodes[nd->in[0]].name);
      return infer_pointwise(p, id);
    case LOOM__CLS_COMPUTE: return nd->op == LOOM__OP_MATMUL ? infer_matmul(p, id) : infer_norm(p, id);
    default: return infer_comm(p, id);
  }
}

static int same_type(const loom__type_t *a, const loom__type_t *b) {
  if (a->rank != b->rank || a->lay.kind != b->lay.kind || a->lay.group != b->lay.group) return 0;
  if ((a->lay.kind == LOOM__LAY_SLICED || a->lay.kind == LOOM__LAY_ROOT) && a->lay.arg != b->lay.arg) return 0;
  for (int i = 0; i < a->rank; ++i)
    if (!loom__lang_dim_eq(&a->dims[i], &b->dims[i])) return 0;
  return 1;
}

static loom_result_t check_states(loom__prog_t *p) {
  for (int i = 0; i < p->nstate; ++i) {
    const int t = p->states[i].tensor, v = p->states[i].value;
    const loom__type_t *a = ty(p, t), *b = ty(p, v);
    if (same_type(a, b) || (b->lay.kind == LOOM__LAY_REPLICATED && b->lay.group == LOOM__GROUP_ANY && b->rank == 0)) continue;
    char l1[64], l2[64], s1[96], s2[96], bv[96];
    return err(p, t, "state `%s` is %s %s; its new value %s is %s %s", p->nodes[t].name, lay(p, t, l1),
               loom__lang_shape_str(a, s1, sizeof s1), lab(p, v, bv), lay(p, v, l2), loom__lang_shape_str(b, s2, sizeof s2));
  }
  return LOOM_SUCCESS;
}

/* A pipeline program names GROUP(i) for every input; a WORLD program none. */
static loom_result_t check_groups(loom__prog_t *p) {
  int world = -1, staged = -1;
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || p->nodes[i].op != LOOM__OP_INPUT) continue;
    if (p->nodes[i].decl.lay.group < 0) world = i; else staged = i;
  }
  if (world >= 0 && staged >= 0)
    return err(p, world, "`%s` is in WORLD but `%s` in GROUP(%d); a pipeline program puts every tensor in a GROUP(i)",
               p->nodes[world].name, p->nodes[staged].name, p->nodes[staged].decl.lay.group);
  return LOOM_SUCCESS;
}

int loom__lang_ngroups(const loom__prog_t *p) {
  int g = 0;
  for (int i = 0; i < p->n; ++i)
    if (!p->nodes[i].removed && p->nodes[i].typed && p->nodes[i].ty.lay.group + 1 > g) g = p->nodes[i].ty.lay.group + 1;
  return g ? g : 1;
}

static loom_result_t check_exec(loom__prog_t *p) {
  if (!p->name[0]) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: the program has no Execute statement", p->file);
  for (int i = 0; i < p->nexec_in; ++i)
    if (p->nodes[p->exec_in[i]].op != LOOM__OP_INPUT)
      return err(p, p->exec_in[i], "Execute %s: input `%s` is a Var; inputs are Tensors", p->name,
                 p->nodes[p->exec_in[i]].name);
  for (int i = 0; i < p->nexec_out; ++i)
    if (p->nodes[p->exec_out[i]].removed)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: Execute %s: output %d was removed", p->file, p->name, i);
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_infer(loom__prog_t *p) {
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n = 0;
  if (!order) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  loom_result_t r = loom__lang_topo(p, order, &n);
  for (int i = 0; i < p->n; ++i) p->nodes[i].typed = 0;
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) {
    r = infer_node(p, order[i]);
    p->nodes[order[i]].typed = r == LOOM_SUCCESS;
  }
  free(order);
  if (r == LOOM_SUCCESS) r = check_groups(p);
  if (r == LOOM_SUCCESS) r = check_states(p);
  if (r == LOOM_SUCCESS) r = check_exec(p);
  p->typed = r == LOOM_SUCCESS;
  return r;
}
