/*
 * lower_body.c - the loops of a kernel unit's step and their bodies:
 * straight-line SSA over the global coordinates g[] of the loop's element
 * (lower.h says what each instruction does).
 *
 * A value is evaluated at the loop's element by PyTorch's broadcasting:
 * its dimension j is the loop's dimension j + (loop rank - its rank), or
 * coordinate 0 where it has size 1; so is every buffer a load reads (an
 * index map). An inlined value is computed once per element (memoized per
 * loop); a materialized one is loaded, unless this step computes it (an
 * FP32 pointwise value of the loop's own space: the reader's element is
 * its own, so the reader computes it rather than wait a step for it;
 * loom__lw_same_element); a collective inlined into its
 * consumer reads its operand's buffer at other ranks: a reduction over the
 * group (AllReduce, ReduceScatter, Reduce), the owner's piece (AllGather,
 * AllToAll), the root's (Broadcast) or the source's (Send). Update is its
 * new value and Slice its operand (global coordinates are the same).
 */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "lang/lower.h"

typedef struct body {
  loom__lw_prog_t *lw;
  loom__lw_loop_t *loop; /* lw->loops[loop index]: re-read after growing lw->ins (loops do not move) */
  int *memo;             /* [p->n]: the instruction of each value in this loop, -1 */
} body_t;

static loom_result_t add_ins(body_t *c, const loom__lw_ins_t *in, int *out) {
  loom__lw_prog_t *lw = c->lw;
  LOOM_TRY(loom__lw_grow((void **)&lw->ins, lw->nins, &lw->cins, sizeof *lw->ins));
  lw->ins[lw->nins++] = *in;
  *out = c->loop->nins++;
  return LOOM_SUCCESS;
}

/* An index map from the loop's coordinates into geometry g (broadcasting); whole: the geometry of the
 * whole tensor (Dropout's element index). */
static loom_result_t add_index(body_t *c, const loom__lw_geom_t *g, int whole, int *out) {
  loom__lw_prog_t *lw = c->lw;
  const int R = c->loop->space.rank;
  if (g->rank > R)
    return loom__fail(LOOM_ERR_INTERNAL, "lowering: a value of rank %d read in a loop of rank %d", g->rank, R);
  LOOM_TRY(loom__lw_grow((void **)&lw->idx, lw->nidx, &lw->cidx, sizeof *lw->idx));
  loom__lw_index_t *x = &lw->idx[lw->nidx];
  memset(x, 0, sizeof *x);
  x->geom = *g;
  if (whole) x->geom.sliced = -1;
  for (int j = 0; j < g->rank; ++j) x->src[j] = g->dims[j] == 1 ? -1 : j + R - g->rank;
  *out = lw->nidx++;
  return LOOM_SUCCESS;
}

/* A load or reduction of buffer b (who, arg) at the loop's element. */
static loom_result_t add_read(body_t *c, int kind, int b, int who, int arg, int redop, int node, int *out) {
  loom__lw_ins_t in;
  memset(&in, 0, sizeof in);
  in.kind = kind, in.buf = b, in.who = who, in.arg = arg, in.op = redop, in.node = node;
  in.a[0] = in.a[1] = in.a[2] = -1;
  LOOM_TRY(add_index(c, &c->lw->bufs[b].geom, 0, &in.idx));
  return add_ins(c, &in, out);
}

static loom_result_t emit(body_t *c, int id, int top, int *out);

/* A collective inlined into its consumer: a read of its operand's buffer at other ranks. */
static loom_result_t emit_comm(body_t *c, int id, int *out) {
  const loom__node_t *nd = &c->lw->p->nodes[id];
  int b = c->lw->buf_of[nd->in[0]];
  if (b < 0 && c->lw->p->nodes[nd->in[0]].op == LOOM__OP_INPUT) LOOM_TRY(loom__lw_buf_for(c->lw, nd->in[0], &b));
  if (b < 0) return loom__fail(LOOM_ERR_INTERNAL, "lowering: the operand of `%s` has no buffer", nd->name);
  switch (nd->op) {
    case LOOM__OP_ALLREDUCE:
    case LOOM__OP_REDUCESCATTER:
    case LOOM__OP_REDUCE: return add_read(c, LOOM__LI_REDUCE, b, LOOM__LWW_OWN, 0, nd->redop, id, out);
    case LOOM__OP_ALLGATHER:
    case LOOM__OP_ALLTOALL: return add_read(c, LOOM__LI_LOAD, b, LOOM__LWW_OWNER, 0, 0, id, out);
    case LOOM__OP_BROADCAST: return add_read(c, LOOM__LI_LOAD, b, LOOM__LWW_ROOT, nd->root, 0, id, out);
    default: return add_read(c, LOOM__LI_LOAD, b, LOOM__LWW_SRC, nd->send_off, 0, id, out); /* Send */
  }
}

/* A pointwise operation on its operands. */
static loom_result_t emit_op(body_t *c, int id, int *out) {
  const loom__node_t *nd = &c->lw->p->nodes[id];
  if (nd->op == LOOM__OP_UPDATE) return emit(c, nd->in[1], 0, out);
  if (nd->op == LOOM__OP_SLICE) return emit(c, nd->in[0], 0, out);
  loom__lw_ins_t in;
  memset(&in, 0, sizeof in);
  in.kind = LOOM__LI_OP, in.op = nd->op, in.node = id, in.buf = -1, in.idx = -1;
  in.a[0] = in.a[1] = in.a[2] = -1;
  for (int k = 0; k < nd->nin; ++k) LOOM_TRY(emit(c, nd->in[k], 0, &in.a[k]));
  in.value = nd->value, in.seed = nd->seed, in.dtype = nd->dtype;
  if (nd->op == LOOM__OP_DROPOUT) {
    loom__lw_geom_t g;
    LOOM_TRY(loom__lw_geom_of(c->lw->p, id, c->lw->W, &c->lw->bind, &g));
    LOOM_TRY(add_index(c, &g, 1, &in.idx));
  }
  return add_ins(c, &in, out);
}

/* 1 where materialized value id is computed in this loop rather than loaded: a value of this unit's
 * step (this loop's reader computes it itself: loom__lw_same_element, which let the reader share its
 * step); a value of an earlier step is loaded. */
static int computed_here(const body_t *c, int id) {
  const int b = c->lw->buf_of[id];
  const loom__lw_loop_t *l = c->loop;
  return b >= 0 && c->lw->bufs[b].unit == l->unit && c->lw->bufs[b].step == l->step &&
         loom__lw_same_element(c->lw, id, &l->space);
}

/* id's value at the loop's element (top: id is a value this loop stores, computed, not loaded). */
static loom_result_t emit(body_t *c, int id, int top, int *out) {
  if (c->memo[id] >= 0) {
    *out = c->memo[id];
    return LOOM_SUCCESS;
  }
  const loom__node_t *nd = &c->lw->p->nodes[id];
  const loom__op_class_t cls = loom__lang_op_info((loom__op_t)nd->op)->cls;
  loom_result_t r;
  if (nd->op == LOOM__OP_CONST) {
    loom__lw_ins_t in;
    memset(&in, 0, sizeof in);
    in.kind = LOOM__LI_CONST, in.value = nd->value, in.node = id, in.buf = in.idx = -1;
    in.a[0] = in.a[1] = in.a[2] = -1;
    r = add_ins(c, &in, out);
  } else if (!top && nd->op != LOOM__OP_INPUT && computed_here(c, id)) {
    r = emit_op(c, id, out);
  } else if (!top && (c->lw->buf_of[id] >= 0 || nd->op == LOOM__OP_INPUT)) {
    int b;
    r = loom__lw_buf_for(c->lw, id, &b);
    if (r == LOOM_SUCCESS) r = add_read(c, LOOM__LI_LOAD, b, LOOM__LWW_OWN, 0, 0, id, out);
  } else if (cls == LOOM__CLS_COMM) {
    r = emit_comm(c, id, out);
  } else if (cls == LOOM__CLS_POINTWISE) {
    r = emit_op(c, id, out);
  } else {
    r = loom__fail(LOOM_ERR_INTERNAL, "lowering: `%s` (%s) is neither materialized nor inlinable", nd->name,
                   loom__lang_op_info((loom__op_t)nd->op)->name);
  }
  if (r == LOOM_SUCCESS) c->memo[id] = *out; /* (a value this loop stores is computed: readers reuse it) */
  return r;
}

/* ---- loops ------------------------------------------------------------------------ */

int loom__lw_same_space(const loom__lw_geom_t *a, const loom__lw_geom_t *b) {
  if (a->rank != b->rank || a->sliced != b->sliced || a->S != b->S || a->group != b->group || a->root != b->root)
    return 0;
  for (int j = 0; j < a->rank; ++j)
    if (a->dims[j] != b->dims[j]) return 0;
  return 1;
}

static loom_result_t new_loop(loom__lw_prog_t *lw, int u, int step, int kind, const loom__lw_geom_t *space, int *l) {
  LOOM_TRY(loom__lw_grow((void **)&lw->loops, lw->nloop, &lw->cloop, sizeof *lw->loops));
  loom__lw_loop_t *x = &lw->loops[lw->nloop];
  memset(x, 0, sizeof *x);
  x->unit = u, x->step = step, x->kind = kind, x->space = *space, x->ins0 = lw->nins;
  x->x_ins = x->w_ins = x->b_ins = -1;
  *l = lw->nloop++;
  return LOOM_SUCCESS;
}

static loom_result_t add_store(loom__lw_loop_t *l, int b, int ins) {
  if (l->nstore == LOOM__LW_MAXSTORE) return loom__fail(LOOM_ERR_INTERNAL, "lowering: a loop of too many stores");
  l->store_buf[l->nstore] = b, l->store_ins[l->nstore] = ins, l->nstore++;
  return LOOM_SUCCESS;
}

/* One value's loop and body: node id (a Norm's partials: part). The loop's instructions must be the
 * last ones appended (a loop's body is contiguous). */
static loom_result_t lower_value(body_t *c, int id, int part) {
  loom__lw_prog_t *lw = c->lw;
  const loom__node_t *nd = &lw->p->nodes[id];
  loom__lw_loop_t *l = c->loop;
  int ins;
  if (part) { /* the partial sums of squares of Norm id's operand */
    int b;
    LOOM_TRY(loom__lw_partials_for(lw, id, &b));
    lw->bufs[b].unit = l->unit, lw->bufs[b].step = l->step;
    LOOM_TRY(emit(c, nd->in[0], 0, &ins));
    c->loop->x_ins = ins;
    return add_store(c->loop, b, ins);
  }
  const int b = lw->buf_of[id];
  if (nd->op == LOOM__OP_NORM) {
    int pb;
    LOOM_TRY(loom__lw_partials_for(lw, id, &pb));
    loom__lw_ins_t in;
    memset(&in, 0, sizeof in);
    in.kind = LOOM__LI_PARTIALS, in.buf = pb, in.node = id, in.idx = -1, in.a[0] = in.a[1] = in.a[2] = -1;
    in.arg = lw->p->nodes[nd->in[0]].ty.lay.kind == LOOM__LAY_SLICED;
    LOOM_TRY(add_ins(c, &in, &ins));
    return add_store(c->loop, b, ins);
  }
  if (nd->op == LOOM__OP_RMSNORM || nd->op == LOOM__OP_LAYERNORM) {
    int x, w, nb = -1;
    LOOM_TRY(emit(c, nd->in[0], 0, &x));
    LOOM_TRY(emit(c, nd->in[1], 0, &w));
    if (nd->op == LOOM__OP_LAYERNORM) LOOM_TRY(emit(c, nd->in[2], 0, &nb));
    c->loop->norm = nd->op, c->loop->eps = nd->value;
    c->loop->x_ins = x, c->loop->w_ins = w, c->loop->b_ins = nb;
    return add_store(c->loop, b, -1);
  }
  LOOM_TRY(emit(c, id, 1, &ins));
  return add_store(c->loop, b, ins);
}

/* The kind and space of entry e of a step's values (a Norm's partials: -1 - id). */
static loom_result_t kind_of(const loom__lw_prog_t *lw, int e, int *kind, loom__lw_geom_t *space) {
  const int part = e < 0, id = part ? -1 - e : e;
  const int op = lw->p->nodes[id].op;
  *kind = part ? LOOM__LL_SUMSQ : op == LOOM__OP_RMSNORM || op == LOOM__OP_LAYERNORM ? LOOM__LL_ROW : LOOM__LL_ELEM;
  return loom__lw_geom_of(lw->p, part ? lw->p->nodes[id].in[0] : id, lw->W, &lw->bind, space);
}

/* One loop for entry i and, if it is an ELEM loop, every later entry of the same space (up to a loop's
 * stores), marked done. */
static loom_result_t one_loop(loom__lw_prog_t *lw, int u, int step, const int *nodes, int n, int i, char *done,
                              int *memo) {
  int kind, l = 0;
  loom__lw_geom_t space;
  LOOM_TRY(kind_of(lw, nodes[i], &kind, &space));
  LOOM_TRY(new_loop(lw, u, step, kind, &space, &l));
  for (int k = 0; k < lw->p->n; ++k) memo[k] = -1;
  body_t c = {lw, &lw->loops[l], memo};
  for (int j = i; j < n; ++j) {
    int kj;
    loom__lw_geom_t sj;
    if (done[j]) continue;
    LOOM_TRY(kind_of(lw, nodes[j], &kj, &sj));
    if (j > i && (kind != LOOM__LL_ELEM || kj != LOOM__LL_ELEM || !loom__lw_same_space(&space, &sj))) continue;
    if (lw->loops[l].nstore == LOOM__LW_MAXSTORE) break;
    LOOM_TRY(lower_value(&c, nodes[j] < 0 ? -1 - nodes[j] : nodes[j], nodes[j] < 0));
    done[j] = 1;
  }
  return LOOM_SUCCESS;
}

loom_result_t loom__lw_loops(loom__lw_prog_t *lw, int u, int step, const int *nodes, int n) {
  int *memo = malloc(sizeof(int) * (size_t)(lw->p->n + 1));
  char *done = calloc((size_t)n + 1, 1);
  loom_result_t r = memo && done ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lowering: out of host memory");
  for (int i = 0; i < n && r == LOOM_SUCCESS; ++i)
    if (!done[i]) r = one_loop(lw, u, step, nodes, n, i, done, memo);
  free(memo), free(done);
  return r;
}

int loom__lw_reads_peers(const loom__lw_prog_t *lw, const loom__lw_loop_t *l, int b) {
  for (int i = 0; i < l->nins; ++i) {
    const loom__lw_ins_t *in = &lw->ins[l->ins0 + i];
    if (in->buf != b) continue;
    if (in->kind == LOOM__LI_LOAD && in->who == LOOM__LWW_SRC) return 1; /* another group's rank */
    if (lw->W == 1) continue; /* the group is this rank alone: its reads are its own */
    if (in->kind == LOOM__LI_REDUCE || (in->kind == LOOM__LI_LOAD && in->who != LOOM__LWW_OWN) ||
        (in->kind == LOOM__LI_PARTIALS && in->arg)) return 1;
  }
  return 0;
}
