/*
 * proto_lower.c - a scheduled program's communication lowered to protocols
 * (core/protocol.h), one per unit that talks to other ranks, so that the checker
 * can prove each free of deadlocks and races before code runs it.
 *
 * Units, in the program's topological order:
 *  - an overlapped stage (overlap) that holds a MatMul and a collective:
 *    MatMul feeding ReduceScatter (alone or fused) is GEMM + ReduceScatter's
 *    tile-signal protocol; feeding AllReduce (alone, FusedAllReduce or
 *    FusedAllReduceEpilogue) GEMM + AllReduce's; AllGather (alone or fused)
 *    feeding the MatMul is AllGather + GEMM's push protocol (proto_ops.c's table of the
 *    families' protocols);
 *  - a fused collective: FusedAllReduce is the two-shot protocol (the fused
 *    kernel runs on the reduced slice before it is published in staging),
 *    FusedReduceScatter ReduceScatter's, FusedAllGather AllGather's (the
 *    kernel writes the slice that is gathered), FusedAllReduceEpilogue both
 *    AllReduce paths;
 *  - a lone collective: AllReduce both paths (AUTO may take either),
 *    ReduceScatter, AllGather; Reduce, Broadcast, AllToAll and Send, which
 *    have no hand-written op, by the templates below (pulls after an
 *    arrival signal, a done signal that hands the source back).
 * Pointwise kernels and MatMuls that are no part of a stage touch only
 * their rank's memory and have no protocol. What the lowering does not do:
 * code generation (not written yet) is to implement exactly these
 * protocols; the lowering is checked against the language's unit kinds, not
 * against generated code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lang/lang.h"
#include "lang/lang_proto.h"

/* Reduce (root 0 pulls) and Broadcast (the ranks pull from root 0). */
static void loom__lower_rooted(loom__proto_t *p, int r, int bcast) {
  const int W = p->W, in = loom__proto_buf(p, "in"), out = loom__proto_buf(p, "out");
  const int arrived = loom__proto_sig(p, "arrived"), done = loom__proto_sig(p, "done");
  if (r == 0 || !bcast) loom__proto_write(p, r, r, in, 0, 1);
  if (r == 0 || !bcast) loom__proto_set(p, r, r, arrived, 0, 0);
  if (r == 0) {
    if (!bcast) loom__proto_wait_peers(p, r, arrived, 0, 0);
    for (int s = 0; s < (bcast ? 1 : W); ++s) loom__proto_read(p, r, s, in, 0, 1);
    loom__proto_write(p, r, r, out, 0, 1);
    if (!bcast) loom__proto_set(p, r, r, done, 0, 0);
    if (bcast) loom__proto_wait_peers(p, r, done, 0, 0);
  } else {
    if (bcast) {
      loom__proto_wait(p, r, 0, arrived, 0, 0);
      loom__proto_read(p, r, 0, in, 0, 1);
      loom__proto_write(p, r, r, out, 0, 1);
      loom__proto_set(p, r, r, done, 0, 0);
    } else {
      loom__proto_wait(p, r, 0, done, 0, 0);
    }
  }
  if (r == 0 || bcast) loom__proto_read(p, r, r, out, 0, 1);
}

static void loom__lower_alltoall(loom__proto_t *p, int r) {
  const int W = p->W, in = loom__proto_buf(p, "in"), out = loom__proto_buf(p, "out");
  const int arrived = loom__proto_sig(p, "arrived"), done = loom__proto_sig(p, "done");
  loom__proto_write(p, r, r, in, 0, W);
  loom__proto_set(p, r, r, arrived, 0, 0);
  for (int i = 0; i < W; ++i) {
    const int q = (r + i) % W;
    if (q != r) loom__proto_wait(p, r, q, arrived, 0, 0);
    loom__proto_read(p, r, q, in, r, r + 1);
    loom__proto_write(p, r, r, out, q, q + 1);
  }
  loom__proto_set(p, r, r, done, 0, 0);
  loom__proto_wait_peers(p, r, done, 0, 0);
  loom__proto_read(p, r, r, out, 0, W);
}

/* Send: rank 0 of the pair (group i) to rank 1 (group i + k), a pull. */
static void loom__lower_send(loom__proto_t *p) {
  const int x = loom__proto_buf(p, "x"), out = loom__proto_buf(p, "recv");
  const int sent = loom__proto_sig(p, "sent"), taken = loom__proto_sig(p, "taken");
  loom__proto_write(p, 0, 0, x, 0, 1);
  loom__proto_set(p, 0, 0, sent, 0, 0);
  loom__proto_wait(p, 0, 1, taken, 0, 0);
  loom__proto_wait(p, 1, 0, sent, 0, 0);
  loom__proto_read(p, 1, 0, x, 0, 1);
  loom__proto_write(p, 1, 1, out, 0, 1);
  loom__proto_set(p, 1, 1, taken, 0, 0);
  loom__proto_read(p, 1, 1, out, 0, 1);
}

typedef struct loom__lower {
  const loom__prog_t *p;
  int W, cap, n;
  loom__proto_unit_t *out;
} loom__lower_t;

/* Appends the unit `name` with protocol op (a loom__proto_op_t, or -1 - c
 * for the templates above: c = op of the node). */
static loom_result_t loom__lower_push(loom__lower_t *L, const char *name, const char *path, int op) {
  if (L->n >= L->cap) return LOOM_ERR_INVALID_ARGUMENT;
  loom__proto_unit_t *u = &L->out[L->n++];
  snprintf(u->unit, sizeof u->unit, "%s%s%s", name, *path ? " " : "", path);
  if (op >= 0) {
    loom__proto_op(op, L->W, &u->proto);
    return LOOM_SUCCESS;
  }
  loom__proto_template(-1 - op, L->W, &u->proto);
  return LOOM_SUCCESS;
}

void loom__proto_template(int op, int W, loom__proto_t *p) {
  loom__proto_init(p, op >= 0 && op < LOOM__OP_COUNT ? loom__lang_op_info((loom__op_t)op)->name : "?",
                   op == LOOM__OP_SEND ? 2 : W);
  if (op == LOOM__OP_SEND) {
    loom__lower_send(p);
    return;
  }
  if (op != LOOM__OP_ALLTOALL && op != LOOM__OP_REDUCE && op != LOOM__OP_BROADCAST) p->overflow = 1;
  for (int r = 0; r < W && !p->overflow; ++r) {
    if (op == LOOM__OP_ALLTOALL) loom__lower_alltoall(p, r);
    else loom__lower_rooted(p, r, op == LOOM__OP_BROADCAST);
  }
}

/* A collective on its own (node id, or its fused collective). */
static loom_result_t loom__lower_comm(loom__lower_t *L, int id) {
  const loom__node_t *nd = &L->p->nodes[id];
  char b[96];
  const char *name = nd->coll >= 0 ? L->p->groups[nd->coll].name : loom__lang_label(L->p, id, b, sizeof b);
  const int kind = nd->coll >= 0 ? L->p->groups[nd->coll].kind : -1;
  loom_result_t r = LOOM_SUCCESS;
  if (kind == LOOM__GK_FUSED_AR) return loom__lower_push(L, name, "(two-shot)", LOOM__PROTO_AR_TWO_SHOT);
  /* ReduceScatter and AllGather: the pull kernel and the slices' LL (AUTO's two forms) */
  if (kind == LOOM__GK_FUSED_RS || (kind < 0 && nd->op == LOOM__OP_REDUCESCATTER)) {
    r = loom__lower_push(L, name, "(pull)", LOOM__PROTO_RS);
    return r == LOOM_SUCCESS ? loom__lower_push(L, name, "(LL)", LOOM__PROTO_RS_LL) : r;
  }
  if (kind == LOOM__GK_FUSED_AG || (kind < 0 && nd->op == LOOM__OP_ALLGATHER)) {
    r = loom__lower_push(L, name, "(pull)", LOOM__PROTO_AG);
    return r == LOOM_SUCCESS ? loom__lower_push(L, name, "(LL)", LOOM__PROTO_AG_LL) : r;
  }
  if (kind == LOOM__GK_FUSED_ARE || (kind < 0 && nd->op == LOOM__OP_ALLREDUCE)) {
    r = loom__lower_push(L, name, "(one-shot)", LOOM__PROTO_AR_ONE_SHOT);
    return r == LOOM_SUCCESS ? loom__lower_push(L, name, "(two-shot)", LOOM__PROTO_AR_TWO_SHOT) : r;
  }
  return loom__lower_push(L, name, "", -1 - nd->op);
}

/* The kind of communication node id does: AR, RS or AG (-1: other). */
static int loom__lower_comm_kind(const loom__prog_t *p, int id) {
  const loom__node_t *nd = &p->nodes[id];
  const int k = nd->coll >= 0 ? p->groups[nd->coll].kind : -1;
  if (k == LOOM__GK_FUSED_AR || k == LOOM__GK_FUSED_ARE || (k < 0 && nd->op == LOOM__OP_ALLREDUCE)) return 0;
  if (k == LOOM__GK_FUSED_RS || (k < 0 && nd->op == LOOM__OP_REDUCESCATTER)) return 1;
  if (k == LOOM__GK_FUSED_AG || (k < 0 && nd->op == LOOM__OP_ALLGATHER)) return 2;
  return -1;
}

/* Stage g: the fused op's protocol when it is MatMul -> RS / AR or
 * AG -> MatMul; else -1 (its collectives are lowered one by one). */
static int loom__lower_stage_op(const loom__prog_t *p, const int *order, int cnt, int g) {
  int mm = -1, comm = -1; /* positions in `order` of the first of each */
  for (int i = 0; i < cnt; ++i) {
    const loom__node_t *nd = &p->nodes[order[i]];
    if (nd->stage != g) continue;
    if (nd->op == LOOM__OP_MATMUL && mm < 0) mm = i;
    if (loom__lang_op_info((loom__op_t)nd->op)->cls == LOOM__CLS_COMM && comm < 0) comm = i;
  }
  if (mm < 0 || comm < 0) return -1;
  const int k = loom__lower_comm_kind(p, order[comm]);
  if (mm < comm && k == 0) return LOOM__PROTO_GEMM_AR;
  if (mm < comm && k == 1) return LOOM__PROTO_GEMM_RS;
  if (comm < mm && k == 2) return LOOM__PROTO_AG_GEMM;
  return -1;
}

static loom_result_t loom__lower_walk(loom__lower_t *L, const int *order, int cnt, char *seen) {
  const loom__prog_t *p = L->p;
  loom_result_t r = LOOM_SUCCESS;
  for (int i = 0; i < cnt && r == LOOM_SUCCESS; ++i) {
    const loom__node_t *nd = &p->nodes[order[i]];
    if (loom__lang_op_info((loom__op_t)nd->op)->cls != LOOM__CLS_COMM) continue;
    if (nd->stage >= 0 && !seen[nd->stage]) {
      const int op = loom__lower_stage_op(p, order, cnt, nd->stage);
      if (op >= 0) {
        seen[nd->stage] = 1;
        r = loom__lower_push(L, p->groups[nd->stage].name, "", op);
        continue;
      }
    } else if (nd->stage >= 0) {
      continue; /* inside a stage lowered as one */
    }
    if (nd->coll >= 0 && seen[nd->coll]) continue;
    if (nd->coll >= 0) seen[nd->coll] = 1;
    r = loom__lower_comm(L, order[i]);
  }
  return r;
}

loom_result_t loom__lang_lower(struct loom_prog *p, int W, loom__proto_unit_t *out, int cap, int *n) {
  *n = 0;
  if (W < 2 || W > LOOM__PROTO_MAXW) return LOOM_ERR_INVALID_ARGUMENT;
  int *order = (int *)malloc(sizeof(int) * (size_t)(p->n + 1));
  char *seen = (char *)calloc((size_t)p->ngroups + 1, 1);
  int cnt = 0;
  loom_result_t r = order && seen ? loom__lang_topo(p, order, &cnt) : LOOM_ERR_OUT_OF_MEMORY;
  loom__lower_t L = {p, W, cap, 0, out};
  if (r == LOOM_SUCCESS) r = loom__lower_walk(&L, order, cnt, seen);
  *n = L.n;
  free(order), free(seen);
  return r;
}

void loom__proto_units_free(loom__proto_unit_t *u, int n) {
  for (int i = 0; i < n; ++i) loom__proto_free(&u[i].proto);
}
