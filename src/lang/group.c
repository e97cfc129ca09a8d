/*
 * group.c - the transformations that group without rewriting: fuse
 * (pointwise operations into one kernel), fuseComm (a collective and the
 * pointwise kernel around it into one fused collective), overlap (a
 * producer and its consumers in one pipelined stage); and the order in
 * which a schedule runs its groups (loom__lang_unit_order).
 *
 * Each group is convex (no path leaves it and comes back) and the groups of
 * a schedule, taken as single steps, still form an acyclic graph; a
 * transformation that would break either is refused with the reason, and
 * leaves the program as it was. Grouping never changes what a program
 * computes: the interpreter runs the groups in unit order and the host
 * tests compare.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/interp_ops.h"
#include "lang/lang.h"

int loom__lang_members(const loom__prog_t *p, const char *name, int *out, int cap) {
  const int id = loom__lang_find(p, name);
  if (id >= 0) {
    if (cap > 0) out[0] = id;
    return 1;
  }
  const int g = loom__lang_find_group(p, name);
  if (g < 0) return 0;
  int n = 0;
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->removed || (nd->kern != g && nd->coll != g && nd->stage != g)) continue;
    if (n < cap) out[n] = i;
    n++;
  }
  return n;
}

/* ---- convex closure ----------------------------------------------------------- */

/* in[] (0/1 per node) grows to every node on a path between two of its nodes. */
static loom_result_t close_convex(const loom__prog_t *p, char *in) {
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n = 0;
  char *desc = calloc((size_t)p->n + 1, 1), *anc = calloc((size_t)p->n + 1, 1);
  loom_result_t r = order && desc && anc ? loom__lang_topo(p, order, &n)
                                         : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) {
    const loom__node_t *nd = &p->nodes[order[i]];
    for (int k = 0; k < nd->nin; ++k)
      if (in[nd->in[k]] || desc[nd->in[k]]) desc[order[i]] = 1;
  }
  for (int i = n - 1; i >= 0 && r == LOOM_SUCCESS; --i) {
    const loom__node_t *nd = &p->nodes[order[i]];
    if (in[order[i]] || anc[order[i]])
      for (int k = 0; k < nd->nin; ++k) anc[nd->in[k]] = 1;
  }
  for (int i = 0; i < p->n && r == LOOM_SUCCESS; ++i)
    if (desc[i] && anc[i]) in[i] = 1;
  free(order), free(desc), free(anc);
  return r;
}

static int fusible(const loom__node_t *nd) {
  const loom__op_class_t c = loom__lang_op_info(nd->op)->cls;
  return (c == LOOM__CLS_POINTWISE || nd->op == LOOM__OP_CONST || nd->op == LOOM__OP_SEND) && nd->op != LOOM__OP_INPUT;
}

/* Adds id's anonymous pointwise operands (its expression), recursively: an anonymous Norm or MatMul
 * operand (`Norm(p) / Norm(u)`) stays outside, as a named one would. */
static void add_expression(const loom__prog_t *p, int id, char *in) {
  in[id] = 1;
  for (int k = 0; k < p->nodes[id].nin; ++k) {
    const int a = p->nodes[id].in[k];
    if (fusible(&p->nodes[a]) && loom__lang_anonymous(&p->nodes[a]) && !in[a]) add_expression(p, a, in);
  }
}

/* ---- unit order ------------------------------------------------------------------ */

static int unit_of(const loom__prog_t *p, int id) {
  const loom__node_t *nd = &p->nodes[id];
  if (nd->stage >= 0) return p->n + nd->stage;
  if (nd->coll >= 0) return p->n + nd->coll;
  if (nd->kern >= 0) return p->n + nd->kern;
  return id;
}

/* Kahn's algorithm over units; nodes of a unit in topological order. */
loom_result_t loom__lang_unit_order(const loom__prog_t *p, int *order, int *count) {
  const int U = p->n + p->ngroups;
  int *topo = malloc(sizeof(int) * (size_t)(p->n + 1)), n = 0;
  int *indeg = calloc((size_t)U + 1, sizeof(int));
  char *done = calloc((size_t)U + 1, 1);
  loom_result_t r = topo && indeg && done ? loom__lang_topo(p, topo, &n)
                                          : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  *count = 0;
  int progress = 1;
  while (r == LOOM_SUCCESS && *count < n && progress) {
    progress = 0;
    memset(indeg, 0, sizeof(int) * (size_t)U);
    for (int i = 0; i < n; ++i) { /* a unit is ready when no operand of its nodes lies in another unfinished unit */
      const int u = unit_of(p, topo[i]);
      if (done[u]) continue;
      for (int k = 0; k < p->nodes[topo[i]].nin; ++k) {
        const int v = unit_of(p, p->nodes[topo[i]].in[k]);
        if (v != u && !done[v]) indeg[u] = 1;
      }
    }
    for (int i = 0; i < n && !progress; ++i) {
      const int u = unit_of(p, topo[i]);
      if (done[u] || indeg[u]) continue;
      for (int j = 0; j < n; ++j)
        if (unit_of(p, topo[j]) == u) order[(*count)++] = topo[j];
      done[u] = 1, progress = 1;
    }
  }
  if (r == LOOM_SUCCESS && *count < n)
    r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "the schedule's kernels and stages depend on each other in a cycle");
  free(topo), free(indeg), free(done);
  return r;
}

/* Makes group gid of `level` from in[]; refuses (and undoes) a cycle between groups. */
static loom_result_t commit_group(loom__prog_t *p, const char *fn, const char *name, int kind, int level, const char *in) {
  int gid;
  LOOM_TRY(loom__lang_add_group(p, name, kind, level, &gid));
  for (int i = 0; i < p->n; ++i) {
    if (!in[i]) continue;
    int *slot = level == 0 ? &p->nodes[i].kern : level == 1 ? &p->nodes[i].coll : &p->nodes[i].stage;
    *slot = gid;
  }
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n;
  loom_result_t r = order ? loom__lang_unit_order(p, order, &n) : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  free(order);
  if (r == LOOM_SUCCESS) return LOOM_SUCCESS;
  for (int i = 0; i < p->n; ++i) {
    int *slot = level == 0 ? &p->nodes[i].kern : level == 1 ? &p->nodes[i].coll : &p->nodes[i].stage;
    if (*slot == gid) *slot = -1;
  }
  p->ngroups--;
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: `%s` would depend on another kernel that depends on it", fn, name);
}

/* ---- fuse ------------------------------------------------------------------------- */

loom_result_t loom__lang_fuse(loom__prog_t *p, const int *ids, int n, const char *name) {
  char *in = calloc((size_t)p->n + 1, 1), b[96];
  if (!in) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  loom_result_t r = n < 1 ? loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuse: no operation to fuse") : LOOM_SUCCESS;
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i) {
    if (!fusible(&p->nodes[ids[i]]))
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuse: %s is %s; fuse takes pointwise operations (and Send)",
                     loom__lang_label(p, ids[i], b, sizeof b), loom__lang_op_info(p->nodes[ids[i]].op)->name);
    else
      add_expression(p, ids[i], in);
  }
  if (r == LOOM_SUCCESS) r = close_convex(p, in);
  for (int i = 0; i < p->n && r == LOOM_SUCCESS; ++i) {
    if (!in[i]) continue;
    if (!fusible(&p->nodes[i]))
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuse: %s (%s) lies between the operations to fuse and is not pointwise",
                     loom__lang_label(p, i, b, sizeof b), loom__lang_op_info(p->nodes[i].op)->name);
    else if (p->nodes[i].kern >= 0)
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuse: %s is already in kernel `%s`", loom__lang_label(p, i, b, sizeof b),
                     p->groups[p->nodes[i].kern].name);
  }
  if (r == LOOM_SUCCESS) r = commit_group(p, "fuse", name, LOOM__GK_FUSE, 0, in);
  free(in);
  return r;
}

/* ---- fuseComm ------------------------------------------------------------------------ */

typedef struct fc_parts {
  int coll_in;  /* the ReduceScatter or AllReduce feeding the computation, -1 */
  int comp[2];  /* the computation: a kernel (group id) or a single node; comp[0]: 1 if a group */
  int ags[LOOM__LANG_ARGS], nag;
} fc_parts_t;

static int in_comp(const loom__prog_t *p, const fc_parts_t *f, int id) {
  return f->comp[0] ? p->nodes[id].kern == f->comp[1] : id == f->comp[1];
}

static loom_result_t fc_classify(const loom__prog_t *p, const char *const *args, int nargs, fc_parts_t *f) {
  memset(f, 0, sizeof *f);
  f->coll_in = f->comp[1] = -1;
  for (int i = 0; i < nargs; ++i) {
    const int id = loom__lang_find(p, args[i]), g = loom__lang_find_group(p, args[i]);
    const int op = id >= 0 ? p->nodes[id].op : -1;
    if (id < 0 && (g < 0 || p->groups[g].level != 0))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "fuseComm: `%s` is no value or kernel of the program (nor a fuseComm policy: FusedAllReduce, "
                        "FusedReduceScatter, FusedAllGather or FusedAllReduceEpilogue)", args[i]);
    if (op == LOOM__OP_REDUCESCATTER || op == LOOM__OP_ALLREDUCE) {
      f->coll_in = id;
    } else if (op == LOOM__OP_ALLGATHER) {
      if (f->nag == LOOM__LANG_ARGS) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: too many AllGathers");
      f->ags[f->nag++] = id;
    } else if (f->comp[1] < 0 && (g >= 0 || loom__lang_op_info(op)->cls == LOOM__CLS_POINTWISE)) {
      f->comp[0] = g >= 0, f->comp[1] = g >= 0 ? g : id;
    } else {
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT,
                        "fuseComm: `%s` is %s; fuseComm takes a ReduceScatter or AllReduce, one pointwise kernel and AllGathers",
                        args[i], id >= 0 ? loom__lang_op_info(op)->name : "a second kernel");
    }
  }
  if (f->comp[1] < 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: no pointwise kernel to fuse with");
  return LOOM_SUCCESS;
}

static int policy_kind(const fc_parts_t *f, const loom__prog_t *p) {
  const int ar = f->coll_in >= 0 && p->nodes[f->coll_in].op == LOOM__OP_ALLREDUCE;
  if (ar) return f->nag ? -1 : LOOM__GK_FUSED_ARE;
  if (f->coll_in >= 0) return f->nag ? LOOM__GK_FUSED_AR : LOOM__GK_FUSED_RS;
  return f->nag ? LOOM__GK_FUSED_AG : -1;
}

static const char *fused_name(int kind) {
  static const char *n[] = {"kernel", "FusedAllReduce", "FusedReduceScatter", "FusedAllGather", "FusedAllReduceEpilogue"};
  return kind >= 0 && kind <= LOOM__GK_FUSED_ARE ? n[kind] : "?";
}

/* The collective's users are all in the computation; each AllGather gathers one of its values. */
static loom_result_t fc_check(const loom__prog_t *p, const fc_parts_t *f, const char *comp_name) {
  char b[96], c[96];
  if (f->coll_in >= 0) {
    int users[64];
    const int nu = loom__lang_users(p, f->coll_in, users, 64);
    if (!in_comp(p, f, f->coll_in) && nu == 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: %s feeds nothing", loom__lang_label(p, f->coll_in, b, sizeof b));
    for (int i = 0; i < nu && i < 64; ++i)
      if (!in_comp(p, f, users[i]))
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: %s is also used by %s, outside `%s`",
                          loom__lang_label(p, f->coll_in, b, sizeof b), loom__lang_label(p, users[i], c, sizeof c), comp_name);
    if (loom__lang_is_result(p, f->coll_in))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: %s is also a result of the program",
                        loom__lang_label(p, f->coll_in, b, sizeof b));
  }
  for (int i = 0; i < f->nag; ++i)
    if (!in_comp(p, f, p->nodes[f->ags[i]].in[0]))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: %s gathers %s, which `%s` does not compute",
                        loom__lang_label(p, f->ags[i], b, sizeof b), loom__lang_label(p, p->nodes[f->ags[i]].in[0], c, sizeof c),
                        comp_name);
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_fuse_comm(loom__prog_t *p, const char *const *args, int nargs, int policy, const char *name) {
  fc_parts_t f;
  LOOM_TRY(fc_classify(p, args, nargs, &f));
  const char *comp_name = f.comp[0] ? p->groups[f.comp[1]].name : p->nodes[f.comp[1]].name;
  const int kind = policy_kind(&f, p);
  static const char *parts = "(FusedAllReduce: ReduceScatter, kernel, AllGather; FusedReduceScatter: ReduceScatter, "
                             "kernel; FusedAllGather: kernel, AllGather; FusedAllReduceEpilogue: AllReduce, kernel)";
  if (kind < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: the parts given make no fused collective %s", parts);
  if (policy >= 0 && policy != kind)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: the parts given (%s, a kernel, %d AllGather%s) make a %s, "
                      "not a %s: write %s, or give the parts %s takes %s", f.coll_in < 0 ? "no collective before"
                      : p->nodes[f.coll_in].op == LOOM__OP_ALLREDUCE ? "an AllReduce" : "a ReduceScatter", f.nag,
                      f.nag == 1 ? "" : "s", fused_name(kind), fused_name(policy), fused_name(kind), fused_name(policy),
                      parts);
  LOOM_TRY(fc_check(p, &f, comp_name));
  char *in = calloc((size_t)p->n + 1, 1), b[96];
  if (!in) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  for (int i = 0; i < p->n; ++i) in[i] = !p->nodes[i].removed && in_comp(p, &f, i);
  if (f.coll_in >= 0) in[f.coll_in] = 1;
  for (int i = 0; i < f.nag; ++i) in[f.ags[i]] = 1;
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < p->n && r == LOOM_SUCCESS; ++i)
    if (in[i] && (p->nodes[i].coll >= 0 || p->nodes[i].stage >= 0))
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "fuseComm: %s is already in `%s`", loom__lang_label(p, i, b, sizeof b),
                     p->groups[p->nodes[i].coll >= 0 ? p->nodes[i].coll : p->nodes[i].stage].name);
  if (r == LOOM_SUCCESS) r = commit_group(p, "fuseComm", name, kind, 1, in);
  free(in);
  return r;
}

/* ---- overlap ------------------------------------------------------------------------------ */

/* 1 if some node of set b uses a node of set a. */
static int consumes(const loom__prog_t *p, const char *a, const char *b) {
  for (int i = 0; i < p->n; ++i) {
    if (!b[i] || p->nodes[i].removed) continue;
    for (int k = 0; k < p->nodes[i].nin; ++k)
      if (a[p->nodes[i].in[k]]) return 1;
  }
  return 0;
}

static loom_result_t overlap_sets(const loom__prog_t *p, const char *const *args, int nargs, char **sets, char *all) {
  int ids[4096];
  for (int i = 0; i < nargs; ++i) {
    const int m = loom__lang_members(p, args[i], ids, 4096);
    if (m == 0 || m > 4096)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: `%s` is no value, kernel or fused collective of the program",
                        args[i]);
    for (int j = 0; j < m; ++j) {
      if (p->nodes[ids[j]].op == LOOM__OP_INPUT || p->nodes[ids[j]].op == LOOM__OP_CONST)
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: `%s` is an input; overlap takes operations", args[i]);
      if (all[ids[j]])
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: `%s` is named twice (or inside another argument)", args[i]);
      sets[i][ids[j]] = all[ids[j]] = 1;
    }
    if (i > 0 && !consumes(p, sets[i - 1], sets[i]))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: `%s` does not consume `%s`; overlap takes a producer and its consumers in order",
                        args[i], args[i - 1]);
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_overlap(loom__prog_t *p, const char *const *args, int nargs, const char *name) {
  if (nargs < 2) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: needs a producer and at least one consumer");
  char *all = calloc((size_t)p->n + 1, 1), *sets[LOOM__LANG_ARGS] = {0}, *before = NULL, b[96];
  loom_result_t r = all ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < nargs && r == LOOM_SUCCESS; ++i)
    if (!(sets[i] = calloc((size_t)p->n + 1, 1))) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  if (r == LOOM_SUCCESS) r = overlap_sets(p, args, nargs, sets, all);
  if (r == LOOM_SUCCESS && !(before = malloc((size_t)p->n + 1))) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  if (r == LOOM_SUCCESS) memcpy(before, all, (size_t)p->n), r = close_convex(p, all);
  for (int i = 0; i < p->n && r == LOOM_SUCCESS; ++i) {
    if (all[i] && !before[i])
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: %s lies between the overlapped operations and is not one of them",
                     loom__lang_label(p, i, b, sizeof b));
    else if (all[i] && p->nodes[i].stage >= 0)
      r = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "overlap: %s is already in stage `%s`", loom__lang_label(p, i, b, sizeof b),
                     p->groups[p->nodes[i].stage].name);
  }
  if (r == LOOM_SUCCESS) r = commit_group(p, "overlap", name, LOOM__GK_OVERLAP, 2, all);
  for (int i = 0; i < nargs; ++i) free(sets[i]);
  free(all), free(before);
  return r;
}
