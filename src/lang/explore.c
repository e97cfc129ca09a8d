/*
 * explore.c - the schedules the transformations reach from a program
 * (`loom schedules`), and a cost estimate for each.
 *
 * Search: breadth first from the unscheduled program; at each program the
 * moves of moves.c (splits, reorders with or without their clean-up,
 * fuses of pointwise cones, fused collectives, overlaps along chains of
 * units that communicate or multiply, asSlice, dead). A move the
 * transformation refuses is dropped; one that gives a program already seen
 * (same printed text: names are derived from content, so two orders of the
 * same steps meet) is merged. Bounded by depth (moves) and count.
 *
 * Cost (per rank; the next issue's tuner replaces it with measurements).
 * Every unit the schedule runs (a stage, a fused collective, a kernel or a
 * lone operation) is one kernel: it pays a launch, one link latency per
 * exchange its collectives make (a rank waiting for what a peer sent),
 * its compute or HBM time, and its link time:
 *   time = LAUNCH + exchanges * EXCHANGE + max(FLOPs / FLOPS, HBM / HBM_BW)
 *          + link bytes / LINK_BW
 * less, in a stage, the share of the shorter of its compute and its
 * communication that overlapping hides (a fused collective hides none). HBM: the values a unit reads from outside and those
 * it hands on; FLOPs: 2*M*N*K per MatMul piece, one per pointwise element.
 * Exchanges and link bytes per rank: ReduceScatter, AllGather, AllToAll one
 * exchange and (W-1)/W of the whole; Reduce, Broadcast one and the whole;
 * Send one and its piece; AllReduce the cheaper of its two forms: a push
 * (LL: one exchange, (W-1) wholes out of each rank) or two-shot (two
 * exchanges, 2 (W-1)/W of the whole). A fused collective makes the
 * exchanges of its parts (FusedAllReduce: two). The constants are H200
 * measurements from docs/perf (see k_cost below); the model ranks
 * schedules, it does not predict times to better than tens of percent.
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

/* The cost model's constants (H200, one NVLink domain), each from a measurement in docs/perf:
 *  launch    3.1 us  a kernel's fixed cost inside a CUDA graph: coll.md, "LL": an LL AllReduce of 4
 *                    KiB takes 6.68 us per call in a graph, one launch and one exchange, less the
 *                    exchange below;
 *  exchange  3.6 us  one wait for data or a signal from a peer, with its system-scope fences: the same
 *                    table's one-shot (17.47 us) makes three exchanges more than LL (6.68): 10.8 / 3;
 *  hbm       4.1e12  B/s, copy (read + write) measured by loom-bench: core.md, "Ceilings" (4.05-4.14);
 *  link      359e9   B/s one way, kernel stores through peer pointers: core.md, "Ceilings";
 *  flops     750e12  FLOP/s, bf16 GEMM by cuBLASLt on large shapes: core.md, "Ceilings" (718-778);
 *                    MatMuls of every dtype are costed at this rate;
 *  overlap   0.35    the share of the shorter of a stage's compute and communication that it hides: the
 *                    fused tensor-parallel ops' measured overlap efficiency, median ~35% at m >= 1024
 *                    (tp.md, "AUTO measured on held-out shapes"). A fused collective hides none of its
 *                    pointwise work: loom's fused RS-Opt-AG Adam takes 2732 us at 2^27 fp32, W = 2, more
 *                    than the all-reduce's 1723 plus its half of the update, 690 (optim.md, "What limits
 *                    fp32 Adam"). */
static const struct {
  double launch_us, exchange_us, hbm_bps, link_bps, flops, overlap;
} k_cost = {3.1, 3.6, 4.1e12, 359e9, 750e12, 0.35};

typedef struct unit_cost { double flops, hbm, link, exchanges; } unit_cost_t;

static void node_cost(const loom__prog_t *p, int id, int W, const loom__binding_t *b, unit_cost_t *u) {
  const loom__node_t *nd = &p->nodes[id];
  double whole;
  const double mine = elems(p, id, W, b, &whole), es = (double)loom_dtype_size((loom_dtype_t)nd->ty.dtype);
  const double part = (double)(W - 1) / W * whole * es; /* (W-1)/W of the whole, in bytes */
  switch (nd->op) {
    case LOOM__OP_MATMUL: {
      const loom__type_t *a = &p->nodes[nd->in[0]].ty;
      double k = (double)dim_val(b, &a->dims[a->rank - 1]);
      if (a->lay.kind == LOOM__LAY_SLICED && a->lay.arg == a->rank - 1) k /= W;
      u->flops += 2.0 * mine * k;
      break;
    }
    case LOOM__OP_ALLREDUCE: { /* the push form (one exchange) or two-shot (two), whichever is cheaper */
      const double push = (W - 1) * whole * es, two = 2 * part;
      const int two_shot = k_cost.exchange_us * 1e-6 + two / k_cost.link_bps < push / k_cost.link_bps;
      u->link += W > 1 ? (two_shot ? two : push) : 0, u->exchanges += W > 1 ? 1 + two_shot : 0;
      break;
    }
    case LOOM__OP_REDUCESCATTER: case LOOM__OP_ALLGATHER: case LOOM__OP_ALLTOALL:
      u->link += part, u->exchanges += W > 1;
      break;
    case LOOM__OP_REDUCE: case LOOM__OP_BROADCAST: u->link += W > 1 ? whole * es : 0, u->exchanges += W > 1; break;
    case LOOM__OP_SEND: u->link += mine * es, u->exchanges += 1; break;
    default: u->flops += loom__lang_op_info(nd->op)->cls == LOOM__CLS_LEAF ? 0 : mine; break;
  }
}

/* HBM bytes of node id inside its unit: operands from other units, and itself if used outside. */
static double node_hbm(const loom__prog_t *p, int id, int W, const loom__binding_t *b) {
  const int u = unit_of(p, id), op = p->nodes[id].op;
  double h = 0;
  for (int k = op == LOOM__OP_UPDATE ? 1 : 0; k < p->nodes[id].nin; ++k) /* Update names its state, reads no data */
    if (unit_of(p, p->nodes[id].in[k]) != u && p->nodes[p->nodes[id].in[k]].op != LOOM__OP_CONST)
      h += bytes(p, op == LOOM__OP_SLICE ? id : p->nodes[id].in[k], W, b); /* a Slice reads its slice only */
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
  unit_cost_t *u = calloc((size_t)U + 1, sizeof *u);
  char *used = calloc((size_t)U + 1, 1);
  if (!u || !used) {
    free(u), free(used);
    return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "cost: out of host memory");
  }
  for (int i = 0; i < p->n; ++i) {
    if (p->nodes[i].removed || loom__lang_op_info(p->nodes[i].op)->cls == LOOM__CLS_LEAF) continue;
    const int k = unit_of(p, i);
    node_cost(p, i, W, bind, &u[k]);
    u[k].hbm += node_hbm(p, i, W, bind);
    used[k] = 1;
  }
  for (int k = 0; k < U; ++k) {
    if (!used[k]) continue;
    const double flop_s = u[k].flops / k_cost.flops, hbm_s = u[k].hbm / k_cost.hbm_bps;
    const double comp = flop_s > hbm_s ? flop_s : hbm_s, comm = u[k].link / k_cost.link_bps;
    const int stage = k >= p->n && p->groups[k - p->n].level == 2;
    const double fixed = (k_cost.launch_us + u[k].exchanges * k_cost.exchange_us) * 1e-6;
    const double hidden = stage ? k_cost.overlap * (comp < comm ? comp : comm) : 0;
    c->time_us += 1e6 * (fixed + comp + comm - hidden);
    c->flops += u[k].flops, c->hbm_bytes += u[k].hbm, c->link_bytes += u[k].link;
    c->kernels++;
  }
  free(u), free(used);
  return LOOM_SUCCESS;
}

/* ---- search ------------------------------------------------------------------------- */

#define STEP_STMTS 12 /* a move and its clean-up */

typedef struct node_state {
  loom__prog_t *prog;
  char *text;
  int parent;
  int nvia;
  loom__stmt_t via[STEP_STMTS]; /* the statements from the parent */
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
  for (int k = n - 1; k >= 0; --k)
    for (int t = 0; t < st[chain[k]].nvia; ++t) LOOM_TRY(loom__lang_sched_push(s, &st[chain[k]].via[t]));
  return LOOM_SUCCESS;
}

/* Applies move mv to a copy of `from`: the new state, or q == NULL when it does not apply or adds nothing. */
static loom_result_t try_move(const loom__prog_t *from, const loom__move_t *mv, state_t *out) {
  memset(out, 0, sizeof *out);
  loom__prog_t *q;
  LOOM_TRY(loom__lang_clone(from, &q));
  const int applied = loom__lang_apply(q, &mv->st) == LOOM_SUCCESS;
  int extra = 0;
  if (applied && mv->cleanup) loom__lang_cleanup(q, out->via + 1, STEP_STMTS - 1, &extra);
  if (!applied || (mv->cleanup && extra == 0)) { /* refused, or a clean-up that does nothing (the plain move's twin) */
    loom__lang_free(q);
    return LOOM_SUCCESS;
  }
  out->prog = q;
  out->via[0] = mv->st;
  out->nvia = 1 + extra;
  return LOOM_SUCCESS;
}

static loom_result_t expand(state_t **st, int *n, int *cap, int from, int max) {
  loom__moves_t c = {0};
  loom__lang_moves((*st)[from].prog, &c);
  loom_result_t r = LOOM_SUCCESS;
  for (int k = 0; k < c.n && *n < max && r == LOOM_SUCCESS; ++k) {
    state_t next;
    if ((r = try_move((*st)[from].prog, &c.m[k], &next)) != LOOM_SUCCESS || !next.prog) continue;
    char *text = text_of(next.prog);
    if (!text || seen(*st, *n, text)) {
      free(text);
      loom__lang_free(next.prog);
      continue;
    }
    if (*n == *cap) {
      state_t *g = realloc(*st, sizeof **st * (size_t)(*cap * 2));
      if (!g) {
        free(text), loom__lang_free(next.prog);
        r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "explore: out of host memory");
        break;
      }
      *st = g, *cap *= 2;
    }
    next.text = text, next.parent = from;
    (*st)[(*n)++] = next;
  }
  free(c.m);
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
