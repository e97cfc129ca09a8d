/*
 * equal.c - structural equality of two programs, the round trip's measure:
 * the same inputs (names, declarations), the same named values computed by
 * the same expression trees (anonymous nodes compared by what they compute,
 * wherever they sit in the node array), the same Execute lists and states,
 * and the same kernels and stages with the same members.
 */
#include <string.h>

#include "lang/lang.h"

static int attrs_equal(const loom__node_t *x, const loom__node_t *y) {
  if (x->op != y->op || x->nin != y->nin) return 0;
  switch (x->op) {
    case LOOM__OP_CONST: return x->value == y->value;
    case LOOM__OP_DROPOUT: return x->value == y->value && x->seed == y->seed;
    case LOOM__OP_CAST: return x->dtype == y->dtype;
    case LOOM__OP_RMSNORM: case LOOM__OP_LAYERNORM: return x->value == y->value;
    case LOOM__OP_REDUCE: return x->root == y->root && x->redop == y->redop;
    case LOOM__OP_BROADCAST: return x->root == y->root;
    case LOOM__OP_ALLREDUCE: case LOOM__OP_REDUCESCATTER: return x->redop == y->redop;
    case LOOM__OP_ALLTOALL: case LOOM__OP_SLICE: return x->dim == y->dim;
    case LOOM__OP_SEND: return x->send_off == y->send_off;
    case LOOM__OP_INPUT: return !memcmp(&x->decl, &y->decl, sizeof x->decl);
    default: return 1;
  }
}

static const char *gname(const loom__prog_t *p, int g) { return g < 0 ? "" : p->groups[g].name; }

static int node_equal(const loom__prog_t *a, int i, const loom__prog_t *b, int j, int depth) {
  const loom__node_t *x = &a->nodes[i], *y = &b->nodes[j];
  if (depth > 10000 || x->removed || y->removed) return 0;
  if (loom__lang_anonymous(x) != loom__lang_anonymous(y)) return 0;
  if (!loom__lang_anonymous(x) && strcmp(x->name, y->name)) return 0;
  if (!attrs_equal(x, y)) return 0;
  if (strcmp(gname(a, x->kern), gname(b, y->kern)) || strcmp(gname(a, x->coll), gname(b, y->coll)) ||
      strcmp(gname(a, x->stage), gname(b, y->stage)))
    return 0;
  for (int k = 0; k < x->nin; ++k) {
    const int ai = x->in[k], bj = y->in[k];
    if (!loom__lang_anonymous(&a->nodes[ai])) {
      if (loom__lang_anonymous(&b->nodes[bj]) || strcmp(a->nodes[ai].name, b->nodes[bj].name)) return 0;
    } else if (!node_equal(a, ai, b, bj, depth + 1)) {
      return 0;
    }
  }
  return 1;
}

static int count_live(const loom__prog_t *p, int named) {
  int n = 0;
  for (int i = 0; i < p->n; ++i)
    if (!p->nodes[i].removed && (!named || !loom__lang_anonymous(&p->nodes[i]))) n++;
  return n;
}

static int lists_equal(const loom__prog_t *a, const int *x, int nx, const loom__prog_t *b, const int *y, int ny) {
  if (nx != ny) return 0;
  for (int i = 0; i < nx; ++i)
    if (!node_equal(a, x[i], b, y[i], 0)) return 0;
  return 1;
}

static int states_equal(const loom__prog_t *a, const loom__prog_t *b) {
  if (a->nstate != b->nstate) return 0;
  for (int i = 0; i < a->nstate; ++i) {
    const int t = loom__lang_find(b, a->nodes[a->states[i].tensor].name);
    const int s = t < 0 ? -1 : loom__lang_state_of(b, t);
    if (s < 0 || !node_equal(a, a->states[i].value, b, b->states[s].value, 0)) return 0;
  }
  return 1;
}

static int groups_equal(const loom__prog_t *a, const loom__prog_t *b) {
  if (a->ngroups != b->ngroups) return 0;
  for (int g = 0; g < a->ngroups; ++g) {
    const int h = loom__lang_find_group(b, a->groups[g].name);
    if (h < 0 || a->groups[g].kind != b->groups[h].kind || a->groups[g].level != b->groups[h].level) return 0;
  }
  return 1;
}

int loom__lang_equal(const loom__prog_t *a, const loom__prog_t *b) {
  if (strcmp(a->name, b->name) || count_live(a, 0) != count_live(b, 0) || count_live(a, 1) != count_live(b, 1))
    return 0;
  for (int i = 0; i < a->n; ++i) {
    if (a->nodes[i].removed || loom__lang_anonymous(&a->nodes[i])) continue;
    const int j = loom__lang_find(b, a->nodes[i].name);
    if (j < 0 || !node_equal(a, i, b, j, 0)) return 0;
  }
  return lists_equal(a, a->exec_in, a->nexec_in, b, b->exec_in, b->nexec_in) &&
         lists_equal(a, a->exec_out, a->nexec_out, b, b->exec_out, b->nexec_out) && states_equal(a, b) &&
         groups_equal(a, b);
}
