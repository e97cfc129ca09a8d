/*
 * moe.h - internal state of a mixture-of-experts dispatch / combine plan
 * (loom_plan_moe) and the interface between its host side (moe_plan.c:
 * description checks, plan, calls) and its kernels (moe_kernels.cu). Who
 * sends which rows where: moe_schedule.h (the layout's document).
 *
 * A dispatch on rank r, call epoch e (every call of the plan, dispatch or
 * combine, takes the next epoch; ranks call in the same order) is one
 * cooperative launch whose steps are phases between grid barriers:
 *   1 count    per chunk of the routing's N = tokens x k entries, the rows
 *              per expert (atomics into hist[chunk][E]); bad entries (an id
 *              outside [0, E) or repeated in its token) are recorded and
 *              left out of everything after
 *   -- barrier
 *   2 publish  block 0: hist turned into per-chunk exclusive bases,
 *              counts[r][x] stored into every rank's counts table, each
 *              word with the call's epoch beside the count (one 64-bit
 *              store: the data is its own signal, no fence)
 *   3 layout   block 0: waits for every word of its table to carry epoch
 *              e (every rank has entered this call: its previous use of its
 *              receive buffer is over), the kept matrix (capacity), this
 *              source's bases into the owners' buffers and this rank's
 *              expert offsets (the grouped GEMM's groups)
 *   -- barrier
 *   4 slots    per chunk, one warp in entry order: each entry's position
 *              among this source's rows of its expert, its receive row or
 *              -1 (dropped); hist's row zeroed for the next call
 *   -- barrier
 *   5 send     a warp per entry: the token row stored into its owner's
 *              receive buffer, its origin {source, t k + j} beside it; the
 *              last block tells every rank delivered[r] = e (release)
 *   6 wait     that block: delivered[s] >= e of every rank s; publishes the
 *              epoch
 * A combine (epoch e, one cooperative launch): every block stores
 * comb_ready[r] = e into every rank and waits for every rank's (the
 * source's combine buffer is free: its last combine's reduction is over),
 * then a warp per received row stores the expert output row into its
 * source's combine buffer at its origin slot; the last block tells
 * comb_done[r] = e; every block waits for every comb_done and sums each
 * token's kept k contributions with the router weights in j order (fp32,
 * each product rounded once); the last block done publishes the epoch.
 * The fused combine (loom_moe_mlp's, right after its dispatch): the down
 * GEMM's scatter epilogue has already stored every row into its source's
 * combine buffer, without waiting for comb_ready: the dispatch that just
 * completed here waited for delivered[s] of every source s, and s sent
 * those rows from inside its own dispatch, which its stream started only
 * after its last combine's reduction was over. The combine kernel then
 * stores comb_ready (for a peer whose combine is unfused) and neither
 * waits for it nor sends: sent = 1.
 *
 * The arrival form (loom_moe_mlp's FUSED_ALL: the dispatch in the gate/up
 * GEMM's prologue). A rank that runs it (prologue, with local experts)
 * sets the top bit of the rows in the counts words it publishes; a source
 * that sees the bit in any word of its table (arrivals) builds a send
 * order in its layout and slots phases (its kept entries by expert, the
 * experts interleaved over their owners: local index, then owner) and
 * sends in that order, a piece of 32 rows per block at a time; after each
 * piece every thread fences its stores, and warp 0 adds each expert's rows
 * to its counter (acq_rel): the piece that completes expert x's rows tells
 * its owner arrived[r][x] = e (release). The prologue rank's dispatch
 * runs on a quarter of the SMs (or the tuned count), triggers its
 * dependents at its start, stores ready = e after its layout, skips the
 * delivered wait and leaves the epoch unpublished; the gate/up GEMM,
 * launched right after it as a programmatic dependent, starts on the
 * other SMs (its blocks take tiles from a counter: those that start when
 * the dispatch's blocks leave take what is left), waits for ready before
 * it reads the offsets and kept, each tile
 * for arrived[s][x] of the sources of its rows (loom_grouped_arrival_t),
 * waits for the dispatch's grid before it exits and publishes e. Every
 * source still tells delivered (a rank of another form waits for it). The
 * fused combine's argument above holds unchanged: every source's counts
 * word of epoch e, seen in the layout, was stored from inside its
 * dispatch e.
 *
 * Plan workspace slice (uint32 signal words, zeroed at creation):
 *   delivered [W] | comb_ready [W] | comb_done [W] | arrived [W, E]
 * Symmetric buffers (loom_malloc'd by the plan, same sizes everywhere):
 *   recv [R, H] rows, origin [R] int2 {source, slot}, combine [T_max k, H],
 *   counts [W, E] uint64 {epoch, rows}; R = loom__moe_worst_recv_rows.
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
#define LOOM_SITE_MOE_COUNTS 88     /* a rank's expert counts (its dispatch started): peer = source, signal = expert */
#define LOOM_SITE_MOE_DELIVERED 89  /* a source's rows in this rank's receive buffer */
#define LOOM_SITE_MOE_COMB_READY 90 /* a source's combine buffer writable (its combine started) */
#define LOOM_SITE_MOE_COMB_DONE 91  /* an owner's expert outputs in this rank's combine buffer */
#define LOOM_SITE_MOE_GRID 92       /* the blocks of this rank's own dispatch (a grid barrier) */
#define LOOM_SITE_MOE_LAYOUT 93     /* the arrival form's GEMM: this rank's dispatch's layout */
#define LOOM_SITE_MOE_ARRIVED 94    /* the arrival form's GEMM: a source's rows of an expert (signal = expert) */

#define LOOM_MOE_THREADS 256
#define LOOM_MOE_CHUNKS_MAX 64 /* routing chunks counted apart (steps 1 and 4) */

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
  size_t delivered_off, comb_ready_off, comb_done_off; /* signal arrays */
  int world, experts, topk, hidden, es; /* es: bytes per element */
  int dtype;                        /* loom_dtype_t of the rows */
  int64_t capacity, tokens, chunk;  /* chunk: entries per routing chunk */
  int nchunks;
  const int32_t *ids;               /* [tokens, k] */
  const char *x;                    /* [tokens, H] */
  int32_t *hist;                    /* [nchunks, E] local */
  unsigned long long *const *counts; /* [W] every rank's counts table [W, E]: {epoch << 32 | rows} */
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
  int sent;                         /* combine: the rows are already in the sources' buffers (fused) */
  /* the arrival form (loom_moe_mlp's FUSED_ALL: the gate/up GEMM's tiles
   * wait per (source, expert) while the dispatch sends) */
  int prologue;                     /* dispatch: this rank's GEMM waits so: ask every source for arrival
                                       signals (the counts' top bit), store ready, leave the epoch to the GEMM */
  size_t arrived_off;               /* signal array [W, E]: arrived[s][x] = e once source s's rows of x are all here */
  uint32_t *ready;                  /* local word: e once this call's layout (expert_off, kept) is written */
  uint32_t *arrivals;               /* local word: 1 when some rank asked for arrival signals this call */
  uint32_t *gemm_next;              /* local word: the arrival-form GEMM's tile counter (loom_grouped_arrival_t) */
  int32_t *order;                   /* [T_max k] local: this source's kept entries in send order */
  int64_t *sbase;                   /* [E] local: each expert's first position in order */
  int64_t *sscan;                   /* [W ceil(E / W) + 1] local: the send order's prefix sums */
  int32_t *sent_rows;               /* [E] local: rows of each expert sent so far this call */
  char *out;                        /* combine: [tokens, H] */
  uint32_t *count;                  /* local block counter (last arrival) */
  uint32_t *bar;                    /* local [2]: the dispatch's grid barrier (arrivals, generation) */
  loom_moe_err_t *err;              /* host-mapped */
  unsigned long long *stamps;       /* the plan's trace's [2][LOOM_TRACE_STAMPS] (core/trace.h) at LOOM_DEBUG=TRACE,
                                       else NULL: %globaltimer at each phase of the last dispatch (row 0) and combine
                                       (row 1) */
} loom_moe_kargs_t;

/* What a cooperative launch of the MoE kernels may use on the plan's GPU. */
typedef struct loom_moe_grid {
  int sms;                        /* multiprocessors: the comm's (in a world, its rank's share) */
  int dispatch_blocks, comb_blocks; /* blocks of each kernel the GPU holds at once */
  int comb_per_sm;                /* the combine's most blocks per SM of `sms`: 0, its own (2 send, 4 reduce);
                                     1 in a world (its blocks wait for peers: docs/world.md, "Residency") */
} loom_moe_grid_t;

typedef struct loom_moe_state {
  loom_moe_desc_t desc;
  int rank, world, n_local, first_local;
  int64_t max_recv;                  /* R */
  int64_t tokens;                    /* of the last dispatch (combine uses its routing) */
  int dispatched;                    /* a dispatch has run (combine needs one) */
  loom_moe_kargs_t k;                /* all but the per-call fields */
  loom_moe_grid_t grid;              /* the launches' bounds */
  void *recv, *origin, *combine, *counts; /* this rank's symmetric buffers */
  void *dev;                         /* one cudaMalloc: hist, kept, base, slot, expert_off, peer tables, counter */
  void *h;                           /* loom_moe_mlp (desc.ffn > 0): [R, F] the experts' SwiGLU outputs */
  loom_moe_err_t *err;               /* host-mapped (cudaHostAlloc) */
  size_t symmetric_bytes, device_bytes;
} loom_moe_state_t;

/* ---- host (moe_plan.c) ---- */

/* Checks a description without a GPU (host-tested): each field by name and value. */
loom_result_t loom__moe_check_desc(const char *fn, int comm_size, const loom_moe_desc_t *d);

/* What every use of a plan checks first: an moe plan, its comm healthy,
 * no bad routing entry left to report (moe_plan.c). A call's entry also
 * starts its stage trace (core/op.h: loom__call_enter); its exit is
 * loom__call_exit. */
loom_result_t loom__moe_state(loom_plan_t plan, const char *fn, loom_moe_state_t **st);
loom_result_t loom__moe_enter(loom_plan_t plan, const char *fn, cudaStream_t stream, loom_moe_state_t **st);

/* The grouped GEMM of one expert projection over the plan's receive
 * layout: C [R, n] = A [R, k] x B_l^T for each local expert l. */
loom_grouped_gemm_desc_t loom__moe_gemm_desc(const loom_moe_state_t *st, int64_t n, int64_t k, int64_t rows_hint);

/* ---- the expert MLP (moe_mlp.c) ---- */

/* A dispatch's checks and launch inside a call (between its entry and
 * exit; messages name fn); prologue 1: the arrival form (this rank's
 * gate/up GEMM, launched next with loom__gemm_grouped_sm90_arrival, waits
 * per (source, expert) and publishes the call's epoch; a rank without
 * experts ignores it); max_blocks > 0: at most that many blocks (SMs left
 * to the GEMM beside it). */
loom_result_t loom__moe_dispatch_body(loom_plan_t plan, loom_moe_state_t *st, const char *fn, const void *x,
                                      const int32_t *ids, int64_t tokens, int prologue, int max_blocks,
                                      cudaStream_t stream);

/* A combine of the plan's last dispatch inside a call (as above); sent =
 * 1: the fused combine (above), y unused. */
loom_result_t loom__moe_combine_body(loom_plan_t plan, loom_moe_state_t *st, const char *fn, const void *y,
                                     const float *weights, void *out, int sent, cudaStream_t stream);

/* How a loom_moe_mlp call runs: the form, and the tiles of its two grouped
 * GEMMs (0: the model's, loom__grouped_sm90_config): the gate/up GEMM's
 * rows per tile (its SwiGLU epilogue fixes 256 columns), the down GEMM's
 * tile. */
typedef struct loom_moe_mlp_choice {
  loom_moe_mlp_path_t path; /* FUSED, UNFUSED or FUSED_ALL (AUTO: resolved per call) */
  int up_bm;                /* 0, 64 or 128 */
  int down_bm, down_bn;     /* 0, or 64 / 128 x 128 / 256 */
  int disp;                 /* FUSED_ALL: the dispatch's blocks beside the GEMM (0: a quarter of the SMs) */
} loom_moe_mlp_choice_t;

/* The choice of a call of `tokens` tokens that nothing tuned (pure,
 * host-tested): fused-all from LOOM_MOE_ALL_TOKENS tokens on, else fused;
 * the model's tiles, a quarter of the SMs for the dispatch. Measured (2x
 * H200, docs/perf/moe.md): fused-all at least as fast as fused on every
 * shape of 512 to 4096 tokens, named and held out; at 128 tokens it lost
 * 5.5% on one (Mixtral, Zipf), where the dispatch is ~25 us to hide. */
#define LOOM_MOE_ALL_TOKENS 512
loom_moe_mlp_choice_t loom__moe_mlp_default(int64_t tokens);

/* loom_moe_mlp as `c` says (path AUTO: resolved per call, tiles and all),
 * named fn. */
loom_result_t loom__moe_mlp_run(loom_plan_t plan, const char *fn, const void *x, const int32_t *ids,
                                const float *weights, int64_t tokens, const void *gate_up, const void *down, void *out,
                                const loom_moe_mlp_choice_t *c, cudaStream_t stream);

/* The tuning of loom_moe_mlp (pure, host-tested): the bucket of a call's
 * tokens (b: the smallest with 2^b >= tokens), the cache key of a plan's
 * shape and bucket on W ranks of `sms` SMs (1 if it fit in key[size]), and
 * an entry's value "path=<1|2|3> up=<bm> down=<bm>x<bn>[ disp=<blocks>]"
 * (disp: FUSED_ALL's, 0 when absent) formatted and parsed
 * (LOOM_ERR_INVALID_ARGUMENT naming the text otherwise: a form that is not
 * one of the three, a tile the grouped GEMM does not have, blocks outside
 * 0..65536). */
int loom__moe_tokens_bucket(int64_t tokens);
/* The choice a call of `tokens` gets (loom_moe_mlp_path's, tiles and all). */
loom_result_t loom__moe_mlp_choice(loom_plan_t plan, int64_t tokens, loom_moe_mlp_choice_t *c);
int loom__moe_mlp_tune_key(const loom_moe_desc_t *d, int world, int sms, int64_t tokens, char *key, size_t size);
void loom__moe_mlp_tune_format(const loom_moe_mlp_choice_t *c, char *out, size_t size);
loom_result_t loom__moe_mlp_tune_parse(const char *text, loom_moe_mlp_choice_t *c);

/* ---- kernels (moe_kernels.cu) ---- */

/* One launch each (cooperative, within g's bounds). */
loom_result_t loom__moe_dispatch_launch(const loom_moe_kargs_t *k, const loom_moe_grid_t *g, int max_blocks,
                                        cudaStream_t stream);
loom_result_t loom__moe_combine_launch(const loom_moe_kargs_t *k, int64_t max_recv, const loom_moe_grid_t *g,
                                       cudaStream_t stream);
/* The bounds for those launches on `sms` SMs of the current GPU (the
 * comm's sm_count: in a world, the rank's share, so that every rank's
 * blocks are resident at once), and the kernels loaded, before a first
 * call waits behind a peer; comb_per_sm: the combine's most blocks per SM
 * (0: its own; a world's plans pass 1); LOOM_ERR_UNSUPPORTED without
 * cooperative launches. */
loom_result_t loom__moe_grid_limits(int sms, int comb_per_sm, loom_moe_grid_t *g);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_MOE_H */
