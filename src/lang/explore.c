/*
 * explore.c - the schedules the transformations reach from a program
 * (`loom schedules`), and a cost estimate for each.
 *
 * Search: breadth first from the unscheduled program; at each program the
 * candidate statements are every split (both policies) of each AllReduce,
 * each AllGather / Broadcast reordered past the kernel (or the single
 * pointwise operation) that consumes it, a fuse of each connected group of
 * pointwise operations, each fused collective the kernels allow, each
 * asSlice and dead that applies, and each overlap of a MatMul with the
 * collective (or fused collective) it feeds or is fed by. A candidate that
 * the transformation refuses is dropped; one that gives a program already
 * seen (same printed text: names are derived from content, so two orders of
 * the same steps meet) is merged. Bounded by depth and count.
 *
 * Cost (per rank; the next issue's tuner replaces it with measurements):
 * every unit the schedule runs (a stage, a fused collective, a kernel or a
 * lone operation) reads the values it takes from outside and writes those
 * it hands on (HBM bytes), does 2*M*N*K FLOPs per MatMul piece, and moves
 * over links (W-1)/W of the whole for ReduceScatter and AllGather, twice
 * that for AllReduce, the whole for Reduce / Broadcast, its piece for
 * Send. Time: per unit max(FLOPs / 400 TFLOP/s, HBM / 3 TB/s) plus link
 * bytes / 150 GB/s, except a stage, which takes the larger of its compute
 * and its communication.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/interp_ops.h"
#include "lang/lang.h"

/* ---- cost ------------------------------------------------------------------------ */

static int64_t dim_val(const loom__binding_t *b, const loom__dim_t *d) {
  if (!d->sym[0]) return d->n;
  for (int i = 0; i < b->n; ++i)
    if (!strcmp(b->sym[i], d->sym)) return b->val[i];
  return 1024; /* an unbound size: a typical one */
}

/* Elements of id on one rank, and of the whole. */
static double elems(const loom__prog_t *p, int id, int W, const loom__binding_t *b, double *whole) {
  const loom__type_t *t = &p->nodes[id].ty;
  double n = 1;
  for (int i = 0; i < t->rank; ++i) n *= (double)dim_val(b, &t->dims[i]);
  if (whole) *whole = n;
  return t->lay.kind == LOOM__LAY_SLICED ? n / W : n;
}

static double bytes(const loom__prog_t *p, int id, int W, const loom__binding_t *b) {
  return elems(p, id, W, b, NULL) * (double)loom_dtype_size((loom_dtype_t)p->nodes[id].ty.dtype);
}

static int unit_of(const loom__prog_t *p, int id) {
  const loom__node_t *nd = &p->nodes[id];
  return nd->stage >= 0 ? p->n + nd->stage : nd->coll >= 0 ? p->n + nd->coll : nd->kern >= 0 ? p->n + nd->kern : id;
}

static void node_cost(const loom__prog_t *p, int id, int W, const loom__binding_t *b, double *flops, double *link) {
  const loom__node_t *nd = &p->nodes[id];
  double whole;
  const double mine = elems(p, id, W, b, &whole), es = (double)loom_dtype_size((loom_dtype_t)nd->ty.dtype);
  switch (nd->op) {
    case LOOM__OP_MATMUL: {
      const loom__type_t *a = &p->nodes[nd->in[0]].ty;
      double k = (double)dim_val(b, &a->dims[a->rank - 1]);
      if (a->lay.kind == LOOM__LAY_SLICED && a->lay.arg == a->rank - 1) k /= W;
      *flops += 2.0 * mine * k;
      break;
    }
    case LOOM__OP_ALLREDUCE: *link += 2.0 * (W - 1) / W * whole * es; break;
    case LOOM__OP_REDUCESCATTER: case LOOM__OP_ALLGATHER: case LOOM__OP_ALLTOALL: *link += (double)(W - 1) / W * whole * es; break;
    case LOOM__OP_REDUCE: case LOOM__OP_BROADCAST: *link += W > 1 ? whole * es : 0; break;
    case LOOM__OP_SEND: *link += mine * es; break;
    default: *flops += loom__lang_op_info(nd->op)->cls == LOOM__CLS_LEAF ? 0 : mine; break;
  }
}

/* HBM bytes of node id inside its unit: operands from other units, and itself if used outside. */
static double node_hbm(const loom__prog_t *p, int id, int W, const loom__binding_t *b) {
  const int u = unit_of(p, id);
  double h = 0;
  for (int k = 0; k < p->nodes[id].nin; ++k)
    if (unit_of(p, p->nodes[id].in[k]) != u && p->nodes[p->nodes[id].in[k]].op != LOOM__OP_CONST)
      h += bytes(p, p->nodes[id].in[k], W, b);
  int out = loom__lang_is_result(p, id);
  for (int i = 0; i < p->n && !out; ++i)
    if (!p->nodes[i].removed && unit_of(p, i) != u)
      for (int k = 0; k < p->nodes[i].nin; ++k) out |= p->nodes[i].in[k] == id;
  return h + (out ? bytes(p, id, W, b) : 0);
}

loom_result_t loom__lang_cost(loom__prog_t *p, int W, const loom__binding_t *bind, loom__cost_t *c) {
  LOOM_TRY(loom__lang_infer(p));
  memset(c, 0, sizeof *c);
  const int U = p->n + p->ngroups;
  double *fl = calloc((size_t)U + 1, sizeof(double)), *hb = calloc((size_t)U + 1, sizeof(double)),
         *lk = calloc((size_t)U + 1, sizeof(double));
  if (!fl || !hb || !lk) {
    free(fl), free(hb), free(lk);
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "cost: out of host memory");
  }
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || loom__lang_op_info(p->nodes[i].op)->cls == LOOM__CLS_LEAF) continue;
    const int u = unit_of(p, i);
    node_cost(p, i, W, bind, &fl[u], &lk[u]);
    hb[u] += node_hbm(p, i, W, bind);
  }
  for (int u = 0; u < U; ++u) {
    if (fl[u] == 0 && hb[u] == 0 && lk[u] == 0) continue;
    const double comp = fl[u] / 400e12 > hb[u] / 3e12 ? fl[u] / 400e12 : hb[u] / 3e12, comm = lk[u] / 150e9;
    const int stage = u >= p->n && p->groups[u - p->n].level == 2;
    c->time_us += 1e6 * (stage ? (comp > comm ? comp : comm) : comp + comm);
    c->flops += fl[u], c->hbm_bytes += hb[u], c->link_bytes += lk[u];
    c->kernels++;
  }
  free(fl), free(hb), free(lk);
  return LOOM_SUCCESS;
}

/* ---- candidates -------------------------------------------------------------------- */

typedef struct cands {
  int n, cap;
  loom__stmt_t *s;
} cands_t;

static void push(cands_t *c, const char *fn, int nlhs, const char *const *lhs, int nargs, const char *const *args) {
  if (c->n == c->cap) {
    const int cap = c->cap ? c->cap * 2 : 16;
    loom__stmt_t *q = realloc(c->s, sizeof *q * (size_t)cap);
    if (!q) return;
    c->s = q, c->cap = cap;
  }
  loom__stmt_t *st = &c->s[c->n++];
  memset(st, 0, sizeof *st);
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

static void cand_split(const loom__prog_t *p, int i, cands_t *c) {
  char a[LOOM__LANG_NAME], b[LOOM__LANG_NAME], d[LOOM__LANG_NAME], e[LOOM__LANG_NAME];
  named(p, "rs_", nm(p, i), a), named(p, "ag_", nm(p, i), b);
  named(p, "red_", nm(p, i), d), named(p, "bc_", nm(p, i), e);
  const char *l1[] = {a, b}, *l2[] = {d, e}, *x1[] = {nm(p, i), "AllReduceSplitRSAG"}, *x2[] = {nm(p, i), "AllReduceSplitRB"};
  push(c, "split", 2, l1, 2, x1);
  push(c, "split", 2, l2, 2, x2);
}

/* The kernel (or single pointwise node) that holds every user of id, by name; "" if none. */
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

static void cand_fuse(const loom__prog_t *p, int i, cands_t *c) {
  /* a pointwise node outside any kernel: fuse it with every named pointwise node it reaches through pointwise nodes */
  const char *args[LOOM__LANG_ARGS];
  int n = 0, cur = i;
  args[n++] = nm(p, i);
  for (int guard = 0; guard < 64 && n < LOOM__LANG_ARGS; ++guard) {
    int users[2];
    if (loom__lang_users(p, cur, users, 2) != 1) break;
    const loom__node_t *u = &p->nodes[users[0]];
    if (u->kern >= 0 || loom__lang_op_info(u->op)->cls != LOOM__CLS_POINTWISE) break;
    cur = users[0];
    if (!loom__lang_anonymous(u)) args[n++] = u->name;
  }
  char k[LOOM__LANG_NAME];
  named(p, "k_", nm(p, i), k);
  const char *l[] = {k};
  push(c, "fuse", 1, l, n, args);
}

static void cand_fuse_comm(const loom__prog_t *p, int i, cands_t *c) {
  const char *unit = consumer_unit(p, i);
  if (!*unit || loom__lang_find_group(p, unit) < 0) return;
  const int g = loom__lang_find_group(p, unit);
  const char *args[LOOM__LANG_ARGS] = {nm(p, i), unit};
  int n = 2;
  for (int j = 0; j < p->n && n < LOOM__LANG_ARGS - 1; ++j) /* gathers of the kernel's values */
    if (!p->nodes[j].removed && p->nodes[j].op == LOOM__OP_ALLGATHER && p->nodes[p->nodes[j].in[0]].kern == g)
      args[n++] = nm(p, j);
  char f[LOOM__LANG_NAME];
  named(p, "fc_", nm(p, i), f);
  const char *l[] = {f};
  push(c, "fuseComm", 1, l, n, args);
}

static void cand_overlap(const loom__prog_t *p, int i, cands_t *c) {
  int users[8];
  const int nu = loom__lang_users(p, i, users, 8);
  for (int k = 0; k < nu && k < 8; ++k) {
    const loom__node_t *u = &p->nodes[users[k]];
    const int comm = loom__lang_op_info(u->op)->cls == LOOM__CLS_COMM;
    const int mm = u->op == LOOM__OP_MATMUL, me_comm = loom__lang_op_info(p->nodes[i].op)->cls == LOOM__CLS_COMM;
    if (!((p->nodes[i].op == LOOM__OP_MATMUL && (comm || u->coll >= 0)) || (me_comm && mm))) continue;
    const char *second = u->coll >= 0 ? p->groups[u->coll].name : u->name;
    if (!*second || u->stage >= 0 || p->nodes[i].coll >= 0) continue;
    char o[LOOM__LANG_NAME];
    named(p, "ov_", nm(p, i), o);
    const char *l[] = {o}, *a[] = {nm(p, i), second};
    push(c, "overlap", 1, l, 2, a);
  }
}

static void candidates(const loom__prog_t *p, cands_t *c) {
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->removed || loom__lang_anonymous(nd)) continue;
    const char *a1[] = {nd->name};
    if (nd->op == LOOM__OP_ALLREDUCE && nd->coll < 0 && nd->stage < 0) cand_split(p, i, c);
    if ((nd->op == LOOM__OP_ALLGATHER || nd->op == LOOM__OP_BROADCAST) && *consumer_unit(p, i)) {
      const char *a[] = {nd->name, consumer_unit(p, i)};
      push(c, "reorder", 0, NULL, 2, a);
    }
    if (loom__lang_op_info(nd->op)->cls == LOOM__CLS_POINTWISE && nd->kern < 0) cand_fuse(p, i, c);
    if ((nd->op == LOOM__OP_REDUCESCATTER || nd->op == LOOM__OP_ALLREDUCE) && nd->coll < 0) cand_fuse_comm(p, i, c);
    if (nd->op == LOOM__OP_INPUT && nd->decl.lay.kind == LOOM__LAY_REPLICATED) push(c, "asSlice", 0, NULL, 1, a1);
    if (nd->op != LOOM__OP_INPUT && loom__lang_users(p, i, NULL, 0) == 0 && !loom__lang_is_result(p, i))
      push(c, "dead", 0, NULL, 1, a1);
    if (nd->stage < 0) cand_overlap(p, i, c);
  }
}

/* ---- search ------------------------------------------------------------------------- */

typedef struct node_state {
  loom__prog_t *prog;
  char *text;
  int parent;
  loom__stmt_t via;
} state_t;

static char *text_of(const loom__prog_t *p) {
  loom__buf_t b = {0};
  if (loom__lang_print(p, 0, &b) != LOOM_SUCCESS || b.oom) {
    free(b.s);
    return NULL;
  }
  return b.s;
}

static int seen(const state_t *st, int n, const char *text) {
  for (int i = 0; i < n; ++i)
    if (!strcmp(st[i].text, text)) return 1;
  return 0;
}

static loom_result_t record(const state_t *st, int i, loom__found_t *out) {
  if (out->n == out->cap) {
    const int cap = out->cap ? out->cap * 2 : 16;
    loom__sched_t *q = realloc(out->scheds, sizeof *q * (size_t)cap);
    if (!q) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "explore: out of host memory");
    out->scheds = q, out->cap = cap;
  }
  loom__sched_t *s = &out->scheds[out->n];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "s%d", out->n);
  out->n++;
  int chain[256], n = 0;
  for (int j = i; j > 0 && n < 256; j = st[j].parent) chain[n++] = j;
  for (int k = n - 1; k >= 0; --k) LOOM_TRY(loom__lang_sched_push(s, &st[chain[k]].via));
  return LOOM_SUCCESS;
}

static loom_result_t expand(state_t **st, int *n, int *cap, int from, int max) {
  cands_t c = {0};
  candidates((*st)[from].prog, &c);
  loom_result_t r = LOOM_SUCCESS;
  for (int k = 0; k < c.n && *n < max && r == LOOM_SUCCESS; ++k) {
    loom__prog_t *q;
    if ((r = loom__lang_clone((*st)[from].prog, &q)) != LOOM_SUCCESS) break;
    char *text = NULL;
    if (loom__lang_apply(q, &c.s[k]) != LOOM_SUCCESS || !(text = text_of(q)) || seen(*st, *n, text)) {
      free(text);
      loom__lang_free(q);
      continue;
    }
    if (*n == *cap) {
      state_t *g = realloc(*st, sizeof **st * (size_t)(*cap * 2));
      if (!g) {
        free(text), loom__lang_free(q);
        r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "explore: out of host memory");
        break;
      }
      *st = g, *cap *= 2;
    }
    (*st)[*n] = (state_t){q, text, from, c.s[k]};
    (*n)++;
  }
  free(c.s);
  return r;
}

loom_result_t loom__lang_explore(const loom__prog_t *p, int depth, int max, loom__found_t *out) {
  memset(out, 0, sizeof *out);
  int n = 1, cap = 64;
  state_t *st = calloc((size_t)cap, sizeof *st);
  if (!st) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "explore: out of host memory");
  loom_result_t r = loom__lang_clone(p, &st[0].prog);
  if (r == LOOM_SUCCESS) r = loom__lang_infer(st[0].prog);
  st[0].text = r == LOOM_SUCCESS ? text_of(st[0].prog) : NULL;
  if (r == LOOM_SUCCESS && !st[0].text) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "explore: out of host memory");
  for (int level = 0, begin = 0; level < depth && r == LOOM_SUCCESS; ++level) {
    const int end = n;
    for (int i = begin; i < end && r == LOOM_SUCCESS; ++i) r = expand(&st, &n, &cap, i, max);
    begin = end;
  }
  for (int i = 1; i < n && r == LOOM_SUCCESS; ++i) r = record(st, i, out);
  for (int i = 0; i < n; ++i) loom__lang_free(st[i].prog), free(st[i].text);
  free(st);
  if (r != LOOM_SUCCESS) loom__lang_found_free(out);
  return r;
}

void loom__lang_found_free(loom__found_t *f) {
  for (int i = 0; f->scheds && i < f->n; ++i) free(f->scheds[i].stmts);
  free(f->scheds);
  memset(f, 0, sizeof *f);
}
