/*
 * moe.h - internal state of a mixture-of-experts dispatch / combine plan
 * (loom_plan_moe) and the interface between its host side (moe_plan.c:
 * description checks, plan, calls) and its kernels (moe_kernels.cu). Who
 * sends which rows where: moe_schedule.h (the layout's document).
 *
 * A dispatch on rank r, call epoch e (every call of the plan, dispatch or
 * combine, takes the next epoch; ranks call in the same order):
 *   1 count    per chunk of the routing's N = tokens x k entries, the rows
 *              per expert (atomics into hist[chunk][E]); bad entries (an id
 *              outside [0, E) or repeated in its token) are recorded and
 *              left out of everything after
 *   2 publish  one block: hist turned into per-chunk exclusive bases,
 *              counts[r][e] stored into every rank's counts table, then
 *              counts_ready[r] = e into every rank (release)
 *   3 layout   one block: waits for counts_ready[s] >= e of every rank s
 *              (every rank has entered this call: its previous use of its
 *              receive buffer is over), the kept matrix (capacity), this
 *              source's bases into the owners' buffers and this rank's
 *              expert offsets (the grouped GEMM's groups)
 *   4 slots    per chunk, one warp in entry order: each entry's position
 *              among this source's rows of its expert, its receive row or
 *              -1 (dropped); hist's row zeroed for the next call
 *   5 send     a warp per entry: the token row stored into its owner's
 *              receive buffer, its origin {source, t k + j} beside it; the
 *              last block tells every rank delivered[r] = e (release)
 *   6 wait     one block: delivered[s] >= e of every rank s; publishes the
 *              epoch
 * A combine (epoch e): every block stores comb_ready[r] = e into every rank
 * and waits for every rank's (the source's combine buffer is free: its last
 * combine's reduction is over), then a warp per received row stores the
 * expert output row into its source's combine buffer at its origin slot;
 * the last block tells comb_done[r] = e; the reduce kernel waits for every
 * comb_done and sums each token's kept k contributions with the router
 * weights in j order (fp32, each product rounded once), then publishes the
 * epoch.
 *
 * Plan workspace slice (uint32 signal words, zeroed at creation):
 *   counts_ready [W] | delivered [W] | comb_ready [W] | comb_done [W]
 * Symmetric buffers (loom_malloc'd by the plan, same sizes everywhere):
 *   recv [R, H] rows, origin [R] int2 {source, slot}, combine [T_max k, H],
 *   counts [W, E] int32; R = loom__moe_worst_recv_rows.
 */
#ifndef LOOM_OPS_MOE_H
#define LOOM_OPS_MOE_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "core/signal.h"
#include "ops/moe/moe_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the MoE ops (core/signal.h: fused ops 80..127; the
 * tensor-parallel ops take 80..87, the MoE ops 88..95). */
#define LOOM_SITE_MOE_COUNTS 88     /* a rank's expert counts (its dispatch started) */
#define LOOM_SITE_MOE_DELIVERED 89  /* a source's rows in this rank's receive buffer */
#define LOOM_SITE_MOE_COMB_READY 90 /* a source's combine buffer writable (its combine started) */
#define LOOM_SITE_MOE_COMB_DONE 91  /* an owner's expert outputs in this rank's combine buffer */

#define LOOM_MOE_THREADS 256
#define LOOM_MOE_CHUNKS_MAX 64 /* routing chunks counted apart (kernels 1 and 4) */

/* What the kernels record about a bad routing entry (host-mapped, first wins). */
typedef struct loom_moe_err {
  uint32_t claimed, valid;
  uint32_t kind;     /* 1 id outside [0, E), 2 id repeated within its token */
  int32_t value;     /* the id */
  int64_t entry;     /* t k + j */
} loom_moe_err_t;

/* Everything the kernels need (by value). */
typedef struct loom_moe_kargs {
  loom_dev_comm_t dc;
  size_t epoch_off;                 /* the plan's loom_dev_epoch_t */
  size_t counts_ready_off, delivered_off, comb_ready_off, comb_done_off; /* signal arrays */
  int world, experts, topk, hidden, es; /* es: bytes per element */
  int dtype;                        /* loom_dtype_t of the rows */
  int64_t capacity, tokens, chunk;  /* chunk: entries per routing chunk */
  int nchunks;
  const int32_t *ids;               /* [tokens, k] */
  const char *x;                    /* [tokens, H] */
  int32_t *hist;                    /* [nchunks, E] local */
  int32_t *const *counts;           /* [W] every rank's counts table [W, E] */
  int32_t *kept;                    /* [W, E] local */
  int64_t *base;                    /* [E] local: this source's first receive row per expert */
  int64_t *slot;                    /* [T_max k] local: each entry's receive row, -1 dropped / bad */
  int64_t *expert_off;              /* [n_local + 1] local: this rank's receive groups */
  int64_t *scan;                    /* [E + 1] local: the layout's prefix sums of rows per expert */
  char *const *recv;                /* [W] every rank's receive buffer */
  int2 *const *origin;              /* [W] every rank's origins */
  char *const *combine;             /* [W] every rank's combine buffer */
  const char *y;                    /* combine: expert outputs [total, H] (receive layout) */
  const float *weights;             /* combine: [tokens, k] */
  char *out;                        /* combine: [tokens, H] */
  uint32_t *count;                  /* local block counter (last arrival) */
  loom_moe_err_t *err;              /* host-mapped */
} loom_moe_kargs_t;

typedef struct loom_moe_state {
  loom_moe_desc_t desc;
  int rank, world, n_local, first_local;
  int64_t max_recv;                  /* R */
  int64_t tokens;                    /* of the last dispatch (combine uses its routing) */
  int dispatched;                    /* a dispatch has run (combine needs one) */
  loom_moe_kargs_t k;                /* all but the per-call fields */
  void *recv, *origin, *combine, *counts; /* this rank's symmetric buffers */
  void *dev;                         /* one cudaMalloc: hist, kept, base, slot, expert_off, peer tables, counter */
  void *h;                           /* loom_moe_mlp (desc.ffn > 0): [R, F] the experts' SwiGLU outputs */
  loom_moe_err_t *err;               /* host-mapped (cudaHostAlloc) */
  size_t symmetric_bytes, device_bytes;
  cudaEvent_t done;
} loom_moe_state_t;

/* ---- host (moe_plan.c) ---- */

/* Checks a description without a GPU (host-tested): each field by name and value. */
loom_result_t loom__moe_check_desc(const char *fn, int comm_size, const loom_moe_desc_t *d);

/* What every call of a plan checks first: an moe plan, its comm healthy,
 * no bad routing entry left to report (moe_plan.c). */
loom_result_t loom__moe_enter(loom_plan_t plan, const char *fn, loom_moe_state_t **st);

/* ---- the expert MLP (moe_mlp.c) ---- */

/* The plan's h [R, F] (desc.ffn > 0, local experts > 0), after the checks
 * that the grouped GEMMs can run here. */
loom_result_t loom__moe_mlp_buffers(const char *fn, loom_moe_state_t *st);

/* ---- kernels (moe_kernels.cu) ---- */

loom_result_t loom__moe_dispatch_launch(const loom_moe_kargs_t *k, cudaStream_t stream);
loom_result_t loom__moe_combine_launch(const loom_moe_kargs_t *k, int64_t max_recv, cudaStream_t stream);
loom_result_t loom__moe_preload_kernels(void);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_MOE_H */
