/*
 * moe_ref.h - CPU reference (double precision) of a mixture-of-experts MLP
 * layer under expert parallelism at W simulated ranks: dispatch, the
 * experts' grouped GEMMs with SwiGLU, combine with the router weights, and
 * the same layer computed directly per token. Layout rules: moe_schedule.h.
 *
 * Expert e computes y = (silu(x Wg_e) * (x Wu_e)) Wd_e, silu(h) = h / (1 +
 * exp(-h)); Wg_e, Wu_e [H, F] and Wd_e [F, H] row-major, stacked over the
 * experts. The layer's output for token t of rank r is
 *   out[t] = sum_{j kept} w[t][j] * expert_{ids[t][j]}(x[t])   (j ascending)
 * where, with a capacity C > 0, (t, j) is kept when fewer than C earlier
 * tokens in global order (rank-major, then token order) were routed to the
 * same expert.
 *
 * Two ways to the same numbers, both sums in the same order so they agree
 * bit for bit:
 *  - loom_ref_moe_layer_direct: per token, each kept expert evaluated on the
 *    token's row, drops decided by counting in global order (no schedule);
 *  - loom_ref_moe_dispatch -> loom_ref_moe_experts -> loom_ref_moe_combine:
 *    rows moved through the schedule's layout (counts, capacity, receive
 *    offsets, dispatch slots, origins), the experts run as grouped GEMMs
 *    over each rank's receive buffer, and the outputs combined at their
 *    sources.
 * Functions that allocate return 0, or -1 when out of memory (nothing is
 * left allocated then).
 */
#ifndef LOOM_REF_MOE_REF_H
#define LOOM_REF_MOE_REF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One layer over W simulated ranks; arrays indexed [rank] point at that
 * rank's data. */
typedef struct loom_ref_moe {
  int world, experts, topk, hidden, ffn;
  int64_t capacity;           /* rows per expert; 0 dropless */
  const int64_t *tokens;      /* [W] T_r */
  const double *const *x;     /* [W] -> [T_r, H] token rows */
  const int32_t *const *ids;  /* [W] -> [T_r, k] expert ids */
  const double *const *w;     /* [W] -> [T_r, k] router weights */
  const double *w_gate;       /* [E, H, F] */
  const double *w_up;         /* [E, H, F] */
  const double *w_down;       /* [E, F, H] */
} loom_ref_moe_t;

/* The dispatched state, every array [W] -> that rank's. */
typedef struct loom_ref_moe_recv {
  int32_t *kept;     /* [W * E] rows of source s kept for expert e */
  int64_t *total;    /* [W] rows rank p received */
  int64_t **off;     /* [W] -> [n(p) * W + 1] receive offsets (loom__moe_recv_offsets) */
  double **rows;     /* [W] -> [total_p, H] received token rows */
  int32_t **origin;  /* [W] -> [total_p] origin slot t*k + j of each received row */
  int64_t **slot;    /* [W] -> [T_r * k] receive row of (t, j) on its expert's rank, -1 dropped */
} loom_ref_moe_recv_t;

/* Expert e applied to one row x [H]: y [H]. */
int loom_ref_moe_expert(const loom_ref_moe_t *m, int e, const double *x, double *y);

/* kept[r] -> [T_r * k]: 1 where (t, j) is kept under the capacity (all 1
 * when dropless), counted directly in global token order. */
int loom_ref_moe_kept_direct(const loom_ref_moe_t *m, uint8_t *const *kept);

/* out[r] -> [T_r, H] (overwritten): the layer per token, directly. */
int loom_ref_moe_layer_direct(const loom_ref_moe_t *m, double *const *out);

/* Dispatch through the schedule's layout into a fresh *rv. */
int loom_ref_moe_dispatch(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv);
void loom_ref_moe_recv_free(const loom_ref_moe_t *m, loom_ref_moe_recv_t *rv);

/* The experts as grouped GEMMs on every rank's receive buffer: gate and up
 * GEMMs per local expert group, SwiGLU, down GEMM; y[p] -> [total_p, H]. */
int loom_ref_moe_experts(const loom_ref_moe_t *m, const loom_ref_moe_recv_t *rv, double *const *y);

/* Combine: every expert output row y[p][i] stored into its source's combine
 * buffer at its origin slot, then each source reduces its tokens' k
 * contributions with the router weights in j order, skipping dropped
 * ones; out[r] -> [T_r, H] (overwritten). */
int loom_ref_moe_combine(const loom_ref_moe_t *m, const loom_ref_moe_recv_t *rv, const double *const *y,
                         double *const *out);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_REF_MOE_REF_H */
