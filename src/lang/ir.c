/*
 * ir.c - the program graph: creation, copies, nodes and their names, uses,
 * the topological order every pass walks, the op catalogue, and structural
 * equality (the round trip between front ends compares with it).
 *
 * Growth: every array doubles; a failed allocation is LOOM_ERR_OUT_OF_MEMORY
 * and leaves the program as it was.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lang.h"

static const loom__op_info_t k_ops[LOOM__OP_COUNT] = {
    [LOOM__OP_INPUT] = {"Tensor", 0, 0, LOOM__CLS_LEAF},
    [LOOM__OP_CONST] = {"Const", 0, 0, LOOM__CLS_LEAF},
    [LOOM__OP_ADD] = {"+", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_SUB] = {"-", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_MUL] = {"*", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_DIV] = {"/", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_POW] = {"Pow", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_MAX] = {"Max", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_MIN] = {"Min", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_LT] = {"<", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_LE] = {"<=", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_GT] = {">", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_GE] = {">=", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_EQ] = {"==", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_NE] = {"!=", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_NEG] = {"Neg", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_SQRT] = {"Sqrt", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_EXP] = {"Exp", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_RELU] = {"ReLU", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_GELU] = {"GeLU", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_SILU] = {"SiLU", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_CAST] = {"Cast", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_DROPOUT] = {"Dropout", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_SLICE] = {"Slice", 1, 1, LOOM__CLS_POINTWISE},
    [LOOM__OP_UPDATE] = {"Update", 2, 2, LOOM__CLS_POINTWISE},
    [LOOM__OP_MATMUL] = {"MatMul", 2, 2, LOOM__CLS_COMPUTE},
    [LOOM__OP_NORM] = {"Norm", 1, 1, LOOM__CLS_COMPUTE},
    [LOOM__OP_RMSNORM] = {"RMSNorm", 2, 2, LOOM__CLS_COMPUTE},
    [LOOM__OP_LAYERNORM] = {"LayerNorm", 3, 3, LOOM__CLS_COMPUTE},
    [LOOM__OP_ALLREDUCE] = {"AllReduce", 1, 1, LOOM__CLS_COMM},
    [LOOM__OP_REDUCESCATTER] = {"ReduceScatter", 1, 1, LOOM__CLS_COMM},
    [LOOM__OP_ALLGATHER] = {"AllGather", 1, 1, LOOM__CLS_COMM},
    [LOOM__OP_BROADCAST] = {"Broadcast", 1, 1, LOOM__CLS_COMM},
    [LOOM__OP_REDUCE] = {"Reduce", 1, 1, LOOM__CLS_COMM},
    [LOOM__OP_ALLTOALL] = {"AllToAll", 1, 1, LOOM__CLS_COMM},
    [LOOM__OP_SEND] = {"Send", 1, 1, LOOM__CLS_COMM},
};

const loom__op_info_t *loom__lang_op_info(loom__op_t op) {
  return (unsigned)op < LOOM__OP_COUNT ? &k_ops[op] : &k_ops[LOOM__OP_CONST];
}

/* 1 if a and b are the same name, letter case aside. */
static int same_name_any_case(const char *a, const char *b) {
  for (; *a && *b; ++a, ++b)
    if ((*a | 0x20) != (*b | 0x20)) return 0;
  return *a == *b;
}

int loom__lang_op_by_name(const char *name) {
  for (int pass = 0; pass < 2; ++pass) /* as the catalogue writes it, else in any case (the paper's `sqrt`) */
    for (int i = LOOM__OP_POW; i < LOOM__OP_COUNT; ++i)
      if (k_ops[i].name[0] >= 'A' && k_ops[i].name[0] <= 'Z' &&
          (pass ? same_name_any_case(k_ops[i].name, name) : !strcmp(k_ops[i].name, name)))
        return i;
  return -1;
}

static loom_result_t grow(void **arr, int *cap, int need, size_t elem) {
  if (need <= *cap) return LOOM_SUCCESS;
  int c = *cap ? *cap : 8;
  while (c < need) c *= 2;
  void *q = realloc(*arr, (size_t)c * elem);
  if (!q) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory (%d items)", c);
  memset((char *)q + (size_t)*cap * elem, 0, (size_t)(c - *cap) * elem);
  *arr = q;
  *cap = c;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_new(const char *file, loom__prog_t **out) {
  loom__prog_t *p = calloc(1, sizeof *p);
  if (!p) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  snprintf(p->file, sizeof p->file, "%s", file ? file : "<builder>");
  *out = p;
  return LOOM_SUCCESS;
}

void loom__lang_free(loom__prog_t *p) {
  if (!p) return;
  for (int i = 0; i < p->nsched; ++i) free(p->scheds[i].stmts);
  free(p->scheds);
  free(p->nodes);
  free(p->exec_in);
  free(p->exec_out);
  free(p->exec_names);
  free(p->states);
  free(p->groups);
  free(p);
}

static void *dup_mem(const void *src, size_t bytes, int *fail) {
  if (!bytes) return NULL;
  void *d = malloc(bytes);
  if (!d) {
    *fail = 1;
    return NULL;
  }
  memcpy(d, src, bytes);
  return d;
}

loom_result_t loom__lang_clone(const loom__prog_t *p, loom__prog_t **out) {
  loom__prog_t *q = calloc(1, sizeof *q);
  if (!q) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  *q = *p;
  int fail = 0;
  q->nodes = dup_mem(p->nodes, (size_t)p->n * sizeof *p->nodes, &fail);
  q->cap = p->n;
  q->exec_in = dup_mem(p->exec_in, (size_t)p->nexec_in * sizeof(int), &fail);
  q->exec_out = dup_mem(p->exec_out, (size_t)p->nexec_out * sizeof(int), &fail);
  q->exec_names = dup_mem(p->exec_names, (size_t)p->nexec_out * sizeof *p->exec_names, &fail);
  q->states = dup_mem(p->states, (size_t)p->nstate * sizeof *p->states, &fail);
  q->groups = dup_mem(p->groups, (size_t)p->ngroups * sizeof *p->groups, &fail);
  q->scheds = dup_mem(p->scheds, (size_t)p->nsched * sizeof *p->scheds, &fail);
  for (int i = 0; i < p->nsched && q->scheds; ++i) {
    q->scheds[i].stmts = dup_mem(p->scheds[i].stmts, (size_t)p->scheds[i].n * sizeof(loom__stmt_t), &fail);
    q->scheds[i].cap = p->scheds[i].n;
  }
  if (fail || (p->nsched && !q->scheds)) {
    if (!q->scheds) q->nsched = 0;
    loom__lang_free(q);
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  }
  *out = q;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_add(loom__prog_t *p, int op, const int *in, int nin, int line, int col, int *id) {
  if (nin < 0 || nin > LOOM__LANG_IN) return loom__fail(LOOM_ERR_INTERNAL, "loom language: %d operands", nin);
  for (int i = 0; i < nin; ++i)
    if (in[i] < 0 || in[i] >= p->n || p->nodes[in[i]].removed)
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "%s: operand %d is id %d, which is no live value of the program",
                        loom__lang_op_info(op)->name, i, in[i]);
  LOOM_TRY(grow((void **)&p->nodes, &p->cap, p->n + 1, sizeof *p->nodes));
  loom__node_t *nd = &p->nodes[p->n];
  memset(nd, 0, sizeof *nd);
  nd->op = op;
  nd->nin = nin;
  for (int i = 0; i < nin; ++i) nd->in[i] = in[i];
  nd->line = line, nd->col = col;
  nd->kern = nd->coll = nd->stage = -1;
  nd->dtype = LOOM_FP32;
  *id = p->n++;
  p->typed = 0;
  return LOOM_SUCCESS;
}

int loom__lang_anonymous(const loom__node_t *nd) { return nd->name[0] == 0 || nd->name[0] == '_'; }

int loom__lang_find(const loom__prog_t *p, const char *name) {
  if (!name || !*name) return -1;
  for (int i = 0; i < p->n; ++i)
    if (!p->nodes[i].removed && !strcmp(p->nodes[i].name, name)) return i;
  return -1;
}

int loom__lang_find_group(const loom__prog_t *p, const char *name) {
  for (int i = 0; i < p->ngroups; ++i)
    if (!strcmp(p->groups[i].name, name)) return i;
  return -1;
}

loom_result_t loom__lang_set_name(loom__prog_t *p, int id, const char *name) {
  if (strlen(name) >= LOOM__LANG_NAME)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "name `%.20s...`: longer than %d characters", name,
                      LOOM__LANG_NAME - 1);
  if (name[0] && (loom__lang_find(p, name) >= 0 || loom__lang_find_group(p, name) >= 0))
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "`%s` is defined twice", name);
  snprintf(p->nodes[id].name, LOOM__LANG_NAME, "%s", name);
  return LOOM_SUCCESS;
}

void loom__lang_fresh_name(const loom__prog_t *p, const char *base, char out[LOOM__LANG_NAME]) {
  snprintf(out, LOOM__LANG_NAME, "%.40s", base);
  for (unsigned k = 2; loom__lang_find(p, out) >= 0 || loom__lang_find_group(p, out) >= 0; ++k)
    snprintf(out, LOOM__LANG_NAME, "%.36s%u", base, k % 1000000u);
}

int loom__lang_users(const loom__prog_t *p, int id, int *out, int cap) {
  int n = 0;
  for (int i = 0; i < p->n; ++i) {
    const loom__node_t *nd = &p->nodes[i];
    if (nd->removed) continue;
    for (int k = 0; k < nd->nin; ++k)
      if (nd->in[k] == id) {
        if (n < cap) out[n] = i;
        n++;
        break;
      }
  }
  return n;
}

int loom__lang_is_result(const loom__prog_t *p, int id) {
  for (int i = 0; i < p->nexec_out; ++i)
    if (p->exec_out[i] == id) return 1;
  for (int i = 0; i < p->nstate; ++i)
    if (p->states[i].value == id) return 1;
  return 0;
}

void loom__lang_replace_uses(loom__prog_t *p, int from, int to, int except) {
  for (int i = 0; i < p->n; ++i) {
    if (i == except || p->nodes[i].removed) continue;
    for (int k = 0; k < p->nodes[i].nin; ++k)
      if (p->nodes[i].in[k] == from) p->nodes[i].in[k] = to;
  }
  for (int i = 0; i < p->nexec_out; ++i)
    if (p->exec_out[i] == from) p->exec_out[i] = to;
  for (int i = 0; i < p->nstate; ++i)
    if (p->states[i].value == from) p->states[i].value = to;
  p->typed = 0;
}

/* Depth-first post-order from `id`; state 1 = on the path (a cycle), 2 = done. */
static loom_result_t topo_visit(const loom__prog_t *p, int id, char *mark, int *order, int *count) {
  if (mark[id] == 2) return LOOM_SUCCESS;
  if (mark[id] == 1) return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "the program's graph has a cycle through id %d", id);
  mark[id] = 1;
  for (int k = 0; k < p->nodes[id].nin; ++k) LOOM_TRY(topo_visit(p, p->nodes[id].in[k], mark, order, count));
  mark[id] = 2;
  order[(*count)++] = id;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_topo(const loom__prog_t *p, int *order, int *count) {
  char *mark = calloc((size_t)p->n + 1, 1);
  if (!mark) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  *count = 0;
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < p->n && r == LOOM_SUCCESS; ++i)
    if (!p->nodes[i].removed) r = topo_visit(p, i, mark, order, count);
  free(mark);
  return r;
}

int loom__lang_state_of(const loom__prog_t *p, int tensor) {
  for (int i = 0; i < p->nstate; ++i)
    if (p->states[i].tensor == tensor) return i;
  return -1;
}

const char *loom__lang_label(const loom__prog_t *p, int id, char *buf, size_t cap) {
  const loom__node_t *nd = &p->nodes[id];
  if (!loom__lang_anonymous(nd))
    snprintf(buf, cap, "`%s`", nd->name);
  else if (nd->line)
    snprintf(buf, cap, "the %s at %d:%d", loom__lang_op_info(nd->op)->name, nd->line, nd->col);
  else
    snprintf(buf, cap, "the %s (value %d)", loom__lang_op_info(nd->op)->name, id);
  return buf;
}

loom_result_t loom__lang_add_group(loom__prog_t *p, const char *name, int kind, int level, int *gid) {
  if (loom__lang_find(p, name) >= 0 || loom__lang_find_group(p, name) >= 0)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "`%s` is defined twice", name);
  int cap = p->ngroups;
  LOOM_TRY(grow((void **)&p->groups, &cap, p->ngroups + 1, sizeof *p->groups));
  loom__group_t *g = &p->groups[p->ngroups];
  snprintf(g->name, sizeof g->name, "%s", name);
  g->kind = kind, g->level = level;
  *gid = p->ngroups++;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_add_sched(loom__prog_t *p, const char *name, loom__sched_t **out) {
  for (int i = 0; i < p->nsched; ++i)
    if (!strcmp(p->scheds[i].name, name))
      return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "Schedule `%s` is defined twice", name);
  int cap = p->nsched;
  LOOM_TRY(grow((void **)&p->scheds, &cap, p->nsched + 1, sizeof *p->scheds));
  loom__sched_t *s = &p->scheds[p->nsched++];
  memset(s, 0, sizeof *s);
  snprintf(s->name, sizeof s->name, "%s", name);
  *out = s;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_sched_push(loom__sched_t *s, const loom__stmt_t *st) {
  LOOM_TRY(grow((void **)&s->stmts, &s->cap, s->n + 1, sizeof *st));
  s->stmts[s->n++] = *st;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_set_exec(loom__prog_t *p, const char *name, const int *in, int nin, const int *out, int nout) {
  int *a = malloc(sizeof(int) * (size_t)(nin + 1)), *b = malloc(sizeof(int) * (size_t)(nout + 1));
  char(*names)[LOOM__LANG_NAME] = calloc((size_t)nout + 1, sizeof *names);
  if (!a || !b || !names) {
    free(a), free(b), free(names);
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "loom language: out of host memory");
  }
  memcpy(a, in, sizeof(int) * (size_t)nin);
  memcpy(b, out, sizeof(int) * (size_t)nout);
  for (int i = 0; i < nout; ++i)
    if (!loom__lang_anonymous(&p->nodes[out[i]])) snprintf(names[i], LOOM__LANG_NAME, "%s", p->nodes[out[i]].name);
  free(p->exec_in), free(p->exec_out), free(p->exec_names);
  p->exec_in = a, p->exec_out = b, p->exec_names = names, p->nexec_in = nin, p->nexec_out = nout;
  snprintf(p->name, sizeof p->name, "%s", name);
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_bind_state(loom__prog_t *p, int t, int v) {
  int s = loom__lang_state_of(p, t);
  if (s < 0) {
    int cap = p->nstate;
    LOOM_TRY(grow((void **)&p->states, &cap, p->nstate + 1, sizeof *p->states));
    s = p->nstate++;
    p->states[s].tensor = t;
  }
  p->states[s].value = v;
  p->typed = 0;
  return LOOM_SUCCESS;
}

loom_result_t loom__lang_bind_update(loom__prog_t *p, int u) {
  const int t = p->nodes[u].in[0];
  char a[96];
  if (p->nodes[t].op != LOOM__OP_INPUT)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "Update: %s is no Tensor; only an input tensor holds state",
                      loom__lang_label(p, t, a, sizeof a));
  const int s = loom__lang_state_of(p, t);
  if (s >= 0 && p->states[s].value != u && p->nodes[p->states[s].value].op == LOOM__OP_UPDATE)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "Update: `%s` is updated twice; a state takes one update per program",
                      p->nodes[t].name);
  return loom__lang_bind_state(p, t, u);
}
