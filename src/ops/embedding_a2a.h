/*
 * embedding_a2a.h - internal state of an embedding-bag + All-to-All plan and
 * the interface between its host side (embedding_a2a.c: validation, path
 * choice, plan, calls) and its kernels (embedding_a2a.cu).
 *
 * Plan workspace slice (symmetric: same offsets and size on every rank, which
 * is why the counters, local-only, come last and are sized for the rank with
 * the most tables; uint32 words, zeroed at plan creation; epochs only grow):
 *   flags     [num_flags]     slice ready flags this rank receives (epoch)
 *   ready     [W]             ready[p] = epoch: rank p's forward call started
 *                             (its output may be written)
 *   gready    [W]             gready[p] = epoch: rank p's backward call
 *                             started (its grad_out may be read)
 *   gdone     [W]             gdone[p] = epoch: rank p finished reading this
 *                             rank's grad_out in a backward call
 *   bcount    [W]             backward tasks finished per source rank (local)
 *   misc      [4]             forward fetch counter, backward fetch counter,
 *                             blocks done (local; reset by the last block)
 *   counters  [max_p T_p x W x nsl]  forward slice completion counters (local)
 * Epochs come from the plan's device call counter (loom_dev_epoch_t at
 * plan->epoch_offset, loom_epoch_begin), so calls captured in a CUDA graph
 * get a new epoch on every replay; the counters above are reset to 0 by the
 * last task or block that uses them in a call, never by the host.
 */
#ifndef LOOM_OPS_EMBEDDING_A2A_H
#define LOOM_OPS_EMBEDDING_A2A_H

#include <stddef.h>
#include <stdint.h>

#include "loom.h"
#include "core/signal.h"
#include "ops/embedding_schedule.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Wait sites of the embedding op (core/signal.h: ids 64..79). */
#define LOOM_SITE_EMB_SLICE_READY 64 /* a slice's ready flag */

#define LOOM_EMB_MAX_LSA 72      /* peers whose output addresses travel as kernel arguments */
#define LOOM_EMB_THREADS 256     /* threads per block: 8 warps */
#define LOOM_EMB_DEFAULT_SLICE 128 /* measured: S = 8 2979 us .. 128 2639 us .. 256 2603 us (B=4096 T=64, 2x H200) */

/* How the kernels cut the work (bench/NOTES.md has the measurements):
 * a worker of `group` warps takes one task of `part` samples at a time
 * (part / group bags per warp, at most 32); `unroll` 16-byte row chunks per
 * lane are in flight (8 or 16); `loop` is the forward's row loop. */
typedef struct loom_emb_tuning {
  int group;                     /* warps per worker: 1, 2, 4 or 8 */
  int part;                      /* samples per task (P), group <= P <= 32 * group */
  int unroll;                    /* 8 or 16 (16: loops SELECT and FLAT only) */
  int variant;                   /* LOOM_EMB_V_* bits (measurement only; 0 in use) */
  int loop;                      /* LOOM_EMB_LOOP_* (forward) */
} loom_emb_tuning_t;
/* Default: FLAT, 1 warp, 4 bags per task. Measured 2x H200, B=4096 T=64
 * fp32 D=256 (run 13, 478e085, loom-bench embedding_a2a --loops): pooling
 * alone 2129 us (98% of 4.3 TB/s) and fused 2126 us, against SELECT (the
 * 61b3453 default) 2678 / 2711 us; outputs bit-identical. */
#define LOOM_EMB_TUNING_DEFAULT {1, 4, 8, 0, LOOM_EMB_LOOP_FLAT}

/* The forward's row loop: how a warp keeps a chunk's rows in flight (UR =
 * unroll 16-byte chunks per lane, U = UR / NV rows per group).
 *  SELECT  per row slot: a load only if the slot is live (index valid, inside
 *          the chunk), else zeros. ptxas (CUDA 13.0, sm_90a) turns each
 *          `live ? load : 0` into a load into a temporary and a move, and
 *          issues the U x NV loads of a group in 3-4 dependent waves.
 *  FLAT    every slot loads (a dead slot reads row 0 of its table, which
 *          exists: rows >= 1; chunk c clamped to the row), the slot's FMAs
 *          are kept only if it is live: one wave of U x NV loads per group.
 *  PIPE    FLAT with two groups: the next group's loads are issued before
 *          the current group is summed (about 2 groups in flight). UR 8.
 *  F07     the bag loop of f07cc73 = 067e3da (each bag: its offsets, then its indices,
 *          then SELECT rows; no prefetch of the next bag's indices), kernel
 *          without the register cap, as in f07cc73. UR 8.
 * All four add a bag's rows in index order with one fmaf each in fp32, so
 * their outputs are bit-identical. */
#define LOOM_EMB_LOOP_SELECT 0
#define LOOM_EMB_LOOP_FLAT 1
#define LOOM_EMB_LOOP_PIPE 2
#define LOOM_EMB_LOOP_F07 3

/* Variants that leave something out, to split the fused kernel's time
 * (loom-bench embedding_a2a --variants). V_NOCOUNT and V_NOWAIT give up the
 * guarantee that the output is complete when the call completes. */
#define LOOM_EMB_V_DYNFETCH 1    /* pooling alone: tasks from the counter, not a static stride */
#define LOOM_EMB_V_NOCOUNT 2     /* fused: no per-task fence/counter, no flags, no exit waits */
#define LOOM_EMB_V_NOWAIT 4      /* fused: no exit waits */
#define LOOM_EMB_V_NOPREFETCH 8  /* claim a task only when the previous one is done */
#define LOOM_EMB_V_NOCAP 16      /* forward without the 128-register cap (2 blocks/SM); loop SELECT, unroll 8 */

/* What the kernels record about bad input (host-mapped, first error wins). */
typedef struct loom_emb_err {
  uint32_t claimed;              /* 0 until an error; the recording thread sets 1 */
  uint32_t valid;                /* 1 once the fields are written */
  uint32_t kind;                 /* 1 index out of range, 2 bad offsets */
  int32_t table;                 /* local table */
  int64_t sample;                /* global sample of the bag */
  int64_t position;              /* index position (kind 1) or offsets position (kind 2) */
  int64_t value;                 /* the index, or offsets[position] */
  int64_t limit;                 /* rows of the table, or num_indices */
} loom_emb_err_t;

/* Everything a kernel needs (by value). */
typedef struct loom_emb_kargs {
  loom_dev_comm_t dc;
  loom_emb_sched_t s;
  int dim, pooling, weighted;
  const void *tables;
  const int64_t *indices, *offsets;
  const float *weights;
  int64_t num_indices;
  const int64_t *row_off;        /* device [T]: first row of local table t in `tables` */
  const int64_t *rows;           /* device [T]: rows of local table t */
  char *peer[LOOM_EMB_MAX_LSA];  /* forward: each rank's out, as this rank addresses it;
                                    backward: each rank's grad_out; pool: peer[0] = pooled */
  void *table_grad;              /* backward */
  float scale;                   /* backward */
  size_t flags_off, counters_off, ready_off, gready_off, gdone_off, bcount_off, fetch_off;
  size_t epoch_off;              /* the plan's loom_dev_epoch_t in this rank's workspace */
  int pool_only;                 /* 1: no communication, output [B, T*D] in peer[0] (backward:
                                    gradient rows [B, T*D] in peer[0]) */
  int group;                     /* warps per worker (loom_emb_tuning_t) */
  int variant;                   /* LOOM_EMB_V_* */
  loom_emb_err_t *err;
} loom_emb_kargs_t;

typedef struct loom_emb_state {
  loom_embedding_desc_t desc;    /* copy; array fields point at the copies below */
  int *tables_per_rank;          /* [W] */
  int64_t *rows;                 /* [T_total] */
  int *table_base;               /* [W+1] */
  loom_emb_sched_t sched;
  int path;                      /* loom_embedding_path_t chosen */
  int grid, blocks_per_sm;
  loom_emb_tuning_t tun;
  uint32_t num_flags, num_counters;
  size_t flags_off, counters_off, ready_off, gready_off, gdone_off, bcount_off, fetch_off;
  int64_t *d_row_off, *d_rows;   /* device [T] */
  loom_emb_err_t *err_host, *err_dev;
  void *send_buf, *recv_buf;     /* staged path: [B, T*D] and [sum_p Bl*T_p*D] (out_type) */
  size_t staging_bytes;
  void *gin_devcomm;             /* GIN path: ncclDevComm with the plan's signals */
} loom_emb_state_t;

/* Pure checks of a description for a comm of `size` ranks, `rank`; the
 * message names fn, the field and its value. No GPU. */
loom_result_t loom__emb_validate_desc(const char *fn, const loom_embedding_desc_t *d, int size, int rank);

/* Kernel launchers (embedding_a2a.cu). */
loom_result_t loom__emb_launch_forward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot,
                                       const loom_emb_tuning_t *t, int grid, cudaStream_t stream);
loom_result_t loom__emb_launch_backward(const loom_emb_kargs_t *a, loom_dtype_t tt, loom_dtype_t ot,
                                        int grid, cudaStream_t stream);
/* to_out 1: copies the staged receive buffer (blocks per source rank p:
 * [Bl, T_p*D]) into out [Bl, T_total*D]; to_out 0: the other way (the
 * backward's gradient, out -> recv). */
loom_result_t loom__emb_launch_reorder(void *recv, void *out, const int *tables_per_rank,
                                       const int *table_base, int world, int64_t local_batch, int dim,
                                       size_t elem, int to_out, cudaStream_t stream);
/* Resident blocks per SM of the forward kernel for these dtypes, dim and
 * tuning (unroll, loop, V_NOCAP). */
loom_result_t loom__emb_occupancy(loom_dtype_t tt, loom_dtype_t ot, int dim, const loom_emb_tuning_t *t,
                                  int *blocks_per_sm);
/* Registers per thread and local (spill) bytes of that forward kernel. */
loom_result_t loom__emb_forward_regs(loom_dtype_t tt, loom_dtype_t ot, int dim, const loom_emb_tuning_t *t, int *regs,
                                     int *local_bytes);
/* Checks a tuning for a slice of `slice` samples; the message names fn. Pure. */
loom_result_t loom__emb_check_tuning(const char *fn, const loom_emb_tuning_t *t, int slice);
/* Re-cuts an embedding plan's work (tests, benchmarks): the schedule, grid
 * and counters' targets follow. Not collective, but every rank must set the
 * same tuning before its next call (the counter targets depend on part). */
loom_result_t loom__emb_set_tuning(loom_plan_t plan, const loom_emb_tuning_t *t);
loom_result_t loom__emb_get_tuning(loom_plan_t plan, loom_emb_tuning_t *t);
/* The plan's device call counter (epochs completed on the GPU), read with a
 * synchronous copy (tests). */
loom_result_t loom__emb_device_epoch(loom_plan_t plan, uint32_t *epoch);
/* 1 if NCCL offers GIN on this comm (creates a device comm with `signals`
 * GIN signals, kept in *devcomm on success). Collective. */
loom_result_t loom__emb_gin_probe(ncclComm_t nccl, int signals, int *supported, void **devcomm);
void loom__emb_gin_release(ncclComm_t nccl, void *devcomm);

#ifdef __cplusplus
}
#endif
#endif /* LOOM_OPS_EMBEDDING_A2A_H */
