/*
 * interp_ops.c - one node of a program on every simulated rank that holds
 * it (interp.c says what the interpreter is): pointwise with broadcasting
 * and implicit slicing of Replicated operands, MatMul on the local pieces,
 * norms, and the collectives as exchanges between the ranks' pieces.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/pointwise.h"
#include "lang/interp_ops.h"
#include "ops/coll/coll_schedule.h"

/* Rank q's slice of a dimension of n: loom's shards (ops/coll/coll_schedule.h, a unit of 1). */
static void slice_range(int64_t n, int W, int q, int64_t *b, int64_t *len) { loom__coll_slice(n, W, q, 1, b, len); }

static int group_of(const loom__interp_t *in, int id) {
  const int g = in->p->nodes[id].ty.lay.group;
  return g < 0 ? 0 : g;
}

int loom__interp_base(const loom__interp_t *in, int id) { return group_of(in, id) * in->W; }

int loom__interp_q(const loom__interp_t *in, int id, int r) { return r % in->W; }

int loom__interp_present(const loom__interp_t *in, int id, int r) {
  const loom__layout_t *l = &in->p->nodes[id].ty.lay;
  if (l->group == LOOM__GROUP_ANY) return 1;
  if (r / in->W != group_of(in, id)) return 0;
  return l->kind != LOOM__LAY_ROOT || r % in->W == l->arg;
}

void loom__interp_local(const loom__interp_t *in, int id, int r, loom__local_t *loc) {
  const loom__shape_t *s = &in->shapes[id];
  const loom__layout_t *l = &in->p->nodes[id].ty.lay;
  loc->rank = s->rank;
  loc->count = 1;
  for (int i = 0; i < s->rank; ++i) {
    loc->dims[i] = s->dims[i], loc->off[i] = 0;
    if (l->kind == LOOM__LAY_SLICED && l->arg == i) slice_range(s->dims[i], in->W, r % in->W, &loc->off[i], &loc->dims[i]);
    loc->count *= loc->dims[i];
  }
}

/* The whole-tensor multi-index of element e of the piece. */
static void unravel(const loom__local_t *loc, int64_t e, int64_t *g) {
  for (int i = loc->rank - 1; i >= 0; --i) {
    g[i] = e % loc->dims[i] + loc->off[i];
    e /= loc->dims[i];
  }
}

int64_t loom__interp_global(const loom__shape_t *s, const loom__local_t *loc, int64_t e) {
  int64_t g[LOOM__LANG_RANK], f = 0;
  unravel(loc, e, g);
  for (int i = 0; i < s->rank; ++i) f = f * s->dims[i] + g[i];
  return f;
}

static double *val(const loom__interp_t *in, int id, int r) { return in->vals[(size_t)id * (size_t)in->R + (size_t)r]; }

static loom_result_t alloc_val(loom__interp_t *in, int id, int r, int64_t count, double **out) {
  *out = calloc((size_t)(count ? count : 1), sizeof(double));
  if (!*out) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
  in->vals[(size_t)id * (size_t)in->R + (size_t)r] = *out;
  return LOOM_SUCCESS;
}

double loom__interp_round(double x, int dtype) {
  if (!isfinite(x) || x == 0) return x;
  const int mant = dtype == LOOM_FP16 ? 10 : dtype == LOOM_BF16 ? 7 : 23;
  const int emin = dtype == LOOM_FP16 ? -14 : -126;
  const double maxv = dtype == LOOM_FP16 ? 65504.0 : dtype == LOOM_BF16 ? 3.3895313892515355e38 : 3.4028234663852886e38;
  int e;
  frexp(x, &e);
  if (e - 1 < emin) e = emin + 1;
  const double q = ldexp(1.0, e - 1 - mant);
  const double r = nearbyint(x / q) * q;
  return fabs(r) > maxv ? copysign(INFINITY, x) : r;
}

/* ---- pointwise ----------------------------------------------------------------- */

static double gelu(double v) { return 0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))); }

static double pw_apply(const loom__node_t *nd, const double *a, int64_t gflat) {
  switch (nd->op) {
    case LOOM__OP_ADD: return a[0] + a[1];
    case LOOM__OP_SUB: return a[0] - a[1];
    case LOOM__OP_MUL: return a[0] * a[1];
    case LOOM__OP_DIV: return a[0] / a[1];
    case LOOM__OP_POW: return pow(a[0], a[1]);
    case LOOM__OP_MAX: return a[0] > a[1] ? a[0] : a[1];
    case LOOM__OP_MIN: return a[0] < a[1] ? a[0] : a[1];
    case LOOM__OP_LT: return a[0] < a[1];
    case LOOM__OP_LE: return a[0] <= a[1];
    case LOOM__OP_GT: return a[0] > a[1];
    case LOOM__OP_GE: return a[0] >= a[1];
    case LOOM__OP_EQ: return a[0] == a[1];
    case LOOM__OP_NE: return a[0] != a[1];
    case LOOM__OP_NEG: return -a[0];
    case LOOM__OP_SQRT: return sqrt(a[0]);
    case LOOM__OP_EXP: return exp(a[0]);
    case LOOM__OP_RELU: return a[0] > 0 ? a[0] : 0;
    case LOOM__OP_GELU: return gelu(a[0]);
    case LOOM__OP_SILU: return a[0] / (1.0 + exp(-a[0]));
    case LOOM__OP_CAST: return loom__interp_round(a[0], nd->dtype);
    case LOOM__OP_DROPOUT: {
      const uint32_t thr = loom__dropout_threshold((float)nd->value);
      return loom__dropout_keep(nd->seed, 0, (uint64_t)gflat, thr) ? a[0] * (1.0 / (1.0 - nd->value)) : 0.0;
    }
    case LOOM__OP_UPDATE: return a[1];
    case LOOM__OP_SLICE: return a[0];
    default: return a[0];
  }
}

/* Operand k's element at whole-result index g[] (result rank R). */
static double operand_at(const loom__interp_t *in, int a, int r, const int64_t *g, int R) {
  const loom__shape_t *s = &in->shapes[a];
  loom__local_t loc;
  loom__interp_local(in, a, r, &loc);
  int64_t idx = 0;
  for (int j = 0; j < s->rank; ++j) {
    const int64_t gj = s->dims[j] == 1 ? 0 : g[j + R - s->rank];
    idx = idx * loc.dims[j] + (gj - loc.off[j]);
  }
  return val(in, a, r)[idx];
}

static loom_result_t run_pointwise(loom__interp_t *in, int id, int r) {
  const loom__node_t *nd = &in->p->nodes[id];
  loom__local_t loc;
  loom__interp_local(in, id, r, &loc);
  double *o;
  LOOM_TRY(alloc_val(in, id, r, loc.count, &o));
  const int first = nd->op == LOOM__OP_UPDATE ? 1 : 0;
  for (int64_t e = 0; e < loc.count; ++e) {
    int64_t g[LOOM__LANG_RANK];
    double a[LOOM__LANG_IN] = {0, 0, 0};
    unravel(&loc, e, g);
    for (int k = first; k < nd->nin; ++k) a[k] = operand_at(in, nd->in[k], r, g, loc.rank);
    o[e] = pw_apply(nd, a, loom__interp_global(&in->shapes[id], &loc, e));
  }
  return LOOM_SUCCESS;
}

/* ---- MatMul and norms ----------------------------------------------------------- */

static loom_result_t run_matmul(loom__interp_t *in, int id, int r) {
  const loom__node_t *nd = &in->p->nodes[id];
  loom__local_t la, lb, lo;
  loom__interp_local(in, nd->in[0], r, &la);
  loom__interp_local(in, nd->in[1], r, &lb);
  loom__interp_local(in, id, r, &lo);
  /* M from the leading dimensions, not count / K: a rank's piece may be empty along any of them */
  int64_t M = 1;
  for (int i = 0; i + 1 < la.rank; ++i) M *= la.dims[i];
  const int64_t K = la.dims[la.rank - 1], N = lb.dims[1];
  if (lb.dims[0] != K || lo.count != M * N)
    return loom__fail(LOOM_ERR_INTERNAL, "interp: MatMul pieces [%lld x %lld] and [%lld x %lld] on rank %d",
                      (long long)M, (long long)K, (long long)lb.dims[0], (long long)N, r);
  double *o;
  LOOM_TRY(alloc_val(in, id, r, lo.count, &o));
  const double *A = val(in, nd->in[0], r), *B = val(in, nd->in[1], r);
  for (int64_t i = 0; i < M; ++i) /* k outer, j inner: each element still sums k = 0, 1, ... in order */
    for (int64_t k = 0; k < K; ++k) {
      const double a = A[i * K + k];
      for (int64_t j = 0; j < N; ++j) o[i * N + j] += a * B[k * N + j];
    }
  return LOOM_SUCCESS;
}

static double sumsq(const loom__interp_t *in, int x, int r) {
  loom__local_t l;
  loom__interp_local(in, x, r, &l);
  double s = 0;
  for (int64_t e = 0; e < l.count; ++e) s += val(in, x, r)[e] * val(in, x, r)[e];
  return s;
}

static loom_result_t run_norm(loom__interp_t *in, int id, int r) {
  const int x = in->p->nodes[id].in[0];
  double s = 0, *o;
  if (in->p->nodes[x].ty.lay.kind == LOOM__LAY_SLICED) {
    const int base = loom__interp_base(in, x);
    for (int q = 0; q < in->W; ++q) s += sumsq(in, x, base + q);
  } else {
    s = sumsq(in, x, r);
  }
  LOOM_TRY(alloc_val(in, id, r, 1, &o));
  o[0] = sqrt(s);
  return LOOM_SUCCESS;
}

static loom_result_t run_rownorm(loom__interp_t *in, int id, int r) {
  const loom__node_t *nd = &in->p->nodes[id];
  loom__local_t l;
  loom__interp_local(in, nd->in[0], r, &l);
  const int64_t C = l.dims[l.rank - 1], rows = C ? l.count / C : 0;
  const double *x = val(in, nd->in[0], r), *w = val(in, nd->in[1], r);
  const double *b = nd->nin > 2 ? val(in, nd->in[2], r) : NULL;
  double *o;
  LOOM_TRY(alloc_val(in, id, r, l.count, &o));
  for (int64_t i = 0; i < rows; ++i) {
    const double *xr = x + i * C;
    double mean = 0, ss = 0;
    if (nd->op == LOOM__OP_LAYERNORM)
      for (int64_t c = 0; c < C; ++c) mean += xr[c] / (double)C;
    for (int64_t c = 0; c < C; ++c) ss += (xr[c] - mean) * (xr[c] - mean);
    const double inv = 1.0 / sqrt(ss / (double)C + nd->value);
    for (int64_t c = 0; c < C; ++c) o[i * C + c] = (xr[c] - mean) * inv * w[c] + (b ? b[c] : 0.0);
  }
  return LOOM_SUCCESS;
}

/* ---- communication ---------------------------------------------------------------- */

/* The whole of x (Sliced: its pieces put together; else rank `src`'s value) into full. */
static void assemble(const loom__interp_t *in, int x, int src, double *full) {
  const loom__shape_t *s = &in->shapes[x];
  if (in->p->nodes[x].ty.lay.kind != LOOM__LAY_SLICED) {
    memcpy(full, val(in, x, src), sizeof(double) * (size_t)s->count);
    return;
  }
  const int base = loom__interp_base(in, x);
  for (int q = 0; q < in->W; ++q) {
    loom__local_t l;
    loom__interp_local(in, x, base + q, &l);
    for (int64_t e = 0; e < l.count; ++e) full[loom__interp_global(s, &l, e)] = val(in, x, base + q)[e];
  }
}

static void reduce_group(const loom__interp_t *in, int x, int redop, double *full) {
  const int base = loom__interp_base(in, x);
  const int64_t n = in->shapes[x].count;
  memcpy(full, val(in, x, base), sizeof(double) * (size_t)n);
  for (int q = 1; q < in->W; ++q) {
    const double *v = val(in, x, base + q);
    for (int64_t e = 0; e < n; ++e)
      full[e] = redop == LOOM__RED_MAX ? fmax(full[e], v[e]) : redop == LOOM__RED_MIN ? fmin(full[e], v[e]) : full[e] + v[e];
  }
}

/* Every rank of id's group that holds it takes its piece of `full`. */
static loom_result_t scatter_whole(loom__interp_t *in, int id, const double *full) {
  for (int r = 0; r < in->R; ++r) {
    if (!loom__interp_present(in, id, r)) continue;
    loom__local_t l;
    loom__interp_local(in, id, r, &l);
    double *o;
    LOOM_TRY(alloc_val(in, id, r, l.count, &o));
    for (int64_t e = 0; e < l.count; ++e) o[e] = full[loom__interp_global(&in->shapes[id], &l, e)];
  }
  return LOOM_SUCCESS;
}

static loom_result_t run_send(loom__interp_t *in, int id) {
  const loom__node_t *nd = &in->p->nodes[id];
  for (int r = 0; r < in->R; ++r) {
    if (!loom__interp_present(in, id, r)) continue;
    const int src = r - nd->send_off * in->W;
    loom__local_t l;
    loom__interp_local(in, id, r, &l);
    double *o;
    LOOM_TRY(alloc_val(in, id, r, l.count, &o));
    memcpy(o, val(in, nd->in[0], src), sizeof(double) * (size_t)l.count);
  }
  return LOOM_SUCCESS;
}

static loom_result_t run_comm(loom__interp_t *in, int id) {
  const loom__node_t *nd = &in->p->nodes[id];
  const int x = nd->in[0];
  if (nd->op == LOOM__OP_SEND) return run_send(in, id);
  double *full = malloc(sizeof(double) * (size_t)(in->shapes[x].count + 1));
  if (!full) return loom__fail(LOOM_ERR_OUT_OF_MEMORY, "interp: out of host memory");
  const int base = loom__interp_base(in, x);
  if (nd->op == LOOM__OP_ALLREDUCE || nd->op == LOOM__OP_REDUCESCATTER || nd->op == LOOM__OP_REDUCE)
    reduce_group(in, x, nd->redop, full);
  else if (nd->op == LOOM__OP_BROADCAST)
    assemble(in, x, base + nd->root, full);
  else /* AllGather, AllToAll */
    assemble(in, x, base, full);
  loom_result_t r = nd->op == LOOM__OP_BROADCAST && in->p->nodes[x].ty.lay.kind == LOOM__LAY_ROOT && nd->root >= in->W
                        ? loom__fail(LOOM_ERR_INVALID_ARGUMENT, "interp: Broadcast root %d outside %d ranks", nd->root, in->W)
                        : scatter_whole(in, id, full);
  free(full);
  return r;
}

loom_result_t loom__interp_node(loom__interp_t *in, int id) {
  const loom__node_t *nd = &in->p->nodes[id];
  const loom__op_class_t cls = loom__lang_op_info(nd->op)->cls;
  if (nd->op == LOOM__OP_BROADCAST && nd->root >= in->W)
    return loom__fail(LOOM_ERR_INVALID_ARGUMENT, "interp: Broadcast root %d is outside a group of %d ranks", nd->root, in->W);
  if (cls == LOOM__CLS_COMM) return run_comm(in, id);
  for (int r = 0; r < in->R; ++r) {
    if (!loom__interp_present(in, id, r)) continue;
    if (nd->op == LOOM__OP_CONST) {
      double *o;
      LOOM_TRY(alloc_val(in, id, r, 1, &o));
      o[0] = nd->value;
    } else if (cls == LOOM__CLS_POINTWISE) {
      LOOM_TRY(run_pointwise(in, id, r));
    } else if (nd->op == LOOM__OP_MATMUL) {
      LOOM_TRY(run_matmul(in, id, r));
    } else if (nd->op == LOOM__OP_NORM) {
      LOOM_TRY(run_norm(in, id, r));
    } else {
      LOOM_TRY(run_rownorm(in, id, r));
    }
  }
  return LOOM_SUCCESS;
}

/* ---- logical values ---------------------------------------------------------------- */

loom_result_t loom__interp_logical(loom__interp_t *in, int id, double *out) {
  const loom__layout_t *l = &in->p->nodes[id].ty.lay;
  const int base = l->group == LOOM__GROUP_ANY ? 0 : loom__interp_base(in, id);
  const int64_t n = in->shapes[id].count;
  if (l->kind == LOOM__LAY_LOCAL) {
    for (int q = 0; q < in->W; ++q) memcpy(out + q * n, val(in, id, base + q), sizeof(double) * (size_t)n);
    return LOOM_SUCCESS;
  }
  if (l->kind == LOOM__LAY_ROOT) {
    memcpy(out, val(in, id, base + l->arg), sizeof(double) * (size_t)n);
    return LOOM_SUCCESS;
  }
  assemble(in, id, base, out);
  if (l->kind != LOOM__LAY_REPLICATED || l->group == LOOM__GROUP_ANY) return LOOM_SUCCESS;
  for (int q = 1; q < in->W; ++q)
    if (memcmp(out, val(in, id, base + q), sizeof(double) * (size_t)n))
      return loom__fail(LOOM_ERR_INTERNAL, "interp: `%s` is Replicated but rank %d holds another value than rank %d",
                        in->p->nodes[id].name, base + q, base);
  return LOOM_SUCCESS;
}
