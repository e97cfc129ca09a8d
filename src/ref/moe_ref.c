/*
 * moe_ref.c - see moe_ref.h. Straight loops in double. The direct path
 * never calls the schedule; the dispatched path uses it for the layout only
 * (who goes where), and computes the math with its own loops, summing in
 * the same index order as the direct path so both give the same bits.
 */
#include "ref/moe_ref.h"
#include "ops/moe/moe_schedule.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static double silu(double h) { return h / (1.0 + exp(-h)); }

/* ---- direct ----------------------------------------------------------------- */

int loom_ref_moe_expert(const loom_ref_moe_t *m, int e, const double *x, double *y) {
  const int H = m->hidden, F = m->ffn;
  const double *wg = m->w_gate + (size_t)e * H * F, *wu = m->w_up + (size_t)e * H * F;
  const double *wd = m->w_down + (size_t)e * F * H;
  double *a = (double *)malloc((size_t)(F ? F : 1) * sizeof(double));
  if (!a) return -1;
  for (int f = 0; f < F; ++f) {
    double g = 0.0, u = 0.0;
    for (int i = 0; i < H; ++i) g += x[i] * wg[(size_t)i * F + f];
    for (int i = 0; i < H; ++i) u += x[i] * wu[(size_t)i * F + f];
    a[f] = silu(g) * u;
  }
  for (int o = 0; o < H; ++o) {
    double acc = 0.0;
    for (int f = 0; f < F; ++f) acc += a[f] * wd[(size_t)f * H + o];
    y[o] = acc;
  }
  free(a);
  return 0;
}

int loom_ref_moe_kept_direct(const loom_ref_moe_t *m, uint8_t *const *kept) {
  int64_t *seen = (int64_t *)calloc((size_t)m->experts, sizeof(int64_t));
  if (!seen) return -1;
  for (int r = 0; r < m->world; ++r)
    for (int64_t i = 0; i < m->tokens[r] * m->topk; ++i) {
      const int e = m->ids[r][i];
      kept[r][i] = (uint8_t)(m->capacity == 0 || seen[e] < m->capacity);
      ++seen[e];
    }
  free(seen);
  return 0;
}

/* One rank's tokens, directly: out [T_r, H]. */
static int layer_direct_rank(const loom_ref_moe_t *m, int r, const uint8_t *kept, double *out, double *y) {
  const int H = m->hidden, k = m->topk;
  for (int64_t t = 0; t < m->tokens[r]; ++t) {
    double *o = out + (size_t)t * H;
    for (int d = 0; d < H; ++d) o[d] = 0.0;
    for (int j = 0; j < k; ++j) {
      if (!kept[t * k + j]) continue;
      if (loom_ref_moe_expert(m, m->ids[r][t * k + j], m->x[r] + (size_t)t * H, y)) return -1;
      const double w = m->w[r][t * k + j];
      for (int d = 0; d < H; ++d) o[d] += w * y[d];
    }
  }
  return 0;
}

int loom_ref_moe_layer_direct(const loom_ref_moe_t *m, double *const *out) {
  const int W = m->world;
  int rc = -1;
  uint8_t **kept = (uint8_t **)calloc((size_t)W, sizeof(uint8_t *));
  double *y = (double *)malloc((size_t)m->hidden * sizeof(double) + 1);
  if (!kept || !y) goto out;
  for (int r = 0; r < W; ++r)
    if (!(kept[r] = (uint8_t *)malloc((size_t)(m->tokens[r] * m->topk) + 1))) goto out;
  if (loom_ref_moe_kept_direct(m, kept)) goto out;
  for (int r = 0; r < W; ++r)
    if (layer_direct_rank(m, r, kept[r], out[r], y)) goto out;
  rc = 0;
out:
  for (int r = 0; kept && r < W; ++r) free(kept[r]);
  free(kept);
  free(y);
  return rc;
}

/* ---- dispatch through the layout ----------------------------------------- */

void loom_ref_moe_recv_free(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv) {
  for (int p = 0; p < m->world; ++p) {
    if (rv->off) free(rv->off[p]);
    if (rv->rows) free(rv->rows[p]);
    if (rv->origin) free(rv->origin[p]);
    if (rv->slot) free(rv->slot[p]);
  }
  free(rv->kept);
  free(rv->total);
  free(rv->off);
  free(rv->rows);
  free(rv->origin);
  free(rv->slot);
  memset(rv, 0, sizeof *rv);
}

/* counts, kept, receive offsets and totals. */
static int layout(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv) {
  const int W = m->world, E = m->experts;
  int32_t *counts = (int32_t *)malloc((size_t)W * E * sizeof(int32_t));
  if (!counts) return -1;
  for (int s = 0; s < W; ++s) loom__moe_count_rows(m->ids[s], m->tokens[s], m->topk, E, counts + (size_t)s * E);
  loom__moe_apply_capacity(counts, W, E, m->capacity, rv->kept);
  free(counts);
  for (int p = 0; p < W; ++p) {
    const int n = loom__moe_experts_on(E, W, p);
    if (!(rv->off[p] = (int64_t *)malloc(((size_t)n * W + 1) * sizeof(int64_t)))) return -1;
    rv->total[p] = loom__moe_recv_offsets(rv->kept, W, E, p, rv->off[p]);
  }
  return 0;
}

/* Source s's dispatch slots (slot[s]). */
static int slots(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv, int s) {
  const int E = m->experts;
  int64_t *base = (int64_t *)malloc((size_t)E * sizeof(int64_t));
  int32_t *cursor = (int32_t *)malloc((size_t)E * sizeof(int32_t));
  rv->slot[s] = (int64_t *)malloc((size_t)(m->tokens[s] * m->topk) * sizeof(int64_t) + 1);
  const int ok = base && cursor && rv->slot[s];
  if (ok) {
    loom__moe_source_bases(rv->kept, m->world, E, s, base);
    loom__moe_dispatch_slots(m->ids[s], m->tokens[s], m->topk, E, rv->kept + (size_t)s * E, base, cursor,
                             rv->slot[s]);
  }
  free(base);
  free(cursor);
  return ok ? 0 : -1;
}

/* Source s stores its kept rows into the owners' buffers, destinations in
 * its send order. */
static void send_rows(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv, int s) {
  const int W = m->world, E = m->experts, k = m->topk, H = m->hidden;
  for (int i = 0; i < W; ++i) {
    const int q = loom__moe_dest_at(W, s, i);
    for (int64_t t = 0; t < m->tokens[s]; ++t)
      for (int j = 0; j < k; ++j) {
        const int64_t row = rv->slot[s][t * k + j];
        if (row < 0 || loom__moe_expert_rank(E, W, m->ids[s][t * k + j]) != q) continue;
        memcpy(rv->rows[q] + (size_t)row * H, m->x[s] + (size_t)t * H, (size_t)H * sizeof(double));
        rv->origin[q][row] = loom__moe_origin(t, j, k);
      }
  }
}

int loom_ref_moe_dispatch(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv) {
  const int W = m->world;
  memset(rv, 0, sizeof *rv);
  rv->kept = (int32_t *)malloc((size_t)W * m->experts * sizeof(int32_t));
  rv->total = (int64_t *)calloc((size_t)W, sizeof(int64_t));
  rv->off = (int64_t **)calloc((size_t)W, sizeof(int64_t *));
  rv->rows = (double **)calloc((size_t)W, sizeof(double *));
  rv->origin = (int32_t **)calloc((size_t)W, sizeof(int32_t *));
  rv->slot = (int64_t **)calloc((size_t)W, sizeof(int64_t *));
  if (!rv->kept || !rv->total || !rv->off || !rv->rows || !rv->origin || !rv->slot || layout(m, rv)) goto fail;
  for (int p = 0; p < W; ++p) {
    rv->rows[p] = (double *)malloc((size_t)rv->total[p] * m->hidden * sizeof(double) + 1);
    rv->origin[p] = (int32_t *)malloc((size_t)rv->total[p] * sizeof(int32_t) + 1);
    if (!rv->rows[p] || !rv->origin[p]) goto fail;
  }
  for (int s = 0; s < W; ++s)
    if (slots(m, rv, s)) goto fail;
  for (int s = 0; s < W; ++s) send_rows(m, rv, s);
  return 0;
fail:
  loom_ref_moe_recv_free(m, rv);
  return -1;
}

/* ---- the experts as grouped GEMMs ------------------------------------------ */

/* c [rows, n] = a [rows, kd] b [kd, n], each sum over kd ascending. */
static void gemm(const double *a, int64_t rows, int kd, const double *b, int n, double *c) {
  for (int64_t r = 0; r < rows; ++r)
    for (int col = 0; col < n; ++col) {
      double acc = 0.0;
      for (int i = 0; i < kd; ++i) acc += a[(size_t)r * kd + i] * b[(size_t)i * n + col];
      c[(size_t)r * n + col] = acc;
    }
}

/* One group: rows [r0, r0 + nr) of rank p's buffer through expert e. */
static int expert_group(const loom_ref_moe_t *m, const double *x, int64_t nr, int e, double *y) {
  const int H = m->hidden, F = m->ffn;
  double *g = (double *)malloc((size_t)nr * F * sizeof(double) + 1);
  double *u = (double *)malloc((size_t)nr * F * sizeof(double) + 1);
  if (!g || !u) {
    free(g);
    free(u);
    return -1;
  }
  gemm(x, nr, H, m->w_gate + (size_t)e * H * F, F, g); /* gate and up: one grouped GEMM of 2F columns */
  gemm(x, nr, H, m->w_up + (size_t)e * H * F, F, u);
  for (size_t i = 0; i < (size_t)nr * F; ++i) g[i] = silu(g[i]) * u[i]; /* SwiGLU */
  gemm(g, nr, F, m->w_down + (size_t)e * F * H, H, y);                  /* down */
  free(g);
  free(u);
  return 0;
}

int loom_ref_moe_experts(const loom_ref_moe_t *m, const loom_ref_moe_recv_t *rv, double *const *y) {
  const int W = m->world, E = m->experts, H = m->hidden;
  for (int p = 0; p < W; ++p) {
    const int n = loom__moe_experts_on(E, W, p), e0 = loom__moe_expert_begin(E, W, p);
    for (int l = 0; l < n; ++l) {
      const int64_t r0 = rv->off[p][(size_t)l * W], r1 = rv->off[p][(size_t)(l + 1) * W];
      if (r1 > r0 && expert_group(m, rv->rows[p] + (size_t)r0 * H, r1 - r0, e0 + l, y[p] + (size_t)r0 * H))
        return -1;
    }
  }
  return 0;
}

/* ---- combine ------------------------------------------------------------------ */

/* Owner p's output rows into their sources' combine buffers cb[s] [T_s * k, H]. */
static void combine_scatter(const loom_ref_moe_t *m, const loom_ref_moe_recv_t *rv, const double *const *y,
                            int p, double *const *cb) {
  const int W = m->world, H = m->hidden, n = loom__moe_experts_on(m->experts, W, p);
  for (int64_t i = 0; i < rv->total[p]; ++i) {
    int l, s;
    int64_t pos;
    loom__moe_recv_locate(rv->off[p], n, W, i, &l, &s, &pos);
    memcpy(cb[s] + (size_t)rv->origin[p][i] * H, y[p] + (size_t)i * H, (size_t)H * sizeof(double));
  }
}

/* Source s's reduction: out[t] = sum over kept j ascending of w * cb row. */
static void combine_reduce(const loom_ref_moe_t *m, const loom_ref_moe_recv_t *rv, int s, const double *cb,
                           double *out) {
  const int H = m->hidden, k = m->topk;
  for (int64_t t = 0; t < m->tokens[s]; ++t) {
    double *o = out + (size_t)t * H;
    for (int d = 0; d < H; ++d) o[d] = 0.0;
    for (int j = 0; j < k; ++j) {
      if (rv->slot[s][t * k + j] < 0) continue; /* dropped */
      const double w = m->w[s][t * k + j];
      const double *c = cb + (size_t)(t * k + j) * H;
      for (int d = 0; d < H; ++d) o[d] += w * c[d];
    }
  }
}

int loom_ref_moe_combine(const loom_ref_moe_t *m, const loom_ref_moe_recv_t *rv, const double *const *y,
                         double *const *out) {
  const int W = m->world;
  int rc = -1;
  double **cb = (double **)calloc((size_t)W, sizeof(double *));
  if (!cb) return -1;
  for (int s = 0; s < W; ++s)
    if (!(cb[s] = (double *)calloc((size_t)(m->tokens[s] * m->topk) * m->hidden + 1, sizeof(double)))) goto out;
  for (int p = 0; p < W; ++p) combine_scatter(m, rv, y, p, cb);
  for (int s = 0; s < W; ++s) combine_reduce(m, rv, s, cb[s], out[s]);
  rc = 0;
out:
  for (int s = 0; s < W; ++s) free(cb[s]);
  free(cb);
  return rc;
}
