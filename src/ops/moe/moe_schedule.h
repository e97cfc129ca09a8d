/*
 * moe_schedule.h - who sends which token rows where in a mixture-of-experts
 * layer under expert parallelism, and how the experts' outputs come back
 * (pure functions, host and device). This comment is the layout's document.
 *
 * Vocabulary. W ranks, E experts, top-k routing (1 <= k <= min(8, E)).
 * Rank r holds T_r tokens (T_r may differ per rank and may be 0); its
 * router produced, per token t, k distinct expert ids ids[t*k + j] and k
 * weights w[t*k + j] (j = 0..k-1, the "k-index"). A (token, j) pair is a
 * "row": the token's hidden vector on its way to expert ids[t*k + j]. The
 * global token order is rank-major: every token of rank 0, then rank 1, ...
 *
 * Experts over ranks (uneven E allowed). Rank p owns the experts
 *   [begin(p), begin(p) + n(p)),  n(p) = floor(E/W) + (p < E mod W),
 *   begin(p) = p floor(E/W) + min(p, E mod W),
 * so the first E mod W ranks own one expert more, E % W == 0 splits evenly,
 * and with E < W the last W - E ranks own no expert (they receive nothing).
 * Expert e's local index on its rank is e - begin(rank(e)).
 *
 * Counts. Source s counts its rows per expert: counts[s][e] = number of its
 * tokens whose top-k contains e (a token holds an expert at most once, so
 * this is a number of tokens). The W x E matrix is row-major (stride E);
 * on the device each source publishes its row to every rank, so every rank
 * can compute every offset below without a host synchronisation.
 *
 * Capacity (optional; 0 = dropless, the default). With capacity C > 0 each
 * expert keeps at most C rows: the C rows of lowest global token index
 * (sources in rank order, then tokens in token order on each source); the
 * rest are dropped. A dropped row is not sent and its (token, j)
 * contribution is left out of the combine (the other j keep their weights:
 * nothing is renormalised). kept[s][e] = clamp(C - sum_{s'<s} counts[s'][e],
 * 0, counts[s][e]) rows (the first kept[s][e] tokens of s routed to e, in
 * token order) are sent; dropless: kept = counts. Every layout function
 * below takes the kept matrix.
 *
 * Receive layout (dispatch). Rank p's receive buffer holds rows grouped by
 * local expert l = 0..n(p)-1, inside an expert by source rank s = 0..W-1,
 * inside a source by token order:
 *   off_p(l, s) = sum_{l' < l} rows(begin(p)+l') + sum_{s' < s} kept[s'][begin(p)+l],
 *   rows(e)     = sum_s kept[s][e],
 * the m-th kept row of source s for expert e lands at off_p(l, s) + m. The
 * regions of the (l, s) pairs tile [0, total_p) without gaps or overlaps;
 * expert l's rows [off_p(l, 0), off_p(l+1, 0)) are one group of the grouped
 * GEMM. With the same routing the layout is the same bits on every run.
 *
 * Send order. Rows go straight into the owners' receive buffers (no send
 * buffer). Source r visits destination ranks remote-first, r+1, r+2, ...,
 * r-1, then r itself (mod W: every rank starts on a different peer, local
 * rows need no link); inside a destination, local experts in order, inside
 * an expert, token order (the receive order).
 *
 * Origins and combine. Each received row carries its origin slot t*k + j
 * (int32, stored beside the row); its source follows from its position
 * (loom__moe_recv_locate). The expert output row at receive row i (the down
 * GEMM's output has the receive layout) goes back to its source's combine
 * buffer [T_s * k, H] at row t*k + j. The source then reduces, per token,
 *   out[t] = (((0 + w_0 y_0) + w_1 y_1) + ...) + w_{k-1} y_{k-1}
 * in increasing j, skipping dropped j, each term rounded once (w_j y_j);
 * whether the weight is applied by the expert's epilogue or by the source,
 * the term is the same product, so the result is the same bits.
 *
 * Limits (32-bit counts). Counts, origin slots and receive rows are int32
 * on the device: a description is refused when a rank's rows (T_max * k)
 * or the worst-case rows one rank can receive (W * T_max * min(k, n_max),
 * n_max = ceil(E/W), capped at n_max * C with a capacity) pass
 * LOOM_MOE_MAX_ROWS; E is at most LOOM_MOE_MAX_EXPERTS, W at most
 * LOOM_MOE_MAX_WORLD. Dropless without a host synchronisation means the
 * receive buffer is sized for that worst case.
 *
 * Nothing here allocates: the callers pass every array (scratch included).
 */
#ifndef LOOM_OPS_MOE_SCHEDULE_H
#define LOOM_OPS_MOE_SCHEDULE_H

#include <stdint.h>

#include "core/util.h" /* LOOM_HD, loom__last_at_most */

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_MOE_MAX_TOPK 8
#define LOOM_MOE_MAX_EXPERTS 65536
#define LOOM_MOE_MAX_WORLD 65536
#define LOOM_MOE_MAX_ROWS ((int64_t)0x7fffffff)

/* ---- experts over ranks -------------------------------------------------- */

/* n(p): experts rank p owns. */
LOOM_HD int loom__moe_experts_on(int experts, int world, int p) {
  return experts / world + (p < experts % world ? 1 : 0);
}

/* begin(p): rank p's first expert (E for p == W). */
LOOM_HD int loom__moe_expert_begin(int experts, int world, int p) {
  const int extra = experts % world;
  return p * (experts / world) + (p < extra ? p : extra);
}

/* The rank that owns expert e. */
LOOM_HD int loom__moe_expert_rank(int experts, int world, int e) {
  const int base = experts / world, extra = experts % world;
  const int big = extra * (base + 1); /* experts held by the ranks with one more */
  return e < big ? e / (base + 1) : extra + (e - big) / base;
}

/* Expert e's index among its rank's experts. */
LOOM_HD int loom__moe_expert_local(int experts, int world, int e) {
  return e - loom__moe_expert_begin(experts, world, loom__moe_expert_rank(experts, world, e));
}

/* n_max = ceil(E / W): the most experts one rank owns. */
LOOM_HD int loom__moe_experts_max(int experts, int world) { return (experts + world - 1) / world; }

/* ---- description and routing checks ------------------------------------- */

/* The worst-case rows one rank receives: W * T_max * min(k, n_max), at most
 * n_max * C with a capacity C > 0. Saturates at INT64_MAX. */
LOOM_HD int64_t loom__moe_worst_recv_rows(int world, int experts, int topk, int64_t t_max, int64_t capacity) {
  const int64_t n_max = loom__moe_experts_max(experts, world);
  const int64_t per_token = topk < n_max ? topk : n_max;
  int64_t rows = INT64_MAX;
  if (t_max == 0 || per_token == 0) rows = 0;
  else if (t_max <= INT64_MAX / world / per_token) rows = (int64_t)world * t_max * per_token;
  if (capacity > 0 && n_max * capacity < rows) rows = n_max * capacity;
  return rows;
}

/* The first field of an MoE layout description that cannot be laid out:
 * 0 none, 1 world, 2 experts, 3 topk, 4 tokens per rank (T_max * k rows),
 * 5 capacity, 6 worst-case receive rows; its name in *what, value in *value. */
LOOM_HD int loom__moe_desc_check(int world, int experts, int topk, int64_t t_max, int64_t capacity,
                                 const char **what, int64_t *value) {
  int which = 0;
  int64_t v = 0;
  const char *name = "";
  if (world < 1 || world > LOOM_MOE_MAX_WORLD) which = 1, v = world, name = "world size (1..65536)";
  else if (experts < 1 || experts > LOOM_MOE_MAX_EXPERTS) which = 2, v = experts, name = "experts (1..65536)";
  else if (topk < 1 || topk > LOOM_MOE_MAX_TOPK || topk > experts)
    which = 3, v = topk, name = "top-k (1..min(8, experts))";
  else if (t_max < 0 || t_max > LOOM_MOE_MAX_ROWS / topk)
    which = 4, v = t_max, name = "tokens per rank (tokens x top-k <= 2^31 - 1)";
  else if (capacity < 0 || capacity > LOOM_MOE_MAX_ROWS) which = 5, v = capacity, name = "capacity (0..2^31 - 1)";
  else if (loom__moe_worst_recv_rows(world, experts, topk, t_max, capacity) > LOOM_MOE_MAX_ROWS)
    which = 6, v = loom__moe_worst_recv_rows(world, experts, topk, t_max, capacity),
    name = "worst-case rows one rank receives (<= 2^31 - 1)";
  if (what) *what = name;
  if (value) *value = v;
  return which;
}

/* A routing's first bad entry: 0 fine, 1 an id outside [0, E), 2 an id
 * repeated within its token's top-k; its index t*k + j in *bad. */
LOOM_HD int loom__moe_check_routing(const int32_t *ids, int64_t tokens, int topk, int experts, int64_t *bad) {
  for (int64_t t = 0; t < tokens; ++t)
    for (int j = 0; j < topk; ++j) {
      const int32_t e = ids[t * topk + j];
      int code = e < 0 || e >= experts ? 1 : 0;
      for (int i = 0; i < j && !code; ++i) code = ids[t * topk + i] == e ? 2 : 0;
      if (code) {
        if (bad) *bad = t * topk + j;
        return code;
      }
    }
  if (bad) *bad = -1;
  return 0;
}

/* ---- counts and capacity ------------------------------------------------- */

/* counts[e] (E entries, overwritten) = rows of one source for expert e. The
 * routing passed loom__moe_check_routing and tokens * k <= LOOM_MOE_MAX_ROWS. */
LOOM_HD void loom__moe_count_rows(const int32_t *ids, int64_t tokens, int topk, int experts, int32_t *counts) {
  for (int e = 0; e < experts; ++e) counts[e] = 0;
  for (int64_t i = 0; i < tokens * topk; ++i) ++counts[ids[i]];
}

/* kept[s][e] of the counts matrix (both W x E, stride E) under capacity C
 * (0: dropless, kept = counts). kept may not alias counts. */
LOOM_HD void loom__moe_apply_capacity(const int32_t *counts, int world, int experts, int64_t capacity,
                                      int32_t *kept) {
  for (int e = 0; e < experts; ++e) {
    int64_t before = 0; /* rows of expert e from sources s' < s */
    for (int s = 0; s < world; ++s) {
      const int64_t c = counts[(int64_t)s * experts + e];
      int64_t k = c;
      if (capacity > 0) {
        k = capacity - before;
        k = k < 0 ? 0 : k > c ? c : k;
      }
      kept[(int64_t)s * experts + e] = (int32_t)k;
      before += c;
    }
  }
}

/* rows(e) = sum_s kept[s][e]. */
LOOM_HD int64_t loom__moe_expert_rows(const int32_t *kept, int world, int experts, int e) {
  int64_t n = 0;
  for (int s = 0; s < world; ++s) n += kept[(int64_t)s * experts + e];
  return n;
}

/* ---- receive layout (the owner's view) ----------------------------------- */

/* Rank p's receive offsets: off[l*W + s] = off_p(l, s) for l < n(p), and
 * off[n(p)*W] = total_p, the rows p receives (returned too). off holds
 * n(p)*W + 1 entries. total_p <= LOOM_MOE_MAX_ROWS when the routing fits a
 * description that passed loom__moe_desc_check. */
LOOM_HD int64_t loom__moe_recv_offsets(const int32_t *kept, int world, int experts, int p, int64_t *off) {
  const int e0 = loom__moe_expert_begin(experts, world, p), n = loom__moe_experts_on(experts, world, p);
  int64_t at = 0;
  for (int l = 0; l < n; ++l)
    for (int s = 0; s < world; ++s) {
      off[(int64_t)l * world + s] = at;
      at += kept[(int64_t)s * experts + e0 + l];
    }
  off[(int64_t)n * world] = at;
  return at;
}

/* Receive row `row` (0 <= row < total_p) of rank p: its local expert *l,
 * source *s and position *m among that source's rows for that expert.
 * off from loom__moe_recv_offsets, n = n(p). Binary search for the last
 * region starting at or before row (empty regions start where the next one
 * does, so the last one is the non-empty region holding row). */
LOOM_HD void loom__moe_recv_locate(const int64_t *off, int n, int world, int64_t row, int *l, int *s,
                                   int64_t *m) {
  const int64_t lo = loom__last_at_most(off, (int64_t)n * world, row);
  *l = (int)(lo / world);
  *s = (int)(lo % world);
  *m = row - off[lo];
}

/* ---- send side (a source's view) ----------------------------------------- */

/* Destination of step i (0 <= i < W) of source r: remote first, r last. */
LOOM_HD int loom__moe_dest_at(int world, int r, int i) { return (r + 1 + i) % world; }
/* Step of destination q in source r's order (inverse of dest_at). */
LOOM_HD int loom__moe_dest_pos(int world, int r, int q) { return (q - r - 1 + 2 * world) % world; }

/* base[e] (E entries) = off_{rank(e)}(local(e), s): where source s's rows
 * for expert e start in the owner's receive buffer. One pass over the
 * experts in order, each rank's running total restarting at its first
 * expert. */
LOOM_HD void loom__moe_source_bases(const int32_t *kept, int world, int experts, int s, int64_t *base) {
  int64_t running = 0; /* rows of the owner's earlier experts */
  for (int e = 0; e < experts; ++e) {
    const int p = loom__moe_expert_rank(experts, world, e);
    if (e == loom__moe_expert_begin(experts, world, p)) running = 0;
    int64_t before = 0;
    for (int q = 0; q < s; ++q) before += kept[(int64_t)q * experts + e];
    base[e] = running + before;
    running += loom__moe_expert_rows(kept, world, experts, e);
  }
}

/* slot[t*k + j] = the receive row of (t, j) on rank(ids[t*k + j]), or -1 if
 * the row is dropped: the m-th row of this source for expert e (token
 * order) goes to base[e] + m when m < kept_s[e]. kept_s: this source's row
 * of the kept matrix; base from loom__moe_source_bases; cursor: E int32 of
 * scratch. */
LOOM_HD void loom__moe_dispatch_slots(const int32_t *ids, int64_t tokens, int topk, int experts,
                                      const int32_t *kept_s, const int64_t *base, int32_t *cursor, int64_t *slot) {
  for (int e = 0; e < experts; ++e) cursor[e] = 0;
  for (int64_t i = 0; i < tokens * topk; ++i) {
    const int32_t e = ids[i];
    const int32_t m = cursor[e]++;
    slot[i] = m < kept_s[e] ? base[e] + m : -1;
  }
}

/* ---- combine ---------------------------------------------------------------- */

/* The origin slot a received row carries, and the combine buffer row it
 * returns to on its source: t*k + j. */
LOOM_HD int32_t loom__moe_origin(int64_t t, int j, int topk) { return (int32_t)(t * topk + j); }
LOOM_HD int64_t loom__moe_origin_token(int32_t origin, int topk) { return origin / topk; }
LOOM_HD int loom__moe_origin_k(int32_t origin, int topk) { return origin % topk; }

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_MOE_SCHEDULE_H */
