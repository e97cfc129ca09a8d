/*
 * lower_exec.c - the lowered form run on the CPU (lower_exec.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pointwise.h"
#include "lang/interp_ops.h"
#include "tests/host/codegen/lower_exec.h"

typedef struct ex {
  const loom__lw_prog_t *lw;
  float **mem; /* [rank * nbuf + buffer]: the rank's piece, rounded to the buffer's dtype */
} ex_t;

static float rnd(double x, int dtype) { return (float)loom__interp_round(x, dtype); }
static float *at(const ex_t *x, int r, int b) { return x->mem[(size_t)r * (size_t)x->lw->nbuf + (size_t)b]; }

/* The piece of index q of geometry g: dims and the global coordinates g[] of element e. */
static int64_t unravel(const loom__lw_geom_t *geom, int q, int64_t e, int64_t *g) {
  int64_t d[LOOM__LANG_RANK], off, c = 1;
  loom__lw_piece(geom, q, d, &off);
  for (int j = 0; j < geom->rank; ++j) c *= d[j];
  for (int j = geom->rank - 1; j >= 0; --j) {
    g[j] = d[j] ? e % d[j] : 0;
    e = d[j] ? e / d[j] : 0;
    if (j == geom->sliced) g[j] += off;
  }
  return c;
}

/* The flat index in the whole tensor of global coordinates g. */
static int64_t whole_flat(const loom__lw_geom_t *geom, const int64_t *g) {
  int64_t f = 0;
  for (int j = 0; j < geom->rank; ++j) f = f * geom->dims[j] + g[j];
  return f;
}

/* The flat index into the piece of index `piece` of index map x at the loop's coordinates g. */
static int64_t index_of(const loom__lw_index_t *x, const int64_t *g, int piece) {
  int64_t d[LOOM__LANG_RANK], off, f = 0;
  loom__lw_piece(&x->geom, piece, d, &off);
  for (int j = 0; j < x->geom.rank; ++j) {
    const int64_t c = (x->src[j] < 0 ? 0 : g[x->src[j]]) - (j == x->geom.sliced ? off : 0);
    f = f * d[j] + c;
  }
  return f;
}

static float op_value(const loom__lw_ins_t *in, const float *v, const ex_t *x, const int64_t *g) {
  const float a = in->a[0] >= 0 ? v[in->a[0]] : 0.f, b = in->a[1] >= 0 ? v[in->a[1]] : 0.f;
  switch (in->op) {
    case LOOM__OP_ADD: return a + b;
    case LOOM__OP_SUB: return a - b;
    case LOOM__OP_MUL: return a * b;
    case LOOM__OP_DIV: return a / b;
    case LOOM__OP_POW: return powf(a, b);
    case LOOM__OP_MAX: return a > b ? a : b;
    case LOOM__OP_MIN: return a < b ? a : b;
    case LOOM__OP_LT: return a < b ? 1.f : 0.f;
    case LOOM__OP_LE: return a <= b ? 1.f : 0.f;
    case LOOM__OP_GT: return a > b ? 1.f : 0.f;
    case LOOM__OP_GE: return a >= b ? 1.f : 0.f;
    case LOOM__OP_EQ: return a == b ? 1.f : 0.f;
    case LOOM__OP_NE: return a != b ? 1.f : 0.f;
    case LOOM__OP_NEG: return -a;
    case LOOM__OP_SQRT: return sqrtf(a);
    case LOOM__OP_EXP: return expf(a);
    case LOOM__OP_RELU: return a > 0.f ? a : 0.f;
    case LOOM__OP_GELU: return 0.5f * a * (1.f + tanhf(0.7978845608028654f * (a + 0.044715f * a * a * a)));
    case LOOM__OP_SILU: return a / (1.f + expf(-a));
    case LOOM__OP_CAST: return rnd(a, in->dtype);
    case LOOM__OP_DROPOUT: {
      const uint64_t i = (uint64_t)index_of(&x->lw->idx[in->idx], g, 0);
      return loom__dropout_keep(in->seed, 0, i, loom__dropout_threshold((float)in->value))
                 ? a * (1.0f / (1.0f - (float)in->value)) : 0.f;
    }
    default: return a;
  }
}

/* Instruction k of loop l on rank r at the loop's coordinates g. */
static float eval(const ex_t *x, const loom__lw_loop_t *l, int k, const float *v, int r, const int64_t *g) {
  const loom__lw_prog_t *lw = x->lw;
  const loom__lw_ins_t *in = &lw->ins[l->ins0 + k];
  const int W = lw->W, base = r / W * W, q = r % W;
  if (in->kind == LOOM__LI_CONST) return (float)in->value;
  if (in->kind == LOOM__LI_OP) return op_value(in, v, x, g);
  if (in->kind == LOOM__LI_PARTIALS) {
    float s = 0.f;
    for (int p = in->arg ? base : r; p < (in->arg ? base + W : r + 1); ++p)
      for (int t = 0; t < LOOM__LW_NPART; ++t) s += at(x, p, in->buf)[t];
    return sqrtf(s);
  }
  const loom__lw_index_t *ix = &lw->idx[in->idx];
  if (in->kind == LOOM__LI_REDUCE) {
    const int64_t i = index_of(ix, g, q);
    float s = at(x, base, in->buf)[i];
    for (int p = 1; p < W; ++p) {
      const float y = at(x, base + p, in->buf)[i];
      s = in->op == LOOM__RED_MAX ? fmaxf(s, y) : in->op == LOOM__RED_MIN ? fminf(s, y) : s + y;
    }
    return s;
  }
  int rank = r, piece = q;
  if (in->who == LOOM__LWW_OWNER) piece = (int)(g[ix->src[ix->geom.sliced]] / ix->geom.S), rank = base + piece;
  else if (in->who == LOOM__LWW_ROOT) rank = base + in->arg;
  else if (in->who == LOOM__LWW_SRC) rank = r - in->arg * W;
  return at(x, rank, in->buf)[index_of(ix, g, piece)];
}

static void run_elem(const ex_t *x, const loom__lw_loop_t *l, int r, float *v) {
  int64_t g[LOOM__LANG_RANK];
  const int64_t n = unravel(&l->space, r % x->lw->W, 0, g);
  for (int64_t e = 0; e < n; ++e) {
    unravel(&l->space, r % x->lw->W, e, g);
    for (int k = 0; k < l->nins; ++k) v[k] = eval(x, l, k, v, r, g);
    for (int s = 0; s < l->nstore; ++s) {
      const int b = l->store_buf[s];
      at(x, r, b)[e] = l->kind == LOOM__LL_SUMSQ ? v[l->store_ins[s]] : rnd(v[l->store_ins[s]], x->lw->bufs[b].dtype);
    }
  }
}

static void run_row(const ex_t *x, const loom__lw_loop_t *l, int r, float *v) {
  int64_t g[LOOM__LANG_RANK];
  const int64_t n = unravel(&l->space, r % x->lw->W, 0, g), C = l->space.dims[l->space.rank - 1];
  const int b = l->store_buf[0], ln = l->norm == LOOM__OP_LAYERNORM;
  for (int64_t row = 0; C && row < n / C; ++row) {
    float s1 = 0.f, s2 = 0.f;
    for (int pass = 0; pass < 3; ++pass) {
      const float mean = ln ? s1 / (float)C : 0.f, rstd = 1.f / sqrtf((ln ? s2 : s1) / (float)C + (float)l->eps);
      for (int64_t c = 0; c < C; ++c) {
        unravel(&l->space, r % x->lw->W, row * C + c, g);
        for (int k = 0; k < l->nins; ++k) v[k] = eval(x, l, k, v, r, g);
        const float xv = v[l->x_ins];
        if (pass == 0) s1 += ln ? xv : xv * xv;
        if (pass == 1 && ln) s2 += (xv - mean) * (xv - mean);
        if (pass == 2)
          at(x, r, b)[row * C + c] = rnd((xv - mean) * rstd * v[l->w_ins] + (l->b_ins >= 0 ? v[l->b_ins] : 0.f),
                                         x->lw->bufs[b].dtype);
      }
    }
  }
}

static void run_sumsq(const ex_t *x, const loom__lw_loop_t *l, int r, float *v) {
  int64_t g[LOOM__LANG_RANK];
  const int64_t n = unravel(&l->space, r % x->lw->W, 0, g);
  for (int s = 0; s < LOOM__LW_NPART; ++s) {
    float acc = 0.f;
    for (int64_t e = n * s / LOOM__LW_NPART; e < n * (s + 1) / LOOM__LW_NPART; ++e) {
      unravel(&l->space, r % x->lw->W, e, g);
      for (int k = 0; k < l->nins; ++k) v[k] = eval(x, l, k, v, r, g);
      acc += v[l->x_ins] * v[l->x_ins];
    }
    at(x, r, l->store_buf[0])[s] = acc;
  }
}

/* A GEMM unit on rank r: C = A B (+ its folded bias) on its pieces, in double, rounded once. */
static void run_gemm(const ex_t *x, const loom__lw_unit_t *u, int r) {
  const loom__lw_prog_t *lw = x->lw;
  const loom__lw_buf_t *A = &lw->bufs[u->gemm_a], *B = &lw->bufs[u->gemm_b];
  int64_t d[LOOM__LANG_RANK], off, m = 1;
  loom__lw_piece(&A->geom, r % lw->W, d, &off);
  for (int j = 0; j + 1 < A->geom.rank; ++j) m *= d[j];
  const int64_t k = d[A->geom.rank - 1];
  loom__lw_piece(&B->geom, r % lw->W, d, &off);
  const int64_t n = d[1];
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t t = 0; t < k; ++t) s += (double)at(x, r, u->gemm_a)[i * k + t] * at(x, r, u->gemm_b)[t * n + j];
      if (u->gemm_bias >= 0) s += (double)at(x, r, u->gemm_bias)[j];
      at(x, r, u->gemm_c)[i * n + j] = rnd(s, lw->bufs[u->gemm_c].dtype);
    }
}

/* The flat index in the piece of index q of geometry geom of global coordinates g (within that piece). */
static int64_t piece_flat(const loom__lw_geom_t *geom, int q, const int64_t *g) {
  int64_t d[LOOM__LANG_RANK], off, f = 0;
  loom__lw_piece(geom, q, d, &off);
  for (int j = 0; j < geom->rank; ++j) f = f * d[j] + g[j] - (j == geom->sliced ? off : 0);
  return f;
}

/* A COLL unit on rank r (a library's collective): each element of its result on r, from the operand's pieces
 * of the group's ranks: a sum in rank order in fp32 (AllReduce, ReduceScatter), the owner's (AllGather). */
static void run_coll(const ex_t *x, const loom__lw_unit_t *u, int r) {
  const loom__lw_prog_t *lw = x->lw;
  const loom__lw_buf_t *A = &lw->bufs[u->gemm_a], *C = &lw->bufs[u->gemm_c];
  const int op = lw->p->nodes[u->node].op, base = loom__lw_base(lw, r);
  int64_t g[LOOM__LANG_RANK];
  const int64_t n = unravel(&C->geom, r % lw->W, 0, g);
  for (int64_t e = 0; e < n; ++e) {
    unravel(&C->geom, r % lw->W, e, g);
    float v = 0.f;
    if (op == LOOM__OP_ALLGATHER) {
      const int owner = (int)(g[0] / A->geom.S);
      v = at(x, base + owner, u->gemm_a)[piece_flat(&A->geom, owner, g)];
    } else {
      for (int p = 0; p < lw->W; ++p) v += at(x, base + p, u->gemm_a)[piece_flat(&A->geom, p, g)];
    }
    at(x, r, u->gemm_c)[e] = rnd(v, C->dtype);
  }
}

static void run_units(const ex_t *x) {
  const loom__lw_prog_t *lw = x->lw;
  int most = 1;
  for (int l = 0; l < lw->nloop; ++l) most = lw->loops[l].nins > most ? lw->loops[l].nins : most;
  float *v = malloc(sizeof(float) * (size_t)most);
  for (int u = 0; u < lw->nunit && v; ++u) {
    const loom__lw_unit_t *un = &lw->units[u];
    for (int s = 0; s < (un->kind != LOOM__LU_KERNEL ? 1 : un->nsteps); ++s)
      for (int r = 0; r < lw->R; ++r) {
        if (!loom__lw_runs_unit(lw, un, r)) continue;
        if (un->kind == LOOM__LU_GEMM) {
          if (loom__lw_holds(lw, &lw->bufs[un->gemm_c], r)) run_gemm(x, un, r);
          continue;
        }
        if (un->kind == LOOM__LU_COLL) {
          if (loom__lw_holds(lw, &lw->bufs[un->gemm_c], r)) run_coll(x, un, r);
          continue;
        }
        for (int l = un->loop0; l < un->loop0 + un->nloops; ++l) {
          const loom__lw_loop_t *lp = &lw->loops[l];
          if (lp->step != s || !loom__lw_runs_loop(lw, lp, r)) continue;
          if (lp->kind == LOOM__LL_ROW) run_row(x, lp, r, v);
          else if (lp->kind == LOOM__LL_SUMSQ) run_sumsq(x, lp, r, v);
          else run_elem(x, lp, r, v);
        }
      }
  }
  free(v);
}

/* What an element of a buffer's piece on a rank does: the input drawn into it, or compared with the result. */
typedef struct visit {
  const ex_t *x;
  const char *name;          /* the input's name (drawing) */
  uint64_t seed;
  const loom__value_t *want; /* the interpreter's value (comparing) */
  double worst;
} visit_t;

static void visit_elem(visit_t *v, int b, int r, int64_t e, const int64_t *g) {
  const loom__lw_prog_t *lw = v->x->lw;
  const loom__lw_buf_t *bb = &lw->bufs[b];
  const int q = r % lw->W;
  if (!v->want) {
    const double in = loom__interp_input_elem(v->name, v->seed, bb->geom.local ? q : -1, whole_flat(&bb->geom, g));
    at(v->x, r, b)[e] = rnd(in, bb->dtype);
    return;
  }
  const double want = v->want->v[whole_flat(&bb->geom, g) + (v->want->local ? (int64_t)q * v->want->count : 0)];
  const double got = at(v->x, r, b)[e];
  const double d = isnan(got) || isnan(want) ? INFINITY : fabs(got - want) / fmax(1.0, fabs(want));
  if (d > v->worst) v->worst = d;
}

/* visit_elem on every element of buffer b's pieces on every rank holding it. */
static void visit_buffer(visit_t *v, int b) {
  const loom__lw_prog_t *lw = v->x->lw;
  for (int r = 0; r < lw->R; ++r) {
    if (!loom__lw_holds(lw, &lw->bufs[b], r)) continue;
    int64_t g[LOOM__LANG_RANK];
    const int64_t n = unravel(&lw->bufs[b].geom, r % lw->W, 0, g);
    for (int64_t e = 0; e < n; ++e) {
      unravel(&lw->bufs[b].geom, r % lw->W, e, g);
      visit_elem(v, b, r, e, g);
    }
  }
}

/* Every rank's pieces of the inputs, drawn as the interpreter draws them, rounded to their dtype. */
static void fill_inputs(const ex_t *x, uint64_t seed) {
  for (int i = 0; i < x->lw->ninputs; ++i) {
    visit_t v = {x, x->lw->p->nodes[x->lw->in_node[i]].name, seed, NULL, 0};
    visit_buffer(&v, x->lw->buf_of[x->lw->in_node[i]]);
  }
}

/* The largest relative difference of the outputs every rank holds from the interpreter's results. */
static double compare(const ex_t *x, const loom__results_t *res) {
  double worst = 0;
  for (int o = 0; o < x->lw->noutputs && o < res->n; ++o) {
    visit_t v = {x, NULL, 0, &res->vals[o], 0};
    visit_buffer(&v, x->lw->buf_of[x->lw->out_node[o]]);
    if (v.worst > worst) worst = v.worst;
  }
  return worst;
}

loom_result_t lower_exec_compare(const loom__lw_prog_t *lw, uint64_t seed, double *maxdiff) {
  ex_t x = {lw, calloc((size_t)lw->R * (size_t)lw->nbuf + 1, sizeof(float *))};
  loom_result_t r = x.mem ? LOOM_SUCCESS : loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lower_exec: out of memory");
  for (int i = 0; i < lw->R * lw->nbuf && r == LOOM_SUCCESS; ++i) {
    x.mem[i] = malloc(sizeof(float) * (size_t)(lw->bufs[i % lw->nbuf].geom.max_count + 1));
    if (!x.mem[i]) r = loom__fail(LOOM_ERR_OUT_OF_MEMORY, "lower_exec: out of memory");
    else for (int64_t e = 0; e <= lw->bufs[i % lw->nbuf].geom.max_count; ++e) x.mem[i][e] = NAN; /* poisoned */
  }
  loom__results_t res;
  if (r == LOOM_SUCCESS) r = loom__lang_interp((loom__prog_t *)lw->p, lw->W, &lw->bind, seed, &res);
  if (r == LOOM_SUCCESS) {
    fill_inputs(&x, seed);
    run_units(&x);
    *maxdiff = res.n == lw->noutputs ? compare(&x, &res) : INFINITY;
    loom__lang_results_free(&res);
  }
  for (int i = 0; x.mem && i < lw->R * lw->nbuf; ++i) free(x.mem[i]);
  free(x.mem);
  return r;
}
