/*
 * printer.c - a program as .loom text that parses back to an equal graph
 * (loom__lang_equal): declarations, then every Var in a topological order,
 * States that are not the default (a tensor's own Update), Execute, and the
 * kernels and stages a schedule made, as a `Schedule applied { ... }` of
 * fuse / fuseComm / overlap statements over the current names.
 *
 * Inlined: anonymous nodes with one user, and constants. Anonymous nodes
 * with several users (the C builder makes them) print as `Var _tN = ...`;
 * the parser keeps names starting with `_` anonymous. Typed printing adds
 * each Var's dtype, shape and layout as a comment.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"

void loom__buf_printf(loom__buf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  va_list ap;
  for (int pass = 0; pass < 2; ++pass) {
    va_start(ap, fmt);
    const int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if (b->s && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap <= b->len + (size_t)n) cap *= 2;
    char *q = realloc(b->s, cap);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->s = q, b->cap = cap;
  }
}

void loom__lang_print_layout(const loom__layout_t *l, loom__buf_t *b) {
  char s[64];
  loom__lang_layout_str(l, s, sizeof s);
  loom__buf_printf(b, "%s", s);
}

void loom__lang_print_type(const loom__type_t *t, loom__buf_t *b) {
  char s[160];
  loom__buf_printf(b, "%s %s ", loom__dtype_name(t->dtype), loom__lang_shape_str(t, s, sizeof s));
  if (t->lay.group == LOOM__GROUP_ANY) {
    loom__buf_printf(b, "Replicated (constant)");
    return;
  }
  loom__lang_print_layout(&t->lay, b);
}

/* ---- expressions ------------------------------------------------------------- */

typedef struct pctx {
  const loom__prog_t *p;
  int *users;   /* live users per node */
  loom__buf_t *b;
} pctx_t;

static int inlined(const pctx_t *c, int id) {
  const loom__node_t *nd = &c->p->nodes[id];
  if (nd->op == LOOM__OP_CONST && nd->name[0] == 0) return 1;
  return nd->name[0] == 0 && nd->op != LOOM__OP_INPUT && c->users[id] == 1 && !loom__lang_is_result(c->p, id);
}

/* 2: * /, 1: + -, 0: comparisons; 3: everything that binds tighter. */
static int prec(int op) {
  if (op == LOOM__OP_MUL || op == LOOM__OP_DIV) return 2;
  if (op == LOOM__OP_ADD || op == LOOM__OP_SUB) return 1;
  if (op >= LOOM__OP_LT && op <= LOOM__OP_NE) return 0;
  return 3;
}

static void print_expr(const pctx_t *c, int id, int min_prec);

static void print_ref(const pctx_t *c, int id, int min_prec) {
  const loom__node_t *nd = &c->p->nodes[id];
  if (!inlined(c, id)) {
    if (nd->name[0])
      loom__buf_printf(c->b, "%s", nd->name);
    else
      loom__buf_printf(c->b, "_t%d", id);
    return;
  }
  const int paren = prec(nd->op) < min_prec || (nd->op == LOOM__OP_CONST && nd->value < 0 && min_prec > 0);
  if (paren) loom__buf_printf(c->b, "(");
  print_expr(c, id, 0);
  if (paren) loom__buf_printf(c->b, ")");
}

/* The shortest %g form that reads back as the same double. */
static void print_num(loom__buf_t *b, double v) {
  char s[40];
  for (int prec = 6; prec <= 17; ++prec) {
    snprintf(s, sizeof s, "%.*g", prec, v);
    if (strtod(s, NULL) == v) break;
  }
  loom__buf_printf(b, "%s", s);
}

static const char *red_str(int r) { return r == LOOM__RED_MAX ? "max" : r == LOOM__RED_MIN ? "min" : "+"; }

static void print_call(const pctx_t *c, const loom__node_t *nd) {
  static const char *dts[] = {"FP32", "FP16", "BF16"};
  loom__buf_t *b = c->b;
  const int op = nd->op;
  loom__buf_printf(b, "%s(", loom__lang_op_info(op)->name);
  if (op == LOOM__OP_ALLREDUCE || op == LOOM__OP_REDUCESCATTER || op == LOOM__OP_REDUCE)
    loom__buf_printf(b, "\"%s\", ", red_str(nd->redop));
  for (int k = 0; k < nd->nin; ++k) {
    if (k) loom__buf_printf(b, ", ");
    print_ref(c, nd->in[k], 0);
  }
  if (op == LOOM__OP_DROPOUT) loom__buf_printf(b, ", "), print_num(b, nd->value);
  if (op == LOOM__OP_DROPOUT && nd->seed) loom__buf_printf(b, ", %llu", (unsigned long long)nd->seed);
  if (op == LOOM__OP_CAST) loom__buf_printf(b, ", %s", dts[nd->dtype % 3]);
  if ((op == LOOM__OP_RMSNORM || op == LOOM__OP_LAYERNORM) && nd->value > 0) loom__buf_printf(b, ", "), print_num(b, nd->value);
  if (op == LOOM__OP_REDUCE || op == LOOM__OP_BROADCAST) loom__buf_printf(b, ", %d", nd->root);
  if (op == LOOM__OP_ALLTOALL || op == LOOM__OP_SLICE) loom__buf_printf(b, ", %d", nd->dim);
  if (op == LOOM__OP_SEND) loom__buf_printf(b, ", GroupRank(GROUP+%d, RANK)", nd->send_off);
  loom__buf_printf(b, ")");
}

static void print_expr(const pctx_t *c, int id, int min_prec) {
  const loom__node_t *nd = &c->p->nodes[id];
  (void)min_prec;
  if (nd->op == LOOM__OP_CONST) {
    print_num(c->b, nd->value);
  } else if (nd->op == LOOM__OP_UPDATE) {
    print_ref(c, nd->in[0], 3);
    loom__buf_printf(c->b, ".update(");
    print_ref(c, nd->in[1], 0);
    loom__buf_printf(c->b, ")");
  } else if (prec(nd->op) < 3) {
    const int pr = prec(nd->op);
    print_ref(c, nd->in[0], pr == 0 ? 1 : pr);
    loom__buf_printf(c->b, " %s ", loom__lang_op_info(nd->op)->name);
    print_ref(c, nd->in[1], pr + 1);
  } else {
    print_call(c, nd);
  }
}

/* ---- statements --------------------------------------------------------------- */

static void print_decl(const pctx_t *c, const loom__node_t *nd) {
  static const char *dts[] = {"FP32", "FP16", "BF16"};
  const loom__type_t *t = &nd->decl;
  char g[24] = "WORLD", s[160];
  if (t->lay.group >= 0) snprintf(g, sizeof g, "GROUP(%d)", t->lay.group);
  if (t->rank == 0 && t->lay.kind == LOOM__LAY_REPLICATED) {
    loom__buf_printf(c->b, "Scalar %s(%s, %s);\n", nd->name, dts[t->dtype % 3], g);
    return;
  }
  loom__buf_printf(c->b, "Tensor %s(%s, %s, ", nd->name, dts[t->dtype % 3], loom__lang_shape_str(t, s, sizeof s));
  loom__layout_t l = t->lay;
  l.group = LOOM__GROUP_WORLD;
  loom__lang_print_layout(&l, c->b);
  loom__buf_printf(c->b, ", %s);\n", g);
}

static void print_var(const pctx_t *c, int id, int typed) {
  const loom__node_t *nd = &c->p->nodes[id];
  if (nd->name[0])
    loom__buf_printf(c->b, "Var %s = ", nd->name);
  else
    loom__buf_printf(c->b, "Var _t%d = ", id);
  print_expr(c, id, 0);
  loom__buf_printf(c->b, ";");
  if (typed && nd->typed) {
    loom__buf_printf(c->b, "  // ");
    loom__lang_print_type(&nd->ty, c->b);
  }
  loom__buf_printf(c->b, "\n");
}

static void print_name(const pctx_t *c, int id) {
  const loom__node_t *nd = &c->p->nodes[id];
  if (nd->name[0])
    loom__buf_printf(c->b, "%s", nd->name);
  else
    loom__buf_printf(c->b, "_t%d", id);
}

static void print_tail(const pctx_t *c) {
  const loom__prog_t *p = c->p;
  for (int i = 0; i < p->nstate; ++i) {
    const loom__node_t *v = &p->nodes[p->states[i].value];
    if (v->op == LOOM__OP_UPDATE && v->in[0] == p->states[i].tensor) continue;
    loom__buf_printf(c->b, "State %s = ", p->nodes[p->states[i].tensor].name);
    print_name(c, p->states[i].value);
    loom__buf_printf(c->b, ";\n");
  }
  loom__buf_printf(c->b, "Execute %s({", p->name);
  for (int i = 0; i < p->nexec_in; ++i) loom__buf_printf(c->b, "%s%s", i ? ", " : "", p->nodes[p->exec_in[i]].name);
  loom__buf_printf(c->b, "}, {");
  for (int i = 0; i < p->nexec_out; ++i) {
    if (i) loom__buf_printf(c->b, ", ");
    print_name(c, p->exec_out[i]);
  }
  loom__buf_printf(c->b, "});\n");
}

static const char *policy_of(int kind) {
  switch (kind) {
    case LOOM__GK_FUSED_AR: return "FusedAllReduce";
    case LOOM__GK_FUSED_RS: return "FusedReduceScatter";
    case LOOM__GK_FUSED_AG: return "FusedAllGather";
    case LOOM__GK_FUSED_ARE: return "FusedAllReduceEpilogue";
    default: return "";
  }
}

/* The items of group g in topological order: sub-groups of the level below by name, else nodes. */
static void print_group(const pctx_t *c, int g, const int *order, int n) {
  const loom__prog_t *p = c->p;
  const loom__group_t *gr = &p->groups[g];
  const char *fn = gr->level == 0 ? "fuse" : gr->level == 1 ? "fuseComm" : "overlap";
  int printed = 0, last_sub = -1;
  char *seen = calloc((size_t)p->ngroups + 1, 1);
  loom__buf_printf(c->b, "  %s = %s(", gr->name, fn);
  for (int i = 0; i < n; ++i) {
    const loom__node_t *nd = &p->nodes[order[i]];
    const int lv[3] = {nd->kern, nd->coll, nd->stage};
    if (lv[gr->level] != g) continue;
    int sub = -1;
    for (int l = gr->level - 1; l >= 0 && sub < 0; --l) sub = lv[l];
    if (sub >= 0 && seen && seen[sub]) continue;
    if (sub < 0 && gr->level == 0 && inlined(c, order[i])) continue;
    if (sub >= 0 && seen) seen[sub] = 1;
    loom__buf_printf(c->b, "%s", printed++ ? ", " : "");
    if (sub >= 0)
      loom__buf_printf(c->b, "%s", p->groups[sub].name);
    else
      print_name(c, order[i]);
    last_sub = sub;
  }
  (void)last_sub;
  free(seen);
  if (gr->level == 1) loom__buf_printf(c->b, ", %s", policy_of(gr->kind));
  loom__buf_printf(c->b, ");\n");
}

static void print_groups(const pctx_t *c, const int *order, int n) {
  if (!c->p->ngroups) return;
  loom__buf_printf(c->b, "Schedule applied {\n");
  for (int lvl = 0; lvl < 3; ++lvl)
    for (int g = 0; g < c->p->ngroups; ++g)
      if (c->p->groups[g].level == lvl) print_group(c, g, order, n);
  loom__buf_printf(c->b, "}\n");
}

loom_result_t loom__lang_print(const loom__prog_t *p, int typed, loom__buf_t *b) {
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n = 0;
  int *users = calloc((size_t)p->n + 1, sizeof(int));
  loom_result_t r = order && users ? loom__lang_topo(p, order, &n)
                                   : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  pctx_t c = {p, users, b};
  for (int i = 0; i < p->n && r == LOOM_SUCCESS; ++i)
    if (!p->nodes[i].removed) users[i] = loom__lang_users(p, i, NULL, 0);
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i)
    if (p->nodes[order[i]].op == LOOM__OP_INPUT) print_decl(&c, &p->nodes[order[i]]);
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i)
    if (p->nodes[order[i]].op != LOOM__OP_INPUT && !inlined(&c, order[i])) print_var(&c, order[i], typed);
  if (r == LOOM_SUCCESS) print_tail(&c);
  if (r == LOOM_SUCCESS) print_groups(&c, order, n);
  free(order);
  free(users);
  if (r == LOOM_SUCCESS && b->oom) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory printing");
  return r;
}
