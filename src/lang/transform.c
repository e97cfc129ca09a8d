/*
 * transform.c - the transformations that rewrite the graph (paper 003,
 * section 3), each refusing with the reason when it does not apply:
 *
 *   split(ar, AllReduceSplitRSAG)  AllReduce -> ReduceScatter + AllGather
 *   split(ar, AllReduceSplitRB)    AllReduce -> Reduce(root 0) + Broadcast
 *   reorder(ag, comp)              AllGather (or Broadcast) past the pointwise
 *       kernel `comp` that consumes it: comp runs on the slices (Replicated
 *       operands of the gathered shape become Slice(x, d)); each value comp
 *       hands on (to other operations, Execute or a state) is gathered after
 *   asSlice(t)    a Replicated tensor whose every use is Slice(t, d) becomes
 *                 Sliced(d) (and its state keeps the slices: its AllGather dies)
 *   dead(x)       removes x, which nothing uses;  dce(): every such value
 *
 * and loom__lang_apply, which runs one schedule statement (group.c holds
 * fuse, fuseComm and overlap). Every transformation works on a typed
 * program and re-infers it afterwards; none changes the program's results
 * (the interpreter tests compare), only where and in which pieces values
 * are computed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"

enum { POL_NONE = -1, POL_RSAG = 100, POL_RB, POL_AG_REORDER, POL_BC_REORDER, POL_COMPUTE };

/* Every policy, and the transformation that takes it. */
static const struct policy {
  const char *name;
  int pol;
  const char *fn;
} k_policies[] = {{"AllReduceSplitRSAG", POL_RSAG, "split"},
                  {"AllReduceSplit1", POL_RSAG, "split"},
                  {"AllReduceSplitRB", POL_RB, "split"},
                  {"AllReduceSplitReduceBroadcast", POL_RB, "split"},
                  {"AllGatherReorder", POL_AG_REORDER, "reorder"},
                  {"BroadcastReorder", POL_BC_REORDER, "reorder"},
                  {"ComputeFuse", POL_COMPUTE, "fuse"},
                  {"FusedAllReduce", LOOM__GK_FUSED_AR, "fuseComm"},
                  {"FusedReduceScatter", LOOM__GK_FUSED_RS, "fuseComm"},
                  {"FusedAllGather", LOOM__GK_FUSED_AG, "fuseComm"},
                  {"FusedAllReduceEpilogue", LOOM__GK_FUSED_ARE, "fuseComm"}};

static const struct policy *policy_find(const char *s) {
  for (size_t i = 0; i < sizeof k_policies / sizeof k_policies[0]; ++i)
    if (!strcmp(s, k_policies[i].name)) return &k_policies[i];
  return NULL;
}

static int policy_of(const char *s) {
  const struct policy *k = policy_find(s);
  return k ? k->pol : POL_NONE;
}

/* What fn takes, in words: "a split policy: AllReduceSplitRSAG, ... or ...", or "no policy (...)". */
static const char *policies_of(const char *fn, char *buf, size_t cap) {
  const size_t np = sizeof k_policies / sizeof k_policies[0];
  int count = 0, k = 0;
  for (size_t i = 0; i < np; ++i) count += !strcmp(k_policies[i].fn, fn);
  if (count == 0) {
    snprintf(buf, cap, "no policy (%s takes names of values%s)", fn, strcmp(fn, "overlap") ? "" : ", kernels and fused collectives");
    return buf;
  }
  size_t n = (size_t)snprintf(buf, cap, "a %s policy: ", fn);
  for (size_t i = 0; i < np && n < cap; ++i) {
    if (strcmp(k_policies[i].fn, fn)) continue;
    n += (size_t)snprintf(buf + n, cap - n, "%s%s", k == 0 ? "" : k == count - 1 ? " or " : ", ", k_policies[i].name);
    k++;
  }
  return buf;
}

static int known_transformation(const char *fn) {
  static const char *k[] = {"split", "reorder", "fuse", "fuseComm", "overlap", "asSlice", "dead", "dce"};
  for (size_t i = 0; i < sizeof k / sizeof k[0]; ++i)
    if (!strcmp(fn, k[i])) return 1;
  return 0;
}

/* Each policy named in st belongs to st->fn, and the places only a policy may take (split's second
 * argument, reorder's third) hold one; *bad: the argument at fault. */
static loom_result_t check_policies(const loom__stmt_t *st, int *bad) {
  const int slot = !strcmp(st->fn, "split") ? 1 : !strcmp(st->fn, "reorder") ? 2 : -1;
  char want[256];
  int seen = -1;
  *bad = -1;
  if (!known_transformation(st->fn)) return LOOM_SUCCESS; /* apply_one names the transformations */
  for (int i = 0; i < st->nargs; ++i) {
    const struct policy *k = policy_find(st->args[i]);
    *bad = i;
    if (k && strcmp(k->fn, st->fn))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: found `%s`, a %s policy; expected %s", st->fn, st->args[i], k->fn,
                        policies_of(st->fn, want, sizeof want));
    if (k && seen >= 0)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: found `%s` after the policy `%s`; expected one policy", st->fn,
                        st->args[i], st->args[seen]);
    if (!k && i == slot)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: found `%s` where the policy goes; expected %s", st->fn,
                        st->args[i], policies_of(st->fn, want, sizeof want));
    if (k) seen = i;
  }
  *bad = -1;
  return LOOM_SUCCESS;
}

static loom_result_t new_node(loom__prog_t *p, int op, int a, int like, const char *name, const char *base, int *id) {
  LOOM_TRY(loom__lang_add(p, op, &a, 1, p->nodes[like].line, p->nodes[like].col, id));
  char fresh[LOOM__LANG_NAME];
  if (name && *name) return loom__lang_set_name(p, *id, name);
  loom__lang_fresh_name(p, base, fresh);
  return loom__lang_set_name(p, *id, fresh);
}

static void remove_node(loom__prog_t *p, int id) {
  p->nodes[id].removed = 1;
  p->typed = 0;
}

/* ---- split ----------------------------------------------------------------------- */

/* The AllReduce named by id: itself, or the one AllReduce that uses it (the paper's split(layer, ...)). */
static loom_result_t split_target(const loom__prog_t *p, int id, int *ar) {
  char b[96];
  *ar = id;
  if (p->nodes[id].op == LOOM__OP_ALLREDUCE) return LOOM_SUCCESS;
  int users[8], found = -1;
  const int nu = loom__lang_users(p, id, users, 8);
  for (int i = 0; i < nu && i < 8; ++i)
    if (p->nodes[users[i]].op == LOOM__OP_ALLREDUCE) found = found < 0 ? users[i] : -2;
  if (found >= 0) {
    *ar = found;
    return LOOM_SUCCESS;
  }
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "split: %s is %s and %s AllReduce uses it; split takes an AllReduce",
                    loom__lang_label(p, id, b, sizeof b), loom__lang_op_info(p->nodes[id].op)->name,
                    found == -2 ? "more than one" : "no");
}

loom_result_t loom__lang_split(loom__prog_t *p, int id, int policy, const char *n1, const char *n2) {
  LOOM_TRY(loom__lang_infer(p));
  int ar;
  char b[96], base[LOOM__LANG_NAME + 4];
  LOOM_TRY(split_target(p, id, &ar));
  const loom__node_t *a = &p->nodes[ar];
  if (a->coll >= 0 || a->stage >= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "split: %s is already in `%s`; split before grouping",
                      loom__lang_label(p, ar, b, sizeof b), p->groups[a->coll >= 0 ? a->coll : a->stage].name);
  if (policy == POL_RSAG && a->ty.rank == 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "split: %s is a scalar; ReduceScatter needs a dimension to slice",
                      loom__lang_label(p, ar, b, sizeof b));
  const int x = a->in[0], redop = a->redop;
  int first, second;
  char an[LOOM__LANG_NAME]; /* a copy: adding nodes moves the node array */
  snprintf(an, sizeof an, "%s", loom__lang_anonymous(a) ? "sum" : a->name);
  a = NULL;
  snprintf(base, sizeof base, "%s_%.40s", policy == POL_RB ? "red" : "rs", an);
  LOOM_TRY(new_node(p, policy == POL_RB ? LOOM__OP_REDUCE : LOOM__OP_REDUCESCATTER, x, ar, n1, base, &first));
  p->nodes[first].redop = redop;
  snprintf(base, sizeof base, "%s_%.40s", policy == POL_RB ? "bc" : "ag", an);
  LOOM_TRY(new_node(p, policy == POL_RB ? LOOM__OP_BROADCAST : LOOM__OP_ALLGATHER, first, ar, n2, base, &second));
  loom__lang_replace_uses(p, ar, second, -1);
  remove_node(p, ar);
  return loom__lang_infer(p);
}

/* ---- reorder --------------------------------------------------------------------------- */

typedef struct ro {
  int comm, src, d;   /* the gather, what it gathers, the slice dimension (Root: the root) */
  int bcast;
  char *in;           /* the computation's nodes (ids below n_in: nodes added later are not members) */
  const char *kname;
  int n_in;
} ro_t;

static int member(const ro_t *r, int id) { return id < r->n_in && r->in[id]; }

static loom_result_t ro_check_members(const loom__prog_t *p, const ro_t *r) {
  char b[96], c[96];
  for (int i = 0; i < p->n; ++i) {
    if (!member(r, i)) continue;
    const loom__node_t *nd = &p->nodes[i];
    if (loom__lang_op_info(nd->op)->cls != LOOM__CLS_POINTWISE && nd->op != LOOM__OP_SEND && nd->op != LOOM__OP_CONST)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s is %s, not pointwise", loom__lang_label(p, i, b, sizeof b),
                        loom__lang_op_info(nd->op)->name);
    for (int k = 0; k < nd->nin; ++k) {
      const int a = nd->in[k];
      if (member(r, a) || a == r->comm || (nd->op == LOOM__OP_UPDATE && k == 0)) continue;
      if (p->nodes[a].ty.lay.kind == LOOM__LAY_LOCAL)
        return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s, an operand of %s, is Local; a computation on slices takes Replicated or Sliced operands",
                          loom__lang_label(p, a, b, sizeof b), loom__lang_label(p, i, c, sizeof c));
    }
  }
  return LOOM_SUCCESS;
}

static loom_result_t ro_check_comm(const loom__prog_t *p, ro_t *r) {
  char b[96], c[96];
  const loom__node_t *cm = &p->nodes[r->comm];
  r->src = cm->in[0];
  r->d = r->bcast ? p->nodes[r->src].ty.lay.arg : p->nodes[r->src].ty.lay.arg;
  if (r->bcast && p->nodes[r->src].ty.lay.kind != LOOM__LAY_ROOT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s broadcasts a Local value; BroadcastReorder needs Root(r) (a Reduce)",
                      loom__lang_label(p, r->comm, b, sizeof b));
  if (loom__lang_is_result(p, r->comm))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s is also a result of the program", loom__lang_label(p, r->comm, b, sizeof b));
  int users[256];
  const int nu = loom__lang_users(p, r->comm, users, 256);
  if (nu == 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: nothing uses %s", loom__lang_label(p, r->comm, b, sizeof b));
  for (int i = 0; i < nu && i < 256; ++i) {
    if (member(r, users[i])) continue;
    const int pw = loom__lang_op_info(p->nodes[users[i]].op)->cls == LOOM__CLS_POINTWISE;
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s is also used by %s, %s",
                      loom__lang_label(p, r->comm, b, sizeof b), loom__lang_label(p, users[i], c, sizeof c),
                      pw ? "outside the computation to reorder past" : "which is not pointwise");
  }
  return LOOM_SUCCESS;
}

/* Members that depend on the gather must have its shape (the computation runs on its slices). */
static loom_result_t ro_check_shapes(const loom__prog_t *p, const ro_t *r, const int *order, int n, char *dep) {
  char b[96], s1[96], s2[96];
  const loom__type_t *ct = &p->nodes[r->comm].ty;
  for (int i = 0; i < n; ++i) {
    const int id = order[i];
    if (!member(r, id)) continue;
    for (int k = 0; k < p->nodes[id].nin; ++k)
      if (p->nodes[id].in[k] == r->comm || dep[p->nodes[id].in[k]]) dep[id] = 1;
    if (!dep[id]) continue;
    const loom__type_t *t = &p->nodes[id].ty;
    int same = t->rank == ct->rank;
    for (int j = 0; same && j < t->rank; ++j) same = loom__lang_dim_eq(&t->dims[j], &ct->dims[j]);
    if (!same)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s has shape %s, the gathered value %s; the computation must keep the gathered shape",
                        loom__lang_label(p, id, b, sizeof b), loom__lang_shape_str(t, s1, sizeof s1), loom__lang_shape_str(ct, s2, sizeof s2));
  }
  return LOOM_SUCCESS;
}

/* Replicated operands of the gathered shape become Slice(x, d) (AllGather) inside the computation. */
static loom_result_t ro_slice_operands(loom__prog_t *p, ro_t *r, int n0, int kern) {
  const loom__type_t comm_ty = p->nodes[r->comm].ty, *ct = &comm_ty; /* a copy: adding nodes moves the array */
  for (int i = 0; i < n0; ++i) {
    if (!member(r, i) || p->nodes[i].removed) continue;
    for (int k = p->nodes[i].op == LOOM__OP_UPDATE ? 1 : 0; k < p->nodes[i].nin; ++k) {
      const int a = p->nodes[i].in[k];
      const loom__type_t *t = &p->nodes[a].ty;
      if (member(r, a) || a == r->comm || t->lay.kind != LOOM__LAY_REPLICATED || t->rank != ct->rank || r->bcast) continue;
      if (t->dims[r->d].sym[0] == 0 && t->dims[r->d].n == 1) continue; /* broadcast along the slices */
      int s;
      LOOM_TRY(loom__lang_add(p, LOOM__OP_SLICE, &a, 1, p->nodes[i].line, p->nodes[i].col, &s));
      p->nodes[s].dim = r->d;
      p->nodes[s].kern = kern;
      p->nodes[i].in[k] = s;
    }
  }
  return LOOM_SUCCESS;
}

static int ro_hands_on(const loom__prog_t *p, const ro_t *r, int id) {
  if (loom__lang_is_result(p, id)) return 1;
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || member(r, i)) continue;
    for (int k = 0; k < p->nodes[i].nin; ++k)
      if (p->nodes[i].in[k] == id && !(p->nodes[i].op == LOOM__OP_UPDATE && k == 0)) return 1;
  }
  return 0;
}

/* The values the computation hands on: Execute's outputs first (in order), then by topological order. */
static int ro_outputs(const loom__prog_t *p, const ro_t *r, const int *order, int n, int *outs) {
  int k = 0;
  for (int i = 0; i < p->nexec_out; ++i)
    if (member(r, p->exec_out[i])) {
      int dup = 0;
      for (int j = 0; j < k; ++j) dup |= outs[j] == p->exec_out[i];
      if (!dup) outs[k++] = p->exec_out[i];
    }
  for (int i = 0; i < n; ++i) {
    if (!member(r, order[i]) || !ro_hands_on(p, r, order[i])) continue;
    int dup = 0;
    for (int j = 0; j < k; ++j) dup |= outs[j] == order[i];
    if (!dup) outs[k++] = order[i];
  }
  return k;
}

/* Uses of `from` outside the computation (operands, Execute, states) become `to`. */
static void ro_redirect(loom__prog_t *p, const ro_t *r, int from, int to) {
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || member(r, i) || i == to) continue;
    for (int k = 0; k < p->nodes[i].nin; ++k)
      if (p->nodes[i].in[k] == from && !(p->nodes[i].op == LOOM__OP_UPDATE && k == 0)) p->nodes[i].in[k] = to;
  }
  for (int i = 0; i < p->nexec_out; ++i)
    if (p->exec_out[i] == from) p->exec_out[i] = to;
  for (int i = 0; i < p->nstate; ++i)
    if (p->states[i].value == from) p->states[i].value = to;
}

static loom_result_t ro_gather_outputs(loom__prog_t *p, ro_t *r, const int *outs, int nout, const char *const *names,
                                       int nnames) {
  for (int i = 0; i < nout; ++i) {
    int g;
    char base[LOOM__LANG_NAME + 4];
    snprintf(base, sizeof base, "%s_%.40s", r->bcast ? "bc" : "ag",
             loom__lang_anonymous(&p->nodes[outs[i]]) ? "out" : p->nodes[outs[i]].name);
    LOOM_TRY(new_node(p, r->bcast ? LOOM__OP_BROADCAST : LOOM__OP_ALLGATHER, outs[i], outs[i],
                      i < nnames ? names[i] : NULL, base, &g));
    p->nodes[g].root = r->bcast ? r->d : 0;
    ro_redirect(p, r, outs[i], g);
  }
  return LOOM_SUCCESS;
}

/* The part of a gather's name that says what it gathers: "agOut" -> "Out" (the lowercase prefix
 * dropped); "" when the name has none. */
static const char *ro_name_tail(const char *s) {
  while (*s >= 'a' && *s <= 'z') s++;
  return *s >= 'A' && *s <= 'Z' ? s : "";
}

/* 1 if `key` without trailing `_` starts with `tail`, case aside ("output", "Out"). */
static int ro_key_starts(const char *key, const char *tail) {
  size_t n = strlen(key), t = strlen(tail);
  while (n > 0 && key[n - 1] == '_') n--;
  if (t == 0 || t > n) return 0;
  for (size_t i = 0; i < t; ++i)
    if ((key[i] | 0x20) != (tail[i] | 0x20)) return 0;
  return 1;
}

/* 1 if the name `tail` designates value id: its name, or the state tensor it is the new value of. */
static int ro_designates(const loom__prog_t *p, int id, const char *tail) {
  if (!*tail) return 0;
  if (!loom__lang_anonymous(&p->nodes[id]) && ro_key_starts(p->nodes[id].name, tail)) return 1;
  for (int i = 0; i < p->nstate; ++i)
    if (p->states[i].value == id && ro_key_starts(p->nodes[p->states[i].tensor].name, tail)) return 1;
  return 0;
}

/* The gathers' names bind by position (outs[] order); a name that designates another of the values
 * than its position's is refused with the order to write, never bound to the wrong tensor. */
static loom_result_t ro_check_names(const loom__prog_t *p, const int *outs, int nout, const char *const *names,
                                    int nnames) {
  for (int i = 0; i < nnames && i < nout; ++i) {
    const char *tail = ro_name_tail(names[i]);
    if (ro_designates(p, outs[i], tail)) continue;
    int other = -1;
    for (int j = 0; j < nout && other < 0; ++j)
      if (j != i && ro_designates(p, outs[j], tail)) other = j;
    if (other < 0) continue;
    loom__buf_t b = {0};
    char l1[96], l2[96];
    for (int j = 0; j < nout; ++j) {
      loom__buf_printf(&b, "%s%s", j ? ", " : "", loom__lang_label(p, outs[j], l1, sizeof l1));
      for (int t = 0; t < p->nstate; ++t)
        if (p->states[t].value == outs[j]) loom__buf_printf(&b, " (the new `%s`)", p->nodes[p->states[t].tensor].name);
    }
    const loom_result_t res = loom__fail(
        LOOM_ERR_INVALID_ARGUMENT,
        "reorder: result %d, `%s`, names %s but gathers %s; the gathers come in this order (Execute's outputs "
        "first): %s; write the names after the kernel's in that order", i + 2, names[i],
        loom__lang_label(p, outs[other], l1, sizeof l1), loom__lang_label(p, outs[i], l2, sizeof l2), b.s ? b.s : "");
    free(b.s);
    return res;
  }
  return LOOM_SUCCESS;
}

static loom_result_t ro_rewrite(loom__prog_t *p, ro_t *r, const char *const *names, int nnames, int kern) {
  int *order = malloc(sizeof(int) * (size_t)(p->n + 1)), n = 0, *outs = malloc(sizeof(int) * (size_t)(p->n + 1));
  char *dep = calloc((size_t)p->n + 1, 1);
  loom_result_t res = order && outs && dep ? loom__lang_topo(p, order, &n) : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  if (res == LOOM_SUCCESS) res = ro_check_shapes(p, r, order, n, dep);
  if (res == LOOM_SUCCESS && nnames > 0 && ro_outputs(p, r, order, n, outs) < nnames)
    res = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %d names for the gathers, but the computation hands on %d values",
                     nnames, ro_outputs(p, r, order, n, outs));
  if (res == LOOM_SUCCESS) res = ro_check_names(p, outs, ro_outputs(p, r, order, n, outs), names, nnames);
  if (res == LOOM_SUCCESS) {
    const int nout = ro_outputs(p, r, order, n, outs), n0 = p->n;
    res = ro_slice_operands(p, r, n0, kern);
    if (res == LOOM_SUCCESS) res = ro_gather_outputs(p, r, outs, nout, names, nnames);
    if (res == LOOM_SUCCESS) {
      loom__lang_replace_uses(p, r->comm, r->src, -1);
      remove_node(p, r->comm);
    }
  }
  free(order), free(outs), free(dep);
  return res;
}

loom_result_t loom__lang_reorder(loom__prog_t *p, int ag, const int *members, int nm, const char *const *names,
                                 int nnames, const char *kname) {
  LOOM_TRY(loom__lang_infer(p));
  char b[96];
  ro_t r = {ag, -1, 0, p->nodes[ag].op == LOOM__OP_BROADCAST, NULL, kname, p->n};
  if (p->nodes[ag].op != LOOM__OP_ALLGATHER && !r.bcast)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s is %s; reorder moves an AllGather or a Broadcast",
                      loom__lang_label(p, ag, b, sizeof b), loom__lang_op_info(p->nodes[ag].op)->name);
  const loom__node_t *cm = &p->nodes[ag];
  if (cm->coll >= 0 || cm->stage >= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: %s is already in `%s`; reorder before grouping",
                      loom__lang_label(p, ag, b, sizeof b), p->groups[cm->coll >= 0 ? cm->coll : cm->stage].name);
  if (!(r.in = calloc((size_t)p->n + 1, 1))) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < nm; ++i) r.in[members[i]] = 1;
  const int kern = p->nodes[members[0]].kern;
  loom_result_t res = ro_check_comm(p, &r);
  if (res == LOOM_SUCCESS) res = ro_check_members(p, &r);
  if (res == LOOM_SUCCESS) res = ro_rewrite(p, &r, names, nnames, kern);
  if (res == LOOM_SUCCESS && kname && *kname && kern >= 0) {
    if (strcmp(p->groups[kern].name, kname) && (loom__lang_find(p, kname) >= 0 || loom__lang_find_group(p, kname) >= 0))
      res = loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: `%s` is defined twice", kname);
    else
      snprintf(p->groups[kern].name, LOOM__LANG_NAME, "%s", kname);
  }
  free(r.in);
  return res == LOOM_SUCCESS ? loom__lang_infer(p) : res;
}

/* ---- asSlice, dead, dce ------------------------------------------------------------------ */

loom_result_t loom__lang_as_slice(loom__prog_t *p, int t) {
  LOOM_TRY(loom__lang_infer(p));
  loom__node_t *x = &p->nodes[t];
  char b[96], c[96];
  if (x->op != LOOM__OP_INPUT || x->decl.lay.kind != LOOM__LAY_REPLICATED)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "asSlice: %s is no Replicated input tensor", loom__lang_label(p, t, b, sizeof b));
  int users[256], d = -1;
  const int nu = loom__lang_users(p, t, users, 256);
  for (int i = 0; i < nu && i < 256; ++i) {
    const loom__node_t *u = &p->nodes[users[i]];
    if (u->op == LOOM__OP_UPDATE && u->in[0] == t && u->in[1] != t) continue;
    if (u->op != LOOM__OP_SLICE || (d >= 0 && u->dim != d))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "asSlice: `%s` is used whole by %s; asSlice needs every use to be a slice (reorder first)",
                        x->name, loom__lang_label(p, users[i], c, sizeof c));
    d = u->dim;
  }
  if (d < 0) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "asSlice: nothing slices `%s`", x->name);
  const int s = loom__lang_state_of(p, t);
  int keep = -1;
  if (s >= 0) {
    const loom__node_t *v = &p->nodes[p->states[s].value];
    if (v->op != LOOM__OP_ALLGATHER || p->nodes[v->in[0]].ty.lay.kind != LOOM__LAY_SLICED || p->nodes[v->in[0]].ty.lay.arg != d)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "asSlice: the new value of state `%s`, %s, is not gathered from Sliced(%d) slices",
                        x->name, loom__lang_label(p, p->states[s].value, c, sizeof c), d);
    keep = v->in[0];
  }
  x->decl.lay.kind = LOOM__LAY_SLICED, x->decl.lay.arg = d;
  for (int i = 0; i < nu && i < 256; ++i)
    if (p->nodes[users[i]].op == LOOM__OP_SLICE) {
      loom__lang_replace_uses(p, users[i], t, -1);
      remove_node(p, users[i]);
    }
  if (s >= 0) p->states[s].value = keep;
  return loom__lang_infer(p);
}

loom_result_t loom__lang_dead(loom__prog_t *p, int id) {
  char b[96], c[96];
  int u;
  if (p->nodes[id].op == LOOM__OP_INPUT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "dead: %s is an input tensor", loom__lang_label(p, id, b, sizeof b));
  if (loom__lang_users(p, id, &u, 1) > 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "dead: %s is used by %s", loom__lang_label(p, id, b, sizeof b),
                      loom__lang_label(p, u, c, sizeof c));
  if (loom__lang_is_result(p, id))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "dead: %s is a result of the program (Execute or a state)",
                      loom__lang_label(p, id, b, sizeof b));
  remove_node(p, id);
  return loom__lang_infer(p);
}

loom_result_t loom__lang_dce(loom__prog_t *p) {
  char *live = calloc((size_t)p->n + 1, 1);
  if (!live) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "out of memory");
  for (int i = 0; i < p->nexec_out; ++i) live[p->exec_out[i]] = 1;
  for (int i = 0; i < p->nstate; ++i) live[p->states[i].value] = 1;
  for (int i = 0; i < p->n; ++i)
    if (p->nodes[i].op == LOOM__OP_INPUT) live[i] = 1;
  for (int changed = 1; changed;) {
    changed = 0;
    for (int i = 0; i < p->n; ++i)
      if (live[i] && !p->nodes[i].removed)
        for (int k = 0; k < p->nodes[i].nin; ++k)
          if (!live[p->nodes[i].in[k]]) live[p->nodes[i].in[k]] = 1, changed = 1;
  }
  for (int i = 0; i < p->n; ++i)
    if (!live[i] && !p->nodes[i].removed) remove_node(p, i);
  free(live);
  return loom__lang_infer(p);
}

/* ---- one statement ---------------------------------------------------------------------------- */

typedef struct args {
  const char *names[LOOM__LANG_ARGS];
  int n, policy;
} args_t;

static loom_result_t split_args(const loom__stmt_t *st, args_t *a) {
  a->n = 0, a->policy = POL_NONE;
  for (int i = 0; i < st->nargs; ++i) {
    const int pol = policy_of(st->args[i]);
    if (pol != POL_NONE) {
      a->policy = pol;
    } else {
      a->names[a->n++] = st->args[i];
    }
  }
  return LOOM_SUCCESS;
}

static loom_result_t node_arg(const loom__prog_t *p, const char *fn, const char *name, int *id) {
  *id = loom__lang_find(p, name);
  char want[256];
  if (*id < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: `%s` is no value of the program%s%s%s", fn, name,
                      strcmp(fn, "fuse") ? "" : " (nor ", strcmp(fn, "fuse") ? "" : policies_of(fn, want, sizeof want),
                      strcmp(fn, "fuse") ? "" : ")");
  return LOOM_SUCCESS;
}

static loom_result_t need_args(const char *fn, const args_t *a, int lo, int hi) {
  if (a->n < lo || a->n > hi)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: %d names; expected %d%s%s", fn, a->n, lo, hi > lo ? " to " : "",
                      hi > lo ? (hi == LOOM__LANG_ARGS ? "8" : "2") : "");
  return LOOM_SUCCESS;
}

static loom_result_t apply_reorder(loom__prog_t *p, const loom__stmt_t *st, const args_t *a) {
  LOOM_TRY(need_args("reorder", a, 2, 2));
  int comm = -1, which = 0;
  for (int i = 0; i < 2 && comm < 0; ++i) {
    const int id = loom__lang_find(p, a->names[i]);
    if (id >= 0 && (p->nodes[id].op == LOOM__OP_ALLGATHER || p->nodes[id].op == LOOM__OP_BROADCAST)) comm = id, which = i;
  }
  if (comm < 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: neither `%s` nor `%s` is an AllGather or a Broadcast",
                      a->names[0], a->names[1]);
  const int bcast = p->nodes[comm].op == LOOM__OP_BROADCAST;
  if ((a->policy == POL_AG_REORDER && bcast) || (a->policy == POL_BC_REORDER && !bcast))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: `%s` is %s; its policy is %s", a->names[which],
                      bcast ? "a Broadcast" : "an AllGather", bcast ? "BroadcastReorder" : "AllGatherReorder");
  int mem[4096];
  const int nm = loom__lang_members(p, a->names[1 - which], mem, 4096);
  if (nm == 0 || nm > 4096)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "reorder: `%s` is no value or kernel of the program", a->names[1 - which]);
  const char *names[LOOM__LANG_ARGS];
  for (int i = 1; i < st->nlhs; ++i) names[i - 1] = st->lhs[i];
  return loom__lang_reorder(p, comm, mem, nm, names, st->nlhs > 0 ? st->nlhs - 1 : 0, st->nlhs ? st->lhs[0] : NULL);
}

static loom_result_t apply_named(loom__prog_t *p, const loom__stmt_t *st, const args_t *a, char name[LOOM__LANG_NAME],
                                 const char *base) {
  if (st->nlhs > 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: one result name; found %d", st->fn, st->nlhs);
  if (st->nlhs == 1)
    snprintf(name, LOOM__LANG_NAME, "%s", st->lhs[0]);
  else
    loom__lang_fresh_name(p, base, name);
  (void)a;
  return LOOM_SUCCESS;
}

static loom_result_t apply_fuse(loom__prog_t *p, const loom__stmt_t *st, const args_t *a) {
  char name[LOOM__LANG_NAME];
  int ids[LOOM__LANG_ARGS];
  LOOM_TRY(need_args("fuse", a, 1, LOOM__LANG_ARGS));
  LOOM_TRY(apply_named(p, st, a, name, "fused"));
  for (int i = 0; i < a->n; ++i) LOOM_TRY(node_arg(p, "fuse", a->names[i], &ids[i]));
  return loom__lang_fuse(p, ids, a->n, name);
}

static loom_result_t apply_one(loom__prog_t *p, const loom__stmt_t *st) {
  args_t a;
  int id;
  char name[LOOM__LANG_NAME];
  LOOM_TRY(split_args(st, &a));
  LOOM_TRY(loom__lang_infer(p));
  if (!strcmp(st->fn, "split")) {
    LOOM_TRY(need_args("split", &a, 1, 1));
    LOOM_TRY(node_arg(p, "split", a.names[0], &id));
    if (st->nlhs != 0 && st->nlhs != 2) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "split: two result names; found %d", st->nlhs);
    return loom__lang_split(p, id, a.policy == POL_RB ? POL_RB : POL_RSAG, st->nlhs ? st->lhs[0] : NULL,
                            st->nlhs ? st->lhs[1] : NULL);
  }
  if (!strcmp(st->fn, "reorder")) return apply_reorder(p, st, &a);
  if (!strcmp(st->fn, "fuse")) return apply_fuse(p, st, &a);
  if (!strcmp(st->fn, "fuseComm")) {
    LOOM_TRY(need_args("fuseComm", &a, 2, LOOM__LANG_ARGS));
    LOOM_TRY(apply_named(p, st, &a, name, "fusedComm"));
    return loom__lang_fuse_comm(p, a.names, a.n, a.policy >= 100 ? -1 : a.policy, name);
  }
  if (!strcmp(st->fn, "overlap")) {
    LOOM_TRY(need_args("overlap", &a, 2, LOOM__LANG_ARGS));
    LOOM_TRY(apply_named(p, st, &a, name, "overlapped"));
    return loom__lang_overlap(p, a.names, a.n, name);
  }
  if (!strcmp(st->fn, "asSlice") || !strcmp(st->fn, "dead")) {
    LOOM_TRY(need_args(st->fn, &a, 1, 1));
    LOOM_TRY(node_arg(p, st->fn, a.names[0], &id));
    return st->fn[0] == 'a' ? loom__lang_as_slice(p, id) : loom__lang_dead(p, id);
  }
  if (!strcmp(st->fn, "dce")) return loom__lang_dce(p);
  return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "found `%s`; expected a transformation: split, reorder, fuse, fuseComm, "
                    "overlap, asSlice, dead or dce", st->fn);
}

loom_result_t loom__lang_apply(loom__prog_t *p, const loom__stmt_t *st) {
  loom__prog_t *copy = NULL;
  int at = -1;
  loom_result_t r = check_policies(st, &at);
  if (r == LOOM_SUCCESS) r = loom__lang_clone(p, &copy);
  if (r == LOOM_SUCCESS) r = apply_one(copy, st);
  if (r != LOOM_SUCCESS) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", loom_last_error());
    loom__lang_free(copy);
    const int line = at >= 0 && st->arg_line[at] ? st->arg_line[at] : st->line;
    const int col = at >= 0 && st->arg_line[at] ? st->arg_col[at] : st->col;
    return loom__fail(r, "%s:%d:%d: %s", st->api ? "<statement>" : p->file, line, col, msg);
  }
  /* the program takes the transformed graph; on failure it stays as it was */
  loom__prog_t tmp = *p;
  *p = *copy;
  *copy = tmp;
  loom__lang_free(copy);
  return LOOM_SUCCESS;
}
