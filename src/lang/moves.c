/*
 * moves.c - what the schedule search (explore.c) tries from a program: one
 * statement each, named from the program's own names so that two orders of
 * the same steps print the same program:
 *
 *   split       both policies of each AllReduce not yet grouped
 *   reorder     each AllGather / Broadcast past the unit that consumes it;
 *               also as a move with its clean-up: every state that is no
 *               output kept on its slices (asSlice), then every value
 *               nothing uses removed (dead): the paper's Figure 6b, where
 *               the moments stay on their slices)
 *   fuse        for each named pointwise value (or Send), the cone of
 *               pointwise operations that computes it (every fusible
 *               ancestor outside a kernel, up to the first operation that
 *               is not): AR-Opt's one update kernel, Figure 4's fuseOut,
 *               Figure 8's fuseSend
 *   fuseComm    a ReduceScatter or AllReduce with the kernel that consumes
 *               it and the gathers of that kernel's values
 *   overlap     a unit that talks to other ranks or runs a MatMul with each
 *               such unit that consumes it, extended along the chain of
 *               such units each the only consumer of the one before (Figure
 *               4's MatMul with its fused AllReduce, Figure 8b's
 *               ReduceScatter, sliced Send and AllGather)
 *   asSlice, dead  where they apply
 *
 * A move may not apply (the transformation refuses it); the search drops it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"

static void push(loom__moves_t *c, int cleanup, const char *fn, int nlhs, const char *const *lhs, int nargs,
                 const char *const *args) {
  if (c->n == c->cap) {
    const int cap = c->cap ? c->cap * 2 : 16;
    loom__move_t *q = realloc(c->m, sizeof *q * (size_t)cap);
    if (!q) return; /* fewer moves: the search sees fewer schedules, never a wrong one */
    c->m = q, c->cap = cap;
  }
  loom__move_t *mv = &c->m[c->n++];
  memset(mv, 0, sizeof *mv);
  mv->cleanup = cleanup;
  loom__stmt_t *st = &mv->st;
  snprintf(st->fn, sizeof st->fn, "%s", fn);
  st->nlhs = nlhs, st->nargs = nargs;
  for (int i = 0; i < nlhs; ++i) snprintf(st->lhs[i], LOOM__LANG_NAME, "%s", lhs[i]);
  for (int i = 0; i < nargs; ++i) snprintf(st->args[i], LOOM__LANG_NAME, "%s", args[i]);
}

static const char *nm(const loom__prog_t *p, int id) { return p->nodes[id].name; }

static void named(const loom__prog_t *p, const char *prefix, const char *base, char out[LOOM__LANG_NAME]) {
  char b[LOOM__LANG_NAME + 8];
  snprintf(b, sizeof b, "%s%.38s", prefix, base);
  loom__lang_fresh_name(p, b, out);
}

static int is_comm(const loom__node_t *nd) { return loom__lang_op_info((loom__op_t)nd->op)->cls == LOOM__CLS_COMM; }

static int fusible(const loom__node_t *nd) {
  return loom__lang_op_info((loom__op_t)nd->op)->cls == LOOM__CLS_POINTWISE || nd->op == LOOM__OP_SEND;
}

/* ---- units ----------------------------------------------------------------------------- */

/* The unit a statement addresses id by, outside stages: its fused collective, its kernel, or itself. */
static int unit_key(const loom__prog_t *p, int id) {
  const loom__node_t *nd = &p->nodes[id];
  return nd->coll >= 0 ? p->n + nd->coll : nd->kern >= 0 ? p->n + nd->kern : id;
}

static const char *unit_name(const loom__prog_t *p, int key) {
  return key >= p->n ? p->groups[key - p->n].name : loom__lang_anonymous(&p->nodes[key]) ? "" : nm(p, key);
}

static int in_unit(const loom__prog_t *p, int id, int key) { return !p->nodes[id].removed && unit_key(p, id) == key; }

/* 1 if unit `key` talks to other ranks or runs a MatMul (worth overlapping), and is in no stage. */
static int unit_heavy(const loom__prog_t *p, int key) {
  int heavy = 0;
  for (int i = 0; i < p->n; ++i) {
    if (!in_unit(p, i, key)) continue;
    if (p->nodes[i].stage >= 0) return 0;
    heavy |= is_comm(&p->nodes[i]) || p->nodes[i].op == LOOM__OP_MATMUL;
  }
  return heavy;
}

/* The one unit that holds every user (outside the unit) of unit `key`'s values; -1 if none or several. */
static int next_unit(const loom__prog_t *p, int key) {
  int next = -1;
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || in_unit(p, i, key)) continue;
    for (int k = 0; k < p->nodes[i].nin; ++k) {
      if (!in_unit(p, p->nodes[i].in[k], key)) continue;
      const int u = unit_key(p, i);
      if (next >= 0 && next != u) return -1;
      next = u;
    }
  }
  return next;
}

/* ---- the moves -------------------------------------------------------------------------- */

static void move_split(const loom__prog_t *p, int i, loom__moves_t *c) {
  char a[LOOM__LANG_NAME], b[LOOM__LANG_NAME], d[LOOM__LANG_NAME], e[LOOM__LANG_NAME];
  named(p, "rs_", nm(p, i), a), named(p, "ag_", nm(p, i), b);
  named(p, "red_", nm(p, i), d), named(p, "bc_", nm(p, i), e);
  const char *l1[] = {a, b}, *l2[] = {d, e}, *x1[] = {nm(p, i), "AllReduceSplitRSAG"}, *x2[] = {nm(p, i), "AllReduceSplitRB"};
  push(c, 0, "split", 2, l1, 2, x1);
  push(c, 0, "split", 2, l2, 2, x2);
}

/* The kernel (or single named pointwise node) that holds every user of id, by name; "" if none. */
static const char *consumer_unit(const loom__prog_t *p, int id) {
  int users[64];
  const int nu = loom__lang_users(p, id, users, 64);
  if (nu < 1 || nu > 64) return "";
  const int k = p->nodes[users[0]].kern;
  for (int i = 0; i < nu; ++i)
    if (p->nodes[users[i]].kern != k || (k < 0 && nu > 1)) return "";
  if (k >= 0) return p->groups[k].name;
  return loom__lang_anonymous(&p->nodes[users[0]]) ? "" : nm(p, users[0]);
}

static void move_reorder(const loom__prog_t *p, int i, loom__moves_t *c) {
  const char *unit = consumer_unit(p, i);
  if (!*unit) return;
  const char *a[] = {nm(p, i), unit};
  push(c, 0, "reorder", 0, NULL, 2, a);
  push(c, 1, "reorder", 0, NULL, 2, a);
}

/* fuse of the cone that computes i: its fusible ancestors outside kernels, named ones as arguments. */
static void move_fuse(const loom__prog_t *p, int i, loom__moves_t *c) {
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n = 0;
  char *cone = calloc((size_t)p->n + 1, 1);
  if (!order || !cone || loom__lang_topo(p, order, &n) != LOOM_SUCCESS) {
    free(order), free(cone);
    return;
  }
  cone[i] = 1;
  for (int t = n - 1; t >= 0; --t) { /* users before operands: a cone member marks its fusible operands */
    const loom__node_t *nd = &p->nodes[order[t]];
    if (!cone[order[t]]) continue;
    for (int k = 0; k < nd->nin; ++k)
      if (fusible(&p->nodes[nd->in[k]]) && p->nodes[nd->in[k]].kern < 0) cone[nd->in[k]] = 1;
  }
  const char *args[LOOM__LANG_ARGS];
  int na = 0, fits = 1;
  for (int t = 0; t < n; ++t)
    if (cone[order[t]] && !loom__lang_anonymous(&p->nodes[order[t]])) {
      if (na == LOOM__LANG_ARGS) fits = 0;
      else args[na++] = nm(p, order[t]);
    }
  if (fits) {
    char k[LOOM__LANG_NAME];
    named(p, "k_", nm(p, i), k);
    const char *l[] = {k};
    push(c, 0, "fuse", 1, l, na, args);
  }
  free(order), free(cone);
}

static void move_fuse_comm(const loom__prog_t *p, int i, loom__moves_t *c) {
  const char *unit = consumer_unit(p, i);
  const int g = *unit ? loom__lang_find_group(p, unit) : -1;
  if (g < 0) return;
  const char *args[LOOM__LANG_ARGS] = {nm(p, i), unit};
  int n = 2;
  for (int j = 0; j < p->n && n < LOOM__LANG_ARGS - 1; ++j) /* gathers of the kernel's values */
    if (!p->nodes[j].removed && p->nodes[j].op == LOOM__OP_ALLGATHER && p->nodes[p->nodes[j].in[0]].kern == g)
      args[n++] = nm(p, j);
  char f[LOOM__LANG_NAME];
  named(p, "fc_", nm(p, i), f);
  const char *l[] = {f};
  push(c, 0, "fuseComm", 1, l, n, args);
}

/* overlap(start, u) for each heavy unit u consuming unit `start`, and along the chain after u. */
static void move_overlap(const loom__prog_t *p, int start, loom__moves_t *c) {
  if (!*unit_name(p, start) || !unit_heavy(p, start)) return;
  int tried[16], ntried = 0;
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || in_unit(p, i, start)) continue;
    int uses = 0;
    for (int k = 0; k < p->nodes[i].nin; ++k) uses |= in_unit(p, p->nodes[i].in[k], start);
    const int u = unit_key(p, i);
    int dup = 0;
    for (int t = 0; t < ntried; ++t) dup |= tried[t] == u;
    if (!uses || dup || ntried == 16 || !*unit_name(p, u) || !unit_heavy(p, u)) continue;
    tried[ntried++] = u;
    int chain[4] = {start, u}, len = 2;
    char o[LOOM__LANG_NAME];
    named(p, "ov_", unit_name(p, start), o);
    for (;;) {
      const char *l[] = {o}, *a[4];
      for (int t = 0; t < len; ++t) a[t] = unit_name(p, chain[t]);
      push(c, 0, "overlap", 1, l, len, a);
      const int next = len < 4 ? next_unit(p, chain[len - 1]) : -1;
      if (next < 0 || next == start || !*unit_name(p, next) || !unit_heavy(p, next)) break;
      chain[len++] = next;
    }
  }
}

void loom__lang_moves(const loom__prog_t *p, loom__moves_t *c) {
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->removed) continue;
    if (nd->stage < 0 && nd->coll < 0 && nd->kern < 0) move_overlap(p, i, c); /* a lone operation */
    if (loom__lang_anonymous(nd)) continue;
    const char *a1[] = {nd->name};
    if (nd->op == LOOM__OP_ALLREDUCE && nd->coll < 0 && nd->stage < 0) move_split(p, i, c);
    if (nd->op == LOOM__OP_ALLGATHER || nd->op == LOOM__OP_BROADCAST) move_reorder(p, i, c);
    if (fusible(nd) && nd->kern < 0) move_fuse(p, i, c);
    if ((nd->op == LOOM__OP_REDUCESCATTER || nd->op == LOOM__OP_ALLREDUCE) && nd->coll < 0) move_fuse_comm(p, i, c);
    if (nd->op == LOOM__OP_INPUT && nd->decl.lay.kind == LOOM__LAY_REPLICATED) push(c, 0, "asSlice", 0, NULL, 1, a1);
    if (nd->op != LOOM__OP_INPUT && loom__lang_users(p, i, NULL, 0) == 0 && !loom__lang_is_result(p, i))
      push(c, 0, "dead", 0, NULL, 1, a1);
  }
  for (int g = 0; g < p->ngroups; ++g) /* kernels and fused collectives start chains too */
    if (p->groups[g].level < 2) move_overlap(p, p->n + g, c);
}

/* ---- clean-up ------------------------------------------------------------------------------ */

/* Applies one statement fn(name) if it applies; appends it to out[] then. */
static int try_one(loom__prog_t *p, const char *fn, const char *name, loom__stmt_t *out, int cap, int *n) {
  if (*n == cap) return 0;
  loom__stmt_t st;
  memset(&st, 0, sizeof st);
  snprintf(st.fn, sizeof st.fn, "%s", fn);
  snprintf(st.args[0], LOOM__LANG_NAME, "%s", name);
  st.nargs = 1;
  if (loom__lang_apply(p, &st) != LOOM_SUCCESS) return 0;
  out[(*n)++] = st;
  return 1;
}

/* 1 if v (a state's new value) is gathered into an Execute output: its tensor is needed whole anyway. */
static int is_output_source(const loom__prog_t *p, int v) {
  for (int i = 0; i < p->nexec_out; ++i) {
    const loom__node_t *o = &p->nodes[p->exec_out[i]];
    if (p->exec_out[i] == v || ((o->op == LOOM__OP_ALLGATHER || o->op == LOOM__OP_BROADCAST) && o->in[0] == v)) return 1;
  }
  return 0;
}

loom_result_t loom__lang_cleanup(loom__prog_t *p, loom__stmt_t *out, int cap, int *n) {
  *n = 0;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < p->n; ++i) {
      const loom__node_t *nd = &p->nodes[i];
      if (nd->removed || loom__lang_anonymous(nd)) continue;
      char name[LOOM__LANG_NAME];
      snprintf(name, sizeof name, "%s", nd->name); /* a copy: applying replaces the node array */
      const int st = nd->op == LOOM__OP_INPUT ? loom__lang_state_of(p, i) : -1;
      if (st >= 0 && nd->decl.lay.kind == LOOM__LAY_REPLICATED && !is_output_source(p, p->states[st].value))
        changed |= try_one(p, "asSlice", name, out, cap, n);
      else if (nd->op != LOOM__OP_INPUT && loom__lang_users(p, i, NULL, 0) == 0 && !loom__lang_is_result(p, i))
        changed |= try_one(p, "dead", name, out, cap, n);
    }
  }
  return LOOM_SUCCESS;
}
